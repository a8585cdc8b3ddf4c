//! Worker-routed queries: the control-plane query and the worker's poll,
//! complete and fail of query tasks.
//!
//! A control-plane query (`POST …/query/{name}`) queues a query task with
//! the cache broker ([`crate::query_tasks`]), wakes the run's queue on the
//! `query` channel and waits for the answer until the query timeout; a
//! worker's poll leases the task with the run's full history, replays the
//! workflow and answers. Query polls hold a wait slot of their own pool
//! (`query`), so waiting query pollers never crowd out workflow polls.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::poll_requests::PollClaim;
use crate::query_tasks::{BrokerError, NewQuery, QueryStatus, QueryTask};
use crate::server::wire::{self, Checks, QueryBody, QueryTaskReport};
use crate::server::worker::{validation, PollSpec};
use crate::server::{ApiError, Engine};
use crate::store::RunId;

/// The channel query pollers wait on.
pub(crate) const QUERY_CHANNEL: &str = "query";
const WAKE_CHECK: Duration = Duration::from_millis(25);

/// A query queued for a worker, awaiting its answer.
pub struct PendingQuery {
    task: QueryTask,
    deadline: Instant,
    workflow_id: String,
    run: RunId,
    name: String,
    /// The namespace's concurrency slot, held until the query ends.
    _slot: Option<crate::admission::NamespaceSlot>,
    /// This node's query-wait slot, held until the query ends.
    _wait: crate::waiters::WaitPermit,
}

impl PendingQuery {
    /// The queued task's id (what its answer wakes).
    pub fn task_id(&self) -> &str {
        &self.task.id
    }

