//! `dw_task_queue_runtime_state`: what each busy task queue holds right now.
//!
//! Queue names are user-chosen, so the queues a scrape reports go through
//! `limit + 1` discovery (`server.metrics.prometheus_task_queue_series_limit`,
//! default 100, clamped to 500). Only queues with ready or leased workflow or
//! activity tasks, or with tasks added or dispatched in the current or the
//! previous minute bucket, are series at all: an idle queue costs a scrape
//! nothing. Each reported queue is one series per fixed `state` (a finite,
//! reviewed inventory), so a scrape emits at most `limit × 6` samples.

use std::fmt::Write;

use dwpolicy::series::{SeriesLimit, PROMETHEUS_TASK_QUEUE_SERIES};
use dwpolicy::{DisclosureError, MetricGuard};
use serde_json::json;

use crate::metrics::{escape, open_surface, OpenSurface, Rendered};

/// Renders the task-queue runtime metric of one namespace's scrape.
#[derive(Debug, Clone)]
pub struct TaskQueueRuntimeMetrics {
    limit: SeriesLimit,
}

/// The runtime state of one queue.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaskQueueState {
    /// The task queue label.
    pub task_queue: String,
    /// Workflow tasks waiting for a worker.
    pub workflow_ready: u64,
    /// Workflow tasks a worker holds.
    pub workflow_leased: u64,
    /// Activity tasks waiting for a worker.
    pub activity_ready: u64,
    /// Activity tasks a worker holds.
    pub activity_leased: u64,
    /// Workflow and activity tasks added in the current and previous minute bucket.
    pub added_last_minute: u64,
    /// Tasks handed to a worker in the current and previous minute bucket.
    pub dispatched_last_minute: u64,
}

impl TaskQueueState {
    /// `(state label, value)` in the fixed inventory order.
    pub fn states(&self) -> [(&'static str, u64); 6] {
        [
            ("workflow_ready_tasks", self.workflow_ready),
            ("workflow_leased_tasks", self.workflow_leased),
            ("activity_ready_tasks", self.activity_ready),
            ("activity_leased_tasks", self.activity_leased),
            ("tasks_added_last_minute", self.added_last_minute),
            ("tasks_dispatched_last_minute", self.dispatched_last_minute),
        ]
    }
}

impl TaskQueueRuntimeMetrics {
    /// The metric this type owns.
    pub const METRIC: &'static str = "dw_task_queue_runtime_state";

    /// The key of the report under `cardinality.series_limits`.
    pub const SERIES_LIMIT_KEY: &'static str = "task_queues";

    /// Metrics with the configured series limit (default 100, clamped to 1..=500).
    pub fn new(configured_limit: Option<i64>) -> Self {
        TaskQueueRuntimeMetrics {
            limit: PROMETHEUS_TASK_QUEUE_SERIES.resolve(configured_limit),
        }
    }

    /// The cap for the store's bounded discovery read.
    pub fn series_limit(&self) -> SeriesLimit {
        self.limit
    }

    /// Renders the first `limit` queues of `queues` (distinct, ascending,
    /// pulled at most `limit + 1` times) and discloses the label set.
    pub fn render(
        &self,
        guard: &MetricGuard,
        queues: impl IntoIterator<Item = TaskQueueState>,
    ) -> Result<Rendered, DisclosureError> {
        let OpenSurface {
            kept,
            report,
            disclosures,
            mut text,
        } = open_surface(
            self.limit,
            guard,
            queues,
            &[Self::METRIC],
            &["task_queue"],
            Self::SERIES_LIMIT_KEY,
        )?;
        text.push_str("# HELP dw_task_queue_runtime_state Ready and leased tasks, and tasks added and dispatched in the last minute buckets, per busy task queue.\n");
        text.push_str("# TYPE dw_task_queue_runtime_state gauge\n");
        for q in &kept {
            let queue = escape(&q.task_queue);
            for (state, value) in q.states() {
                let _ = writeln!(
                    text,
                    "dw_task_queue_runtime_state{{task_queue=\"{queue}\",state=\"{state}\"}} {value}",
                );
            }
        }
        let series = kept
            .iter()
            .map(|q| {
                let mut entry = json!({ "task_queue": q.task_queue });
                for (state, value) in q.states() {
                    entry[state] = value.into();
                }
                entry
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

    #[test]
    fn each_reported_queue_is_one_series_per_fixed_state() {
        let guard = MetricGuard::new(crate::policy::embedded().unwrap());
        let queues = ["a", "b", "c"].map(|q| TaskQueueState {
            task_queue: q.into(),
            workflow_ready: 2,
            dispatched_last_minute: 1,
            ..TaskQueueState::default()
        });
        let rendered = TaskQueueRuntimeMetrics::new(Some(2))
            .render(&guard, queues)
            .unwrap();
        assert_eq!(
            rendered
                .text
                .matches("dw_task_queue_runtime_state{")
                .count(),
            12
        );
        assert!(rendered.text.contains(
            "dw_task_queue_runtime_state{task_queue=\"b\",state=\"workflow_ready_tasks\"} 2\n"
        ));
        assert!(!rendered.text.contains("\"c\""));
        assert!(rendered.report.lower_bound);
        assert_eq!(rendered.series[1]["tasks_dispatched_last_minute"], 1);
        let disclosed = rendered
            .disclosure(TaskQueueRuntimeMetrics::METRIC)
            .unwrap();
        assert_eq!(
            disclosed["state"]["cardinality"],
            "finite_task_queue_states"
        );
        assert_eq!(disclosed["task_queue"]["lower_bound"], true);
    }
}
