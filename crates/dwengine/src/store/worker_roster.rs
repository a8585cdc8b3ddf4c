//! The worker roster operators read (`GET /api/workers`, `GET
//! /api/workers/{id}`): the registrations the `workers` table keeps, one
//! namespace at a time, in worker-id order (a walk of its primary key),
//! each with whether an operator drained its build-id cohort.

use crate::store::connection::Store;
use crate::store::db::{params, OptionalExtension};
use crate::store::error::Error;

/// One worker registration as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRegistration {
    /// The worker's id within its namespace.
    pub worker_id: String,
    /// The task queue it registered for.
    pub task_queue: String,
    /// Its last registration or recorded heartbeat (Unix ms).
    pub last_heartbeat_ms: i64,
    /// The session capabilities it offers (a JSON list), when it holds sessions.
    pub session_capabilities: Option<String>,
    /// How many sessions it may hold, when it holds sessions.
    pub max_sessions: Option<i64>,
    /// Whether it declared update validators.
    pub declares_update_validators: bool,
    /// The build id it registered with (`None`: unversioned).
    pub build_id: Option<String>,
    /// The runtime it named (`python`, `rust`, …), if any.
    pub runtime: Option<String>,
    /// The SDK version it named, if any.
    pub sdk_version: Option<String>,
    /// Whether an operator drained its cohort (its namespace, task queue
    /// and build id) on the queue: it claims no new task.
    pub draining: bool,
}

/// Which registrations a roster page keeps, by last heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Every registration.
    Any,
    /// Heartbeated at or after the given Unix ms.
    Since(i64),
    /// Last heartbeated before the given Unix ms.
    Before(i64),
}

/// 1 when the registration's cohort is draining, else 0: one primary-key
/// probe of `build_id_rollouts` (the unversioned cohort's key is `''`).
const DRAINING: &str = "CASE WHEN EXISTS (SELECT 1 FROM build_id_rollouts r \
                        WHERE r.namespace = workers.namespace \
                        AND r.task_queue = workers.task_queue \
                        AND r.build_id = COALESCE(workers.build_id, '') \
                        AND r.drain_intent = 'draining') THEN 1 ELSE 0 END";

fn columns() -> String {
    format!(
        "worker_id, task_queue, last_heartbeat_ms, session_capabilities, max_sessions, \
         CASE WHEN update_validators IS NULL THEN 0 ELSE 1 END, build_id, runtime, \
         sdk_version, {DRAINING}"
    )
}

/// Which registrations a roster page keeps, by their cohort's drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Every registration.
    Any,
    /// Only those whose cohort is draining (`true`) or is not (`false`).
    Is(bool),
}

fn registration(r: &crate::store::db::Row<'_>) -> crate::store::db::Result<WorkerRegistration> {
    let validators: i64 = r.get(5)?;
    let draining: i64 = r.get(9)?;
    Ok(WorkerRegistration {
        worker_id: r.get(0)?,
        task_queue: r.get(1)?,
        last_heartbeat_ms: r.get(2)?,
        session_capabilities: r.get(3)?,
        max_sessions: r.get(4)?,
        declares_update_validators: validators != 0,
        build_id: r.get(6)?,
        runtime: r.get(7)?,
        sdk_version: r.get(8)?,
        draining: draining != 0,
    })
}

