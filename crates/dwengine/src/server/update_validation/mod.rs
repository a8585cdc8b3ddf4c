//! Update validators: synchronous pre-accept validation by a worker.
//!
//! A worker that declares validators registers with the
//! `update_validation_tasks` capability and, per workflow type, the update
//! names it validates (`workflow_command_contracts.<type>.update_validators`).
//! An update of such a name sent to a run of that type on that worker's
//! task queue is not accepted at once: it waits, neither accepted nor in
//! history ([`crate::store::update_validations`]), until a worker polling
//! `/api/worker/workflow-tasks/poll` with `task_kinds: ["workflow",
//! "update_validation"]` leases it as an `update_validation` task (the
//! run's history, the update's arguments), runs the validator and reports
//! `POST /api/worker/update-validation-tasks/{id}/approve` or `…/reject`,
//! fenced by `lease_owner` and `update_validation_attempt`. Approval
//! accepts it (`UpdateAccepted`, a workflow task) and the caller's
//! `wait_for` goes on from there; rejection answers the caller 422
//! `update_validator_rejected` and writes nothing. A lease that lapses is
//! handed out again; a caller whose wait ends first gets 504 and the
//! update is dropped, never accepted.
//!
//! A worker that does not name `update_validation` in its poll's
//! `task_kinds` (an older protocol, the Rust SDK, which refuses
//! validators) is never handed a validation task, and an update no
//! registered worker validates is accepted as before.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub mod contract;

use contract::EXPIRY_SLACK;
pub use contract::{PendingValidation, ValidationLook, CAPABILITY, TASK_KIND};

use crate::server::control::{MessageKind, PendingUpdate, UpdateStep};
use crate::server::task_answer::PollAnswer;
use crate::server::wire::validation;
use crate::server::wire::{self, Checks, UpdateBody};
use crate::server::worker::{PollKind, PollSpec, PollStep};
use crate::server::{ApiError, Engine};
use crate::store::update_validations::{
    LeasedValidation, ValidationAdmission, ValidationRequest, ValidationState, VerdictRefusal,
};
use crate::store::{Error as StoreError, LeasedTask, RunId, TaskKind, UpdateRequest};
use crate::waiters::{WaitKind, WaitPermit};

/// A validation's outcome as its caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Approved: the accepted update's id.
    Approved(i64),
    /// Rejected: the worker's failure.
    Rejected(Value),
    /// Gone before this caller saw a verdict (a request id joined a
    /// validation whose first caller answered, and it was not accepted).
    Gone,
}

/// Maps a closed run to the documented `run_not_active`.
fn closed(e: StoreError, run: RunId) -> ApiError {
    match e {
        StoreError::RunNotActive { status, .. } => ApiError::RunClosed {
            operation: "update",
            run_id: wire::run_id(run),
            status: status.as_str().to_owned(),
        },
        other => other.into(),
    }
}

impl Engine {
    /// Whether a registered worker of the target run's task queue validates
    /// update `name` of its workflow type. A target that does not resolve
    /// answers `false`: the ordinary path reports it.
    pub(crate) fn update_validator_guards(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        name: &str,
    ) -> Result<bool, ApiError> {
        let Ok(run) = self.target(namespace, workflow_id, run_id) else {
            return Ok(false);
        };
        Ok(self.read(|s| {
            let head = s.run(run)?;
            s.has_update_validator(namespace, &head.task_queue, &head.workflow_type, name)
        })?)
    }

