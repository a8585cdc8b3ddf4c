//! Run projections: the drift report, rebuild, and what retention removes.
//!
//! A run's summary and its detail projections (timeline, timers, waits,
//! lineage) are written by triggers in the same transaction as the rows
//! they project (migration 0008), so in steady state they cannot drift.
//! They can still be absent: runs written by an engine before the
//! projections existed have none, and an operator may have deleted rows by
//! hand. The drift report finds those, and a rebuild writes them again from
//! the source rows.
//!
//! Retention marks a run with `details_pruned_at` and removes its history
//! and every projection of it in one transaction, keeping the root row. A
//! marked run is never drift: it is excluded from needs_rebuild, rebuild
//! eligibility and the missing-summary age, though the report's `total`
//! still counts it as a retained run row. An unmarked run is always judged
//! by its rows: an empty history alone does not prove intentional pruning.

use crate::store::db::{params, Connection};
use serde::Serialize;

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::{now_ms, to_i64, to_u64};
use crate::store::tx::WriteTx;

/// The fixed projection inventory, in report order.
pub const PROJECTION_TABLES: [&str; 5] = [
    "run_summaries",
    "run_waits",
    "run_timeline_entries",
    "run_timer_entries",
    "run_lineage_entries",
];

/// One projection table's drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TableDrift {
    /// The table, one of [`PROJECTION_TABLES`].
    pub table: &'static str,
    /// Retained run rows, marked ones included.
    pub total: u64,
    /// Unmarked runs whose projection rows are missing or disagree with their source.
    pub needs_rebuild: u64,
}

/// The drift report over every run of the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftReport {
    /// Retained run rows (root rows), marked ones included.
    pub total_runs: u64,
    /// Runs with a committed `details_pruned_at` marker.
    pub pruned_runs: u64,
    /// Unmarked runs with no summary row.
    pub missing_summaries: u64,
    /// Unmarked runs whose summary disagrees with the run row.
    pub stale_summaries: u64,
    /// Unmarked runs with drift in any table: what a rebuild would touch.
    pub rebuild_eligible_runs: u64,
    /// Milliseconds since the oldest unmarked run missing its summary was
    /// created (`None`: no summary is missing).
    pub missing_summary_age_ms: Option<u64>,
    /// One entry per projection table, in [`PROJECTION_TABLES`] order.
    pub tables: Vec<TableDrift>,
}

impl DriftReport {
    /// needs_rebuild summed over the tables.
    pub fn needs_rebuild_total(&self) -> u64 {
        self.tables.iter().map(|t| t.needs_rebuild).sum()
    }

    /// Tables with a non-zero needs_rebuild.
    pub fn tables_with_drift(&self) -> usize {
        self.tables.iter().filter(|t| t.needs_rebuild > 0).count()
    }
}

/// What one rebuild call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RebuildReport {
    /// Runs whose projections were written again.
    pub rebuilt_runs: u64,
    /// Whether eligible runs remain (the call stopped at its limit).
    pub more: bool,
}

// Per-run drift conditions over `r` (a runs row). Each is false for a
// marked run, which is never drift.
/// The oldest run of namespace ?1 closed before ?2 whose details are not
/// yet pruned and that holds no abandoned activity: a range read in order
/// of the partial index `runs_closed` (closed, unpruned runs only, migration
/// 0046), which the `status != 'running'` and `details_pruned_at IS NULL`
/// terms here let the planner use.
pub(crate) const PRUNE_CANDIDATE: &str = "SELECT id FROM runs WHERE namespace = ?1 \
     AND status != 'running' AND closed_at_ms < ?2 AND details_pruned_at IS NULL \
     AND NOT EXISTS (SELECT 1 FROM dispatch_tasks d WHERE d.run_id = runs.id \
       AND d.kind = 'activity' AND d.status != 'done') \
     ORDER BY closed_at_ms LIMIT 1";