impl Store {
    /// At most `limit` registrations of `namespace` whose worker id sorts
    /// after `after`, in worker-id order, kept by `task_queue` (when given),
    /// `liveness` and `drain`.
    #[allow(clippy::too_many_arguments)]
    pub fn worker_roster(
        &self,
        namespace: &str,
        task_queue: Option<&str>,
        liveness: Liveness,
        drain: Drain,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<WorkerRegistration>, Error> {
        let (since, before) = match liveness {
            Liveness::Any => (i64::MIN, i64::MAX),
            Liveness::Since(ms) => (ms, i64::MAX),
            Liveness::Before(ms) => (i64::MIN, ms),
        };
        // Two statements rather than `?3 IS NULL OR …`: PostgreSQL cannot
        // type a parameter that is only compared with NULL.
        let queue_filter = if task_queue.is_some() {
            "AND task_queue = ?6"
        } else {
            "AND ?6 = ''"
        };
        let drain_filter = match drain {
            Drain::Any => String::new(),
            Drain::Is(draining) => format!("AND {DRAINING} = {}", i64::from(draining)),
        };
        let sql = format!(
            "SELECT {} FROM workers WHERE namespace = ?1 AND worker_id > ?2 \
             AND last_heartbeat_ms >= ?3 AND last_heartbeat_ms < ?4 {queue_filter} \
             {drain_filter} ORDER BY worker_id LIMIT ?5",
            columns()
        );
        let mut statement = self.conn.prepare_cached(&sql)?;
        let rows = statement.query_map(
            params![
                namespace,
                after.unwrap_or(""),
                since,
                before,
                crate::store::rows::to_i64(limit),
                task_queue.unwrap_or("")
            ],
            registration,
        )?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row?);
        }
        Ok(out)
    }

    /// Whether the cohort of `worker_id`'s registration in `namespace` is
    /// draining (false when it is not registered): what its registration
    /// and heartbeat answers report as its `status`.
    pub fn worker_draining(&self, namespace: &str, worker_id: &str) -> Result<bool, Error> {
        let sql = format!("SELECT {DRAINING} FROM workers WHERE namespace = ?1 AND worker_id = ?2");
        let draining: Option<i64> = self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![namespace, worker_id], |r| r.get(0))
            .optional()?;
        Ok(draining == Some(1))
    }

    /// The registration of `worker_id` in `namespace`, if any.
    pub fn worker_registration(
        &self,
        namespace: &str,
        worker_id: &str,
    ) -> Result<Option<WorkerRegistration>, Error> {
        let sql = format!(
            "SELECT {} FROM workers WHERE namespace = ?1 AND worker_id = ?2",
            columns()
        );
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![namespace, worker_id], registration)
            .optional()?)
    }
}

/// One leased workflow or activity task of a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueLease {
    /// The task's id.
    pub task_id: i64,
    /// `workflow` or `activity`.
    pub kind: String,
    /// The worker holding it.
    pub lease_owner: Option<String>,
    /// When its lease ends (Unix ms).
    pub lease_expires_at_ms: Option<i64>,
    /// The workflow id of its run.
    pub workflow_id: String,
    /// Its run.
    pub run_id: i64,
    /// Its attempt.
    pub attempt: i64,
}

impl Store {
    /// The counters of one task queue (`None`: no task was ever queued on it).
    pub fn task_queue_counters(
        &self,
        namespace: &str,
        task_queue: &str,
    ) -> Result<Option<crate::store::console::TaskQueueRow>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT workflow_ready, workflow_leased, activity_ready, activity_leased \
                 FROM task_queue_state WHERE namespace = ?1 AND task_queue = ?2",
            )?
            .query_row(params![namespace, task_queue], |r| {
                Ok(crate::store::console::TaskQueueRow {
                    task_queue: task_queue.to_owned(),
                    workflow_ready: crate::store::rows::to_u64(r.get(0)?),
                    workflow_leased: crate::store::rows::to_u64(r.get(1)?),
                    activity_ready: crate::store::rows::to_u64(r.get(2)?),
                    activity_leased: crate::store::rows::to_u64(r.get(3)?),
                })
            })
            .optional()?)
    }

    /// At most `limit` leased tasks of `kind` (`workflow` or `activity`) on
    /// the queue, the earliest due first (a walk of the ready index).
    pub fn task_queue_leases(
        &self,
        namespace: &str,
        task_queue: &str,
        kind: &str,
        limit: usize,
    ) -> Result<Vec<QueueLease>, Error> {
        let mut statement = self.conn.prepare_cached(
            "SELECT d.id, d.kind, d.lease_owner, d.lease_expires_at_ms, r.workflow_id, d.run_id, \
             d.attempt FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id \
             WHERE d.kind = ?1 AND d.namespace = ?2 AND d.task_queue = ?3 AND d.status = 'leased' \
             ORDER BY d.due_at_ms, d.id LIMIT ?4",
        )?;
        let rows = statement.query_map(
            params![
                kind,
                namespace,
                task_queue,
                crate::store::rows::to_i64(limit)
            ],
            |r| {
                Ok(QueueLease {
                    task_id: r.get(0)?,
                    kind: r.get(1)?,
                    lease_owner: r.get(2)?,
                    lease_expires_at_ms: r.get(3)?,
                    workflow_id: r.get(4)?,
                    run_id: r.get(5)?,
                    attempt: r.get(6)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}
