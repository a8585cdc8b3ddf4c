//! The query-task formulas: timeout, retention window, lease, marker TTL
//! and the per-queue pending cap, each computed from configuration in one
//! place so the tests pin every edge the bounded-growth seed names.

use std::time::Duration;

/// How long a queue lock lives (a guard against a holder that dies).
pub const QUEUE_LOCK_TTL: Duration = Duration::from_secs(10);
/// The pending cap per (namespace, task queue) when none is configured.
pub const DEFAULT_MAX_PENDING_PER_QUEUE: u64 = 1024;
/// The pending cap's hard clamp.
pub const MAX_PENDING_PER_QUEUE_CLAMP: u64 = 10_000;

/// `server.query_tasks.*` and the two settings they derive from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryTaskSettings {
    /// `server.query_tasks.ttl_seconds`: the least retention of task and queue keys.
    pub ttl_seconds: u64,
    /// `server.query_tasks.timeout` in seconds as configured (may be
    /// negative; clamped to 0); `None` derives it from the polling timeout.
    pub timeout_seconds: Option<i64>,
    /// `server.query_tasks.lease_timeout` in seconds (0 counts as 1).
    pub lease_timeout_seconds: u64,
    /// `server.query_tasks.max_pending_per_queue` as configured.
    pub max_pending_per_queue: Option<u64>,
    /// `server.polling.timeout`: the node's longest worker poll wait, seconds.
    pub polling_timeout_seconds: u64,
    /// `server.workers.stale_after_seconds`.
    pub worker_stale_after_seconds: u64,
}

impl Default for QueryTaskSettings {
    fn default() -> Self {
        QueryTaskSettings {
            ttl_seconds: 60,
            timeout_seconds: None,
            lease_timeout_seconds: 10,
            max_pending_per_queue: None,
            polling_timeout_seconds: 60,
            worker_stale_after_seconds: 90,
        }
    }
}

impl QueryTaskSettings {
    /// The configuration key of the pending cap.
    pub const MAX_PENDING_KEY: &'static str = "server.query_tasks.max_pending_per_queue";
    /// The configuration key of the query timeout (seconds).
    pub const TIMEOUT_KEY: &'static str = "server.query_tasks.timeout";
    /// The configuration key of the least key retention (seconds).
    pub const TTL_KEY: &'static str = "server.query_tasks.ttl_seconds";
    /// The configuration key of the lease timeout (seconds).
    pub const LEASE_TIMEOUT_KEY: &'static str = "server.query_tasks.lease_timeout";

    /// How long a control-plane query waits for its answer, in seconds:
    /// the configured timeout, else `min(max(polling.timeout + 15, 40), 55)`,
    /// never below 0.
    pub fn timeout_seconds(&self) -> u64 {
        let derived = || {
            let polling = i64::try_from(self.polling_timeout_seconds).unwrap_or(i64::MAX);
            polling.saturating_add(15).clamp(40, 55)
        };
        let seconds = self.timeout_seconds.unwrap_or_else(derived);
        u64::try_from(seconds).unwrap_or(0)
    }

