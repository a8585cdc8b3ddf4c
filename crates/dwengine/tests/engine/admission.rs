//! Admission-side enforcement: signals and updates are refused at the limit
//! while the run stays active.

use crate::common;

use common::{memory_store, started};
use dwengine::store::{Admission, Error, EventType, RunStatus, SignalRequest, UpdateResolution};
use dwpolicy::LimitKind;
use serde_json::json;

fn signal(name: &str, request_id: Option<&str>) -> SignalRequest {
    SignalRequest {
        name: name.to_owned(),
        payload: json!({ "item": name }),
        request_id: request_id.map(str::to_owned),
    }
}

#[test]
fn a_signal_at_the_limit_is_rejected_with_metadata_and_the_run_stays_active() {
    let mut store = memory_store(&[(LimitKind::PendingSignalCount, 2)]);
    let run = started(&mut store, "w1");
    let first = store.signal(run, signal("a", None)).unwrap();
    let second = store.signal(run, signal("b", None)).unwrap();
    assert!(!first.rejected() && !second.rejected());
    let third = store.signal(run, signal("c", None)).unwrap();
    assert_eq!(
        serde_json::to_value(&third).unwrap(),
        json!({
            "outcome": "rejected",
            "reason": "structural_limit_exceeded",
            "structural_limit_kind": "pending_signal_count",
            "structural_limit_value": 2,
            "structural_limit_configured": 2,
        })
    );
    let state = store.run(run).unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.pending.signals, 2);
    let received = store
        .history(run)
        .unwrap()
        .iter()
        .filter(|e| e.event_type == EventType::SignalReceived)
        .count();
    assert_eq!(received, 2, "the rejected signal wrote nothing");
    assert!(store.failures(run).unwrap().is_empty());

    // Once the workflow processes one, the caller's retry is admitted.
    let Admission::Accepted { id, .. } = first else {
        panic!("accepted above")
    };
    store.process_signal(id).unwrap();
    assert!(!store.signal(run, signal("c", None)).unwrap().rejected());
}

#[test]
fn request_ids_make_signals_idempotent_even_at_the_limit() {
    let mut store = memory_store(&[(LimitKind::PendingSignalCount, 1)]);
    let run = started(&mut store, "w1");
    let first = store.signal(run, signal("a", Some("req-1"))).unwrap();
    let Admission::Accepted {
        id,
        duplicate: false,
    } = first
    else {
        panic!("{first:?}")
    };
    let retry = store.signal(run, signal("a", Some("req-1"))).unwrap();
    assert_eq!(
        retry,
        Admission::Accepted {
            id,
            duplicate: true
        }
    );
    assert_eq!(store.pending_counts(run).unwrap().signals, 1);
    // A different request id is a new signal, and the limit applies to it.
    assert!(store
        .signal(run, signal("a", Some("req-2")))
        .unwrap()
        .rejected());
    // The same request id on another run is unrelated.
    let other = started(&mut store, "w2");
    let elsewhere = store.signal(other, signal("a", Some("req-1"))).unwrap();
    assert!(matches!(
        elsewhere,
        Admission::Accepted {
            duplicate: false,
            ..
        }
    ));
}

#[test]
fn updates_are_limited_while_accepted_and_released_when_resolved() {
    let mut store = memory_store(&[(LimitKind::PendingUpdateCount, 2)]);
    let run = started(&mut store, "w1");
    let mut ids = Vec::new();
    for name in ["u1", "u2"] {
        match store.submit_update(run, signal(name, None)).unwrap() {
            Admission::Accepted { id, .. } => ids.push(id),
            other => panic!("{other:?}"),
        }
    }
    match store.submit_update(run, signal("u3", None)).unwrap() {
        Admission::Rejected(r) => {
            assert_eq!(r.structural_limit_kind, LimitKind::PendingUpdateCount);
            assert_eq!(
                (r.structural_limit_value, r.structural_limit_configured),
                (2, 2)
            );
        }
        other => panic!("{other:?}"),
    }
    store
        .resolve_update(ids[0], UpdateResolution::Completed(json!(1)))
        .unwrap();
    store
        .resolve_update(ids[1], UpdateResolution::Rejected("invalid".into()))
        .unwrap();
    assert_eq!(store.pending_counts(run).unwrap().updates, 0);
    let tail: Vec<_> = store
        .history(run)
        .unwrap()
        .iter()
        .rev()
        .take(2)
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        tail,
        [EventType::UpdateRejected, EventType::UpdateCompleted]
    );
}

#[test]
fn a_disabled_limit_admits_everything() {
    let mut store = memory_store(&[(LimitKind::PendingSignalCount, 0)]);
    let run = started(&mut store, "w1");
    for i in 0..20 {
        assert!(!store
            .signal(run, signal(&i.to_string(), None))
            .unwrap()
            .rejected());
    }
    assert_eq!(store.pending_counts(run).unwrap().signals, 20);
}

#[test]
fn finished_and_unknown_runs_refuse_signals() {
    let mut store = memory_store(&[]);
    let run = started(&mut store, "w1");
    store
        .execute_task(run, |_| Ok(dwengine::store::Next::Complete(json!(1))))
        .unwrap();
    assert!(matches!(
        store.signal(run, signal("late", None)),
        Err(Error::RunNotActive { .. })
    ));
    assert!(matches!(
        store.signal(dwengine::store::RunId(999), signal("x", None)),
        Err(Error::RunNotFound(_))
    ));
}

#[test]
fn health_and_capabilities_publish_the_limits_and_sqlite_contract() {
    let store = memory_store(&[(LimitKind::PendingSignalCount, 7)]);
    let health = serde_json::to_value(store.health()).unwrap();
    assert_eq!(health["structural_limits"]["pending_signal_count"], 7);
    assert_eq!(health["structural_limits"]["pending_activity_count"], 2000);
    assert_eq!(health["structural_limits"]["warning_threshold_percent"], 80);
    let capabilities = serde_json::to_value(store.capabilities()).unwrap();
    assert_eq!(capabilities["effective"]["pending_signal_count"], 7);
    assert_eq!(capabilities["configured"]["pending_signal_count"], 7);
    if common::postgres() {
        // PostgreSQL serializes writers across nodes: no SQLite adjustment.
        assert_eq!(capabilities["backend_adjustments"], json!({}));
        assert_ne!(
            capabilities["effective"]["concurrent_write_safety"],
            "limited"
        );
        return;
    }
    assert_eq!(
        capabilities["backend_adjustments"],
        json!({ "concurrent_write_safety": "limited" })
    );
    assert_eq!(
        capabilities["effective"]["concurrent_write_safety"],
        "limited"
    );
    assert_eq!(
        capabilities["issues"][0]["code"],
        "database_concurrent_write_constraint"
    );
}
