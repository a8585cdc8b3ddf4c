//! `POST /api/workflows/{workflowId}/archive` (and the `/runs/{runId}/` form).
//!
//! The published SDK's `archive_workflow(workflow_id, reason=…)` sends
//! `{"reason": …}`; the reason is the seed's 1,000-character controller
//! limit shared with cancel and terminate, checked before anything is read.
//! Archived runs drop out of the default listing (`archived=only|include`
//! brings them back) and describe with their mark.

use serde_json::{json, Value};

use crate::server::wire::{self, StopBody};
use crate::server::{ApiError, Engine};
use crate::store::ArchiveOutcome;

impl Engine {
    /// Archives the newest (or the named) closed run of `workflow_id`.
    pub fn archive(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        body: StopBody,
    ) -> Result<Value, ApiError> {
        let (_slot, run) = self.admit_run_command(namespace, workflow_id, run_id, &body)?;
        let reason = body.reason.clone();
        let (mark, outcome) = match self.write(move |s| s.archive_run(run, reason.as_deref()))? {
            ArchiveOutcome::Archived(mark) => (mark, "archived"),
            ArchiveOutcome::AlreadyArchived(mark) => (mark, "already_archived"),
        };
        // Archiving an imported v1 run that never ended also closed it.
        self.wake_run(run);
        Ok(json!({
            "workflow_id": workflow_id, "run_id": wire::run_id(run), "outcome": outcome,
            "archived": true, "archived_at": wire::timestamp(mark.archived_at_ms),
            "reason": mark.reason, "request_id": body.request_id,
        }))
    }
}
