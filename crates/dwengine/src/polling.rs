//! Worker long-poll coordination: wake signals and the poll-pass scan caps.
//!
//! A long poll that finds no task waits for a wake signal instead of
//! re-querying the store in a tight loop; with a shared cache the signal
//! crosses nodes, so work enqueued on one node wakes a poller held by
//! another. The recovery scans each poll pass runs are capped here so an
//! old backlog cannot turn every poll into a slow one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{hash_dimensions, Cache, CacheError};

/// Wakes long-polling workers when work arrives on a channel.
///
/// One expiring key per wake channel touched during the TTL window; the
/// channel is hashed so user-chosen namespace and queue names never reach
/// the key, and no index of channels is kept.
#[derive(Clone)]
pub struct LongPollSignalStore {
    cache: Arc<dyn Cache>,
    ttl: Duration,
}

impl LongPollSignalStore {
    /// The family every wake key belongs to.
    pub const PREFIX: &'static str = "server:long-poll-signal:";
    /// How long a wake signal stays visible to pollers.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

    /// A store writing to `cache` with the default TTL.
    pub fn new(cache: Arc<dyn Cache>) -> Self {
        Self::with_ttl(cache, Self::DEFAULT_TTL)
    }

    /// A store whose signals live for `ttl`.
    pub fn with_ttl(cache: Arc<dyn Cache>, ttl: Duration) -> Self {
        LongPollSignalStore { cache, ttl }
    }

    /// The wake key of (namespace, task queue, channel).
    pub fn key(namespace: &str, task_queue: &str, channel: &str) -> String {
        format!(
            "{}{}",
            Self::PREFIX,
            hash_dimensions(&[namespace, task_queue, channel])
        )
    }

    /// Records that work arrived; a repeat signal overwrites the same key.
    pub fn signal(
        &self,
        namespace: &str,
        task_queue: &str,
        channel: &str,
    ) -> Result<(), CacheError> {
        let key = Self::key(namespace, task_queue, channel);
        let version = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        self.cache.put(&key, &version.to_be_bytes(), self.ttl)
    }

    /// The latest signal on a channel, if one is live; pollers wait for it to change.
    pub fn version(
        &self,
        namespace: &str,
        task_queue: &str,
        channel: &str,
    ) -> Result<Option<Vec<u8>>, CacheError> {
        self.cache.get(&Self::key(namespace, task_queue, channel))
    }
}

/// Whether the shared polling cache answers, probed without writing.
///
/// A long poll waits on wake signals read from the cache; when the cache is
/// unreachable it would wait blind. Before a poll starts waiting it reads
/// one fixed key address: the read either answers (the key is never
/// written, so the answer is "absent") or fails. The probe writes nothing
/// and retains nothing, however many polls probe.
pub struct ServerPollingCache;

impl ServerPollingCache {
    /// The family of the probe's key address.
    pub const PREFIX: &'static str = "server:polling-cache:";

    /// The one key address every probe reads (never written).
    pub fn probe_key() -> String {
        format!("{}availability", Self::PREFIX)
    }

    /// Whether `cache` answered a read of the probe address.
    pub fn available(cache: &dyn Cache) -> bool {
        cache.get(&Self::probe_key()).is_ok()
    }
}

/// Serialises SQLite worker poll claims behind one cache lock.
///
/// SQLite has one writer: concurrent pollers that each try to claim a
/// task only queue up behind each other, and on several nodes sharing one
/// file they contend for the write lock (busy waits, retries). The gate is
/// one short-lived singleton lock key; a poll pass takes it before its
/// claim transaction and drops it right after, so at most one claim probe
/// runs at a time across every node sharing the cache. A pass that cannot
/// take it within its patience claims nothing this pass (the poll waits
/// for the next wake, as after an empty pass). It counts probes so its
/// effect can be measured.
pub struct WorkerPollClaimGate {
    cache: Arc<dyn Cache>,
    enabled: bool,
    token: String,
    probes: AtomicU64,
    empty_probes: AtomicU64,
    skipped: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
}

