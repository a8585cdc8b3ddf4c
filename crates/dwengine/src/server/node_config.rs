//! What a node is configured with: [`ServerConfig`], its defaults, and how
//! a dotted config key names its environment variable.
//!
//! Plain data, below both readers of it: [`config`](super::config) fills it
//! from a config file and `DW_*` variables, and the contract
//! ([`contract`](super::contract)) lists every limit with the value a
//! configuration resolves to. Keeping the struct here is what lets the
//! contract describe a configuration without importing the reader, while
//! the reader checks its keys against the contract.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use dwpolicy::boundary::RequestLimits;

use crate::admission::NamespaceLimit;
use crate::poll_requests::{PollRequestTtls, UnknownWorkerPollBudget};
use crate::polling::{ActivityTaskPoller, WorkflowTaskPoller};
use crate::query_tasks::QueryTaskSettings;
use crate::queue::QueueSettings;
use crate::registry::IdleWorkerSweep;
use crate::server::auth::Tokens;
use crate::server::external_payloads::ExternalPayloadSweep;
use crate::server::schedules::ScheduleSweep;
use crate::server::timeouts::TimeoutSweep;
use crate::server::webhooks::Webhooks;
use crate::service_boundary::ServiceBoundaryBudgets;
use crate::store::StoreConfig;
use crate::wait_slots::WaitCaps;

