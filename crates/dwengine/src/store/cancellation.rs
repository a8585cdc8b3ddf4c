//! Cooperative cancellation (both SDKs' worker protocol 1.20 mode): a
//! client's request stays pending on the run until a worker delivers it to
//! workflow code at an authored call, and the workflow then runs its
//! cleanup and ends as cancelled.
//!
//! - `request` records the run's one request (`cancellation_requests`, one
//!   row per run, keyed by the run: a repeat answers the original request,
//!   `duplicate`) with `CooperativeCancellationRequested`, queues a
//!   workflow task, and arms the run's deadline at the cleanup deadline.
//! - `deliver` (a worker holding the run's workflow task) checks the
//!   authored call it names against the run's history, records
//!   `CooperativeCancellationDelivered` and stops that call's open item (a
//!   timer is cancelled, an activity is cancelled: its heartbeat answers
//!   `cancel_requested`, a `try_cancel` child run is cancelled, a wait is
//!   closed; an `abandon` activity or child is left running, the
//!   activity's outcome resuming nothing: `activity_attempts::abandoned`). An item that must clean up first (a child or a running
//!   activity whose policy is `wait_cancellation_completed`) parks the
//!   delivery instead: the child gets a request of its own, the attempt
//!   hears `cancel_requested`, the claim is released, and the worker of the
//!   task the item's close queues delivers again.
//! - `acknowledge` (an activity attempt whose callback stopped after its
//!   activity's cancellation) keeps the receipt on the activity's row and
//!   closes an activity a delivery waits for as `ActivityCancelled`.
//! - A `fail_workflow` whose exception is the SDKs' cancellation
//!   (`WorkflowCancelled` in Python, `WorkflowCancellationRequested` in
//!   Rust) after a delivery ends the run as `cancelled`; a run still open at
//!   its cleanup deadline is closed as `cancelled` by the timeout sweep.
//! - The row goes when the run closes (`completion::finish_run` deletes
//!   it), so the table holds at most one row per open run.

use crate::store::activity_cancellation::{
    activity_policy, stopped, STOPPED_MESSAGE, STOPPED_REASON,
};
use crate::store::completion::finish_run;
use crate::store::connection::Store;
use crate::store::db::{params, Connection, OptionalExtension};
use crate::store::dispatch::{enqueue_workflow, leased_to, TaskKind};
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::prepared_local_rows::{stop_for_delivery, DeliveringClaim};
use crate::store::rows::{append_event, load_head, now_ms, to_i64};
use crate::store::tx::WriteTx;
use serde_json::{json, Value};

/// The deadline kind a run's `deadline_at_ms` carries while a cooperative
/// cancellation's cleanup runs.
pub const CLEANUP_DEADLINE_KIND: &str = "cancellation_cleanup";

/// The authored call kinds a delivery may name (both SDKs' list).
pub const CALL_KINDS: [&str; 9] = [
    "activity",
    "local_activity",
    "timer",
    "condition",
    "signal",
    "child",
    "parallel",
    "selection_handle",
    "service_operation",
];

/// The exception types the SDKs fail a workflow with when cancellation was
/// delivered and the workflow let it end the run.
const CANCELLED_EXCEPTION_TYPES: [&str; 2] = ["WorkflowCancelled", "WorkflowCancellationRequested"];

/// A run's cancellation request as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancellationRequest {
    /// The server's identity of the request.
    pub request_id: String,
    /// Why, as the client said.
    pub reason: Option<String>,
    /// When it was first requested (Unix ms).
    pub requested_at_ms: i64,
    /// When cleanup must be over (Unix ms).
    pub cleanup_deadline_at_ms: i64,
    /// The authored call sequence it was delivered at, once delivered.
    pub delivered_sequence: Option<i64>,
}

/// The authored call a worker delivers the request at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The request's identity (must be the run's).
    pub request_id: String,
    /// The call's first command sequence.
    pub sequence: i64,
    /// What kind of call ([`CALL_KINDS`]).
    pub call_kind: String,
    /// How many sequences the call spans (a `parallel` group: its members).
    pub sequence_span: i64,
    /// A selection handle's earlier authored operation.
    pub operation_sequence: Option<i64>,
    /// That operation's span.
    pub operation_sequence_span: i64,
}

