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

use crate::store::db::{params, Connection, OptionalExtension};
use serde_json::{json, Value};

use crate::store::admission::{Admission, Rejection, SignalRequest};
use crate::store::avro_value;
use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId};
use crate::store::protocol::codec_of;
use crate::store::rows::{append_event, bump, load_head, now_ms, to_i64, Pending};
use crate::store::tx::WriteTx;

pub use crate::store::message_deferral::MESSAGE_STREAM_SIGNAL;
/// The `schema` of a delivered message.
pub const MESSAGE_SCHEMA: &str = "durable-workflow.v2.message-stream.message";
/// The `schema` of a cursor checkpoint (a continued run's starting cursor).
pub const CURSOR_SCHEMA: &str = "durable-workflow.v2.message-stream.cursor";

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
        let position = last_position(&tx, run, stream_name)? + 1;
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
        last_position(&self.conn, run, stream_name)
    }

    /// Records what `run`'s workflow code consumed (a completion's
    /// `message_stream_cursors`, already checked): each stream's cursor
    /// only moves forward.
    pub fn record_message_stream_cursors(
        &self,
        run: RunId,
        cursors: &[(String, i64)],
    ) -> Result<(), Error> {
        for (stream_name, through) in cursors.iter().filter(|(_, through)| *through > 0) {
            let current = cursor(&self.conn, run, stream_name)?;
            if *through > current.unwrap_or(0) {
                set_cursor(&self.conn, run, stream_name, *through, current.is_some())?;
            }
        }
        Ok(())
    }
}

/// The last position of a run's stream: its newest message, or the cursor
/// it started from when it continued another run (0 while empty).
fn last_position(conn: &Connection, run: RunId, stream_name: &str) -> Result<i64, Error> {
    let last: Option<i64> = conn
        .prepare_cached(
            "SELECT MAX(position) FROM message_stream_messages \
             WHERE run_id = ?1 AND stream_name = ?2",
        )?
        .query_row(params![run.0, stream_name], |r| r.get(0))?;
    Ok(last
        .unwrap_or(0)
        .max(cursor(conn, run, stream_name)?.unwrap_or(0)))
}

fn cursor(conn: &Connection, run: RunId, stream_name: &str) -> Result<Option<i64>, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT through_position FROM message_stream_cursors \
             WHERE run_id = ?1 AND stream_name = ?2",
        )?
        .query_row(params![run.0, stream_name], |r| r.get(0))
        .optional()?)
}

fn set_cursor(
    conn: &Connection,
    run: RunId,
    stream_name: &str,
    through: i64,
    exists: bool,
) -> Result<(), Error> {
    let sql = if exists {
        "UPDATE message_stream_cursors SET through_position = ?3 \
         WHERE run_id = ?1 AND stream_name = ?2"
    } else {
        "INSERT INTO message_stream_cursors (run_id, stream_name, through_position) \
         VALUES (?1, ?2, ?3)"
    };
    conn.prepare_cached(sql)?
        .execute(params![run.0, stream_name, through])?;
    Ok(())
}

/// The SDKs' cursor checkpoint: a delivery that moves a stream's cursor
/// without a message (both SDKs seed their cursors from it on replay).
pub fn checkpoint(stream_name: &str, through_position: i64) -> Result<Value, Error> {
    avro_value::encode_envelope(&json!([{
        "schema": CURSOR_SCHEMA,
        "stream_name": stream_name,
        "through_position": through_position,
    }]))
    .map_err(unencodable)
}

