//! The status a run is described with: `running` while its code has a
//! workflow task ready or leased, `waiting` while it has none (it waits on
//! an activity, a timer, a signal, …), its terminal status once closed, and
//! beside it the coarse `status_bucket` (running, completed, failed) the
//! SDKs read. The Rust SDK's `sticky_execution` example drives its worker
//! until describe says `waiting`; a list filter takes stored statuses, so
//! `status=waiting` is refused with the filter to use.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn described(s: &TestServer, id: &str) -> (String, String) {
    let (status, body) = s.get(&format!("/api/workflows/{id}"));
    assert_eq!(status, 200, "{body}");
    let text = |field: &str| body[field].as_str().unwrap_or_default().to_owned();
    (text("status"), text("status_bucket"))
}

fn listed(s: &TestServer, filter: &str) -> Vec<Value> {
    let (status, body) = s.get(&format!("/api/workflows?status={filter}"));
    assert_eq!(status, 200, "{body}");
    body["workflows"].as_array().unwrap().clone()
}

#[test]
fn an_open_run_is_running_with_a_workflow_task_and_waiting_without_one() {
    let s = server();
    s.start_workflow("default", "st-wait", "q");
    // The first workflow task is ready: the run's code has work.
    assert_eq!(
        described(&s, "st-wait"),
        ("running".into(), "running".into())
    );
    let task = next_task(&s, "q");
    assert_eq!(
        described(&s, "st-wait"),
        ("running".into(), "running".into())
    );
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "open_signal_wait", "signal_name": "go" }]),
    );
    assert_eq!(status, 200, "{body}");
    // No task until the signal comes: the run waits.
    assert_eq!(
        described(&s, "st-wait"),
        ("waiting".into(), "running".into())
    );
    let run = &listed(&s, "running")[0];
    assert_eq!(
        (&run["status"], &run["status_bucket"]),
        (&json!("waiting"), &json!("running"))
    );
    let (status, body) = s.post(
        "/api/workflows/st-wait/signal/go",
        json!({ "input": { "codec": "json", "blob": "[]" } }),
    );
    assert!(status < 300, "{status} {body}");
    assert_eq!(
        described(&s, "st-wait"),
        ("running".into(), "running".into())
    );
    let task = next_task(&s, "q");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "1" } }]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        described(&s, "st-wait"),
        ("completed".into(), "completed".into())
    );
}

#[test]
fn closed_runs_fall_in_the_completed_or_failed_bucket() {
    let s = server();
    s.start_workflow("default", "st-cancel", "q");
    let (status, body) = s.post("/api/workflows/st-cancel/cancel", json!({}));
    assert!(status < 300, "{status} {body}");
    assert_eq!(
        described(&s, "st-cancel"),
        ("cancelled".into(), "failed".into())
    );
    s.start_workflow("default", "st-term", "q");
    let (status, body) = s.post("/api/workflows/st-term/terminate", json!({}));
    assert!(status < 300, "{status} {body}");
    assert_eq!(
        described(&s, "st-term"),
        ("terminated".into(), "failed".into())
    );
}

#[test]
fn a_list_filter_on_waiting_or_pending_names_the_filter_to_use() {
    let s = server();
    for filter in ["waiting", "pending"] {
        let (status, body) = s.get(&format!("/api/workflows?status={filter}"));
        assert_eq!(status, 422, "{body}");
        let problem = body["validation_errors"]["status"][0].as_str().unwrap();
        assert!(problem.contains("status=running"), "{problem}");
    }
    let (status, body) = s.get("/api/workflows?status=sleeping");
    assert_eq!(status, 422, "{body}");
}
