//! History events carry every field either published SDK reads on replay:
//! over loopback HTTP, a fired timer repeats its schedule's `timer_id` and
//! `delay_seconds`; a condition wait keeps the SDK's
//! `condition_wait_occurrence_id` on its opened and satisfied events and
//! schedules its timeout as an event of its own; and `open_signal_wait`
//! pairs each wait with the oldest signal of its name no wait took, before
//! or after the wait opened. (The Rust SDK suite, conformance/run-rust,
//! drives the same paths through the SDK itself.)

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::{eventually, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

/// Starts workflow `id` and leases its first task.
fn start(s: &TestServer, id: &str) -> (String, Value) {
    let started = s.start_workflow("default", id, id);
    let run = started["run_id"].as_str().unwrap().to_owned();
    (run, next_task(s, id))
}

/// The next workflow task of queue `queue` (waits for it).
fn next_task(s: &TestServer, queue: &str) -> Value {
    let mut task = Value::Null;
    let mut n = 0;
    assert!(
        eventually(Duration::from_secs(30), || {
            n += 1;
            let (status, answer) = s.poll("workflow", "default", queue, &format!("p-{n}"), 200);
            assert_eq!(status, 200, "{answer}");
            task = answer["task"].clone();
            !task.is_null()
        }),
        "no workflow task on {queue}"
    );
    task
}

fn of_type<'a>(events: &'a [Value], event_type: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .collect()
}

fn complete(s: &TestServer, task: &Value, commands: Value) {
    let (status, body) = s.complete(task, commands);
    assert_eq!(status, 200, "{body}");
}

fn signal(s: &TestServer, id: &str, name: &str, blob: &str) {
    let (status, body) = s.post_ns(
        "default",
        &format!("/api/workflows/{id}/signal/{name}"),
        json!({ "input": { "codec": "json", "blob": blob } }),
    );
    assert_eq!(status, 202, "{body}");
}

#[test]
fn a_fired_timer_repeats_its_schedules_id_and_delay() {
    let s = server();
    let (run, task) = start(&s, "timer-fields");
    complete(
        &s,
        &task,
        json!([{ "type": "start_timer", "delay_seconds": 1 }]),
    );
    // The timer fires on a poll pass once due; the task that follows shows it.
    let task = next_task(&s, "timer-fields");
    assert!(task["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event_type"] == "TimerFired"));
    let events = s.run_history("timer-fields", &run);
    let scheduled = of_type(&events, "TimerScheduled");
    let fired = of_type(&events, "TimerFired");
    assert_eq!((scheduled.len(), fired.len()), (1, 1), "{events:?}");
    let (scheduled, fired) = (&scheduled[0]["payload"], &fired[0]["payload"]);
    assert_eq!(fired["delay_seconds"], 1, "{fired}");
    assert_eq!(fired["timer_id"], scheduled["timer_id"]);
    assert_eq!(fired["sequence"], scheduled["sequence"]);
    assert_eq!(fired["timer_kind"], "timer");
}

