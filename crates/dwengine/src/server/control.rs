//! The control plane's operations: start, describe, list, history, signal,
//! update, query, cancel and terminate.
//!
//! Each operation validates at the request boundary first (nothing is
//! written for an invalid request, and every problem is named in one 422),
//! then passes the namespace's request admission, then writes through the
//! store, and finally wakes the pollers of the queue it gave work to.
//! Payloads are passed through as opaque envelopes.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::admission::{NamespaceAdmit, NamespaceSlot};
use crate::cache::CacheOp;
use crate::durable_state::{DurableRejection, DurableResource, NamespaceDurableStateQuota};
use crate::polling::LongPollSignalStore;
use crate::server::description::{render_description, Description};
use crate::server::error::finish_with;
use crate::server::fast_paths::StartSteps;
use crate::server::schedules::ScheduleStart;
use crate::server::wire::{
    self, Checks, HistoryQuery, ListQuery, SignalBody, StartAnswer, StartWorkflow, StopBody,
    UpdateBody, MAX_DURATION_SECONDS,
};
use crate::server::{ApiError, Engine};
use crate::store::{
    Admission, ArchiveMark, ArchivedFilter, Error as StoreError, RunDescription, RunId, RunStatus,
    SignalRequest, StartRun, Store, TaskKind,
};
use dwpolicy::boundary::RequestLimits;

/// What a describe reads in one snapshot: the run, its description, its
/// input and terminal record, its archive mark.
type DescribeRead = (
    RunId,
    RunDescription,
    Option<(Value, Option<Value>)>,
    Option<ArchiveMark>,
);

/// An update's first answer: final (`wait_for=accepted`), or to await.
pub enum UpdateStep {
    /// The answer.
    Answered(Value),
    /// Accepted; its outcome is awaited.
    Waiting(PendingUpdate),
    /// Waiting for a worker's validator before it is accepted.
    Validating(crate::server::update_validation::contract::PendingValidation),
}

/// An accepted update whose outcome a `wait_for=completed` call awaits.
pub struct PendingUpdate {
    out: Value,
    run: RunId,
    update: i64,
    deadline: Instant,
    _wait: crate::waiters::WaitPermit,
}

/// What one look at a waiting update needs.
#[derive(Debug, Clone)]
pub struct UpdateLook {
    out: Value,
    run: RunId,
    update: i64,
}

impl PendingUpdate {
    /// An update accepted by a worker's validator whose `wait_for =
    /// completed` caller now awaits its outcome.
    pub(crate) fn after_validation(
        out: Value,
        run: RunId,
        update: i64,
        deadline: Instant,
        wait: crate::waiters::WaitPermit,
    ) -> PendingUpdate {
        PendingUpdate {
            out,
            run,
            update,
            deadline,
            _wait: wait,
        }
    }

    /// The run whose changes wake the wait.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// When the wait ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// What a look needs.
    pub fn look(&self) -> UpdateLook {
        UpdateLook {
            out: self.out.clone(),
            run: self.run,
            update: self.update,
        }
    }

    /// The answer so far: accepted, with its update id.
    pub fn accepted(&self) -> &Value {
        &self.out
    }

    /// The answer when the wait runs out: accepted, `wait_timed_out`.
    pub fn timed_out(self) -> Value {
        let mut out = self.out;
        out["wait_timed_out"] = true.into();
        out
    }
}

/// What a start found or made.
enum Begun {
    /// A new run.
    Started(RunId),
    /// The run an earlier attempt with the same request id started.
    Retried(RunId),
    /// The id's run that is still open, with its status and workflow type.
    Open(RunId, RunStatus, String),
    /// The namespace's durable-state quota refused a new run.
    Refused(DurableRejection),
    /// A schedule fire's gate did not pass: nothing was written.
    Gated,
}

/// A checked start: its transaction's inputs and its answer's.
struct StartPlan {
    tx: StartTransaction,
    /// It decides on nothing shared and may commit in a start batch.
    side_by_side: bool,
    reply: StartReply,
}

/// What a start's transaction writes ([`begin_start`]).
struct StartTransaction {
    start: StartRun,
    request_id: Option<String>,
    quota: Option<crate::durable_state::DurableLimits>,
    timeouts: (Option<u64>, Option<u64>),
    /// The build the start names: its run is pinned to it (else to the
    /// queue's promoted cohort, if any).
    pinned_build: Option<String>,
}

/// What a start's answer names besides its run.
struct StartReply {
    workflow_id: String,
    workflow_type: String,
    task_queue: String,
    codec: String,
    use_existing: bool,
}

impl StartTransaction {
    /// The start batch's key (the start's series) and its transaction,
    /// which may run twice (again as an ordinary write).
    fn side_by_side(
        self,
    ) -> (
        String,
        impl Fn(&Store) -> Result<Begun, StoreError> + Clone + Send + 'static,
    ) {
        let StartTransaction {
            start,
            request_id,
            quota,
            timeouts,
            pinned_build,
        } = self;
        let key = format!(
            "{}\u{0}{}\u{0}{}",
            start.namespace, start.task_queue, start.workflow_type
        );
        let transition = move |s: &Store| {
            // Another transaction writing this workflow id (a start on
            // another node) sends this one to the ordinary writer.
            if !s.lock_workflow_id(&start.namespace, &start.workflow_id)? {
                return Err(StoreError::NeedsWriteLock);
            }
            let begun = begin_start(
                s,
                start.clone(),
                request_id.as_deref(),
                quota,
                None,
                timeouts,
            )?;
            pin_started(s, &begun, &start, pinned_build.as_deref())?;
            Ok(begun)
        };
        (key, transition)
    }

