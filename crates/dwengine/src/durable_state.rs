//! The per-namespace durable-state quota and `dw_namespace_durable_state_usage`.
//!
//! A namespace may hold at most so many of each resource of the fixed
//! inventory ([`DurableResource::ALL`]): runs, open runs, worker
//! registrations, schedules, workflow streams and their items, and
//! service-catalog entries. A server-wide default per resource
//! (`server.namespace_durable_state.limits.max_<resource>`, 0 = none) applies
//! to every namespace; `DW_NAMESPACE_DURABLE_STATE_LIMITS` overrides it per
//! namespace. SQL rows are the authority: the usage is counted in the same
//! write transaction as the mutation it admits (see
//! [`crate::store::durable_state`]), so the quota holds under concurrency.
//! A start or a registration adds exactly one and is checked before it
//! writes ([`NamespaceDurableStateQuota::check`]); a mutation whose effect
//! is known only once it ran (an append that may open a stream and store
//! some items, a create that may be a duplicate) is measured before and
//! after and undone when it raised a resource past its limit
//! ([`NamespaceDurableStateQuota::guard`]). The cache only carries
//! telemetry: one two-minute rejection counter and one log-suppression key
//! per namespace, fixed reason and minute, under
//! `server:namespace-durable-state:`. A namespace without a quota writes no
//! key and pays no count.
//!
//! Only a mutation that would raise a resource past its limit is refused:
//! an over-limit namespace may still close runs, refresh a registration,
//! close streams or delete schedules and entries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dwpolicy::{DisclosureError, MetricGuard};
use serde_json::{json, Map, Value};

use crate::cache::{Cache, CacheError, NamespaceRejections, RejectionLog};
pub use crate::store::durable_state::{DurableResource, DurableUsage, DURABLE_RESOURCES};
use crate::store::{Error as StoreError, Store};

