//! The wire protocol over loopback HTTP, end to end: discovery, the gate
//! (namespace, versions, content type, auth), the control plane and the
//! worker plane with its fences.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwengine::readiness::ReadinessProbe;
use dwengine::server::auth::{Role, Tokens};
use serde_json::{json, Value};
use support::TestServer;

fn server(tweak: impl FnOnce(&mut dwengine::server::ServerConfig)) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), tweak)
}

fn envelope(json_text: &str) -> Value {
    json!({ "codec": "json", "blob": json_text })
}

#[test]
fn discovery_publishes_the_manifests_and_limits_and_probes_answer() {
    let s = server(|_| {});
    let (status, info) = s.get("/api/cluster/info");
    assert_eq!(status, 200);
    assert_eq!(info["limits"]["max_payload_bytes"], 2 * 1024 * 1024);
    assert_eq!(info["limits"]["max_pending_activities"], 2000);
    assert_eq!(info["server_id"], "test-node");
    assert_eq!(info["control_plane"]["version"], "2");
    assert_eq!(
        info["control_plane"]["request_contract"]["schema"],
        "durable-workflow.v2.control-plane-request.contract"
    );
    assert_eq!(
        info["control_plane"]["request_contract"]["operations"]["update"]["fields"]["wait_for"]
            ["canonical_values"],
        json!(["accepted", "completed"])
    );
    assert_eq!(info["worker_protocol"]["version"], "1.20");
    assert_eq!(
        info["worker_protocol"]["supported_versions"],
        json!(["1.19", "1.20"])
    );
    assert_eq!(
        info["worker_protocol"]["server_capabilities"]["query_tasks"],
        true
    );
    assert_eq!(
        info["auth_composition_contract"]["auth_material"]["mtls"]["status"],
        "reserved"
    );
    // Each check round-trips the cache and leaves no key behind (a stalled
    // PostgreSQL writer's transient 503 is asked again: `ready`).
    for _ in 0..20 {
        let ready = s.ready();
        assert_eq!(ready["checks"], json!({ "cache": "ok", "store": "ok" }));
    }
    assert_eq!(s.keys(ReadinessProbe::PREFIX), 0);
    let (status, health) = s.get("/api/health");
    assert_eq!((status, &health["status"]), (200, &json!("serving")));
    assert!(health["timestamp"].as_str().unwrap().ends_with('Z'));
    let (status, health) = s.get("/api/system/health");
    assert_eq!(status, 200);
    assert_eq!(
        health["capabilities"]["structural_limits"]["effective"]["pending_activity_count"],
        2000
    );
    // The seed's v2 health snapshot, key for key and value for value.
    let seed = json!({
        "structural_limits": {
            "pending_activity_count": 2000,
            "pending_child_count": 1000,
            "pending_timer_count": 2000,
            "pending_signal_count": 5000,
            "pending_update_count": 500,
            "command_batch_size": 1000,
            "payload_size_bytes": 2097152,
            "memo_size_bytes": 262144,
            "search_attribute_size_bytes": 40960,
            "history_transaction_size": 5000,
            "warning_threshold_percent": 80
        }
    });
    assert_eq!(
        health["structural_limits"], seed["structural_limits"],
        "{health}"
    );
    assert!(health.get("health").is_none(), "no extra nesting: {health}");
    let (status, operator) = s.get("/api/system/operator-metrics");
    assert_eq!(status, 200);
    assert_eq!(
        operator["structural_limits"], seed["structural_limits"],
        "operator metrics carry the same snapshot, not nested twice: {operator}"
    );
}

