//! The worker plane: registration, idempotent long polls, fenced reports.
//!
//! A poll runs one pass (recovery scans, then a lease under the queue's
//! admission) and, if that found nothing, holds a wait slot and re-runs the
//! pass whenever the queue's wake signal changes, until its wait ends. The
//! passes run on the poll lane's blocking threads (they touch the store),
//! or on the async thread where nothing on the way may block
//! (`server/worker/poll_now.rs`); the waits between them are the HTTP
//! layer's, on the async runtime, holding no thread ([`PollKind`],
//! `server/http/worker_tasks.rs`). Its answer is stored under its poll request id, so a retry of the same id
//! replays the answer and can never lease a second task. Every report on a
//! task names the lease it holds (`lease_owner` and the attempt); a report
//! from a worker that lost its lease is refused with 409.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::cache::CacheOp;
use crate::diagnostics::{PollObservation, WorkerPollDiagnostics};
use crate::durable_state::{DurableResource, NamespaceDurableStateQuota};
use crate::poll_requests::PollClaim;
use crate::server::error::finish_with;
use crate::server::fast_paths::{service_starts_with_options, sticky_claim};
use crate::server::task_answer::{self, PollAnswer};
use crate::server::wire::{
    self, validation, ActivityReport, Checks, PollBody, RegisterWorker, WorkerHeartbeat,
    WorkflowTaskLease, MAX_PAGE_SIZE,
};
use crate::server::{ApiError, Engine};
use crate::store::cancellation::CancellationRequest;
use crate::store::writer::RunWriteOrder;
use crate::store::{
    attempt_id, ActivityFence, AttemptFailure, AttemptOutcome, HistoryPageLimit, LeasedTask, RunId,
    StoredPage, TaskKind, WorkflowCommand, WorkflowTaskFence, SUPPORTED_COMMANDS,
};
use crate::wait_slots::WaitSlot;

mod poll_now;
use poll_now::Reading;
pub(crate) use poll_now::{Ending, FirstStep, PassNow};

/// How often a repeat of a poll still running looks for its answer.
pub(crate) const WAKE_CHECK: Duration = Duration::from_millis(25);
/// Activities of unusable worker sessions one poll pass fails at most
/// before it answers (the next pass goes on).
const SESSION_FAILURES_PER_PASS: usize = 8;
/// How often a waiting poll on a node with peers looks at its channel's
/// signal key, in case a relay message was lost.
pub(crate) const SIGNAL_LOOK: Duration = Duration::from_millis(100);
/// How long a pass waits for the SQLite claim gate before claiming nothing.
const CLAIM_GATE_PATIENCE: Duration = Duration::from_millis(250);
// Re-run a pass now and then even without a wake: a signal can expire or a
// timer can come due with nobody enqueuing anything.
pub(crate) const IDLE_RECHECK: Duration = Duration::from_millis(500);
/// Events per history page when the worker names no size.
pub(crate) const DEFAULT_HISTORY_PAGE: usize = 100;
/// The heartbeat cadence advertised to workers.
pub(crate) const HEARTBEAT_INTERVAL_SECONDS: u64 = 30;
/// The failure type the SDK reports when a task had nothing new to do.
const WAITING_FOR_HISTORY: &str = "WorkflowTaskWaitingForHistory";

/// A validated poll.
pub(crate) struct PollSpec {
    pub namespace: String,
    pub task_queue: String,
    pub worker_id: String,
    pub poll_request_id: String,
    pub wait: Duration,
    /// The wait the worker asked for (`timeout_seconds`), if it named one.
    pub requested_wait: Option<Duration>,
    /// The build id the poll names (`None`: it names none).
    pub build_id: Option<String>,
    /// The build id the worker registered with, read once per poll when
    /// the poll names none (`None` inside: an unversioned registration).
    pub registered_build: std::sync::OnceLock<Option<String>>,
    pub history_page_size: usize,
    /// Workflow polls: whether the worker also takes `update_validation`
    /// tasks (`task_kinds` names it): see `server::update_validation`.
    pub update_validation: bool,
    /// Set when the HTTP request went away (the client disconnected): the
    /// poll stops before leasing a task nobody would receive.
    pub abandoned: Arc<Departure>,
    /// What the claim that leased this poll's workflow task read for its
    /// answer in the lease's own transaction, until the answer takes it.
    pub lease_reads: std::sync::Mutex<Option<LeaseReads>>,
}

/// A leased workflow task's first history page and pending cooperative
/// cancellation, read in the transaction that leased it, on a node whose
/// claims run on the one SQLite writer. A reader's page cache starts empty
/// after every commit, so the same reads on a reader right after the
/// claim's commit fetched every page of their indexes again, some 113,000
/// instructions a workflow task; the writer has just touched those pages
/// (docs/performance.md, session 20). The page is then exactly the history
/// the lease counted (`history_length`).
#[derive(Debug)]
pub(crate) struct LeaseReads {
    task_id: i64,
    page: StoredPage,
    cancellation: Option<CancellationRequest>,
}

impl PollSpec {
    /// The reads the claim of `task_id` made for its answer, if it made
    /// them (taken: an answer renders once).
    pub(crate) fn take_lease_reads(&self, task_id: i64) -> Option<LeaseReads> {
        let mut slot = self.lease_reads.lock().unwrap_or_else(|e| e.into_inner());
        slot.take().filter(|reads| reads.task_id == task_id)
    }

    /// The poller's build-id cohort (`None`: unversioned): the build id the
    /// poll names, else the one its worker registered with.
    pub(crate) fn cohort(&self) -> Option<&str> {
        self.build_id
            .as_deref()
            .or_else(|| self.registered_build.get().and_then(Option::as_deref))
    }

    /// Whether the poller is gone.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.abandoned.left()
    }
}

/// A poller's departure: set (and its waiting poll woken) when the HTTP
/// request went away.
#[derive(Debug, Default)]
pub(crate) struct Departure {
    left: AtomicBool,
    noticed: tokio::sync::Notify,
}

impl Departure {
    /// The poller left: its poll answers at its next step.
    pub(crate) fn leave(&self) {
        self.left.store(true, Ordering::Release);
        self.noticed.notify_waiters();
    }

    /// Whether the poller left.
    pub(crate) fn left(&self) -> bool {
        self.left.load(Ordering::Acquire)
    }

    /// Resolves when the poller leaves.
    pub(crate) async fn departed(&self) {
        let noticed = self.noticed.notified();
        tokio::pin!(noticed);
        noticed.as_mut().enable();
        if self.left() {
            return;
        }
        noticed.await;
    }
}

/// Where a long poll stands after its first step on the blocking pool.
pub(crate) enum PollStep {
    /// Answered: a task, a replay, or nothing without waiting.
    Answered(PollAnswer),
    /// A repeat of a poll still running: it looks for that poll's answer
    /// every [`WAKE_CHECK`] until `deadline`, holding `slot`.
    InFlight {
        /// When it answers empty.
        deadline: Instant,
        /// Its wait slot, held while it waits.
        slot: WaitSlot,
    },
    /// Found nothing: it waits for work.
    Waiting(PollWait),
}

/// What a long poll that found nothing waits with.
pub(crate) struct PollWait {
    /// Its subscription to its channel's wake-ups (taken before its first
    /// look at the store, so a wake during that look is not lost).
    pub(crate) wake: crate::polling::PollWake,
    /// Its channel (`workflow`, `activity`, `query`).
    pub(crate) channel: &'static str,
    /// When it answers empty.
    pub(crate) deadline: Instant,
    /// Whether it wrote a pending key (and so stores its answer for
    /// replay); not for an unknown worker past its budget.
    pub(crate) keyed: bool,
    /// Its wait slot, held while it waits (dropped with it).
    pub(crate) _slot: WaitSlot,
}

/// What a poll's first step read of the store ([`Engine::first_look`]).
struct FirstLook {
    /// The worker's registration: whether it heartbeated within the idle
    /// window, and its build id (`None`: not registered).
    registration: Option<(bool, Option<String>)>,
    /// The task still leased to the poll's request id, if any.
    bound: Option<LeasedTask>,
    /// The first pass's recovery scans.
    recovery: RecoveryScan,
}

/// What a pass's recovery scans found to do.
struct RecoveryScan {
    /// Workflow polls: whether timers of the queue and cohort are due.
    due_timers: bool,
    /// Expired leases of the poll's kind, oldest first.
    expired: Vec<i64>,
}

impl RecoveryScan {
    /// Nothing to recover: no due timer, no expired lease.
    fn is_empty(&self) -> bool {
        !self.due_timers && self.expired.is_empty()
    }
}

/// One kind of long poll, in steps the HTTP layer drives: each step runs
/// on the blocking pool, the waits between them on the async runtime.
pub(crate) trait PollKind: Copy + Send + Sync + 'static {
    /// What a pass finds.
    type Task: Send + 'static;
    /// Admits the poll, claims its request id, and runs its first pass.
    fn begin(self, engine: &Engine, poll: &PollSpec) -> Result<PollStep, ApiError>;
    /// One pass after a wake-up or the idle recheck: `Break` ends the wait.
    fn pass(
        self,
        engine: &Engine,
        poll: &PollSpec,
        keyed: bool,
    ) -> Result<ControlFlow<Option<Self::Task>>, ApiError>;
    /// The answer once the wait ended: what it found, stored for replay.
    fn end(
        self,
        engine: &Engine,
        poll: &PollSpec,
        keyed: bool,
        found: Result<Option<Self::Task>, ApiError>,
    ) -> Result<PollAnswer, ApiError>;
    /// For a repeat of a poll still running: that poll's answer, once it has one.
    fn replay(self, engine: &Engine, poll: &PollSpec) -> Result<Option<PollAnswer>, ApiError>;
    /// For a repeat of a poll still running: the answer when it never ended.
    fn unanswered(self, engine: &Engine, poll: &PollSpec) -> Result<PollAnswer, ApiError>;
    /// Whether the pass that found `task` saw more work than it took (or
    /// cannot tell): the other polls of its channel are then woken.
    fn more_ready(task: &Self::Task) -> bool;
    /// A workflow or activity poll's kind of task: its first step may run
    /// on the async runtime ([`Engine::begin_poll_now`]).
    fn task_kind(self) -> Option<TaskKind> {
        None
    }
}

impl PollKind for TaskKind {
    type Task = LeasedTask;

    fn begin(self, engine: &Engine, poll: &PollSpec) -> Result<PollStep, ApiError> {
        engine.begin_poll(self, poll)
    }

    fn pass(
        self,
        engine: &Engine,
        poll: &PollSpec,
        _keyed: bool,
    ) -> Result<ControlFlow<Option<LeasedTask>>, ApiError> {
        Ok(match engine.pass(self, poll)? {
            Some(task) => ControlFlow::Break(Some(task)),
            None => ControlFlow::Continue(()),
        })
    }

    fn end(
        self,
        engine: &Engine,
        poll: &PollSpec,
        keyed: bool,
        found: Result<Option<LeasedTask>, ApiError>,
    ) -> Result<PollAnswer, ApiError> {
        engine.end_poll(self, poll, keyed, found)
    }

    fn replay(self, engine: &Engine, poll: &PollSpec) -> Result<Option<PollAnswer>, ApiError> {
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        match engine.polls(self).result(ns, queue, id)? {
            Some(bytes) => {
                let answer = engine.replayed(self, poll, &bytes)?;
                engine.observed(self, poll, answer).map(Some)
            }
            None => Ok(None),
        }
    }

    fn unanswered(self, engine: &Engine, poll: &PollSpec) -> Result<PollAnswer, ApiError> {
        engine.observed(
            self,
            poll,
            json!({ "task": null, "poll_status": "timeout", "replayed": false }).into(),
        )
    }

    fn more_ready(task: &LeasedTask) -> bool {
        task.more_ready
    }

    fn task_kind(self) -> Option<TaskKind> {
        Some(self)
    }
}

