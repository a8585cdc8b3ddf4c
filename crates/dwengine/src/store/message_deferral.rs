//! Which admitted signals are message-stream deliveries to hold until a
//! workflow task of their run completes. Signal admission
//! (`store::admission`) asks this before it records a signal, and message
//! streams (`store::message_streams`) build on admission, so the question
//! and the reserved signal name live here, below both, rather than in
//! message streams (an import circle).

use serde_json::Value;

use crate::store::db::{params, Connection};
use crate::store::error::Error;
use crate::store::model::RunId;

/// The signal name that carries message-stream deliveries (reserved: a
/// client signal of this name is refused).
pub const MESSAGE_STREAM_SIGNAL: &str = "__durable_workflow_message_stream";

/// Whether signal `signal` of `run`, just admitted with `event`, is a
/// message to hold until a workflow task of `run` completes: the run has
/// not completed one yet (no command recorded), or its carried messages are
/// still held. Then it is held with the same marker and released after them
/// by `message_streams::release_carried`, in position order, so the run's code reads it by
/// waiting for it, never as a delivery recorded before its first wait.
/// Otherwise nothing is written and the caller records the signal as usual.
pub(crate) fn defer_message(
    conn: &Connection,
    run: RunId,
    signal: i64,
    name: &str,
    event: &Value,
) -> Result<bool, Error> {
    if name != MESSAGE_STREAM_SIGNAL {
        return Ok(false);
    }
    let defer: bool = conn
        .prepare_cached(
            "SELECT command_count = 0 OR EXISTS (SELECT 1 FROM signals WHERE run_id = ?1 \
             AND held_event IS NOT NULL \
             AND json_extract(held_event, '$.message_stream_deferred') IS NOT NULL) \
             FROM runs WHERE id = ?1",
        )?
        .query_row([run.0], |r| r.get(0))?;
    if defer {
        let mut event = event.clone();
        event["message_stream_deferred"] = true.into();
        conn.prepare_cached("UPDATE signals SET held_event = ?2 WHERE id = ?1")?
            .execute(params![signal, serde_json::to_string(&event)?])?;
    }
    Ok(defer)
}
