//! Build-id compatibility cohorts of runs.
//!
//! A run joins the cohort of the worker build that first leases one of its
//! workflow tasks, and its timers carry that cohort (a trigger copies it
//! onto each timer row, and binding a run copies it onto the timers it
//! already armed), so due-timer recovery is scoped to the polling worker's
//! cohort: a build's pollers fire only their own runs' timers.

use crate::store::db::params;

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
