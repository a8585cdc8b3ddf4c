//! Cooperative cancellation on the wire (worker protocol 1.20; the store
//! side is `store::cancellation`):
//!
//! - `POST /api/workflows/{id}[/runs/{run}]/request-cancellation`
//!   (`reason`, `cleanup_timeout_seconds`): the run's one pending request,
//!   answered with its `cancellation_request` observation; a repeat answers
//!   the same request, `duplicate: true`.
//! - The observation (`request_id`, `requested_at`, `cleanup_deadline_at`,
//!   `history_refresh_page_token`) rides on the workflow task's poll and
//!   heartbeat answers from the request until the run closes (delivered
//!   or not: the Rust SDK refuses to replay a history holding the request
//!   without it).
//! - `POST /api/worker/workflow-tasks/{id}/deliver-cancellation`: the worker
//!   holding the run's task delivers the request at the authored call its
//!   replay stopped at.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::wire::validation;
use crate::server::wire::{self, Checks};
use crate::server::worker::check_workflow_lease;
use crate::server::{ApiError, Engine};
use crate::store::cancellation::{CancellationRequest, Delivered, Delivery, CALL_KINDS};
use crate::store::{Error as StoreError, RunId, TaskKind};

/// The cleanup time a request gets when it names none.
pub const DEFAULT_CLEANUP_TIMEOUT_SECONDS: u64 = 300;
/// The longest cleanup time a request may ask for (both SDKs' bound).
pub const MAX_CLEANUP_TIMEOUT_SECONDS: u64 = 3_600;
/// The longest reason (both SDKs' bound, in characters).
pub const MAX_REASON_CHARS: usize = 1_000;
/// The widest call a delivery may name (both SDKs' bound on a span).
pub const MAX_SEQUENCE_SPAN: i64 = 1_000;

/// `request-cancellation`'s body.
#[derive(Debug, Deserialize, Default)]
pub struct RequestCancellationBody {
    /// Why (recorded on the request's event and the run's close).
    #[serde(default)]
    pub reason: Option<String>,
    /// How long the workflow may clean up, 1..=3600 (default 300).
    #[serde(default)]
    pub cleanup_timeout_seconds: Option<i64>,
}

/// `deliver-cancellation`'s body.
#[derive(Debug, Deserialize, Default)]
pub struct DeliverCancellationBody {
    /// The worker the task was leased to.
    #[serde(default)]
    pub lease_owner: String,
    /// The attempt it was given.
    #[serde(default)]
    pub workflow_task_attempt: i64,
    /// The request delivered (the run's).
    #[serde(default)]
    pub request_id: String,
    /// The authored call's first command sequence.
    #[serde(default)]
    pub sequence: i64,
    /// Its kind.
    #[serde(default)]
    pub call_kind: String,
    /// Its span (default 1).
    #[serde(default)]
    pub sequence_span: Option<i64>,
    /// A selection handle's earlier operation.
    #[serde(default)]
    pub operation_sequence: Option<i64>,
    /// That operation's span (default 1).
    #[serde(default)]
    pub operation_sequence_span: Option<i64>,
}

/// The longest identity an `acknowledge-cancellation` may carry (both
/// SDKs' bound, in bytes).
pub const MAX_ACK_IDENTITY_BYTES: usize = 255;

/// `acknowledge-cancellation`'s body.
#[derive(Debug, Deserialize, Default)]
pub struct AcknowledgeCancellationBody {
    /// The attempt (as for the attempt's other reports).
    #[serde(default)]
    pub activity_attempt_id: String,
    /// The worker it was leased to.
    #[serde(default)]
    pub lease_owner: String,
    /// The cancellation request the status observation's
    /// `cancellation_acknowledgement` named.
    #[serde(default)]
    pub request_id: String,
}

/// A request as the SDKs observe it (`cancellation_request`).
pub fn observation(request: &CancellationRequest) -> Value {
    json!({
        "request_id": request.request_id,
        "requested_at": wire::timestamp(request.requested_at_ms),
        "cleanup_deadline_at": wire::timestamp(request.cleanup_deadline_at_ms),
        // The refreshed history the worker reads before it replays the
        // request: the run's whole history, from its first event.
        "history_refresh_page_token": wire::page_token(0),
        "reason": request.reason,
    })
}

