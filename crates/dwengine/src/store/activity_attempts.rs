//! Activity attempts as workers report them: complete, fail (and retry),
//! heartbeat.
//!
//! An attempt is one lease of an activity's dispatch row; its id is
//! `<task id>.<attempt>`, and only the lease owner naming the current
//! attempt may report on it. A failed attempt is retried after the backoff
//! its retry policy names while attempts remain and the failure is
//! retryable; otherwise the activity fails and the workflow sees
//! `ActivityFailed`. Each report is one transaction: the attempt, the
//! activity row, the run's counter, the history event and the run's next
//! workflow task move together.

use crate::store::db::{params, Connection, OptionalExtension};
use serde::Serialize;
use serde_json::{json, Value};

use crate::store::connection::Store;
use crate::store::deadlines::{rearm_activity, schedule_to_close_end};
use crate::store::dispatch::{enqueue_workflow, leased_to, TaskKind};
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::protocol::{codec_of, ParallelGroup, RetryPolicy};
use crate::store::rows::{append_event, bump, load_head, now_ms, to_i64, to_u64, Pending};
use crate::store::tx::WriteTx;

/// Who may report on an activity attempt.
#[derive(Debug, Clone, Copy)]
pub struct ActivityFence<'a> {
    /// The worker the attempt was leased to.
    pub lease_owner: &'a str,
    /// The attempt id it was given.
    pub activity_attempt_id: &'a str,
}

/// A failed attempt as the worker describes it.
#[derive(Debug, Clone, Default)]
pub struct AttemptFailure {
    /// Why.
    pub message: String,
    /// The exception's short type.
    pub exception_type: Option<String>,
    /// The exception's full class.
    pub exception_class: Option<String>,
    /// Whether retrying cannot help.
    pub non_retryable: bool,
    /// Structured details (an opaque payload).
    pub details: Option<Value>,
}

/// What became of a reported attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The activity completed.
    Completed,
    /// The activity failed for good.
    Failed,
    /// Another attempt is due at this time (Unix ms).
    RetryScheduled {
        /// When the next attempt becomes available.
        next_attempt_at_ms: i64,
        /// Its number.
        next_attempt: u64,
    },
    /// The run had closed; the report was accepted and ignored.
    RunClosed,
    /// The activity was abandoned (its `cancellation_policy` is `abandon`,
    /// and its run's cooperative cancellation was delivered at it or its
    /// run closed under it: `abandoned`): the report closed it, but no
    /// history event records it and no workflow task follows (the workflow
    /// stopped waiting for it).
    Abandoned,
}

/// The attempt id of lease `attempt` of task `task_id`.
pub fn attempt_id(task_id: i64, attempt: u64) -> String {
    format!("{task_id}.{attempt}")
}

pub(crate) struct Attempt {
    pub(crate) run: RunId,
    pub(crate) activity: i64,
    pub(crate) attempt: u64,
}

