//! Executor-side enforcement: what a task may schedule, and how a limit hit
//! fails the run.

use crate::common;

use std::time::Duration;

use common::{memory_store, started};
use dwengine::store::{
    ChildWorkflow, Command, CommandOutput, Error, EventType, Next, RunStatus, TaskOutcome,
};
use dwpolicy::{LimitKind, StructuralLimitExceeded};
use serde_json::{json, Map, Value};

fn exceeded(kind: LimitKind, value: u64, configured: u64) -> TaskOutcome {
    TaskOutcome::StructuralLimit(StructuralLimitExceeded {
        kind,
        value,
        configured,
    })
}

fn map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[test]
fn the_activity_at_the_limit_fails_the_run_and_discards_the_task() {
    let mut store = memory_store(&[(LimitKind::PendingActivityCount, 3)]);
    let run = started(&mut store, "w1");
    let report = store
        .execute_task(run, |task| {
            for i in 0..5 {
                task.schedule_activity("charge", &json!({ "i": i }))?;
            }
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(
        report.outcome,
        exceeded(LimitKind::PendingActivityCount, 3, 3)
    );
    assert_eq!(report.new_events, 0);

    let state = store.run(run).unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(
        state.pending.activities, 0,
        "the task's activities were discarded"
    );
    let history = store.history(run).unwrap();
    let types: Vec<_> = history.iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        [EventType::WorkflowStarted, EventType::WorkflowFailed]
    );
    assert_eq!(
        history[1].payload,
        json!({
            "failure_category": "structural_limit",
            "structural_limit_kind": "pending_activity_count",
            "structural_limit_value": 3,
            "structural_limit_configured": 3,
            "message": "structural limit [pending_activity_count] exceeded: 3 / 3",
        })
    );
    let failures = store.failures(run).unwrap();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].failure_category, "structural_limit");
    assert_eq!(
        failures[0].structural_limit_kind.as_deref(),
        Some("pending_activity_count")
    );
    assert_eq!(failures[0].structural_limit_value, Some(3));
    assert_eq!(failures[0].structural_limit_configured, Some(3));

    // A failed run takes no more tasks.
    let again = store.execute_task(run, |_| Ok(Next::Wait));
    assert!(matches!(
        again,
        Err(Error::RunNotActive {
            status: RunStatus::Failed,
            ..
        })
    ));
}

