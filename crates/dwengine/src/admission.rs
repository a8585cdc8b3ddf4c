//! Admission budgets: per task queue dispatch caps and per namespace request caps.
//!
//! Both are opt-in. A queue or namespace without a configured cap writes no
//! key at all, so only operator-chosen names can create keys here, and
//! each key is either a fixed-TTL bucket or a short lock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cache::{
    hash_dimensions, minute_bucket, read_counter, tally_rejection, Cache, CacheError, RejectionLog,
};

/// Caps how many tasks each (namespace, task queue, kind) dispatches per minute.
///
/// Under a cap, concurrent polls take a short lock on the queue so that
/// reading the minute's counter and leasing a task are one step; the
/// counter is bumped only when work is actually dispatched.
#[derive(Clone)]
pub struct TaskQueueAdmission {
    cache: Arc<dyn Cache>,
    dispatches_per_minute: Option<u64>,
}

/// A held queue lock (or the absence of a cap); released on drop.
pub struct QueueLock {
    cache: Option<Arc<dyn Cache>>,
    key: String,
    token: Vec<u8>,
}

impl Drop for QueueLock {
    fn drop(&mut self) {
        if let Some(cache) = &self.cache {
            // Only the holder deletes: after a TTL expiry the key may be someone else's.
            if cache.get(&self.key).ok().flatten().as_deref() == Some(self.token.as_slice()) {
                let _ = cache.forget(&self.key);
            }
        }
    }
}

impl TaskQueueAdmission {
    /// The family of queue lock keys.
    pub const LOCK_PREFIX: &'static str = "server:task-queue-admission:";
    /// The family of dispatch counter keys.
    pub const COUNTER_PREFIX: &'static str = "server:task-queue-dispatch:";
    /// A lock outlives a crashed holder by at most this.
    pub const LOCK_TTL: Duration = Duration::from_secs(5);
    /// A minute bucket lives two minutes, so the current one is always whole.
    pub const COUNTER_TTL: Duration = Duration::from_secs(120);

    /// Admission with a per-minute cap (`None` or 0: uncapped, no keys).
    pub fn new(cache: Arc<dyn Cache>, dispatches_per_minute: Option<u64>) -> Self {
        TaskQueueAdmission {
            cache,
            dispatches_per_minute: dispatches_per_minute.filter(|n| *n > 0),
        }
    }

    fn dims(namespace: &str, task_queue: &str, kind: &str) -> String {
        hash_dimensions(&[namespace, task_queue, kind])
    }

    /// Whether queues have a dispatch cap (their polls then take the queue
    /// lock in the cache, sleeping between tries).
    pub fn capped(&self) -> bool {
        self.dispatches_per_minute.is_some()
    }

    /// Takes the queue lock, waiting up to `patience`; `None` if still contended.
    pub fn lock(
        &self,
        namespace: &str,
        task_queue: &str,
        kind: &str,
        patience: Duration,
    ) -> Result<Option<QueueLock>, CacheError> {
        if self.dispatches_per_minute.is_none() {
            return Ok(Some(QueueLock {
                cache: None,
                key: String::new(),
                token: Vec::new(),
            }));
        }
        let key = format!(
            "{}{}",
            Self::LOCK_PREFIX,
            Self::dims(namespace, task_queue, kind)
        );
        let token =
            format!("{:?}-{:?}", std::thread::current().id(), SystemTime::now()).into_bytes();
        let deadline = std::time::Instant::now() + patience;
        loop {
            if self.cache.add(&key, &token, Self::LOCK_TTL)? {
                return Ok(Some(QueueLock {
                    cache: Some(self.cache.clone()),
                    key,
                    token,
                }));
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn counter_key(namespace: &str, task_queue: &str, kind: &str) -> String {
        format!(
            "{}{}:{}",
            Self::COUNTER_PREFIX,
            Self::dims(namespace, task_queue, kind),
            minute_bucket(SystemTime::now())
        )
    }

    /// Whether this minute's budget has room (call under the lock).
    pub fn has_budget(
        &self,
        namespace: &str,
        task_queue: &str,
        kind: &str,
    ) -> Result<bool, CacheError> {
        let Some(cap) = self.dispatches_per_minute else {
            return Ok(true);
        };
        let used = read_counter(
            self.cache.as_ref(),
            &Self::counter_key(namespace, task_queue, kind),
        )?;
        Ok(used < cap)
    }

    /// The per-minute cap and this minute's dispatches of one queue and
    /// kind (`None`: uncapped). Reads the counter only; it writes no key.
    pub fn budget(
        &self,
        namespace: &str,
        task_queue: &str,
        kind: &str,
    ) -> Result<Option<(u64, u64)>, CacheError> {
        let Some(cap) = self.dispatches_per_minute else {
            return Ok(None);
        };
        let used = read_counter(
            self.cache.as_ref(),
            &Self::counter_key(namespace, task_queue, kind),
        )?;
        Ok(Some((cap, used)))
    }

    /// Counts one dispatched task (call under the lock, after leasing).
    pub fn record_dispatch(
        &self,
        namespace: &str,
        task_queue: &str,
        kind: &str,
    ) -> Result<(), CacheError> {
        if self.dispatches_per_minute.is_some() {
            self.cache.increment(
                &Self::counter_key(namespace, task_queue, kind),
                Self::COUNTER_TTL,
            )?;
        }
        Ok(())
    }
}

/// A namespace's configured request cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceLimit {
    /// Requests in flight at once.
    pub max_concurrent: u32,
    /// Requests started per minute (0: no rate cap).
    pub per_minute: u64,
}

/// Why a namespace request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespaceRejection {
    /// The minute's request budget is spent.
    RateLimited,
    /// Every concurrency slot is held.
    ConcurrencyLimited,
    /// The cache that holds the budgets could not be reached, so a capped
    /// namespace's request cannot be admitted safely (503, retryable).
    Unavailable,
}

impl NamespaceRejection {
    /// The fixed three-reason inventory of
    /// `dw_namespace_request_admission_rejections`, in report order (the
    /// reference server's names).
    pub const REASONS: [NamespaceRejection; 3] = [
        NamespaceRejection::RateLimited,
        NamespaceRejection::ConcurrencyLimited,
        NamespaceRejection::Unavailable,
    ];

