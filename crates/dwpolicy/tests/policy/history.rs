//! The history budget: the canonical byte metric and both budget dimensions.

use std::cell::Cell;
use std::collections::HashMap;

use dwpolicy::env::pairs_lookup;
use dwpolicy::history::{
    event_size, json_len, BudgetDimension, BudgetUsage, HistoryBudget, HistoryBudgetError,
    HistoryUsage, DEFAULT_MAX_BYTES, DEFAULT_MAX_EVENTS,
};
use serde::Serialize;
use serde_json::json;

#[test]
fn slashes_and_unicode_are_not_escaped() {
    // "a/b" stays 5 bytes ("\/" would make it 6); "ї" stays its 2 UTF-8 bytes
    // plus quotes ("\u0457" would make it 8).
    assert_eq!(json_len("a/b").unwrap(), 5);
    assert_eq!(json_len("ї").unwrap(), 4);
    assert_eq!(serde_json::to_string("a/b").unwrap(), "\"a/b\"");
    assert_eq!(serde_json::to_string("ї").unwrap(), "\"ї\"");
    let payload = json!({"path": "a/b", "name": "ї"});
    assert_eq!(
        json_len(&payload).unwrap(),
        serde_json::to_vec(&payload).unwrap().len() as u64
    );
    // Event type bytes count too, in UTF-8.
    assert_eq!(
        event_size("SignalReceived", &payload).unwrap(),
        14 + r#"{"name":"ї","path":"a/b"}"#.len() as u64
    );
    assert_eq!(event_size("ї", &json!(null)).unwrap(), 2 + 4);
}

#[test]
fn unencodable_payloads_are_errors_not_panics() {
    let mut map = HashMap::new();
    map.insert(vec![1u8], 1);
    assert!(json_len(&map).is_err());
    let mut meter = HistoryBudget::default().begin(1).unwrap();
    let error = meter.add("Weird", &map).unwrap_err();
    assert!(matches!(error, HistoryBudgetError::Encode { index: 0, .. }));
}

#[test]
fn env_defaults_overrides_and_errors() {
    let d = HistoryBudget::from_env_with(pairs_lookup(&[])).unwrap();
    assert_eq!(
        (d.max_events, d.max_bytes),
        (DEFAULT_MAX_EVENTS, DEFAULT_MAX_BYTES)
    );
    assert_eq!((DEFAULT_MAX_EVENTS, DEFAULT_MAX_BYTES), (5000, 16_777_216));
    let set = HistoryBudget::from_env_with(pairs_lookup(&[
        ("DW_V2_LIMIT_HISTORY_TRANSACTION_SIZE", "0"),
        ("DW_V2_LIMIT_HISTORY_TRANSACTION_BYTES", "64"),
    ]))
    .unwrap();
    assert_eq!((set.max_events, set.max_bytes), (0, 64));
    let error = HistoryBudget::from_env_with(pairs_lookup(&[
        ("DW_V2_LIMIT_HISTORY_TRANSACTION_SIZE", "lots"),
        ("DW_V2_LIMIT_HISTORY_TRANSACTION_BYTES", "16MiB"),
    ]))
    .unwrap_err();
    assert_eq!(error.errors.len(), 2);
}

#[test]
fn event_count_edge_and_disable() {
    let budget = HistoryBudget::default();
    assert!(budget.begin(4999).is_ok());
    assert!(budget.begin(5000).is_ok());
    let error = budget.begin(5001).unwrap_err();
    assert_eq!(
        error.limit,
        BudgetUsage {
            dimension: BudgetDimension::Events,
            used: 5001,
            limit: 5000
        }
    );
    assert_eq!(error.status(), 409);
    insta::assert_json_snapshot!("too_large_events", error);
    let off = HistoryBudget {
        max_events: 0,
        ..budget
    };
    assert!(off.begin(u64::MAX).is_ok());
}

/// A payload that counts how often it is encoded.
struct Watched<'a>(&'a Cell<u32>);

impl Serialize for Watched<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.set(self.0.get() + 1);
        serializer.serialize_str("x")
    }
}

#[test]
fn count_is_checked_before_any_payload_is_encoded() {
    let encoded = Cell::new(0);
    let payload = Watched(&encoded);
    let events: Vec<(&str, &Watched)> = vec![("Logged", &payload); 3];
    let budget = HistoryBudget {
        max_events: 2,
        max_bytes: 1,
    };
    let error = budget.measure(events.iter().copied()).unwrap_err();
    let HistoryBudgetError::TooLarge(too_large) = error else {
        panic!("expected the event budget to refuse")
    };
    assert_eq!(too_large.limit.dimension, BudgetDimension::Events);
    assert_eq!(encoded.get(), 0);
}

#[test]
fn bytes_stop_at_the_first_event_over_the_budget() {
    let encoded = Cell::new(0);
    let payload = Watched(&encoded);
    // Each event is "Logged" (6) + "\"x\"" (3) = 9 bytes.
    let events: Vec<(&str, &Watched)> = vec![("Logged", &payload); 5];
    let at = HistoryBudget {
        max_events: 0,
        max_bytes: 27,
    };
    assert_eq!(
        at.measure(events[..3].iter().copied()).unwrap(),
        HistoryUsage {
            events: 3,
            bytes: 27
        }
    );
    encoded.set(0);
    let error = at.measure(events.iter().copied()).unwrap_err();
    let HistoryBudgetError::TooLarge(too_large) = error else {
        panic!("expected the byte budget to refuse")
    };
    assert_eq!(
        too_large.limit,
        BudgetUsage {
            dimension: BudgetDimension::Bytes,
            used: 36,
            limit: 27
        }
    );
    // The fourth event went over; the fifth was never encoded.
    assert_eq!(encoded.get(), 4);
    insta::assert_json_snapshot!("too_large_bytes", too_large);
    let off = HistoryBudget {
        max_events: 0,
        max_bytes: 0,
    };
    assert_eq!(off.measure(events.iter().copied()).unwrap().bytes, 45);
}

#[test]
fn below_the_byte_budget_is_fine() {
    let payloads = [json!({"a": 1}), json!("a/b"), json!(["ї"])];
    let events: Vec<(&str, &serde_json::Value)> = vec![
        ("Started", &payloads[0]),
        ("Logged", &payloads[1]),
        ("Completed", &payloads[2]),
    ];
    let total: u64 = events.iter().map(|(t, p)| event_size(t, *p).unwrap()).sum();
    let budget = HistoryBudget {
        max_events: 3,
        max_bytes: total + 1,
    };
    let usage = budget.measure(events.iter().copied()).unwrap();
    assert_eq!(
        usage,
        HistoryUsage {
            events: 3,
            bytes: total
        }
    );
}