    /// The start's transaction as an ordinary write (with a schedule
    /// fire's gate and record).
    fn ordinary(
        self,
        schedule: Option<ScheduleStart>,
    ) -> impl FnOnce(&Store) -> Result<Begun, StoreError> + Send + 'static {
        let StartTransaction {
            start,
            request_id,
            quota,
            timeouts,
            pinned_build,
        } = self;
        move |s: &Store| {
            let (namespace, queue) = (start.namespace.clone(), start.task_queue.clone());
            let begun = begin_start(
                s,
                start,
                request_id.as_deref(),
                quota,
                schedule.as_ref(),
                timeouts,
            )?;
            if let Begun::Started(run) = &begun {
                s.pin_started_run(*run, &namespace, &queue, pinned_build.as_deref())?;
            }
            Ok(begun)
        }
    }
}

/// What a new run adds to its namespace's durable state.
pub(crate) const START_RESOURCES: [DurableResource; 2] = [
    DurableResource::WorkflowRuns,
    DurableResource::OpenWorkflowRuns,
];

/// Signal or update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// A signal.
    Signal,
    /// An update.
    Update,
}

impl Engine {
    pub(crate) fn admit_namespace(
        &self,
        namespace: &str,
    ) -> Result<Option<NamespaceSlot>, ApiError> {
        match self.namespaces.admit(namespace)? {
            NamespaceAdmit::Admitted(slot) => Ok(slot),
            NamespaceAdmit::Rejected(reason) => Err(ApiError::NamespaceLimited(reason)),
        }
    }

    /// Wakes the pollers of `channel` on the queue after a commit gave it
    /// work: this node's at once, other nodes' through the relay, and the
    /// channel's signal key for a poll that missed the relay. It cannot
    /// fail the request: a cache that cannot take the wake is logged and
    /// counted, and the pollers find the work at their next idle recheck.
    pub(crate) fn wake(&self, namespace: &str, task_queue: &str, channel: &str) {
        // A queue driver that carries wakes (SQS) delivers this one through
        // its queue: the node that receives it calls `signal_wake`.
        if !self.queue.dispatch(namespace, task_queue, channel) {
            self.signal_wake(namespace, task_queue, channel);
        }
    }

    /// Wakes the pollers of `channel` on the queue now: this node's at
    /// once, other nodes' through the relay, and the channel's signal key
    /// for a poll that missed the relay (written only by a node with a
    /// relay: only a poll on such a node reads it).
    pub(crate) fn signal_wake(&self, namespace: &str, task_queue: &str, channel: &str) {
        let wake = crate::polling::wake_channel_key(namespace, task_queue, channel);
        let wake = wake.as_str();
        // One poll looks first (of this node when one waits here, else of
        // the others), and wakes the others if it took nothing or saw
        // more work: each woken poll's look is a claim transaction (on
        // SQLite on the one writer, on PostgreSQL one holding the write
        // lock shared and a session), and all of them looking for one task
        // cost more than the task (docs/performance.md, session 26).
        // A poll on a node alone never reads the signal key (the board
        // wakes it), so a lone node does not write one: the cache's insert
        // was an eighth of the HTTP threads' CPU per start
        // (docs/performance.md, "A start's round trip").
        if !self.poll_wakes.relayed() {
            if let Err(e) = self.poll_wakes.wake_one(wake) {
                self.post_commit_failed("wake_relay", &e);
            }
            return;
        }
        // On a node with peers the relay message and the signal key go in
        // one round trip (docs/performance.md, session 18).
        let (key, version) = LongPollSignalStore::entry(namespace, task_queue, channel);
        let signal = CacheOp::Put {
            key: &key,
            value: &version,
            ttl: self.signals.ttl(),
        };
        if let Err(e) = self.poll_wakes.wake_one_and_signal(wake, signal) {
            self.post_commit_failed("wake_relay", &e);
        }
    }

    /// The wakes after a commit that gave the queues of `wakes` (queue,
    /// channel) work and moved `run`: as [`Engine::wake`] for each and
    /// [`Engine::wake_run`], but on a node with peers every relay message
    /// and signal key in one round trip (a workflow task's completion that
    /// scheduled an activity cost two).
    pub(crate) fn wake_with_run(&self, namespace: &str, wakes: &[(&str, &str)], run: RunId) {
        if !self.poll_wakes.relayed() {
            for (queue, channel) in wakes {
                self.wake(namespace, queue, channel);
            }
            self.wake_run(run);
            return;
        }
        // A queue driver that carries wakes (SQS) delivers those itself.
        let mine: Vec<_> = wakes
            .iter()
            .filter(|(queue, channel)| !self.queue.dispatch(namespace, queue, channel))
            .map(|(queue, channel)| {
                let wake = crate::polling::wake_channel_key(namespace, queue, channel);
                (wake, LongPollSignalStore::entry(namespace, queue, channel))
            })
            .collect();
        let ttl = self.signals.ttl();
        let channels: Vec<_> = mine
            .iter()
            .map(|(wake, (key, version))| {
                let signal = CacheOp::Put {
                    key,
                    value: version,
                    ttl,
                };
                (wake.as_str(), Some(signal))
            })
            .collect();
        let key = crate::waiters::WaitKey::Run(run.0);
        self.waiters.wake(&key);
        if let Err(e) = self.poll_wakes.wake_together(&channels, &[key]) {
            self.post_commit_failed("wake_relay", &e);
        }
    }

