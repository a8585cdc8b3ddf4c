//! A metric surface's cardinality block: a fail-closed disclosure carrying series-cap reports.

use dwpolicy::series::{PROMETHEUS_WORKFLOW_SERIES, WORKFLOW_TASK_FAILURE_TYPES};
use dwpolicy::{DisclosureError, MetricGuard};

const POLICY: &str = r#"
schema_version = 1

[metrics.dw_workflow_task_consecutive_failures]
owner = "dwengine::metrics::WorkflowTaskFailureMetrics"
surface = "GET /api/system/metrics"
dimensions = { namespace = "request_scope_not_label", workflow_type = "bounded_failure_types" }
cardinality = "workflow_type series are limited by server.metrics.workflow_task_failure_type_limit."
selection = "Largest failure counts first, then workflow type ascending."
suppression = "Suppressed type and task counts are reported in the payload."

[metrics.dw_workflow_runs_total]
owner = "dwengine::metrics::WorkflowRunMetrics"
surface = "GET /api/system/prometheus-metrics"
dimensions = { namespace = "request_scope_not_label", task_queue = "bounded_series", workflow_type = "bounded_series" }
cardinality = "Limited by server.metrics.prometheus_workflow_series_limit, hard-clamped to 500."
selection = "Label sets in ascending order; discovery reads at most limit + 1."
suppression = "cardinality.series_limits.workflows reports exact counts, then lower bounds."
"#;

#[test]
fn payload_cardinality_block_merges_series_reports() {
    let guard = MetricGuard::from_toml_str(POLICY).unwrap();

    let mut failures = WORKFLOW_TASK_FAILURE_TYPES.resolve(Some(2)).limiter();
    for (workflow_type, count) in [("Billing", 4), ("Import", 9), ("Export", 1), ("Audit", 4)] {
        failures.admit(workflow_type, count);
    }
    let failures = failures.finish();
    assert_eq!(failures.series, [("Import", 9), ("Audit", 4)]);

    let runs = PROMETHEUS_WORKFLOW_SERIES.resolve(Some(2)).discover([
        ("default", "Import"),
        ("default", "Billing"),
        ("bulk", "Import"),
    ]);
    assert_eq!(runs.series, [("bulk", "Import"), ("default", "Billing")]);

    #[derive(serde::Serialize)]
    struct Block<'a> {
        dw_workflow_task_consecutive_failures: dwpolicy::Disclosure<'a, dwpolicy::SeriesReport>,
        dw_workflow_runs_total: dwpolicy::Disclosure<'a, dwpolicy::SeriesReport>,
    }
    let block = Block {
        dw_workflow_task_consecutive_failures: guard
            .disclose(
                "dw_workflow_task_consecutive_failures",
                [("workflow_type", failures.report)],
            )
            .unwrap(),
        dw_workflow_runs_total: guard
            .disclose(
                "dw_workflow_runs_total",
                [("task_queue", runs.report), ("workflow_type", runs.report)],
            )
            .unwrap(),
    };
    insta::assert_json_snapshot!("cardinality_block", block);
}

#[test]
fn a_new_label_cannot_reach_the_payload() {
    let guard = MetricGuard::from_toml_str(POLICY).unwrap();
    let report = PROMETHEUS_WORKFLOW_SERIES
        .default_limit()
        .discover([1, 2])
        .report;
    let error = guard
        .disclose(
            "dw_workflow_runs_total",
            [("workflow_type", report), ("build_id", report)],
        )
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "metric `dw_workflow_runs_total` does not declare dimension(s) build_id; declared: namespace, task_queue, workflow_type"
    );
    assert!(matches!(
        guard.disclose("dw_activity_executions_total", [("task_queue", report)]),
        Err(DisclosureError::UndeclaredMetric { .. })
    ));
}

#[test]
fn an_unreviewed_policy_is_refused_at_load() {
    let text = POLICY.replace("bounded_failure_types", "whatever");
    assert!(MetricGuard::from_toml_str(&text).is_err());
}
