//! The readiness probe: proves the cache accepts writes before traffic arrives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cache::{Cache, CacheError};

/// Writes, reads back and deletes one temporary key per check.
///
/// The key is deleted at once; the 10-second TTL only matters when the
/// process dies between the write and the delete.
pub struct ReadinessProbe {
    cache: Arc<dyn Cache>,
    node: String,
    checks: AtomicU64,
}

impl ReadinessProbe {
    /// Guards against a probe key outliving a crashed check.
    pub const TTL: Duration = Duration::from_secs(10);
    /// The family every probe key belongs to.
    pub const PREFIX: &'static str = "server:readiness:";

    /// A probe on `cache` for the node `node_hash` (keys of two nodes never collide).
    pub fn new(cache: Arc<dyn Cache>, node_hash: &str) -> Self {
        ReadinessProbe {
            cache,
            node: node_hash.to_owned(),
            checks: AtomicU64::new(0),
        }
    }

    /// Whether the cache round-trips a value.
    pub fn check(&self) -> Result<bool, CacheError> {
        let n = self.checks.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}{}:{n}", Self::PREFIX, self.node);
        self.cache.put(&key, b"ok", Self::TTL)?;
        let read = self.cache.get(&key);
        self.cache.forget(&key)?;
        Ok(read?.as_deref() == Some(b"ok".as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn a_check_leaves_no_key_behind() {
        let cache = Arc::new(MemoryCache::default());
        let probe = ReadinessProbe::new(cache.clone(), "n1");
        assert!(probe.check().unwrap());
        assert!(probe.check().unwrap());
        assert_eq!(cache.count_prefix(ReadinessProbe::PREFIX).unwrap(), 0);
    }
}