/// What the gate counted since the node started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ClaimGateStats {
    /// Claim transactions run.
    pub probes: u64,
    /// Of those, the ones that found no task.
    pub empty_probes: u64,
    /// Passes that gave up waiting for the gate.
    pub skipped: u64,
    /// The most claim transactions this node ran at once.
    pub max_in_flight: u64,
}

/// A held gate (or a pass through a disabled one); dropping it releases.
pub struct ClaimPermit<'a> {
    gate: &'a WorkerPollClaimGate,
    locked: bool,
}

impl Drop for ClaimPermit<'_> {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.locked {
            let key = WorkerPollClaimGate::key();
            // Only the holder deletes: after a TTL expiry the key may be another's.
            if self.gate.cache.get(&key).ok().flatten().as_deref()
                == Some(self.gate.token.as_bytes())
            {
                let _ = self.gate.cache.forget(&key);
            }
        }
    }
}

impl ClaimPermit<'_> {
    /// Records whether the claim found a task.
    pub fn claimed(&self, found: bool) {
        self.gate.probes.fetch_add(1, Ordering::Relaxed);
        if !found {
            self.gate.empty_probes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl WorkerPollClaimGate {
    /// The family of the singleton lock key.
    pub const PREFIX: &'static str = "server:sqlite-worker-poll-claim:";
    /// How long the lock lives if its holder dies mid-claim.
    pub const TTL: Duration = Duration::from_secs(2);
    const RETRY: Duration = Duration::from_millis(1);

    /// A gate on `cache` for node `node` (`enabled`: take the lock).
    pub fn new(cache: Arc<dyn Cache>, node: &str, enabled: bool) -> Self {
        WorkerPollClaimGate {
            cache,
            enabled,
            token: format!("{node}:{}", std::process::id()),
            probes: AtomicU64::new(0),
            empty_probes: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
        }
    }

    fn key() -> String {
        format!("{}lock", Self::PREFIX)
    }

    /// Whether passes take the lock.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Enters the gate, waiting up to `patience`; `None` when it stayed busy.
    pub fn enter(&self, patience: Duration) -> Result<Option<ClaimPermit<'_>>, CacheError> {
        if self.enabled {
            let began = std::time::Instant::now();
            while !self
                .cache
                .add(&Self::key(), self.token.as_bytes(), Self::TTL)?
            {
                if began.elapsed() >= patience {
                    self.skipped.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                std::thread::sleep(Self::RETRY);
            }
        }
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        Ok(Some(ClaimPermit {
            gate: self,
            locked: self.enabled,
        }))
    }

    /// The counts so far.
    pub fn stats(&self) -> ClaimGateStats {
        ClaimGateStats {
            probes: self.probes.load(Ordering::Relaxed),
            empty_probes: self.empty_probes.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
        }
    }
}

/// The scan caps of one workflow-task poll pass.
///
/// Each pass first fires timers that came due while no worker was polling
/// (scoped to the polled namespace, task queue and the poller's build-id
/// compatibility cohort) and returns expired
/// workflow-task leases to the queue; both scans are capped so an old
/// backlog is worked off a few rows per pass instead of in one slow poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkflowTaskPoller {
    /// Due timers fired per poll pass.
    pub due_timer_recovery_scan_limit: usize,
    /// Expired workflow-task leases recovered per pass.
    pub expired_workflow_task_recovery_scan_limit: usize,
}

impl WorkflowTaskPoller {
    /// The configuration key of the due-timer recovery cap.
    pub const DUE_TIMER_SCAN_LIMIT_KEY: &'static str =
        "server.polling.due_timer_recovery_scan_limit";
    /// The configuration key of the expired-lease recovery cap.
    pub const EXPIRED_TASK_SCAN_LIMIT_KEY: &'static str =
        "server.polling.expired_workflow_task_recovery_scan_limit";
    /// Both caps' default.
    pub const DEFAULT_SCAN_LIMIT: usize = 5;

    /// Caps read from `lookup` (config key → value); 0 or absent means the default.
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>) -> Self {
        let read = |key| {
            lookup(key)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT)
        };
        WorkflowTaskPoller {
            due_timer_recovery_scan_limit: read(Self::DUE_TIMER_SCAN_LIMIT_KEY),
            expired_workflow_task_recovery_scan_limit: read(Self::EXPIRED_TASK_SCAN_LIMIT_KEY),
        }
    }
}

