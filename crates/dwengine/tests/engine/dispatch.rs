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
