//! The rows of prepared local activities (`store::prepared_local`, the
//! protocol's transitions): scheduling one as a command of its run and
//! deleting a run's rows when it closes. Completions and the command
//! writer (`workflow_commands`) use these without reaching up to the
//! protocol's transitions, which build on both.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::store::db::{params, Connection};
use crate::store::error::Error;
use crate::store::model::{EventType, RunId};
use crate::store::protocol::{codec_of, ParallelGroup, RetryPolicy};
use crate::store::rows::{append_event, bump, now_ms, Pending};

/// A local activity as the worker authored it (`descriptor`, or a
/// `checkpoint-group`'s `prepare_local_activity` entry).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LocalDescriptor {
    /// Its type.
    #[serde(default)]
    pub activity_type: String,
    /// Its arguments (an opaque payload envelope).
    #[serde(default)]
    pub arguments: Value,
    /// Attempts and backoff (one attempt when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
    /// Seconds each attempt may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_to_close_timeout: Option<u64>,
    /// Seconds the whole activity may take, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_to_close_timeout: Option<u64>,
    /// Seconds an attempt may go without a heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout: Option<u64>,
    /// A call run as cancellation cleanup: the delivered request it cleans
    /// up after (`request_id`, `delivery_history_event_id`); admission
    /// resolves it to the full cleanup authority (`root_request_id`,
    /// `cleanup_deadline_at` added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation_cleanup: Option<Value>,
    /// What a cooperative cancellation delivered at the call does with a
    /// running attempt: `try_cancel` (also when absent) fences it and
    /// delivers at once, `wait_cancellation_completed` delivers only once
    /// the worker acknowledged its callback's stop (or the attempt has its
    /// outcome). Every event of the call records it, as authored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation_policy: Option<String>,
    /// Parallel group membership.
    #[serde(flatten)]
    pub group: ParallelGroup,
}

/// A prepared local activity's execution id (stable across attempts).
pub(crate) fn execution_id(run: RunId, sequence: i64) -> String {
    format!("{}:{sequence}", run.0)
}

/// The fields every event of a prepared local activity carries.
pub(crate) fn marker_of(run: RunId, sequence: i64, descriptor: &LocalDescriptor) -> Value {
    let mut payload = json!({
        "sequence": sequence,
        "activity_type": descriptor.activity_type,
        "execution_mode": "local",
        "local_activity": true,
        "prepared": true,
        "activity_execution_id": execution_id(run, sequence),
    });
    if let Some(policy) = &descriptor.cancellation_policy {
        payload["cancellation_policy"] = policy.clone().into();
    }
    descriptor.group.stamp(&mut payload);
    payload
}

/// Schedules the local activity at `sequence` (its `ActivityScheduled`
/// command event and its row); the caller checked the limits and that
/// `sequence` is the run's next.
pub(crate) fn schedule(
    conn: &Connection,
    run: RunId,
    sequence: i64,
    descriptor: &LocalDescriptor,
) -> Result<Value, Error> {
    let now = now_ms();
    let deadline = descriptor.schedule_to_close_timeout.map(|s| {
        let d = now.saturating_add(i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1000));
        cleanup_deadline_ms(descriptor).map_or(d, |c| d.min(c))
    });
    conn.prepare_cached(
        "INSERT INTO prepared_local_activities (run_id, sequence, activity_type, descriptor, \
         status, attempt_number, scheduled_at_ms, schedule_to_close_deadline_ms) \
         VALUES (?1, ?2, ?3, ?4, 'scheduled', 0, ?5, ?6)",
    )?
    .execute(params![
        run.0,
        sequence,
        descriptor.activity_type,
        serde_json::to_string(descriptor)?,
        now,
        deadline
    ])?;
    let mut payload = marker_of(run, sequence, descriptor);
    payload["arguments"] = descriptor.arguments.clone();
    payload["payload_codec"] = codec_of(&descriptor.arguments);
    if let Some(policy) = &descriptor.retry_policy {
        payload["retry_policy"] = serde_json::to_value(policy)?;
    }
    if let Some(Value::Object(cleanup)) = &descriptor.cancellation_cleanup {
        let mut cleanup = cleanup.clone();
        cleanup.remove("cleanup_deadline_at_ms");
        payload["cancellation_cleanup"] = Value::Object(cleanup);
    }
    for (name, value) in [
        ("start_to_close_timeout", descriptor.start_to_close_timeout),
        (
            "schedule_to_close_timeout",
            descriptor.schedule_to_close_timeout,
        ),
        ("heartbeat_timeout", descriptor.heartbeat_timeout),
    ] {
        if let Some(value) = value {
            payload[name] = value.into();
        }
    }
    append_event(conn, run, EventType::ActivityScheduled, &payload, true)?;
    bump(conn, run, Pending::Activity, 1)?;
    Ok(payload)
}

