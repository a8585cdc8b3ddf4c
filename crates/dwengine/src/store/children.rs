//! Child workflows started by workflow code over the wire
//! (`start_child_workflow`): the child's run and its `children` row, and
//! the `ChildRun*` event a parent gets when its child ends.
//!
//! A child is a run of its own (its own workflow id, task queue, history
//! and timeouts) whose row names its parent; the `children` row links the
//! two for as long as the child is open and keeps what the parent's events
//! repeat: the command's `sequence` (how both SDKs bind the outcome to the
//! call), the child's type and instance id, the parent-close and
//! cancellation policies and the parallel-group fields. When the child
//! ends, `completion::finish_run` closes the link and gives the parent its
//! outcome; when the parent ends first, the parent-close policy decides
//! what happens to the children still open.

use crate::store::db::{params, Connection, OptionalExtension};
use serde_json::{json, Map, Value};

use crate::store::deadlines;
use crate::store::dispatch::{enqueue_workflow, enqueue_workflow_at};
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus, StartRun};
use crate::store::protocol::{codec_of, ParallelGroup, RetryPolicy};
use crate::store::rows::{insert_run, load_run, now_ms, RunHead};
use dwpolicy::StructuralLimits;

/// The parent-close policies both SDKs send (`abandon` when absent).
pub const PARENT_CLOSE_POLICIES: [&str; 4] = [
    "abandon",
    "request_cancel",
    "request_cancellation",
    "terminate",
];

/// The cancellation policies both SDKs send (`abandon` when absent).
pub const CANCELLATION_POLICIES: [&str; 3] =
    ["abandon", "try_cancel", "wait_cancellation_completed"];

/// What a `start_child_workflow` command asks for.
pub(crate) struct ChildStart<'a> {
    pub sequence: i64,
    pub workflow_type: &'a str,
    pub arguments: &'a Value,
    pub queue: &'a str,
    pub namespace: &'a str,
    pub parent_close_policy: &'a str,
    pub cancellation_policy: &'a str,
    pub retry_policy: Option<&'a RetryPolicy>,
    pub execution_timeout_seconds: Option<u64>,
    pub run_timeout_seconds: Option<u64>,
    pub group: &'a ParallelGroup,
}

/// A started child: its run, and the two events the parent records
/// (`ChildWorkflowScheduled`, then `ChildRunStarted`).
pub(crate) struct StartedChild {
    pub scheduled: Value,
    pub started: Value,
}

/// The child's workflow id: unique per parent run and command (neither SDK
/// lets workflow code name it).
fn child_workflow_id(parent: RunId, sequence: i64) -> String {
    format!("{parent}:child:{sequence}")
}

/// Starts `child` under `parent` in the caller's transaction: the run with
/// its `WorkflowStarted`, its timeouts, its first workflow task, the link
/// row. The caller has checked `pending_child_count` and the arguments'
/// size; `insert_run` checks the size again before any row exists.
pub(crate) fn start(
    tx: &Connection,
    limits: &StructuralLimits,
    parent: &RunHead,
    child: &ChildStart<'_>,
) -> Result<StartedChild, Error> {
    let workflow_id = child_workflow_id(parent.id, child.sequence);
    let start = StartRun {
        workflow_id: workflow_id.clone(),
        workflow_type: child.workflow_type.to_owned(),
        namespace: child.namespace.to_owned(),
        task_queue: child.queue.to_owned(),
        arguments: child.arguments.clone(),
        ..StartRun::default()
    };
    let run = insert_run(tx, limits, &start, Some(parent.id), None)?;
    crate::store::cohorts::follow_cohort(tx, run, parent.id)?;
    if child.execution_timeout_seconds.is_some() || child.run_timeout_seconds.is_some() {
        deadlines::arm_run(
            tx,
            run,
            child.execution_timeout_seconds,
            child.run_timeout_seconds,
        )?;
    }
    let mut fields = json!({
        "sequence": child.sequence,
        "child_workflow_instance_id": workflow_id,
        "child_workflow_type": child.workflow_type,
        "parent_close_policy": child.parent_close_policy,
        "cancellation_policy": child.cancellation_policy,
    });
    child.group.stamp(&mut fields);
    let retry = child.retry_policy.map(serde_json::to_string).transpose()?;
    tx.prepare_cached(
        "INSERT INTO children (parent_run_id, child_run_id, status, sequence, \
         parent_close_policy, event_fields, retry_policy) VALUES (?1, ?2, 'open', ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        parent.id.0,
        run.0,
        child.sequence,
        child.parent_close_policy,
        serde_json::to_string(&fields)?,
        retry
    ])?;
    enqueue_workflow(tx, run)?;
    let started = with_run(&fields, run);
    let mut scheduled = started.clone();
    if let Value::Object(map) = &mut scheduled {
        map.insert("workflow_type".into(), child.workflow_type.into());
        map.insert("queue".into(), child.queue.into());
        map.insert("arguments".into(), child.arguments.clone());
        map.insert("payload_codec".into(), codec_of(child.arguments));
        if let Some(policy) = child.retry_policy {
            map.insert("retry_policy".into(), serde_json::to_value(policy)?);
        }
        if let Some(seconds) = child.execution_timeout_seconds {
            map.insert("execution_timeout_seconds".into(), seconds.into());
        }
        if let Some(seconds) = child.run_timeout_seconds {
            map.insert("run_timeout_seconds".into(), seconds.into());
        }
    }
    Ok(StartedChild { scheduled, started })
}