impl Engine {
    /// Validates a poll body for `namespace`.
    pub(crate) fn poll_spec(&self, namespace: &str, body: PollBody) -> Result<PollSpec, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.task_queue(&body.task_queue).text(
            "worker_id",
            &body.worker_id,
            dwpolicy::boundary::MAX_NAME_CHARS,
        );
        let poll_request_id = body.poll_request_id.unwrap_or_default();
        let build_id = body.build_id.filter(|b| !b.trim().is_empty());
        if let Some(build) = &build_id {
            v.text("build_id", build, dwpolicy::boundary::MAX_NAME_CHARS);
        }
        v.text(
            "poll_request_id",
            &poll_request_id,
            dwpolicy::boundary::MAX_REQUEST_ID_CHARS,
        );
        let mut checks = Checks::default();
        let max_wait = self.config.max_poll_wait.as_secs_f64();
        if let Some(t) = body.timeout_seconds {
            if !t.is_finite() || t < 0.0 {
                checks.problem(
                    "timeout_seconds",
                    format!("The timeout_seconds field must be between 0 and {max_wait}; got {t}."),
                );
            }
        }
        checks.range(
            "history_page_size",
            body.history_page_size,
            1,
            MAX_PAGE_SIZE,
        );
        let update_validation = crate::server::update_validation::contract::check_task_kinds(
            &mut checks,
            body.task_kinds.as_deref(),
        );
        finish_with(
            v,
            &[
                ("task_queue", &body.task_queue),
                ("worker_id", &body.worker_id),
                ("poll_request_id", &poll_request_id),
            ],
            &checks.problems,
        )?;
        let requested_wait = body
            .timeout_seconds
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(|t| Duration::from_secs_f64(t.min(max_wait)));
        let wait = requested_wait.unwrap_or(self.config.max_poll_wait);
        Ok(PollSpec {
            namespace: namespace.to_owned(),
            task_queue: body.task_queue,
            worker_id: body.worker_id,
            poll_request_id,
            wait,
            requested_wait,
            build_id,
            registered_build: std::sync::OnceLock::new(),
            history_page_size: body
                .history_page_size
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(DEFAULT_HISTORY_PAGE),
            update_validation,
            abandoned: Arc::default(),
            lease_reads: std::sync::Mutex::new(None),
        })
    }

    /// `POST /api/worker/register`: records the worker and acknowledges.
    pub fn register_worker(
        &self,
        namespace: &str,
        body: RegisterWorker,
    ) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text(
            "worker_id",
            &body.worker_id,
            dwpolicy::boundary::MAX_NAME_CHARS,
        )
        .task_queue(&body.task_queue);
        finish_with(
            v,
            &[
                ("worker_id", &body.worker_id),
                ("task_queue", &body.task_queue),
            ],
            &[],
        )?;
        let build_id = body
            .build_id
            .as_deref()
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .map(str::to_owned);
        if let Some(build) = &build_id {
            let mut v = self.config.request_limits.validator();
            v.text("build_id", build, dwpolicy::boundary::MAX_NAME_CHARS);
            finish_with(v, &[("build_id", build)], &[])?;
        }
        // What the build-id rollout list shows of the worker's cohort.
        for (field, value) in [
            ("runtime", &body.runtime),
            ("sdk_version", &body.sdk_version),
        ] {
            if let Some(value) = value {
                let mut v = self.config.request_limits.validator();
                v.text(field, value, dwpolicy::boundary::MAX_NAME_CHARS);
                finish_with(v, &[(field, value)], &[])?;
            }
        }
        // A worker that asks for worker sessions offers to hold some: the
        // capabilities it names are the requirements it satisfies.
        let asks_sessions = body.capabilities.iter().any(|c| c == "worker_sessions")
            || body.capability_manifest["worker_sessions"]["supported"] == true;
        let max_sessions = match &body.max_concurrent_worker_sessions {
            None | Some(Value::Null) => Some(10),
            Some(v) => v
                .as_u64()
                .filter(|n| (1..=crate::store::sessions::MAX_WORKER_SESSIONS).contains(n)),
        };
        let Some(max_sessions) = max_sessions else {
            let mut checks = Checks::default();
            checks.problem(
                "max_concurrent_worker_sessions",
                format!(
                    "The max_concurrent_worker_sessions field must be an integer from 1 to {}.",
                    crate::store::sessions::MAX_WORKER_SESSIONS
                ),
            );
            finish_with(
                self.config.request_limits.validator(),
                &[],
                &checks.problems,
            )?;
            return Err(ApiError::Internal("unreachable".into()));
        };
        let profile = asks_sessions.then(|| {
            let mut capabilities: Vec<String> = body
                .capabilities
                .iter()
                .map(|c| c.trim().to_owned())
                .collect();
            capabilities.sort();
            capabilities.dedup();
            crate::store::sessions::SessionProfile {
                capabilities,
                max_sessions: i64::try_from(max_sessions).unwrap_or(10),
            }
        });
        let validators = crate::server::update_validation::contract::declared_validators(&body)
            .map_err(|checks| ApiError::from(validation(checks)))?;
        let fingerprints = crate::server::fingerprints::definition_fingerprints(
            &body.workflow_definition_fingerprints,
        )
        .map_err(|checks| ApiError::from(validation(checks)))?;
        let sweep = self.config.worker_sweep;
        let sticky = self.config.sticky;
        let sessions = self.config.session_sweep;
        let idle_before = sweep.idle_before_ms(crate::unix_ms());
        let recorded_build = build_id.clone();
        let (runtime, sdk_version) = (body.runtime.clone(), body.sdk_version.clone());
        let (ns, worker, queue) = (
            namespace.to_owned(),
            body.worker_id.clone(),
            body.task_queue.clone(),
        );
        // The quota check, the registration and the bounded idle sweep
        // commit together; refreshing a registration adds nothing.
        let quota = self.durable_state.limits(namespace);
        let admitted = self.write(move |store| {
            if !store.worker_registered(&ns, &worker, i64::MIN)? {
                let check = NamespaceDurableStateQuota::check(
                    quota,
                    &[DurableResource::WorkerRegistrations],
                    |asked| store.durable_usage(&ns, asked).ok(),
                );
                if let Err(refused) = check {
                    return Ok(Err(refused));
                }
            }
            store.record_worker(&ns, &worker, &queue)?;
            store.record_worker_build(
                &ns,
                &worker,
                recorded_build.as_deref(),
                runtime.as_deref(),
                sdk_version.as_deref(),
            )?;
            store.set_session_profile(&ns, &worker, profile.as_ref())?;
            store.set_update_validators(&ns, &worker, validators.as_ref())?;
            store.set_definition_fingerprints(&ns, &worker, fingerprints.as_ref())?;
            store.prune_idle_workers(idle_before, sweep.idle_worker_prune_scan_limit)?;
            store
                .prune_sticky_bindings(crate::unix_ms(), sticky.sticky_binding_prune_scan_limit)?;
            store.prune_worker_sessions(
                crate::unix_ms(),
                sessions.worker_session_prune_scan_limit,
            )?;
            Ok(Ok(store.worker_draining(&ns, &worker)?))
        })?;
        let draining = match admitted {
            Ok(draining) => draining,
            Err(refused) => {
                self.durable_state.record(namespace, &refused);
                return Err(ApiError::DurableState(refused));
            }
        };
        let (pruned, reclaimed) = self.heartbeat_housekeeping(namespace);
        // Acknowledge exactly the asked capabilities this server implements,
        // and, for a worker that holds sessions, the resources it offers
        // (recorded above as the session requirements it meets).
        let capabilities: Vec<&str> = body
            .capabilities
            .iter()
            .map(String::as_str)
            .filter(|c| {
                wire::ACKNOWLEDGED_CAPABILITIES.contains(c)
                    || (asks_sessions
                        && !c.trim().is_empty()
                        && !wire::PROTOCOL_CAPABILITIES.contains(c))
            })
            .collect();
        let mut manifest = serde_json::Map::new();
        if let Some(asked) = body.capability_manifest.as_object() {
            for (name, entry) in asked {
                if entry["supported"] == true {
                    let supported = wire::ACKNOWLEDGED_MANIFEST.contains(&name.as_str());
                    manifest.insert(name.clone(), json!({ "supported": supported }));
                }
            }
        }
        let protocol_version = body.protocol_version.clone().unwrap_or_else(|| {
            wire::WORKER_PROTOCOL_VERSIONS[wire::WORKER_PROTOCOL_VERSIONS.len() - 1].to_owned()
        });
        Ok(json!({
            "worker_id": body.worker_id, "namespace": namespace, "task_queue": body.task_queue,
            "protocol_version": protocol_version, "capabilities": capabilities,
            "capability_manifest": manifest, "build_id": build_id,
            "server_capabilities": self.registration_capabilities(),
            "registered": true, "status": worker_status(draining),
            "runtime": body.runtime, "sdk_version": body.sdk_version,
            "heartbeat_interval_seconds": HEARTBEAT_INTERVAL_SECONDS,
            "stale_after_seconds": HEARTBEAT_INTERVAL_SECONDS * 3,
            "pruned_run_id": pruned.map(wire::run_id),
            "stream_retention": reclaimed,
        }))
    }

    /// `POST /api/worker/heartbeat`. Its `status` is the worker's:
    /// `draining` while an operator drains its build-id cohort, else
    /// `active`.
    pub fn worker_heartbeat(
        &self,
        namespace: &str,
        body: WorkerHeartbeat,
    ) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text(
            "worker_id",
            &body.worker_id,
            dwpolicy::boundary::MAX_NAME_CHARS,
        );
        finish_with(v, &[("worker_id", &body.worker_id)], &[])?;
        // One elected heartbeat per worker and write interval, across
        // nodes, rewrites the registration; the others only read it.
        let refreshed = self.compatibility.elect(namespace, &body.worker_id)?;
        let (ns, worker) = (namespace.to_owned(), body.worker_id.clone());
        let sweep = self.config.worker_sweep;
        let registered = if refreshed {
            // The elected heartbeat also sweeps idle registrations (bounded
            // by the prune scan limit), as a registration does.
            let idle_before = sweep.idle_before_ms(crate::unix_ms());
            let sticky = self.config.sticky;
            let sessions = self.config.session_sweep;
            self.write(move |s| {
                let touched = s.touch_worker(&ns, &worker)?;
                s.prune_idle_workers(idle_before, sweep.idle_worker_prune_scan_limit)?;
                s.prune_sticky_bindings(crate::unix_ms(), sticky.sticky_binding_prune_scan_limit)?;
                s.prune_worker_sessions(
                    crate::unix_ms(),
                    sessions.worker_session_prune_scan_limit,
                )?;
                Ok((touched, touched && s.worker_draining(&ns, &worker)?))
            })?
        } else {
            let idle_before = self.config.worker_sweep.idle_before_ms(crate::unix_ms());
            self.read(|s| {
                let registered = s.worker_registered(&ns, &worker, idle_before)?;
                Ok((registered, registered && s.worker_draining(&ns, &worker)?))
            })?
        };
        let (registered, draining) = registered;
        if !registered {
            if refreshed {
                // An unknown worker keeps no throttle key.
                self.compatibility.forget(namespace, &body.worker_id)?;
            }
            return Err(ApiError::WorkerNotFound(body.worker_id));
        }
        let (pruned, reclaimed) = self.heartbeat_housekeeping(namespace);
        Ok(json!({
            "worker_id": body.worker_id, "heartbeat_recorded": true,
            "registration_refreshed": refreshed, "status": worker_status(draining),
            "heartbeat_interval_seconds": HEARTBEAT_INTERVAL_SECONDS,
            "stale_after_seconds": HEARTBEAT_INTERVAL_SECONDS * 3,
            "pruned_run_id": pruned.map(wire::run_id),
            "stream_retention": reclaimed,
        }))
    }

    /// The retention work a registration or heartbeat does after its own
    /// write committed. Its failure (the cache electing it is down) cannot
    /// fail the request: it is logged and counted, and a later heartbeat
    /// does the work.
    fn heartbeat_housekeeping(&self, namespace: &str) -> (Option<RunId>, Value) {
        let pruned = self.prune_on_heartbeat(namespace).unwrap_or_else(|e| {
            self.post_commit_failed("heartbeat_history_retention", &e);
            None
        });
        let reclaimed = self
            .reclaim_streams_on_heartbeat(namespace)
            .unwrap_or_else(|e| {
                self.post_commit_failed("heartbeat_stream_retention", &e);
                Value::Null
            });
        (pruned, reclaimed)
    }

    /// The namespace's elected heartbeat prunes at most one expired run.
    fn prune_on_heartbeat(&self, namespace: &str) -> Result<Option<RunId>, ApiError> {
        let ns = namespace.to_owned();
        let pruned = self
            .retention
            .on_heartbeat(namespace, |cutoff| {
                self.write(move |store| store.prune_one_expired_run(&ns, cutoff))
            })
            .map_err(|e| match e {
                crate::retention::RetentionError::Cache(e) => ApiError::Cache(e),
                crate::retention::RetentionError::Store(e) => ApiError::Store(e),
            })?;
        if pruned.is_some() {
            self.drift.invalidate();
        }
        Ok(pruned)
    }

    /// The namespace's elected heartbeat reclaims at most 10 expired
    /// workflow streams and 500 of their items: `{streams, items}` when
    /// this heartbeat was elected, `null` otherwise.
    fn reclaim_streams_on_heartbeat(&self, namespace: &str) -> Result<Value, ApiError> {
        let ns = namespace.to_owned();
        let reclaimed = self
            .stream_retention
            .on_heartbeat(namespace, |now, max_streams, max_items| {
                self.write(move |store| {
                    store.reclaim_expired_streams(&ns, now, max_streams, max_items)
                })
            })
            .map_err(|e| match e {
                crate::retention::RetentionError::Cache(e) => ApiError::Cache(e),
                crate::retention::RetentionError::Store(e) => ApiError::Store(e),
            })?;
        Ok(match reclaimed {
            Some(r) => json!({ "streams": r.streams, "items": r.items }),
            None => Value::Null,
        })
    }

    /// `DELETE /api/worker/registrations/{id}`.
    pub fn deregister_worker(&self, namespace: &str, worker_id: &str) -> Result<Value, ApiError> {
        let (ns, worker) = (namespace.to_owned(), worker_id.to_owned());
        let recovered = self
            .write(move |s| s.deregister_worker(&ns, &worker))?
            .ok_or_else(|| ApiError::WorkerNotFound(worker_id.to_owned()))?;
        Ok(json!({
            "worker_id": worker_id, "outcome": "deregistered",
            "recovered_workflow_task_count": recovered,
        }))
    }

    /// Whether a waiting poll should answer now: its client went away or
    /// the node is shutting down (long polls then answer empty).
    pub(crate) fn poll_over(&self, poll: &PollSpec) -> bool {
        poll.is_abandoned() || self.waiters.stopping()
    }

    /// A long poll's first step: admission, its request id, the durable
    /// binding and a first pass; a poll that found nothing comes back
    /// [`PollStep::Waiting`] with its wake subscription and wait slot.
    pub(crate) fn begin_poll(&self, kind: TaskKind, poll: &PollSpec) -> Result<PollStep, ApiError> {
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        // Cache admission per caller: a registered worker's polls keep their
        // keys; an unknown caller's only within the node's small budget
        // (past it the poll is served without keys; a repeat of its id
        // still finds the task it leased through the durable binding in
        // the store).
        let look = self.first_look(kind, poll)?;
        let known = look.registration.as_ref().is_some_and(|r| r.0);
        let keyed = known || self.unknown_polls.try_admit();
        if keyed {
            match self.polls(kind).begin(ns, queue, id, poll.wait)? {
                PollClaim::Fresh => {}
                repeat => return self.repeated_poll(kind, poll, repeat),
            }
        }
        match self.first_pass(kind, poll, keyed, look) {
            Ok(ControlFlow::Continue(wait)) => Ok(PollStep::Waiting(wait)),
            Ok(ControlFlow::Break(task)) => self
                .end_poll(kind, poll, keyed, Ok(task))
                .map(PollStep::Answered),
            Err(e) => self
                .end_poll(kind, poll, keyed, Err(e))
                .map(PollStep::Answered),
        }
    }

    /// The first step of a repeat of a poll request id: the answer the
    /// first poll stored, replayed, or (that poll still running) a wait
    /// for it.
    fn repeated_poll(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        repeat: PollClaim,
    ) -> Result<PollStep, ApiError> {
        match repeat {
            PollClaim::Replay(bytes) => {
                let answer = self.replayed(kind, poll, &bytes)?;
                Ok(PollStep::Answered(self.observed(kind, poll, answer)?))
            }
            PollClaim::InFlight => {
                // A repeat of a poll still running waits like a poll: it
                // holds a wait slot, so repeats cannot pile up.
                let slot = self.wait_slot(kind, poll)?;
                let deadline = Instant::now() + poll.wait + self.config.poll_ttls.pending_slack;
                Ok(PollStep::InFlight { deadline, slot })
            }
            PollClaim::Fresh => Err(ApiError::Internal("a fresh poll is no repeat".into())),
        }
    }

    /// What a poll's first step reads, in one read transaction: the
    /// worker's registration (whether it is known, and its cohort, which
    /// is set on `poll` here), the durable binding of its request id, and
    /// the first pass's recovery scans. Read one by one they were four
    /// read transactions, and on SQLite each starts on a page cache the
    /// last commit emptied, so it reads the same index pages again
    /// (docs/performance.md, session 16).
    fn first_look(&self, kind: TaskKind, poll: &PollSpec) -> Result<FirstLook, ApiError> {
        self.first_look_by(kind, poll, Reading::Wait)?
            .ok_or_else(|| ApiError::Internal("a waiting read answered nothing".into()))
    }

    /// [`Engine::first_look`], read as `how` says (`None`: not now).
    fn first_look_by(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        how: Reading,
    ) -> Result<Option<FirstLook>, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        let idle_before = self.config.worker_sweep.idle_before_ms(crate::unix_ms());
        let look = self.read_by(how, |s| {
            let registration = s.worker_poll_registration(ns, &poll.worker_id, idle_before)?;
            // The poll's cohort, when it names no build: its registration's.
            let _ = poll
                .registered_build
                .set(registration.as_ref().and_then(|(_, build)| build.clone()));
            let bound = s.leased_by_poll_request(kind, ns, queue, &poll.poll_request_id)?;
            let recovery = self.recovery_scan(s, kind, ns, queue, poll.cohort())?;
            Ok(FirstLook {
                registration,
                bound,
                recovery,
            })
        })?;
        Ok(look)
    }

    /// A held wait slot of `kind`'s pool, or the 429 naming the cap.
    fn wait_slot(&self, kind: TaskKind, poll: &PollSpec) -> Result<WaitSlot, ApiError> {
        match self.wait_pool(kind).admit(&poll.namespace)? {
            Ok(slot) => Ok(slot),
            Err(refusal) => Err(ApiError::WaitCapacity {
                refusal,
                task_kind: wire_task_kind(kind),
                task_queue: poll.task_queue.clone(),
            }),
        }
    }

    /// The durable binding, then one pass; `Continue` with what to wait
    /// with when both found nothing and the poll may wait.
    fn first_pass(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        keyed: bool,
        look: FirstLook,
    ) -> Result<ControlFlow<Option<LeasedTask>, PollWait>, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        // The durable binding: a task still leased to this id is this poll's answer.
        if look.bound.is_some() {
            return Ok(ControlFlow::Break(look.bound));
        }
        // Subscribed before the first look: work committed between that
        // look and the wait still wakes this poll.
        let mut wake =
            self.poll_wakes
                .subscribe(crate::polling::wake_channel(ns, queue, kind.as_str()));
        if let Some(task) = self.pass_after(kind, poll, look.recovery)? {
            // The wake-up meant for this task, if one is pending, is spent.
            wake.claimed();
            if task.more_ready {
                wake.wake_all();
            }
            return Ok(ControlFlow::Break(Some(task)));
        }
        if poll.wait.is_zero() || !self.polling_cache_available() {
            return Ok(ControlFlow::Break(None));
        }
        let slot = self.wait_slot(kind, poll)?;
        Ok(ControlFlow::Continue(PollWait {
            wake,
            channel: kind.as_str(),
            deadline: Instant::now() + poll.wait,
            keyed,
            _slot: slot,
        }))
    }

    /// A long poll's last step: stores what it found for replay (a failed
    /// poll drops its pending key, so a retry runs afresh) and answers.
    pub(crate) fn end_poll(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        keyed: bool,
        found: Result<Option<LeasedTask>, ApiError>,
    ) -> Result<PollAnswer, ApiError> {
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        let reads = match &found {
            Ok(Some(task)) => poll.take_lease_reads(task.task_id),
            _ => None,
        };
        if !keyed {
            return self.answer_with(found?, poll.history_page_size, reads);
        }
        let polls = self.polls(kind);
        let task = match found {
            Ok(task) => task,
            Err(e) => {
                let _ = polls.abandon(ns, queue, id);
                return Err(e);
            }
        };
        let task_id = task.as_ref().map(|t| t.task_id);
        let answer = self.answer_with(task, poll.history_page_size, reads);
        self.keep_answer(kind, poll, task_id, answer)
    }

    /// A keyed poll's end once its answer is rendered: the replay key
    /// stored (naming the task it leased, `task_id`) and the answer
    /// recorded in the queue's poll diagnostics.
    fn keep_answer(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        task_id: Option<i64>,
        answer: Result<PollAnswer, ApiError>,
    ) -> Result<PollAnswer, ApiError> {
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        // The replay key keeps a reference, never the task: its size is
        // fixed however large the history is.
        let bytes = serde_json::to_vec(&ReplayRef { task_id }).unwrap_or_default();
        let polls = self.polls(kind);
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                // The poll's own error is the answer, whether or not its
                // replay key could be written.
                if let Err(error) = polls.finish(ns, queue, id, &bytes) {
                    tracing::warn!(%error, "a failed poll's replay key was not written");
                }
                return Err(e);
            }
        };
        // The replay key and the diagnostic in one round trip to a shared
        // cache, not one each (docs/performance.md, session 18).
        let (key, value) =
            WorkerPollDiagnostics::entry(ns, queue, &observation(kind, poll, &answer));
        let diagnostic = CacheOp::Put {
            key: &key,
            value: &value,
            ttl: WorkerPollDiagnostics::TTL,
        };
        // A poll that leased a task has committed its claim: an answer lost
        // to a cache error would leave the task leased to nobody until the
        // lease ends. The worker gets its task; without the replay key a
        // repeat of the request id finds it through the store's durable
        // binding once the pending key is gone (dropped here, or at its
        // TTL). An empty answer loses nothing either way.
        if let Err(error) = polls.finish_with(ns, queue, id, &bytes, Some(diagnostic)) {
            if task_id.is_some() {
                self.post_commit_failed("poll_replay_key", &error);
            } else {
                tracing::warn!(%error, "an empty poll's replay key was not written");
            }
            let _ = polls.abandon(ns, queue, id);
        }
        Ok(answer)
    }

    /// Records a keyed poll's answer in the queue's poll diagnostics.
    fn observed(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        answer: PollAnswer,
    ) -> Result<PollAnswer, ApiError> {
        let seen = observation(kind, poll, &answer);
        self.diagnostics
            .record(&poll.namespace, &poll.task_queue, &seen)?;
        Ok(answer)
    }

    /// A poll's answer: the task in the protocol's shape, or none.
    fn answer(
        &self,
        task: Option<LeasedTask>,
        page_size: usize,
        replayed: bool,
    ) -> Result<PollAnswer, ApiError> {
        self.answer_by(task, page_size, replayed, None, Reading::Wait)?
            .map_err(|_| ApiError::Internal("a waiting read answered nothing".into()))
    }

    /// A fresh (not replayed) poll's answer, from what its claim read
    /// (`reads`) where it read it.
    fn answer_with(
        &self,
        task: Option<LeasedTask>,
        page_size: usize,
        reads: Option<LeaseReads>,
    ) -> Result<PollAnswer, ApiError> {
        self.answer_by(task, page_size, false, reads, Reading::Wait)?
            .map_err(|_| ApiError::Internal("a waiting read answered nothing".into()))
    }

    /// [`Engine::answer`], its reads taken from `reads` (the claim's) or
    /// read as `how` says: `Err(task)` when they cannot be read now.
    fn answer_by(
        &self,
        task: Option<LeasedTask>,
        page_size: usize,
        replayed: bool,
        reads: Option<LeaseReads>,
        how: Reading,
    ) -> Result<Result<PollAnswer, Option<LeasedTask>>, ApiError> {
        let status = if task.is_some() { "leased" } else { "timeout" };
        let workflow = task.as_ref().is_some_and(|t| t.kind == TaskKind::Workflow);
        let rendered = match task {
            Some(task) => match self.render_task(task, page_size, reads, how)? {
                Ok(rendered) => Some(rendered),
                Err(task) => return Ok(Err(Some(task))),
            },
            None => None,
        };
        // A workflow task: written, its events copied from their stored
        // text (`task_answer`), the bytes of the tree below.
        if let Some((fields, Some(page))) = &rendered {
            let bytes = task_answer::write_workflow_answer(
                fields,
                page,
                &WORKFLOW_TASK_CAPABILITIES_JSON,
                replayed,
            )?;
            return Ok(Ok(PollAnswer::Written { bytes, replayed }));
        }
        let task = match rendered {
            Some((fields, _)) => Value::Object(fields),
            None => Value::Null,
        };
        // Built by moving the task in: `json!` would copy its whole tree
        // (history included) through a serializer.
        let mut answer = serde_json::Map::new();
        answer.insert("task".into(), task);
        answer.insert("poll_status".into(), status.into());
        if workflow {
            answer.insert("server_capabilities".into(), workflow_task_capabilities());
        }
        if replayed {
            answer.insert("replayed".into(), true.into());
        }
        Ok(Ok(PollAnswer::Tree(Value::Object(answer))))
    }

    /// The answer replayed from a replay key: the task it names, read
    /// again from the store while it is still leased to this poll.
    fn replayed(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        bytes: &[u8],
    ) -> Result<PollAnswer, ApiError> {
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
        self.answer(task, poll.history_page_size, true)
    }

    /// The latest wake signal of a poll's channel (a waiting poll on a node
    /// with peers looks at it every [`SIGNAL_LOOK`], in case a relay
    /// message was lost).
    pub(crate) fn wake_signal(
        &self,
        poll: &PollSpec,
        channel: &str,
    ) -> Result<Option<Vec<u8>>, ApiError> {
        Ok(self
            .signals
            .version(&poll.namespace, &poll.task_queue, channel)?)
    }

    /// One pass of a waiting poll: capped recovery scans, then one lease
    /// under admission, unless the scans found nothing to recover and no
    /// task of the poll's kind is ready in its queue. The poll subscribed
    /// to its wake-ups before it first looked, so a task made ready after
    /// this read wakes it again; a claim transaction that could only find
    /// nothing (an idle recheck, every 500 ms a waiting poll) is not run.
    fn pass(&self, kind: TaskKind, poll: &PollSpec) -> Result<Option<LeasedTask>, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        let (scan, ready) = self.read(|s| {
            let scan = self.recovery_scan(s, kind, ns, queue, poll.cohort())?;
            Ok((scan, s.queue_has_ready(kind, ns, queue)?))
        })?;
        if !ready && scan.is_empty() {
            return Ok(None);
        }
        self.pass_after(kind, poll, scan)
    }

    /// [`Engine::pass`] after its recovery scans' reads (`scan`).
    fn pass_after(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        scan: RecoveryScan,
    ) -> Result<Option<LeasedTask>, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        self.recover(kind, ns, queue, poll.cohort(), scan)?;
        let Some((_lock, permit)) = self.enter_claim(kind, poll, Duration::from_millis(200))?
        else {
            return Ok(None);
        };
        let claimed = self.claim(self.claim_transaction(kind, poll))?;
        permit.claimed(claimed.0.is_some());
        drop(permit);
        self.claimed(kind, poll, claimed)
    }

    /// What a claim holds while it runs, or `None` when it may not run
    /// now: its queue's dispatch lock (waited for up to `lock_patience`),
    /// a dispatch within the queue's budget, and the claim gate's permit.
    /// The lane's pass and the async one ([`Engine::claim_now`]) both enter
    /// here, so they admit claims alike.
    pub(super) fn enter_claim(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        lock_patience: Duration,
    ) -> Result<Option<(crate::admission::QueueLock, crate::polling::ClaimPermit<'_>)>, ApiError>
    {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        let Some(lock) = self.queues.lock(ns, queue, kind.as_str(), lock_patience)? else {
            return Ok(None);
        };
        if !self.queues.has_budget(ns, queue, kind.as_str())? {
            return Ok(None);
        }
        // One claim probe at a time against SQLite, across nodes (off on
        // PostgreSQL, whose claims run side by side: see `Engine::claim`).
        let Some(permit) = self.claim_gate.enter(CLAIM_GATE_PATIENCE)? else {
            return Ok(None);
        };
        Ok(Some((lock, permit)))
    }

    /// A pass's claim transaction: the lease of the next task the poll
    /// may take (its cohort's, its session's), with what goes with it.
    /// Also the tasks' queues of activities it failed on the way, and on
    /// the one SQLite writer a leased workflow task's first page and
    /// pending cancellation ([`LeaseReads`]; on PostgreSQL they would be
    /// round trips inside the claim's transaction, so a reader reads them).
    fn claim_transaction(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
    ) -> impl Fn(&crate::store::Store) -> Result<Claimed, crate::store::Error> + Clone + Send + 'static
    {
        let (ns_owned, queue_owned) = (poll.namespace.clone(), poll.task_queue.clone());
        let (owner, poll_id) = (poll.worker_id.clone(), poll.poll_request_id.clone());
        let lease = self.config.task_lease;
        let cohort = poll.cohort().map(str::to_owned);
        let page = self
            .shared_store()
            .has_one_writer()
            .then(|| self.history_limit(poll.history_page_size));
        move |s| {
            // A draining cohort claims no new task: `lease_task_for` finds
            // none for it. An activity whose worker session can never run
            // it (closed, failed, expired, missing) fails here,
            // non-retryably, and the pass leases the next task; at most a
            // few per pass.
            let mut failed_runs = Vec::new();
            for _ in 0..SESSION_FAILURES_PER_PASS {
                let mut task = s.lease_task_for(
                    kind,
                    &ns_owned,
                    &queue_owned,
                    &owner,
                    &poll_id,
                    lease,
                    cohort.as_deref(),
                )?;
                if let Some(t) = task.as_ref() {
                    if let Some(reason) = t.session_refused {
                        let fence = ActivityFence {
                            lease_owner: &owner,
                            activity_attempt_id: &attempt_id(t.task_id, t.attempt),
                        };
                        let failure = AttemptFailure {
                            message: format!(
                                "The activity's worker session cannot run it ({reason})."
                            ),
                            exception_type: Some(reason.to_owned()),
                            exception_class: Some("WorkerSessionUnavailable".to_owned()),
                            non_retryable: true,
                            details: None,
                        };
                        s.fail_activity_attempt(t.task_id, fence, &failure)?;
                        failed_runs.push(s.run(RunId(t.run_id))?.task_queue);
                        continue;
                    }
                }
                let mut reads = None;
                if let Some(task) = task.as_mut().filter(|t| t.kind == TaskKind::Workflow) {
                    let run = RunId(task.run_id);
                    s.bind_run_cohort(run, cohort.as_deref())?;
                    let replay = s.sticky_lease(run, &owner, cohort.as_deref())?;
                    task.sticky_replay_mode = Some(replay.as_str());
                    if let Some(limit) = page {
                        reads = Some(LeaseReads {
                            task_id: task.task_id,
                            page: s.stored_history_page(run, 0, limit)?,
                            cancellation: s.pending_cancellation(run)?,
                        });
                    }
                }
                return Ok((task, failed_runs, reads));
            }
            Ok((None, failed_runs, None))
        }
    }

    /// After a claim's commit: the queues of the activities it failed are
    /// woken and a dispatched task is counted against its queue's budget.
    fn claimed(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        (task, failed_runs, reads): Claimed,
    ) -> Result<Option<LeasedTask>, ApiError> {
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        if reads.is_some() {
            *poll.lease_reads.lock().unwrap_or_else(|e| e.into_inner()) = reads;
        }
        for run_queue in &failed_runs {
            self.wake(ns, run_queue, TaskKind::Workflow.as_str());
        }
        let counted = if task.is_some() {
            &self.claims_leased
        } else {
            &self.claims_empty
        };
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if task.is_some() {
            self.queues.record_dispatch(ns, queue, kind.as_str())?;
        }
        Ok(task)
    }

    /// The reads of a pass's capped recovery scans, in the poll's read
    /// transaction: for workflow polls, whether timers of the polled queue
    /// and the poller's build-id cohort are due; for both kinds, the
    /// expired leases of that kind.
    fn recovery_scan(
        &self,
        s: &crate::store::Store,
        kind: TaskKind,
        namespace: &str,
        task_queue: &str,
        cohort: Option<&str>,
    ) -> Result<RecoveryScan, crate::store::Error> {
        let limits = self.config.poller;
        let (due_timers, scan_limit) = match kind {
            TaskKind::Workflow => (
                s.has_due_timers(namespace, task_queue, cohort, self.due_timer_grace_ms())?,
                limits.expired_workflow_task_recovery_scan_limit,
            ),
            TaskKind::Activity => (
                false,
                self.config
                    .activity_poller
                    .expired_activity_task_recovery_scan_limit,
            ),
        };
        Ok(RecoveryScan {
            due_timers,
            expired: s.expired_leases(kind, scan_limit)?,
        })
    }

    /// How long past due a timer must be before a poll pass fires it: a
    /// driver that delivers timers (SQS) gets a grace first.
    fn due_timer_grace_ms(&self) -> i64 {
        i64::try_from(self.queue.due_timer_grace().as_millis()).unwrap_or(i64::MAX)
    }

    /// The pass's capped recovery, from what its scans read (`scan`): the
    /// due timers of the polled queue and the poller's build-id cohort are
    /// fired (workflow polls), and the expired leases returned to their
    /// queues. A lease another node is already recovering is skipped.
    fn recover(
        &self,
        kind: TaskKind,
        namespace: &str,
        task_queue: &str,
        cohort: Option<&str>,
        scan: RecoveryScan,
    ) -> Result<(), ApiError> {
        let limits = self.config.poller;
        if scan.due_timers {
            let grace = self.due_timer_grace_ms();
            let (ns, queue) = (namespace.to_owned(), task_queue.to_owned());
            let cohort = cohort.map(str::to_owned);
            let limit = limits.due_timer_recovery_scan_limit;
            if self
                .write(move |s| s.fire_due_timers(&ns, &queue, cohort.as_deref(), limit, grace))?
                > 0
            {
                self.wake(namespace, task_queue, TaskKind::Workflow.as_str());
            }
        }
        for task in scan.expired {
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
                self.wake(&ns, &queue, kind.as_str());
            }
        }
        Ok(())
    }

    /// A history page of at most `events` events, within the store's
    /// configured page bounds (events and bytes).
    pub(crate) fn history_limit(&self, events: usize) -> HistoryPageLimit {
        let configured = self.config.store.history_page;
        HistoryPageLimit {
            max_events: events.clamp(1, configured.max_events.max(1)),
            max_bytes: configured.max_bytes,
        }
    }

    /// A leased task in the protocol's shape, its reads read as `how`
    /// says: `Err(task)` when they cannot be read now.
    fn render_task(
        &self,
        mut task: LeasedTask,
        page_size: usize,
        reads: Option<LeaseReads>,
        how: Reading,
    ) -> Result<Result<RenderedTask, LeasedTask>, ApiError> {
        // The fields every task carries are moved out of `task` at the
        // end, once its reads are in (a read that cannot be read now hands
        // `task` back whole); the map sorts its keys, so the order of the
        // inserts does not change the answer's bytes.
        let mut out = Map::new();
        let mut history = None;
        match task.kind {
            TaskKind::Workflow => {
                let run = RunId(task.run_id);
                let limit = self.history_limit(page_size);
                // The page, a cooperative cancellation waiting for delivery
                // and (a repeated poll) the sticky claim as it stands now,
                // read in one read transaction.
                let sticky = task.sticky_replay_mode;
                let owner = &task.lease_owner;
                // Read by the claim, in the lease's transaction (a lease
                // always sets the sticky claim): nothing more to read.
                let claimed = reads.filter(|r| r.task_id == task.task_id);
                let read = match (claimed, sticky) {
                    (Some(reads), Some(replay)) => Some((reads.page, reads.cancellation, replay)),
                    _ => self.read_by(how, |s| {
                        let page = s.stored_history_page(run, 0, limit)?;
                        let cancellation = s.pending_cancellation(run)?;
                        let replay = match sticky {
                            Some(mode) => mode,
                            None => s.sticky_replay_of(run, owner)?.as_str(),
                        };
                        Ok((page, cancellation, replay))
                    })?,
                };
                let Some((page, cancellation, replay)) = read else {
                    return Ok(Err(task));
                };
                let total = task.history_length;
                let arguments = match page.events.first() {
                    Some(first) => task_answer::first_arguments(first)?,
                    None => Value::Null,
                };
                out.insert("workflow_task_attempt".into(), task.attempt.into());
                out.insert("payload_codec".into(), wire::codec(&arguments).into());
                out.insert("arguments".into(), arguments);
                // `history_events`: written from the page by `answer_by`.
                out.insert("total_history_events".into(), total.into());
                out.insert("last_history_sequence".into(), total.into());
                out.insert(
                    "next_history_page_token".into(),
                    page.next_sequence.map(wire::page_token).into(),
                );
                history = Some(page);
                out.insert("cancel_requested".into(), task.cancel_requested.into());
                // A cooperative cancellation waiting for delivery (1.20).
                if let Some(request) = cancellation {
                    out.insert(
                        "cancellation_request".into(),
                        self.cancellation_observed(&request),
                    );
                }
                out.insert("sticky_replay_mode".into(), replay.into());
                if let Some(update) = task.workflow_update_id {
                    out.insert("workflow_update_id".into(), update.to_string().into());
                }
            }
            TaskKind::Activity => {
                // The session the worker holds for it (the SDKs track it).
                let session = match task.worker_session.take() {
                    Some(session) => Some(session),
                    // Leased now without one: the task has no session.
                    None if task.session_settled => None,
                    // A repeated poll: the session as it stands now.
                    None => match self.read_by(how, |s| s.task_session(task.task_id))? {
                        Some(session) => session,
                        None => return Ok(Err(task)),
                    },
                };
                let activity = task
                    .activity
                    .ok_or_else(|| ApiError::Internal("activity task without activity".into()))?;
                let options = &activity.options;
                out.insert(
                    "activity_attempt_id".into(),
                    attempt_id(task.task_id, task.attempt).into(),
                );
                out.insert("attempt_number".into(), task.attempt.into());
                out.insert("activity_type".into(), activity.activity_type.into());
                out.insert(
                    "activity_execution_id".into(),
                    activity.activity_id.to_string().into(),
                );
                out.insert("sequence".into(), activity.sequence.into());
                out.insert(
                    "payload_codec".into(),
                    wire::codec(&activity.arguments).into(),
                );
                out.insert("arguments".into(), activity.arguments);
                for key in [
                    "retry_policy",
                    "start_to_close_timeout",
                    "schedule_to_close_timeout",
                    "heartbeat_timeout",
                ] {
                    out.insert(key.into(), options.get(key).cloned().unwrap_or(Value::Null));
                }
                if let Some(session) = session {
                    out.insert("worker_session".into(), session_wire(&session));
                }
            }
        }
        let common: [(&str, Value); 9] = [
            ("task_id", task.task_id.to_string().into()),
            ("task_kind", task.kind.as_str().into()),
            ("namespace", task.namespace.into()),
            ("task_queue", task.task_queue.into()),
            ("workflow_id", task.workflow_id.into()),
            ("run_id", wire::run_id(RunId(task.run_id)).into()),
            ("workflow_type", task.workflow_type.into()),
            ("lease_owner", task.lease_owner.into()),
            (
                "lease_expires_at",
                wire::timestamp(task.lease_expires_at_ms).into(),
            ),
        ];
        for (key, value) in common {
            out.insert(key.into(), value);
        }
        Ok(Ok((out, history)))
    }

    /// `POST /api/worker/workflow-tasks/{id}/complete`.
    pub fn complete_workflow_task(
        &self,
        task_id: &str,
        body: WorkflowTaskLease,
    ) -> Result<Value, ApiError> {
        let (task, attempt) = workflow_fence(task_id, &body)?;
        let commands = parse_commands(
            &self.config.request_limits,
            self.queue.name(),
            &body.commands,
        )?;
        // The steps that may block, named once for both paths.
        let steps = self.completion_steps(&body, &commands);
        let sticky = match sticky_claim(&body) {
            Some(claim) => Some(self.sticky_claim(task, &body.lease_owner, claim)?),
            None => None,
        };
        if steps.payload_references {
            let fields: Vec<String> = (0..body.commands.len())
                .map(|i| format!("commands.{i}"))
                .collect();
            let payloads: Vec<(&str, &Value)> = fields
                .iter()
                .map(String::as_str)
                .zip(&body.commands)
                .collect();
            self.verify_task_payload_references(task, &payloads)?;
        }
        let mut stream_cursors = Vec::new();
        if steps.message_streams {
            let fence = WorkflowTaskFence {
                lease_owner: &body.lease_owner,
                attempt,
            };
            let run = self.read(|s| s.fenced_workflow_run(task, fence))?;
            stream_cursors = self.check_message_stream_metadata(
                run,
                body.message_stream_cursors.as_ref(),
                body.message_stream_waits.as_ref(),
            )?;
        }
        if steps.service_call_options {
            self.check_service_call_starts(task, &commands)?;
        }
        let owner = body.lease_owner;
        if steps.upserts {
            let fence = WorkflowTaskFence {
                lease_owner: &owner,
                attempt,
            };
            let run = self.read(|s| s.run(s.fenced_workflow_run(task, fence)?))?;
            if run.status == crate::store::RunStatus::Running {
                match self.check_upserts(&run.namespace, &run.search_attributes, &commands) {
                    Ok(()) => {}
                    Err(ApiError::Boundary(
                        dwpolicy::boundary::BoundaryError::ValidationFailed {
                            message,
                            validation_errors,
                        },
                    )) => {
                        return self.fail_refused_upserts(
                            task_id,
                            task,
                            attempt,
                            owner,
                            message,
                            validation_errors,
                        );
                    }
                    Err(other) => return Err(other),
                }
            }
        }
        let completion = WorkflowCompletion {
            task,
            attempt,
            owner,
            commands,
            stream_cursors,
            sticky,
        };
        // A completion whose commands stay in its run commits beside other
        // writers (the run writer, on PostgreSQL); the store sends it on to
        // the ordinary writer if its run's close reaches another run.
        let beside = !steps.payload_references
            && !steps.message_streams
            && completion
                .commands
                .iter()
                .all(WorkflowCommand::stays_in_run);
        let order = run_write_order(&completion.commands);
        let transaction = completion.transaction(self.durable_state.clone());
        let written = if beside {
            self.write_run(order, transaction)?
        } else {
            self.write(transaction)?
        };
        self.workflow_task_completed(task_id, written)
    }

    /// [`Engine::complete_workflow_task`] on the calling (async) thread,
    /// awaiting the writer's commit without a blocking thread, when nothing
    /// on the way can block ([`Engine::completion_steps`] names no
    /// [`Blocking`](crate::server::fast_paths::Blocking) reason), with a
    /// sticky claim's run read on an idle reader ([`Engine::read_now`]).
    /// The same checks in the same order, the same transaction and answer.
    /// `Err(body)`: complete the ordinary way, on a blocking thread.
    pub async fn complete_workflow_task_now(
        &self,
        task_id: &str,
        body: WorkflowTaskLease,
    ) -> Result<Result<Value, ApiError>, WorkflowTaskLease> {
        // The steps below say so too; asked first so that a completion on
        // a node that never takes this path is not parsed twice.
        if !self.writes_from_async() {
            return Err(body);
        }
        let checked = workflow_fence(task_id, &body).and_then(|(task, attempt)| {
            Ok((
                task,
                attempt,
                parse_commands(
                    &self.config.request_limits,
                    self.queue.name(),
                    &body.commands,
                )?,
            ))
        });
        let (task, attempt, commands) = match checked {
            Ok(checked) => checked,
            Err(e) => return Ok(Err(e)),
        };
        if self.completion_steps(&body, &commands).blocking().is_some() {
            return Err(body);
        }
        let sticky = match sticky_claim(&body) {
            Some(claim) => {
                let Some(found) = self.read_now(|s| sticky_run(s, task)) else {
                    return Err(body);
                };
                match self.sticky_claim_of(&body.lease_owner, claim, Some(found)) {
                    Ok(claim) => Some(claim),
                    Err(e) => return Ok(Err(e)),
                }
            }
            None => None,
        };
        let completion = WorkflowCompletion {
            task,
            attempt,
            owner: body.lease_owner,
            commands,
            stream_cursors: Vec::new(),
            sticky,
        };
        Ok(async {
            let written = self
                .write_now(completion.transaction(self.durable_state.clone()))
                .await?;
            self.workflow_task_completed(task_id, written)
        }
        .await)
    }

    /// A workflow task completion's answer after its commit, once the
    /// queues it gave work to and the waits on its run are woken.
    fn workflow_task_completed(
        &self,
        task_id: &str,
        (completion, ns, queue, run): WorkflowCompleted,
    ) -> Result<Value, ApiError> {
        let completion = match completion {
            Ok(completion) => completion,
            Err(refused) => {
                self.durable_state.record(&ns, &refused);
                return Err(ApiError::DurableState(refused));
            }
        };
        let (activity, workflow) = (TaskKind::Activity.as_str(), TaskKind::Workflow.as_str());
        let mut wakes: Vec<(&str, &str)> = completion
            .activity_queues
            .iter()
            .map(|q| (q.as_str(), activity))
            .collect();
        if completion.workflow_task_queued {
            wakes.push((queue.as_str(), workflow));
        }
        // Children started, and a parent this run's end resumed.
        wakes.extend(
            completion
                .workflow_queues
                .iter()
                .map(|q| (q.as_str(), workflow)),
        );
        // A driver that delivers timers sends the ones this task armed.
        self.queue.timers_armed(&completion.timers);
        // The queues' pollers, and the updates and service calls waiting
        // on this run, woken in one round trip to a shared cache.
        self.wake_with_run(&ns, &wakes, run);
        Ok(json!({
            "task_id": task_id, "outcome": "completed",
            "run_status": completion.run_status.as_str(),
            "new_events": completion.new_events,
            "structural_limit": completion.structural_limit,
        }))
    }

    /// The memo and search attributes a `start_service_operation` gives its
    /// workflow meet a start's request-boundary checks, and its search
    /// attributes must be registered (with their types) in the namespace
    /// the workflow starts in: a `422` naming `commands.<i>.<field>`
    /// otherwise, before anything of the completion is written.
    fn check_service_call_starts(
        &self,
        task: i64,
        commands: &[WorkflowCommand],
    ) -> Result<(), ApiError> {
        if !service_starts_with_options(commands) {
            return Ok(());
        }
        let starts: Vec<_> = commands
            .iter()
            .enumerate()
            .filter_map(|(i, command)| match command {
                WorkflowCommand::StartServiceOperation {
                    namespace,
                    memo,
                    search_attributes,
                    ..
                } if memo.is_some() || search_attributes.is_some() => {
                    Some((i, namespace, memo, search_attributes))
                }
                _ => None,
            })
            .collect();
        if starts.is_empty() {
            return Ok(());
        }
        let (caller_namespace, _) = self.read(move |s| s.task_queue_of(task))?;
        let mut v = self.config.request_limits.validator();
        let mut problems = Vec::new();
        for (i, namespace, memo, search_attributes) in starts {
            let target = namespace.as_deref().unwrap_or(&caller_namespace);
            if let Some(memo) = memo {
                v.memo(&Value::Object(memo.clone()));
            }
            if let Some(attributes) = search_attributes {
                v.search_attributes(attributes);
                for (_, problem) in self.unregistered_search_attributes(target, attributes)? {
                    problems.push((format!("commands.{i}.search_attributes"), problem));
                }
            }
        }
        finish_with(v, &[], &problems)?;
        Ok(())
    }

    /// A completion whose `upsert_search_attributes` the namespace cannot
    /// take (an unregistered or system name, a value of another type, a
    /// limit): nothing of it is written and the server fails the workflow
    /// task itself, as a worker's `fail` would (a `WorkflowTaskFailed`
    /// event naming the problems; the task comes back after its backoff, so
    /// registering the attribute lets the retry through). The answer is
    /// `200` with `outcome: failed`, the problems and `next_attempt_at`: a
    /// refusal status would stop a Rust SDK worker, which treats any refused
    /// completion as fatal, while the Python SDK fails the task on one.
    fn fail_refused_upserts(
        &self,
        task_id: &str,
        task: i64,
        attempt: u64,
        owner: String,
        message: String,
        validation_errors: std::collections::BTreeMap<String, Vec<String>>,
    ) -> Result<Value, ApiError> {
        let problems = validation_errors
            .values()
            .flatten()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ");
        let failure = json!({
            "message": format!("The workflow task's search-attribute upserts were refused: {problems}"),
            "type": "SearchAttributeUpsertRefused",
            "reason": "validation_failed",
        });
        // The retry is due after the backoff: no poll is woken now.
        let retry_at = self.write(move |store| {
            let fence = WorkflowTaskFence {
                lease_owner: &owner,
                attempt,
            };
            // The SDKs drop a failed task's run from their cache.
            store.unbind_sticky(store.run_of_task(task)?)?;
            store.fail_workflow_task_attempt(task, fence, &failure)
        })?;
        Ok(json!({
            "task_id": task_id, "outcome": "failed",
            "reason": "validation_failed", "message": message,
            "validation_errors": validation_errors,
            "next_attempt_at": wire::timestamp(retry_at),
        }))
    }

    /// A completion's `sticky_cache` claim, checked: an object naming the
    /// task's lease owner, its run and workflow, a build id and a TTL of 1
    /// to 3,600 seconds; each problem is named `sticky_cache.<field>`.
    fn sticky_claim(
        &self,
        task: i64,
        lease_owner: &str,
        claim: &Value,
    ) -> Result<crate::store::sticky::StickyClaim, ApiError> {
        // An unknown task is refused by the completion itself, with the
        // fence's own error: only a task that exists is compared.
        let found = self.read(|s| sticky_run(s, task)).ok();
        self.sticky_claim_of(lease_owner, claim, found)
    }

    /// The sticky claim's checks against the task's run and workflow id
    /// (`found`: `None` for a task that does not exist).
    fn sticky_claim_of(
        &self,
        lease_owner: &str,
        claim: &Value,
        found: Option<(RunId, String)>,
    ) -> Result<crate::store::sticky::StickyClaim, ApiError> {
        let mut checks = Checks::default();
        let max_ttl = crate::registry::StickyExecution::MAX_TTL_SECONDS;
        if !claim.is_object() {
            checks.problem(
                "sticky_cache",
                "The sticky_cache field must be an object (worker_id, workflow_id, run_id, build_id, ttl_seconds) or null.",
            );
            finish_with(
                self.config.request_limits.validator(),
                &[],
                &checks.problems,
            )?;
        }
        let text = |field: &str| claim.get(field).and_then(Value::as_str).map(str::to_owned);
        let worker_id = text("worker_id").unwrap_or_default();
        if worker_id != lease_owner {
            checks.problem(
                "sticky_cache.worker_id",
                "The sticky_cache.worker_id field must name the task's lease owner (the worker completing it).",
            );
        }
        let build_id = match claim.get("build_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(b))
                if !b.trim().is_empty()
                    && b.chars().count() <= dwpolicy::boundary::MAX_NAME_CHARS =>
            {
                Some(b.trim().to_owned())
            }
            Some(_) => {
                checks.problem(
                    "sticky_cache.build_id",
                    format!("The sticky_cache.build_id field must be null or a non-empty string of at most {} characters.", dwpolicy::boundary::MAX_NAME_CHARS),
                );
                None
            }
        };
        let ttl = claim
            .get("ttl_seconds")
            .and_then(Value::as_u64)
            .filter(|t| (1..=max_ttl).contains(t));
        if ttl.is_none() {
            checks.problem(
                "sticky_cache.ttl_seconds",
                format!("The sticky_cache.ttl_seconds field must be an integer from 1 to {max_ttl} (the worker's cache TTL)."),
            );
        }
        if let Some((run, workflow_id)) = found {
            if text("run_id").as_deref() != Some(wire::run_id(run).as_str()) {
                checks.problem(
                    "sticky_cache.run_id",
                    "The sticky_cache.run_id field must name the run of the task being completed.",
                );
            }
            if text("workflow_id").as_deref() != Some(workflow_id.as_str()) {
                checks.problem(
                        "sticky_cache.workflow_id",
                        "The sticky_cache.workflow_id field must name the workflow of the task being completed.",
                    );
            }
        }
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        Ok(crate::store::sticky::StickyClaim {
            worker_id,
            build_id,
            ttl_ms: i64::try_from(ttl.unwrap_or(1))
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
            hold_ms: self.config.sticky.hold_ms(),
        })
    }

    /// What a registration acknowledgement carries as `server_capabilities`
    /// (the Rust SDK confirms its sticky cache there).
    fn registration_capabilities(&self) -> Value {
        json!({
            "sticky_execution": self.sticky_capability(),
            "local_activities": { "supported": true, "command": "record_local_activity" },
            "worker_sessions": worker_sessions_capability(),
            // Root cooperative cancellation (`server::cancellation`): the
            // Rust SDK's cooperative worker checks it here, and the Nexus
            // bridge (a delivery at a Nexus call reaches the linked run).
            "cooperative_cancellation": true,
            "nexus_cooperative_cancellation": true,
            "nexus_cooperative_cancellation_binding_kinds":
                NEXUS_BINDING_KINDS,
        })
    }

    /// The sticky-execution capability as discovery and registration
    /// advertise it.
    pub(crate) fn sticky_capability(&self) -> Value {
        json!({
            "supported": true,
            "implementation": "run_affinity_to_caching_worker",
            "schedule_to_start_timeout_ms": self.config.sticky.hold_ms(),
            "max_ttl_seconds": crate::registry::StickyExecution::MAX_TTL_SECONDS,
            "replay_modes": ["sticky_hit_expected", "forced_cold_replay", "cold_replay"],
        })
    }

    /// `POST /api/worker/workflow-tasks/{id}/fail`: a task that had nothing
    /// to do ends quietly; any other failure is recorded and the task comes
    /// back after a backoff.
    pub fn fail_workflow_task(
        &self,
        task_id: &str,
        body: WorkflowTaskLease,
    ) -> Result<Value, ApiError> {
        let (task, attempt) = workflow_fence(task_id, &body)?;
        let failure = body.failure.unwrap_or(Value::Null);
        let waiting = failure.get("type").and_then(Value::as_str) == Some(WAITING_FOR_HISTORY);
        let owner = body.lease_owner;
        let (ns, queue, outcome) = self.write(move |store| {
            let fence = WorkflowTaskFence {
                lease_owner: &owner,
                attempt,
            };
            let home = store.task_home(task)?;
            let (ns, queue) = (home.namespace, home.task_queue);
            let outcome = if waiting {
                Err(store.release_waiting_workflow_task(task, fence)?)
            } else {
                // The SDKs drop a failed task's run from their cache.
                store.unbind_sticky(home.run)?;
                Ok(store.fail_workflow_task_attempt(task, fence, &failure)?)
            };
            Ok((ns, queue, outcome))
        })?;
        match outcome {
            Err(queued) => {
                if queued {
                    self.wake(&ns, &queue, TaskKind::Workflow.as_str());
                }
                Ok(json!({ "task_id": task_id, "outcome": "released" }))
            }
            Ok(retry_at) => Ok(json!({
                "task_id": task_id, "outcome": "failed",
                "next_attempt_at": wire::timestamp(retry_at),
            })),
        }
    }

    /// `POST /api/worker/workflow-tasks/{id}/heartbeat`: renews the lease.
    pub fn heartbeat_workflow_task(
        &self,
        task_id: &str,
        body: WorkflowTaskLease,
    ) -> Result<Value, ApiError> {
        let (task, attempt) = workflow_fence(task_id, &body)?;
        let lease_ms = i64::try_from(self.config.task_lease.as_millis()).unwrap_or(i64::MAX);
        let owner = body.lease_owner;
        let owner_echo = owner.clone();
        let (until, run_status, run) = self.write(move |store| {
            let fence = WorkflowTaskFence {
                lease_owner: &owner,
                attempt,
            };
            let until = store.heartbeat_workflow_task(task, fence, lease_ms)?;
            let run = store.fenced_workflow_run(task, fence)?;
            Ok((until, store.run(run)?.status, run))
        })?;
        let cancellation = self.cancellation_observation(run)?;
        // `renewed` with the fence echoed is what the SDK's payload
        // observer confirms before it hydrates externally stored payloads;
        // the Rust SDK also checks the task is still leased and its run
        // active before it runs another local activity attempt.
        Ok(json!({
            "task_id": task_id, "heartbeat_recorded": true, "renewed": true,
            "lease_owner": owner_echo, "workflow_task_attempt": attempt,
            "lease_expires_at": wire::timestamp(until),
            "task_status": "leased", "reason": null,
            "run_status": run_status.as_str(),
            "cancellation_request": cancellation,
        }))
    }

    /// `POST /api/worker/workflow-tasks/{id}/history`: the next history page.
    pub fn workflow_task_history(
        &self,
        task_id: &str,
        body: WorkflowTaskLease,
    ) -> Result<Value, ApiError> {
        let (task, attempt) = workflow_fence(task_id, &body)?;
        let token = body.next_history_page_token.clone().unwrap_or_default();
        let offset = wire::parse_page_token(&token)
            .ok_or_else(|| ApiError::InvalidPageToken(token.clone()))?;
        let fence = WorkflowTaskFence {
            lease_owner: &body.lease_owner,
            attempt,
        };
        let limit = self.history_limit(DEFAULT_HISTORY_PAGE);
        let (page, total) = self.read(|store| {
            let run = store.fenced_workflow_run(task, fence)?;
            Ok((
                store.history_page(run, offset, limit)?,
                store.run(run)?.history_length,
            ))
        })?;
        // The Rust SDK's sticky replay checks the page is its own attempt's.
        Ok(json!({
            "task_id": task_id, "workflow_task_attempt": attempt,
            "history_events": page.events.iter().map(wire::event).collect::<Vec<_>>(),
            "total_history_events": total,
            "next_history_page_token": page.next_sequence.map(wire::page_token),
        }))
    }

    /// `POST /api/worker/activity-tasks/{id}/complete` or `…/fail`.
    pub fn report_activity(
        &self,
        task_id: &str,
        failed: bool,
        body: ActivityReport,
    ) -> Result<Value, ApiError> {
        let task = activity_task(&self.config, task_id, &body)?;
        let named_payloads = self.report_steps(&body).payload_references;
        if named_payloads {
            self.verify_task_payload_references(task, &[("result", &body.result)])?;
        }
        let attempt_id = body.activity_attempt_id.clone();
        // A report writes its own run only, so it commits beside other
        // writers (the run writer, on PostgreSQL) unless its result names
        // external payloads, whose references other runs share.
        let report = activity_report(task, failed, body);
        let written = if named_payloads {
            self.write(report)?
        } else {
            self.write_run(RunWriteOrder::Activities, report)?
        };
        self.activity_reported(task_id, attempt_id, written)
    }

    /// [`Engine::report_activity`] on the calling (async) thread, awaiting
    /// the writer's commit without a blocking thread, when nothing on the
    /// way can block ([`Engine::report_steps`] names no
    /// [`Blocking`](crate::server::fast_paths::Blocking) reason): the same
    /// checks, transaction and answer. `Err(body)`: report the ordinary
    /// way, on a blocking thread.
    pub async fn report_activity_now(
        &self,
        task_id: &str,
        failed: bool,
        body: ActivityReport,
    ) -> Result<Result<Value, ApiError>, ActivityReport> {
        if self.report_steps(&body).blocking().is_some() {
            return Err(body);
        }
        Ok(async {
            let task = activity_task(&self.config, task_id, &body)?;
            let attempt_id = body.activity_attempt_id.clone();
            let written = self.write_now(activity_report(task, failed, body)).await?;
            self.activity_reported(task_id, attempt_id, written)
        }
        .await)
    }

    /// An activity report's answer after its commit, once the queue it gave
    /// work to is woken.
    fn activity_reported(
        &self,
        task_id: &str,
        attempt_id: String,
        (outcome, ns, queue): ActivityReported,
    ) -> Result<Value, ApiError> {
        match &outcome {
            AttemptOutcome::Completed | AttemptOutcome::Failed => {
                self.wake(&ns, &queue.1, TaskKind::Workflow.as_str());
            }
            AttemptOutcome::RetryScheduled { .. } => {
                self.wake(&ns, &queue.0, TaskKind::Activity.as_str());
            }
            AttemptOutcome::RunClosed | AttemptOutcome::Abandoned => {}
        }
        let mut out =
            serde_json::to_value(&outcome).map_err(|e| ApiError::Internal(e.to_string()))?;
        out["task_id"] = task_id.into();
        out["activity_attempt_id"] = attempt_id.into();
        if let AttemptOutcome::RetryScheduled {
            next_attempt_at_ms, ..
        } = outcome
        {
            out["next_attempt_at"] = wire::timestamp(next_attempt_at_ms).into();
        }
        Ok(out)
    }

    /// `POST /api/worker/activity-tasks/{id}/heartbeat`: renews the attempt's lease.
    pub fn heartbeat_activity(
        &self,
        task_id: &str,
        body: ActivityReport,
    ) -> Result<Value, ApiError> {
        let task = activity_task(&self.config, task_id, &body)?;
        let lease_ms = i64::try_from(self.config.task_lease.as_millis()).unwrap_or(i64::MAX);
        let (owner, attempt_id) = (body.lease_owner.clone(), body.activity_attempt_id.clone());
        let heartbeat = self.write(move |store| {
            let fence = ActivityFence {
                lease_owner: &owner,
                activity_attempt_id: &attempt_id,
            };
            let running = store.heartbeat_activity_attempt(task, fence, lease_ms)?;
            // A session activity's heartbeat renews its holder's lease.
            let session = store.renew_task_session(task, &owner)?;
            Ok((running, session))
        });
        let (running, session) = match heartbeat {
            Ok(answer) => answer,
            // The attempt's run closed under it: the attempt should stop,
            // which both SDKs read from `cancel_requested` (the task is over,
            // so nothing is recorded).
            Err(crate::store::Error::AttemptRunClosed { status, .. }) => {
                return Ok(json!({
                    "task_id": task_id, "activity_attempt_id": body.activity_attempt_id,
                    "lease_owner": body.lease_owner, "heartbeat_recorded": false,
                    "can_continue": false, "cancel_requested": true,
                    "reason": crate::server::error::run_closed_reason(status),
                    "run_closed_reason": status.as_str(),
                }));
            }
            Err(e) => return Err(e.into()),
        };
        let mut answer = json!({
            "task_id": task_id, "activity_attempt_id": body.activity_attempt_id,
            "lease_owner": body.lease_owner,
            "heartbeat_recorded": true, "can_continue": running, "cancel_requested": !running,
        });
        if let Some(session) = session {
            answer["worker_session"] = session_wire(&session);
        }
        Ok(answer)
    }

    /// The last poll observed on a queue.
    pub fn poll_diagnostic(&self, namespace: &str, task_queue: &str) -> Result<Value, ApiError> {
        let last = self.diagnostics.last(namespace, task_queue)?;
        Ok(json!({ "namespace": namespace, "task_queue": task_queue, "last_poll": last }))
    }
}

