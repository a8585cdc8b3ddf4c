//! Work for remote workers: queued, leased to one poll, completed or failed.
//!
//! The in-process executor ([`Store::execute_task`]) runs workflow code
//! handed to it as a closure; a standalone server instead hands each task to
//! a worker that long-polls a (namespace, task queue). This module keeps
//! that hand-off durable: one row per workflow task, activity or timer, a
//! lease with an expiry so a vanished worker's task comes back, and the
//! poll request id that claimed it, so a repeated poll is answered with the
//! task it already leased instead of a second one.

use std::time::Duration;

use rusqlite::{params, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::history::{read_page, HistoryPage, HistoryPageLimit};
use crate::store::model::{RunId, RunStatus};
use crate::store::rows::{load_head, now_ms, to_i64};
use crate::store::tx::WriteTx;
use crate::store::{Error, Store};

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

/// An activity lease whose attempt timed out by the time the lease ended:
/// its timeout ([`crate::store::timeouts`]) ends the attempt, counted
/// against the retry policy, instead of lease recovery re-queueing it.
const ATTEMPT_TIMED_OUT: &str = "(kind = 'activity' AND timeout_at_ms IS NOT NULL \
     AND timeout_at_ms <= lease_expires_at_ms)";

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

fn task_row(row: &Row<'_>) -> rusqlite::Result<TaskRow> {
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

    /// Leases the oldest ready task of `kind` on (namespace, task queue) to
    /// `poll_request_id`, for `lease`.
    pub fn lease_task(
        &self,
        kind: TaskKind,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        poll_request_id: &str,
        lease: Duration,
    ) -> Result<Option<LeasedTask>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let now = now_ms();
        let id: Option<i64> = tx
            .prepare_cached(
                // One workflow task per run at a time: two workers replaying
                // different snapshots of one run would issue its commands twice.
                "SELECT d.id FROM dispatch_tasks d WHERE d.kind = ?1 AND d.namespace = ?2 \
                 AND d.task_queue = ?3 AND d.status = 'ready' AND d.due_at_ms <= ?4 \
                 AND (d.kind != 'workflow' OR NOT EXISTS (SELECT 1 FROM dispatch_tasks l \
                   WHERE l.run_id = d.run_id AND l.kind = 'workflow' AND l.status = 'leased')) \
                 ORDER BY d.due_at_ms, d.id LIMIT 1",
            )?
            .query_row(params![kind.as_str(), namespace, task_queue, now], |r| {
                r.get(0)
            })
            .optional()?;
        let Some(id) = id else {
            return Ok(None);
        };
        // An activity runs for its start-to-close timeout when it has one.
        let lease_ms = match kind {
            TaskKind::Activity => activity_lease_ms(&tx, id)?.unwrap_or(to_i64(lease.as_millis())),
            TaskKind::Workflow => to_i64(lease.as_millis()),
        };
        // The newest signal this delivery shows its worker: completing the
        // task processes exactly those, never one that arrived after the lease.
        tx.prepare_cached(
            "UPDATE dispatch_tasks SET status = 'leased', lease_owner = ?2, \
             lease_expires_at_ms = ?3, poll_request_id = ?4, attempt = attempt + 1, \
             signal_watermark = (SELECT MAX(s.id) FROM signals s WHERE s.run_id = dispatch_tasks.run_id), \
             attempt_started_at_ms = ?5, last_heartbeat_at_ms = NULL \
             WHERE id = ?1",
        )?
        .execute(params![
            id,
            owner,
            now.saturating_add(lease_ms),
            poll_request_id,
            now
        ])?;
        if kind == TaskKind::Activity {
            crate::store::timeouts::rearm_activity(&tx, id)?;
        }
        let task = load_task(&tx, id)?;
        tx.commit()?;
        Ok(task)
    }

    /// The task still leased to `poll_request_id`, if any: the durable half
    /// of poll replay, used when the cached replay result has expired.
    pub fn leased_by_poll_request(
        &self,
        kind: TaskKind,
        namespace: &str,
        task_queue: &str,
        poll_request_id: &str,
    ) -> Result<Option<LeasedTask>, Error> {
        let id: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT id FROM dispatch_tasks WHERE kind = ?1 AND namespace = ?2 \
                 AND task_queue = ?3 AND status = 'leased' AND poll_request_id = ?4 LIMIT 1",
            )?
            .query_row(
                params![kind.as_str(), namespace, task_queue, poll_request_id],
                |r| r.get(0),
            )
            .optional()?;
        match id {
            Some(id) => load_task(&self.conn, id),
            None => Ok(None),
        }
    }

    /// Expired workflow-task leases, oldest first, at most `limit`.
    pub fn expired_workflow_leases(&self, limit: usize) -> Result<Vec<i64>, Error> {
        self.expired_leases(TaskKind::Workflow, limit)
    }

    /// Expired leases of `kind`, oldest first, at most `limit`: an index
    /// walk (`dispatch_leases`) that stops after `limit` rows however large
    /// the backlog is.
    pub fn expired_leases(&self, kind: TaskKind, limit: usize) -> Result<Vec<i64>, Error> {
        let ids = self
            .conn
            .prepare_cached(&format!(
                "SELECT id FROM dispatch_tasks WHERE kind = ?1 AND status = 'leased' \
                 AND lease_expires_at_ms < ?2 AND NOT {ATTEMPT_TIMED_OUT} \
                 ORDER BY lease_expires_at_ms LIMIT ?3"
            ))?
            .query_map(params![kind.as_str(), now_ms(), to_i64(limit)], |r| {
                r.get(0)
            })?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Returns one expired lease to the queue; false if it was completed
    /// or extended meanwhile. A workflow task whose run already has another
    /// ready workflow task is retired instead: that task carries the newer
    /// history, and a run never needs two.
    pub fn recover_expired_lease(&self, task_id: i64) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let changed = tx
            .prepare_cached(&format!(
                "UPDATE dispatch_tasks SET status = CASE WHEN kind = 'workflow' AND EXISTS \
                 (SELECT 1 FROM dispatch_tasks o WHERE o.run_id = dispatch_tasks.run_id \
                 AND o.kind = 'workflow' AND o.status = 'ready') THEN 'done' ELSE 'ready' END, \
                 lease_owner = NULL, lease_expires_at_ms = NULL, poll_request_id = NULL, \
                 due_at_ms = CASE WHEN kind = 'activity' THEN ?2 ELSE due_at_ms END \
                 WHERE id = ?1 AND status = 'leased' AND lease_expires_at_ms < ?2 \
                 AND NOT {ATTEMPT_TIMED_OUT}"
            ))?
            .execute(params![task_id, now_ms()])?;
        if changed == 1 {
            crate::store::timeouts::rearm_activity(&tx, task_id)?;
        }
        tx.commit()?;
        Ok(changed == 1)
    }

    /// A worker's heartbeat on a leased task: its lease now ends `lease`
    /// from now. Returns the new expiry; a task that is no longer leased
    /// (completed, or recovered after its lease expired) is refused.
    pub fn extend_lease(&self, task_id: i64, lease: Duration) -> Result<i64, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let kind: Option<String> = tx
            .prepare_cached("SELECT kind FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| r.get(0))
            .optional()?;
        let kind = match kind.as_deref() {
            Some("activity") => TaskKind::Activity,
            Some("workflow") => TaskKind::Workflow,
            _ => {
                return Err(Error::ItemNotFound {
                    item: "task",
                    id: task_id,
                })
            }
        };
        self.leased(task_id, kind)?;
        let expires = now_ms().saturating_add(to_i64(lease.as_millis()));
        tx.prepare_cached("UPDATE dispatch_tasks SET lease_expires_at_ms = ?2 WHERE id = ?1")?
            .execute(params![task_id, expires])?;
        tx.commit()?;
        Ok(expires)
    }

    /// Whether (namespace, task queue, build-id cohort) has a timer due:
    /// the read that lets a poll pass skip the write transaction when
    /// nothing is due. `cohort` is the polling worker's build id (`None`:
    /// unversioned workers).
    pub fn has_due_timers(
        &self,
        namespace: &str,
        task_queue: &str,
        cohort: Option<&str>,
    ) -> Result<bool, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT 1 FROM dispatch_tasks WHERE kind = 'timer' AND namespace = ?1 \
                 AND task_queue = ?2 AND build_id IS ?4 AND status = 'ready' AND due_at_ms <= ?3 \
                 LIMIT 1",
            )?
            .query_row(params![namespace, task_queue, now_ms(), cohort], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Fires at most `limit` due timers of (namespace, task queue, build-id
    /// cohort), earliest first, queueing a workflow task for each run;
    /// returns how many fired.
    pub fn fire_due_timers(
        &self,
        namespace: &str,
        task_queue: &str,
        cohort: Option<&str>,
        limit: usize,
    ) -> Result<usize, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let due: Vec<(i64, i64, i64)> = tx
            .prepare_cached(
                "SELECT id, run_id, item_id FROM dispatch_tasks WHERE kind = 'timer' \
                 AND namespace = ?1 AND task_queue = ?2 AND build_id IS ?5 AND status = 'ready' \
                 AND due_at_ms <= ?3 ORDER BY due_at_ms, id LIMIT ?4",
            )?
            .query_map(
                params![namespace, task_queue, now_ms(), to_i64(limit), cohort],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?
            .collect::<Result<_, _>>()?;
        for (id, run, timer) in &due {
            crate::store::timers::fire(&tx, RunId(*run), *timer)?;
            tx.prepare_cached("UPDATE dispatch_tasks SET status = 'done' WHERE id = ?1")?
                .execute([id])?;
            enqueue_workflow(&tx, RunId(*run))?;
        }
        tx.commit()?;
        Ok(due.len())
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

    /// The run of a task leased as `kind`; refuses other states.
    fn leased(&self, task_id: i64, kind: TaskKind) -> Result<RunId, Error> {
        let row: Option<(String, String, i64)> = self
            .conn
            .prepare_cached("SELECT kind, status, run_id FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        match row {
            Some((k, status, run)) if k == kind.as_str() && status == "leased" => Ok(RunId(run)),
            Some((k, status, _)) if k == kind.as_str() => Err(Error::AlreadyClosed {
                item: "task",
                id: task_id,
                status,
            }),
            _ => Err(Error::ItemNotFound {
                item: "task",
                id: task_id,
            }),
        }
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
    conn: &rusqlite::Connection,
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
    conn: &rusqlite::Connection,
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

pub(crate) fn enqueue_workflow(conn: &rusqlite::Connection, run: RunId) -> Result<bool, Error> {
    let head = load_head(conn, run)?;
    if head.status != RunStatus::Running {
        return Ok(false);
    }
    let waiting: i64 = conn.query_row(
        "SELECT COUNT(*) FROM dispatch_tasks WHERE run_id = ?1 AND kind = 'workflow' \
         AND status = 'ready'",
        [run.0],
        |r| r.get(0),
    )?;
    if waiting > 0 {
        return Ok(false);
    }
    let now = now_ms();
    conn.prepare_cached(
        "INSERT INTO dispatch_tasks (kind, run_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
         SELECT 'workflow', id, namespace, task_queue, 'ready', ?2, ?2 FROM runs WHERE id = ?1",
    )?
    .execute(params![run.0, now])?;
    Ok(true)
}

fn activity_lease_ms(conn: &rusqlite::Connection, task_id: i64) -> Result<Option<i64>, Error> {
    let options: Option<String> = conn
        .prepare_cached(
            "SELECT a.options FROM dispatch_tasks d JOIN activities a ON a.id = d.item_id \
             WHERE d.id = ?1",
        )?
        .query_row([task_id], |r| r.get(0))
        .optional()?
        .flatten();
    let Some(options) = options else {
        return Ok(None);
    };
    let options: Value = serde_json::from_str(&options)?;
    Ok(options
        .get("start_to_close_timeout")
        .and_then(Value::as_i64)
        .map(|seconds| seconds.saturating_mul(1000)))
}

pub(crate) fn load_task(conn: &rusqlite::Connection, id: i64) -> Result<Option<LeasedTask>, Error> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id WHERE d.id = ?1"
        ))?
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