#[test]
fn a_workflow_runs_through_fenced_workflow_and_activity_tasks() {
    let s = server(|_| {});
    let (status, ack) = s.post(
        "/api/worker/register",
        json!({"worker_id": "w1", "task_queue": "orders", "runtime": "python",
               "supported_workflow_types": ["order"], "capability_manifest": {}}),
    );
    assert_eq!((status, &ack["registered"]), (200, &json!(true)));
    let started = s.start_workflow("default", "order-1", "orders");
    assert_eq!(started["status"], "running");
    assert!(started["run_id"].is_string());

    let (_, first) = s.poll("workflow", "default", "orders", "p1", 1000);
    let task = first["task"].clone();
    assert_eq!(task["workflow_id"], "order-1");
    assert_eq!(task["workflow_task_attempt"], 1);
    assert_eq!(task["history_events"][0]["event_type"], "WorkflowStarted");
    assert_eq!(task["history_events"][0]["id"], "1");
    assert_eq!(task["history_events"][0]["sequence"], 1);
    assert!(task["history_events"][0]["recorded_at"].is_string());
    assert_eq!(task["arguments"], envelope("[]"));

    // A worker that does not hold the lease is fenced out.
    let (status, body) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/complete",
            task["task_id"].as_str().unwrap()
        ),
        json!({ "lease_owner": "intruder", "workflow_task_attempt": 1, "commands": [] }),
    );
    assert_eq!(
        (status, &body["fence"]),
        (409, &json!("lease_owner_mismatch"))
    );

    let schedule = json!([{ "type": "schedule_activity", "activity_type": "charge",
        "arguments": envelope("[42]"),
        "retry_policy": { "max_attempts": 2, "backoff_seconds": [0] } }]);
    let (status, done) = s.complete(&task, schedule);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["new_events"], 1);

    // The first attempt fails and is retried; the second completes.
    let (_, attempt) = s.poll("activity", "default", "orders", "a1", 1000);
    let activity = attempt["task"].clone();
    assert_eq!(activity["activity_type"], "charge");
    assert_eq!(activity["attempt_number"], 1);
    assert_eq!(activity["arguments"], envelope("[42]"));
    let path = |t: &Value, what: &str| {
        format!(
            "/api/worker/activity-tasks/{}/{what}",
            t["task_id"].as_str().unwrap()
        )
    };
    let (status, failed) = s.post(
        &path(&activity, "fail"),
        json!({ "activity_attempt_id": activity["activity_attempt_id"], "lease_owner": "w1",
                "failure": { "message": "card declined", "type": "Declined" } }),
    );
    assert_eq!(
        (status, &failed["outcome"]),
        (200, &json!("retry_scheduled")),
        "{failed}"
    );
    let (_, attempt) = s.poll("activity", "default", "orders", "a2", 2000);
    let retry = attempt["task"].clone();
    assert_eq!(retry["attempt_number"], 2);
    let (status, stale) = s.post(
        &path(&retry, "complete"),
        json!({ "activity_attempt_id": activity["activity_attempt_id"], "lease_owner": "w1",
                "result": envelope("\"ok\"") }),
    );
    assert_eq!(
        (status, &stale["fence"]),
        (409, &json!("activity_attempt_mismatch"))
    );
    let (status, _) = s.post(
        &path(&retry, "complete"),
        json!({ "activity_attempt_id": retry["activity_attempt_id"], "lease_owner": "w1",
                "result": envelope("\"charged\"") }),
    );
    assert_eq!(status, 200);

    let (_, second) = s.poll("workflow", "default", "orders", "p2", 1000);
    let task = second["task"].clone();
    let events = task["history_events"].as_array().unwrap();
    let completed = events
        .iter()
        .find(|e| e["event_type"] == "ActivityCompleted")
        .expect("the activity's result is in history");
    assert_eq!(completed["payload"]["sequence"], 1);
    assert_eq!(completed["payload"]["result"], envelope("\"charged\""));
    let (status, _) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": envelope("\"done\"") }]),
    );
    assert_eq!(status, 200);
    let (_, described) = s.get("/api/workflows/order-1");
    assert_eq!(described["status"], "completed");
    assert_eq!(described["output_envelope"], envelope("\"done\""));
    let (status, again) = s.complete(&task, json!([]));
    assert_eq!(
        (status, &again["reason"]),
        (409, &json!("stale_task_lease"))
    );

    let (status, history) = s.get(&format!(
        "/api/workflows/order-1/runs/{}/history?page_size=2",
        started["run_id"].as_str().unwrap()
    ));
    assert_eq!(status, 200);
    assert_eq!(history["events"].as_array().unwrap().len(), 2);
    let token = history["next_page_token"].as_str().unwrap().to_owned();
    let (_, rest) = s.get(&format!(
        "/api/workflows/order-1/runs/{}/history?page_size=100&next_page_token={token}",
        started["run_id"].as_str().unwrap()
    ));
    assert_eq!(rest["events"][0]["id"], "3");
    assert!(rest["next_page_token"].is_null());
    let (status, body) = s.post("/api/workflows/order-1/terminate", json!({}));
    assert_eq!((status, &body["reason"]), (409, &json!("run_not_active")));
}

#[test]
fn a_repeated_poll_request_id_replays_and_never_leases_a_second_task() {
    let s = server(|_| {});
    s.start_workflow("ns", "a", "q");
    s.start_workflow("ns", "b", "q");
    let (_, first) = s.poll("workflow", "ns", "q", "same", 0);
    let (_, repeat) = s.poll("workflow", "ns", "q", "same", 0);
    assert_eq!(first["task"]["task_id"], repeat["task"]["task_id"]);
    assert_eq!(repeat["replayed"], true);
    let (_, other) = s.poll("workflow", "ns", "q", "other", 0);
    assert_ne!(other["task"]["task_id"], first["task"]["task_id"]);
    assert!(other["task"].is_object());
    let (_, empty) = s.poll("workflow", "ns", "q", "third", 0);
    assert!(empty["task"].is_null());
}

#[test]
fn duplicate_starts_conflict_unless_the_policy_returns_the_open_run() {
    let s = server(|_| {});
    let first = s.start_workflow("default", "dup", "q");
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "dup", "workflow_type": "Order", "task_queue": "q" }),
    );
    assert_eq!(
        (status, &body["reason"]),
        (409, &json!("instance_already_started"))
    );
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "dup", "workflow_type": "Order", "task_queue": "q",
                "duplicate_policy": "use-existing" }),
    );
    assert_eq!(status, 200);
    assert_eq!(body["run_id"], first["run_id"]);
    let (status, _) = s.post("/api/workflows/dup/terminate", json!({ "reason": "done" }));
    assert_eq!(status, 200);
    let (_, described) = s.get("/api/workflows/dup");
    assert_eq!(described["status"], "terminated");
    let again = s.start_workflow("default", "dup", "q");
    assert_ne!(
        again["run_id"], first["run_id"],
        "a closed id starts a new run"
    );
    let (_, runs) = s.get("/api/workflows/dup/runs");
    assert_eq!(runs["run_count"], 2);
    let (status, _) = s.post("/api/workflows/dup/cancel", json!({}));
    assert_eq!(status, 200);
    let (_, listed) = s.get("/api/workflows?status=cancelled");
    assert_eq!(listed["workflows"][0]["workflow_id"], "dup");
    let (_, listed) = s.get("/api/workflows?page_size=1");
    assert_eq!(listed["workflows"].as_array().unwrap().len(), 1);
    let token = listed["next_page_token"].as_str().unwrap().to_owned();
    let (_, next) = s.get(&format!(
        "/api/workflows?page_size=1&next_page_token={token}"
    ));
    assert_eq!(next["workflows"][0]["run_id"], first["run_id"]);
}

