//! Per-namespace metric surfaces: Prometheus text and its JSON disclosure.
//!
//! Both surfaces render the same scrape, so the series a Prometheus server
//! stores and the counts the JSON reports cannot disagree. The namespace is
//! a required query parameter rather than a label: it selects the rows and
//! is validated and admitted like any namespace-scoped request, because the
//! scrape's read cost grows with that namespace's runs.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::metrics::{RenderedRuns, WorkflowRunMetrics};
use crate::server::error::finish_validation;
use crate::server::{ApiError, Engine};
use crate::workflow_task_failures::WorkflowTaskFailureMetrics;

/// The content type of Prometheus text exposition format 0.0.4.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `?namespace=NS` of both metric surfaces.
#[derive(Debug, Default, Deserialize)]
pub struct MetricsQuery {
    /// The namespace to report; missing or empty is a 422.
    #[serde(default)]
    pub namespace: Option<String>,
}

impl Engine {
    /// `dw_workflow_runs_total` of `namespace`, capped by
    /// `server.metrics.prometheus_workflow_series_limit`, with its report.
    pub fn workflow_run_metrics(&self, namespace: &str) -> Result<RenderedRuns, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text("namespace", namespace, dwpolicy::boundary::MAX_NAME_CHARS);
        finish_validation(v, &[("namespace", namespace)])?;
        let _slot = self.admit_namespace(namespace)?;
        let limit = self.workflow_runs.series_limit();
        let series = self.read(|s| s.workflow_run_series(namespace, limit))?;
        let guard = crate::policy::guard().map_err(|e| ApiError::Internal(e.to_owned()))?;
        Ok(self.workflow_runs.render(guard, series)?)
    }

    /// The JSON view of the same scrape: `cardinality.series_limits.workflows`
    /// (the series report) and `cardinality.metrics.<metric>` (the label-set
    /// disclosure, each dimension with its reviewed class).
    /// `metrics.dw_workflow_task_consecutive_failures` carries the capped
    /// failing workflow types with their suppressed type and task counts.
    pub fn system_metrics(&self, namespace: &str) -> Result<Value, ApiError> {
        let rendered = self.workflow_run_metrics(namespace)?;
        let failures = &self.task_failures;
        let scrape = self.read(|s| {
            let mut scrape = failures.scrape();
            s.for_each_failing_workflow_type(namespace, |f| scrape.offer(f))?;
            Ok(scrape)
        })?;
        let guard = crate::policy::guard().map_err(|e| ApiError::Internal(e.to_owned()))?;
        let failures = failures.render(guard, scrape)?;
        Ok(json!({
            "namespace": namespace,
            "metrics": { (WorkflowTaskFailureMetrics::METRIC): failures.payload },
            "cardinality": {
                "series_limits": {
                    (WorkflowRunMetrics::SERIES_LIMIT_KEY): rendered.report,
                    (WorkflowTaskFailureMetrics::SERIES_LIMIT_KEY): failures.report,
                },
                "metrics": {
                    (WorkflowRunMetrics::METRIC): rendered.cardinality,
                    (WorkflowTaskFailureMetrics::METRIC): failures.cardinality,
                },
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_disclosure_is_a_machine_readable_500() {
        let refused = ApiError::from(dwpolicy::DisclosureError::UndeclaredMetric {
            metric: WorkflowRunMetrics::METRIC.to_owned(),
        });
        assert_eq!(refused.status(), 500);
        assert_eq!(refused.body()["reason"], "metric_disclosure_refused");
    }
}
