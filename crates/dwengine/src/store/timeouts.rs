//! Activity and run timeouts: what happens when a deadline passes, each
//! expiry one transaction.
//!
//! The deadlines themselves are armed on the rows they end
//! ([`deadlines`](super::deadlines)). A start-to-close or heartbeat expiry
//! is a failed attempt: it is retried under the activity's retry policy
//! ([`activity_attempts`](super::activity_attempts)) while attempts remain
//! and the retry can start before schedule-to-close; otherwise, and for the
//! two schedule timeouts, the activity ends with an `ActivityTimedOut`
//! event naming the timeout. A running run whose run or execution deadline
//! passes ends as `failed` with a `WorkflowTimedOut` event and a `timeout`
//! failure ([`completion`](super::completion) ends it).
//!
//! The deadlines are cleared as rows close, so their partial indexes hold
//! only live deadlines and the sweeps ([`Store::due_activity_timeouts`],
//! [`Store::due_run_timeouts`]) are index walks that stop at their limit.
//! This module is a top-layer transition: it uses the attempts, completion,
//! the task queue and the deadlines, and nothing imports it but the facade.

use crate::store::db::{params, Connection, OptionalExtension};
use serde_json::json;

use crate::store::activity_attempts::{
    attempt_id, next_attempt_at, requeue_attempt, AttemptFailure,
};
use crate::store::completion::{finish_run, FailureRow};
use crate::store::connection::Store;
use crate::store::deadlines::ActivityTimeouts;
use crate::store::dispatch::enqueue_workflow;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::rows::{append_event, bump, load_head, now_ms, to_i64, Pending};
use crate::store::tx::WriteTx;

/// The failure category of a timeout (activity or run).
pub const TIMEOUT_CATEGORY: &str = "timeout";

/// What an activity timeout did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActivityTimeout {
    /// The activity ended with `ActivityTimedOut`; the run's workflow
    /// task queue has a task to see it.
    TimedOut {
        /// The run's namespace.
        namespace: String,
        /// The run's (workflow) task queue.
        workflow_queue: String,
    },
    /// The timed-out attempt counted against the retry policy; the next
    /// attempt waits on the activity's queue.
    Retried {
        /// The namespace.
        namespace: String,
        /// The activity's task queue.
        activity_queue: String,
    },
    /// Nothing was due (already closed, or re-armed meanwhile), or an
    /// abandoned activity timed out, which wakes no workflow.
    NotDue,
}

