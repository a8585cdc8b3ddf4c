//! The operator's view of registered workers and their task queues: `GET
//! /api/workers`, `GET /api/workers/{id}`, `DELETE /api/workers/{id}`,
//! `GET /api/task-queues` and `GET /api/task-queues/{name}` (the client
//! routes of the Python SDK's `list_workers`, `describe_worker`,
//! `deregister_worker`, `list_task_queues` and `describe_task_queue`).
//!
//! A worker is what its registration recorded: its id, task queue, last
//! heartbeat, build id, runtime and SDK version and, when it holds sessions
//! or declares update validators, those. Its task-slot limits are not
//! recorded, so they are not answered. Its `status` is `active` while its
//! last heartbeat is within `stale_after_seconds` (three heartbeat
//! intervals), `stale` after that (the idle sweep removes it later), and
//! `draining` instead of `active` while an operator drains its build-id
//! cohort on its queue (it claims no new task).
//!
//! A task queue is one the counters of `task_queue_state` know (a task was
//! queued on it) or an active worker serves: its ready and leased workflow
//! and activity tasks, its active workers as pollers and its leased tasks,
//! at most [`DESCRIBED_PER_QUEUE`] of each, and its dispatch budget per
//! kind (the opt-in per-minute cap and this minute's count, read without
//! writing a key). Its build-id cohorts are `server::build_ids`'.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::error::finish_with;
use crate::server::wire::{self, Checks};
use crate::server::worker::HEARTBEAT_INTERVAL_SECONDS;
use crate::server::{ApiError, Engine};
use crate::store::worker_roster::{Drain, Liveness, WorkerRegistration};

/// Workers per page of `GET /api/workers` without `page_size`.
pub const DEFAULT_WORKER_PAGE_SIZE: i64 = 100;

/// How long after its last heartbeat a worker is `stale`.
pub const STALE_AFTER_SECONDS: u64 = HEARTBEAT_INTERVAL_SECONDS * 3;

/// `?task_queue=…&status=…&page_size=…&next_page_token=…` of `GET /api/workers`.
#[derive(Debug, Default, Deserialize)]
pub struct WorkerListQuery {
    /// Only the workers registered for this task queue.
    pub task_queue: Option<String>,
    /// `active`, `draining` or `stale`.
    pub status: Option<String>,
    /// Workers per page (1 to the page-size cap).
    pub page_size: Option<String>,
    /// The token of the previous page's `next_page_token`.
    pub next_page_token: Option<String>,
}

fn stale_before_ms(now_ms: i64) -> i64 {
    now_ms.saturating_sub(i64::try_from(STALE_AFTER_SECONDS * 1000).unwrap_or(i64::MAX))
}

/// `stale` past the liveness bound, else `draining` while its cohort is
/// drained, else `active` (the reference server's precedence).
fn worker_status(w: &WorkerRegistration, stale_before: i64) -> &'static str {
    if w.last_heartbeat_ms < stale_before {
        "stale"
    } else if w.draining {
        "draining"
    } else {
        "active"
    }
}

