<?php

declare(strict_types=1);

namespace App\Support;

final class WorkflowTaskPoller
{
    public function limits(): array
    {
        return [
            (int) config('server.polling.due_timer_recovery_scan_limit', 5),
            (int) config('server.polling.expired_workflow_task_recovery_scan_limit', 5),
        ];
    }
}