#[test]
fn a_condition_wait_keeps_the_sdks_occurrence_id_and_schedules_its_timeout() {
    let s = server();
    let (run, task) = start(&s, "condition-occurrence");
    let wait = json!({
        "type": "open_condition_wait", "condition_wait_occurrence_id": "rust:condition-wait:0",
        "condition_key": "approved", "condition_definition_fingerprint": "sha256:abc",
        "timeout_seconds": 300,
    });
    complete(&s, &task, json!([wait]));
    signal(&s, "condition-occurrence", "approve", "[\"alice\"]");
    let task = next_task(&s, "condition-occurrence");
    // The workflow got past its wait: it completes without re-issuing it.
    complete(
        &s,
        &task,
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "1" } }]),
    );
    let events = s.run_history("condition-occurrence", &run);
    let opened = &of_type(&events, "ConditionWaitOpened")[0]["payload"];
    let satisfied = &of_type(&events, "ConditionWaitSatisfied")[0]["payload"];
    for payload in [opened, satisfied] {
        assert_eq!(
            payload["condition_wait_occurrence_id"],
            "rust:condition-wait:0"
        );
        assert_eq!(payload["condition_wait_id"], opened["condition_wait_id"]);
        assert_eq!(payload["condition_key"], "approved");
        assert_eq!(payload["condition_definition_fingerprint"], "sha256:abc");
    }
    let timeout = of_type(&events, "TimerScheduled");
    assert_eq!(timeout.len(), 1, "{events:?}");
    let timeout = &timeout[0]["payload"];
    assert_eq!(timeout["timer_kind"], "condition_timeout");
    assert_eq!(timeout["condition_wait_id"], opened["condition_wait_id"]);
    assert_eq!(timeout["delay_seconds"], 300);
    assert!(timeout["timer_id"].as_str().is_some_and(|t| !t.is_empty()));
}

#[test]
fn a_new_occurrence_of_the_same_condition_is_a_new_wait() {
    let s = server();
    let (run, task) = start(&s, "condition-loop");
    let wait = |occurrence: &str| {
        json!({
            "type": "open_condition_wait", "condition_wait_occurrence_id": occurrence,
            "condition_key": "tick", "condition_definition_fingerprint": "sha256:t",
        })
    };
    complete(&s, &task, json!([wait("occ-0")]));
    signal(&s, "condition-loop", "tick", "[]");
    let task = next_task(&s, "condition-loop");
    // The loop's next turn waits on the same condition again.
    complete(&s, &task, json!([wait("occ-1")]));
    let events = s.run_history("condition-loop", &run);
    let opened = of_type(&events, "ConditionWaitOpened");
    let satisfied = of_type(&events, "ConditionWaitSatisfied");
    assert_eq!((opened.len(), satisfied.len()), (2, 1), "{events:?}");
    assert_eq!(
        satisfied[0]["payload"]["condition_wait_occurrence_id"],
        "occ-0"
    );
    assert_eq!(
        opened[1]["payload"]["condition_wait_occurrence_id"],
        "occ-1"
    );
    assert_ne!(
        opened[0]["payload"]["sequence"],
        opened[1]["payload"]["sequence"]
    );
}

#[test]
fn a_signal_wait_takes_a_signal_that_arrives_after_it_opened() {
    let s = server();
    let (run, task) = start(&s, "signal-after");
    complete(
        &s,
        &task,
        json!([{ "type": "open_signal_wait", "signal_name": "go" }]),
    );
    let events = s.run_history("signal-after", &run);
    let opened = &of_type(&events, "SignalWaitOpened")[0]["payload"];
    assert_eq!(opened["signal_name"], "go");
    assert!(of_type(&events, "SignalApplied").is_empty());
    // Another name does not satisfy it.
    signal(&s, "signal-after", "other", "[0]");
    assert!(of_type(&s.run_history("signal-after", &run), "SignalApplied").is_empty());
    signal(&s, "signal-after", "go", "[7]");
    let events = s.run_history("signal-after", &run);
    let applied = of_type(&events, "SignalApplied");
    assert_eq!(applied.len(), 1, "{events:?}");
    let applied = &applied[0]["payload"];
    assert_eq!(applied["sequence"], opened["sequence"]);
    assert_eq!(applied["signal_wait_id"], opened["signal_wait_id"]);
    assert_eq!(applied["value"], json!({ "codec": "json", "blob": "[7]" }));
    assert_eq!(applied["payload_codec"], "json");
    // The signal wakes the workflow, whose task replays the applied value.
    let task = next_task(&s, "signal-after");
    assert!(task["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event_type"] == "SignalApplied"));
}