    /// The reason as the metric and the refusal body name it.
    pub fn metric_reason(self) -> &'static str {
        match self {
            NamespaceRejection::RateLimited => "namespace_request_rate_exhausted",
            NamespaceRejection::ConcurrencyLimited => "namespace_request_concurrency_exhausted",
            NamespaceRejection::Unavailable => "namespace_request_admission_unavailable",
        }
    }
}

/// One namespace's admission counters for the current minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceAdmissionCounts {
    /// The configured cap, if the namespace has one.
    pub limit: Option<NamespaceLimit>,
    /// Requests counted against the rate budget this minute.
    pub requests_this_minute: u64,
    /// Rejections this minute, per reason of [`NamespaceRejection::REASONS`].
    pub rejections: [(NamespaceRejection, u64); 3],
}

/// The outcome of a namespace admission.
pub enum NamespaceAdmit {
    /// Go ahead; the slot (if any) is released when this drops.
    Admitted(Option<NamespaceSlot>),
    /// Refused.
    Rejected(NamespaceRejection),
}

/// A held concurrency slot; released on drop.
pub struct NamespaceSlot {
    cache: Arc<dyn Cache>,
    key: String,
}

impl Drop for NamespaceSlot {
    fn drop(&mut self) {
        let _ = self.cache.forget(&self.key);
    }
}

/// Caps the control-plane requests of configured namespaces.
///
/// Per configured namespace: one rate bucket and one rejection bucket per
/// reason per minute (fixed TTL), and at most `max_concurrent` slot keys,
/// because a slot is one of the numbered keys `0..max_concurrent`.
#[derive(Clone)]
pub struct NamespaceRequestAdmission {
    cache: Arc<dyn Cache>,
    limits: Arc<HashMap<String, NamespaceLimit>>,
    slot_ttl: Duration,
}

impl NamespaceRequestAdmission {
    /// The family of every namespace admission key.
    pub const PREFIX: &'static str = "server:namespace-request-admission:";
    /// Rate and rejection buckets live two minutes.
    pub const BUCKET_TTL: Duration = Duration::from_secs(120);

    /// Admission for the namespaces in `limits`; a crashed request's slot
    /// frees itself after `slot_ttl`.
    pub fn new(
        cache: Arc<dyn Cache>,
        limits: HashMap<String, NamespaceLimit>,
        slot_ttl: Duration,
    ) -> Self {
        NamespaceRequestAdmission {
            cache,
            limits: Arc::new(limits),
            slot_ttl,
        }
    }

    /// Whether requests of `namespace` are counted (a rate or concurrency
    /// cap is configured for it), so admitting one touches the cache.
    pub fn is_capped(&self, namespace: &str) -> bool {
        self.limits.contains_key(namespace)
    }

