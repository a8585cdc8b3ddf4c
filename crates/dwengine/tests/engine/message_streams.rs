//! Input message streams: `POST /api/workflows/{id}/message-streams/{s}/messages`
//! admits a message as a signal of the reserved name both SDKs read
//! (`__durable_workflow_message_stream`), with its place in its stream and
//! an idempotent message id; a completion's stream metadata is checked.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwengine::store::avro_value::{decode_envelope, encode_envelope};
use dwpolicy::LimitKind;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

const SIGNAL: &str = "__durable_workflow_message_stream";

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn input(text: &str) -> Value {
    encode_envelope(&json!([text])).unwrap()
}

fn append(s: &TestServer, id: &str, stream: &str, body: Value) -> (u16, Value) {
    s.post(
        &format!("/api/workflows/{id}/message-streams/{stream}/messages"),
        body,
    )
}

fn of_type(events: &[Value], event_type: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .map(|e| e["payload"].clone())
        .collect()
}

/// The delivery record a signal event carries (its one argument).
fn delivered(value: &Value) -> Value {
    let arguments = decode_envelope(value).unwrap();
    assert_eq!(arguments.as_array().map(Vec::len), Some(1), "{arguments}");
    arguments[0].clone()
}

fn wait() -> Value {
    json!([{ "type": "open_signal_wait", "signal_name": SIGNAL }])
}

#[test]
fn messages_take_positions_per_stream_reach_the_open_wait_and_retries_answer_the_first() {
    let s = server();
    s.start_workflow("default", "inbox", "inbox");
    let task = next_task(&s, "inbox");
    let (status, body) = s.complete(&task, wait());
    assert_eq!(status, 200, "{body}");

    let (status, first) = append(
        &s,
        "inbox",
        "orders",
        json!({ "message_id": "m-1", "input": input("one") }),
    );
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["position"], 1);
    assert_eq!(first["retained"], false);
    assert_eq!(first["outcome"], "message_appended");
    let (status, second) = append(
        &s,
        "inbox",
        "orders",
        json!({ "message_id": "m-2", "input": input("two") }),
    );
    assert_eq!((status, &second["position"]), (202, &json!(2)), "{second}");
    // Another stream counts from 1; a message without input is allowed.
    let (status, other) = append(&s, "inbox", "audit.log", json!({ "message_id": "m-1" }));
    assert_eq!((status, &other["position"]), (202, &json!(1)), "{other}");

    // A retry of m-1 answers the first append and adds nothing.
    let before = s.history("inbox").len();
    let (status, again) = append(
        &s,
        "inbox",
        "orders",
        json!({ "message_id": "m-1", "input": input("one") }),
    );
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["retained"], true);
    assert_eq!(again["position"], 1);
    assert_eq!(again["signal_id"], first["signal_id"]);
    // The same id with another input is a conflict.
    let (status, conflict) = append(
        &s,
        "inbox",
        "orders",
        json!({ "message_id": "m-1", "input": input("uno") }),
    );
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["reason"], "message_id_conflict");
    assert_eq!(conflict["position"], 1);
    assert_eq!(s.history("inbox").len(), before);

    let events = s.history("inbox");
    let received = of_type(&events, "SignalReceived");
    assert_eq!(received.len(), 3, "{events:?}");
    let records: Vec<Value> = received
        .iter()
        .map(|r| {
            assert_eq!(r["signal_name"], SIGNAL);
            assert_eq!(r["payload_codec"], "avro");
            delivered(&r["value"])
        })
        .collect();
    assert_eq!(
        records[0],
        json!({ "schema": "durable-workflow.v2.message-stream.message",
                "stream_name": "orders", "message_id": "m-1", "position": 1,
                "payload_envelope": input("one") })
    );
    assert_eq!(records[1]["position"], 2);
    assert_eq!(records[1]["payload_envelope"], input("two"));
    assert_eq!(records[2]["stream_name"], "audit.log");
    assert_eq!(
        records[2]["payload_envelope"],
        encode_envelope(&json!([])).unwrap()
    );
    // The open wait took the first message, and the run has a task.
    let applied = of_type(&events, "SignalApplied");
    assert_eq!(applied.len(), 1, "{events:?}");
    assert_eq!(delivered(&applied[0]["value"])["message_id"], "m-1");
    let task = next_task(&s, "inbox");
    // The next wait takes the next message at once, oldest first.
    let (status, body) = s.complete(&task, wait());
    assert_eq!(status, 200, "{body}");
    let applied = of_type(&s.history("inbox"), "SignalApplied");
    assert_eq!(applied.len(), 2);
    assert_eq!(delivered(&applied[1]["value"])["message_id"], "m-2");
}

