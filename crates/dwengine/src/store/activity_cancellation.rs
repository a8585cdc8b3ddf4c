//! The state of an activity a cooperative cancellation stopped, as the
//! attempt bookkeeping needs it: whether a delivery waits for the running
//! attempt's cleanup, and closing the activity as cancelled when that
//! attempt's lease lapses. The delivery itself (`store::cancellation`, a
//! transition) builds on this; the leases and the attempts, which sit
//! below the transitions, call it without reaching up to them.

use serde_json::{json, Value};

use crate::store::activity_attempts::{attempt_id, stamp_group};
use crate::store::db::{params, Connection, OptionalExtension};
use crate::store::dispatch::enqueue_workflow;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId};
use crate::store::rows::append_event;

/// Why a delivered cancellation stopped an authored call's item (the
/// stop's `reason` and `message`, also read back from a cancelled
/// activity's result).
pub(crate) const STOPPED_REASON: &str = "workflow_cancellation_delivered";
/// See [`STOPPED_REASON`].
pub(crate) const STOPPED_MESSAGE: &str =
    "cancelled: the workflow's cancellation was delivered at this call";

/// An activity's `cancellation_policy` from its stored options
/// (`try_cancel` when it named none).
pub(crate) fn activity_policy(options: Option<&str>) -> String {
    options
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|o| o["cancellation_policy"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "try_cancel".to_owned())
}

/// The activity's state as a cooperative stop sees it.
pub(crate) struct Stopped {
    pub(crate) run: RunId,
    pub(crate) sequence: Option<i64>,
    pub(crate) activity_type: String,
    pub(crate) options: Option<String>,
    /// Closed as cancelled by a delivery.
    pub(crate) cancelled: bool,
    /// Open, with a delivery waiting for its cleanup.
    pub(crate) waiting: bool,
    pub(crate) ack: Option<String>,
}

/// An activity row as [`stopped`] reads it.
type StoppedRow = (
    i64,
    Option<i64>,
    String,
    Option<String>,
    String,
    Option<String>,
    bool,
    Option<String>,
);

pub(crate) fn stopped(conn: &Connection, activity: i64) -> Result<Option<Stopped>, Error> {
    let row: Option<StoppedRow> = conn
        .prepare_cached(
            "SELECT run_id, sequence, activity_type, options, status, result, \
             cancel_requested_at_ms IS NOT NULL, cancellation_ack FROM activities WHERE id = ?1",
        )?
        .query_row([activity], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })
        .optional()?;
    let Some((run, sequence, activity_type, options, status, result, requested, ack)) = row else {
        return Ok(None);
    };
    let by_delivery = result
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .is_some_and(|r| r["reason"] == STOPPED_REASON);
    Ok(Some(Stopped {
        run: RunId(run),
        sequence,
        activity_type,
        options,
        cancelled: status == "cancelled" && by_delivery,
        waiting: status == "scheduled" && requested,
        ack,
    }))
}

/// The id of `run`'s pending cancellation request, if it has one.
fn request_id(conn: &Connection, run: RunId) -> Result<Option<String>, Error> {
    Ok(conn
        .prepare_cached("SELECT request_id FROM cancellation_requests WHERE run_id = ?1")?
        .query_row([run.0], |r| r.get(0))
        .optional()?)
}

/// Closes the activity of activity task `task_id` as cancelled when a
/// cancellation delivery waits for it and its attempt's lease lapsed (the
/// worker is gone, so no acknowledgement will come): `ActivityCancelled`
/// and a workflow task for the run, whose worker delivers again. `false`
/// (nothing written) for any other task.
pub(crate) fn lapsed_while_waiting(conn: &Connection, task_id: i64) -> Result<bool, Error> {
    let row: Option<(Option<i64>, i64, i64)> = conn
        .prepare_cached(
            "SELECT item_id, run_id, attempt FROM dispatch_tasks WHERE id = ?1 AND kind = 'activity'",
        )?
        .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((Some(activity), run, attempt)) = row else {
        return Ok(false);
    };
    let Some(state) = stopped(conn, activity)? else {
        return Ok(false);
    };
    if !state.waiting {
        return Ok(false);
    }
    let run = RunId(run);
    let reason = json!({ "message": STOPPED_MESSAGE, "reason": STOPPED_REASON });
    conn.prepare_cached("UPDATE activities SET status = 'cancelled', result = ?2 WHERE id = ?1")?
        .execute(params![activity, reason.to_string()])?;
    crate::store::rows::bump(conn, run, crate::store::rows::Pending::Activity, -1)?;
    conn.prepare_cached(
        "UPDATE dispatch_tasks SET status = 'done', timeout_at_ms = NULL WHERE id = ?1",
    )?
    .execute([task_id])?;
    let attempt = attempt.unsigned_abs();
    let mut payload = json!({
        "sequence": state.sequence,
        "activity_execution_id": activity.to_string(),
        "activity_attempt_id": attempt_id(task_id, attempt),
        "activity_type": state.activity_type,
        "attempt_number": attempt,
        "cancellation_policy": activity_policy(state.options.as_deref()),
        "request_id": request_id(conn, run)?,
        "reason": "attempt_lease_lapsed",
        "message": "cancelled: the attempt's lease lapsed while it cleaned up after the workflow's cancellation",
    });
    stamp_group(conn, activity, &mut payload)?;
    append_event(conn, run, EventType::ActivityCancelled, &payload, false)?;
    enqueue_workflow(conn, run)?;
    Ok(true)
}