/// Carries `closing`'s input streams to `next`, the run that continues it,
/// in the continue-as-new transaction: for each stream, the cursor
/// (`message_stream_cursors` row and the SDKs' checkpoint as a
/// `SignalReceived` event) and every message past it, delivered again as a
/// signal of the new run with its position and id (its `SignalReceived`
/// held until the new run's first workflow task completes: see
/// [`release_carried`]); new appends continue after the highest position.
/// Returns how many events it wrote.
pub(crate) fn carry(conn: &Connection, closing: RunId, next: RunId) -> Result<u64, Error> {
    let streams: Vec<(String, i64)> = conn
        .prepare_cached(
            "SELECT s.stream_name, COALESCE(c.through_position, 0) FROM \
             (SELECT DISTINCT stream_name FROM message_stream_messages WHERE run_id = ?1 \
              UNION SELECT stream_name FROM message_stream_cursors WHERE run_id = ?1) s \
             LEFT JOIN message_stream_cursors c ON c.run_id = ?1 AND c.stream_name = s.stream_name \
             ORDER BY s.stream_name",
        )?
        .query_map(params![closing.0], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    let mut events = 0;
    // The checkpoints first, so every cursor is seeded before a message.
    for (stream_name, through) in &streams {
        let (stream_name, through) = (stream_name.as_str(), *through);
        if through > 0 {
            set_cursor(conn, next, stream_name, through, false)?;
            let value = checkpoint(stream_name, through)?;
            let event = json!({
                "signal_name": MESSAGE_STREAM_SIGNAL,
                "value": value,
                "payload_codec": avro_value::CODEC,
                "message_stream_checkpoint": true,
                "received_at_ms": now_ms(),
            });
            append_event(conn, next, EventType::SignalReceived, &event, false)?;
            events += 1;
        }
    }
    for (stream_name, through) in streams {
        let pending: Vec<(i64, String, String)> = conn
            .prepare_cached(
                "SELECT m.position, m.message_id, s.payload FROM message_stream_messages m \
                 JOIN signals s ON s.id = m.signal_id \
                 WHERE m.run_id = ?1 AND m.stream_name = ?2 AND m.position > ?3 \
                 ORDER BY m.position",
            )?
            .query_map(params![closing.0, stream_name, through], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        for (position, message_id, payload) in pending {
            let signal: i64 = conn
                .prepare_cached(
                    "INSERT INTO signals (run_id, name, payload, request_id, status) \
                     VALUES (?1, ?2, ?3, NULL, 'received') RETURNING id",
                )?
                .query_row(params![next.0, MESSAGE_STREAM_SIGNAL, payload], |r| {
                    r.get(0)
                })?;
            bump(conn, next, Pending::Signal, 1)?;
            conn.prepare_cached(
                "UPDATE runs SET pending_payload_bytes = pending_payload_bytes + ?2 WHERE id = ?1",
            )?
            .execute(params![next.0, to_i64(payload.len())])?;
            conn.prepare_cached(
                "INSERT INTO message_stream_messages \
                 (run_id, stream_name, position, message_id, signal_id) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![next.0, stream_name, position, message_id, signal])?;
            let value: Value = serde_json::from_str(&payload)?;
            let event = json!({
                "signal_id": signal,
                "signal_name": MESSAGE_STREAM_SIGNAL,
                "value": value,
                "payload_codec": codec_of(&value),
                "request_id": null,
                "received_at_ms": now_ms(),
                "message_stream_deferred": true,
            });
            // Held past the new run's first workflow task ([`release_carried`]).
            conn.prepare_cached("UPDATE signals SET held_event = ?2 WHERE id = ?1")?
                .execute(params![signal, serde_json::to_string(&event)?])?;
        }
    }
    Ok(events)
}

/// Writes the `SignalReceived` events of the messages [`carry`] brought
/// into `run` and of those appended before its first workflow task
/// completed ([`defer_message`]), oldest first, once a workflow task
/// of `run` has completed
/// (after its events and its held signals) or as `run` closes, and hands
/// each to an open signal wait of its name. Until then they are rows
/// without events, counted as pending: no delivery shows them, and the
/// first task's completion, seeing them unprocessed, queues the task that
/// delivers them. So the continued run reads a carried message only by
/// waiting for it: the Python SDK replays a delivery recorded before the
/// run's first wait at that wait, and a run that read carried messages
/// recorded at its start before its first wait failed that replay
/// (`condition_key_changed`). A task that fails or times out leaves them
/// held for the next. Returns how many events it wrote.
pub(crate) fn release_carried(conn: &Connection, run: RunId) -> Result<u64, Error> {
    let held: Vec<(i64, String, String)> = conn
        .prepare_cached(
            "SELECT id, payload, held_event FROM signals WHERE run_id = ?1 \
             AND held_event IS NOT NULL \
             AND json_extract(held_event, '$.message_stream_deferred') IS NOT NULL ORDER BY id",
        )?
        .query_map([run.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    for (id, payload, event) in &held {
        let event: Value = serde_json::from_str(event)?;
        conn.prepare_cached("UPDATE signals SET held_event = NULL WHERE id = ?1")?
            .execute([id])?;
        append_event(conn, run, EventType::SignalReceived, &event, false)?;
        crate::store::signal_waits::apply_arrived(conn, run, *id, MESSAGE_STREAM_SIGNAL, payload)?;
    }
    Ok(held.len() as u64)
}
