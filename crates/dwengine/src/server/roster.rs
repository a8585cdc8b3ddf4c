//! The operator's view of registered workers: `GET /api/workers`, `GET
//! /api/workers/{id}` and `DELETE /api/workers/{id}` (the client routes of
//! the SDKs' `list_workers`, `describe_worker` and `deregister_worker`).
//!
//! A worker is what its registration recorded: its id, task queue, last
//! heartbeat and, when it holds sessions or declares update validators,
//! those. Its runtime, SDK version, build id and task-slot limits are not
//! recorded, so they are not answered. Its `status` is `active` while its
//! last heartbeat is within `stale_after_seconds` (three heartbeat
//! intervals), `stale` after that; the idle sweep removes it later.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::error::finish_with;
use crate::server::wire::{self, Checks};
use crate::server::worker::HEARTBEAT_INTERVAL_SECONDS;
use crate::server::{ApiError, Engine};
use crate::store::worker_roster::{Liveness, WorkerRegistration};

/// Workers per page of `GET /api/workers` without `page_size`.
pub const DEFAULT_WORKER_PAGE_SIZE: i64 = 100;

/// How long after its last heartbeat a worker is `stale`.
pub const STALE_AFTER_SECONDS: u64 = HEARTBEAT_INTERVAL_SECONDS * 3;

/// `?task_queue=…&status=…&page_size=…&next_page_token=…` of `GET /api/workers`.
#[derive(Debug, Default, Deserialize)]
pub struct WorkerListQuery {
    /// Only the workers registered for this task queue.
    pub task_queue: Option<String>,
    /// `active` or `stale`.
    pub status: Option<String>,
    /// Workers per page (1 to the page-size cap).
    pub page_size: Option<String>,
    /// The token of the previous page's `next_page_token`.
    pub next_page_token: Option<String>,
}

fn stale_before_ms(now_ms: i64) -> i64 {
    now_ms.saturating_sub(i64::try_from(STALE_AFTER_SECONDS * 1000).unwrap_or(i64::MAX))
}

fn worker_json(namespace: &str, w: &WorkerRegistration, stale_before: i64) -> Value {
    let mut out = json!({
        "worker_id": w.worker_id,
        "namespace": namespace,
        "task_queue": w.task_queue,
        "status": if w.last_heartbeat_ms >= stale_before { "active" } else { "stale" },
        "last_heartbeat_at": wire::timestamp(w.last_heartbeat_ms),
        "heartbeat_interval_seconds": HEARTBEAT_INTERVAL_SECONDS,
        "declares_update_validators": w.declares_update_validators,
    });
    if let Some(capabilities) = &w.session_capabilities {
        let capabilities: Value = serde_json::from_str(capabilities).unwrap_or(Value::Null);
        out["worker_sessions"] = json!({
            "capabilities": capabilities,
            "max_concurrent_worker_sessions": w.max_sessions,
        });
    }
    out
}

impl Engine {
    /// `GET /api/workers`: one page of the namespace's registrations in
    /// worker-id order, with the next page's token (`null` on the last).
    pub fn list_workers(&self, namespace: &str, query: WorkerListQuery) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let limit = wire::page_size(
            &mut checks,
            query.page_size.as_deref(),
            DEFAULT_WORKER_PAGE_SIZE,
        );
        let now = crate::unix_ms();
        let stale_before = stale_before_ms(now);
        let liveness = match query.status.as_deref() {
            None => Liveness::Any,
            Some("active") => Liveness::Since(stale_before),
            Some("stale") => Liveness::Before(stale_before),
            Some(_) => {
                checks.problem("status", "The status field must be active or stale.");
                Liveness::Any
            }
        };
        let task_queue = query.task_queue.filter(|q| !q.is_empty());
        let mut v = self.config.request_limits.validator();
        if let Some(queue) = &task_queue {
            v.task_queue(queue);
        }
        finish_with(v, &[], &checks.problems)?;
        let after = query
            .next_page_token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(|t| {
                wire::parse_name_page_token(t)
                    .ok_or_else(|| ApiError::InvalidPageToken(t.to_owned()))
            })
            .transpose()?;
        let _slot = self.admit_namespace(namespace)?;
        // One more than the page tells whether another page follows.
        let mut page = self.read(|s| {
            s.worker_roster(
                namespace,
                task_queue.as_deref(),
                liveness,
                after.as_deref(),
                limit + 1,
            )
        })?;
        let next = if page.len() > limit {
            page.truncate(limit);
            page.last().map(|w| wire::name_page_token(&w.worker_id))
        } else {
            None
        };
        let workers: Vec<Value> = page
            .iter()
            .map(|w| worker_json(namespace, w, stale_before))
            .collect();
        Ok(json!({
            "namespace": namespace,
            "workers": workers,
            "stale_after_seconds": STALE_AFTER_SECONDS,
            "next_page_token": next,
        }))
    }

    /// `GET /api/workers/{id}`: one registration, or `404 worker_not_found`.
    pub fn describe_worker(&self, namespace: &str, worker_id: &str) -> Result<Value, ApiError> {
        let stale_before = stale_before_ms(crate::unix_ms());
        let registration = self
            .read(|s| s.worker_registration(namespace, worker_id))?
            .ok_or_else(|| ApiError::WorkerNotFound(worker_id.to_owned()))?;
        let mut out = worker_json(namespace, &registration, stale_before);
        out["stale_after_seconds"] = json!(STALE_AFTER_SECONDS);
        Ok(out)
    }
}
