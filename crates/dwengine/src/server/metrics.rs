//! Per-namespace metric surfaces: Prometheus text and its JSON disclosure.
//!
//! Both surfaces render the same scrape, so the series a Prometheus server
//! stores and the counts the JSON reports cannot disagree. The namespace is
//! a required query parameter rather than a label: it selects the rows and
//! is validated like any namespace-scoped request.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::metrics::activities::ActivityExecutionMetrics;
use crate::metrics::admission::NamespaceAdmissionMetrics;
use crate::metrics::task_queues::TaskQueueRuntimeMetrics;
use crate::metrics::{Rendered, WorkflowRunMetrics};
use crate::projections::ProjectionDriftMetrics;
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

/// One namespace's Prometheus scrape: the workflow, activity and task-queue
/// surfaces, each with its own series cap and report.
#[derive(Debug, Clone)]
pub struct PrometheusScrape {
    /// `dw_workflow_runs_total` and `dw_workflow_run_latency_seconds`.
    pub workflows: Rendered,
    /// `dw_activity_executions_total` and `dw_activity_execution_latency_seconds`.
    pub activities: Rendered,
    /// `dw_task_queue_runtime_state`.
    pub task_queues: Rendered,
    /// `dw_post_commit_failures_total`: this node's post-commit steps that
    /// failed since start (unlabelled; the same in every namespace's scrape).
    pub post_commit_failures: u64,
    /// `dw_v1_projection_malformed_rows_total`: malformed source rows left
    /// out of the v1 projections this node imported since start
    /// (unlabelled; the same in every namespace's scrape).
    pub v1_malformed_rows: u64,
    /// `dw_schedule_lag_seconds`: how far behind the scheduler is now
    /// (unlabelled; server-wide, the same in every namespace's scrape).
    pub schedule_lag_seconds: f64,
}

impl PrometheusScrape {
    /// The exposition text of all three surfaces.
    pub fn text(&self) -> String {
        let mut text = [&self.workflows, &self.activities, &self.task_queues]
            .map(|r| r.text.as_str())
            .concat();
        text.push_str(&format!(
            "# HELP dw_post_commit_failures_total Wake-ups and cache writes that failed after their transaction committed (the request got the commit's answer).\n\
             # TYPE dw_post_commit_failures_total counter\n\
             dw_post_commit_failures_total {}\n",
            self.post_commit_failures
        ));
        text.push_str(&format!(
            "# HELP dw_v1_projection_malformed_rows_total Malformed source rows left out of imported v1 projections (each import reports its own).\n\
             # TYPE dw_v1_projection_malformed_rows_total counter\n\
             dw_v1_projection_malformed_rows_total {}\n",
            self.v1_malformed_rows
        ));
        text.push_str(&format!(
            "# HELP dw_schedule_lag_seconds How far behind the scheduler is: now minus the fire time of the earliest fire an active schedule still owes (0 when none is due).\n\
             # TYPE dw_schedule_lag_seconds gauge\n\
             dw_schedule_lag_seconds {:.3}\n",
            self.schedule_lag_seconds
        ));
        text
    }