/// What a keyed poll's `answer` shows in the queue's poll diagnostics.
fn observation(kind: TaskKind, poll: &PollSpec, answer: &PollAnswer) -> PollObservation {
    let outcome = if answer.has_replayed() {
        "replayed"
    } else if answer.task_is_null() {
        "empty"
    } else {
        "leased"
    };
    PollObservation {
        worker_id: poll.worker_id.clone(),
        kind: kind.as_str().to_owned(),
        at_ms: crate::unix_ms(),
        outcome: outcome.to_owned(),
    }
}

/// The task id and attempt of a workflow-task report, checked.
/// Applies a workflow task's commands (none: the task goes back to wait).
fn complete(
    store: &crate::store::Store,
    task: i64,
    fence: WorkflowTaskFence<'_>,
    commands: &[WorkflowCommand],
) -> Result<crate::store::WorkflowTaskCompletion, crate::store::Error> {
    if commands.is_empty() {
        let queued = store.release_waiting_workflow_task(task, fence)?;
        return Ok(crate::store::WorkflowTaskCompletion {
            run_status: crate::store::RunStatus::Running,
            new_events: 0,
            activity_queues: Vec::new(),
            workflow_task_queued: queued,
            workflow_queues: Vec::new(),
            structural_limit: None,
            warnings: Vec::new(),
            timers: Vec::new(),
        });
    }
    store.complete_workflow_task(task, fence, commands)
}

