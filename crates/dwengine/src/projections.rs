//! Projection drift on the operator surfaces: `dw_projection_drift_total`,
//! the health block, and a short-lived cache of the report.
//!
//! The drift report reads every retained run once (see
//! [`crate::store::projections`]), and `/api/system/health` is an
//! unauthenticated probe, so the engine keeps the last report for a few
//! seconds and recomputes it only when it is older, or after a prune or a
//! rebuild changed what it would say. The metric's only dimension besides
//! the server scope is `table`, fixed to the five projection tables, so its
//! series set is finite by construction; it still goes through dwpolicy's
//! fail-closed disclosure like every metric.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use dwpolicy::{DisclosureError, MetricGuard};
use serde_json::{json, Value};

use crate::store::projections::{DriftReport, PROJECTION_TABLES};

/// Renders `dw_projection_drift_total`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProjectionDriftMetrics;

impl ProjectionDriftMetrics {
    /// The metric this type owns.
    pub const METRIC: &'static str = "dw_projection_drift_total";

    /// `{total, table_count, tables_with_drift, scope, by_table}` and the
    /// label-set disclosure (`table` with its fixed values).
    pub fn render(
        guard: &MetricGuard,
        report: &DriftReport,
    ) -> Result<(Value, Value), DisclosureError> {
        let values =
            json!({ "values": PROJECTION_TABLES, "selection": "fixed_projection_table_inventory" });
        let disclosure = guard.disclose(Self::METRIC, [("table", values)])?;
        let by_table: Vec<Value> = report
            .tables
            .iter()
            .map(
                |t| json!({ "table": t.table, "needs_rebuild": t.needs_rebuild, "total": t.total }),
            )
            .collect();
        let payload = json!({
            "total": report.needs_rebuild_total(),
            "table_count": PROJECTION_TABLES.len(),
            "tables_with_drift": report.tables_with_drift(),
            "scope": "server",
            "retained_runs": report.total_runs,
            "pruned_runs": report.pruned_runs,
            "by_table": by_table,
        });
        Ok((
            payload,
            serde_json::to_value(&disclosure).unwrap_or(Value::Null),
        ))
    }

    /// The `projections` block of `/api/system/health`: `ok` unless some
    /// table needs a rebuild. A fully pruned population is `ok` with no age.
    pub fn health(report: &DriftReport) -> Value {
        let needs_rebuild = report.needs_rebuild_total();
        json!({
            "status": if needs_rebuild == 0 { "ok" } else { "needs_rebuild" },
            "needs_rebuild": needs_rebuild,
            "tables_with_drift": report.tables_with_drift(),
            "rebuild_eligible_runs": report.rebuild_eligible_runs,
            "missing_summaries": report.missing_summaries,
            "stale_summaries": report.stale_summaries,
            "missing_summary_age_seconds": report.missing_summary_age_ms.map(|ms| ms / 1000),
            "retained_runs": report.total_runs,
            "pruned_runs": report.pruned_runs,
            "tables": report.tables,
        })
    }
}

/// The last drift report, reused while younger than its TTL.
#[derive(Debug)]
pub struct DriftCache {
    ttl: Duration,
    last: Mutex<Option<(Instant, DriftReport)>>,
}

impl DriftCache {
    /// The default reuse window.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(5);

    /// A cache that reuses a report for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        DriftCache {
            ttl,
            last: Mutex::new(None),
        }
    }

    /// The cached report, or `compute`'s (then cached).
    pub fn get_or_compute<E>(
        &self,
        compute: impl FnOnce() -> Result<DriftReport, E>,
    ) -> Result<DriftReport, E> {
        if let Some((at, report)) = &*self.lock() {
            if at.elapsed() < self.ttl {
                return Ok(report.clone());
            }
        }
        let report = compute()?;
        *self.lock() = Some((Instant::now(), report.clone()));
        Ok(report)
    }

    /// Forgets the cached report (a prune or rebuild changed the answer).
    pub fn invalidate(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, DriftReport)>> {
        // A panic while holding the lock left at worst a stale report.
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::projections::TableDrift;

    fn report(needs: [u64; 5]) -> DriftReport {
        DriftReport {
            total_runs: 7,
            pruned_runs: 2,
            missing_summaries: needs[0],
            stale_summaries: 0,
            rebuild_eligible_runs: needs.iter().copied().max().unwrap_or(0),
            missing_summary_age_ms: (needs[0] > 0).then_some(90_000),
            tables: PROJECTION_TABLES
                .iter()
                .zip(needs)
                .map(|(table, needs_rebuild)| TableDrift {
                    table,
                    total: 7,
                    needs_rebuild,
                })
                .collect(),
        }
    }

    #[test]
    fn the_metric_lists_every_table_and_discloses_the_fixed_inventory() {
        let guard = MetricGuard::new(crate::policy::embedded().unwrap());
        let (payload, disclosure) =
            ProjectionDriftMetrics::render(&guard, &report([1, 0, 2, 0, 0])).unwrap();
        assert_eq!(payload["total"], 3);
        assert_eq!(payload["tables_with_drift"], 2);
        assert_eq!(payload["by_table"].as_array().unwrap().len(), 5);
        assert_eq!(payload["by_table"][2]["table"], "run_timeline_entries");
        assert_eq!(payload["by_table"][2]["needs_rebuild"], 2);
        assert_eq!(
            disclosure["table"]["cardinality"],
            "finite_projection_tables"
        );
        assert_eq!(
            disclosure["namespace"]["cardinality"],
            "server_scope_no_label"
        );
        let health = ProjectionDriftMetrics::health(&report([1, 0, 2, 0, 0]));
        assert_eq!(health["status"], "needs_rebuild");
        assert_eq!(health["missing_summary_age_seconds"], 90);
        let clean = ProjectionDriftMetrics::health(&report([0; 5]));
        assert_eq!(clean["status"], "ok");
        assert!(clean["missing_summary_age_seconds"].is_null());
    }

    #[test]
    fn the_cache_reuses_a_report_until_invalidated() {
        let cache = DriftCache::new(Duration::from_secs(60));
        let calls = std::cell::Cell::new(0);
        let compute = || -> Result<DriftReport, ()> {
            calls.set(calls.get() + 1);
            Ok(report([0; 5]))
        };
        cache.get_or_compute(compute).unwrap();
        cache.get_or_compute(compute).unwrap();
        assert_eq!(calls.get(), 1);
        cache.invalidate();
        cache.get_or_compute(compute).unwrap();
        assert_eq!(calls.get(), 2);
    }
}
