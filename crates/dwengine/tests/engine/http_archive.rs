//! Archive over loopback HTTP: closed runs only, `reason` at its
//! 1,000-character edge, idempotent, and archive-aware describe and list.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::TestServer;

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn listed(s: &TestServer, query: &str) -> Vec<String> {
    let (status, page) = s.get(&format!("/api/workflows{query}"));
    assert_eq!(status, 200, "{page}");
    page["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workflow_id"].as_str().unwrap().to_owned())
        .collect()
}

fn terminate(s: &TestServer, workflow_id: &str) {
    let (status, body) = s.post(
        &format!("/api/workflows/{workflow_id}/terminate"),
        json!({ "reason": "done" }),
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_closed_run_is_archived_with_its_reason_and_leaves_the_default_list() {
    let s = server();
    s.start_workflow("default", "keep", "q");
    s.start_workflow("default", "old", "q");
    let (status, open) = s.post("/api/workflows/old/archive", json!({ "reason": "x" }));
    assert_eq!(
        (status, &open["reason"]),
        (409, &json!("run_not_closed")),
        "{open}"
    );
    terminate(&s, "old");
    let reason = "r".repeat(1000);
    let (status, archived) = s.post("/api/workflows/old/archive", json!({ "reason": reason }));
    assert_eq!(status, 200, "{archived}");
    assert_eq!(archived["outcome"], "archived");
    assert_eq!(archived["reason"], Value::from(reason.clone()));
    let (_, described) = s.get("/api/workflows/old");
    assert_eq!(described["archived"], true);
    assert_eq!(described["archive_reason"], Value::from(reason.clone()));
    assert!(described["archived_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(s.get("/api/workflows/keep").1["archived"], false);

    assert_eq!(listed(&s, ""), ["keep"]);
    assert_eq!(listed(&s, "?archived=exclude"), ["keep"]);
    assert_eq!(listed(&s, "?archived=only"), ["old"]);
    assert_eq!(listed(&s, "?archived=include"), ["old", "keep"]);
    let (status, refused) = s.get("/api/workflows?archived=maybe");
    assert_eq!(
        (status, refused["validation_errors"]["archived"].is_array()),
        (422, true)
    );

    // Again: the first mark stays.
    let (status, again) = s.post("/api/workflows/old/archive", json!({ "reason": "later" }));
    assert_eq!(
        (status, &again["outcome"]),
        (200, &json!("already_archived"))
    );
    assert_eq!(again["reason"], Value::from(reason));
}

#[test]
fn a_reason_one_character_over_the_limit_archives_nothing() {
    let s = server();
    s.start_workflow("default", "wf", "q");
    terminate(&s, "wf");
    let (status, refused) = s.post(
        "/api/workflows/wf/archive",
        json!({ "reason": "é".repeat(1001) }),
    );
    assert_eq!(
        (status, &refused["reason"]),
        (422, &json!("validation_failed"))
    );
    assert!(
        refused["validation_errors"]["reason"].is_array(),
        "{refused}"
    );
    assert_eq!(s.get("/api/workflows/wf").1["archived"], false);
    // The run-targeted form, exactly at the limit, in characters.
    let run = s.get("/api/workflows/wf").1["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = s.post(
        &format!("/api/workflows/wf/runs/{run}/archive"),
        json!({ "reason": "é".repeat(1000) }),
    );
    assert_eq!(status, 200);
    let (status, _) = s.post("/api/workflows/nope/archive", json!({}));
    assert_eq!(status, 404);
}

#[test]
fn imported_projections_are_archived_and_one_that_never_ended_is_closed_by_it() {
    let s = server();
    let (status, _) = s.post(
        "/api/workflows/import",
        json!({ "workflow_id": "v1", "workflow_type": "T", "task_queue": "q",
                "terminal": { "status": "completed", "result": 1 } }),
    );
    assert_eq!(status, 201);
    let (status, archived) = s.post("/api/workflows/v1/archive", json!({}));
    assert_eq!(
        (status, &archived["outcome"]),
        (200, &json!("archived")),
        "{archived}"
    );
    assert_eq!(s.get("/api/workflows/v1").1["status"], "completed");

    let (status, imported) = s.post(
        "/api/workflows/import",
        json!({ "workflow_id": "v1-open", "workflow_type": "T", "task_queue": "q" }),
    );
    assert_eq!(status, 201);
    let run = imported["run_id"].as_str().unwrap().to_owned();
    let (status, archived) = s.post(
        "/api/workflows/v1-open/archive",
        json!({ "reason": "legacy, never finished" }),
    );
    assert_eq!(
        (status, &archived["outcome"]),
        (200, &json!("archived")),
        "{archived}"
    );
    let described = s.get("/api/workflows/v1-open").1;
    assert_eq!(described["status"], "terminated", "{described}");
    let history = s
        .get(&format!("/api/workflows/v1-open/runs/{run}/history"))
        .1;
    assert_eq!(history["total_events"], 2, "{history}");
    assert_eq!(history["events"][1]["event_type"], "WorkflowTerminated");
    assert_eq!(history["events"][1]["payload"]["closed_by"], "archive");
    assert_eq!(
        history["events"][1]["payload"]["reason"],
        "legacy, never finished"
    );
    // A retry converges on the first mark and appends nothing.
    let (status, again) = s.post("/api/workflows/v1-open/archive", json!({}));
    assert_eq!(
        (status, &again["outcome"]),
        (200, &json!("already_archived"))
    );
    let history = s
        .get(&format!("/api/workflows/v1-open/runs/{run}/history"))
        .1;
    assert_eq!(history["total_events"], 2);
    assert_eq!(listed(&s, "?archived=only"), ["v1-open", "v1"]);
    // The workflow id is free.
    let (status, started) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "v1-open", "workflow_type": "T", "task_queue": "q" }),
    );
    assert_eq!(status, 201, "{started}");
    // An open v2 run is still refused.
    let (status, refused) = s.post("/api/workflows/v1-open/archive", json!({}));
    assert_eq!(
        (status, &refused["reason"]),
        (409, &json!("run_not_closed"))
    );
}
