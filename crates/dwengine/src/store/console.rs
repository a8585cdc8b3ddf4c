//! Bounded reads for the operator console (`/ui`) that the API has no
//! route for: failures across runs, open tasks with an error, a run's
//! pending activities, the registered workers, the task queues' state, and
//! runs filtered by a search attribute.
//!
//! Every read is a page: an index walk from a position with a `LIMIT`, or,
//! where no index fits the filter (a search attribute, a failure category,
//! a namespace on the failures table), a walk of at most `scan` rows in id
//! order whose last position is handed back, so the caller can continue
//! and no page costs more than `scan` rows however many the store holds.

use crate::store::db::params;

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::{RunId, RunStatus};
use crate::store::rows::{to_i64, to_u64};

/// One `failures` row with the run it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFailureRow {
    /// The row's id (the page position).
    pub id: i64,
    /// The run it ended.
    pub run: RunId,
    /// The run's workflow id.
    pub workflow_id: String,
    /// The run's workflow type.
    pub workflow_type: String,
    /// `structural_limit`, `timeout`, `application`, …
    pub category: String,
    /// The recorded message.
    pub message: String,
    /// The limit kind, for structural failures.
    pub limit_kind: Option<String>,
    /// The value that hit it.
    pub limit_value: Option<u64>,
    /// The configured bound.
    pub limit_configured: Option<u64>,
    /// When it was recorded (Unix ms).
    pub created_at_ms: i64,
}

/// One open workflow or activity task whose last attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingTaskRow {
    /// The task's id (the page position).
    pub id: i64,
    /// `workflow` or `activity`.
    pub kind: String,
    /// The run it belongs to.
    pub run: RunId,
    /// The run's workflow id.
    pub workflow_id: String,
    /// The attempt that failed.
    pub attempt: u64,
    /// What the last attempt reported, as stored.
    pub last_error: String,
    /// When it is handed out again (Unix ms).
    pub due_at_ms: i64,
}

/// A walked page: the rows that matched and, when the walk stopped before
/// the end, the position to continue from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked<T> {
    /// The matching rows, newest first.
    pub rows: Vec<T>,
    /// The last id examined when more rows may follow (continue below it).
    pub continue_below: Option<i64>,
    /// How many rows the walk examined.
    pub examined: usize,
}

/// One scheduled activity of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingActivityRow {
    /// The activity execution id.
    pub id: i64,
    /// Its type.
    pub activity_type: String,
    /// `ready` or `leased` (its dispatch row), or `scheduled` without one.
    pub state: String,
    /// The current attempt (0 before the first lease).
    pub attempt: u64,
    /// Why the last attempt ended, when one failed.
    pub last_error: Option<String>,
    /// Who holds its lease.
    pub lease_owner: Option<String>,
}

/// One registered worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRow {
    /// Its id.
    pub worker_id: String,
    /// The queue it registered for.
    pub task_queue: String,
    /// Its last heartbeat (Unix ms).
    pub last_heartbeat_ms: i64,
}

/// One task queue's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskQueueRow {
    /// The queue.
    pub task_queue: String,
    /// Workflow tasks ready / leased.
    pub workflow_ready: u64,
    /// Leased workflow tasks.
    pub workflow_leased: u64,
    /// Activity tasks ready.
    pub activity_ready: u64,
    /// Leased activity tasks.
    pub activity_leased: u64,
}

/// What a walk of runs filtered by one search attribute matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFilter<'a> {
    /// Only this type.
    pub workflow_type: Option<&'a str>,
    /// Only this status.
    pub status: Option<RunStatus>,
    /// The attribute's name (letters, digits, `_`, `-`, `.`).
    pub attribute: &'a str,
    /// Its value as text (`5`, `gold`, `1` for true).
    pub value: &'a str,
}

