//! Request-boundary limits: env parsing, every validator's edge, and the error envelopes.

use dwpolicy::boundary::{
    BoundaryError, RequestLimits, MAX_NAME_CHARS, MAX_REASON_CHARS, MAX_REQUEST_ID_CHARS,
    MAX_WORKFLOW_ID_CHARS,
};
use dwpolicy::env::pairs_lookup;
use dwpolicy::StructuralLimits;
use serde_json::{json, Map, Value};

fn errors(result: Result<(), BoundaryError>) -> Vec<(String, usize)> {
    match result {
        Ok(()) => Vec::new(),
        Err(BoundaryError::ValidationFailed {
            validation_errors, ..
        }) => validation_errors
            .into_iter()
            .map(|(field, messages)| (field, messages.len()))
            .collect(),
        Err(other) => panic!("unexpected {other:?}"),
    }
}

#[test]
fn defaults_are_the_seed_table() {
    let d = RequestLimits::default();
    assert_eq!(d.max_payload_bytes, 2_097_152);
    assert_eq!(d.max_memo_bytes, 262_144);
    assert_eq!(d.max_search_attributes, 100);
    assert_eq!(d.max_search_attribute_key_length, 128);
    assert_eq!(d.max_search_attribute_value_bytes, 2048);
    assert_eq!(d.max_operation_name_length, 256);
    assert_eq!(
        (
            MAX_WORKFLOW_ID_CHARS,
            MAX_NAME_CHARS,
            MAX_REQUEST_ID_CHARS,
            MAX_REASON_CHARS
        ),
        (128, 255, 255, 1000)
    );
    assert_eq!(RequestLimits::from_env_with(pairs_lookup(&[])).unwrap(), d);
}

