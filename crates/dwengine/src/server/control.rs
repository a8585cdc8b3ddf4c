//! The control plane: start, signal, update, cancel, terminate, describe.
//!
//! Each operation validates at the request boundary first (nothing is
//! written for an invalid request), then passes the namespace's request
//! admission, then writes through the store, and finally wakes pollers of
//! the run's task queue when it queued a workflow task.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::admission::NamespaceAdmit;
use crate::admission::NamespaceSlot;
use crate::server::error::finish_validation;
use crate::server::{ApiError, Engine};
use crate::store::{Admission, RunId, SignalRequest, StartRun, TaskKind};

/// `POST /api/namespaces/{ns}/workflows`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartWorkflow {
    /// The caller's workflow id.
    pub workflow_id: String,
    /// The workflow type.
    pub workflow_type: String,
    /// The task queue its workers poll.
    pub task_queue: String,
    /// Start arguments.
    #[serde(default)]
    pub input: Value,
    /// Initial memo.
    #[serde(default)]
    pub memo: Map<String, Value>,
    /// Initial search attributes.
    #[serde(default)]
    pub search_attributes: Map<String, Value>,
    /// Optional business key.
    #[serde(default)]
    pub business_key: Option<String>,
    /// Deduplication token: a retry with it returns the run it started.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Body of signal and update.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Arguments.
    #[serde(default)]
    pub input: Value,
    /// Deduplication token.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Body of cancel and terminate.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Stop {
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// Deduplication token.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Signal or update.
#[derive(Debug, Clone, Copy)]
pub enum MessageKind {
    /// A signal.
    Signal,
    /// An update.
    Update,
}

impl Engine {
    pub(crate) fn admit_namespace(
        &self,
        namespace: &str,
    ) -> Result<Option<NamespaceSlot>, ApiError> {
        match self.namespaces.admit(namespace)? {
            NamespaceAdmit::Admitted(slot) => Ok(slot),
            NamespaceAdmit::Rejected(reason) => Err(ApiError::NamespaceLimited(reason)),
        }
    }

    fn run_of(&self, namespace: &str, workflow_id: &str) -> Result<RunId, ApiError> {
        self.read(|s| s.find_run(namespace, workflow_id))?
            .ok_or_else(|| ApiError::WorkflowNotFound(workflow_id.to_owned()))
    }

    fn wake(&self, namespace: &str, task_queue: &str, kind: TaskKind) -> Result<(), ApiError> {
        Ok(self.signals.signal(namespace, task_queue, kind.as_str())?)
    }

    /// Starts a run and queues its first workflow task.
    pub fn start_workflow(&self, namespace: &str, body: StartWorkflow) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text("namespace", namespace, dwpolicy::boundary::MAX_NAME_CHARS)
            .workflow_id(&body.workflow_id)
            .workflow_type(&body.workflow_type)
            .task_queue(&body.task_queue)
            .memo(&Value::Object(body.memo.clone()))
            .search_attributes(&body.search_attributes);
        if let Some(key) = &body.business_key {
            v.business_key(key);
        }
        if let Some(id) = &body.request_id {
            v.request_id(id);
        }
        finish_validation(
            v,
            &[
                ("workflow_id", &body.workflow_id),
                ("workflow_type", &body.workflow_type),
                ("task_queue", &body.task_queue),
            ],
        )?;
        let _slot = self.admit_namespace(namespace)?;
        let start = StartRun {
            workflow_id: body.workflow_id.clone(),
            workflow_type: body.workflow_type,
            namespace: namespace.to_owned(),
            task_queue: body.task_queue.clone(),
            arguments: body.input,
            memo: body.memo,
            search_attributes: body.search_attributes,
        };
        let request_id = body.request_id;
        let started = self.write(move |s| s.start_workflow(start, request_id.as_deref()))?;
        self.wake(namespace, &body.task_queue, TaskKind::Workflow)?;
        Ok(json!({
            "workflow_id": body.workflow_id,
            "run_id": started.run.0,
            "outcome": "started",
            "duplicate": started.duplicate,
        }))
    }

    /// Admits a signal or update; a structural limit refuses it with its metadata.
    pub fn message(
        &self,
        namespace: &str,
        workflow_id: &str,
        kind: MessageKind,
        name: &str,
        body: Message,
    ) -> Result<Value, ApiError> {
        let field = match kind {
            MessageKind::Signal => "signal_name",
            MessageKind::Update => "update_name",
        };
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id).operation_name(field, name);
        if let Some(id) = &body.request_id {
            v.request_id(id);
        }
        v.finish()?;
        let _slot = self.admit_namespace(namespace)?;
        let run = self.run_of(namespace, workflow_id)?;
        let request = SignalRequest {
            name: name.to_owned(),
            payload: body.input,
            request_id: body.request_id,
        };
        // The message and the workflow task that delivers it commit together.
        let (admission, task_queue) = self.write(move |store| {
            let admission = match kind {
                MessageKind::Signal => store.signal(run, request)?,
                MessageKind::Update => store.submit_update(run, request)?,
            };
            if let Admission::Accepted {
                duplicate: false, ..
            } = admission
            {
                store.enqueue_workflow_task(run)?;
            }
            Ok((admission, store.run(run)?.task_queue))
        })?;
        match admission {
            Admission::Rejected(rejection) => Err(ApiError::Structural(rejection)),
            Admission::Accepted { id, duplicate } => {
                self.wake(namespace, &task_queue, TaskKind::Workflow)?;
                Ok(
                    json!({ "outcome": "accepted", "id": id, "duplicate": duplicate, "run_id": run.0 }),
                )
            }
        }
    }

    /// Requests cancellation (`terminate == false`) or terminates at once.
    pub fn stop(
        &self,
        namespace: &str,
        workflow_id: &str,
        terminate: bool,
        body: Stop,
    ) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id);
        if let Some(reason) = &body.reason {
            v.reason(reason);
        }
        if let Some(id) = &body.request_id {
            v.request_id(id);
        }
        v.finish()?;
        let _slot = self.admit_namespace(namespace)?;
        let run = self.run_of(namespace, workflow_id)?;
        let reason = body.reason.unwrap_or_default();
        let request_id = body.request_id;
        let (stopped, task_queue) = self.write(move |store| {
            let stopped = if terminate {
                store.terminate(run, &reason, request_id.as_deref())?
            } else {
                store.request_cancel(run, &reason, request_id.as_deref())?
            };
            Ok((stopped, store.run(run)?.task_queue))
        })?;
        if !terminate && !stopped.duplicate {
            self.wake(namespace, &task_queue, TaskKind::Workflow)?;
        }
        let outcome = if terminate {
            "terminated"
        } else {
            "cancel_requested"
        };
        Ok(json!({ "outcome": outcome, "run_id": run.0, "duplicate": stopped.duplicate }))
    }

    /// The newest run of a workflow.
    pub fn describe(&self, namespace: &str, workflow_id: &str) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id);
        v.finish()?;
        let _slot = self.admit_namespace(namespace)?;
        let run = self.run_of(namespace, workflow_id)?;
        let description = self.read(|s| s.describe(run))?;
        serde_json::to_value(description).map_err(|e| ApiError::Internal(e.to_string()))
    }
}