    /// Admits one request of `namespace`. A capped namespace whose budget
    /// keys cannot be read or written is refused as
    /// [`NamespaceRejection::Unavailable`] rather than let through uncounted.
    pub fn admit(&self, namespace: &str) -> Result<NamespaceAdmit, CacheError> {
        let Some(limit) = self.limits.get(namespace).copied() else {
            return Ok(NamespaceAdmit::Admitted(None));
        };
        let ns = hash_dimensions(&[namespace]);
        let minute = minute_bucket(SystemTime::now());
        match self.admit_capped(namespace, &ns, minute, limit) {
            Ok(admit) => Ok(admit),
            Err(e) => {
                tracing::warn!(namespace, reason = NamespaceRejection::Unavailable.metric_reason(), error = %e,
                    "Namespace request admission is unavailable.");
                self.reject(namespace, &ns, minute, NamespaceRejection::Unavailable)
            }
        }
    }

    fn admit_capped(
        &self,
        namespace: &str,
        ns: &str,
        minute: u64,
        limit: NamespaceLimit,
    ) -> Result<NamespaceAdmit, CacheError> {
        if limit.per_minute > 0 {
            let key = format!("{}rate:{ns}:{minute}", Self::PREFIX);
            if self.cache.increment(&key, Self::BUCKET_TTL)? > limit.per_minute {
                return self.reject(namespace, ns, minute, NamespaceRejection::RateLimited);
            }
        }
        for slot in 0..limit.max_concurrent {
            let key = format!("{}slot:{ns}:{slot}", Self::PREFIX);
            if self.cache.add(&key, b"1", self.slot_ttl)? {
                return Ok(NamespaceAdmit::Admitted(Some(NamespaceSlot {
                    cache: self.cache.clone(),
                    key,
                })));
            }
        }
        if limit.max_concurrent == 0 {
            return Ok(NamespaceAdmit::Admitted(None));
        }
        self.reject(
            namespace,
            ns,
            minute,
            NamespaceRejection::ConcurrencyLimited,
        )
    }

    fn rejection_key(ns: &str, reason: NamespaceRejection, minute: u64) -> String {
        format!(
            "{}rejected:{ns}:{}:{minute}",
            Self::PREFIX,
            reason.metric_reason()
        )
    }

    /// Counts the rejection in this minute's bucket and logs it once per
    /// (namespace, reason, minute): a log-suppression key in the same family
    /// elects the one warning. Neither write can fail the refusal itself.
    fn reject(
        &self,
        namespace: &str,
        ns: &str,
        minute: u64,
        reason: NamespaceRejection,
    ) -> Result<NamespaceAdmit, CacheError> {
        let log_key = format!(
            "{}rejection-log:{ns}:{}:{minute}",
            Self::PREFIX,
            reason.metric_reason()
        );
        let logged = tally_rejection(
            self.cache.as_ref(),
            &Self::rejection_key(ns, reason, minute),
            &log_key,
            Self::BUCKET_TTL,
        );
        match logged {
            RejectionLog::Suppressed => {}
            RejectionLog::Elected => tracing::warn!(
                namespace,
                reason = reason.metric_reason(),
                "Namespace request admission rejected a request."
            ),
            RejectionLog::Unavailable => tracing::warn!(
                namespace,
                reason = reason.metric_reason(),
                "Namespace request admission rejected a request while metrics storage was unavailable."
            ),
        }
        Ok(NamespaceAdmit::Rejected(reason))
    }

