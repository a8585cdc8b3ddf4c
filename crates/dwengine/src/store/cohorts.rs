//! Build-id compatibility cohorts of runs.
//!
//! A run joins the cohort of the worker build that first leases one of its
//! workflow tasks, and its timers carry that cohort (a trigger copies it
//! onto each timer row, and binding a run copies it onto the timers it
//! already armed), so due-timer recovery is scoped to the polling worker's
//! cohort: a build's pollers fire only their own runs' timers.
//!
//! A run another run starts in its transaction is pinned at its start
//! ([`follow_cohort`], [`pin_to_promoted`]): a child, a continue-as-new
//! successor and a retried child follow the run they come from (the
//! reference server gives them its compatibility), so one build's code
//! runs the whole chain; a redrive successor and a service call's workflow
//! are fresh starts on their queue and pin to its promoted cohort, as
//! `POST /api/workflows` does.

use crate::store::db::{params, Connection};

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::RunId;

impl Store {
    /// Puts `run` in cohort `build_id` unless it already has one; runs
    /// first taken by unversioned workers (`None`) stay unversioned.
    pub fn bind_run_cohort(&self, run: RunId, build_id: Option<&str>) -> Result<(), Error> {
        let Some(build_id) = build_id else {
            return Ok(());
        };
        let bound = self
            .conn
            .prepare_cached(
                "UPDATE runs SET build_id = ?2 WHERE id = ?1 AND build_id IS NULL \
                 AND NOT EXISTS (SELECT 1 FROM dispatch_tasks WHERE run_id = ?1 \
                 AND kind = 'workflow' AND status = 'done')",
            )?
            .execute(params![run.0, build_id])?;
        if bound == 1 {
            self.conn
                .prepare_cached(
                    "UPDATE dispatch_tasks SET build_id = ?2 WHERE run_id = ?1 AND kind = 'timer' \
                     AND status = 'ready' AND build_id IS NULL",
                )?
                .execute(params![run.0, build_id])?;
        }
        Ok(())
    }

    /// The cohort of `run` (`None`: unversioned).
    pub fn run_cohort(&self, run: RunId) -> Result<Option<String>, Error> {
        Ok(self
            .conn
            .prepare_cached("SELECT build_id FROM runs WHERE id = ?1")?
            .query_row([run.0], |r| r.get(0))?)
    }
}

/// Pins `run` to the cohort `from` is in (`runs.build_id`, `''` for the
/// unversioned one); an unpinned `from` leaves `run` unpinned.
pub(crate) fn follow_cohort(conn: &Connection, run: RunId, from: RunId) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE runs SET build_id = (SELECT f.build_id FROM runs f WHERE f.id = ?2) \
         WHERE id = ?1",
    )?
    .execute(params![run.0, from.0])?;
    Ok(())
}

/// Pins `run`, just started on `task_queue`, to the queue's promoted
/// cohort, if an operator promoted one.
pub(crate) fn pin_to_promoted(
    conn: &Connection,
    run: RunId,
    namespace: &str,
    task_queue: &str,
) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE runs SET build_id = (SELECT r.build_id FROM build_id_rollouts r \
         WHERE r.namespace = ?2 AND r.task_queue = ?3 AND r.new_start_selected = 1) \
         WHERE id = ?1",
    )?
    .execute(params![run.0, namespace, task_queue])?;
    Ok(())
}