#[test]
fn earlier_tasks_count_toward_the_pending_limit_and_completions_release_it() {
    let mut store = memory_store(&[(LimitKind::PendingActivityCount, 2)]);
    let run = started(&mut store, "w1");
    let mut ids = Vec::new();
    let report = store
        .execute_task(run, |task| {
            ids.push(task.schedule_activity("a", &1)?);
            ids.push(task.schedule_activity("a", &2)?);
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(report.outcome, TaskOutcome::Waiting);
    assert_eq!(store.pending_counts(run).unwrap().activities, 2);

    store.complete_activity(ids[0], json!("ok")).unwrap();
    store.fail_activity(ids[1], "boom").unwrap();
    assert_eq!(store.pending_counts(run).unwrap().activities, 0);
    assert!(matches!(
        store.complete_activity(ids[0], json!("again")),
        Err(Error::AlreadyClosed { .. })
    ));

    // The workflow replays its two commands and schedules two more: the
    // released slots make room, a fifth would not fit.
    let report = store
        .execute_task(run, |task| {
            let first = task.schedule_activity("a", &1)?;
            assert_eq!(first, ids[0], "replay returns the recorded id");
            task.schedule_activity("a", &2)?;
            assert!(!task.is_replaying());
            task.schedule_activity("a", &3)?;
            task.schedule_activity("a", &4)?;
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(report.outcome, TaskOutcome::Waiting);
    assert_eq!(report.replayed_commands, 2);
    assert_eq!(report.new_events, 2);
    assert_eq!(store.pending_counts(run).unwrap().activities, 2);
}

#[test]
fn fan_out_checks_the_batch_size_before_scheduling_anything() {
    let mut store = memory_store(&[(LimitKind::CommandBatchSize, 4)]);
    let run = started(&mut store, "w1");
    // Exactly the limit passes, as the reference's `batchSize > limit` guard.
    let full: Vec<_> = (0..4).map(|i| Command::activity("a", json!(i))).collect();
    let report = store
        .execute_task(run, |task| {
            let out = task.all(&full)?;
            assert_eq!(out.len(), 4);
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(report.outcome, TaskOutcome::Waiting);
    let batch_warning = report
        .warnings
        .iter()
        .find(|w| w.limit_kind == LimitKind::CommandBatchSize)
        .expect("a full batch warns");
    assert_eq!(batch_warning.utilization_percent, 100);
    assert_eq!(store.pending_counts(run).unwrap().activities, 4);

    // Nested leaves count: 2 activities + 1 timer + 2 nested activities = 5.
    let run2 = started(&mut store, "w2");
    let nested = vec![
        Command::activity("a", json!(1)),
        Command::activity("a", json!(2)),
        Command::Timer {
            delay: Duration::from_secs(1),
        },
        Command::All(vec![
            Command::activity("b", json!(3)),
            Command::activity("b", json!(4)),
        ]),
    ];
    let mut scheduled_before_failure = None;
    let report = store
        .execute_task(run2, |task| {
            let result = task.all(&nested);
            scheduled_before_failure = Some(task.pending());
            result?;
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(report.outcome, exceeded(LimitKind::CommandBatchSize, 5, 4));
    let pending = scheduled_before_failure.unwrap();
    assert_eq!(
        (pending.activities, pending.timers),
        (0, 0),
        "nothing was partially scheduled"
    );
    assert_eq!(store.run(run2).unwrap().status, RunStatus::Failed);
}

#[test]
fn fan_out_results_have_the_shape_of_the_commands() {
    let mut store = memory_store(&[]);
    let run = started(&mut store, "w1");
    let commands = vec![
        Command::activity("a", json!(1)),
        Command::Child(ChildWorkflow {
            workflow_id: "child-1".into(),
            workflow_type: "Child".into(),
            arguments: json!({}),
        }),
        Command::All(vec![Command::Timer {
            delay: Duration::from_millis(5),
        }]),
    ];
    let mut outputs = Vec::new();
    store
        .execute_task(run, |task| {
            outputs = task.all(&commands)?;
            Ok(Next::Wait)
        })
        .unwrap();
    assert!(matches!(outputs[0], CommandOutput::Activity(_)));
    assert!(matches!(outputs[1], CommandOutput::Child(_)));
    assert!(
        matches!(&outputs[2], CommandOutput::All(inner) if matches!(inner[0], CommandOutput::Timer(_)))
    );
    let pending = store.pending_counts(run).unwrap();
    assert_eq!(
        (pending.activities, pending.children, pending.timers),
        (1, 1, 1)
    );
}

#[test]
fn oversized_activity_arguments_fail_before_any_row_exists() {
    let mut store = memory_store(&[(LimitKind::PayloadSizeBytes, 64)]);
    let run = started(&mut store, "w1");
    let big = "x".repeat(100);
    let report = store
        .execute_task(run, |task| {
            task.schedule_activity("small", &"ok")?;
            task.schedule_activity("big", &big)?;
            Ok(Next::Wait)
        })
        .unwrap();
    // The encoded argument is the string plus its two quotes.
    assert_eq!(
        report.outcome,
        exceeded(LimitKind::PayloadSizeBytes, 102, 64)
    );
    assert_eq!(store.run(run).unwrap().pending.activities, 0);
    let scheduled = store
        .history(run)
        .unwrap()
        .iter()
        .filter(|e| e.event_type == EventType::ActivityScheduled)
        .count();
    assert_eq!(scheduled, 0);
}

#[test]
fn oversized_child_arguments_fail_before_the_child_run_exists() {
    let mut store = memory_store(&[(LimitKind::PayloadSizeBytes, 32)]);
    let run = started(&mut store, "parent");
    let child = ChildWorkflow {
        workflow_id: "child".into(),
        workflow_type: "Child".into(),
        arguments: json!({ "blob": "y".repeat(40) }),
    };
    let report = store
        .execute_task(run, |task| {
            task.start_child(&child)?;
            Ok(Next::Wait)
        })
        .unwrap();
    assert!(matches!(
        report.outcome,
        TaskOutcome::StructuralLimit(StructuralLimitExceeded {
            kind: LimitKind::PayloadSizeBytes,
            configured: 32,
            ..
        })
    ));
    // No child run is left behind, and the parent has no open child.
    assert!(matches!(
        store.run(dwengine::store::RunId(run.0 + 1)),
        Err(Error::RunNotFound(_))
    ));
    assert_eq!(store.pending_counts(run).unwrap().children, 0);
}

#[test]
fn a_closing_child_releases_the_parents_pending_child_count() {
    let mut store = memory_store(&[(LimitKind::PendingChildCount, 1)]);
    let parent = started(&mut store, "parent");
    let child_spec = ChildWorkflow {
        workflow_id: "child".into(),
        workflow_type: "Child".into(),
        arguments: json!([1, 2]),
    };
    let mut child = None;
    store
        .execute_task(parent, |task| {
            child = Some(task.start_child(&child_spec)?);
            Ok(Next::Wait)
        })
        .unwrap();
    let child = child.unwrap();
    assert_eq!(store.run(child).unwrap().parent, Some(parent));
    assert_eq!(store.pending_counts(parent).unwrap().children, 1);

    store
        .execute_task(child, |_| Ok(Next::Complete(json!("done"))))
        .unwrap();
    assert_eq!(store.run(child).unwrap().status, RunStatus::Completed);
    assert_eq!(store.pending_counts(parent).unwrap().children, 0);
    let last = store.history(parent).unwrap().pop().unwrap();
    assert_eq!(last.event_type, EventType::ChildWorkflowClosed);
    assert_eq!(last.payload["status"], "completed");
}

#[test]
fn memo_is_merged_then_checked_before_it_is_saved() {
    let mut store = memory_store(&[(LimitKind::MemoSizeBytes, 40)]);
    let run = started(&mut store, "w1");
    store
        .execute_task(run, |task| {
            task.upsert_memo(map(json!({ "a": 1, "b": "two" })))?;
            task.upsert_memo(map(json!({ "b": null, "c": 3 })))?;
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(store.run(run).unwrap().memo, map(json!({ "a": 1, "c": 3 })));

    // {"a":1,"c":3} is 13 bytes; adding a 25-byte value pushes the merged map over 40.
    let report = store
        .execute_task(run, |task| {
            task.upsert_memo(map(json!({ "a": 1, "b": "two" })))?;
            task.upsert_memo(map(json!({ "b": null, "c": 3 })))?;
            task.upsert_memo(map(json!({ "d": "x".repeat(25) })))?;
            Ok(Next::Wait)
        })
        .unwrap();
    // {"a":1,"c":3,"d":"xxxxxxxxxxxxxxxxxxxxxxxxx"} = 13 - 1 + 33 = 45 bytes.
    assert_eq!(report.outcome, exceeded(LimitKind::MemoSizeBytes, 45, 40));
    assert_eq!(store.run(run).unwrap().memo, map(json!({ "a": 1, "c": 3 })));
}

#[test]
fn search_attributes_are_merged_with_the_existing_set() {
    let store = memory_store(&[(LimitKind::SearchAttributeSizeBytes, 30)]);
    let mut start = common::start("w1");
    start.search_attributes = map(json!({ "region": "eu" }));
    let run = store.start_run(start).unwrap();
    let report = store
        .execute_task(run, |task| {
            // {"region":"eu"} (15) + ,"tier":"gold" (14) = 29: fits.
            task.upsert_search_attributes(map(json!({ "tier": "gold" })))?;
            // Replacing tier with a longer value does not.
            task.upsert_search_attributes(map(json!({ "tier": "platinum" })))?;
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(
        report.outcome,
        exceeded(LimitKind::SearchAttributeSizeBytes, 33, 30)
    );
    assert_eq!(
        store.run(run).unwrap().search_attributes,
        map(json!({ "region": "eu" }))
    );
}

#[test]
fn history_transaction_size_counts_only_this_tasks_new_events() {
    let mut store = memory_store(&[(LimitKind::HistoryTransactionSize, 3)]);
    let run = started(&mut store, "w1");
    let workflow = |n: usize| {
        move |task: &mut dwengine::store::Task<'_>| -> Result<Next, Error> {
            for i in 0..n {
                task.side_effect(|| i)?;
            }
            Ok(Next::Wait)
        }
    };
    assert_eq!(store.execute_task(run, workflow(3)).unwrap().new_events, 3);
    // Three replayed + three new: replay does not count, so this fits too.
    let report = store.execute_task(run, workflow(6)).unwrap();
    assert_eq!((report.replayed_commands, report.new_events), (3, 3));
    // Six replayed + four new: the fourth new command's iteration sees 3 written.
    let report = store.execute_task(run, workflow(10)).unwrap();
    assert_eq!(
        report.outcome,
        exceeded(LimitKind::HistoryTransactionSize, 3, 3)
    );
}

#[test]
fn the_terminal_event_is_one_more_iteration() {
    let mut store = memory_store(&[(LimitKind::HistoryTransactionSize, 2)]);
    let run = started(&mut store, "w1");
    let report = store
        .execute_task(run, |task| {
            task.side_effect(|| 1)?;
            task.side_effect(|| 2)?;
            Ok(Next::Complete(json!(null)))
        })
        .unwrap();
    assert_eq!(
        report.outcome,
        exceeded(LimitKind::HistoryTransactionSize, 2, 2)
    );
}

#[test]
fn side_effects_run_once_and_replay_their_recorded_value() {
    let mut store = memory_store(&[]);
    let run = started(&mut store, "w1");
    let mut calls = 0;
    for _ in 0..3 {
        store
            .execute_task(run, |task| {
                let v: u32 = task.side_effect(|| {
                    calls += 1;
                    41 + calls
                })?;
                assert_eq!(v, 42);
                Ok(Next::Wait)
            })
            .unwrap();
    }
    assert_eq!(calls, 1);
}

#[test]
fn replay_refuses_a_different_command() {
    let mut store = memory_store(&[]);
    let run = started(&mut store, "w1");
    store
        .execute_task(run, |task| {
            task.schedule_activity("a", &())?;
            Ok(Next::Wait)
        })
        .unwrap();
    let timer_first = store.execute_task(run, |task| {
        task.start_timer(Duration::from_secs(1))?;
        Ok(Next::Wait)
    });
    assert!(matches!(
        timer_first,
        Err(Error::Nondeterminism { index: 0, .. })
    ));
    let other_type = store.execute_task(run, |task| {
        task.schedule_activity("b", &())?;
        Ok(Next::Wait)
    });
    assert!(matches!(other_type, Err(Error::Nondeterminism { .. })));
    // Neither attempt changed the run.
    assert_eq!(store.run(run).unwrap().history_length, 2);
    assert_eq!(store.run(run).unwrap().status, RunStatus::Running);
}

#[test]
fn a_swallowed_limit_error_still_fails_the_run() {
    let mut store = memory_store(&[(LimitKind::PendingTimerCount, 1)]);
    let run = started(&mut store, "w1");
    let report = store
        .execute_task(run, |task| {
            task.start_timer(Duration::from_secs(1))?;
            let _ignored = task.start_timer(Duration::from_secs(2));
            // Later commands refuse too, with the same failure.
            assert!(matches!(
                task.side_effect(|| 1),
                Err(Error::StructuralLimit(_))
            ));
            Ok(Next::Complete(json!("pretend")))
        })
        .unwrap();
    assert_eq!(report.outcome, exceeded(LimitKind::PendingTimerCount, 1, 1));
    assert_eq!(store.run(run).unwrap().status, RunStatus::Failed);
    assert_eq!(store.pending_counts(run).unwrap().timers, 0);
}

#[test]
fn timers_fire_or_cancel_and_release_their_count() {
    let mut store = memory_store(&[]);
    let run = started(&mut store, "w1");
    let mut timers = Vec::new();
    store
        .execute_task(run, |task| {
            timers.push(task.start_timer(Duration::from_secs(1))?);
            timers.push(task.start_timer(Duration::from_secs(2))?);
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(store.pending_counts(run).unwrap().timers, 2);
    store.fire_timer(timers[0]).unwrap();
    store.cancel_timer(timers[1]).unwrap();
    assert_eq!(store.pending_counts(run).unwrap().timers, 0);
    assert!(matches!(
        store.fire_timer(timers[1]),
        Err(Error::AlreadyClosed { .. })
    ));
}

#[test]
fn an_application_failure_is_classified_as_such() {
    let mut store = memory_store(&[]);
    let run = started(&mut store, "w1");
    let report = store
        .execute_task(run, |_| Ok(Next::Fail("card declined".into())))
        .unwrap();
    assert_eq!(
        report.outcome,
        TaskOutcome::Failed {
            message: "card declined".into()
        }
    );
    assert_eq!(
        store.failures(run).unwrap()[0].failure_category,
        "application"
    );
    assert_eq!(store.failures(run).unwrap()[0].structural_limit_kind, None);
}

#[test]
fn crossing_the_warning_threshold_reports_one_warning_with_the_run() {
    let mut store = memory_store(&[(LimitKind::PendingActivityCount, 10)]);
    let run = started(&mut store, "w1");
    let report = store
        .execute_task(run, |task| {
            for i in 0..10 {
                task.schedule_activity("a", &i)?;
            }
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(report.outcome, TaskOutcome::Waiting);
    assert_eq!(report.warnings.len(), 1);
    let warning = &report.warnings[0];
    assert_eq!(warning.limit_kind, LimitKind::PendingActivityCount);
    assert_eq!((warning.current, warning.limit), (8, 10));
    assert_eq!(warning.workflow_run_id, run.to_string());
    assert_eq!(warning.workflow_type, "OrderWorkflow");
}

#[test]
fn workflow_errors_leave_the_database_untouched() {
    let mut store = memory_store(&[]);
    let run = started(&mut store, "w1");
    let result = store.execute_task(run, |task| {
        task.schedule_activity("a", &1)?;
        Err(Error::Corrupt("workflow bug".into()))
    });
    assert!(result.is_err());
    let state = store.run(run).unwrap();
    assert_eq!((state.pending.activities, state.history_length), (0, 1));
    assert_eq!(state.status, RunStatus::Running);
}

#[test]
fn an_abandoned_task_discards_its_writes_and_keeps_the_run() {
    let mut store = memory_store(&[]);
    let run = started(&mut store, "w1");
    let result = store.execute_task(run, |task| {
        task.start_timer(Duration::from_secs(1))?;
        Err(Error::Abandoned("shutting down".into()))
    });
    assert!(matches!(result, Err(Error::Abandoned(_))));
    let state = store.run(run).unwrap();
    assert_eq!(
        (state.status, state.pending.timers),
        (RunStatus::Running, 0)
    );
    assert!(store.failures(run).unwrap().is_empty());
}
