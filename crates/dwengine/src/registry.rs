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
