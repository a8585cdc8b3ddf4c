//! Nexus service calls over loopback HTTP: the service catalog, an
//! operation executed as the SDK sends it (a workflow started in the
//! catalog's namespace, its result waited for), idempotent replays, and the
//! `shared_service_boundary_admission` budgets: exact at their edge, no
//! keys for uncapped calls, hashed dimensions, and the key family's bound
//! under churn on the in-process cache and on Redis.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dwengine::cache::hash_dimensions;
use dwengine::service_boundary::{ServiceBoundaryBudgets, SharedServiceBoundaryPolicy};
use serde_json::{json, Value};
use support::{cache_variants, eventually, memory_cache, SharedCache, TestServer};

const PREFIX: &str = SharedServiceBoundaryPolicy::PREFIX;
const OPERATION: &str = "/api/service-endpoints/billing/services/invoices/operations/charge";

/// Registers billing/invoices/charge in `ns`, bound to workflow type
/// `Charge` on task queue `payments`, with `boundary_policy`.
fn catalog(s: &TestServer, ns: &str, boundary_policy: Value) {
    catalog_with(|path, body| s.post_ns(ns, path, body), boundary_policy);
}

/// [`catalog`] through `post` (a path and a body: the status and answer).
fn catalog_with(post: impl Fn(&str, Value) -> (u16, Value), boundary_policy: Value) {
    let (status, body) = post(
        "/api/service-endpoints",
        json!({ "endpoint_name": "Billing", "description": "money" }),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["endpoint_name"], "billing", "names are lower-cased");
    let (status, body) = post(
        "/api/service-endpoints/billing/services",
        json!({ "service_name": "invoices" }),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["endpoint_name"], "billing");
    let (status, body) = post(
        "/api/service-endpoints/billing/services/invoices/operations",
        json!({ "operation_name": "charge", "operation_mode": "sync",
                "handler_binding_kind": "start_workflow",
                "handler_binding": { "workflow_type": "Charge", "task_queue": "payments" },
                "boundary_policy": boundary_policy }),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["handler_target_reference"], "Charge");
}

/// The SDK's execute body (`nexus_request_payload`).
fn call(caller: &str, key: Option<&str>, wait_for: &str) -> Value {
    let mut body = json!({
        "arguments": "WzQyXQ==", "payload_codec": "avro", "wait_for": wait_for,
        "caller_namespace": caller, "caller_workflow_instance_id": "order-7",
    });
    if let Some(key) = key {
        body["idempotency_key"] = key.into();
    }
    body
}

fn execute(s: &TestServer, ns: &str, body: Value) -> (u16, Value) {
    s.post_ns(ns, &format!("{OPERATION}/execute"), body)
}