impl Store {
    /// The attempt completed with `result` (an opaque payload envelope).
    pub fn complete_activity_attempt(
        &self,
        task_id: i64,
        fence: ActivityFence<'_>,
        result: &Value,
    ) -> Result<AttemptOutcome, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        // Beside other writers (the run writer's batch on PostgreSQL) the
        // report holds its run's key (`Store::lock_run_of_task`).
        if !self.lock_run_of_task(task_id)? {
            return Err(Error::NeedsWriteLock);
        }
        let attempt = match fenced_attempt(&tx, task_id, fence) {
            Ok(attempt) => attempt,
            // A retry of this very attempt's completion whose answer was
            // lost converges on the outcome it already committed.
            Err(Error::StaleTask {
                reason: "task_not_leased",
                ..
            }) if completed_by(&tx, task_id, fence)? => return Ok(AttemptOutcome::Completed),
            Err(e) => return Err(run_closed_under(&tx, task_id, fence, e)?),
        };
        if cancelled_by_workflow(&tx, task_id, &attempt)? {
            tx.commit()?;
            return Err(cancelled(&attempt));
        }
        let fields = json!({ "result": result, "payload_codec": codec_of(result) });
        let outcome = settle(&tx, task_id, &attempt, fence, "completed", result, fields)?;
        tx.commit()?;
        Ok(outcome)
    }

    /// The attempt failed: retried when its policy allows, failed otherwise.
    pub fn fail_activity_attempt(
        &self,
        task_id: i64,
        fence: ActivityFence<'_>,
        failure: &AttemptFailure,
    ) -> Result<AttemptOutcome, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        if !self.lock_run_of_task(task_id)? {
            return Err(Error::NeedsWriteLock);
        }
        let attempt = match fenced_attempt(&tx, task_id, fence) {
            Ok(attempt) => attempt,
            Err(e) => return Err(run_closed_under(&tx, task_id, fence, e)?),
        };
        if cancelled_by_workflow(&tx, task_id, &attempt)? {
            tx.commit()?;
            return Err(cancelled(&attempt));
        }
        let running = load_head(&tx, attempt.run)?.status == RunStatus::Running;
        // An attempt a cancellation delivery waits for is not retried: its
        // failure ends the activity, and the delivery. An abandoned one is,
        // within its schedule-to-close timeout, even after its run closed.
        if (running || abandoned(&tx, attempt.activity)?)
            && !cancel_requested(&tx, attempt.activity)?
        {
            if let Some(due) =
                next_attempt_at(&tx, task_id, attempt.activity, attempt.attempt, failure)?
            {
                requeue_attempt(&tx, task_id, due, &failure.message)?;
                tx.commit()?;
                return Ok(AttemptOutcome::RetryScheduled {
                    next_attempt_at_ms: due,
                    next_attempt: attempt.attempt + 1,
                });
            }
        }
        let error = json!({
            "message": failure.message,
            "exception_type": failure.exception_type,
            "exception_class": failure.exception_class,
            "non_retryable": failure.non_retryable,
        });
        let fields = json!({
            "message": failure.message,
            "exception_type": failure.exception_type,
            "exception_class": failure.exception_class,
            "non_retryable": failure.non_retryable,
            "details": failure.details,
            "failure_category": "activity",
        });
        let outcome = settle(&tx, task_id, &attempt, fence, "failed", &error, fields)?;
        tx.commit()?;
        Ok(outcome)
    }

    /// Extends the attempt's lease by `lease_ms`; answers whether the run
    /// still wants the activity (false once the run has closed, or once its
    /// workflow cancelled it).
    pub fn heartbeat_activity_attempt(
        &self,
        task_id: i64,
        fence: ActivityFence<'_>,
        lease_ms: i64,
    ) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let attempt = match fenced_attempt(&tx, task_id, fence) {
            Ok(attempt) => attempt,
            Err(e) => return Err(run_closed_under(&tx, task_id, fence, e)?),
        };
        let now = now_ms();
        tx.prepare_cached(
            "UPDATE dispatch_tasks SET lease_expires_at_ms = ?2, last_heartbeat_at_ms = ?3 \
             WHERE id = ?1",
        )?
        .execute(params![task_id, now.saturating_add(lease_ms), now])?;
        rearm_activity(&tx, task_id)?;
        // A run that closed, or an activity its workflow cancelled (a
        // selection member it no longer needs), no longer wants the attempt.
        let wanted: bool = tx
            .prepare_cached(WANTED)?
            .query_row([attempt.activity], |r| r.get::<_, bool>(0))
            .optional()?
            .unwrap_or(false);
        // An abandoned activity runs on after its run closed (a close by
        // terminate or a legacy cancel ends its task, so it never gets here).
        let running = wanted
            && (load_head(&tx, attempt.run)?.status == RunStatus::Running
                || abandoned(&tx, attempt.activity)?);
        tx.commit()?;
        Ok(running)
    }
}