    fn surfaces(&self) -> [(&'static str, &Rendered); 3] {
        [
            (WorkflowRunMetrics::SERIES_LIMIT_KEY, &self.workflows),
            (ActivityExecutionMetrics::SERIES_LIMIT_KEY, &self.activities),
            (TaskQueueRuntimeMetrics::SERIES_LIMIT_KEY, &self.task_queues),
        ]
    }
}

impl Engine {
    /// The Prometheus scrape of `namespace`: every surface reads at most
    /// `limit + 1` aggregate rows from one committed snapshot.
    pub fn prometheus_scrape(&self, namespace: &str) -> Result<PrometheusScrape, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text("namespace", namespace, dwpolicy::boundary::MAX_NAME_CHARS);
        finish_validation(v, &[("namespace", namespace)])?;
        // No namespace admission: the scrape's cost is bounded by the series
        // caps, and an operator must be able to read a namespace's admission
        // rejections precisely while its budget is exhausted.
        let (runs, activities, queues) = (
            self.workflow_runs.series_limit(),
            self.activity_executions.series_limit(),
            self.task_queue_runtime.series_limit(),
        );
        let now = crate::unix_ms();
        let (run_series, activity_series, queue_states) = self.read(|s| {
            Ok((
                s.workflow_run_series(namespace, runs)?,
                s.activity_execution_series(namespace, activities)?,
                s.task_queue_states(namespace, queues, now)?,
            ))
        })?;
        let guard = crate::policy::guard().map_err(|e| ApiError::Internal(e.to_owned()))?;
        Ok(PrometheusScrape {
            workflows: self.workflow_runs.render(guard, run_series)?,
            activities: self.activity_executions.render(guard, activity_series)?,
            task_queues: self.task_queue_runtime.render(guard, queue_states)?,
            post_commit_failures: self.post_commit_failures(),
            v1_malformed_rows: self.v1_malformed_rows(),
            schedule_lag_seconds: lag_seconds(self.schedule_lag_ms(now)?),
        })
    }

    /// The JSON view of the same scrape: `cardinality.series_limits.<surface>`
    /// (each series report), `cardinality.metrics.<metric>` (each label-set
    /// disclosure, every dimension with its reviewed class) and the reported
    /// series under `series.<surface>`.
    /// `metrics.dw_workflow_task_consecutive_failures` carries the capped
    /// failing workflow types with their suppressed type and task counts.
    pub fn system_metrics(&self, namespace: &str) -> Result<Value, ApiError> {
        let scrape = self.prometheus_scrape(namespace)?;
        let failures = &self.task_failures;
        let failing = self.read(|s| {
            let mut failing = failures.scrape();
            s.for_each_failing_workflow_type(namespace, |f| failing.offer(f))?;
            Ok(failing)
        })?;
        let guard = crate::policy::guard().map_err(|e| ApiError::Internal(e.to_owned()))?;
        let failures = failures.render(guard, failing)?;
        let mut series_limits = serde_json::Map::new();
        let mut disclosures = serde_json::Map::new();
        let mut series = serde_json::Map::new();
        for (key, rendered) in scrape.surfaces() {
            series_limits.insert(key.into(), json!(rendered.report));
            series.insert(key.into(), rendered.series.clone().into());
            for (metric, disclosure) in &rendered.disclosures {
                disclosures.insert((*metric).into(), disclosure.clone());
            }
        }
        series_limits.insert(
            WorkflowTaskFailureMetrics::SERIES_LIMIT_KEY.into(),
            json!(failures.report),
        );
        disclosures.insert(
            WorkflowTaskFailureMetrics::METRIC.into(),
            failures.cardinality,
        );
        let (drift, drift_disclosure) =
            ProjectionDriftMetrics::render(guard, &self.projection_drift()?)?;
        disclosures.insert(ProjectionDriftMetrics::METRIC.into(), drift_disclosure);
        let usage = self
            .read(|s| s.durable_usage(namespace, &crate::durable_state::DurableResource::ALL))
            .ok();
        let (durable, durable_disclosure) = self.durable_state.render(guard, namespace, usage)?;
        disclosures.insert(
            crate::durable_state::NamespaceDurableStateQuota::METRIC.into(),
            durable_disclosure,
        );
        let payload_usage = self.read(|s| s.external_payload_usage(namespace)).ok();
        let (payloads, payload_disclosure) =
            self.external_payloads
                .render(guard, namespace, payload_usage)?;
        disclosures.insert(
            crate::external_payloads::RuntimeExternalPayloadQuota::METRIC.into(),
            payload_disclosure,
        );
        let (admission, admission_disclosure) =
            NamespaceAdmissionMetrics::render(guard, &self.namespaces.counts(namespace)?)?;
        disclosures.insert(
            NamespaceAdmissionMetrics::METRIC.into(),
            admission_disclosure,
        );
        Ok(json!({
            "namespace": namespace,
            "metrics": {
                (WorkflowTaskFailureMetrics::METRIC): failures.payload,
                (ProjectionDriftMetrics::METRIC): drift,
                (NamespaceAdmissionMetrics::METRIC): admission,
                (crate::durable_state::NamespaceDurableStateQuota::METRIC): durable,
                (crate::external_payloads::RuntimeExternalPayloadQuota::METRIC): payloads,
            },
            "series": series,
            "cardinality": { "series_limits": series_limits, "metrics": disclosures },
        }))
    }
}

