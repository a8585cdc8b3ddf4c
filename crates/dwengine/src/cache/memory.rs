//! The in-process cache backend (moka), the default for a single node.
//!
//! moka gives per-entry TTLs, bounded capacity and background eviction, so
//! expired keys stop costing memory without a sweep of our own. The
//! capacity is only a backstop: every surface bounds itself by TTL and
//! admission, and the tests prove those bounds far below it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::ops::compute::{CompResult, Op};
use moka::sync::Cache as Moka;
use moka::Expiry;

use super::{Cache, CacheError};

#[derive(Debug)]
struct Entry {
    bytes: Vec<u8>,
    ttl: Duration,
    // Counters keep the expiry of their creation (a fixed bucket).
    keep_expiry: bool,
}

struct PerEntryTtl;

impl Expiry<String, Arc<Entry>> for PerEntryTtl {
    fn expire_after_create(&self, _: &String, value: &Arc<Entry>, _: Instant) -> Option<Duration> {
        Some(value.ttl)
    }

    fn expire_after_update(
        &self,
        _: &String,
        value: &Arc<Entry>,
        _: Instant,
        current: Option<Duration>,
    ) -> Option<Duration> {
        if value.keep_expiry {
            current
        } else {
            Some(value.ttl)
        }
    }
}

/// An in-process cache with per-entry TTLs.
#[derive(Clone)]
pub struct MemoryCache {
    inner: Moka<String, Arc<Entry>>,
}

impl Default for MemoryCache {
    fn default() -> Self {
        MemoryCache::with_capacity(1_000_000)
    }
}

impl MemoryCache {
    /// A cache holding at most `capacity` entries.
    pub fn with_capacity(capacity: u64) -> Self {
        MemoryCache {
            inner: Moka::builder()
                .max_capacity(capacity)
                .expire_after(PerEntryTtl)
                .build(),
        }
    }

    /// Entries still held in memory, expired or not, after moka's pending
    /// evictions ran: what the process actually pays for.
    pub fn resident_entries(&self) -> u64 {
        self.inner.run_pending_tasks();
        self.inner.entry_count()
    }
}

fn entry(value: &[u8], ttl: Duration, keep_expiry: bool) -> Arc<Entry> {
    Arc::new(Entry {
        bytes: value.to_vec(),
        ttl,
        keep_expiry,
    })
}

// Counters are decimal text, as Redis stores them, so readers need not know the backend.
fn decimal(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

impl Cache for MemoryCache {
    fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), CacheError> {
        self.inner.insert(key.to_owned(), entry(value, ttl, false));
        Ok(())
    }

    fn add(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        let inserted = self
            .inner
            .entry(key.to_owned())
            .or_insert_with(|| entry(value, ttl, false));
        Ok(inserted.is_fresh())
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        Ok(self.inner.get(key).map(|e| e.bytes.clone()))
    }

    fn forget(&self, key: &str) -> Result<bool, CacheError> {
        Ok(self.inner.remove(key).is_some())
    }

    fn increment(&self, key: &str, ttl: Duration) -> Result<u64, CacheError> {
        let result = self
            .inner
            .entry(key.to_owned())
            .and_compute_with(|current| {
                let count = current
                    .and_then(|e| decimal(&e.value().bytes))
                    .unwrap_or(0)
                    .saturating_add(1);
                Op::Put(entry(count.to_string().as_bytes(), ttl, true))
            });
        let count = match result {
            CompResult::Inserted(e) | CompResult::ReplacedWith(e) => {
                decimal(&e.value().bytes).unwrap_or(1)
            }
            _ => 1,
        };
        Ok(count)
    }

    fn count_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
        self.inner.run_pending_tasks();
        Ok(self
            .inner
            .iter()
            .filter(|(key, _)| key.starts_with(prefix))
            .count())
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "test-only:a";

    #[test]
    fn entries_expire_and_stop_being_resident() {
        let cache = MemoryCache::default();
        cache.put(KEY, b"x", Duration::from_millis(30)).unwrap();
        assert_eq!(cache.get(KEY).unwrap(), Some(b"x".to_vec()));
        assert_eq!(cache.count_prefix("test-only:").unwrap(), 1);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get(KEY).unwrap(), None);
        assert_eq!(cache.count_prefix("test-only:").unwrap(), 0);
        // moka's timer wheel evicts at about one-second granularity.
        let deadline = Instant::now() + Duration::from_secs(5);
        while cache.resident_entries() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(cache.resident_entries(), 0);
    }

    #[test]
    fn add_is_exclusive_until_expiry_and_counters_keep_their_bucket() {
        let cache = MemoryCache::default();
        assert!(cache.add(KEY, b"1", Duration::from_millis(40)).unwrap());
        assert!(!cache.add(KEY, b"2", Duration::from_millis(40)).unwrap());
        std::thread::sleep(Duration::from_millis(60));
        assert!(cache.add(KEY, b"3", Duration::from_millis(40)).unwrap());
        assert!(cache.forget(KEY).unwrap());
        assert!(!cache.forget(KEY).unwrap());

        let counter = "test-only:n";
        for expected in 1..=3 {
            let n = cache.increment(counter, Duration::from_millis(50)).unwrap();
            assert_eq!(n, expected);
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(
            cache.get(counter).unwrap(),
            None,
            "increments never extend the bucket"
        );
    }
}