impl Store {
    /// A read-only look at an attempt (the cooperative workers' ownership
    /// observation): `Ok((true, lease_expires_at_ms))` while the run still
    /// wants it, `Ok((false, _))` once its workflow cancelled it; an attempt
    /// whose run closed is [`Error::AttemptRunClosed`], any other fence
    /// failure is [`Error::StaleTask`]. Nothing is renewed or recorded.
    pub fn activity_attempt_status(
        &self,
        task_id: i64,
        fence: ActivityFence<'_>,
    ) -> Result<(bool, i64), Error> {
        let attempt = match fenced_attempt(&self.conn, task_id, fence) {
            Ok(attempt) => attempt,
            Err(e) => return Err(run_closed_under(&self.conn, task_id, fence, e)?),
        };
        let wanted: bool = self
            .conn
            .prepare_cached(WANTED)?
            .query_row([attempt.activity], |r| r.get::<_, bool>(0))
            .optional()?
            .unwrap_or(false);
        let expires: Option<i64> = self
            .conn
            .prepare_cached("SELECT lease_expires_at_ms FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| r.get(0))?;
        Ok((wanted, expires.unwrap_or(0)))
    }
}

/// Whether an activity is still wanted: open, and no cancellation delivery
/// waits for its attempt to clean up.
const WANTED: &str =
    "SELECT status = 'scheduled' AND cancel_requested_at_ms IS NULL FROM activities WHERE id = ?1";

/// Whether the attempt's activity was cancelled by its workflow while the
/// attempt ran (a selection member it no longer needs): then the attempt's
/// task ends here, and its report is refused as `activity_cancelled`.
fn cancelled_by_workflow(
    conn: &Connection,
    task_id: i64,
    attempt: &Attempt,
) -> Result<bool, Error> {
    let result: Option<Option<String>> = conn
        .prepare_cached("SELECT result FROM activities WHERE id = ?1 AND status != 'scheduled'")?
        .query_row([attempt.activity], |r| r.get(0))
        .optional()?;
    let cancelled = result
        .flatten()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .is_some_and(|r| {
            r["reason"] == "selection_operation_cancelled"
                || r["reason"] == "workflow_cancellation_delivered"
        });
    if cancelled {
        end_task(conn, task_id)?;
    }
    Ok(cancelled)
}

/// `error` (a fence failure of `task_id`) as [`Error::AttemptRunClosed`]
/// when the attempt `fence` names still held the task when its run closed:
/// closing a run ends its tasks but keeps their lease owner and attempt, so
/// the worker learns the attempt is over (not that it lost a lease race).
pub(crate) fn run_closed_under(
    conn: &Connection,
    task_id: i64,
    fence: ActivityFence<'_>,
    error: Error,
) -> Result<Error, Error> {
    if !matches!(
        error,
        Error::StaleTask {
            reason: "task_not_leased",
            ..
        }
    ) {
        return Ok(error);
    }
    let row: Option<(Option<String>, i64, String)> = conn
        .prepare_cached(
            "SELECT d.lease_owner, d.attempt, r.status FROM dispatch_tasks d \
             JOIN runs r ON r.id = d.run_id \
             WHERE d.id = ?1 AND d.kind = 'activity' AND d.status = 'done'",
        )?
        .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((owner, attempt, status)) = row else {
        return Ok(error);
    };
    let status = RunStatus::parse(&status)
        .ok_or_else(|| Error::Corrupt(format!("run status {status:?}")))?;
    let held = owner.as_deref() == Some(fence.lease_owner)
        && fence.activity_attempt_id == attempt_id(task_id, to_u64(attempt));
    if held && status != RunStatus::Running {
        return Ok(Error::AttemptRunClosed {
            task: task_id,
            status,
        });
    }
    Ok(error)
}

fn cancelled(attempt: &Attempt) -> Error {
    Error::AlreadyClosed {
        item: "activity",
        id: attempt.activity,
        status: "cancelled".into(),
    }
}

/// When the next attempt of activity task `task_id` may start, or `None`
/// when the activity fails now: its retry policy must allow another attempt
/// after `failure`, and that attempt must be able to start before the
/// activity's schedule-to-close timeout passes.
pub(crate) fn next_attempt_at(
    conn: &Connection,
    task_id: i64,
    activity: i64,
    attempt: u64,
    failure: &AttemptFailure,
) -> Result<Option<i64>, Error> {
    let Some(delay_seconds) = retry_delay(&retry_policy(conn, activity)?, attempt, failure) else {
        return Ok(None);
    };
    let next = now_ms().saturating_add(to_i64(delay_seconds.saturating_mul(1000)));
    Ok(match schedule_to_close_end(conn, task_id)? {
        Some(end) if next >= end => None,
        _ => Some(next),
    })
}

/// Hands activity task `task_id` back to its queue for its next attempt,
/// due at `due`, remembering why the last one ended.
pub(crate) fn requeue_attempt(
    conn: &Connection,
    task_id: i64,
    due: i64,
    reason: &str,
) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE dispatch_tasks SET status = 'ready', lease_owner = NULL, \
         lease_expires_at_ms = NULL, poll_request_id = NULL, due_at_ms = ?2, \
         last_error = ?3 WHERE id = ?1",
    )?
    .execute(params![task_id, due, reason])?;
    rearm_activity(conn, task_id)
}