/// `fields` with the child's run id (a string, as run ids are on the wire).
fn with_run(fields: &Value, run: RunId) -> Value {
    let mut payload = fields.clone();
    if let Value::Object(map) = &mut payload {
        map.insert("child_workflow_run_id".into(), run.0.to_string().into());
    }
    payload
}

/// An open link from a parent to a child run.
pub(crate) struct Link {
    id: i64,
    pub parent: RunId,
    /// The fields the parent's `ChildRun*` events repeat; `None` for a
    /// child of the in-process executor (which records `ChildWorkflowClosed`).
    pub event_fields: Option<Value>,
    retry_policy: Option<RetryPolicy>,
    attempt: u64,
}

/// `child`'s open link to its parent, if it has one.
pub(crate) fn open_link(conn: &Connection, child: RunId) -> Result<Option<Link>, Error> {
    type Raw = (i64, i64, Option<String>, Option<String>, i64);
    let row: Option<Raw> = conn
        .prepare_cached(
            "SELECT id, parent_run_id, event_fields, retry_policy, attempt FROM children \
             WHERE child_run_id = ?1 AND status = 'open'",
        )?
        .query_row([child.0], |r| Raw::try_from(r))
        .optional()?;
    let Some((id, parent, fields, retry, attempt)) = row else {
        return Ok(None);
    };
    Ok(Some(Link {
        id,
        parent: RunId(parent),
        event_fields: fields.map(|text| serde_json::from_str(&text)).transpose()?,
        retry_policy: retry.map(|text| serde_json::from_str(&text)).transpose()?,
        attempt: u64::try_from(attempt).unwrap_or(1),
    }))
}

/// Closes `link`, recording how its child ended.
pub(crate) fn close_link(conn: &Connection, link: &Link, status: RunStatus) -> Result<(), Error> {
    conn.prepare_cached("UPDATE children SET status = 'closed', closed_status = ?2 WHERE id = ?1")?
        .execute(params![link.id, status.as_str()])?;
    Ok(())
}

/// Retries `failed`, a wire child that failed with terminal event
/// `payload`, when its retry policy allows: attempts left, the failure
/// neither non-retryable, of a type the policy excludes, nor a structural
/// limit. The retry is a new run of the same workflow id, type, queue and
/// arguments (accepted before, so not sized again), its run timeout again
/// and what is left of its execution timeout, its first workflow task due
/// after the policy's backoff; the link moves to it and the parent hears
/// nothing until the last attempt ends. Returns whether it retried.
pub(crate) fn retry(
    conn: &Connection,
    failed: RunId,
    link: &Link,
    payload: &Value,
) -> Result<bool, Error> {
    let Some(policy) = &link.retry_policy else {
        return Ok(false);
    };
    let max = policy.max_attempts.unwrap_or(1);
    let exception_type = payload.get("exception_type").and_then(Value::as_str);
    let excluded = exception_type.is_some_and(|kind| {
        policy
            .non_retryable_error_types
            .iter()
            .any(|name| name == kind)
    });
    if link.attempt >= max
        || excluded
        || payload.get("non_retryable").and_then(Value::as_bool) == Some(true)
        || payload.get("failure_category").and_then(Value::as_str)
            == Some(dwpolicy::limits::FAILURE_CATEGORY)
    {
        return Ok(false);
    }
    let run = load_run(conn, failed)?;
    let arguments: Value = conn
        .prepare_cached("SELECT payload FROM history_events WHERE run_id = ?1 AND sequence = 0")?
        .query_row([failed.0], |r| r.get::<_, String>(0))
        .optional()?
        .map(|text| serde_json::from_str::<Value>(&text))
        .transpose()?
        .and_then(|started| started.get("arguments").cloned())
        .unwrap_or(Value::Null);
    let timeouts = deadlines::run_timeouts(conn, failed)?;
    let start = StartRun {
        workflow_id: run.workflow_id,
        workflow_type: run.workflow_type,
        namespace: run.namespace,
        task_queue: run.task_queue,
        arguments,
        ..StartRun::default()
    };
    let accepted = StructuralLimits {
        payload_size_bytes: 0,
        memo_size_bytes: 0,
        search_attribute_size_bytes: 0,
        ..StructuralLimits::default()
    };
    let next = insert_run(conn, &accepted, &start, Some(link.parent), None)?;
    crate::store::cohorts::follow_cohort(conn, next, failed)?;
    let now = now_ms();
    let execution_left = timeouts.execution_deadline_at_ms.map(|deadline| {
        u64::try_from((deadline - now).max(1_000))
            .unwrap_or(1_000)
            .div_ceil(1_000)
    });
    if execution_left.is_some() || timeouts.run_timeout_seconds.is_some() {
        deadlines::arm_run(conn, next, execution_left, timeouts.run_timeout_seconds)?;
    }
    conn.prepare_cached(
        "UPDATE children SET child_run_id = ?2, attempt = attempt + 1 WHERE id = ?1",
    )?
    .execute(params![link.id, next.0])?;
    let index = usize::try_from(link.attempt.saturating_sub(1)).unwrap_or(usize::MAX);
    let backoff = policy
        .backoff_seconds
        .get(index)
        .or(policy.backoff_seconds.last())
        .copied()
        .unwrap_or(0);
    let backoff_ms = i64::try_from(backoff.saturating_mul(1_000)).unwrap_or(i64::MAX);
    enqueue_workflow_at(conn, next, now.saturating_add(backoff_ms))?;
    Ok(true)
}