#[test]
fn bad_appends_are_refused_by_field_and_the_reserved_signal_name_is_the_streams_alone() {
    let s = server();
    s.start_workflow("default", "strict", "strict");
    let (status, body) = append(&s, "strict", "bad%20name", json!({ "message_id": "m" }));
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["stream_name"][0]
        .as_str()
        .unwrap()
        .contains("letters, digits"));
    let long = "s".repeat(129);
    let (status, body) = append(&s, "strict", &long, json!({ "message_id": "m" }));
    assert_eq!(status, 422, "{body}");
    let (status, body) = append(&s, "strict", "orders", json!({ "input": input("x") }));
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["message_id"][0]
        .as_str()
        .unwrap()
        .contains("required"));
    let (status, body) = append(
        &s,
        "strict",
        "orders",
        json!({ "message_id": "m".repeat(256) }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["message_id"].is_array(), "{body}");
    let (status, body) = append(
        &s,
        "strict",
        "orders",
        json!({ "message_id": "m", "input": "not an envelope" }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["input"].is_array(), "{body}");
    // A client cannot forge a delivery through the signal route.
    let (status, body) = s.post(
        &format!("/api/workflows/strict/signal/{SIGNAL}"),
        json!({ "input": input("forged") }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["signal_name"][0]
        .as_str()
        .unwrap()
        .contains("reserved"));
    // Nothing of these reached the run.
    assert!(of_type(&s.history("strict"), "SignalReceived").is_empty());
    let (status, body) = append(&s, "nobody", "orders", json!({ "message_id": "m" }));
    assert_eq!(status, 404, "{body}");
    // An imported v1 projection is read-only, message-stream appends included.
    let (status, imported) = s.post(
        "/api/workflows/import",
        json!({ "workflow_id": "legacy", "workflow_type": "Legacy", "task_queue": "legacy",
                "arguments": {}, "rows": [] }),
    );
    assert_eq!(status, 201, "{imported}");
    let (status, body) = append(&s, "legacy", "orders", json!({ "message_id": "m" }));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "v1_projection_read_only");
    // A closed run takes no messages.
    let (status, body) = s.post("/api/workflows/strict/terminate", json!({}));
    assert_eq!(status, 200, "{body}");
    let (status, body) = append(&s, "strict", "orders", json!({ "message_id": "late" }));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "run_not_active", "{body}");
}

#[test]
fn an_append_past_pending_signal_count_is_refused_and_takes_no_position() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.store.limits.set(LimitKind::PendingSignalCount, 2);
    });
    s.start_workflow("default", "full", "full");
    for i in 1..=2 {
        let (status, body) = append(
            &s,
            "full",
            "orders",
            json!({ "message_id": format!("m-{i}") }),
        );
        assert_eq!(status, 202, "{body}");
    }
    let (status, body) = append(&s, "full", "orders", json!({ "message_id": "m-3" }));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "structural_limit_exceeded");
    assert_eq!(body["structural_limit_kind"], "pending_signal_count");
    assert_eq!(body["structural_limit_configured"], 2);
    // Appended before the run's first task completed, they are delivered
    // by the task after it; once the workflow has seen them, the next
    // message takes position 3.
    for _ in 0..2 {
        let task = next_task(&s, "full");
        let (status, body) = s.complete(&task, wait());
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = append(&s, "full", "orders", json!({ "message_id": "m-3" }));
    assert_eq!((status, &body["position"]), (202, &json!(3)), "{body}");
}