impl Engine {
    /// `POST /api/workflows/{id}[/runs/{run}]/request-cancellation`.
    pub fn request_cancellation(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        body: RequestCancellationBody,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        checks.range(
            "cleanup_timeout_seconds",
            body.cleanup_timeout_seconds,
            1,
            MAX_CLEANUP_TIMEOUT_SECONDS as i64,
        );
        if body
            .reason
            .as_ref()
            .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
        {
            checks.problem(
                "reason",
                format!("The reason may be at most {MAX_REASON_CHARS} characters."),
            );
        }
        if !checks.problems.is_empty() {
            return Err(validation(checks).into());
        }
        let stop = crate::server::wire::StopBody {
            reason: None,
            request_id: None,
        };
        let (_slot, run) = self.admit_run_command(namespace, workflow_id, run_id, &stop)?;
        let seconds = body
            .cleanup_timeout_seconds
            .map_or(DEFAULT_CLEANUP_TIMEOUT_SECONDS, |s| s.unsigned_abs());
        let reason = body.reason.clone();
        let (request, duplicate) = self
            .write(move |store| store.request_cancellation(run, reason.as_deref(), seconds))
            .map_err(|e| match e {
                StoreError::RunNotActive { status, .. } => ApiError::RunClosed {
                    operation: "request-cancellation",
                    run_id: wire::run_id(run),
                    status: status.as_str().to_owned(),
                },
                other => other.into(),
            })?;
        if !duplicate {
            self.wake_workflow_of(run);
        }
        Ok(json!({
            "accepted": true, "duplicate": duplicate,
            "workflow_id": workflow_id, "run_id": wire::run_id(run),
            "cancellation_request": observation(&request),
        }))
    }

    /// `POST /api/worker/workflow-tasks/{id}/deliver-cancellation`.
    pub fn deliver_cancellation(
        &self,
        task_id: &str,
        body: DeliverCancellationBody,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let task = check_workflow_lease(
            &mut checks,
            task_id,
            &body.lease_owner,
            body.workflow_task_attempt,
        );
        if body.request_id.trim().is_empty() {
            checks.problem(
                "request_id",
                "The request_id field is required: the cancellation_request the task observed.",
            );
        }
        checks.range(
            "sequence",
            Some(body.sequence),
            1,
            i64::MAX - MAX_SEQUENCE_SPAN,
        );
        if !CALL_KINDS.contains(&body.call_kind.as_str()) {
            checks.problem(
                "call_kind",
                format!("The call_kind must be one of {}.", CALL_KINDS.join(", ")),
            );
        }
        let span = body.sequence_span.unwrap_or(1);
        checks.range("sequence_span", Some(span), 1, MAX_SEQUENCE_SPAN);
        if body.call_kind != "parallel" && span != 1 {
            checks.problem(
                "sequence_span",
                "Only a parallel call spans more than one sequence.",
            );
        }
        let operation_span = body.operation_sequence_span.unwrap_or(1);
        checks.range(
            "operation_sequence_span",
            Some(operation_span),
            1,
            MAX_SEQUENCE_SPAN,
        );
        let selection = body.call_kind == "selection_handle";
        match body.operation_sequence {
            Some(operation)
                if selection
                    && (operation < 1
                        || operation >= body.sequence
                        || operation_span > body.sequence - operation) =>
            {
                checks.problem(
                    "operation_sequence",
                    "A selection handle must name an earlier authored operation.",
                );
            }
            None if selection => {
                checks.problem(
                    "operation_sequence",
                    "A selection handle's delivery names its operation_sequence.",
                );
            }
            Some(_) if !selection => {
                checks.problem(
                    "operation_sequence",
                    "Only a selection handle carries an operation range.",
                );
            }
            _ => {}
        }
        if !checks.problems.is_empty() {
            return Err(validation(checks).into());
        }
        let task = task.unwrap_or_default();
        let delivery = Delivery {
            request_id: body.request_id.clone(),
            sequence: body.sequence,
            call_kind: body.call_kind.clone(),
            sequence_span: span,
            operation_sequence: body.operation_sequence,
            operation_sequence_span: operation_span,
        };
        let attempt = body.workflow_task_attempt.unsigned_abs();
        let owner = body.lease_owner.clone();
        let recorded = delivery.clone();
        let run =
            self.write(move |store| store.deliver_cancellation(task, &owner, attempt, &recorded))?;
        let delivered = run.map_err(|refusal| ApiError::CancellationRefused {
            reason: refusal.reason,
            message: refusal.message,
        })?;
        let run = match delivered {
            Delivered::Delivered(run) => run,
            Delivered::Waiting { run, reason } => {
                // Both SDKs take this answer as the claim's release: they
                // return to polling, and the run's next workflow task
                // (when the child or activity closes) delivers again; a
                // prepared local attempt's wait queued that task already.
                self.wake_cascade_of(run);
                self.wake_workflow_of(run);
                return Ok(json!({
                    "delivered": false, "reason": reason, "claim_released": true,
                    "task_id": task_id, "workflow_run_id": wire::run_id(run),
                    "request_id": null, "sequence": null, "call_kind": null,
                    "sequence_span": null, "operation_sequence": null,
                    "operation_sequence_span": null,
                }));
            }
        };
        Ok(json!({
            "delivered": true, "task_id": task_id, "workflow_run_id": wire::run_id(run),
            "request_id": delivery.request_id, "sequence": delivery.sequence,
            "call_kind": delivery.call_kind, "sequence_span": delivery.sequence_span,
            "operation_sequence": delivery.operation_sequence,
            "operation_sequence_span": delivery.operation_sequence_span,
        }))
    }

