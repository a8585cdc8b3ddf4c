use serde_json::{json, Map, Value};

use super::{canonical, first_arguments, write_event, write_workflow_answer, PollAnswer};
use crate::server::wire;
use crate::store::{EventType, StoredEvent, StoredPage};

/// What `serde_json` writes back for `text` once parsed, if it parses.
fn round_trip(text: &str) -> Option<String> {
    let value: Value = serde_json::from_str(text).ok()?;
    serde_json::to_string(&value).ok()
}

/// Values as the engine stores them: written by `serde_json` from a tree.
fn stored_values() -> Vec<Value> {
    let mut strings: Vec<String> = (0u32..0x80)
        .filter_map(char::from_u32)
        .map(|c| format!("a{c}b"))
        .collect();
    strings.extend(
        [
            "",
            "\u{e9}t\u{e9}",
            "\u{2028}\u{2029}",
            "\u{1f600}",
            "quote \" and \\ backslash",
            "/slash/",
            "tab\tnew\nline\r\u{8}\u{c}",
            "\u{7f}",
        ]
        .map(String::from),
    );
    let mut values: Vec<Value> = strings.iter().map(|s| json!(s)).collect();
    values.extend([
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(-1),
        json!(7),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(i64::MAX),
        json!([]),
        json!({}),
        json!([[[]], {}, [1, -2, "x"]]),
        json!({"arguments": {"codec": "json", "blob": "[1,\"\\u2028\"]"}, "workflow_id": "w"}),
        json!({"b": 1, "a": {"d": [1, {"z": null, "y": "\u{1}"}], "c": "x"}, "arguments": null}),
        json!({"activity_execution_id": "1", "result": {"codec": "avro", "blob": "ImRvbmUi"}}),
        json!({"": 1, " ": 2, "A": 3, "a": 4, "\u{e9}": 5}),
        json!({"nested": {"arguments": "not the top level"}}),
    ]);
    let keyed: Vec<Value> = strings
        .iter()
        .filter(|s| !s.contains(|c: char| c == '"' || c == '\\' || c < ' '))
        .map(|s| {
            let mut map = Map::new();
            map.insert(s.clone(), json!(s));
            map.insert("arguments".into(), json!([s]));
            Value::Object(map)
        })
        .collect();
    values.extend(keyed);
    values
}

#[test]
fn every_text_serde_json_writes_from_a_tree_is_canonical() {
    for value in stored_values() {
        let text = serde_json::to_string(&value).unwrap();
        assert!(canonical(&text).is_some(), "{text}");
        assert_eq!(round_trip(&text).as_deref(), Some(text.as_str()));
    }
}

#[test]
fn a_text_is_canonical_only_when_its_round_trip_writes_it_again() {
    let mut texts: Vec<String> = [
        // Whitespace, key order, duplicates.
        "{ }",
        "[1, 2]",
        "{\"a\": 1}",
        " 1",
        "1 ",
        "{\"b\":1,\"a\":2}",
        "{\"a\":1,\"a\":2}",
        // Escapes serde_json does not write, and ones it does.
        "\"\\/\"",
        "\"\\u0041\"",
        "\"\\u00E9\"",
        "\"\\u001F\"",
        "\"\\u001f\"",
        "\"\\u0008\"",
        "\"\\u000a\"",
        "\"\\ud83d\\ude00\"",
        "\"\\b\\f\\n\\r\\t\\\"\\\\\"",
        "\"\\x\"",
        "\"\\u00\"",
        // Keys with escapes, even in order.
        "{\"\\n\":1}",
        "{\"a\":1,\"a\\n\":2}",
        // Numbers at and past their ranges, floats, forms that do not parse.
        "0",
        "-0",
        "01",
        "-01",
        "1.0",
        "1.5",
        "1e5",
        "1E5",
        "-1",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "-",
        "+1",
        // Literals and broken documents.
        "true",
        "tru",
        "nul",
        "null1",
        "[",
        "]",
        "{",
        "{\"a\"}",
        "{\"a\":}",
        "[1,]",
        "{\"a\":1,}",
        "\"unterminated",
        "",
        "[1][2]",
    ]
    .map(String::from)
    .to_vec();
    texts.push("[".repeat(101) + &"]".repeat(101));
    texts.push("[".repeat(100) + &"]".repeat(100));
    texts.push("\"raw \u{1} control\"".into());
    for text in &texts {
        let proven = canonical(text).is_some();
        let again = round_trip(text);
        if proven {
            assert_eq!(
                again.as_deref(),
                Some(text.as_str()),
                "{text:?} proven but rewritten"
            );
        }
        // Every text that is written back unchanged is proven, except the
        // ones this scan leaves to the parse on purpose.
        // (Deep nesting, floats, `\u00xx` escapes, and keys with escapes.)
        let left_to_the_parse = text.starts_with("[[[[")
            || text.contains('.')
            || text.contains("\\u00")
            || (text.starts_with('{') && text.contains('\\'));
        if again.as_deref() == Some(text.as_str()) && !left_to_the_parse {
            assert!(proven, "{text:?} round-trips but was not proven");
        }
    }
    assert!(canonical("\"\\u001f\"").is_some());
    assert!(canonical("\"\\u0008\"").is_none());
}