const UNMARKED: &str = "r.details_pruned_at IS NULL";
const SUMMARY_MISSING: &str = "NOT EXISTS (SELECT 1 FROM run_summaries s WHERE s.run_id = r.id)";
const SUMMARY_STALE: &str = "EXISTS (SELECT 1 FROM run_summaries s WHERE s.run_id = r.id \
     AND (s.status != r.status OR s.history_length != r.history_length \
     OR s.closed_at_ms IS DISTINCT FROM r.closed_at_ms))";
const WAITS_DRIFT: &str =
    "((SELECT COUNT(*) FROM activities a WHERE a.run_id = r.id AND a.status = 'scheduled') \
     + (SELECT COUNT(*) FROM timers t WHERE t.run_id = r.id AND t.status = 'pending') \
     + (SELECT COUNT(*) FROM children c WHERE c.parent_run_id = r.id AND c.status = 'open') \
     != (SELECT COUNT(*) FROM run_waits w WHERE w.run_id = r.id))";
const TIMELINE_DRIFT: &str = "((SELECT COUNT(*) FROM history_events h WHERE h.run_id = r.id) \
     != (SELECT COUNT(*) FROM run_timeline_entries e WHERE e.run_id = r.id))";
const TIMERS_DRIFT: &str = "((SELECT COUNT(*) FROM timers t WHERE t.run_id = r.id) \
     != (SELECT COUNT(*) FROM run_timer_entries e WHERE e.run_id = r.id))";
const LINEAGE_DRIFT: &str = "(r.parent_run_id IS NOT NULL AND NOT EXISTS \
     (SELECT 1 FROM run_lineage_entries l WHERE l.run_id = r.id))";

fn drift_report_sql() -> String {
    let summary = format!("({SUMMARY_MISSING} OR {SUMMARY_STALE})");
    let any = format!(
        "({summary} OR {WAITS_DRIFT} OR {TIMELINE_DRIFT} OR {TIMERS_DRIFT} OR {LINEAGE_DRIFT})"
    );
    format!(
        "SELECT COUNT(*), COALESCE(CAST(SUM(CASE WHEN NOT {UNMARKED} THEN 1 ELSE 0 END) AS BIGINT), 0), \
         COALESCE(CAST(SUM(CASE WHEN {UNMARKED} AND {SUMMARY_MISSING} THEN 1 ELSE 0 END) AS BIGINT), 0), \
         COALESCE(CAST(SUM(CASE WHEN {UNMARKED} AND {SUMMARY_STALE} THEN 1 ELSE 0 END) AS BIGINT), 0), \
         COALESCE(CAST(SUM(CASE WHEN {UNMARKED} AND {any} THEN 1 ELSE 0 END) AS BIGINT), 0), \
         MIN(CASE WHEN {UNMARKED} AND {SUMMARY_MISSING} THEN r.created_at_ms END), \
         COALESCE(CAST(SUM(CASE WHEN {UNMARKED} AND {summary} THEN 1 ELSE 0 END) AS BIGINT), 0), \
         COALESCE(CAST(SUM(CASE WHEN {UNMARKED} AND {WAITS_DRIFT} THEN 1 ELSE 0 END) AS BIGINT), 0), \
         COALESCE(CAST(SUM(CASE WHEN {UNMARKED} AND {TIMELINE_DRIFT} THEN 1 ELSE 0 END) AS BIGINT), 0), \
         COALESCE(CAST(SUM(CASE WHEN {UNMARKED} AND {TIMERS_DRIFT} THEN 1 ELSE 0 END) AS BIGINT), 0), \
         COALESCE(CAST(SUM(CASE WHEN {UNMARKED} AND {LINEAGE_DRIFT} THEN 1 ELSE 0 END) AS BIGINT), 0) \
         FROM runs r"
    )
}

fn eligible_runs_sql() -> String {
    format!(
        "SELECT r.id FROM runs r WHERE {UNMARKED} AND ({SUMMARY_MISSING} OR {SUMMARY_STALE} \
         OR {WAITS_DRIFT} OR {TIMELINE_DRIFT} OR {TIMERS_DRIFT} OR {LINEAGE_DRIFT}) \
         ORDER BY r.id LIMIT ?1"
    )
}

