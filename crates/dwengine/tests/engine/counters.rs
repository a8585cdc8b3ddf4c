//! Property: after any sequence of operations, every run's pending counters
//! equal COUNT(*) over its open rows, and none exceeds its limit.
//!
//! The counts are read through a separate SQLite connection, so the property
//! checks the committed file, not the store's own view of it.

use crate::common;

use std::time::Duration;

use dwengine::store::{
    ActivityId, Admission, ChildWorkflow, Command, Durability, Next, RunId, SignalRequest, Store,
    StoreConfig, TimerId, UpdateResolution,
};
use dwpolicy::{LimitKind, StructuralLimits};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Leaf {
    Activity,
    Timer,
    Child,
}

#[derive(Debug, Clone)]
enum Op {
    Task {
        run: usize,
        leaves: Vec<Leaf>,
        fan_out: bool,
    },
    CompleteActivity(usize, bool),
    CloseTimer(usize, bool),
    CloseChild(usize, bool),
    Signal {
        run: usize,
        request: Option<u8>,
    },
    ProcessSignal(usize),
    Update {
        run: usize,
    },
    ResolveUpdate(usize, bool),
}

fn leaf() -> impl Strategy<Value = Leaf> {
    prop_oneof![Just(Leaf::Activity), Just(Leaf::Timer), Just(Leaf::Child)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4usize, prop::collection::vec(leaf(), 0..5), any::<bool>())
            .prop_map(|(run, leaves, fan_out)| Op::Task { run, leaves, fan_out }),
        2 => (0..64usize, any::<bool>()).prop_map(|(i, ok)| Op::CompleteActivity(i, ok)),
        1 => (0..64usize, any::<bool>()).prop_map(|(i, fire)| Op::CloseTimer(i, fire)),
        1 => (0..64usize, any::<bool>()).prop_map(|(i, ok)| Op::CloseChild(i, ok)),
        2 => (0..4usize, prop::option::of(0..4u8)).prop_map(|(run, request)| Op::Signal { run, request }),
        1 => (0..64usize).prop_map(Op::ProcessSignal),
        1 => (0..4usize).prop_map(|run| Op::Update { run }),
        1 => (0..64usize, any::<bool>()).prop_map(|(i, ok)| Op::ResolveUpdate(i, ok)),
    ]
}

fn small_limits() -> StructuralLimits {
    common::limits(&[
        (LimitKind::PendingActivityCount, 6),
        (LimitKind::PendingTimerCount, 4),
        (LimitKind::PendingChildCount, 3),
        (LimitKind::PendingSignalCount, 5),
        (LimitKind::PendingUpdateCount, 3),
        (LimitKind::CommandBatchSize, 4),
        (LimitKind::HistoryTransactionSize, 8),
    ])
}

/// What the test remembers between operations.
#[derive(Default)]
struct Model {
    runs: Vec<RunId>,
    /// Each run's committed commands, re-issued first on every task (replay).
    recorded: Vec<Vec<Leaf>>,
    activities: Vec<ActivityId>,
    timers: Vec<TimerId>,
    children: Vec<RunId>,
    signals: Vec<i64>,
    updates: Vec<i64>,
}

fn pick<T: Copy>(items: &[T], i: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[i % items.len()])
}

fn apply(store: &mut Store, model: &mut Model, op: &Op) {
    // Errors are expected (closing a closed item, a finished run); the
    // property is about what the file holds afterwards.
    match op {
        Op::Task {
            run,
            leaves,
            fan_out,
        } => {
            let index = run % model.runs.len();
            let replay = model.recorded[index].clone();
            let mut made = (Vec::new(), Vec::new(), Vec::new());
            let result = store.execute_task(model.runs[index], |task| {
                for leaf in &replay {
                    issue(task, *leaf)?;
                }
                if *fan_out {
                    let commands: Vec<_> = leaves.iter().map(|l| command(*l)).collect();
                    for output in task.all(&commands)? {
                        match output {
                            dwengine::store::CommandOutput::Activity(a) => made.0.push(a),
                            dwengine::store::CommandOutput::Timer(t) => made.1.push(t),
                            dwengine::store::CommandOutput::Child(c) => made.2.push(c),
                            dwengine::store::CommandOutput::All(_) => {}
                        }
                    }
                } else {
                    for leaf in leaves {
                        match issue(task, *leaf)? {
                            Made::Activity(a) => made.0.push(a),
                            Made::Timer(t) => made.1.push(t),
                            Made::Child(c) => made.2.push(c),
                        }
                    }
                }
                Ok(Next::Wait)
            });
            if let Ok(report) = result {
                if report.outcome == dwengine::store::TaskOutcome::Waiting {
                    model.recorded[index].extend(leaves.iter().copied());
                    model.activities.extend(made.0);
                    model.timers.extend(made.1);
                    model.children.extend(made.2);
                }
            }
        }
        Op::CompleteActivity(i, ok) => {
            if let Some(a) = pick(&model.activities, *i) {
                let _ = if *ok {
                    store.complete_activity(a, json!(1))
                } else {
                    store.fail_activity(a, "x")
                };
            }
        }
        Op::CloseTimer(i, fire) => {
            if let Some(t) = pick(&model.timers, *i) {
                let _ = if *fire {
                    store.fire_timer(t)
                } else {
                    store.cancel_timer(t)
                };
            }
        }
        Op::CloseChild(i, ok) => {
            if let Some(c) = pick(&model.children, *i) {
                let next = if *ok {
                    Next::Complete(json!(1))
                } else {
                    Next::Fail("x".into())
                };
                let _ = store.execute_task(c, |_| Ok(next));
            }
        }
        Op::Signal { run, request } => {
            let request = SignalRequest {
                name: "s".into(),
                request_id: request.map(|r| r.to_string()),
                ..SignalRequest::default()
            };
            if let Ok(Admission::Accepted {
                id,
                duplicate: false,
            }) = store.signal(model.runs[run % model.runs.len()], request)
            {
                model.signals.push(id);
            }
        }
        Op::ProcessSignal(i) => {
            if let Some(s) = pick(&model.signals, *i) {
                let _ = store.process_signal(s);
            }
        }
        Op::Update { run } => {
            let request = SignalRequest {
                name: "u".into(),
                ..SignalRequest::default()
            };
            if let Ok(Admission::Accepted { id, .. }) =
                store.submit_update(model.runs[run % model.runs.len()], request)
            {
                model.updates.push(id);
            }
        }
        Op::ResolveUpdate(i, ok) => {
            if let Some(u) = pick(&model.updates, *i) {
                let resolution = if *ok {
                    UpdateResolution::Completed(json!(1))
                } else {
                    UpdateResolution::Rejected("no".into())
                };
                let _ = store.resolve_update(u, resolution);
            }
        }
    }
}

