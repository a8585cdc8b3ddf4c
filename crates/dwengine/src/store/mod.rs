//! A durable workflow run store on SQLite that enforces structural limits.
//!
//! Runs, their append-only history, and the activities, timers, children,
//! signals, updates and failures that hang off them live in one SQLite file
//! (or in memory for tests). Every operation that could grow a run is checked
//! against dwpolicy's [`StructuralLimits`] at the points the structural-limit
//! contract names, with the run's pending counters kept on its row so that a
//! check never counts rows. The submodules split the store by who calls it:
//! workflow code ([`task`]), callers admitting signals and updates
//! ([`admission`]), workers reporting completions ([`completion`]) and
//! operators importing v1 history ([`import`]).

pub mod activity_attempts;
pub mod admission;
pub mod archive;
pub mod cohorts;
pub mod command;
pub mod completion;
pub mod console;
pub mod control;
pub mod dispatch;
pub mod durable_state;
mod error;
pub mod executor;
pub mod external_payloads;
pub mod history;
pub mod import;
pub mod local_activities;
pub mod metrics;
pub mod model;
pub mod namespaces;
mod payload_references;
pub mod projections;
pub mod readers;
mod rows;
pub mod schedules;
pub mod schema;
pub mod search_attributes;
pub mod service_catalog;
pub mod shared;
pub mod signal_waits;
pub mod streams;
pub mod task;
pub mod timeouts;
pub mod timers;
mod tx;
pub mod workflow_commands;
pub mod writer;

use std::path::Path;
use std::time::Duration;

use dwpolicy::{
    BackendCapabilities, BackendProfile, EnvConfigError, HealthSnapshot, HistoryBudget, LimitKind,
    RunRef, StructuralLimits,
};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{Map, Value};

pub use activity_attempts::{attempt_id, ActivityFence, AttemptFailure, AttemptOutcome};
pub use admission::{Admission, Rejection, SignalRequest, UpdateRequest};
pub use archive::{ArchiveMark, ArchiveOutcome, ArchivedFilter};
pub use command::{ChildWorkflow, Command, CommandOutput};
pub use completion::UpdateResolution;
pub use control::{RunDescription, StopOutcome, WorkflowTaskFailure};
pub use dispatch::{LeasedActivity, LeasedTask, TaskKind};
pub use error::Error;
pub use executor::{Next, TaskOutcome, TaskReport, APPLICATION_FAILURE};
pub use history::{HistoryPage, HistoryPageLimit};
pub use import::{ImportMode, ImportReport, MeasuredImport, V1Projection, V1Row, V1Terminal};
pub use model::{
    ActivityId, EventType, FailureRecord, HistoryEvent, PendingCounts, Run, RunId, RunOrigin,
    RunStatus, StartRun, TimerId,
};
pub use namespaces::Namespace;
pub use schedules::{
    AuditEvent, AuditRow, DueSchedule, FireGate, FireRecord, NextFire, ScheduleRow,
    DELETED_SCHEDULE_AUDIT_RETENTION_MS, RECENT_ACTIONS, SCHEDULE_AUDIT_ENTRIES,
};
pub use search_attributes::Registration;
pub use service_catalog::{
    CatalogDelete, CatalogEntry, CatalogLevel, ServiceCallRow, SERVICE_CALL_RETENTION_MS,
};
pub use shared::SharedStore;
pub use streams::{
    Appended, NewStreamItem, Reclaimed, StreamAppend, StreamItem, StreamOrigin, StreamPolicy,
    StreamState,
};
pub use task::Task;
pub use timeouts::{ActivityTimeout, RunTimeouts, TIMEOUT_CATEGORY};
pub use workflow_commands::{
    RetryPolicy, WorkflowCommand, WorkflowTaskCompletion, WorkflowTaskFence, SUPPORTED_COMMANDS,
};

use rows::{append_event, now_ms, to_u64};
use tx::WriteTx;

/// The database driver name this store reports in its backend contract.
pub const DATABASE_DRIVER: &str = "sqlite";

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: a committed task survives power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: survives a killed process; the last commits
    /// may roll back after power loss (WAL keeps the file consistent either way).
    Normal,
}

/// How a store is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The structural limits every enforcement point checks.
    pub limits: StructuralLimits,
    /// The budget of one v1 projection import.
    pub history_budget: HistoryBudget,
    /// The queue driver named in the backend contract.
    pub queue_driver: String,
    /// How long a write waits for another connection's lock.
    pub busy_timeout: Duration,
    /// Commit durability.
    pub durability: Durability,
    /// The largest history page handed to a worker with a task.
    pub history_page: HistoryPageLimit,
    /// Bytes of unprocessed signal and update payloads one run may hold
    /// (0: unlimited). Admission refuses the message that would pass it.
    pub max_pending_payload_bytes: u64,
    /// Workflow stream retention and the per-run stream cap.
    pub streams: StreamPolicy,
    /// How long an uploaded external payload that nothing holds is kept
    /// (`server.external_payload_transport.orphan_grace_seconds`): time
    /// for the request that names it to arrive. Only payloads nothing
    /// holds and not uploaded again within it are deleted.
    pub external_payload_orphan_grace: Duration,
}

