//! Prometheus metrics of workflow runs.
//!
//! `namespace` is request-scoped: the scrape is already per namespace, so it
//! never becomes a label. `task_queue` and `workflow_type` are labels whose
//! series set is capped by dwpolicy's series limiter; what the cap hides is
//! reported in the payload's cardinality block instead of silently dropped.
//! Before anything is rendered the label set is disclosed against the
//! embedded policy, so a policy that no longer declares these labels stops
//! the surface (fail closed) rather than letting it emit unreviewed series.

use std::fmt::Write;

use dwpolicy::series::{SeriesLimit, PROMETHEUS_WORKFLOW_SERIES};
use dwpolicy::{DisclosureError, MetricGuard, SeriesReport};
use serde_json::Value;

/// Renders `dw_workflow_runs_total` for one namespace's scrape.
#[derive(Debug, Clone)]
pub struct WorkflowRunMetrics {
    limit: SeriesLimit,
}

/// Run counts of one (task queue, workflow type) series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunSeries {
    /// The task queue label.
    pub task_queue: String,
    /// The workflow type label.
    pub workflow_type: String,
    /// Runs started.
    pub runs: u64,
}

/// A rendered scrape: exposition text and its cardinality disclosure.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedRuns {
    /// Prometheus text exposition.
    pub text: String,
    /// `{dimension: {cardinality, …series report}}` for the payload.
    pub cardinality: Value,
    /// The series counts behind the disclosure.
    pub report: SeriesReport,
}

impl WorkflowRunMetrics {
    /// The metric this type owns.
    pub const METRIC: &'static str = "dw_workflow_runs_total";

    /// Metrics with the configured series limit (default 100, clamped to 1..=500).
    pub fn new(configured_limit: Option<i64>) -> Self {
        WorkflowRunMetrics {
            limit: PROMETHEUS_WORKFLOW_SERIES.resolve(configured_limit),
        }
    }

    /// The series cap in force.
    pub fn limit(&self) -> usize {
        self.limit.get()
    }

    /// Renders the busiest series up to the cap (most runs first, ties by
    /// label set) and discloses the label set with its suppression counts.
    pub fn render(
        &self,
        guard: &MetricGuard,
        series: impl IntoIterator<Item = RunSeries>,
    ) -> Result<RenderedRuns, DisclosureError> {
        let mut limiter = self.limit.limiter();
        for s in series {
            limiter.admit((s.task_queue, s.workflow_type), s.runs);
        }
        let selection = limiter.finish();
        let report = selection.report;
        let disclosure = guard.disclose(
            Self::METRIC,
            [("task_queue", report), ("workflow_type", report)],
        )?;
        let cardinality = serde_json::to_value(&disclosure).unwrap_or(Value::Null);
        let mut text = String::from("# TYPE dw_workflow_runs_total counter\n");
        for ((task_queue, workflow_type), runs) in &selection.series {
            let _ = writeln!(
                text,
                "dw_workflow_runs_total{{task_queue=\"{}\",workflow_type=\"{}\"}} {runs}",
                escape(task_queue),
                escape(workflow_type),
            );
        }
        Ok(RenderedRuns {
            text,
            cardinality,
            report,
        })
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> MetricGuard {
        MetricGuard::new(crate::policy::embedded().expect("embedded policy validates"))
    }

    fn series(n: u64) -> Vec<RunSeries> {
        (0..n)
            .map(|i| RunSeries {
                task_queue: format!("q{i:03}"),
                workflow_type: "Order\"s".into(),
                runs: i + 1,
            })
            .collect()
    }

    #[test]
    fn series_beyond_the_cap_are_counted_not_emitted() {
        let rendered = WorkflowRunMetrics::new(Some(3))
            .render(&guard(), series(10))
            .unwrap();
        assert_eq!(rendered.text.matches("dw_workflow_runs_total{").count(), 3);
        assert!(rendered
            .text
            .contains("task_queue=\"q009\",workflow_type=\"Order\\\"s\"} 10"));
        assert_eq!(rendered.report.suppressed_series, 7);
        assert_eq!(
            rendered.report.suppressed_value,
            Some(1 + 2 + 3 + 4 + 5 + 6 + 7)
        );
        let block = &rendered.cardinality;
        assert_eq!(block["namespace"]["cardinality"], "request_scope_not_label");
        assert_eq!(block["task_queue"]["cardinality"], "bounded_series");
        assert_eq!(block["task_queue"]["suppressed_series"], 7);
    }

    #[test]
    fn the_cap_is_clamped() {
        assert_eq!(WorkflowRunMetrics::new(Some(10_000)).limit(), 500);
        assert_eq!(WorkflowRunMetrics::new(Some(0)).limit(), 1);
        assert_eq!(WorkflowRunMetrics::new(None).limit(), 100);
    }

    #[test]
    fn an_undeclared_label_set_fails_closed() {
        let policy = "schema_version = 1\n";
        let guard = MetricGuard::from_toml_str(policy).unwrap();
        let err = WorkflowRunMetrics::new(None)
            .render(&guard, series(1))
            .unwrap_err();
        assert!(
            matches!(err, DisclosureError::UndeclaredMetric { .. }),
            "{err}"
        );
    }
}