impl DurableResource {
    /// The rejection reason when the resource is exhausted.
    pub fn reason(self) -> &'static str {
        match self {
            DurableResource::WorkflowRuns => "namespace_workflow_runs_exhausted",
            DurableResource::OpenWorkflowRuns => "namespace_open_workflow_runs_exhausted",
            DurableResource::WorkerRegistrations => "namespace_worker_registrations_exhausted",
            DurableResource::Schedules => "namespace_schedules_exhausted",
            DurableResource::WorkflowStreams => "namespace_workflow_streams_exhausted",
            DurableResource::WorkflowStreamItems => "namespace_workflow_stream_items_exhausted",
            DurableResource::ServiceCatalogEntries => "namespace_service_catalog_entries_exhausted",
        }
    }

    /// Whether waiting can help: open runs close, idle registrations are
    /// swept and ended streams expire and are reclaimed; run rows are
    /// retained, and schedules and catalog entries stay until someone
    /// deletes them.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            DurableResource::OpenWorkflowRuns
                | DurableResource::WorkerRegistrations
                | DurableResource::WorkflowStreams
                | DurableResource::WorkflowStreamItems
        )
    }

    /// The config key of the server-wide default limit.
    pub fn config_key(self) -> String {
        format!("server.namespace_durable_state.limits.max_{}", self.name())
    }

    /// What the limit caps (for the configuration contract).
    pub fn what(self) -> &'static str {
        match self {
            DurableResource::WorkflowRuns => "run rows per namespace, retained ones included (DW_NAMESPACE_DURABLE_STATE_LIMITS overrides it per namespace); past it 429 namespace_workflow_runs_exhausted",
            DurableResource::OpenWorkflowRuns => "runs not yet closed per namespace (DW_NAMESPACE_DURABLE_STATE_LIMITS overrides it per namespace); past it 429 namespace_open_workflow_runs_exhausted",
            DurableResource::WorkerRegistrations => "worker registrations per namespace (DW_NAMESPACE_DURABLE_STATE_LIMITS overrides it per namespace); past it 429 namespace_worker_registrations_exhausted",
            DurableResource::Schedules => "schedules per namespace (DW_NAMESPACE_DURABLE_STATE_LIMITS overrides it per namespace); past it 429 namespace_schedules_exhausted",
            DurableResource::WorkflowStreams => "workflow output streams per namespace until reclaimed (DW_NAMESPACE_DURABLE_STATE_LIMITS overrides it per namespace); past it 429 namespace_workflow_streams_exhausted",
            DurableResource::WorkflowStreamItems => "items of those streams per namespace (DW_NAMESPACE_DURABLE_STATE_LIMITS overrides it per namespace); past it 429 namespace_workflow_stream_items_exhausted",
            DurableResource::ServiceCatalogEntries => "service-catalog endpoints, services and operations per namespace (DW_NAMESPACE_DURABLE_STATE_LIMITS overrides it per namespace); past it 429 namespace_service_catalog_entries_exhausted",
        }
    }

    fn parse(name: &str) -> Option<DurableResource> {
        DurableResource::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// The reason recorded when the quota could not be evaluated.
pub const UNAVAILABLE_REASON: &str = "namespace_durable_state_quota_unavailable";

/// The override variable: `namespace:resource=limit` items.
pub const NAMESPACE_LIMITS_ENV: &str = "DW_NAMESPACE_DURABLE_STATE_LIMITS";

/// One namespace's limits, per resource of the inventory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurableLimits([Option<u64>; DURABLE_RESOURCES]);

impl DurableLimits {
    /// The limit of `resource`, if any.
    pub fn get(&self, resource: DurableResource) -> Option<u64> {
        self.0[resource.index()]
    }

    /// Sets the limit of `resource`.
    pub fn set(&mut self, resource: DurableResource, limit: Option<u64>) {
        self.0[resource.index()] = limit;
    }

    /// Whether no resource is limited.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// `self` where it sets a limit, `defaults` elsewhere.
    fn over(self, defaults: DurableLimits) -> DurableLimits {
        let mut merged = defaults;
        for (slot, own) in merged.0.iter_mut().zip(self.0) {
            if own.is_some() {
                *slot = own;
            }
        }
        merged
    }
}

/// Why a mutation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableRejection {
    /// The mutation would raise `resource` to `attempted`, past `limit` (429).
    Exhausted {
        /// The resource.
        resource: DurableResource,
        /// Its count with the mutation.
        attempted: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The usage could not be read (503, retryable).
    Unavailable,
}

impl DurableRejection {
    /// The fixed reason name.
    pub fn reason(&self) -> &'static str {
        match self {
            DurableRejection::Exhausted { resource, .. } => resource.reason(),
            DurableRejection::Unavailable => UNAVAILABLE_REASON,
        }
    }

    /// Seconds a client should wait before retrying: the body's
    /// `retry_after_seconds` and the `Retry-After` header. Open runs close
    /// and idle registrations are swept on a minute's scale; run rows are
    /// retained, so waiting cannot clear `workflow_runs` (no hint).
    pub fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            DurableRejection::Exhausted { resource, .. } => resource.retryable().then_some(60),
            DurableRejection::Unavailable => Some(1),
        }
    }

    /// The refusal body.
    pub fn body(&self) -> Value {
        match self {
            DurableRejection::Exhausted {
                resource,
                attempted,
                limit,
            } => json!({
                "reason": resource.reason(), "resource": resource.name(),
                "current_value": attempted, "configured_limit": limit,
                "retryable": resource.retryable(),
                "retry_after_seconds": self.retry_after_seconds(),
                "message": format!("Namespace durable-state capacity for {} is exhausted.",
                    resource.name().replace('_', " ")),
            }),
            DurableRejection::Unavailable => json!({
                "reason": UNAVAILABLE_REASON, "retryable": true,
                "retry_after_seconds": self.retry_after_seconds(),
                "message": "Namespace durable-state quota could not be evaluated.",
            }),
        }
    }
}

/// Parses `DW_NAMESPACE_DURABLE_STATE_LIMITS`: comma-separated
/// `namespace:resource=limit` items, e.g. `tenant:open_workflow_runs=10`.
pub fn parse_limits(spec: &str) -> Result<HashMap<String, DurableLimits>, String> {
    let mut limits: HashMap<String, DurableLimits> = HashMap::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (scope, value) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?}: expected namespace:resource=limit"))?;
        let (namespace, resource) = scope
            .rsplit_once(':')
            .ok_or_else(|| format!("{item:?}: expected namespace:resource=limit"))?;
        let resource = DurableResource::parse(resource.trim()).ok_or_else(|| {
            let known: Vec<&str> = DurableResource::ALL.iter().map(|r| r.name()).collect();
            format!(
                "{item:?}: unknown resource {resource:?} (one of {})",
                known.join(", ")
            )
        })?;
        let limit: u64 = value
            .trim()
            .parse()
            .map_err(|_| format!("{item:?}: the limit is not a non-negative integer"))?;
        let namespace = namespace.trim();
        if namespace.is_empty() {
            return Err(format!("{item:?}: the namespace is empty"));
        }
        limits
            .entry(namespace.to_owned())
            .or_default()
            .set(resource, Some(limit));
    }
    Ok(limits)
}

