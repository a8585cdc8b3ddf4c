//! Nexus operations started by workflow code (`start_service_operation`):
//! the operation's bound workflow starts in the completion's transaction,
//! the caller records `ServiceCallStarted` at the command's sequence and
//! gets `ServiceCallCompleted` / `ServiceCallFailed` / `ServiceCallCancelled`
//! there, with a workflow task, when that workflow ends.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwpolicy::LimitKind;
use serde_json::{json, Value};
use support::{catalog, next_workflow_task as next_task, TestServer};

const OPERATION: &str = "/api/service-endpoints/billing/services/invoices/operations/charge";

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn envelope(blob: &str) -> Value {
    json!({ "codec": "json", "blob": blob })
}

/// The command both SDKs send (the Rust SDK's field set).
fn call(operation: &str) -> Value {
    json!({ "type": "start_service_operation", "endpoint_name": "billing",
            "service_name": "invoices", "operation_name": operation,
            "namespace": null, "idempotency_key": "order-7",
            "mode_override": "sync", "wait_for": "completed",
            "payload_codec": "json", "request_payload": "[42]",
            "metadata": { "caller_sdk_language": "sdk-rust" } })
}

fn payloads(events: &[Value], event_type: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .map(|e| e["payload"].clone())
        .collect()
}

/// Starts the caller and has it issue `command`; returns the
/// `ServiceCallStarted` payload (Null when there is none).
fn caller_calls(s: &TestServer, id: &str, command: Value) -> Value {
    s.start_workflow("default", id, id);
    let task = next_task(s, id);
    let (status, body) = s.complete(&task, json!([command]));
    assert_eq!(status, 200, "{body}");
    payloads(&s.history(id), "ServiceCallStarted")
        .first()
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn a_call_starts_the_bound_workflow_and_its_result_resumes_the_caller() {
    let s = server();
    catalog::billing(&s, "sync");
    let started = caller_calls(&s, "caller", call("Charge"));
    assert_eq!(started["sequence"], 1, "{started}");
    assert_eq!(started["status"], "started");
    assert_eq!(started["operation_name"], "Charge", "as sent");
    assert_eq!(started["operation_mode"], "sync");
    assert_eq!(started["wait_for"], "completed");
    assert_eq!(started["idempotency_key"], "order-7");
    assert_eq!(started["request_payload"], "[42]");
    assert_eq!(started["caller_workflow_instance_id"], "caller");
    let call_id = started["service_call_id"].as_str().unwrap().to_owned();
    let linked = started["linked_workflow_instance_id"].as_str().unwrap();
    assert_eq!(linked, format!("service-call-{call_id}"));
    // The bound workflow runs in the catalog's namespace on its queue, with
    // the request as its input.
    let (status, charge) = s.get(&format!("/api/workflows/{linked}"));
    assert_eq!(status, 200, "{charge}");
    assert_eq!(charge["workflow_type"], "Charge");
    assert_eq!(charge["task_queue"], "payments");
    assert_eq!(charge["run_id"], started["linked_workflow_run_id"]);
    let task = next_task(&s, "payments");
    assert_eq!(task["workflow_id"], linked, "{task}");
    // Nothing for the caller until the call ends.
    let (_, idle) = s.poll("workflow", "default", "caller", "idle", 0);
    assert!(idle["task"].is_null(), "{idle}");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": envelope("\"charged\"") }]),
    );
    assert_eq!(status, 200, "{body}");
    let events = s.history("caller");
    let completed = payloads(&events, "ServiceCallCompleted");
    assert_eq!(completed.len(), 1, "{events:?}");
    let completed = &completed[0];
    assert_eq!(completed["sequence"], 1);
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["service_call_id"], call_id.as_str());
    assert_eq!(completed["response_payload"], envelope("\"charged\""));
    assert_eq!(completed["payload_codec"], "json");
    assert_eq!(
        completed["linked_workflow_run_id"],
        started["linked_workflow_run_id"]
    );
    // The caller has a task that sees it, and finishes.
    let task = next_task(&s, "caller");
    assert!(task["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event_type"] == "ServiceCallCompleted"));
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": envelope("1") }]),
    );
    assert_eq!(status, 200, "{body}");
    // The call is a service call like a client's: its route describes it.
    let (status, described) = s.get(&format!("{OPERATION}/service-calls/{call_id}"));
    assert_eq!(status, 200, "{described}");
    assert_eq!(described["status"], "completed", "{described}");
}