#[test]
fn the_catalog_registers_lists_refuses_clearly_and_deletes_bottom_up() {
    let cache = memory_cache();
    let s = TestServer::start(cache, |_| {});
    s.namespace("payments");
    catalog(&s, "payments", Value::Null);
    let (status, body) = s.get_ns("payments", "/api/service-endpoints");
    assert_eq!(status, 200);
    assert_eq!(body["service_endpoints"][0]["endpoint_name"], "billing");
    let (_, body) = s.get_ns(
        "payments",
        "/api/service-endpoints/billing/services/invoices/operations",
    );
    assert_eq!(body["operations"][0]["operation_name"], "charge");
    assert_eq!(body["operations"][0]["operation_mode"], "sync");
    // Another namespace sees none of it.
    let (status, body) = s.get_ns("default", "/api/service-endpoints/billing");
    assert_eq!(
        (status, body["reason"].as_str()),
        (404, Some("endpoint_not_found"))
    );
    let (status, body) = s.get_ns("payments", "/api/service-endpoints/billing/services/x");
    assert_eq!(
        (status, body["reason"].as_str()),
        (404, Some("service_not_found"))
    );
    let (status, body) = execute(&s, "payments", call("default", None, "accepted"));
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.post_ns(
        "payments",
        "/api/service-endpoints/billing/services/invoices/operations/refund/execute",
        json!({}),
    );
    assert_eq!(
        (status, body["reason"].as_str()),
        (404, Some("operation_not_found"))
    );
    assert_eq!(body["accepted"], false);
    // Duplicates and bad definitions are refused with their field.
    let (status, body) = s.post_ns(
        "payments",
        "/api/service-endpoints",
        json!({ "endpoint_name": "billing" }),
    );
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("endpoint_already_exists"))
    );
    let (status, body) = s.post_ns(
        "payments",
        "/api/service-endpoints",
        json!({ "endpoint_name": "bad name!" }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["validation_errors"]["endpoint_name"].is_array(),
        "{body}"
    );
    let (status, body) = s.post_ns(
        "payments",
        "/api/service-endpoints/billing/services/invoices/operations",
        json!({ "operation_name": "notify", "operation_mode": "eventually",
                "handler_binding_kind": "invocable_http", "handler_target_reference": "x",
                "boundary_policy": { "rate_limit": { "requests_per_minute": 0 } } }),
    );
    assert_eq!(status, 422, "{body}");
    let errors = &body["validation_errors"];
    assert!(errors["operation_mode"].is_array(), "{body}");
    assert!(
        errors["handler_binding_kind"][0]
            .as_str()
            .is_some_and(|m| m.contains("not served")),
        "{body}"
    );
    assert!(
        errors["boundary_policy.rate_limit.requests_per_minute"].is_array(),
        "{body}"
    );
    // Deletion goes bottom-up, and never drops an operation with calls.
    let (status, body) = s.delete_ns("payments", "/api/service-endpoints/billing");
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("endpoint_has_services"))
    );
    let (status, body) = s.delete_ns("payments", OPERATION);
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("operation_has_service_calls"))
    );
    let (status, _) = s.post_ns(
        "payments",
        "/api/service-endpoints/billing/services/invoices/operations",
        json!({ "operation_name": "refund", "operation_mode": "async",
                "handler_binding_kind": "start_workflow", "handler_target_reference": "Refund" }),
    );
    assert_eq!(status, 201);
    let (status, body) = s.delete_ns(
        "payments",
        "/api/service-endpoints/billing/services/invoices/operations/refund",
    );
    assert_eq!(
        (status, body["outcome"].as_str()),
        (200, Some("deleted")),
        "{body}"
    );
}

