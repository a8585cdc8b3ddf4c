//! The parts of update validation the control plane and the worker plane
//! share (see the parent module): the discovery contract the SDK checks,
//! the workflow poll's `task_kinds`, the validators a registration
//! declares, and an update waiting for its verdict.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::server::wire::{Checks, RegisterWorker};
use crate::store::RunId;
use crate::waiters::WaitPermit;

/// The task kind a validation task carries on the workflow poll.
pub const TASK_KIND: &str = "update_validation";

/// The worker capability that declares validators.
pub const CAPABILITY: &str = "update_validation_tasks";

/// How long a dead validation (its caller gone) outlives its caller's
/// deadline before the run's next admission deletes it.
pub(crate) const EXPIRY_SLACK: Duration = Duration::from_secs(5);

/// The most update names one registration may declare validators for.
pub const MAX_DECLARED_VALIDATORS: usize = 1_000;

/// `server_capabilities.synchronous_update_validation` of the cluster info:
/// the contract the Python SDK checks before it runs validators.
pub(crate) fn capability() -> Value {
    json!({
        "supported": true,
        "acceptance_boundary": "validator_approved",
        "worker_capability": CAPABILITY,
        "workflow_contract_field": "update_validators",
        "task_poll": {
            "strategy": "multiplexed",
            "endpoint": "/worker/workflow-tasks/poll",
            "request_field": "task_kinds",
            "response_discriminator": "task.task_kind",
            "task_kinds": ["workflow", TASK_KIND],
        },
        "approve_endpoint": "/worker/update-validation-tasks/{id}/approve",
        "reject_endpoint": "/worker/update-validation-tasks/{id}/reject",
        "fencing": ["lease_owner", "update_validation_attempt"],
        "rejection": { "status": 422, "reason": "update_validator_rejected" },
        "bounded_by": "pending_update_count",
    })
}

/// Checks a workflow poll's `task_kinds`: absent, or `"workflow"` with
/// optionally `"update_validation"`, each once. Whether the poll takes
/// validation tasks.
pub(crate) fn check_task_kinds(checks: &mut Checks, kinds: Option<&[String]>) -> bool {
    let Some(kinds) = kinds else {
        return false;
    };
    let known = |k: &str| k == "workflow" || k == TASK_KIND;
    if let Some(unknown) = kinds.iter().find(|k| !known(k)) {
        checks.problem(
            "task_kinds",
            format!(
                "The task kind {unknown:?} is not served on this route: name \"workflow\", and \"update_validation\" to take update validation tasks too."
            ),
        );
    } else if !kinds.iter().any(|k| k == "workflow") {
        checks.problem(
            "task_kinds",
            "The task_kinds field must include \"workflow\": this route hands out workflow tasks, and update validation tasks beside them.",
        );
    } else if (kinds.len() > 1 && kinds[0] == kinds[1]) || kinds.len() > 2 {
        checks.problem(
            "task_kinds",
            "The task_kinds field must name each task kind once.",
        );
    }
    kinds.iter().any(|k| k == TASK_KIND)
}

/// The update names a registering worker validates, per workflow type,
/// when it asks for [`CAPABILITY`]; `None` otherwise (a registration
/// without it clears what an earlier one declared).
pub(crate) fn declared_validators(body: &RegisterWorker) -> Result<Option<Value>, Checks> {
    if !body.capabilities.iter().any(|c| c == CAPABILITY) {
        return Ok(None);
    }
    let mut checks = Checks::default();
    let contracts = match &body.workflow_command_contracts {
        Value::Null => return Ok(None),
        Value::Object(contracts) => contracts,
        _ => {
            checks.problem(
                "workflow_command_contracts",
                "The workflow_command_contracts field must be an object of workflow types.",
            );
            return Err(checks);
        }
    };
    let mut declared = Map::new();
    let mut count = 0usize;
    for (workflow_type, contract) in contracts {
        let field = format!("workflow_command_contracts.{workflow_type}.update_validators");
        let names = match contract.get("update_validators") {
            None | Some(Value::Null) => continue,
            Some(Value::Array(names)) => names,
            Some(_) => {
                checks.problem(
                    &field,
                    "The update_validators field must be a list of update names.",
                );
                continue;
            }
        };
        let mut valid = Vec::new();
        for name in names {
            match name.as_str() {
                Some(n)
                    if !n.trim().is_empty() && n.len() <= dwpolicy::boundary::MAX_NAME_CHARS =>
                {
                    valid.push(Value::from(n));
                }
                _ => {
                    checks.problem(
                        &field,
                        format!(
                            "Each update validator must name an update (1 to {} characters).",
                            dwpolicy::boundary::MAX_NAME_CHARS
                        ),
                    );
                }
            }
        }
        count += valid.len();
        if !valid.is_empty() {
            declared.insert(workflow_type.clone(), Value::Array(valid));
        }
    }
    if count > MAX_DECLARED_VALIDATORS {
        checks.problem(
            "workflow_command_contracts",
            format!(
                "A registration may declare at most {MAX_DECLARED_VALIDATORS} update validators; got {count}."
            ),
        );
    }
    if !checks.problems.is_empty() {
        return Err(checks);
    }
    Ok((!declared.is_empty()).then_some(Value::Object(declared)))
}

/// An update waiting for a worker's validator, whose caller awaits the
/// verdict.
pub struct PendingValidation {
    pub(crate) out: Value,
    pub(crate) run: RunId,
    pub(crate) validation: i64,
    pub(crate) request_id: Option<String>,
    pub(crate) deadline: Instant,
    pub(crate) completed: bool,
    pub(crate) creator: bool,
    pub(crate) wait: WaitPermit,
}

/// What one look at a waiting validation needs.
#[derive(Debug, Clone)]
pub struct ValidationLook {
    pub(crate) run: RunId,
    pub(crate) validation: i64,
    pub(crate) request_id: Option<String>,
}

impl PendingValidation {
    /// The run whose changes wake the wait.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// When the wait ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The validation row, and whether this caller created it (and so
    /// deletes it when it answers).
    pub fn validation(&self) -> (i64, bool) {
        (self.validation, self.creator)
    }

    /// What a look needs.
    pub fn look(&self) -> ValidationLook {
        ValidationLook {
            run: self.run,
            validation: self.validation,
            request_id: self.request_id.clone(),
        }
    }
}
