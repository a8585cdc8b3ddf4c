<?php

declare(strict_types=1);

namespace App\Support;

final class NamespaceRequestAdmission
{
    private const PREFIX = 'server:namespace-request-admission:';

    public function bucket(string $namespace, int $minute): string
    {
        return self::PREFIX.$namespace.':'.$minute;
    }
}
