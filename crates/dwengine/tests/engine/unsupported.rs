//! What the engine does not implement is refused by name, and discovery
//! advertises only what it does: every workflow-task command the SDK can
//! send that the engine lacks is a 422 naming the command and its
//! `commands.<i>.type` field (the task stays leased, nothing is written),
//! and a malformed runtime external payload reference is a 422 naming the
//! payload field wherever a payload enters (external_payloads.rs has
//! the well-formed ones).

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::TestServer;

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn envelope(json_text: &str) -> Value {
    json!({ "codec": "json", "blob": json_text })
}

fn external() -> Value {
    json!({ "codec": "avro", "external_payload": { "uri": "dw://payloads/1", "sha256": "00" } })
}

/// A command type an SDK names that this engine refuses in a completion:
/// the Python SDK (2.12) puts `prepare_local_activity` only in a
/// prepared-local checkpoint-group request, a protocol this server does not
/// advertise, never in a completion (docs/api.md, "Not implemented").
const UNSUPPORTED: [&str; 1] = ["prepare_local_activity"];

#[test]
fn discovery_advertises_exactly_the_implemented_commands_and_no_missing_capability() {
    let s = server();
    let (status, info) = s.get("/api/cluster/info");
    assert_eq!(status, 200);
    let capabilities = &info["worker_protocol"]["server_capabilities"];
    let advertised: Vec<&str> = capabilities["supported_workflow_task_commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        advertised,
        [
            "schedule_activity",
            "record_local_activity",
            "start_timer",
            "open_condition_wait",
            "open_signal_wait",
            "record_version_marker",
            "record_side_effect",
            "upsert_search_attributes",
            "upsert_memo",
            "start_child_workflow",
            "start_service_operation",
            "continue_as_new",
            "cancel_selection_operation",
            "complete_workflow",
            "fail_workflow",
            "complete_update",
            "fail_update",
        ]
    );
    for unsupported in UNSUPPORTED {
        assert!(!advertised.contains(&unsupported), "{unsupported}");
    }
    assert_eq!(capabilities["child_workflows"], true);
    assert_eq!(capabilities["workflow_memo_updates"]["supported"], true);
    for missing in ["runtime_external_payload_transport", "query_task_authority"] {
        assert_eq!(capabilities[missing], false, "{missing}");
    }
    // Root cooperative cancellation is served (the `cancellation` tests).
    assert_eq!(capabilities["cooperative_cancellation"], true);
    assert_eq!(capabilities["sticky_execution"]["supported"], true);
}

#[test]
fn each_unsupported_command_is_a_422_naming_it_and_writes_nothing() {
    let s = server();
    s.start_workflow("default", "wf", "q");
    let (_, polled) = s.poll("workflow", "default", "q", "p1", 2000);
    let task = polled["task"].clone();
    let commands: Vec<Value> = UNSUPPORTED
        .iter()
        .map(|kind| json!({ "type": kind, "workflow_type": "child", "arguments": envelope("[]") }))
        .collect();
    let (status, body) = s.complete(&task, Value::Array(commands));
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["reason"], "validation_failed");
    for (i, kind) in UNSUPPORTED.iter().enumerate() {
        let problem = body["validation_errors"][format!("commands.{i}.type")][0]
            .as_str()
            .unwrap_or_else(|| panic!("no problem for commands.{i}.type in {body}"));
        assert!(problem.contains(&format!("\"{kind}\"")), "{problem}");
        assert!(problem.contains("schedule_activity"), "{problem}");
    }
    // One bad command refuses the whole completion; its good neighbours
    // are not applied either.
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "start_timer", "delay_seconds": 5 },
               { "type": "prepare_local_activity", "workflow_type": "child",
                 "arguments": envelope("[]") }]),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["commands.1.type"].is_array());
    let (_, described) = s.get("/api/workflows/wf");
    assert_eq!(described["history_length"], 1, "{described}");
    assert_eq!(described["pending"]["timers"], 0);
    // The task is still this worker's: a supported completion goes through.
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": envelope("1") }]),
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn runtime_external_payload_references_are_refused_where_payloads_enter() {
    let s = server();
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "ext", "workflow_type": "t", "task_queue": "q",
                "input": external() }),
    );
    assert_eq!(status, 422, "{body}");
    let problem = body["validation_errors"]["input.external_payload"][0]
        .as_str()
        .unwrap();
    assert!(
        problem.contains("exactly schema, reference_id"),
        "{problem}"
    );

    // A client-side external_storage reference is just an opaque envelope.
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "ext", "workflow_type": "t", "task_queue": "q",
                "input": { "codec": "avro", "external_storage": { "uri": "s3://b/k" } } }),
    );
    assert_eq!(status, 201, "{body}");

    for path in [
        "/api/workflows/ext/signal/go",
        "/api/workflows/ext/update/go",
    ] {
        let (status, body) = s.post(path, json!({ "input": external() }));
        assert_eq!(status, 422, "{path}: {body}");
        assert!(body["validation_errors"]["input.external_payload"].is_array());
    }

    let (_, polled) = s.poll("workflow", "default", "q", "p1", 2000);
    let (status, body) = s.complete(
        &polled["task"],
        json!([{ "type": "schedule_activity", "activity_type": "a", "arguments": external() },
               { "type": "complete_workflow", "result": external() }]),
    );
    assert_eq!(status, 422, "{body}");
    let errors = &body["validation_errors"];
    assert!(
        errors["commands.0.arguments.external_payload"].is_array(),
        "{body}"
    );
    assert!(
        errors["commands.1.result.external_payload"].is_array(),
        "{body}"
    );

    let (status, _) = s.complete(
        &polled["task"],
        json!([{ "type": "schedule_activity", "activity_type": "a", "arguments": envelope("[]") }]),
    );
    assert_eq!(status, 200);
    let (_, polled) = s.poll("activity", "default", "q", "a1", 2000);
    let activity = polled["task"].clone();
    let (status, body) = s.post(
        &format!(
            "/api/worker/activity-tasks/{}/complete",
            activity["task_id"].as_str().unwrap()
        ),
        json!({ "activity_attempt_id": activity["activity_attempt_id"],
                "lease_owner": activity["lease_owner"], "result": external() }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["result.external_payload"].is_array());
}
