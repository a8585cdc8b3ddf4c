//! The control and worker planes over loopback HTTP, end to end.

mod support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwengine::readiness::ReadinessProbe;
use serde_json::json;
use support::TestServer;

fn server(tweak: impl FnOnce(&mut dwengine::server::ServerConfig)) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), tweak)
}

#[test]
fn cluster_info_publishes_limits_and_readiness_leaves_no_key() {
    let s = server(|_| {});
    let (status, info) = s.get("/api/cluster/info");
    assert_eq!(status, 200);
    assert_eq!(info["limits"]["max_payload_bytes"], 2 * 1024 * 1024);
    assert_eq!(info["limits"]["max_operation_name_length"], 256);
    assert_eq!(info["limits"]["max_pending_activities"], 2000);
    assert_eq!(info["server_id"], "test-node");
    for _ in 0..20 {
        let (status, ready) = s.get("/api/ready");
        assert_eq!((status, &ready["ready"]), (200, &json!(true)));
    }
    assert_eq!(s.keys(ReadinessProbe::PREFIX), 0);
    let (status, health) = s.get("/api/system/health");
    assert_eq!(status, 200);
    assert_eq!(
        health["capabilities"]["structural_limits"]["effective"]["pending_activity_count"],
        2000
    );
}

#[test]
fn a_workflow_runs_through_workflow_and_activity_tasks() {
    let s = server(|_| {});
    let (status, _) = s.post(
        "/api/worker/register",
        json!({"namespace": "ns", "worker_id": "w1", "task_queue": "orders"}),
    );
    assert_eq!(status, 200);
    s.start_workflow("ns", "order-1", "orders");

    let (_, first) = s.poll("workflow", "ns", "orders", "p1", 1000);
    let task = &first["task"];
    assert_eq!(task["workflow_id"], "order-1");
    assert_eq!(task["history"][0]["event_type"], "WorkflowStarted");
    let commands =
        json!([{"type": "schedule_activity", "activity_type": "charge", "arguments": [42]}]);
    let (status, done) = s.post(
        &format!("/api/worker/workflow-tasks/{}/complete", task["task_id"]),
        json!({ "commands": commands, "decision": "wait" }),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["activities_queued"], 1);

    let (_, activity) = s.poll("activity", "ns", "orders", "a1", 1000);
    let activity = &activity["task"];
    assert_eq!(activity["activity"]["activity_type"], "charge");
    let (status, _) = s.post(
        &format!(
            "/api/worker/activity-tasks/{}/complete",
            activity["task_id"]
        ),
        json!({ "result": "charged" }),
    );
    assert_eq!(status, 200);

    let (_, second) = s.poll("workflow", "ns", "orders", "p2", 1000);
    let task = &second["task"];
    assert!(task["history"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event_type"] == "ActivityCompleted"));
    let (status, _) = s.post(
        &format!("/api/worker/workflow-tasks/{}/complete", task["task_id"]),
        json!({ "commands": commands, "decision": "complete", "result": "ok" }),
    );
    assert_eq!(status, 200);
    let (_, described) = s.get("/api/namespaces/ns/workflows/order-1");
    assert_eq!(described["run"]["status"], "completed");
    let (status, again) = s.post(
        &format!("/api/worker/workflow-tasks/{}/complete", task["task_id"]),
        json!({ "decision": "wait" }),
    );
    assert_eq!((status, &again["reason"]), (409, &json!("conflict")));
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
    // The second workflow's task is still there for a different poll.
    let (_, other) = s.poll("workflow", "ns", "q", "other", 0);
    assert_ne!(other["task"]["task_id"], first["task"]["task_id"]);
    assert!(other["task"].is_object());
    let (_, empty) = s.poll("workflow", "ns", "q", "third", 0);
    assert!(empty["task"].is_null());
}

#[test]
fn boundary_and_structural_refusals_are_machine_readable() {
    let s = server(|c| {
        c.request_limits.max_payload_bytes = 4096;
        c.store.limits.pending_signal_count = 2;
    });
    let (status, body) = s.post(
        "/api/namespaces/ns/workflows",
        json!({ "workflow_id": "x".repeat(200), "workflow_type": "", "task_queue": "q" }),
    );
    assert_eq!(status, 422);
    assert_eq!(body["reason"], "validation_failed");
    assert!(body["validation_errors"]["workflow_id"].is_array());
    assert_eq!(
        body["validation_errors"]["workflow_type"][0],
        "The workflow_type field is required."
    );
    let (status, body) = s.poll("workflow", "ns", "q", "", 0);
    assert_eq!(status, 422);
    assert!(body["validation_errors"]["poll_request_id"].is_array());

    let big = format!(
        "{{\"workflow_id\":\"a\",\"input\":\"{}\"}}",
        "x".repeat(8000)
    );
    let (status, body) = s.post_raw("/api/namespaces/ns/workflows", big.as_bytes());
    assert_eq!(status, 413);
    assert_eq!(body["reason"], "payload_too_large");
    assert_eq!(body["limit"], 4096);

    let (status, body) = s.post(
        &format!("/api/namespaces/ns/workflows/a/signal/{}", "n".repeat(300)),
        json!({}),
    );
    assert_eq!(
        (status, &body["reason"]),
        (422, &json!("validation_failed"))
    );

    s.start_workflow("ns", "w", "q");
    for i in 0..2 {
        let (status, _) = s.post(
            "/api/namespaces/ns/workflows/w/signal/go",
            json!({ "input": i }),
        );
        assert_eq!(status, 200);
    }
    let (status, body) = s.post("/api/namespaces/ns/workflows/w/signal/go", json!({}));
    assert_eq!(status, 409);
    assert_eq!(body["reason"], "structural_limit_exceeded");
    assert_eq!(body["structural_limit_kind"], "pending_signal_count");
    assert_eq!(body["structural_limit_value"], 2);
    assert_eq!(body["structural_limit_configured"], 2);
    let (status, body) = s.post(
        "/api/namespaces/ns/workflows/w/update/approve",
        json!({ "request_id": "u1" }),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.post("/api/namespaces/ns/workflows/missing/signal/go", json!({}));
    assert_eq!((status, &body["reason"]), (404, &json!("not_found")));
}

#[test]
fn cancel_is_delivered_to_the_workflow_and_terminate_ends_the_run() {
    let s = server(|_| {});
    s.start_workflow("ns", "c", "q");
    let (status, _) = s.post(
        "/api/namespaces/ns/workflows/c/cancel",
        json!({ "reason": "user asked" }),
    );
    assert_eq!(status, 200);
    let (_, task) = s.poll("workflow", "ns", "q", "p", 0);
    assert_eq!(task["task"]["cancel_requested"], true);
    let (status, body) = s.post(
        "/api/namespaces/ns/workflows/c/terminate",
        json!({ "reason": "r".repeat(1001) }),
    );
    assert_eq!(
        (status, &body["reason"]),
        (422, &json!("validation_failed"))
    );
    let (status, _) = s.post(
        "/api/namespaces/ns/workflows/c/terminate",
        json!({ "reason": "stop" }),
    );
    assert_eq!(status, 200);
    let (_, described) = s.get("/api/namespaces/ns/workflows/c");
    assert_eq!(described["run"]["status"], "failed");
    assert_eq!(described["failures"][0]["failure_category"], "terminated");
    let (status, _) = s.post("/api/namespaces/ns/workflows/c/terminate", json!({}));
    assert_eq!(status, 409);
}

#[test]
fn a_long_poll_is_woken_by_new_work() {
    let s = server(|_| {});
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        let poller = scope.spawn(|| s.poll("workflow", "ns", "late", "lp", 10_000));
        std::thread::sleep(std::time::Duration::from_millis(300));
        s.start_workflow("ns", "late-1", "late");
        let (status, answer) = poller.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(answer["task"]["workflow_id"], "late-1");
    });
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn the_binary_refuses_to_start_without_a_server_id() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .env_remove("DW_SERVER_ID")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DW_SERVER_ID is required"));
}

#[test]
fn the_binary_keeps_its_store_in_the_data_directory_not_the_working_tree() {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    let work_tree = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .current_dir(work_tree.path())
        .env("DW_SERVER_ID", "node-data-dir")
        .env("DW_BIND", "127.0.0.1:0")
        .env("HOME", home.path())
        .env_remove("XDG_DATA_HOME")
        .env_remove("DW_DATA_DIR")
        .env_remove("DW_DATABASE_PATH")
        .env_remove("DW_REDIS_URL")
        .env("DW_POLLING_CACHE_PATH", home.path().join("polling"))
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
