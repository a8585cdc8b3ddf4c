//! The cache the server's coordination surfaces write to.
//!
//! A trait, so a shared backend can replace the in-process one, and an
//! in-process implementation with per-key TTLs. Every entry expires: there
//! is deliberately no way to write a key without a TTL.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A key-value cache whose every entry expires.
pub trait Cache: Send + Sync {
    /// Stores `value` under `key` for `ttl`, replacing any previous value.
    fn put(&self, key: &str, value: Vec<u8>, ttl: Duration);
    /// The live value under `key`.
    fn get(&self, key: &str) -> Option<Vec<u8>>;
    /// Removes `key`; returns whether a live value was removed.
    fn forget(&self, key: &str) -> bool;
    /// Live keys starting with `prefix` (for soak evidence and tests).
    fn count_prefix(&self, prefix: &str) -> usize;
}

/// An in-process cache; expired entries are dropped lazily and on writes.
#[derive(Default)]
pub struct MemoryCache {
    entries: Mutex<HashMap<String, (Vec<u8>, Instant)>>,
}

impl MemoryCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Vec<u8>, Instant)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Cache for MemoryCache {
    fn put(&self, key: &str, value: Vec<u8>, ttl: Duration) {
        let now = Instant::now();
        let mut entries = self.lock();
        // Sweeping on writes keeps memory bounded by the live key set even
        // when nobody reads the expired keys again.
        entries.retain(|_, (_, expires)| *expires > now);
        entries.insert(key.to_owned(), (value, now + ttl));
    }

    fn get(&self, key: &str) -> Option<Vec<u8>> {
        let entries = self.lock();
        let (value, expires) = entries.get(key)?;
        (*expires > Instant::now()).then(|| value.clone())
    }

    fn forget(&self, key: &str) -> bool {
        let now = Instant::now();
        self.lock()
            .remove(key)
            .is_some_and(|(_, expires)| expires > now)
    }

    fn count_prefix(&self, prefix: &str) -> usize {
        let now = Instant::now();
        self.lock()
            .iter()
            .filter(|(k, (_, expires))| k.starts_with(prefix) && *expires > now)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_are_swept_on_write() {
        let cache = MemoryCache::default();
        cache.put(
            "server:long-poll-signal:a",
            b"x".to_vec(),
            Duration::from_millis(20),
        );
        assert_eq!(cache.get("server:long-poll-signal:a"), Some(b"x".to_vec()));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(cache.get("server:long-poll-signal:a"), None);
        cache.put(
            "server:long-poll-signal:b",
            b"y".to_vec(),
            Duration::from_secs(60),
        );
        assert_eq!(
            cache.lock().len(),
            1,
            "the expired key is swept by the next write"
        );
        assert!(cache.forget("server:long-poll-signal:b"));
        assert!(!cache.forget("server:long-poll-signal:b"));
    }
}
