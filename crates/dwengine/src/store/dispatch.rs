//! Work for remote workers: the task queue.
//!
//! The in-process executor ([`Store::execute_task`]) runs workflow code
//! handed to it as a closure; a standalone server instead hands each task to
//! a worker that long-polls a (namespace, task queue). This module keeps
//! that hand-off durable: one row per workflow task, activity or timer,
//! queued here ([`enqueue_workflow`]), checked against its lease holder
//! ([`leased_to`]) and read back as the task a worker gets ([`load_task`]).
//!
//! It is the store's lowest transition layer and calls nothing above it:
//! leasing a task and taking an expired lease back (which re-arm an
//! activity's deadline) are [`leases`](super::leases)', and firing due
//! timers is [`timers`](super::timers)'; both call down into this module.

use std::sync::LazyLock;

use crate::store::db::{params, OptionalExtension, Row, Together};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::history::{
    read_page, read_stored_page, HistoryPage, HistoryPageLimit, PageRows, StoredEvent, StoredPage,
    PAGE_ROWS,
};
use crate::store::model::RunId;
use crate::store::rows::{load_head, now_ms, to_i64, to_u64};
use crate::store::tx::WriteTx;

/// What a worker polls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// A decision: run the workflow code over its history.
    Workflow,
    /// One scheduled activity.
    Activity,
}

impl TaskKind {
    /// The row kind and the name used in keys and paths.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Workflow => "workflow",
            TaskKind::Activity => "activity",
        }
    }
}

/// A task as handed to a worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeasedTask {
    /// The dispatch row; completions name it.
    pub task_id: i64,
    /// Workflow or activity.
    pub kind: TaskKind,
    /// The run.
    pub run_id: i64,
    /// The caller's workflow id.
    pub workflow_id: String,
    /// The workflow type.
    pub workflow_type: String,
    /// The namespace.
    pub namespace: String,
    /// The task queue.
    pub task_queue: String,
    /// Leases taken on this task so far (1 on the first delivery).
    pub attempt: u64,
    /// The worker holding the lease.
    pub lease_owner: String,
    /// When the lease ends unless completed or renewed.
    pub lease_expires_at_ms: i64,
    /// Activity tasks: the activity.
    pub activity: Option<LeasedActivity>,
    /// Workflow tasks: the number of history events at lease time.
    pub history_length: u64,
    /// Workflow tasks: the accepted update this task should apply, if any.
    pub workflow_update_id: Option<i64>,
    /// Whether cancellation was requested.
    pub cancel_requested: bool,
    /// Workflow tasks: how the worker should replay (`sticky_replay_mode`),
    /// set by the lease that handed it out (`None`: read it again).
    pub sticky_replay_mode: Option<&'static str>,
    /// Activity tasks of a worker session: the session the lease admitted
    /// the worker to (set by the lease that handed it out).
    pub worker_session: Option<SessionLease>,
    /// Whether `worker_session` is the lease's own answer (a task leased
    /// now: `None` there means it has no session), not yet read (a task
    /// read back for a repeated poll: its session is read when rendered).
    #[serde(skip)]
    pub session_settled: bool,
    /// Activity tasks whose session can never run them (closed, failed,
    /// expired, missing): why; the lease's caller fails the activity.
    pub session_refused: Option<&'static str>,
    /// Whether the lease saw another task of its queue and kind ready
    /// (the poll that took this one wakes the others' polls); false when
    /// read back rather than leased.
    #[serde(skip)]
    pub more_ready: bool,
}

/// A worker session as a leased activity task carries it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionLease {
    /// The session's canonical options (with its queue).
    pub options: Value,
    /// Its namespace.
    pub namespace: String,
    /// The worker holding it.
    pub holder: String,
    /// `active`, `closed` or `failed`.
    pub status: String,
    /// When the holder lease ends unless renewed.
    pub lease_expires_at_ms: i64,
    /// When the session ends.
    pub ttl_expires_at_ms: i64,
}

/// The activity an activity task runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeasedActivity {
    /// The activity row.
    pub activity_id: i64,
    /// Its type.
    pub activity_type: String,
    /// Its arguments as the workflow sent them (an opaque payload).
    pub arguments: Value,
    /// The workflow sequence of the command that scheduled it.
    pub sequence: Option<i64>,
    /// Retry policy and timeouts as scheduled.
    pub options: Value,
}

const TASK_COLUMNS: &str = "d.id, d.kind, d.run_id, d.item_id, d.namespace, d.task_queue, \
     d.attempt, d.lease_expires_at_ms, r.workflow_id, r.workflow_type, r.cancel_requested_at_ms, \
     d.lease_owner, r.history_length";