    /// [`Self::timeout_seconds`] as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds())
    }

    /// The lease timeout, at least one second.
    pub fn lease_timeout(&self) -> Duration {
        Duration::from_secs(self.lease_timeout_seconds.max(1))
    }

    /// How long task, queue and leased-index keys live:
    /// `max(60, ttl_seconds, timeout + max(1, lease_timeout) + 60)` seconds.
    pub fn retention_window(&self) -> Duration {
        let derived = self
            .timeout_seconds()
            .saturating_add(self.lease_timeout_seconds.max(1))
            .saturating_add(60);
        Duration::from_secs(60u64.max(self.ttl_seconds).max(derived))
    }

    /// When a lease taken at `claimed_at_ms` ends: the earlier of the claim
    /// plus the lease timeout (at least one second) and the query's deadline.
    pub fn lease_expires_at_ms(&self, claimed_at_ms: i64, deadline_ms: i64) -> i64 {
        let lease_ms = i64::try_from(self.lease_timeout().as_millis()).unwrap_or(i64::MAX);
        claimed_at_ms.saturating_add(lease_ms).min(deadline_ms)
    }

    /// How long a query-poller marker lives: the poll's own timeout plus 5
    /// seconds when the worker gave one, else
    /// `max(workers.stale_after_seconds, query timeout + 5)`.
    pub fn marker_ttl(&self, requested_poll_timeout: Option<Duration>) -> Duration {
        match requested_poll_timeout {
            Some(wait) => wait.saturating_add(Duration::from_secs(5)),
            None => Duration::from_secs(
                self.worker_stale_after_seconds
                    .max(self.timeout_seconds().saturating_add(5)),
            ),
        }
    }

    /// Pending query tasks one (namespace, task queue) may hold: the
    /// configured cap (default 1024) within 1..=10,000; a zero cap would
    /// refuse every query, so it counts as 1.
    pub fn max_pending_per_queue(&self) -> usize {
        let cap = self
            .max_pending_per_queue
            .unwrap_or(DEFAULT_MAX_PENDING_PER_QUEUE)
            .clamp(1, MAX_PENDING_PER_QUEUE_CLAMP);
        usize::try_from(cap).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut QueryTaskSettings)) -> QueryTaskSettings {
        let mut s = QueryTaskSettings::default();
        f(&mut s);
        s
    }

    #[test]
    fn the_query_timeout_is_the_polling_timeout_plus_15_within_40_and_55() {
        let at = |polling| with(|s| s.polling_timeout_seconds = polling).timeout_seconds();
        assert_eq!(at(0), 40, "floor");
        assert_eq!(at(24), 40);
        assert_eq!(at(25), 40, "25 + 15 is exactly the floor");
        assert_eq!(at(26), 41);
        assert_eq!(at(30), 45);
        assert_eq!(at(40), 55, "40 + 15 is exactly the ceiling");
        assert_eq!(at(41), 55);
        assert_eq!(at(u64::MAX), 55, "no overflow");
        // A configured timeout wins, clamped to 0 or greater.
        let configured = |t| with(|s| s.timeout_seconds = Some(t)).timeout_seconds();
        assert_eq!(configured(7), 7);
        assert_eq!(configured(0), 0);
        assert_eq!(configured(-1), 0);
        assert_eq!(configured(i64::MIN), 0);
        assert_eq!(configured(120), 120, "only the derived default is capped");
    }

    #[test]
    fn the_retention_window_is_the_largest_of_60_the_ttl_and_timeout_lease_60() {
        let window = |ttl, timeout, lease| {
            with(|s| {
                s.ttl_seconds = ttl;
                s.timeout_seconds = Some(timeout);
                s.lease_timeout_seconds = lease;
            })
            .retention_window()
            .as_secs()
        };
        assert_eq!(window(0, 0, 0), 61, "0 + max(1, 0) + 60");
        assert_eq!(window(0, -5, 0), 61, "a negative timeout counts as 0");
        assert_eq!(window(60, 0, 0), 61);
        assert_eq!(window(0, 0, 1), 61, "a lease of 1 equals the minimum");
        assert_eq!(window(0, 0, 2), 62);
        assert_eq!(window(300, 55, 10), 300, "the configured ttl wins");
        assert_eq!(window(125, 55, 10), 125, "a tie");
        assert_eq!(window(124, 55, 10), 125, "timeout + lease + 60");
        assert_eq!(window(0, 55, 10), 125);
        // The defaults: timeout min(max(60 + 15, 40), 55) = 55, lease 10.
        assert_eq!(
            QueryTaskSettings::default().retention_window().as_secs(),
            125
        );
        assert_eq!(
            with(|s| {
                s.timeout_seconds = Some(i64::MAX);
                s.lease_timeout_seconds = u64::MAX;
            })
            .retention_window(),
            Duration::from_secs(u64::MAX),
            "saturates instead of wrapping"
        );
    }

    #[test]
    fn a_lease_ends_at_the_claim_plus_the_lease_or_the_deadline_whichever_is_first() {
        let s = with(|s| s.lease_timeout_seconds = 10);
        assert_eq!(s.lease_expires_at_ms(1_000, 60_000), 11_000);
        assert_eq!(s.lease_expires_at_ms(1_000, 11_000), 11_000, "a tie");
        assert_eq!(s.lease_expires_at_ms(1_000, 10_999), 10_999, "the deadline");
        assert_eq!(s.lease_expires_at_ms(1_000, 500), 500, "a past deadline");
        let zero = with(|s| s.lease_timeout_seconds = 0);
        assert_eq!(zero.lease_timeout(), Duration::from_secs(1));
        assert_eq!(
            zero.lease_expires_at_ms(1_000, 60_000),
            2_000,
            "at least 1 s"
        );
        assert_eq!(s.lease_expires_at_ms(i64::MAX - 5, i64::MAX), i64::MAX);
    }

    #[test]
    fn the_marker_lives_the_poll_timeout_plus_5_or_the_larger_staleness_bound() {
        let s = with(|s| {
            s.worker_stale_after_seconds = 90;
            s.timeout_seconds = Some(55);
        });
        assert_eq!(
            s.marker_ttl(Some(Duration::from_secs(30))),
            Duration::from_secs(35)
        );
        assert_eq!(s.marker_ttl(Some(Duration::ZERO)), Duration::from_secs(5));
        assert_eq!(
            s.marker_ttl(None),
            Duration::from_secs(90),
            "stale_after wins"
        );
        let long_timeout = with(|s| {
            s.worker_stale_after_seconds = 90;
            s.timeout_seconds = Some(86);
        });
        assert_eq!(long_timeout.marker_ttl(None), Duration::from_secs(91));
        let tie = with(|s| {
            s.worker_stale_after_seconds = 90;
            s.timeout_seconds = Some(85);
        });
        assert_eq!(tie.marker_ttl(None), Duration::from_secs(90));
    }

    #[test]
    fn the_pending_cap_defaults_to_1024_and_is_clamped_to_1_through_10000() {
        let cap = |n| with(|s| s.max_pending_per_queue = n).max_pending_per_queue();
        assert_eq!(cap(None), 1024);
        assert_eq!(cap(Some(0)), 1);
        assert_eq!(cap(Some(1)), 1);
        assert_eq!(cap(Some(9_999)), 9_999);
        assert_eq!(cap(Some(10_000)), 10_000);
        assert_eq!(cap(Some(10_001)), 10_000);
        assert_eq!(cap(Some(u64::MAX)), 10_000);
        assert_eq!(QUEUE_LOCK_TTL, Duration::from_secs(10));
    }
}