#[test]
fn boundary_and_structural_refusals_are_machine_readable() {
    let s = server(|c| {
        c.request_limits.max_payload_bytes = 4096;
        c.store.limits.pending_signal_count = 2;
    });
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "x".repeat(200), "workflow_type": "", "task_queue": "q",
                "execution_timeout_seconds": -5 }),
    );
    assert_eq!(status, 422);
    assert_eq!(body["reason"], "validation_failed");
    assert!(body["validation_errors"]["workflow_id"].is_array());
    assert!(body["validation_errors"]["execution_timeout_seconds"].is_array());
    assert_eq!(
        body["validation_errors"]["workflow_type"][0],
        "The workflow_type field is required."
    );
    let (status, body) = s.poll("workflow", "default", "q", "", 0);
    assert_eq!(status, 422);
    assert!(body["validation_errors"]["poll_request_id"].is_array());

    let big = format!(
        "{{\"workflow_id\":\"a\",\"input\":\"{}\"}}",
        "x".repeat(8000)
    );
    let (status, body) = s.post_raw("/api/workflows", big.as_bytes());
    assert_eq!(status, 413);
    assert_eq!(body["reason"], "payload_too_large");
    assert_eq!(body["limit"], 4096);

    let (status, body) = s.post(
        &format!("/api/workflows/a/signal/{}", "n".repeat(300)),
        json!({}),
    );
    assert_eq!(
        (status, &body["reason"]),
        (422, &json!("validation_failed"))
    );

    s.start_workflow("default", "w", "q");
    for i in 0..2 {
        let (status, _) = s.post(
            "/api/workflows/w/signal/go",
            json!({ "input": envelope(&i.to_string()) }),
        );
        assert_eq!(status, 202);
    }
    let (status, body) = s.post("/api/workflows/w/signal/go", json!({}));
    assert_eq!(status, 409);
    assert_eq!(body["reason"], "structural_limit_exceeded");
    assert_eq!(body["structural_limit_kind"], "pending_signal_count");
    assert_eq!(body["structural_limit_value"], 2);
    assert_eq!(body["structural_limit_configured"], 2);
    let (_, described) = s.get("/api/workflows/w");
    assert_eq!(
        described["status"], "running",
        "a refused signal leaves the run open"
    );
    let (status, body) = s.post(
        "/api/workflows/w/update/approve",
        json!({ "request_id": "u1" }),
    );
    assert_eq!(
        (status, &body["update_status"]),
        (200, &json!("accepted")),
        "{body}"
    );
    let (status, body) = s.post("/api/workflows/missing/signal/go", json!({}));
    assert_eq!(
        (status, &body["reason"]),
        (404, &json!("workflow_not_found"))
    );

    // Out-of-range command numbers are a 422 naming each field.
    let (_, task) = s.poll("workflow", "default", "q", "range", 0);
    let (status, body) = s.complete(
        &task["task"],
        json!([{ "type": "start_timer", "delay_seconds": -1 },
               { "type": "start_child_workflow", "workflow_type": "x", "run_timeout_seconds": 0 },
               { "type": "schedule_activity", "activity_type": "a", "start_to_close_timeout": 0 }]),
    );
    assert_eq!(status, 422, "{body}");
    let errors = &body["validation_errors"];
    assert!(errors["commands.0.delay_seconds"].is_array(), "{body}");
    assert!(
        errors["commands.1.run_timeout_seconds"].is_array(),
        "{body}"
    );
    assert!(
        errors["commands.2.start_to_close_timeout"].is_array(),
        "{body}"
    );
}

#[test]
fn a_fan_out_past_pending_activity_count_fails_the_run_visibly() {
    let s = server(|c| c.store.limits.pending_activity_count = 3);
    s.start_workflow("default", "fan", "q");
    let (_, task) = s.poll("workflow", "default", "q", "f", 0);
    let commands: Vec<_> = (0..5)
        .map(|i| json!({ "type": "schedule_activity", "activity_type": "a", "arguments": envelope(&i.to_string()) }))
        .collect();
    let (status, done) = s.complete(&task["task"], json!(commands));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["run_status"], "failed");
    assert_eq!(
        done["structural_limit"]["structural_limit_kind"],
        "pending_activity_count"
    );
    let (_, described) = s.get("/api/workflows/fan");
    assert_eq!(described["status"], "failed");
    assert_eq!(
        described["failures"][0]["failure_category"],
        "structural_limit"
    );
    assert_eq!(
        described["failures"][0]["structural_limit_kind"],
        "pending_activity_count"
    );
    assert_eq!(
        described["pending"]["activities"], 0,
        "the fan-out rolled back"
    );
    assert_eq!(described["failure"]["structural_limit_configured"], 3);
}