struct TaskRow {
    id: i64,
    kind: TaskKind,
    run_id: i64,
    item_id: Option<i64>,
    namespace: String,
    task_queue: String,
    attempt: i64,
    lease_expires_at_ms: Option<i64>,
    workflow_id: String,
    workflow_type: String,
    cancel_requested: bool,
    lease_owner: Option<String>,
    history_length: i64,
}

fn task_row(row: &Row<'_>) -> crate::store::db::Result<TaskRow> {
    let kind: String = row.get(1)?;
    Ok(TaskRow {
        id: row.get(0)?,
        kind: if kind == "activity" {
            TaskKind::Activity
        } else {
            TaskKind::Workflow
        },
        run_id: row.get(2)?,
        item_id: row.get(3)?,
        namespace: row.get(4)?,
        task_queue: row.get(5)?,
        attempt: row.get(6)?,
        lease_expires_at_ms: row.get(7)?,
        workflow_id: row.get(8)?,
        workflow_type: row.get(9)?,
        cancel_requested: row.get::<_, Option<i64>>(10)?.is_some(),
        lease_owner: row.get(11)?,
        history_length: row.get(12)?,
    })
}

impl Store {
    /// Queues a workflow task for `run` unless one is already waiting.
    pub fn enqueue_workflow_task(&self, run: RunId) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let queued = enqueue_workflow(&tx, run)?;
        tx.commit()?;
        Ok(queued)
    }

    /// A page (bounded by the configured history page) of the history of
    /// workflow task `task_id`'s run, from sequence `after` on.
    pub fn task_history_page(&self, task_id: i64, after: u64) -> Result<HistoryPage, Error> {
        let run: Option<(String, i64)> = self
            .conn
            .prepare_cached("SELECT kind, run_id FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        match run {
            Some((kind, run)) if kind == "workflow" => {
                read_page(&self.conn, RunId(run), after, self.config.history_page)
            }
            _ => Err(Error::ItemNotFound {
                item: "workflow task",
                id: task_id,
            }),
        }
    }

    /// A page of `run`'s history from sequence `after` on: the rows are
    /// read one at a time and reading stops at the page's bound, so a
    /// history of any length costs one page of memory.
    pub fn history_page(
        &self,
        run: RunId,
        after: u64,
        page: HistoryPageLimit,
    ) -> Result<HistoryPage, Error> {
        load_head(&self.conn, run)?;
        read_page(&self.conn, run, after, page)
    }

    /// The page of `run`'s history from `after` and the run's history
    /// length, when `run` is a run of `workflow_id` in `namespace` (`None`
    /// when it is not, or no such run exists): the run's row and the page
    /// read together on one snapshot (its own outside a read), one round
    /// trip on PostgreSQL where finding the run and reading the page were
    /// two snapshots of three and five.
    pub fn history_page_of(
        &self,
        namespace: &str,
        workflow_id: &str,
        run: RunId,
        after: u64,
        page: HistoryPageLimit,
    ) -> Result<Option<(HistoryPage, u64)>, Error> {
        let mut owner: Option<(String, String, i64)> = None;
        let mut raw: Vec<(i64, String, String, Option<i64>)> = Vec::new();
        let (from, wanted) = (to_i64(after), PageRows::rows_wanted(page));
        self.conn.read_together(&mut [
            Together {
                sql: "SELECT namespace, workflow_id, history_length FROM runs WHERE id = ?1",
                params: &[&run.0],
                each: &mut |r| {
                    owner = Some((r.get(0)?, r.get(1)?, r.get(2)?));
                    Ok(())
                },
            },
            Together {
                sql: PAGE_ROWS,
                params: &[&run.0, &from, &wanted],
                each: &mut |r| {
                    raw.push((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?));
                    Ok(())
                },
            },
        ])?;
        match owner {
            Some((ns, id, length)) if ns == namespace && id == workflow_id => {
                let mut rows = PageRows::new(page);
                for (sequence, event_type, payload, recorded_at_ms) in raw {
                    if !rows.push(sequence, event_type, payload, recorded_at_ms)? {
                        break;
                    }
                }
                let (events, next_sequence) = rows.finish();
                let events = events
                    .iter()
                    .map(StoredEvent::parsed)
                    .collect::<Result<_, _>>()?;
                let page = HistoryPage {
                    events,
                    next_sequence,
                };
                Ok(Some((page, to_u64(length))))
            }
            _ => Ok(None),
        }
    }

    /// [`Store::history_page`] with each payload's stored text, unparsed.
    pub fn stored_history_page(
        &self,
        run: RunId,
        after: u64,
        page: HistoryPageLimit,
    ) -> Result<StoredPage, Error> {
        load_head(&self.conn, run)?;
        read_stored_page(&self.conn, run, after, page)
    }

    /// The (namespace, task queue) of a dispatch task.
    pub fn task_queue_of(&self, task_id: i64) -> Result<(String, String), Error> {
        self.conn
            .prepare_cached("SELECT namespace, task_queue FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?
            .ok_or(Error::ItemNotFound {
                item: "task",
                id: task_id,
            })
    }

    /// Where a dispatch task belongs ([`TaskHome`]), in one statement: a
    /// worker's report reads it inside its write transaction, where on
    /// PostgreSQL each statement is a round trip under the write lock
    /// (it was two for a workflow task's completion, three for an
    /// activity's report: the task's queue, its run, the run's row).
    pub fn task_home(&self, task_id: i64) -> Result<TaskHome, Error> {
        self.conn
            .prepare_cached(
                "SELECT d.namespace, d.task_queue, d.run_id, r.task_queue \
                 FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id WHERE d.id = ?1",
            )?
            .query_row([task_id], |r| {
                Ok(TaskHome {
                    namespace: r.get(0)?,
                    task_queue: r.get(1)?,
                    run: RunId(r.get(2)?),
                    run_task_queue: r.get(3)?,
                })
            })
            .optional()?
            .ok_or(Error::ItemNotFound {
                item: "task",
                id: task_id,
            })
    }

    /// The run a dispatch task belongs to.
    pub fn run_of_task(&self, task_id: i64) -> Result<RunId, Error> {
        self.conn
            .prepare_cached("SELECT run_id FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| r.get(0).map(RunId))
            .optional()?
            .ok_or(Error::ItemNotFound {
                item: "task",
                id: task_id,
            })
    }
}

/// Where a dispatch task belongs ([`Store::task_home`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskHome {
    /// The task's namespace.
    pub namespace: String,
    /// The task queue the task waits on.
    pub task_queue: String,
    /// The run the task belongs to.
    pub run: RunId,
    /// The run's own task queue (its workflow tasks'; an activity task
    /// may wait on another).
    pub run_task_queue: String,
}

