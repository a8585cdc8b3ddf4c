//! The configuration contract: every limit the server enforces, in one table.
//!
//! The seed points operators at one contract file listing every
//! request-boundary limit; here the table is code, so the limits the
//! server reads, the keys its config file accepts, `dwserver contract` and
//! the generated docs/contract.md cannot drift apart. Each entry names its
//! environment variable and config-file key (`None` for the fixed
//! controller validators), its default and the value a configuration
//! resolves to.

use std::fmt::Write as _;

use dwpolicy::boundary::{
    RequestLimits, MAX_NAME_CHARS, MAX_REASON_CHARS, MAX_REQUEST_ID_CHARS, MAX_WORKFLOW_ID_CHARS,
};
use dwpolicy::history::{BYTES_ENV, DEFAULT_MAX_BYTES};
use dwpolicy::limits::config::{DEFAULT_WARNING_THRESHOLD_PERCENT, WARNING_THRESHOLD_ENV};
use dwpolicy::series::{
    PROMETHEUS_ACTIVITY_SERIES, PROMETHEUS_TASK_QUEUE_SERIES, PROMETHEUS_WORKFLOW_SERIES,
    WORKFLOW_TASK_FAILURE_TYPES,
};
use dwpolicy::LimitKind;
use serde::Serialize;

use crate::external_payloads::ExternalPayloadSettings;
use crate::polling::{ActivityTaskPoller, WorkflowTaskPoller};
use crate::query_tasks::QueryTaskSettings;
use crate::registry::IdleWorkerSweep;
use crate::server::external_payloads::ExternalPayloadSweep;
use crate::server::node_config::{config_key_variable, ServerConfig};
use crate::server::schedules::{
    ScheduleSweep, HISTORY_PAGE_MAX, MAX_JITTER_SECONDS, MAX_NOTE_CHARS, MAX_SCHEDULE_ID_CHARS,
};
use crate::server::services::ServiceCallRetention;
use crate::server::timeouts::TimeoutSweep;
use crate::service_boundary::ServiceBoundaryBudgets;
use crate::store::build_id_rollouts::MAX_NAMESPACE_ROLLOUTS;
use crate::store::streams::{DEFAULT_MAX_ITEMS_PER_STREAM, DEFAULT_MAX_STREAMS_PER_RUN};
use crate::store::DEFAULT_EXTERNAL_PAYLOAD_ORPHAN_GRACE;
use crate::store::{
    DELETED_SCHEDULE_AUDIT_RETENTION_MS, RECENT_ACTIONS, SCHEDULE_AUDIT_ENTRIES,
    SERVICE_CALL_RETENTION_MS,
};

/// Which family a limit belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Checked at the HTTP edge (`server.limits.*` and the controller validators).
    RequestBoundary,
    /// Per-run structural limits (`workflows.v2.structural_limits.*`).
    Structural,
    /// Rows one SQL recovery or due scan reads per pass.
    ScanLimit,
    /// Metric label sets (series caps, hard-clamped).
    SeriesLimit,
    /// The query-task broker (`server.query_tasks.*`): wait, retention,
    /// lease and the pending cap per task queue.
    QueryTasks,
    /// The runtime external payload transport and its namespace quota.
    ExternalPayload,
    /// Service-call budgets (`server.service_boundary.*`).
    ServiceBoundary,
    /// The namespace durable-state quota's server-wide defaults
    /// (`server.namespace_durable_state.limits.*`).
    DurableState,
    /// Per-run and per-stream bounds of workflow output streams
    /// (`server.streams.*`).
    WorkflowStreams,
    /// The operator console at `/ui` (`server.ui.*`): on or off, and its caps.
    Console,
    /// Webhook intake (`DW_WEBHOOKS`, `server.webhooks.*`).
    Webhooks,
    /// What one node serves at once: waiting calls (`server.waits.*`),
    /// connections and their timeouts (`server.http.*`), and how far back
    /// the schedule sweep catches up (`server.schedules.catchup_window_seconds`).
    Serving,
}

impl Group {
    /// The snake_case name (as in the JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            Group::RequestBoundary => "request_boundary",
            Group::Structural => "structural",
            Group::ScanLimit => "scan_limit",
            Group::SeriesLimit => "series_limit",
            Group::QueryTasks => "query_tasks",
            Group::ExternalPayload => "external_payload",
            Group::ServiceBoundary => "service_boundary",
            Group::DurableState => "durable_state",
            Group::WorkflowStreams => "workflow_streams",
            Group::Console => "console",
            Group::Webhooks => "webhooks",
            Group::Serving => "serving",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Group::RequestBoundary => "Request-boundary limits",
            Group::Structural => "Structural limits",
            Group::ScanLimit => "Scan limits",
            Group::SeriesLimit => "Series limits",
            Group::QueryTasks => "Query tasks",
            Group::ExternalPayload => "External payload transport",
            Group::ServiceBoundary => "Service-call budgets",
            Group::DurableState => "Namespace durable-state quota",
            Group::WorkflowStreams => "Workflow streams",
            Group::Console => "Operator console (/ui)",
            Group::Webhooks => "Webhook intake",
            Group::Serving => "Waits, connections and schedule catch-up",
        }
    }
}

