<?php

declare(strict_types=1);

namespace App\Support;

use Illuminate\Support\Facades\Cache;

final class ServerPollingCache
{
    /* The probe reads one fixed key and never writes it. */
    public function available(): bool
    {
        return Cache::has(<<<KEY
            server:polling-cache:availability-probe
            KEY);
    }
}
