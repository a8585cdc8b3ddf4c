//! Shared service-call budgets (`shared_service_boundary_admission`).
//!
//! A service call (a Nexus operation executed through the service catalog)
//! crosses from a caller namespace into an invoked boundary: the target
//! namespace's endpoint, service and operation. Operators cap how many
//! calls per window a caller namespace may make in all, and how many it may
//! make into one boundary (the server-wide budget, narrowed by an
//! operation's own `boundary_policy.rate_limit.requests_per_minute`). The
//! budgets are counted in the shared cache, so every node of a deployment
//! spends the same budget.
//!
//! Growth is bounded by construction: a counter is a fixed-window bucket
//! whose TTL (two windows) starts when the bucket is created and is never
//! extended; every user-derived dimension (caller namespace, target
//! namespace, endpoint, service, operation) is hashed into the key; no index
//! of callers or boundaries is kept; and a call under no configured budget
//! touches the cache not at all, so uncapped traffic creates no keys.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::cache::{hash_dimensions, Cache, CacheError};

/// The configured budgets (`server.service_boundary.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceBoundaryBudgets {
    /// Calls per window one caller namespace may make in all (`None`: uncapped).
    pub per_namespace: Option<u64>,
    /// Calls per window one caller namespace may make into one boundary
    /// (`None`: uncapped unless the operation sets its own).
    pub per_boundary: Option<u64>,
    /// The budget window (one minute; tests shorten it).
    pub window: Duration,
}

impl Default for ServiceBoundaryBudgets {
    fn default() -> Self {
        ServiceBoundaryBudgets {
            per_namespace: None,
            per_boundary: None,
            window: Duration::from_secs(60),
        }
    }
}

impl ServiceBoundaryBudgets {
    /// The configuration key of the caller-namespace budget.
    pub const PER_NAMESPACE_KEY: &'static str =
        "server.service_boundary.max_requests_per_minute_per_namespace";
    /// The configuration key of the per-boundary budget.
    pub const PER_BOUNDARY_KEY: &'static str =
        "server.service_boundary.max_requests_per_minute_per_boundary";
}

/// The invoked boundary of one call, as configured names (never keys).
#[derive(Debug, Clone, Copy)]
pub struct Boundary<'a> {
    /// The authenticated caller whose budget is spent: the token's id (and
    /// the namespace a bound token calls as), or, without authentication,
    /// the registered caller namespace the body names.
    pub caller: &'a str,
    /// The catalog's namespace.
    pub target_namespace: &'a str,
    /// The endpoint.
    pub endpoint: &'a str,
    /// The service.
    pub service: &'a str,
    /// The operation.
    pub operation: &'a str,
}

/// Which budget refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    /// The caller namespace's budget over every boundary.
    CallerNamespace,
    /// The caller's budget into this one boundary.
    Boundary,
}

/// Why a call was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundaryRefusal {
    /// A budget of this window is spent.
    RateLimited {
        /// The budget that refused.
        scope: BudgetScope,
        /// Its calls per window.
        limit: u64,
        /// Calls counted in the window, this one included.
        observed: u64,
        /// Seconds until the window ends (at least 1).
        retry_after_seconds: u64,
    },
    /// A budget is configured but the cache holding it cannot be reached:
    /// the call is refused rather than let through uncounted.
    Unavailable,
}

/// Admits service calls against the configured budgets.
#[derive(Clone)]
pub struct SharedServiceBoundaryPolicy {
    cache: Arc<dyn Cache>,
    budgets: ServiceBoundaryBudgets,
}

impl SharedServiceBoundaryPolicy {
    /// The family of every service-boundary key.
    pub const PREFIX: &'static str = "server:service-boundary:";
    /// The policy name refusals carry (as the reference server's).
    pub const POLICY_NAME: &'static str = "server.shared-service-boundary";

    /// A policy over `cache` with `budgets` (zero budgets count as none).
    pub fn new(cache: Arc<dyn Cache>, budgets: ServiceBoundaryBudgets) -> Self {
        let positive = |n: Option<u64>| n.filter(|n| *n > 0);
        SharedServiceBoundaryPolicy {
            cache,
            budgets: ServiceBoundaryBudgets {
                per_namespace: positive(budgets.per_namespace),
                per_boundary: positive(budgets.per_boundary),
                window: budgets.window.max(Duration::from_secs(1)),
            },
        }
    }

