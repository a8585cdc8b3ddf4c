//! Signals that arrive while a workflow task is leased: acknowledged and
//! durable at once, recorded in history after that task's own events.

use crate::common;

use std::time::Duration;

use dwengine::store::{
    Admission, Error, EventType, RunId, RunStatus, SignalRequest, Store, StoreConfig, TaskKind,
    WorkflowCommand, WorkflowTaskFence,
};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(300);

fn lease(store: &Store, poll: &str, lease: Duration) -> dwengine::store::LeasedTask {
    let start = common::start("unused");
    store
        .lease_task(
            TaskKind::Workflow,
            &start.namespace,
            &start.task_queue,
            "worker",
            poll,
            lease,
        )
        .unwrap()
        .expect("a ready workflow task")
}

fn signal(store: &Store, run: RunId, name: &str, request_id: Option<&str>) -> i64 {
    match store
        .signal(
            run,
            SignalRequest {
                name: name.to_owned(),
                payload: json!([name]),
                request_id: request_id.map(str::to_owned),
            },
        )
        .unwrap()
    {
        Admission::Accepted { id, .. } => id,
        other => panic!("signal refused: {other:?}"),
    }
}

fn wait_for(key: &str) -> WorkflowCommand {
    serde_json::from_value(json!({
        "type": "open_condition_wait",
        "condition_key": key,
        "condition_wait_occurrence_id": format!("{key}-1"),
    }))
    .unwrap()
}

fn types(store: &Store, run: RunId) -> Vec<EventType> {
    store
        .history(run)
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

fn fence(task: &dwengine::store::LeasedTask) -> WorkflowTaskFence<'_> {
    WorkflowTaskFence {
        lease_owner: "worker",
        attempt: task.attempt,
    }
}

fn started_with_task(store: &Store, id: &str) -> RunId {
    let run = store.start_run(common::start(id)).unwrap();
    store.enqueue_workflow_task(run).unwrap();
    run
}

#[test]
fn a_signal_during_a_task_is_recorded_after_the_tasks_commands() {
    let store = common::memory_store(&[]);
    let run = started_with_task(&store, "order-during");
    let task = lease(&store, "p1", LEASE);
    let id = signal(&store, run, "approve", None);
    // Acknowledged and counted now; its event waits for the task.
    assert_eq!(store.pending_counts(run).unwrap().signals, 1);
    assert_eq!(types(&store, run), vec![EventType::WorkflowStarted]);

    let done = store
        .complete_workflow_task(task.task_id, fence(&task), &[wait_for("approved")])
        .unwrap();
    assert!(done.workflow_task_queued, "the signal needs a task");
    let history = store.history(run).unwrap();
    let kinds: Vec<_> = history.iter().map(|e| e.event_type).collect();
    assert_eq!(
        kinds,
        vec![
            EventType::WorkflowStarted,
            EventType::ConditionWaitOpened,
            EventType::SignalReceived
        ]
    );
    assert_eq!(history[2].payload["signal_id"], json!(id));
    assert_eq!(history[2].payload["signal_name"], json!("approve"));
    assert_eq!(store.pending_counts(run).unwrap().signals, 1);

    // The next task shows it and processes it.
    let next = lease(&store, "p2", LEASE);
    store
        .complete_workflow_task(next.task_id, fence(&next), &[wait_for("approved")])
        .unwrap();
    assert_eq!(store.pending_counts(run).unwrap().signals, 0);
    assert_eq!(
        types(&store, run)
            .iter()
            .filter(|t| **t == EventType::SignalReceived)
            .count(),
        1
    );
}

#[test]
fn a_signal_with_no_task_leased_is_recorded_at_once() {
    let store = common::memory_store(&[]);
    let run = started_with_task(&store, "order-idle");
    signal(&store, run, "approve", None);
    assert_eq!(
        types(&store, run),
        vec![EventType::WorkflowStarted, EventType::SignalReceived]
    );
}

#[test]
fn several_held_signals_keep_their_order_and_a_retried_request_converges() {
    let store = common::memory_store(&[]);
    let run = started_with_task(&store, "order-many");
    let task = lease(&store, "p1", LEASE);
    let first = signal(&store, run, "a", Some("req-a"));
    let second = signal(&store, run, "b", None);
    assert_eq!(
        signal(&store, run, "a", Some("req-a")),
        first,
        "same request, same signal"
    );
    assert_eq!(store.pending_counts(run).unwrap().signals, 2);
    store
        .complete_workflow_task(task.task_id, fence(&task), &[wait_for("k")])
        .unwrap();
    // A retry after the completion still finds the one signal.
    assert_eq!(signal(&store, run, "a", Some("req-a")), first);
    let received: Vec<_> = store
        .history(run)
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type == EventType::SignalReceived)
        .map(|e| e.payload["signal_id"].clone())
        .collect();
    assert_eq!(received, vec![json!(first), json!(second)]);
}

