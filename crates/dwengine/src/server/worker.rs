//! The worker plane: heartbeats, idempotent long polls, completions.
//!
//! A poll runs one pass (recovery scans, then a lease under the queue's
//! admission) and, if that found nothing, holds a wait slot and re-runs the
//! pass whenever the queue's wake signal changes, until its wait ends. Its
//! answer is stored under its poll request id, so a retry of the same id
//! replays the answer and can never lease a second task.

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::diagnostics::PollObservation;
use crate::poll_requests::PollClaim;
use crate::server::error::finish_validation;
use crate::server::{ApiError, Engine};
use crate::store::{LeasedTask, TaskKind, WorkerCommand, WorkflowDecision};

/// Register or heartbeat.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The namespace.
    pub namespace: String,
    /// The worker's id.
    pub worker_id: String,
    /// The queue it polls.
    pub task_queue: String,
}

/// A long poll.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Poll {
    /// The namespace.
    pub namespace: String,
    /// The queue.
    pub task_queue: String,
    /// The polling worker.
    pub worker_id: String,
    /// Idempotency token of this poll.
    pub poll_request_id: String,
    /// How long to wait for work (capped by the server).
    #[serde(default)]
    pub timeout_ms: u64,
}

/// A workflow-task completion (the decision's fields sit beside `commands`,
/// which is why unknown fields cannot be denied here).
#[derive(Debug, Deserialize, Default)]
pub struct WorkflowCompletion {
    /// Every command the workflow issued since the start, in order.
    #[serde(default)]
    pub commands: Vec<WorkerCommand>,
    /// How the task ends.
    #[serde(default, flatten)]
    pub decision: WorkflowDecision,
}

/// An activity completion or failure.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ActivityOutcome {
    /// The result (completion).
    #[serde(default)]
    pub result: Value,
    /// The failure message (failure).
    #[serde(default)]
    pub message: Option<String>,
}

const WAKE_CHECK: Duration = Duration::from_millis(25);
// Re-run a pass now and then even without a wake: a signal can expire or a
// timer can come due with nobody enqueuing anything.
const IDLE_RECHECK: Duration = Duration::from_millis(500);