    /// Wakes the waits on `run` (updates, service calls): this node's at
    /// once, other nodes' through the relay (a lost message: they look
    /// again within their poll fallback).
    pub(crate) fn wake_run(&self, run: RunId) {
        let key = crate::waiters::WaitKey::Run(run.0);
        self.waiters.wake(&key);
        if let Err(e) = self.poll_wakes.relay_wait(&key) {
            self.post_commit_failed("wake_relay", &e);
        }
    }

    /// The run an operation targets: `run_id` when given (it must belong to
    /// the workflow), else the workflow's newest run.
    pub(crate) fn target(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
    ) -> Result<RunId, ApiError> {
        let not_found = || ApiError::WorkflowNotFound(workflow_id.to_owned());
        match run_id {
            None => self
                .read(|s| s.find_run(namespace, workflow_id))?
                .ok_or_else(not_found),
            Some(text) => {
                let run = wire::parse_run_id(text).ok_or_else(not_found)?;
                match self.read(|s| s.run(run)) {
                    Ok(r) if r.namespace == namespace && r.workflow_id == workflow_id => Ok(run),
                    Ok(_) | Err(StoreError::RunNotFound(_)) => Err(not_found()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Starts a run and queues its first workflow task: `(201, started)`, or
    /// `(200, existing)` under `duplicate_policy = use-existing`.
    pub fn start_workflow(
        &self,
        namespace: &str,
        body: StartWorkflow,
    ) -> Result<(u16, Value), ApiError> {
        self.start_workflow_as(namespace, body, None)?
            .ok_or_else(|| ApiError::Internal("an ungated start was gated".into()))
    }

    /// A start, and for a schedule fire its gate and record, which commit
    /// in the start's transaction; `None` when the gate did not pass.
    pub(crate) fn start_workflow_as(
        &self,
        namespace: &str,
        body: StartWorkflow,
        schedule: Option<ScheduleStart>,
    ) -> Result<Option<(u16, Value)>, ApiError> {
        Ok(self
            .start_answer(namespace, body, schedule)?
            .map(|(status, answer)| (status, answer.into_value())))
    }

    /// [`Engine::start_workflow_as`] with its answer unserialized (the
    /// HTTP route writes it straight to the body).
    pub(crate) fn start_answer(
        &self,
        namespace: &str,
        body: StartWorkflow,
        schedule: Option<ScheduleStart>,
    ) -> Result<Option<(u16, StartAnswer)>, ApiError> {
        // The steps that may block, named once for both paths.
        let steps = self.start_steps(namespace, &body);
        let plan = self.plan_start(namespace, body, schedule.is_some(), steps, |search| {
            if steps.registered_attributes {
                self.unregistered_search_attributes(namespace, search)
            } else {
                Ok(Vec::new())
            }
        })?;
        let _slot = if steps.admission {
            self.admit_namespace(namespace)?
        } else {
            None
        };
        let started = if plan.side_by_side {
            let (key, start) = plan.tx.side_by_side();
            self.write_start(key, start)?
        } else {
            self.write(plan.tx.ordinary(schedule))?
        };
        self.finish_start(namespace, plan.reply, started)
    }

    /// [`Engine::start_workflow`] on the calling (async) thread, awaiting
    /// the writer's commit without a blocking thread, when nothing on the
    /// way can block: [`Engine::start_steps`] names no
    /// [`Blocking`](crate::server::fast_paths::Blocking) reason, and search
    /// attributes, if any, are checked against the registered ones read on
    /// an idle reader ([`Engine::read_now`]). The checks, the transaction
    /// and the answer are the ordinary start's, so both answer the same
    /// request the same way. `Err(body)`: start the ordinary way, on a
    /// blocking thread. A start handed to a blocking thread and from there
    /// to the writer cost two thread hand-offs more than the writer's own
    /// (docs/performance.md).
    pub async fn start_workflow_now(
        &self,
        namespace: &str,
        body: StartWorkflow,
    ) -> Result<Result<(u16, StartAnswer), ApiError>, StartWorkflow> {
        let steps = self.start_steps(namespace, &body);
        if steps.blocking().is_some() {
            return Err(body);
        }
        let registered = if steps.registered_attributes {
            match self.read_now(|s| s.search_attributes(namespace)) {
                Some(registered) => Some(registered),
                None => return Err(body),
            }
        } else {
            None
        };
        Ok(self.start_now(namespace, body, steps, registered).await)
    }

    async fn start_now(
        &self,
        namespace: &str,
        body: StartWorkflow,
        steps: StartSteps,
        registered: Option<std::collections::BTreeMap<String, String>>,
    ) -> Result<(u16, StartAnswer), ApiError> {
        let plan = self.plan_start(namespace, body, false, steps, |search| {
            Ok(match &registered {
                Some(registered) => crate::server::search_attributes::unregistered_among(
                    registered, namespace, search,
                ),
                None => Vec::new(),
            })
        })?;
        // No request cap: admission admits without a slot.
        let started = if plan.side_by_side {
            let namespace = plan.tx.start.namespace.clone();
            let workflow_id = plan.tx.start.workflow_id.clone();
            self.write_start_now(namespace, workflow_id, plan.tx.ordinary(None))
                .await?
        } else {
            self.write_now(plan.tx.ordinary(None)).await?
        };
        self.finish_start(namespace, plan.reply, started)?
            .ok_or_else(|| ApiError::Internal("an ungated start was gated".into()))
    }

    /// A start's checks, in the order every start takes them: the request
    /// limits and fields (with `search_problems` for its search
    /// attributes), then its external payload references (when `steps`
    /// says it names any); what is left is its transaction and its answer.
    fn plan_start(
        &self,
        namespace: &str,
        body: StartWorkflow,
        scheduled: bool,
        steps: StartSteps,
        search_problems: impl FnOnce(
            &serde_json::Map<String, Value>,
        ) -> Result<Vec<(String, String)>, ApiError>,
    ) -> Result<StartPlan, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(&body.workflow_id)
            .workflow_type(&body.workflow_type)
            .task_queue(&body.task_queue);
        let memo = body.memo.unwrap_or_default();
        let search = body.search_attributes.unwrap_or_default();
        let memo = Value::Object(memo);
        v.memo(&memo).search_attributes(&search);
        let memo = match memo {
            Value::Object(memo) => memo,
            _ => serde_json::Map::new(),
        };
        if let Some(key) = &body.business_key {
            v.business_key(key);
        }
        if let Some(id) = &body.request_id {
            v.request_id(id);
        }
        // The build the run is pinned to, if the start names one.
        let pinned_build = [
            ("build_id", &body.build_id),
            ("compatibility", &body.compatibility),
        ]
        .into_iter()
        .find_map(|(field, build)| {
            let build = build.as_deref().map(str::trim).filter(|b| !b.is_empty())?;
            v.text(field, build, dwpolicy::boundary::MAX_NAME_CHARS);
            Some(build.to_owned())
        });
        let mut checks = Checks::default();
        checks
            .range(
                "execution_timeout_seconds",
                body.execution_timeout_seconds,
                1,
                MAX_DURATION_SECONDS,
            )
            .range(
                "run_timeout_seconds",
                body.run_timeout_seconds,
                1,
                MAX_DURATION_SECONDS,
            )
            .range("priority", body.priority, 0, 9)
            .inline_payload("input", &body.input);
        // Runs carry only registered attributes of the right type, so the
        // registration cap bounds the names a namespace's runs can hold.
        checks.problems.extend(search_problems(&search)?);
        let policy = body.duplicate_policy.as_deref().unwrap_or("fail");
        if !matches!(policy, "fail" | "use-existing") {
            checks.problem(
                "duplicate_policy",
                "The duplicate_policy field must be \"fail\" or \"use-existing\".",
            );
        }
        finish_with(
            v,
            &[
                ("workflow_id", &body.workflow_id),
                ("workflow_type", &body.workflow_type),
                ("task_queue", &body.task_queue),
            ],
            &checks.problems,
        )?;
        if steps.payload_references {
            self.verify_payload_references(namespace, &[("input", &body.input)])?;
        }
        let use_existing = policy == "use-existing";
        let codec = wire::codec(&body.input);
        let seconds = |v: Option<i64>| v.and_then(|s| u64::try_from(s).ok());
        let timeouts = (
            seconds(body.execution_timeout_seconds),
            seconds(body.run_timeout_seconds),
        );
        // The duplicate check, the run and its first task commit together,
        // so two racing starts of one id cannot both open a run.
        let quota = self.durable_state.limits(namespace);
        // A start that decides on nothing shared (no quota on runs, no
        // schedule's gate, no external payload's reference count) commits
        // in a start batch, beside other nodes' starts on PostgreSQL.
        let side_by_side = !scheduled
            && !NamespaceDurableStateQuota::limits_any(quota, &START_RESOURCES)
            && !steps.payload_references;
        let reply = StartReply {
            workflow_id: body.workflow_id.clone(),
            workflow_type: body.workflow_type.clone(),
            task_queue: body.task_queue.clone(),
            codec,
            use_existing,
        };
        Ok(StartPlan {
            tx: StartTransaction {
                start: StartRun {
                    workflow_id: body.workflow_id,
                    workflow_type: body.workflow_type,
                    namespace: namespace.to_owned(),
                    task_queue: body.task_queue,
                    arguments: body.input,
                    memo,
                    search_attributes: search,
                },
                request_id: body.request_id,
                quota,
                timeouts,
                pinned_build,
            },
            side_by_side,
            reply,
        })
    }

    /// A committed start's answer, after waking the queue's pollers for a
    /// new run.
    fn finish_start(
        &self,
        namespace: &str,
        reply: StartReply,
        started: Begun,
    ) -> Result<Option<(u16, StartAnswer)>, ApiError> {
        let StartReply {
            workflow_id,
            workflow_type,
            task_queue,
            codec,
            use_existing,
        } = reply;
        let (run, status, duplicate) = match started {
            Begun::Refused(refused) => {
                self.durable_state.record(namespace, &refused);
                return Err(ApiError::DurableState(refused));
            }
            Begun::Gated => return Ok(None),
            Begun::Started(run) => (run, 201, false),
            Begun::Retried(run) => (run, 200, true),
            // Only a run of the asked type is "the existing one": a start
            // of another type (a service call's binding, say) must not be
            // answered with, or linked to, an unrelated workflow.
            Begun::Open(open, status, open_type) if use_existing && open_type == workflow_type => {
                return Ok(Some((
                    200,
                    StartAnswer {
                        duplicate: None,
                        namespace: namespace.to_owned(),
                        outcome: "returned_existing_run",
                        payload_codec: codec,
                        run_id: wire::run_id(open),
                        status: status.as_str(),
                        task_queue,
                        workflow_id,
                        workflow_type,
                    },
                )));
            }
            Begun::Open(open, _, open_type) => {
                return Err(ApiError::AlreadyStarted {
                    workflow_id,
                    run_id: wire::run_id(open),
                    workflow_type: open_type,
                })
            }
        };
        self.wake(namespace, &task_queue, TaskKind::Workflow.as_str());
        Ok(Some((
            status,
            StartAnswer {
                duplicate: Some(duplicate),
                namespace: namespace.to_owned(),
                outcome: "started_new",
                payload_codec: codec,
                run_id: wire::run_id(run),
                status: "running",
                task_queue,
                workflow_id,
                workflow_type,
            },
        )))
    }

    /// The run's flat description (the newest run unless `run_id` is given).
    ///
    /// The run is found and described in one read transaction on one
    /// pooled connection: an SDK's `result()` is a loop of these (every
    /// 50 to 500 ms per waiting client), the most frequent request a busy
    /// server answers.
    pub fn describe(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
    ) -> Result<Value, ApiError> {
        let selected = describe_target(&self.config.request_limits, workflow_id, run_id)?;
        let _slot = self.admit_namespace(namespace)?;
        // Its own snapshot: one round trip on PostgreSQL (Store::describe_latest).
        let found = self.read_own(|s| describe_read(s, namespace, workflow_id, selected))?;
        let (run, described, io, archive) =
            found.ok_or_else(|| ApiError::WorkflowNotFound(workflow_id.to_owned()))?;
        render_description(run, described, io, archive)?.into_value()
    }

    /// [`Engine::describe`] on the calling (async) thread, when it can be
    /// answered there without waiting: the namespace has no request cap
    /// (admission would touch the cache) and a file store's reader is idle
    /// ([`Engine::read_now`]).
    /// `None`: describe the ordinary way, on a blocking thread. A client
    /// waiting for a result sends one of these every 50 to 500 ms, and
    /// handing each to a blocking thread and back cost more CPU than the
    /// read itself (docs/performance.md).
    pub fn describe_now(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
    ) -> Option<Result<Description, ApiError>> {
        if self.namespaces.is_capped(namespace) {
            return None;
        }
        let selected = match describe_target(&self.config.request_limits, workflow_id, run_id) {
            Ok(selected) => selected,
            Err(e) => return Some(Err(e)),
        };
        let found = self.read_now(|s| describe_read(s, namespace, workflow_id, selected))?;
        Some(match found {
            Some((run, described, io, archive)) => render_description(run, described, io, archive),
            None => Err(ApiError::WorkflowNotFound(workflow_id.to_owned())),
        })
    }

    fn describe_run(&self, run: RunId, detailed: bool) -> Result<Value, ApiError> {
        let (described, io, archive) = self.read(|s| {
            let described = s.describe(run)?;
            let io = if detailed { Some(s.run_io(run)?) } else { None };
            Ok((described, io, s.archive_mark(run)?))
        })?;
        render_description(run, described, io, archive)?.into_value()
    }
    /// One page of the namespace's runs, newest first.
    pub fn list_workflows(&self, namespace: &str, query: ListQuery) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let limit = wire::page_size(&mut checks, query.page_size.as_deref(), 100);
        if query.query.is_some() {
            checks.problem(
                "query",
                "Visibility queries are not supported; filter with workflow_type and status.",
            );
        }
        let status = match query.status.as_deref() {
            None => None,
            Some(text @ ("waiting" | "pending")) => {
                checks.problem(
                    "status",
                    format!(
                        "The status filter takes a stored status, and a {text} run is stored \
                         as running: filter with status=running (open runs, running or waiting)."
                    ),
                );
                None
            }
            Some(text) => match RunStatus::parse(text) {
                Some(s) => Some(s),
                None => {
                    checks.problem(
                        "status",
                        "The status field must be running, completed, failed, cancelled, \
                         terminated or continued_as_new.",
                    );
                    None
                }
            },
        };
        let archived = match query.archived.as_deref() {
            None => ArchivedFilter::Exclude,
            Some(text) => ArchivedFilter::parse(text).unwrap_or_else(|| {
                checks.problem(
                    "archived",
                    "The archived field must be exclude (the default), only or include.",
                );
                ArchivedFilter::Exclude
            }),
        };
        let before = page_position(query.next_page_token.as_deref())?
            .map(|n| RunId(i64::try_from(n).unwrap_or(i64::MAX)));
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        let _slot = self.admit_namespace(namespace)?;
        let workflow_type = query.workflow_type.as_deref();
        let mut runs = self.read(|s| {
            s.list_runs(
                namespace,
                workflow_type,
                status,
                archived,
                before,
                limit + 1,
            )
        })?;
        let more = runs.len() > limit;
        runs.truncate(limit);
        let next = if more {
            runs.last().map(|r| wire::page_token(r.0.unsigned_abs()))
        } else {
            None
        };
        let workflows = runs
            .into_iter()
            .map(|r| self.describe_run(r, false))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json!({ "workflows": workflows, "next_page_token": next }))
    }

    /// The runs of one workflow id, oldest first.
    pub fn list_runs(&self, namespace: &str, workflow_id: &str) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id);
        v.finish()?;
        let _slot = self.admit_namespace(namespace)?;
        let runs =
            self.read(|s| s.runs_of(namespace, workflow_id, wire::MAX_PAGE_SIZE as usize))?;
        if runs.is_empty() {
            return Err(ApiError::WorkflowNotFound(workflow_id.to_owned()));
        }
        let runs = runs
            .into_iter()
            .map(|r| self.describe_run(r, false))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json!({ "workflow_id": workflow_id, "run_count": runs.len(), "runs": runs }))
    }

    /// One page of a run's history.
    pub fn history(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
        query: HistoryQuery,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let limit = wire::page_size(&mut checks, query.page_size.as_deref(), 100);
        let offset = page_position(query.next_page_token.as_deref())?.unwrap_or(0);
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        let _slot = self.admit_namespace(namespace)?;
        let not_found = || ApiError::WorkflowNotFound(workflow_id.to_owned());
        let run = wire::parse_run_id(run_id).ok_or_else(not_found)?;
        let limit = self.history_limit(limit);
        // The run's row and the page on one snapshot of their own: one
        // round trip on PostgreSQL (Store::history_page_of).
        let (page, total) = self
            .read_own(|s| s.history_page_of(namespace, workflow_id, run, offset, limit))?
            .ok_or_else(not_found)?;
        Ok(json!({
            "workflow_id": workflow_id,
            "run_id": wire::run_id(run),
            "events": page.events.iter().map(wire::event).collect::<Vec<_>>(),
            "total_events": total,
            "next_page_token": page.next_sequence.map(wire::page_token),
        }))
    }

    /// Admits a signal (202) or an update; a structural limit refuses
    /// either with its metadata and leaves the run open.
    #[allow(clippy::too_many_arguments)]
    fn admit_message(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        kind: MessageKind,
        name: &str,
        input: Value,
        request_id: Option<String>,
    ) -> Result<(RunId, i64, bool), ApiError> {
        let (_slot, run) = self.check_message(
            namespace,
            workflow_id,
            run_id,
            kind,
            name,
            &input,
            &request_id,
        )?;
        let request = SignalRequest {
            name: name.to_owned(),
            payload: input,
            request_id,
        };
        self.write_message(namespace, run, kind, request)
    }

    /// A signal's or update's boundary checks (name, request id, input and
    /// its payload references), namespace admission and the target run:
    /// the slot to hold while it is admitted, and the run.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_message(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        kind: MessageKind,
        name: &str,
        input: &Value,
        request_id: &Option<String>,
    ) -> Result<(Option<NamespaceSlot>, RunId), ApiError> {
        let field = match kind {
            MessageKind::Signal => "signal_name",
            MessageKind::Update => "update_name",
        };
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id).operation_name(field, name);
        if let Some(id) = &request_id {
            v.request_id(id);
        }
        let mut checks = Checks::default();
        if crate::server::message_streams::reserved_signal(name) {
            checks.problem(
                field,
                format!("The {field} {name:?} is reserved for message-stream deliveries; append to the stream with POST /api/workflows/{{id}}/message-streams/{{stream}}/messages."),
            );
        }
        checks.inline_payload("input", input);
        finish_with(v, &[], &checks.problems)?;
        self.verify_payload_references(namespace, &[("input", input)])?;
        let slot = self.admit_namespace(namespace)?;
        let run = self.target(namespace, workflow_id, run_id)?;
        Ok((slot, run))
    }

    /// Writes an admitted signal or update with the workflow task that
    /// delivers it and wakes the queue's workflow pollers.
    fn write_message(
        &self,
        namespace: &str,
        run: RunId,
        kind: MessageKind,
        request: SignalRequest,
    ) -> Result<(RunId, i64, bool), ApiError> {
        let operation = match kind {
            MessageKind::Signal => "signal",
            MessageKind::Update => "update",
        };
        // The message and the workflow task that delivers it commit together.
        let admitted = self.write(move |store| {
            let admission = match kind {
                MessageKind::Signal => store.signal(run, request)?,
                MessageKind::Update => store.submit_update(run, request)?,
            };
            if let Admission::Accepted {
                duplicate: false, ..
            } = admission
            {
                store.enqueue_workflow_task(run)?;
            }
            Ok((admission, store.run(run)?.task_queue))
        });
        let (admission, task_queue) = admitted.map_err(|e| closed(e, operation, run))?;
        match admission {
            Admission::Rejected(rejection) => Err(ApiError::Structural(rejection)),
            Admission::Accepted { id, duplicate } => {
                self.wake(namespace, &task_queue, TaskKind::Workflow.as_str());
                Ok((run, id, duplicate))
            }
        }
    }

    /// `POST …/signal/{name}`: 202 once the signal is in history.
    pub fn signal(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        name: &str,
        body: SignalBody,
    ) -> Result<Value, ApiError> {
        let request_id = body.request_id.clone();
        let (run, id, duplicate) = self.admit_message(
            namespace,
            workflow_id,
            run_id,
            MessageKind::Signal,
            name,
            body.input,
            body.request_id,
        )?;
        Ok(json!({
            "workflow_id": workflow_id, "run_id": wire::run_id(run), "signal_name": name,
            "signal_id": id.to_string(), "outcome": "signal_received",
            "command_status": "accepted", "request_id": request_id, "retained": duplicate,
        }))
    }

    /// `POST …/update/{name}`: accepted at once, or waits for the result
    /// with `wait_for = completed` (up to `wait_timeout_seconds`): then
    /// the HTTP layer awaits it without a thread ([`Engine::look_update`]).
    pub fn begin_update(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        name: &str,
        body: UpdateBody,
    ) -> Result<UpdateStep, ApiError> {
        let wait_for = body.wait_for.clone().unwrap_or_else(|| "accepted".into());
        let mut checks = Checks::default();
        if !matches!(wait_for.as_str(), "accepted" | "completed") {
            checks.problem(
                "wait_for",
                "The wait_for field must be \"accepted\" or \"completed\".",
            );
        }
        let max_wait = i64::try_from(self.config.max_update_wait.as_secs()).unwrap_or(i64::MAX);
        checks.range(
            "wait_timeout_seconds",
            body.wait_timeout_seconds,
            1,
            max_wait,
        );
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        // A waiting update is admitted before anything is written: a
        // refused one leaves no update behind.
        let permit = if wait_for == "completed" {
            Some(
                self.waiters
                    .admit(crate::waiters::WaitKind::Update)
                    .map_err(ApiError::CallWaitCapacity)?,
            )
        } else {
            None
        };
        // An update a worker's validator guards waits for its verdict
        // before it is accepted (server::update_validation).
        if self.update_validator_guards(namespace, workflow_id, run_id, name)? {
            return self.begin_validation(
                namespace,
                workflow_id,
                run_id,
                name,
                body,
                wait_for,
                permit,
            );
        }
        let request_id = body.request_id.clone();
        let (run, id, duplicate) = self.admit_message(
            namespace,
            workflow_id,
            run_id,
            MessageKind::Update,
            name,
            body.input,
            body.request_id,
        )?;
        let out = json!({
            "workflow_id": workflow_id, "run_id": wire::run_id(run), "update_name": name,
            "update_id": id.to_string(), "request_id": request_id, "retained": duplicate,
            "update_status": "accepted", "wait_for": wait_for,
        });
        let Some(permit) = permit else {
            return Ok(UpdateStep::Answered(out));
        };
        let wait = body
            .wait_timeout_seconds
            .map(|s| Duration::from_secs(s.unsigned_abs()))
            .unwrap_or(self.config.max_update_wait)
            .min(self.config.max_update_wait);
        Ok(UpdateStep::Waiting(PendingUpdate {
            out,
            run,
            update: id,
            deadline: Instant::now() + wait,
            _wait: permit,
        }))
    }

    /// One look at a waiting update: its answer once it completed (a
    /// rejection or a closed run as the error), `None` while it waits.
    pub fn look_update(&self, pending: &UpdateLook) -> Result<Option<Value>, ApiError> {
        let (run, id) = (pending.run, pending.update);
        let mut out = pending.out.clone();
        if let Some((status, result)) = self.read(|s| s.update_outcome(id))? {
            if status == "completed" {
                out["update_status"] = "completed".into();
                out["result"] = Value::Null;
                out["result_envelope"] = result;
                return Ok(Some(out));
            }
            let message = result
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the workflow rejected the update")
                .to_owned();
            return Err(ApiError::UpdateFailed(message, out));
        }
        let status = self.read(|s| s.run(run))?.status;
        if status != RunStatus::Running {
            return Err(ApiError::RunClosed {
                operation: "update",
                run_id: wire::run_id(run),
                status: status.as_str().to_owned(),
            });
        }
        Ok(None)
    }

    /// The boundary checks of cancel, terminate and archive (`reason` at most
    /// 1,000 characters, `request_id` 255), then namespace admission and the
    /// target run: the slot to hold while the command runs, and the run.
    pub(crate) fn admit_run_command(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        body: &StopBody,
    ) -> Result<(Option<NamespaceSlot>, RunId), ApiError> {
        let mut v = self.config.request_limits.validator();
        v.workflow_id(workflow_id);
        if let Some(reason) = &body.reason {
            v.reason(reason);
        }
        if let Some(id) = &body.request_id {
            v.request_id(id);
        }
        v.finish()?;
        let slot = self.admit_namespace(namespace)?;
        Ok((slot, self.target(namespace, workflow_id, run_id)?))
    }

    /// Cancels or terminates the run at once (each its own terminal status).
    pub fn stop(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: Option<&str>,
        terminate: bool,
        body: StopBody,
    ) -> Result<Value, ApiError> {
        let (_slot, run) = self.admit_run_command(namespace, workflow_id, run_id, &body)?;
        let reason = body.reason.unwrap_or_default();
        let operation = if terminate { "terminate" } else { "cancel" };
        let (why, request_id) = (reason.clone(), body.request_id.clone());
        let stopped = self.write(move |store| {
            if terminate {
                store.terminate(run, &why, request_id.as_deref())
            } else {
                store.cancel(run, &why, request_id.as_deref())
            }
        });
        let stopped = stopped.map_err(|e| closed(e, operation, run))?;
        self.wake_run(run);
        let outcome = if terminate { "terminated" } else { "cancelled" };
        Ok(json!({
            "workflow_id": workflow_id, "run_id": wire::run_id(run), "outcome": outcome,
            "status": outcome, "reason": reason, "duplicate": stopped.duplicate,
        }))
    }
}

