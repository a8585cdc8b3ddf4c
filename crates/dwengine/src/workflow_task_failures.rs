//! `dw_workflow_task_consecutive_failures`: workflow types whose tasks keep failing.
//!
//! A workflow task that a worker fails returns to the queue with its error
//! recorded; until one attempt succeeds its failures are consecutive. The
//! metric reports, per workflow type, how many of a namespace's workflow
//! tasks are failing and the longest run of consecutive failures among them.
//! `workflow_type` comes from users, so the series pass through dwpolicy's
//! [`SeriesLimiter`]: the `limit` types with the most failing tasks are
//! reported (ties by type ascending), every other type is counted in the
//! payload as suppressed, with its failing tasks. The limiter holds at most
//! `limit` series whatever the number of failing types, and the label set is
//! disclosed against the embedded policy before anything is rendered, so a
//! policy that stops declaring `workflow_type` closes the surface.

use dwpolicy::series::{SeriesLimit, SeriesLimiter, WORKFLOW_TASK_FAILURE_TYPES};
use dwpolicy::{DisclosureError, MetricGuard, SeriesReport};
use serde_json::{json, Value};

/// The failing workflow tasks of one workflow type, as the store aggregates them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingWorkflowType {
    /// The workflow type label.
    pub workflow_type: String,
    /// Workflow tasks of this type whose last attempt failed.
    pub failing_tasks: u64,
    /// The most consecutive failures of one of them.
    pub max_consecutive_failures: u64,
}

/// Renders `dw_workflow_task_consecutive_failures` for one namespace.
#[derive(Debug, Clone)]
pub struct WorkflowTaskFailureMetrics {
    limit: SeriesLimit,
}

/// Collects the failing types of one scrape in O(limit) memory.
#[derive(Debug)]
pub struct FailureScrape {
    limiter: SeriesLimiter<(String, u64)>,
}

impl FailureScrape {
    /// Offers one workflow type (each type once).
    pub fn offer(&mut self, failing: FailingWorkflowType) {
        self.limiter.admit(
            (failing.workflow_type, failing.max_consecutive_failures),
            failing.failing_tasks,
        );
    }
}

impl WorkflowTaskFailureMetrics {
    /// The metric this type owns.
    pub const METRIC: &'static str = "dw_workflow_task_consecutive_failures";

    /// The key of its report under `cardinality.series_limits`.
    pub const SERIES_LIMIT_KEY: &'static str = "workflow_task_failures";

    /// Metrics with `server.metrics.workflow_task_failure_type_limit` as
    /// configured (default 20, clamped to 1..=100).
    pub fn new(configured_limit: Option<i64>) -> Self {
        WorkflowTaskFailureMetrics {
            limit: WORKFLOW_TASK_FAILURE_TYPES.resolve(configured_limit),
        }
    }

    /// The series cap in force.
    pub fn limit(&self) -> usize {
        self.limit.get()
    }

    /// An empty scrape to offer the failing types to.
    pub fn scrape(&self) -> FailureScrape {
        FailureScrape {
            limiter: self.limit.limiter(),
        }
    }

    /// The payload of a finished scrape: the reported series, the
    /// suppressed type and task counts, the series report and the label
    /// disclosure (`None` when the policy refuses the label set).
    pub fn render(
        &self,
        guard: &MetricGuard,
        scrape: FailureScrape,
    ) -> Result<RenderedFailures, DisclosureError> {
        let selection = scrape.limiter.finish();
        let report = selection.report;
        let disclosure = guard.disclose(Self::METRIC, [("workflow_type", report)])?;
        let series: Vec<Value> = selection
            .series
            .iter()
            .map(|((workflow_type, max_consecutive), failing_tasks)| {
                json!({
                    "workflow_type": workflow_type,
                    "failing_tasks": failing_tasks,
                    "consecutive_failures": max_consecutive,
                })
            })
            .collect();
        Ok(RenderedFailures {
            payload: json!({
                "series": series,
                "suppressed_workflow_types": report.suppressed_series,
                "suppressed_failing_tasks": report.suppressed_value.unwrap_or(0),
            }),
            cardinality: serde_json::to_value(&disclosure).unwrap_or(Value::Null),
            report,
        })
    }
}

/// A rendered scrape of the failure metric.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedFailures {
    /// `{series: [{workflow_type, failing_tasks, consecutive_failures}], suppressed_*}`.
    pub payload: Value,
    /// The label-set disclosure for `cardinality.metrics`.
    pub cardinality: Value,
    /// The series counts for `cardinality.series_limits`.
    pub report: SeriesReport,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> MetricGuard {
        MetricGuard::new(crate::policy::embedded().expect("embedded policy validates"))
    }

    fn failing(workflow_type: &str, tasks: u64, max: u64) -> FailingWorkflowType {
        FailingWorkflowType {
            workflow_type: workflow_type.into(),
            failing_tasks: tasks,
            max_consecutive_failures: max,
        }
    }

    #[test]
    fn the_types_with_most_failing_tasks_are_reported_and_the_rest_counted() {
        let metrics = WorkflowTaskFailureMetrics::new(Some(2));
        let mut scrape = metrics.scrape();
        for f in [
            failing("Billing", 4, 2),
            failing("Import", 9, 7),
            failing("Export", 1, 1),
            failing("Audit", 4, 3),
        ] {
            scrape.offer(f);
        }
        let rendered = metrics.render(&guard(), scrape).unwrap();
        assert_eq!(
            rendered.payload,
            json!({
                "series": [
                    { "workflow_type": "Import", "failing_tasks": 9, "consecutive_failures": 7 },
                    { "workflow_type": "Audit", "failing_tasks": 4, "consecutive_failures": 3 },
                ],
                "suppressed_workflow_types": 2,
                "suppressed_failing_tasks": 5,
            })
        );
        assert_eq!(
            (rendered.report.observed, rendered.report.lower_bound),
            (4, false)
        );
        assert_eq!(
            rendered.cardinality["workflow_type"]["cardinality"],
            "bounded_failure_types"
        );
    }

    #[test]
    fn the_cap_defaults_to_20_and_is_clamped_to_100() {
        assert_eq!(WorkflowTaskFailureMetrics::new(None).limit(), 20);
        assert_eq!(WorkflowTaskFailureMetrics::new(Some(5000)).limit(), 100);
    }
}