impl Store {
    /// The drift report at `now_ms`. It reads every run row once (with
    /// index lookups into its items and projections), so its cost grows with
    /// the retained runs; callers cache it.
    pub fn projection_drift(&self, now_ms: i64) -> Result<DriftReport, Error> {
        let sql = drift_report_sql();
        let row = self.conn.query_row(&sql, [], |r| {
            let mut n = [0u64; 11];
            for (i, slot) in n.iter_mut().enumerate() {
                if i != 5 {
                    *slot = to_u64(r.get(i)?);
                }
            }
            let oldest: Option<i64> = r.get(5)?;
            Ok((n, oldest))
        })?;
        let (n, oldest_missing) = row;
        let total = n[0];
        let tables = PROJECTION_TABLES
            .iter()
            .zip([n[6], n[7], n[8], n[9], n[10]])
            .map(|(table, needs_rebuild)| TableDrift {
                table,
                total,
                needs_rebuild,
            })
            .collect();
        Ok(DriftReport {
            total_runs: total,
            pruned_runs: n[1],
            missing_summaries: n[2],
            stale_summaries: n[3],
            rebuild_eligible_runs: n[4],
            missing_summary_age_ms: oldest_missing.map(|at| to_u64(now_ms.saturating_sub(at))),
            tables,
        })
    }

    /// Writes the projections of at most `limit` rebuild-eligible runs again
    /// from their source rows, lowest run id first, in one transaction.
    ///
    /// Marked runs are never eligible, so a rebuild recreates neither a
    /// pruned run's summary nor its history (which retention deleted; no
    /// projection is a source of history).
    pub fn rebuild_projections(&self, limit: usize) -> Result<RebuildReport, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let ids: Vec<i64> = tx
            .prepare(&eligible_runs_sql())?
            .query_map([to_i64(limit.saturating_add(1))], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let more = ids.len() > limit;
        let mut rebuilt = 0;
        for id in ids.into_iter().take(limit) {
            rebuild_run(&tx, RunId(id))?;
            rebuilt += 1;
        }
        tx.commit()?;
        Ok(RebuildReport {
            rebuilt_runs: rebuilt,
            more,
        })
    }

    /// Prunes the history of at most one run of `namespace` that closed
    /// before `closed_before_ms` (and has no abandoned activity still
    /// running: its activity task holds the run until the activity ends,
    /// within its schedule-to-close timeout): commits the `details_pruned_at` marker and
    /// deletes its history, its dispatch rows and every projection of it in
    /// the same transaction, and releases the external payloads it holds
    /// (deleting those nothing else holds). The root row stays.
    pub fn prune_one_expired_run(
        &self,
        namespace: &str,
        closed_before_ms: i64,
    ) -> Result<Option<RunId>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let run: Option<i64> = crate::store::db::OptionalExtension::optional(
            tx.prepare_cached(PRUNE_CANDIDATE)?
                .query_row(params![namespace, closed_before_ms], |r| r.get(0)),
        )?;
        let Some(run) = run else {
            return Ok(None);
        };
        tx.prepare_cached("UPDATE runs SET details_pruned_at = ?2 WHERE id = ?1")?
            .execute(params![run, now_ms()])?;
        for sql in [
            "DELETE FROM history_events WHERE run_id = ?1",
            "DELETE FROM dispatch_tasks WHERE run_id = ?1",
            "DELETE FROM run_summaries WHERE run_id = ?1",
            "DELETE FROM run_waits WHERE run_id = ?1",
            "DELETE FROM run_timeline_entries WHERE run_id = ?1",
            "DELETE FROM run_timer_entries WHERE run_id = ?1",
            "DELETE FROM run_lineage_entries WHERE run_id = ?1",
        ] {
            tx.prepare_cached(sql)?.execute([run])?;
        }
        // The run's external payloads go with its history, unless another
        // holder still names them or they were uploaded again lately.
        let uploaded_before = self.orphan_cutoff(now_ms());
        crate::store::external_payloads::release_run_payloads(&tx, run, uploaded_before)?;
        tx.commit()?;
        Ok(Some(RunId(run)))
    }
}