/// A dispatch row as a fence check reads it.
pub(crate) struct LeaseRow {
    pub run: RunId,
    pub item: Option<i64>,
    pub attempt: u64,
    pub signal_watermark: Option<i64>,
}

/// The dispatch row `task_id` of `kind`, if it is leased to `owner`:
/// a report from anyone else is refused as stale (named `item` in errors).
pub(crate) fn leased_to(
    conn: &crate::store::db::Connection,
    task_id: i64,
    kind: TaskKind,
    item: &'static str,
    owner: &str,
) -> Result<LeaseRow, Error> {
    type Raw = (
        String,
        String,
        i64,
        Option<i64>,
        Option<String>,
        i64,
        Option<i64>,
    );
    let row: Option<Raw> = conn
        .prepare_cached(
            "SELECT kind, status, run_id, item_id, lease_owner, attempt, signal_watermark \
             FROM dispatch_tasks WHERE id = ?1",
        )?
        .query_row([task_id], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })
        .optional()?;
    let Some((row_kind, status, run, item_id, lease_owner, attempt, watermark)) = row else {
        return Err(Error::ItemNotFound { item, id: task_id });
    };
    if row_kind != kind.as_str() {
        return Err(Error::ItemNotFound { item, id: task_id });
    }
    let stale = |reason| Error::StaleTask {
        task: task_id,
        reason,
    };
    if status != "leased" {
        return Err(stale("task_not_leased"));
    }
    if lease_owner.as_deref() != Some(owner) {
        return Err(stale("lease_owner_mismatch"));
    }
    Ok(LeaseRow {
        run: RunId(run),
        item: item_id,
        attempt: u64::try_from(attempt).unwrap_or(0),
        signal_watermark: watermark,
    })
}

/// Whether `run` has a workflow task waiting for a worker.
pub(crate) fn has_ready_workflow_task(
    conn: &crate::store::db::Connection,
    run: RunId,
) -> Result<bool, Error> {
    let ready: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM dispatch_tasks WHERE run_id = ?1 AND kind = 'workflow' \
             AND status = 'ready'",
        )?
        .query_row([run.0], |r| r.get(0))?;
    Ok(ready > 0)
}

