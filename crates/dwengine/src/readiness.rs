//! The readiness probe: proves the cache accepts writes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::cache::Cache;

/// Writes, reads back and deletes one temporary key per check.
///
/// The key is deleted at once; the 10-second TTL only matters when the
/// process dies between the write and the delete.
pub struct ReadinessProbe<'c> {
    cache: &'c dyn Cache,
    checks: AtomicU64,
}

impl<'c> ReadinessProbe<'c> {
    /// Guards against a probe key outliving a crashed check.
    pub const TTL: Duration = Duration::from_secs(10);

    /// A probe on `cache`.
    pub fn new(cache: &'c dyn Cache) -> Self {
        ReadinessProbe {
            cache,
            checks: AtomicU64::new(0),
        }
    }

    /// Whether the cache round-trips a value.
    pub fn check(&self) -> bool {
        let n = self.checks.fetch_add(1, Ordering::Relaxed);
        let key = format!("server:readiness:{}:{n}", std::process::id());
        self.cache.put(&key, b"ok".to_vec(), Self::TTL);
        let ok = self.cache.get(&key).as_deref() == Some(b"ok".as_slice());
        self.cache.forget(&key);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn a_check_leaves_no_key_behind() {
        let cache = MemoryCache::default();
        let probe = ReadinessProbe::new(&cache);
        assert!(probe.check());
        assert!(probe.check());
        assert_eq!(cache.count_prefix("server:readiness:"), 0);
    }
}