    /// `POST …/update/{name}` for an update a validator guards: the same
    /// boundary checks and admission as any update, then stored as
    /// validating (counted against `pending_update_count`) and handed to
    /// the queue's validating pollers. A request id already accepted
    /// answers (or awaits) that update.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn begin_validation(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        name: &str,
        body: UpdateBody,
        wait_for: String,
        permit: Option<WaitPermit>,
    ) -> Result<UpdateStep, ApiError> {
        let permit = match permit {
            Some(permit) => permit,
            None => self
                .waiters
                .admit(WaitKind::Update)
                .map_err(ApiError::CallWaitCapacity)?,
        };
        let (_slot, run) = self.check_message(
            namespace,
            workflow_id,
            run_id,
            MessageKind::Update,
            name,
            &body.input,
            &body.request_id,
        )?;
        let wait = body
            .wait_timeout_seconds
            .map(|s| Duration::from_secs(s.unsigned_abs()))
            .unwrap_or(self.config.max_update_wait)
            .min(self.config.max_update_wait);
        let deadline = Instant::now() + wait;
        let expires_at_ms = crate::unix_ms()
            .saturating_add(i64::try_from((wait + EXPIRY_SLACK).as_millis()).unwrap_or(i64::MAX));
        let request_id = body.request_id.clone();
        let request = ValidationRequest {
            update: UpdateRequest {
                name: name.to_owned(),
                payload: body.input,
                request_id: body.request_id,
            },
            expires_at_ms,
        };
        let admitted = self.write(move |s| {
            Ok((
                s.submit_validated_update(run, request)?,
                s.run(run)?.task_queue,
            ))
        });
        let (admission, task_queue) = admitted.map_err(|e| closed(e, run))?;
        let mut out = json!({
            "workflow_id": workflow_id, "run_id": wire::run_id(run), "update_name": name,
            "request_id": request_id, "update_status": "accepted", "wait_for": wait_for,
            "validated": true,
        });
        let completed = wait_for == "completed";
        match admission {
            ValidationAdmission::Rejected(rejection) => Err(ApiError::Structural(rejection)),
            ValidationAdmission::AlreadyAccepted { update } => {
                out["update_id"] = update.to_string().into();
                out["retained"] = true.into();
                if completed {
                    Ok(UpdateStep::Waiting(PendingUpdate::after_validation(
                        out, run, update, deadline, permit,
                    )))
                } else {
                    Ok(UpdateStep::Answered(out))
                }
            }
            ValidationAdmission::Validating {
                validation,
                duplicate,
            } => {
                out["retained"] = duplicate.into();
                if !duplicate {
                    self.wake(namespace, &task_queue, TaskKind::Workflow.as_str());
                }
                Ok(UpdateStep::Validating(PendingValidation {
                    out,
                    run,
                    validation,
                    request_id,
                    deadline,
                    completed,
                    creator: !duplicate,
                    wait: permit,
                }))
            }
        }
    }

    /// One look at a waiting validation: its verdict once a worker gave
    /// one, `None` while it waits; a run that closed meanwhile is the error.
    pub fn look_validation(&self, look: &ValidationLook) -> Result<Option<Verdict>, ApiError> {
        let state = self.read(|s| s.validation_state(look.validation))?;
        match state {
            Some(state) => match verdict_of(&state) {
                Some(verdict) => Ok(Some(verdict)),
                None => {
                    let status = self.read(|s| s.run(look.run))?.status;
                    if status != crate::store::RunStatus::Running {
                        return Err(ApiError::RunClosed {
                            operation: "update",
                            run_id: wire::run_id(look.run),
                            status: status.as_str().to_owned(),
                        });
                    }
                    Ok(None)
                }
            },
            None => {
                // Deleted: by the caller that created it (this one joined it
                // by request id), or with its run when the run closed.
                let accepted = match &look.request_id {
                    Some(request_id) => {
                        self.read(|s| s.accepted_update_by_request(look.run, request_id))?
                    }
                    None => None,
                };
                if let Some(update) = accepted {
                    return Ok(Some(Verdict::Approved(update)));
                }
                let status = self.read(|s| s.run(look.run))?.status;
                if status != crate::store::RunStatus::Running {
                    return Err(ApiError::RunClosed {
                        operation: "update",
                        run_id: wire::run_id(look.run),
                        status: status.as_str().to_owned(),
                    });
                }
                Ok(Some(Verdict::Gone))
            }
        }
    }

    /// Ends a validation's wait with what `until` found: the accepted
    /// update's answer (or the wait for its outcome with `wait_for =
    /// completed`), the validator's rejection, or, when the deadline came
    /// first, 504 and the update dropped (unless a verdict just arrived).
    /// The caller that created the validation deletes it.
    pub fn finish_validation(
        &self,
        pending: PendingValidation,
        found: Result<Option<Verdict>, ApiError>,
    ) -> Result<UpdateStep, ApiError> {
        let (id, creator) = pending.validation();
        let verdict = match found {
            Ok(Some(verdict)) => verdict,
            Ok(None) => {
                // Dropped unless a verdict beat the deadline (by the caller
                // that created it: one that joined it by request id leaves
                // it to that caller, whose wait may last longer).
                let last = if creator {
                    self.write(move |s| s.end_validation(id, true))?
                } else {
                    self.read(|s| s.validation_state(id))?
                };
                match last.as_ref().and_then(verdict_of) {
                    Some(verdict) => verdict,
                    None => return Err(validation_timeout(&pending, last.as_ref())),
                }
            }
            Err(e) => {
                if creator {
                    self.write(move |s| s.end_validation(id, true))?;
                }
                return Err(e);
            }
        };
        if creator {
            self.write(move |s| s.end_validation(id, false))?;
        }
        let PendingValidation {
            mut out,
            run,
            deadline,
            completed,
            wait,
            ..
        } = pending;
        match verdict {
            Verdict::Approved(update) => {
                out["update_id"] = update.to_string().into();
                if completed {
                    Ok(UpdateStep::Waiting(PendingUpdate::after_validation(
                        out, run, update, deadline, wait,
                    )))
                } else {
                    Ok(UpdateStep::Answered(out))
                }
            }
            Verdict::Rejected(failure) => Err(rejection(out, failure)),
            Verdict::Gone => Err(ApiError::UpdateValidation {
                status: 409,
                reason: "update_validation_idempotency_conflict",
                message: "The validation this request joined by its request_id ended without accepting the update (its first caller received the verdict); send the update again to validate it anew.".into(),
                details: out,
            }),
        }
    }

    /// A caller that went away mid-wait: its validation is dropped unless
    /// a verdict came (an approved update stays accepted).
    pub fn abandon_validation(&self, id: i64) -> Result<(), ApiError> {
        self.write(move |s| s.end_validation(id, true))?;
        Ok(())
    }

    /// The validation task leased to this poll's request id, still active
    /// (a repeat of the poll that took it).
    fn bound_validation(&self, poll: &PollSpec) -> Result<Option<LeasedValidation>, ApiError> {
        if !poll.update_validation {
            return Ok(None);
        }
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        Ok(self.read(|s| s.validation_leased_to_poll(ns, queue, id))?)
    }

    /// Leases a waiting validation of the poll's queue to its worker.
    fn lease_validation(&self, poll: &PollSpec) -> Result<Option<LeasedValidation>, ApiError> {
        if !poll.update_validation || poll.is_abandoned() {
            return Ok(None);
        }
        let (ns, queue) = (poll.namespace.clone(), poll.task_queue.clone());
        let (owner, poll_id) = (poll.worker_id.clone(), poll.poll_request_id.clone());
        let lease = i64::try_from(self.config.task_lease.as_millis()).unwrap_or(i64::MAX);
        // A read first: a queue with nothing to validate costs no write.
        let waiting = self.read(|s| s.validation_waiting(&ns, &queue))?;
        if !waiting {
            return Ok(None);
        }
        Ok(self.write(move |s| s.lease_validation(&ns, &queue, &owner, &poll_id, lease))?)
    }

    /// A validation task a poll just leased, in the poll answer's shape,
    /// recorded as the queue's last poll observation (the poll's workflow
    /// side, which ended empty, recorded one first).
    fn leased_validation(
        &self,
        poll: &PollSpec,
        task: LeasedValidation,
    ) -> Result<Value, ApiError> {
        let answer = self.render_validation(task, false)?;
        self.diagnostics.record(
            &poll.namespace,
            &poll.task_queue,
            &crate::diagnostics::PollObservation {
                worker_id: poll.worker_id.clone(),
                kind: TASK_KIND.to_owned(),
                at_ms: crate::unix_ms(),
                outcome: "leased".to_owned(),
            },
        )?;
        Ok(answer)
    }

    /// A validation task in the poll answer's shape.
    fn render_validation(&self, task: LeasedValidation, replayed: bool) -> Result<Value, ApiError> {
        let run = RunId(task.run_id);
        let events = self.read(|s| s.history(run))?;
        let workflow_arguments = events
            .first()
            .and_then(|e| e.payload.get("arguments").cloned())
            .unwrap_or(Value::Null);
        let id = task.id.to_string();
        let mut answer = json!({
            "task": {
                "task_id": id,
                "task_kind": TASK_KIND,
                "update_validation_task_id": id,
                "update_validation_attempt": task.attempt,
                "lease_owner": task.lease_owner,
                "lease_expires_at": wire::timestamp(task.lease_expires_at_ms),
                "namespace": task.namespace,
                "task_queue": task.task_queue,
                "workflow_id": task.workflow_id,
                "run_id": wire::run_id(run),
                "workflow_type": task.workflow_type,
                "update_name": task.update_name,
                "request_id": task.request_id,
                "payload_codec": wire::codec(&workflow_arguments),
                "workflow_arguments": workflow_arguments,
                "update_arguments": task.arguments,
                "history_events": events.iter().map(wire::event).collect::<Vec<_>>(),
                "total_history_events": events.len(),
            },
            "poll_status": "leased",
        });
        if replayed {
            answer["replayed"] = true.into();
        }
        Ok(answer)
    }

    /// `POST /api/worker/update-validation-tasks/{id}/approve`.
    pub fn approve_update_validation(
        &self,
        task_id: &str,
        body: VerdictBody,
    ) -> Result<Value, ApiError> {
        let (id, attempt) = verdict_fence(task_id, &body, false)?;
        let owner = body.lease_owner.clone();
        let approved = self.write(move |s| s.approve_validation(id, &owner, attempt));
        let approved = match approved {
            Ok(Ok(approved)) => approved,
            Ok(Err(refusal)) => return Err(refused(task_id, refusal)),
            Err(StoreError::RunNotActive { run, status }) => {
                return Err(ApiError::RunClosed {
                    operation: "update",
                    run_id: wire::run_id(run),
                    status: status.as_str().to_owned(),
                })
            }
            Err(e) => return Err(e.into()),
        };
        let (namespace, queue) = self.read(|s| {
            let head = s.run(approved.run)?;
            Ok((head.namespace, head.task_queue))
        })?;
        if approved.queued {
            self.wake(&namespace, &queue, TaskKind::Workflow.as_str());
        }
        self.wake_run(approved.run);
        Ok(json!({
            "update_validation_task_id": task_id, "outcome": "approved",
            "update_id": approved.update.to_string(), "run_id": wire::run_id(approved.run),
        }))
    }

    /// `POST /api/worker/update-validation-tasks/{id}/reject`.
    pub fn reject_update_validation(
        &self,
        task_id: &str,
        body: VerdictBody,
    ) -> Result<Value, ApiError> {
        let (id, attempt) = verdict_fence(task_id, &body, true)?;
        let owner = body.lease_owner.clone();
        let failure = body.failure.unwrap_or(Value::Null);
        let rejected = self.write(move |s| s.reject_validation(id, &owner, attempt, &failure))?;
        let run = rejected.map_err(|refusal| refused(task_id, refusal))?;
        self.wake_run(run);
        Ok(json!({
            "update_validation_task_id": task_id, "outcome": "rejected",
            "run_id": wire::run_id(run),
        }))
    }
}