#[test]
fn completion_stream_metadata_is_checked_by_field() {
    let s = server();
    s.start_workflow("default", "meta", "meta");
    let (status, body) = append(&s, "meta", "orders", json!({ "message_id": "m-1" }));
    assert_eq!(status, 202, "{body}");
    let task = next_task(&s, "meta");
    let complete = |metadata: Value| {
        let mut body = json!({
            "lease_owner": task["lease_owner"], "commands": wait(),
            "workflow_task_attempt": task["workflow_task_attempt"],
        });
        if let (Value::Object(body), Value::Object(metadata)) = (&mut body, metadata) {
            body.extend(metadata);
        }
        s.post(
            &format!(
                "/api/worker/workflow-tasks/{}/complete",
                task["task_id"].as_str().unwrap()
            ),
            body,
        )
    };
    let (status, body) = complete(json!({
        "message_stream_cursors": [{ "stream_name": "orders", "through_position": 2 },
                                   { "stream_name": "", "through_position": 0 }],
        "message_stream_waits": [{ "stream_name": "orders", "after_position": -1 }],
    }));
    assert_eq!(status, 422, "{body}");
    let errors = &body["validation_errors"];
    assert!(
        errors["message_stream_cursors.0.through_position"][0]
            .as_str()
            .unwrap()
            .contains("past the stream's last message (1)"),
        "{body}"
    );
    assert!(
        errors["message_stream_cursors.1.stream_name"].is_array(),
        "{body}"
    );
    assert!(
        errors["message_stream_waits.0.after_position"].is_array(),
        "{body}"
    );
    let (status, body) = complete(json!({ "message_stream_waits": "orders" }));
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["message_stream_waits"].is_array());
    // Nothing of the refused completions was applied: the task is still
    // leased, and a well-formed one completes it.
    let (status, body) = complete(json!({
        "message_stream_cursors": [{ "stream_name": "orders", "through_position": 1 }],
        "message_stream_waits": [{ "stream_name": "orders", "after_position": 1 }],
    }));
    assert_eq!(status, 200, "{body}");
    assert_eq!(of_type(&s.history("meta"), "SignalWaitOpened").len(), 1);
}

#[test]
fn discovery_advertises_input_message_streams() {
    let s = server();
    let (status, info) = s.get("/api/cluster/info");
    assert_eq!(status, 200, "{info}");
    let streams = &info["worker_protocol"]["server_capabilities"]["message_streams"];
    assert_eq!(streams["input_message_streams"], true, "{info}");
    assert_eq!(streams["input_message_stream_signal"], SIGNAL);
    // A worker that asks for message streams (both SDKs always do) has
    // them acknowledged.
    let (status, ack) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "w", "task_queue": "q",
                "capabilities": ["message_streams", "no_such_capability"] }),
    );
    assert_eq!(status, 200, "{ack}");
    let acknowledged = ack["capabilities"].as_array().unwrap();
    assert!(acknowledged.contains(&json!("message_streams")), "{ack}");
    assert!(
        !acknowledged.contains(&json!("no_such_capability")),
        "{ack}"
    );
}

