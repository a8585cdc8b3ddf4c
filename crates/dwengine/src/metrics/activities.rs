//! Prometheus metrics of activity executions.
//!
//! `dw_activity_executions_total` counts executions (an activity task queued
//! for a worker; retries are attempts of the same execution) per
//! (task_queue, workflow_type, activity_type); all three are user-chosen, so
//! the label sets go through the same `limit + 1` discovery as the run
//! series (`server.metrics.prometheus_activity_series_limit`, default 100,
//! clamped to 500). `dw_activity_execution_latency_seconds` (schedule to
//! close) is written only for the reported label sets.

use std::fmt::Write;

use dwpolicy::series::{SeriesLimit, PROMETHEUS_ACTIVITY_SERIES};
use dwpolicy::{DisclosureError, MetricGuard};
use serde_json::json;

use crate::metrics::{label_set, open_surface, Latency, OpenSurface, Rendered};

/// Renders the activity metrics of one namespace's scrape.
#[derive(Debug, Clone)]
pub struct ActivityExecutionMetrics {
    limit: SeriesLimit,
}

/// The executions of one (task queue, workflow type, activity type) series.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ActivitySeries {
    /// The queue the activity task was queued on.
    pub task_queue: String,
    /// The workflow type of the scheduling run.
    pub workflow_type: String,
    /// The activity type.
    pub activity_type: String,
    /// Executions started (activity tasks queued).
    pub started: u64,
    /// Executions closed as completed.
    pub completed: u64,
    /// Executions closed as failed (retries exhausted or non-retryable).
    pub failed: u64,
    /// Executions their workflow cancelled (a selection member it no longer
    /// needed): neither completed nor failed.
    pub cancelled: u64,
    /// Schedule-to-close latency of the closed executions.
    pub latency: Latency,
}

impl ActivityExecutionMetrics {
    /// The counter this type owns.
    pub const METRIC: &'static str = "dw_activity_executions_total";

    /// The latency histogram sharing its series set.
    pub const LATENCY_METRIC: &'static str = "dw_activity_execution_latency_seconds";

    /// The key of the report under `cardinality.series_limits`.
    pub const SERIES_LIMIT_KEY: &'static str = "activities";

    /// Metrics with the configured series limit (default 100, clamped to 1..=500).
    pub fn new(configured_limit: Option<i64>) -> Self {
        ActivityExecutionMetrics {
            limit: PROMETHEUS_ACTIVITY_SERIES.resolve(configured_limit),
        }
    }

    /// The cap for the store's bounded discovery read.
    pub fn series_limit(&self) -> SeriesLimit {
        self.limit
    }

    /// Renders the first `limit` series of `series` (ascending label sets,
    /// pulled at most `limit + 1` times) and discloses both metrics.
    pub fn render(
        &self,
        guard: &MetricGuard,
        series: impl IntoIterator<Item = ActivitySeries>,
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
            &["task_queue", "workflow_type", "activity_type"],
            Self::SERIES_LIMIT_KEY,
        )?;
        let labels: Vec<String> = kept
            .iter()
            .map(|s| {
                label_set(&[
                    ("task_queue", &s.task_queue),
                    ("workflow_type", &s.workflow_type),
                    ("activity_type", &s.activity_type),
                ])
            })
            .collect();
        text.push_str("# HELP dw_activity_executions_total Activity executions started, per task queue, workflow type and activity type.\n");
        text.push_str("# TYPE dw_activity_executions_total counter\n");
        for (s, labels) in kept.iter().zip(&labels) {
            let _ = writeln!(
                text,
                "dw_activity_executions_total{{{labels}}} {}",
                s.started
            );
        }
        text.push_str("# HELP dw_activity_execution_latency_seconds Schedule-to-close latency of closed activity executions.\n");
        text.push_str("# TYPE dw_activity_execution_latency_seconds histogram\n");
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
                    "activity_type": s.activity_type,
                    "started_total": s.started,
                    "completed_total": s.completed,
                    "failed_total": s.failed,
                    "cancelled_total": s.cancelled,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> MetricGuard {
        MetricGuard::new(crate::policy::embedded().expect("embedded policy validates"))
    }

    #[test]
    fn latency_is_written_only_for_reported_series() {
        let series = (0..5).map(|i| ActivitySeries {
            task_queue: "q".into(),
            workflow_type: "W".into(),
            activity_type: format!("a{i}"),
            started: 2,
            completed: 1,
            latency: Latency {
                count: 1,
                sum_ms: 250,
                buckets: [0, 1, 1, 1, 1, 1, 1, 1, 1, 1],
            },
            ..ActivitySeries::default()
        });
        let rendered = ActivityExecutionMetrics::new(Some(2))
            .render(&guard(), series)
            .unwrap();
        let text = &rendered.text;
        assert_eq!(text.matches("dw_activity_executions_total{").count(), 2);
        assert_eq!(
            text.matches("dw_activity_execution_latency_seconds_bucket{")
                .count(),
            22
        );
        assert!(text.contains("dw_activity_executions_total{task_queue=\"q\",workflow_type=\"W\",activity_type=\"a1\"} 2\n"));
        assert!(text.contains("dw_activity_execution_latency_seconds_bucket{task_queue=\"q\",workflow_type=\"W\",activity_type=\"a0\",le=\"0.5\"} 1\n"));
        assert!(text.contains("dw_activity_execution_latency_seconds_sum{task_queue=\"q\",workflow_type=\"W\",activity_type=\"a0\"} 0.25\n"));
        assert!(!text.contains("a2"), "{text}");
        assert_eq!(
            (rendered.report.observed, rendered.report.lower_bound),
            (3, true)
        );
        let disclosed = rendered
            .disclosure(ActivityExecutionMetrics::METRIC)
            .unwrap();
        assert_eq!(disclosed["activity_type"]["cardinality"], "bounded_series");
        assert_eq!(
            disclosed["namespace"]["cardinality"],
            "request_scope_not_label"
        );
        assert_eq!(rendered.series[0]["latency_seconds"]["count"], 1);
    }
}