pub(crate) fn enqueue_workflow(
    conn: &crate::store::db::Connection,
    run: RunId,
) -> Result<bool, Error> {
    enqueue_workflow_at(conn, run, now_ms())
}

/// Queues the first workflow task of `run`, a run the same transaction has
/// just inserted in (`namespace`, `task_queue`): it is running and has no
/// task yet, so unlike [`enqueue_workflow`] nothing is read first.
pub(crate) fn enqueue_first_workflow_task(
    conn: &crate::store::db::Connection,
    run: RunId,
    namespace: &str,
    task_queue: &str,
) -> Result<(), Error> {
    let now = now_ms();
    conn.prepare_cached(
        "INSERT INTO dispatch_tasks (kind, run_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
         VALUES ('workflow', ?1, ?2, ?3, 'ready', ?4, ?4)",
    )?
    .execute(params![run.0, namespace, task_queue, now])?;
    Ok(())
}

/// Queues a workflow task for `run` that becomes leasable at `due_at_ms`
/// (a child's retry after its backoff), unless the run is closed or one is
/// already queued.
///
/// One statement decides and inserts, where a read of the run and a read
/// of its ready tasks went before the insert: on PostgreSQL each was a
/// round trip inside the write lock, and an activity's completion makes
/// this call every time. Only when nothing was queued is the run read, so
/// that a run that does not exist is still an error and not a quiet no.
pub(crate) fn enqueue_workflow_at(
    conn: &crate::store::db::Connection,
    run: RunId,
    due_at_ms: i64,
) -> Result<bool, Error> {
    let queued = conn
        .prepare_cached(
            "INSERT INTO dispatch_tasks (kind, run_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
             SELECT 'workflow', r.id, r.namespace, r.task_queue, 'ready', ?2, ?3 FROM runs r \
             WHERE r.id = ?1 AND r.status = 'running' AND NOT EXISTS \
             (SELECT 1 FROM dispatch_tasks t WHERE t.run_id = ?1 AND t.kind = 'workflow' AND t.status = 'ready')",
        )?
        .execute(params![run.0, due_at_ms, now_ms()])?;
    if queued == 0 {
        load_head(conn, run)?;
    }
    Ok(queued > 0)
}

/// [`load_task`]'s statement, formatted once (it runs for every lease).
static LOAD_TASK: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {TASK_COLUMNS} FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id WHERE d.id = ?1"
    )
});

pub(crate) fn load_task(
    conn: &crate::store::db::Connection,
    id: i64,
) -> Result<Option<LeasedTask>, Error> {
    let row = conn
        .prepare_cached(&LOAD_TASK)?
        .query_row([id], task_row)
        .optional()?;
    let Some(row) = row else {
        return Ok(None);
    };
    let mut task = LeasedTask {
        task_id: row.id,
        kind: row.kind,
        run_id: row.run_id,
        workflow_id: row.workflow_id,
        workflow_type: row.workflow_type,
        namespace: row.namespace,
        task_queue: row.task_queue,
        attempt: u64::try_from(row.attempt).unwrap_or(0),
        lease_owner: row.lease_owner.unwrap_or_default(),
        lease_expires_at_ms: row.lease_expires_at_ms.unwrap_or(0),
        activity: None,
        history_length: u64::try_from(row.history_length).unwrap_or(0),
        workflow_update_id: None,
        cancel_requested: row.cancel_requested,
        sticky_replay_mode: None,
        worker_session: None,
        session_settled: false,
        session_refused: None,
        more_ready: false,
    };
    match row.kind {
        TaskKind::Activity => {
            let activity = conn
                .prepare_cached(
                    "SELECT id, activity_type, arguments, sequence, options FROM activities WHERE id = ?1",
                )?
                .query_row([row.item_id.unwrap_or(-1)], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                    ))
                })
                .optional()?;
            if let Some((activity_id, activity_type, arguments, sequence, options)) = activity {
                task.activity = Some(LeasedActivity {
                    activity_id,
                    activity_type,
                    arguments: serde_json::from_str(&arguments)?,
                    sequence,
                    options: match options {
                        Some(text) => serde_json::from_str(&text)?,
                        None => Value::Null,
                    },
                });
            }
        }
        TaskKind::Workflow => {
            task.workflow_update_id = conn
                .prepare_cached(
                    "SELECT MIN(id) FROM updates WHERE run_id = ?1 AND status = 'accepted'",
                )?
                .query_row([row.run_id], |r| r.get(0))?;
        }
    }
    Ok(Some(task))
}