#[test]
fn continue_as_new_carries_each_stream_from_its_cursor() {
    let s = server();
    s.start_workflow("default", "chain", "chain");
    let task = next_task(&s, "chain");
    let (status, body) = s.complete(&task, wait());
    assert_eq!(status, 200, "{body}");
    for i in 1..=3 {
        let (status, body) = append(
            &s,
            "chain",
            "orders",
            json!({ "message_id": format!("m-{i}"), "input": input(&format!("#{i}")) }),
        );
        assert_eq!(status, 202, "{body}");
    }
    let (status, body) = append(&s, "chain", "audit", json!({ "message_id": "a-1" }));
    assert_eq!(status, 202, "{body}");
    let (_, first) = s.get("/api/workflows/chain");
    // The workflow read m-1 (its wait took it) and continues as new.
    let task = next_task(&s, "chain");
    let body = json!({
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": [{ "type": "continue_as_new", "arguments": input("again") }],
        "message_stream_cursors": [{ "stream_name": "orders", "through_position": 1 }],
    });
    let (status, answer) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/complete",
            task["task_id"].as_str().unwrap()
        ),
        body,
    );
    assert_eq!(status, 200, "{answer}");
    let (_, second) = s.get("/api/workflows/chain");
    assert_ne!(second["run_id"], first["run_id"], "{second}");
    // The successor starts with the orders cursor; the messages past it
    // (audit was never consumed, so all of it) are carried as pending
    // signals whose events wait for the successor's first task to end.
    let events = s.history("chain");
    let received: Vec<Value> = of_type(&events, "SignalReceived")
        .iter()
        .map(|r| delivered(&r["value"]))
        .collect();
    assert_eq!(
        received,
        [
            json!({ "schema": "durable-workflow.v2.message-stream.cursor",
                 "stream_name": "orders", "through_position": 1 })
        ]
    );
    assert_eq!(second["pending"]["signals"], 3, "{second}");
    // New appends continue after the highest position, behind the carried
    // ones; a carried message's retry answers from the successor.
    let (status, body) = append(&s, "chain", "orders", json!({ "message_id": "m-4" }));
    assert_eq!((status, &body["position"]), (202, &json!(4)), "{body}");
    assert_eq!(body["run_id"], second["run_id"]);
    let (status, body) = append(
        &s,
        "chain",
        "orders",
        json!({ "message_id": "m-3", "input": input("#3") }),
    );
    assert_eq!((status, &body["retained"]), (202, &json!(true)), "{body}");
    assert_eq!(body["position"], 3);
    // The successor's first task sees only the checkpoint: its code reads
    // the carried messages by waiting for them, never at its start.
    let task = next_task(&s, "chain");
    let shown: Vec<&str> = task["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    assert_eq!(
        shown.iter().filter(|t| **t == "SignalReceived").count(),
        1,
        "{shown:?}"
    );
    let (status, body) = s.complete(&task, wait());
    assert_eq!(status, 200, "{body}");
    // Then they are recorded after its wait, in position order, and the
    // wait takes the oldest.
    let events = s.history("chain");
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    let opened = kinds.iter().position(|k| *k == "SignalWaitOpened").unwrap();
    let received: Vec<(usize, Value)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["event_type"] == "SignalReceived")
        .map(|(i, e)| (i, delivered(&e["payload"]["value"])))
        .skip(1)
        .collect();
    assert!(received.iter().all(|(i, _)| *i > opened), "{kinds:?}");
    assert_eq!(
        received
            .iter()
            .map(|(_, r)| (
                r["stream_name"].clone(),
                r["message_id"].clone(),
                r["position"].clone()
            ))
            .collect::<Vec<_>>(),
        vec![
            (json!("audit"), json!("a-1"), json!(1)),
            (json!("orders"), json!("m-2"), json!(2)),
            (json!("orders"), json!("m-3"), json!(3)),
            (json!("orders"), json!("m-4"), json!(4)),
        ]
    );
    assert_eq!(received[2].1["payload_envelope"], input("#3"));
    let applied = of_type(&s.history("chain"), "SignalApplied");
    assert_eq!(delivered(&applied[0]["value"])["message_id"], "a-1");
    // A fully consumed stream still continues its positions.
    let task = next_task(&s, "chain");
    let body = json!({
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": [{ "type": "continue_as_new", "arguments": input("third") }],
        "message_stream_cursors": [{ "stream_name": "orders", "through_position": 4 },
                                   { "stream_name": "audit", "through_position": 1 }],
    });
    let (status, answer) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/complete",
            task["task_id"].as_str().unwrap()
        ),
        body,
    );
    assert_eq!(status, 200, "{answer}");
    let received = of_type(&s.history("chain"), "SignalReceived");
    assert_eq!(
        received.len(),
        2,
        "two checkpoints, no messages: {received:?}"
    );
    let (status, body) = append(&s, "chain", "orders", json!({ "message_id": "m-5" }));
    assert_eq!((status, &body["position"]), (202, &json!(5)), "{body}");
    let (status, body) = append(&s, "chain", "audit", json!({ "message_id": "a-2" }));
    assert_eq!((status, &body["position"]), (202, &json!(2)), "{body}");
}