#[test]
fn a_failed_task_gives_its_held_signals_to_the_retry() {
    let store = common::memory_store(&[]);
    let run = started_with_task(&store, "order-fail");
    let task = lease(&store, "p1", LEASE);
    signal(&store, run, "approve", None);
    store
        .fail_workflow_task_attempt(task.task_id, fence(&task), &json!({"message": "boom"}))
        .unwrap();
    assert_eq!(
        types(&store, run),
        vec![
            EventType::WorkflowStarted,
            EventType::WorkflowTaskFailed,
            EventType::SignalReceived
        ]
    );
    assert_eq!(store.pending_counts(run).unwrap().signals, 1);
}

#[test]
fn a_timed_out_task_gives_its_held_signals_to_the_next() {
    let store = common::memory_store(&[]);
    let run = started_with_task(&store, "order-timeout");
    let task = lease(&store, "p1", Duration::from_millis(1));
    signal(&store, run, "approve", None);
    assert_eq!(types(&store, run), vec![EventType::WorkflowStarted]);
    // Wait (generously) for the lease to be past its expiry.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !store
        .expired_workflow_leases(10)
        .unwrap()
        .contains(&task.task_id)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never expired"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(store.recover_expired_lease(task.task_id).unwrap());
    assert_eq!(
        types(&store, run),
        vec![EventType::WorkflowStarted, EventType::SignalReceived]
    );
    let next = lease(&store, "p2", LEASE);
    store
        .complete_workflow_task(next.task_id, fence(&next), &[wait_for("k")])
        .unwrap();
    assert_eq!(store.pending_counts(run).unwrap().signals, 0);
}

#[test]
fn a_run_closed_during_the_task_records_its_held_signals_first() {
    let store = common::memory_store(&[]);
    let run = started_with_task(&store, "order-close");
    let _task = lease(&store, "p1", LEASE);
    signal(&store, run, "approve", None);
    store.terminate(run, "operator", None).unwrap();
    assert_eq!(
        types(&store, run),
        vec![
            EventType::WorkflowStarted,
            EventType::SignalReceived,
            EventType::WorkflowTerminated
        ]
    );
    assert_eq!(store.run(run).unwrap().status, RunStatus::Terminated);
}

#[test]
fn held_signals_count_against_the_pending_payload_budget() {
    let config = StoreConfig {
        max_pending_payload_bytes: 24,
        ..common::config(&[])
    };
    let store = if common::postgres() {
        Store::open_postgres(&common::postgres_schema_url(), config).unwrap()
    } else {
        Store::open_in_memory(config).unwrap()
    };
    let run = started_with_task(&store, "order-budget");
    let _task = lease(&store, "p1", LEASE);
    signal(&store, run, "first-signal", None);
    let refused = store.signal(
        run,
        SignalRequest {
            name: "second".into(),
            payload: json!(["second-signal-payload"]),
            request_id: None,
        },
    );
    assert!(
        matches!(refused, Err(Error::PendingPayloadBudget { .. })),
        "{refused:?}"
    );
}

#[test]
fn a_held_signal_survives_a_restart_before_the_completion() {
    // The same database opened twice: a file (SQLite) or a schema (PostgreSQL).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let url = common::postgres().then(common::postgres_schema_url);
    let open = || match &url {
        Some(url) => Store::open_postgres(url, common::config(&[])).unwrap(),
        None => Store::open(&path, common::config(&[])).unwrap(),
    };
    let (run, id) = {
        let store = open();
        let run = started_with_task(&store, "order-restart");
        let _task = lease(&store, "p1", Duration::from_millis(1));
        (run, signal(&store, run, "approve", None))
        // The store goes away here with the task still leased.
    };
    let store = open();
    assert_eq!(store.pending_counts(run).unwrap().signals, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let expired = loop {
        let expired = store.expired_workflow_leases(10).unwrap();
        if !expired.is_empty() {
            break expired;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never expired"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(store.recover_expired_lease(expired[0]).unwrap());
    let next = lease(&store, "p2", LEASE);
    let history = store.task_history_page(next.task_id, 0).unwrap();
    let received: Vec<_> = history
        .events
        .iter()
        .filter(|e| e.event_type == EventType::SignalReceived)
        .map(|e| e.payload["signal_id"].clone())
        .collect();
    assert_eq!(
        received,
        vec![json!(id)],
        "the new task's delivery shows it"
    );
}

#[test]
fn a_held_signal_reaches_an_open_signal_wait_after_the_task() {
    let store = common::memory_store(&[]);
    let run = started_with_task(&store, "order-wait");
    let task = lease(&store, "p1", LEASE);
    let open: WorkflowCommand =
        serde_json::from_value(json!({"type": "open_signal_wait", "signal_name": "go"})).unwrap();
    store
        .complete_workflow_task(task.task_id, fence(&task), &[open])
        .unwrap();
    // Another task is in flight (a worker's wake-up) when the signal comes.
    store.enqueue_workflow_task(run).unwrap();
    let task = lease(&store, "p2", LEASE);
    signal(&store, run, "go", None);
    assert_eq!(
        types(&store, run),
        vec![EventType::WorkflowStarted, EventType::SignalWaitOpened],
        "neither received nor applied while the task runs"
    );
    store
        .release_waiting_workflow_task(task.task_id, fence(&task))
        .unwrap();
    assert_eq!(
        types(&store, run),
        vec![
            EventType::WorkflowStarted,
            EventType::SignalWaitOpened,
            EventType::SignalReceived,
            EventType::SignalApplied
        ]
    );
}