    /// The budgets in force.
    pub fn budgets(&self) -> ServiceBoundaryBudgets {
        self.budgets
    }

    /// How long a counter lives: two windows, so the current one is whole.
    pub fn counter_ttl(&self) -> Duration {
        self.budgets.window * 2
    }

    /// The caller's counter over every boundary, of window `bucket`.
    pub fn namespace_key(caller: &str, bucket: u64) -> String {
        format!(
            "{}namespace-rate:{}:{bucket}",
            Self::PREFIX,
            hash_dimensions(&[caller])
        )
    }

    /// The boundary counter of window `bucket`.
    pub fn boundary_key(boundary: &Boundary<'_>, bucket: u64) -> String {
        format!(
            "{}rate:{}:{bucket}",
            Self::PREFIX,
            hash_dimensions(&[
                boundary.caller,
                boundary.target_namespace,
                boundary.endpoint,
                boundary.service,
                boundary.operation,
            ])
        )
    }

    /// The boundary budget of a call into an operation whose own limit is
    /// `operation_limit`: the smaller of it and the server-wide one.
    pub fn boundary_limit(&self, operation_limit: Option<u64>) -> Option<u64> {
        match (
            operation_limit.filter(|n| *n > 0),
            self.budgets.per_boundary,
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Admits one call: counts it in each configured budget's current
    /// window and refuses it past either. A call with no budget reads and
    /// writes nothing. A refused call still counts in the window it was
    /// refused in (the counters are atomic increments, never rolled back).
    pub fn admit(
        &self,
        boundary: &Boundary<'_>,
        operation_limit: Option<u64>,
    ) -> Result<(), BoundaryRefusal> {
        let boundary_limit = self.boundary_limit(operation_limit);
        if self.budgets.per_namespace.is_none() && boundary_limit.is_none() {
            return Ok(());
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let window = self.budgets.window.as_secs().max(1);
        let bucket = now.as_secs() / window;
        let retry_after_seconds = (window - now.as_secs() % window).max(1);
        let count = |key: String| -> Result<u64, BoundaryRefusal> {
            self.cache
                .increment(&key, self.counter_ttl())
                .map_err(|e: CacheError| {
                    tracing::warn!(error = %e, reason = "service_boundary_admission_unavailable",
                        "Service-call budgets cannot be read; the call is refused.");
                    BoundaryRefusal::Unavailable
                })
        };
        let budgets = [
            (
                BudgetScope::CallerNamespace,
                self.budgets.per_namespace,
                Self::namespace_key(boundary.caller, bucket),
            ),
            (
                BudgetScope::Boundary,
                boundary_limit,
                Self::boundary_key(boundary, bucket),
            ),
        ];
        for (scope, limit, key) in budgets {
            let Some(limit) = limit else { continue };
            let observed = count(key)?;
            if observed > limit {
                return Err(BoundaryRefusal::RateLimited {
                    scope,
                    limit,
                    observed,
                    retry_after_seconds,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{MemoryCache, UnreachableCache};

    const CALL: Boundary<'static> = Boundary {
        caller: "tenant-secret",
        target_namespace: "payments-secret",
        endpoint: "billing-endpoint",
        service: "invoices-service",
        operation: "charge-operation",
    };

    fn policy(
        cache: Arc<dyn Cache>,
        per_namespace: u64,
        per_boundary: u64,
    ) -> SharedServiceBoundaryPolicy {
        SharedServiceBoundaryPolicy::new(
            cache,
            ServiceBoundaryBudgets {
                per_namespace: Some(per_namespace),
                per_boundary: Some(per_boundary),
                window: Duration::from_secs(3600),
            },
        )
    }

    #[test]
    fn keys_carry_hashes_never_the_names() {
        let keys = [
            SharedServiceBoundaryPolicy::namespace_key(CALL.caller, 7),
            SharedServiceBoundaryPolicy::boundary_key(&CALL, 7),
        ];
        for key in &keys {
            assert!(
                key.starts_with(SharedServiceBoundaryPolicy::PREFIX),
                "{key}"
            );
            for name in [
                "tenant", "payments", "billing", "invoices", "charge", "secret",
            ] {
                assert!(!key.contains(name), "{key} holds {name}");
            }
        }
        // Each dimension changes the boundary key.
        let mut other = CALL;
        other.operation = "refund-operation";
        assert_ne!(
            SharedServiceBoundaryPolicy::boundary_key(&other, 7),
            keys[1]
        );
        other = CALL;
        other.caller = "tenant-b";
        assert_ne!(
            SharedServiceBoundaryPolicy::boundary_key(&other, 7),
            keys[1]
        );
    }

    #[test]
    fn uncapped_calls_touch_no_cache_at_all() {
        let down: Arc<dyn Cache> = Arc::new(UnreachableCache);
        let uncapped =
            SharedServiceBoundaryPolicy::new(down.clone(), ServiceBoundaryBudgets::default());
        for _ in 0..100 {
            assert_eq!(uncapped.admit(&CALL, None), Ok(()));
        }
        // Zero budgets are no budgets.
        let zero = SharedServiceBoundaryPolicy::new(
            down.clone(),
            ServiceBoundaryBudgets {
                per_namespace: Some(0),
                per_boundary: Some(0),
                ..ServiceBoundaryBudgets::default()
            },
        );
        assert_eq!(zero.admit(&CALL, Some(0)), Ok(()));
        // A capped call on a cache that cannot answer is refused.
        assert_eq!(
            policy(down, 5, 5).admit(&CALL, None),
            Err(BoundaryRefusal::Unavailable)
        );
    }

    #[test]
    fn the_budget_admits_its_limit_and_refuses_the_next() {
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let p = policy(cache.clone(), 10, 3);
        for _ in 0..3 {
            assert_eq!(p.admit(&CALL, None), Ok(()));
        }
        match p.admit(&CALL, None) {
            Err(BoundaryRefusal::RateLimited {
                scope: BudgetScope::Boundary,
                limit: 3,
                observed: 4,
                retry_after_seconds,
            }) => assert!((1..=3600).contains(&retry_after_seconds)),
            other => panic!("{other:?}"),
        }
        // Another boundary of the same caller has its own budget, until
        // the caller's namespace budget (10, refusals included) is spent.
        let mut other = CALL;
        other.operation = "refund";
        for _ in 0..3 {
            assert_eq!(p.admit(&other, None), Ok(()));
        }
        let mut third = CALL;
        third.service = "ledger";
        // Calls 8, 9 and 10 of the caller (four so far into CALL, refusal
        // included, and three into `other`).
        for _ in 0..3 {
            assert_eq!(p.admit(&third, None), Ok(()));
        }
        assert!(matches!(
            p.admit(&third, None),
            Err(BoundaryRefusal::RateLimited {
                scope: BudgetScope::CallerNamespace,
                limit: 10,
                observed: 11,
                ..
            })
        ));
        // One namespace counter plus one counter per boundary touched.
        assert_eq!(
            cache
                .count_prefix(SharedServiceBoundaryPolicy::PREFIX)
                .unwrap(),
            4
        );
    }

    #[test]
    fn an_operation_limit_narrows_the_server_budget_never_widens_it() {
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let p = policy(cache.clone(), 100, 5);
        assert_eq!(p.boundary_limit(Some(2)), Some(2));
        assert_eq!(p.boundary_limit(Some(50)), Some(5));
        assert_eq!(p.boundary_limit(None), Some(5));
        assert_eq!(p.boundary_limit(Some(0)), Some(5));
        let only_operation =
            SharedServiceBoundaryPolicy::new(cache, ServiceBoundaryBudgets::default());
        assert_eq!(only_operation.boundary_limit(Some(2)), Some(2));
        assert_eq!(only_operation.boundary_limit(None), None);
        assert_eq!(only_operation.admit(&CALL, Some(1)), Ok(()));
        assert!(only_operation.admit(&CALL, Some(1)).is_err());
    }
}
