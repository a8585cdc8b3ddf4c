//! Atomic transitions and idempotent client operations at the store.
//!
//! Each multi-step transition must commit as one unit: the tests make its
//! last step fail (a trigger that refuses the insert, the way a full disk
//! or a kill would cut it off) and check that none of its earlier steps
//! stayed behind. Retries with the same request id must converge to one
//! outcome, and idle worker registrations must be swept a bounded batch at
//! a time.

use crate::common;

use std::time::Duration;

use dwengine::store::{
    attempt_id, ActivityFence, Error, EventType, HistoryPageLimit, LeasedTask, RunStatus,
    SignalRequest, Store, TaskKind, WorkflowCommand, WorkflowTaskFence,
};
use serde_json::json;

const NO_WORKFLOW_TASKS: &str =
    "CREATE TRIGGER refuse_workflow_tasks BEFORE INSERT ON dispatch_tasks \
     WHEN NEW.kind = 'workflow' BEGIN SELECT RAISE(ABORT, 'refused'); END";

/// A store on a file, and a second connection to it for triggers and counts.
struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    sql: rusqlite::Connection,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let store = Store::open(&path, common::config(&[])).unwrap();
    let sql = rusqlite::Connection::open(&path).unwrap();
    Fixture {
        _dir: dir,
        store,
        sql,
    }
}

impl Fixture {
    fn count(&self, sql: &str) -> i64 {
        self.sql.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn execute(&self, sql: &str) {
        self.sql.execute_batch(sql).unwrap();
    }
}

/// The fence of a leased workflow task.
fn fence(task: &LeasedTask) -> WorkflowTaskFence<'_> {
    WorkflowTaskFence {
        lease_owner: &task.lease_owner,
        attempt: task.attempt,
    }
}

/// Completes a leased activity task with `result`.
fn complete_activity(
    store: &Store,
    task: &LeasedTask,
    result: serde_json::Value,
) -> Result<(), Error> {
    let attempt = attempt_id(task.task_id, task.attempt);
    let fence = ActivityFence {
        lease_owner: &task.lease_owner,
        activity_attempt_id: &attempt,
    };
    store
        .complete_activity_attempt(task.task_id, fence, &result)
        .map(|_| ())
}

fn lease(store: &Store, kind: TaskKind, poll: &str) -> dwengine::store::LeasedTask {
    store
        .lease_task(
            kind,
            "default",
            "orders",
            "w",
            poll,
            Duration::from_secs(30),
        )
        .unwrap()
        .unwrap_or_else(|| panic!("a ready {kind:?} task"))
}

#[test]
fn a_start_commits_with_its_first_workflow_task_or_not_at_all() {
    let f = fixture();
    let store = &f.store;
    let started = store.start_workflow(common::start("a"), None).unwrap();
    assert_eq!(
        f.count("SELECT COUNT(*) FROM dispatch_tasks WHERE kind = 'workflow' AND status = 'ready'"),
        1,
        "the start queued its first task"
    );
    assert!(!started.duplicate);

    f.execute(NO_WORKFLOW_TASKS);
    let refused = store.start_workflow(common::start("b"), None);
    assert!(refused.is_err(), "the task insert was refused");
    assert_eq!(
        f.count("SELECT COUNT(*) FROM runs WHERE workflow_id = 'b'"),
        0,
        "no run without its first task"
    );
}

#[test]
fn a_start_retried_with_its_request_id_returns_the_first_run() {
    let f = fixture();
    let store = &f.store;
    let first = store
        .start_workflow(common::start("a"), Some("req-1"))
        .unwrap();
    let retry = store
        .start_workflow(common::start("a"), Some("req-1"))
        .unwrap();
    assert_eq!(retry.run, first.run);
    assert!(retry.duplicate);
    assert_eq!(f.count("SELECT COUNT(*) FROM runs"), 1);
    assert_eq!(f.count("SELECT COUNT(*) FROM dispatch_tasks"), 1);
}