#[test]
fn an_operation_starts_its_workflow_and_a_completed_wait_answers_its_result() {
    let cache = memory_cache();
    let s = TestServer::start(cache, |_| {});
    s.namespace("payments");
    catalog(&s, "payments", Value::Null);
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            let mut body = call("default", Some("k-1"), "completed");
            body["target_workflow_instance_id"] = "charge-k1".into();
            execute(&s, "payments", body)
        });
        // A worker of the catalog's namespace runs the started workflow.
        let task = run_task(
            &s,
            "charge-k1",
            json!([{ "type": "complete_workflow", "result": { "codec": "avro", "blob": "ImNoYXJnZWQi" } }]),
        );
        assert_eq!(task["workflow_type"], "Charge");
        let (status, answer) = caller.join().unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["accepted"], true);
        assert_eq!(answer["status"], "completed");
        assert_eq!(answer["operation_mode"], "sync");
        assert_eq!(answer["caller_namespace"], "default");
        assert_eq!(answer["caller_workflow_instance_id"], "order-7");
        assert_eq!(answer["target_namespace"], "payments");
        assert_eq!(answer["result"]["blob"], "ImNoYXJnZWQi");
        assert_eq!(answer["idempotent_replay"], false);
        let workflow = answer["linked_workflow_instance_id"].as_str().unwrap();
        let (_, described) = s.get_ns("payments", &format!("/api/workflows/{workflow}"));
        assert_eq!(described["status"], "completed");
        assert_eq!(described["input_envelope"]["blob"], "WzQyXQ==");
        // The same key again: the same call, no second run.
        let (status, again) = execute(&s, "payments", call("default", Some("k-1"), "accepted"));
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["idempotent_replay"], true);
        assert_eq!(again["service_call_id"], answer["service_call_id"]);
        assert_eq!(
            again["linked_workflow_run_id"],
            answer["linked_workflow_run_id"]
        );
        assert_eq!(again["status"], "completed");
        let (_, runs) = s.get_ns("payments", &format!("/api/workflows/{workflow}/runs"));
        assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");
        // Another caller namespace with the same key is another call.
        s.namespace("tenant-b");
        let (_, other) = execute(&s, "payments", call("tenant-b", Some("k-1"), "accepted"));
        assert_ne!(other["service_call_id"], answer["service_call_id"]);
        assert_eq!(other["status"], "started");
        // The call can be read back.
        let (status, read) = s.get_ns(
            "payments",
            &format!(
                "{OPERATION}/service-calls/{}",
                answer["service_call_id"].as_str().unwrap()
            ),
        );
        assert_eq!(
            (status, &read["status"]),
            (200, &json!("completed")),
            "{read}"
        );
    });
    // A failed workflow is a failed call the SDK raises on.
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            let mut body = call("default", Some("k-2"), "completed");
            body["target_workflow_instance_id"] = "charge-k2".into();
            execute(&s, "payments", body)
        });
        run_task(
            &s,
            "charge-k2",
            json!([{ "type": "fail_workflow", "message": "card declined" }]),
        );
        let (status, answer) = caller.join().unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["status"], "failed");
        assert_eq!(answer["outcome"], "handler_failed");
        assert_eq!(answer["message"], "card declined");
    });
    // A wait that outlasts its timeout answers the started call.
    let (status, answer) = execute(&s, "payments", {
        let mut body = call("default", Some("k-3"), "completed");
        body["wait_timeout_seconds"] = 1.into();
        body
    });
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (
            answer["status"].as_str(),
            answer["wait_timed_out"].as_bool()
        ),
        (Some("started"), Some(true))
    );
    // Uncapped calls wrote no budget key.
    assert_eq!(s.keys(PREFIX), 0, "uncapped calls write no budget key");
    // Bad execute bodies are 422 with every problem named.
    let (status, body) = execute(
        &s,
        "payments",
        json!({ "wait_for": "soon", "mode_override": "later", "wait_timeout_seconds": -1,
                "arguments": 5 }),
    );
    assert_eq!(status, 422, "{body}");
    for field in [
        "wait_for",
        "mode_override",
        "wait_timeout_seconds",
        "arguments",
    ] {
        assert!(
            body["validation_errors"][field].is_array(),
            "{field}: {body}"
        );
    }
}

/// Polls the catalog namespace's queue until `workflow_id`'s task comes,
/// completing any other run's task on the way, and completes it with
/// `commands`; the task.
fn run_task(s: &TestServer, workflow_id: &str, commands: Value) -> Value {
    static POLLS: AtomicUsize = AtomicUsize::new(0);
    for _ in 0..100 {
        let poll_id = format!("poll-{}", POLLS.fetch_add(1, Ordering::Relaxed));
        let (_, polled) = s.poll("workflow", "payments", "payments", &poll_id, 500);
        let task = &polled["task"];
        if !task.is_object() {
            continue;
        }
        let ours = task["workflow_id"] == workflow_id;
        let finish = if ours {
            commands.clone()
        } else {
            json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "0" } }])
        };
        let (status, done) = s.complete(task, finish);
        assert_eq!(status, 200, "{done}");
        if ours {
            return task.clone();
        }
    }
    panic!("no workflow task of {workflow_id} arrived");
}

/// Starts a budget window with at least `margin` left in it, so a test
/// that counts calls never straddles two windows.
fn early_in_window(window: Duration, margin: Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into = Duration::from_millis(u64::try_from(now.as_millis() % window.as_millis()).unwrap());
    if window - into < margin {
        std::thread::sleep(window - into + Duration::from_millis(50));
    }
}

