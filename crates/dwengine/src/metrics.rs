//! Prometheus metrics of workflow runs.
//!
//! `namespace` is request-scoped: the scrape is already per namespace, so it
//! never becomes a label. `task_queue` and `workflow_type` are labels users
//! control, so a scrape discovers their series through dwpolicy's
//! [`SeriesLimit::discover`]: it reads at most `limit + 1` label sets in
//! ascending order and keeps the first `limit`. Reading one past the cap is
//! what makes the report honest: within the cap its counts are exact; past
//! it they are lower bounds (`lower_bound: true`) and no suppressed run sum
//! is claimed, because the suppressed series were never read.
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
///
/// The text opens with a `# cardinality series_limits.workflows {…}`
/// comment carrying [`report`](Self::report) as JSON, so a scrape alone
/// shows what the cap hid; Prometheus ignores such comments.
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

    /// The key of this surface's report under `cardinality.series_limits`.
    pub const SERIES_LIMIT_KEY: &'static str = "workflows";

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

    /// The cap as dwpolicy's type, for the store's bounded discovery read.
    pub fn series_limit(&self) -> SeriesLimit {
        self.limit
    }

    /// Renders the first `limit` series of `series` and discloses the label
    /// set with its report.
    ///
    /// `series` must yield distinct label sets in ascending (task_queue,
    /// workflow_type) order, as [`crate::store::Store::workflow_run_series`]
    /// does; it is pulled at most `limit + 1` times.
    pub fn render(
        &self,
        guard: &MetricGuard,
        series: impl IntoIterator<Item = RunSeries>,
    ) -> Result<RenderedRuns, DisclosureError> {
        let discovery = self.limit.discover(series);
        let report = discovery.report;
        let disclosure = guard.disclose(
            Self::METRIC,
            [("task_queue", report), ("workflow_type", report)],
        )?;
        let cardinality = serde_json::to_value(&disclosure).unwrap_or(Value::Null);
        let report_json = serde_json::to_string(&report).unwrap_or_default();
        let mut text = format!(
            "# cardinality series_limits.{} {report_json}\n",
            Self::SERIES_LIMIT_KEY
        );
        text.push_str("# HELP dw_workflow_runs_total Workflow runs started, per task queue and workflow type.\n");
        text.push_str("# TYPE dw_workflow_runs_total counter\n");
        for s in &discovery.series {
            let _ = writeln!(
                text,
                "dw_workflow_runs_total{{task_queue=\"{}\",workflow_type=\"{}\"}} {}",
                escape(&s.task_queue),
                escape(&s.workflow_type),
                s.runs,
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
    fn past_the_cap_the_first_label_sets_are_emitted_and_counts_are_lower_bounds() {
        let pulled = std::cell::Cell::new(0);
        let source = series(10)
            .into_iter()
            .inspect(|_| pulled.set(pulled.get() + 1));
        let rendered = WorkflowRunMetrics::new(Some(3))
            .render(&guard(), source)
            .unwrap();
        assert_eq!(pulled.get(), 4, "discovery reads limit + 1 label sets");
        assert_eq!(rendered.text.matches("dw_workflow_runs_total{").count(), 3);
        assert!(rendered
            .text
            .contains("task_queue=\"q000\",workflow_type=\"Order\\\"s\"} 1\n"));
        assert!(!rendered.text.contains("q003"));
        let report = rendered.report;
        assert_eq!((report.reported, report.observed), (3, 4));
        assert_eq!(report.suppressed_series, 1);
        assert!(report.lower_bound);
        assert_eq!(
            report.suppressed_value, None,
            "suppressed runs were not read"
        );
        assert!(rendered.text.starts_with(
            "# cardinality series_limits.workflows {\"limit\":3,\"reported\":3,\"observed\":4,\"suppressed_series\":1,\"lower_bound\":true}\n"
        ));
        let block = &rendered.cardinality;
        assert_eq!(block["namespace"]["cardinality"], "request_scope_not_label");
        assert_eq!(block["task_queue"]["cardinality"], "bounded_series");
        assert_eq!(block["task_queue"]["lower_bound"], true);
        assert!(!rendered.text.contains("namespace"));
    }

    #[test]
    fn within_the_cap_counts_are_exact() {
        let rendered = WorkflowRunMetrics::new(Some(3))
            .render(&guard(), series(3))
            .unwrap();
        assert_eq!(rendered.text.matches("dw_workflow_runs_total{").count(), 3);
        let report = rendered.report;
        assert_eq!((report.observed, report.suppressed_series), (3, 0));
        assert!(!report.lower_bound);
        let empty = WorkflowRunMetrics::new(None)
            .render(&guard(), Vec::new())
            .unwrap();
        assert_eq!(empty.text.matches("dw_workflow_runs_total{").count(), 0);
        assert!(empty
            .text
            .contains("# TYPE dw_workflow_runs_total counter\n"));
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
