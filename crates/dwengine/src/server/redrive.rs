//! `POST /api/workflows/{id}/runs/{runId}/redrive`: a failed run's
//! successor, what the Python client's `redrive_workflow` and the Rust
//! client's `redrive_workflow_run` call (the store's `redrive` module says
//! what may be redriven and what the successor holds).
//!
//! The answer names the successor (`run_id`), the run it continues
//! (`continued_from_run_id`) and the step it resumes at
//! (`resume_step_sequence`), with `outcome: redriven` and
//! `command_status: accepted` (both SDKs check them): `202` when this call
//! started it, `200` when a retry with the same `request_id` finds it.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::durable_state::NamespaceDurableStateQuota;
use crate::server::control::START_RESOURCES;
use crate::server::error::finish_with;
use crate::server::wire::Checks;
use crate::server::{wire, ApiError, Engine};
use crate::store::{Error as StoreError, RedriveOutcome, TaskKind};

/// The body: an optional request id (the SDKs send `{}` without one).
#[derive(Debug, Deserialize, Default)]
pub struct RedriveBody {
    /// Makes a retried redrive answer the successor it started.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// What the write transaction came to.
enum Written {
    Outcome(RedriveOutcome),
    Quota(crate::durable_state::DurableRejection),
}

impl Engine {
    /// Redrives `run_id` of `workflow_id`: `(202, successor)`, `(200,
    /// successor)` for a retried request id, or the refusal.
    pub fn redrive(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
        body: RedriveBody,
    ) -> Result<(u16, Value), ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id);
        let mut checks = Checks::default();
        if let Some(id) = &body.request_id {
            v.request_id(id);
            if id.trim().is_empty() {
                checks.problem(
                    "request_id",
                    "The request_id field must not be blank: omit it, or send the same \
                     non-blank id with every retry of one redrive.",
                );
            }
        }
        finish_with(v, &[], &checks.problems)?;
        let _slot = self.admit_namespace(namespace)?;
        let source = self.target(namespace, workflow_id, Some(run_id))?;
        let quota = self.durable_state.limits(namespace);
        let (ns, wf, request_id) = (
            namespace.to_owned(),
            workflow_id.to_owned(),
            body.request_id.clone(),
        );
        let written = self.write(move |s| {
            // A retried request is answered before the quota is asked: it
            // adds nothing.
            if let Some(id) = request_id.as_deref() {
                if s.redriven_by(&ns, &wf, id)?.is_some() {
                    return s.redrive(&ns, &wf, source, Some(id)).map(Written::Outcome);
                }
            }
            if let Err(refused) =
                NamespaceDurableStateQuota::check(quota, &START_RESOURCES, |asked| {
                    s.durable_usage(&ns, asked).ok()
                })
            {
                return Ok(Written::Quota(refused));
            }
            s.redrive(&ns, &wf, source, request_id.as_deref())
                .map(Written::Outcome)
        });
        let outcome = match written {
            Ok(Written::Outcome(outcome)) => outcome,
            Ok(Written::Quota(refused)) => {
                self.durable_state.record(namespace, &refused);
                return Err(ApiError::DurableState(refused));
            }
            Err(StoreError::RunNotFound(_)) => {
                return Err(ApiError::WorkflowNotFound(workflow_id.to_owned()))
            }
            Err(e) => return Err(e.into()),
        };
        let redriven = match outcome {
            RedriveOutcome::Redriven(redriven) => redriven,
            RedriveOutcome::Refused(refused) => {
                return Err(ApiError::RedriveRefused {
                    status: refused.status,
                    reason: refused.reason,
                    message: refused.message,
                    details: json!({ "workflow_id": workflow_id, "run_id": run_id }),
                })
            }
        };
        if !redriven.duplicate {
            self.wake(namespace, &redriven.task_queue, TaskKind::Workflow.as_str());
        }
        let status = if redriven.duplicate { 200 } else { 202 };
        Ok((
            status,
            json!({
                "workflow_id": workflow_id,
                "run_id": wire::run_id(redriven.run),
                "continued_from_run_id": run_id,
                "resume_step_sequence": redriven.resume_step_sequence,
                "recovery_kind": "redrive",
                "outcome": "redriven",
                "command_status": "accepted",
                "namespace": namespace,
                "workflow_type": redriven.workflow_type,
                "task_queue": redriven.task_queue,
                "request_id": body.request_id,
                "duplicate": redriven.duplicate,
            }),
        ))
    }
}