    /// `namespace`'s counters for the current minute (zeros for a namespace
    /// without a cap, which writes no keys).
    pub fn counts(&self, namespace: &str) -> Result<NamespaceAdmissionCounts, CacheError> {
        let limit = self.limits.get(namespace).copied();
        let ns = hash_dimensions(&[namespace]);
        let minute = minute_bucket(SystemTime::now());
        let mut rejections = NamespaceRejection::REASONS.map(|r| (r, 0));
        let mut requests_this_minute = 0;
        if limit.is_some() {
            let rate = format!("{}rate:{ns}:{minute}", Self::PREFIX);
            requests_this_minute = read_counter(self.cache.as_ref(), &rate)?;
            for (reason, n) in &mut rejections {
                *n = read_counter(
                    self.cache.as_ref(),
                    &Self::rejection_key(&ns, *reason, minute),
                )?;
            }
        }
        Ok(NamespaceAdmissionCounts {
            limit,
            requests_this_minute,
            rejections,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn uncapped_queues_and_namespaces_write_nothing() {
        let cache = Arc::new(MemoryCache::default());
        let queues = TaskQueueAdmission::new(cache.clone(), None);
        let lock = queues.lock("ns", "q", "workflow", Duration::ZERO).unwrap();
        assert!(lock.is_some());
        assert!(queues.has_budget("ns", "q", "workflow").unwrap());
        queues.record_dispatch("ns", "q", "workflow").unwrap();
        let namespaces =
            NamespaceRequestAdmission::new(cache.clone(), HashMap::new(), Duration::from_secs(5));
        for i in 0..100 {
            assert!(matches!(
                namespaces.admit(&format!("ns-{i}")).unwrap(),
                NamespaceAdmit::Admitted(None)
            ));
        }
        assert_eq!(cache.resident_entries(), 0);
    }

    #[test]
    fn a_capped_queue_stops_at_its_budget_and_locks_exclude() {
        let cache = Arc::new(MemoryCache::default());
        let queues = TaskQueueAdmission::new(cache.clone(), Some(2));
        for _ in 0..2 {
            let _lock = queues
                .lock("ns", "q", "activity", Duration::ZERO)
                .unwrap()
                .unwrap();
            assert!(queues
                .lock("ns", "q", "activity", Duration::ZERO)
                .unwrap()
                .is_none());
            assert!(queues.has_budget("ns", "q", "activity").unwrap());
            queues.record_dispatch("ns", "q", "activity").unwrap();
        }
        assert!(!queues.has_budget("ns", "q", "activity").unwrap());
        assert_eq!(
            cache.count_prefix(TaskQueueAdmission::LOCK_PREFIX).unwrap(),
            0
        );
        assert_eq!(
            cache
                .count_prefix(TaskQueueAdmission::COUNTER_PREFIX)
                .unwrap(),
            1
        );
    }

    #[test]
    fn slots_never_exceed_the_limit_and_free_on_drop() {
        let cache = Arc::new(MemoryCache::default());
        let limits = HashMap::from([(
            "tenant".to_owned(),
            NamespaceLimit {
                max_concurrent: 3,
                per_minute: 0,
            },
        )]);
        let admission =
            NamespaceRequestAdmission::new(cache.clone(), limits, Duration::from_secs(5));
        let mut held = Vec::new();
        for _ in 0..10 {
            if let NamespaceAdmit::Admitted(slot) = admission.admit("tenant").unwrap() {
                held.push(slot);
            }
        }
        assert_eq!(held.len(), 3);
        let slot_prefix = &format!("{}slot:", NamespaceRequestAdmission::PREFIX);
        assert_eq!(cache.count_prefix(slot_prefix).unwrap(), 3);
        held.clear();
        assert_eq!(cache.count_prefix(slot_prefix).unwrap(), 0);
    }
}

#[cfg(test)]
mod rejection_tests {
    use super::*;
    use crate::cache::MemoryCache;

    use crate::cache::UnreachableCache as DownCache;

    fn limits(max_concurrent: u32, per_minute: u64) -> HashMap<String, NamespaceLimit> {
        HashMap::from([(
            "tenant".to_owned(),
            NamespaceLimit {
                max_concurrent,
                per_minute,
            },
        )])
    }

    #[test]
    fn an_unreachable_cache_refuses_a_capped_namespace_as_unavailable() {
        let admission = NamespaceRequestAdmission::new(
            Arc::new(DownCache),
            limits(1, 10),
            Duration::from_secs(5),
        );
        assert!(matches!(
            admission.admit("tenant").unwrap(),
            NamespaceAdmit::Rejected(NamespaceRejection::Unavailable)
        ));
        // An uncapped namespace never touches the cache.
        assert!(matches!(
            admission.admit("other").unwrap(),
            NamespaceAdmit::Admitted(None)
        ));
    }

    #[test]
    fn each_reason_counts_this_minute_and_logs_once() {
        let cache = Arc::new(MemoryCache::default());
        let admission =
            NamespaceRequestAdmission::new(cache.clone(), limits(1, 0), Duration::from_secs(5));
        let held = admission.admit("tenant").unwrap();
        assert!(matches!(held, NamespaceAdmit::Admitted(Some(_))));
        for _ in 0..5 {
            assert!(matches!(
                admission.admit("tenant").unwrap(),
                NamespaceAdmit::Rejected(NamespaceRejection::ConcurrencyLimited)
            ));
        }
        let counts = admission.counts("tenant").unwrap();
        let by_reason: Vec<(&str, u64)> = counts
            .rejections
            .iter()
            .map(|(r, n)| (r.metric_reason(), *n))
            .collect();
        // A minute boundary during the loop can split the count; it never grows it.
        assert!(by_reason[1].1 >= 1 && by_reason[1].1 <= 5, "{by_reason:?}");
        assert_eq!(
            (by_reason[0], by_reason[2]),
            (
                ("namespace_request_rate_exhausted", 0),
                ("namespace_request_admission_unavailable", 0)
            )
        );
        let logs = format!("{}rejection-log:", NamespaceRequestAdmission::PREFIX);
        assert!((1..=2).contains(&cache.count_prefix(&logs).unwrap()));
        let quiet = admission.counts("elsewhere").unwrap();
        assert!(quiet.limit.is_none());
        assert!(quiet.rejections.iter().all(|(_, n)| *n == 0));
    }
}