/// Replaces every projection row of `run` with what its source rows say.
fn rebuild_run(conn: &Connection, run: RunId) -> Result<(), Error> {
    for sql in [
        "INSERT INTO run_summaries (run_id, namespace, workflow_id, workflow_type, task_queue, \
         status, history_length, created_at_ms, closed_at_ms) \
         SELECT id, namespace, workflow_id, workflow_type, \
         task_queue, status, history_length, created_at_ms, closed_at_ms FROM runs \
         WHERE id = ?1 AND details_pruned_at IS NULL \
         ON CONFLICT (run_id) DO UPDATE SET namespace = excluded.namespace, \
         workflow_id = excluded.workflow_id, workflow_type = excluded.workflow_type, \
         task_queue = excluded.task_queue, status = excluded.status, \
         history_length = excluded.history_length, created_at_ms = excluded.created_at_ms, \
         closed_at_ms = excluded.closed_at_ms",
        "DELETE FROM run_timeline_entries WHERE run_id = ?1",
        "INSERT INTO run_timeline_entries SELECT run_id, sequence, event_type, recorded_at_ms \
         FROM history_events WHERE run_id = ?1",
        "DELETE FROM run_timer_entries WHERE run_id = ?1",
        "INSERT INTO run_timer_entries SELECT id, run_id, delay_ms, status FROM timers \
         WHERE run_id = ?1",
        "DELETE FROM run_waits WHERE run_id = ?1",
        "INSERT INTO run_waits SELECT run_id, 'activity', id FROM activities \
         WHERE run_id = ?1 AND status = 'scheduled'",
        "INSERT INTO run_waits SELECT run_id, 'timer', id FROM timers \
         WHERE run_id = ?1 AND status = 'pending'",
        "INSERT INTO run_waits SELECT parent_run_id, 'child', id FROM children \
         WHERE parent_run_id = ?1 AND status = 'open'",
        "INSERT INTO run_lineage_entries (run_id, parent_run_id) SELECT id, parent_run_id \
         FROM runs WHERE id = ?1 AND parent_run_id IS NOT NULL \
         ON CONFLICT (run_id) DO UPDATE SET parent_run_id = excluded.parent_run_id",
    ] {
        conn.prepare_cached(sql)?.execute([run.0])?;
    }
    Ok(())
}

