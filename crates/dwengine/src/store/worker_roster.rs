//! The worker roster operators read (`GET /api/workers`, `GET
//! /api/workers/{id}`): the registrations the `workers` table keeps, one
//! namespace at a time, in worker-id order (a walk of its primary key).

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

const COLUMNS: &str = "worker_id, task_queue, last_heartbeat_ms, session_capabilities, \
                       max_sessions, CASE WHEN update_validators IS NULL THEN 0 ELSE 1 END";

fn registration(r: &crate::store::db::Row<'_>) -> crate::store::db::Result<WorkerRegistration> {
    let validators: i64 = r.get(5)?;
    Ok(WorkerRegistration {
        worker_id: r.get(0)?,
        task_queue: r.get(1)?,
        last_heartbeat_ms: r.get(2)?,
        session_capabilities: r.get(3)?,
        max_sessions: r.get(4)?,
        declares_update_validators: validators != 0,
    })
}

impl Store {
    /// At most `limit` registrations of `namespace` whose worker id sorts
    /// after `after`, in worker-id order, kept by `task_queue` (when given)
    /// and `liveness`.
    pub fn worker_roster(
        &self,
        namespace: &str,
        task_queue: Option<&str>,
        liveness: Liveness,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<WorkerRegistration>, Error> {
        let (since, before) = match liveness {
            Liveness::Any => (i64::MIN, i64::MAX),
            Liveness::Since(ms) => (ms, i64::MAX),
            Liveness::Before(ms) => (i64::MIN, ms),
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM workers WHERE namespace = ?1 AND worker_id > ?2 \
             AND (?3 IS NULL OR task_queue = ?3) \
             AND last_heartbeat_ms >= ?4 AND last_heartbeat_ms < ?5 \
             ORDER BY worker_id LIMIT ?6"
        );
        let mut statement = self.conn.prepare_cached(&sql)?;
        let rows = statement.query_map(
            params![
                namespace,
                after.unwrap_or(""),
                task_queue,
                since,
                before,
                crate::store::rows::to_i64(limit)
            ],
            registration,
        )?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row?);
        }
        Ok(out)
    }

    /// The registration of `worker_id` in `namespace`, if any.
    pub fn worker_registration(
        &self,
        namespace: &str,
        worker_id: &str,
    ) -> Result<Option<WorkerRegistration>, Error> {
        let sql = format!("SELECT {COLUMNS} FROM workers WHERE namespace = ?1 AND worker_id = ?2");
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row(params![namespace, worker_id], registration)
            .optional()?)
    }
}