impl Delivery {
    fn payload(&self, run: RunId) -> Value {
        let mut payload = json!({
            "workflow_command_id": self.request_id,
            "workflow_run_id": run.0.to_string(),
            "sequence": self.sequence,
            "call_kind": self.call_kind,
            "sequence_span": self.sequence_span,
        });
        if let Some(operation) = self.operation_sequence {
            payload["operation_sequence"] = operation.into();
            payload["operation_sequence_span"] = self.operation_sequence_span.into();
        }
        payload
    }

    /// The command sequences whose items the delivery interrupts.
    fn interrupted(&self) -> std::ops::Range<i64> {
        match self.operation_sequence {
            Some(base) => base..base.saturating_add(self.operation_sequence_span),
            None => self.sequence..self.sequence.saturating_add(self.sequence_span),
        }
    }
}

/// Why a delivery was refused (a `409` naming it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The machine-readable reason.
    pub reason: &'static str,
    /// What happened and what to do.
    pub message: String,
}

impl Store {
    /// Records a cooperative cancellation request on running `run` (or
    /// answers the one it has: `true` = duplicate).
    pub fn request_cancellation(
        &self,
        run: RunId,
        reason: Option<&str>,
        cleanup_timeout_seconds: u64,
    ) -> Result<(CancellationRequest, bool), Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        if head.status != RunStatus::Running {
            return Err(Error::RunNotActive {
                run,
                status: head.status,
            });
        }
        if let Some(existing) = load(&tx, run)? {
            return Ok((existing, true));
        }
        let request = insert_request(&tx, run, reason, cleanup_timeout_seconds)?;
        enqueue_workflow(&tx, run)?;
        tx.commit()?;
        Ok((request, false))
    }

    /// The run's request, delivered or not, while the run is open (none
    /// when it has none): every task of the run observes it, as the Rust
    /// SDK's cooperative replay requires of any history that holds it.
    pub fn pending_cancellation(&self, run: RunId) -> Result<Option<CancellationRequest>, Error> {
        load(&self.conn, run)
    }

    /// Delivers the run's pending request at the authored call `delivery`
    /// names, for the worker holding workflow task `task_id`. `Ok(Err)` is
    /// a refusal: nothing was written.
    pub fn deliver_cancellation(
        &self,
        task_id: i64,
        lease_owner: &str,
        attempt: u64,
        delivery: &Delivery,
    ) -> Result<Result<Delivered, Refusal>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let row = leased_to(
            &tx,
            task_id,
            TaskKind::Workflow,
            "workflow task",
            lease_owner,
        )?;
        if row.attempt != attempt {
            return Err(Error::StaleTask {
                task: task_id,
                reason: "workflow_task_attempt_mismatch",
            });
        }
        let run = row.run;
        let Some(request) = load(&tx, run)? else {
            return Ok(Err(Refusal {
                reason: "cancellation_not_requested",
                message: "the run has no cooperative cancellation request".into(),
            }));
        };
        if request.request_id != delivery.request_id {
            return Ok(Err(Refusal {
                reason: "cancellation_request_mismatch",
                message: format!(
                    "request_id {:?} is not the run's request ({:?})",
                    delivery.request_id, request.request_id
                ),
            }));
        }
        if let Some(sequence) = request.delivered_sequence {
            // A retry of the same delivery converges; another is refused.
            let recorded = delivered_payload(&tx, run)?;
            if recorded.as_ref() == Some(&delivery.payload(run)) {
                return Ok(Ok(Delivered::Delivered(run)));
            }
            return Ok(Err(Refusal {
                reason: "cancellation_already_delivered",
                message: format!("the request was already delivered at sequence {sequence}"),
            }));
        }
        if let Err(refusal) = check_authored(&tx, run, delivery)? {
            return Ok(Err(refusal));
        }
        // A prepared local attempt the call interrupts stops as its policy
        // says: one that waits for its stop and runs on this claim, its
        // stop not yet acknowledged, holds the delivery back (the claim is
        // released and a new workflow task queued: the attempt's claim is
        // gone, so the next one finds it fenced and delivers); any other is
        // fenced now.
        let claim = DeliveringClaim {
            task_id,
            attempt,
            lease_owner,
        };
        if stop_for_delivery(&tx, run, delivery.interrupted(), claim)? {
            crate::store::admission::release_held_signals(&tx, run)?;
            tx.prepare_cached("UPDATE dispatch_tasks SET status = 'done' WHERE id = ?1")?
                .execute([task_id])?;
            enqueue_workflow(&tx, run)?;
            tx.commit()?;
            return Ok(Ok(Delivered::Waiting {
                run,
                reason: "cancellation_waiting_for_activity",
            }));
        }
        // A child or a running activity whose policy waits for its
        // cancellation to complete cleans up first: the claim is released
        // and the run gets a workflow task when it closes (its `ChildRun*`
        // or `Activity*` event), whose worker delivers again.
        let mut waiting = None;
        for sequence in delivery.interrupted() {
            if let Some(reason) = start_waiting(&tx, run, sequence, &delivery.call_kind, &request)?
            {
                waiting.get_or_insert(reason);
            }
        }
        if let Some(reason) = waiting {
            crate::store::admission::release_held_signals(&tx, run)?;
            tx.prepare_cached("UPDATE dispatch_tasks SET status = 'done' WHERE id = ?1")?
                .execute([task_id])?;
            tx.commit()?;
            return Ok(Ok(Delivered::Waiting { run, reason }));
        }
        append_event(
            &tx,
            run,
            EventType::CooperativeCancellationDelivered,
            &delivery.payload(run),
            false,
        )?;
        tx.prepare_cached(
            "UPDATE cancellation_requests SET delivered_sequence = ?2 WHERE run_id = ?1",
        )?
        .execute(params![run.0, delivery.sequence])?;
        for sequence in delivery.interrupted() {
            // A child whose `cancellation_policy` is `abandon` (the
            // default) keeps running; `try_cancel` cancels it now (a
            // `wait_cancellation_completed` one has closed by now: the
            // delivery waited for it).
            if child_policy(&tx, run, sequence)?.as_deref() == Some("abandon") {
                continue;
            }
            // An activity whose policy is `abandon` keeps running too: the
            // workflow stops waiting for it (the delivery), its attempt is
            // told nothing, and its outcome resumes no workflow
            // (`activity_attempts::abandoned`).
            if open_activity_abandoned(&tx, run, sequence)? {
                continue;
            }
            crate::store::selection_cancel::stop_leaf(&tx, run, sequence, STOPPED)?;
        }
        tx.commit()?;
        Ok(Ok(Delivered::Delivered(run)))
    }
}