enum Made {
    Activity(ActivityId),
    Timer(TimerId),
    Child(RunId),
}

fn child() -> ChildWorkflow {
    ChildWorkflow {
        workflow_id: "c".into(),
        workflow_type: "C".into(),
        arguments: json!(null),
    }
}

fn issue(task: &mut dwengine::store::Task<'_>, leaf: Leaf) -> Result<Made, dwengine::store::Error> {
    Ok(match leaf {
        Leaf::Activity => Made::Activity(task.schedule_activity("a", &1)?),
        Leaf::Timer => Made::Timer(task.start_timer(Duration::from_secs(1))?),
        Leaf::Child => Made::Child(task.start_child(&child())?),
    })
}

fn command(leaf: Leaf) -> Command {
    match leaf {
        Leaf::Activity => Command::activity("a", json!(1)),
        Leaf::Timer => Command::Timer {
            delay: Duration::from_secs(1),
        },
        Leaf::Child => Command::Child(child()),
    }
}

const AUDIT: &str = "SELECT r.id,
    r.pending_activity_count, (SELECT COUNT(*) FROM activities WHERE run_id = r.id AND status = 'scheduled'),
    r.pending_timer_count, (SELECT COUNT(*) FROM timers WHERE run_id = r.id AND status = 'pending'),
    r.pending_child_count, (SELECT COUNT(*) FROM children WHERE parent_run_id = r.id AND status = 'open'),
    r.pending_signal_count, (SELECT COUNT(*) FROM signals WHERE run_id = r.id AND status = 'received'),
    r.pending_update_count, (SELECT COUNT(*) FROM updates WHERE run_id = r.id AND status = 'accepted')
    FROM runs r";

fn audit(check: &rusqlite::Connection, limits: &StructuralLimits) -> Result<(), TestCaseError> {
    let mut stmt = check.prepare(AUDIT).unwrap();
    let rows = stmt
        .query_map([], |row| {
            let mut values = [0i64; 11];
            for (i, v) in values.iter_mut().enumerate() {
                *v = row.get(i)?;
            }
            Ok(values)
        })
        .unwrap();
    let kinds = [
        LimitKind::PendingActivityCount,
        LimitKind::PendingTimerCount,
        LimitKind::PendingChildCount,
        LimitKind::PendingSignalCount,
        LimitKind::PendingUpdateCount,
    ];
    for row in rows {
        let row = row.unwrap();
        for (k, kind) in kinds.iter().enumerate() {
            let (counter, counted) = (row[1 + 2 * k], row[2 + 2 * k]);
            prop_assert_eq!(counter, counted, "run {} {}", row[0], kind);
            prop_assert!(
                counter as u64 <= limits.get(*kind),
                "run {} over {}",
                row[0],
                kind
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn pending_counters_equal_row_counts(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.sqlite");
        let config = StoreConfig { limits: small_limits(), durability: Durability::Normal, ..StoreConfig::default() };
        let mut store = Store::open(&path, config).unwrap();
        let check = rusqlite::Connection::open(&path).unwrap();
        let mut model = Model::default();
        for i in 0..2 {
            model.runs.push(common::started(&mut store, &format!("w{i}")));
            model.recorded.push(Vec::new());
        }
        for op in &ops {
            apply(&mut store, &mut model, op);
            audit(&check, &small_limits())?;
        }
    }
}