#[test]
fn an_unknown_operation_fails_at_once_and_the_caller_sees_it() {
    let s = server();
    catalog::billing(&s, "sync");
    let started = caller_calls(&s, "lost", call("refund"));
    assert!(started.is_null(), "no admission: {started}");
    let failed = payloads(&s.history("lost"), "ServiceCallFailed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["sequence"], 1);
    assert_eq!(failed[0]["status"], "failed");
    assert_eq!(failed[0]["exception_type"], "operation_not_found");
    assert!(failed[0]["message"]
        .as_str()
        .unwrap()
        .contains("Operation [refund] not found"));
    let task = next_task(&s, "lost");
    assert!(task["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event_type"] == "ServiceCallFailed"));
}

/// billing/invoices in namespace `payments`: `charge` open to every
/// caller, `refund` to `partners` only, `void` closed to `default`.
fn payments_catalog(s: &TestServer) {
    s.namespace("payments");
    catalog::endpoint_and_service(s, "payments", "billing", "invoices");
    for (name, policy) in [
        ("charge", Value::Null),
        ("refund", json!({ "allow_callers": ["partners"] })),
        (
            "void",
            json!({ "caller_namespaces": { "deny": ["default"] } }),
        ),
    ] {
        let mut body = catalog::start_workflow_operation(name, "sync", "Charge", "payments");
        body["boundary_policy"] = policy;
        catalog::operation(s, "payments", "billing", "invoices", body);
    }
}

fn payments_task(s: &TestServer) -> Value {
    let mut task = Value::Null;
    let mut n = 0;
    assert!(support::eventually(
        std::time::Duration::from_secs(30),
        || {
            n += 1;
            let (status, answer) =
                s.poll("workflow", "payments", "payments", &format!("p-{n}"), 200);
            assert_eq!(status, 200, "{answer}");
            task = answer["task"].clone();
            !task.is_null()
        }
    ));
    task
}

