//! `command_batch_size` counts the leaf operations of one `all()` group, as
//! the structural-limits contract says, not every command of a completion;
//! and an approaching-limit warning is written once per limit kind per
//! workflow task, however many items pass the threshold.

use crate::common;

use std::time::Duration;

use dwengine::store::{LeasedTask, RunStatus, Store, TaskKind, WorkflowCommand, WorkflowTaskFence};
use dwpolicy::LimitKind;
use serde_json::{json, Value};

fn lease(store: &Store) -> LeasedTask {
    store
        .lease_task(
            TaskKind::Workflow,
            "default",
            "orders",
            "w",
            "p",
            Duration::from_secs(30),
        )
        .unwrap()
        .expect("a ready workflow task")
}

fn fence(task: &LeasedTask) -> WorkflowTaskFence<'_> {
    WorkflowTaskFence {
        lease_owner: &task.lease_owner,
        attempt: task.attempt,
    }
}

/// `size` activities in one `all()` group whose first member takes `base`.
fn group(base: i64, size: i64) -> Vec<WorkflowCommand> {
    (0..size)
        .map(|index| {
            let command: Value = json!({
                "type": "schedule_activity", "activity_type": "charge", "arguments": [index],
                "parallel_group_id": format!("activity:{base}:{size}"),
                "parallel_group_kind": "activity", "parallel_group_base_sequence": base,
                "parallel_group_size": size, "parallel_group_index": index,
            });
            serde_json::from_value(command).unwrap()
        })
        .collect()
}

#[test]
fn a_group_at_the_batch_size_passes_beside_other_groups_and_single_commands() {
    let store = common::memory_store(&[(LimitKind::CommandBatchSize, 3)]);
    let run = store
        .start_workflow(common::start("batch"), None)
        .unwrap()
        .run;
    let task = lease(&store);
    // Seven commands in all: two groups of 3 and 2, and two outside a group.
    let mut commands = group(1, 3);
    commands.extend(group(4, 2));
    commands.push(WorkflowCommand::activity("audit", json!([])));
    commands.push(WorkflowCommand::timer(60));
    let done = store
        .complete_workflow_task(task.task_id, fence(&task), &commands)
        .unwrap();
    assert_eq!(done.run_status, RunStatus::Running);
    assert!(done.structural_limit.is_none());
    assert_eq!(store.pending_counts(run).unwrap().activities, 6);
}

#[test]
fn a_group_past_the_batch_size_fails_the_run_before_any_member_is_written() {
    let store = common::memory_store(&[(LimitKind::CommandBatchSize, 3)]);
    let run = store
        .start_workflow(common::start("batch"), None)
        .unwrap()
        .run;
    let task = lease(&store);
    let mut commands = vec![WorkflowCommand::activity("first", json!([]))];
    commands.extend(group(2, 4));
    let done = store
        .complete_workflow_task(task.task_id, fence(&task), &commands)
        .unwrap();
    assert_eq!(done.run_status, RunStatus::Failed);
    let exceeded = done.structural_limit.expect("the batch limit");
    assert_eq!(exceeded.kind, LimitKind::CommandBatchSize);
    assert_eq!((exceeded.value, exceeded.configured), (4, 3));
    // Nothing of the completion stayed: not even the command before the group.
    assert_eq!(store.pending_counts(run).unwrap().activities, 0);
}

#[test]
fn a_warning_is_written_once_per_kind_per_task() {
    // 80 % of 10 pending activities is 8: the 9th and 10th pass it.
    let store = common::memory_store(&[
        (LimitKind::PendingActivityCount, 10),
        (LimitKind::CommandBatchSize, 10),
    ]);
    store.start_workflow(common::start("warn"), None).unwrap();
    let task = lease(&store);
    let mut commands = group(1, 10);
    commands.extend((0..2).map(|_| WorkflowCommand::timer(60)));
    let done = store
        .complete_workflow_task(task.task_id, fence(&task), &commands)
        .unwrap();
    assert!(done.structural_limit.is_none());
    let kinds: Vec<LimitKind> = done.warnings.iter().map(|w| w.limit_kind).collect();
    // The batch of 10 at its limit warns once; the activities past 8 once.
    assert_eq!(
        kinds,
        [LimitKind::CommandBatchSize, LimitKind::PendingActivityCount],
        "{:?}",
        done.warnings
    );
}
