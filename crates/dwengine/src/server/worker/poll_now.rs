//! A workflow or activity poll's first step on the async runtime.
//!
//! A poll's first step (the first look at the store, its request id's
//! keys, a claim, the task's rendering) ran on a poll-lane thread, which
//! handed the claim to the writer thread and slept until it committed: a
//! poll that found its task at once went runtime -> lane thread -> writer
//! -> lane thread -> runtime, the most thread switches of any request
//! (docs/performance.md, session 16). On a node where nothing on that way
//! can block, as for starts and worker reports
//! ([`Engine::writes_from_async`]: one group-commit writer, the cache in
//! this process), the step runs on the async thread instead: its reads on
//! an idle reader ([`Engine::read_now`]), its claim awaited from the
//! writer ([`Engine::write_now`]). It goes to the lane, unchanged, for what
//! may block: no idle reader, a pass with recovery to write first, a
//! capped queue or the claim gate (cache locks taken with sleeps), a
//! repeated request id, and the wait slot of a poll that waits. Both ways
//! run the same steps in the same order and answer alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{PollSpec, PollStep, PollWait};
use crate::poll_requests::PollClaim;
use crate::polling::PollWake;
use crate::server::task_answer::PollAnswer;
use crate::server::{ApiError, Engine};
use crate::store::{Error as StoreError, LeasedTask, Store, TaskKind};

/// How a step reads the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    /// The ordinary way ([`Engine::read`]): a reader, waited for.
    Wait,
    /// On the calling thread, only if that cannot wait
    /// ([`Engine::read_now`]); nothing when it did not run.
    Now,
}

/// What is left of a poll's step for the poll lane, run there.
pub(crate) type OnLane<T> = Box<dyn FnOnce(&Engine) -> Result<T, ApiError> + Send>;

/// What a poll's first step on the async runtime came to
/// ([`Engine::begin_poll_now`]).
pub(crate) enum FirstStep {
    /// The step ran to its end.
    Done(Result<PollStep, ApiError>),
    /// What is left of it may block: run it on the poll lane.
    Lane(OnLane<PollStep>),
}

/// A poll's answer once its pass ended it ([`Engine::end_poll`]).
pub(crate) enum Ending {
    /// Answered here.
    Done(Result<PollAnswer, ApiError>),
    /// The task's reads could not be read now: answer on the poll lane.
    Lane(OnLane<PollAnswer>),
}

/// What a waiting poll's pass on the async runtime came to
/// ([`Engine::pass_now`]).
pub(crate) enum PassNow {
    /// Not run (it may block): the pass runs on the poll lane.
    Lane,
    /// It found nothing: the wait goes on.
    Nothing,
    /// It ended the poll: `more_ready` for a task it took (whether it saw
    /// more work), none for an error.
    Ended {
        /// The claimed task's `more_ready`.
        more_ready: Option<bool>,
        /// The poll's answer.
        answer: Ending,
    },
}

impl Engine {
    /// `read` as `how` says: `None` when [`Reading::Now`] did not run it.
    pub(super) fn read_by<R>(
        &self,
        how: Reading,
        read: impl FnOnce(&Store) -> Result<R, StoreError>,
    ) -> Result<Option<R>, ApiError> {
        Ok(match how {
            Reading::Wait => Some(self.read(read)?),
            Reading::Now => self.read_now(read),
        })
    }

    /// Whether a poll's first step may run on the async runtime: every
    /// write goes through the one writer and the cache is in this process
    /// ([`Engine::writes_from_async`]), the claim gate is off and task
    /// queues are uncapped (both would take cache locks, sleeping between
    /// tries).
    pub(crate) fn polls_from_async(&self) -> bool {
        self.writes_from_async() && !self.claim_gate.enabled() && !self.queues.capped()
    }

