//! Query tasks on the worker plane: poll, complete, fail.
//!
//! A control-plane query (see [`crate::server::control`]) queues a query
//! task and wakes the run's queue on the `query` channel; a worker's poll
//! leases it with the run's full history, replays the workflow and answers.
//! Query polls hold a workflow wait slot while they wait, so they count
//! against the same long-poll caps as workflow polls.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::control::QUERY_CHANNEL;
use crate::server::wire::{self, Checks, QueryTaskReport};
use crate::server::worker::{validation, PollSpec};
use crate::server::{ApiError, Engine};
use crate::store::{LeasedQuery, QueryAnswer, TaskKind};

const WAKE_CHECK: Duration = Duration::from_millis(25);
const IDLE_RECHECK: Duration = Duration::from_millis(500);

impl Engine {
    /// Long-polls a query task.
    pub(crate) fn poll_query(&self, poll: PollSpec) -> Result<Value, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        // A short lease: a query whose worker vanished is handed to another
        // worker while its caller still waits.
        let lease_ms = i64::try_from(self.config.query_timeout.as_millis() / 2).unwrap_or(i64::MAX);
        let lease = |engine: &Engine| {
            let (ns, queue, owner) = (ns.clone(), queue.clone(), poll.worker_id.clone());
            engine.write(move |s| s.lease_query(&ns, &queue, &owner, lease_ms))
        };
        if let Some(task) = lease(self)? {
            return self.render_query(task);
        }
        if !poll.wait.is_zero() {
            let _slot = match self.wait_pool(TaskKind::Workflow).admit(ns)? {
                Ok(slot) => slot,
                Err(refusal) => return Err(ApiError::WaitCapacity(refusal)),
            };
            let deadline = Instant::now() + poll.wait;
            let mut seen = self.signals.version(ns, queue, QUERY_CHANNEL)?;
            let mut last_pass = Instant::now();
            while Instant::now() < deadline && !poll.is_abandoned() {
                std::thread::sleep(
                    WAKE_CHECK.min(deadline.saturating_duration_since(Instant::now())),
                );
                if poll.is_abandoned() {
                    break;
                }
                let now = self.signals.version(ns, queue, QUERY_CHANNEL)?;
                if now != seen || last_pass.elapsed() >= IDLE_RECHECK {
                    seen = now;
                    last_pass = Instant::now();
                    if let Some(task) = lease(self)? {
                        return self.render_query(task);
                    }
                }
            }
        }
        Ok(json!({ "task": null, "poll_status": "timeout" }))
    }

    fn render_query(&self, task: LeasedQuery) -> Result<Value, ApiError> {
        let run = task.run_id;
        let events = self.read(|s| s.history(run))?;
        let workflow_arguments = events
            .first()
            .and_then(|e| e.payload.get("arguments").cloned())
            .unwrap_or(Value::Null);
        Ok(json!({
            "task": {
                "query_task_id": task.query_task_id.to_string(),
                "query_task_attempt": task.attempt,
                "task_kind": "query",
                "lease_owner": task.lease_owner,
                "lease_expires_at": wire::timestamp(task.lease_expires_at_ms),
                "namespace": task.namespace,
                "task_queue": task.task_queue,
                "workflow_id": task.workflow_id,
                "run_id": wire::run_id(task.run_id),
                "workflow_type": task.workflow_type,
                "query_name": task.query_name,
                "payload_codec": wire::codec(&workflow_arguments),
                "workflow_arguments": workflow_arguments,
                "query_arguments": task.arguments,
                "history_events": events.iter().map(wire::event).collect::<Vec<_>>(),
            },
            "poll_status": "leased",
        }))
    }

    /// `POST /api/worker/query-tasks/{id}/complete` or `…/fail`.
    pub fn report_query(
        &self,
        task_id: &str,
        failed: bool,
        body: QueryTaskReport,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let task = task_id.parse::<i64>().ok();
        if task.is_none() {
            checks.problem(
                "query_task_id",
                "The query task id must be one this server issued.",
            );
        }
        if body.lease_owner.trim().is_empty() {
            checks.problem("lease_owner", "The lease_owner field is required.");
        }
        checks.range(
            "query_task_attempt",
            Some(body.query_task_attempt),
            1,
            i64::MAX,
        );
        if !checks.problems.is_empty() {
            return Err(validation(checks).into());
        }
        let answer = if failed {
            QueryAnswer::Failed(body.failure.unwrap_or(Value::Null))
        } else {
            QueryAnswer::Completed(json!({
                "result": body.result, "result_envelope": body.result_envelope,
            }))
        };
        let (task, owner, attempt) = (
            task.unwrap_or_default(),
            body.lease_owner,
            body.query_task_attempt.unsigned_abs(),
        );
        self.write(move |s| s.answer_query(task, &owner, attempt, answer))?;
        Ok(json!({
            "query_task_id": task_id,
            "outcome": if failed { "failed" } else { "completed" },
        }))
    }
}
