//! Completion paths: items reaching a terminal state release their pending count.
//!
//! Workers report activity results, timers fire or are cancelled, children
//! close, workflow code processes signals and resolves updates. Each path
//! moves the item's row to a terminal status, decrements the run's counter
//! and appends the matching history event in one transaction, so the limit
//! a caller hit earlier frees up exactly when the item is done. A run that
//! has already finished still releases the count (the counters must keep
//! matching the rows) but gets no further history.

use crate::store::db::{params, Connection, OptionalExtension};
use dwpolicy::limits::FAILURE_CATEGORY;
use dwpolicy::StructuralLimitExceeded;
use serde::Serialize;
use serde_json::{json, Value};

use crate::store::children;
use crate::store::connection::Store;
use crate::store::dispatch::enqueue_workflow;
use crate::store::error::Error;
use crate::store::model::{ActivityId, EventType, RunId, RunOrigin, RunStatus, TimerId};
use crate::store::rows::{append_event, bump, load_head, now_ms, Pending, RunHead};
use crate::store::tx::WriteTx;

/// How an update ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateResolution {
    /// Applied, with a result.
    Completed(Value),
    /// Refused by the workflow, with a reason.
    Rejected(String),
}

/// One item table's shape, so every close goes through the same code.
struct ItemTable {
    table: &'static str,
    item: &'static str,
    open: &'static str,
    pending: Pending,
    has_result: bool,
}

/// A closing run's open tasks (`finish_run`), read through
/// `dispatch_by_run`.
pub(crate) const OPEN_TASKS: &str =
    "SELECT id FROM dispatch_tasks WHERE run_id = ?1 AND status != 'done'";

/// One of them closed, by its key: no temporary B-tree, which an update
/// of all of them by `run_id` builds (`schema.rs` tests the shapes).
pub(crate) const CLOSE_TASK: &str =
    "UPDATE dispatch_tasks SET status = 'done', timeout_at_ms = NULL WHERE id = ?1";

const ACTIVITIES: ItemTable = ItemTable {
    table: "activities",
    item: "activity",
    open: "scheduled",
    pending: Pending::Activity,
    has_result: true,
};
const TIMERS: ItemTable = ItemTable {
    table: "timers",
    item: "timer",
    open: "pending",
    pending: Pending::Timer,
    has_result: false,
};
const SIGNALS: ItemTable = ItemTable {
    table: "signals",
    item: "signal",
    open: "received",
    pending: Pending::Signal,
    has_result: false,
};
const UPDATES: ItemTable = ItemTable {
    table: "updates",
    item: "update",
    open: "accepted",
    pending: Pending::Update,
    has_result: true,
};

impl Store {
    /// An activity finished with `result`.
    pub fn complete_activity(&self, activity: ActivityId, result: Value) -> Result<(), Error> {
        let payload = json!({ "activity_id": activity.0, "result": result });
        self.close(
            &ACTIVITIES,
            activity.0,
            "completed",
            Some(&result),
            EventType::ActivityCompleted,
            payload,
        )
    }

    /// An activity finished with an error.
    pub fn fail_activity(&self, activity: ActivityId, message: &str) -> Result<(), Error> {
        let error = Value::String(message.to_owned());
        let payload = json!({ "activity_id": activity.0, "message": message });
        self.close(
            &ACTIVITIES,
            activity.0,
            "failed",
            Some(&error),
            EventType::ActivityFailed,
            payload,
        )
    }

    /// A timer fired.
    pub fn fire_timer(&self, timer: TimerId) -> Result<(), Error> {
        let payload = json!({ "timer_id": timer.0 });
        self.close(
            &TIMERS,
            timer.0,
            "fired",
            None,
            EventType::TimerFired,
            payload,
        )
    }

    /// A timer was cancelled before firing.
    pub fn cancel_timer(&self, timer: TimerId) -> Result<(), Error> {
        let payload = json!({ "timer_id": timer.0 });
        self.close(
            &TIMERS,
            timer.0,
            "cancelled",
            None,
            EventType::TimerCancelled,
            payload,
        )
    }