/// Admits durable-state mutations of configured namespaces and counts refusals.
#[derive(Clone)]
pub struct NamespaceDurableStateQuota {
    cache: Arc<dyn Cache>,
    limits: Arc<HashMap<String, DurableLimits>>,
    defaults: DurableLimits,
}

impl NamespaceDurableStateQuota {
    /// The family of rejection counters and log-suppression keys.
    pub const PREFIX: &'static str = "server:namespace-durable-state:";
    /// Counters and log keys live two minutes, so the current minute is whole.
    pub const BUCKET_TTL: Duration = Duration::from_secs(120);
    /// Its refusal counters and log-suppression keys.
    const REJECTIONS: NamespaceRejections = NamespaceRejections {
        prefix: Self::PREFIX,
        ttl: Self::BUCKET_TTL,
    };
    /// The metric this type reports.
    pub const METRIC: &'static str = "dw_namespace_durable_state_usage";

    /// A quota over per-namespace `limits` (namespaces absent from it are
    /// unconstrained unless [`NamespaceDurableStateQuota::with_defaults`]
    /// sets server-wide limits).
    pub fn new(cache: Arc<dyn Cache>, limits: HashMap<String, DurableLimits>) -> Self {
        NamespaceDurableStateQuota {
            cache,
            limits: Arc::new(limits),
            defaults: DurableLimits::default(),
        }
    }

    /// Applies `defaults` to every namespace where its own limits are silent.
    pub fn with_defaults(mut self, defaults: DurableLimits) -> Self {
        self.defaults = defaults;
        self
    }

    /// `namespace`'s limits (its overrides over the defaults), if any.
    pub fn limits(&self, namespace: &str) -> Option<DurableLimits> {
        let own = self.limits.get(namespace).copied().unwrap_or_default();
        let merged = own.over(self.defaults);
        (!merged.is_empty()).then_some(merged)
    }

    /// Whether adding one of each of `resources` fits `namespace`'s quota,
    /// given its `usage` of the limited ones (read in the mutation's own
    /// transaction; never read when none is limited).
    /// Whether `limits` cap any of `resources` (a write that adds them
    /// must then count them under the write lock).
    pub fn limits_any(limits: Option<DurableLimits>, resources: &[DurableResource]) -> bool {
        limits.is_some() && !limited(limits, resources).is_empty()
    }

    pub fn check(
        limits: Option<DurableLimits>,
        resources: &[DurableResource],
        usage: impl FnOnce(&[DurableResource]) -> Option<DurableUsage>,
    ) -> Result<(), DurableRejection> {
        let limited = limited(limits, resources);
        let Some(limits) = limits.filter(|_| !limited.is_empty()) else {
            return Ok(());
        };
        let usage = usage(&limited).ok_or(DurableRejection::Unavailable)?;
        for resource in limited {
            if let Some(limit) = limits.get(resource) {
                let used = usage.get(resource).ok_or(DurableRejection::Unavailable)?;
                let attempted = used.saturating_add(1);
                if attempted > limit {
                    return Err(DurableRejection::Exhausted {
                        resource,
                        attempted,
                        limit,
                    });
                }
            }
        }
        Ok(())
    }

    /// Runs `mutation` inside `store`'s write transaction under `limits`:
    /// the limited ones of `resources` are counted before and after it, and
    /// its writes are undone (and the refusal returned) when it raised one
    /// of them past its limit. A mutation that holds or lowers a count, or
    /// a namespace without a limit on `resources`, is never refused and,
    /// without a limit, pays no count.
    pub fn guard<R>(
        limits: Option<DurableLimits>,
        store: &Store,
        namespace: &str,
        resources: &[DurableResource],
        mutation: impl FnOnce(&Store) -> Result<R, StoreError>,
    ) -> Result<Result<R, DurableRejection>, StoreError> {
        let limited = limited(limits, resources);
        let Some(limits) = limits.filter(|_| !limited.is_empty()) else {
            return mutation(store).map(Ok);
        };
        let Ok(before) = store.durable_usage(namespace, &limited) else {
            return Ok(Err(DurableRejection::Unavailable));
        };
        store.undoable(|s| {
            let done = mutation(s)?;
            let Ok(after) = s.durable_usage(namespace, &limited) else {
                return Ok(Err(DurableRejection::Unavailable));
            };
            for resource in limited {
                let (Some(limit), Some(was), Some(now)) = (
                    limits.get(resource),
                    before.get(resource),
                    after.get(resource),
                ) else {
                    return Ok(Err(DurableRejection::Unavailable));
                };
                if now > was && now > limit {
                    return Ok(Err(DurableRejection::Exhausted {
                        resource,
                        attempted: now,
                        limit,
                    }));
                }
            }
            Ok(Ok(done))
        })
    }