/// Where a completion of `commands` goes in the run writer's batch.
fn run_write_order(commands: &[WorkflowCommand]) -> RunWriteOrder {
    let closes = commands.iter().any(|c| {
        matches!(
            c,
            WorkflowCommand::CompleteWorkflow { .. } | WorkflowCommand::FailWorkflow { .. }
        )
    });
    if closes {
        RunWriteOrder::Closes
    } else if commands
        .iter()
        .any(|c| matches!(c, WorkflowCommand::ScheduleActivity { .. }))
    {
        RunWriteOrder::Activities
    } else {
        RunWriteOrder::Other
    }
}

/// A task kind as the SDKs name it in a poll-capacity refusal.
fn wire_task_kind(kind: TaskKind) -> &'static str {
    match kind {
        TaskKind::Workflow => "workflow_task",
        TaskKind::Activity => "activity_task",
    }
}

/// The checks every call on a leased workflow task makes of its fence: the
/// path's task id, the body's `lease_owner` and `workflow_task_attempt`.
/// Returns the task id when it parses; problems go into `checks`.
pub(crate) fn check_workflow_lease(
    checks: &mut Checks,
    task_id: &str,
    lease_owner: &str,
    workflow_task_attempt: i64,
) -> Option<i64> {
    let task = task_id.parse::<i64>().ok();
    if task.is_none() {
        checks.problem(
            "task_id",
            "The task_id must be a task id this server issued.",
        );
    }
    if lease_owner.trim().is_empty() {
        checks.problem("lease_owner", "The lease_owner field is required.");
    }
    checks.range(
        "workflow_task_attempt",
        Some(workflow_task_attempt),
        1,
        i64::MAX,
    );
    task
}

