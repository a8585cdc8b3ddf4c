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
use crate::server::task_answer::PollAnswer;
use crate::server::wire::validation;
use crate::server::wire::{self, Checks, QueryBody, QueryTaskReport};
use crate::server::worker::{PollKind, PollSpec, PollStep, PollWait};
use crate::server::{ApiError, Engine};
use crate::store::RunId;
use crate::wait_slots::WaitSlot;

/// The channel query pollers wait on.
pub(crate) const QUERY_CHANNEL: &str = "query";

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
        // An answer recorded since the caller's last look is still its answer.
        let answered = answered.or(self.query_tasks.finish(&pending.task)?);
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

    /// A query-task long poll's first step. A registered worker's poll
    /// refreshes its query-poller marker. Polls are idempotent by
    /// `poll_request_id`: a repeat replays the first one's answer (the task
    /// it leased, while the lease is active) and never leases another
    /// task; a worker's newer query poll on the queue ends its older one
    /// still waiting ([`QueryPolls::pass`]).
    fn begin_query_poll(&self, poll: &PollSpec) -> Result<PollStep, ApiError> {
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        let idle_before = self.config.worker_sweep.idle_before_ms(crate::unix_ms());
        let known = self.read(|s| s.worker_registered(ns, &poll.worker_id, idle_before))?;
        if known {
            self.query_tasks
                .mark_poller(ns, queue, &poll.worker_id, poll.requested_wait)?;
        }
        // Past the unknown callers' budget a poll is served without keys,
        // as workflow polls are; the broker's leased-task index still
        // replays this request's lease.
        let keyed = known || self.unknown_polls.try_admit();
        if keyed {
            match self.query_polls.polls().begin(ns, queue, id, poll.wait)? {
                PollClaim::Replay(_) => {
                    return self
                        .replay_query_poll(poll)
                        .map(|answer| PollStep::Answered(answer.into()))
                }
                PollClaim::InFlight => {
                    let slot = self.query_wait_slot(poll)?;
                    let deadline = Instant::now() + poll.wait + self.config.poll_ttls.pending_slack;
                    return Ok(PollStep::InFlight { deadline, slot });
                }
                PollClaim::Fresh => {
                    self.query_polls
                        .make_current(ns, queue, &poll.worker_id, id, poll.wait)?;
                }
            }
        }
        // Subscribed before the first look (see the worker polls).
        let wake =
            self.poll_wakes
                .subscribe(crate::polling::wake_channel(ns, queue, QUERY_CHANNEL));
        let first = match self.claim_query(poll) {
            Ok(Some(task)) => Ok(Some(task)),
            Ok(None) if poll.wait.is_zero() || !self.polling_cache_available() => Ok(None),
            Ok(None) => match self.query_wait_slot(poll) {
                Ok(slot) => {
                    return Ok(PollStep::Waiting(PollWait {
                        wake,
                        channel: QUERY_CHANNEL,
                        deadline: Instant::now() + poll.wait,
                        keyed,
                        _slot: slot,
                    }))
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        self.end_query_poll(poll, keyed, first)
            .map(|answer| PollStep::Answered(answer.into()))
    }

    /// A held slot of the query wait pool, or the 429 naming the cap.
    fn query_wait_slot(&self, poll: &PollSpec) -> Result<WaitSlot, ApiError> {
        match self.query_waits.admit(&poll.namespace)? {
            Ok(slot) => Ok(slot),
            Err(refusal) => Err(ApiError::WaitCapacity {
                refusal,
                task_kind: "query_task",
                task_queue: poll.task_queue.clone(),
            }),
        }
    }

    /// Claims a query task for the poll now, if one waits.
    fn claim_query(&self, poll: &PollSpec) -> Result<Option<QueryTask>, ApiError> {
        Ok(self
            .query_tasks
            .claim(
                &poll.namespace,
                &poll.task_queue,
                &poll.worker_id,
                &poll.poll_request_id,
            )?
            .map(|c| c.task))
    }

    /// A query-task poll's last step: its replay marker (a fixed-size
    /// marker, never the task; a failed poll drops its pending key so a
    /// retry runs afresh) and its answer.
    fn end_query_poll(
        &self,
        poll: &PollSpec,
        keyed: bool,
        found: Result<Option<QueryTask>, ApiError>,
    ) -> Result<Value, ApiError> {
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        if !keyed {
            return self.answer_query_poll(found?, false);
        }
        let polls = self.query_polls.polls();
        match found {
            Ok(task) => {
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

/// Query-task long polls, driven as workflow and activity polls are
/// (`server/http/worker_tasks.rs`): their claims on the blocking pool,
/// their waits on the async runtime.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueryPolls;

impl PollKind for QueryPolls {
    type Task = QueryTask;

    fn begin(self, engine: &Engine, poll: &PollSpec) -> Result<PollStep, ApiError> {
        engine.begin_query_poll(poll)
    }

    /// Ends the wait when a newer poll of the same worker and queue
    /// superseded this one (a keyed poll), else claims a task.
    fn pass(
        self,
        engine: &Engine,
        poll: &PollSpec,
        keyed: bool,
    ) -> Result<ControlFlow<Option<QueryTask>>, ApiError> {
        if keyed
            && engine.query_polls.superseded(
                &poll.namespace,
                &poll.task_queue,
                &poll.worker_id,
                &poll.poll_request_id,
            )?
        {
            return Ok(ControlFlow::Break(None));
        }
        Ok(match engine.claim_query(poll)? {
            Some(task) => ControlFlow::Break(Some(task)),
            None => ControlFlow::Continue(()),
        })
    }

    fn end(
        self,
        engine: &Engine,
        poll: &PollSpec,
        keyed: bool,
        found: Result<Option<QueryTask>, ApiError>,
    ) -> Result<PollAnswer, ApiError> {
        engine
            .end_query_poll(poll, keyed, found)
            .map(PollAnswer::from)
    }

    fn replay(self, engine: &Engine, poll: &PollSpec) -> Result<Option<PollAnswer>, ApiError> {
        let answered = engine.query_polls.polls().result(
            &poll.namespace,
            &poll.task_queue,
            &poll.poll_request_id,
        )?;
        match answered {
            Some(_) => engine.replay_query_poll(poll).map(|a| Some(a.into())),
            None => Ok(None),
        }
    }

    fn unanswered(self, _engine: &Engine, _poll: &PollSpec) -> Result<PollAnswer, ApiError> {
        Ok(json!({ "task": null, "poll_status": "timeout", "replayed": false }).into())
    }

    /// The broker does not say whether more wait: the others look too.
    fn more_ready(_task: &QueryTask) -> bool {
        true
    }
}