/// What a delivery came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// `CooperativeCancellationDelivered` was written: the SDK raises its
    /// cancellation at the call.
    Delivered(RunId),
    /// Nothing was delivered yet: a child or an activity the call
    /// interrupts is cleaning up (`reason`:
    /// `cancellation_waiting_for_child` / `…_activity`), and the workflow
    /// task's claim was released.
    Waiting {
        /// The run.
        run: RunId,
        /// What it waits for.
        reason: &'static str,
    },
}

/// Starts the cleanup a delivery at command `sequence` of `run` must wait
/// for, if its item asks for that: an open child run whose
/// `cancellation_policy` is `wait_cancellation_completed` gets a
/// cooperative request of its own (the parent's reason, cleaning up by the
/// parent's deadline); a running attempt of an activity with that policy
/// hears `cancel_requested`. `None` when nothing need be waited for.
fn start_waiting(
    conn: &Connection,
    run: RunId,
    sequence: i64,
    call_kind: &str,
    request: &CancellationRequest,
) -> Result<Option<&'static str>, Error> {
    if child_policy(conn, run, sequence)?.as_deref() == Some("wait_cancellation_completed") {
        let child: i64 = conn
            .prepare_cached(
                "SELECT child_run_id FROM children \
                 WHERE parent_run_id = ?1 AND sequence = ?2 AND status = 'open'",
            )?
            .query_row(params![run.0, sequence], |r| r.get(0))?;
        if !cascade(conn, RunId(child), request, "cancelled by its parent")? {
            return Ok(None);
        }
        return Ok(Some("cancellation_waiting_for_child"));
    }
    if call_kind == "service_operation" {
        // A Nexus call waiting for its operation's outcome: the linked
        // workflow run (the `workflow_run` binding) gets the request.
        let linked: Option<i64> = conn
            .prepare_cached(
                "SELECT linked_run_id FROM service_call_waiters \
                 WHERE caller_run_id = ?1 AND sequence = ?2",
            )?
            .query_row(params![run.0, sequence], |r| r.get(0))
            .optional()?;
        let Some(linked) = linked else {
            return Ok(None);
        };
        if !cascade(conn, RunId(linked), request, "cancelled by its caller")? {
            return Ok(None);
        }
        return Ok(Some("cancellation_waiting_for_service_operation"));
    }
    let activity: Option<(i64, Option<String>)> = conn
        .prepare_cached(
            "SELECT id, options FROM activities \
             WHERE run_id = ?1 AND sequence = ?2 AND status = 'scheduled'",
        )?
        .query_row(params![run.0, sequence], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((activity, options)) = activity else {
        return Ok(None);
    };
    if activity_policy(options.as_deref()) != "wait_cancellation_completed" {
        return Ok(None);
    }
    // Only a running attempt has cleanup to wait for; a queued one is
    // cancelled with the delivery and never handed out.
    let running: bool = conn
        .prepare_cached(
            "SELECT COUNT(*) > 0 FROM dispatch_tasks \
             WHERE kind = 'activity' AND item_id = ?1 AND status = 'leased'",
        )?
        .query_row([activity], |r| r.get(0))?;
    if !running {
        return Ok(None);
    }
    conn.prepare_cached(
        "UPDATE activities SET cancel_requested_at_ms = ?2 \
         WHERE id = ?1 AND cancel_requested_at_ms IS NULL",
    )?
    .execute(params![activity, now_ms()])?;
    Ok(Some("cancellation_waiting_for_activity"))
}

