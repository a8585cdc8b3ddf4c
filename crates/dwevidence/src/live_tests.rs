//! Each live check on a hand-written scrape.

use serde_json::json;

use super::*;

const POLICY: &str = r#"
schema_version = 1
[sources]
metrics = ["src/**"]

[metrics.dw_workflow_runs_total]
owner = "src/lib.rs"
surface = "GET /api/system/prometheus-metrics"
dimensions = { namespace = "request_scope_not_label", task_queue = "bounded_series", workflow_type = "bounded_series" }
cardinality = "Limited by server.metrics.prometheus_workflow_series_limit, default 100, hard-clamped to 500."
selection = "First limit."
suppression = "Reported."

[metrics.dw_workflow_run_latency_seconds]
owner = "src/lib.rs"
surface = "GET /api/system/prometheus-metrics"
dimensions = { task_queue = "bounded_series", workflow_type = "bounded_series" }
cardinality = "Shares the workflow series."
selection = "Same."
suppression = "Same."

[metrics.dw_perf_requests_total]
owner = "src/lib.rs"
surface = "Perf harness /metrics"
dimensions = { status = "finite_http_status_buckets" }
cardinality = "Finite."
selection = "All."
suppression = "None needed."
"#;

const REPORT: &str = "# cardinality series_limits.workflows {\"limit\":2,\"reported\":2,\"observed\":2,\"suppressed_series\":0,\"lower_bound\":false}\n";

fn policy() -> Policy {
    Policy::from_toml_str(POLICY).unwrap()
}

fn disclosure(limit: u64) -> Value {
    let report = json!({"cardinality": "bounded_series", "limit": limit, "reported": 2, "observed": 2, "suppressed_series": 0, "lower_bound": false});
    json!({"namespace": "ns", "cardinality": {"metrics": {"dw_workflow_runs_total": {
        "namespace": {"cardinality": "request_scope_not_label"},
        "task_queue": report, "workflow_type": report,
    }}}})
}

fn scrape(text: &str, json: Option<Value>) -> Scrape {
    Scrape {
        url: "http://x/api/system/prometheus-metrics?namespace=ns".into(),
        exposition: parse_exposition(text),
        json: json.map(|j| ("http://x/api/system/metrics?namespace=ns".to_owned(), j)),
    }
}

fn codes(text: &str, json: Option<Value>) -> Vec<LiveCode> {
    check(&policy(), &[scrape(text, json)])
        .into_iter()
        .map(|f| f.code)
        .collect()
}

const CLEAN: &str = "dw_workflow_runs_total{task_queue=\"q\",workflow_type=\"A\"} 3\ndw_workflow_runs_total{task_queue=\"q\",workflow_type=\"B\"} 1\n";

#[test]
fn a_clean_scrape_has_no_findings() {
    assert_eq!(codes(&format!("{REPORT}{CLEAN}"), Some(disclosure(2))), []);
    let histogram = "dw_workflow_run_latency_seconds_bucket{task_queue=\"q\",workflow_type=\"A\",le=\"0.5\"} 1\n";
    assert_eq!(codes(&format!("{REPORT}{histogram}"), None), []);
    assert_eq!(
        codes(
            "dw_perf_requests_total{status=\"200\"} 4\nprocess_rss 1\n",
            None
        ),
        []
    );
}

#[test]
fn an_undeclared_metric_is_found_on_both_surfaces() {
    assert_eq!(
        codes("dw_mystery_total 1\n", None),
        [LiveCode::UndeclaredMetric]
    );
    let mut json = disclosure(2);
    json["cardinality"]["metrics"]["dw_other"] = json!({});
    let findings = check(
        &policy(),
        &[scrape(&format!("{REPORT}{CLEAN}"), Some(json))],
    );
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].code, LiveCode::UndeclaredMetric);
    assert!(findings[0].surface.contains("/api/system/metrics"));
}

#[test]
fn an_undeclared_label_is_found() {
    let text = "dw_perf_requests_total{status=\"200\",runner=\"r1\"} 4\n";
    let findings = check(&policy(), &[scrape(text, None)]);
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0].code, LiveCode::UndeclaredLabel);
    assert_eq!(findings[0].subject, "dw_perf_requests_total.runner");
    assert!(
        findings[0].message.contains("declared labels: status"),
        "{}",
        findings[0].message
    );
}

#[test]
fn a_request_scoped_dimension_as_a_label_is_found() {
    let text = format!("{REPORT}dw_workflow_runs_total{{namespace=\"ns\",task_queue=\"q\",workflow_type=\"A\"}} 1\n");
    assert_eq!(codes(&text, Some(disclosure(2))), [LiveCode::NotALabel]);
}

#[test]
fn series_over_the_reported_cap_are_found() {
    let third = "dw_workflow_runs_total{task_queue=\"q\",workflow_type=\"C\"} 1\n";
    assert_eq!(
        codes(&format!("{REPORT}{CLEAN}{third}"), Some(disclosure(2))),
        [LiveCode::SeriesOverCap]
    );
    // Without the JSON surface the text's own report is the cap.
    assert_eq!(
        codes(&format!("{REPORT}{CLEAN}{third}"), None),
        [LiveCode::SeriesOverCap]
    );
}

#[test]
fn a_cap_above_the_hard_clamp_is_found() {
    assert_eq!(
        codes(&format!("{REPORT}{CLEAN}"), Some(disclosure(501))),
        [LiveCode::SeriesOverCap]
    );
}

#[test]
fn a_missing_suppression_report_is_found_on_each_surface() {
    assert_eq!(
        codes(CLEAN, Some(disclosure(2))),
        [LiveCode::MissingSuppressionReport]
    );
    let mut json = disclosure(2);
    json["cardinality"]["metrics"]["dw_workflow_runs_total"]["task_queue"] =
        json!({"cardinality": "bounded_series"});
    assert_eq!(
        codes(&format!("{REPORT}{CLEAN}"), Some(json)),
        [LiveCode::MissingSuppressionReport]
    );
}

#[test]
fn query_values_are_encoded() {
    assert_eq!(encode("a b/ü"), "a%20b%2F%C3%BC");
}
