//! `cancel_selection_operation`: workflow code cancels a member of a
//! resolved selection (a loser it no longer wants) without touching its
//! siblings.
//!
//! The command names the member by every field of its recorded identity
//! (group, key, index, first leaf, size, kind, durable identity); a field
//! that matches nothing the run recorded is refused with a 422 naming it.
//! When the member is still open, a `SelectionOperationCancelled` event
//! records that cancellation won, and the member's open leaves stop: a
//! queued activity is never handed out and a running one sees
//! `cancel_requested` on its next heartbeat (its row closes as cancelled,
//! with reason `selection_operation_cancelled`; a late completion is refused as
//! already closed), a timer is cancelled, a child run is cancelled, a signal
//! wait is closed. When the member already reached a terminal state,
//! cancellation lost the race and nothing is recorded; a repeated command
//! changes nothing.

use crate::store::completion::finish_run;
use crate::store::db::{params, Connection, OptionalExtension};
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::rows::{bump, load_head, now_ms, Pending};
use crate::store::selection::{self, Target};
use crate::store::timers;
use serde_json::{json, Map, Value};

/// What applying the command did.
pub(crate) enum Cancelled {
    /// The member was open: this payload is its `SelectionOperationCancelled`
    /// event, and its open leaves were stopped.
    Recorded(Value),
    /// Already cancelled, or already terminal: nothing to do.
    Nothing,
}

/// Checks the command against the run and stops the member's open leaves.
/// `Err(Error::UnknownSelectionMember)` when a field matches nothing the
/// run recorded.
pub(crate) fn apply(
    conn: &Connection,
    run: RunId,
    command: &Map<String, Value>,
) -> Result<Cancelled, Error> {
    let target = match selection::cancellation_target(conn, run, command)? {
        Ok(target) => target,
        Err(problem) => return Err(Error::UnknownSelectionMember(problem)),
    };
    let Target {
        mut marker,
        already_cancelled,
        terminal,
    } = target;
    if already_cancelled || terminal {
        return Ok(Cancelled::Nothing);
    }
    let base = marker["member_base_sequence"].as_i64().unwrap_or(0);
    let size = marker["member_size"].as_i64().unwrap_or(0);
    let group_base = marker["selection_group_id"]
        .as_str()
        .and_then(|g| g.split(':').nth(1))
        .and_then(|b| b.parse().ok())
        .unwrap_or(base);
    for sequence in selection::open_leaves(conn, run, group_base, base, size)? {
        stop_leaf(conn, run, sequence, SELECTION_LOSER)?;
    }
    marker["cancelled_at"] = utc(now_ms()).into();
    Ok(Cancelled::Recorded(marker))
}

/// Why workflow code stopped an item: recorded on a cancelled activity's
/// row (its late report is refused as `activity_cancelled`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StopReason {
    /// The machine-readable reason.
    pub reason: &'static str,
    /// What happened.
    pub message: &'static str,
}

const SELECTION_LOSER: StopReason = StopReason {
    reason: "selection_operation_cancelled",
    message: "cancelled by the workflow: a selection member it no longer needs",
};

/// Stops whatever item the run's command `sequence` created, if it is open.
pub(crate) fn stop_leaf(
    conn: &Connection,
    run: RunId,
    sequence: i64,
    why: StopReason,
) -> Result<(), Error> {
    let reason = json!({ "message": why.message, "reason": why.reason });
    let activity: Option<i64> = conn
        .prepare_cached(
            "UPDATE activities SET status = 'cancelled', result = ?3 \
             WHERE run_id = ?1 AND sequence = ?2 AND status = 'scheduled' RETURNING id",
        )?
        .query_row(params![run.0, sequence, reason.to_string()], |r| r.get(0))
        .optional()?;
    if let Some(activity) = activity {
        bump(conn, run, Pending::Activity, -1)?;
        // A queued attempt is never handed out; a leased one keeps its lease
        // so its heartbeat can answer `cancel_requested`.
        conn.prepare_cached(
            "UPDATE dispatch_tasks SET status = 'done', timeout_at_ms = NULL \
             WHERE kind = 'activity' AND item_id = ?1 AND status = 'ready'",
        )?
        .execute([activity])?;
        return Ok(());
    }
    let timer: Option<i64> = conn
        .prepare_cached(
            "SELECT id FROM timers WHERE run_id = ?1 AND sequence = ?2 AND status = 'pending'",
        )?
        .query_row(params![run.0, sequence], |r| r.get(0))
        .optional()?;
    if let Some(timer) = timer {
        return timers::cancel_quietly(conn, timer);
    }
    let child: Option<i64> = conn
        .prepare_cached(
            "SELECT child_run_id FROM children \
             WHERE parent_run_id = ?1 AND sequence = ?2 AND status = 'open'",
        )?
        .query_row(params![run.0, sequence], |r| r.get(0))
        .optional()?;
    if let Some(child) = child {
        let head = load_head(conn, RunId(child))?;
        if head.status == RunStatus::Running {
            let payload = json!({
                "reason": format!("cancelled by its parent: {}", why.message),
                "request_id": null,
                "parent_run_id": run.0.to_string(),
            });
            finish_run(
                conn,
                &head,
                RunStatus::Cancelled,
                EventType::WorkflowCancelled,
                &payload,
                None,
            )?;
        }
        return Ok(());
    }
    // An open signal wait takes no signal any more.
    conn.prepare_cached(
        "DELETE FROM signal_waits WHERE run_id = ?1 AND sequence = ?2 AND signal_id IS NULL",
    )?
    .execute(params![run.0, sequence])?;
    Ok(())
}

/// Unix milliseconds as RFC 3339 UTC (`…T12:00:00.000Z`).
fn utc(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = crate::schedule_spec::civil_from_days(secs.div_euclid(86_400));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        unix_ms.rem_euclid(1000)
    )
}
