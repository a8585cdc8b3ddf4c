//! The worker plane: heartbeats, idempotent long polls, completions.
//!
//! A poll runs one pass (recovery scans, then a lease under the queue's
//! admission) and, if that found nothing, holds a wait slot and re-runs the
//! pass whenever the queue's wake signal changes, until its wait ends. Its
//! answer is stored under its poll request id, so a retry of the same id
//! replays the answer and can never lease a second task.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
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
        let sweep = self.config.worker_sweep;
        let idle_before = sweep.idle_before_ms(crate::unix_ms());
        let (ns, worker, queue) = (
            body.namespace.clone(),
            body.worker_id.clone(),
            body.task_queue.clone(),
        );
        // The registration and the bounded idle sweep commit together.
        self.write(move |store| {
            store.record_worker(&ns, &worker, &queue)?;
            store.prune_idle_workers(idle_before, sweep.idle_worker_prune_scan_limit)
        })?;
        let ns = body.namespace.clone();
        let pruned = self
            .retention
            .on_heartbeat(&body.namespace, |cutoff| {
                self.write(move |store| store.prune_one_expired_run(&ns, cutoff))
            })
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
        // Cache admission per caller: a registered worker's polls keep their
        // keys; an unknown caller's only within the node's small budget.
        let idle_before = self.config.worker_sweep.idle_before_ms(crate::unix_ms());
        let known = self.read(|s| s.worker_registered(ns, &poll.worker_id, idle_before))?;
        if !known && !self.unknown_polls.try_admit() {
            // Served without keys; a repeat of this id still finds the
            // task it leased through the durable binding in the store.
            return Ok(json!({ "task": self.run_poll(kind, &poll, wait)? }));
        }
        let polls = self.polls(kind);
        let answer = match polls.begin(ns, queue, id, wait)? {
            PollClaim::Replay(bytes) => self.replayed(kind, &poll, &bytes)?,
            PollClaim::InFlight => {
                // A repeat of a poll still running waits like a poll: it
                // holds a wait slot, so repeats cannot pile up threads.
                let _slot = match self.wait_pool(kind).admit(ns)? {
                    Ok(slot) => slot,
                    Err(refusal) => return Err(ApiError::WaitCapacity(refusal)),
                };
                self.await_in_flight(kind, &poll, wait)?
            }
            PollClaim::Fresh => match self.run_poll(kind, &poll, wait) {
                Ok(task) => {
                    // The replay key keeps a reference, never the task: its
                    // size is fixed however large the history is.
                    let reference = ReplayRef {
                        task_id: task.as_ref().map(|t| t.task_id),
                    };
                    let bytes = serde_json::to_vec(&reference).unwrap_or_default();
                    polls.finish(ns, queue, id, &bytes)?;
                    json!({ "task": task })
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
                return self.replayed(kind, poll, &bytes);
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
            self.read(|s| s.leased_by_poll_request(kind, ns, queue, &poll.poll_request_id))?
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
        self.recover(kind, ns, queue)?;
        let Some(_lock) = self
            .queues
            .lock(ns, queue, kind.as_str(), Duration::from_millis(200))?
        else {
            return Ok(None);
        };
        if !self.queues.has_budget(ns, queue, kind.as_str())? {
            return Ok(None);
        }
        let (ns_owned, queue_owned) = (ns.clone(), queue.clone());
        let (owner, poll_id) = (poll.worker_id.clone(), poll.poll_request_id.clone());
        let lease = self.config.task_lease;
        let task = self
            .write(move |s| s.lease_task(kind, &ns_owned, &queue_owned, &owner, &poll_id, lease))?;
        if task.is_some() {
            self.queues.record_dispatch(ns, queue, kind.as_str())?;
        }
        Ok(task)
    }

    /// The pass's capped recovery scans: for workflow polls, due timers of
    /// the polled queue; for both kinds, expired leases of that kind. A
    /// lease another node is already recovering is skipped.
    fn recover(&self, kind: TaskKind, namespace: &str, task_queue: &str) -> Result<(), ApiError> {
        let limits = self.config.poller;
        let scan_limit = match kind {
            TaskKind::Workflow => {
                if self.read(|s| s.has_due_timers(namespace, task_queue))? {
                    let (ns, queue) = (namespace.to_owned(), task_queue.to_owned());
                    let limit = limits.due_timer_recovery_scan_limit;
                    self.write(move |s| s.fire_due_timers(&ns, &queue, limit))?;
                }
                limits.expired_workflow_task_recovery_scan_limit
            }
            TaskKind::Activity => {
                self.config
                    .activity_poller
                    .expired_activity_task_recovery_scan_limit
            }
        };
        let expired = self.read(|s| s.expired_leases(kind, scan_limit))?;
        for task in expired {
            if !limits.claim_recovery(
                self.cache.as_ref(),
                task,
                self.config.recovery_suppression,
            )? {
                continue;
            }
            let recovered = self.write(move |s| {
                Ok(if s.recover_expired_lease(task)? {
                    Some(s.task_queue_of(task)?)
                } else {
                    None
                })
            })?;
            if let Some((ns, queue)) = recovered {
                self.signals.signal(&ns, &queue, kind.as_str())?;
            }
        }
        Ok(())
    }

    /// A worker's heartbeat on a leased task: extends its lease by the
    /// configured task lease from now.
    pub fn heartbeat_task(&self, task_id: i64) -> Result<Value, ApiError> {
        let lease = self.config.task_lease;
        let expires = self.write(move |s| s.extend_lease(task_id, lease))?;
        Ok(json!({ "outcome": "extended", "lease_expires_at_ms": expires }))
    }

    /// A page of a workflow task's history, from sequence `after` on.
    pub fn workflow_task_history(&self, task_id: i64, after: u64) -> Result<Value, ApiError> {
        let history = self.read(|s| s.task_history_page(task_id, after))?;
        serde_json::to_value(history).map_err(|e| ApiError::Internal(e.to_string()))
    }

    /// The answer replayed from a replay key: the task it names, read
    /// again from the store while it is still leased to this poll.
    fn replayed(&self, kind: TaskKind, poll: &Poll, bytes: &[u8]) -> Result<Value, ApiError> {
        let reference: ReplayRef =
            serde_json::from_slice(bytes).unwrap_or(ReplayRef { task_id: None });
        let task = match reference.task_id {
            None => None,
            Some(_) => self.read(|s| {
                s.leased_by_poll_request(
                    kind,
                    &poll.namespace,
                    &poll.task_queue,
                    &poll.poll_request_id,
                )
            })?,
        };
        Ok(json!({ "task": task, "replayed": true }))
    }

    /// Completes a leased workflow task.
    pub fn complete_workflow_task(
        &self,
        task_id: i64,
        body: WorkflowCompletion,
    ) -> Result<Value, ApiError> {
        let (result, run) = self.write(move |store| {
            let run = store.task_queue_of(task_id)?;
            let result = store.complete_workflow_task(task_id, &body.commands, body.decision)?;
            Ok((result, run))
        })?;
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
        let (ns, queue) = self.write(move |store| {
            store.fail_workflow_task(task_id)?;
            store.task_queue_of(task_id)
        })?;
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
        let (ns, queue) = self.write(move |store| {
            store.finish_activity_task(task_id, outcome)?;
            store.task_queue_of(task_id)
        })?;
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

/// What a replay key holds: which task the poll leased, if any (a few
/// bytes, whatever the task's size).
#[derive(Debug, Serialize, Deserialize)]
struct ReplayRef {
    task_id: Option<i64>,
}