/// Everything a node needs to start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// This node's unique id.
    pub server_id: String,
    /// The listen address (loopback by default).
    pub bind: SocketAddr,
    /// The SQLite file; `None` keeps the store in memory.
    pub database: Option<PathBuf>,
    /// A PostgreSQL database (`DW_DATABASE_URL`, `postgres://…`): when set,
    /// the store lives there and `database` is not used.
    pub database_url: Option<String>,
    /// Local storage for wait-slot lock files.
    pub polling_cache_path: PathBuf,
    /// A Redis URL selects the shared cache; otherwise in-process.
    pub redis_url: Option<String>,
    /// The queue driver (`DW_QUEUE_DRIVER`): the database's by default, or SQS.
    pub queue: QueueSettings,
    /// Request-boundary limits.
    pub request_limits: RequestLimits,
    /// The run store's configuration.
    pub store: StoreConfig,
    /// Poll bookkeeping TTLs.
    pub poll_ttls: PollRequestTtls,
    /// How long a leased task stays with its worker.
    pub task_lease: Duration,
    /// The longest wait a poll may ask for.
    pub max_poll_wait: Duration,
    /// Wait-slot caps per pool.
    pub wait_caps: WaitCaps,
    /// Per task queue and kind dispatch budget per minute (`None`: uncapped).
    pub dispatches_per_minute: Option<u64>,
    /// Namespaces with request caps.
    pub namespace_limits: HashMap<String, NamespaceLimit>,
    /// Durable-state quotas per namespace (`DW_NAMESPACE_DURABLE_STATE_LIMITS`).
    pub durable_state_limits: HashMap<String, crate::durable_state::DurableLimits>,
    /// Durable-state limits of every namespace where its own are silent
    /// (`server.namespace_durable_state.limits.max_<resource>`; 0 = none).
    pub durable_state_defaults: crate::durable_state::DurableLimits,
    /// The runtime external payload transport and its per-namespace quota
    /// (`server.external_payload_transport.*`, `DW_EXTERNAL_PAYLOAD_NAMESPACE_LIMITS`).
    pub external_payloads: crate::external_payloads::ExternalPayloadSettings,
    /// How long closed runs keep their history.
    pub history_retention: Duration,
    /// One retention pass per namespace per this window.
    pub retention_throttle: Duration,
    /// One stream-reclaiming heartbeat per namespace per this window.
    pub stream_retention_throttle: Duration,
    /// Stream page reads one node lets wait at once.
    pub stream_max_waits: usize,
    /// Namespaces the server registers at most, `default` included
    /// (`DW_MAX_NAMESPACES`; 0 disables the cap).
    pub max_namespaces: u64,
    /// Queries, updates and service calls one node lets wait at once, per kind.
    pub call_waits: crate::waiters::CallWaitCaps,
    /// Open connections, header and body read timeouts, shutdown deadline.
    pub connections: crate::server::connections::ConnectionLimits,
    /// TTL of duplicate-recovery suppression keys.
    pub recovery_suppression: Duration,
    /// Poll-pass scan caps.
    pub poller: WorkflowTaskPoller,
    /// The activity poll pass's expired-lease scan cap.
    pub activity_poller: ActivityTaskPoller,
    /// The heartbeat's idle-registration sweep.
    pub worker_sweep: IdleWorkerSweep,
    /// Sticky execution: the hold of a run's tasks for its caching worker
    /// and the heartbeat's sweep of expired claims.
    pub sticky: crate::registry::StickyExecution,
    /// The heartbeat's sweep of ended worker sessions.
    pub session_sweep: crate::registry::WorkerSessionSweep,
    /// The activity and run timeout sweep.
    pub timeout_sweep: TimeoutSweep,
    /// The due-schedule sweep's period and scan cap.
    pub schedule_sweep: ScheduleSweep,
    /// The external payload orphan sweep's period and scan cap (the
    /// grace is the store's `external_payload_orphan_grace`).
    pub external_payload_sweep: ExternalPayloadSweep,
    /// The per-pass cap of the service-call retention pass.
    pub service_call_retention: crate::server::services::ServiceCallRetention,
    /// Read connections of a file store at most.
    pub store_readers: usize,
    /// Polls of unregistered workers that may write poll keys per replay-TTL window.
    pub unknown_worker_poll_keys: u64,
    /// TTL of wake signals.
    pub signal_ttl: Duration,
    /// How often a waiting long poll looks at the store without a wake-up
    /// (timers coming due, expired leases; the last resort for a lost
    /// wake): 500 ms.
    pub poll_idle_recheck: Duration,
    /// `server.metrics.prometheus_workflow_series_limit` as configured
    /// (`None`: the default 100); the metric clamps it to 1..=500.
    pub prometheus_workflow_series_limit: Option<u64>,
    /// `server.metrics.prometheus_activity_series_limit` as configured
    /// (`None`: the default 100); the metric clamps it to 1..=500.
    pub prometheus_activity_series_limit: Option<u64>,
    /// `server.metrics.prometheus_task_queue_series_limit` as configured
    /// (`None`: the default 100); the metric clamps it to 1..=500.
    pub prometheus_task_queue_series_limit: Option<u64>,
    /// How long the projection drift report is reused (recomputed sooner
    /// after a prune or a rebuild); tests set zero.
    pub drift_report_ttl: Duration,
    /// `server.metrics.workflow_task_failure_type_limit` as configured
    /// (`None`: the default 20); the metric clamps it to 1..=100.
    pub workflow_task_failure_type_limit: Option<u64>,
    /// Bearer tokens by role; `None` serves without authentication.
    pub auth: Option<Tokens>,
    /// The registered webhooks (`DW_WEBHOOKS`) and their replay window.
    pub webhooks: Webhooks,
    /// Accepted `Host` header names (any port); empty accepts any host.
    pub allowed_hosts: Vec<String>,
    /// `server.query_tasks.*`: query timeout, retention, lease and pending
    /// cap (`server.polling.timeout` is taken from `max_poll_wait` at start).
    pub query_tasks: QueryTaskSettings,
    /// Whether SQLite worker poll claims pass the cache-lock gate
    /// (`DW_SQLITE_WORKER_POLL_CLAIM_GATE=on|off`); `None`: on with a shared
    /// (Redis) cache, off in process, where the store's single writer
    /// already serialises claims. Never on with `database_url` (PostgreSQL
    /// claims run side by side, kept apart by row locks).
    pub sqlite_poll_claim_gate: Option<bool>,
    /// The longest `wait_for=completed` an update may ask for.
    pub max_update_wait: Duration,
    /// `server.service_boundary.*`: service-call budgets per caller
    /// namespace and per invoked boundary (uncapped by default).
    pub service_boundary: ServiceBoundaryBudgets,
    /// The operator console at `/ui` (`server.ui.*`).
    pub ui: crate::server::ui::UiSettings,
    /// How long this node's id registration and sweep leases live without
    /// a heartbeat (`DW_NODE_LEASE_MS`); renewed every third of it.
    pub node_lease: Duration,
    /// The nodes among which each periodic sweep runs on one at a time
    /// (`DW_SWEEP_SCOPE`); `None` derives it from the store.
    pub sweep_scope: Option<String>,
}