    /// Workflow code has handled a received signal.
    pub fn process_signal(&self, signal: i64) -> Result<(), Error> {
        let payload = json!({ "signal_id": signal });
        self.close(
            &SIGNALS,
            signal,
            "processed",
            None,
            EventType::SignalProcessed,
            payload,
        )
    }

    /// Workflow code has resolved an accepted update.
    pub fn resolve_update(&self, update: i64, resolution: UpdateResolution) -> Result<(), Error> {
        let (status, event, result) = match &resolution {
            UpdateResolution::Completed(v) => ("completed", EventType::UpdateCompleted, v.clone()),
            UpdateResolution::Rejected(r) => (
                "rejected",
                EventType::UpdateRejected,
                Value::String(r.clone()),
            ),
        };
        let payload = json!({ "update_id": update, "result": result });
        self.close(&UPDATES, update, status, Some(&result), event, payload)
    }

    fn close(
        &self,
        table: &ItemTable,
        id: i64,
        status: &str,
        result: Option<&Value>,
        event: EventType,
        payload: Value,
    ) -> Result<(), Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let found: Option<(i64, String)> = tx
            .prepare_cached(&format!(
                "SELECT run_id, status FROM {} WHERE id = ?1",
                table.table
            ))?
            .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        let Some((run, current)) = found else {
            return Err(Error::ItemNotFound {
                item: table.item,
                id,
            });
        };
        if current != table.open {
            return Err(Error::AlreadyClosed {
                item: table.item,
                id,
                status: current,
            });
        }
        if table.has_result {
            let text = result.map(serde_json::to_string).transpose()?;
            tx.prepare_cached(&format!(
                "UPDATE {} SET status = ?2, result = ?3 WHERE id = ?1",
                table.table
            ))?
            .execute(params![id, status, text])?;
        } else {
            tx.prepare_cached(&format!(
                "UPDATE {} SET status = ?2 WHERE id = ?1",
                table.table
            ))?
            .execute(params![id, status])?;
        }
        let run = RunId(run);
        bump(&tx, run, table.pending, -1)?;
        if matches!(table.pending, Pending::Signal | Pending::Update) {
            tx.prepare_cached(&format!(
                "UPDATE runs SET pending_payload_bytes = pending_payload_bytes - \
                 (SELECT octet_length(payload) FROM {} WHERE id = ?2) WHERE id = ?1",
                table.table
            ))?
            .execute(params![run.0, id])?;
        }
        if load_head(&tx, run)?.status == RunStatus::Running {
            append_event(&tx, run, event, &payload, false)?;
        }
        tx.commit()?;
        Ok(())
    }
}

/// A failure row to write with the terminal event.
pub(crate) struct FailureRow<'a> {
    pub category: &'a str,
    pub message: &'a str,
    pub limit: Option<StructuralLimitExceeded>,
}

