//! Prometheus metrics of workflow runs, and what every scrape-style surface
//! shares: the rendered result and label escaping.
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

//!
//! `dw_workflow_run_latency_seconds` shares the run series set: its buckets
//! are written only for the label sets `dw_workflow_runs_total` reports.
//! The counts come from per-series aggregate rows the store keeps in the
//! same transaction as each run, so a scrape reads at most `limit + 1` rows
//! however many runs a namespace holds.

pub mod activities;
pub mod admission;
pub mod latency;
pub mod task_queues;

use std::fmt::Write;

use dwpolicy::series::{SeriesLimit, PROMETHEUS_WORKFLOW_SERIES};
use dwpolicy::{DisclosureError, MetricGuard, SeriesReport};
use serde_json::{json, Value};

pub use latency::Latency;

/// Renders `dw_workflow_runs_total` and `dw_workflow_run_latency_seconds`
/// for one namespace's scrape.
#[derive(Debug, Clone)]
pub struct WorkflowRunMetrics {
    limit: SeriesLimit,
}

/// The runs of one (task queue, workflow type) series.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunSeries {
    /// The task queue label.
    pub task_queue: String,
    /// The workflow type label.
    pub workflow_type: String,
    /// Runs started.
    pub runs: u64,
    /// Runs closed as completed.
    pub completed: u64,
    /// Runs closed as failed.
    pub failed: u64,
    /// Runs closed as cancelled.
    pub cancelled: u64,
    /// Runs closed as terminated.
    pub terminated: u64,
    /// Runs closed as continued (a new run of the workflow took over).
    pub continued_as_new: u64,
    /// Start-to-close latency of the closed runs.
    pub latency: Latency,
}

impl RunSeries {
    /// Runs still running (a run closes once and never reopens).
    pub fn running(&self) -> u64 {
        self.runs.saturating_sub(
            self.completed + self.failed + self.cancelled + self.terminated + self.continued_as_new,
        )
    }
}

/// A rendered scrape surface: exposition text, its cardinality disclosures
/// and the reported series for the JSON view.
///
/// The text opens with a `# cardinality series_limits.<key> {…}` comment
/// carrying [`report`](Self::report) as JSON, so a scrape alone shows what
/// the cap hid; Prometheus ignores such comments.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// Prometheus text exposition.
    pub text: String,
    /// `(metric, {dimension: {cardinality, …series report}})` per metric rendered.
    pub disclosures: Vec<(&'static str, Value)>,
    /// The series counts behind the disclosures.
    pub report: SeriesReport,
    /// The reported series as JSON objects.
    pub series: Vec<Value>,
}

impl Rendered {
    /// The disclosure of `metric`, if this surface rendered it.
    pub fn disclosure(&self, metric: &str) -> Option<&Value> {
        self.disclosures
            .iter()
            .find(|(m, _)| *m == metric)
            .map(|(_, d)| d)
    }
}

/// Discloses `dimensions` of `metric` (each with `report`) as JSON.
pub(crate) fn disclose(
    guard: &MetricGuard,
    metric: &'static str,
    dimensions: &[&str],
    report: SeriesReport,
) -> Result<(&'static str, Value), DisclosureError> {
    let disclosure = guard.disclose(metric, dimensions.iter().map(|d| (*d, report)))?;
    Ok((
        metric,
        serde_json::to_value(&disclosure).unwrap_or(Value::Null),
    ))
}

