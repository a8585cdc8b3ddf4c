//! Durable selection: the one winner of a `select` group, recorded by the
//! server as a `SelectionResolved` event in the same transaction as the
//! terminal event that made the winning member terminal.
//!
//! Both SDKs send a selection's members as ordinary commands (activities,
//! timers, children, signal waits) whose group metadata says
//! `parallel_group_mode: select`, with the member's key, index, first leaf
//! and size. Their replay refuses to pick a winner itself: it waits for the
//! server's marker, then checks every field of it against the history (the
//! member's durable identity, the id and type of the event that resolved
//! it). A member completes when every leaf has its success event, and fails
//! at its first failure event; the first member to do either wins, and no
//! later event changes that.
//!
//! This module only reads: [`resolution`] returns the marker to append, and
//! `rows::append_event` (its only caller) appends it.

use crate::store::db::{params, Connection, OptionalExtension};
use crate::store::error::Error;
use crate::store::model::{EventType, RunId};
use serde_json::{json, Map, Value};

/// Events that end a member's leaf with a failure (the SDKs' list).
const FAILURE_TYPES: [&str; 6] = [
    "ActivityFailed",
    "ActivityCancelled",
    "ActivityTimedOut",
    "ChildRunFailed",
    "ChildRunCancelled",
    "ChildRunTerminated",
];

/// Events that end a member's leaf with a success (the SDKs' list).
const SUCCESS_TYPES: [&str; 6] = [
    "ActivityCompleted",
    "ChildRunCompleted",
    "TimerFired",
    "SignalApplied",
    "ConditionWaitSatisfied",
    "ConditionWaitTimedOut",
];

/// The selection group a member's event names: its outermost `select`
/// entry (the SDKs put the selection first in a leaf's group path).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Member {
    pub group_id: String,
    pub group_base: i64,
    pub group_size: i64,
    pub key: Value,
    pub index: i64,
    pub base: i64,
    pub size: i64,
    pub kind: String,
}

impl Member {
    /// The selection member an event's group metadata names, if any.
    pub(crate) fn of(payload: &Value) -> Option<Member> {
        let entry = payload
            .get("parallel_group_path")
            .and_then(Value::as_array)
            .and_then(|path| {
                path.iter()
                    .find(|e| e["parallel_group_mode"].as_str() == Some("select"))
            })
            .or_else(|| {
                (payload["parallel_group_mode"].as_str() == Some("select")).then_some(payload)
            })?;
        let int = |name: &str| entry.get(name).and_then(Value::as_i64);
        let key = entry.get("selection_member_key").filter(|k| !k.is_null())?;
        Some(Member {
            group_id: entry["parallel_group_id"].as_str()?.to_owned(),
            group_base: int("parallel_group_base_sequence")?,
            group_size: int("parallel_group_size")?,
            key: key.clone(),
            index: int("selection_member_index")?,
            base: int("selection_member_base_sequence")?,
            size: int("selection_member_size").filter(|s| *s > 0)?,
            kind: entry["selection_member_kind"].as_str()?.to_owned(),
        })
    }

    fn contains(&self, sequence: i64) -> bool {
        sequence >= self.base && sequence - self.base < self.size
    }
}

/// One stored event of the group's window.
struct Stored {
    position: i64,
    event_type: String,
    payload: Value,
}