impl Engine {
    /// `GET /api/system/operator-metrics`: the server-wide runs, tasks and
    /// workers, the projection drift block, and the structural limits and
    /// backend contract in force. Every count comes from an aggregate row;
    /// the drift block is the cached drift report, whose recomputation (once
    /// per cache period) reads every retained run.
    pub fn operator_metrics(&self) -> Result<Value, ApiError> {
        let projections = self.projection_health()?;
        self.read(|s| {
            let mut metrics = operator_counts(s)?;
            metrics["projections"] = projections;
            // The seed's snapshot, `{"structural_limits": {…}}`, as this
            // document's `structural_limits` member (not nested twice).
            metrics["structural_limits"] = json!(s.health().structural_limits);
            metrics["backend"] = json!(s.capabilities());
            metrics["post_commit_failures_total"] = json!(self.post_commit_failures());
            metrics["v1_projection_malformed_rows_total"] = json!(self.v1_malformed_rows());
            let lag = s
                .earliest_schedule_fire()?
                .map_or(0, |at| (crate::unix_ms() - at).max(0));
            metrics["schedule_lag_seconds"] = json!(lag_seconds(lag));
            metrics["waits"] = json!(self.waits_snapshot());
            metrics["cluster"] = self.cluster_snapshot();
            metrics["queue"] = self.queue.snapshot();
            metrics["claims"] = self.claims_snapshot();
            metrics["run_writes"] = self.run_writes_snapshot();
            metrics["staged_starts"] = json!(self.staged_starts());
            Ok(metrics)
        })
        .map_err(ApiError::from)
    }

    /// The runs, tasks and workers blocks of the operator metrics alone:
    /// aggregate rows only, so its cost never grows with the retained runs
    /// (the console's operations page reads this, not the drift report).
    pub fn operator_counts(&self) -> Result<Value, ApiError> {
        self.read(operator_counts).map_err(ApiError::from)
    }
}

/// Milliseconds of lag as the metric's seconds (millisecond precision).
fn lag_seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

fn operator_counts(s: &crate::store::Store) -> Result<Value, crate::store::Error> {
    let c = s.operator_counts()?;
    let running = c.runs_started.saturating_sub(
        c.runs_completed
            + c.runs_failed
            + c.runs_cancelled
            + c.runs_terminated
            + c.runs_continued_as_new,
    );
    Ok(json!({
        "generated_at": crate::server::wire::timestamp(crate::unix_ms()),
        "runs": {
            "total": c.runs_started,
            "running": running,
            "completed": c.runs_completed,
            "failed": c.runs_failed,
            "cancelled": c.runs_cancelled,
            "terminated": c.runs_terminated,
            "continued_as_new": c.runs_continued_as_new,
        },
        "tasks": {
            "workflow_ready": c.workflow_ready,
            "workflow_leased": c.workflow_leased,
            "activity_ready": c.activity_ready,
            "activity_leased": c.activity_leased,
        },
        "workers": { "registered": c.workers },
    }))
}

impl Engine {
    /// Per waiting-call kind: the waits held now, the cap and the refusals
    /// since start.
    fn waits_snapshot(&self) -> Value {
        let waiters = self.waiters();
        let mut kinds = serde_json::Map::new();
        for kind in crate::waiters::WaitKind::ALL {
            kinds.insert(
                kind.as_str().into(),
                json!({ "held": waiters.held(kind), "cap": waiters.caps().get(kind),
                        "refused": waiters.refused(kind) }),
            );
        }
        Value::Object(kinds)
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