    /// Counts a refusal in its minute bucket and logs it once per
    /// (namespace, reason, minute); telemetry never fails the refusal.
    pub fn record(&self, namespace: &str, rejection: &DurableRejection) {
        let reason = rejection.reason();
        let logged = Self::REJECTIONS.record(self.cache.as_ref(), namespace, reason);
        if logged == RejectionLog::Elected {
            tracing::warn!(
                namespace,
                reason,
                "Namespace durable-state quota rejected a mutation."
            );
        }
    }

    /// The metric payload and its disclosure: limits, usage and remaining
    /// per resource, and this minute's rejections per fixed reason.
    pub fn render(
        &self,
        guard: &MetricGuard,
        namespace: &str,
        usage: Option<DurableUsage>,
    ) -> Result<(Value, Value), MetricError> {
        let reasons: Vec<&str> = DurableResource::ALL
            .iter()
            .map(|r| r.reason())
            .chain(std::iter::once(UNAVAILABLE_REASON))
            .collect();
        let disclosure = guard.disclose(
            Self::METRIC,
            [(
                "reason",
                json!({ "values": reasons, "selection": "fixed_durable_resource_inventory_plus_unavailable" }),
            )],
        )?;
        let limits = self.limits(namespace);
        let (mut limit_map, mut usage_map, mut remaining) = (Map::new(), Map::new(), Map::new());
        for resource in DurableResource::ALL {
            let limit = limits.and_then(|l| l.get(resource));
            let used = usage.and_then(|u| u.get(resource));
            limit_map.insert(resource.name().into(), json!(limit));
            usage_map.insert(resource.name().into(), json!(used));
            let left = limit.zip(used).map(|(l, u)| l.saturating_sub(u));
            remaining.insert(resource.name().into(), json!(left));
        }
        let (by_reason, total) = Self::REJECTIONS.this_minute(
            self.cache.as_ref(),
            namespace,
            &reasons,
            limits.is_some(),
        )?;
        let payload = json!({
            "configured": limits.is_some(),
            "limits": limit_map,
            "usage": usage_map,
            "remaining": remaining,
            "measurement_status": if usage.is_some() { "available" } else { "unavailable" },
            "rejections_this_minute": total,
            "rejections_by_reason": by_reason,
        });
        Ok((
            payload,
            serde_json::to_value(&disclosure).unwrap_or(Value::Null),
        ))
    }
}

/// The ones of `resources` that `limits` caps.
fn limited(limits: Option<DurableLimits>, resources: &[DurableResource]) -> Vec<DurableResource> {
    resources
        .iter()
        .copied()
        .filter(|r| limits.and_then(|l| l.get(*r)).is_some())
        .collect()
}