fn workflow_fence(task_id: &str, body: &WorkflowTaskLease) -> Result<(i64, u64), ApiError> {
    let mut checks = Checks::default();
    let task = check_workflow_lease(
        &mut checks,
        task_id,
        &body.lease_owner,
        body.workflow_task_attempt,
    );
    if !checks.problems.is_empty() {
        return Err(validation(checks).into());
    }
    Ok((
        task.unwrap_or_default(),
        body.workflow_task_attempt.unsigned_abs(),
    ))
}

/// The run of `task` and its workflow id, which a sticky claim must name.
fn sticky_run(s: &crate::store::Store, task: i64) -> Result<(RunId, String), crate::store::Error> {
    let run = s.run_of_task(task)?;
    Ok((run, s.run(run)?.workflow_id))
}

/// What a workflow task completion's transaction answers: the completion
/// (or the stream quota's refusal), the namespace, the task's queue and
/// its run.
type WorkflowCompleted = (
    Result<crate::store::WorkflowTaskCompletion, crate::durable_state::DurableRejection>,
    String,
    String,
    RunId,
);

/// A checked workflow task completion, for its transaction.
struct WorkflowCompletion {
    task: i64,
    attempt: u64,
    owner: String,
    commands: Vec<WorkflowCommand>,
    stream_cursors: Vec<(String, i64)>,
    sticky: Option<crate::store::sticky::StickyClaim>,
}

