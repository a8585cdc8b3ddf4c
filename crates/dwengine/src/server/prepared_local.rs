//! Prepared local activities on the wire (worker protocol 1.20; the store
//! side, and what each operation records, is `store::prepared_local`).
//! Every route is under `POST /api/worker/workflow-tasks/{taskId}/local-activities/`
//! and fenced by the workflow task's claim (`lease_owner`,
//! `workflow_task_attempt`), as the other workflow-task routes are:
//!
//! - `prepare` (`sequence`, `worker_attempt_id`, `descriptor`): admits an
//!   attempt and answers its identities, deadlines and the claim's lease;
//! - `{attemptId}/control` and `{attemptId}/heartbeat`: the attempt's
//!   authority (`active`, or `stop_required` with the reason);
//! - `{attemptId}/outcome` (`report`): records how the callback ended;
//! - `{attemptId}/acknowledge-cancellation`: the worker stopped the
//!   callback after its control answered `cancellation_requested`;
//! - `recover` (`sequence`, `descriptor`): closes an attempt a lost claim
//!   admitted;
//! - `checkpoint` / `checkpoint-group` (`checkpoint_id`, `start_sequence`,
//!   `commands`): writes the commands authored before the call, or an
//!   `all()` group with its local members as `prepare_local_activity`.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::wire::validation;
use crate::server::wire::{self, Checks};
use crate::server::worker::{check_workflow_lease, parse_commands_in};
use crate::server::{ApiError, Engine};
use crate::store::prepared_local::{
    CheckpointRequest, LocalAttempt, LocalDescriptor, LocalReport, Recorded, Refusal,
    LOCAL_CANCELLATION_POLICIES,
};
use crate::store::{TaskKind, WorkflowCommand, WorkflowTaskFence};

/// The commands a `checkpoint` writes: what the Python SDK authors before a
/// local activity in the same task.
pub const CHECKPOINT_COMMANDS: [&str; 4] = [
    "record_side_effect",
    "record_version_marker",
    "upsert_memo",
    "upsert_search_attributes",
];
/// The commands of a `checkpoint-group`: an `all()` group's members.
pub const GROUP_COMMANDS: [&str; 4] = [
    "prepare_local_activity",
    "schedule_activity",
    "start_timer",
    "start_child_workflow",
];
/// The longest identity (`worker_attempt_id`, `checkpoint_id`, an attempt
/// id), in bytes, as the SDK bounds them.
pub const MAX_IDENTITY_BYTES: usize = 255;

/// The claim every body carries.
#[derive(Debug, Deserialize, Default)]
pub struct ClaimBody {
    /// The worker the workflow task was leased to.
    #[serde(default)]
    pub lease_owner: String,
    /// The attempt it was given.
    #[serde(default)]
    pub workflow_task_attempt: i64,
    /// `prepare` / `recover`: the local activity's authored sequence.
    #[serde(default)]
    pub sequence: Option<i64>,
    /// `prepare`: the worker's nonce for the attempt.
    #[serde(default)]
    pub worker_attempt_id: Option<String>,
    /// `prepare` / `recover`: the call as authored.
    #[serde(default)]
    pub descriptor: Option<Value>,
    /// `heartbeat`: the application's progress (`details`).
    #[serde(default)]
    pub progress: Option<Value>,
    /// `outcome`: how the callback ended.
    #[serde(default)]
    pub report: Option<Value>,
    /// `acknowledge-cancellation`: the request stopped.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Checkpoints: the worker's id of it.
    #[serde(default)]
    pub checkpoint_id: Option<String>,
    /// Checkpoints: the sequence its first command takes.
    #[serde(default)]
    pub start_sequence: Option<i64>,
    /// Checkpoints: the commands.
    #[serde(default)]
    pub commands: Option<Vec<Value>>,
}

fn refused(refusal: Refusal) -> ApiError {
    ApiError::LocalActivityRefused {
        status: refusal.status,
        reason: refusal.reason,
        message: refusal.message,
    }
}

fn timestamp(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |ms| wire::timestamp(ms).into())
}