fn verdict_of(state: &ValidationState) -> Option<Verdict> {
    match state.status.as_str() {
        "approved" => state.update_id.map(Verdict::Approved),
        "rejected" => Some(Verdict::Rejected(
            state.failure.clone().unwrap_or(Value::Null),
        )),
        _ => None,
    }
}

/// The 504 of a validation whose caller's wait ended without a verdict.
fn validation_timeout(pending: &PendingValidation, last: Option<&ValidationState>) -> ApiError {
    let leased = last.is_some_and(|s| s.attempt > 0);
    let (reason, message) = if leased {
        (
            "update_validation_execution_timeout",
            "A worker took the update's validation task but gave no verdict before the wait ended; the update was not accepted.",
        )
    } else {
        (
            "update_validation_task_not_claimed",
            "No worker polling with task_kinds [\"workflow\", \"update_validation\"] took the update's validation task before the wait ended; the update was not accepted.",
        )
    };
    let mut details = pending.out.clone();
    details["update_status"] = "validation_timed_out".into();
    details["retryable"] = true.into();
    ApiError::UpdateValidation {
        status: 504,
        reason,
        message: message.into(),
        details,
    }
}

/// A validator's rejection as its caller receives it (422): the worker's
/// reason (`update_validator_rejected`, or `update_validation_worker_failed`
/// when the validator could not run), its message, type and
/// `validation_errors`; the update was not accepted.
fn rejection(mut out: Value, failure: Value) -> ApiError {
    let reason = match failure.get("reason").and_then(Value::as_str) {
        Some("update_validation_worker_failed") => "update_validation_worker_failed",
        _ => "update_validator_rejected",
    };
    let message = failure
        .get("message")
        .and_then(Value::as_str)
        .filter(|m| !m.trim().is_empty())
        .unwrap_or("the workflow's validator rejected the update")
        .to_owned();
    out["update_status"] = "rejected".into();
    out["failure_type"] = failure.get("type").cloned().unwrap_or(Value::Null);
    out["validation_errors"] = failure
        .get("validation_errors")
        .cloned()
        .unwrap_or(Value::Null);
    out["failure"] = failure;
    if let Value::Object(fields) = &mut out {
        fields.remove("update_id");
    }
    ApiError::UpdateValidation {
        status: 422,
        reason,
        message,
        details: out,
    }
}