fn worker_json(namespace: &str, w: &WorkerRegistration, stale_before: i64) -> Value {
    let mut out = json!({
        "worker_id": w.worker_id,
        "namespace": namespace,
        "task_queue": w.task_queue,
        "status": worker_status(w, stale_before),
        "last_heartbeat_at": wire::timestamp(w.last_heartbeat_ms),
        "heartbeat_interval_seconds": HEARTBEAT_INTERVAL_SECONDS,
        "declares_update_validators": w.declares_update_validators,
        "build_id": w.build_id,
        "runtime": w.runtime,
        "sdk_version": w.sdk_version,
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
        let (liveness, drain) = match query.status.as_deref() {
            None => (Liveness::Any, Drain::Any),
            Some("active") => (Liveness::Since(stale_before), Drain::Is(false)),
            Some("draining") => (Liveness::Since(stale_before), Drain::Is(true)),
            Some("stale") => (Liveness::Before(stale_before), Drain::Any),
            Some(_) => {
                checks.problem(
                    "status",
                    "The status field must be active, draining or stale.",
                );
                (Liveness::Any, Drain::Any)
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
                drain,
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

/// Task queues per page of `GET /api/task-queues` without `page_size`.
pub const DEFAULT_TASK_QUEUE_PAGE_SIZE: i64 = 100;

/// Pollers and leases of each kind a task-queue description shows at most.
pub const DESCRIBED_PER_QUEUE: usize = 100;

/// `?page_size=…&next_page_token=…` of `GET /api/task-queues`.
#[derive(Debug, Default, Deserialize)]
pub struct TaskQueueListQuery {
    /// Task queues per page (1 to the page-size cap).
    pub page_size: Option<String>,
    /// The token of the previous page's `next_page_token`.
    pub next_page_token: Option<String>,
}

fn queue_stats(row: &crate::store::console::TaskQueueRow) -> Value {
    json!({
        "workflow_tasks": {
            "ready_count": row.workflow_ready,
            "leased_count": row.workflow_leased,
        },
        "activity_tasks": {
            "ready_count": row.activity_ready,
            "leased_count": row.activity_leased,
        },
        "approximate_backlog_count": row.workflow_ready + row.activity_ready,
    })
}

impl Engine {
    /// `GET /api/task-queues`: one page of the namespace's task queues (the
    /// queues a task was ever queued on) by name, with their task counts.
    pub fn list_task_queues(
        &self,
        namespace: &str,
        query: TaskQueueListQuery,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let limit = wire::page_size(
            &mut checks,
            query.page_size.as_deref(),
            DEFAULT_TASK_QUEUE_PAGE_SIZE,
        );
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        let after = query
            .next_page_token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(|t| {
                wire::parse_name_page_token(t)
                    .ok_or_else(|| ApiError::InvalidPageToken(t.to_owned()))
            })
            .transpose()?
            .unwrap_or_default();
        let _slot = self.admit_namespace(namespace)?;
        let mut page = self.read(|s| s.console_task_queues(namespace, &after, limit + 1))?;
        let next = if page.len() > limit {
            page.truncate(limit);
            page.last().map(|q| wire::name_page_token(&q.task_queue))
        } else {
            None
        };
        let queues: Vec<Value> = page
            .iter()
            .map(|q| json!({ "name": q.task_queue, "namespace": namespace, "stats": queue_stats(q) }))
            .collect();
        Ok(json!({ "namespace": namespace, "task_queues": queues, "next_page_token": next }))
    }

    /// `GET /api/task-queues/{name}`: the queue's task counts, its active
    /// pollers (registered workers) and its current leases, at most
    /// [`DESCRIBED_PER_QUEUE`] of each. A queue nothing was queued on and
    /// no active worker serves is `404 task_queue_not_found`.
    pub fn describe_task_queue(&self, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.task_queue(name);
        finish_with(v, &[("task_queue", name)], &[])?;
        let _slot = self.admit_namespace(namespace)?;
        let stale_before = stale_before_ms(crate::unix_ms());
        let (counters, pollers, mut leases) = self.read(|s| {
            let counters = s.task_queue_counters(namespace, name)?;
            let pollers = s.worker_roster(
                namespace,
                Some(name),
                Liveness::Since(stale_before),
                Drain::Any,
                None,
                DESCRIBED_PER_QUEUE,
            )?;
            let mut leases =
                s.task_queue_leases(namespace, name, "workflow", DESCRIBED_PER_QUEUE)?;
            leases.extend(s.task_queue_leases(namespace, name, "activity", DESCRIBED_PER_QUEUE)?);
            Ok((counters, pollers, leases))
        })?;
        if counters.is_none() && pollers.is_empty() {
            return Err(ApiError::TaskQueueNotFound(name.to_owned()));
        }
        let counters = counters.unwrap_or(crate::store::console::TaskQueueRow {
            task_queue: name.to_owned(),
            workflow_ready: 0,
            workflow_leased: 0,
            activity_ready: 0,
            activity_leased: 0,
        });
        leases.sort_by_key(|l| l.task_id);
        let pollers: Vec<Value> = pollers
            .iter()
            .map(|w| {
                json!({
                    "worker_id": w.worker_id,
                    "last_heartbeat_at": wire::timestamp(w.last_heartbeat_ms),
                    "status": worker_status(w, stale_before),
                })
            })
            .collect();
        let current_leases: Vec<Value> = leases
            .iter()
            .map(|l| {
                json!({
                    "task_id": l.task_id.to_string(),
                    "task_kind": l.kind,
                    "workflow_id": l.workflow_id,
                    "run_id": l.run_id.to_string(),
                    "attempt": l.attempt,
                    "lease_owner": l.lease_owner,
                    "lease_expires_at": l.lease_expires_at_ms.map(wire::timestamp),
                })
            })
            .collect();
        let active_workers = pollers.len();
        let admission = |kind: &str, ready: u64, leased: u64| -> Result<Value, ApiError> {
            let mut out = json!({
                "ready_count": ready,
                "leased_count": leased,
                "active_worker_count": active_workers,
            });
            match self.queues.budget(namespace, name, kind)? {
                None => {
                    out["status"] = json!("unlimited");
                    out["server_budget_source"] = json!("none");
                }
                Some((cap, used)) => {
                    let remaining = cap.saturating_sub(used);
                    out["status"] = json!(if remaining > 0 {
                        "accepting"
                    } else {
                        "throttled"
                    });
                    out["server_budget_source"] = json!("dispatches_per_minute");
                    out["server_max_dispatches_per_minute"] = json!(cap);
                    out["server_dispatch_count_this_minute"] = json!(used);
                    out["server_remaining_dispatch_capacity"] = json!(remaining);
                }
            }
            Ok(out)
        };
        let admission = json!({
            "workflow_tasks": admission("workflow", counters.workflow_ready, counters.workflow_leased)?,
            "activity_tasks": admission("activity", counters.activity_ready, counters.activity_leased)?,
        });
        Ok(json!({
            "name": name,
            "namespace": namespace,
            "stats": queue_stats(&counters),
            "admission": admission,
            "pollers": pollers,
            "current_leases": current_leases,
        }))
    }
}