/// Gives running `target` (a child or a Nexus call's linked run) a
/// cooperative request of its own, unless it has one: `why` and the
/// originating request's reason, cleaning up by its deadline, with a
/// workflow task. `false` when `target` is not running (nothing to wait for).
fn cascade(
    conn: &Connection,
    target: RunId,
    request: &CancellationRequest,
    why: &str,
) -> Result<bool, Error> {
    if load_head(conn, target)?.status != RunStatus::Running {
        return Ok(false);
    }
    if load(conn, target)?.is_none() {
        let left_ms = request.cleanup_deadline_at_ms.saturating_sub(now_ms());
        let seconds = (left_ms.max(1000) / 1000).unsigned_abs();
        let reason = match &request.reason {
            Some(reason) => format!("{why}: {reason}"),
            None => why.to_owned(),
        };
        insert_request(conn, target, Some(&reason), seconds)?;
        enqueue_workflow(conn, target)?;
    }
    Ok(true)
}

/// Why a delivered cancellation stopped an authored call's item.
const STOPPED: crate::store::selection_cancel::StopReason =
    crate::store::selection_cancel::StopReason {
        reason: STOPPED_REASON,
        message: STOPPED_MESSAGE,
    };

/// Records a new request on running `run` (which has none): its row, its
/// `CooperativeCancellationRequested` event and the cleanup deadline. The
/// caller queues the run's workflow task.
fn insert_request(
    conn: &Connection,
    run: RunId,
    reason: Option<&str>,
    cleanup_timeout_seconds: u64,
) -> Result<CancellationRequest, Error> {
    let now = now_ms();
    let deadline = now.saturating_add(to_i64(cleanup_timeout_seconds.saturating_mul(1000)));
    let request = CancellationRequest {
        request_id: format!("{}-cancellation-{now}", run.0),
        reason: reason.map(str::to_owned),
        requested_at_ms: now,
        cleanup_deadline_at_ms: deadline,
        delivered_sequence: None,
    };
    conn.prepare_cached(
        "INSERT INTO cancellation_requests (run_id, request_id, reason, requested_at_ms, \
             cleanup_deadline_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        run.0,
        request.request_id,
        request.reason,
        now,
        deadline
    ])?;
    let mut payload = json!({
        "workflow_command_id": request.request_id,
        "workflow_run_id": run.0.to_string(),
        "requested_at": rfc3339(now),
        "cleanup_deadline_at": rfc3339(deadline),
    });
    if let Some(reason) = &request.reason {
        payload["reason"] = reason.clone().into();
    }
    // The request's cancellation context (a root request: its lineage is
    // this run alone), which both SDKs check against the event and the
    // Python worker needs to fence a running prepared local callback
    // (`store::prepared_local`).
    let workflow_id: String = conn
        .prepare_cached("SELECT workflow_id FROM runs WHERE id = ?1")?
        .query_row([run.0], |r| r.get(0))?;
    payload["cancellation"] = json!({
        "schema": "durable-workflow.cancellation-context/v1",
        "request_id": request.request_id,
        "root_request_id": request.request_id,
        "root_workflow_instance_id": workflow_id,
        "root_workflow_run_id": run.0.to_string(),
        "parent_request_id": null,
        "reason": request.reason,
        "requester": { "type": "client" },
        "source": "request_cancellation",
        "requested_at": rfc3339(now),
        "cleanup_deadline_at": rfc3339(deadline),
        "lineage": [{
            "request_id": request.request_id,
            "workflow_instance_id": workflow_id,
            "workflow_run_id": run.0.to_string(),
        }],
    });
    append_event(
        conn,
        run,
        EventType::CooperativeCancellationRequested,
        &payload,
        false,
    )?;
    // The run closes at the cleanup deadline if its workflow has not
    // ended by then (an earlier run deadline still wins).
    conn.prepare_cached(
        "UPDATE runs SET deadline_at_ms = ?2, deadline_kind = ?3 WHERE id = ?1 \
             AND (deadline_at_ms IS NULL OR deadline_at_ms > ?2)",
    )?
    .execute(params![run.0, deadline, CLEANUP_DEADLINE_KIND])?;
    Ok(request)
}