impl ServerConfig {
    /// Defaults for a node called `server_id`, in memory, for tests and `--dev`.
    pub fn for_node(server_id: &str, polling_cache_path: PathBuf) -> Self {
        ServerConfig {
            server_id: server_id.to_owned(),
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            database: None,
            polling_cache_path,
            redis_url: None,
            queue: QueueSettings::Database,
            database_url: None,
            request_limits: RequestLimits::default(),
            store: StoreConfig::default(),
            poll_ttls: PollRequestTtls::default(),
            task_lease: Duration::from_secs(30),
            max_poll_wait: Duration::from_secs(60),
            wait_caps: WaitCaps {
                global: 64,
                per_namespace: 16,
            },
            dispatches_per_minute: None,
            namespace_limits: HashMap::new(),
            durable_state_limits: HashMap::new(),
            durable_state_defaults: crate::durable_state::DurableLimits::default(),
            external_payloads: crate::external_payloads::ExternalPayloadSettings::default(),
            history_retention: Duration::from_secs(7 * 24 * 3600),
            retention_throttle: Duration::from_secs(60),
            stream_retention_throttle: crate::retention::WorkflowStreamRetention::DEFAULT_THROTTLE,
            stream_max_waits: crate::server::streams::DEFAULT_MAX_WAITS,
            max_namespaces: crate::server::namespaces::DEFAULT_MAX_NAMESPACES,
            call_waits: crate::waiters::CallWaitCaps::default(),
            connections: crate::server::connections::ConnectionLimits::default(),
            recovery_suppression: Duration::from_secs(60),
            poller: WorkflowTaskPoller::default(),
            activity_poller: ActivityTaskPoller::default(),
            worker_sweep: IdleWorkerSweep::default(),
            sticky: crate::registry::StickyExecution::default(),
            session_sweep: crate::registry::WorkerSessionSweep::default(),
            timeout_sweep: TimeoutSweep::default(),
            schedule_sweep: ScheduleSweep::default(),
            external_payload_sweep: ExternalPayloadSweep::default(),
            service_call_retention: crate::server::services::ServiceCallRetention::default(),
            store_readers: crate::store::shared::DEFAULT_READERS,
            unknown_worker_poll_keys: UnknownWorkerPollBudget::DEFAULT_PER_WINDOW,
            signal_ttl: Duration::from_secs(60),
            poll_idle_recheck: crate::server::worker::IDLE_RECHECK,
            prometheus_workflow_series_limit: None,
            prometheus_activity_series_limit: None,
            prometheus_task_queue_series_limit: None,
            workflow_task_failure_type_limit: None,
            drift_report_ttl: crate::projections::DriftCache::DEFAULT_TTL,
            auth: None,
            webhooks: Webhooks::default(),
            allowed_hosts: Vec::new(),
            query_tasks: QueryTaskSettings::default(),
            sqlite_poll_claim_gate: None,
            max_update_wait: Duration::from_secs(60),
            service_boundary: ServiceBoundaryBudgets::default(),
            ui: crate::server::ui::UiSettings::default(),
            node_lease: crate::cluster::node::DEFAULT_NODE_LEASE,
            sweep_scope: None,
        }
    }
}

/// The variable of a dotted config key: `server.metrics.x_limit` is
/// `DW_SERVER_METRICS_X_LIMIT`, so the documented key names its variable.
pub fn config_key_variable(key: &str) -> String {
    format!("DW_{}", key.to_ascii_uppercase().replace('.', "_"))
}
