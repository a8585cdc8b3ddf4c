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
        conn.prepare_cached(sql)?.execute([run.0])?;
    }
    Ok(())
}