/// The open activity tasks of `run` whose activities' `cancellation_policy`
/// is `abandon`, each with what the terminal event lists of it.
fn abandoned_tasks(conn: &Connection, run: RunId) -> Result<Vec<(i64, Value)>, Error> {
    type Open = (i64, i64, Option<i64>, String, Option<String>);
    let open: Vec<Open> = conn
        .prepare_cached(
            "SELECT d.id, a.id, a.sequence, a.activity_type, a.options FROM dispatch_tasks d \
             JOIN activities a ON a.id = d.item_id WHERE d.run_id = ?1 AND d.kind = 'activity' \
             AND d.status != 'done' AND a.status = 'scheduled'",
        )?
        .query_map([run.0], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut kept = Vec::new();
    for (task, activity, sequence, activity_type, options) in open {
        if options
            .as_deref()
            .is_some_and(crate::store::activity_attempts::abandon_policy)
        {
            kept.push((
                task,
                json!({ "activity_execution_id": activity.to_string(), "sequence": sequence,
                        "activity_type": activity_type }),
            ));
        }
    }
    Ok(kept)
}

/// Ends `head`'s run: terminal event, status, optional failure row, and the
/// parent's child link closed (releasing the parent's pending child count).
/// A child started by workflow code over the wire gives its running parent
/// the matching `ChildRun*` event and a workflow task: the parent's task
/// queue is returned so the caller can wake its pollers. Children of this
/// run still open meet their parent-close policy: `terminate` ends them as
/// terminated, `request_cancel` / `request_cancellation` as cancelled
/// (cancellation here ends a run at once), `abandon` leaves them running.
pub(crate) fn finish_run(
    conn: &Connection,
    head: &RunHead,
    status: RunStatus,
    event: EventType,
    payload: &Value,
    failure: Option<FailureRow<'_>>,
) -> Result<Option<String>, Error> {
    // Beside other writers (the run writer's batch on PostgreSQL) a close
    // that reaches another run (a parent or children to notify or close, a
    // service call's callers to answer) runs as an ordinary write instead.
    if conn.claims_side_by_side() && reaches_other_runs(conn, head.id)? {
        return Err(Error::NeedsWriteLock);
    }
    // Signals held for a task in flight are history before the run's end.
    crate::store::admission::release_held_signals(conn, head.id)?;
    crate::store::message_streams::release_carried(conn, head.id)?;
    // A close the workflow's own code made — it completed, failed,
    // continued as new, or ended as cancelled by its delivered cooperative
    // request — leaves its activities whose `cancellation_policy` is
    // `abandon` running (their tasks and deadlines stay; their outcomes are
    // never recorded here), listed on the terminal event. Terminate, a
    // legacy cancel, a timeout and a structural-limit failure end every task
    // of the run.
    let own_close = match event {
        EventType::WorkflowCompleted | EventType::WorkflowContinuedAsNew => true,
        EventType::WorkflowFailed => failure.as_ref().is_none_or(|f| f.limit.is_none()),
        EventType::WorkflowCancelled => payload
            .get("cancellation_request_id")
            .is_some_and(|v| !v.is_null()),
        _ => false,
    };
    let abandoned = if own_close {
        abandoned_tasks(conn, head.id)?
    } else {
        Vec::new()
    };
    if abandoned.is_empty() {
        append_event(conn, head.id, event, payload, false)?;
    } else {
        let mut payload = payload.clone();
        payload["abandoned_activities"] = abandoned.iter().map(|(_, a)| a.clone()).collect();
        append_event(conn, head.id, event, &payload, false)?;
    }
    // The close's writes whose answers nothing reads go, on PostgreSQL,
    // with the next call (`Connection::execute_queued`).
    conn.execute_queued(
        "UPDATE runs SET status = ?2, closed_at_ms = ?3, deadline_at_ms = NULL WHERE id = ?1",
        params![head.id.0, status.as_str(), now_ms()],
    )?;
    // Its cooperative cancellation request (if any) ends with it
    // (`cancellation`: at most one row per open run).
    conn.execute_queued(
        "DELETE FROM cancellation_requests WHERE run_id = ?1",
        [head.id.0],
    )?;
    // Its prepared local activities and checkpoint (`prepared_local`).
    crate::store::prepared_local_rows::delete_run(conn, head.id)?;
    // Its open streams end with it, so their readers reach the end.
    crate::store::streams::close_open_streams_of_run(conn, head.id, status)?;
    // A closed run has no work left for workers, and no deadlines (but
    // for its abandoned activities'). Its open tasks are read first and
    // closed one by one by id: one `UPDATE ... WHERE run_id = ?1 AND
    // status != 'done'` changes `status`, a column of the index it
    // searches (`dispatch_by_run`), so SQLite first collects the rows in a
    // temporary B-tree (`OPEN_TASKS` holds the statements' shapes).
    let open: Vec<i64> = conn
        .prepare_cached(OPEN_TASKS)?
        .query_map([head.id.0], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for task in open
        .into_iter()
        .filter(|t| !abandoned.iter().any(|(a, _)| a == t))
    {
        conn.execute_queued(CLOSE_TASK, [task])?;
    }
    // Nor updates waiting for a validator (never accepted now; their
    // callers answer run_not_active, or the update an approval accepted).
    conn.execute_queued(
        "DELETE FROM update_validations WHERE run_id = ?1",
        [head.id.0],
    )?;
    if let Some(failure) = failure {
        let limit = failure.limit;
        conn.prepare_cached(
            "INSERT INTO failures (run_id, failure_category, message, structural_limit_kind, \
             structural_limit_value, structural_limit_configured, created_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            head.id.0,
            failure.category,
            failure.message,
            limit.map(|l| l.kind.as_str()),
            limit.map(|l| crate::store::rows::to_i64(l.value)),
            limit.map(|l| crate::store::rows::to_i64(l.configured)),
            now_ms()
        ])?;
    }
    close_children_by_policy(conn, head)?;
    let Some(link) = children::open_link(conn, head.id)? else {
        // A run a workflow's service call started resumes its callers.
        return crate::store::service_calls::deliver(conn, head.id, status, payload);
    };
    if status == RunStatus::Failed && children::retry(conn, head.id, &link, payload)? {
        // The parent waits on the retry's run (its queue wakes at its due time).
        return Ok(None);
    }
    children::close_link(conn, &link, status)?;
    let parent = link.parent;
    bump(conn, parent, Pending::Child, -1)?;
    let parent_head = load_head(conn, parent)?;
    if parent_head.status != RunStatus::Running || parent_head.origin != RunOrigin::V2 {
        return Ok(None);
    }
    let Some(fields) = link.event_fields else {
        let payload = json!({ "child_run_id": head.id.0, "status": status });
        append_event(
            conn,
            parent,
            EventType::ChildWorkflowClosed,
            &payload,
            false,
        )?;
        return Ok(None);
    };
    let Some((event, outcome)) = children::outcome_event(&fields, head.id, status, payload) else {
        return Ok(None);
    };
    append_event(conn, parent, event, &outcome, false)?;
    enqueue_workflow(conn, parent)?;
    Ok(Some(children::queue_of(conn, parent)?))
}

/// Whether closing `run` writes another run: an open link to a parent or
/// to children, or a service call's callers waiting on it.
fn reaches_other_runs(conn: &Connection, run: RunId) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM children WHERE child_run_id = ?1 AND status = 'open') \
             OR EXISTS (SELECT 1 FROM children WHERE parent_run_id = ?1 AND status = 'open') \
             OR EXISTS (SELECT 1 FROM service_call_waiters WHERE linked_run_id = ?1)",
        )?
        .query_row([run.0], |r| r.get::<_, bool>(0))?)
}