/// Each test is one sentence of the retention contract
/// (bounded-growth.md, "Retention and projection drift").
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::store::command::ChildWorkflow;
    use crate::store::config::StoreConfig;
    use crate::store::executor::Next;
    use crate::store::model::StartRun;

    fn store() -> Store {
        Store::open_in_memory(StoreConfig::default()).unwrap()
    }

    fn start(store: &Store, id: &str) -> RunId {
        store
            .start_run(StartRun {
                workflow_id: id.into(),
                workflow_type: "Order".into(),
                namespace: "ns".into(),
                task_queue: "q".into(),
                ..StartRun::default()
            })
            .unwrap()
    }

    /// A closed run with a timeline, an activity, a timer and a child (so
    /// every projection table holds rows of it).
    fn closed_run(store: &Store, id: &str) -> RunId {
        let run = start(store, id);
        store
            .execute_task(run, |task| {
                task.schedule_activity("charge", &json!([1]))?;
                task.start_timer(Duration::from_secs(60))?;
                task.start_child(&ChildWorkflow {
                    workflow_id: format!("{id}-child"),
                    workflow_type: "Child".into(),
                    arguments: json!([]),
                })?;
                Ok(Next::Complete(json!("done")))
            })
            .unwrap();
        run
    }

    fn rows(store: &Store, table: &str, run: RunId) -> i64 {
        store
            .conn
            .query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE run_id = ?1"),
                [run.0],
                |r| r.get(0),
            )
            .unwrap()
    }

    fn needs(report: &DriftReport, table: &str) -> u64 {
        report
            .tables
            .iter()
            .find(|t| t.table == table)
            .map(|t| t.needs_rebuild)
            .unwrap()
    }

    fn prune_all(store: &Store) -> Vec<RunId> {
        std::iter::from_fn(|| store.prune_one_expired_run("ns", i64::MAX).unwrap()).collect()
    }

    #[test]
    fn triggers_keep_every_projection_of_a_live_run_so_a_fresh_store_has_no_drift() {
        let store = store();
        let run = closed_run(&store, "a");
        for table in PROJECTION_TABLES {
            let run_rows = if table == "run_lineage_entries" {
                // The child's lineage entry points at the parent.
                store
                    .conn
                    .query_row(
                        "SELECT COUNT(*) FROM run_lineage_entries WHERE parent_run_id = ?1",
                        [run.0],
                        |r| r.get(0),
                    )
                    .unwrap()
            } else {
                rows(&store, table, run)
            };
            assert!(run_rows > 0, "{table} holds nothing of the run");
        }
        let report = store.projection_drift(now_ms()).unwrap();
        assert_eq!(report.needs_rebuild_total(), 0, "{report:?}");
        assert_eq!(report.total_runs, 2, "the run and its child");
    }

    #[test]
    fn a_marked_run_keeps_its_root_row_while_history_and_every_detail_projection_go() {
        let store = store();
        let run = closed_run(&store, "a");
        assert_eq!(prune_all(&store), [run], "the open child is not pruned");
        let described = store.describe(run).unwrap();
        assert!(described.details_pruned_at_ms.is_some());
        assert_eq!(described.run.workflow_id, "a");
        assert!(store.history(run).unwrap().is_empty());
        for table in PROJECTION_TABLES {
            assert_eq!(
                rows(&store, table, run),
                0,
                "{table} kept rows of a pruned run"
            );
        }
        let marker: Option<i64> = store
            .conn
            .query_row(
                "SELECT details_pruned_at FROM runs WHERE id = ?1",
                [run.0],
                |r| r.get(0),
            )
            .unwrap();
        assert!(marker.is_some(), "the schema column is details_pruned_at");
    }

    #[test]
    fn marked_runs_are_excluded_from_missing_summary_drift_rebuild_eligibility_and_age() {
        let store = store();
        closed_run(&store, "a");
        prune_all(&store);
        let report = store.projection_drift(now_ms()).unwrap();
        assert_eq!(report.missing_summaries, 0);
        assert_eq!(needs(&report, "run_summaries"), 0);
        assert_eq!(report.rebuild_eligible_runs, 0);
        assert_eq!(report.missing_summary_age_ms, None);
        assert_eq!(report.pruned_runs, 1);
    }

    #[test]
    fn the_drift_total_still_counts_retained_run_rows() {
        let store = store();
        closed_run(&store, "a");
        closed_run(&store, "b");
        prune_all(&store);
        let report = store.projection_drift(now_ms()).unwrap();
        assert_eq!(
            report.total_runs, 4,
            "two pruned roots and two open children"
        );
        assert!(report.tables.iter().all(|t| t.total == 4), "{report:?}");
    }

    #[test]
    fn a_fully_pruned_population_has_no_warning_and_no_backlog_age() {
        let store = store();
        for id in ["a", "b", "c"] {
            let run = start(&store, id);
            store
                .execute_task(run, |_| Ok(Next::Complete(json!(1))))
                .unwrap();
        }
        assert_eq!(prune_all(&store).len(), 3);
        let report = store.projection_drift(now_ms()).unwrap();
        assert_eq!((report.total_runs, report.pruned_runs), (3, 3));
        assert_eq!(report.needs_rebuild_total(), 0);
        assert_eq!(report.missing_summary_age_ms, None);
        let health = crate::projections::ProjectionDriftMetrics::health(&report);
        assert_eq!(health["status"], "ok");
        assert!(health["missing_summary_age_seconds"].is_null());
    }

    #[test]
    fn unmarked_legacy_absence_is_a_real_finding_even_with_an_empty_history() {
        let store = store();
        // A run row written before projections existed: no summary, no
        // history, no marker (as an old engine or a hand-made import leaves it).
        let legacy = store
            .conn
            .query_row(
                "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, \
                 origin, memo, search_attributes, created_at_ms, closed_at_ms) \
                 VALUES ('legacy', 'Order', 'ns', 'q', 'completed', 'v2', '{}', '{}', ?1, ?1) \
                 RETURNING id",
                [now_ms() - 120_000],
                |r| r.get(0),
            )
            .map(RunId)
            .unwrap();
        store
            .conn
            .execute("DELETE FROM run_summaries WHERE run_id = ?1", [legacy.0])
            .unwrap();
        assert!(store.history(legacy).unwrap().is_empty());
        let report = store.projection_drift(now_ms()).unwrap();
        assert_eq!(report.missing_summaries, 1);
        assert_eq!(needs(&report, "run_summaries"), 1);
        assert_eq!(report.rebuild_eligible_runs, 1);
        let age = report
            .missing_summary_age_ms
            .expect("a missing summary has an age");
        assert!((120_000..200_000).contains(&age), "{age}");
        let health = crate::projections::ProjectionDriftMetrics::health(&report);
        assert_eq!(health["status"], "needs_rebuild");
        // A detail projection deleted by hand is drift in its own table.
        let run = closed_run(&store, "a");
        store
            .conn
            .execute(
                "DELETE FROM run_timeline_entries WHERE run_id = ?1",
                [run.0],
            )
            .unwrap();
        let report = store.projection_drift(now_ms()).unwrap();
        assert_eq!(needs(&report, "run_timeline_entries"), 1);
        assert_eq!(report.rebuild_eligible_runs, 2);
        // Rebuild repairs both from their source rows.
        let rebuilt = store.rebuild_projections(10).unwrap();
        assert_eq!((rebuilt.rebuilt_runs, rebuilt.more), (2, false));
        let report = store.projection_drift(now_ms()).unwrap();
        assert_eq!(report.needs_rebuild_total(), 0, "{report:?}");
        assert_eq!(rows(&store, "run_summaries", legacy), 1);
    }

    #[test]
    fn rebuild_never_restores_pruned_history_nor_recreates_a_marked_runs_summary() {
        let store = store();
        let run = closed_run(&store, "a");
        prune_all(&store);
        // Something else drifted, so a rebuild has work to do.
        let other = closed_run(&store, "b");
        store
            .conn
            .execute("DELETE FROM run_summaries WHERE run_id = ?1", [other.0])
            .unwrap();
        let rebuilt = store.rebuild_projections(100).unwrap();
        assert_eq!(rebuilt.rebuilt_runs, 1);
        assert!(store.history(run).unwrap().is_empty());
        for table in PROJECTION_TABLES {
            assert_eq!(rows(&store, table, run), 0, "rebuild recreated {table}");
        }
        // A later write to the marked row (retention maintenance) still
        // leaves it without a summary.
        store
            .conn
            .execute(
                "UPDATE runs SET closed_at_ms = closed_at_ms + 1 WHERE id = ?1",
                [run.0],
            )
            .unwrap();
        assert_eq!(rows(&store, "run_summaries", run), 0);
        assert_eq!(prune_all(&store), [other], "retention marks each run once");
        assert_eq!(rows(&store, "run_summaries", run), 0);
    }

    #[test]
    fn a_rebuild_stops_at_its_limit_and_says_more_remain() {
        let store = store();
        for id in ["a", "b", "c"] {
            start(&store, id);
        }
        store.conn.execute("DELETE FROM run_summaries", []).unwrap();
        let first = store.rebuild_projections(2).unwrap();
        assert_eq!((first.rebuilt_runs, first.more), (2, true));
        let second = store.rebuild_projections(2).unwrap();
        assert_eq!((second.rebuilt_runs, second.more), (1, false));
    }
}
