<?php

declare(strict_types=1);

use App\Support\LongPollSignalStore;
use App\Support\NamespaceRequestAdmission;
use App\Support\ServerReadiness;
use App\Support\TaskQueueAdmission;
use App\Support\{WorkflowQueryTaskBroker, WorkflowTaskPoller};
use App\Support\Metrics\PrometheusMetrics as Prometheus;

/*
 * Bounded-growth policy: every server:* cache prefix and dw_* metric must be
 * declared here before it ships. See docs/bounded-growth.md.
 */
return [
    'cache_keys' => [
        'long_poll_signals' => [
            'owner' => LongPollSignalStore::class,
            'prefix' => 'server:long-poll-signal:',
            'dimensions' => ['namespace', 'task_queue', 'channel'],
            'ttl' => 'Signal TTL window, 60 seconds by default.',
            'bound' => 'One expiring key per wake channel touched during the TTL window; no retained index.',
            'admission' => 'Written only when work is enqueued on the channel.',
            'eviction' => 'TTL expiry.',
        ],
        'workflow_query_tasks' => [
            'owner' => WorkflowQueryTaskBroker::class,
            'prefix' => 'server:workflow-query-task:',
            'dimensions' => ['namespace', 'task_queue', 'worker_id', 'query_task_id'],
            'ttl' => 'max(60, server.query_tasks.ttl_seconds, timeout + lease_timeout + 60) seconds.',
            'bound' => 'Pending query tasks are capped per (namespace, task_queue) by '
                . 'server.query_tasks.max_pending_per_queue, default 1024 and hard-clamped to 10000.',
            'admission' => "Rejected with 429 once the queue holds max_pending_per_queue tasks.",
            'eviction' => 'TTL expiry; queue reads and writes prune stale pending task IDs.',
        ],
        'task_queue_admission_locks' => [
            'owner' => TaskQueueAdmission::class,
            'prefix' => 'server:task-queue-admission:',
            'dimensions' => ['namespace', 'task_queue', 'task_kind'],
            'ttl' => '10 seconds.',
            'bound' => 'One short-lived lock key per capped (namespace, task_queue, task_kind) under concurrent poll admission.',
            'admission' => 'Taken only while admitting a poll on a capped queue.',
            'eviction' => 'Released after admission; TTL covers a crashed holder.',
        ],
        'namespace_request_admission' => [
            'owner' => NamespaceRequestAdmission::class,
            'prefix' => 'server:namespace-request-admission:',
            'dimensions' => ['namespace', 'minute'],
            'ttl' => 120,
            'bound' => 'Per configured namespace, fixed-TTL rate/rejection buckets and no more concurrent slot keys than the effective request limit.',
            'admission' => 'Only namespaces with a configured request limit | rate create keys.',
            'eviction' => 'TTL expiry of each minute bucket.',
        ],
        'readiness_probe' => [
            'owner' => ServerReadiness::class,
            'prefix' => 'server:readiness:',
            'dimensions' => [],
            'ttl' => '10 seconds, as a guard only.',
            'bound' => 'One temporary probe key per readiness check; deleted immediately.',
            'admission' => 'Written only by the readiness check.',
            'eviction' => 'Deleted after the read-back.', // the TTL covers a crash
        ],
    ],
    'scan_limits' => [
        'due_timer_recovery' => [
            'owner' => WorkflowTaskPoller::class,
            'config_key' => 'server.polling.due_timer_recovery_scan_limit',
            'default' => 5,
            'bound' => 'Service-mode due-timer recovery scans at most 5 ready timer tasks by default per worker poll pass.',
        ],
        'expired_workflow_task_recovery' => [
            'owner' => WorkflowTaskPoller::class,
            'config_key' => 'server.polling.expired_workflow_task_recovery_scan_limit',
            'default' => 5,
            'bound' => 'Expired workflow-task recovery scans at most 5 expired leases by default per recovery pass.',
        ],
    ],
    'metrics' => [
        'dw_workflow_runs_total' => [
            'owner' => Prometheus::class,
            'surface' => 'GET /api/system/prometheus-metrics',
            'dimensions' => [
                'namespace' => 'request_scope_not_label',
                'task_queue' => 'bounded_series',
                'workflow_type' => 'bounded_series',
            ],
            'cardinality' => 'task_queue/workflow_type series are limited by server.metrics.prometheus_workflow_series_limit, default 100 and hard-clamped to 500.',
            'selection' => 'Scrape-time discovery reads at most limit + 1 label sets.',
            'suppression' => 'cardinality.series_limits.workflows reports exact counts until the cap is exceeded, then lower bounds.',
        ],
        'dw_projection_drift_total' => [
            'owner' => 'app/Http/Controllers/SystemMetricsController.php',
            'surface' => 'GET /api/system/metrics',
            'dimensions' => [
                'namespace' => 'server_scope_no_label',
                'table' => 'finite_projection_tables',
            ],
            'cardinality' => 'table is fixed to the finite projection inventory.',
        ],
        'dw_perf_requests_total' => [
            'owner' => 'scripts/perf/soak.py',
            'surface' => 'Perf harness /metrics; optional remote_write',
            'dimensions' => ['status' => 'finite_http_status'],
            'cardinality' => 'The only label is status, produced from HTTP response codes, so the series set is finite.',
        ],
        'dw_perf_redis_server_keys_by_policy' => [
            'owner' => 'scripts/perf/soak.py',
            'surface' => 'Perf harness /metrics; optional remote_write',
            'dimensions' => ['policy' => 'finite_cache_policies'],
            'cardinality' => 'The only label is policy, fixed to the reviewed cache_keys inventory.',
        ],
        'dw_perf_errors_total' => [
            'owner' => 'scripts/perf/soak.py',
            'surface' => 'Perf harness /metrics; optional remote_write',
            'dimensions' => [],
            'cardinality' => 'No labels; single counter series per soak run.',
        ],
    ],
];