pub(crate) fn fenced_attempt(
    conn: &Connection,
    task_id: i64,
    fence: ActivityFence<'_>,
) -> Result<Attempt, Error> {
    let row = leased_to(
        conn,
        task_id,
        TaskKind::Activity,
        "activity task",
        fence.lease_owner,
    )?;
    if fence.activity_attempt_id != attempt_id(task_id, row.attempt) {
        return Err(Error::StaleTask {
            task: task_id,
            reason: "activity_attempt_mismatch",
        });
    }
    let activity = row.item.ok_or(Error::ItemNotFound {
        item: "activity task",
        id: task_id,
    })?;
    Ok(Attempt {
        run: row.run,
        activity,
        attempt: row.attempt,
    })
}

/// Ends the attempt's task with the activity `status` (`completed` or
/// `failed`, its row keeping `row_result`); a running run gets the matching
/// event, carrying the attempt's identity plus `fields`, and a workflow
/// task to see it.
fn settle(
    conn: &Connection,
    task_id: i64,
    attempt: &Attempt,
    fence: ActivityFence<'_>,
    status: &str,
    row_result: &Value,
    fields: Value,
) -> Result<AttemptOutcome, Error> {
    // One read of the activity and its run answers what follows: whether
    // it was abandoned, whether its run still runs, its parallel group.
    let state = activity_state(conn, attempt.activity)?;
    if state.abandoned {
        // The workflow stopped waiting for it: its outcome closes its row
        // and nothing else (no event, no workflow task), run open or not.
        close_activity(conn, attempt, status, row_result, state.run_running)?;
        end_task(conn, task_id)?;
        return Ok(AttemptOutcome::Abandoned);
    }
    let outcome = match close_activity(conn, attempt, status, row_result, state.run_running)? {
        Some((sequence, activity_type)) => {
            let mut payload = json!({
                "sequence": sequence,
                "activity_execution_id": attempt.activity.to_string(),
                "activity_attempt_id": fence.activity_attempt_id,
                "activity_type": activity_type,
                "attempt_number": attempt.attempt,
            });
            if let (Value::Object(map), Value::Object(extra)) = (&mut payload, fields) {
                map.extend(extra);
            }
            stamp_group_from(&state.options()?, &mut payload)?;
            let (event, outcome) = if status == "completed" {
                (EventType::ActivityCompleted, AttemptOutcome::Completed)
            } else {
                (EventType::ActivityFailed, AttemptOutcome::Failed)
            };
            append_event(conn, attempt.run, event, &payload, false)?;
            enqueue_workflow(conn, attempt.run)?;
            outcome
        }
        None => AttemptOutcome::RunClosed,
    };
    end_task(conn, task_id)?;
    Ok(outcome)
}

/// Whether task `task_id` ended with its activity completed by the attempt
/// `fence` names.
fn completed_by(conn: &Connection, task_id: i64, fence: ActivityFence<'_>) -> Result<bool, Error> {
    let row: Option<(Option<String>, i64, String)> = conn
        .prepare_cached(
            "SELECT d.lease_owner, d.attempt, a.status FROM dispatch_tasks d \
             JOIN activities a ON a.id = d.item_id WHERE d.id = ?1 AND d.status = 'done'",
        )?
        .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(row.is_some_and(|(owner, attempt, status)| {
        owner.as_deref() == Some(fence.lease_owner)
            && fence.activity_attempt_id == attempt_id(task_id, attempt.unsigned_abs())
            && status == "completed"
    }))
}