/// The default orphan grace of an uploaded external payload: one day
/// (docs/bounded-growth.md says why).
pub const DEFAULT_EXTERNAL_PAYLOAD_ORPHAN_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

/// The default per-run budget of unprocessed message payload bytes: 64 MiB,
/// so 32 signals at the 2 MiB payload limit, not 5,000 of them.
pub const DEFAULT_MAX_PENDING_PAYLOAD_BYTES: u64 = 64 * 1024 * 1024;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            limits: StructuralLimits::default(),
            history_budget: HistoryBudget::default(),
            queue_driver: "database".to_owned(),
            busy_timeout: Duration::from_secs(10),
            durability: Durability::Full,
            history_page: HistoryPageLimit::default(),
            max_pending_payload_bytes: DEFAULT_MAX_PENDING_PAYLOAD_BYTES,
            streams: StreamPolicy::default(),
            external_payload_orphan_grace: DEFAULT_EXTERNAL_PAYLOAD_ORPHAN_GRACE,
        }
    }
}

impl StoreConfig {
    /// Defaults with the limits and the history budget read from the environment.
    pub fn from_env() -> Result<Self, EnvConfigError> {
        Ok(StoreConfig {
            limits: StructuralLimits::from_env()?,
            history_budget: HistoryBudget::from_env()?,
            ..StoreConfig::default()
        })
    }
}

/// One connection to a run store.
///
/// Open one store per thread or process: SQLite serializes the writers, and
/// every write path takes the write lock before it reads a counter, so
/// concurrent admissions cannot overshoot a limit.
pub struct Store {
    conn: Connection,
    config: StoreConfig,
}

