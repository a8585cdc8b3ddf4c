<?php

declare(strict_types=1);

namespace App\Support;

use Illuminate\Support\Facades\Cache;

// Resolved as an owner through composer.json's PSR-4 map; the lock key
// itself is built by the store below.
final class TaskQueueAdmission
{
    public function lock(string $namespace, string $queue, string $kind)
    {
        return Cache::lock('server:' . 'task-queue-admission:' . "{$namespace}:{$queue}:{$kind}", 5);
    }
}