/// The event a wire parent records when its child `run` ends with `status`,
/// from the child's terminal event `payload`: `ChildRunCompleted` with the
/// result, `ChildRunFailed` (a failure or a timeout) with the failure's
/// message, type and category, `ChildRunCancelled`, `ChildRunTerminated`.
pub(crate) fn outcome_event(
    fields: &Value,
    run: RunId,
    status: RunStatus,
    payload: &Value,
) -> Option<(EventType, Value)> {
    let mut event = with_run(fields, run);
    let map = event.as_object_mut()?;
    let copy = |map: &mut Map<String, Value>, names: &[&str]| {
        for name in names {
            if let Some(value) = payload.get(*name).filter(|v| !v.is_null()) {
                map.insert((*name).to_owned(), value.clone());
            }
        }
    };
    let kind = match status {
        RunStatus::Completed => {
            let result = payload.get("output").cloned().unwrap_or(Value::Null);
            map.insert("payload_codec".into(), codec_of(&result));
            map.insert("result".into(), result);
            EventType::ChildRunCompleted
        }
        RunStatus::Failed => {
            copy(
                map,
                &[
                    "message",
                    "exception_type",
                    "exception_class",
                    "exception",
                    "non_retryable",
                    "timeout_kind",
                    "structural_limit_kind",
                    "structural_limit_value",
                    "structural_limit_configured",
                ],
            );
            let category = payload
                .get("failure_category")
                .cloned()
                .filter(|v| !v.is_null())
                .unwrap_or_else(|| "application".into());
            map.insert("failure_category".into(), category);
            EventType::ChildRunFailed
        }
        RunStatus::Cancelled | RunStatus::Terminated => {
            copy(map, &["reason"]);
            let (kind, what) = if status == RunStatus::Cancelled {
                (EventType::ChildRunCancelled, "cancelled")
            } else {
                (EventType::ChildRunTerminated, "terminated")
            };
            let reason = payload.get("reason").and_then(Value::as_str).unwrap_or("");
            let message = if reason.is_empty() {
                format!("child workflow was {what}")
            } else {
                format!("child workflow was {what}: {reason}")
            };
            map.insert("message".into(), message.into());
            kind
        }
        // A child that continues as new hands its link to its successor
        // (`follow_continue`) before it closes; a running child has no outcome.
        RunStatus::ContinuedAsNew | RunStatus::Running => return None,
    };
    Some((kind, event))
}

/// Hands `closing`'s open link (if it is a child) to `next`, the run that
/// continues it: the parent waits for the chain's last run.
pub(crate) fn follow_continue(conn: &Connection, closing: RunId, next: RunId) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE children SET child_run_id = ?2 WHERE child_run_id = ?1 AND status = 'open'",
    )?
    .execute(params![closing.0, next.0])?;
    Ok(())
}

/// The open children of `parent` that its closing affects (policy other
/// than `abandon`), with their policy.
pub(crate) fn children_to_close(
    conn: &Connection,
    parent: RunId,
) -> Result<Vec<(RunId, String)>, Error> {
    let rows = conn
        .prepare_cached(
            "SELECT child_run_id, parent_close_policy FROM children \
             WHERE parent_run_id = ?1 AND status = 'open' AND parent_close_policy != 'abandon' \
             ORDER BY id",
        )?
        .query_map([parent.0], |r| Ok((RunId(r.get(0)?), r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// The task queue of `run` (the queue a resumed parent's task went to).
pub(crate) fn queue_of(conn: &Connection, run: RunId) -> Result<String, Error> {
    Ok(conn
        .prepare_cached("SELECT task_queue FROM runs WHERE id = ?1")?
        .query_row([run.0], |r| r.get(0))?)
}
