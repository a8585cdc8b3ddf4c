//! Inline history retention, driven by worker heartbeats.
//!
//! A server with no separate maintenance process still has to remove the
//! history of old closed runs. Heartbeats arrive steadily, so they do it:
//! one throttle key per namespace elects a single heartbeat per TTL window
//! across all nodes, and that heartbeat prunes at most one expired run, so
//! retention never adds noticeable latency to a heartbeat.
//!
//! Workflow output streams are reclaimed the same way by
//! [`WorkflowStreamRetention`]: its own throttle key per namespace elects
//! one heartbeat per window, which deletes at most
//! [`WorkflowStreamRetention::MAX_STREAMS`] expired streams and
//! [`WorkflowStreamRetention::MAX_ITEMS`] of their items.

use std::sync::Arc;
use std::time::Duration;

use crate::cache::{hash_dimensions, Cache, CacheError};
use crate::store::{Error as StoreError, Reclaimed, RunId};

/// Why an inline retention pass failed.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    /// The throttle key could not be written.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The prune failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Prunes expired run history a little at a time.
#[derive(Clone)]
pub struct HistoryRetentionEnforcer {
    cache: Arc<dyn Cache>,
    retention: Duration,
    throttle: Duration,
}

impl HistoryRetentionEnforcer {
    /// The family of throttle keys.
    pub const PREFIX: &'static str = "server:history-retention-inline:";
    /// The default throttle window.
    pub const DEFAULT_THROTTLE: Duration = Duration::from_secs(60);

    /// Keeps closed runs' history for `retention`; elects one pruning
    /// heartbeat per namespace per `throttle`.
    pub fn new(cache: Arc<dyn Cache>, retention: Duration, throttle: Duration) -> Self {
        HistoryRetentionEnforcer {
            cache,
            retention,
            throttle,
        }
    }

    /// Called on each heartbeat; when elected, `prune` removes at most one
    /// run of `namespace` closed before the cutoff it is given.
    pub fn on_heartbeat(
        &self,
        namespace: &str,
        prune: impl FnOnce(i64) -> Result<Option<RunId>, StoreError>,
    ) -> Result<Option<RunId>, RetentionError> {
        let key = format!("{}{}", Self::PREFIX, hash_dimensions(&[namespace]));
        if !self.cache.add(&key, b"1", self.throttle)? {
            return Ok(None);
        }
        let now = crate::unix_ms();
        let cutoff =
            now.saturating_sub(i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX));
        Ok(prune(cutoff)?)
    }
}

/// Reclaims expired workflow streams a bounded batch at a time.
#[derive(Clone)]
pub struct WorkflowStreamRetention {
    cache: Arc<dyn Cache>,
    throttle: Duration,
}

impl WorkflowStreamRetention {
    /// The family of throttle keys.
    pub const PREFIX: &'static str = "server:stream-retention-inline:";
    /// The default throttle window.
    pub const DEFAULT_THROTTLE: Duration = Duration::from_secs(60);
    /// Expired streams one elected heartbeat reclaims at most.
    pub const MAX_STREAMS: usize = 10;
    /// Items of those streams one elected heartbeat deletes at most.
    pub const MAX_ITEMS: usize = 500;

    /// Elects one reclaiming heartbeat per namespace per `throttle`.
    pub fn new(cache: Arc<dyn Cache>, throttle: Duration) -> Self {
        WorkflowStreamRetention { cache, throttle }
    }

    /// Called on each heartbeat; when elected, `reclaim` is given the
    /// current time and the two budgets, and deletes at most that many
    /// expired streams of `namespace` and items of theirs.
    pub fn on_heartbeat(
        &self,
        namespace: &str,
        reclaim: impl FnOnce(i64, usize, usize) -> Result<Reclaimed, StoreError>,
    ) -> Result<Option<Reclaimed>, RetentionError> {
        let key = format!("{}{}", Self::PREFIX, hash_dimensions(&[namespace]));
        if !self.cache.add(&key, b"1", self.throttle)? {
            return Ok(None);
        }
        Ok(Some(reclaim(
            crate::unix_ms(),
            Self::MAX_STREAMS,
            Self::MAX_ITEMS,
        )?))
    }
}