/// A capped surface before its samples are written.
pub(crate) struct OpenSurface<L> {
    /// The kept label sets, ascending.
    pub kept: Vec<L>,
    /// The series report.
    pub report: SeriesReport,
    /// One disclosure per metric of the surface.
    pub disclosures: Vec<(&'static str, Value)>,
    /// The text so far: the cardinality comment.
    pub text: String,
}

/// What every capped surface starts with: the first `limit` of at most
/// `limit + 1` label sets of `series`, the report, the disclosure of
/// `labels` for each of `metrics`, and the text opened by the cardinality
/// comment.
pub(crate) fn open_surface<L: Ord>(
    limit: SeriesLimit,
    guard: &MetricGuard,
    series: impl IntoIterator<Item = L>,
    metrics: &[&'static str],
    labels: &[&str],
    key: &str,
) -> Result<OpenSurface<L>, DisclosureError> {
    let discovery = limit.discover(series);
    let report = discovery.report;
    let disclosures = metrics
        .iter()
        .map(|metric| disclose(guard, metric, labels, report))
        .collect::<Result<_, _>>()?;
    let text = cardinality_comment(key, &report);
    Ok(OpenSurface {
        kept: discovery.series,
        report,
        disclosures,
        text,
    })
}

/// The `# cardinality series_limits.<key> {report}` comment line.
pub(crate) fn cardinality_comment(key: &str, report: &SeriesReport) -> String {
    let report_json = serde_json::to_string(report).unwrap_or_default();
    format!("# cardinality series_limits.{key} {report_json}\n")
}

impl WorkflowRunMetrics {
    /// The metric this type owns.
    pub const METRIC: &'static str = "dw_workflow_runs_total";

    /// The latency histogram sharing this metric's series set.
    pub const LATENCY_METRIC: &'static str = "dw_workflow_run_latency_seconds";

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
    /// set of both metrics with its report.
    ///
    /// `series` must yield distinct label sets in ascending (task_queue,
    /// workflow_type) order, as [`crate::store::Store::workflow_run_series`]
    /// does; it is pulled at most `limit + 1` times.
    pub fn render(
        &self,
        guard: &MetricGuard,
        series: impl IntoIterator<Item = RunSeries>,
    ) -> Result<Rendered, DisclosureError> {
        let OpenSurface {
            kept,
            report,
            disclosures,
            mut text,
        } = open_surface(
            self.limit,
            guard,
            series,
            &[Self::METRIC, Self::LATENCY_METRIC],
            &["task_queue", "workflow_type"],
            Self::SERIES_LIMIT_KEY,
        )?;
        let labels: Vec<String> = kept
            .iter()
            .map(|s| {
                label_set(&[
                    ("task_queue", &s.task_queue),
                    ("workflow_type", &s.workflow_type),
                ])
            })
            .collect();
        text.push_str("# HELP dw_workflow_runs_total Workflow runs started, per task queue and workflow type.\n");
        text.push_str("# TYPE dw_workflow_runs_total counter\n");
        for (s, labels) in kept.iter().zip(&labels) {
            let _ = writeln!(text, "dw_workflow_runs_total{{{labels}}} {}", s.runs);
        }
        text.push_str("# HELP dw_workflow_run_latency_seconds Start-to-close latency of closed workflow runs.\n");
        text.push_str("# TYPE dw_workflow_run_latency_seconds histogram\n");
        for (s, labels) in kept.iter().zip(&labels) {
            s.latency
                .write_histogram(&mut text, Self::LATENCY_METRIC, labels);
        }
        let series = kept
            .iter()
            .map(|s| {
                json!({
                    "task_queue": s.task_queue,
                    "workflow_type": s.workflow_type,
                    "started_total": s.runs,
                    "completed_total": s.completed,
                    "failed_total": s.failed,
                    "cancelled_total": s.cancelled,
                    "terminated_total": s.terminated,
                    "continued_as_new_total": s.continued_as_new,
                    "running": s.running(),
                    "latency_seconds": s.latency.json(),
                })
            })
            .collect();
        Ok(Rendered {
            text,
            disclosures,
            report,
            series,
        })
    }
}

/// One series' label set, `name="value",…`, every value escaped: built once
/// and shared by a counter and the histogram that reports the same series.
pub(crate) fn label_set(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{name}=\"{}\"", escape(value));
    }
    out
}

/// Escapes a label value for the text exposition format.
pub(crate) fn escape(value: &str) -> String {
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
                ..RunSeries::default()
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
        let block = rendered
            .disclosure(WorkflowRunMetrics::LATENCY_METRIC)
            .expect("the latency histogram is disclosed");
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