/// One limit of the contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limit {
    /// The limit's name (its key's last segment, or the validated field).
    pub name: String,
    /// Its family.
    pub group: Group,
    /// The config-file key; `None` for a fixed controller validator.
    pub config_key: Option<String>,
    /// The overriding environment variable; `None` for a fixed validator.
    pub env: Option<String>,
    /// The value when nothing is configured.
    pub default: u64,
    /// The value the configuration resolves to.
    pub current: u64,
    /// `bytes`, `characters`, `count`, `percent`, `rows` or `seconds`.
    pub unit: &'static str,
    /// What `0` means for it (`disables`, `default`, `clamped`,
    /// `no wait`, or `-` when fixed).
    pub zero: &'static str,
    /// What it limits.
    pub limits: &'static str,
}

/// The node settings a config file may set besides the limits: (key, variable).
pub const NODE_SETTINGS: &[(&str, &str)] = &[
    ("server.id", "DW_SERVER_ID"),
    ("server.bind", "DW_BIND"),
    ("server.data_dir", "DW_DATA_DIR"),
    ("server.database_path", "DW_DATABASE_PATH"),
    ("server.database_url", "DW_DATABASE_URL"),
    // PostgreSQL session timeouts: docs/deployment.md, "When the database hangs".
    (
        "server.database.connect_timeout_ms",
        "DW_DATABASE_CONNECT_TIMEOUT_MS",
    ),
    (
        "server.database.statement_timeout_ms",
        "DW_DATABASE_STATEMENT_TIMEOUT_MS",
    ),
    (
        "server.database.lock_timeout_ms",
        "DW_DATABASE_LOCK_TIMEOUT_MS",
    ),
    (
        "server.database.idle_in_transaction_timeout_ms",
        "DW_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS",
    ),
    (
        "server.database.call_timeout_ms",
        "DW_DATABASE_CALL_TIMEOUT_MS",
    ),
    (
        "server.database.tcp_timeout_ms",
        "DW_DATABASE_TCP_TIMEOUT_MS",
    ),
    ("server.polling_cache_path", "DW_POLLING_CACHE_PATH"),
    ("server.redis_url", "DW_REDIS_URL"),
    (
        crate::external_payloads::ExternalPayloadSettings::UPLOAD_ROLES_KEY,
        crate::external_payloads::ExternalPayloadSettings::UPLOAD_ROLES_ENV,
    ),
    // The queue driver (crate::queue): docs/deployment.md, "Queue drivers".
    ("server.queue_driver", "DW_QUEUE_DRIVER"),
    ("server.sqs.endpoint", "DW_SQS_ENDPOINT"),
    ("server.sqs.queue_url", "DW_SQS_QUEUE_URL"),
    ("server.sqs.region", "DW_SQS_REGION"),
    (
        "server.sqs.timer_chunk_seconds",
        "DW_SQS_TIMER_CHUNK_SECONDS",
    ),
];

