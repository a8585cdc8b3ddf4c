//! Input message streams on the control plane:
//! `POST /api/workflows/{id}/message-streams/{stream}/messages` (the Rust
//! SDK's `append_message_stream`, the Python SDK's `append_message`), and
//! the checks of the `message_stream_cursors` / `message_stream_waits`
//! metadata a workflow-task completion carries (the cursors are recorded:
//! continue-as-new carries each stream on from its cursor).
//!
//! A message reaches workflow code as a signal of the reserved name
//! [`MESSAGE_STREAM_SIGNAL`] (see `store::message_streams`): the store
//! admits it under the run's signal limits and pairs it with an open wait,
//! and the run gets a workflow task, exactly as for a signal. The server
//! checks the completion metadata's shape and that no position passes the
//! stream's last, keeps each stream's cursor (what the workflow consumed)
//! and delivers every message anyway.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::error::finish_with;
use crate::server::wire::{self, Checks};
use crate::server::{ApiError, Engine};
use crate::store::message_streams::{MessageAppend, MESSAGE_STREAM_SIGNAL};
use crate::store::{Error as StoreError, RunId, TaskKind};

/// The longest stream name both SDKs accept.
pub const MAX_STREAM_NAME_CHARS: usize = 128;
/// The longest message id (like a caller's request id).
pub const MAX_MESSAGE_ID_CHARS: usize = dwpolicy::boundary::MAX_REQUEST_ID_CHARS;
/// How many streams one completion's metadata may name per list (both
/// SDKs send one entry per stream the workflow opened).
pub const MAX_COMPLETION_STREAMS: usize = 1_000;

/// An append's body.
#[derive(Debug, Deserialize, Default)]
pub struct MessageBody {
    /// The message's id: a retry with the same id (and input) is answered
    /// with the first append's position and adds nothing.
    #[serde(default)]
    pub message_id: Option<String>,
    /// Its arguments (an opaque payload envelope); absent is an empty list.
    #[serde(default)]
    pub input: Value,
}

/// Whether `name` is a stream name both SDKs accept: 1 to 128 letters,
/// digits, `.`, `_`, `:` or `-`.
pub fn valid_stream_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_STREAM_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

fn check_stream_name(checks: &mut Checks, field: &str, name: &str) {
    if !valid_stream_name(name) {
        checks.problem(
            field,
            format!(
                "The {field} must be 1 to {MAX_STREAM_NAME_CHARS} letters, digits, '.', '_', ':' or '-'."
            ),
        );
    }
}

