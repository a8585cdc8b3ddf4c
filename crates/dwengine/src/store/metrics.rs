//! Read-only aggregates behind the metric surfaces.
//!
//! A scrape must do bounded work whatever a namespace's backlog, because
//! task queue and workflow type names come from users. The series query
//! therefore walks the `runs_by_series` index in label-set order and stops
//! after `limit + 1` groups: one more than the cap is exactly what tells
//! "all series fit" from "some were left out" (see
//! [`dwpolicy::series::SeriesLimit::discover`], which consumes it).

use dwpolicy::SeriesLimit;
use rusqlite::params;

use crate::metrics::RunSeries;
use crate::store::rows::to_u64;
use crate::store::{Error, Store};
use crate::workflow_task_failures::FailingWorkflowType;

/// The discovery query: label sets ascending (SQLite's BINARY collation is
/// byte order, the same order as Rust's `String`), at most `?2` of them.
const RUN_SERIES: &str = "SELECT task_queue, workflow_type, COUNT(*) FROM runs \
     WHERE namespace = ?1 GROUP BY task_queue, workflow_type \
     ORDER BY task_queue, workflow_type LIMIT ?2";

/// Failing workflow tasks per workflow type: tasks not yet done whose last
/// attempt failed (`last_error` is set by a failure and the row is done once
/// an attempt succeeds). A leased retry has not failed yet, so its current
/// attempt is not counted among its consecutive failures. The read walks the
/// namespace's open workflow tasks through `dispatch_ready`; it is bounded by
/// the backlog of failing tasks, not by the namespace's runs.
const FAILING_WORKFLOW_TYPES: &str = "SELECT r.workflow_type, COUNT(*), \
     MAX(d.attempt - (d.status = 'leased')) FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id \
     WHERE d.kind = 'workflow' AND d.namespace = ?1 AND d.status IN ('ready', 'leased') \
     AND d.last_error IS NOT NULL GROUP BY r.workflow_type";

impl Store {
    /// Offers each workflow type of `namespace` with failing workflow tasks
    /// to `visit`, once per type, streaming: the caller's series limiter
    /// decides what to keep, so nothing here grows with the number of types.
    pub fn for_each_failing_workflow_type(
        &self,
        namespace: &str,
        mut visit: impl FnMut(FailingWorkflowType),
    ) -> Result<(), Error> {
        let mut stmt = self.conn.prepare_cached(FAILING_WORKFLOW_TYPES)?;
        let mut rows = stmt.query([namespace])?;
        while let Some(row) = rows.next()? {
            visit(FailingWorkflowType {
                workflow_type: row.get(0)?,
                failing_tasks: to_u64(row.get(1)?),
                max_consecutive_failures: to_u64(row.get(2)?),
            });
        }
        Ok(())
    }

    /// The run count of at most `limit + 1` (task_queue, workflow_type)
    /// series of `namespace`, in ascending label-set order.
    ///
    /// Every run row counts, whatever its status or origin: the metric is
    /// runs started, and retention keeps a pruned run's root row.
    pub fn workflow_run_series(
        &self,
        namespace: &str,
        limit: SeriesLimit,
    ) -> Result<Vec<RunSeries>, Error> {
        let probe = i64::try_from(limit.probe_size()).unwrap_or(i64::MAX);
        let mut stmt = self.conn.prepare_cached(RUN_SERIES)?;
        let rows = stmt.query_map(params![namespace, probe], |row| {
            Ok(RunSeries {
                task_queue: row.get(0)?,
                workflow_type: row.get(1)?,
                runs: to_u64(row.get(2)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StartRun, StoreConfig};

    fn store_with(runs: &[(&str, &str, &str)]) -> Store {
        let store = Store::open_in_memory(StoreConfig::default()).unwrap();
        for (i, (namespace, queue, workflow_type)) in runs.iter().enumerate() {
            store
                .start_run(StartRun {
                    workflow_id: format!("wf-{i}"),
                    workflow_type: (*workflow_type).into(),
                    namespace: (*namespace).into(),
                    task_queue: (*queue).into(),
                    arguments: serde_json::Value::Null,
                    memo: Default::default(),
                    search_attributes: Default::default(),
                })
                .unwrap();
        }
        store
    }

    fn labels(series: &[RunSeries]) -> Vec<(&str, &str, u64)> {
        series
            .iter()
            .map(|s| (s.task_queue.as_str(), s.workflow_type.as_str(), s.runs))
            .collect()
    }

    #[test]
    fn reads_at_most_limit_plus_one_label_sets_ascending_per_namespace() {
        let store = store_with(&[
            ("ns", "q2", "A"),
            ("ns", "q1", "B"),
            ("ns", "q1", "A"),
            ("ns", "q1", "A"),
            ("ns", "q3", "A"),
            ("ns", "q0", "Z"),
            ("other", "q0", "A"),
        ]);
        let read = store
            .workflow_run_series("ns", SeriesLimit::new(2))
            .unwrap();
        assert_eq!(
            labels(&read),
            [("q0", "Z", 1), ("q1", "A", 2), ("q1", "B", 1)]
        );
        let all = store
            .workflow_run_series("ns", SeriesLimit::new(10))
            .unwrap();
        assert_eq!(all.len(), 5, "the other namespace's series is not read");
        assert!(store
            .workflow_run_series("empty", SeriesLimit::new(10))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_query_walks_the_series_index_without_a_sort() {
        let store = store_with(&[]);
        let mut stmt = store
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {RUN_SERIES}"))
            .unwrap();
        let plan: Vec<String> = stmt
            .query_map(params!["ns", 3], |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("runs_by_series"), "{plan}");
        // A temp B-tree would mean every group is built before LIMIT applies.
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }
}
