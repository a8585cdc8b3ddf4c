<?php

declare(strict_types=1);

namespace App\Support\Metrics;

final class PrometheusMetrics
{
    public function line(string $queue, string $type, int $runs): string
    {
        return sprintf('dw_workflow_runs_total{task_queue="%s",workflow_type="%s"} %d', $queue, $type, $runs);
    }
}