impl Engine {
    /// `POST …/message-streams/{stream}/messages`: 202 with the message's
    /// position once it is in the run's history; a retry with the same
    /// `message_id` answers the first append (`retained: true`).
    pub fn append_message_stream(
        &self,
        namespace: &str,
        workflow_id: &str,
        stream_name: &str,
        body: MessageBody,
    ) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id);
        let mut checks = Checks::default();
        check_stream_name(&mut checks, "stream_name", stream_name);
        let message_id = body.message_id.unwrap_or_default();
        if message_id.is_empty() {
            checks.problem(
                "message_id",
                "The message_id field is required: a non-empty id that makes a retried append idempotent.",
            );
        }
        v.identifier("message_id", &message_id, MAX_MESSAGE_ID_CHARS);
        if !(body.input.is_null() || body.input.is_object()) {
            checks.problem(
                "input",
                "The input must be a payload envelope object ({codec, blob}) or absent.",
            );
        }
        checks.inline_payload("input", &body.input);
        finish_with(v, &[], &checks.problems)?;
        self.verify_payload_references(namespace, &[("input", &body.input)])?;
        let _slot = self.admit_namespace(namespace)?;
        let run = self.target(namespace, workflow_id, None)?;
        let (stream, id, input) = (stream_name.to_owned(), message_id.clone(), body.input);
        let (appended, task_queue) = self
            .write(move |store| {
                let appended = store.append_message(run, &stream, &id, &input)?;
                if matches!(appended, MessageAppend::Appended { .. }) {
                    store.enqueue_workflow_task(run)?;
                }
                Ok((appended, store.run(run)?.task_queue))
            })
            .map_err(|e| closed(e, run))?;
        let (position, signal_id, retained) = match appended {
            MessageAppend::Rejected(rejection) => return Err(ApiError::Structural(rejection)),
            MessageAppend::Conflict { position } => {
                return Err(ApiError::ServiceCatalog {
                    status: 409,
                    reason: "message_id_conflict",
                    message: format!(
                        "Message {message_id:?} of stream {stream_name:?} was appended before (position {position}) with another input; use a new message_id for a new message."
                    ),
                    details: json!({ "workflow_id": workflow_id, "stream_name": stream_name,
                                     "message_id": message_id, "position": position }),
                })
            }
            MessageAppend::Duplicate {
                position,
                signal_id,
            } => (position, signal_id, true),
            MessageAppend::Appended {
                position,
                signal_id,
            } => {
                self.wake(namespace, &task_queue, TaskKind::Workflow.as_str());
                (position, signal_id, false)
            }
        };
        Ok(json!({
            "workflow_id": workflow_id, "run_id": wire::run_id(run),
            "stream_name": stream_name, "message_id": message_id, "position": position,
            "signal_id": signal_id.to_string(), "outcome": "message_appended",
            "command_status": "accepted", "retained": retained,
        }))
    }

    /// Checks a completion's `message_stream_cursors` (`stream_name`,
    /// `through_position`) and `message_stream_waits` (`stream_name`,
    /// `after_position`): objects with a valid stream name and a position
    /// from 0 to the stream's last; each problem is named by its field.
    /// Returns the cursors, which the completion records.
    pub(crate) fn check_message_stream_metadata(
        &self,
        run: RunId,
        cursors: Option<&Value>,
        waits: Option<&Value>,
    ) -> Result<Vec<(String, i64)>, ApiError> {
        let mut checks = Checks::default();
        let mut named = Vec::new();
        let mut consumed = Vec::new();
        for (list, key, value) in [
            ("message_stream_cursors", "through_position", cursors),
            ("message_stream_waits", "after_position", waits),
        ] {
            let Some(value) = value.filter(|v| !v.is_null()) else {
                continue;
            };
            let Some(entries) = value.as_array() else {
                checks.problem(list, format!("The {list} field must be a list."));
                continue;
            };
            if entries.len() > MAX_COMPLETION_STREAMS {
                checks.problem(
                    list,
                    format!("The {list} field may name at most {MAX_COMPLETION_STREAMS} streams."),
                );
                continue;
            }
            for (i, entry) in entries.iter().enumerate() {
                let field = format!("{list}.{i}");
                let name = entry.get("stream_name").and_then(Value::as_str);
                match name {
                    Some(name) => {
                        check_stream_name(&mut checks, &format!("{field}.stream_name"), name)
                    }
                    None => {
                        checks.problem(
                            &format!("{field}.stream_name"),
                            "The stream_name field is required (a string).",
                        );
                    }
                }
                match entry.get(key).and_then(Value::as_i64) {
                    Some(position) if position >= 0 => {
                        if let Some(name) = name.filter(|n| valid_stream_name(n)) {
                            named.push((format!("{field}.{key}"), name.to_owned(), position));
                            if key == "through_position" {
                                consumed.push((name.to_owned(), position));
                            }
                        }
                    }
                    _ => {
                        checks.problem(
                            &format!("{field}.{key}"),
                            format!("The {key} field is required: an integer of at least 0."),
                        );
                    }
                }
            }
        }
        if !named.is_empty() {
            let lasts = self.read(move |s| {
                named
                    .into_iter()
                    .map(|(field, name, position)| {
                        Ok((field, position, s.message_stream_position(run, &name)?))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()
            })?;
            for (field, position, last) in lasts {
                if position > last {
                    checks.problem(
                        &field,
                        format!(
                            "The position {position} is past the stream's last message ({last})."
                        ),
                    );
                }
            }
        }
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        Ok(consumed)
    }
}

/// Whether a client signal uses the name reserved for stream deliveries.
pub fn reserved_signal(name: &str) -> bool {
    name == MESSAGE_STREAM_SIGNAL
}

fn closed(e: StoreError, run: RunId) -> ApiError {
    match e {
        StoreError::RunNotActive { status, .. } => ApiError::RunClosed {
            operation: "message_stream_append",
            run_id: wire::run_id(run),
            status: status.as_str().to_owned(),
        },
        other => other.into(),
    }
}