fn load(conn: &Connection, run: RunId) -> Result<Option<CancellationRequest>, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT request_id, reason, requested_at_ms, cleanup_deadline_at_ms, \
             delivered_sequence FROM cancellation_requests WHERE run_id = ?1",
        )?
        .query_row([run.0], |r| {
            Ok(CancellationRequest {
                request_id: r.get(0)?,
                reason: r.get(1)?,
                requested_at_ms: r.get(2)?,
                cleanup_deadline_at_ms: r.get(3)?,
                delivered_sequence: r.get(4)?,
            })
        })
        .optional()?)
}

/// The `cancellation_policy` of the open child run's command `sequence`
/// of `run` (`None` when that sequence started no open child).
/// Whether the open activity at command `sequence` of `run` is abandoned
/// (after the delivery that covers it was recorded).
fn open_activity_abandoned(conn: &Connection, run: RunId, sequence: i64) -> Result<bool, Error> {
    let activity: Option<i64> = conn
        .prepare_cached(
            "SELECT id FROM activities WHERE run_id = ?1 AND sequence = ?2 AND status = 'scheduled'",
        )?
        .query_row(params![run.0, sequence], |r| r.get(0))
        .optional()?;
    match activity {
        Some(activity) => crate::store::activity_attempts::abandoned(conn, activity),
        None => Ok(false),
    }
}

