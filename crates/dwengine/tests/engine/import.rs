//! v1 projection imports: one transaction under the history budget, checked
//! before any existing row is read or written, and read-only afterwards.

use dwengine::store::{
    Error, EventType, ImportMode, Next, RunOrigin, RunStatus, SignalRequest, Store, StoreConfig,
    V1Projection, V1Row, V1Terminal,
};
use dwpolicy::history::{event_size, BudgetDimension};
use dwpolicy::HistoryBudget;
use serde_json::json;

fn store(max_events: u64, max_bytes: u64) -> Store {
    let config = StoreConfig {
        history_budget: HistoryBudget {
            max_events,
            max_bytes,
        },
        ..StoreConfig::default()
    };
    Store::open_in_memory(config).unwrap()
}

fn projection(workflow_id: &str, logs: usize, terminal: Option<V1Terminal>) -> V1Projection {
    let mut rows: Vec<V1Row> = (0..logs)
        .map(|i| V1Row::Log {
            result: json!({ "line": i, "path": "a/b" }),
        })
        .collect();
    rows.push(V1Row::Signal {
        name: "approve".into(),
        arguments: json!(["ü"]),
    });
    rows.push(V1Row::Exception {
        class: "Timeout".into(),
        message: "slow".into(),
    });
    V1Projection {
        workflow_id: workflow_id.into(),
        workflow_type: "LegacyWorkflow".into(),
        namespace: "default".into(),
        task_queue: "legacy".into(),
        arguments: json!({ "x": 1 }),
        rows,
        terminal,
        malformed_rows: 0,
    }
}

fn table_rows(store: &Store, ids: std::ops::Range<i64>) -> usize {
    ids.filter(|id| store.run(dwengine::store::RunId(*id)).is_ok())
        .count()
}

#[test]
fn an_import_writes_start_rows_and_terminal_event_in_history_order() {
    let store = store(100, 0);
    let done = Some(V1Terminal::Completed {
        result: json!("ok"),
    });
    let report = store
        .import_v1_projection(&projection("legacy-1", 3, done), ImportMode::Commit)
        .unwrap();
    // 1 start + 3 logs + 1 signal + 1 exception + 1 terminal.
    assert_eq!(report.events, 7);
    let run = report.run.unwrap();
    let state = store.run(run).unwrap();
    assert_eq!(state.origin, RunOrigin::V1Projection);
    assert_eq!(state.status, RunStatus::Completed);
    let history = store.history(run).unwrap();
    let types: Vec<_> = history.iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        [
            EventType::WorkflowStarted,
            EventType::LogRecorded,
            EventType::LogRecorded,
            EventType::LogRecorded,
            EventType::SignalReceived,
            EventType::ExceptionRecorded,
            EventType::WorkflowCompleted,
        ]
    );
    // The stored summary and the report use the canonical metric.
    let canonical: u64 = history
        .iter()
        .map(|e| event_size(e.event_type.as_str(), &e.payload).unwrap())
        .sum();
    assert_eq!(report.bytes, canonical);
    assert_eq!(state.history_bytes, canonical);
}

#[test]
fn a_running_v1_run_has_no_terminal_event() {
    let store = store(5, 0);
    // 1 start + 2 logs + signal + exception = 5: exactly the budget.
    let report = store
        .import_v1_projection(&projection("open", 2, None), ImportMode::Commit)
        .unwrap();
    assert_eq!(report.events, 5);
    assert_eq!(
        store.run(report.run.unwrap()).unwrap().status,
        RunStatus::Running
    );
}

#[test]
fn too_many_events_fail_before_existing_rows_are_read_or_written() {
    let store = store(6, 0);
    let done = || {
        Some(V1Terminal::Failed {
            message: "x".into(),
        })
    };
    let first = store
        .import_v1_projection(&projection("legacy", 1, done()), ImportMode::Commit)
        .unwrap();
    assert_eq!(first.events, 5);
    // The same workflow again would be refused as already imported, but only
    // after reading the existing rows; an oversized import never gets there.
    let error = store
        .import_v1_projection(&projection("legacy", 3, done()), ImportMode::Commit)
        .unwrap_err();
    let Error::ProjectionTooLarge(too_large) = error else {
        panic!("{error:?}")
    };
    assert_eq!(
        serde_json::to_value(too_large).unwrap(),
        json!({ "reason": "v1_projection_too_large", "limit": { "dimension": "events", "used": 7, "limit": 6 } })
    );
    let dry = store.import_v1_projection(&projection("legacy", 3, done()), ImportMode::DryRun);
    assert!(matches!(dry, Err(Error::ProjectionTooLarge(t)) if t.limit.used == 7));
    // A fitting second import of the same workflow is refused after the read.
    let again = store.import_v1_projection(&projection("legacy", 1, done()), ImportMode::Commit);
    assert!(matches!(again, Err(Error::AlreadyImported { .. })));
    assert_eq!(table_rows(&store, 1..10), 1, "nothing else was written");
}

#[test]
fn the_byte_budget_stops_at_the_first_event_over_it() {
    let sample = projection("bytes", 2, None);
    let unlimited = store(0, 0)
        .import_v1_projection(&sample, ImportMode::DryRun)
        .unwrap();
    assert_eq!(unlimited.run, None);
    let tight = store(0, unlimited.bytes - 1);
    let error = tight
        .import_v1_projection(&sample, ImportMode::Commit)
        .unwrap_err();
    let Error::ProjectionTooLarge(too_large) = error else {
        panic!("{error:?}")
    };
    assert_eq!(too_large.limit.dimension, BudgetDimension::Bytes);
    assert_eq!(
        too_large.limit.used, unlimited.bytes,
        "the last event is the one over"
    );
    assert_eq!(table_rows(&tight, 1..5), 0);
    // Exactly the budget fits.
    let exact = store(0, unlimited.bytes);
    assert!(exact
        .import_v1_projection(&sample, ImportMode::Commit)
        .is_ok());
}

#[test]
fn a_dry_run_writes_nothing() {
    let store = store(100, 0);
    let report = store
        .import_v1_projection(&projection("dry", 1, None), ImportMode::DryRun)
        .unwrap();
    assert_eq!((report.run, report.events), (None, 4));
    assert_eq!(table_rows(&store, 1..5), 0);
}

#[test]
fn imported_projections_are_read_only() {
    let store = store(100, 0);
    let run = store
        .import_v1_projection(&projection("ro", 1, None), ImportMode::Commit)
        .unwrap()
        .run
        .unwrap();
    let signal = SignalRequest {
        name: "s".into(),
        ..SignalRequest::default()
    };
    assert!(
        matches!(store.signal(run, signal.clone()), Err(Error::ReadOnlyProjection(r)) if r == run)
    );
    assert!(matches!(
        store.submit_update(run, signal),
        Err(Error::ReadOnlyProjection(_))
    ));
    let task = store.execute_task(run, |_| Ok(Next::Complete(json!(1))));
    assert!(matches!(task, Err(Error::ReadOnlyProjection(_))));
    assert_eq!(store.history(run).unwrap().len(), 4);
}