    /// A workflow or activity poll's first step ([`Engine::begin_poll`]),
    /// run here on the async thread as far as nothing on its way may
    /// block; [`FirstStep::Lane`] carries the rest to a blocking thread.
    pub(crate) async fn begin_poll_now(&self, kind: TaskKind, poll: &Arc<PollSpec>) -> FirstStep {
        let whole = || {
            let poll = poll.clone();
            FirstStep::Lane(Box::new(move |e: &Engine| e.begin_poll(kind, &poll)))
        };
        if !self.polls_from_async() {
            return whole();
        }
        let Ok(Some(look)) = self.first_look_by(kind, poll, Reading::Now) else {
            return whole();
        };
        // A pass with expired leases to return or timers to fire writes
        // those first, each waited for: the lane's.
        let recovery = &look.recovery;
        if look.bound.is_none() && (recovery.due_timers || !recovery.expired.is_empty()) {
            return whole();
        }
        let (ns, queue, id) = (&poll.namespace, &poll.task_queue, &poll.poll_request_id);
        let known = look.registration.as_ref().is_some_and(|r| r.0);
        let keyed = known || self.unknown_polls.try_admit();
        if keyed {
            match self.polls(kind).begin(ns, queue, id, poll.wait) {
                Ok(PollClaim::Fresh) => {}
                Ok(repeat) => {
                    let poll = poll.clone();
                    return FirstStep::Lane(Box::new(move |e: &Engine| {
                        e.repeated_poll(kind, &poll, repeat)
                    }));
                }
                Err(e) => return FirstStep::Done(Err(e.into())),
            }
        }
        // The durable binding: a task still leased to this id is this poll's answer.
        let found = match look.bound {
            Some(bound) => Ok(Some(bound)),
            None => {
                // Subscribed before the claim: work committed between the
                // claim and the wait still wakes this poll.
                let mut wake = self.poll_wakes.subscribe(crate::polling::wake_channel(
                    ns,
                    queue,
                    kind.as_str(),
                ));
                match self.claim_now(kind, poll).await {
                    Ok(Some(task)) => {
                        // The wake-up meant for this task, if one is pending, is spent.
                        wake.claimed();
                        if task.more_ready {
                            wake.wake_all();
                        }
                        Ok(Some(task))
                    }
                    Ok(None) if !poll.wait.is_zero() && self.polling_cache_available() => {
                        let poll = poll.clone();
                        return FirstStep::Lane(Box::new(move |e: &Engine| {
                            e.wait_with_slot(kind, &poll, keyed, wake)
                        }));
                    }
                    other => other,
                }
            }
        };
        match self.end_poll_now(kind, poll, keyed, found) {
            Ending::Done(answer) => FirstStep::Done(answer.map(PollStep::Answered)),
            Ending::Lane(rest) => {
                FirstStep::Lane(Box::new(move |e: &Engine| rest(e).map(PollStep::Answered)))
            }
        }
    }

    /// A waiting poll's pass ([`Engine::pass`], and [`Engine::end_poll`]
    /// when it found a task or failed), run here as far as nothing on its
    /// way may block: [`PassNow::Lane`] when its recovery scans cannot be
    /// read now or found leases to return or timers to fire.
    pub(crate) async fn pass_now(
        &self,
        kind: TaskKind,
        poll: &Arc<PollSpec>,
        keyed: bool,
    ) -> PassNow {
        if !self.polls_from_async() {
            return PassNow::Lane;
        }
        let (ns, queue) = (&poll.namespace, &poll.task_queue);
        // As `Engine::pass`: no claim when nothing is ready to take.
        let scan = self.read_by(Reading::Now, |s| {
            let scan = self.recovery_scan(s, kind, ns, queue, poll.cohort())?;
            Ok((scan, s.queue_has_ready(kind, ns, queue)?))
        });
        match scan {
            Ok(Some((scan, false))) if scan.is_empty() => return PassNow::Nothing,
            Ok(Some((scan, true))) if scan.is_empty() => {}
            _ => return PassNow::Lane,
        }
        let (more_ready, found) = match self.claim_now(kind, poll).await {
            Ok(None) => return PassNow::Nothing,
            Ok(Some(task)) => (Some(task.more_ready), Ok(Some(task))),
            Err(e) => (None, Err(e)),
        };
        PassNow::Ended {
            more_ready,
            answer: self.end_poll_now(kind, poll, keyed, found),
        }
    }

    /// [`Engine::pass_after`]'s claim with nothing to recover, awaited from
    /// the writer. The queue is uncapped and the claim gate off
    /// ([`Engine::polls_from_async`]), so neither waits.
    async fn claim_now(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
    ) -> Result<Option<LeasedTask>, ApiError> {
        let Some((_lock, permit)) = self.enter_claim(kind, poll, Duration::ZERO)? else {
            return Ok(None);
        };
        let claimed = self.write_now(self.claim_transaction(kind, poll)).await?;
        permit.claimed(claimed.0.is_some());
        drop(permit);
        self.claimed(kind, poll, claimed)
    }