fn child_policy(conn: &Connection, run: RunId, sequence: i64) -> Result<Option<String>, Error> {
    let fields: Option<Option<String>> = conn
        .prepare_cached(
            "SELECT event_fields FROM children \
             WHERE parent_run_id = ?1 AND sequence = ?2 AND status = 'open'",
        )?
        .query_row(params![run.0, sequence], |r| r.get(0))
        .optional()?;
    // A child row without a recorded policy has the command's default.
    Ok(fields.map(|text| {
        text.and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .and_then(|f| f["cancellation_policy"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "abandon".to_owned())
    }))
}

fn delivered_payload(conn: &Connection, run: RunId) -> Result<Option<Value>, Error> {
    let text: Option<String> = conn
        .prepare_cached(
            "SELECT payload FROM history_events WHERE run_id = ?1 AND event_type = ?2 \
             ORDER BY sequence DESC LIMIT 1",
        )?
        .query_row(
            params![run.0, EventType::CooperativeCancellationDelivered.as_str()],
            |r| r.get(0),
        )
        .optional()?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

/// The events that record an authored call of each kind, and those that
/// resolve it.
fn call_events(kind: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        "activity" => (
            &["ActivityScheduled"],
            &[
                "ActivityCompleted",
                "ActivityFailed",
                "ActivityTimedOut",
                "ActivityCancelled",
            ],
        ),
        "timer" => (
            &["TimerScheduled", "TimerStarted"],
            &["TimerFired", "TimerCancelled"],
        ),
        "condition" => (&["ConditionWaitOpened"], &["ConditionWaitSatisfied"]),
        "signal" => (&["SignalWaitOpened"], &["SignalApplied"]),
        "child" => (
            &["ChildWorkflowScheduled", "ChildRunStarted"],
            &[
                "ChildRunCompleted",
                "ChildRunFailed",
                "ChildRunCancelled",
                "ChildRunTerminated",
            ],
        ),
        "service_operation" => (
            &["ServiceCallStarted"],
            &[
                "ServiceCallCompleted",
                "ServiceCallFailed",
                "ServiceCallCancelled",
            ],
        ),
        // A group or a selection handle: any scheduling command of a
        // member, resolved member by member.
        _ => (
            &[
                "ActivityScheduled",
                "TimerScheduled",
                "TimerStarted",
                "ConditionWaitOpened",
                "SignalWaitOpened",
                "ChildWorkflowScheduled",
                "ServiceCallStarted",
            ],
            &[
                "ActivityCompleted",
                "ActivityFailed",
                "ActivityTimedOut",
                "ActivityCancelled",
                "TimerFired",
                "TimerCancelled",
                "ConditionWaitSatisfied",
                "SignalApplied",
                "ChildRunCompleted",
                "ChildRunFailed",
                "ChildRunCancelled",
                "ChildRunTerminated",
                "ServiceCallCompleted",
                "ServiceCallFailed",
                "ServiceCallCancelled",
            ],
        ),
    }
}

/// Whether the delivery names an authored call the run recorded and that
/// has not resolved: the call the workflow is blocked on.
fn check_authored(
    conn: &Connection,
    run: RunId,
    delivery: &Delivery,
) -> Result<Result<(), Refusal>, Error> {
    if delivery.call_kind == "local_activity" {
        // A local activity runs inside the workflow task: a marker one has
        // nothing open on the server, and a prepared one's attempt is
        // stopped by its policy (`prepared_local_rows::stop_for_delivery`).
        return Ok(Ok(()));
    }
    let (opened_by, resolved_by) = call_events(&delivery.call_kind);
    let range = delivery.interrupted();
    let mut opened = false;
    let mut resolved = 0_i64;
    // Both SDKs deliver at a call unless it resolved before the request:
    // a result recorded after it (a child or activity the delivery waited
    // for, a timer that fired meanwhile) does not stand in the way.
    let requested_at: i64 = conn
        .prepare_cached(
            "SELECT COALESCE(MIN(sequence), 0) FROM history_events \
             WHERE run_id = ?1 AND event_type = ?2",
        )?
        .query_row(
            params![run.0, EventType::CooperativeCancellationRequested.as_str()],
            |r| r.get(0),
        )?;
    let mut statement = conn.prepare_cached(
        "SELECT event_type, sequence FROM history_events WHERE run_id = ?1 \
         AND CAST(json_extract(payload, '$.sequence') AS BIGINT) >= ?2 \
         AND CAST(json_extract(payload, '$.sequence') AS BIGINT) < ?3",
    )?;
    let kinds = statement
        .query_map(params![run.0, range.start, range.end], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (kind, at) in &kinds {
        if opened_by.contains(&kind.as_str()) {
            opened = true;
        }
        if resolved_by.contains(&kind.as_str()) && *at < requested_at {
            resolved += 1;
        }
    }
    if !opened {
        return Ok(Err(Refusal {
            reason: "cancellation_call_not_recorded",
            message: format!(
                "no {} call is recorded at sequence {} (span {}): deliver at the authored call \
                 the workflow is waiting on",
                delivery.call_kind, range.start, delivery.sequence_span
            ),
        }));
    }
    let span = range.end.saturating_sub(range.start);
    if resolved >= span {
        return Ok(Err(Refusal {
            reason: "cancellation_call_resolved",
            message: format!(
                "the {} call at sequence {} already resolved; replay its result instead",
                delivery.call_kind, range.start
            ),
        }));
    }
    Ok(Ok(()))
}

/// The delivered request of `run` when a `fail_workflow` of
/// `exception_type` is the SDK ending the run because of it.
pub(crate) fn ends_as_cancelled(
    conn: &Connection,
    run: RunId,
    exception_type: Option<&str>,
) -> Result<Option<CancellationRequest>, Error> {
    if !exception_type.is_some_and(|t| CANCELLED_EXCEPTION_TYPES.contains(&t)) {
        return Ok(None);
    }
    Ok(load(conn, run)?.filter(|r| r.delivered_sequence.is_some()))
}

/// The `WorkflowCancelled` payload of a run its cooperative request ended.
pub(crate) fn cancelled_payload(request: &CancellationRequest, message: &str) -> Value {
    json!({
        "reason": request.reason,
        "request_id": request.request_id,
        "cancellation_request_id": request.request_id,
        "message": message,
        "closed_reason": "cancelled",
    })
}

/// Closes running `run` as cancelled because its cooperative request's
/// cleanup deadline passed (the timeout sweep, with the run's write lock).
pub(crate) fn expire_cleanup(conn: &Connection, run: RunId) -> Result<bool, Error> {
    let head = load_head(conn, run)?;
    if head.status != RunStatus::Running {
        return Ok(false);
    }
    let Some(request) = load(conn, run)? else {
        return Ok(false);
    };
    let payload = cancelled_payload(&request, "the cancellation's cleanup deadline passed");
    let mut payload = payload;
    payload["cleanup_deadline_expired"] = true.into();
    finish_run(
        conn,
        &head,
        RunStatus::Cancelled,
        EventType::WorkflowCancelled,
        &payload,
        None,
    )?;
    Ok(true)
}

/// Unix milliseconds as RFC 3339 UTC with microseconds, the form the wire
/// gives every timestamp (so an observation and its event name the same
/// instant in the same text).
fn rfc3339(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = crate::schedule_spec::civil_from_days(secs.div_euclid(86_400));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        unix_ms.rem_euclid(1000) * 1000
    )
}

/// What the cooperative workers' status observation carries for an attempt
/// whose activity a cooperative cancellation stopped
/// (`cancellation_acknowledgement`): the request, and the history event
/// that recorded it. The attempt then reports its callback stopped with
/// `acknowledge-cancellation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReceipt {
    /// The run's request.
    pub request_id: String,
    /// When the run's cleanup must be over (Unix ms).
    pub cleanup_deadline_at_ms: i64,
    /// The wire id of its `CooperativeCancellationRequested` event.
    pub cancellation_history_event_id: String,
}

