//! Read-only aggregates behind the metric surfaces.
//!
//! A scrape must do bounded work whatever a namespace's backlog, because
//! task queue, workflow type and activity type names come from users. The
//! Prometheus series therefore come from per-series aggregate rows that
//! triggers keep in the same transaction as the runs, activities and tasks
//! they count (migration 0008), read in label-set order and stopped after
//! `limit + 1` rows: one more than the cap is exactly what tells "all series
//! fit" from "some were left out" (see
//! [`dwpolicy::series::SeriesLimit::discover`], which consumes it). A scrape
//! over a million runs reads the same few hundred rows as one over a hundred.

use crate::store::db::{params, Row};
use dwpolicy::SeriesLimit;

use crate::metrics::activities::ActivitySeries;
use crate::metrics::task_queues::TaskQueueState;
use crate::metrics::{Latency, RunSeries};
use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::rows::to_u64;
use crate::workflow_task_failures::FailingWorkflowType;

/// The discovery query: label sets ascending (SQLite's BINARY collation is
/// byte order, the same order as Rust's `String`), at most `?2` of them.
const RUN_SERIES: &str = "SELECT task_queue, workflow_type, started, completed, failed, \
     cancelled, terminated, continued_as_new, latency_count, latency_sum_ms, le_0_1, le_0_5, le_1, \
     le_2_5, le_5, le_10, le_30, le_60, le_300, le_900 FROM workflow_run_series WHERE namespace = ?1 \
     ORDER BY task_queue, workflow_type LIMIT ?2";

/// Activity label sets ascending, at most `?2` of them.
const ACTIVITY_SERIES: &str = "SELECT task_queue, workflow_type, activity_type, started, \
     completed, failed, cancelled, latency_count, latency_sum_ms, le_0_1, le_0_5, le_1, le_2_5, le_5, \
     le_10, le_30, le_60, le_300, le_900 FROM activity_execution_series WHERE namespace = ?1 \
     ORDER BY task_queue, workflow_type, activity_type LIMIT ?2";

/// The busy queues of namespace `?1` in name order, at most `?2`: one
/// compound statement of three disjoint arms, each an index range already
/// in name order — queues with ready or leased tasks (the partial index
/// that holds only those, by the `busy` flag computed from the counters:
/// migration 0053), and queues with none whose latest added or
/// dispatched task fell in minute bucket `?3` or `?3 - 1`. SQLite merges
/// the arms as co-routines (no sort), and `LIMIT` stops the merge, so the
/// statement hands back at most `?2` label sets in all (it used to be three
/// reads of `?2` rows each, up to three times the probe).
const BUSY_QUEUES: &str = "SELECT task_queue, workflow_ready, workflow_leased, \
     activity_ready, activity_leased, recent_minute, added_recent, added_before, \
     dispatched_recent, dispatched_before FROM task_queue_state INDEXED BY task_queue_state_active \
     WHERE namespace = ?1 AND busy \
     UNION ALL SELECT task_queue, workflow_ready, workflow_leased, \
     activity_ready, activity_leased, recent_minute, added_recent, added_before, \
     dispatched_recent, dispatched_before FROM task_queue_state INDEXED BY task_queue_state_recent \
     WHERE namespace = ?1 AND recent_minute = ?3 \
     AND NOT busy \
     UNION ALL SELECT task_queue, workflow_ready, workflow_leased, \
     activity_ready, activity_leased, recent_minute, added_recent, added_before, \
     dispatched_recent, dispatched_before FROM task_queue_state INDEXED BY task_queue_state_recent \
     WHERE namespace = ?1 AND recent_minute = ?3 - 1 \
     AND NOT busy \
     ORDER BY task_queue LIMIT ?2";

