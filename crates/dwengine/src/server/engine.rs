//! The server's state: the run store and every cache surface, built once.
//!
//! Handlers get an `Arc<Engine>` and call its plain blocking methods (in
//! `control` and `worker`) on the blocking pool, so all logic is testable
//! without HTTP and the async side stays a thin adapter. Writes go to the
//! store's group-commit writer as whole transitions (one closure = one
//! atomic unit); reads go to its read pool.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::admission::{NamespaceRequestAdmission, TaskQueueAdmission};
use crate::cache::{Cache, MemoryCache, RedisCache};
use crate::cluster::{
    NodeIdError, NodeIdentity, NodeToken, StoreLock, StoreLockError, SweepLeases,
};
use crate::diagnostics::WorkerPollDiagnostics;
use crate::durable_state::NamespaceDurableStateQuota;
use crate::external_payloads::RuntimeExternalPayloadQuota;
use crate::metrics::activities::ActivityExecutionMetrics;
use crate::metrics::task_queues::TaskQueueRuntimeMetrics;
use crate::metrics::WorkflowRunMetrics;
use crate::poll_requests::{
    ActivityTaskPollRequestStore, PollRequests, QueryTaskPollRequestStore, UnknownWorkerPollBudget,
    WorkflowTaskPollRequestStore,
};
use crate::polling::{LongPollSignalStore, PollWakes, WorkerPollClaimGate};
use crate::projections::DriftCache;
use crate::query_tasks::WorkflowQueryTaskBroker;
use crate::queue::{QueueDriver, QueueError};
use crate::readiness::ReadinessProbe;
use crate::registry::WorkerCompatibilityHeartbeatRecorder;
use crate::retention::{HistoryRetentionEnforcer, WorkflowStreamRetention};
use crate::server::error::STORAGE_FULL_RETRY_AFTER_SECONDS;
use crate::server::{ApiError, ServerConfig};
use crate::service_boundary::SharedServiceBoundaryPolicy;
use crate::store::{Error as StoreError, SharedStore, Store, TaskKind};
use crate::wait_slots::WaitSlotPool;
use crate::waiters::Waiters;
use crate::workflow_task_failures::WorkflowTaskFailureMetrics;

