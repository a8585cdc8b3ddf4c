//! `dw_namespace_request_admission_rejections` on `/api/system/metrics`.
//!
//! The namespace is the request's scope, never a label, and `reason` is the
//! fixed three-reason inventory the reference server uses
//! (`namespace_request_rate_exhausted`,
//! `namespace_request_concurrency_exhausted`,
//! `namespace_request_admission_unavailable`), every reason always present,
//! so the series set is finite by construction. The counts are the current
//! minute's buckets of [`NamespaceRequestAdmission`](crate::admission::NamespaceRequestAdmission).

use dwpolicy::{DisclosureError, MetricGuard};
use serde_json::{json, Map, Value};

use crate::admission::{NamespaceAdmissionCounts, NamespaceRejection};

/// Renders the namespace admission metric.
#[derive(Debug, Clone, Copy, Default)]
pub struct NamespaceAdmissionMetrics;

impl NamespaceAdmissionMetrics {
    /// The metric this type owns.
    pub const METRIC: &'static str = "dw_namespace_request_admission_rejections";

    /// The payload and the label-set disclosure.
    pub fn render(
        guard: &MetricGuard,
        counts: &NamespaceAdmissionCounts,
    ) -> Result<(Value, Value), DisclosureError> {
        let reasons: Vec<&str> = NamespaceRejection::REASONS
            .iter()
            .map(|r| r.metric_reason())
            .collect();
        let disclosure = guard.disclose(
            Self::METRIC,
            [(
                "reason",
                json!({ "values": reasons, "selection": "fixed_three_reason_inventory" }),
            )],
        )?;
        let by_reason: Map<String, Value> = counts
            .rejections
            .iter()
            .map(|(reason, n)| (reason.metric_reason().to_owned(), (*n).into()))
            .collect();
        let payload = json!({
            "configured": counts.limit.is_some(),
            "max_requests_per_minute": counts.limit.map(|l| l.per_minute).filter(|n| *n > 0),
            "max_concurrent_requests": counts.limit.map(|l| l.max_concurrent).filter(|n| *n > 0),
            "requests_this_minute": counts.requests_this_minute,
            "rejections_this_minute": counts.rejections.iter().map(|(_, n)| n).sum::<u64>(),
            "rejections_by_reason": by_reason,
        });
        Ok((
            payload,
            serde_json::to_value(&disclosure).unwrap_or(Value::Null),
        ))
    }
}