/// Applies the parent-close policy of `head`'s open children (see
/// [`finish_run`]); each child's own children follow theirs in turn.
fn close_children_by_policy(conn: &Connection, head: &RunHead) -> Result<(), Error> {
    for (child, policy) in children::children_to_close(conn, head.id)? {
        let child_head = load_head(conn, child)?;
        if child_head.status != RunStatus::Running {
            continue;
        }
        let (status, event) = if policy == "terminate" {
            (RunStatus::Terminated, EventType::WorkflowTerminated)
        } else {
            (RunStatus::Cancelled, EventType::WorkflowCancelled)
        };
        let payload = json!({
            "reason": format!("parent run {} closed ({} {})", head.id, "parent_close_policy", policy),
            "request_id": null,
            "parent_close_policy": policy,
            "parent_run_id": head.id.0.to_string(),
        });
        finish_run(conn, &child_head, status, event, &payload, None)?;
    }
    Ok(())
}

/// Fails `head`'s run for a structural limit, as the contract classifies it:
/// a `structural_limit` failure row and a `WorkflowFailed` event carrying
/// the kind, value and configured limit. Returns the task queue of a wire
/// parent the failure resumed, as [`finish_run`] does.
pub(crate) fn fail_structural(
    conn: &Connection,
    head: &RunHead,
    exceeded: StructuralLimitExceeded,
) -> Result<Option<String>, Error> {
    let message = exceeded.to_string();
    let mut payload = serde_json::to_value(exceeded)?;
    if let Value::Object(map) = &mut payload {
        map.insert("message".into(), Value::String(message.clone()));
    }
    let failure = FailureRow {
        category: FAILURE_CATEGORY,
        message: &message,
        limit: Some(exceeded),
    };
    finish_run(
        conn,
        head,
        RunStatus::Failed,
        EventType::WorkflowFailed,
        &payload,
        Some(failure),
    )
}