    /// `POST /api/worker/activity-tasks/{id}/status`: the cooperative
    /// workers' read-only ownership observation of an attempt (nothing is
    /// renewed or recorded; a heartbeat renews).
    pub fn activity_task_status(
        &self,
        task_id: &str,
        body: crate::server::wire::ActivityReport,
    ) -> Result<Value, ApiError> {
        let task = crate::server::worker::activity_task(&self.config, task_id, &body)?;
        let (owner, attempt_id) = (body.lease_owner.clone(), body.activity_attempt_id.clone());
        let receipt_of = task;
        let status = self.read(move |store| {
            let fence = crate::store::ActivityFence {
                lease_owner: &owner,
                activity_attempt_id: &attempt_id,
            };
            store.activity_attempt_status(task, fence)
        });
        let mut answer = json!({
            "task_id": task_id, "activity_attempt_id": body.activity_attempt_id,
            "lease_owner": body.lease_owner, "heartbeat_recorded": false,
        });
        match status {
            // The Rust SDK's cooperative worker also checks the task,
            // attempt and activity states before it runs the callback.
            Ok((true, expires)) => {
                answer["can_continue"] = true.into();
                answer["cancel_requested"] = false.into();
                answer["reason"] = Value::Null;
                answer["lease_expires_at"] = wire::timestamp(expires).into();
                answer["task_status"] = "leased".into();
                answer["attempt_status"] = "running".into();
                answer["activity_status"] = "running".into();
            }
            Ok((false, _)) => {
                answer["can_continue"] = false.into();
                answer["cancel_requested"] = true.into();
                answer["reason"] = "activity_cancelled".into();
                answer["task_status"] = "leased".into();
                answer["attempt_status"] = "cancelled".into();
                answer["activity_status"] = "cancelled".into();
                // A cooperative cancellation stopped it: the worker stops
                // its callback and reports that with acknowledge-cancellation.
                if let Some(receipt) = self.read(move |s| s.activity_stop_receipt(receipt_of))? {
                    answer["cancellation_acknowledgement"] = json!({
                        "request_id": receipt.request_id,
                        "root_request_id": receipt.request_id,
                        "cleanup_deadline_at": wire::timestamp(receipt.cleanup_deadline_at_ms),
                        "cancellation_history_event_id": receipt.cancellation_history_event_id,
                        "callback_state": "unknown",
                    });
                }
            }
            Err(StoreError::AttemptRunClosed { status, .. }) => {
                answer["can_continue"] = false.into();
                answer["cancel_requested"] = true.into();
                answer["reason"] = crate::server::error::run_closed_reason(status).into();
                answer["run_closed_reason"] = status.as_str().into();
                answer["task_status"] = "done".into();
                answer["attempt_status"] = "cancelled".into();
                answer["activity_status"] = "cancelled".into();
            }
            Err(e) => return Err(e.into()),
        }
        Ok(answer)
    }