/// A worker's verdict on a validation task.
#[derive(Debug, serde::Deserialize, Default)]
pub struct VerdictBody {
    /// The worker the task was leased to.
    #[serde(default)]
    pub lease_owner: String,
    /// The attempt it was given.
    #[serde(default)]
    pub update_validation_attempt: Option<i64>,
    /// A rejection: `message`, `reason`, `type`, `validation_errors`.
    #[serde(default)]
    pub failure: Option<Value>,
}

/// Validates a verdict's task id and fence fields.
fn verdict_fence(task_id: &str, body: &VerdictBody, reject: bool) -> Result<(i64, u64), ApiError> {
    let mut checks = Checks::default();
    let id = task_id.parse::<i64>().ok().filter(|id| *id > 0);
    if id.is_none() {
        checks.problem(
            "update_validation_task_id",
            "The update validation task id must be one this server issued (the task's update_validation_task_id).",
        );
    }
    if body.lease_owner.trim().is_empty() {
        checks.problem(
            "lease_owner",
            "The lease_owner field is required: the worker id the task was leased to.",
        );
    }
    checks.range(
        "update_validation_attempt",
        Some(body.update_validation_attempt.unwrap_or(0)),
        1,
        i64::MAX,
    );
    if reject {
        match &body.failure {
            Some(Value::Object(failure)) => {
                if !failure.get("message").is_some_and(Value::is_string) {
                    checks.problem(
                        "failure.message",
                        "The failure.message field must be a string saying why the update was rejected.",
                    );
                }
            }
            _ => {
                checks.problem(
                    "failure",
                    "The failure field is required: an object with message (and optionally reason, type, validation_errors).",
                );
            }
        }
    }
    if !checks.problems.is_empty() {
        return Err(validation(checks).into());
    }
    let attempt = body.update_validation_attempt.unwrap_or(0).unsigned_abs();
    Ok((id.unwrap_or(0), attempt))
}