/// The node's state.
pub struct Engine {
    pub(crate) config: ServerConfig,
    store: SharedStore,
    pub(crate) cache: Arc<dyn Cache>,
    pub(crate) signals: LongPollSignalStore,
    /// The long polls this node holds, woken in process and, when other
    /// nodes serve the store, through the cache's pub/sub relay.
    pub(crate) poll_wakes: Arc<PollWakes>,
    /// How dispatched work and due timers travel (`DW_QUEUE_DRIVER`).
    pub(crate) queue: Arc<dyn QueueDriver>,
    pub(crate) workflow_polls: PollRequests,
    pub(crate) activity_polls: PollRequests,
    pub(crate) query_polls: QueryTaskPollRequestStore,
    pub(crate) queues: TaskQueueAdmission,
    pub(crate) namespaces: NamespaceRequestAdmission,
    pub(crate) diagnostics: WorkerPollDiagnostics,
    pub(crate) retention: HistoryRetentionEnforcer,
    pub(crate) stream_retention: WorkflowStreamRetention,
    pub(crate) stream_waits: crate::server::streams::StreamWaits,
    pub(crate) readiness: ReadinessProbe,
    pub(crate) workflow_waits: WaitSlotPool,
    pub(crate) activity_waits: WaitSlotPool,
    pub(crate) query_waits: WaitSlotPool,
    pub(crate) query_tasks: WorkflowQueryTaskBroker,
    pub(crate) compatibility: WorkerCompatibilityHeartbeatRecorder,
    pub(crate) claim_gate: WorkerPollClaimGate,
    pub(crate) workflow_runs: WorkflowRunMetrics,
    pub(crate) activity_executions: ActivityExecutionMetrics,
    pub(crate) task_queue_runtime: TaskQueueRuntimeMetrics,
    pub(crate) task_failures: WorkflowTaskFailureMetrics,
    pub(crate) drift: DriftCache,
    pub(crate) durable_state: NamespaceDurableStateQuota,
    pub(crate) external_payloads: RuntimeExternalPayloadQuota,
    pub(crate) unknown_polls: UnknownWorkerPollBudget,
    pub(crate) service_boundary: SharedServiceBoundaryPolicy,
    /// Namespaces already found registered (grows only by registration).
    pub(crate) known_namespaces: RwLock<HashSet<String>>,
    /// Waiting queries, updates and service calls: caps and wake-ups.
    pub(crate) waiters: Arc<Waiters>,
    /// Post-commit steps (wake-ups, cache housekeeping) that failed after
    /// their transaction committed (`dw_post_commit_failures_total`).
    pub(crate) post_commit_failures: AtomicU64,
    /// Claim transactions of workflow and activity polls run by this
    /// node: those that leased a task, and those that found none.
    pub(crate) claims_leased: AtomicU64,
    pub(crate) claims_empty: AtomicU64,
    /// Malformed rows left out of the v1 projections this node imported
    /// (`dw_v1_projection_malformed_rows_total`).
    pub(crate) v1_malformed_rows: AtomicU64,
    /// When a write last failed because the store's disk is full (unix ms;
    /// 0: never): readiness answers 503 for a while after it.
    storage_full_at: std::sync::atomic::AtomicI64,
    /// When that was last logged at WARN (unix ms).
    storage_full_warned_at: std::sync::atomic::AtomicI64,
    /// This node's id, registered on the cache and renewed by a heartbeat.
    pub(crate) node_id: NodeIdentity,
    /// This node's leases on the periodic sweeps.
    pub(crate) sweep_leases: SweepLeases,
    /// This process's lock on the SQLite file (none in memory). The last
    /// field, so it is released only after the store has closed.
    _store_lock: Option<StoreLock>,
}