/// An accepted `acknowledge-cancellation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acknowledged {
    /// The wire id of the history event the receipt is recorded against:
    /// the activity's `ActivityCancelled` when a delivery waited for it,
    /// else the `CooperativeCancellationDelivered` that cancelled it.
    pub history_event_id: String,
    /// Whether this repeats an earlier acknowledgement of the attempt.
    pub duplicate: bool,
}

/// The wire id (history position + 1) of `run`'s newest event of `kind`.
fn event_id(conn: &Connection, run: RunId, kind: EventType) -> Result<Option<String>, Error> {
    let at: Option<i64> = conn
        .prepare_cached(
            "SELECT MAX(sequence) FROM history_events WHERE run_id = ?1 AND event_type = ?2",
        )?
        .query_row(params![run.0, kind.as_str()], |r| r.get(0))?;
    Ok(at.map(|at| (at + 1).to_string()))
}

impl Store {
    /// The stop receipt of activity task `task_id`'s activity, when a
    /// cooperative cancellation of its open run stopped it (delivered at
    /// it, or waiting for its cleanup).
    pub fn activity_stop_receipt(&self, task_id: i64) -> Result<Option<StopReceipt>, Error> {
        let activity: Option<Option<i64>> = self
            .conn
            .prepare_cached(
                "SELECT item_id FROM dispatch_tasks WHERE id = ?1 AND kind = 'activity'",
            )?
            .query_row([task_id], |r| r.get(0))
            .optional()?;
        let Some(Some(activity)) = activity else {
            return Ok(None);
        };
        let Some(state) = stopped(&self.conn, activity)? else {
            return Ok(None);
        };
        if !state.cancelled && !state.waiting {
            return Ok(None);
        }
        let Some(request) = load(&self.conn, state.run)? else {
            return Ok(None);
        };
        let Some(history_event_id) = event_id(
            &self.conn,
            state.run,
            EventType::CooperativeCancellationRequested,
        )?
        else {
            return Ok(None);
        };
        Ok(Some(StopReceipt {
            request_id: request.request_id,
            cleanup_deadline_at_ms: request.cleanup_deadline_at_ms,
            cancellation_history_event_id: history_event_id,
        }))
    }