#[test]
fn an_activity_completion_commits_with_the_workflow_task_it_schedules() {
    let f = fixture();
    let store = &f.store;
    let run = store.start_workflow(common::start("a"), None).unwrap().run;
    let task = lease(store, TaskKind::Workflow, "p1");
    let commands = [WorkflowCommand::activity("charge", json!([1]))];
    store
        .complete_workflow_task(task.task_id, fence(&task), &commands)
        .unwrap();
    let activity = lease(store, TaskKind::Activity, "a1");

    f.execute(NO_WORKFLOW_TASKS);
    assert!(complete_activity(store, &activity, json!("charged")).is_err());
    let history = store.history(run).unwrap();
    assert!(
        !history
            .iter()
            .any(|e| e.event_type == EventType::ActivityCompleted),
        "ActivityCompleted without the workflow task that would see it"
    );
    assert_eq!(store.pending_counts(run).unwrap().activities, 1);
    f.execute("DROP TRIGGER refuse_workflow_tasks");
    // The worker's retry now succeeds instead of meeting a closed activity.
    complete_activity(store, &activity, json!("charged")).unwrap();
    // A retry of a report that committed (its answer lost) converges.
    let events = store.run(run).unwrap().history_length;
    complete_activity(store, &activity, json!("charged")).unwrap();
    assert_eq!(store.run(run).unwrap().history_length, events);
    assert_eq!(
        f.count("SELECT COUNT(*) FROM dispatch_tasks WHERE kind = 'workflow' AND status = 'ready'"),
        1
    );
}

#[test]
fn a_workflow_task_completion_is_one_transaction() {
    let f = fixture();
    let store = &f.store;
    let run = store.start_workflow(common::start("a"), None).unwrap().run;
    let task = lease(store, TaskKind::Workflow, "p1");
    store
        .signal(
            run,
            SignalRequest {
                name: "go".into(),
                payload: json!(1),
                request_id: None,
            },
        )
        .unwrap();
    // Refuse the activity's dispatch row: the last step of the completion.
    f.execute(
        "CREATE TRIGGER refuse_activity_tasks BEFORE INSERT ON dispatch_tasks \
         WHEN NEW.kind = 'activity' BEGIN SELECT RAISE(ABORT, 'refused'); END",
    );
    let commands = [WorkflowCommand::activity("charge", json!([1]))];
    assert!(store
        .complete_workflow_task(task.task_id, fence(&task), &commands)
        .is_err());
    assert_eq!(f.count("SELECT COUNT(*) FROM activities"), 0);
    assert_eq!(
        f.count("SELECT COUNT(*) FROM signals WHERE status = 'processed'"),
        0,
        "the signal stays unprocessed"
    );
    assert_eq!(store.pending_counts(run).unwrap().signals, 1);
    assert_eq!(
        f.count(&format!(
            "SELECT COUNT(*) FROM dispatch_tasks WHERE id = {} AND status = 'leased'",
            task.task_id
        )),
        1,
        "the task is still leased, so the worker can retry it"
    );
}

#[test]
fn due_timers_fire_with_their_workflow_tasks_or_not_at_all() {
    let f = fixture();
    let store = &f.store;
    let run = store.start_workflow(common::start("a"), None).unwrap().run;
    let task = lease(store, TaskKind::Workflow, "p1");
    store
        .complete_workflow_task(task.task_id, fence(&task), &[WorkflowCommand::timer(0)])
        .unwrap();
    f.execute(NO_WORKFLOW_TASKS);
    assert!(store
        .fire_due_timers("default", "orders", None, 5, 0)
        .is_err());
    assert_eq!(store.pending_counts(run).unwrap().timers, 1);
    assert_eq!(
        f.count("SELECT COUNT(*) FROM dispatch_tasks WHERE kind = 'timer' AND status = 'ready'"),
        1
    );
}