/// Every limit, with `config`'s values as `current`.
pub fn limits(config: &ServerConfig) -> Vec<Limit> {
    let mut out = Vec::new();
    let request = RequestLimits::default();
    let now = &config.request_limits;
    let mut boundary = |name: &str, env: &str, default, current, unit, limits| {
        out.push(Limit {
            name: name.to_owned(),
            group: Group::RequestBoundary,
            config_key: Some(format!("server.limits.{name}")),
            env: Some(env.to_owned()),
            default,
            current,
            unit,
            zero: "disables",
            limits,
        })
    };
    boundary(
        "max_payload_bytes",
        "DW_MAX_PAYLOAD_BYTES",
        request.max_payload_bytes,
        now.max_payload_bytes,
        "bytes",
        "the whole HTTP request body",
    );
    boundary(
        "max_memo_bytes",
        "DW_MAX_MEMO_BYTES",
        request.max_memo_bytes,
        now.max_memo_bytes,
        "bytes",
        "the serialized memo of POST /workflows and POST /schedules",
    );
    boundary(
        "max_search_attributes",
        "DW_MAX_SEARCH_ATTRIBUTES",
        request.max_search_attributes,
        now.max_search_attributes,
        "count",
        "custom search attributes registered per namespace",
    );
    boundary(
        "max_search_attribute_key_length",
        "DW_MAX_SEARCH_ATTRIBUTE_KEY_LENGTH",
        request.max_search_attribute_key_length,
        now.max_search_attribute_key_length,
        "bytes",
        "one search attribute key at start",
    );
    boundary(
        "max_search_attribute_value_bytes",
        "DW_MAX_SEARCH_ATTRIBUTE_VALUE_BYTES",
        request.max_search_attribute_value_bytes,
        now.max_search_attribute_value_bytes,
        "bytes",
        "each string value and each array element at start",
    );
    boundary(
        "max_operation_name_length",
        "DW_MAX_OPERATION_NAME_LENGTH",
        request.max_operation_name_length,
        now.max_operation_name_length,
        "bytes",
        "the signal/update/query name path segment",
    );
    let fixed = [
        (
            "workflow_id",
            MAX_WORKFLOW_ID_CHARS,
            "the workflow id of POST /workflows",
        ),
        (
            "workflow_type",
            MAX_NAME_CHARS,
            "workflow_type of POST /workflows and a schedule action",
        ),
        (
            "task_queue",
            MAX_NAME_CHARS,
            "task_queue of POST /workflows and a schedule action",
        ),
        (
            "business_key",
            MAX_NAME_CHARS,
            "business_key of POST /workflows",
        ),
        (
            "request_id",
            MAX_REQUEST_ID_CHARS,
            "the deduplication token of signal/update/cancel/terminate",
        ),
        (
            "reason",
            MAX_REASON_CHARS,
            "the reason text of cancel/terminate/archive",
        ),
    ];
    for (name, chars, limits) in fixed {
        out.push(Limit {
            name: name.to_owned(),
            group: Group::RequestBoundary,
            config_key: None,
            env: None,
            default: chars as u64,
            current: chars as u64,
            unit: "characters",
            zero: "-",
            limits,
        });
    }
    let sweep = &config.schedule_sweep;
    let schedules = [
        (
            "schedule_id",
            MAX_SCHEDULE_ID_CHARS as u64,
            MAX_SCHEDULE_ID_CHARS as u64,
            "characters",
            "a schedule's id (its fires' workflow ids append a suffix)",
        ),
        (
            "note",
            MAX_NOTE_CHARS as u64,
            MAX_NOTE_CHARS as u64,
            "characters",
            "the note of a schedule create, update, pause or resume",
        ),
        (
            "jitter_seconds",
            MAX_JITTER_SECONDS.unsigned_abs(),
            MAX_JITTER_SECONDS.unsigned_abs(),
            "seconds",
            "the delay of each scheduled fire (always before the next spec time)",
        ),
        (
            "buffered_fires",
            ScheduleSweep::MAX_BUFFERED_FIRES as u64,
            sweep.max_buffered_fires as u64,
            "count",
            "fires a buffer_all schedule holds while its run is open (buffer_one holds 1)",
        ),
        (
            "catchup_fires",
            ScheduleSweep::MAX_CATCHUP_FIRES as u64,
            sweep.max_catchup_fires as u64,
            "count",
            "fires an allow_all schedule makes for one catch-up (older missed moments are skipped)",
        ),
        (
            "backfill_fires",
            ScheduleSweep::MAX_BACKFILL_FIRES as u64,
            sweep.max_backfill_fires as u64,
            "count",
            "fires one schedule backfill starts (a larger window is refused)",
        ),
        (
            "recent_actions",
            RECENT_ACTIONS as u64,
            RECENT_ACTIONS as u64,
            "count",
            "actions a schedule keeps for describe (the oldest drops out)",
        ),
        (
            "schedule_audit_entries",
            SCHEDULE_AUDIT_ENTRIES as u64,
            SCHEDULE_AUDIT_ENTRIES as u64,
            "count",
            "entries a schedule's audit history keeps (the append deletes the oldest)",
        ),
        (
            "deleted_schedule_audit_retention",
            DELETED_SCHEDULE_AUDIT_RETENTION_MS.unsigned_abs() / 1000,
            DELETED_SCHEDULE_AUDIT_RETENTION_MS.unsigned_abs() / 1000,
            "seconds",
            "how long a deleted schedule's audit history stays readable (then the sweep prunes it)",
        ),
        (
            "service_call_retention",
            SERVICE_CALL_RETENTION_MS.unsigned_abs() / 1000,
            SERVICE_CALL_RETENTION_MS.unsigned_abs() / 1000,
            "seconds",
            "how long a service call answers its idempotent replay (then the sweep prunes it)",
        ),
        (
            "build_id_rollouts",
            MAX_NAMESPACE_ROLLOUTS,
            MAX_NAMESPACE_ROLLOUTS,
            "count",
            "build-id rollout records (drained or promoted cohorts) per namespace; past it 409 build_id_rollout_limit_exceeded",
        ),
        (
            "schedule_history_page",
            HISTORY_PAGE_MAX as u64,
            HISTORY_PAGE_MAX as u64,
            "count",
            "audit entries one history page returns (a larger limit is clamped; default 100)",
        ),
    ];
    for (name, default, current, unit, limits) in schedules {
        out.push(Limit {
            name: name.to_owned(),
            group: Group::RequestBoundary,
            config_key: None,
            env: None,
            default,
            current,
            unit,
            zero: "-",
            limits,
        });
    }
    let structural = &config.store.limits;
    for kind in LimitKind::ALL {
        out.push(Limit {
            name: kind.as_str().to_owned(),
            group: Group::Structural,
            config_key: Some(structural_key(kind.as_str())),
            env: Some(kind.env_var().to_owned()),
            default: kind.default_limit(),
            current: structural.get(kind),
            unit: match kind.measure() {
                dwpolicy::limits::kind::Measure::Size => "bytes",
                _ => "count",
            },
            zero: "disables",
            limits: structural_what(kind),
        });
    }
    out.push(Limit {
        name: "history_transaction_bytes".into(),
        group: Group::Structural,
        config_key: Some(structural_key("history_transaction_bytes")),
        env: Some(BYTES_ENV.into()),
        default: DEFAULT_MAX_BYTES,
        current: config.store.history_budget.max_bytes,
        unit: "bytes",
        zero: "disables",
        limits: "canonical history bytes of one v1 projection import",
    });
    out.push(Limit {
        name: "warning_threshold_percent".into(),
        group: Group::Structural,
        config_key: Some(structural_key("warning_threshold_percent")),
        env: Some(WARNING_THRESHOLD_ENV.into()),
        default: u64::from(DEFAULT_WARNING_THRESHOLD_PERCENT),
        current: u64::from(structural.warning_threshold()),
        unit: "percent",
        zero: "disables",
        limits: "utilization at which count limits log an approaching-limit warning",
    });
    let mut scan = |key: &str, default: usize, current: usize, limits| {
        out.push(Limit {
            name: key.rsplit('.').next().unwrap_or(key).to_owned(),
            group: Group::ScanLimit,
            config_key: Some(key.to_owned()),
            env: Some(config_key_variable(key)),
            default: default as u64,
            current: current as u64,
            unit: "rows",
            zero: "default",
            limits,
        })
    };
    scan(
        WorkflowTaskPoller::DUE_TIMER_SCAN_LIMIT_KEY,
        WorkflowTaskPoller::DEFAULT_SCAN_LIMIT,
        config.poller.due_timer_recovery_scan_limit,
        "due timers fired per workflow poll pass",
    );
    scan(
        WorkflowTaskPoller::EXPIRED_TASK_SCAN_LIMIT_KEY,
        WorkflowTaskPoller::DEFAULT_SCAN_LIMIT,
        config.poller.expired_workflow_task_recovery_scan_limit,
        "expired workflow-task leases recovered per pass",
    );
    scan(
        ActivityTaskPoller::EXPIRED_TASK_SCAN_LIMIT_KEY,
        WorkflowTaskPoller::DEFAULT_SCAN_LIMIT,
        config
            .activity_poller
            .expired_activity_task_recovery_scan_limit,
        "expired activity-task leases recovered per activity poll pass",
    );
    scan(
        IdleWorkerSweep::SCAN_LIMIT_KEY,
        IdleWorkerSweep::DEFAULT_SCAN_LIMIT,
        config.worker_sweep.idle_worker_prune_scan_limit,
        "idle worker registrations deleted per heartbeat",
    );
    scan(
        crate::registry::StickyExecution::SCAN_LIMIT_KEY,
        crate::registry::StickyExecution::DEFAULT_SCAN_LIMIT,
        config.sticky.sticky_binding_prune_scan_limit,
        "expired sticky-execution claims deleted per heartbeat",
    );
    scan(
        crate::registry::WorkerSessionSweep::SCAN_LIMIT_KEY,
        crate::registry::WorkerSessionSweep::DEFAULT_SCAN_LIMIT,
        config.session_sweep.worker_session_prune_scan_limit,
        "ended worker sessions deleted per heartbeat",
    );
    scan(
        TimeoutSweep::ACTIVITY_SCAN_LIMIT_KEY,
        TimeoutSweep::DEFAULT_SCAN_LIMIT,
        config.timeout_sweep.activity_timeout_scan_limit,
        "due activity timeouts enforced per timeout sweep",
    );
    scan(
        TimeoutSweep::RUN_SCAN_LIMIT_KEY,
        TimeoutSweep::DEFAULT_SCAN_LIMIT,
        config.timeout_sweep.run_timeout_scan_limit,
        "due run and execution timeouts enforced per timeout sweep",
    );
    scan(
        ScheduleSweep::SCAN_LIMIT_KEY,
        ScheduleSweep::DEFAULT_SCAN_LIMIT,
        config.schedule_sweep.due_schedule_scan_limit,
        "due schedules fired, and buffered schedules drained, per schedule sweep",
    );
    scan(
        ExternalPayloadSweep::SCAN_LIMIT_KEY,
        ExternalPayloadSweep::DEFAULT_SCAN_LIMIT,
        config.external_payload_sweep.orphan_sweep_scan_limit,
        "unheld external payloads past their orphan grace deleted per orphan sweep",
    );
    scan(
        ServiceCallRetention::SCAN_LIMIT_KEY,
        ServiceCallRetention::DEFAULT_SCAN_LIMIT,
        config
            .service_call_retention
            .service_call_prune_scan_limit,
        "service calls older than service_call_retention deleted per sweep pass (a call whose run is open stays)",
    );
    for (spec, current, limits) in [
        (
            PROMETHEUS_WORKFLOW_SERIES,
            config.prometheus_workflow_series_limit,
            "task_queue/workflow_type series of dw_workflow_runs_total (clamped to 1..=500)",
        ),
        (
            PROMETHEUS_ACTIVITY_SERIES,
            config.prometheus_activity_series_limit,
            "task_queue/workflow_type/activity_type series of dw_activity_executions_total (clamped to 1..=500)",
        ),
        (
            PROMETHEUS_TASK_QUEUE_SERIES,
            config.prometheus_task_queue_series_limit,
            "task_queue series of dw_task_queue_runtime_state (clamped to 1..=500)",
        ),
        (
            WORKFLOW_TASK_FAILURE_TYPES,
            config.workflow_task_failure_type_limit,
            "workflow_type series of the workflow-task failure metric (clamped to 1..=100)",
        ),
    ] {
        let default = spec.default as u64;
        out.push(Limit {
            name: spec
                .config_key
                .rsplit('.')
                .next()
                .unwrap_or(spec.config_key)
                .to_owned(),
            group: Group::SeriesLimit,
            config_key: Some(spec.config_key.to_owned()),
            env: Some(config_key_variable(spec.config_key)),
            default,
            current: current.unwrap_or(default),
            unit: "count",
            zero: "clamped",
            limits,
        });
    }
    query_task_limits(config, &mut out);
    let payloads = &config.external_payloads;
    let defaults = ExternalPayloadSettings::default();
    for (key, default, current, zero, limits) in [
        (
            ExternalPayloadSettings::THRESHOLD_KEY,
            defaults.threshold_bytes,
            payloads.threshold_bytes,
            "disables",
            "encoded payloads longer than this go through POST /api/external-payloads/v1 (0: the transport is off)",
        ),
        (
            ExternalPayloadSettings::MAX_PAYLOAD_KEY,
            defaults.max_payload_bytes,
            payloads.max_payload_bytes,
            "default",
            "one uploaded payload (larger: 413 external_payload_oversized)",
        ),
        (
            ExternalPayloadSettings::MAX_BYTES_KEY,
            defaults.max_bytes_per_namespace,
            payloads.max_bytes_per_namespace,
            "disables",
            "stored payload bytes per namespace (DW_EXTERNAL_PAYLOAD_NAMESPACE_LIMITS overrides per namespace)",
        ),
        (
            ExternalPayloadSettings::MAX_OBJECTS_KEY,
            defaults.max_objects_per_namespace,
            payloads.max_objects_per_namespace,
            "disables",
            "stored payloads per namespace (DW_EXTERNAL_PAYLOAD_NAMESPACE_LIMITS overrides per namespace)",
        ),
        (
            ExternalPayloadSweep::GRACE_KEY,
            DEFAULT_EXTERNAL_PAYLOAD_ORPHAN_GRACE.as_secs(),
            config.store.external_payload_orphan_grace.as_secs(),
            "default",
            "how long an uploaded payload nothing holds (no run, stream or schedule names it) is kept before the orphan sweep or retention deletes it",
        ),
    ] {
        out.push(Limit {
            name: key.rsplit('.').next().unwrap_or(key).to_owned(),
            group: Group::ExternalPayload,
            config_key: Some(key.to_owned()),
            env: Some(config_key_variable(key)),
            default,
            current,
            unit: if key.ends_with("objects_per_namespace") {
                "count"
            } else if key.ends_with("_seconds") {
                "seconds"
            } else {
                "bytes"
            },
            zero,
            limits,
        });
    }
    let budgets = &config.service_boundary;
    for (key, current, limits) in [
        (
            ServiceBoundaryBudgets::PER_NAMESPACE_KEY,
            budgets.per_namespace,
            "service calls one authenticated caller (a token; a bound token per namespace) makes per minute over every boundary; past it 429 service_call_rate_limited",
        ),
        (
            ServiceBoundaryBudgets::PER_BOUNDARY_KEY,
            budgets.per_boundary,
            "service calls one authenticated caller makes per minute into one endpoint/service/operation (an operation's boundary_policy.rate_limit may narrow it)",
        ),
    ] {
        out.push(Limit {
            name: key.rsplit('.').next().unwrap_or(key).to_owned(),
            group: Group::ServiceBoundary,
            config_key: Some(key.to_owned()),
            env: Some(config_key_variable(key)),
            default: 0,
            current: current.unwrap_or(0),
            unit: "count",
            zero: "disables",
            limits,
        });
    }
    {
        use crate::server::webhooks::{
            DEFAULT_REPLAY_WINDOW_SECONDS, MAX_IDEMPOTENCY_KEY_CHARS, MAX_WEBHOOKS,
            REPLAY_WINDOW_KEY,
        };
        out.push(Limit {
            name: "replay_window_seconds".into(),
            group: Group::Webhooks,
            config_key: Some(REPLAY_WINDOW_KEY.into()),
            env: Some(config_key_variable(REPLAY_WINDOW_KEY)),
            default: DEFAULT_REPLAY_WINDOW_SECONDS,
            current: config.webhooks.replay_window.as_secs(),
            unit: "seconds",
            zero: "default",
            limits: "how far a delivery's signed timestamp may be from the server's clock (401 webhook_timestamp_out_of_window past it), and how long its signature is kept as a replay key (twice this; at most 450)",
        });
        for (name, value, unit, limits) in [
            (
                "max_webhooks",
                MAX_WEBHOOKS as u64,
                "count",
                "webhooks DW_WEBHOOKS may register (more stops the start)",
            ),
            (
                "idempotency_key",
                MAX_IDEMPOTENCY_KEY_CHARS as u64,
                "characters",
                "a delivery's idempotency_key (422 malformed_payload past it)",
            ),
        ] {
            out.push(Limit {
                name: name.to_owned(),
                group: Group::Webhooks,
                config_key: None,
                env: None,
                default: value,
                current: value,
                unit,
                zero: "-",
                limits,
            });
        }
    }
    let streams = &config.store.streams;
    for (name, env, default, current, limits) in [
        (
            "max_streams_per_run",
            "DW_WORKFLOW_STREAMS_PER_RUN",
            DEFAULT_MAX_STREAMS_PER_RUN,
            streams.max_streams_per_run,
            "output streams one run may open; past it 409 workflow_stream_limit_exceeded",
        ),
        (
            "max_items_per_stream",
            "DW_WORKFLOW_STREAM_MAX_ITEMS",
            DEFAULT_MAX_ITEMS_PER_STREAM,
            streams.max_items_per_stream,
            "items one stream may hold; an append past it is refused whole with 409 workflow_stream_item_limit_exceeded",
        ),
    ] {
        out.push(Limit {
            name: name.to_owned(),
            group: Group::WorkflowStreams,
            config_key: Some(format!("server.streams.{name}")),
            env: Some(env.to_owned()),
            default,
            current,
            unit: "count",
            zero: "disables",
            limits,
        });
    }
    out.push(Limit {
        name: "catchup_window_seconds".to_owned(),
        group: Group::Serving,
        config_key: Some(ScheduleSweep::CATCHUP_WINDOW_KEY.to_owned()),
        env: Some(config_key_variable(ScheduleSweep::CATCHUP_WINDOW_KEY)),
        default: ScheduleSweep::DEFAULT_CATCHUP_WINDOW.as_secs(),
        current: config.schedule_sweep.catchup_window.as_secs(),
        unit: "seconds",
        zero: "default",
        limits: "how far back a behind schedule catches up, by its overlap policy (at most 86,400); older missed moments are skipped, not fired late",
    });
    for kind in crate::waiters::WaitKind::ALL {
        out.push(Limit {
            name: kind
                .config_key()
                .rsplit('.')
                .next()
                .unwrap_or("")
                .to_owned(),
            group: Group::Serving,
            config_key: Some(kind.config_key().to_owned()),
            env: Some(config_key_variable(kind.config_key())),
            default: crate::waiters::CallWaitCaps::DEFAULT as u64,
            current: config.call_waits.get(kind) as u64,
            unit: "count",
            zero: "no waits",
            limits: kind.what(),
        });
    }
    {
        use crate::server::connections::ConnectionLimits as C;
        let (defaults, now) = (C::default(), config.connections);
        let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        for (key, default, current, unit, zero, limits) in [
            (
                C::MAX_CONNECTIONS_KEY,
                C::DEFAULT_MAX_CONNECTIONS as u64,
                now.max_connections as u64,
                "count",
                "clamped",
                "open HTTP connections served at once (lowered at start to the open-file limit minus 200); past it 503 connection_limit and the connection is closed",
            ),
            (
                C::HEADER_READ_TIMEOUT_KEY,
                millis(defaults.header_read_timeout),
                millis(now.header_read_timeout),
                "milliseconds",
                "clamped",
                "how long a request head may take to arrive, from the connection's start or its previous answer (also the idle keep-alive timeout); past it the connection is closed",
            ),
            (
                C::BODY_READ_TIMEOUT_KEY,
                millis(defaults.body_read_timeout),
                millis(now.body_read_timeout),
                "milliseconds",
                "clamped",
                "how long a request body may take to arrive whole; past it 408 request_body_timeout and the connection is closed",
            ),
            (
                C::SHUTDOWN_DEADLINE_KEY,
                millis(defaults.shutdown_deadline),
                millis(now.shutdown_deadline),
                "milliseconds",
                "no wait",
                "how long SIGTERM or SIGINT lets in-flight requests finish after accepting stops; then the process exits 0",
            ),
        ] {
            out.push(Limit {
                name: key.rsplit('.').next().unwrap_or(key).to_owned(),
                group: Group::Serving,
                config_key: Some(key.to_owned()),
                env: Some(config_key_variable(key)),
                default,
                current,
                unit,
                zero,
                limits,
            });
        }
    }
    for resource in crate::durable_state::DurableResource::ALL {
        let key = resource.config_key();
        out.push(Limit {
            name: key.rsplit('.').next().unwrap_or(&key).to_owned(),
            group: Group::DurableState,
            env: Some(config_key_variable(&key)),
            config_key: Some(key),
            default: 0,
            current: config.durable_state_defaults.get(resource).unwrap_or(0),
            unit: "count",
            zero: "disables",
            limits: resource.what(),
        });
    }
    out.push(Limit {
        name: "max_namespaces".to_owned(),
        group: Group::DurableState,
        config_key: Some(crate::server::namespaces::MAX_NAMESPACES_KEY.to_owned()),
        env: Some(crate::server::namespaces::MAX_NAMESPACES_ENV.to_owned()),
        default: crate::server::namespaces::DEFAULT_MAX_NAMESPACES,
        current: config.max_namespaces,
        unit: "count",
        zero: "disables",
        limits: "namespaces the server registers, default included; past it POST /api/namespaces is 409 namespace_limit_exceeded",
    });
    let ui = &config.ui;
    for (key, default, current, unit, zero, limits) in [
        (
            crate::server::ui::ENABLED_KEY,
            1,
            u64::from(ui.enabled),
            "switch",
            "turns the console off",
            "whether dwserver serves its operator console at /ui (1 on, 0 off; also true/false, on/off)",
        ),
        (
            crate::server::ui::FILTER_SCAN_LIMIT_KEY,
            crate::server::ui::DEFAULT_FILTER_SCAN_LIMIT as u64,
            ui.filter_scan_limit as u64,
            "rows",
            "default",
            "rows one filtered console page walks (runs by search attribute, each exceptions table)",
        ),
        (
            crate::server::ui::CHART_SERIES_SCAN_LIMIT_KEY,
            crate::server::ui::DEFAULT_CHART_SERIES_SCAN_LIMIT as u64,
            ui.chart_series_scan_limit as u64,
            "count",
            "default",
            "dw_* series the console's chart ring keeps (120 samples each)",
        ),
    ] {
        out.push(Limit {
            name: key.rsplit('.').next().unwrap_or(key).to_owned(),
            group: Group::Console,
            config_key: Some(key.to_owned()),
            env: Some(config_key_variable(key)),
            default,
            current,
            unit,
            zero,
            limits,
        });
    }
    out
}