impl Store {
    /// Failure rows of `namespace`'s runs, newest first, below `below`,
    /// in `category` when given: at most `limit` rows from a walk of at
    /// most `scan` failure rows.
    pub fn console_run_failures(
        &self,
        namespace: &str,
        category: Option<&str>,
        below: Option<i64>,
        limit: usize,
        scan: usize,
    ) -> Result<Walked<RunFailureRow>, Error> {
        let below = below.unwrap_or(i64::MAX);
        // The inner query walks the primary key down from `below`; the outer
        // one filters what it read, so its cost is `scan` rows at most.
        let rows = self
            .conn
            .prepare_cached(
                "SELECT f.id, f.run_id, r.workflow_id, r.workflow_type, f.failure_category, \
                 f.message, f.structural_limit_kind, f.structural_limit_value, \
                 f.structural_limit_configured, f.created_at_ms \
                 FROM (SELECT * FROM failures WHERE id < ?1 ORDER BY id DESC LIMIT ?2) AS f \
                 JOIN runs r ON r.id = f.run_id \
                 WHERE r.namespace = ?3 AND (f.failure_category = ?4 OR ?4 IS NULL) \
                 ORDER BY f.id DESC LIMIT ?5",
            )?
            .query_map(
                params![below, to_i64(scan), namespace, category, to_i64(limit)],
                |r| {
                    Ok(RunFailureRow {
                        id: r.get(0)?,
                        run: RunId(r.get(1)?),
                        workflow_id: r.get(2)?,
                        workflow_type: r.get(3)?,
                        category: r.get(4)?,
                        message: r.get(5)?,
                        limit_kind: r.get(6)?,
                        limit_value: r.get::<_, Option<i64>>(7)?.map(to_u64),
                        limit_configured: r.get::<_, Option<i64>>(8)?.map(to_u64),
                        created_at_ms: r.get(9)?,
                    })
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        self.walked(rows, |r| r.id, "failures", below, limit, scan)
    }

    /// Open workflow and activity tasks of `namespace` whose last attempt
    /// failed, newest first, below `below`, of `kind` when given: at most
    /// `limit` from a walk of at most `scan` task rows.
    pub fn console_failing_tasks(
        &self,
        namespace: &str,
        kind: Option<&str>,
        below: Option<i64>,
        limit: usize,
        scan: usize,
    ) -> Result<Walked<FailingTaskRow>, Error> {
        let below = below.unwrap_or(i64::MAX);
        let rows = self
            .conn
            .prepare_cached(
                "SELECT d.id, d.kind, d.run_id, r.workflow_id, d.attempt, d.last_error, d.due_at_ms \
                 FROM (SELECT * FROM dispatch_tasks WHERE id < ?1 ORDER BY id DESC LIMIT ?2) AS d \
                 JOIN runs r ON r.id = d.run_id \
                 WHERE d.namespace = ?3 AND d.status != 'done' AND d.last_error IS NOT NULL \
                 AND d.kind IN ('workflow', 'activity') AND (d.kind = ?4 OR ?4 IS NULL) \
                 ORDER BY d.id DESC LIMIT ?5",
            )?
            .query_map(
                params![below, to_i64(scan), namespace, kind, to_i64(limit)],
                |r| {
                    Ok(FailingTaskRow {
                        id: r.get(0)?,
                        kind: r.get(1)?,
                        run: RunId(r.get(2)?),
                        workflow_id: r.get(3)?,
                        attempt: to_u64(r.get(4)?),
                        last_error: r.get(5)?,
                        due_at_ms: r.get(6)?,
                    })
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        self.walked(rows, |r| r.id, "dispatch_tasks", below, limit, scan)
    }

    /// Runs of `namespace` below `below` (newest first) matching `filter`:
    /// at most `limit` from a walk of at most `scan` runs.
    pub fn console_runs_by_attribute(
        &self,
        namespace: &str,
        filter: &RunFilter<'_>,
        below: Option<i64>,
        limit: usize,
        scan: usize,
    ) -> Result<Walked<RunId>, Error> {
        let below = below.unwrap_or(i64::MAX);
        let path = format!("$.\"{}\"", filter.attribute);
        let rows = self
            .conn
            .prepare_cached(
                "SELECT id FROM (SELECT id, workflow_type, status, search_attributes, archived_at_ms \
                 FROM runs WHERE namespace = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3) AS page \
                 WHERE archived_at_ms IS NULL AND (workflow_type = ?4 OR ?4 IS NULL) \
                 AND (status = ?5 OR ?5 IS NULL) \
                 AND CAST(json_extract(search_attributes, ?6) AS TEXT) = ?7 \
                 ORDER BY id DESC LIMIT ?8",
            )?
            .query_map(
                params![
                    namespace,
                    below,
                    to_i64(scan),
                    filter.workflow_type,
                    filter.status.map(RunStatus::as_str),
                    path,
                    filter.value,
                    to_i64(limit)
                ],
                |r| r.get(0).map(RunId),
            )?
            .collect::<Result<Vec<_>, _>>()?;
        // Where the walk of this namespace's runs stopped.
        let (examined, lowest): (i64, Option<i64>) = self
            .conn
            .prepare_cached(
                "SELECT COUNT(*), MIN(id) FROM (SELECT id FROM runs WHERE namespace = ?1 \
                 AND id < ?2 ORDER BY id DESC LIMIT ?3) AS page",
            )?
            .query_row(params![namespace, below, to_i64(scan)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        let examined = usize::try_from(examined).unwrap_or(0);
        let continue_below = if rows.len() >= limit {
            rows.last().map(|r| r.0)
        } else if examined >= scan {
            lowest
        } else {
            None
        };
        Ok(Walked {
            rows,
            continue_below,
            examined,
        })
    }

    /// A run's scheduled activities in id order from `after`, at most
    /// `limit`, with their dispatch state, attempt and last error.
    pub fn console_pending_activities(
        &self,
        run: RunId,
        after: i64,
        limit: usize,
    ) -> Result<Vec<PendingActivityRow>, Error> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT a.id, a.activity_type, d.status, d.attempt, d.last_error, d.lease_owner \
                 FROM activities a LEFT JOIN dispatch_tasks d ON d.kind = 'activity' AND d.item_id = a.id \
                 WHERE a.run_id = ?1 AND a.status = 'scheduled' AND a.id > ?2 ORDER BY a.id LIMIT ?3",
            )?
            .query_map(params![run.0, after, to_i64(limit)], |r| {
                Ok(PendingActivityRow {
                    id: r.get(0)?,
                    activity_type: r.get(1)?,
                    state: r
                        .get::<_, Option<String>>(2)?
                        .unwrap_or_else(|| "scheduled".to_owned()),
                    attempt: r.get::<_, Option<i64>>(3)?.map_or(0, to_u64),
                    last_error: r.get(4)?,
                    lease_owner: r.get(5)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// When `run` started and closed (Unix ms): one primary-key read.
    pub fn console_run_times(&self, run: RunId) -> Result<(i64, Option<i64>), Error> {
        Ok(self
            .conn
            .prepare_cached("SELECT created_at_ms, closed_at_ms FROM runs WHERE id = ?1")?
            .query_row([run.0], |r| Ok((r.get(0)?, r.get(1)?)))?)
    }

    /// `namespace`'s registered workers by id after `after`, at most `limit`.
    pub fn console_workers(
        &self,
        namespace: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<WorkerRow>, Error> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT worker_id, task_queue, last_heartbeat_ms FROM workers \
                 WHERE namespace = ?1 AND worker_id > ?2 ORDER BY worker_id LIMIT ?3",
            )?
            .query_map(params![namespace, after, to_i64(limit)], |r| {
                Ok(WorkerRow {
                    worker_id: r.get(0)?,
                    task_queue: r.get(1)?,
                    last_heartbeat_ms: r.get(2)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// `namespace`'s task queues by name after `after`, at most `limit`.
    pub fn console_task_queues(
        &self,
        namespace: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<TaskQueueRow>, Error> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT task_queue, workflow_ready, workflow_leased, activity_ready, activity_leased \
                 FROM task_queue_state WHERE namespace = ?1 AND task_queue > ?2 \
                 ORDER BY task_queue LIMIT ?3",
            )?
            .query_map(params![namespace, after, to_i64(limit)], |r| {
                Ok(TaskQueueRow {
                    task_queue: r.get(0)?,
                    workflow_ready: to_u64(r.get(1)?),
                    workflow_leased: to_u64(r.get(2)?),
                    activity_ready: to_u64(r.get(3)?),
                    activity_leased: to_u64(r.get(4)?),
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Where a walk of `table` from `below` stopped: below the last row
    /// kept when the page filled, else below the lowest id examined when
    /// the walk used its whole `scan`, else nowhere (the end was reached).
    fn walked<T>(
        &self,
        rows: Vec<T>,
        id_of: impl Fn(&T) -> i64,
        table: &'static str,
        below: i64,
        limit: usize,
        scan: usize,
    ) -> Result<Walked<T>, Error> {
        let sql = match table {
            "failures" => {
                "SELECT COUNT(*), MIN(id) FROM (SELECT id FROM failures WHERE id < ?1 \
                 ORDER BY id DESC LIMIT ?2) AS page"
            }
            _ => {
                "SELECT COUNT(*), MIN(id) FROM (SELECT id FROM dispatch_tasks WHERE id < ?1 \
                 ORDER BY id DESC LIMIT ?2) AS page"
            }
        };
        let (examined, lowest): (i64, Option<i64>) = self
            .conn
            .prepare_cached(sql)?
            .query_row(params![below, to_i64(scan)], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let examined = usize::try_from(examined).unwrap_or(0);
        let continue_below = if rows.len() >= limit {
            rows.last().map(&id_of)
        } else if examined >= scan {
            lowest
        } else {
            None
        };
        Ok(Walked {
            rows,
            continue_below,
            examined,
        })
    }
}
