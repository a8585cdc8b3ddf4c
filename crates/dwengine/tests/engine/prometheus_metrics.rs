//! The Prometheus scrape over loopback HTTP: the series caps, the honest
//! reports beside them, the namespace that never becomes a label, and churn
//! (thousands of queues, types or activity types) that never grows a scrape
//! past its caps.

use crate::support;

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
        .filter(|l| l.starts_with("dw_workflow_runs_total{"))
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

fn churn_server(limit: u64) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.prometheus_workflow_series_limit = Some(limit);
        c.prometheus_activity_series_limit = Some(limit);
        c.prometheus_task_queue_series_limit = Some(limit);
    })
}

fn envelope(json_text: &str) -> Value {
    json!({ "codec": "json", "blob": json_text })
}

/// The one workflow task waiting on `queue` of `ns`.
fn poll_workflow(s: &TestServer, ns: &str, queue: &str, poll_id: &str) -> Value {
    let (status, polled) = s.poll("workflow", ns, queue, poll_id, 2000);
    assert_eq!(status, 200, "{polled}");
    assert!(polled["task"].is_object(), "no task on {queue}: {polled}");
    polled["task"].clone()
}

/// Sample lines of `text` whose series name is exactly `name`.
fn lines_of<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    let open = format!("{name}{{");
    text.lines().filter(|l| l.starts_with(&open)).collect()
}