/// `server.query_tasks.*`, resolved as the engine resolves them (the
/// derived timeout from the node's poll wait).
fn query_task_limits(config: &ServerConfig, out: &mut Vec<Limit>) {
    let defaults = QueryTaskSettings::default();
    let mut current = config.query_tasks;
    current.polling_timeout_seconds = config.max_poll_wait.as_secs();
    let resolved_cap = |s: &QueryTaskSettings| s.max_pending_per_queue() as u64;
    let entries: [(&str, u64, u64, &'static str, &'static str, &'static str); 4] = [
        (
            QueryTaskSettings::TIMEOUT_KEY,
            defaults.timeout_seconds(),
            current.timeout_seconds(),
            "seconds",
            "no wait",
            "how long a control-plane query waits for a worker's answer; unset: min(max(polling wait + 15, 40), 55); a negative value counts as 0",
        ),
        (
            QueryTaskSettings::TTL_KEY,
            defaults.ttl_seconds,
            current.ttl_seconds,
            "seconds",
            "clamped",
            "least life of query-task, queue and leased-index keys; they live max(60, this, timeout + max(1, lease_timeout) + 60)",
        ),
        (
            QueryTaskSettings::LEASE_TIMEOUT_KEY,
            defaults.lease_timeout_seconds,
            current.lease_timeout_seconds,
            "seconds",
            "clamped",
            "how long a worker holds a claimed query task (at least 1, never past the query's deadline)",
        ),
        (
            QueryTaskSettings::MAX_PENDING_KEY,
            resolved_cap(&defaults),
            resolved_cap(&current),
            "count",
            "clamped",
            "pending query tasks per (namespace, task queue); past it a query is refused with 429 query_task_queue_full (clamped to 1..=10000)",
        ),
    ];
    for (key, default, current, unit, zero, limits) in entries {
        out.push(Limit {
            name: key.rsplit('.').next().unwrap_or(key).to_owned(),
            group: Group::QueryTasks,
            config_key: Some(key.to_owned()),
            env: Some(config_key_variable(key)),
            default,
            current,
            unit,
            zero,
            limits,
        });
    }
}

fn structural_key(name: &str) -> String {
    format!("workflows.v2.structural_limits.{name}")
}

fn structural_what(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::PendingActivityCount => "open activity executions per run",
        LimitKind::PendingChildCount => "open child workflows per run",
        LimitKind::PendingTimerCount => "pending timers per run",
        LimitKind::PendingSignalCount => "received, unprocessed signals per run",
        LimitKind::PendingUpdateCount => "accepted, unresolved updates per run",
        LimitKind::CommandBatchSize => "leaf operations of one all() fan-out",
        LimitKind::PayloadSizeBytes => "one serialized argument set",
        LimitKind::MemoSizeBytes => "the merged memo of upsertMemo()",
        LimitKind::SearchAttributeSizeBytes => "the merged search attributes of an upsert",
        LimitKind::HistoryTransactionSize => {
            "new history events per workflow task, and events of one v1 projection import"
        }
    }
}