#[test]
fn cancel_is_recorded_once_and_terminate_retries_converge() {
    let f = fixture();
    let store = &f.store;
    let run = store.start_workflow(common::start("a"), None).unwrap().run;
    let first = store.cancel(run, &"x".repeat(1000), Some("c-1")).unwrap();
    assert!(!first.duplicate);
    let length = store.run(run).unwrap().history_length;
    for i in 0..200 {
        let again = store
            .cancel(run, &"x".repeat(1000), Some(&format!("c-{}", i % 3)))
            .unwrap();
        assert!(again.duplicate);
    }
    assert_eq!(
        store.run(run).unwrap().history_length,
        length,
        "repeated cancels write no history"
    );
    assert!(store.cancel(run, "", Some("c-1")).unwrap().same_request);
    assert_eq!(store.run(run).unwrap().status, RunStatus::Cancelled);
    assert!(matches!(
        store.terminate(run, "stop", Some("t-1")),
        Err(Error::RunNotActive { .. })
    ));

    let run = store.start_workflow(common::start("b"), None).unwrap().run;
    let stopped = store.terminate(run, "stop", Some("t-1")).unwrap();
    assert!(!stopped.duplicate);
    let retry = store.terminate(run, "stop", Some("t-1")).unwrap();
    assert!(retry.duplicate && retry.same_request);
    assert!(matches!(
        store.terminate(run, "stop", Some("t-2")),
        Err(Error::RunNotActive { .. })
    ));
    assert_eq!(
        f.count("SELECT COUNT(*) FROM history_events WHERE event_type = 'WorkflowTerminated'"),
        1
    );
    assert_eq!(store.run(run).unwrap().status, RunStatus::Terminated);
}

