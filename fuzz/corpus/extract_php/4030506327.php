<?php

declare(strict_types=1);

namespace App\Support;

use Illuminate\Support\Facades\Cache;

/**
 * One expiring key per wake channel: server:long-poll-signal:{ns}:{queue}.
 * An old draft used server:legacy-signal: and emitted dw_legacy_signals_total.
 */
final class LongPollSignalStore
{
    private const TTL_SECONDS = 60;

    public function signal(string $namespace, string $queue): void
    {
        // Cache::put('server:legacy-signal:' . $queue, 1);
        Cache::put($this->key($namespace, $queue), now()->timestamp, self::TTL_SECONDS);
    }

    private function key(string $namespace, string $queue): string
    {
        return 'server:long-poll-signal:' . $namespace . ':' . $queue;
    }
}