impl WorkflowTaskPoller {
    /// The family of duplicate-recovery suppression keys.
    pub const RECOVERY_PREFIX: &'static str = "server:workflow-task-expired-lease-recovery:";

    /// Claims the recovery of expired task `task_id`: false when another
    /// pass (on any node sharing the cache) claimed it within `ttl`.
    pub fn claim_recovery(
        &self,
        cache: &dyn Cache,
        task_id: i64,
        ttl: Duration,
    ) -> Result<bool, CacheError> {
        let key = format!("{}{task_id}", Self::RECOVERY_PREFIX);
        cache.add(&key, b"1", ttl)
    }
}

impl Default for WorkflowTaskPoller {
    fn default() -> Self {
        Self::from_config(|_| None)
    }
}

/// The scan cap of one activity-task poll pass.
///
/// An activity worker that dies holding a lease would otherwise strand its
/// run: each activity poll pass returns at most this many expired activity
/// leases to their queues (oldest expiry first, an index walk), reusing
/// the per-task duplicate-recovery suppression of workflow tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivityTaskPoller {
    /// Expired activity-task leases recovered per pass.
    pub expired_activity_task_recovery_scan_limit: usize,
}

impl ActivityTaskPoller {
    /// The configuration key of the expired activity-lease recovery cap.
    pub const EXPIRED_TASK_SCAN_LIMIT_KEY: &'static str =
        "server.polling.expired_activity_task_recovery_scan_limit";

    /// The cap read from `lookup`; 0 or absent means the default (5).
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>) -> Self {
        ActivityTaskPoller {
            expired_activity_task_recovery_scan_limit: lookup(Self::EXPIRED_TASK_SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(WorkflowTaskPoller::DEFAULT_SCAN_LIMIT),
        }
    }
}

impl Default for ActivityTaskPoller {
    fn default() -> Self {
        Self::from_config(|_| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn churned_channels_leave_one_key_each_and_hide_their_names() {
        let cache = Arc::new(MemoryCache::default());
        let store = LongPollSignalStore::new(cache.clone());
        for _ in 0..3 {
            for queue in 0..50 {
                store
                    .signal("tenant-a", &format!("queue-{queue}"), "workflow")
                    .unwrap();
            }
        }
        assert_eq!(cache.count_prefix(LongPollSignalStore::PREFIX).unwrap(), 50);
        assert!(store
            .version("tenant-a", "queue-7", "workflow")
            .unwrap()
            .is_some());
        assert!(!LongPollSignalStore::key("tenant-a", "q", "c").contains("tenant-a"));
    }

    #[test]
    fn the_availability_probe_reads_one_address_and_writes_nothing() {
        let cache = MemoryCache::default();
        for _ in 0..1000 {
            assert!(ServerPollingCache::available(&cache));
        }
        assert_eq!(cache.count_prefix(ServerPollingCache::PREFIX).unwrap(), 0);
        assert!(!ServerPollingCache::available(
            &crate::cache::UnreachableCache
        ));
    }

    #[test]
    fn scan_caps_default_to_five_and_read_their_keys() {
        assert_eq!(
            WorkflowTaskPoller::default().due_timer_recovery_scan_limit,
            5
        );
        let poller = WorkflowTaskPoller::from_config(|key| {
            (key == WorkflowTaskPoller::EXPIRED_TASK_SCAN_LIMIT_KEY).then_some(2)
        });
        assert_eq!(poller.expired_workflow_task_recovery_scan_limit, 2);
        assert_eq!(poller.due_timer_recovery_scan_limit, 5);
    }
}