impl Store {
    /// Opens (creating if needed) the store at `path`, in WAL mode, migrated.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open(path)?;
        Store::setup(conn, config)
    }

    /// A read-only connection to a store another connection migrated
    /// (the read pool's connections).
    pub fn open_reader(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(config.busy_timeout)?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(Store { conn, config })
    }

    /// A private in-memory store (no WAL: there is no file to share).
    pub fn open_in_memory(config: StoreConfig) -> Result<Store, Error> {
        Store::setup(Connection::open_in_memory()?, config)
    }

    fn setup(mut conn: Connection, config: StoreConfig) -> Result<Store, Error> {
        conn.busy_timeout(config.busy_timeout)?;
        // journal_mode answers with the mode in force; memory databases keep "memory".
        let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        let synchronous = match config.durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", synchronous)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        schema::migrate(&mut conn)?;
        Ok(Store { conn, config })
    }

    /// The configuration in force.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The health snapshot's `structural_limits` section.
    pub fn health(&self) -> HealthSnapshot {
        HealthSnapshot::new(self.config.limits)
    }

    /// The backend contract; SQLite adds `concurrent_write_safety: limited`.
    pub fn capabilities(&self) -> BackendCapabilities {
        BackendCapabilities::new(
            self.config.limits,
            BackendProfile {
                queue_driver: &self.config.queue_driver,
                database_driver: DATABASE_DRIVER,
            },
        )
    }

    /// Starts a run; arguments, memo and search attributes must fit their size limits.
    pub fn start_run(&self, start: StartRun) -> Result<RunId, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let run = insert_run(&tx, &self.config.limits, &start, None)?;
        tx.commit()?;
        Ok(run)
    }

    /// Starts a run for remote workers: the run, its start event and its
    /// first workflow task commit in one transaction, so no crash can leave
    /// a run that never gets a task. With a `request_id`, a retry of the
    /// same start (same namespace, workflow id and request id) returns the
    /// run the first attempt created instead of creating another.
    pub fn start_workflow(
        &self,
        start: StartRun,
        request_id: Option<&str>,
    ) -> Result<Started, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        if let Some(request_id) = request_id {
            if let Some(run) =
                self.run_started_by(&start.namespace, &start.workflow_id, request_id)?
            {
                return Ok(Started {
                    run,
                    duplicate: true,
                });
            }
        }
        let run = insert_run(&tx, &self.config.limits, &start, None)?;
        if let Some(request_id) = request_id {
            tx.prepare_cached("UPDATE runs SET start_request_id = ?2 WHERE id = ?1")?
                .execute(params![run.0, request_id])?;
        }
        dispatch::enqueue_workflow(&tx, run)?;
        tx.commit()?;
        Ok(Started {
            run,
            duplicate: false,
        })
    }

    /// The run a start with `request_id` created for (namespace, workflow id).
    pub fn run_started_by(
        &self,
        namespace: &str,
        workflow_id: &str,
        request_id: &str,
    ) -> Result<Option<RunId>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE namespace = ?1 AND workflow_id = ?2 \
                 AND start_request_id = ?3",
            )?
            .query_row(params![namespace, workflow_id, request_id], |r| r.get(0))
            .optional()?
            .map(RunId))
    }

    /// The run as stored.
    pub fn run(&self, run: RunId) -> Result<Run, Error> {
        rows::load_run(&self.conn, run)
    }

    /// The run's pending counters (one row read).
    pub fn pending_counts(&self, run: RunId) -> Result<PendingCounts, Error> {
        Ok(rows::load_head(&self.conn, run)?.pending)
    }

    /// The run's whole history in order, read page by page (for callers
    /// that need all of it: tests, the in-process executor's replay).
    pub fn history(&self, run: RunId) -> Result<Vec<HistoryEvent>, Error> {
        rows::load_history_length(&self.conn, run)?; // a missing run is an error
        let mut events = Vec::new();
        let mut from = 0;
        loop {
            let page = history::read_page(&self.conn, run, from, self.config.history_page)?;
            events.extend(page.events);
            match page.next_sequence {
                Some(next) => from = next,
                None => return Ok(events),
            }
        }
    }

    /// The run's failure rows, oldest first.
    pub fn failures(&self, run: RunId) -> Result<Vec<FailureRecord>, Error> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT failure_category, message, structural_limit_kind, structural_limit_value, \
             structural_limit_configured FROM failures WHERE run_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([run.0], |row| {
            Ok(FailureRecord {
                failure_category: row.get(0)?,
                message: row.get(1)?,
                structural_limit_kind: row.get(2)?,
                structural_limit_value: row.get::<_, Option<i64>>(3)?.map(to_u64),
                structural_limit_configured: row.get::<_, Option<i64>>(4)?.map(to_u64),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// What [`Store::start_workflow`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The run.
    pub run: RunId,
    /// `true` when the request id had already started it.
    pub duplicate: bool,
}

/// Checks a serialized size against a size limit (size kinds never warn).
pub(crate) fn check_size(
    limits: &StructuralLimits,
    kind: LimitKind,
    bytes: usize,
    run: &RunRef<'_>,
) -> Result<(), Error> {
    limits.check(kind, u64::try_from(bytes).unwrap_or(u64::MAX), run)?;
    Ok(())
}

/// Inserts a running v2 run and its start event, after the size checks.
pub(crate) fn insert_run(
    conn: &Connection,
    limits: &StructuralLimits,
    start: &StartRun,
    parent: Option<RunId>,
) -> Result<RunId, Error> {
    let run_ref = RunRef {
        workflow_run_id: &start.workflow_id,
        workflow_type: &start.workflow_type,
    };
    let arguments = serde_json::to_string(&start.arguments)?;
    check_size(
        limits,
        LimitKind::PayloadSizeBytes,
        arguments.len(),
        &run_ref,
    )?;
    let memo = serde_json::to_string(&start.memo)?;
    check_size(limits, LimitKind::MemoSizeBytes, memo.len(), &run_ref)?;
    let search = serde_json::to_string(&start.search_attributes)?;
    check_size(
        limits,
        LimitKind::SearchAttributeSizeBytes,
        search.len(),
        &run_ref,
    )?;
    conn.prepare_cached(
        "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, origin, \
         parent_run_id, memo, search_attributes, created_at_ms) \
         VALUES (?1, ?2, ?3, ?4, 'running', 'v2', ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        start.workflow_id,
        start.workflow_type,
        start.namespace,
        start.task_queue,
        parent.map(|p| p.0),
        memo,
        search,
        now_ms()
    ])?;
    let run = RunId(conn.last_insert_rowid());
    let mut payload = Map::new();
    payload.insert("workflow_id".into(), start.workflow_id.clone().into());
    payload.insert("workflow_type".into(), start.workflow_type.clone().into());
    payload.insert("namespace".into(), start.namespace.clone().into());
    payload.insert("task_queue".into(), start.task_queue.clone().into());
    payload.insert("arguments".into(), start.arguments.clone());
    if let Some(parent) = parent {
        payload.insert("parent_run_id".into(), parent.0.into());
    }
    append_event(
        conn,
        run,
        EventType::WorkflowStarted,
        &Value::Object(payload),
        false,
    )?;
    Ok(run)
}