    /// [`Engine::end_poll`], the task's reads read now; on the lane when
    /// they cannot be.
    fn end_poll_now(
        &self,
        kind: TaskKind,
        poll: &Arc<PollSpec>,
        keyed: bool,
        found: Result<Option<LeasedTask>, ApiError>,
    ) -> Ending {
        let task = match found {
            Ok(Some(task)) => task,
            // An empty answer or an error: nothing to read.
            other => return Ending::Done(self.end_poll(kind, poll, keyed, other)),
        };
        let task_id = task.task_id;
        let reads = poll.take_lease_reads(task_id);
        let page_size = poll.history_page_size;
        let answer = match self.answer_by(Some(task), page_size, false, reads, Reading::Now) {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(task)) => {
                let poll = poll.clone();
                return Ending::Lane(Box::new(move |e: &Engine| {
                    e.end_poll(kind, &poll, keyed, Ok(task))
                }));
            }
            Err(e) => Err(e),
        };
        Ending::Done(if keyed {
            self.keep_answer(kind, poll, Some(task_id), answer)
        } else {
            answer
        })
    }

    /// A poll that found nothing and may wait: its wait slot, admitted on
    /// the lane (its files and locks may block), or the answer naming the
    /// cap.
    fn wait_with_slot(
        &self,
        kind: TaskKind,
        poll: &PollSpec,
        keyed: bool,
        wake: PollWake,
    ) -> Result<PollStep, ApiError> {
        match self.wait_slot(kind, poll) {
            Ok(slot) => Ok(PollStep::Waiting(PollWait {
                wake,
                channel: kind.as_str(),
                deadline: Instant::now() + poll.wait,
                keyed,
                _slot: slot,
            })),
            Err(e) => self
                .end_poll(kind, poll, keyed, Err(e))
                .map(PollStep::Answered),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::{Ending, FirstStep, PassNow};
    use crate::cache::MemoryCache;
    use crate::server::task_answer::PollAnswer;
    use crate::server::worker::{PollSpec, PollStep};
    use crate::server::{Engine, ServerConfig};
    use crate::store::TaskKind;

    /// The runtime a test drives the async steps on, as one of the
    /// server's threads would.
    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A node on a SQLite file and an in-process cache, as dwserver's
    /// default (`tweak` changes its configuration).
    fn node(dir: &std::path::Path, tweak: impl FnOnce(&mut ServerConfig)) -> Engine {
        node_on(dir, Arc::new(MemoryCache::default()), tweak)
    }

    /// A node on a SQLite file in `dir` whose cache is `cache`.
    fn node_on(
        dir: &std::path::Path,
        cache: Arc<dyn crate::cache::Cache>,
        tweak: impl FnOnce(&mut ServerConfig),
    ) -> Engine {
        let mut config = ServerConfig::for_node("test-node", dir.to_owned());
        config.database = Some(dir.join("runs.sqlite"));
        tweak(&mut config);
        Engine::with_cache(config, cache).expect("the node opens")
    }

    fn spec(engine: &Engine, queue: &str, poll_id: &str, wait_seconds: f64) -> Arc<PollSpec> {
        let body = serde_json::from_value(json!({
            "worker_id": "w1", "task_queue": queue, "poll_request_id": poll_id,
            "timeout_seconds": wait_seconds,
        }))
        .unwrap();
        Arc::new(engine.poll_spec("default", body).unwrap())
    }

    fn start(engine: &Engine, workflow_id: &str, queue: &str) {
        let body = serde_json::from_value(json!({
            "workflow_id": workflow_id, "workflow_type": "Order", "task_queue": queue,
            "input": { "codec": "json", "blob": "[1]" },
        }))
        .unwrap();
        assert_eq!(engine.start_workflow("default", body).unwrap().0, 201);
    }

    /// The answer of a step that ended the poll.
    fn answered(step: Result<PollStep, crate::server::ApiError>) -> Value {
        match step {
            Ok(PollStep::Answered(answer)) => answer.into_value(),
            Ok(_) => panic!("the poll did not answer"),
            Err(e) => panic!("the poll failed: {}", e.body()),
        }
    }

    /// `answer` without what differs between two nodes running the same
    /// requests: the clock.
    fn timeless(mut answer: Value) -> Value {
        fn strip(value: &mut Value) {
            match value {
                Value::Object(map) => {
                    for (key, item) in map.iter_mut() {
                        if key.ends_with("_at") || key.ends_with("_at_ms") || key == "timestamp" {
                            *item = json!("<time>");
                        } else {
                            strip(item);
                        }
                    }
                }
                Value::Array(items) => items.iter_mut().for_each(strip),
                _ => {}
            }
        }
        strip(&mut answer);
        answer
    }

    /// The same polls on two nodes, one taking each poll's first step on
    /// the async thread, the other on a blocking one as before: a
    /// workflow task found at once, the repeat of its request id, an
    /// activity task, and an empty poll that may not wait. Both answer
    /// alike, and the async thread took every first step it could (all
    /// but the repeat, which replays on the lane).
    #[test]
    fn a_poll_answers_alike_when_its_first_step_runs_on_the_async_thread() {
        let runtime = current_thread();
        let (dir_async, dir_lane) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (on_async, on_lane) = (
            node(dir_async.path(), |_| {}),
            node(dir_lane.path(), |_| {}),
        );
        assert!(on_async.polls_from_async());
        let poll = |engine: &Engine, fast: bool, kind: TaskKind, spec: &Arc<PollSpec>| {
            if !fast {
                return (answered(engine.begin_poll(kind, spec)), false);
            }
            match runtime.block_on(engine.begin_poll_now(kind, spec)) {
                FirstStep::Done(step) => (answered(step), true),
                FirstStep::Lane(rest) => (answered(rest(engine)), false),
            }
        };
        let mut answers = Vec::new();
        for (engine, fast) in [(&on_async, true), (&on_lane, false)] {
            let mut seen = Vec::new();
            start(engine, "wf-1", "q");
            // A reader opened and left idle, as on a serving node.
            engine
                .read(|s| s.expired_leases(TaskKind::Workflow, 1))
                .unwrap();
            let first = spec(engine, "q", "p-1", 0.5);
            seen.push(poll(engine, fast, TaskKind::Workflow, &first));
            seen.push(poll(engine, fast, TaskKind::Workflow, &first));
            let task = seen[0].0["task"].clone();
            let (task_id, owner) = (task["task_id"].as_str().unwrap(), &task["lease_owner"]);
            let completion = serde_json::from_value(json!({
                "lease_owner": owner,
                "workflow_task_attempt": task["workflow_task_attempt"],
                "commands": [{ "type": "schedule_activity", "activity_type": "charge",
                    "task_queue": "q", "arguments": { "codec": "json", "blob": "[42]" } }],
            }))
            .unwrap();
            engine.complete_workflow_task(task_id, completion).unwrap();
            let activity = spec(engine, "q", "p-2", 0.5);
            seen.push(poll(engine, fast, TaskKind::Activity, &activity));
            let empty = spec(engine, "q", "p-3", 0.0);
            seen.push(poll(engine, fast, TaskKind::Workflow, &empty));
            answers.push(seen);
        }
        let (fast, slow) = (&answers[0], &answers[1]);
        let taken: Vec<bool> = fast.iter().map(|(_, taken)| *taken).collect();
        assert_eq!(taken, [true, false, true, true], "{fast:#?}");
        assert_eq!(fast[0].0["poll_status"], "leased");
        assert_eq!(fast[1].0["replayed"], true);
        assert_eq!(fast[2].0["task"]["activity_type"], "charge");
        assert!(fast[3].0["task"].is_null());
        for (i, ((a, _), (b, _))) in fast.iter().zip(slow).enumerate() {
            assert_eq!(timeless(a.clone()), timeless(b.clone()), "poll {i}");
        }
    }

    /// On SQLite a workflow task's claim reads the task's first history
    /// page and pending cancellation in the lease's own transaction, so its
    /// answer needs no reader afterwards: with none idle (none opened on
    /// this node yet) it is answered here, not handed to the lane, and it
    /// is the answer a reader's reads render, byte for byte.
    #[test]
    fn a_claimed_workflow_task_answers_from_the_claims_reads_without_a_reader() {
        let runtime = current_thread();
        let dir = tempfile::tempdir().unwrap();
        let engine = node(dir.path(), |_| {});
        start(&engine, "wf-1", "q");
        let poll = spec(&engine, "q", "p-1", 0.5);
        let task = runtime
            .block_on(engine.claim_now(TaskKind::Workflow, &poll))
            .unwrap()
            .expect("the claim leases the started run's task");
        assert_eq!(
            engine.shared_store().open_readers(),
            0,
            "no reader opened: read_now cannot run"
        );
        let Ending::Done(answer) =
            engine.end_poll_now(TaskKind::Workflow, &poll, false, Ok(Some(task.clone())))
        else {
            panic!("the answer waited for a reader");
        };
        let PollAnswer::Written { bytes, .. } = answer.unwrap() else {
            panic!("a workflow task's answer is written");
        };
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(answer["task"]["workflow_id"], "wf-1");
        let events = answer["task"]["history_events"].as_array().unwrap().len();
        assert!(events >= 1);
        assert_eq!(
            answer["task"]["total_history_events"], events,
            "the lease's count"
        );
        assert_eq!(engine.shared_store().open_readers(), 0);
        assert!(poll.take_lease_reads(task.task_id).is_none(), "taken once");
        // The same task rendered from a reader's reads, as before.
        let PollAnswer::Written { bytes: read, .. } = engine
            .answer(Some(task), poll.history_page_size, false)
            .unwrap()
        else {
            panic!("a workflow task's answer is written");
        };
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            String::from_utf8(read).unwrap()
        );
    }

    /// A poll that finds nothing and may wait admits its wait slot on the
    /// lane and then waits; a task started meanwhile wakes it, and its
    /// pass on the async thread takes and answers it.
    #[test]
    fn a_poll_that_finds_nothing_takes_its_wait_slot_on_the_lane_and_passes_here() {
        let runtime = current_thread();
        let dir = tempfile::tempdir().unwrap();
        let engine = node(dir.path(), |_| {});
        engine
            .read(|s| s.expired_leases(TaskKind::Workflow, 1))
            .unwrap();
        let waiting = spec(&engine, "idle", "p-1", 5.0);
        let FirstStep::Lane(rest) =
            runtime.block_on(engine.begin_poll_now(TaskKind::Workflow, &waiting))
        else {
            panic!("an empty poll that may wait answered without waiting");
        };
        let Ok(PollStep::Waiting(mut wait)) = rest(&engine) else {
            panic!("the poll does not wait");
        };
        assert!(wait.keyed);
        let pass = || runtime.block_on(engine.pass_now(TaskKind::Workflow, &waiting, true));
        assert!(matches!(pass(), PassNow::Nothing));
        start(&engine, "wf-1", "idle");
        let woken = runtime.block_on(
            wait.wake
                .woken_before(std::time::Instant::now() + std::time::Duration::from_secs(30)),
        );
        assert_ne!(woken, crate::polling::Woken::No);
        let PassNow::Ended {
            more_ready: Some(false),
            answer: Ending::Done(answer),
        } = pass()
        else {
            panic!("the pass did not take the task here");
        };
        let answer = answer.unwrap().into_value();
        assert_eq!(answer["task"]["workflow_id"], "wf-1");
        // Its answer is kept for a repeat of its request id.
        let repeat = engine.begin_poll(TaskKind::Workflow, &waiting);
        let repeat = answered(repeat);
        assert_eq!(repeat["replayed"], true);
        assert_eq!(repeat["task"]["task_id"], answer["task"]["task_id"]);
    }

    /// On a node whose wakes cross to other nodes (a shared cache, a
    /// sweep scope), a start's relay message and its queue's signal key
    /// go to the cache in one batch, and so do a poll's replay key and its
    /// diagnostic, and a completion's queue wakes with its run's: one
    /// round trip each to Redis, not two.
    #[test]
    fn a_cluster_nodes_wake_and_poll_end_each_write_the_cache_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(crate::cache::CountingCache::new());
        let engine = node_on(dir.path(), cache.clone(), |c| {
            c.sweep_scope = Some("shared".into())
        });
        assert!(engine.poll_wakes.relayed());
        cache.take();
        start(&engine, "wf-1", "q");
        let writes = |calls: Vec<String>| -> Vec<String> {
            calls
                .into_iter()
                .filter(|c| !c.starts_with("get ") && !c.contains("readiness"))
                .collect()
        };
        assert_eq!(
            writes(cache.take()),
            ["batch[publish server:long-poll-signal:, put server:long-poll-signal:]"]
        );
        let first = spec(&engine, "q", "p-1", 0.5);
        let answer = answered(engine.begin_poll(TaskKind::Workflow, &first));
        assert_eq!(answer["poll_status"], "leased");
        assert_eq!(
            writes(cache.take()),
            [
                "add server:workflow-task-poll-request:",
                "batch[put server:workflow-task-poll-request:, put server:worker-poll-diagnostic:]",
            ]
        );
        // Both writes landed: the repeat replays, the diagnostic names it.
        let repeat = answered(engine.begin_poll(TaskKind::Workflow, &first));
        assert_eq!(repeat["replayed"], true);
        assert_eq!(repeat["task"]["task_id"], answer["task"]["task_id"]);
        let last = engine.poll_diagnostic("default", "q").unwrap();
        assert_eq!(last["last_poll"]["worker_id"], "w1");
        // A completion that schedules an activity wakes its queue and the
        // waits on its run: both relay messages and the signal key in one.
        cache.take();
        let task = &answer["task"];
        let completion = serde_json::from_value(json!({
            "lease_owner": task["lease_owner"],
            "workflow_task_attempt": task["workflow_task_attempt"],
            "commands": [{ "type": "schedule_activity", "activity_type": "charge",
                "task_queue": "q", "arguments": { "codec": "json", "blob": "[42]" } }],
        }))
        .unwrap();
        let task_id = task["task_id"].as_str().unwrap();
        engine.complete_workflow_task(task_id, completion).unwrap();
        assert_eq!(
            writes(cache.take()),
            [
                "batch[publish server:long-poll-signal:, put server:long-poll-signal:, \
              publish server:long-poll-signal:]"
            ]
        );
        let activity = spec(&engine, "q", "p-2", 0.5);
        let activity = answered(engine.begin_poll(TaskKind::Activity, &activity));
        assert_eq!(activity["task"]["activity_type"], "charge");
    }

    /// A poll whose claim committed keeps its answer when the cache then
    /// fails to store the replay key (a Redis round trip past its
    /// timeout): the worker gets the task instead of an error that would
    /// leave it leased to nobody until the lease ends, and a repeat of the
    /// request id still finds that task, through the store's binding.
    #[test]
    fn a_claimed_task_is_answered_when_its_replay_key_cannot_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(crate::cache::CountingCache::new());
        let engine = node_on(dir.path(), cache.clone(), |_| {});
        start(&engine, "wf-1", "q");
        let first = spec(&engine, "q", "p-1", 0.5);
        cache.fail_batches.store(true, Ordering::Relaxed);
        let answer = answered(engine.begin_poll(TaskKind::Workflow, &first));
        assert_eq!(answer["poll_status"], "leased", "{answer}");
        assert_eq!(answer["task"]["workflow_id"], "wf-1");
        assert!(
            cache
                .take()
                .iter()
                .any(|c| c.starts_with("batch[put server:workflow-task-poll-request:")),
            "the replay key's write was tried (and failed)"
        );
        assert_eq!(
            engine.post_commit_failures(),
            1,
            "counted as a step after a commit"
        );
        // An empty answer committed nothing: it is answered, not counted.
        let empty = spec(&engine, "idle", "p-2", 0.0);
        let empty = answered(engine.begin_poll(TaskKind::Workflow, &empty));
        assert!(empty["task"].is_null(), "{empty}");
        assert_eq!(engine.post_commit_failures(), 1);
        cache.fail_batches.store(false, Ordering::Relaxed);
        let repeat = answered(engine.begin_poll(TaskKind::Workflow, &first));
        assert_eq!(
            repeat["task"]["task_id"], answer["task"]["task_id"],
            "{repeat}"
        );
    }

    /// A node where a first step could block keeps it on the lane: the
    /// SQLite claim gate on, or task queues under a dispatch cap.
    #[test]
    fn a_gated_claim_or_a_capped_queue_keeps_the_first_step_on_the_lane() {
        let runtime = current_thread();
        for tweak in [
            (|c: &mut ServerConfig| c.sqlite_poll_claim_gate = Some(true)) as fn(&mut ServerConfig),
            |c: &mut ServerConfig| c.dispatches_per_minute = Some(1_000),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let engine = node(dir.path(), tweak);
            assert!(!engine.polls_from_async());
            start(&engine, "wf-1", "q");
            let first = spec(&engine, "q", "p-1", 0.5);
            let FirstStep::Lane(rest) =
                runtime.block_on(engine.begin_poll_now(TaskKind::Workflow, &first))
            else {
                panic!("the first step ran on the async thread");
            };
            assert_eq!(answered(rest(&engine))["poll_status"], "leased");
        }
    }
}