#[test]
fn expired_activity_leases_are_recovered_and_heartbeats_extend_them() {
    let f = fixture();
    let store = &f.store;
    store.start_workflow(common::start("a"), None).unwrap();
    let task = lease(store, TaskKind::Workflow, "p1");
    let commands = [
        WorkflowCommand::activity("charge", json!([1])),
        WorkflowCommand::activity("ship", json!([2])),
    ];
    store
        .complete_workflow_task(task.task_id, fence(&task), &commands)
        .unwrap();
    let short = Duration::from_millis(50);
    let dead = store
        .lease_task(TaskKind::Activity, "default", "orders", "w", "a1", short)
        .unwrap()
        .unwrap();
    let alive = store
        .lease_task(TaskKind::Activity, "default", "orders", "w", "a2", short)
        .unwrap()
        .unwrap();
    let alive_leased = std::time::Instant::now();
    // Heartbeats extend the live lease by far more than a loaded machine
    // stalls between two of them (each extended by only its 50 ms, the
    // live lease too expired whenever a heartbeat came late), until the
    // other lease has expired and the live one's first 50 ms are past.
    let deadline = alive_leased + Duration::from_secs(60);
    loop {
        store
            .extend_lease(alive.task_id, Duration::from_secs(120))
            .unwrap();
        let expired = store.expired_leases(TaskKind::Activity, 5).unwrap();
        if expired.contains(&dead.task_id) && alive_leased.elapsed() > 2 * short {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease without heartbeats never expired: {expired:?}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(
        store.expired_leases(TaskKind::Activity, 5).unwrap(),
        vec![dead.task_id],
        "only the lease without heartbeats expired"
    );
    assert!(store
        .expired_leases(TaskKind::Activity, 0)
        .unwrap()
        .is_empty());
    assert!(store.recover_expired_lease(dead.task_id).unwrap());
    let again = lease(store, TaskKind::Activity, "a3");
    assert_eq!((again.task_id, again.attempt), (dead.task_id, 2));
    complete_activity(store, &again, json!(1)).unwrap();
    assert!(matches!(
        store.extend_lease(again.task_id, short),
        Err(Error::AlreadyClosed { .. })
    ));
}

#[test]
fn idle_worker_registrations_are_swept_a_bounded_batch_at_a_time() {
    let f = fixture();
    let store = &f.store;
    for i in 0..25 {
        store
            .record_worker("ns", &format!("w{i}"), "orders")
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(10));
    let idle_before = dwengine_now_ms();
    std::thread::sleep(Duration::from_millis(10));
    store.record_worker("ns", "fresh", "orders").unwrap();
    assert_eq!(store.prune_idle_workers(idle_before, 10).unwrap(), 10);
    assert_eq!(store.worker_count().unwrap(), 16);
    assert_eq!(store.prune_idle_workers(idle_before, 10).unwrap(), 10);
    assert_eq!(store.prune_idle_workers(idle_before, 10).unwrap(), 5);
    assert_eq!(store.prune_idle_workers(idle_before, 10).unwrap(), 0);
    assert_eq!(store.worker_count().unwrap(), 1, "the fresh worker stays");
    assert!(store.worker_registered("ns", "fresh", idle_before).unwrap());
    assert!(!store.worker_registered("ns", "w0", 0).unwrap());
}

#[test]
fn history_is_read_a_bounded_page_at_a_time() {
    let f = fixture();
    let store = &f.store;
    let run = store.start_workflow(common::start("a"), None).unwrap().run;
    for i in 0..9 {
        store
            .signal(
                run,
                SignalRequest {
                    name: "blob".into(),
                    payload: json!("x".repeat(1000 + i)),
                    request_id: None,
                },
            )
            .unwrap();
    }
    let limit = HistoryPageLimit {
        max_events: 4,
        max_bytes: 2500,
    };
    let mut after = 0;
    let mut seen = Vec::new();
    loop {
        let page = store.history_page(run, after, limit).unwrap();
        assert!(!page.events.is_empty() && page.events.len() <= 4);
        let bytes: usize = page
            .events
            .iter()
            .map(|e| e.event_type.as_str().len() + e.payload.to_string().len())
            .sum();
        assert!(page.events.len() == 1 || bytes <= 2500, "{bytes} bytes");
        seen.extend(page.events.iter().map(|e| e.sequence));
        match page.next_sequence {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(seen, (0..10).collect::<Vec<u64>>());
    // The whole-history read walks the same pages.
    let whole: Vec<u64> = store
        .history(run)
        .unwrap()
        .iter()
        .map(|e| e.sequence)
        .collect();
    assert_eq!(whole, seen);
    let task = lease(store, TaskKind::Workflow, "p1");
    assert_eq!(
        task.history_length, 10,
        "a lease names the history, never loads it"
    );
}

fn dwengine_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn unprocessed_message_payloads_are_capped_in_bytes_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path().join("runs.sqlite"),
        dwengine::store::StoreConfig {
            max_pending_payload_bytes: 10_000,
            ..common::config(&[])
        },
    )
    .unwrap();
    let run = store.start_workflow(common::start("a"), None).unwrap().run;
    let blob = |n: usize| SignalRequest {
        name: "blob".into(),
        payload: json!("x".repeat(n)),
        request_id: None,
    };
    for _ in 0..3 {
        store.signal(run, blob(3000)).unwrap();
    }
    let refused = store.signal(run, blob(3000));
    assert!(
        matches!(
            refused,
            Err(Error::PendingPayloadBudget {
                pending_bytes: 9006,
                payload_bytes: 3002,
                limit: 10_000,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(
        store.submit_update(run, blob(3000)).is_err(),
        "updates share the budget"
    );
    assert_eq!(store.pending_counts(run).unwrap().signals, 3);
    // Processing a signal gives its bytes back.
    let task = lease(&store, TaskKind::Workflow, "p1");
    store
        .complete_workflow_task(task.task_id, fence(&task), &[])
        .unwrap();
    store.signal(run, blob(3000)).unwrap();
}