#[test]
fn the_gate_checks_namespace_versions_content_type_and_tokens() {
    let s = server(|c| {
        c.auth = Some(Tokens::new([
            ("wt".to_owned(), Role::Worker),
            ("ot".to_owned(), Role::Operator),
            ("at".to_owned(), Role::Admin),
        ]))
    });
    let call = |method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>| {
        let mut request = ureq::request(method, &format!("{}{path}", s.base));
        for (k, v) in headers {
            request = request.set(k, v);
        }
        let result = match body {
            Some(b) => request.send_string(b),
            None => request.call(),
        };
        match result {
            Ok(r) => (
                r.status(),
                r.header("x-durable-workflow-control-plane-version")
                    .map(str::to_owned),
                r.into_json::<Value>().unwrap_or(Value::Null),
            ),
            Err(ureq::Error::Status(code, r)) => {
                (code, None, r.into_json::<Value>().unwrap_or(Value::Null))
            }
            Err(e) => panic!("{e}"),
        }
    };
    let json_type = ("content-type", "application/json");
    assert_eq!(
        call("GET", "/api/health", &[], None).0,
        200,
        "probes need no token"
    );
    assert_eq!(call("GET", "/api/workflows", &[], None).0, 401);
    assert_eq!(
        call(
            "GET",
            "/api/workflows",
            &[("authorization", "Bearer nope")],
            None
        )
        .0,
        401
    );
    let (status, _, body) = call(
        "GET",
        "/api/workflows",
        &[("authorization", "Bearer wt")],
        None,
    );
    assert_eq!((status, &body["reason"]), (403, &json!("forbidden")));
    let (status, echoed, _) = call(
        "GET",
        "/api/workflows",
        &[("authorization", "Bearer ot")],
        None,
    );
    assert_eq!((status, echoed.as_deref()), (200, Some("2")));
    let (status, _, body) = call(
        "GET",
        "/api/workflows",
        &[
            ("authorization", "Bearer ot"),
            ("x-durable-workflow-control-plane-version", "1"),
        ],
        None,
    );
    assert_eq!((status, &body["supported_versions"]), (400, &json!(["2"])));
    let (status, _, body) = call(
        "POST",
        "/api/worker/heartbeat",
        &[
            ("authorization", "Bearer wt"),
            ("x-durable-workflow-protocol-version", "1.7"),
            json_type,
        ],
        Some("{}"),
    );
    assert_eq!(
        (status, &body["supported_versions"]),
        (400, &json!(["1.19", "1.20"]))
    );
    let (status, _, body) = call(
        "GET",
        "/api/workflows",
        &[("authorization", "Bearer ot"), ("x-namespace", "nowhere")],
        None,
    );
    assert_eq!(
        (status, &body["reason"]),
        (404, &json!("namespace_not_found"))
    );
    let (status, _, body) = call(
        "POST",
        "/api/workflows",
        &[
            ("authorization", "Bearer ot"),
            ("content-type", "text/plain"),
        ],
        Some("{}"),
    );
    assert_eq!(
        (status, &body["reason"]),
        (415, &json!("unsupported_media_type"))
    );
    let (status, _, _) = call(
        "POST",
        "/api/namespaces",
        &[("authorization", "Bearer ot"), json_type],
        Some(r#"{"name":"t"}"#),
    );
    assert_eq!(status, 403, "registering a namespace takes an admin token");
    let (status, _, _) = call(
        "POST",
        "/api/namespaces",
        &[("authorization", "Bearer at"), json_type],
        Some(r#"{"name":"t"}"#),
    );
    assert_eq!(status, 201);
    let (status, _, _) = call(
        "GET",
        "/api/workflows",
        &[("authorization", "Bearer ot"), ("x-namespace", "t")],
        None,
    );
    assert_eq!(status, 200);
    let (status, _, _) = call(
        "GET",
        "/api/cluster/info",
        &[("authorization", "Bearer wt")],
        None,
    );
    assert_eq!(status, 200, "discovery takes any role");
    let (status, _, body) = call(
        "GET",
        "/api/workflows",
        &[("authorization", "Bearer ot"), ("host", "evil.example")],
        None,
    );
    assert_eq!(
        (status, &body["reason"]),
        (200, &Value::Null),
        "no host list on a test config"
    );
}

#[test]
fn a_long_poll_is_woken_by_new_work() {
    let s = server(|_| {});
    s.namespace("ns");
    // A fresh server holds no wait slot, so the one awaited below is the
    // poll's (asked before the poll is sent: once it is, it may take its
    // slot at any moment).
    assert_eq!(s.wait_slot_files(), 0);
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        let poller = scope.spawn(|| s.poll("workflow", "ns", "late", "lp", 50_000));
        // The poll is waiting (it holds its wait slot) before the run starts.
        assert!(
            support::eventually(std::time::Duration::from_secs(30), || s.wait_slot_files()
                == 1),
            "the poll never waited"
        );
        s.start_workflow("ns", "late-1", "late");
        let (status, answer) = poller.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(answer["task"]["workflow_id"], "late-1");
    });
    // Woken: its 50 s wait began after `started`, so had it run out the
    // answer would have come 50 s after it or later. (The bound is the
    // wait's own length, not a guess at the machine's speed.)
    assert!(started.elapsed() < std::time::Duration::from_secs(50));
}

