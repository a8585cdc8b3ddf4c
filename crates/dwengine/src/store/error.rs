//! The store's one error type.
//!
//! Workflow code returns it from task closures with `?`, so a structural limit
//! hit deep inside a fan-out reaches [`crate::store::connection::Store::execute_task`]
//! unchanged and is classified there; every other variant aborts the task
//! and leaves the database as it was.

use dwpolicy::history::HistoryBudgetError;
use dwpolicy::{ProjectionTooLarge, StructuralLimitExceeded};

use crate::store::model::{RunId, RunStatus};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database refused or failed an operation.
    #[error("{0}")]
    Database(#[from] crate::store::db::Error),
    /// A payload could not be encoded or a stored one decoded.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The database's migrations failed (PostgreSQL; SQLite's fail as
    /// [`Error::Database`]).
    #[error("migrating the database: {0}")]
    Migration(String),
    /// The file (or PostgreSQL database) was migrated by a newer engine.
    #[error(
        "the database's schema is at version {found}, newer than this dwserver knows \
         ({supported}): a newer dwserver migrated it; run that release or a later one against it \
         (this one refuses to write rows a newer schema may read differently)"
    )]
    SchemaTooNew {
        /// The file's version.
        found: i64,
        /// The newest this engine knows.
        supported: i64,
    },
    /// No such run.
    #[error("run {0} does not exist")]
    RunNotFound(RunId),
    /// The run has finished.
    #[error("run {run} is {status}, not running")]
    RunNotActive {
        /// The run.
        run: RunId,
        /// Its terminal status.
        status: RunStatus,
    },
    /// The run is still open (archive takes closed runs only).
    #[error("run {0} is still running; only a closed run can be archived")]
    RunNotClosed(RunId),
    /// The run is an imported v1 projection, which never takes appends.
    #[error("run {0} is an imported v1 projection and is read-only")]
    ReadOnlyProjection(RunId),
    /// A structural limit was hit inside a task (the run is failed for it).
    #[error(transparent)]
    StructuralLimit(#[from] StructuralLimitExceeded),
    /// An activity, timer, signal or update id that does not exist.
    #[error("{item} {id} does not exist")]
    ItemNotFound {
        /// What kind of item.
        item: &'static str,
        /// Its id.
        id: i64,
    },
    /// A completion for an item already in a terminal state.
    #[error("{item} {id} is already {status}")]
    AlreadyClosed {
        /// What kind of item.
        item: &'static str,
        /// Its id.
        id: i64,
        /// Its terminal state.
        status: String,
    },
    /// Replayed workflow code issued a different command than history recorded.
    #[error(
        "nondeterminism at command {index}: history recorded {recorded}, workflow issued {issued}"
    )]
    Nondeterminism {
        /// Position of the command in the run.
        index: u64,
        /// What history has there.
        recorded: String,
        /// What the code issued.
        issued: String,
    },
    /// A v1 import does not fit the history budget.
    #[error(transparent)]
    ProjectionTooLarge(#[from] ProjectionTooLarge),
    /// The workflow already has a projection in this namespace.
    #[error("workflow {workflow_id} already has a v1 projection (run {run})")]
    AlreadyImported {
        /// The workflow id.
        workflow_id: String,
        /// The existing projection.
        run: RunId,
    },
    /// Workflow code gave the task up (for example on worker shutdown): its
    /// writes are discarded and the run is left as it was.
    #[error("task abandoned: {0}")]
    Abandoned(String),
    /// A signal or update would take the run's unprocessed message payloads
    /// past the per-run byte budget; nothing was written.
    #[error(
        "run {run} holds {pending_bytes} bytes of unprocessed signal and update payloads; \
         {payload_bytes} more would pass the per-run budget of {limit} \
         (DW_MAX_PENDING_PAYLOAD_BYTES_PER_RUN)"
    )]
    PendingPayloadBudget {
        /// The run.
        run: RunId,
        /// Bytes already pending.
        pending_bytes: u64,
        /// The refused payload's bytes.
        payload_bytes: u64,
        /// The budget.
        limit: u64,
    },
    /// The group commit carrying this write failed; nothing of it is on disk.
    #[error("commit failed: {0}")]
    Commit(String),
    /// The database server could not be reached, or dropped the session,
    /// before this write was committed: it was not written, or (a commit
    /// cut off on its way back) its outcome is unknown; a retry settles it.
    #[error("the database is unavailable: {0}")]
    DatabaseUnavailable(String),
    /// The store's writer thread has stopped (the node is shutting down).
    #[error("the store writer has stopped")]
    WriterStopped,
    /// A claim running beside others met a task whose admission decides
    /// on shared state (a worker session's); it is rerun as an ordinary
    /// write ([`crate::store::db::Connection::begin_claim`]).
    #[error("the claim must run as an ordinary write (a worker session's task)")]
    ClaimNeedsWriteLock,
    /// A write running beside others under the write lock taken shared (a
    /// PostgreSQL start batch, or a run's completion in the run writer's
    /// batch) found its workflow id held by another transaction, needs
    /// what only an ordinary write may decide (another run, a namespace's
    /// shared state), or its batch's commit met another's in a lock cycle;
    /// nothing of it was written, and it is rerun as an ordinary write
    /// ([`crate::store::db::Connection::begin_starts`],
    /// [`crate::store::db::Connection::begin_run_writes`]).
    #[error(
        "the write must run as an ordinary write (its workflow id is being written elsewhere, or it reaches beyond its run)"
    )]
    NeedsWriteLock,
    /// Every read connection stayed busy past the wait.
    #[error("no read connection became free within {0:?}")]
    ReadersBusy(std::time::Duration),
    /// A stored value this engine cannot interpret.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A worker reported on a task it no longer holds (fenced out).
    #[error("task {task} is not held by this worker and attempt ({reason})")]
    StaleTask {
        /// The task.
        task: i64,
        /// Which part of the fence failed.
        reason: &'static str,
    },
    /// A report or heartbeat of an activity attempt whose run closed (was
    /// cancelled, terminated, timed out…) while the attempt held its task.
    #[error("activity task {task}'s run is {status}; the attempt is over")]
    AttemptRunClosed {
        /// The activity task.
        task: i64,
        /// The run's terminal status.
        status: crate::store::model::RunStatus,
    },
    /// A completion named an update the run never accepted.
    #[error("update {0:?} was not accepted by this run")]
    UnknownUpdate(String),
    /// A memo upsert whose entries are not a memo patch.
    #[error("invalid memo entries: {0}")]
    InvalidMemo(String),
    /// A `cancel_selection_operation` naming no member of the run's
    /// resolved selections (the problem names the field).
    #[error("cancel_selection_operation: {0}")]
    UnknownSelectionMember(String),
    /// The run has no live stream of that name (never opened, or expired).
    #[error("run {run} has no stream {name:?}")]
    StreamNotFound {
        /// The run.
        run: RunId,
        /// The stream.
        name: String,
    },
    /// An append to a stream that was closed or errored.
    #[error("stream {name:?} of run {run} is {status} and takes no more items")]
    StreamClosed {
        /// The run.
        run: RunId,
        /// The stream.
        name: String,
        /// `closed` or `errored`.
        status: String,
    },
    /// An append that would leave more unacknowledged items than it allows.
    #[error(
        "stream {name:?} holds {pending_items} unacknowledged items; {requested} more would \
         pass max_pending_items = {max_pending_items}"
    )]
    StreamBackpressure {
        /// The stream.
        name: String,
        /// Items not yet acknowledged by a read.
        pending_items: u64,
        /// New items the append carried.
        requested: u64,
        /// The append's ceiling.
        max_pending_items: u64,
    },
    /// An append past the stream's item cap.
    #[error(
        "stream {name:?} of run {run} holds {items} items; {requested} more would pass \
         max_items_per_stream = {limit}"
    )]
    StreamItemLimit {
        /// The run.
        run: RunId,
        /// The stream.
        name: String,
        /// Items it holds.
        items: u64,
        /// New items the append carried.
        requested: u64,
        /// The cap.
        limit: u64,
    },
    /// A new stream past the run's stream cap.
    #[error("run {run} already has {streams} streams, the most one run may open ({limit})")]
    StreamCountLimit {
        /// The run.
        run: RunId,
        /// Its streams.
        streams: u64,
        /// The cap.
        limit: u64,
    },
}

impl From<HistoryBudgetError> for Error {
    fn from(e: HistoryBudgetError) -> Self {
        match e {
            HistoryBudgetError::TooLarge(t) => Error::ProjectionTooLarge(t),
            HistoryBudgetError::Encode { source, .. } => Error::Json(source),
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Database(e.into())
    }
}

impl Error {
    /// Whether the store could not write because its disk (or its
    /// `max_page_count`) is full: SQLITE_FULL, however it was wrapped.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Database(e) => e.is_disk_full(),
            Error::Commit(message) => message.contains("disk is full"),
            _ => false,
        }
    }

    /// Whether the database server is unreachable or dropped the session
    /// (PostgreSQL stopped, restarting, the network gone), or does not
    /// answer in time (a call past its deadline, every read session held
    /// by such calls past the read wait): a refusal that clears by itself
    /// once the server answers again.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::DatabaseUnavailable(_) | Error::ReadersBusy(_) => true,
            Error::Database(e) => e.is_unavailable(),
            _ => false,
        }
    }
}