impl Engine {
    /// Registers a worker or records its heartbeat; the elected heartbeat
    /// of a namespace also prunes at most one expired run.
    pub fn heartbeat(&self, body: Heartbeat) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text(
            "namespace",
            &body.namespace,
            dwpolicy::boundary::MAX_NAME_CHARS,
        )
        .text(
            "worker_id",
            &body.worker_id,
            dwpolicy::boundary::MAX_NAME_CHARS,
        )
        .task_queue(&body.task_queue);
        finish_validation(
            v,
            &[
                ("namespace", &body.namespace),
                ("worker_id", &body.worker_id),
                ("task_queue", &body.task_queue),
            ],
        )?;
        let mut store = self.store();
        store.record_worker(&body.namespace, &body.worker_id, &body.task_queue)?;
        let pruned = self
            .retention
            .on_heartbeat(&body.namespace, &mut store)
            .map_err(|e| match e {
                crate::retention::RetentionError::Cache(e) => ApiError::Cache(e),
                crate::retention::RetentionError::Store(e) => ApiError::Store(e),
            })?;
        Ok(json!({ "outcome": "recorded", "pruned_run_id": pruned.map(|r| r.0) }))
    }

    /// Long-polls a task of `kind`.
    pub fn poll(&self, kind: TaskKind, poll: Poll) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text(
            "namespace",
            &poll.namespace,
            dwpolicy::boundary::MAX_NAME_CHARS,
        )
        .task_queue(&poll.task_queue)
        .text(
            "worker_id",
            &poll.worker_id,
            dwpolicy::boundary::MAX_NAME_CHARS,
        )
        .text(
            "poll_request_id",
            &poll.poll_request_id,
            dwpolicy::boundary::MAX_REQUEST_ID_CHARS,
        );
        finish_validation(
            v,
            &[
                ("namespace", &poll.namespace),
                ("task_queue", &poll.task_queue),
                ("worker_id", &poll.worker_id),
                ("poll_request_id", &poll.poll_request_id),
            ],
        )?;
        let wait = Duration::from_millis(poll.timeout_ms).min(self.config.max_poll_wait);
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        let polls = self.polls(kind);
        let answer = match polls.begin(ns, queue, id, wait)? {
            PollClaim::Replay(bytes) => replayed(&bytes),
            PollClaim::InFlight => self.await_in_flight(kind, &poll, wait)?,
            PollClaim::Fresh => match self.run_poll(kind, &poll, wait) {
                Ok(task) => {
                    let answer = json!({ "task": task });
                    let bytes = serde_json::to_vec(&answer).unwrap_or_default();
                    polls.finish(ns, queue, id, &bytes)?;
                    answer
                }
                Err(e) => {
                    let _ = polls.abandon(ns, queue, id);
                    return Err(e);
                }
            },
        };
        let outcome = if answer.get("replayed").is_some() {
            "replayed"
        } else if answer["task"].is_null() {
            "empty"
        } else {
            "leased"
        };
        self.diagnostics.record(
            ns,
            queue,
            &PollObservation {
                worker_id: poll.worker_id.clone(),
                kind: kind.as_str().to_owned(),
                at_ms: crate::unix_ms(),
                outcome: outcome.to_owned(),
            },
        )?;
        Ok(answer)
    }

    fn await_in_flight(
        &self,
        kind: TaskKind,
        poll: &Poll,
        wait: Duration,
    ) -> Result<Value, ApiError> {
        let deadline = Instant::now() + wait + self.config.poll_ttls.pending_slack;
        let polls = self.polls(kind);
        loop {
            if let Some(bytes) =
                polls.result(&poll.namespace, &poll.task_queue, &poll.poll_request_id)?
            {
                return Ok(replayed(&bytes));
            }
            if Instant::now() >= deadline {
                return Ok(json!({ "task": null, "replayed": false }));
            }
            std::thread::sleep(WAKE_CHECK);
        }
    }

    fn run_poll(
        &self,
        kind: TaskKind,
        poll: &Poll,
        wait: Duration,
    ) -> Result<Option<LeasedTask>, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        // The durable binding: a task still leased to this id is this poll's answer.
        if let Some(task) =
            self.store()
                .leased_by_poll_request(kind, ns, queue, &poll.poll_request_id)?
        {
            return Ok(Some(task));
        }
        if let Some(task) = self.pass(kind, poll)? {
            return Ok(Some(task));
        }
        if wait.is_zero() {
            return Ok(None);
        }
        let _slot = match self.wait_pool(kind).admit(ns)? {
            Ok(slot) => slot,
            Err(refusal) => return Err(ApiError::WaitCapacity(refusal)),
        };
        let deadline = Instant::now() + wait;
        let mut seen = self.signals.version(ns, queue, kind.as_str())?;
        let mut last_pass = Instant::now();
        while Instant::now() < deadline {
            std::thread::sleep(WAKE_CHECK.min(deadline.saturating_duration_since(Instant::now())));
            let now = self.signals.version(ns, queue, kind.as_str())?;
            if now != seen || last_pass.elapsed() >= IDLE_RECHECK {
                seen = now;
                last_pass = Instant::now();
                if let Some(task) = self.pass(kind, poll)? {
                    return Ok(Some(task));
                }
            }
        }
        Ok(None)
    }

    /// One poll pass: capped recovery scans, then one lease under admission.
    fn pass(&self, kind: TaskKind, poll: &Poll) -> Result<Option<LeasedTask>, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        if kind == TaskKind::Workflow {
            self.recover(ns, queue)?;
        }
        let Some(_lock) = self
            .queues
            .lock(ns, queue, kind.as_str(), Duration::from_millis(200))?
        else {
            return Ok(None);
        };
        if !self.queues.has_budget(ns, queue, kind.as_str())? {
            return Ok(None);
        }
        let task = self.store().lease_task(
            kind,
            ns,
            queue,
            &poll.worker_id,
            &poll.poll_request_id,
            self.config.task_lease,
        )?;
        if task.is_some() {
            self.queues.record_dispatch(ns, queue, kind.as_str())?;
        }
        Ok(task)
    }

    /// Due timers of the polled queue and expired workflow-task leases,
    /// each scan capped; a lease another node is already recovering is skipped.
    fn recover(&self, namespace: &str, task_queue: &str) -> Result<(), ApiError> {
        let limits = self.config.poller;
        let mut store = self.store();
        store.fire_due_timers(namespace, task_queue, limits.due_timer_recovery_scan_limit)?;
        for task in
            store.expired_workflow_leases(limits.expired_workflow_task_recovery_scan_limit)?
        {
            if limits.claim_recovery(self.cache.as_ref(), task, self.config.recovery_suppression)?
                && store.recover_expired_lease(task)?
            {
                let (ns, queue): (String, String) = store.task_queue_of(task)?;
                drop(store);
                self.signals
                    .signal(&ns, &queue, TaskKind::Workflow.as_str())?;
                store = self.store();
            }
        }
        Ok(())
    }

    /// Completes a leased workflow task.
    pub fn complete_workflow_task(
        &self,
        task_id: i64,
        body: WorkflowCompletion,
    ) -> Result<Value, ApiError> {
        let (result, run) = {
            let mut store = self.store();
            let (ns, queue) = store.task_queue_of(task_id)?;
            let result = store.complete_workflow_task(task_id, &body.commands, body.decision)?;
            (result, (ns, queue))
        };
        if result.activities_queued > 0 {
            self.signals
                .signal(&run.0, &run.1, TaskKind::Activity.as_str())?;
        }
        self.signals
            .signal(&run.0, &run.1, TaskKind::Workflow.as_str())?;
        serde_json::to_value(result).map_err(|e| ApiError::Internal(e.to_string()))
    }

    /// Returns a leased workflow task to its queue.
    pub fn fail_workflow_task(&self, task_id: i64) -> Result<Value, ApiError> {
        let (ns, queue) = {
            let mut store = self.store();
            store.fail_workflow_task(task_id)?;
            store.task_queue_of(task_id)?
        };
        self.signals
            .signal(&ns, &queue, TaskKind::Workflow.as_str())?;
        Ok(json!({ "outcome": "requeued" }))
    }

    /// Completes or fails a leased activity task.
    pub fn finish_activity_task(
        &self,
        task_id: i64,
        failed: bool,
        body: ActivityOutcome,
    ) -> Result<Value, ApiError> {
        let outcome = if failed {
            Err(body.message.unwrap_or_else(|| "activity failed".to_owned()))
        } else {
            Ok(body.result)
        };
        let (ns, queue) = {
            let mut store = self.store();
            store.finish_activity_task(task_id, outcome)?;
            store.task_queue_of(task_id)?
        };
        self.signals
            .signal(&ns, &queue, TaskKind::Workflow.as_str())?;
        Ok(json!({ "outcome": if failed { "failed" } else { "completed" } }))
    }

    /// The last poll observed on a queue.
    pub fn poll_diagnostic(&self, namespace: &str, task_queue: &str) -> Result<Value, ApiError> {
        let last = self.diagnostics.last(namespace, task_queue)?;
        Ok(json!({ "namespace": namespace, "task_queue": task_queue, "last_poll": last }))
    }
}

fn replayed(bytes: &[u8]) -> Value {
    let mut answer: Value = serde_json::from_slice(bytes).unwrap_or(json!({ "task": null }));
    if let Value::Object(map) = &mut answer {
        map.insert("replayed".into(), true.into());
    }
    answer
}