#[test]
fn a_call_reaches_another_namespaces_catalog_as_the_operation_allows() {
    let s = server();
    payments_catalog(&s);
    // Allowed: the call and its workflow live in the target namespace, and
    // the caller (which may name its own namespace) gets the outcome.
    let mut command = call("charge");
    command["namespace"] = "payments".into();
    command["caller_namespace"] = "default".into();
    let started = caller_calls(&s, "x-caller", command);
    assert_eq!(started["status"], "started", "{started}");
    assert_eq!(started["target_namespace"], "payments");
    assert_eq!(started["caller_namespace"], "default");
    let linked = started["linked_workflow_instance_id"].as_str().unwrap();
    let (status, charge) = s.get_ns("payments", &format!("/api/workflows/{linked}"));
    assert_eq!(status, 200, "{charge}");
    assert_eq!(charge["namespace"], "payments", "{charge}");
    let (status, _) = s.get(&format!("/api/workflows/{linked}"));
    assert_eq!(status, 404, "not in the caller's namespace");
    let call_id = started["service_call_id"].as_str().unwrap();
    let (status, described) = s.get_ns("payments", &format!("{OPERATION}/service-calls/{call_id}"));
    assert_eq!(status, 200, "{described}");
    assert_eq!(described["caller_namespace"], "default", "{described}");
    let task = payments_task(&s);
    assert_eq!(task["workflow_id"], linked, "{task}");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": envelope("\"charged\"") }]),
    );
    assert_eq!(status, 200, "{body}");
    let completed = payloads(&s.history("x-caller"), "ServiceCallCompleted");
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["response_payload"], envelope("\"charged\""));
    let task = next_task(&s, "x-caller");
    assert_eq!(task["workflow_id"], "x-caller");
    // Refused: by the allow list, the deny list, an unknown namespace and a
    // caller namespace that is not the run's. Each fails the call at once
    // and nothing starts in the target namespace.
    for (id, operation, namespace, claimed, outcome, reason) in [
        (
            "x-refund",
            "refund",
            "payments",
            None,
            "rejected_forbidden",
            "caller_namespace_not_allowed",
        ),
        (
            "x-void",
            "void",
            "payments",
            None,
            "rejected_forbidden",
            "caller_namespace_denied",
        ),
        (
            "x-lost",
            "charge",
            "nowhere",
            None,
            "namespace_not_found",
            "namespace_not_found",
        ),
        (
            "x-spoof",
            "charge",
            "payments",
            Some("payments"),
            "caller_namespace_mismatch",
            "caller_namespace_mismatch",
        ),
    ] {
        let mut command = call(operation);
        command["namespace"] = namespace.into();
        if let Some(claimed) = claimed {
            command["caller_namespace"] = claimed.into();
        }
        let started = caller_calls(&s, id, command);
        assert!(started.is_null(), "{id}: {started}");
        let failed = payloads(&s.history(id), "ServiceCallFailed");
        assert_eq!(failed.len(), 1, "{id}");
        assert_eq!(failed[0]["outcome"], outcome, "{id}: {}", failed[0]);
        assert_eq!(failed[0]["exception_type"], reason, "{id}");
        assert_eq!(failed[0]["target_namespace"], namespace, "{id}");
        let task = next_task(&s, id);
        assert_eq!(task["workflow_id"], id);
    }
    let (_, list) = s.get_ns("payments", "/api/workflows");
    assert_eq!(
        list["workflows"].as_array().map(Vec::len),
        Some(1),
        "only the allowed call's workflow: {list}"
    );
    // A client's execute meets the same lists.
    let (status, body) = s.post_ns(
        "payments",
        "/api/service-endpoints/billing/services/invoices/operations/void/execute",
        json!({ "arguments": "[1]", "payload_codec": "json", "wait_for": "accepted",
                "caller_namespace": "default" }),
    );
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["reason"], "caller_namespace_denied", "{body}");
    // A caller list that is not a list of names is refused at creation.
    let (status, body) = s.post_ns(
        "payments",
        "/api/service-endpoints/billing/services/invoices/operations",
        json!({ "operation_name": "bad", "operation_mode": "sync",
                "handler_binding_kind": "start_workflow",
                "boundary_policy": { "authorization": { "deny_callers": "default" } },
                "handler_binding": { "workflow_type": "Charge" } }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["validation_errors"]["boundary_policy.authorization.deny_callers"].is_array(),
        "{body}"
    );
}

