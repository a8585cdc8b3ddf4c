//! Signal waits of the wire protocol: a workflow's `wait_signal(name)` is an
//! `open_signal_wait` command that blocks until a signal of that name is
//! applied to it.
//!
//! A signal satisfies at most one wait, and a wait takes the oldest signal of
//! its name that no wait took yet, whether it arrived before the wait opened
//! (buffered) or after. Either way the pairing is written once, as a
//! `SignalApplied` event at the wait's workflow `sequence` carrying the
//! signal's value: replay reads the value from history, never from the
//! signal row. Every function runs inside the caller's transaction.

use crate::store::db::{params, Connection, OptionalExtension};
use serde_json::{json, Value};

use crate::store::error::Error;
use crate::store::model::{EventType, RunId};
use crate::store::protocol::{codec_of, ParallelGroup};
use crate::store::rows::append_event;

/// The id every event of one wait carries.
fn wait_id(run: RunId, sequence: i64) -> String {
    format!("signal-wait:{}:{sequence}", run.0)
}

/// Records a newly opened wait; returns the payload of its
/// `SignalWaitOpened` event, which the caller writes as the command's event.
pub(crate) fn open(
    conn: &Connection,
    run: RunId,
    sequence: i64,
    signal_name: &str,
    group: &ParallelGroup,
) -> Result<Value, Error> {
    let group_text = group
        .parallel_group_id
        .is_some()
        .then(|| serde_json::to_string(group))
        .transpose()?;
    conn.prepare_cached(
        "INSERT INTO signal_waits (run_id, sequence, signal_name, parallel_group) \
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![run.0, sequence, signal_name, group_text])?;
    let mut opened = json!({
        "sequence": sequence,
        "signal_name": signal_name,
        "signal_wait_id": wait_id(run, sequence),
    });
    group.stamp(&mut opened);
    Ok(opened)
}

/// Applies the oldest signal no wait took yet to the wait opened at
/// `sequence`; `true` when there was one (the workflow needs a task to see it).
pub(crate) fn apply_buffered(conn: &Connection, run: RunId, sequence: i64) -> Result<bool, Error> {
    let Some(wait) = wait_row(conn, run, sequence)? else {
        return Ok(false);
    };
    let buffered: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT id, payload FROM signals WHERE run_id = ?1 AND name = ?2 \
             AND wait_sequence IS NULL AND held_event IS NULL ORDER BY id LIMIT 1",
        )?
        .query_row(params![run.0, wait.signal_name], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    match buffered {
        Some((signal, payload)) => apply(conn, run, &wait, signal, &payload).map(|()| true),
        None => Ok(false),
    }
}

/// Applies a just-admitted signal to the oldest open wait of its name;
/// `true` when one took it.
pub(crate) fn apply_arrived(
    conn: &Connection,
    run: RunId,
    signal: i64,
    signal_name: &str,
    payload: &str,
) -> Result<bool, Error> {
    let sequence: Option<i64> = conn
        .prepare_cached(
            "SELECT sequence FROM signal_waits WHERE run_id = ?1 AND signal_name = ?2 \
             AND signal_id IS NULL ORDER BY sequence LIMIT 1",
        )?
        .query_row(params![run.0, signal_name], |r| r.get(0))
        .optional()?;
    let Some(wait) = sequence
        .map(|sequence| wait_row(conn, run, sequence))
        .transpose()?
        .flatten()
    else {
        return Ok(false);
    };
    apply(conn, run, &wait, signal, payload).map(|()| true)
}

/// An open wait.
struct WaitRow {
    sequence: i64,
    signal_name: String,
    group: Option<String>,
}

fn wait_row(conn: &Connection, run: RunId, sequence: i64) -> Result<Option<WaitRow>, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT signal_name, parallel_group FROM signal_waits \
             WHERE run_id = ?1 AND sequence = ?2 AND signal_id IS NULL",
        )?
        .query_row(params![run.0, sequence], |r| {
            Ok(WaitRow {
                sequence,
                signal_name: r.get(0)?,
                group: r.get(1)?,
            })
        })
        .optional()?)
}

/// Pairs `signal` with `wait` and writes the `SignalApplied` event.
fn apply(
    conn: &Connection,
    run: RunId,
    wait: &WaitRow,
    signal: i64,
    payload: &str,
) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE signal_waits SET signal_id = ?3 WHERE run_id = ?1 AND sequence = ?2",
    )?
    .execute(params![run.0, wait.sequence, signal])?;
    conn.prepare_cached("UPDATE signals SET wait_sequence = ?2 WHERE id = ?1")?
        .execute(params![signal, wait.sequence])?;
    let value: Value = serde_json::from_str(payload)?;
    let mut applied = json!({
        "sequence": wait.sequence,
        "signal_name": wait.signal_name,
        "signal_wait_id": wait_id(run, wait.sequence),
        "signal_id": signal.to_string(),
        "value": value,
        "payload_codec": codec_of(&value),
    });
    if let Some(group) = &wait.group {
        let group: ParallelGroup = serde_json::from_str(group)?;
        group.stamp(&mut applied);
    }
    append_event(conn, run, EventType::SignalApplied, &applied, false)?;
    Ok(())
}