#[test]
fn env_overrides_and_reports_every_bad_variable() {
    let limits = RequestLimits::from_env_with(pairs_lookup(&[
        ("DW_MAX_PAYLOAD_BYTES", "1024"),
        ("DW_MAX_MEMO_BYTES", "0"),
        ("DW_MAX_SEARCH_ATTRIBUTES", "5"),
        ("DW_MAX_SEARCH_ATTRIBUTE_KEY_LENGTH", "8"),
        ("DW_MAX_SEARCH_ATTRIBUTE_VALUE_BYTES", "16"),
        ("DW_MAX_OPERATION_NAME_LENGTH", "32"),
    ]))
    .unwrap();
    assert_eq!(
        limits,
        RequestLimits {
            max_payload_bytes: 1024,
            max_memo_bytes: 0,
            max_search_attributes: 5,
            max_search_attribute_key_length: 8,
            max_search_attribute_value_bytes: 16,
            max_operation_name_length: 32,
        }
    );
    let error = RequestLimits::from_env_with(pairs_lookup(&[
        ("DW_MAX_PAYLOAD_BYTES", "2MiB"),
        ("DW_MAX_OPERATION_NAME_LENGTH", "-256"),
    ]))
    .unwrap_err();
    let bad: Vec<_> = error
        .errors
        .iter()
        .map(|e| (e.variable.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(
        bad,
        [
            ("DW_MAX_PAYLOAD_BYTES", "2MiB"),
            ("DW_MAX_OPERATION_NAME_LENGTH", "-256")
        ]
    );
}

#[test]
fn body_size_edge_and_disable() {
    let limits = RequestLimits::default();
    assert!(limits.check_body(2_097_151).is_ok());
    assert!(limits.check_body(2_097_152).is_ok());
    let error = limits.check_body(2_097_153).unwrap_err();
    assert_eq!((error.status(), error.reason()), (413, "payload_too_large"));
    insta::assert_json_snapshot!("payload_too_large", error);
    let off = RequestLimits {
        max_payload_bytes: 0,
        ..limits
    };
    assert!(off.check_body(u64::MAX).is_ok());
}

#[test]
fn character_limits_count_characters_not_bytes() {
    let limits = RequestLimits::default();
    let cases: [(&str, usize); 6] = [
        ("workflow_id", 128),
        ("workflow_type", 255),
        ("task_queue", 255),
        ("business_key", 255),
        ("request_id", 255),
        ("reason", 1000),
    ];
    for (field, max) in cases {
        let run = |value: &str| {
            let mut v = limits.validator();
            match field {
                "workflow_id" => v.workflow_id(value),
                "workflow_type" => v.workflow_type(value),
                "task_queue" => v.task_queue(value),
                "business_key" => v.business_key(value),
                "request_id" => v.request_id(value),
                _ => v.reason(value),
            };
            errors(v.finish())
        };
        // "ї" is two bytes: a limit in bytes would refuse these at half the length.
        assert!(run(&"ї".repeat(max - 1)).is_empty(), "{field} below");
        assert!(run(&"ї".repeat(max)).is_empty(), "{field} at");
        assert_eq!(
            run(&"ї".repeat(max + 1)),
            [(field.to_string(), 1)],
            "{field} above"
        );
    }
}

#[test]
fn operation_names_are_limited_in_bytes_and_zero_disables() {
    let limits = RequestLimits::default();
    let run = |limits: &RequestLimits, name: &str| {
        let mut v = limits.validator();
        v.operation_name("signal_name", name);
        errors(v.finish())
    };
    assert!(run(&limits, &"a".repeat(255)).is_empty());
    assert!(run(&limits, &"a".repeat(256)).is_empty());
    assert_eq!(run(&limits, &"a".repeat(257)), [("signal_name".into(), 1)]);
    // 129 two-byte characters are 258 bytes.
    assert_eq!(run(&limits, &"ї".repeat(129)), [("signal_name".into(), 1)]);
    let off = RequestLimits {
        max_operation_name_length: 0,
        ..limits
    };
    assert!(run(&off, &"a".repeat(10_000)).is_empty());
}

fn memo_of_encoded_len(len: usize) -> Value {
    // {"k":"…"} is 8 bytes of JSON around the string.
    json!({ "k": "x".repeat(len - 8) })
}

#[test]
fn memo_is_limited_by_its_json_encoding() {
    let limits = RequestLimits {
        max_memo_bytes: 100,
        ..RequestLimits::default()
    };
    let run = |limits: &RequestLimits, memo: &Value| {
        let mut v = limits.validator();
        v.memo(memo);
        errors(v.finish())
    };
    assert!(run(&limits, &memo_of_encoded_len(99)).is_empty());
    assert!(run(&limits, &memo_of_encoded_len(100)).is_empty());
    assert_eq!(
        run(&limits, &memo_of_encoded_len(101)),
        [("memo".into(), 1)]
    );
    let off = RequestLimits {
        max_memo_bytes: 0,
        ..limits
    };
    assert!(run(&off, &memo_of_encoded_len(10_000)).is_empty());
}

#[test]
fn search_attribute_keys_values_and_array_elements() {
    let limits = RequestLimits::default();
    let run = |limits: &RequestLimits, attributes: Value| {
        let Value::Object(map) = attributes else {
            unreachable!()
        };
        let mut v = limits.validator();
        v.search_attributes(&map);
        errors(v.finish())
    };
    let ok = json!({
        "k".repeat(128): "v".repeat(2048),
        "tags": ["a".repeat(2048), "b"],
        "count": 12345,
    });
    assert!(run(&limits, ok).is_empty());
    let bad = json!({
        "k".repeat(129): "fine",
        "big": "v".repeat(2049),
        "tags": ["a".repeat(2049), "ok", "c".repeat(3000)],
    });
    // One key, one value and two elements: four messages under one field.
    assert_eq!(run(&limits, bad.clone()), [("search_attributes".into(), 4)]);
    let off = RequestLimits {
        max_search_attribute_key_length: 0,
        max_search_attribute_value_bytes: 0,
        ..limits
    };
    assert!(run(&off, bad).is_empty());
    assert!(run(&limits, Value::Object(Map::new())).is_empty());
}

#[test]
fn registered_search_attribute_count() {
    let limits = RequestLimits::default();
    let run = |limits: &RequestLimits, total| {
        let mut v = limits.validator();
        v.registered_search_attributes(total);
        errors(v.finish())
    };
    assert!(run(&limits, 99).is_empty());
    assert!(run(&limits, 100).is_empty());
    assert_eq!(run(&limits, 101), [("search_attributes".into(), 1)]);
    let off = RequestLimits {
        max_search_attributes: 0,
        ..limits
    };
    assert!(run(&off, 1_000_000).is_empty());
}

#[test]
fn validation_reports_every_failing_field_at_once() {
    let limits = RequestLimits::default();
    let mut v = limits.validator();
    v.workflow_id(&"w".repeat(129))
        .workflow_type("ok")
        .task_queue(&"q".repeat(256))
        .request_id(&"r".repeat(256))
        .operation_name("update_name", &"u".repeat(257))
        .memo(&memo_of_encoded_len(262_145));
    assert!(v.has_errors());
    let error = v.finish().unwrap_err();
    assert_eq!((error.status(), error.reason()), (422, "validation_failed"));
    insta::assert_json_snapshot!("validation_failed", error);
}

#[test]
fn cluster_info_limits_combine_request_and_structural_limits() {
    let limits = RequestLimits::default();
    insta::assert_json_snapshot!(
        "cluster_info_limits",
        limits.cluster_limits(&StructuralLimits::default())
    );
}