/// The config-file keys that set a limit, with their variables.
pub fn limit_keys() -> Vec<(String, String)> {
    limits(&ServerConfig::for_node("contract", std::env::temp_dir()))
        .into_iter()
        .filter_map(|l| Some((l.config_key?, l.env?)))
        .collect()
}

/// The contract as JSON: `{"limits": [...]}`.
pub fn to_json(limits: &[Limit]) -> serde_json::Value {
    serde_json::json!({ "limits": limits })
}

/// The widest line [`to_table`] may print: a terminal or a CI log shows it
/// without wrapping.
pub const TABLE_WIDTH: usize = 100;

/// The contract as a plain-text table that fits [`TABLE_WIDTH`] columns:
/// the limits under their group, each with its default and current value,
/// and below it the variable and the config key that set it (the two names
/// side by side would be up to 140 columns wide).
pub fn to_table(limits: &[Limit]) -> String {
    let name_width = limits
        .iter()
        .map(|l| l.name.chars().count() + 2)
        .chain([5])
        .max()
        .unwrap_or(5);
    let default_width = limits
        .iter()
        .map(|l| l.default.to_string().len())
        .chain([7])
        .max()
        .unwrap_or(7);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<name_width$}  {:<default_width$}  current",
        "limit", "default"
    );
    let _ = writeln!(out, "    variable");
    let _ = writeln!(out, "    config key");
    let mut group = None;
    for l in limits {
        if group != Some(l.group) {
            group = Some(l.group);
            let _ = writeln!(out, "\n{}", l.group.as_str());
        }
        let name = format!("  {}", l.name);
        let _ = writeln!(
            out,
            "{name:<name_width$}  {:<default_width$}  {}",
            l.default.to_string(),
            l.current
        );
        match (&l.env, &l.config_key) {
            (None, None) => {
                let _ = writeln!(out, "    (controller validator)");
            }
            (env, key) => {
                let _ = writeln!(out, "    {}", env.as_deref().unwrap_or("-"));
                let _ = writeln!(out, "    {}", key.as_deref().unwrap_or("-"));
            }
        }
    }
    out
}

