//! Prepared local activities (worker protocol 1.20), the store side; the
//! wire side is `server::prepared_local`.
//!
//! A worker that opted in runs a local activity on its workflow task's own
//! claim instead of reporting it afterwards as a `record_local_activity`
//! marker: the server admits each attempt before its callback runs
//! (`ActivityScheduled` at the authored `sequence`, then `ActivityStarted`
//! with the attempt's identities and deadlines), keeps the attempt's
//! authority answerable while it runs (`control`, `heartbeat`), and records
//! its outcome (`ActivityCompleted` / `ActivityFailed` / `ActivityTimedOut`,
//! or `ActivityRetryScheduled` when the retry policy asks for another
//! attempt: the claim is then released and a new workflow task queued after
//! the backoff). An attempt whose claim was lost is closed by the next claim
//! (`recover`), its callback's stop unknown. The commands the workflow
//! authored before the call are written first (`checkpoint`), and the
//! members of an `all()` group with local members are scheduled together
//! (`checkpoint-group`: `prepare_local_activity` entries beside activities,
//! timers and children).
//!
//! Every operation is fenced by the workflow task's claim (task id, lease
//! owner, attempt) and repeats converge: a retried admission, outcome or
//! checkpoint answers the receipt it got the first time.
//!
//! Rows: one `prepared_local_activities` row per local activity of an open
//! run that is scheduled, running or waiting for its retry (at most
//! `pending_activity_count`: they count as pending activities), plus the
//! closed (or stopped for cancellation) ones of the claim that last
//! admitted an attempt (deleted at the next claim's admission); one `prepared_local_checkpoints` row per open
//! run (its latest checkpoint). Both are deleted when the run closes
//! (`completion::finish_run`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::store::admission::release_held_signals;
use crate::store::completion::fail_structural;
use crate::store::connection::Store;
use crate::store::db::{params, Connection, OptionalExtension};
use crate::store::dispatch::{enqueue_workflow_at, leased_to, TaskKind};
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::prepared_local_rows::{cleanup_deadline_ms, execution_id, marker_of, schedule};
pub use crate::store::prepared_local_rows::{LocalDescriptor, LOCAL_CANCELLATION_POLICIES};
use crate::store::protocol::{codec_of, RetryPolicy};
use crate::store::rows::{append_event, bump, load_head, now_ms, Pending, RunHead};
use crate::store::tx::WriteTx;
use crate::store::workflow_commands::{WorkflowCommand, WorkflowTaskFence};
use dwpolicy::{LimitKind, RunRef, StructuralLimitExceeded};

/// A report of how an attempt's callback ended (`outcome`'s `report`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LocalReport {
    /// `completed` or `failed`.
    #[serde(default)]
    pub outcome: String,
    /// The result (an opaque payload envelope) when completed.
    #[serde(default)]
    pub result: Value,
    /// Why it failed.
    #[serde(default)]
    pub message: Option<String>,
    /// The failure's short type.
    #[serde(default)]
    pub exception_type: Option<String>,
    /// Whether a retry could not help.
    #[serde(default)]
    pub non_retryable: bool,
}

/// Why an operation was refused, with the status it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 404 (no such attempt) or 409 (the state refuses it).
    pub status: u16,
    /// Which check failed.
    pub reason: &'static str,
    /// A sentence saying what happened and what to do.
    pub message: String,
}

fn refuse<T>(status: u16, reason: &'static str, message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal {
        status,
        reason,
        message: message.into(),
    })
}

/// One prepared local activity: its row.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalAttempt {
    /// The run.
    pub run: RunId,
    /// Its authored sequence.
    pub sequence: i64,
    /// As authored.
    pub descriptor: LocalDescriptor,
    /// `scheduled`, `started`, `retry_scheduled` or `closed`.
    pub status: String,
    /// The current (or last) attempt's number, from 1 (0 before any).
    pub attempt_number: i64,
    /// The current attempt's id.
    pub activity_attempt_id: Option<String>,
    /// The worker's nonce for the current attempt.
    pub worker_attempt_id: Option<String>,
    /// The claim that admitted the current attempt.
    pub workflow_task_id: Option<i64>,
    /// Its attempt.
    pub workflow_task_attempt: Option<i64>,
    /// Its owner.
    pub lease_owner: Option<String>,
    /// When it was first scheduled (ms).
    pub scheduled_at_ms: i64,
    /// The current attempt's `ActivityStarted` event id (1-based).
    pub started_event_id: Option<i64>,
    /// Deadlines of the current attempt (ms).
    pub start_to_close_deadline_ms: Option<i64>,
    /// The whole activity's deadline (ms).
    pub schedule_to_close_deadline_ms: Option<i64>,
    /// The application heartbeat deadline (ms).
    pub heartbeat_deadline_ms: Option<i64>,
    /// The last recorded outcome's receipt.
    pub receipt: Option<Receipt>,
}

impl LocalAttempt {
    /// The activity's execution id (stable across attempts).
    pub fn execution_id(&self) -> String {
        execution_id(self.run, self.sequence)
    }

    fn held_by(&self, task_id: i64, fence: WorkflowTaskFence<'_>) -> bool {
        self.workflow_task_id == Some(task_id)
            && self.workflow_task_attempt == i64::try_from(fence.attempt).ok()
            && self.lease_owner.as_deref() == Some(fence.lease_owner)
    }
}

/// A recorded outcome (or recovery), kept to answer repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// The attempt it closed.
    pub activity_attempt_id: String,
    /// `ActivityCompleted`, `ActivityFailed`, `ActivityTimedOut` or
    /// `ActivityRetryScheduled`.
    pub event_type: String,
    /// Its history event id (1-based).
    pub event_id: i64,
    /// When (ms).
    pub recorded_at_ms: i64,
    /// Whether the claim was released for a retry.
    pub claim_released: bool,
    /// The workflow task queued for the retry.
    pub created_task_ids: Vec<i64>,
    /// The report it recorded (`None` for a recovery).
    pub report: Option<LocalReport>,
    /// The claim that recovered the attempt, for a recovery.
    #[serde(default)]
    pub recovered_by: Option<(i64, i64, String)>,
}