/// The events of `run` from the group's first scheduling command on (the
/// group's window; the history before it cannot name the group).
fn window(conn: &Connection, run: RunId, group_base: i64) -> Result<Vec<Stored>, Error> {
    // A command's index is its workflow sequence minus one.
    let start: i64 = conn
        .prepare_cached(
            "SELECT sequence FROM history_events WHERE run_id = ?1 AND command_index = ?2",
        )?
        .query_row(params![run.0, group_base - 1], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let mut statement = conn.prepare_cached(
        "SELECT sequence, event_type, payload FROM history_events \
         WHERE run_id = ?1 AND sequence >= ?2 ORDER BY sequence",
    )?;
    let rows = statement.query_map(params![run.0, start], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    let mut events = Vec::new();
    for row in rows {
        let (position, event_type, text) = row?;
        events.push(Stored {
            position,
            event_type,
            payload: serde_json::from_str(&text)?,
        });
    }
    Ok(events)
}

/// The wire id of the event at `position` (the protocol numbers from 1).
pub(crate) fn wire_event_id(position: i64) -> String {
    (position + 1).to_string()
}

/// The durable identity of a member: the field its first leaf's events
/// carry for its kind (`group:<base>:<size>` for a nested group).
fn identity(events: &[Stored], member: &Member) -> Option<String> {
    if member.kind == "group" {
        return Some(format!("group:{}:{}", member.base, member.size));
    }
    let field = match member.kind.as_str() {
        "activity" => "activity_execution_id",
        "child" => "child_workflow_run_id",
        "timer" => "timer_id",
        "signal" => "signal_wait_id",
        "condition" => "condition_wait_id",
        _ => return None,
    };
    (member.base..member.base + member.size).find_map(|sequence| {
        events
            .iter()
            .filter(|e| e.payload["sequence"].as_i64() == Some(sequence))
            .find_map(|e| e.payload[field].as_str().filter(|s| !s.is_empty()))
            .map(str::to_owned)
    })
}

/// The `SelectionResolved` payload to append after the event just written
/// at `position`, when that event made its selection member the group's
/// winner: the group has no winner yet, and the member has failed or every
/// one of its leaves has completed.
pub(crate) fn resolution(
    conn: &Connection,
    run: RunId,
    event_type: EventType,
    payload: &Value,
) -> Result<Option<Value>, Error> {
    let name = event_type.as_str();
    if !FAILURE_TYPES.contains(&name) && !SUCCESS_TYPES.contains(&name) {
        return Ok(None);
    }
    let Some(member) = Member::of(payload) else {
        return Ok(None);
    };
    let events = window(conn, run, member.group_base)?;
    let resolved = events.iter().any(|e| {
        e.event_type == EventType::SelectionResolved.as_str()
            && e.payload["selection_group_id"].as_str() == Some(member.group_id.as_str())
    });
    if resolved {
        return Ok(None);
    }
    let in_member = |e: &&Stored| {
        e.payload["sequence"]
            .as_i64()
            .is_some_and(|s| member.contains(s))
    };
    let failed = events
        .iter()
        .filter(in_member)
        .find(|e| FAILURE_TYPES.contains(&e.event_type.as_str()));
    let (outcome, resolving) = match failed {
        Some(first_failure) => ("failed", first_failure),
        None => {
            let successes: Vec<&Stored> = events
                .iter()
                .filter(in_member)
                .filter(|e| SUCCESS_TYPES.contains(&e.event_type.as_str()))
                .collect();
            let every_leaf = (member.base..member.base + member.size).all(|sequence| {
                successes
                    .iter()
                    .any(|e| e.payload["sequence"].as_i64() == Some(sequence))
            });
            match successes.last() {
                Some(last) if every_leaf => ("completed", *last),
                _ => return Ok(None),
            }
        }
    };
    let Some(operation_identity) = identity(&events, &member) else {
        return Ok(None);
    };
    let mut marker = Map::new();
    marker.insert("selection_group_id".into(), member.group_id.clone().into());
    marker.insert(
        "selection_group_base_sequence".into(),
        member.group_base.into(),
    );
    marker.insert("selection_group_size".into(), member.group_size.into());
    marker.insert("member_key".into(), member.key.clone());
    marker.insert("member_index".into(), member.index.into());
    marker.insert("member_base_sequence".into(), member.base.into());
    marker.insert("member_size".into(), member.size.into());
    marker.insert("operation_kind".into(), member.kind.clone().into());
    marker.insert("operation_identity".into(), operation_identity.into());
    marker.insert("outcome".into(), outcome.into());
    marker.insert(
        "resolution_event_id".into(),
        wire_event_id(resolving.position).into(),
    );
    marker.insert(
        "resolution_event_type".into(),
        resolving.event_type.clone().into(),
    );
    Ok(Some(Value::Object(marker)))
}

/// What `cancel_selection_operation` may cancel: the member of a resolved
/// group whose fields match the command's, with its durable identity, its
/// leaves' events, and whether it already reached a terminal state (then
/// cancellation lost the race and nothing is recorded).
pub(crate) struct Target {
    /// The `SelectionOperationCancelled` payload (without `cancelled_at`).
    pub marker: Value,
    /// Already cancelled once (the command repeated): nothing to do.
    pub already_cancelled: bool,
    /// The member is already terminal: nothing to cancel.
    pub terminal: bool,
}

/// Checks a `cancel_selection_operation` command against the run's history.
/// `Err` names the first field that matches nothing the run recorded.
pub(crate) fn cancellation_target(
    conn: &Connection,
    run: RunId,
    command: &Map<String, Value>,
) -> Result<Result<Target, String>, Error> {
    let text = |name: &str| command.get(name).and_then(Value::as_str).unwrap_or("");
    let int = |name: &str| command.get(name).and_then(Value::as_i64);
    let group_id = text("selection_group_id");
    // `select-calls:<base>:<size>`: the group's first sequence.
    let Some(group_base) = group_id
        .split(':')
        .nth(1)
        .and_then(|b| b.parse::<i64>().ok())
        .filter(|b| *b > 0)
    else {
        return Ok(Err(format!(
            "selection_group_id {group_id:?} names no selection group of this run"
        )));
    };
    let events = window(conn, run, group_base)?;
    let resolved = events.iter().any(|e| {
        e.event_type == EventType::SelectionResolved.as_str()
            && e.payload["selection_group_id"].as_str() == Some(group_id)
    });
    if !resolved {
        return Ok(Err(format!(
            "selection_group_id {group_id:?} has no recorded winner yet; only a resolved \
             selection's members can be cancelled"
        )));
    }
    let Some(base) = int("member_base_sequence") else {
        return Ok(Err("member_base_sequence must be an integer".into()));
    };
    let member = events
        .iter()
        .filter(|e| e.payload["sequence"].as_i64() == Some(base))
        .find_map(|e| Member::of(&e.payload))
        .filter(|m| m.group_id == group_id);
    let Some(member) = member else {
        return Ok(Err(format!(
            "member_base_sequence {base} is no member of selection group {group_id:?}"
        )));
    };
    for (field, matches) in [
        ("member_key", command.get("member_key") == Some(&member.key)),
        ("member_index", int("member_index") == Some(member.index)),
        ("member_size", int("member_size") == Some(member.size)),
        ("operation_kind", text("operation_kind") == member.kind),
        (
            "operation_identity",
            identity(&events, &member).as_deref() == Some(text("operation_identity")),
        ),
    ] {
        if !matches {
            return Ok(Err(format!(
                "{field} does not match the recorded member at sequence {base} of {group_id:?}"
            )));
        }
    }
    let already_cancelled = events.iter().any(|e| {
        e.event_type == EventType::SelectionOperationCancelled.as_str()
            && e.payload["selection_group_id"].as_str() == Some(group_id)
            && e.payload["member_base_sequence"].as_i64() == Some(base)
    });
    let leaf_terminal = |sequence: i64| {
        events.iter().any(|e| {
            e.payload["sequence"].as_i64() == Some(sequence)
                && (SUCCESS_TYPES.contains(&e.event_type.as_str())
                    || FAILURE_TYPES.contains(&e.event_type.as_str()))
        })
    };
    let any_failed = events.iter().any(|e| {
        e.payload["sequence"]
            .as_i64()
            .is_some_and(|s| member.contains(s))
            && FAILURE_TYPES.contains(&e.event_type.as_str())
    });
    let terminal = any_failed || (member.base..member.base + member.size).all(leaf_terminal);
    let marker = json!({
        "selection_group_id": group_id,
        "member_key": member.key,
        "member_index": member.index,
        "member_base_sequence": member.base,
        "member_size": member.size,
        "operation_kind": member.kind,
        "operation_identity": text("operation_identity"),
    });
    Ok(Ok(Target {
        marker,
        already_cancelled,
        terminal,
    }))
}

/// The leaves of a member still open: the sequences in its range with no
/// terminal event.
pub(crate) fn open_leaves(
    conn: &Connection,
    run: RunId,
    group_base: i64,
    base: i64,
    size: i64,
) -> Result<Vec<i64>, Error> {
    let events = window(conn, run, group_base)?;
    Ok((base..base + size)
        .filter(|sequence| {
            !events.iter().any(|e| {
                e.payload["sequence"].as_i64() == Some(*sequence)
                    && (SUCCESS_TYPES.contains(&e.event_type.as_str())
                        || FAILURE_TYPES.contains(&e.event_type.as_str()))
            })
        })
        .collect())
}
