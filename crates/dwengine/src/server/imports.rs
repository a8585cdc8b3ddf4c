//! `POST /api/workflows/import`: a v1 run's history as a read-only projection.
//!
//! Neither the published SDK nor the public server has an HTTP route for
//! this (the reference imports from Waterline's side), so the route sits
//! with the control plane it feeds. The order is the seed's: the request
//! boundary (field lengths, the body-size limit), then the history budget
//! measured on the request thread — count first, then bytes in history
//! order — so an oversized import answers 409 `v1_projection_too_large`
//! before any existing row is read and before the group-commit writer, whose
//! transaction is already open, is involved. A dry run stops there.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::error::finish_validation;
use crate::server::{wire, ApiError, Engine};
use crate::store::{V1Projection, V1Row, V1Terminal};

/// The body of `POST /api/workflows/import` (the namespace is `X-Namespace`).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ImportBody {
    /// The workflow id.
    #[serde(default)]
    pub workflow_id: String,
    /// The workflow type.
    #[serde(default)]
    pub workflow_type: String,
    /// The task queue.
    #[serde(default)]
    pub task_queue: String,
    /// The start arguments (opaque).
    #[serde(default)]
    pub arguments: Value,
    /// Log, signal and exception rows, oldest first.
    #[serde(default)]
    pub rows: Vec<V1Row>,
    /// How the run ended, if it did.
    #[serde(default)]
    pub terminal: Option<V1Terminal>,
    /// Check the limits and write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

impl Engine {
    /// Imports (or, with `dry_run`, only measures) one v1 run: `(201, …)`
    /// when written, `(200, …)` for a dry run.
    pub fn import_v1(&self, namespace: &str, body: ImportBody) -> Result<(u16, Value), ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(&body.workflow_id)
            .workflow_type(&body.workflow_type)
            .task_queue(&body.task_queue);
        finish_validation(
            v,
            &[
                ("workflow_id", &body.workflow_id),
                ("workflow_type", &body.workflow_type),
                ("task_queue", &body.task_queue),
            ],
        )?;
        let _slot = self.admit_namespace(namespace)?;
        let dry_run = body.dry_run;
        let projection = V1Projection {
            workflow_id: body.workflow_id,
            workflow_type: body.workflow_type,
            namespace: namespace.to_owned(),
            task_queue: body.task_queue,
            arguments: body.arguments,
            rows: body.rows,
            terminal: body.terminal,
        };
        let measured = projection.measure(&self.config.store.history_budget)?;
        let mut out = json!({
            "workflow_id": projection.workflow_id, "namespace": namespace,
            "origin": "v1_projection", "dry_run": dry_run,
            "events": measured.events(), "bytes": measured.bytes(),
            "budget": {
                "events": self.config.store.history_budget.max_events,
                "bytes": self.config.store.history_budget.max_bytes,
            },
        });
        if dry_run {
            return Ok((200, out));
        }
        let report = self.write(move |s| s.write_import(&measured))?;
        if let Some(run) = report.run {
            out["run_id"] = wire::run_id(run).into();
        }
        Ok((201, out))
    }
}
