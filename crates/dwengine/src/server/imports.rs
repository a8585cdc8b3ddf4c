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

use crate::server::error::finish_with;
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
    /// Log, signal and exception rows, oldest first, as sent: each is
    /// parsed on its own, so a malformed row is counted, not fatal.
    #[serde(default)]
    pub rows: Vec<Value>,
    /// How the run ended, if it did.
    #[serde(default)]
    pub terminal: Option<V1Terminal>,
    /// Check the limits and write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// What a malformed row does: `count` (the default: left out, counted
    /// in the answer, on the start event and in
    /// `dw_v1_projection_malformed_rows_total`) or `reject` (422 naming
    /// each `rows.N`, nothing written).
    #[serde(default)]
    pub on_malformed: Option<String>,
}

/// The malformed rows an answer lists one by one (the count is exact).
pub const MALFORMED_ROWS_LISTED: usize = 20;

/// Why `row` is not a v1 log, signal or exception row, if it is not.
fn parse_row(row: Value) -> Result<V1Row, String> {
    let row: V1Row = serde_json::from_value(row).map_err(|e| e.to_string())?;
    match &row {
        V1Row::Signal { name, .. } if name.trim().is_empty() => {
            Err("a signal row needs a non-empty name".to_owned())
        }
        V1Row::Exception { class, .. } if class.trim().is_empty() => {
            Err("an exception row needs a non-empty class".to_owned())
        }
        _ => Ok(row),
    }
}

impl Engine {
    /// Imports (or, with `dry_run`, only measures) one v1 run: `(201, …)`
    /// when written, `(200, …)` for a dry run.
    pub fn import_v1(&self, namespace: &str, body: ImportBody) -> Result<(u16, Value), ApiError> {
        let mut v = self.config.request_limits.validator();
        let mut problems = Vec::new();
        v.workflow_id(&body.workflow_id)
            .workflow_type(&body.workflow_type)
            .task_queue(&body.task_queue);
        let reject = match body.on_malformed.as_deref() {
            None | Some("count") => false,
            Some("reject") => true,
            Some(_) => {
                problems.push((
                    "on_malformed".to_owned(),
                    "The on_malformed field must be \"count\" or \"reject\".".to_owned(),
                ));
                false
            }
        };
        let mut rows = Vec::with_capacity(body.rows.len());
        let mut malformed = Vec::new();
        for (index, row) in body.rows.into_iter().enumerate() {
            match parse_row(row) {
                Ok(row) => rows.push(row),
                Err(reason) => malformed.push((index, reason)),
            }
        }
        if reject {
            problems.extend(
                malformed
                    .iter()
                    .map(|(index, reason)| (format!("rows.{index}"), reason.clone())),
            );
        }
        finish_with(
            v,
            &[
                ("workflow_id", &body.workflow_id),
                ("workflow_type", &body.workflow_type),
                ("task_queue", &body.task_queue),
            ],
            &problems,
        )?;
        let _slot = self.admit_namespace(namespace)?;
        let dry_run = body.dry_run;
        let projection = V1Projection {
            workflow_id: body.workflow_id,
            workflow_type: body.workflow_type,
            namespace: namespace.to_owned(),
            task_queue: body.task_queue,
            arguments: body.arguments,
            rows,
            terminal: body.terminal,
            malformed_rows: u64::try_from(malformed.len()).unwrap_or(u64::MAX),
        };
        let measured = projection.measure(&self.config.store.history_budget)?;
        let listed: Vec<Value> = malformed
            .iter()
            .take(MALFORMED_ROWS_LISTED)
            .map(|(index, reason)| json!({ "index": index, "reason": reason }))
            .collect();
        let mut out = json!({
            "workflow_id": projection.workflow_id, "namespace": namespace,
            "origin": "v1_projection", "dry_run": dry_run,
            "events": measured.events(), "bytes": measured.bytes(),
            "budget": {
                "events": self.config.store.history_budget.max_events,
                "bytes": self.config.store.history_budget.max_bytes,
            },
            "malformed_rows": projection.malformed_rows,
            "malformed": listed,
        });
        if dry_run {
            return Ok((200, out));
        }
        let report = self.write(move |s| s.write_import(&measured))?;
        // Counted once written (a dry run or a refused import adds nothing).
        self.v1_malformed_rows.fetch_add(
            projection.malformed_rows,
            std::sync::atomic::Ordering::Relaxed,
        );
        if let Some(run) = report.run {
            out["run_id"] = wire::run_id(run).into();
        }
        Ok((201, out))
    }
}
