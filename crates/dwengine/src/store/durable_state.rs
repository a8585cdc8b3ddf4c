//! Per-namespace durable resource counts, the authority of the durable-state
//! quota.
//!
//! Each count is read from SQL in the same write transaction as the
//! mutation it admits, so two racing starts cannot both pass a quota of one.
//! Runs come from the per-series aggregates (one row per task queue and
//! workflow type, not per run); registrations from the workers table's
//! primary-key range of the namespace.

use crate::store::rows::to_u64;
use crate::store::{Error, Store};

/// A namespace's durable resource usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurableUsage {
    /// Run rows, retained ones included.
    pub workflow_runs: u64,
    /// Runs not yet closed.
    pub open_workflow_runs: u64,
    /// Worker registrations.
    pub worker_registrations: u64,
}

impl Store {
    /// `namespace`'s durable resource usage.
    pub fn durable_usage(&self, namespace: &str) -> Result<DurableUsage, Error> {
        let (started, closed): (i64, i64) = self
            .conn
            .prepare_cached(
                "SELECT COALESCE(SUM(started), 0), \
                 COALESCE(SUM(completed + failed + cancelled + terminated), 0) \
                 FROM workflow_run_series WHERE namespace = ?1",
            )?
            .query_row([namespace], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let workers: i64 = self
            .conn
            .prepare_cached("SELECT COUNT(*) FROM workers WHERE namespace = ?1")?
            .query_row([namespace], |r| r.get(0))?;
        Ok(DurableUsage {
            workflow_runs: to_u64(started),
            open_workflow_runs: to_u64(started.saturating_sub(closed)),
            worker_registrations: to_u64(workers),
        })
    }
}
