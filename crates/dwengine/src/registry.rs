//! The worker registry's growth bound: idle registrations are swept.
//!
//! Every (namespace, worker id) that heartbeats gets a row, and worker ids
//! are chosen by clients, so without a sweep the table keeps one row per id
//! ever seen. Each heartbeat deletes at most `scan_limit` registrations
//! idle longer than `idle_after`, oldest first through an index, so the
//! table holds the workers seen within the idle window plus a backlog
//! that every heartbeat shrinks, and no heartbeat pays for a large sweep.

use std::time::Duration;

/// The idle-registration sweep run by each heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleWorkerSweep {
    /// Registrations deleted per heartbeat at most.
    pub idle_worker_prune_scan_limit: usize,
    /// A registration without a heartbeat for this long is idle.
    pub idle_after: Duration,
}

impl IdleWorkerSweep {
    /// The configuration key of the per-heartbeat sweep cap.
    pub const SCAN_LIMIT_KEY: &'static str = "server.workers.idle_worker_prune_scan_limit";
    /// The sweep cap's default.
    pub const DEFAULT_SCAN_LIMIT: usize = 100;
    /// How long a worker may go without a heartbeat by default.
    pub const DEFAULT_IDLE_AFTER: Duration = Duration::from_secs(600);

    /// The cap read from `lookup` (0 or absent: the default), with `idle_after`.
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>, idle_after: Duration) -> Self {
        IdleWorkerSweep {
            idle_worker_prune_scan_limit: lookup(Self::SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT),
            idle_after,
        }
    }

    /// The heartbeat time before which a registration is idle.
    pub fn idle_before_ms(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(i64::try_from(self.idle_after.as_millis()).unwrap_or(i64::MAX))
    }
}

impl Default for IdleWorkerSweep {
    fn default() -> Self {
        Self::from_config(|_| None, Self::DEFAULT_IDLE_AFTER)
    }
}

/// Sticky execution's settings: how long a run's ready workflow task waits
/// for the worker that caches the run, and the sweep of expired claims.
///
/// A claim (one `sticky_bindings` row per run) lives as long as the
/// worker's cache entry, at most [`StickyExecution::MAX_TTL_SECONDS`];
/// each worker heartbeat (and registration) deletes at most
/// `sticky_binding_prune_scan_limit` expired claims, oldest expiry first
/// through an index, in the same transaction as its idle-worker sweep.
/// Neither SDK sends a schedule-to-start timeout of its own for sticky
/// tasks, so the hold is the server's (`DW_STICKY_SCHEDULE_TO_START_MS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StickyExecution {
    /// Expired claims deleted per heartbeat at most.
    pub sticky_binding_prune_scan_limit: usize,
    /// How long a ready task waits for its run's caching worker.
    pub schedule_to_start: Duration,
}

impl StickyExecution {
    /// The configuration key of the per-heartbeat sweep cap.
    pub const SCAN_LIMIT_KEY: &'static str = "server.workers.sticky_binding_prune_scan_limit";
    /// The sweep cap's default.
    pub const DEFAULT_SCAN_LIMIT: usize = 100;
    /// The hold's default.
    pub const DEFAULT_SCHEDULE_TO_START: Duration = Duration::from_secs(5);
    /// The longest claim a worker may ask for (both SDKs' cache TTL bound).
    pub const MAX_TTL_SECONDS: u64 = 3600;

    /// The cap read from `lookup` (0 or absent: the default), with the hold.
    pub fn from_config(
        lookup: impl Fn(&str) -> Option<usize>,
        schedule_to_start: Duration,
    ) -> Self {
        StickyExecution {
            sticky_binding_prune_scan_limit: lookup(Self::SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT),
            schedule_to_start,
        }
    }

    /// The hold in milliseconds.
    pub fn hold_ms(&self) -> i64 {
        i64::try_from(self.schedule_to_start.as_millis()).unwrap_or(i64::MAX)
    }
}

impl Default for StickyExecution {
    fn default() -> Self {
        Self::from_config(|_| None, Self::DEFAULT_SCHEDULE_TO_START)
    }
}