fn budgets_admit_exactly_their_limit_and_refuse_the_next_with_a_reason(
    backend: &'static str,
    cache: SharedCache,
) {
    const WINDOW: Duration = Duration::from_secs(600);
    let s = TestServer::start(cache.clone(), |c| {
        c.service_boundary = ServiceBoundaryBudgets {
            per_namespace: Some(5),
            per_boundary: Some(50),
            window: WINDOW,
        };
    });
    for ns in ["payments", "tenant-secret", "tenant-c"] {
        s.namespace(ns);
    }
    // The operation narrows the boundary budget to 3.
    catalog(
        &s,
        "payments",
        json!({ "rate_limit": { "requests_per_minute": 3 } }),
    );
    early_in_window(WINDOW, Duration::from_secs(30));
    for n in 0..3 {
        let (status, body) = execute(&s, "payments", call("tenant-secret", None, "accepted"));
        assert_eq!(status, 200, "[{backend}] call {n}: {body}");
    }
    let (status, body, retry_after) = s.post_ns_header(
        "payments",
        &format!("{OPERATION}/execute"),
        call("tenant-secret", None, "accepted"),
        "retry-after",
    );
    assert_eq!(status, 429, "[{backend}] {body}");
    assert_eq!(body["reason"], "service_call_rate_limited");
    assert_eq!(body["accepted"], false);
    assert_eq!(body["admission_scope"], "boundary");
    assert_eq!(body["requests_per_minute"], 3);
    assert_eq!(body["observed_window_count"], 4);
    assert_eq!(body["policy_name"], "server.shared-service-boundary");
    assert_eq!(body["caller_namespace"], "tenant-secret");
    let seconds: u64 = retry_after.unwrap().parse().unwrap();
    assert!((1..=600).contains(&seconds), "{seconds}");
    assert_eq!(body["retry_after_seconds"], seconds);
    // A replay of an earlier call spends nothing and is still answered.
    // (None of the calls above had a key; give one now on another caller.)
    let (status, first) = execute(&s, "payments", call("tenant-c", Some("once"), "accepted"));
    assert_eq!(status, 200, "{first}");
    for _ in 0..10 {
        let (status, again) = execute(&s, "payments", call("tenant-c", Some("once"), "accepted"));
        assert_eq!((status, &again["idempotent_replay"]), (200, &json!(true)));
    }
    // The caller's namespace budget (5, refusals included): the fifth
    // call still passes it (and meets the boundary's), the sixth does not.
    let (status, body) = execute(&s, "payments", call("tenant-secret", None, "accepted"));
    assert_eq!(
        (status, &body["admission_scope"]),
        (429, &json!("boundary")),
        "{body}"
    );
    let (status, body) = execute(&s, "payments", call("tenant-secret", None, "accepted"));
    assert_eq!(status, 429);
    assert_eq!(
        body["admission_scope"], "caller_namespace",
        "[{backend}] {body}"
    );
    assert_eq!(body["requests_per_minute"], 5);
    assert_eq!(
        body["config_key"],
        "server.service_boundary.max_requests_per_minute_per_namespace"
    );
    // Keys are hashed: the raw names never reach the cache.
    let ns_hash = hash_dimensions(&["tenant-secret"]);
    assert_eq!(
        s.keys(&format!("{PREFIX}namespace-rate:{ns_hash}:")),
        1,
        "[{backend}]"
    );
    for raw in ["tenant", "payments", "billing", "invoices", "charge"] {
        assert_eq!(s.keys(&format!("{PREFIX}namespace-rate:{raw}")), 0);
        assert_eq!(s.keys(&format!("{PREFIX}rate:{raw}")), 0);
    }
    // tenant-secret and tenant-c: one namespace and one boundary counter each.
    assert_eq!(s.keys(PREFIX), 4, "[{backend}]");
}
cache_variants!(budgets_admit_exactly_their_limit_and_refuse_the_next_with_a_reason);