/// An admission's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// The attempt admitted.
    pub attempt: LocalAttempt,
    /// Whether this repeated an earlier admission.
    pub duplicate: bool,
    /// The workflow task's lease expiry (ms).
    pub lease_expires_at_ms: i64,
    /// The server's clock when it answered (ms).
    pub now_ms: i64,
}

/// A control or heartbeat answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// The attempt.
    pub attempt: LocalAttempt,
    /// `None` while it may run; otherwise why it must stop.
    pub stop: Option<&'static str>,
    /// The cooperative cancellation request that stops it, when one does.
    pub cancellation: Option<PendingCancellation>,
    /// The workflow task's lease expiry (ms).
    pub lease_expires_at_ms: i64,
    /// The server's clock (ms).
    pub now_ms: i64,
}

/// The run's cooperative cancellation request, as a stopped attempt hears
/// it: the context its `CooperativeCancellationRequested` event records.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingCancellation {
    /// The request.
    pub request_id: String,
    /// Its cancellation context (`durable-workflow.cancellation-context/v1`).
    pub context: Value,
    /// The wire id of its `CooperativeCancellationRequested` event.
    pub history_event_id: String,
}

/// An accepted `acknowledge-cancellation`.
#[derive(Debug, Clone, PartialEq)]
pub struct StopAcknowledged {
    /// The request event the stop is recorded against.
    pub history_event_id: String,
    /// Whether this repeats an earlier acknowledgement.
    pub duplicate: bool,
}

/// An outcome or recovery answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The attempt (its row afterwards).
    pub attempt: LocalAttempt,
    /// The receipt.
    pub receipt: Receipt,
    /// Whether this repeated an earlier report.
    pub duplicate: bool,
}

/// A checkpoint's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The run.
    pub run: i64,
    /// The first sequence written.
    pub start_sequence: i64,
    /// The sequence after the last written.
    pub next_sequence: i64,
    /// The local members scheduled (sequence, execution id), in order.
    pub local_activities: Vec<(i64, String)>,
    /// Whether this repeated an earlier checkpoint.
    #[serde(skip)]
    pub duplicate: bool,
    /// Task queues that got activity tasks (for waking their pollers).
    #[serde(skip)]
    pub activity_queues: Vec<String>,
    /// Task queues that got workflow tasks (children).
    #[serde(skip)]
    pub workflow_queues: Vec<String>,
    /// Timers armed.
    #[serde(skip)]
    pub timers: Vec<crate::store::timers::ArmedTimer>,
}

/// What the store needs of a checkpoint.
#[derive(Debug, Clone)]
pub struct CheckpointRequest<'a> {
    /// The worker's id of it (a digest of its content).
    pub checkpoint_id: &'a str,
    /// The sequence its first command takes.
    pub start_sequence: i64,
    /// Its commands, parsed.
    pub commands: &'a [WorkflowCommand],
}

/// An outcome that failed the run at a structural limit.
pub const STRUCTURAL: &str = "structural_limit_exceeded";

type Answer<T> = Result<Result<T, Refusal>, Error>;