impl WorkflowCompletion {
    /// The completion's transaction: the commands under the task's fence
    /// (and the stream quota when a command writes a stream), then the
    /// run's sticky binding.
    fn transaction(
        self,
        quota: NamespaceDurableStateQuota,
    ) -> impl Fn(&crate::store::Store) -> Result<WorkflowCompleted, crate::store::Error>
           + Clone
           + Send
           + 'static {
        let WorkflowCompletion {
            task,
            attempt,
            owner,
            commands,
            stream_cursors,
            sticky,
        } = self;
        // Stream directives of workflow code count against the namespace's
        // stream quota like client appends: a refused completion is undone
        // and the task stays with its worker (429), to be retried later.
        let streams = commands.iter().any(|c| {
            matches!(
                c,
                WorkflowCommand::RecordSideEffect {
                    workflow_stream: Some(_),
                    ..
                }
            )
        });
        move |store| {
            let fence = WorkflowTaskFence {
                lease_owner: &owner,
                attempt,
            };
            let home = store.task_home(task)?;
            let (ns, queue, run) = (home.namespace, home.task_queue, home.run);
            let limits = quota.limits(&ns).filter(|_| streams);
            let completion = NamespaceDurableStateQuota::guard(
                limits,
                store,
                &ns,
                &crate::server::streams::STREAM_RESOURCES,
                |store| {
                    // What the workflow consumed of its input streams, first:
                    // a continue-as-new in this completion carries each
                    // stream on from there. Undone with a refused completion.
                    if !stream_cursors.is_empty() {
                        store.record_message_stream_cursors(run, &stream_cursors)?;
                    }
                    complete(store, task, fence, &commands)
                },
            )?;
            // The run stays with the worker that caches it while it runs;
            // a completion without a claim (the worker dropped the run from
            // its cache) or a closed run ends the claim.
            match (&completion, &sticky) {
                (Ok(done), Some(claim)) if done.run_status == crate::store::RunStatus::Running => {
                    store.bind_sticky(run, &ns, claim)?
                }
                _ => store.unbind_sticky(run)?,
            }
            Ok((completion, ns, queue, run))
        }
    }
}