#[test]
fn a_failed_terminated_or_cancelled_workflow_fails_or_cancels_the_call() {
    let s = server();
    catalog::billing(&s, "sync");
    // Failed: the workflow's message and type reach the caller.
    let started = caller_calls(&s, "c-fail", call("charge"));
    let task = next_task(&s, "payments");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "fail_workflow", "message": "card declined",
                 "exception_type": "CardDeclined" }]),
    );
    assert_eq!(status, 200, "{body}");
    let failed = payloads(&s.history("c-fail"), "ServiceCallFailed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["message"], "card declined");
    assert_eq!(failed[0]["exception_type"], "CardDeclined");
    assert_eq!(failed[0]["outcome"], "handler_failed");
    assert_eq!(failed[0]["service_call_id"], started["service_call_id"]);
    // Terminated.
    let started = caller_calls(&s, "c-term", call("charge"));
    let linked = started["linked_workflow_instance_id"].as_str().unwrap();
    let (status, body) = s.post(
        &format!("/api/workflows/{linked}/terminate"),
        json!({ "reason": "operator" }),
    );
    assert_eq!(status, 200, "{body}");
    let failed = payloads(&s.history("c-term"), "ServiceCallFailed");
    assert_eq!(failed[0]["outcome"], "handler_terminated", "{failed:?}");
    assert!(failed[0]["message"].as_str().unwrap().contains("operator"));
    // Cancelled.
    let started = caller_calls(&s, "c-cancel", call("charge"));
    let linked = started["linked_workflow_instance_id"].as_str().unwrap();
    let (status, body) = s.post(&format!("/api/workflows/{linked}/cancel"), json!({}));
    assert_eq!(status, 200, "{body}");
    let cancelled = payloads(&s.history("c-cancel"), "ServiceCallCancelled");
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["status"], "cancelled");
    // A caller that closed first gets nothing; its waiter goes quietly.
    let started = caller_calls(&s, "c-gone", call("charge"));
    let (status, body) = s.post("/api/workflows/c-gone/terminate", json!({}));
    assert_eq!(status, 200, "{body}");
    let linked = started["linked_workflow_instance_id"].as_str().unwrap();
    let (status, body) = s.post(&format!("/api/workflows/{linked}/terminate"), json!({}));
    assert_eq!(status, 200, "{body}");
    assert!(payloads(&s.history("c-gone"), "ServiceCallFailed").is_empty());
}

#[test]
fn an_accepted_or_async_call_resumes_at_its_admission_only() {
    let s = server();
    catalog::billing(&s, "sync");
    for (id, mode, wait_for) in [
        ("c-accepted", "sync", "accepted"),
        ("c-async", "async", "accepted"),
    ] {
        let mut command = call("charge");
        command["mode_override"] = mode.into();
        command["wait_for"] = wait_for.into();
        let started = caller_calls(&s, id, command);
        assert_eq!(started["status"], "started", "{started}");
        assert_eq!(started["wait_for"], wait_for);
        assert_eq!(started["operation_mode"], mode);
        // The admission is the call's result: the caller gets a task now.
        let resumed = next_task(&s, id);
        assert!(resumed["history_events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event_type"] == "ServiceCallStarted"));
        let task = next_task(&s, "payments");
        let (status, body) = s.complete(
            &task,
            json!([{ "type": "complete_workflow", "result": envelope("1") }]),
        );
        assert_eq!(status, 200, "{body}");
        // The call completed, but the caller's history keeps the admission
        // alone: a second result for the one command would break replay.
        let call_id = started["service_call_id"].as_str().unwrap();
        let (_, described) = s.get(&format!("{OPERATION}/service-calls/{call_id}"));
        assert_eq!(described["status"], "completed", "{described}");
        let events = s.history(id);
        assert!(
            payloads(&events, "ServiceCallCompleted").is_empty(),
            "{events:?}"
        );
    }
}

#[test]
fn a_linked_workflow_that_continues_as_new_answers_from_its_last_run() {
    let s = server();
    catalog::billing(&s, "sync");
    let started = caller_calls(&s, "c-chain", call("charge"));
    let linked = started["linked_workflow_instance_id"].as_str().unwrap();
    let task = next_task(&s, "payments");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "continue_as_new", "arguments": envelope("[43]") }]),
    );
    assert_eq!(status, 200, "{body}");
    assert!(payloads(&s.history("c-chain"), "ServiceCallCompleted").is_empty());
    let task = next_task(&s, "payments");
    assert_eq!(task["workflow_id"], linked);
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": envelope("\"second\"") }]),
    );
    assert_eq!(status, 200, "{body}");
    let completed = payloads(&s.history("c-chain"), "ServiceCallCompleted");
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0]["response_payload"], envelope("\"second\""));
}