/// A caller namespace made up per call used to get a fresh budget each
/// time (8 of 8 through a 3-a-minute budget): one that is not registered
/// is refused with 422 before any budget is counted or anything written.
#[test]
fn a_made_up_caller_namespace_is_refused_and_spends_no_budget() {
    let s = TestServer::start(memory_cache(), |_| {});
    s.namespace("payments");
    catalog(
        &s,
        "payments",
        json!({ "rate_limit": { "requests_per_minute": 3 } }),
    );
    let mut statuses = Vec::new();
    for n in 0..8 {
        let (status, body) = execute(
            &s,
            "payments",
            call(&format!("made-up-{n}"), None, "accepted"),
        );
        if status == 422 {
            assert!(
                body["validation_errors"]["caller_namespace"].is_array(),
                "{body}"
            );
        }
        statuses.push(status);
    }
    assert_eq!(statuses, vec![422; 8], "no made-up caller gets through");
    assert_eq!(s.keys(PREFIX), 0, "a refused call counts nothing");
    // A registered caller spends its own budget: 3 pass, the fourth waits.
    s.namespace("tenant-a");
    early_in_window(Duration::from_secs(60), Duration::from_secs(15));
    let answers: Vec<u16> = (0..4)
        .map(|_| execute(&s, "payments", call("tenant-a", None, "accepted")).0)
        .collect();
    assert_eq!(answers, [200, 200, 200, 429]);
}

