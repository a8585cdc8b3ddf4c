<?php

declare(strict_types=1);

namespace App\Support;

// Wake channels for long polls; keys expire, no index is kept.
final class LongPollSignalStore
{
    public function key(string $channel): string
    {
        return 'server:long-poll-signal:'.$channel;
    }
}