/// A configured series limit as the signed value dwpolicy clamps.
fn configured(limit: Option<u64>) -> Option<i64> {
    limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened.
    #[error("store: {0}")]
    Store(#[from] crate::store::Error),
    /// The PostgreSQL database of `DW_DATABASE_URL` could not be opened.
    #[error("the PostgreSQL database of DW_DATABASE_URL ({url}) cannot be opened: {source}")]
    Database {
        /// The URL with its password left out.
        url: String,
        /// What the store said.
        source: crate::store::Error,
    },
    /// The cache backend is unreachable.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// The SQLite file's directory cannot be created.
    #[error("data directory {}: {source}", path.display())]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The wait-slot directory is unusable.
    #[error(transparent)]
    WaitSlots(#[from] crate::wait_slots::WaitSlotError),
    /// Another process serves the SQLite file, or its lock file is unusable.
    #[error(transparent)]
    StoreLock(#[from] StoreLockError),
    /// Another live node holds this node's id on the shared cache.
    #[error(transparent)]
    NodeId(#[from] NodeIdError),
    /// The queue driver cannot start (its error names the setting).
    #[error("queue driver: {0}")]
    Queue(#[from] QueueError),
}

/// The nodes among which this node's sweeps are elected: those serving
/// the same store. `DW_SWEEP_SCOPE` when set; else a SQLite file on its
/// host (one process per file, so a SQLite node elects only itself), or
/// this process alone for an in-memory store.
fn sweep_scope(config: &ServerConfig, token: &NodeToken, lock: Option<&StoreLock>) -> String {
    // Every store is private to its node until a shared database backend
    // lands: a SQLite file (locked) or memory.
    let private_store =
        config.database_url.is_none() && (lock.is_some() || config.database.is_none());
    if let Some(scope) = &config.sweep_scope {
        if private_store && config.redis_url.is_some() {
            tracing::warn!(
                scope = %scope,
                "DW_SWEEP_SCOPE is set on a node whose store is its own: the nodes sharing this scope run each sweep on one of them, so only that node's store is swept; set it only on nodes that serve one shared database"
            );
        }
        return scope.clone();
    }
    if let Some(url) = &config.database_url {
        // Every node on one PostgreSQL database shares its sweeps; the
        // URL is hashed so its password never reaches a cache key.
        return format!("postgres:{}", crate::cache::hash_dimensions(&[url]));
    }
    match lock {
        Some(lock) => format!("sqlite:{}:{}", token.host(), lock.path().display()),
        None => format!("memory:{}", token.instance()),
    }
}

/// `url` with the password of its user part replaced by `***`.
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}://{name}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl Engine {
    /// Opens the store and the configured cache backend.
    pub fn open(config: ServerConfig) -> Result<Engine, StartError> {
        let cache: Arc<dyn Cache> = match &config.redis_url {
            Some(url) => Arc::new(RedisCache::connect(url)?),
            None => Arc::new(MemoryCache::default()),
        };
        Engine::with_cache(config, cache)
    }

    /// A node on an explicit cache (tests hold the same handle to count keys).
    pub fn with_cache(
        mut config: ServerConfig,
        cache: Arc<dyn Cache>,
    ) -> Result<Engine, StartError> {
        // The query timeout derives from the node's poll wait and the
        // marker TTL from the staleness bound it advertises to workers.
        config.query_tasks.polling_timeout_seconds = config.max_poll_wait.as_secs();
        config.query_tasks.worker_stale_after_seconds =
            crate::server::worker::HEARTBEAT_INTERVAL_SECONDS * 3;
        let sqlite = config.database_url.is_none();
        if let Some(dir) = config
            .database
            .as_deref()
            .filter(|_| sqlite)
            .and_then(|path| path.parent())
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|source| StartError::DataDir {
                path: dir.to_owned(),
                source,
            })?;
        }
        // Before the store is opened (and long before the node listens): a
        // second process on the same file stops here.
        let store_lock = config
            .database
            .as_deref()
            .filter(|_| sqlite)
            .map(|db| StoreLock::acquire(db, &config.server_id))
            .transpose()?;
        // The queue driver answers before the node takes its id: a wrong
        // queue URL or an unreachable endpoint stops the start here.
        let queue = crate::queue::open(&config.queue)?;
        // Then the id, on the cache every node of the deployment shares.
        let token = NodeToken::new(&config.server_id);
        let node_id = NodeIdentity::register(cache.clone(), token.clone(), config.node_lease)?;
        let scope = sweep_scope(&config, &token, store_lock.as_ref());
        // Wake-ups cross nodes only among nodes that can serve one store:
        // a shared database, or nodes told they share one.
        let waiters = Waiters::new(config.call_waits);
        let poll_wakes = PollWakes::with_waiters(Some(waiters.clone()));
        if config.database_url.is_some() || config.sweep_scope.is_some() {
            poll_wakes.join_relay(cache.clone(), &scope, token.instance())?;
        }
        let sweep_leases = SweepLeases::new(cache.clone(), token, config.node_lease, &scope);
        let store = match &config.database_url {
            Some(url) => {
                SharedStore::open_postgres(url, config.store.clone(), config.store_readers)
                    .map_err(|source| StartError::Database {
                        url: without_password(url),
                        source,
                    })?
            }
            None => SharedStore::open(
                config.database.as_deref(),
                config.store.clone(),
                config.store_readers,
            )?,
        };
        let node = crate::cache::hash_dimensions(&[&config.server_id]);
        let pool = |name| {
            WaitSlotPool::open(
                &config.polling_cache_path,
                &config.server_id,
                name,
                config.wait_caps,
            )
        };
        Ok(Engine {
            store,
            signals: LongPollSignalStore::with_ttl(cache.clone(), config.signal_ttl),
            poll_wakes,
            queue,
            workflow_polls: WorkflowTaskPollRequestStore::store(cache.clone(), config.poll_ttls),
            activity_polls: ActivityTaskPollRequestStore::store(cache.clone(), config.poll_ttls),
            query_polls: QueryTaskPollRequestStore::new(cache.clone(), config.poll_ttls),
            queues: TaskQueueAdmission::new(cache.clone(), config.dispatches_per_minute),
            namespaces: NamespaceRequestAdmission::new(
                cache.clone(),
                config.namespace_limits.clone(),
                config.max_poll_wait.max(std::time::Duration::from_secs(30)),
            ),
            diagnostics: WorkerPollDiagnostics::new(cache.clone()),
            retention: HistoryRetentionEnforcer::new(
                cache.clone(),
                config.history_retention,
                config.retention_throttle,
            ),
            stream_waits: crate::server::streams::StreamWaits::new(config.stream_max_waits),
            stream_retention: WorkflowStreamRetention::new(
                cache.clone(),
                config.stream_retention_throttle,
            ),
            readiness: ReadinessProbe::new(cache.clone(), &node),
            workflow_waits: pool(TaskKind::Workflow.as_str())?,
            activity_waits: pool(TaskKind::Activity.as_str())?,
            query_waits: pool("query")?,
            query_tasks: WorkflowQueryTaskBroker::new(cache.clone(), config.query_tasks, &node),
            claim_gate: WorkerPollClaimGate::new(
                cache.clone(),
                &node,
                // On PostgreSQL claims keep apart in the database
                // (`FOR UPDATE SKIP LOCKED`) and run side by side: the gate
                // would only serialize them again, so it is off there.
                config.database_url.is_none()
                    && config
                        .sqlite_poll_claim_gate
                        .unwrap_or(cache.backend() == "redis"),
            ),
            compatibility: WorkerCompatibilityHeartbeatRecorder::new(
                cache.clone(),
                std::time::Duration::from_secs(config.query_tasks.worker_stale_after_seconds),
            ),
            unknown_polls: UnknownWorkerPollBudget::new(
                config.unknown_worker_poll_keys,
                config.poll_ttls.result,
            ),
            workflow_runs: WorkflowRunMetrics::new(configured(
                config.prometheus_workflow_series_limit,
            )),
            activity_executions: ActivityExecutionMetrics::new(configured(
                config.prometheus_activity_series_limit,
            )),
            task_queue_runtime: TaskQueueRuntimeMetrics::new(configured(
                config.prometheus_task_queue_series_limit,
            )),
            task_failures: WorkflowTaskFailureMetrics::new(configured(
                config.workflow_task_failure_type_limit,
            )),
            drift: DriftCache::new(config.drift_report_ttl),
            durable_state: NamespaceDurableStateQuota::new(
                cache.clone(),
                config.durable_state_limits.clone(),
            )
            .with_defaults(config.durable_state_defaults),
            external_payloads: RuntimeExternalPayloadQuota::new(
                cache.clone(),
                config.external_payloads.clone(),
            ),
            known_namespaces: RwLock::new(HashSet::new()),
            waiters,
            post_commit_failures: AtomicU64::new(0),
            claims_leased: AtomicU64::new(0),
            claims_empty: AtomicU64::new(0),
            v1_malformed_rows: AtomicU64::new(0),
            storage_full_at: std::sync::atomic::AtomicI64::new(0),
            storage_full_warned_at: std::sync::atomic::AtomicI64::new(0),
            service_boundary: SharedServiceBoundaryPolicy::new(
                cache.clone(),
                config.service_boundary,
            ),
            cache,
            config,
            node_id,
            sweep_leases,
            _store_lock: store_lock,
        })
    }

    /// A step after a committed transaction failed: the request still gets
    /// the commit's answer; the failure is logged at WARN and counted, and
    /// whoever waited on the step falls back to its poll interval.
    pub(crate) fn post_commit_failed(&self, step: &'static str, error: &dyn std::fmt::Display) {
        self.post_commit_failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            step,
            error = %error,
            "a step after a committed write failed; the request was answered with the commit's outcome"
        );
    }

    /// Post-commit steps that failed since start.
    pub fn post_commit_failures(&self) -> u64 {
        self.post_commit_failures.load(Ordering::Relaxed)
    }

    /// The claim transactions this node's polls ran since it started:
    /// `{"leased": …, "found_nothing": …}`. Each one that found nothing
    /// cost a transaction (on PostgreSQL the write lock held shared and a
    /// session) for no task.
    pub fn claims_snapshot(&self) -> serde_json::Value {
        serde_json::json!({
            "leased": self.claims_leased.load(Ordering::Relaxed),
            "found_nothing": self.claims_empty.load(Ordering::Relaxed),
        })
    }

    /// Malformed rows left out of the v1 projections imported since start.
    pub fn v1_malformed_rows(&self) -> u64 {
        self.v1_malformed_rows.load(Ordering::Relaxed)
    }

    /// The heartbeat of this node's id and sweep leases: renews them (the
    /// caller repeats it every [`SweepLeases::renew_every`]).
    pub fn cluster_heartbeat(&self) {
        if let Err(error) = self.node_id.renew() {
            tracing::warn!(%error, "cannot renew this node's id registration on the cache");
        }
        self.sweep_leases.renew();
    }

    /// Whether this node runs `sweep`'s passes now (it holds its lease).
    pub fn elected(&self, sweep: crate::cluster::Sweep) -> bool {
        self.sweep_leases.elected(sweep)
    }

    /// Gives back this node's id and sweep leases (a clean stop), so other
    /// nodes take the sweeps over at once and the id is free to reuse.
    pub fn leave_cluster(&self) {
        self.poll_wakes.leave_relay();
        self.sweep_leases.leave();
        self.node_id.leave();
    }

    /// The cluster block of the operator metrics: this node's id
    /// registration and, per sweep, who runs it.
    pub fn cluster_snapshot(&self) -> serde_json::Value {
        serde_json::json!({
            "node": self.node_id.snapshot(),
            "cache_backend": self.cache.backend(),
            "sweeps": self.sweep_leases.snapshot(),
            "wake_relay": self.poll_wakes.stats(),
        })
    }

    /// The long polls this node holds and the wake relay between nodes.
    pub fn poll_wakes(&self) -> &Arc<PollWakes> {
        &self.poll_wakes
    }

    /// The waiting-call registry (caps, wake-ups).
    pub fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// The configuration in force.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The cache handle (key counts in tests and evidence).
    pub fn cache(&self) -> &Arc<dyn Cache> {
        &self.cache
    }

    /// Runs `transition` as one atomic unit of the next group commit.
    pub(crate) fn write<R, F>(&self, transition: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, StoreError> + Send + 'static,
    {
        self.noting_storage_full(self.store.write(transition))
    }

    /// As [`Engine::write`], awaiting the commit instead of blocking the
    /// calling thread: the writer thread hands the result to this task
    /// ([`SharedStore::submit`]), so an async handler needs no blocking
    /// thread for the write.
    pub(crate) async fn write_now<R, F>(&self, transition: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, StoreError> + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.store.submit(transition, move |written| {
            let _ = answer.send(written);
        });
        // A dropped answer means the transition panicked (and was rolled
        // back), as a blocking write reports it.
        self.noting_storage_full(answered.await.unwrap_or(Err(StoreError::WriterStopped)))
    }

    /// As [`Engine::write_now`], for a workflow start that decides on
    /// nothing shared ([`crate::store::shared::SharedStore::submit_start`]).
    pub(crate) async fn write_start_now<R, F>(
        &self,
        namespace: String,
        workflow_id: String,
        start: F,
    ) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, StoreError> + Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.store
            .submit_start(namespace, workflow_id, start, move |written| {
                let _ = answer.send(written);
            });
        self.noting_storage_full(answered.await.unwrap_or(Err(StoreError::WriterStopped)))
    }

    /// Whether an async handler may write and then wake pollers on its
    /// own thread ([`Engine::write_now`]): every write goes through the
    /// one group-commit writer (SQLite: starts and claims too), and the
    /// cache lives in this process (no Redis), so the wake after the
    /// commit takes a lock, never a network round trip.
    pub(crate) fn writes_from_async(&self) -> bool {
        self.store.has_one_writer() && self.cache.backend() == "memory"
    }

    /// Runs `start` (a workflow start deciding on its own workflow id's
    /// runs only) in a start batch of `key` ([`SharedStore::start`]):
    /// beside other nodes' starts on PostgreSQL, in the next group commit
    /// on SQLite.
    pub(crate) fn write_start<R, F>(&self, key: String, start: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: Fn(&Store) -> Result<R, StoreError> + Clone + Send + 'static,
    {
        self.noting_storage_full(self.store.start(key, start))
    }

    /// `written`, after noting a full disk it failed on
    /// ([`Engine::note_storage_full`]).
    fn noting_storage_full<R>(&self, written: Result<R, StoreError>) -> Result<R, StoreError> {
        if let Err(e) = &written {
            if e.is_disk_full() {
                self.note_storage_full(e);
            }
        }
        written
    }

    /// Runs `write` (a completion that writes one existing run) in the run
    /// writer's next batch ([`SharedStore::write_run`]): beside other
    /// nodes' writes on PostgreSQL, in the next group commit on SQLite.
    pub(crate) fn write_run<R, F>(
        &self,
        order: crate::store::writer::RunWriteOrder,
        write: F,
    ) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: Fn(&Store) -> Result<R, StoreError> + Clone + Send + 'static,
    {
        self.noting_storage_full(self.store.write_run(order, write))
    }

    /// Workflow starts this node's SQLite writer committed from its
    /// batches' staging (0 on PostgreSQL), for the operator metrics.
    pub fn staged_starts(&self) -> u64 {
        self.store.staged_starts()
    }

    /// The run writer's counts for the operator metrics (`null` without
    /// one: SQLite, or PostgreSQL without `DW_STORE_RUN_WRITER=on`).
    pub fn run_writes_snapshot(&self) -> serde_json::Value {
        serde_json::json!(self.store.run_write_stats())
    }

    /// Runs `claim` (a poll taking a task) as one claim transaction
    /// ([`SharedStore::claim`]): beside other claims on PostgreSQL, in the
    /// next group commit on SQLite.
    pub(crate) fn claim<R, F>(&self, claim: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: Fn(&Store) -> Result<R, StoreError> + Clone + Send + 'static,
    {
        self.noting_storage_full(self.store.claim(claim))
    }

    /// A write failed on a full disk: readiness answers 503 until
    /// [`STORAGE_FULL_RETRY_AFTER_SECONDS`] pass without another such
    /// failure (a write that adds nothing still succeeds on a full disk, so
    /// a success does not prove there is room), and a WARN says so at most
    /// every 10 s while it lasts.
    fn note_storage_full(&self, error: &StoreError) {
        let now = crate::unix_ms();
        self.storage_full_at.store(now, Ordering::Release);
        let warned = self.storage_full_warned_at.load(Ordering::Acquire);
        if now - warned >= 10_000
            && self
                .storage_full_warned_at
                .compare_exchange(warned, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                %error,
                "the store's disk is full: writes are refused with 507 storage_full and /api/ready answers 503 until space is freed"
            );
        }
    }

    /// Whether a write failed on a full disk within the last
    /// [`STORAGE_FULL_RETRY_AFTER_SECONDS`].
    pub fn storage_full(&self) -> bool {
        let at = self.storage_full_at.load(Ordering::Acquire);
        let window = i64::try_from(STORAGE_FULL_RETRY_AFTER_SECONDS * 1000).unwrap_or(i64::MAX);
        at != 0 && crate::unix_ms() - at < window
    }

    /// Runs `mutation` in one write under `namespace`'s durable-state quota
    /// over `resources` ([`NamespaceDurableStateQuota::guard`]): a refusal
    /// undoes the mutation, is counted and comes back as the outer error;
    /// the mutation's own store error is the inner one.
    pub(crate) fn write_within_quota<R, F>(
        &self,
        namespace: &str,
        resources: &'static [crate::durable_state::DurableResource],
        mutation: F,
    ) -> Result<Result<R, StoreError>, ApiError>
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, StoreError> + Send + 'static,
    {
        let limits = self.durable_state.limits(namespace);
        let ns = namespace.to_owned();
        let outcome = self
            .write(move |s| NamespaceDurableStateQuota::guard(limits, s, &ns, resources, mutation));
        match outcome {
            Ok(Ok(done)) => Ok(Ok(done)),
            Ok(Err(refused)) => {
                self.durable_state.record(namespace, &refused);
                Err(ApiError::DurableState(refused))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// Runs `read` on one committed snapshot.
    pub(crate) fn read<R>(
        &self,
        read: impl FnOnce(&Store) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        self.store.read(read)
    }

    /// Runs `read`, which opens its own snapshot (its statements read
    /// together: one round trip on PostgreSQL), on a reader
    /// ([`SharedStore::read_own`]); it may run again on another session
    /// when the database dropped the first.
    pub(crate) fn read_own<R>(
        &self,
        read: impl FnMut(&Store) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        self.store.read_own(read)
    }

    /// As [`Engine::read`], on the calling thread and only if that cannot
    /// wait ([`SharedStore::read_now`]); `None`: read the ordinary way.
    pub(crate) fn read_now<R>(
        &self,
        read: impl FnOnce(&Store) -> Result<R, StoreError>,
    ) -> Option<R> {
        self.store.read_now(read)
    }

    /// As [`Engine::read`], on the liveness probe's own store connection.
    pub(crate) fn probe_read<R>(
        &self,
        read: impl FnOnce(&Store) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        self.store.probe_read(read)
    }

    /// How long the store's writer has been waiting on its database, once
    /// past the stall bound: writes are refused (503) meanwhile.
    pub fn store_stalled(&self) -> Option<std::time::Duration> {
        self.store.stalled()
    }

    /// The shared store (tests inspect its read pool).
    pub fn shared_store(&self) -> &SharedStore {
        &self.store
    }

    /// Keys per declared cache policy, read from the backend's per-family
    /// counters (one read per policy entry, however many keys exist).
    pub fn cache_keys_by_policy(&self) -> Result<BTreeMap<String, usize>, ApiError> {
        let policy = crate::policy::embedded().map_err(|e| ApiError::Internal(e.to_owned()))?;
        let mut counts = BTreeMap::new();
        for entry in &policy.cache_keys {
            let Some(prefix) = &entry.prefix else {
                continue;
            };
            counts.insert(
                entry.id.value.clone(),
                self.cache.count_family(&prefix.value)?,
            );
        }
        Ok(counts)
    }

    /// The SQLite worker poll claim gate (its counters measure contention).
    pub fn claim_gate(&self) -> &WorkerPollClaimGate {
        &self.claim_gate
    }

    /// Whether the polling cache answers a read: a long poll that cannot
    /// read wake signals answers at once (empty) instead of waiting blind;
    /// the worker's next poll tries again.
    pub(crate) fn polling_cache_available(&self) -> bool {
        let available = crate::polling::ServerPollingCache::available(self.cache.as_ref());
        if !available {
            tracing::warn!(
                backend = self.cache.backend(),
                "polling cache unavailable: long polls answer without waiting"
            );
        }
        available
    }

    /// Who holds this node's id while another live node took it over
    /// (readiness then answers 503).
    pub fn node_id_taken_over(&self) -> Option<String> {
        self.node_id.taken_over()
    }

    /// The readiness probe's verdict.
    pub fn ready(&self) -> Result<bool, ApiError> {
        Ok(self.readiness.check()?)
    }

    pub(crate) fn wait_pool(&self, kind: TaskKind) -> &WaitSlotPool {
        match kind {
            TaskKind::Workflow => &self.workflow_waits,
            TaskKind::Activity => &self.activity_waits,
        }
    }

    pub(crate) fn polls(&self, kind: TaskKind) -> &PollRequests {
        match kind {
            TaskKind::Workflow => &self.workflow_polls,
            TaskKind::Activity => &self.activity_polls,
        }
    }
}