/// A required authored sequence (1 or more).
fn required_position(checks: &mut Checks, field: &str, value: Option<i64>) {
    if value.is_none_or(|v| v < 1) {
        checks.problem(
            field,
            format!("The {field} field is required: an authored workflow sequence, 1 or more."),
        );
    }
}

fn identity(checks: &mut Checks, field: &str, value: Option<&str>) {
    match value {
        Some(text) if !text.trim().is_empty() && text.len() <= MAX_IDENTITY_BYTES => {}
        _ => {
            checks.problem(
            field,
            format!("The {field} field is required: a non-empty string of at most {MAX_IDENTITY_BYTES} bytes."),
        );
        }
    }
}

impl Engine {
    fn lease_ms(&self) -> i64 {
        i64::try_from(self.config.task_lease.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The fence's checks plus `more`; the task id and attempt when clean.
fn local_claim(
    task_id: &str,
    body: &ClaimBody,
    more: impl FnOnce(&mut Checks),
) -> Result<(i64, u64), ApiError> {
    let mut checks = Checks::default();
    let task = check_workflow_lease(
        &mut checks,
        task_id,
        &body.lease_owner,
        body.workflow_task_attempt,
    );
    more(&mut checks);
    if !checks.problems.is_empty() {
        return Err(validation(checks).into());
    }
    Ok((
        task.unwrap_or_default(),
        body.workflow_task_attempt.unsigned_abs(),
    ))
}

impl Engine {
    /// A descriptor (`record_local_activity`, as `prepare` and `recover`
    /// send it), checked like a completion's command, problems named
    /// `descriptor.<field>`.
    fn descriptor(&self, raw: Option<&Value>) -> Result<LocalDescriptor, ApiError> {
        let mut checks = Checks::default();
        let Some(raw) = raw.filter(|d| d.is_object()) else {
            checks.problem(
                "descriptor",
                "The descriptor field is required: the local activity as authored (type record_local_activity).",
            );
            return Err(validation(checks).into());
        };
        check_local_fields(&mut checks, raw, "descriptor");
        if !checks.problems.is_empty() {
            return Err(validation(checks).into());
        }
        let mut as_command = raw.clone();
        if raw.get("type").and_then(Value::as_str) == Some("record_local_activity") {
            as_command["type"] = "prepare_local_activity".into();
        }
        let mut parsed = parse_commands_in(
            &self.config.request_limits,
            self.queue.name(),
            &[as_command],
            &["prepare_local_activity"],
            &|_| "descriptor".to_owned(),
        )?;
        match parsed.pop() {
            Some(WorkflowCommand::PrepareLocalActivity { descriptor }) => Ok(descriptor),
            _ => Err(ApiError::Internal(
                "a parsed descriptor is not a local activity".into(),
            )),
        }
    }

    /// `POST /api/worker/workflow-tasks/{id}/local-activities/prepare`.
    pub fn prepare_local_activity(
        &self,
        task_id: &str,
        body: ClaimBody,
    ) -> Result<Value, ApiError> {
        let (task, attempt) = local_claim(task_id, &body, |checks| {
            required_position(checks, "sequence", body.sequence);
            identity(
                checks,
                "worker_attempt_id",
                body.worker_attempt_id.as_deref(),
            );
        })?;
        let descriptor = self.descriptor(body.descriptor.as_ref())?;
        let sequence = body.sequence.unwrap_or_default();
        let nonce = body.worker_attempt_id.clone().unwrap_or_default();
        let owner = body.lease_owner.clone();
        let lease_ms = self.lease_ms();
        let admission = self
            .write(move |store| {
                let fence = WorkflowTaskFence {
                    lease_owner: &owner,
                    attempt,
                };
                store.prepare_local_activity(task, fence, sequence, &nonce, &descriptor, lease_ms)
            })?
            .map_err(refused)?;
        let row = &admission.attempt;
        Ok(json!({
            "prepared": true, "duplicate": admission.duplicate, "reason": null,
            "workflow_task_id": task_id, "workflow_run_id": wire::run_id(row.run),
            "lease_owner": body.lease_owner, "workflow_task_attempt": attempt,
            "worker_attempt_id": row.worker_attempt_id, "sequence": row.sequence,
            "attempt_number": row.attempt_number,
            "activity_execution_id": row.execution_id(),
            "activity_attempt_id": row.activity_attempt_id,
            "server_time": wire::timestamp(admission.now_ms),
            "lease_expires_at": wire::timestamp(admission.lease_expires_at_ms),
            "workflow_lease_expires_at": wire::timestamp(admission.lease_expires_at_ms),
            "start_to_close_deadline_at": timestamp(row.start_to_close_deadline_ms),
            "schedule_to_close_deadline_at": timestamp(row.schedule_to_close_deadline_ms),
            "heartbeat_deadline_at": timestamp(row.heartbeat_deadline_ms),
            "cancellation_cleanup": cleanup_wire(row),
            "history_refresh_page_token": wire::page_token(0),
        }))
    }

    /// `POST …/local-activities/{attemptId}/control` and `…/heartbeat`.
    pub fn local_activity_control(
        &self,
        task_id: &str,
        attempt_id: &str,
        heartbeat: bool,
        body: ClaimBody,
    ) -> Result<Value, ApiError> {
        let (task, attempt) = local_claim(task_id, &body, |checks| {
            identity(checks, "activity_attempt_id", Some(attempt_id));
            if let Some(progress) = body.progress.as_ref().filter(|p| !p.is_null()) {
                if !progress.is_object() {
                    checks.problem(
                        "progress",
                        "The progress field must be an object (details) when present.",
                    );
                } else if let Some(details) = progress.get("details") {
                    checks.inline_payload("progress.details", details);
                }
            }
        })?;
        let details = heartbeat.then(|| {
            body.progress
                .as_ref()
                .and_then(|p| p.get("details"))
                .cloned()
                .unwrap_or(Value::Null)
        });
        let owner = body.lease_owner.clone();
        let attempt_text = attempt_id.to_owned();
        let lease_ms = self.lease_ms();
        let control = self
            .write(move |store| {
                let fence = WorkflowTaskFence {
                    lease_owner: &owner,
                    attempt,
                };
                store.local_activity_control(task, fence, &attempt_text, details.as_ref(), lease_ms)
            })?
            .map_err(refused)?;
        let row = &control.attempt;
        let active = control.stop.is_none();
        let recorded = heartbeat && active;
        Ok(json!({
            "workflow_task_id": task_id, "workflow_task_attempt": attempt,
            "workflow_run_id": wire::run_id(row.run),
            "lease_owner": body.lease_owner,
            "activity_execution_id": row.execution_id(),
            "activity_attempt_id": attempt_id,
            "active": active, "renewed": active && !heartbeat,
            "stop_required": !active, "reason": control.stop,
            "heartbeat_recorded": recorded,
            "heartbeat_history_event_id": row.started_event_id
                .filter(|_| recorded).map(|id| id.to_string()),
            "server_time": wire::timestamp(control.now_ms),
            "lease_expires_at": wire::timestamp(control.lease_expires_at_ms),
            "workflow_lease_expires_at": wire::timestamp(control.lease_expires_at_ms),
            "start_to_close_deadline_at": timestamp(row.start_to_close_deadline_ms),
            "schedule_to_close_deadline_at": timestamp(row.schedule_to_close_deadline_ms),
            "heartbeat_deadline_at": timestamp(row.heartbeat_deadline_ms),
            "cancellation_cleanup": cleanup_wire(row),
            "fenced": control.cancellation.is_some(),
            "cancellation_request": control.cancellation.as_ref().map(|c| c.context.clone()),
            "cancellation_history_event_id":
                control.cancellation.as_ref().map(|c| c.history_event_id.clone()),
            "history_refresh_page_token": wire::page_token(0),
        }))
    }

    /// `POST …/local-activities/{attemptId}/outcome`.
    pub fn local_activity_outcome(
        &self,
        task_id: &str,
        attempt_id: &str,
        body: ClaimBody,
    ) -> Result<Value, ApiError> {
        let report = body
            .report
            .clone()
            .map(serde_json::from_value::<LocalReport>);
        let (task, attempt) = local_claim(task_id, &body, |checks| {
            identity(checks, "activity_attempt_id", Some(attempt_id));
            match &report {
                Some(Ok(report)) => {
                    if !matches!(report.outcome.as_str(), "completed" | "failed") {
                        checks.problem(
                            "report.outcome",
                            "The report.outcome field must be completed or failed.",
                        );
                    }
                    if report.outcome == "completed" {
                        checks.inline_payload("report.result", &report.result);
                    }
                }
                Some(Err(e)) => {
                    checks.problem("report", e.to_string());
                }
                None => {
                    checks.problem(
                        "report",
                        "The report field is required: {outcome: completed, result} or {outcome: failed, message, exception_type, non_retryable}.",
                    );
                }
            }
        })?;
        let report = report.and_then(Result::ok).unwrap_or_default();
        let owner = body.lease_owner.clone();
        let attempt_text = attempt_id.to_owned();
        let recorded = self
            .write(move |store| {
                let fence = WorkflowTaskFence {
                    lease_owner: &owner,
                    attempt,
                };
                store.local_activity_outcome(task, fence, &attempt_text, &report)
            })?
            .map_err(refused)?;
        self.after_recorded(&recorded);
        let mut answer = recorded_answer(task_id, &recorded);
        answer["recorded"] = true.into();
        answer["workflow_task_attempt"] = attempt.into();
        answer["lease_owner"] = body.lease_owner.into();
        answer["worker_attempt_id"] = recorded.attempt.worker_attempt_id.clone().into();
        answer["workflow_task_id"] = recorded
            .attempt
            .workflow_task_id
            .map(|t| t.to_string())
            .into();
        Ok(answer)
    }

    /// `POST …/local-activities/recover`.
    pub fn recover_local_activity(
        &self,
        task_id: &str,
        body: ClaimBody,
    ) -> Result<Value, ApiError> {
        let (task, attempt) = local_claim(task_id, &body, |checks| {
            required_position(checks, "sequence", body.sequence);
        })?;
        let descriptor = self.descriptor(body.descriptor.as_ref())?;
        let sequence = body.sequence.unwrap_or_default();
        let owner = body.lease_owner.clone();
        let stored = self
            .read(move |store| store.prepared_local_activity(store.run_of_task(task)?, sequence))?;
        if let Some(row) = stored.filter(|row| {
            row.descriptor.activity_type != descriptor.activity_type
                || row.descriptor.arguments != descriptor.arguments
                || row.descriptor.cancellation_policy != descriptor.cancellation_policy
        }) {
            return Err(ApiError::LocalActivityRefused {
                status: 409,
                reason: "local_activity_descriptor_mismatch",
                message: format!(
                    "sequence {sequence} holds local activity {:?} with other arguments or another cancellation policy",
                    row.descriptor.activity_type
                ),
            });
        }
        let recorded = self
            .write(move |store| {
                let fence = WorkflowTaskFence {
                    lease_owner: &owner,
                    attempt,
                };
                store.recover_local_activity(task, fence, sequence)
            })?
            .map_err(refused)?;
        self.after_recorded(&recorded);
        let mut answer = recorded_answer(task_id, &recorded);
        answer["recovered"] = true.into();
        answer["workflow_task_id"] = task_id.into();
        answer["workflow_task_attempt"] = attempt.into();
        answer["lease_owner"] = body.lease_owner.into();
        answer["callback_stop_state"] = "unknown".into();
        Ok(answer)
    }

    /// `POST …/local-activities/{attemptId}/acknowledge-cancellation`: the
    /// worker stopped the attempt's callback for the run's request, after
    /// its control answered `cancellation_requested`.
    pub fn acknowledge_local_cancellation(
        &self,
        task_id: &str,
        attempt_id: &str,
        body: ClaimBody,
    ) -> Result<Value, ApiError> {
        let (task, attempt) = local_claim(task_id, &body, |checks| {
            identity(checks, "activity_attempt_id", Some(attempt_id));
            identity(checks, "request_id", body.request_id.as_deref());
        })?;
        let owner = body.lease_owner.clone();
        let attempt_text = attempt_id.to_owned();
        let request_id = body.request_id.clone().unwrap_or_default();
        let acknowledged = self
            .write(move |store| {
                let fence = WorkflowTaskFence {
                    lease_owner: &owner,
                    attempt,
                };
                store.acknowledge_local_cancellation(task, fence, &attempt_text, &request_id)
            })?
            .map_err(refused)?;
        Ok(json!({
            "acknowledged": true, "duplicate": acknowledged.duplicate, "reason": null,
            "workflow_task_id": task_id, "workflow_task_attempt": attempt,
            "lease_owner": body.lease_owner, "activity_attempt_id": attempt_id,
            "request_id": body.request_id, "heartbeat_recorded": false,
            "history_event_id": acknowledged.history_event_id,
        }))
    }

    /// `POST …/local-activities/checkpoint` and `…/checkpoint-group`.
    pub fn checkpoint_local_activities(
        &self,
        task_id: &str,
        group: bool,
        body: ClaimBody,
    ) -> Result<Value, ApiError> {
        let raw = body.commands.clone().unwrap_or_default();
        let (task, attempt) = local_claim(task_id, &body, |checks| {
            identity(checks, "checkpoint_id", body.checkpoint_id.as_deref());
            required_position(checks, "start_sequence", body.start_sequence);
            if body.commands.as_ref().is_none_or(Vec::is_empty) {
                checks.problem(
                    "commands",
                    "The commands field is required: the commands authored before the local activity (at least one).",
                );
            }
            if group {
                for (i, command) in raw.iter().enumerate() {
                    if command.get("type").and_then(Value::as_str) == Some("prepare_local_activity")
                    {
                        check_local_fields(checks, command, &format!("commands.{i}"));
                    }
                }
            }
        })?;
        let allowed: &[&str] = if group {
            &GROUP_COMMANDS
        } else {
            &CHECKPOINT_COMMANDS
        };
        let commands = parse_commands_in(
            &self.config.request_limits,
            self.queue.name(),
            &raw,
            allowed,
            &|i| format!("commands.{i}"),
        )?;
        if group {
            let mut checks = Checks::default();
            for (i, command) in raw.iter().enumerate() {
                if command.get("parallel_group_id").is_none_or(Value::is_null) {
                    checks.problem(
                        &format!("commands.{i}.parallel_group_id"),
                        "Every member of a checkpoint-group names its all() group.",
                    );
                }
            }
            if !checks.problems.is_empty() {
                return Err(validation(checks).into());
            }
        }
        let checkpoint_id = body.checkpoint_id.clone().unwrap_or_default();
        let start_sequence = body.start_sequence.unwrap_or_default();
        let owner = body.lease_owner.clone();
        let id = checkpoint_id.clone();
        let (receipt, ns) = self.write(move |store| {
            let fence = WorkflowTaskFence {
                lease_owner: &owner,
                attempt,
            };
            let request = CheckpointRequest {
                checkpoint_id: &id,
                start_sequence,
                commands: &commands,
            };
            let ns = store.task_queue_of(task)?.0;
            Ok((
                store.checkpoint_local_activities(task, fence, &request)?,
                ns,
            ))
        })?;
        let receipt = receipt.map_err(refused)?;
        for queue in &receipt.activity_queues {
            self.wake(&ns, queue, TaskKind::Activity.as_str());
        }
        for queue in &receipt.workflow_queues {
            self.wake(&ns, queue, TaskKind::Workflow.as_str());
        }
        self.queue.timers_armed(&receipt.timers);
        let mut answer = json!({
            "checkpointed": true, "duplicate": receipt.duplicate, "reason": null,
            "checkpoint_id": checkpoint_id, "task_id": task_id,
            "workflow_run_id": receipt.run.to_string(),
            "workflow_task_attempt": attempt, "lease_owner": body.lease_owner,
            "start_sequence": receipt.start_sequence, "next_sequence": receipt.next_sequence,
            "history_refresh_page_token": wire::page_token(0),
        });
        if group {
            answer["local_activities"] = receipt
                .local_activities
                .iter()
                .map(|(sequence, id)| json!({ "sequence": sequence, "activity_execution_id": id }))
                .collect();
        }
        Ok(answer)
    }

    /// A retry released the claim: the workflow task it queued is woken.
    fn after_recorded(&self, recorded: &Recorded) {
        if recorded.receipt.claim_released && !recorded.duplicate {
            self.wake_run(recorded.attempt.run);
            match self.read(|s| s.run(recorded.attempt.run)) {
                Ok(run) => self.wake(&run.namespace, &run.task_queue, TaskKind::Workflow.as_str()),
                Err(e) => self.post_commit_failed("local_activity_retry_wake", &e),
            }
        }
    }
}

/// A cleanup call's authority as the receipts carry it.
fn cleanup_wire(row: &LocalAttempt) -> Value {
    match &row.descriptor.cancellation_cleanup {
        Some(Value::Object(cleanup)) => {
            let mut cleanup = cleanup.clone();
            cleanup.remove("cleanup_deadline_at_ms");
            Value::Object(cleanup)
        }
        _ => Value::Null,
    }
}

/// What an outcome's and a recovery's answers share.
fn recorded_answer(_task_id: &str, recorded: &Recorded) -> Value {
    let row: &LocalAttempt = &recorded.attempt;
    let receipt = &recorded.receipt;
    json!({
        "duplicate": recorded.duplicate, "reason": null,
        "workflow_run_id": wire::run_id(row.run), "sequence": row.sequence,
        "activity_execution_id": row.execution_id(),
        "activity_attempt_id": receipt.activity_attempt_id,
        "event_type": receipt.event_type, "event_id": receipt.event_id.to_string(),
        "recorded_at": wire::timestamp(receipt.recorded_at_ms),
        "claim_released": receipt.claim_released,
        "created_task_ids": receipt.created_task_ids.iter().map(i64::to_string).collect::<Vec<_>>(),
        "history_refresh_page_token": wire::page_token(0),
    })
}

/// The fields of a local activity's descriptor a completion's parser does
/// not check: its type, its activity type, the shape of its cleanup
/// authority and its cancellation policy.
fn check_local_fields(checks: &mut Checks, raw: &Value, prefix: &str) {
    let kind = raw.get("type").and_then(Value::as_str).unwrap_or("");
    let expected = if prefix == "descriptor" {
        "record_local_activity"
    } else {
        "prepare_local_activity"
    };
    if kind != expected {
        checks.problem(
            &format!("{prefix}.type"),
            format!("The {prefix}.type field must be {expected}."),
        );
    }
    if raw
        .get("activity_type")
        .and_then(Value::as_str)
        .is_none_or(|t| t.trim().is_empty())
    {
        checks.problem(
            &format!("{prefix}.activity_type"),
            format!("The {prefix}.activity_type field is required."),
        );
    }
    if let Some(mode) = raw.get("execution_mode").filter(|m| !m.is_null()) {
        if mode.as_str() != Some("local") {
            checks.problem(
                &format!("{prefix}.execution_mode"),
                format!("The {prefix}.execution_mode field must be local."),
            );
        }
    }
    if let Some(cleanup) = raw.get("cancellation_cleanup").filter(|c| !c.is_null()) {
        for name in ["request_id", "delivery_history_event_id"] {
            if cleanup
                .get(name)
                .and_then(Value::as_str)
                .is_none_or(|t| t.trim().is_empty())
            {
                checks.problem(
                    &format!("{prefix}.cancellation_cleanup.{name}"),
                    format!(
                        "The cancellation_cleanup.{name} field is required for a cleanup call."
                    ),
                );
            }
        }
        if cleanup.get("scope_id").is_some_and(|c| !c.is_null()) {
            checks.problem(
                &format!("{prefix}.cancellation_cleanup.scope_id"),
                "Cancellation scopes are not served: a cleanup call names the run's request only.",
            );
        }
    }
    if let Some(policy) = raw.get("cancellation_policy") {
        let field = format!("{prefix}.cancellation_policy");
        match policy.as_str() {
            Some(p) if LOCAL_CANCELLATION_POLICIES.contains(&p) => {}
            Some("abandon") => {
                checks.problem(
                    &field,
                    "A local activity cannot be abandoned: its callback runs on the workflow \
                     task's own claim and cannot outlive it. Use try_cancel or \
                     wait_cancellation_completed, or a remote activity with a \
                     schedule_to_close_timeout for independent work.",
                );
            }
            _ => {
                checks.problem(
                    &field,
                    format!(
                        "The {field} field must be one of {} when present (omit it for the \
                         default try_cancel).",
                        LOCAL_CANCELLATION_POLICIES.join(", ")
                    ),
                );
            }
        }
    }
}
