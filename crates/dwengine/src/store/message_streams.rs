//! Input message streams: the messages a client appends to a workflow's
//! named stream (`POST /api/workflows/{id}/message-streams/{name}/messages`)
//! and workflow code reads with the SDKs' `ctx.message_stream(name)`.
//!
//! Both SDKs receive a message as a signal of the reserved name
//! [`MESSAGE_STREAM_SIGNAL`] whose one argument is the delivery record
//! (`schema`, `stream_name`, `message_id`, `position`, `payload_envelope`)
//! in the run's Avro payload codec; they order a stream by `position` and
//! drop what their cursor already passed. So an append is a signal
//! admission (the same `pending_signal_count` limit, pending-payload budget,
//! `SignalReceived` event and pairing with an open `open_signal_wait`) plus
//! a row here that gives the message the next position of its stream and
//! makes a retried append with the same message id answer the first one.

use crate::store::db::{params, OptionalExtension};
use serde_json::{json, Value};

use crate::store::admission::{Admission, Rejection, SignalRequest};
use crate::store::avro_value;
use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::load_head;
use crate::store::tx::WriteTx;

/// The signal name that carries message-stream deliveries (reserved: a
/// client signal of this name is refused).
pub const MESSAGE_STREAM_SIGNAL: &str = "__durable_workflow_message_stream";
/// The `schema` of a delivered message.
pub const MESSAGE_SCHEMA: &str = "durable-workflow.v2.message-stream.message";

/// What an append did.
#[derive(Debug, Clone, PartialEq)]
pub enum MessageAppend {
    /// Admitted: its position in the stream and the signal that carries it.
    Appended {
        /// 1 for a stream's first message.
        position: i64,
        /// The carrying signal.
        signal_id: i64,
    },
    /// The message id was appended before with the same input: the first
    /// append's answer, nothing written.
    Duplicate {
        /// The first append's position.
        position: i64,
        /// Its signal.
        signal_id: i64,
    },
    /// The message id was appended before with another input; nothing written.
    Conflict {
        /// The first append's position.
        position: i64,
    },
    /// Refused at `pending_signal_count`; nothing written.
    Rejected(Rejection),
}

/// The delivery record a workflow receives for one message, as the signal's
/// argument list (an Avro payload envelope of `[record]`).
pub fn delivery(
    stream_name: &str,
    message_id: &str,
    position: i64,
    input: &Value,
) -> Result<Value, Error> {
    // A message without input carries an empty argument list.
    let payload = if input.is_null() {
        avro_value::encode_envelope(&json!([]))
    } else {
        Ok(input.clone())
    };
    let record = json!([{
        "schema": MESSAGE_SCHEMA,
        "stream_name": stream_name,
        "message_id": message_id,
        "position": position,
        "payload_envelope": payload.map_err(unencodable)?,
    }]);
    avro_value::encode_envelope(&record).map_err(unencodable)
}

/// The server checks an input is a payload envelope before it gets here,
/// so only nesting past the Avro depth bound can refuse it.
fn unencodable(e: avro_value::AvroError) -> Error {
    Error::Json(<serde_json::Error as serde::de::Error>::custom(format!(
        "message-stream delivery: {e}"
    )))
}

impl Store {
    /// Appends `input` as message `message_id` of `run`'s stream
    /// `stream_name`, in one transaction with its signal.
    pub fn append_message(
        &self,
        run: RunId,
        stream_name: &str,
        message_id: &str,
        input: &Value,
    ) -> Result<MessageAppend, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        load_head(&tx, run)?.ensure_writable()?;
        let existing: Option<(i64, i64, String)> = tx
            .prepare_cached(
                "SELECT m.position, m.signal_id, s.payload FROM message_stream_messages m \
                 JOIN signals s ON s.id = m.signal_id \
                 WHERE m.run_id = ?1 AND m.stream_name = ?2 AND m.message_id = ?3",
            )?
            .query_row(params![run.0, stream_name, message_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?;
        if let Some((position, signal_id, payload)) = existing {
            let same = serde_json::from_str::<Value>(&payload)?
                == delivery(stream_name, message_id, position, input)?;
            return Ok(if same {
                MessageAppend::Duplicate {
                    position,
                    signal_id,
                }
            } else {
                MessageAppend::Conflict { position }
            });
        }
        let last: Option<i64> = tx
            .prepare_cached(
                "SELECT MAX(position) FROM message_stream_messages \
                 WHERE run_id = ?1 AND stream_name = ?2",
            )?
            .query_row(params![run.0, stream_name], |r| r.get(0))?;
        let position = last.unwrap_or(0) + 1;
        let request = SignalRequest {
            name: MESSAGE_STREAM_SIGNAL.to_owned(),
            payload: delivery(stream_name, message_id, position, input)?,
            request_id: None,
        };
        let signal_id = match self.signal(run, request)? {
            Admission::Rejected(rejection) => return Ok(MessageAppend::Rejected(rejection)),
            Admission::Accepted { id, .. } => id,
        };
        tx.prepare_cached(
            "INSERT INTO message_stream_messages \
             (run_id, stream_name, position, message_id, signal_id) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![run.0, stream_name, position, message_id, signal_id])?;
        tx.commit()?;
        Ok(MessageAppend::Appended {
            position,
            signal_id,
        })
    }

    /// The last position of `run`'s stream `stream_name` (0 while empty).
    pub fn message_stream_position(&self, run: RunId, stream_name: &str) -> Result<i64, Error> {
        let last: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT MAX(position) FROM message_stream_messages \
                 WHERE run_id = ?1 AND stream_name = ?2",
            )?
            .query_row(params![run.0, stream_name], |r| r.get(0))?;
        Ok(last.unwrap_or(0))
    }
}
