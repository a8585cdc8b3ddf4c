//! Inline history retention, driven by worker heartbeats.
//!
//! A server with no separate maintenance process still has to remove the
//! history of old closed runs. Heartbeats arrive steadily, so they do it:
//! one throttle key per namespace elects a single heartbeat per TTL window
//! across all nodes, and that heartbeat prunes at most one expired run, so
//! retention never adds noticeable latency to a heartbeat.

use std::sync::Arc;
use std::time::Duration;

use crate::cache::{hash_dimensions, Cache, CacheError};
use crate::store::{Error as StoreError, RunId};

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
