//! `dw_workflow_task_consecutive_failures` over loopback HTTP: thousands of
//! failing workflow types churn through the metric, at most the cap of them
//! are reported, and every other type and its failing tasks are counted as
//! suppressed in the payload.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::{wire, TestServer};

fn server(limit: Option<u64>) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.workflow_task_failure_type_limit = limit;
    })
}

/// Each workflow on its own task queue, so a poll leases exactly its task
/// and never another workflow's retry that came due meanwhile.
fn queue_of(workflow_id: &str) -> String {
    format!("q-{workflow_id}")
}

/// Starts `workflow_id` of `workflow_type`, leases its first workflow task
/// and fails it over HTTP.
fn start_and_fail(s: &TestServer, workflow_id: &str, workflow_type: &str) {
    let queue = queue_of(workflow_id);
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": workflow_id, "workflow_type": workflow_type, "task_queue": queue,
                "input": { "codec": "json", "blob": "[]" } }),
    );
    assert_eq!(status, 201, "{body}");
    let (status, polled) = s.poll(
        "workflow",
        "default",
        &queue,
        &format!("p-{workflow_id}"),
        2000,
    );
    assert_eq!(status, 200, "{polled}");
    let task = wire::polled_task(&polled)
        .unwrap_or_else(|| panic!("no task for {workflow_id}: {polled}"))
        .clone();
    assert_eq!(task["workflow_id"], workflow_id);
    let (status, body) = s.send(&wire::fail_workflow(&task));
    assert_eq!(status, 200, "{body}");
}

fn failure_metric(s: &TestServer) -> Value {
    let (status, body) = s.get("/api/system/metrics?namespace=default");
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn thousands_of_failing_types_report_at_most_the_cap_and_count_the_rest() {
    let s = server(None);
    // Two hot types with more failing tasks than any other: they must win.
    for i in 0..3 {
        start_and_fail(&s, &format!("hot-a-{i}"), "HotA");
    }
    for i in 0..2 {
        start_and_fail(&s, &format!("hot-b-{i}"), "HotB");
    }
    const CHURN: usize = 2_000;
    for i in 0..CHURN {
        start_and_fail(&s, &format!("churn-{i}"), &format!("Churn{i:05}"));
    }
    let body = failure_metric(&s);
    let metric = &body["metrics"]["dw_workflow_task_consecutive_failures"];
    let series = metric["series"].as_array().expect("series");
    assert_eq!(series.len(), 20, "the default cap: {metric}");
    assert_eq!(
        series[0],
        json!({ "workflow_type": "HotA", "failing_tasks": 3, "consecutive_failures": 1 })
    );
    assert_eq!(series[1]["workflow_type"], "HotB");
    // Ties (one failing task each) are broken by workflow type, ascending.
    assert_eq!(series[2]["workflow_type"], "Churn00000");
    assert_eq!(series[19]["workflow_type"], "Churn00017");
    assert_eq!(metric["suppressed_workflow_types"], CHURN - 18);
    assert_eq!(metric["suppressed_failing_tasks"], CHURN - 18);
    let report = &body["cardinality"]["series_limits"]["workflow_task_failures"];
    assert_eq!(report["limit"], 20);
    assert_eq!(report["reported"], 20);
    assert_eq!(report["observed"], CHURN + 2);
    assert_eq!(report["lower_bound"], false);
    let disclosed = &body["cardinality"]["metrics"]["dw_workflow_task_consecutive_failures"];
    assert_eq!(
        disclosed["workflow_type"]["cardinality"], "bounded_failure_types",
        "{disclosed}"
    );
    assert_eq!(
        disclosed["namespace"]["cardinality"], "request_scope_not_label",
        "{disclosed}"
    );
    assert!(
        series.iter().all(|s| s.get("namespace").is_none()),
        "namespace is request-scoped, never a label"
    );
}

#[test]
fn a_configured_cap_is_clamped_to_100_and_a_success_ends_the_failures() {
    let s = server(Some(5_000));
    for i in 0..3 {
        start_and_fail(&s, &format!("w{i}"), &format!("T{i}"));
    }
    let body = failure_metric(&s);
    let report = &body["cardinality"]["series_limits"]["workflow_task_failures"];
    assert_eq!(report["limit"], 100);
    assert_eq!(report["reported"], 3);
    assert_eq!(
        body["metrics"]["dw_workflow_task_consecutive_failures"]["suppressed_workflow_types"],
        0
    );

    // The retry of T0's task succeeds (after its one-second backoff): T0 is
    // no longer failing.
    let task = (0..20)
        .find_map(|i| {
            let (_, polled) = s.poll(
                "workflow",
                "default",
                &queue_of("w0"),
                &format!("r{i}"),
                1000,
            );
            wire::polled_task(&polled).cloned()
        })
        .expect("the retry comes back");
    assert_eq!(task["workflow_id"], "w0");
    let (status, body) = s.send(&wire::complete_workflow(&task, true));
    assert_eq!(status, 200, "{body}");
    let body = failure_metric(&s);
    let series = body["metrics"]["dw_workflow_task_consecutive_failures"]["series"]
        .as_array()
        .unwrap()
        .clone();
    let types: Vec<&str> = series
        .iter()
        .map(|s| s["workflow_type"].as_str().unwrap())
        .collect();
    assert!(!types.contains(&"T0"), "{types:?}");
    assert!(types.contains(&"T1") && types.contains(&"T2"), "{types:?}");
}
