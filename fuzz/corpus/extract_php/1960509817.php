<html><title>'server:html:' is template output, not code</title>
<?php

declare(strict_types=1);

namespace App\Support;

use Illuminate\Support\Facades\Cache;

// 'server:line-comment:' is a comment
# "dw_hash_comment_total" too
/* 'server:block:' and
   dw_block_comment_total */

#[Attribute]
final class LongPollSignalStore
{
    private const PREFIX = 'server:long-poll-signal:';

    /**
     * Writes server:docblock:{id} — a docblock, not code.
     */
    public function key(string $ns, string $queue): string
    {
        return "server:long-poll-signal:{$ns}:$queue";
    }

    public function lease(int $id): string
    {
        return sprintf('server:lease:%s:%d', 'x', $id);
    }

    public function joined(string $id): string
    {
        return 'server:' . 'joined:' . $id;
    }

    public function escaped(): string
    {
        return 'it\'s server:quoted:' . "tab\tserver:dq:\$literal";
    }

    public function exposition(int $n): string
    {
        return "dw_php_requests_total{status=\"ok\"} {$n}\n";
    }

    public function heredoc(string $ns): string
    {
        return <<<EOT
            server:heredoc:{$ns}:
            dw_php_heredoc_total{queue="q"} 1
            EOT;
    }

    public function nowdoc(): string
    {
        return <<<'EOT'
        server:nowdoc:$notInterpolated
        EOT;
    }

    public function owner(): string
    {
        return Cache::class . 'server:after-class-constant:';
    }
}

interface PollRequestStore {}
trait ExpiresKeys {}
enum Reason: string { case Expired = 'server:enum-case:'; }

function free_helper(): string
{
    return 'dw_php_free_total';
}
?>
<p>dw_html_after_close is not code either</p>