/// `POST path` in `ns` with `Authorization: Bearer token`.
fn authed(s: &TestServer, token: &str, ns: &str, path: &str, body: Value) -> (u16, Value) {
    let result = ureq::post(&format!("{}{path}", s.base))
        .set("authorization", &format!("Bearer {token}"))
        .set("x-namespace", ns)
        .send_json(body);
    match result {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

/// With tokens the budget is the authenticated caller's. A client that
/// named a different registered caller namespace on each call used to get
/// 8 of 8 calls through a 3-a-minute budget; with one token it now gets 3
/// of 8. A token bound to a namespace calls only as that namespace (403
/// `caller_namespace_mismatch` otherwise, counting nothing), has a budget
/// of its own, and acts only in its namespaces on the other routes.
#[test]
fn the_service_call_budget_is_the_tokens_and_a_bound_token_calls_as_its_namespace() {
    use dwengine::server::auth::{Role, Tokens};
    let s = TestServer::start(memory_cache(), |c| {
        c.auth = Some(
            Tokens::new([
                ("adm".to_owned(), Role::Admin),
                ("any".to_owned(), Role::Operator),
            ])
            .with_bound("bound-a", Role::Operator, &["tenant-a"])
            .with_bound("bound-b", Role::Operator, &["tenant-b"]),
        );
    });
    let execute_as = |token: &str, body: Value| {
        authed(&s, token, "payments", &format!("{OPERATION}/execute"), body)
    };
    let callers: Vec<String> = (0..8).map(|n| format!("caller-{n}")).collect();
    for ns in ["payments", "tenant-a", "tenant-b"]
        .into_iter()
        .chain(callers.iter().map(String::as_str))
    {
        let (status, body) = authed(
            &s,
            "adm",
            "default",
            "/api/namespaces",
            json!({ "name": ns }),
        );
        assert_eq!(status, 201, "{body}");
    }
    catalog_with(
        |path, body| authed(&s, "adm", "payments", path, body),
        json!({ "rate_limit": { "requests_per_minute": 3 } }),
    );
    early_in_window(Duration::from_secs(60), Duration::from_secs(20));
    // One unbound token, a different registered caller namespace each call.
    let statuses: Vec<u16> = callers
        .iter()
        .map(|caller| execute_as("any", call(caller, None, "accepted")).0)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429, 429, 429]);
    // A bound token naming another namespace is refused before anything is
    // counted or written.
    for _ in 0..3 {
        let (status, body) = execute_as("bound-a", call("tenant-b", None, "accepted"));
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["reason"], "caller_namespace_mismatch");
        assert_eq!(body["token_namespaces"], json!(["tenant-a"]));
        assert_eq!(body["accepted"], false);
    }
    // Its own namespace, named or left out, spends its own whole budget.
    let mut own = call("tenant-a", None, "accepted");
    let answers: Vec<(u16, Value)> = (0..4)
        .map(|n| {
            if n % 2 == 1 {
                own.as_object_mut().unwrap().remove("caller_namespace");
            }
            execute_as("bound-a", own.clone())
        })
        .collect();
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, [200, 200, 200, 429], "{answers:?}");
    assert_eq!(answers[1].1["caller_namespace"], "tenant-a");
    // Another bound token has a budget of its own, and its calls are its
    // own: ids are sequential, so another tenant's is answered as absent.
    let (status, body) = execute_as("bound-b", call("tenant-b", None, "accepted"));
    assert_eq!(status, 200, "{body}");
    let described = |token: &str| {
        let path = format!(
            "{}{OPERATION}/service-calls/{}",
            s.base,
            body["service_call_id"].as_str().unwrap()
        );
        match ureq::get(&path)
            .set("authorization", &format!("Bearer {token}"))
            .set("x-namespace", "payments")
            .call()
        {
            Ok(r) => (r.status(), r.into_json::<Value>().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
            Err(e) => panic!("transport error: {e}"),
        }
    };
    assert_eq!(described("bound-b").0, 200);
    let (status, other) = described("bound-a");
    assert_eq!(
        (status, &other["reason"]),
        (404, &json!("service_call_not_found"))
    );
    assert_eq!(described("any").0, 200, "an unbound token reads any call");
    // Outside service calls a bound token acts only in its namespaces.
    let start = json!({ "workflow_id": "w", "workflow_type": "T", "task_queue": "q",
                        "input": { "codec": "json", "blob": "[]" } });
    let (status, body) = authed(&s, "bound-a", "tenant-b", "/api/workflows", start.clone());
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["reason"], "namespace_forbidden");
    let (status, body) = authed(&s, "bound-a", "tenant-a", "/api/workflows", start.clone());
    assert_eq!(status, 201, "{body}");
    let (status, body) = authed(&s, "any", "tenant-b", "/api/workflows", start);
    assert_eq!(status, 201, "an unbound token acts anywhere: {body}");
    // It lists and reads only its own namespaces.
    let get = |token: &str, path: &str| {
        let result = ureq::get(&format!("{}{path}", s.base))
            .set("authorization", &format!("Bearer {token}"))
            .call();
        match result {
            Ok(r) => (r.status(), r.into_json::<Value>().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
            Err(e) => panic!("transport error: {e}"),
        }
    };
    let (status, body) = get("bound-a", "/api/namespaces");
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(names, ["tenant-a"]);
    assert_eq!(get("bound-a", "/api/namespaces/tenant-a").0, 200);
    let (status, body) = get("bound-a", "/api/namespaces/tenant-b");
    assert_eq!(
        (status, &body["reason"]),
        (403, &json!("namespace_forbidden"))
    );
    let (_, body) = get("any", "/api/namespaces?page_size=100");
    assert!(body["namespaces"].as_array().unwrap().len() > 3, "{body}");
}

/// `return_existing_active` answers with an open run of the id only when
/// it is of the operation's workflow type; one of another type is a 409
/// naming it, never linked to the call.
#[test]
fn return_existing_active_links_only_a_run_of_the_bound_type() {
    let s = TestServer::start(memory_cache(), |_| {});
    s.namespace("payments");
    catalog(&s, "payments", Value::Null);
    let start = |workflow_id: &str, workflow_type: &str| {
        let (status, body) = s.post_ns(
            "payments",
            "/api/workflows",
            json!({ "workflow_id": workflow_id, "workflow_type": workflow_type,
                    "task_queue": "payments", "input": { "codec": "json", "blob": "[]" } }),
        );
        assert_eq!(status, 201, "{body}");
        body["run_id"].as_str().unwrap().to_owned()
    };
    let existing = |target: &str, key: &str| {
        let mut body = call("payments", Some(key), "accepted");
        body["target_workflow_instance_id"] = target.into();
        body["duplicate_start_policy"] = "return_existing_active".into();
        execute(&s, "payments", body)
    };
    let other = start("taken-by-other", "Unrelated");
    let (status, body) = existing("taken-by-other", "k-other");
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "instance_already_started");
    assert_eq!(
        (&body["run_id"], &body["workflow_type"]),
        (&json!(other), &json!("Unrelated"))
    );
    let same = start("taken-by-charge", "Charge");
    let (status, body) = existing("taken-by-charge", "k-same");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["linked_workflow_run_id"], same, "{body}");
}