    /// When the query stops waiting.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl Engine {
    /// `POST …/query/{name}`, first half: validates, admits and queues the
    /// query task for a worker of the run's task queue and wakes its query
    /// pollers. The HTTP layer then awaits the answer without a thread
    /// ([`Engine::look_query`]) and ends it with [`Engine::finish_query`].
    pub fn begin_query(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        name: &str,
        body: QueryBody,
    ) -> Result<PendingQuery, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id)
            .operation_name("query_name", name);
        v.finish()?;
        // The wait is admitted before anything is queued: a refused query
        // leaves no task behind.
        let wait = self
            .waiters
            .admit(crate::waiters::WaitKind::Query)
            .map_err(ApiError::CallWaitCapacity)?;
        let slot = self.admit_namespace(namespace)?;
        let run = self.target(namespace, workflow_id, run_id)?;
        let head = self.read(|s| s.run(run))?;
        let task = self.query_tasks.enqueue(NewQuery {
            namespace: namespace.to_owned(),
            task_queue: head.task_queue.clone(),
            run_id: run.0,
            workflow_id: workflow_id.to_owned(),
            workflow_type: head.workflow_type,
            query_name: name.to_owned(),
            arguments: body.input,
        })?;
        self.wake(namespace, &head.task_queue, QUERY_CHANNEL);
        let left = Duration::from_millis(
            u64::try_from(task.deadline_ms.saturating_sub(crate::unix_ms())).unwrap_or(0),
        );
        Ok(PendingQuery {
            task,
            deadline: Instant::now() + left,
            _wait: wait,
            workflow_id: workflow_id.to_owned(),
            run,
            name: name.to_owned(),
            _slot: slot,
        })
    }

    /// One look at a queued query: its answered record, once a worker answered.
    pub fn look_query(&self, task_id: &str) -> Result<Option<QueryTask>, ApiError> {
        Ok(self
            .query_tasks
            .task(task_id)?
            .filter(|t| matches!(t.status, QueryStatus::Completed | QueryStatus::Failed)))
    }

    /// Ends a query: removes its task whatever happened, then answers with
    /// the worker's result, its rejection, or the timeout (`answered` none).
    pub fn finish_query(
        &self,
        pending: PendingQuery,
        answered: Option<QueryTask>,
    ) -> Result<Value, ApiError> {
        self.query_tasks.finish(&pending.task)?;
        let Some(QueryTask {
            status,
            answer: Some(document),
            ..
        }) = answered
        else {
            return Err(ApiError::QueryTimeout(
                self.query_tasks.settings().timeout().as_millis(),
            ));
        };
        if status == QueryStatus::Failed {
            let message = document
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the worker rejected the query")
                .to_owned();
            return Err(ApiError::QueryRejected(message, document));
        }
        Ok(json!({
            "workflow_id": pending.workflow_id, "run_id": wire::run_id(pending.run),
            "query_name": pending.name,
            "result": document.get("result").cloned().unwrap_or(Value::Null),
            "result_envelope": document.get("result_envelope").cloned().unwrap_or(Value::Null),
        }))
    }

    /// Long-polls a query task. A registered worker's poll refreshes its
    /// query-poller marker. Polls are idempotent by `poll_request_id`: a
    /// repeat replays the first one's answer (the task it leased, while
    /// the lease is active) and never leases another task; a worker's newer
    /// query poll on the queue ends its older one still waiting.
    pub(crate) fn poll_query(&self, poll: PollSpec) -> Result<Value, ApiError> {
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        let idle_before = self.config.worker_sweep.idle_before_ms(crate::unix_ms());
        let known = self.read(|s| s.worker_registered(ns, &poll.worker_id, idle_before))?;
        if known {
            self.query_tasks
                .mark_poller(ns, queue, &poll.worker_id, poll.requested_wait)?;
        } else if !self.unknown_polls.try_admit() {
            // Served without keys, as workflow polls are; the broker's
            // leased-task index still replays this request's lease.
            return self.answer_query_poll(self.run_query_poll(&poll, false)?, false);
        }
        let polls = self.query_polls.polls();
        match polls.begin(ns, queue, id, poll.wait)? {
            PollClaim::Replay(_) => self.replay_query_poll(&poll),
            PollClaim::InFlight => {
                let _slot = match self.query_waits.admit(ns)? {
                    Ok(slot) => slot,
                    Err(refusal) => {
                        return Err(ApiError::WaitCapacity {
                            refusal,
                            task_kind: "query_task",
                            task_queue: queue.clone(),
                        })
                    }
                };
                poll.end_turn();
                let deadline = Instant::now() + poll.wait + self.config.poll_ttls.pending_slack;
                while polls.result(ns, queue, id)?.is_none() {
                    if Instant::now() >= deadline || self.poll_over(&poll) {
                        return Ok(
                            json!({ "task": null, "poll_status": "timeout", "replayed": false }),
                        );
                    }
                    std::thread::sleep(WAKE_CHECK);
                }
                self.replay_query_poll(&poll)
            }
            PollClaim::Fresh => {
                self.query_polls
                    .make_current(ns, queue, &poll.worker_id, id, poll.wait)?;
                match self.run_query_poll(&poll, true) {
                    Ok(task) => {
                        // The replay key holds a fixed-size marker, never the task.
                        polls.finish(
                            ns,
                            queue,
                            id,
                            if task.is_some() { b"leased" } else { b"empty" },
                        )?;
                        self.answer_query_poll(task, false)
                    }
                    Err(e) => {
                        let _ = polls.abandon(ns, queue, id);
                        Err(e)
                    }
                }
            }
        }
    }

    /// A repeat of an answered poll: the task its request leased, while
    /// that lease is active, else nothing.
    fn replay_query_poll(&self, poll: &PollSpec) -> Result<Value, ApiError> {
        let task = self.query_tasks.replay(
            &poll.namespace,
            &poll.task_queue,
            &poll.worker_id,
            &poll.poll_request_id,
        )?;
        self.answer_query_poll(task.map(|c| c.task), true)
    }

    fn answer_query_poll(
        &self,
        task: Option<QueryTask>,
        replayed: bool,
    ) -> Result<Value, ApiError> {
        let mut answer = match task {
            Some(task) => self.render_query(task)?,
            None => json!({ "task": null, "poll_status": "timeout" }),
        };
        if replayed {
            answer["replayed"] = true.into();
        }
        Ok(answer)
    }

    /// Claims a task now, or waits in the query wait-slot pool for one
    /// until the poll's wait ends, it is abandoned, or (`tracked`) a newer
    /// poll of the same worker and queue supersedes it.
    fn run_query_poll(
        &self,
        poll: &PollSpec,
        tracked: bool,
    ) -> Result<Option<QueryTask>, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        let claim = || {
            self.query_tasks
                .claim(ns, queue, &poll.worker_id, &poll.poll_request_id)
                .map(|c| c.map(|c| c.task))
        };
        // Subscribed before the first look (see the worker polls).
        let mut wake =
            self.poll_wakes
                .subscribe(crate::polling::wake_channel(ns, queue, QUERY_CHANNEL));
        if let Some(task) = claim()? {
            return Ok(Some(task));
        }
        if poll.wait.is_zero() || !self.polling_cache_available() {
            return Ok(None);
        }
        let _slot = match self.query_waits.admit(ns)? {
            Ok(slot) => slot,
            Err(refusal) => {
                return Err(ApiError::WaitCapacity {
                    refusal,
                    task_kind: "query_task",
                    task_queue: queue.clone(),
                })
            }
        };
        let deadline = Instant::now() + poll.wait;
        self.wait_for_work(
            &mut wake,
            (ns, queue, QUERY_CHANNEL),
            deadline,
            poll,
            || {
                if tracked
                    && self.query_polls.superseded(
                        ns,
                        queue,
                        &poll.worker_id,
                        &poll.poll_request_id,
                    )?
                {
                    return Ok(ControlFlow::Break(None));
                }
                Ok(match claim()? {
                    Some(task) => ControlFlow::Break(Some(task)),
                    None => ControlFlow::Continue(()),
                })
            },
        )
    }

    fn render_query(&self, task: QueryTask) -> Result<Value, ApiError> {
        let run = RunId(task.query.run_id);
        let events = self.read(|s| s.history(run))?;
        let workflow_arguments = events
            .first()
            .and_then(|e| e.payload.get("arguments").cloned())
            .unwrap_or(Value::Null);
        Ok(json!({
            "task": {
                "query_task_id": task.id,
                "query_task_attempt": task.attempt,
                "task_kind": "query",
                "lease_owner": task.lease_owner,
                "lease_expires_at": task.lease_expires_at_ms.map(wire::timestamp),
                "namespace": task.query.namespace,
                "task_queue": task.query.task_queue,
                "workflow_id": task.query.workflow_id,
                "run_id": wire::run_id(run),
                "workflow_type": task.query.workflow_type,
                "query_name": task.query.query_name,
                "payload_codec": wire::codec(&workflow_arguments),
                "workflow_arguments": workflow_arguments,
                "query_arguments": task.query.arguments,
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
        if task_id.trim().is_empty() || task_id.len() > 64 {
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
        let document = if failed {
            body.failure.unwrap_or(Value::Null)
        } else {
            json!({ "result": body.result, "result_envelope": body.result_envelope })
        };
        self.query_tasks.answer(
            task_id,
            &body.lease_owner,
            body.query_task_attempt.unsigned_abs(),
            failed,
            document,
        )?;
        // The query waiting on this node answers now; one on another node
        // through the relay (or at its next look).
        let key = crate::waiters::WaitKey::QueryTask(task_id.to_owned());
        self.waiters.wake(&key);
        if let Err(e) = self.poll_wakes.relay_wait(&key) {
            self.post_commit_failed("wake_relay", &e);
        }
        Ok(json!({
            "query_task_id": task_id,
            "outcome": if failed { "failed" } else { "completed" },
        }))
    }
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::Cache(e) => ApiError::Cache(e),
            other => ApiError::QueryTask(other),
        }
    }
}