#[test]
fn bad_calls_are_refused_by_field_and_an_oversized_request_fails_before_any_row() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.store.limits.set(LimitKind::PayloadSizeBytes, 64);
    });
    catalog::billing(&s, "sync");
    s.start_workflow("default", "bad", "bad");
    let task = next_task(&s, "bad");
    let mut bad = call("charge");
    bad["endpoint_name"] = "".into();
    bad["mode_override"] = "later".into();
    bad["wait_for"] = "never".into();
    bad["request_payload"] = json!(42);
    bad["connection"] = "redis".into();
    let (status, body) = s.complete(&task, json!([bad]));
    assert_eq!(status, 422, "{body}");
    for field in [
        "endpoint_name",
        "mode_override",
        "wait_for",
        "request_payload",
        "connection",
    ] {
        assert!(
            body["validation_errors"][format!("commands.0.{field}")].is_array(),
            "{field}: {body}"
        );
    }
    assert_eq!(s.history("bad").len(), 1, "nothing applied");
    // Past payload_size_bytes the caller fails before the call or its
    // workflow exists.
    let mut big = call("charge");
    big["request_payload"] = format!("[\"{}\"]", "x".repeat(100)).into();
    let (status, body) = s.complete(&task, json!([big]));
    assert_eq!(status, 200, "{body}");
    let (_, described) = s.get("/api/workflows/bad");
    assert_eq!(described["status"], "failed", "{described}");
    let (status, _) = s.get("/api/workflows/service-call-1");
    assert_eq!(status, 404);
    assert!(payloads(&s.history("bad"), "ServiceCallStarted").is_empty());
}