/// docs/contract.md: the defaults, generated (`dwserver contract --write`).
pub fn to_markdown(limits: &[Limit]) -> String {
    let mut out = String::from(
        "# Configuration contract\n\n\
         <!-- Generated by `dwserver contract --write docs/contract.md`; CI runs\n\
         `dwserver contract --check docs/contract.md`. Do not edit by hand. -->\n\n\
         Every limit dwserver enforces, with the environment variable and the\n\
         config-file key that set it. A config file (`--config FILE` or\n\
         `DW_CONFIG`) is TOML with these dotted keys as tables; an environment\n\
         variable overrides the file. Values are non-negative integers (the\n\
         query timeout alone may be negative, counting as 0); anything else\n\
         stops start-up with exit 2, every bad value named with its source.\n\
         `dwserver contract` prints the current values (`--format json` for\n\
         machines). \"0\" says what 0 means: `disables` the check, uses the\n\
         `default`, is `clamped` to the setting's minimum, or (the query\n\
         timeout) `no wait`; `-` marks a fixed controller validator.\n",
    );
    let mut group = None;
    for l in limits {
        if group != Some(l.group) {
            group = Some(l.group);
            let _ = write!(
                out,
                "\n## {}\n\n| limit | env | config key | default | unit | 0 | limits |\n| --- | --- | --- | --- | --- | --- | --- |\n",
                l.group.title()
            );
        }
        let code = |v: &Option<String>| v.as_ref().map_or("-".to_owned(), |v| format!("`{v}`"));
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            l.name,
            code(&l.env),
            code(&l.config_key),
            l.default,
            l.unit,
            l.zero,
            l.limits
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configurable_limit_has_a_distinct_key_and_variable() {
        let keys = limit_keys();
        let mut seen_keys = std::collections::HashSet::new();
        let mut seen_env = std::collections::HashSet::new();
        for (key, env) in &keys {
            assert!(seen_keys.insert(key.clone()), "{key}");
            assert!(seen_env.insert(env.clone()), "{env}");
        }
        assert!(keys
            .iter()
            .any(|(k, e)| k == "server.limits.max_memo_bytes" && e == "DW_MAX_MEMO_BYTES"));
        assert!(keys.iter().any(|(k, e)| k
            == "workflows.v2.structural_limits.pending_activity_count"
            && e == "DW_V2_LIMIT_PENDING_ACTIVITIES"));
    }

    #[test]
    fn defaults_are_current_for_a_default_config() {
        let config = ServerConfig::for_node("n", std::env::temp_dir());
        for l in limits(&config) {
            assert_eq!(l.default, l.current, "{}", l.name);
        }
    }
}
