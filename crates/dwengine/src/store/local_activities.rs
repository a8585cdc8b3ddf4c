//! Local activities: the workflow worker runs the activity inline, with its
//! own retries, and reports the outcome in the same completion as a
//! `record_local_activity` command.
//!
//! The server never dispatches it: no activity row, no task, no pending
//! count. It records the call as a marker, an `ActivityScheduled` event and
//! its terminal event at one workflow `sequence`, both marked
//! `execution_mode: "local"`, and replay answers the call from them without
//! running the activity again. The attempts the worker reports are counted
//! (`attempt_number`), not copied: their heartbeat reports would grow the
//! history with every retry.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::store::model::EventType;
use crate::store::protocol::{codec_of, ParallelGroup};

/// A local activity's reported outcome, as the SDK sends it.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct LocalOutcome {
    /// `completed`, `failed` or `timed_out`.
    #[serde(default)]
    pub outcome: String,
    /// The result (an opaque payload envelope) when completed.
    #[serde(default)]
    pub result: Value,
    /// Why the last attempt failed.
    #[serde(default)]
    pub message: Option<String>,
    /// The failure's short type.
    #[serde(default)]
    pub exception_type: Option<String>,
    /// Whether a retry could have helped.
    #[serde(default)]
    pub non_retryable: bool,
    /// Which timeout passed (`start_to_close`, `schedule_to_close`, `heartbeat`).
    #[serde(default)]
    pub timeout_kind: Option<String>,
    /// The worker's report of each attempt (only counted here).
    #[serde(default)]
    pub attempts: Vec<Value>,
}

/// The two events of one local activity: its `ActivityScheduled` marker
/// and its terminal event.
pub(crate) fn events(
    sequence: i64,
    activity_type: &str,
    arguments: &Value,
    group: &ParallelGroup,
    reported: &LocalOutcome,
) -> [(EventType, Value); 2] {
    let marker = |mut payload: Value| {
        payload["sequence"] = sequence.into();
        payload["activity_type"] = activity_type.into();
        payload["execution_mode"] = "local".into();
        payload["local_activity"] = true.into();
        group.stamp(&mut payload);
        payload
    };
    let scheduled = marker(json!({
        "arguments": arguments,
        "payload_codec": codec_of(arguments),
    }));
    let attempts = reported.attempts.len().max(1);
    let message = reported.message.clone().unwrap_or_default();
    let terminal = match reported.outcome.as_str() {
        "completed" => (
            EventType::ActivityCompleted,
            marker(json!({
                "result": reported.result,
                "payload_codec": codec_of(&reported.result),
                "attempt_number": attempts,
            })),
        ),
        "timed_out" => (
            EventType::ActivityTimedOut,
            marker(json!({
                "message": message,
                "exception_class": reported.exception_type,
                "timeout_kind": reported.timeout_kind,
                "failure_category": "timeout",
                "attempt_number": attempts,
            })),
        ),
        _ => (
            EventType::ActivityFailed,
            marker(json!({
                "message": message,
                "exception_type": reported.exception_type,
                "non_retryable": reported.non_retryable,
                "failure_category": "application",
                "attempt_number": attempts,
            })),
        ),
    };
    [(EventType::ActivityScheduled, scheduled), terminal]
}