fn report_of(text: &str, key: &str) -> Value {
    let prefix = format!("# cardinality series_limits.{key} ");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {key} report in {text}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn a_closed_run_and_its_completed_activity_reach_counters_histograms_and_queue_state() {
    let s = churn_server(100);
    s.start_workflow("lat", "order-1", "orders");
    let task = poll_workflow(&s, "lat", "orders", "p1");
    let schedule = json!([{ "type": "schedule_activity", "activity_type": "charge",
        "queue": "payments", "arguments": envelope("[1]") }]);
    let (status, body) = s.complete(&task, schedule);
    assert_eq!(status, 200, "{body}");
    let (_, attempt) = s.poll("activity", "lat", "payments", "a1", 2000);
    let activity = attempt["task"].clone();
    let (status, body) = s.post_ns(
        "lat",
        &format!(
            "/api/worker/activity-tasks/{}/complete",
            activity["task_id"].as_str().unwrap()
        ),
        json!({ "activity_attempt_id": activity["activity_attempt_id"], "lease_owner": "w1",
                "result": envelope("\"ok\"") }),
    );
    assert_eq!(status, 200, "{body}");
    let task = poll_workflow(&s, "lat", "orders", "p2");
    let finish = json!([{ "type": "complete_workflow", "result": envelope("\"done\"") }]);
    let (status, body) = s.complete(&task, finish);
    assert_eq!(status, 200, "{body}");

    let (status, _, text) = s.get_text("/api/system/prometheus-metrics?namespace=lat");
    assert_eq!(status, 200, "{text}");
    let run = "task_queue=\"orders\",workflow_type=\"Order\"";
    assert_eq!(
        lines_of(&text, "dw_workflow_runs_total"),
        [format!("dw_workflow_runs_total{{{run}}} 1")]
    );
    let buckets = lines_of(&text, "dw_workflow_run_latency_seconds_bucket");
    assert_eq!(buckets.len(), 11, "{text}");
    assert_eq!(
        buckets[10],
        format!("dw_workflow_run_latency_seconds_bucket{{{run},le=\"+Inf\"}} 1")
    );
    // This run took well under 15 minutes: the widest finite bucket holds it.
    assert!(buckets[9].ends_with("le=\"900\"} 1"), "{}", buckets[9]);
    assert_eq!(
        lines_of(&text, "dw_workflow_run_latency_seconds_count"),
        [format!("dw_workflow_run_latency_seconds_count{{{run}}} 1")]
    );
    let execution = "task_queue=\"payments\",workflow_type=\"Order\",activity_type=\"charge\"";
    assert_eq!(
        lines_of(&text, "dw_activity_executions_total"),
        [format!("dw_activity_executions_total{{{execution}}} 1")]
    );
    assert_eq!(
        lines_of(&text, "dw_activity_execution_latency_seconds_count"),
        [format!(
            "dw_activity_execution_latency_seconds_count{{{execution}}} 1"
        )]
    );
    assert_eq!(
        lines_of(&text, "dw_activity_execution_latency_seconds_bucket").len(),
        11
    );
    // Both queues were busy this minute; neither holds a task now.
    let states = lines_of(&text, "dw_task_queue_runtime_state");
    assert_eq!(states.len(), 12, "{text}");
    for expected in [
        "dw_task_queue_runtime_state{task_queue=\"orders\",state=\"workflow_ready_tasks\"} 0",
        "dw_task_queue_runtime_state{task_queue=\"orders\",state=\"tasks_added_last_minute\"} 2",
        "dw_task_queue_runtime_state{task_queue=\"orders\",state=\"tasks_dispatched_last_minute\"} 2",
        "dw_task_queue_runtime_state{task_queue=\"payments\",state=\"activity_leased_tasks\"} 0",
        "dw_task_queue_runtime_state{task_queue=\"payments\",state=\"tasks_added_last_minute\"} 1",
    ] {
        assert!(states.contains(&expected), "{expected} not in {states:#?}");
    }

    let (status, body) = s.get("/api/system/metrics?namespace=lat");
    assert_eq!(status, 200, "{body}");
    let workflow = &body["series"]["workflows"][0];
    assert_eq!(
        (&workflow["completed_total"], &workflow["running"]),
        (&json!(1), &json!(0))
    );
    assert_eq!(workflow["latency_seconds"]["count"], 1);
    let activity = &body["series"]["activities"][0];
    assert_eq!(activity["completed_total"], 1);
    for metric in [
        "dw_workflow_run_latency_seconds",
        "dw_activity_executions_total",
        "dw_activity_execution_latency_seconds",
        "dw_task_queue_runtime_state",
    ] {
        let disclosed = &body["cardinality"]["metrics"][metric];
        assert_eq!(
            disclosed["namespace"]["cardinality"], "request_scope_not_label",
            "{metric}: {disclosed}"
        );
        assert_eq!(disclosed["task_queue"]["cardinality"], "bounded_series");
    }
    assert_eq!(
        body["cardinality"]["metrics"]["dw_task_queue_runtime_state"]["state"]["cardinality"],
        "finite_task_queue_states"
    );
}

#[test]
fn thousands_of_queues_and_activity_types_never_grow_a_scrape_past_its_caps() {
    let s = churn_server(10);
    s.namespace("churn");
    for i in 0..1_200 {
        let (status, body) = s.post_ns(
            "churn",
            "/api/workflows",
            json!({ "workflow_id": format!("wf-{i}"), "workflow_type": format!("Type{i}"),
                    "task_queue": format!("q{i:04}") }),
        );
        assert_eq!(status, 201, "{body}");
    }
    // One run fans out into 1,000 activities of 1,000 distinct types.
    let (status, body) = s.post_ns(
        "churn",
        "/api/workflows",
        json!({ "workflow_id": "fan", "workflow_type": "Fan", "task_queue": "fan" }),
    );
    assert_eq!(status, 201, "{body}");
    let task = poll_workflow(&s, "churn", "fan", "fan-1");
    let commands: Vec<Value> = (0..1_000)
        .map(|i| {
            json!({ "type": "schedule_activity", "activity_type": format!("act{i:04}"),
                         "arguments": envelope("[]") })
        })
        .collect();
    let (status, body) = s.complete(&task, Value::Array(commands));
    assert_eq!(status, 200, "{body}");

    let (status, _, text) = s.get_text("/api/system/prometheus-metrics?namespace=churn");
    assert_eq!(status, 200);
    let lower_bound = json!({ "limit": 10, "reported": 10, "observed": 11,
                              "suppressed_series": 1, "lower_bound": true });
    for key in ["workflows", "activities", "task_queues"] {
        assert_eq!(report_of(&text, key), lower_bound, "{key}");
    }
    assert_eq!(lines_of(&text, "dw_workflow_runs_total").len(), 10);
    assert_eq!(
        lines_of(&text, "dw_workflow_run_latency_seconds_bucket").len(),
        110
    );
    assert_eq!(lines_of(&text, "dw_activity_executions_total").len(), 10);
    assert_eq!(
        lines_of(&text, "dw_activity_execution_latency_seconds_count").len(),
        10
    );
    assert_eq!(lines_of(&text, "dw_task_queue_runtime_state").len(), 60);
    // Ascending label sets: the first ten of each inventory.
    assert!(text.contains("activity_type=\"act0009\"} 1\n"), "{text}");
    assert!(!text.contains("act0010"));
    assert!(text.contains(
        "dw_task_queue_runtime_state{task_queue=\"fan\",state=\"activity_ready_tasks\"} 1000\n"
    ));
    assert!(text.contains("task_queue=\"q0008\""));
    assert!(
        !text.contains("task_queue=\"q0009\""),
        "fan sorts before q…"
    );
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    // … plus the node's unlabelled dw_post_commit_failures_total and
    // dw_v1_projection_malformed_rows_total, and the server-wide
    // dw_schedule_lag_seconds.
    assert_eq!(samples, 10 + 110 + 20 + 10 + 110 + 20 + 60 + 3, "{text}");

    let (_, body) = s.get("/api/system/metrics?namespace=churn");
    for key in ["workflows", "activities", "task_queues"] {
        assert_eq!(body["cardinality"]["series_limits"][key], lower_bound);
        assert_eq!(body["series"][key].as_array().map(Vec::len), Some(10));
    }
}
