//! Prometheus metrics of workflow runs.
//!
//! `namespace` is request-scoped: the scrape is already per namespace, so it
//! never becomes a label. `task_queue` and `workflow_type` are labels whose
//! series set is capped; what the cap hides is reported as suppression
//! counters instead of silently dropped.

use std::fmt::Write;

/// Renders `dw_workflow_runs_total` for one namespace's scrape.
#[derive(Debug, Clone)]
pub struct WorkflowRunMetrics {
    series_limit: usize,
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

impl WorkflowRunMetrics {
    /// Configuration key of the series cap.
    pub const SERIES_LIMIT_KEY: &'static str = "server.metrics.prometheus_workflow_series_limit";
    /// Default series cap.
    pub const DEFAULT_SERIES_LIMIT: usize = 100;
    /// The cap can be raised this far and no further.
    pub const MAX_SERIES_LIMIT: usize = 500;

    /// Metrics with the configured cap, clamped to `1..=MAX_SERIES_LIMIT`.
    pub fn new(configured_limit: Option<usize>) -> Self {
        let limit = configured_limit
            .unwrap_or(Self::DEFAULT_SERIES_LIMIT)
            .clamp(1, Self::MAX_SERIES_LIMIT);
        WorkflowRunMetrics {
            series_limit: limit,
        }
    }

    /// Text exposition: reported series in label order, then the number of
    /// suppressed series and the runs they hold.
    pub fn render(&self, mut series: Vec<RunSeries>) -> String {
        series.sort();
        let suppressed = series.split_off(series.len().min(self.series_limit));
        let mut out = String::from("# TYPE dw_workflow_runs_total counter\n");
        for s in &series {
            let _ = writeln!(
                out,
                "dw_workflow_runs_total{{task_queue=\"{}\",workflow_type=\"{}\"}} {}",
                escape(&s.task_queue),
                escape(&s.workflow_type),
                s.runs
            );
        }
        let hidden_runs: u64 = suppressed.iter().map(|s| s.runs).sum();
        let _ = writeln!(
            out,
            "# suppressed series: {} (runs: {hidden_runs})",
            suppressed.len()
        );
        out
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

    fn series(n: usize) -> Vec<RunSeries> {
        (0..n)
            .map(|i| RunSeries {
                task_queue: format!("q{i:03}"),
                workflow_type: "Order\"s".into(),
                runs: 1,
            })
            .collect()
    }

    #[test]
    fn series_beyond_the_cap_are_counted_not_emitted() {
        let text = WorkflowRunMetrics::new(Some(3)).render(series(10));
        assert_eq!(text.matches("dw_workflow_runs_total{").count(), 3);
        assert!(text.contains("task_queue=\"q000\",workflow_type=\"Order\\\"s\"} 1"));
        assert!(text.contains("# suppressed series: 7 (runs: 7)"));
    }

    #[test]
    fn the_cap_is_clamped() {
        assert_eq!(WorkflowRunMetrics::new(Some(10_000)).series_limit, 500);
        assert_eq!(WorkflowRunMetrics::new(Some(0)).series_limit, 1);
        assert_eq!(WorkflowRunMetrics::new(None).series_limit, 100);
    }
}