/// A verdict the fence refused, in the reasons the SDKs treat as final.
fn refused(task_id: &str, refusal: VerdictRefusal) -> ApiError {
    let (status, reason, message) = match refusal {
        VerdictRefusal::NotFound => (
            404,
            "update_validation_task_not_found",
            "No such update validation task: it was never issued, or its caller stopped waiting and the update was dropped.",
        ),
        VerdictRefusal::AlreadyDecided => (
            409,
            "duplicate_update_validation_completion",
            "This update validation task already has a verdict.",
        ),
        VerdictRefusal::NotLeased => (
            409,
            "update_validation_task_not_leased",
            "This update validation task is not leased to any worker.",
        ),
        VerdictRefusal::Stale => (
            409,
            "stale_update_validation_completion",
            "This update validation task is leased to another worker or a later attempt: its lease lapsed and it was handed out again.",
        ),
    };
    ApiError::UpdateValidation {
        status,
        reason,
        message: message.into(),
        details: json!({ "update_validation_task_id": task_id }),
    }
}

/// What the multiplexed workflow poll found.
pub(crate) enum WorkflowWork {
    /// A workflow task.
    Workflow(Box<LeasedTask>),
    /// An update validation task.
    Validation(Box<LeasedValidation>),
}

/// The workflow poll of a worker that also takes update validation tasks
/// (`task_kinds: ["workflow", "update_validation"]`): each pass leases a
/// waiting validation first (a caller waits on it), then a workflow task.
/// The workflow side is the ordinary workflow poll (its request-id
/// replay, durable binding and wake channel); a validation task is bound
/// to the poll's request id on its row, so a repeat of the poll that took
/// one gets it again while its lease lasts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkflowWorkPolls;

