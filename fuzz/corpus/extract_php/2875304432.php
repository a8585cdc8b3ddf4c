<?php

declare(strict_types=1);

namespace App\Support;

final class TaskQueueAdmission
{
    public function lockKey(string $namespace, string $queue, string $kind): string
    {
        return sprintf('server:task-queue-admission:%s:%s:%s', $namespace, $queue, $kind);
    }
}