#[test]
fn an_unavailable_budget_is_a_retryable_503_naming_its_reason() {
    use dwengine::service_boundary::BoundaryRefusal;
    // (The policy's own refusal on an unreachable cache is a unit test of
    // dwengine::service_boundary; this is its HTTP mapping.)
    let error = dwengine::server::ApiError::ServiceBoundary {
        refusal: BoundaryRefusal::Unavailable,
        details: json!({ "accepted": false, "caller_namespace": "a" }),
    };
    assert_eq!(error.status(), 503);
    assert_eq!(error.retry_after_seconds(), Some(1));
    let body = error.body();
    assert_eq!(body["reason"], "service_boundary_admission_unavailable");
    assert_eq!(body["retryable"], true);
    assert_eq!(body["accepted"], false);
    assert_eq!(body["caller_namespace"], "a");
}

/// Thousands of distinct caller namespaces, each calling three times into
/// its own boundary under a one-call boundary budget (so one call starts a
/// workflow and two are refused, and every call counts): the family holds
/// one namespace and one boundary counter per caller per window, never a
/// key per call, and drains once the two-window TTL has passed.
fn service_boundary_keys_stay_bounded_under_churn_and_drain_after_their_ttl(
    backend: &'static str,
    cache: SharedCache,
) {
    const CALLERS: usize = 2_000;
    const CALLS_EACH: usize = 3;
    const THREADS: usize = 8;
    const WINDOW: Duration = Duration::from_secs(4);
    let s = TestServer::start(cache.clone(), |c| {
        // 2,000 caller namespaces: past the default namespace cap.
        c.max_namespaces = 0;
        c.service_boundary = ServiceBoundaryBudgets {
            per_namespace: Some(1_000),
            per_boundary: Some(1),
            window: WINDOW,
        };
    });
    s.namespace("payments");
    catalog(&s, "payments", Value::Null);
    // A call's caller namespace must be registered (an admin's act).
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let s = &s;
            scope.spawn(move || {
                for i in (t..CALLERS).step_by(THREADS) {
                    s.namespace(&format!("caller-{i}"));
                }
            });
        }
    });
    let done = AtomicBool::new(false);
    let peak = AtomicUsize::new(0);
    let (admitted, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let began = Instant::now();
    let first_bucket = began_bucket(WINDOW);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if let Ok(n) = cache.count_family(PREFIX) {
                    peak.fetch_max(n, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _done = Done(&done);
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (s, admitted, refused) = (&s, &admitted, &refused);
                scope.spawn(move || {
                    for i in (t..CALLERS).step_by(THREADS) {
                        for _ in 0..CALLS_EACH {
                            let (status, body) = execute(
                                s,
                                "payments",
                                call(&format!("caller-{i}"), None, "accepted"),
                            );
                            match status {
                                200 => admitted.fetch_add(1, Ordering::Relaxed),
                                429 => refused.fetch_add(1, Ordering::Relaxed),
                                _ => panic!("{status}: {body}"),
                            };
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    let churned = began.elapsed();
    let windows = began_bucket(WINDOW) - first_bucket + 1;
    let peak = peak
        .load(Ordering::Relaxed)
        .max(cache.count_family(PREFIX).unwrap());
    let calls = CALLERS * CALLS_EACH;
    // Two counters per caller per window; a counter lives two windows,
    // so at most three windows' counters coexist.
    let bound = 2 * CALLERS * windows.min(3) as usize;
    eprintln!(
        "[{backend}] shared_service_boundary_admission: {calls} calls by {CALLERS} caller namespaces in {churned:?} ({windows} windows of {WINDOW:?}): {} admitted, {} refused; peak {peak} keys (bound {bound}, {} if keyed per call)",
        admitted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        2 * calls
    );
    assert!(peak <= bound, "[{backend}] peak {peak} > {bound}");
    assert!(
        peak < 2 * calls,
        "[{backend}] counters are per caller, not per call"
    );
    assert!(
        admitted.load(Ordering::Relaxed) >= CALLERS,
        "each caller's first call in a window passes"
    );
    let drain = Instant::now();
    assert!(
        eventually(WINDOW * 2 + Duration::from_secs(5), || cache
            .count_family(PREFIX)
            .is_ok_and(|n| n == 0)),
        "[{backend}] {} keys outlived the two-window TTL",
        cache.count_family(PREFIX).unwrap()
    );
    eprintln!(
        "[{backend}] shared_service_boundary_admission: final 0 keys, {:?} after the churn",
        drain.elapsed()
    );
}
cache_variants!(service_boundary_keys_stay_bounded_under_churn_and_drain_after_their_ttl);

fn began_bucket(window: Duration) -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / window.as_secs()
}

/// Service-call rows do not grow forever: the sweep's retention pass
/// deletes calls older than the retention, at most its scan limit a pass,
/// oldest first, and keeps a call whose run is still open.
#[test]
fn expired_service_calls_are_pruned_a_scan_limit_at_a_time_and_open_runs_keep_theirs() {
    let cache = memory_cache();
    let s = TestServer::start(cache, |c| {
        c.service_call_retention.service_call_prune_scan_limit = 2;
        // The background sweep stays out of the way; the test prunes explicitly.
        c.schedule_sweep.interval = Duration::from_secs(3600);
    });
    s.namespace("payments");
    catalog(&s, "payments", Value::Null);
    for n in 1..=4 {
        let mut body = call("default", Some(&format!("k{n}")), "accepted");
        body["target_workflow_instance_id"] = format!("charge-{n}").into();
        let (status, answer) = execute(&s, "payments", body);
        assert_eq!(status, 200, "{answer}");
    }
    for n in 1..=3 {
        let (status, body) = s.post_ns(
            "payments",
            &format!("/api/workflows/charge-{n}/terminate"),
            json!({ "reason": "done" }),
        );
        assert!(status < 300, "{body}");
    }
    let engine = s.running.engine();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert_eq!(
        engine.prune_service_calls(now).unwrap(),
        0,
        "nothing is old yet"
    );
    let later = now + dwengine::store::SERVICE_CALL_RETENTION_MS + 1;
    assert_eq!(
        engine.prune_service_calls(later).unwrap(),
        2,
        "the scan limit"
    );
    assert_eq!(engine.prune_service_calls(later).unwrap(), 1);
    assert_eq!(
        engine.prune_service_calls(later).unwrap(),
        0,
        "charge-4's run is open: its call stays"
    );
    let (status, again) = execute(&s, "payments", call("default", Some("k4"), "accepted"));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["idempotent_replay"], true, "{again}");
    let (status, body) = s.delete_ns("payments", OPERATION);
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("operation_has_service_calls"))
    );
    // Once its run closes, the last call goes and the operation can be deleted.
    let (status, body) = s.post_ns(
        "payments",
        "/api/workflows/charge-4/terminate",
        json!({ "reason": "done" }),
    );
    assert!(status < 300, "{body}");
    assert_eq!(engine.prune_service_calls(later).unwrap(), 1);
    let (status, body) = s.delete_ns("payments", OPERATION);
    assert_eq!(
        (status, body["outcome"].as_str()),
        (200, Some("deleted")),
        "{body}"
    );
}