/// Why the metric could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum MetricError {
    /// The policy refused the disclosure.
    #[error(transparent)]
    Disclosure(#[from] DisclosureError),
    /// The counters could not be read.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn limits_parse_strictly_and_name_the_bad_item() {
        let limits =
            parse_limits("a:open_workflow_runs=2, a:workflow_runs=10,b:worker_registrations=0")
                .unwrap();
        assert_eq!(limits["a"].get(DurableResource::OpenWorkflowRuns), Some(2));
        assert_eq!(limits["a"].get(DurableResource::WorkflowRuns), Some(10));
        assert_eq!(limits["a"].get(DurableResource::WorkerRegistrations), None);
        assert_eq!(
            limits["b"].get(DurableResource::WorkerRegistrations),
            Some(0)
        );
        let bad = parse_limits("a:open_runs=2").unwrap_err();
        assert!(
            bad.contains("unknown resource") && bad.contains("open_workflow_runs"),
            "{bad}"
        );
        assert!(parse_limits("a:workflow_runs=-1").is_err());
        assert!(parse_limits("workflow_runs=1").is_err());
    }

    #[test]
    fn only_a_mutation_past_the_limit_is_refused() {
        let limits = parse_limits("a:open_workflow_runs=2").unwrap();
        let usage = |open| {
            let mut usage = DurableUsage::default();
            usage.set(DurableResource::WorkflowRuns, 100);
            usage.set(DurableResource::OpenWorkflowRuns, open);
            usage
        };
        let start = [
            DurableResource::WorkflowRuns,
            DurableResource::OpenWorkflowRuns,
        ];
        assert!(
            NamespaceDurableStateQuota::check(limits.get("a").copied(), &start, |asked| {
                // Only the limited resource is read.
                assert_eq!(asked, [DurableResource::OpenWorkflowRuns]);
                Some(usage(1))
            })
            .is_ok()
        );
        assert_eq!(
            NamespaceDurableStateQuota::check(limits.get("a").copied(), &start, |_| Some(usage(2))),
            Err(DurableRejection::Exhausted {
                resource: DurableResource::OpenWorkflowRuns,
                attempted: 3,
                limit: 2
            })
        );
        assert_eq!(
            NamespaceDurableStateQuota::check(limits.get("a").copied(), &start, |_| None),
            Err(DurableRejection::Unavailable)
        );
        // No quota: the usage is never read.
        assert!(NamespaceDurableStateQuota::check(None, &start, |_| panic!("read")).is_ok());
    }

    #[test]
    fn defaults_apply_where_a_namespace_sets_nothing() {
        let mut defaults = DurableLimits::default();
        defaults.set(DurableResource::Schedules, Some(5));
        defaults.set(DurableResource::WorkflowStreams, Some(7));
        let quota = NamespaceDurableStateQuota::new(
            Arc::new(MemoryCache::default()),
            parse_limits("a:schedules=2,a:service_catalog_entries=0").unwrap(),
        )
        .with_defaults(defaults);
        let a = quota.limits("a").unwrap();
        assert_eq!(
            a.get(DurableResource::Schedules),
            Some(2),
            "the override wins"
        );
        assert_eq!(a.get(DurableResource::WorkflowStreams), Some(7));
        assert_eq!(a.get(DurableResource::ServiceCatalogEntries), Some(0));
        let other = quota.limits("other").unwrap();
        assert_eq!(other.get(DurableResource::Schedules), Some(5));
        assert_eq!(other.get(DurableResource::WorkflowRuns), None);
        let plain =
            NamespaceDurableStateQuota::new(Arc::new(MemoryCache::default()), HashMap::new());
        assert_eq!(plain.limits("other"), None);
    }

    #[test]
    fn reasons_are_fixed_per_resource() {
        for resource in DurableResource::ALL {
            assert_eq!(
                resource.reason(),
                format!("namespace_{}_exhausted", resource.name())
            );
            assert_eq!(DurableResource::ALL[resource.index()], resource);
        }
    }

    #[test]
    fn refusals_count_per_reason_and_log_once_a_minute() {
        let cache = Arc::new(MemoryCache::default());
        let quota = NamespaceDurableStateQuota::new(
            cache.clone(),
            parse_limits("a:open_workflow_runs=1").unwrap(),
        );
        let refused = DurableRejection::Exhausted {
            resource: DurableResource::OpenWorkflowRuns,
            attempted: 2,
            limit: 1,
        };
        for _ in 0..5 {
            quota.record("a", &refused);
        }
        let logs = format!("{}rejection-log:", NamespaceDurableStateQuota::PREFIX);
        assert!((1..=2).contains(&cache.count_prefix(&logs).unwrap()));
        let guard = MetricGuard::new(crate::policy::embedded().unwrap());
        let (payload, disclosure) = quota.render(&guard, "a", None).unwrap();
        let counted = payload["rejections_by_reason"]["namespace_open_workflow_runs_exhausted"]
            .as_u64()
            .unwrap();
        assert!((1..=5).contains(&counted));
        assert_eq!(
            payload["rejections_by_reason"].as_object().unwrap().len(),
            DurableResource::ALL.len() + 1
        );
        assert_eq!(payload["measurement_status"], "unavailable");
        assert_eq!(
            disclosure["reason"]["cardinality"],
            "finite_durable_state_reasons"
        );
    }
}