    /// `acknowledge-cancellation`: the attempt `fence` names reports that
    /// its callback stopped after its activity's cancellation (`request_id`:
    /// the run's request, as the status receipt gave it). The receipt is
    /// kept on the activity (a repeat answers it, `duplicate`), the
    /// attempt's task ends, and an activity a delivery waited for closes as
    /// cancelled (`ActivityCancelled`) with a workflow task for its run.
    /// `Ok(Err)` is a refusal: nothing was written.
    pub fn acknowledge_activity_cancellation(
        &self,
        task_id: i64,
        fence: crate::store::activity_attempts::ActivityFence<'_>,
        request_id: &str,
    ) -> Result<Result<Acknowledged, Refusal>, Error> {
        use crate::store::activity_attempts::{end_task, fenced_attempt, run_closed_under};
        let tx = WriteTx::begin(&self.conn)?;
        // A repeat of this attempt's acknowledgement answers the first.
        let activity: Option<Option<i64>> = tx
            .prepare_cached(
                "SELECT item_id FROM dispatch_tasks WHERE id = ?1 AND kind = 'activity'",
            )?
            .query_row([task_id], |r| r.get(0))
            .optional()?;
        if let Some(Some(activity)) = activity {
            if let Some(ack) = stopped(&tx, activity)?.and_then(|s| s.ack) {
                let ack: Value = serde_json::from_str(&ack)?;
                if ack["activity_attempt_id"] == fence.activity_attempt_id
                    && ack["lease_owner"] == fence.lease_owner
                    && ack["request_id"] == request_id
                {
                    let history_event_id =
                        ack["history_event_id"].as_str().unwrap_or("").to_owned();
                    return Ok(Ok(Acknowledged {
                        history_event_id,
                        duplicate: true,
                    }));
                }
            }
        }
        let attempt = match fenced_attempt(&tx, task_id, fence) {
            Ok(attempt) => attempt,
            Err(e) => return Err(run_closed_under(&tx, task_id, fence, e)?),
        };
        let Some(request) = load(&tx, attempt.run)? else {
            return Ok(Err(Refusal {
                reason: "cancellation_not_requested",
                message: "the activity's run has no cooperative cancellation request".into(),
            }));
        };
        if request.request_id != request_id {
            return Ok(Err(Refusal {
                reason: "cancellation_request_mismatch",
                message: format!(
                    "request_id {request_id:?} is not the run's request ({:?}): send the \
                     cancellation_acknowledgement's request_id",
                    request.request_id
                ),
            }));
        }
        let Some(state) = stopped(&tx, attempt.activity)? else {
            return Err(Error::ItemNotFound {
                item: "activity",
                id: attempt.activity,
            });
        };
        let history_event_id = if state.waiting {
            // The cleanup the delivery waited for is over.
            let reason = json!({ "message": STOPPED.message, "reason": STOPPED.reason });
            tx.prepare_cached(
                "UPDATE activities SET status = 'cancelled', result = ?2 WHERE id = ?1",
            )?
            .execute(params![attempt.activity, reason.to_string()])?;
            crate::store::rows::bump(&tx, attempt.run, crate::store::rows::Pending::Activity, -1)?;
            let mut payload = json!({
                "sequence": state.sequence,
                "activity_execution_id": attempt.activity.to_string(),
                "activity_attempt_id": fence.activity_attempt_id,
                "activity_type": state.activity_type,
                "attempt_number": attempt.attempt,
                "cancellation_policy": activity_policy(state.options.as_deref()),
                "request_id": request.request_id,
                "reason": STOPPED.reason,
                "message": "cancelled: the attempt stopped its callback after the workflow's cancellation",
            });
            crate::store::activity_attempts::stamp_group(&tx, attempt.activity, &mut payload)?;
            let at = append_event(
                &tx,
                attempt.run,
                EventType::ActivityCancelled,
                &payload,
                false,
            )?;
            enqueue_workflow(&tx, attempt.run)?;
            (at + 1).to_string()
        } else if state.cancelled {
            event_id(
                &tx,
                attempt.run,
                EventType::CooperativeCancellationDelivered,
            )?
            .unwrap_or_default()
        } else {
            return Ok(Err(Refusal {
                reason: "activity_not_cancelled",
                message: "the activity was not cancelled: acknowledge only after the status \
                          observation carried a cancellation_acknowledgement"
                    .into(),
            }));
        };
        let ack = json!({
            "activity_attempt_id": fence.activity_attempt_id,
            "lease_owner": fence.lease_owner,
            "request_id": request_id,
            "history_event_id": history_event_id,
            "acknowledged_at_ms": now_ms(),
        });
        tx.prepare_cached("UPDATE activities SET cancellation_ack = ?2 WHERE id = ?1")?
            .execute(params![attempt.activity, ack.to_string()])?;
        end_task(&tx, task_id)?;
        tx.commit()?;
        Ok(Ok(Acknowledged {
            history_event_id,
            duplicate: false,
        }))
    }
}

impl Store {
    /// The (namespace, task queue) of each open child run of `run`, and of
    /// each run a Nexus call of `run` waits on, that holds a cooperative
    /// request (a parked delivery's cascade).
    pub fn cascade_queues(&self, run: RunId) -> Result<Vec<(String, String)>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT r.namespace, r.task_queue FROM children c \
                 JOIN runs r ON r.id = c.child_run_id \
                 JOIN cancellation_requests q ON q.run_id = c.child_run_id \
                 WHERE c.parent_run_id = ?1 AND c.status = 'open' \
                 UNION SELECT r.namespace, r.task_queue FROM service_call_waiters w \
                 JOIN runs r ON r.id = w.linked_run_id \
                 JOIN cancellation_requests q ON q.run_id = w.linked_run_id \
                 WHERE w.caller_run_id = ?1",
            )?
            .query_map([run.0], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?)
    }
}