/// What an activity report's transaction answers: the attempt's outcome,
/// the namespace, and the activity's and its run's task queues.
type ActivityReported = (AttemptOutcome, String, (String, String));

/// An activity report's transaction: the attempt completed or failed
/// under its lease fence.
fn activity_report(
    task: i64,
    failed: bool,
    body: ActivityReport,
) -> impl Fn(&crate::store::Store) -> Result<ActivityReported, crate::store::Error>
       + Clone
       + Send
       + 'static {
    let ActivityReport {
        lease_owner: owner,
        activity_attempt_id: attempt_id,
        failure,
        result,
    } = body;
    move |store| {
        let fence = ActivityFence {
            lease_owner: &owner,
            activity_attempt_id: &attempt_id,
        };
        let home = store.task_home(task)?;
        let outcome = if failed {
            let failure = failure.clone().unwrap_or_default();
            store.fail_activity_attempt(
                task,
                fence,
                &AttemptFailure {
                    message: failure.message,
                    exception_type: failure.failure_type,
                    exception_class: failure.class,
                    non_retryable: failure.non_retryable,
                    details: failure.details,
                },
            )?
        } else {
            store.complete_activity_attempt(task, fence, &result)?
        };
        Ok((
            outcome,
            home.namespace,
            (home.task_queue, home.run_task_queue),
        ))
    }
}

pub(crate) fn activity_task(
    config: &crate::server::ServerConfig,
    task_id: &str,
    body: &ActivityReport,
) -> Result<i64, ApiError> {
    let mut v = config.request_limits.validator();
    v.text(
        "lease_owner",
        &body.lease_owner,
        dwpolicy::boundary::MAX_NAME_CHARS,
    );
    let mut checks = Checks::default();
    let task = task_id.parse::<i64>().ok();
    if task.is_none() {
        checks.problem(
            "task_id",
            "The task_id must be a task id this server issued.",
        );
    }
    checks.inline_payload("result", &body.result);
    finish_with(
        v,
        &[
            ("lease_owner", &body.lease_owner),
            ("activity_attempt_id", &body.activity_attempt_id),
        ],
        &checks.problems,
    )?;
    Ok(task.unwrap_or_default())
}

/// The memo-update capability both SDKs check (with `upsert_memo` among
/// the supported commands) before they send a memo upsert.
pub(crate) fn memo_updates() -> Value {
    json!({
        "supported": true,
        "command": "upsert_memo",
        "codec": crate::store::avro_value::CODEC,
        "merged_limit": "memo_size_bytes",
    })
}

/// What a leased workflow task's poll answer carries as
/// `server_capabilities` (the Rust SDK reads the memo-update capability
/// there, not from discovery).
pub(crate) fn workflow_task_capabilities() -> Value {
    WORKFLOW_TASK_CAPABILITIES.clone()
}

/// A leased task's fields in the protocol's shape, and (a workflow task)
/// its history page, which `Engine::answer_by` writes among them.
type RenderedTask = (Map<String, Value>, Option<StoredPage>);

/// A claim's answer: the task it leased, the queues of the activities it
/// failed on the way, and what it read for the task's answer.
type Claimed = (Option<LeasedTask>, Vec<String>, Option<LeaseReads>);

/// [`workflow_task_capabilities`], built once: every leased workflow task's
/// answer carries it, and a copy of the tree is cheaper than `json!`
/// serializing the command list again.
static WORKFLOW_TASK_CAPABILITIES: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(build_workflow_task_capabilities);

/// [`WORKFLOW_TASK_CAPABILITIES`] serialized, for the written answers.
static WORKFLOW_TASK_CAPABILITIES_JSON: std::sync::LazyLock<Vec<u8>> =
    std::sync::LazyLock::new(|| {
        serde_json::to_vec(&*WORKFLOW_TASK_CAPABILITIES).unwrap_or_default()
    });

fn build_workflow_task_capabilities() -> Value {
    json!({
        "supported_workflow_task_commands": SUPPORTED_COMMANDS,
        "workflow_memo_updates": memo_updates(),
    })
}

/// The commands of a completion, each checked: a known type, integers in
/// range, the shape its type needs. Every problem is named
/// `commands.<index>.<field>` in one 422.
fn parse_commands(
    limits: &dwpolicy::boundary::RequestLimits,
    queue_connection: &str,
    raw: &[Value],
) -> Result<Vec<WorkflowCommand>, ApiError> {
    parse_commands_in(limits, queue_connection, raw, &SUPPORTED_COMMANDS, &|i| {
        format!("commands.{i}")
    })
}