/// The sweep of ended worker sessions.
///
/// A session row lives until its TTL (at most a day) plus an hour of grace
/// (so an ended session's id is refused, not recreated, meanwhile); each
/// worker heartbeat (and registration) deletes at most
/// `worker_session_prune_scan_limit` rows past that, oldest TTL first
/// through an index, in the same transaction as its idle-worker sweep. A
/// namespace keeps at most [`crate::store::sessions::MAX_NAMESPACE_SESSIONS`]
/// rows and a worker holds at most the sessions it offered (at most
/// [`crate::store::sessions::MAX_WORKER_SESSIONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerSessionSweep {
    /// Ended sessions deleted per heartbeat at most.
    pub worker_session_prune_scan_limit: usize,
}

impl WorkerSessionSweep {
    /// The configuration key of the per-heartbeat sweep cap.
    pub const SCAN_LIMIT_KEY: &'static str = "server.workers.worker_session_prune_scan_limit";
    /// The sweep cap's default.
    pub const DEFAULT_SCAN_LIMIT: usize = 100;

    /// The cap read from `lookup` (0 or absent: the default).
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>) -> Self {
        WorkerSessionSweep {
            worker_session_prune_scan_limit: lookup(Self::SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT),
        }
    }
}

impl Default for WorkerSessionSweep {
    fn default() -> Self {
        Self::from_config(|_| None)
    }
}

/// Elects one registration refresh per worker per write interval.
///
/// Every heartbeat used to rewrite its worker's registration row. Workers
/// heartbeat every 30 seconds on every node they talk to, so the store took
/// one write per heartbeat. Now one expiring throttle key per (namespace,
/// worker) elects, across all processes sharing the cache, the heartbeat
/// that refreshes the row (the compatibility fleet's view of the worker)
/// once per write interval, a third of the staleness bound; the others
/// only check the registration with a read. The key expires at the end of
/// its interval, and no index of workers is kept.
pub struct WorkerCompatibilityHeartbeatRecorder {
    cache: std::sync::Arc<dyn crate::cache::Cache>,
    write_interval: Duration,
}

impl WorkerCompatibilityHeartbeatRecorder {
    /// The family of throttle keys.
    pub const PREFIX: &'static str = "server:worker-compatibility-heartbeat:";

    /// Elects one refresh per `stale_after / 3` (at least one second).
    pub fn new(cache: std::sync::Arc<dyn crate::cache::Cache>, stale_after: Duration) -> Self {
        WorkerCompatibilityHeartbeatRecorder {
            cache,
            write_interval: (stale_after / 3).max(Duration::from_secs(1)),
        }
    }

    /// How long one election holds.
    pub fn write_interval(&self) -> Duration {
        self.write_interval
    }

    fn key(namespace: &str, worker_id: &str) -> String {
        format!(
            "{}{}",
            Self::PREFIX,
            crate::cache::hash_dimensions(&[namespace, worker_id])
        )
    }

    /// Whether this heartbeat of `worker_id` refreshes the registration.
    pub fn elect(
        &self,
        namespace: &str,
        worker_id: &str,
    ) -> Result<bool, crate::cache::CacheError> {
        self.cache
            .add(&Self::key(namespace, worker_id), b"1", self.write_interval)
    }

    /// Drops an election (the worker turned out not to be registered).
    pub fn forget(&self, namespace: &str, worker_id: &str) -> Result<(), crate::cache::CacheError> {
        self.cache
            .forget(&Self::key(namespace, worker_id))
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Cache, MemoryCache};
    use std::sync::Arc;

    #[test]
    fn one_heartbeat_per_worker_and_interval_is_elected() {
        let cache = Arc::new(MemoryCache::default());
        let recorder =
            WorkerCompatibilityHeartbeatRecorder::new(cache.clone(), Duration::from_secs(90));
        assert_eq!(recorder.write_interval(), Duration::from_secs(30));
        assert!(recorder.elect("ns", "w1").unwrap());
        assert!(!recorder.elect("ns", "w1").unwrap(), "throttled");
        assert!(recorder.elect("ns", "w2").unwrap(), "per worker");
        assert!(recorder.elect("other", "w1").unwrap(), "per namespace");
        assert_eq!(
            cache
                .count_prefix(WorkerCompatibilityHeartbeatRecorder::PREFIX)
                .unwrap(),
            3
        );
        let short = WorkerCompatibilityHeartbeatRecorder::new(cache, Duration::ZERO);
        assert_eq!(short.write_interval(), Duration::from_secs(1));
    }
}