/// The local cancellation policies a descriptor may name (what discovery
/// advertises as `prepared_local_activity_cancellation_policies`); `abandon`
/// is not one: a local callback cannot outlive its workflow task's claim.
pub const LOCAL_CANCELLATION_POLICIES: [&str; 2] = ["try_cancel", "wait_cancellation_completed"];

/// Whether a delivery at this call waits for its running attempt's stop.
pub(crate) fn waits_for_stop(descriptor: &LocalDescriptor) -> bool {
    descriptor.cancellation_policy.as_deref() == Some("wait_cancellation_completed")
}

/// The cleanup deadline of a cleanup call (ms), from its resolved authority.
pub(crate) fn cleanup_deadline_ms(descriptor: &LocalDescriptor) -> Option<i64> {
    descriptor
        .cancellation_cleanup
        .as_ref()?
        .get("cleanup_deadline_at_ms")?
        .as_i64()
}

/// Deletes the run's rows (its close).
pub(crate) fn delete_run(conn: &Connection, run: RunId) -> Result<(), Error> {
    for sql in [
        "DELETE FROM prepared_local_activities WHERE run_id = ?1",
        "DELETE FROM prepared_local_checkpoints WHERE run_id = ?1",
    ] {
        conn.execute_queued(sql, [run.0])?;
    }
    Ok(())
}

/// The workflow-task claim delivering a cooperative cancellation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeliveringClaim<'a> {
    /// The workflow task.
    pub(crate) task_id: i64,
    /// Its attempt.
    pub(crate) attempt: u64,
    /// Its lease owner.
    pub(crate) lease_owner: &'a str,
}

/// What a cooperative cancellation delivered at the calls `sequences` of
/// `run` does to their prepared local activities that have no outcome:
/// `true` (nothing written) when the delivery must wait, because an
/// attempt whose policy is `wait_cancellation_completed` runs on the
/// delivering claim and its worker has not acknowledged its callback's
/// stop. Otherwise every such call is fenced (`stopped`: no outcome of it is
/// recorded any more, and it no longer counts as pending), whatever its
/// policy: a `try_cancel` attempt stops without waiting, and an attempt of
/// a lost claim can never acknowledge (its claim is gone) and ends with its
/// callback's stop unknown, as a recovery would end it.
pub(crate) fn stop_for_delivery(
    conn: &Connection,
    run: RunId,
    sequences: std::ops::Range<i64>,
    claim: DeliveringClaim<'_>,
) -> Result<bool, Error> {
    type Row = (
        i64,
        String,
        String,
        Option<i64>,
        Option<i64>,
        Option<String>,
    );
    let rows: Vec<Row> = conn
        .prepare_cached(
            "SELECT sequence, status, descriptor, workflow_task_id, workflow_task_attempt, \
             lease_owner FROM prepared_local_activities WHERE run_id = ?1 AND sequence >= ?2 \
             AND sequence < ?3 AND status IN ('scheduled', 'started', 'retry_scheduled')",
        )?
        .query_map(params![run.0, sequences.start, sequences.end], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    let attempt = i64::try_from(claim.attempt).unwrap_or(i64::MAX);
    for (_, status, descriptor, task, task_attempt, owner) in &rows {
        let descriptor: LocalDescriptor = serde_json::from_str(descriptor)?;
        let on_this_claim = *task == Some(claim.task_id)
            && *task_attempt == Some(attempt)
            && owner.as_deref() == Some(claim.lease_owner);
        if status == "started" && on_this_claim && waits_for_stop(&descriptor) {
            return Ok(true);
        }
    }
    for (sequence, ..) in &rows {
        conn.prepare_cached(
            "UPDATE prepared_local_activities SET status = 'stopped' \
             WHERE run_id = ?1 AND sequence = ?2",
        )?
        .execute(params![run.0, sequence])?;
        bump(conn, run, Pending::Activity, -1)?;
    }
    Ok(false)
}