/// Parses `raw` as commands of the types `allowed`, each problem named
/// under `name_of(i)` (a completion's `commands.<i>`; a prepared local
/// activity's `descriptor`); `queue_connection` is the node's queue driver,
/// the one `connection` a service call's start options may name.
pub(crate) fn parse_commands_in(
    limits: &dwpolicy::boundary::RequestLimits,
    queue_connection: &str,
    raw: &[Value],
    allowed: &[&str],
    name_of: &dyn Fn(usize) -> String,
) -> Result<Vec<WorkflowCommand>, ApiError> {
    let mut checks = Checks::default();
    let mut commands = Vec::with_capacity(raw.len());
    let max = wire::MAX_DURATION_SECONDS;
    for (i, command) in raw.iter().enumerate() {
        let kind = command.get("type").and_then(Value::as_str).unwrap_or("");
        if !allowed.contains(&kind) {
            checks.problem(
                &format!("{}.type", name_of(i)),
                format!(
                    "Command type {kind:?} is not supported here; this route takes {}.",
                    allowed.join(", ")
                ),
            );
            continue;
        }
        let prefix = name_of(i);
        let field = |name: &str| format!("{prefix}.{name}");
        checks.integer_field(command, "delay_seconds", &field("delay_seconds"), 0, max);
        checks.integer_field(
            command,
            "timeout_seconds",
            &field("timeout_seconds"),
            0,
            max,
        );
        for timeout in [
            "start_to_close_timeout",
            "schedule_to_close_timeout",
            "schedule_to_start_timeout",
            "heartbeat_timeout",
        ] {
            checks.integer_field(command, timeout, &field(timeout), 1, max);
        }
        if let Some(policy) = command.get("retry_policy").filter(|p| !p.is_null()) {
            checks.integer_field(
                policy,
                "max_attempts",
                &field("retry_policy.max_attempts"),
                1,
                10_000,
            );
            if let Some(backoff) = policy.get("backoff_seconds").and_then(Value::as_array) {
                for (j, b) in backoff.iter().enumerate() {
                    checks.range(
                        &field(&format!("retry_policy.backoff_seconds.{j}")),
                        Some(b.as_i64().unwrap_or(-1)),
                        0,
                        max,
                    );
                }
            }
        }
        for payload in ["arguments", "result"] {
            if let Some(value) = command.get(payload) {
                checks.inline_payload(&field(payload), value);
            }
        }
        if let Some(session) = command.get("worker_session").filter(|s| !s.is_null()) {
            let prefix = field("worker_session");
            if let Err(problems) =
                crate::store::sessions::SessionOptions::from_wire(session, &prefix)
            {
                for (name, problem) in problems {
                    checks.problem(&name, problem);
                }
            }
        }
        if let Some(directive) = command.get("workflow_stream").filter(|d| !d.is_null()) {
            crate::server::streams::check_directive(
                limits,
                &mut checks,
                &field("workflow_stream"),
                directive,
            );
        }
        let before = checks.problems.len();
        if kind == "record_version_marker" {
            check_version_marker(&mut checks, command, &field);
        }
        if kind == "start_child_workflow" {
            check_child_command(&mut checks, command, &field);
        }
        if kind == "schedule_activity" {
            check_activity_policy(&mut checks, command, &field);
        }
        if kind == "start_service_operation" {
            check_service_command(&mut checks, command, &field, queue_connection);
        }
        if kind == "upsert_memo" {
            if let Err(refused) = crate::store::workflow_commands::memo_patch(&command["entries"]) {
                let problem = match refused {
                    crate::store::Error::InvalidMemo(problem) => problem,
                    other => other.to_string(),
                };
                checks.problem(&field("entries"), problem);
            }
        }
        if kind == "continue_as_new" {
            // Absent means "the run's own"; present must name something.
            for name in ["workflow_type", "queue"] {
                if let Some(value) = command.get(name).filter(|v| !v.is_null()) {
                    if value.as_str().is_none_or(|text| text.trim().is_empty()) {
                        checks.problem(
                            &field(name),
                            format!("The {name} field must be a non-empty string when present."),
                        );
                    }
                }
            }
        }
        for (name, value) in [
            ("activity_type", command.get("activity_type")),
            ("update_id", command.get("update_id")),
            ("change_id", command.get("change_id")),
            ("workflow_type", command.get("workflow_type")),
            ("queue", command.get("queue")),
        ] {
            if let Some(Value::String(text)) = value {
                if text.chars().count() > dwpolicy::boundary::MAX_NAME_CHARS {
                    checks.problem(
                        &field(name),
                        format!(
                            "The {name} field must not exceed {} characters.",
                            dwpolicy::boundary::MAX_NAME_CHARS
                        ),
                    );
                }
            }
        }
        if checks.problems.len() > before {
            continue;
        }
        match serde_json::from_value::<WorkflowCommand>(command.clone()) {
            Ok(parsed) => commands.push(parsed),
            Err(e) if checks.problems.len() == before => {
                checks.problem(&prefix, e.to_string());
            }
            Err(_) => {}
        }
    }
    if checks.problems.is_empty() {
        Ok(commands)
    } else {
        Err(validation(checks).into())
    }
}

/// A service call names its endpoint, service and operation (catalog
/// names: 1 to 191 characters); its mode, waiting policy and request have
/// the shapes both SDKs send; the start options a client's execute takes
/// but workflow code cannot use here are refused by name.
fn check_service_command(
    checks: &mut Checks,
    command: &Value,
    field: &impl Fn(&str) -> String,
    queue_connection: &str,
) {
    for name in ["endpoint_name", "service_name", "operation_name"] {
        let ok = command[name].as_str().is_some_and(|text| {
            !text.trim().is_empty()
                && text.chars().count() <= 191
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
        if !ok {
            checks.problem(
                &field(name),
                format!("The {name} field must be 1 to 191 letters, digits, '.', '_' or '-'."),
            );
        }
    }
    for (name, allowed) in [
        ("mode_override", &["sync", "async"][..]),
        ("wait_for", &["accepted", "completed"][..]),
    ] {
        if let Some(value) = command.get(name).filter(|v| !v.is_null()) {
            if !value.as_str().is_some_and(|v| allowed.contains(&v)) {
                checks.problem(
                    &field(name),
                    format!("The {name} field must be one of {}.", allowed.join(", ")),
                );
            }
        }
    }
    let short_strings = |checks: &mut Checks, names: &[&str], max: usize| {
        for name in names {
            if let Some(value) = command.get(*name).filter(|v| !v.is_null()) {
                if !value
                    .as_str()
                    .is_some_and(|v| !v.trim().is_empty() && v.chars().count() <= max)
                {
                    checks.problem(
                        &field(name),
                        format!(
                            "The {name} field must be a non-empty string of at most {max} characters."
                        ),
                    );
                }
            }
        }
    };
    short_strings(
        checks,
        &[
            "namespace",
            "caller_namespace",
            "idempotency_key",
            "payload_codec",
        ],
        255,
    );
    match command.get("request_payload") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(envelope @ Value::Object(_)) => {
            checks.inline_payload(&field("request_payload"), envelope);
        }
        Some(_) => {
            checks.problem(
                &field("request_payload"),
                "The request_payload must be an encoded payload string or a {codec, blob} envelope.",
            );
        }
    }
    // The start options of the operation's workflow.
    short_strings(
        checks,
        &[
            "target_workflow_instance_id",
            "target_workflow_run_id",
            "business_key",
        ],
        191,
    );
    if command
        .get("target_workflow_run_id")
        .is_some_and(|v| !v.is_null())
        && command
            .get("target_workflow_instance_id")
            .is_none_or(Value::is_null)
    {
        checks.problem(
            &field("target_workflow_run_id"),
            "A target_workflow_run_id names a run of target_workflow_instance_id: send both.",
        );
    }
    if let Some(value) = command
        .get("duplicate_start_policy")
        .filter(|v| !v.is_null())
    {
        if !matches!(
            value.as_str(),
            Some("reject_duplicate" | "return_existing_active")
        ) {
            checks.problem(
                &field("duplicate_start_policy"),
                "The duplicate_start_policy must be reject_duplicate or return_existing_active.",
            );
        }
    }
    for name in ["memo", "search_attributes"] {
        if let Some(value) = command.get(name).filter(|v| !v.is_null()) {
            if !value.is_object() {
                checks.problem(&field(name), format!("The {name} must be a JSON object."));
            }
        }
    }
    // The reference server's connection selects a queue connection of its
    // host; this server has one, its queue driver (`queue::connection_refusal`).
    if let Some(problem) = command
        .get("connection")
        .and_then(|value| crate::queue::connection_refusal(queue_connection, value))
    {
        checks.problem(&field("connection"), problem);
    }
}

/// A live worker's status as its registration and heartbeat answers
/// report it (the reference server stamps it on both): `draining` while
/// its build-id cohort is drained, else `active`.
fn worker_status(draining: bool) -> &'static str {
    if draining {
        "draining"
    } else {
        "active"
    }
}

/// The Nexus bindings a cooperative delivery reaches through: a call from
/// workflow code starts a workflow run (`start_workflow` binding), and a
/// delivery at a call waiting for its outcome gives that run a request.
pub const NEXUS_BINDING_KINDS: [&str; 1] = ["workflow_run"];

/// Checks a `schedule_activity` command's `cancellation_policy` (one of
/// the child policies, as both SDKs send it).
fn check_activity_policy(checks: &mut Checks, command: &Value, field: &impl Fn(&str) -> String) {
    let allowed = &crate::store::children::CANCELLATION_POLICIES;
    if let Some(value) = command.get("cancellation_policy").filter(|v| !v.is_null()) {
        if !value.as_str().is_some_and(|text| allowed.contains(&text)) {
            checks.problem(
                &field("cancellation_policy"),
                format!(
                    "The cancellation_policy must be one of {}.",
                    allowed.join(", ")
                ),
            );
        }
        // An abandoned activity outlives its workflow's wait (and its run's
        // cooperative close): only its total timeout bounds it.
        if value.as_str() == Some("abandon")
            && command
                .get("schedule_to_close_timeout")
                .and_then(Value::as_u64)
                .is_none_or(|seconds| seconds == 0)
        {
            checks.problem(
                &field("schedule_to_close_timeout"),
                "An activity whose cancellation_policy is abandon needs a positive \
                 schedule_to_close_timeout: it bounds how long the abandoned activity may run.",
            );
        }
    }
}

/// A child's type is a non-empty name, its queue too when present, its
/// policies are ones both SDKs send, its timeouts at least a second.
fn check_child_command(checks: &mut Checks, command: &Value, field: &impl Fn(&str) -> String) {
    if command["workflow_type"]
        .as_str()
        .is_none_or(|name| name.trim().is_empty())
    {
        checks.problem(
            &field("workflow_type"),
            "The workflow_type must be a non-empty string.",
        );
    }
    if let Some(queue) = command.get("queue").filter(|v| !v.is_null()) {
        if queue.as_str().is_none_or(|text| text.trim().is_empty()) {
            checks.problem(
                &field("queue"),
                "The queue field must be a non-empty string when present.",
            );
        }
    }
    for (name, allowed) in [
        (
            "parent_close_policy",
            &crate::store::children::PARENT_CLOSE_POLICIES[..],
        ),
        (
            "cancellation_policy",
            &crate::store::children::CANCELLATION_POLICIES[..],
        ),
    ] {
        if let Some(value) = command.get(name).filter(|v| !v.is_null()) {
            if !value.as_str().is_some_and(|text| allowed.contains(&text)) {
                checks.problem(
                    &field(name),
                    format!("The {name} must be one of {}.", allowed.join(", ")),
                );
            }
        }
    }
    for name in ["execution_timeout_seconds", "run_timeout_seconds"] {
        checks.integer_field(command, name, &field(name), 1, wire::MAX_DURATION_SECONDS);
    }
}

/// A version marker's change id is a non-empty name and its version lies
/// within `min_supported ..= max_supported` (32-bit integers, as both SDKs
/// read them back).
fn check_version_marker(checks: &mut Checks, command: &Value, field: &impl Fn(&str) -> String) {
    if command["change_id"]
        .as_str()
        .is_none_or(|id| id.trim().is_empty())
    {
        checks.problem(
            &field("change_id"),
            "The change_id must be a non-empty string.",
        );
    }
    let problem = match (
        number_of(command, "min_supported"),
        number_of(command, "version"),
        number_of(command, "max_supported"),
    ) {
        (Some(min), Some(version), Some(max)) if min <= version && version <= max => return,
        (Some(_), Some(_), Some(_)) => "The version must lie within min_supported..=max_supported.",
        _ => "version, min_supported and max_supported must be 32-bit integers.",
    };
    checks.problem(&field("version"), problem);
}

fn number_of(command: &Value, name: &str) -> Option<i32> {
    command[name].as_i64().and_then(|n| i32::try_from(n).ok())
}

/// What a replay key holds: which task the poll leased, if any (a few
/// bytes, whatever the task's size).
#[derive(Debug, Serialize, Deserialize)]
struct ReplayRef {
    task_id: Option<i64>,
}

/// A worker session as the SDKs read it: its options (with its queue) and
/// `status`, `namespace`, `lease_owner`, `lease_expires_at`, `ttl_expires_at`.
pub(crate) fn session_wire(session: &crate::store::dispatch::SessionLease) -> Value {
    let mut out = session.options.clone();
    out["namespace"] = session.namespace.clone().into();
    out["status"] = session.status.clone().into();
    out["lease_owner"] = session.holder.clone().into();
    out["lease_expires_at"] = wire::timestamp(session.lease_expires_at_ms).into();
    out["ttl_expires_at"] = wire::timestamp(session.ttl_expires_at_ms).into();
    out
}

/// The worker-session capability as discovery and registration advertise it.
pub(crate) fn worker_sessions_capability() -> Value {
    json!({
        "supported": true,
        "endpoints": ["POST /worker/sessions", "POST /worker/sessions/{sessionId}/heartbeat",
                      "DELETE /worker/sessions/{sessionId}"],
        "max_ttl_seconds": crate::store::sessions::MAX_SESSION_SECONDS,
        "max_concurrent_activities": crate::store::sessions::MAX_SESSION_CONCURRENCY,
        "max_worker_sessions": crate::store::sessions::MAX_WORKER_SESSIONS,
    })
}