#[test]
fn start_options_name_describe_and_attach_the_operations_workflow() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.store.limits.set(LimitKind::MemoSizeBytes, 256);
    });
    catalog::billing(&s, "sync");
    let (status, body) = s.post(
        "/api/search-attributes",
        json!({ "name": "Region", "type": "keyword" }),
    );
    assert_eq!(status, 201, "{body}");
    // Named, with memo, search attributes and a business key.
    let mut named = call("charge");
    named["target_workflow_instance_id"] = "invoice-7".into();
    named["memo"] = json!({ "order": 7 });
    named["search_attributes"] = json!({ "Region": "eu" });
    named["business_key"] = "order-7".into();
    let first = caller_calls(&s, "opt-first", named.clone());
    assert_eq!(first["linked_workflow_instance_id"], "invoice-7", "{first}");
    let (status, invoice) = s.get("/api/workflows/invoice-7");
    assert_eq!(status, 200, "{invoice}");
    assert_eq!(invoice["memo"]["order"], 7, "{invoice}");
    assert_eq!(invoice["search_attributes"]["Region"], "eu", "{invoice}");
    let run = first["linked_workflow_run_id"].as_str().unwrap().to_owned();
    let call_id = first["service_call_id"].as_str().unwrap();
    let (_, described) = s.get(&format!("{OPERATION}/service-calls/{call_id}"));
    assert_eq!(described["business_key"], "order-7", "{described}");
    // The id is taken: refused by default, attached with
    // return_existing_active (to the named run only when one is named).
    let refused = caller_calls(&s, "opt-dup", named.clone());
    assert!(refused.is_null(), "{refused}");
    let failed = payloads(&s.history("opt-dup"), "ServiceCallFailed");
    assert_eq!(failed[0]["exception_type"], "instance_already_started");
    let mut attach = named.clone();
    attach["duplicate_start_policy"] = "return_existing_active".into();
    let attached = caller_calls(&s, "opt-attach", attach.clone());
    assert_eq!(
        attached["linked_workflow_run_id"],
        run.as_str(),
        "{attached}"
    );
    attach["target_workflow_run_id"] = "999999".into();
    let wrong = caller_calls(&s, "opt-wrong-run", attach.clone());
    assert!(wrong.is_null(), "{wrong}");
    let failed = payloads(&s.history("opt-wrong-run"), "ServiceCallFailed");
    assert_eq!(failed[0]["exception_type"], "target_run_not_open");
    attach["target_workflow_run_id"] = run.as_str().into();
    let pinned = caller_calls(&s, "opt-pinned", attach);
    assert_eq!(pinned["linked_workflow_run_id"], run.as_str(), "{pinned}");
    // A call cannot attach to its own caller's run.
    let mut own = call("charge");
    own["target_workflow_instance_id"] = "opt-self".into();
    own["duplicate_start_policy"] = "return_existing_active".into();
    caller_calls(&s, "opt-self", own);
    let failed = payloads(&s.history("opt-self"), "ServiceCallFailed");
    assert_eq!(failed[0]["exception_type"], "target_run_is_caller");
    // One run answers every caller linked to it.
    let task = next_task(&s, "payments");
    assert_eq!(task["workflow_id"], "invoice-7");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": envelope("\"paid\"") }]),
    );
    assert_eq!(status, 200, "{body}");
    for id in ["opt-first", "opt-attach", "opt-pinned"] {
        let completed = payloads(&s.history(id), "ServiceCallCompleted");
        assert_eq!(completed.len(), 1, "{id}");
        assert_eq!(
            completed[0]["response_payload"],
            envelope("\"paid\""),
            "{id}"
        );
    }
    // Bad options are a 422 naming the field; nothing is applied.
    s.start_workflow("default", "opt-bad", "opt-bad");
    let task = next_task(&s, "opt-bad");
    for (name, value) in [
        ("duplicate_start_policy", json!("maybe")),
        ("target_workflow_run_id", json!("1")),
        ("connection", json!("redis")),
        ("memo", json!([1])),
        ("search_attributes", json!({ "Unknown": "x" })),
    ] {
        let mut bad = call("charge");
        bad[name] = value;
        let (status, body) = s.complete(&task, json!([bad]));
        assert_eq!(status, 422, "{name}: {body}");
        assert!(
            body["validation_errors"][format!("commands.0.{name}")].is_array(),
            "{name}: {body}"
        );
    }
    assert_eq!(s.history("opt-bad").len(), 1, "nothing applied");
    // A memo past memo_size_bytes fails the caller with the structural
    // metadata, as an oversized start would, and nothing starts.
    let mut big = call("charge");
    big["target_workflow_instance_id"] = "invoice-big".into();
    big["memo"] = json!({ "note": "x".repeat(300) });
    let (status, body) = s.complete(&task, json!([big]));
    assert_eq!(status, 200, "{body}");
    let (_, described) = s.get("/api/workflows/opt-bad");
    assert_eq!(described["status"], "failed", "{described}");
    let (status, _) = s.get("/api/workflows/invoice-big");
    assert_eq!(status, 404);
}