#[test]
fn the_binary_refuses_to_start_without_a_server_id_or_tokens() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .env_remove("DW_SERVER_ID")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DW_SERVER_ID is required"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .env("DW_SERVER_ID", "n")
        .env_remove("DW_AUTH")
        .env_remove("DW_AUTH_ADMIN_TOKENS")
        .env_remove("DW_AUTH_OPERATOR_TOKENS")
        .env_remove("DW_AUTH_WORKER_TOKENS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DW_AUTH_WORKER_TOKENS"));
}

#[test]
fn the_binary_keeps_its_store_in_the_data_directory_not_the_working_tree() {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    let work_tree = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .current_dir(work_tree.path())
        .env("DW_SERVER_ID", "node-data-dir")
        .env("DW_AUTH", "none")
        .env("DW_BIND", "127.0.0.1:0")
        .env("HOME", home.path())
        .env_remove("XDG_DATA_HOME")
        .env_remove("DW_DATA_DIR")
        .env_remove("DW_DATABASE_PATH")
        .env_remove("DW_REDIS_URL")
        .env("DW_POLLING_CACHE_PATH", home.path().join("polling"))
        // The start-up record would land in the test output; a warning
        // still shows.
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("listening on "), "{line:?}");
    assert!(home
        .path()
        .join(".local/share/dwserver/dwserver.sqlite")
        .is_file());
    let left: Vec<_> = std::fs::read_dir(work_tree.path()).unwrap().collect();
    assert!(left.is_empty(), "the working tree got {left:?}");
}

/// Starts in an uncapped namespace are checked on the HTTP thread and
/// await the writer there (`Engine::start_workflow_now`); a capped
/// namespace's admission touches the cache, so its starts take a blocking
/// thread. Both must answer every request alike: the same statuses,
/// reasons, problems and outcomes, the same idempotency.
#[test]
fn a_start_answers_alike_on_the_async_thread_and_on_a_blocking_one() {
    // A file store: its readers answer the registered attributes at once.
    let dir = tempfile::tempdir().unwrap();
    let s = server(|c| {
        c.database = Some(dir.path().join("runs.sqlite"));
        c.namespace_limits.insert(
            "capped".into(),
            dwengine::admission::NamespaceLimit {
                max_concurrent: 64,
                per_minute: 0,
            },
        );
    });
    let (fast, slow) = ("uncapped", "capped");
    for ns in [fast, slow] {
        s.namespace(ns);
        for (name, kind) in [("Region", "keyword"), ("Count", "int")] {
            let (status, body) = s.post_ns(
                ns,
                "/api/search-attributes",
                json!({ "name": name, "type": kind }),
            );
            assert_eq!(status, 201, "{body}");
        }
    }

    // The path each namespace takes (an in-memory cache, a SQLite file).
    let engine = s.running.engine().clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = |id: &str, search: Value| {
        serde_json::from_value::<dwengine::server::wire::StartWorkflow>(json!({
            "workflow_id": id, "workflow_type": "Order", "task_queue": "q",
            "search_attributes": search,
        }))
        .unwrap()
    };
    let status = |taken: Result<Result<(u16, dwengine::server::wire::StartAnswer), _>, _>| {
        taken
            .ok()
            .map(|answer| answer.map(|(status, _)| status).ok())
    };
    let taken = runtime.block_on(engine.start_workflow_now(fast, body("probe", json!({}))));
    assert_eq!(status(taken), Some(Some(201)));
    // Registered attributes are read on an idle reader (a read opened one).
    assert_eq!(s.get("/api/workflows").0, 200);
    // A background pass may hold the reader for a moment: then the start
    // declines the async path, unchanged, and is asked again.
    let probe = body("probe-2", json!({ "Region": "eu" }));
    let answer = on_async_thread(&runtime, probe, |probe| {
        let engine = engine.clone();
        async move { engine.start_workflow_now(fast, probe).await }
    });
    assert_eq!(answer.map(|(status, _)| status).ok(), Some(201));
    let taken = runtime.block_on(engine.start_workflow_now(slow, body("probe", json!({}))));
    assert!(
        taken.is_err(),
        "a capped namespace starts on a blocking thread"
    );

    let input = json!({ "codec": "json", "blob": "[]" });
    let requests = [
        json!({ "workflow_id": "a", "workflow_type": "Order", "task_queue": "q", "input": input }),
        // The same request id: the first attempt's run, 200.
        json!({ "workflow_id": "b", "workflow_type": "Order", "task_queue": "q",
                "request_id": "r-1" }),
        json!({ "workflow_id": "b", "workflow_type": "Order", "task_queue": "q",
                "request_id": "r-1" }),
        // An open run of the id: 409, or the open run with use-existing.
        json!({ "workflow_id": "a", "workflow_type": "Order", "task_queue": "q" }),
        json!({ "workflow_id": "a", "workflow_type": "Order", "task_queue": "q",
                "duplicate_policy": "use-existing" }),
        json!({ "workflow_id": "a", "workflow_type": "Other", "task_queue": "q",
                "duplicate_policy": "use-existing" }),
        // Registered attributes of the right type, a memo.
        json!({ "workflow_id": "c", "workflow_type": "Order", "task_queue": "q",
                "search_attributes": { "Region": "eu", "Count": 3 },
                "memo": { "note": "x" } }),
        // Refusals, every problem named.
        json!({ "workflow_id": "d", "workflow_type": "Order", "task_queue": "q",
                "search_attributes": { "Region": 5, "Missing": "x" } }),
        json!({ "workflow_id": "", "workflow_type": "", "task_queue": "q",
                "execution_timeout_seconds": -5, "priority": 12,
                "duplicate_policy": "maybe" }),
        json!({ "workflow_id": "e", "workflow_type": "Order", "task_queue": "q",
                "memo": { "note": "x".repeat(300 * 1024) } }),
    ];
    let answers = |ns: &str| {
        // Run ids differ between namespaces: each is named by the order
        // it first appears in its namespace's answers.
        let mut runs = std::collections::HashMap::<Value, usize>::new();
        requests
            .iter()
            .map(|request| {
                let (status, mut body) = s.post_ns(ns, "/api/workflows", request.clone());
                if let Some(run) = body.get("run_id").cloned() {
                    let next = runs.len();
                    let named = *runs.entry(run.clone()).or_insert(next);
                    body["run_id"] = json!(named);
                    let raw = run.as_str().map_or_else(|| run.to_string(), str::to_owned);
                    if let Some(Value::String(message)) = body.get_mut("message") {
                        *message = message.replace(&format!("({raw})"), &format!("(#{named})"));
                    }
                }
                if body.get("namespace").is_some() {
                    body["namespace"] = json!("ns");
                }
                let text = body
                    .to_string()
                    .replace(&format!("namespace {ns};"), "namespace ns;");
                (status, serde_json::from_str::<Value>(&text).unwrap())
            })
            .collect::<Vec<_>>()
    };
    let on_async = answers(fast);
    let on_blocking = answers(slow);
    let statuses: Vec<u16> = on_async.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, [201, 201, 200, 409, 200, 409, 201, 422, 422, 422]);
    for (i, (a, b)) in on_async.iter().zip(&on_blocking).enumerate() {
        assert_eq!(a, b, "request {i}: {}", requests[i]);
    }
}