impl Store {
    /// Admits an attempt of the local activity at `sequence` on the claim.
    pub fn prepare_local_activity(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        sequence: i64,
        worker_attempt_id: &str,
        descriptor: &LocalDescriptor,
        lease_ms: i64,
    ) -> Answer<Admission> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = match claimed_run(&tx, task_id, fence)? {
            Ok(head) => head,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let run = head.id;
        let now = now_ms();
        let existing = load(&tx, run, sequence)?;
        let row = match existing {
            None => {
                let next = next_sequence(&tx, run)?;
                if sequence != next {
                    return Ok(refuse(
                        409,
                        "local_activity_sequence_mismatch",
                        format!(
                            "sequence {sequence} is not the run's next authored sequence ({next}): \
                             checkpoint the commands authored before it first"
                        ),
                    ));
                }
                if let Err(exceeded) = self.admission_limits(&head, descriptor) {
                    return self.fail_run(tx, task_id, &head, exceeded);
                }
                let descriptor = match resolve_cleanup(&tx, run, descriptor)? {
                    Ok(descriptor) => descriptor,
                    Err(refusal) => return Ok(Err(refusal)),
                };
                schedule(&tx, run, sequence, &descriptor)?;
                load(&tx, run, sequence)?.ok_or(Error::RunNotFound(run))?
            }
            Some(row) => row,
        };
        if row.descriptor.activity_type != descriptor.activity_type
            || row.descriptor.arguments != descriptor.arguments
            || row.descriptor.cancellation_policy != descriptor.cancellation_policy
        {
            return Ok(refuse(
                409,
                "local_activity_descriptor_mismatch",
                format!(
                    "sequence {sequence} holds local activity {:?} with other arguments or another \
                     cancellation policy; \
                     replay authored a different call",
                    row.descriptor.activity_type
                ),
            ));
        }
        match row.status.as_str() {
            "started" => {
                if row.held_by(task_id, fence)
                    && row.worker_attempt_id.as_deref() == Some(worker_attempt_id)
                {
                    let lease = lease_expiry(&tx, task_id)?;
                    tx.commit()?;
                    return Ok(Ok(Admission {
                        attempt: row,
                        duplicate: true,
                        lease_expires_at_ms: lease,
                        now_ms: now,
                    }));
                }
                return Ok(refuse(
                    409,
                    "local_activity_attempt_in_flight",
                    format!(
                        "attempt {} of sequence {sequence} was admitted on another claim; \
                         recover it (local-activities/recover) instead",
                        row.attempt_number
                    ),
                ));
            }
            "closed" => {
                return Ok(refuse(
                    409,
                    "local_activity_already_recorded",
                    format!("the local activity at sequence {sequence} already has its outcome"),
                ))
            }
            _ => {}
        }
        if row.schedule_to_close_deadline_ms.is_some_and(|d| d <= now) {
            // No attempt may start past the whole activity's deadline.
            return Ok(refuse(
                409,
                "schedule_to_close_deadline_exceeded",
                "the local activity's schedule_to_close deadline has passed; recover it",
            ));
        }
        // Closed calls of earlier claims answer no repeat any more (their
        // claims are over): only this claim's stay, for its retried reports.
        tx.prepare_cached(
            "DELETE FROM prepared_local_activities WHERE run_id = ?1 \
             AND status IN ('closed', 'stopped') AND workflow_task_id != ?2",
        )?
        .execute(params![run.0, task_id])?;
        let attempt_number = row.attempt_number + 1;
        let attempt_id = format!("{}:{attempt_number}", row.execution_id());
        let lease = now.saturating_add(lease_ms);
        tx.prepare_cached("UPDATE dispatch_tasks SET lease_expires_at_ms = ?2 WHERE id = ?1")?
            .execute(params![task_id, lease])?;
        let seconds = |s: Option<u64>| {
            s.map(|s| now.saturating_add(i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1000)))
        };
        // A cleanup call's deadlines stay within the cleanup deadline, and
        // its heartbeat deadline is that deadline unless it heartbeats.
        let cleanup_deadline = cleanup_deadline_ms(&row.descriptor);
        let clip = |d: Option<i64>| match (d, cleanup_deadline) {
            (Some(d), Some(c)) => Some(d.min(c)),
            (d, _) => d,
        };
        let start_to_close = clip(seconds(row.descriptor.start_to_close_timeout));
        let heartbeat = match seconds(row.descriptor.heartbeat_timeout) {
            Some(d) => clip(Some(d)),
            None => cleanup_deadline,
        };
        let mut payload = marker(&row);
        payload["activity_attempt_id"] = attempt_id.clone().into();
        payload["attempt_number"] = attempt_number.into();
        payload["workflow_task_id"] = task_id.to_string().into();
        payload["workflow_task_attempt"] = fence.attempt.into();
        payload["lease_owner"] = fence.lease_owner.into();
        payload["worker_attempt_id"] = worker_attempt_id.into();
        payload["start_to_close_deadline_at_ms"] = start_to_close.into();
        payload["schedule_to_close_deadline_at_ms"] = row.schedule_to_close_deadline_ms.into();
        payload["heartbeat_deadline_at_ms"] = heartbeat.into();
        let event = append_event(&tx, run, EventType::ActivityStarted, &payload, false)?;
        tx.prepare_cached(
            "UPDATE prepared_local_activities SET status = 'started', attempt_number = ?3, \
             activity_attempt_id = ?4, worker_attempt_id = ?5, workflow_task_id = ?6, \
             workflow_task_attempt = ?7, lease_owner = ?8, started_event_id = ?9, \
             start_to_close_deadline_ms = ?10, heartbeat_deadline_ms = ?11, heartbeat_details = NULL \
             WHERE run_id = ?1 AND sequence = ?2",
        )?
        .execute(params![
            run.0,
            sequence,
            attempt_number,
            attempt_id,
            worker_attempt_id,
            task_id,
            i64::try_from(fence.attempt).unwrap_or(i64::MAX),
            fence.lease_owner,
            i64::try_from(event).unwrap_or(i64::MAX).saturating_add(1),
            start_to_close,
            heartbeat
        ])?;
        let attempt = load(&tx, run, sequence)?.ok_or(Error::RunNotFound(run))?;
        tx.commit()?;
        Ok(Ok(Admission {
            attempt,
            duplicate: false,
            lease_expires_at_ms: lease,
            now_ms: now,
        }))
    }

    /// The attempt's authority: `control` (renews the claim's lease) or an
    /// application `heartbeat` (moves its heartbeat deadline, keeps its
    /// details on the row; history records the attempt once, at its
    /// `ActivityStarted`).
    pub fn local_activity_control(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        attempt_id: &str,
        heartbeat: Option<&Value>,
        lease_ms: i64,
    ) -> Answer<Control> {
        let tx = WriteTx::begin(&self.conn)?;
        let (head, attempt) = match claimed_attempt(&tx, task_id, fence, attempt_id)? {
            Ok(claimed) => claimed,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let now = now_ms();
        let stop = if attempt.status != "started"
            || attempt.activity_attempt_id.as_deref() != Some(attempt_id)
        {
            Some("activity_attempt_closed")
        } else if attempt.start_to_close_deadline_ms.is_some_and(|d| d <= now) {
            Some("start_to_close_deadline_exceeded")
        } else if attempt
            .schedule_to_close_deadline_ms
            .is_some_and(|d| d <= now)
        {
            Some("schedule_to_close_deadline_exceeded")
        } else if attempt.heartbeat_deadline_ms.is_some_and(|d| d <= now) {
            Some("heartbeat_deadline_exceeded")
        } else {
            None
        };
        // A running attempt stops for the run's cooperative cancellation
        // request (not yet delivered): the worker stops its callback,
        // acknowledges it, and delivers the request at the call.
        let cancellation = if stop.is_none() {
            pending_cancellation(&tx, head.id)?
        } else {
            None
        };
        let stop = stop.or(cancellation.as_ref().map(|_| "cancellation_requested"));
        let mut lease = lease_expiry(&tx, task_id)?;
        let mut attempt = attempt;
        if stop.is_none() {
            match heartbeat {
                None => {
                    lease = now.saturating_add(lease_ms);
                    tx.prepare_cached(
                        "UPDATE dispatch_tasks SET lease_expires_at_ms = ?2 WHERE id = ?1",
                    )?
                    .execute(params![task_id, lease])?;
                }
                Some(details) => {
                    let cleanup = cleanup_deadline_ms(&attempt.descriptor);
                    let deadline = match attempt.descriptor.heartbeat_timeout.map(|s| {
                        now.saturating_add(
                            i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1000),
                        )
                    }) {
                        Some(d) => Some(cleanup.map_or(d, |c| d.min(c))),
                        None => attempt.heartbeat_deadline_ms,
                    };
                    let details = (!details.is_null())
                        .then(|| serde_json::to_string(details))
                        .transpose()?;
                    tx.prepare_cached(
                        "UPDATE prepared_local_activities SET heartbeat_deadline_ms = ?3, \
                         heartbeat_details = ?4 WHERE run_id = ?1 AND sequence = ?2",
                    )?
                    .execute(params![
                        head.id.0,
                        attempt.sequence,
                        deadline,
                        details
                    ])?;
                    attempt.heartbeat_deadline_ms = deadline;
                }
            }
        }
        tx.commit()?;
        Ok(Ok(Control {
            attempt,
            stop,
            cancellation,
            lease_expires_at_ms: lease,
            now_ms: now,
        }))
    }

    /// Records how the attempt's callback ended; a repeat of the same
    /// report answers the first receipt.
    pub fn local_activity_outcome(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        attempt_id: &str,
        report: &LocalReport,
    ) -> Answer<Recorded> {
        let tx = WriteTx::begin(&self.conn)?;
        let (head, attempt) = match claimed_attempt(&tx, task_id, fence, attempt_id)? {
            Ok(claimed) => claimed,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if let Some(receipt) = attempt
            .receipt
            .as_ref()
            .filter(|r| r.activity_attempt_id == attempt_id)
        {
            if receipt.report.as_ref() == Some(report) {
                let receipt = receipt.clone();
                tx.commit()?;
                return Ok(Ok(Recorded {
                    attempt,
                    receipt,
                    duplicate: true,
                }));
            }
            return Ok(refuse(
                409,
                "local_activity_outcome_conflict",
                "the attempt already has a different outcome recorded",
            ));
        }
        if attempt.status != "started" {
            return Ok(refuse(
                409,
                "activity_attempt_closed",
                "the attempt is not running",
            ));
        }
        if report.outcome == "completed" {
            if let Err(exceeded) = payload_check(self, &head, &report.result) {
                return self.fail_run(tx, task_id, &head, exceeded);
            }
        }
        let now = now_ms();
        let timed_out = [
            (attempt.start_to_close_deadline_ms, "start_to_close"),
            (attempt.schedule_to_close_deadline_ms, "schedule_to_close"),
            (attempt.heartbeat_deadline_ms, "heartbeat"),
        ]
        .into_iter()
        .find(|(deadline, _)| deadline.is_some_and(|d| d <= now))
        .map(|(_, kind)| kind);
        let mut payload = marker(&attempt);
        payload["activity_attempt_id"] = attempt_id.into();
        payload["attempt_number"] = attempt.attempt_number.into();
        let failure = match (report.outcome.as_str(), timed_out) {
            ("completed", None) => {
                payload["result"] = report.result.clone();
                payload["payload_codec"] = codec_of(&report.result);
                None
            }
            (_, Some(kind)) => Some(Failure {
                event: EventType::ActivityTimedOut,
                message: format!("the local activity's {kind} timeout passed"),
                exception_type: Some("timeout".to_owned()),
                timeout_kind: Some(kind),
                final_failure: kind == "schedule_to_close",
            }),
            _ => Some(Failure {
                event: EventType::ActivityFailed,
                message: report.message.clone().unwrap_or_default(),
                exception_type: report.exception_type.clone(),
                timeout_kind: None,
                final_failure: report.non_retryable,
            }),
        };
        let receipt = record_terminal(
            &tx,
            &head,
            task_id,
            &attempt,
            payload,
            failure,
            Some(report.clone()),
            None,
        )?;
        let attempt = load(&tx, head.id, attempt.sequence)?.ok_or(Error::RunNotFound(head.id))?;
        tx.commit()?;
        Ok(Ok(Recorded {
            attempt,
            receipt,
            duplicate: false,
        }))
    }

    /// Closes the attempt at `sequence` that an earlier claim admitted and
    /// lost (its callback's stop unknown): a retry when the policy allows
    /// one, else its failure (or timeout).
    pub fn recover_local_activity(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        sequence: i64,
    ) -> Answer<Recorded> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = match claimed_run(&tx, task_id, fence)? {
            Ok(head) => head,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let Some(attempt) = load(&tx, head.id, sequence)? else {
            return Ok(refuse(
                404,
                "local_activity_not_found",
                format!("the run has no prepared local activity at sequence {sequence}"),
            ));
        };
        let mine = (
            task_id,
            i64::try_from(fence.attempt).unwrap_or(i64::MAX),
            fence.lease_owner.to_owned(),
        );
        if let Some(receipt) = attempt
            .receipt
            .as_ref()
            .filter(|r| r.recovered_by.as_ref() == Some(&mine))
        {
            let receipt = receipt.clone();
            tx.commit()?;
            return Ok(Ok(Recorded {
                attempt,
                receipt,
                duplicate: true,
            }));
        }
        if attempt.status != "started" {
            return Ok(refuse(
                409,
                "local_activity_not_in_flight",
                format!("the local activity at sequence {sequence} has no attempt in flight"),
            ));
        }
        if attempt.held_by(task_id, fence) {
            return Ok(refuse(
                409,
                "local_activity_attempt_live",
                "the attempt runs on this claim: report its outcome instead",
            ));
        }
        let now = now_ms();
        let timed_out = [
            (attempt.start_to_close_deadline_ms, "start_to_close"),
            (attempt.schedule_to_close_deadline_ms, "schedule_to_close"),
            (attempt.heartbeat_deadline_ms, "heartbeat"),
        ]
        .into_iter()
        .find(|(deadline, _)| deadline.is_some_and(|d| d <= now))
        .map(|(_, kind)| kind);
        let attempt_id = attempt.activity_attempt_id.clone().unwrap_or_default();
        let mut payload = marker(&attempt);
        payload["activity_attempt_id"] = attempt_id.clone().into();
        payload["attempt_number"] = attempt.attempt_number.into();
        payload["local_recovery"] = json!({
            "workflow_task_id": task_id.to_string(),
            "workflow_task_attempt": fence.attempt,
            "lease_owner": fence.lease_owner,
            "callback_stop_state": "unknown",
            "lost_workflow_task_id": attempt.workflow_task_id.map(|t| t.to_string()),
        });
        let failure = match timed_out {
            Some(kind) => Failure {
                event: EventType::ActivityTimedOut,
                message: format!("the local activity's {kind} timeout passed"),
                exception_type: Some("timeout".to_owned()),
                timeout_kind: Some(kind),
                final_failure: kind == "schedule_to_close",
            },
            None => Failure {
                event: EventType::ActivityFailed,
                message:
                    "the claim running the local activity was lost; its callback's stop is unknown"
                        .to_owned(),
                exception_type: Some("LocalActivityClaimLost".to_owned()),
                timeout_kind: None,
                final_failure: false,
            },
        };
        let receipt = record_terminal(
            &tx,
            &head,
            task_id,
            &attempt,
            payload,
            Some(failure),
            None,
            Some(mine),
        )?;
        let attempt = load(&tx, head.id, sequence)?.ok_or(Error::RunNotFound(head.id))?;
        tx.commit()?;
        Ok(Ok(Recorded {
            attempt,
            receipt,
            duplicate: false,
        }))
    }

    /// Writes the commands authored before a local activity (or a group's
    /// members, `prepare_local_activity` entries included) on the claim,
    /// without ending it. A repeat of the run's latest checkpoint answers
    /// its receipt.
    pub fn checkpoint_local_activities(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        request: &CheckpointRequest<'_>,
    ) -> Answer<Checkpoint> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = match claimed_run(&tx, task_id, fence)? {
            Ok(head) => head,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let run = head.id;
        let latest: Option<(String, String)> = tx
            .prepare_cached(
                "SELECT checkpoint_id, receipt FROM prepared_local_checkpoints WHERE run_id = ?1",
            )?
            .query_row([run.0], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((_, receipt)) = latest.filter(|(id, _)| id == request.checkpoint_id) {
            let mut receipt: Checkpoint = serde_json::from_str(&receipt)?;
            receipt.duplicate = true;
            tx.commit()?;
            return Ok(Ok(receipt));
        }
        let next = next_sequence(&tx, run)?;
        if request.start_sequence != next {
            return Ok(refuse(
                409,
                "checkpoint_sequence_mismatch",
                format!(
                    "start_sequence {} is not the run's next authored sequence ({next})",
                    request.start_sequence
                ),
            ));
        }
        // The cleanup calls of a group (run in a cancellation shield after
        // a delivery) each hold the delivered request's authority, checked
        // and resolved as a single call's admission does.
        let mut commands = Vec::with_capacity(request.commands.len());
        for command in request.commands {
            match command {
                WorkflowCommand::PrepareLocalActivity { descriptor } => {
                    match resolve_cleanup(&tx, run, descriptor)? {
                        Ok(descriptor) => {
                            commands.push(WorkflowCommand::PrepareLocalActivity { descriptor });
                        }
                        Err(refusal) => return Ok(Err(refusal)),
                    }
                }
                other => commands.push(other.clone()),
            }
        }
        let limits = self.config.limits;
        let streams = self.config.streams;
        let written = match crate::store::workflow_commands::checkpoint_commands(
            &tx,
            &limits,
            streams,
            head.clone(),
            &commands,
        ) {
            Ok(written) => written,
            Err(Error::StructuralLimit(exceeded)) => {
                drop(tx);
                let tx = WriteTx::begin(&self.conn)?;
                let head = load_head(&tx, run)?;
                return self.fail_run(tx, task_id, &head, exceeded);
            }
            Err(e) => return Err(e),
        };
        let after = next_sequence(&tx, run)?;
        let locals: Vec<(i64, String)> = request
            .commands
            .iter()
            .zip(next..)
            .filter(|(c, _)| matches!(c, WorkflowCommand::PrepareLocalActivity { .. }))
            .map(|(_, sequence)| (sequence, execution_id(run, sequence)))
            .collect();
        let receipt = Checkpoint {
            run: run.0,
            start_sequence: next,
            next_sequence: after,
            local_activities: locals,
            duplicate: false,
            activity_queues: written.activity_queues,
            workflow_queues: written.workflow_queues,
            timers: written.timers,
        };
        tx.prepare_cached(
            "INSERT INTO prepared_local_checkpoints (run_id, checkpoint_id, receipt) \
             VALUES (?1, ?2, ?3) ON CONFLICT (run_id) DO UPDATE SET \
             checkpoint_id = excluded.checkpoint_id, receipt = excluded.receipt",
        )?
        .execute(params![
            run.0,
            request.checkpoint_id,
            serde_json::to_string(&receipt)?
        ])?;
        tx.commit()?;
        Ok(Ok(receipt))
    }

    /// `acknowledge-cancellation`: the worker stopped the attempt's callback
    /// for the run's request `request_id` (after its control said so). The
    /// attempt ends without an outcome (the request is delivered at its
    /// call) and no longer counts as pending; a repeat answers the same.
    pub fn acknowledge_local_cancellation(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        attempt_id: &str,
        request_id: &str,
    ) -> Answer<StopAcknowledged> {
        let tx = WriteTx::begin(&self.conn)?;
        let (head, attempt) = match claimed_attempt(&tx, task_id, fence, attempt_id)? {
            Ok(claimed) => claimed,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let Some(request) = request_event(&tx, head.id)? else {
            return Ok(refuse(
                409,
                "cancellation_not_fenced",
                "the run has no cooperative cancellation request to stop the attempt for",
            ));
        };
        if request.request_id != request_id {
            return Ok(refuse(
                409,
                "cancellation_request_mismatch",
                format!(
                    "request_id {request_id:?} is not the run's request ({:?})",
                    request.request_id
                ),
            ));
        }
        let duplicate = match attempt.status.as_str() {
            "stopped" => true,
            "started" => {
                tx.prepare_cached(
                    "UPDATE prepared_local_activities SET status = 'stopped' \
                     WHERE run_id = ?1 AND sequence = ?2",
                )?
                .execute(params![head.id.0, attempt.sequence])?;
                bump(&tx, head.id, Pending::Activity, -1)?;
                false
            }
            _ => {
                return Ok(refuse(
                    409,
                    "activity_attempt_closed",
                    "the attempt already has its outcome",
                ))
            }
        };
        tx.commit()?;
        Ok(Ok(StopAcknowledged {
            history_event_id: request.history_event_id,
            duplicate,
        }))
    }

    /// Whether the claim holds the attempt `attempt_id` (the fence first).
    pub fn local_activity_owned(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        attempt_id: &str,
    ) -> Answer<()> {
        Ok(claimed_attempt(&self.conn, task_id, fence, attempt_id)?.map(|_| ()))
    }

    /// The run's prepared local activity at `sequence`, if any.
    pub fn prepared_local_activity(
        &self,
        run: RunId,
        sequence: i64,
    ) -> Result<Option<LocalAttempt>, Error> {
        load(&self.conn, run, sequence)
    }

    /// `pending_activity_count` (the run's open activities and its open
    /// prepared local ones) and the arguments' `payload_size_bytes`, checked
    /// before any row of the activity exists.
    fn admission_limits(
        &self,
        head: &RunHead,
        descriptor: &LocalDescriptor,
    ) -> Result<(), StructuralLimitExceeded> {
        let run_label = head.id.to_string();
        let run = RunRef {
            workflow_run_id: &run_label,
            workflow_type: &head.workflow_type,
        };
        // A prepared local activity counts as pending from its scheduling
        // to its terminal event, like an ordinary activity.
        let pending = head.pending.activities;
        if let Some(warning) =
            self.config
                .limits
                .check(LimitKind::PendingActivityCount, pending, &run)?
        {
            warning.emit();
        }
        payload_check(self, head, &descriptor.arguments)
    }

    fn fail_run<T>(
        &self,
        tx: WriteTx<'_>,
        task_id: i64,
        head: &RunHead,
        exceeded: StructuralLimitExceeded,
    ) -> Answer<T> {
        let message = exceeded.to_string();
        fail_structural(&tx, head, exceeded)?;
        tx.prepare_cached("UPDATE dispatch_tasks SET status = 'done' WHERE id = ?1")?
            .execute([task_id])?;
        tx.commit()?;
        Ok(refuse(409, STRUCTURAL, message))
    }
}

fn payload_check(
    store: &Store,
    head: &RunHead,
    payload: &Value,
) -> Result<(), StructuralLimitExceeded> {
    let run_label = head.id.to_string();
    let run = RunRef {
        workflow_run_id: &run_label,
        workflow_type: &head.workflow_type,
    };
    let size = serde_json::to_string(payload).map_or(0, |t| t.len());
    store
        .config
        .limits
        .check(
            LimitKind::PayloadSizeBytes,
            u64::try_from(size).unwrap_or(u64::MAX),
            &run,
        )
        .map(|_| ())
}

/// A cleanup call's authority checked against the run's delivered request
/// and resolved to what the receipts carry; other calls pass unchanged.
pub(crate) fn resolve_cleanup(
    conn: &Connection,
    run: RunId,
    descriptor: &LocalDescriptor,
) -> Result<Result<LocalDescriptor, Refusal>, Error> {
    let Some(asked) = &descriptor.cancellation_cleanup else {
        return Ok(Ok(descriptor.clone()));
    };
    let request: Option<(Option<i64>, i64)> = conn
        .prepare_cached(
            "SELECT delivered_sequence, cleanup_deadline_at_ms FROM cancellation_requests \
             WHERE run_id = ?1",
        )?
        .query_row([run.0], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let delivered: Option<i64> = conn
        .prepare_cached(
            "SELECT sequence FROM history_events WHERE run_id = ?1 AND event_type = ?2 \
             ORDER BY sequence DESC LIMIT 1",
        )?
        .query_row(
            params![run.0, EventType::CooperativeCancellationDelivered.as_str()],
            |r| r.get(0),
        )
        .optional()?;
    let context = request_event(conn, run)?;
    let (Some((Some(_), deadline_ms)), Some(delivered), Some(context)) =
        (request, delivered, context)
    else {
        return Ok(refuse(
            409,
            "cancellation_cleanup_not_authorized",
            "the run has no delivered cancellation request for this cleanup call",
        ));
    };
    let delivery_id = (delivered + 1).to_string();
    if asked["request_id"].as_str() != Some(context.request_id.as_str())
        || asked["delivery_history_event_id"].as_str() != Some(delivery_id.as_str())
    {
        return Ok(refuse(
            409,
            "cancellation_cleanup_not_authorized",
            "cancellation_cleanup must name the run's delivered request and its delivery event",
        ));
    }
    let mut resolved = descriptor.clone();
    resolved.cancellation_cleanup = Some(json!({
        "request_id": context.request_id,
        "root_request_id": context.context["root_request_id"],
        "delivery_history_event_id": delivery_id,
        "cleanup_deadline_at": context.context["cleanup_deadline_at"],
        "cleanup_deadline_at_ms": deadline_ms,
    }));
    Ok(Ok(resolved))
}

/// The fields every event of a prepared local activity carries.
fn marker(row: &LocalAttempt) -> Value {
    marker_of(row.run, row.sequence, &row.descriptor)
}

/// How an attempt failed.
struct Failure {
    /// `ActivityFailed` or `ActivityTimedOut` (when no retry follows).
    event: EventType,
    message: String,
    exception_type: Option<String>,
    /// Which timeout passed, for a timeout.
    timeout_kind: Option<&'static str>,
    /// Whether no retry may follow.
    final_failure: bool,
}

/// Writes an attempt's terminal (or retry) event and its receipt.
#[allow(clippy::too_many_arguments)]
fn record_terminal(
    conn: &Connection,
    head: &RunHead,
    task_id: i64,
    attempt: &LocalAttempt,
    mut payload: Value,
    failure: Option<Failure>,
    report: Option<LocalReport>,
    recovered_by: Option<(i64, i64, String)>,
) -> Result<Receipt, Error> {
    let run = head.id;
    let now = now_ms();
    let mut retry_at = None;
    let event_type = match failure {
        None => EventType::ActivityCompleted,
        Some(Failure {
            event: kind,
            message,
            exception_type,
            timeout_kind,
            final_failure,
        }) => {
            payload["message"] = message.into();
            payload["non_retryable"] = final_failure.into();
            match timeout_kind {
                Some(timeout) => {
                    payload["timeout_kind"] = timeout.into();
                    payload["failure_category"] = "timeout".into();
                    payload["exception_class"] = exception_type.clone().into();
                }
                None => {
                    payload["failure_category"] = "application".into();
                }
            }
            payload["exception_type"] = exception_type.clone().into();
            let delay = (!final_failure)
                .then(|| {
                    retry_delay(
                        attempt.descriptor.retry_policy.as_ref(),
                        attempt.attempt_number,
                        exception_type.as_deref(),
                    )
                })
                .flatten();
            // No retry may start past the whole activity's deadline.
            let at = delay.map(|d| now.saturating_add(d.saturating_mul(1000)));
            match at.filter(|at| {
                attempt
                    .schedule_to_close_deadline_ms
                    .is_none_or(|deadline| *at < deadline)
            }) {
                Some(at) => {
                    retry_at = Some(at);
                    payload["retry_at_ms"] = at.into();
                    payload["next_attempt_number"] = (attempt.attempt_number + 1).into();
                    EventType::ActivityRetryScheduled
                }
                None => kind,
            }
        }
    };
    let event = append_event(conn, run, event_type, &payload, false)?;
    let mut created = Vec::new();
    if let Some(at) = retry_at {
        // The claim is released: the next attempt runs on a new workflow
        // task, due after the backoff.
        release_held_signals(conn, run)?;
        crate::store::message_streams::release_carried(conn, run)?;
        conn.prepare_cached("UPDATE dispatch_tasks SET status = 'done' WHERE id = ?1")?
            .execute([task_id])?;
        enqueue_workflow_at(conn, run, at)?;
        let queued: Option<i64> = conn
            .prepare_cached(
                "SELECT id FROM dispatch_tasks WHERE run_id = ?1 AND kind = 'workflow' \
                 AND status = 'ready' ORDER BY id DESC LIMIT 1",
            )?
            .query_row([run.0], |r| r.get(0))
            .optional()?;
        created.extend(queued);
    }
    let receipt = Receipt {
        activity_attempt_id: attempt.activity_attempt_id.clone().unwrap_or_default(),
        event_type: event_type.as_str().to_owned(),
        event_id: i64::try_from(event).unwrap_or(i64::MAX).saturating_add(1),
        recorded_at_ms: now,
        claim_released: retry_at.is_some(),
        created_task_ids: created,
        report,
        recovered_by,
    };
    let status = if retry_at.is_some() {
        "retry_scheduled"
    } else {
        bump(conn, run, Pending::Activity, -1)?;
        "closed"
    };
    conn.prepare_cached(
        "UPDATE prepared_local_activities SET status = ?3, receipt = ?4 \
         WHERE run_id = ?1 AND sequence = ?2",
    )?
    .execute(params![
        run.0,
        attempt.sequence,
        status,
        serde_json::to_string(&receipt)?
    ])?;
    Ok(receipt)
}

/// Seconds before the next attempt, or `None` when the policy allows no
/// more (one attempt when there is no policy).
fn retry_delay(
    policy: Option<&RetryPolicy>,
    attempt_number: i64,
    exception_type: Option<&str>,
) -> Option<i64> {
    let policy = policy?;
    let max = i64::try_from(policy.max_attempts.unwrap_or(1)).unwrap_or(i64::MAX);
    if attempt_number >= max {
        return None;
    }
    if exception_type.is_some_and(|t| policy.non_retryable_error_types.iter().any(|n| n == t)) {
        return None;
    }
    let index = usize::try_from(attempt_number.saturating_sub(1)).unwrap_or(usize::MAX);
    let backoff = policy
        .backoff_seconds
        .get(index)
        .or(policy.backoff_seconds.last())
        .copied()
        .unwrap_or(1);
    Some(i64::try_from(backoff).unwrap_or(i64::MAX))
}

/// The claim's run, if the fence holds and the run is running.
fn claimed_run(
    conn: &Connection,
    task_id: i64,
    fence: WorkflowTaskFence<'_>,
) -> Result<Result<RunHead, Refusal>, Error> {
    let row = leased_to(
        conn,
        task_id,
        TaskKind::Workflow,
        "workflow task",
        fence.lease_owner,
    )?;
    if row.attempt != fence.attempt {
        return Err(Error::StaleTask {
            task: task_id,
            reason: "workflow_task_attempt_mismatch",
        });
    }
    let head = load_head(conn, row.run)?;
    if head.status != RunStatus::Running {
        return Ok(refuse(
            409,
            "run_not_running",
            format!("the run is {}", head.status.as_str()),
        ));
    }
    Ok(Ok(head))
}

/// The run claimed by workflow task `task_id` under `fence` and its local
/// attempt `attempt_id` admitted on that claim ([`claimed_run`], then
/// [`attempt_of_claim`]).
fn claimed_attempt(
    conn: &Connection,
    task_id: i64,
    fence: WorkflowTaskFence<'_>,
    attempt_id: &str,
) -> Result<Result<(RunHead, LocalAttempt), Refusal>, Error> {
    let head = match claimed_run(conn, task_id, fence)? {
        Ok(head) => head,
        Err(refusal) => return Ok(Err(refusal)),
    };
    Ok(attempt_of_claim(conn, head.id, attempt_id, task_id, fence)?.map(|attempt| (head, attempt)))
}

/// The attempt `attempt_id` of `run`, if it belongs to the claim.
fn attempt_of_claim(
    conn: &Connection,
    run: RunId,
    attempt_id: &str,
    task_id: i64,
    fence: WorkflowTaskFence<'_>,
) -> Result<Result<LocalAttempt, Refusal>, Error> {
    let sequence: Option<i64> = conn
        .prepare_cached(
            "SELECT sequence FROM prepared_local_activities \
             WHERE run_id = ?1 AND activity_attempt_id = ?2",
        )?
        .query_row(params![run.0, attempt_id], |r| r.get(0))
        .optional()?;
    let attempt = match sequence {
        Some(sequence) => load(conn, run, sequence)?,
        None => None,
    };
    let Some(attempt) = attempt else {
        return Ok(refuse(
            404,
            "local_activity_attempt_not_found",
            format!("the run has no current prepared local attempt {attempt_id:?}"),
        ));
    };
    if !attempt.held_by(task_id, fence) {
        return Ok(refuse(
            409,
            "stale_local_activity_attempt",
            "the attempt was admitted on another workflow task claim",
        ));
    }
    Ok(Ok(attempt))
}

/// The run's request as its `CooperativeCancellationRequested` event
/// recorded it (with its cancellation context), if it has one.
fn request_event(conn: &Connection, run: RunId) -> Result<Option<PendingCancellation>, Error> {
    let row: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT sequence, payload FROM history_events WHERE run_id = ?1 AND event_type = ?2 \
             ORDER BY sequence DESC LIMIT 1",
        )?
        .query_row(
            params![run.0, EventType::CooperativeCancellationRequested.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((sequence, payload)) = row else {
        return Ok(None);
    };
    let payload: Value = serde_json::from_str(&payload)?;
    let (Some(request_id), Some(context)) = (
        payload["workflow_command_id"].as_str(),
        payload.get("cancellation").filter(|c| c.is_object()),
    ) else {
        return Ok(None);
    };
    Ok(Some(PendingCancellation {
        request_id: request_id.to_owned(),
        context: context.clone(),
        history_event_id: (sequence + 1).to_string(),
    }))
}

/// The run's request if it is pending: requested, not yet delivered.
fn pending_cancellation(
    conn: &Connection,
    run: RunId,
) -> Result<Option<PendingCancellation>, Error> {
    let pending: Option<Option<i64>> = conn
        .prepare_cached("SELECT delivered_sequence FROM cancellation_requests WHERE run_id = ?1")?
        .query_row([run.0], |r| r.get(0))
        .optional()?;
    match pending {
        Some(None) => request_event(conn, run),
        _ => Ok(None),
    }
}

fn next_sequence(conn: &Connection, run: RunId) -> Result<i64, Error> {
    let count: i64 = conn
        .prepare_cached("SELECT command_count FROM runs WHERE id = ?1")?
        .query_row([run.0], |r| r.get(0))?;
    Ok(count + 1)
}

fn lease_expiry(conn: &Connection, task_id: i64) -> Result<i64, Error> {
    let lease: Option<i64> = conn
        .prepare_cached("SELECT lease_expires_at_ms FROM dispatch_tasks WHERE id = ?1")?
        .query_row([task_id], |r| r.get(0))?;
    Ok(lease.unwrap_or_default())
}

fn load(conn: &Connection, run: RunId, sequence: i64) -> Result<Option<LocalAttempt>, Error> {
    type Raw = (
        String,
        String,
        i64,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<i64>,
        Option<String>,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<String>,
    );
    let raw: Option<Raw> = conn
        .prepare_cached(
            "SELECT descriptor, status, attempt_number, activity_attempt_id, worker_attempt_id, \
             workflow_task_id, workflow_task_attempt, lease_owner, scheduled_at_ms, \
             started_event_id, start_to_close_deadline_ms, schedule_to_close_deadline_ms, \
             heartbeat_deadline_ms, receipt \
             FROM prepared_local_activities WHERE run_id = ?1 AND sequence = ?2",
        )?
        .query_row(params![run.0, sequence], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
                r.get(11)?,
                r.get(12)?,
                r.get(13)?,
            ))
        })
        .optional()?;
    let Some(raw) = raw else {
        return Ok(None);
    };
    Ok(Some(LocalAttempt {
        run,
        sequence,
        descriptor: serde_json::from_str(&raw.0)?,
        status: raw.1,
        attempt_number: raw.2,
        activity_attempt_id: raw.3,
        worker_attempt_id: raw.4,
        workflow_task_id: raw.5,
        workflow_task_attempt: raw.6,
        lease_owner: raw.7,
        scheduled_at_ms: raw.8,
        started_event_id: raw.9,
        start_to_close_deadline_ms: raw.10,
        schedule_to_close_deadline_ms: raw.11,
        heartbeat_deadline_ms: raw.12,
        receipt: raw.13.map(|t| serde_json::from_str(&t)).transpose()?,
    }))
}