#[test]
fn signal_waits_take_buffered_signals_oldest_first_each_once() {
    let s = server();
    let (run, task) = start(&s, "signal-buffered");
    signal(&s, "signal-buffered", "go", "[1]");
    signal(&s, "signal-buffered", "go", "[2]");
    complete(
        &s,
        &task,
        json!([{ "type": "open_signal_wait", "signal_name": "go" }]),
    );
    let task = next_task(&s, "signal-buffered");
    complete(
        &s,
        &task,
        json!([{ "type": "open_signal_wait", "signal_name": "go" }]),
    );
    let task = next_task(&s, "signal-buffered");
    complete(
        &s,
        &task,
        json!([{ "type": "open_signal_wait", "signal_name": "go" }]),
    );
    let events = s.run_history("signal-buffered", &run);
    let opened = of_type(&events, "SignalWaitOpened");
    let applied = of_type(&events, "SignalApplied");
    assert_eq!((opened.len(), applied.len()), (3, 2), "{events:?}");
    for (i, blob) in ["[1]", "[2]"].into_iter().enumerate() {
        assert_eq!(
            applied[i]["payload"]["sequence"],
            opened[i]["payload"]["sequence"]
        );
        assert_eq!(applied[i]["payload"]["value"]["blob"], blob);
    }
    // The third wait stays open until a third signal arrives.
    signal(&s, "signal-buffered", "go", "[3]");
    let events = s.run_history("signal-buffered", &run);
    let applied = of_type(&events, "SignalApplied");
    assert_eq!(applied.len(), 3);
    assert_eq!(
        applied[2]["payload"]["sequence"],
        opened[2]["payload"]["sequence"]
    );
    assert_eq!(applied[2]["payload"]["value"]["blob"], "[3]");
}

/// `POST /api/worker/register` at protocol `version`.
fn register(s: &TestServer, version: &str, body: Value) -> Value {
    let response = ureq::post(&format!("{}/api/worker/register", s.base))
        .set("x-namespace", "default")
        .set("x-durable-workflow-protocol-version", version)
        .send_json(body)
        .expect("registration answers 200");
    response.into_json().unwrap()
}

#[test]
fn registration_acknowledges_exactly_the_asked_capabilities_it_implements() {
    let s = server();
    let ack = register(
        &s,
        "1.19",
        json!({
            "worker_id": "w-local", "task_queue": "q-local", "runtime": "rust",
            "capabilities": ["condition_wait_occurrence_identity", "local_activities",
                             "worker_sessions", "made_up"],
            "capability_manifest": {
                "local_activities": { "supported": true, "minimum_protocol_version": "1.18" },
                "worker_sessions": { "supported": true },
                "sticky_execution": { "supported": false },
            },
        }),
    );
    assert_eq!(ack["registered"], true);
    assert_eq!(ack["worker_id"], "w-local");
    assert_eq!(ack["namespace"], "default");
    assert_eq!(ack["task_queue"], "q-local");
    assert_eq!(ack["protocol_version"], "1.19");
    // A session-holding worker's other names are the resources it offers
    // (session requirements it meets): acknowledged too.
    assert_eq!(
        ack["capabilities"],
        json!([
            "condition_wait_occurrence_identity",
            "local_activities",
            "worker_sessions",
            "made_up"
        ])
    );
    assert_eq!(
        ack["capability_manifest"],
        json!({ "local_activities": { "supported": true },
                "worker_sessions": { "supported": true } })
    );
    // A worker without sessions has no resources: an unknown name, or a
    // protocol capability this server lacks, is not acknowledged.
    let other = register(
        &s,
        "1.20",
        json!({ "worker_id": "w3", "task_queue": "q",
                "capabilities": ["made_up", "nexus_operations", "memo_upserts"] }),
    );
    assert_eq!(other["capabilities"], json!(["memo_upserts"]));
    // A registration that asks for nothing is acknowledged with nothing.
    let plain = register(&s, "1.20", json!({ "worker_id": "w2", "task_queue": "q" }));
    assert_eq!(plain["protocol_version"], "1.20");
    assert_eq!(plain["capabilities"], json!([]));
    assert_eq!(plain["capability_manifest"], json!({}));
}