/// Moves the activity to `status` with `result`, releasing its count;
/// answers its (sequence, type) when the run is still running.
/// Closes the activity's row with `status` and `result`; its sequence and
/// type when its run is running (`run_running`, as read in this
/// transaction: closing an activity does not change its run's status).
fn close_activity(
    conn: &Connection,
    attempt: &Attempt,
    status: &str,
    result: &Value,
    run_running: bool,
) -> Result<Option<(Option<i64>, String)>, Error> {
    let closed: Option<(Option<i64>, String)> = conn
        .prepare_cached(
            "UPDATE activities SET status = ?2, result = ?3 WHERE id = ?1 AND status = 'scheduled' \
             RETURNING sequence, activity_type",
        )?
        .query_row(
            params![attempt.activity, status, serde_json::to_string(result)?],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some(closed) = closed else {
        return Err(Error::AlreadyClosed {
            item: "activity",
            id: attempt.activity,
            status: "closed".into(),
        });
    };
    bump(conn, attempt.run, Pending::Activity, -1)?;
    Ok(run_running.then_some(closed))
}

pub(crate) fn end_task(conn: &Connection, task_id: i64) -> Result<(), Error> {
    // The fence was checked when the attempt was read: no row count to read.
    conn.execute_queued(
        "UPDATE dispatch_tasks SET status = 'done', timeout_at_ms = NULL WHERE id = ?1",
        [task_id],
    )?;
    Ok(())
}

fn options(conn: &Connection, activity: i64) -> Result<Value, Error> {
    let options: Option<String> = conn
        .prepare_cached("SELECT options FROM activities WHERE id = ?1")?
        .query_row([activity], |r| r.get(0))?;
    match options {
        Some(text) => Ok(serde_json::from_str(&text)?),
        None => Ok(Value::Null),
    }
}

/// Copies the activity's parallel group metadata onto one of its events.
pub(crate) fn stamp_group(
    conn: &Connection,
    activity: i64,
    payload: &mut Value,
) -> Result<(), Error> {
    stamp_group_from(&options(conn, activity)?, payload)
}

/// [`stamp_group`] from the activity's `options`, already read.
fn stamp_group_from(options: &Value, payload: &mut Value) -> Result<(), Error> {
    if let Some(group) = options.get("parallel_group").filter(|g| !g.is_null()) {
        let group: ParallelGroup = serde_json::from_value(group.clone())?;
        group.stamp(payload);
    }
    Ok(())
}

fn retry_policy(conn: &Connection, activity: i64) -> Result<RetryPolicy, Error> {
    let options = options(conn, activity)?;
    match options.get("retry_policy") {
        Some(Value::Null) | None => Ok(RetryPolicy::default()),
        Some(policy) => Ok(serde_json::from_value(policy.clone())?),
    }
}

/// Seconds until the next attempt, or `None` when the activity fails now.
/// Without a policy an activity gets one attempt.
fn retry_delay(policy: &RetryPolicy, attempt: u64, failure: &AttemptFailure) -> Option<u64> {
    let max_attempts = policy.max_attempts.unwrap_or(1);
    if failure.non_retryable || attempt >= max_attempts {
        return None;
    }
    let excluded = |name: &Option<String>| {
        name.as_ref()
            .is_some_and(|n| policy.non_retryable_error_types.iter().any(|t| t == n))
    };
    if excluded(&failure.exception_type) || excluded(&failure.exception_class) {
        return None;
    }
    let index = usize::try_from(attempt.saturating_sub(1)).unwrap_or(usize::MAX);
    Some(
        policy
            .backoff_seconds
            .get(index)
            .or(policy.backoff_seconds.last())
            .copied()
            .unwrap_or(1),
    )
}

/// Whether activity `activity` was abandoned: its `cancellation_policy` is
/// `abandon` and either its run's cooperative cancellation was delivered at
/// a call that covers it (the delivery's sequence range, or a selection
/// handle's operation range), or its run has closed under it (only a close
/// that leaves abandoned activities running keeps their tasks open:
/// `completion::finish_run`). Such an activity keeps running, its attempts
/// are retried within its schedule-to-close timeout, and its outcome
/// resumes no workflow.
pub(crate) fn abandoned(conn: &Connection, activity: i64) -> Result<bool, Error> {
    Ok(activity_state(conn, activity)?.abandoned)
}

/// What settling an activity's attempt needs to know of the activity and
/// its run, from one read of both ([`activity_state`]).
struct ActivityState {
    /// [`abandoned`]'s answer.
    abandoned: bool,
    /// Whether the activity's run is running (false when there is no such
    /// activity).
    run_running: bool,
    /// The activity's stored options (JSON text), if any.
    options: Option<String>,
}

impl ActivityState {
    /// The options parsed (`null` when none are stored).
    fn options(&self) -> Result<Value, Error> {
        match &self.options {
            Some(text) => Ok(serde_json::from_str(text)?),
            None => Ok(Value::Null),
        }
    }
}

/// Reads activity `activity` with its run's status: whether it was
/// abandoned ([`abandoned`]), whether its run runs, and its options.
fn activity_state(conn: &Connection, activity: i64) -> Result<ActivityState, Error> {
    let row: Option<(i64, Option<i64>, Option<String>, String)> = conn
        .prepare_cached(
            "SELECT a.run_id, a.sequence, a.options, r.status FROM activities a \
             JOIN runs r ON r.id = a.run_id WHERE a.id = ?1",
        )?
        .query_row([activity], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let Some((run, sequence, options, status)) = row else {
        return Ok(ActivityState {
            abandoned: false,
            run_running: false,
            options: None,
        });
    };
    let run_running = status == RunStatus::Running.as_str();
    let abandoned = match (sequence, &options) {
        (Some(sequence), Some(text)) if abandon_policy(text) => {
            !run_running || delivered_over(conn, run, sequence)?
        }
        _ => false,
    };
    Ok(ActivityState {
        abandoned,
        run_running,
        options,
    })
}

/// Whether the run's last cooperative cancellation delivery covers the
/// activity scheduled at `sequence` ([`abandoned`]).
fn delivered_over(conn: &Connection, run: i64, sequence: i64) -> Result<bool, Error> {
    let delivered: Option<String> = conn
        .prepare_cached(
            "SELECT payload FROM history_events WHERE run_id = ?1 AND event_type = ?2 \
             ORDER BY sequence DESC LIMIT 1",
        )?
        .query_row(
            params![run, EventType::CooperativeCancellationDelivered.as_str()],
            |r| r.get(0),
        )
        .optional()?;
    let Some(delivered) = delivered else {
        return Ok(false);
    };
    let delivered: Value = serde_json::from_str(&delivered)?;
    let span = |field: &str| delivered[field].as_i64().unwrap_or(1);
    let (start, width) = match delivered["operation_sequence"].as_i64() {
        Some(operation) => (operation, span("operation_sequence_span")),
        None => (
            delivered["sequence"].as_i64().unwrap_or(0),
            span("sequence_span"),
        ),
    };
    Ok(sequence >= start && sequence < start.saturating_add(width))
}

/// Whether an activity's stored `options` name `cancellation_policy:
/// abandon`. Every completion asks: most activities name no such policy,
/// so their options are not parsed.
pub(crate) fn abandon_policy(options: &str) -> bool {
    options.contains("\"abandon\"")
        && serde_json::from_str::<Value>(options)
            .ok()
            .is_some_and(|o| o["cancellation_policy"] == "abandon")
}

/// Whether a cancellation delivery waits for activity `activity`'s running
/// attempt to clean up.
pub(crate) fn cancel_requested(conn: &Connection, activity: i64) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT cancel_requested_at_ms IS NOT NULL FROM activities \
             WHERE id = ?1 AND status = 'scheduled'",
        )?
        .query_row([activity], |r| r.get(0))
        .optional()?
        .unwrap_or(false))
}