#[test]
fn the_top_level_arguments_are_found_where_they_are() {
    let text = r#"{"a":{"arguments":1},"arguments":{"blob":"[1]","codec":"json"},"b":[]}"#;
    let span = canonical(text).unwrap().arguments.unwrap();
    assert_eq!(&text[span], r#"{"blob":"[1]","codec":"json"}"#);
    assert_eq!(
        canonical(r#"{"a":{"arguments":1}}"#).unwrap().arguments,
        None
    );
    assert_eq!(canonical("[1]").unwrap().arguments, None);
}

fn stored(sequence: u64, event_type: EventType, text: &str, at: Option<i64>) -> StoredEvent {
    StoredEvent {
        sequence,
        event_type,
        text: text.into(),
        recorded_at_ms: at,
    }
}

/// Texts a history may hold: canonical ones, and ones this scan leaves to
/// the parse (an older writer's spacing, a float, a runtime reference).
fn page_texts() -> Vec<String> {
    let mut texts: Vec<String> = stored_values()
        .iter()
        .map(|v| serde_json::to_string(v).unwrap())
        .collect();
    texts.extend(
        [
            "{\"arguments\": {\"codec\": \"json\", \"blob\": \"[1]\"}}",
            "{\"b\":1,\"a\":2}",
            "{\"x\":1.5,\"y\":-0}",
            "{\"x\":\"\\u00e9\\/\"}",
            r#"{"arguments":{"codec":"avro","external_payload":{"codec":"avro","reference_id":"r1","schema":"durable-workflow.v2.runtime-external-payload-reference.v1","sha256":"aa","size_bytes":1}}}"#,
            r#"{"arguments":{"codec":"avro","external_storage":{"codec":"avro","schema":"durable-workflow.v2.external-storage-reference.v1","sha256":"aa","size_bytes":1,"uri":"dw-runtime://external-payloads/v1/r1"}}}"#,
        ]
        .map(String::from),
    );
    texts
}

#[test]
fn events_are_written_as_wire_event_renders_their_parse() {
    let mut compared = 0;
    for (i, event_type) in EventType::ALL.into_iter().enumerate() {
        for text in page_texts() {
            for at in [None, Some(0), Some(1_764_547_200_123), Some(-1)] {
                let event = stored(
                    [0, 1, 41, u64::from(u32::MAX)][i % 4],
                    event_type,
                    &text,
                    at,
                );
                let mut written = Vec::new();
                write_event(&mut written, &event).unwrap();
                let tree = wire::event(&event.parsed().unwrap());
                assert_eq!(
                    String::from_utf8(written).unwrap(),
                    serde_json::to_string(&tree).unwrap(),
                    "{text}"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, EventType::ALL.len() * page_texts().len() * 4);
}

#[test]
fn first_arguments_read_as_the_parsed_payload_reads_them() {
    for text in page_texts() {
        let event = stored(0, EventType::WorkflowStarted, &text, None);
        let want = event
            .parsed()
            .unwrap()
            .payload
            .get("arguments")
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(first_arguments(&event).unwrap(), want, "{text}");
    }
}

/// The tree `Engine::answer_by` built before answers were written.
fn tree(fields: &Map<String, Value>, page: &StoredPage, caps: &Value, replayed: bool) -> Value {
    let mut task = fields.clone();
    let events: Vec<Value> = page
        .events
        .iter()
        .map(|e| wire::event(&e.parsed().unwrap()))
        .collect();
    task.insert("history_events".into(), events.into());
    let mut answer = json!({ "task": task, "poll_status": "leased" });
    answer["server_capabilities"] = caps.clone();
    if replayed {
        answer["replayed"] = true.into();
    }
    answer
}

#[test]
fn a_written_answer_is_the_bytes_of_the_tree_it_replaced() {
    let caps = json!({"supported_workflow_task_commands": ["a", "b"], "workflow_memo_updates": {"supported": true}});
    let caps_bytes = serde_json::to_vec(&caps).unwrap();
    let full = json!({
        "arguments": {"blob": "[1]", "codec": "json"}, "cancel_requested": false,
        "cancellation_request": {"reason": "\u{e9}\"x\""}, "last_history_sequence": 3,
        "lease_expires_at": "2026-12-05T00:00:00.000000Z", "lease_owner": "w \"1\"",
        "namespace": "default", "next_history_page_token": null, "payload_codec": "json",
        "run_id": "1", "sticky_replay_mode": "cold_replay", "task_id": "3", "task_kind": "workflow",
        "task_queue": "q", "total_history_events": 3, "workflow_id": "wf\u{2028}",
        "workflow_task_attempt": 1, "workflow_type": "t", "workflow_update_id": "9",
    });
    let Value::Object(full) = full else {
        unreachable!()
    };
    let before_only: Map<String, Value> = full
        .iter()
        .filter(|(k, _)| k.as_str() < "history_events")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let after_only: Map<String, Value> = full
        .iter()
        .filter(|(k, _)| k.as_str() > "history_events")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let texts = page_texts();
    let pages = [
        StoredPage {
            events: vec![],
            next_sequence: None,
        },
        StoredPage {
            events: texts
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    stored(
                        i as u64,
                        EventType::ALL[i % EventType::ALL.len()],
                        t,
                        Some(i as i64),
                    )
                })
                .collect(),
            next_sequence: Some(9),
        },
    ];
    for fields in [Map::new(), before_only, after_only, full] {
        for page in &pages {
            for replayed in [false, true] {
                let written = write_workflow_answer(&fields, page, &caps_bytes, replayed).unwrap();
                let want = serde_json::to_vec(&tree(&fields, page, &caps, replayed)).unwrap();
                assert_eq!(
                    String::from_utf8(written.clone()).unwrap(),
                    String::from_utf8(want).unwrap()
                );
                let answer = PollAnswer::Written {
                    bytes: written,
                    replayed,
                };
                assert_eq!(answer.has_replayed(), replayed);
                assert!(!answer.task_is_null());
                assert_eq!(answer.into_value(), tree(&fields, page, &caps, replayed));
            }
        }
    }
}