/// Carried messages stay held while the continued run's first task fails
/// (its retry sees none of them either), and a run closed before any task
/// completed records them before its closing event.
#[test]
fn carried_messages_outlast_a_failed_first_task_and_close_with_the_run() {
    let s = server();
    s.start_workflow("default", "carry-fail", "cf");
    let task = next_task(&s, "cf");
    assert_eq!(s.complete(&task, wait()).0, 200);
    for id in ["m-1", "m-2"] {
        let (status, body) = append(&s, "carry-fail", "orders", json!({ "message_id": id }));
        assert_eq!(status, 202, "{body}");
    }
    let task = next_task(&s, "cf");
    let (status, answer) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/complete",
            task["task_id"].as_str().unwrap()
        ),
        json!({
            "lease_owner": task["lease_owner"],
            "workflow_task_attempt": task["workflow_task_attempt"],
            "commands": [{ "type": "continue_as_new", "arguments": input("again") }],
            "message_stream_cursors": [{ "stream_name": "orders", "through_position": 1 }],
        }),
    );
    assert_eq!(status, 200, "{answer}");
    let deliveries = |task: &Value| {
        task["history_events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event_type"] == "SignalReceived")
            .count()
    };
    let task = next_task(&s, "cf");
    assert_eq!(deliveries(&task), 1, "only the checkpoint: {task}");
    let (status, body) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/fail",
            task["task_id"].as_str().unwrap()
        ),
        json!({
            "lease_owner": task["lease_owner"],
            "workflow_task_attempt": task["workflow_task_attempt"],
            "failure": { "message": "replay refused", "type": "TestFailure" },
        }),
    );
    assert_eq!(status, 200, "{body}");
    let retry = next_task(&s, "cf");
    assert_eq!(
        deliveries(&retry),
        1,
        "the retry shows no carried message: {retry}"
    );
    let (status, body) = s.post("/api/workflows/carry-fail/cancel", json!({}));
    assert!(status < 300, "{status} {body}");
    let events = s.history("carry-fail");
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    let carried = events
        .iter()
        .position(|e| {
            e["event_type"] == "SignalReceived"
                && delivered(&e["payload"]["value"])["message_id"] == "m-2"
        })
        .unwrap_or_else(|| panic!("m-2 never recorded: {kinds:?}"));
    assert_eq!(kinds.last(), Some(&"WorkflowCancelled"), "{kinds:?}");
    assert!(carried < kinds.len() - 1, "{kinds:?}");
}

/// A message appended before a run's first workflow task completed is not
/// in that task's delivery: it is recorded after the task's events and
/// reaches the wait the task opened, so the run reads it by waiting.
#[test]
fn messages_appended_before_the_first_task_are_recorded_after_it() {
    let s = server();
    s.start_workflow("default", "early", "early");
    let (status, body) = append(&s, "early", "orders", json!({ "message_id": "m-1" }));
    assert_eq!(status, 202, "{body}");
    let task = next_task(&s, "early");
    let shown: Vec<&str> = task["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    assert!(!shown.contains(&"SignalReceived"), "{shown:?}");
    let (status, body) = s.complete(&task, wait());
    assert_eq!(status, 200, "{body}");
    let events = s.history("early");
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    let opened = kinds.iter().position(|k| *k == "SignalWaitOpened");
    let received = kinds.iter().position(|k| *k == "SignalReceived");
    assert!(
        opened.is_some() && received > opened,
        "the message follows the task's wait: {kinds:?}"
    );
    let applied = of_type(&events, "SignalApplied");
    assert_eq!(delivered(&applied[0]["value"])["message_id"], "m-1");
    // The run's code has work: the task that delivers it.
    let task = next_task(&s, "early");
    assert!(task["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event_type"] == "SignalApplied"));
}
