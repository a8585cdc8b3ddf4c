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