/// Runs `call` on `body` until it takes the async path (`Ok`): a fast path
/// that reads on an idle reader declines (handing the body back) while a
/// background pass holds the reader.
fn on_async_thread<R, B, F: std::future::Future<Output = Result<R, B>>>(
    runtime: &tokio::runtime::Runtime,
    body: B,
    mut call: impl FnMut(B) -> F,
) -> R {
    let mut pending = Some(body);
    let mut taken = None;
    assert!(
        support::eventually(std::time::Duration::from_secs(30), || {
            match runtime.block_on(call(pending.take().unwrap())) {
                Ok(answer) => taken = Some(answer),
                Err(declined) => pending = Some(declined),
            }
            taken.is_some()
        }),
        "the async path never took the call"
    );
    taken.unwrap()
}

/// `answer` with each of `ids` (task, attempt, run and workflow ids of one
/// lane) named by its place in the list: a value that is the id, and the
/// id a message names as `task <id>`; a retry's due time as `<due>`.
fn named(answer: &(u16, Value), ids: &[String]) -> (u16, Value) {
    fn rename(value: &mut Value, ids: &[String]) {
        match value {
            Value::String(text) => {
                for (i, id) in ids.iter().enumerate() {
                    let name = format!("<id-{}>", char::from(b'a' + i as u8));
                    if text == id {
                        *text = name;
                        return;
                    }
                    *text = text.replace(&format!("task {id} "), &format!("task {name} "));
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| rename(v, ids)),
            Value::Object(map) => map.values_mut().for_each(|v| rename(v, ids)),
            _ => {}
        }
    }
    let (status, mut body) = answer.clone();
    rename(&mut body, ids);
    // A retry's due time is the report's clock plus the backoff.
    for key in ["next_attempt_at", "next_attempt_at_ms"] {
        if let Some(due) = body.get_mut(key) {
            assert!(!due.is_null(), "{key}");
            *due = json!("<due>");
        }
    }
    (status, body)
}

/// Workflow task completions and activity reports are checked on the HTTP
/// thread and await the writer there (`complete_workflow_task_now`,
/// `report_activity_now`) when nothing on the way can block, else on a
/// blocking thread: the same requests, one workflow through each path,
/// must get the same answers (fences, refusals, sticky claims, retries).
#[test]
fn worker_reports_answer_alike_on_the_async_thread_and_on_a_blocking_one() {
    use dwengine::server::wire::{ActivityReport, WorkflowTaskLease};
    let dir = tempfile::tempdir().unwrap();
    let s = server(|c| c.database = Some(dir.path().join("runs.sqlite")));
    let engine = s.running.engine().clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let lane = |fast: bool| {
        let name = if fast { "async" } else { "blocking" };
        let (wf, queue) = (format!("wf-{name}"), format!("q-{name}"));
        let started = s.start_workflow("default", &wf, &queue);
        // Run ids are left out: no answer names one, and a lane's run id may
        // equal its own task id.
        let mut ids = vec![wf.clone(), queue.clone()];
        let mut answers = Vec::new();
        let task = support::next_workflow_task(&s, &queue);
        let task_id = task["task_id"].as_str().unwrap().to_owned();
        ids.push(task_id.clone());
        let complete = |body: Value| -> (u16, Value) {
            let lease: WorkflowTaskLease = serde_json::from_value(body).unwrap();
            let answer = if fast {
                on_async_thread(&runtime, lease, |body| {
                    let (engine, id) = (engine.clone(), task_id.clone());
                    async move { engine.complete_workflow_task_now(&id, body).await }
                })
            } else {
                engine.complete_workflow_task(&task_id, lease)
            };
            match answer {
                Ok(value) => (200, value),
                Err(e) => (e.status(), e.body()),
            }
        };
        let sticky = |run: &Value| json!({ "worker_id": "w1", "workflow_id": wf, "run_id": run, "ttl_seconds": 10 });
        let lease = |commands: Value, claim: Value| {
            json!({ "lease_owner": task["lease_owner"], "commands": commands,
                    "workflow_task_attempt": task["workflow_task_attempt"],
                    "sticky_cache": claim })
        };
        let schedule = json!([{ "type": "schedule_activity", "activity_type": "charge",
            "task_queue": queue, "arguments": envelope("[42]"),
            "retry_policy": { "max_attempts": 2, "backoff_seconds": [0] } }]);
        answers.push(complete(
            json!({ "lease_owner": "intruder", "workflow_task_attempt": 1, "commands": [] }),
        ));
        answers.push(complete(lease(
            json!([{ "type": "no_such_command" }]),
            Value::Null,
        )));
        answers.push(complete(lease(schedule.clone(), sticky(&json!("999999")))));
        answers.push(complete(lease(
            schedule.clone(),
            sticky(&started["run_id"]),
        )));
        answers.push(complete(lease(json!([]), Value::Null)));

        let report = |activity: &Value,
                      attempt: &Value,
                      failed: bool,
                      result: Value|
         -> (u16, Value) {
            let body: ActivityReport = serde_json::from_value(json!({
                "activity_attempt_id": attempt, "lease_owner": "w1", "result": result,
                "failure": if failed { json!({ "message": "card declined", "type": "Declined" }) } else { Value::Null },
            }))
            .unwrap();
            let id = activity["task_id"].as_str().unwrap().to_owned();
            let answer = if fast {
                on_async_thread(&runtime, body, |body| {
                    let (engine, id) = (engine.clone(), id.clone());
                    async move { engine.report_activity_now(&id, failed, body).await }
                })
            } else {
                engine.report_activity(&id, failed, body)
            };
            match answer {
                Ok(value) => (200, value),
                Err(e) => (e.status(), e.body()),
            }
        };
        let (_, first) = s.poll("activity", "default", &queue, &format!("{name}-1"), 2000);
        let first = first["task"].clone();
        ids.push(first["task_id"].as_str().unwrap().to_owned());
        ids.push(first["activity_attempt_id"].as_str().unwrap().to_owned());
        answers.push(report(
            &first,
            &first["activity_attempt_id"],
            true,
            Value::Null,
        ));
        let (_, retry) = s.poll("activity", "default", &queue, &format!("{name}-2"), 2000);
        let retry = retry["task"].clone();
        ids.push(retry["task_id"].as_str().unwrap().to_owned());
        ids.push(retry["activity_attempt_id"].as_str().unwrap().to_owned());
        answers.push(report(
            &retry,
            &first["activity_attempt_id"],
            false,
            envelope("\"ok\""),
        ));
        answers.push(report(
            &retry,
            &retry["activity_attempt_id"],
            false,
            envelope("\"charged\""),
        ));
        answers.push(report(
            &retry,
            &retry["activity_attempt_id"],
            false,
            envelope("\"again\""),
        ));
        answers.iter().map(|a| named(a, &ids)).collect::<Vec<_>>()
    };
    let on_async = lane(true);
    let on_blocking = lane(false);
    let statuses: Vec<u16> = on_async.iter().map(|(status, _)| *status).collect();
    assert_eq!(
        statuses,
        [409, 422, 422, 200, 409, 200, 409, 200, 200],
        "{on_async:#?}"
    );
    assert_eq!(on_async[5].1["outcome"], "retry_scheduled");
    for (i, (a, b)) in on_async.iter().zip(&on_blocking).enumerate() {
        assert_eq!(a, b, "answer {i}");
    }
}

/// Uploads `data` to the external payload transport of `s` (namespace
/// `default`) and answers the `{codec, external_payload}` envelope that
/// names it.
fn stored_payload(s: &TestServer, data: &[u8]) -> Value {
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let response = ureq::post(&format!("{}/api/external-payloads/v1", s.base))
        .set("x-namespace", "default")
        .set("content-type", "application/octet-stream")
        .set("x-durable-workflow-payload-codec", "avro")
        .set("x-durable-workflow-payload-size", &data.len().to_string())
        .set("x-durable-workflow-payload-sha256", &sha)
        .send_bytes(data)
        .expect("the upload is stored");
    let body: Value = response.into_json().unwrap();
    json!({ "codec": "avro", "external_payload": body["reference"] })
}

/// A start or worker report with a step on its way that may block (a
/// capped namespace's admission, an external payload reference, message
/// stream cursors, search-attribute upserts, a service call's workflow
/// started with a memo) is handed back by its fast path, which names the
/// reason (`Engine::start_steps`, `completion_steps`, `report_steps`), and
/// answered by the ordinary path on a blocking thread.
#[test]
fn a_request_with_a_step_that_may_block_takes_the_blocking_path() {
    use dwengine::server::fast_paths::Blocking;
    use dwengine::server::wire::{ActivityReport, StartWorkflow, WorkflowTaskLease};
    use dwengine::store::WorkflowCommand;
    let dir = tempfile::tempdir().unwrap();
    let s = server(|c| {
        c.database = Some(dir.path().join("runs.sqlite"));
        c.external_payloads.threshold_bytes = 64;
        c.external_payloads.max_payload_bytes = 1024;
        c.namespace_limits.insert(
            "capped".into(),
            dwengine::admission::NamespaceLimit {
                max_concurrent: 64,
                per_minute: 0,
            },
        );
    });
    s.namespace("capped");
    let engine = s.running.engine().clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stored = stored_payload(&s, &[b'p'; 100]);

    // Starts.
    let start = |id: &str, input: &Value| {
        serde_json::from_value::<StartWorkflow>(json!({
            "workflow_id": id, "workflow_type": "Order", "task_queue": "q", "input": input,
        }))
        .unwrap()
    };
    let plain = start("plain", &envelope("[]"));
    assert_eq!(engine.start_steps("default", &plain).blocking(), None);
    let answer = runtime.block_on(engine.start_workflow_now("default", plain));
    assert_eq!(answer.ok().and_then(Result::ok).map(|a| a.0), Some(201));
    for (ns, id, input, why) in [
        (
            "capped",
            "capped",
            envelope("[]"),
            Blocking::CappedNamespace,
        ),
        (
            "default",
            "referencing",
            stored.clone(),
            Blocking::ExternalPayloads,
        ),
    ] {
        let body = start(id, &input);
        assert_eq!(engine.start_steps(ns, &body).blocking(), Some(why), "{id}");
        let handed_back = runtime
            .block_on(engine.start_workflow_now(ns, body))
            .expect_err("the start takes the blocking path");
        assert_eq!(handed_back.workflow_id, id);
        let (status, started) = engine.start_workflow(ns, handed_back).unwrap();
        assert_eq!(status, 201, "{id}: {started}");
    }

    // Workflow task completions.
    s.start_workflow("default", "reports", "q-reports");
    let task = support::next_workflow_task(&s, "q-reports");
    let task_id = task["task_id"].as_str().unwrap().to_owned();
    let lease = |commands: Value, extra: Value| {
        let mut body = json!({ "lease_owner": task["lease_owner"], "commands": commands,
                               "workflow_task_attempt": task["workflow_task_attempt"] });
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        serde_json::from_value::<WorkflowTaskLease>(body).unwrap()
    };
    let schedule = |arguments: &Value| {
        json!([{ "type": "schedule_activity", "activity_type": "charge",
                 "task_queue": "q-reports", "arguments": arguments }])
    };
    let service_call = json!([{ "type": "start_service_operation", "endpoint_name": "billing",
        "service_name": "invoices", "operation_name": "issue", "namespace": null,
        "idempotency_key": "order-7", "payload_codec": "json", "request_payload": "[42]",
        "memo": { "note": "x" } }]);
    let completions = [
        (
            lease(
                schedule(&envelope("[]")),
                json!({ "message_stream_cursors": [] }),
            ),
            Blocking::MessageStreams,
        ),
        (
            lease(
                json!([{ "type": "upsert_search_attributes", "attributes": { "Region": "eu" } }]),
                json!({}),
            ),
            Blocking::SearchAttributeUpserts,
        ),
        (lease(service_call, json!({})), Blocking::ServiceCallOptions),
        // The last one is completed the ordinary way.
        (
            lease(schedule(&stored), json!({})),
            Blocking::ExternalPayloads,
        ),
    ];
    let mut last = None;
    for (body, why) in completions {
        let commands: Vec<WorkflowCommand> =
            serde_json::from_value(Value::Array(body.commands.clone())).unwrap();
        assert_eq!(
            engine.completion_steps(&body, &commands).blocking(),
            Some(why)
        );
        let handed_back = runtime
            .block_on(engine.complete_workflow_task_now(&task_id, body))
            .expect_err("the completion takes the blocking path");
        last = Some(handed_back);
    }
    let done = engine
        .complete_workflow_task(&task_id, last.unwrap())
        .unwrap();
    assert_eq!(done["outcome"], "completed", "{done}");

    // An activity attempt's report.
    let (_, polled) = s.poll("activity", "default", "q-reports", "reports-1", 2000);
    let activity = polled["task"].clone();
    let report: ActivityReport = serde_json::from_value(json!({
        "activity_attempt_id": activity["activity_attempt_id"], "lease_owner": "w1",
        "result": stored,
    }))
    .unwrap();
    assert_eq!(
        engine.report_steps(&report).blocking(),
        Some(Blocking::ExternalPayloads)
    );
    let activity_id = activity["task_id"].as_str().unwrap().to_owned();
    let handed_back = runtime
        .block_on(engine.report_activity_now(&activity_id, false, report))
        .expect_err("the report takes the blocking path");
    let reported = engine
        .report_activity(&activity_id, false, handed_back)
        .unwrap();
    assert_eq!(reported["outcome"], "completed", "{reported}");
}
