//! The store's worker hand-off: leases, the poll binding, and marked retention.

use crate::common;

use std::time::Duration;

use dwengine::store::{RunStatus, TaskKind, WorkflowCommand, WorkflowTaskFence};

#[test]
fn a_lease_is_bound_to_its_poll_and_returns_after_expiry() {
    let store = common::memory_store(&[]);
    let run = store.start_run(common::start("wf")).unwrap();
    assert!(store.enqueue_workflow_task(run).unwrap());
    assert!(
        !store.enqueue_workflow_task(run).unwrap(),
        "one waiting task per run"
    );
    let ns = common::start("wf").namespace;
    let queue = common::start("wf").task_queue;
    let lease = Duration::from_millis(30);
    let task = store
        .lease_task(TaskKind::Workflow, &ns, &queue, "w", "poll-1", lease)
        .unwrap()
        .expect("a ready task");
    assert!(store
        .lease_task(TaskKind::Workflow, &ns, &queue, "w", "poll-2", lease)
        .unwrap()
        .is_none());
    let bound = store
        .leased_by_poll_request(TaskKind::Workflow, &ns, &queue, "poll-1")
        .unwrap()
        .unwrap();
    assert_eq!(bound.task_id, task.task_id);
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(
        store.expired_workflow_leases(5).unwrap(),
        vec![task.task_id]
    );
    assert!(store.recover_expired_lease(task.task_id).unwrap());
    let again = store
        .lease_task(TaskKind::Workflow, &ns, &queue, "w", "poll-3", lease)
        .unwrap()
        .unwrap();
    assert_eq!((again.task_id, again.attempt), (task.task_id, 2));
}

#[test]
fn retention_prunes_only_marked_closed_runs_and_keeps_the_root_row() {
    let store = common::memory_store(&[]);
    let run = store.start_run(common::start("done")).unwrap();
    let open = store.start_run(common::start("open")).unwrap();
    store.enqueue_workflow_task(run).unwrap();
    let ns = common::start("done").namespace;
    let queue = common::start("done").task_queue;
    let task = store
        .lease_task(
            TaskKind::Workflow,
            &ns,
            &queue,
            "w",
            "p",
            Duration::from_secs(5),
        )
        .unwrap()
        .unwrap();
    let fence = WorkflowTaskFence {
        lease_owner: &task.lease_owner,
        attempt: task.attempt,
    };
    store
        .complete_workflow_task(
            task.task_id,
            fence,
            &[WorkflowCommand::CompleteWorkflow { result: 1.into() }],
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let cutoff = i64::MAX;
    assert_eq!(store.prune_one_expired_run(&ns, cutoff).unwrap(), Some(run));
    assert_eq!(
        store.prune_one_expired_run(&ns, cutoff).unwrap(),
        None,
        "the open run is kept"
    );
    assert!(store.history(run).unwrap().is_empty());
    assert!(!store.history(open).unwrap().is_empty());
    let described = store.describe(run).unwrap();
    assert_eq!(described.run.status, RunStatus::Completed);
    assert!(described.details_pruned_at_ms.is_some());
}

/// A timer as a queue driver that carries timers (SQS) sees it: the
/// completion hands over each armed timer with its due time; its delivery
/// fires it once it is due, exactly once; the poll passes leave a timer
/// due less than the driver's grace ago to the driver.
#[test]
fn an_armed_timer_fires_once_by_its_delivery_and_the_polls_wait_out_the_grace() {
    let store = common::memory_store(&[]);
    let start = common::start("sleeper");
    let (ns, queue) = (start.namespace.clone(), start.task_queue.clone());
    let run = store.start_run(start).unwrap();
    assert!(store.enqueue_workflow_task(run).unwrap());
    let lease = Duration::from_secs(30);
    let task = store
        .lease_task(TaskKind::Workflow, &ns, &queue, "w", "poll-1", lease)
        .unwrap()
        .expect("a ready task");
    let fence = WorkflowTaskFence {
        lease_owner: &task.lease_owner,
        attempt: task.attempt,
    };
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let completion = store
        .complete_workflow_task(
            task.task_id,
            fence,
            &[WorkflowCommand::timer(3600), WorkflowCommand::timer(0)],
        )
        .unwrap();
    let [later, now] = completion.timers[..] else {
        panic!("two armed timers: {:?}", completion.timers);
    };
    assert!(later.due_at_ms >= before + 3_600_000, "{later:?}");
    assert!(now.due_at_ms >= before && now.due_at_ms < later.due_at_ms);
    assert_eq!(
        store.armed_timer_due_at(later.timer_id).unwrap(),
        Some(later.due_at_ms)
    );
    // Not due: its delivery fires nothing (the driver sends the next hop).
    assert_eq!(store.fire_timer_if_due(later.timer_id).unwrap(), None);
    // Due now, but within a minute's grace: the polls leave it alone.
    assert!(store.has_due_timers(&ns, &queue, None, 0).unwrap());
    assert!(!store.has_due_timers(&ns, &queue, None, 60_000).unwrap());
    assert_eq!(
        store.fire_due_timers(&ns, &queue, None, 5, 60_000).unwrap(),
        0
    );
    // Its delivery fires it and names the queue to wake; a second does not.
    assert_eq!(
        store.fire_timer_if_due(now.timer_id).unwrap(),
        Some((ns.clone(), queue.clone()))
    );
    assert_eq!(store.fire_timer_if_due(now.timer_id).unwrap(), None);
    assert_eq!(store.armed_timer_due_at(now.timer_id).unwrap(), None);
    // Nor does a poll pass, grace or not.
    assert_eq!(store.fire_due_timers(&ns, &queue, None, 5, 0).unwrap(), 0);
    let fired = store
        .history(run)
        .unwrap()
        .iter()
        .filter(|e| e.event_type == dwengine::store::EventType::TimerFired)
        .count();
    assert_eq!(fired, 1);
    assert_eq!(store.pending_counts(run).unwrap().timers, 1);
    // The run's next workflow task was queued by the firing.
    assert!(store
        .lease_task(TaskKind::Workflow, &ns, &queue, "w", "poll-2", lease)
        .unwrap()
        .is_some());
}