/// `connection` names the queue connection the bound workflow starts on.
/// This server has one, its queue driver (`database` here): that name is
/// accepted and starts the call as leaving it out does, on the command, a
/// client's execute and an operation's binding alike; any other name is a
/// `422` naming the field and the accepted value, and nothing is written.
#[test]
fn a_connection_is_accepted_when_it_names_the_queue_driver() {
    let s = server();
    catalog::billing(&s, "sync");
    let mut named = call("charge");
    named["connection"] = "database".into();
    let started = caller_calls(&s, "conn-ok", named);
    assert_eq!(started["status"], "started", "{started}");
    let linked = started["linked_workflow_instance_id"].as_str().unwrap();
    let (status, charge) = s.get(&format!("/api/workflows/{linked}"));
    assert_eq!(status, 200, "{charge}");
    assert_eq!(charge["task_queue"], "payments");
    // Another name is refused by field, naming the accepted value.
    s.start_workflow("default", "conn-bad", "conn-bad");
    let task = next_task(&s, "conn-bad");
    for value in [json!("redis"), json!("sqs"), json!(""), json!(3)] {
        let mut bad = call("charge");
        bad["connection"] = value.clone();
        let (status, body) = s.complete(&task, json!([bad]));
        assert_eq!(status, 422, "{value}: {body}");
        let problem = body["validation_errors"]["commands.0.connection"][0]
            .as_str()
            .unwrap_or_default();
        assert!(problem.contains("\"database\""), "{value}: {body}");
    }
    assert_eq!(s.history("conn-bad").len(), 1, "nothing applied");
    // A client's execute: the same rule.
    let (status, body) = s.post(
        &format!("{OPERATION}/execute"),
        json!({ "arguments": "[1]", "payload_codec": "json", "wait_for": "accepted",
                "connection": "database" }),
    );
    assert!(
        status == 200 || status == 201 || status == 202,
        "{status}: {body}"
    );
    assert_eq!(body["accepted"], true, "{body}");
    let (status, body) = s.post(
        &format!("{OPERATION}/execute"),
        json!({ "arguments": "[1]", "payload_codec": "json", "wait_for": "accepted",
                "connection": "redis" }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["connection"].is_array(), "{body}");
    // An operation's binding: the same rule.
    let path = "/api/service-endpoints/billing/services/invoices/operations";
    let binding = |connection: &str| {
        json!({ "operation_name": format!("op-{connection}"), "operation_mode": "async",
                "handler_binding_kind": "start_workflow",
                "handler_binding": { "workflow_type": "Charge", "task_queue": "payments",
                                     "connection": connection } })
    };
    let (status, body) = s.post(path, binding("database"));
    assert_eq!(status, 201, "{body}");
    let (status, body) = s.post(path, binding("redis"));
    assert_eq!(status, 422, "{body}");
    assert!(
        body["validation_errors"]["handler_binding.connection"].is_array(),
        "{body}"
    );
    let (status, _) = s.get(&format!("{path}/op-redis"));
    assert_eq!(status, 404, "nothing written");
}

/// An operation's binding names its queue as `task_queue` or, as the
/// reference server's binding does, `queue`; a call's workflow starts
/// there. A non-string queue, or two different ones, is a `422` naming the
/// field, and nothing is written.
#[test]
fn a_binding_names_its_queue_as_task_queue_or_queue() {
    let s = server();
    catalog::billing(&s, "sync");
    let path = "/api/service-endpoints/billing/services/invoices/operations";
    let operation = |name: &str, binding: Value| {
        let mut handler = json!({ "workflow_type": "Charge" });
        handler
            .as_object_mut()
            .unwrap()
            .extend(binding.as_object().unwrap().clone());
        json!({ "operation_name": name, "operation_mode": "async",
                "handler_binding_kind": "start_workflow", "handler_binding": handler })
    };
    let (status, body) = s.post(path, operation("by-queue", json!({ "queue": "ledger" })));
    assert_eq!(status, 201, "{body}");
    let (status, body) = s.post(
        &format!("{path}/by-queue/execute"),
        json!({ "arguments": "[1]", "payload_codec": "json", "wait_for": "accepted",
                "target_workflow_instance_id": "ledger-1" }),
    );
    assert!(status < 300, "{status}: {body}");
    let (_, described) = s.get("/api/workflows/ledger-1");
    assert_eq!(described["task_queue"], "ledger", "{described}");
    let (status, body) = s.post(
        path,
        operation("same", json!({ "queue": "ledger", "task_queue": "ledger" })),
    );
    assert_eq!(status, 201, "{body}");
    for (name, binding, field) in [
        (
            "two",
            json!({ "queue": "a", "task_queue": "b" }),
            "handler_binding.queue",
        ),
        ("number", json!({ "queue": 7 }), "handler_binding.queue"),
        (
            "list",
            json!({ "task_queue": ["q"] }),
            "handler_binding.task_queue",
        ),
    ] {
        let (status, body) = s.post(path, operation(name, binding));
        assert_eq!(status, 422, "{name}: {body}");
        assert!(
            body["validation_errors"][field].is_array(),
            "{name}: {body}"
        );
        let (status, _) = s.get(&format!("{path}/{name}"));
        assert_eq!(status, 404, "{name}: nothing written");
    }
}
