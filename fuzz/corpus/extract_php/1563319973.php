<?php

declare(strict_types=1);

namespace App\Support;

final class ServerReadiness
{
    public function probeKey(string $id): string
    {
        return 'server:readiness:'.$id;
    }
}