impl PollKind for WorkflowWorkPolls {
    type Task = WorkflowWork;

    fn begin(self, engine: &Engine, poll: &PollSpec) -> Result<PollStep, ApiError> {
        if let Some(task) = engine.bound_validation(poll)? {
            return engine
                .render_validation(task, true)
                .map(|answer| PollStep::Answered(answer.into()));
        }
        match engine.begin_poll(TaskKind::Workflow, poll)? {
            PollStep::Answered(answer) if answer.task_is_null() && !answer.has_replayed() => {
                match engine.lease_validation(poll)? {
                    Some(task) => engine
                        .leased_validation(poll, task)
                        .map(|answer| PollStep::Answered(answer.into())),
                    None => Ok(PollStep::Answered(answer)),
                }
            }
            PollStep::Waiting(wait) => match engine.lease_validation(poll)? {
                Some(task) => {
                    // The workflow side ends empty (its request id then
                    // replays nothing); the validation is this answer.
                    let keyed = wait.keyed;
                    drop(wait);
                    engine.end_poll(TaskKind::Workflow, poll, keyed, Ok(None))?;
                    engine
                        .leased_validation(poll, task)
                        .map(|answer| PollStep::Answered(answer.into()))
                }
                None => Ok(PollStep::Waiting(wait)),
            },
            other => Ok(other),
        }
    }

    fn pass(
        self,
        engine: &Engine,
        poll: &PollSpec,
        keyed: bool,
    ) -> Result<ControlFlow<Option<WorkflowWork>>, ApiError> {
        if let Some(task) = engine.lease_validation(poll)? {
            return Ok(ControlFlow::Break(Some(WorkflowWork::Validation(
                Box::new(task),
            ))));
        }
        Ok(match TaskKind::Workflow.pass(engine, poll, keyed)? {
            ControlFlow::Break(task) => {
                ControlFlow::Break(task.map(|t| WorkflowWork::Workflow(Box::new(t))))
            }
            ControlFlow::Continue(()) => ControlFlow::Continue(()),
        })
    }

    fn end(
        self,
        engine: &Engine,
        poll: &PollSpec,
        keyed: bool,
        found: Result<Option<WorkflowWork>, ApiError>,
    ) -> Result<PollAnswer, ApiError> {
        match found {
            Ok(Some(WorkflowWork::Validation(task))) => {
                engine.end_poll(TaskKind::Workflow, poll, keyed, Ok(None))?;
                engine.leased_validation(poll, *task).map(PollAnswer::from)
            }
            Ok(Some(WorkflowWork::Workflow(task))) => {
                engine.end_poll(TaskKind::Workflow, poll, keyed, Ok(Some(*task)))
            }
            Ok(None) => engine.end_poll(TaskKind::Workflow, poll, keyed, Ok(None)),
            Err(e) => engine.end_poll(TaskKind::Workflow, poll, keyed, Err(e)),
        }
    }

    fn replay(self, engine: &Engine, poll: &PollSpec) -> Result<Option<PollAnswer>, ApiError> {
        if let Some(task) = engine.bound_validation(poll)? {
            return engine.render_validation(task, true).map(|a| Some(a.into()));
        }
        TaskKind::Workflow.replay(engine, poll)
    }

    fn unanswered(self, engine: &Engine, poll: &PollSpec) -> Result<PollAnswer, ApiError> {
        TaskKind::Workflow.unanswered(engine, poll)
    }

    /// A validation's lease does not look further: the others look too.
    fn more_ready(task: &WorkflowWork) -> bool {
        match task {
            WorkflowWork::Workflow(task) => task.more_ready,
            WorkflowWork::Validation(_) => true,
        }
    }
}
