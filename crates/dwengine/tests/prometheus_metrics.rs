//! `dw_workflow_runs_total` over loopback HTTP: the series cap, the honest
//! report beside it, and the namespace that never becomes a label.

mod support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::TestServer;

fn server(limit: u64) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.prometheus_workflow_series_limit = Some(limit);
    })
}

/// Starts one run per entry: (namespace, task queue, workflow type).
fn start_runs(s: &TestServer, runs: &[(&str, &str, &str)]) {
    for (i, (ns, queue, workflow_type)) in runs.iter().enumerate() {
        s.namespace(ns);
        let (status, body) = s.post_ns(
            ns,
            "/api/workflows",
            json!({ "workflow_id": format!("wf-{i}"), "workflow_type": workflow_type, "task_queue": queue }),
        );
        assert_eq!(status, 201, "{body}");
    }
}

/// A scrape: its sample lines and the report of its `# cardinality` comment.
fn scrape(s: &TestServer, ns: &str) -> (Vec<String>, Value, String) {
    let (status, content_type, text) =
        s.get_text(&format!("/api/system/prometheus-metrics?namespace={ns}"));
    assert_eq!(status, 200, "{text}");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let samples = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let report = text
        .lines()
        .find_map(|l| l.strip_prefix("# cardinality series_limits.workflows "))
        .map(|json| serde_json::from_str(json).expect("the report is JSON"))
        .unwrap_or_else(|| panic!("no cardinality comment in {text}"));
    (samples, report, text)
}

fn series(queue: &str, workflow_type: &str, runs: u64) -> String {
    format!(
        "dw_workflow_runs_total{{task_queue=\"{queue}\",workflow_type=\"{workflow_type}\"}} {runs}"
    )
}

#[test]
fn past_the_cap_exactly_limit_series_are_emitted_with_a_lower_bound_report() {
    let s = server(3);
    start_runs(
        &s,
        &[
            ("ns", "q2", "Order"),
            ("ns", "q1", "Refund"),
            ("ns", "q1", "Order"),
            ("ns", "q1", "Order"),
            ("ns", "q3", "Order"),
            ("ns", "q0", "Audit"),
            ("ns", "q9", "Order"),
            ("other", "aa", "Order"),
        ],
    );
    let (samples, report, text) = scrape(&s, "ns");
    // Ascending label sets; the busier q2/q3/q9 series are left out.
    assert_eq!(
        samples,
        [
            series("q0", "Audit", 1),
            series("q1", "Order", 2),
            series("q1", "Refund", 1),
        ]
    );
    // Discovery read limit + 1 = 4 of the 6 label sets: lower bounds, no run sum.
    assert_eq!(
        report,
        json!({ "limit": 3, "reported": 3, "observed": 4, "suppressed_series": 1, "lower_bound": true })
    );
    assert!(!text.contains("namespace"), "{text}");
    assert!(
        !text.contains("aa"),
        "another namespace's series leaked: {text}"
    );

    let (status, body) = s.get("/api/system/metrics?namespace=ns");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["namespace"], "ns");
    assert_eq!(body["cardinality"]["series_limits"]["workflows"], report);
    let disclosed = &body["cardinality"]["metrics"]["dw_workflow_runs_total"];
    assert_eq!(
        disclosed["namespace"],
        json!({ "cardinality": "request_scope_not_label" })
    );
    for label in ["task_queue", "workflow_type"] {
        assert_eq!(disclosed[label]["cardinality"], "bounded_series");
        assert_eq!(disclosed[label]["lower_bound"], true);
        assert_eq!(disclosed[label]["suppressed_series"], 1);
    }
}

#[test]
fn at_and_below_the_cap_counts_are_exact() {
    let s = server(3);
    start_runs(
        &s,
        &[
            ("full", "b", "Order"),
            ("full", "a", "Order"),
            ("full", "a", "Order"),
            ("full", "a", "Refund"),
            ("small", "x", "Order"),
        ],
    );
    // Exactly `limit` series: the probe row is absent, so nothing was hidden.
    let (samples, report, _) = scrape(&s, "full");
    assert_eq!(
        samples,
        [
            series("a", "Order", 2),
            series("a", "Refund", 1),
            series("b", "Order", 1)
        ]
    );
    assert_eq!(
        report,
        json!({ "limit": 3, "reported": 3, "observed": 3, "suppressed_series": 0, "lower_bound": false })
    );
    let (samples, report, _) = scrape(&s, "small");
    assert_eq!(samples, [series("x", "Order", 1)]);
    assert_eq!(
        (&report["observed"], &report["lower_bound"]),
        (&json!(1), &json!(false))
    );
    let (samples, report, text) = scrape(&s, "empty");
    assert!(samples.is_empty(), "{text}");
    assert!(text.contains("# TYPE dw_workflow_runs_total counter\n"));
    assert_eq!(report["observed"], 0);
}

#[test]
fn label_values_are_escaped() {
    let s = server(10);
    start_runs(&s, &[("ns", "q\"1", "Order\\Refund")]);
    let (samples, _, _) = scrape(&s, "ns");
    assert_eq!(
        samples,
        ["dw_workflow_runs_total{task_queue=\"q\\\"1\",workflow_type=\"Order\\\\Refund\"} 1"]
    );
}

#[test]
fn a_missing_namespace_is_a_validation_failure_on_both_surfaces() {
    let s = server(3);
    for path in ["/api/system/prometheus-metrics", "/api/system/metrics"] {
        for query in ["", "?namespace=", "?namespace=%20", "?other=1"] {
            let (status, body) = s.get(&format!("{path}{query}"));
            assert_eq!(
                (status, &body["reason"]),
                (422, &json!("validation_failed")),
                "{path}{query}: {body}"
            );
            assert_eq!(
                body["validation_errors"]["namespace"][0],
                "The namespace field is required."
            );
        }
        let long = "n".repeat(300);
        let (status, body) = s.get(&format!("{path}?namespace={long}"));
        assert_eq!(
            (status, &body["reason"]),
            (422, &json!("validation_failed"))
        );
        let (status, body) = s.get(&format!("{path}?namespace=a&namespace=b"));
        assert_eq!(
            (status, &body["reason"]),
            (400, &json!("malformed_request")),
            "{body}"
        );
    }
}

#[test]
fn the_default_cap_is_100() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |_| {});
    let (status, body) = s.get("/api/system/metrics?namespace=ns");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["cardinality"]["series_limits"]["workflows"]["limit"],
        100
    );
}