    /// `POST /api/worker/activity-tasks/{id}/acknowledge-cancellation`: the
    /// attempt's callback stopped after a cooperative cancellation stopped
    /// its activity (fenced as the other activity reports).
    pub fn acknowledge_activity_cancellation(
        &self,
        task_id: &str,
        body: AcknowledgeCancellationBody,
    ) -> Result<Value, ApiError> {
        let report = crate::server::wire::ActivityReport {
            activity_attempt_id: body.activity_attempt_id.clone(),
            lease_owner: body.lease_owner.clone(),
            ..Default::default()
        };
        let mut checks = Checks::default();
        if body.request_id.trim().is_empty() {
            checks.problem(
                "request_id",
                "The request_id field is required: the cancellation_acknowledgement's request_id \
                 from the attempt's status observation.",
            );
        } else if body.request_id.len() > MAX_ACK_IDENTITY_BYTES {
            checks.problem(
                "request_id",
                format!("The request_id may be at most {MAX_ACK_IDENTITY_BYTES} bytes."),
            );
        }
        let task = crate::server::worker::activity_task(&self.config, task_id, &report);
        if !checks.problems.is_empty() {
            return Err(validation(checks).into());
        }
        let task = task?;
        let (owner, attempt_id, request_id) = (
            body.lease_owner.clone(),
            body.activity_attempt_id.clone(),
            body.request_id.clone(),
        );
        let acknowledged = self.write(move |store| {
            let fence = crate::store::ActivityFence {
                lease_owner: &owner,
                activity_attempt_id: &attempt_id,
            };
            store.acknowledge_activity_cancellation(task, fence, &request_id)
        })?;
        let acknowledged = acknowledged.map_err(|refusal| ApiError::CancellationRefused {
            reason: refusal.reason,
            message: refusal.message,
        })?;
        if !acknowledged.duplicate {
            // A run whose delivery waited for this activity has a workflow
            // task now (a repeat changed nothing).
            if let Ok(run) = self.read(move |s| s.run_of_task(task)) {
                self.wake_workflow_of(run);
            }
        }
        Ok(json!({
            "task_id": task_id, "activity_attempt_id": body.activity_attempt_id,
            "lease_owner": body.lease_owner, "request_id": body.request_id,
            "acknowledged": true, "duplicate": acknowledged.duplicate,
            "history_event_id": acknowledged.history_event_id,
            "reason": null, "heartbeat_recorded": false,
        }))
    }

    /// Wakes the pollers of the workflow queues of the runs a parked
    /// delivery of `run` gave a cooperative request and a task (its open
    /// children, the runs its Nexus calls wait on).
    fn wake_cascade_of(&self, run: RunId) {
        match self.read(move |s| s.cascade_queues(run)) {
            Ok(queues) => {
                for (namespace, queue) in queues {
                    self.wake(&namespace, &queue, TaskKind::Workflow.as_str());
                }
            }
            Err(e) => self.post_commit_failed("cancellation_wake", &e),
        }
    }

    /// The request of `run` as a task observes it (`None` when the run has
    /// none).
    pub(crate) fn cancellation_observation(&self, run: RunId) -> Result<Option<Value>, ApiError> {
        Ok(self
            .read(|s| s.pending_cancellation(run))?
            .map(|r| observation(&r)))
    }

    /// A request already read, as a task observes it (a task's render
    /// reads it with its history page, in one read transaction).
    pub(crate) fn cancellation_observed(&self, request: &CancellationRequest) -> Value {
        observation(request)
    }

    /// Wakes the pollers of `run`'s workflow queue (a task was queued).
    fn wake_workflow_of(&self, run: RunId) {
        match self.read(|s| s.run(run)) {
            Ok(stored) => self.wake(
                &stored.namespace,
                &stored.task_queue,
                TaskKind::Workflow.as_str(),
            ),
            Err(e) => self.post_commit_failed("cancellation_wake", &e),
        }
    }
}
