//! What the SQLite writer's batch holds of the workflow starts it staged
//! (their rows are written by [`crate::store::start_stage`]): kept below
//! [`crate::store::connection::Store`], which carries it.

use crate::store::model::StartRun;
use crate::store::rows::NewRun;

/// Starts staged by the writer's current batch.
#[derive(Debug, Default)]
pub(crate) struct StartStage {
    /// A job that may stage is running.
    pub(crate) accepting: bool,
    /// The next run id to hand out; read from the table at the first
    /// start staged after a flush.
    pub(crate) next_id: Option<i64>,
    pub(crate) staged: Vec<StagedStart>,
    /// Starts written by the flushes of the current batch.
    pub(crate) written: u64,
}

/// One staged start: its run id, what it started, its checked row.
#[derive(Debug)]
pub(crate) struct StagedStart {
    pub(crate) id: i64,
    pub(crate) start: StartRun,
    pub(crate) row: NewRun,
    /// The build the start was pinned to ([`crate::store::Store::pin_started_run`]).
    pub(crate) build_id: Option<String>,
    /// When it was staged: its event's and its task's time.
    pub(crate) at_ms: i64,
}