/// The run a describe names, once the workflow id passed the request
/// limits (`Some` when `run_id` is given; an unparsable one is not found).
fn describe_target(
    limits: &RequestLimits,
    workflow_id: &str,
    run_id: Option<&str>,
) -> Result<Option<RunId>, ApiError> {
    let mut v = limits.validator();
    v.workflow_id(workflow_id);
    v.finish()?;
    match run_id {
        None => Ok(None),
        Some(text) => wire::parse_run_id(text)
            .map(Some)
            .ok_or_else(|| ApiError::WorkflowNotFound(workflow_id.to_owned())),
    }
}

/// What a describe reads, in one snapshot (its own when called outside
/// one, see [`Store::describe_latest`]): `None` when no run of
/// `workflow_id` in `namespace` is `selected` (or none at all).
fn describe_read(
    s: &Store,
    namespace: &str,
    workflow_id: &str,
    selected: Option<RunId>,
) -> Result<Option<DescribeRead>, StoreError> {
    let found = match selected {
        Some(run) => match s.describe_detailed(run) {
            Ok(d) => Some((run, d)),
            Err(StoreError::RunNotFound(_)) => None,
            Err(e) => return Err(e),
        },
        None => s.describe_latest(namespace, workflow_id)?,
    };
    let Some((run, (described, io, archive))) = found else {
        return Ok(None);
    };
    if described.run.namespace != namespace || described.run.workflow_id != workflow_id {
        return Ok(None);
    }
    Ok(Some((run, described, Some(io), archive)))
}