/// Failing workflow tasks per workflow type: tasks not yet done whose last
/// attempt failed (`last_error` is set by a failure and the row is done once
/// an attempt succeeds). A leased retry has not failed yet, so its current
/// attempt is not counted among its consecutive failures. The read walks the
/// namespace's open workflow tasks through `dispatch_ready` (the status test
/// is an OR: since migration 0051 the index lists only ready and leased
/// tasks, and SQLite uses it only for a filter that implies that condition,
/// which an IN list does not); it is bounded by the backlog of failing tasks,
/// not by the namespace's runs.
pub(crate) const FAILING_WORKFLOW_TYPES: &str = "SELECT r.workflow_type, COUNT(*), \
     MAX(d.attempt - CASE WHEN d.status = 'leased' THEN 1 ELSE 0 END) FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id \
     WHERE d.kind = 'workflow' AND d.namespace = ?1 AND (d.status = 'ready' OR d.status = 'leased') \
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

    /// At most `limit + 1` (task_queue, workflow_type) series of
    /// `namespace` with their counts and latency, ascending.
    ///
    /// Every run row counts, whatever its status or origin: the metric is
    /// runs started, and retention keeps a pruned run's root row.
    pub fn workflow_run_series(
        &self,
        namespace: &str,
        limit: SeriesLimit,
    ) -> Result<Vec<RunSeries>, Error> {
        let mut stmt = self.conn.prepare_cached(RUN_SERIES)?;
        let rows = stmt.query_map(params![namespace, probe(limit)], |row| {
            Ok(RunSeries {
                task_queue: row.get(0)?,
                workflow_type: row.get(1)?,
                runs: to_u64(row.get(2)?),
                completed: to_u64(row.get(3)?),
                failed: to_u64(row.get(4)?),
                cancelled: to_u64(row.get(5)?),
                terminated: to_u64(row.get(6)?),
                continued_as_new: to_u64(row.get(7)?),
                latency: latency(row, 8)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// At most `limit + 1` (task_queue, workflow_type, activity_type)
    /// series of `namespace`, ascending.
    pub fn activity_execution_series(
        &self,
        namespace: &str,
        limit: SeriesLimit,
    ) -> Result<Vec<ActivitySeries>, Error> {
        let mut stmt = self.conn.prepare_cached(ACTIVITY_SERIES)?;
        let rows = stmt.query_map(params![namespace, probe(limit)], |row| {
            Ok(ActivitySeries {
                task_queue: row.get(0)?,
                workflow_type: row.get(1)?,
                activity_type: row.get(2)?,
                started: to_u64(row.get(3)?),
                completed: to_u64(row.get(4)?),
                failed: to_u64(row.get(5)?),
                cancelled: to_u64(row.get(6)?),
                latency: latency(row, 7)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The smallest `limit + 1` busy queues of `namespace` at `now_ms`:
    /// queues with ready or leased tasks, or with tasks added or dispatched
    /// in the current or previous minute bucket, read by one statement that
    /// hands back at most `limit + 1` label sets ([`BUSY_QUEUES`]).
    pub fn task_queue_states(
        &self,
        namespace: &str,
        limit: SeriesLimit,
        now_ms: i64,
    ) -> Result<Vec<TaskQueueState>, Error> {
        Ok(self.task_queue_discovery(namespace, limit, now_ms)?.0)
    }

    /// [`Store::task_queue_states`] with the number of rows the statement
    /// handed back (every row counted as it is read), which the bound is
    /// about.
    pub fn task_queue_discovery(
        &self,
        namespace: &str,
        limit: SeriesLimit,
        now_ms: i64,
    ) -> Result<(Vec<TaskQueueState>, u64), Error> {
        let minute = now_ms.div_euclid(60_000);
        let mut stmt = self.conn.prepare_cached(BUSY_QUEUES)?;
        let mut rows = stmt.query(params![namespace, probe(limit), minute])?;
        let (mut states, mut read) = (Vec::new(), 0u64);
        while let Some(row) = rows.next()? {
            read += 1;
            states.push(queue_state(&row, minute)?);
        }
        Ok((states, read))
    }
}

/// Server-wide counts for `/api/system/operator-metrics`, summed from the
/// per-series aggregates (one row per series or queue, never per run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OperatorCounts {
    /// Runs started.
    pub runs_started: u64,
    /// Runs closed as completed.
    pub runs_completed: u64,
    /// Runs closed as failed.
    pub runs_failed: u64,
    /// Runs closed as cancelled.
    pub runs_cancelled: u64,
    /// Runs closed as terminated.
    pub runs_terminated: u64,
    /// Runs closed as continued (a new run of the workflow took over).
    pub runs_continued_as_new: u64,
    /// Workflow tasks waiting for a worker.
    pub workflow_ready: u64,
    /// Workflow tasks a worker holds.
    pub workflow_leased: u64,
    /// Activity tasks waiting for a worker.
    pub activity_ready: u64,
    /// Activity tasks a worker holds.
    pub activity_leased: u64,
    /// Registered workers.
    pub workers: u64,
}

impl Store {
    /// The server-wide counts of the operator metrics.
    pub fn operator_counts(&self) -> Result<OperatorCounts, Error> {
        let mut counts = OperatorCounts::default();
        self.conn.query_row(
            "SELECT COALESCE(CAST(SUM(started) AS BIGINT), 0), COALESCE(CAST(SUM(completed) AS BIGINT), 0), \
             COALESCE(CAST(SUM(failed) AS BIGINT), 0), COALESCE(CAST(SUM(cancelled) AS BIGINT), 0), \
             COALESCE(CAST(SUM(terminated) AS BIGINT), 0), COALESCE(CAST(SUM(continued_as_new) AS BIGINT), 0) \
             FROM workflow_run_series",
            [],
            |r| {
                counts.runs_started = to_u64(r.get(0)?);
                counts.runs_completed = to_u64(r.get(1)?);
                counts.runs_failed = to_u64(r.get(2)?);
                counts.runs_cancelled = to_u64(r.get(3)?);
                counts.runs_terminated = to_u64(r.get(4)?);
                counts.runs_continued_as_new = to_u64(r.get(5)?);
                Ok(())
            },
        )?;
        self.conn.query_row(
            "SELECT COALESCE(CAST(SUM(workflow_ready) AS BIGINT), 0), COALESCE(CAST(SUM(workflow_leased) AS BIGINT), 0), \
             COALESCE(CAST(SUM(activity_ready) AS BIGINT), 0), COALESCE(CAST(SUM(activity_leased) AS BIGINT), 0) \
             FROM task_queue_state",
            [],
            |r| {
                counts.workflow_ready = to_u64(r.get(0)?);
                counts.workflow_leased = to_u64(r.get(1)?);
                counts.activity_ready = to_u64(r.get(2)?);
                counts.activity_leased = to_u64(r.get(3)?);
                Ok(())
            },
        )?;
        counts.workers = self.worker_count()?;
        Ok(counts)
    }
}

fn probe(limit: SeriesLimit) -> i64 {
    i64::try_from(limit.probe_size()).unwrap_or(i64::MAX)
}

/// The latency columns starting at `at`: count, sum, then ten buckets.
fn latency(row: &Row<'_>, at: usize) -> crate::store::db::Result<Latency> {
    let mut buckets = [0u64; 10];
    for (i, bucket) in buckets.iter_mut().enumerate() {
        *bucket = to_u64(row.get(at + 2 + i)?);
    }
    Ok(Latency {
        count: to_u64(row.get(at)?),
        sum_ms: to_u64(row.get(at + 1)?),
        buckets,
    })
}

/// A queue row seen in minute bucket `minute`: its "last minute" counts are
/// the current and previous bucket's, which the row holds only while its
/// latest bucket is one of those two.
fn queue_state(row: &Row<'_>, minute: i64) -> crate::store::db::Result<TaskQueueState> {
    let recent_minute: i64 = row.get(5)?;
    let (recent_added, before_added) = (to_u64(row.get(6)?), to_u64(row.get(7)?));
    let (recent_dispatched, before_dispatched) = (to_u64(row.get(8)?), to_u64(row.get(9)?));
    let (added, dispatched) = match minute - recent_minute {
        0 => (
            recent_added + before_added,
            recent_dispatched + before_dispatched,
        ),
        1 => (recent_added, recent_dispatched),
        _ => (0, 0),
    };
    Ok(TaskQueueState {
        task_queue: row.get(0)?,
        workflow_ready: to_u64(row.get(1)?),
        workflow_leased: to_u64(row.get(2)?),
        activity_ready: to_u64(row.get(3)?),
        activity_leased: to_u64(row.get(4)?),
        added_last_minute: added,
        dispatched_last_minute: dispatched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::config::StoreConfig;
    use crate::store::db::ToSql;
    use crate::store::model::StartRun;

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
    fn every_scrape_query_walks_an_index_in_label_order_without_a_sort() {
        let store = store_with(&[]);
        for (sql, index) in [
            (RUN_SERIES, "workflow_run_series"),
            (ACTIVITY_SERIES, "activity_execution_series"),
            (BUSY_QUEUES, "task_queue_state_active"),
            (BUSY_QUEUES, "task_queue_state_recent"),
        ] {
            let mut stmt = store
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap();
            let count = stmt.parameter_count();
            let args: Vec<Box<dyn ToSql>> = (0..count)
                .map(|i| -> Box<dyn ToSql> {
                    if i == 0 {
                        Box::new("ns")
                    } else {
                        Box::new(3)
                    }
                })
                .collect();
            let plan: Vec<String> = stmt
                .query_map(crate::store::db::params_from_iter(args.iter()), |row| {
                    row.get::<_, String>(3)
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join("\n");
            assert!(plan.contains(index), "{sql}: {plan}");
            assert!(plan.contains("SEARCH"), "a range read, not a scan: {plan}");
            // A temp B-tree would mean every row is read before LIMIT applies.
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        }
    }

    #[test]
    fn queue_discovery_reads_at_most_limit_plus_one_label_sets_in_all() {
        let store = store_with(&[]);
        let now = crate::unix_ms();
        let minute = now.div_euclid(60_000);
        // 400 queues in turn: active (and recent, as an active queue is),
        // idle but busy this minute, idle but busy the minute before, idle
        // for five minutes (not a series).
        let mut expected = Vec::new();
        for i in 0..400 {
            let name = format!("q{i:03}");
            let (ready, recent) = match i % 4 {
                0 => (1, minute),
                1 => (0, minute),
                2 => (0, minute - 1),
                _ => (0, minute - 5),
            };
            if i % 4 != 3 {
                expected.push(name.clone());
            }
            store
                .conn
                .execute(
                    "INSERT INTO task_queue_state (namespace, task_queue, workflow_ready, \
                     recent_minute, added_recent) VALUES ('ns', ?1, ?2, ?3, 1)",
                    params![name, ready, recent],
                )
                .unwrap();
        }
        for limit in [1, 10, 100] {
            let (states, read) = store
                .task_queue_discovery("ns", SeriesLimit::new(limit), now)
                .unwrap();
            let names: Vec<&str> = states.iter().map(|s| s.task_queue.as_str()).collect();
            assert_eq!(
                names,
                expected[..=limit],
                "the smallest limit + 1 busy queues"
            );
            // Three reads of limit + 1 (the old discovery) handed back up to
            // 3 × (limit + 1) rows here, an active queue twice (it is recent too).
            assert_eq!(read, limit as u64 + 1, "limit {limit}");
        }
        // Fewer busy queues than the probe: each read once.
        let (states, read) = store
            .task_queue_discovery("ns", SeriesLimit::new(400), now)
            .unwrap();
        assert_eq!((states.len(), read), (300, 300));
        // The merge needs no sort: LIMIT stops it after the rows it hands back.
        let plan: Vec<String> = store
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {BUSY_QUEUES}"))
            .unwrap()
            .query_map(params!["ns", 11, minute], |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("MERGE"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    #[test]
    fn closing_a_run_moves_its_series_counts_and_latency() {
        let store = store_with(&[("ns", "q", "W"), ("ns", "q", "W")]);
        store
            .conn
            .execute(
                "UPDATE runs SET status = 'failed', closed_at_ms = created_at_ms + 2000 WHERE id = 1",
                [],
            )
            .unwrap();
        let series = store
            .workflow_run_series("ns", SeriesLimit::new(5))
            .unwrap();
        assert_eq!(series.len(), 1);
        let s = &series[0];
        assert_eq!((s.runs, s.failed, s.completed, s.running()), (2, 1, 0, 1));
        assert_eq!((s.latency.count, s.latency.sum_ms), (1, 2000));
        assert_eq!(s.latency.buckets, [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]);
    }

    #[test]
    fn queue_state_follows_task_status_and_minute_buckets() {
        let store = store_with(&[("ns", "busy", "W"), ("ns", "idle", "W")]);
        let insert = |run: i64, status: &str| {
            store
                .conn
                .execute(
                    "INSERT INTO dispatch_tasks (kind, run_id, namespace, task_queue, status, \
                     due_at_ms, created_at_ms) SELECT 'workflow', id, namespace, task_queue, ?2, 0, 0 \
                     FROM runs WHERE id = ?1",
                    params![run, status],
                )
                .unwrap();
        };
        insert(1, "ready");
        insert(1, "ready");
        insert(2, "ready");
        store
            .conn
            .execute(
                "UPDATE dispatch_tasks SET status = 'leased' WHERE id = 1",
                [],
            )
            .unwrap();
        store
            .conn
            .execute("UPDATE dispatch_tasks SET status = 'done' WHERE id = 3", [])
            .unwrap();
        let now = crate::unix_ms();
        let states = store
            .task_queue_states("ns", SeriesLimit::new(5), now)
            .unwrap();
        let busy = &states[0];
        assert_eq!(busy.task_queue, "busy");
        assert_eq!((busy.workflow_ready, busy.workflow_leased), (1, 1));
        assert_eq!(
            (busy.added_last_minute, busy.dispatched_last_minute),
            (2, 1)
        );
        let idle = &states[1];
        assert_eq!((idle.task_queue.as_str(), idle.workflow_ready), ("idle", 0));
        assert_eq!(idle.added_last_minute, 1, "recent, though idle now");
        // Two minutes on, only the queue with active tasks is a series.
        let later = store
            .task_queue_states("ns", SeriesLimit::new(5), now + 120_000)
            .unwrap();
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].task_queue, "busy");
        assert_eq!(later[0].added_last_minute, 0);
    }
}
