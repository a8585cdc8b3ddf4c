<?php

declare(strict_types=1);

namespace App\Http\Controllers;

final class SystemMetricsController
{
    public function drift(string $table, int $count): string
    {
        return sprintf('dw_projection_drift_total{table="%s"} %d', $table, $count);
    }
}