/// The position a `next_page_token` names (`None` without one); a token
/// this server did not issue is refused.
fn page_position(token: Option<&str>) -> Result<Option<u64>, ApiError> {
    token
        .map(|t| wire::parse_page_token(t).ok_or_else(|| ApiError::InvalidPageToken(t.to_owned())))
        .transpose()
}

/// A store refusal on a closed run, as the protocol names it.
fn closed(e: StoreError, operation: &'static str, run: RunId) -> ApiError {
    match e {
        StoreError::RunNotActive { status, .. } => ApiError::RunClosed {
            operation,
            run_id: wire::run_id(run),
            status: status.as_str().to_owned(),
        },
        other => other.into(),
    }
}

/// A start's transaction: the schedule fire's gate, the request id's and
/// the workflow id's earlier runs, the namespace's quota, then the run with
/// its first task and timeouts (and the fire's record).
fn begin_start(
    s: &Store,
    start: StartRun,
    request_id: Option<&str>,
    quota: Option<crate::durable_state::DurableLimits>,
    schedule: Option<&ScheduleStart>,
    timeouts: (Option<u64>, Option<u64>),
) -> Result<Begun, StoreError> {
    if let Some(fire) = schedule {
        if !s.pass_fire_gate(&fire.namespace, &fire.schedule_id, &fire.gate)? {
            return Ok(Begun::Gated);
        }
    }
    if let Some(id) = request_id {
        if let Some(run) = s.run_started_by(&start.namespace, &start.workflow_id, id)? {
            return Ok(Begun::Retried(run));
        }
    }
    if let Some(open) = s.open_run(&start.namespace, &start.workflow_id)? {
        let run = s.run(open)?;
        return Ok(Begun::Open(open, run.status, run.workflow_type));
    }
    // Counted in this transaction, so racing starts cannot overshoot.
    if let Err(refused) = NamespaceDurableStateQuota::check(quota, &START_RESOURCES, |asked| {
        s.durable_usage(&start.namespace, asked).ok()
    }) {
        return Ok(Begun::Refused(refused));
    }
    let workflow_id = start.workflow_id.clone();
    let started = s.start_workflow_timed(start, request_id, timeouts.0, timeouts.1)?;
    if let Some(fire) = schedule {
        fire.record(s, &workflow_id, started.run)?;
    }
    Ok(Begun::Started(started.run))
}

/// Pins a new run to the build its start named, else to the queue's
/// promoted build-id cohort (in the start's transaction).
fn pin_started(
    s: &Store,
    begun: &Begun,
    start: &StartRun,
    build: Option<&str>,
) -> Result<(), StoreError> {
    if let Begun::Started(run) = begun {
        s.pin_started_run(*run, &start.namespace, &start.task_queue, build)?;
    }
    Ok(())
}