#[test]
fn a_local_activity_is_recorded_as_a_marker_and_never_dispatched() {
    let s = server();
    let (run, task) = start(&s, "local-marker");
    let result = json!({ "codec": "json", "blob": "42" });
    complete(
        &s,
        &task,
        json!([
            { "type": "record_local_activity", "activity_type": "transform",
              "arguments": { "codec": "json", "blob": "[1]" }, "execution_mode": "local",
              "outcome": "completed", "result": result,
              "attempts": [{ "attempt_number": 1, "outcome": "failed" },
                           { "attempt_number": 2, "outcome": "completed" }] },
            { "type": "record_local_activity", "activity_type": "check",
              "arguments": { "codec": "json", "blob": "[]" }, "outcome": "failed",
              "message": "bad input", "exception_type": "ValueError", "non_retryable": true,
              "attempts": [{ "attempt_number": 1, "outcome": "failed" }] },
            { "type": "start_timer", "delay_seconds": 60 },
        ]),
    );
    // No activity task exists for either.
    let (status, polled) = s.poll("activity", "default", "local-marker", "a-1", 0);
    assert_eq!(status, 200, "{polled}");
    assert!(polled["task"].is_null(), "{polled}");
    let (_, described) = s.get_ns("default", "/api/workflows/local-marker");
    // Open, with nothing for its code to do until the timer fires.
    assert_eq!(described["status"], "waiting", "{described}");
    assert_eq!(described["status_bucket"], "running", "{described}");
    let events = s.run_history("local-marker", &run);
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "WorkflowStarted",
            "ActivityScheduled",
            "ActivityCompleted",
            "ActivityScheduled",
            "ActivityFailed",
            "TimerScheduled",
        ]
    );
    let (scheduled, completed) = (&events[1]["payload"], &events[2]["payload"]);
    let (failed, timer) = (&events[4]["payload"], &events[5]["payload"]);
    for payload in [scheduled, completed] {
        assert_eq!(payload["sequence"], 1);
        assert_eq!(payload["activity_type"], "transform");
        assert_eq!(payload["execution_mode"], "local");
        assert_eq!(payload["local_activity"], true);
    }
    assert_eq!(completed["result"], result);
    assert_eq!(completed["attempt_number"], 2);
    assert!(
        completed.get("attempts").is_none(),
        "attempts are counted, not copied"
    );
    assert_eq!(failed["sequence"], 2);
    assert_eq!(failed["message"], "bad input");
    assert_eq!(failed["exception_type"], "ValueError");
    assert_eq!(failed["non_retryable"], true);
    // The markers took workflow sequences like any command.
    assert_eq!(timer["sequence"], 3);
}

#[test]
fn a_version_marker_is_recorded_at_its_sequence_and_a_bad_range_is_refused() {
    let s = server();
    let (run, task) = start(&s, "version-marker");
    let (status, refused) = s.complete(
        &task,
        json!([{ "type": "record_version_marker", "change_id": "fix-1",
                 "version": 3, "min_supported": -1, "max_supported": 2 }]),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["validation_errors"]["commands.0.version"].is_array(),
        "{refused}"
    );
    complete(
        &s,
        &task,
        json!([
            { "type": "record_version_marker", "change_id": "fix-1",
              "version": 2, "min_supported": -1, "max_supported": 2 },
            { "type": "start_timer", "delay_seconds": 60 },
        ]),
    );
    let events = s.run_history("version-marker", &run);
    let marker = &of_type(&events, "VersionMarkerRecorded")[0]["payload"];
    assert_eq!(
        *marker,
        json!({ "sequence": 1, "change_id": "fix-1", "version": 2,
                "min_supported": -1, "max_supported": 2 })
    );
    assert_eq!(
        of_type(&events, "TimerScheduled")[0]["payload"]["sequence"],
        2
    );
}
