<?php

declare(strict_types=1);

namespace App\Support;

final class WorkflowQueryTaskBroker
{
    public function taskKey(string $namespace, string $queue, string $id): string
    {
        return "server:workflow-query-task:{$namespace}:{$queue}:{$id}";
    }
}