impl Store {
    /// Activity tasks whose deadline has passed, earliest first, at most
    /// `limit`: a walk of the deadline index that stops after `limit` rows.
    pub fn due_activity_timeouts(&self, limit: usize) -> Result<Vec<i64>, Error> {
        let ids = self
            .conn
            .prepare_cached(
                "SELECT id FROM dispatch_tasks WHERE timeout_at_ms IS NOT NULL \
                 AND timeout_at_ms <= ?1 ORDER BY timeout_at_ms LIMIT ?2",
            )?
            .query_map(params![now_ms(), to_i64(limit)], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Runs whose run or execution deadline has passed, earliest first, at
    /// most `limit` (an index walk, like [`Store::due_activity_timeouts`]).
    pub fn due_run_timeouts(&self, limit: usize) -> Result<Vec<RunId>, Error> {
        let ids = self
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE deadline_at_ms IS NOT NULL \
                 AND deadline_at_ms <= ?1 ORDER BY deadline_at_ms LIMIT ?2",
            )?
            .query_map(params![now_ms(), to_i64(limit)], |r| r.get(0).map(RunId))?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Enforces activity task `task_id`'s passed deadline (see the module
    /// docs); a deadline that is not due, or a row already closed, is left
    /// as it is (a closed row's stale deadline is cleared).
    pub fn time_out_activity(&self, task_id: i64) -> Result<ActivityTimeout, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let outcome = time_out(&tx, task_id)?;
        tx.commit()?;
        Ok(outcome)
    }

    /// Ends `run` as timed out if its deadline has passed: `failed`, with a
    /// `WorkflowTimedOut` event and a `timeout` failure row. Answers whether
    /// it did.
    pub fn time_out_run(&self, run: RunId) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        type Raw = (Option<i64>, Option<String>, Option<i64>, Option<i64>);
        let row: Option<Raw> = tx
            .prepare_cached(
                "SELECT deadline_at_ms, deadline_kind, execution_timeout_seconds, \
                 run_timeout_seconds FROM runs WHERE id = ?1",
            )?
            .query_row([run.0], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((Some(deadline), kind, execution, run_timeout)) = row else {
            return Ok(false);
        };
        let head = load_head(&tx, run)?;
        if head.status != RunStatus::Running {
            tx.prepare_cached("UPDATE runs SET deadline_at_ms = NULL WHERE id = ?1")?
                .execute([run.0])?;
            tx.commit()?;
            return Ok(false);
        }
        if deadline > now_ms() {
            return Ok(false);
        }
        if kind.as_deref() == Some(crate::store::cancellation::CLEANUP_DEADLINE_KIND) {
            let closed = crate::store::cancellation::expire_cleanup(&tx, run)?;
            tx.commit()?;
            return Ok(closed);
        }
        let kind = kind.unwrap_or_else(|| "run".into());
        let seconds = if kind == "execution" {
            execution
        } else {
            run_timeout
        };
        let message = format!(
            "workflow {kind} timeout of {}s elapsed",
            seconds.unwrap_or(0)
        );
        let payload = json!({
            "message": message,
            "timeout_kind": kind,
            "closed_reason": "timed_out",
            "failure_category": TIMEOUT_CATEGORY,
            "execution_timeout_seconds": execution,
            "run_timeout_seconds": run_timeout,
        });
        let failure = FailureRow {
            category: TIMEOUT_CATEGORY,
            message: &message,
            limit: None,
        };
        finish_run(
            &tx,
            &head,
            RunStatus::Failed,
            EventType::WorkflowTimedOut,
            &payload,
            Some(failure),
        )?;
        tx.commit()?;
        Ok(true)
    }
}

fn time_out(conn: &Connection, task_id: i64) -> Result<ActivityTimeout, Error> {
    type Raw = (
        String,
        i64,
        Option<i64>,
        i64,
        Option<i64>,
        Option<String>,
        String,
        String,
    );
    let row: Option<Raw> = conn
        .prepare_cached(
            "SELECT status, run_id, item_id, attempt, timeout_at_ms, timeout_kind, \
             namespace, task_queue FROM dispatch_tasks WHERE id = ?1 AND kind = 'activity'",
        )?
        .query_row([task_id], |r| Raw::try_from(r))
        .optional()?;
    let Some((status, run, Some(activity), attempt, Some(due), kind, ns, queue)) = row else {
        return Ok(ActivityTimeout::NotDue);
    };
    let run = RunId(run);
    // An abandoned activity keeps its deadlines after its run closed.
    let abandoned = crate::store::activity_attempts::abandoned(conn, activity)?;
    if status == "done" || (load_head(conn, run)?.status != RunStatus::Running && !abandoned) {
        end_task(conn, task_id)?;
        return Ok(ActivityTimeout::NotDue);
    }
    let now = now_ms();
    if due > now {
        return Ok(ActivityTimeout::NotDue);
    }
    let kind = kind.unwrap_or_else(|| "start_to_close".into());
    let options: Option<String> = conn
        .prepare_cached("SELECT options FROM activities WHERE id = ?1")?
        .query_row([activity], |r| r.get(0))?;
    let timeouts = ActivityTimeouts::of(options.as_deref())?;
    let message = format!(
        "activity {kind} timeout of {}s elapsed",
        timeouts.seconds(&kind).unwrap_or(0)
    );
    let attempt = u64::try_from(attempt).unwrap_or(0);
    // An attempt a cancellation delivery waits for is not retried: its
    // timeout ends the activity, and the delivery's wait.
    if status == "leased"
        && matches!(kind.as_str(), "start_to_close" | "heartbeat")
        && !crate::store::activity_attempts::cancel_requested(conn, activity)?
    {
        let failure = AttemptFailure {
            message: message.clone(),
            exception_type: Some("ActivityTimeout".into()),
            ..AttemptFailure::default()
        };
        if let Some(next) = next_attempt_at(conn, task_id, activity, attempt, &failure)? {
            requeue_attempt(conn, task_id, next, &message)?;
            return Ok(ActivityTimeout::Retried {
                namespace: ns,
                activity_queue: queue,
            });
        }
    }
    let closed: Option<(Option<i64>, String)> = conn
        .prepare_cached(
            "UPDATE activities SET status = 'failed', result = ?2 WHERE id = ?1 \
             AND status = 'scheduled' RETURNING sequence, activity_type",
        )?
        .query_row(
            params![
                activity,
                serde_json::to_string(&json!({ "timeout_kind": kind, "message": message }))?
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    end_task(conn, task_id)?;
    let Some((sequence, activity_type)) = closed else {
        return Ok(ActivityTimeout::NotDue);
    };
    bump(conn, run, Pending::Activity, -1)?;
    if abandoned {
        // The workflow stopped waiting for it: no event, no workflow task.
        return Ok(ActivityTimeout::NotDue);
    }
    let mut payload = json!({
        "sequence": sequence,
        "activity_execution_id": activity.to_string(),
        "activity_type": activity_type,
        "attempt_number": attempt,
        "timeout_kind": kind,
        "message": message,
        "failure_category": TIMEOUT_CATEGORY,
        "exception_type": "ActivityTimeout",
        "non_retryable": true,
    });
    if attempt > 0 {
        payload["activity_attempt_id"] = attempt_id(task_id, attempt).into();
    }
    crate::store::activity_attempts::stamp_group(conn, activity, &mut payload)?;
    append_event(conn, run, EventType::ActivityTimedOut, &payload, false)?;
    enqueue_workflow(conn, run)?;
    let workflow_queue: String = conn
        .prepare_cached("SELECT task_queue FROM runs WHERE id = ?1")?
        .query_row([run.0], |r| r.get(0))?;
    Ok(ActivityTimeout::TimedOut {
        namespace: ns,
        workflow_queue,
    })
}

fn end_task(conn: &Connection, task_id: i64) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE dispatch_tasks SET status = 'done', timeout_at_ms = NULL WHERE id = ?1",
    )?
    .execute([task_id])?;
    Ok(())
}
