//! The in-process cache backend (moka), the default for a single node.
//!
//! moka gives per-entry TTLs, bounded capacity and background eviction, so
//! expired keys stop costing memory without a sweep of our own. Each key
//! family (`server:<family>:`, one per policy entry) gets its own moka
//! instance: its capacity backstop is per family, so a flood of one family
//! evicts only its own keys, never another family's before their TTL, and
//! the family's live-key count is moka's entry counter, kept on write, so
//! `GET /api/system/cache-keys` costs one read per policy, not a scan of
//! the keys. The capacity is only a backstop: every surface bounds itself by
//! TTL and admission, and the tests prove those bounds far below it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use moka::ops::compute::{CompResult, Op};
use moka::sync::Cache as Moka;
use moka::Expiry;

use super::{family_of, Cache, CacheError, Deliver, Subscription};

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

type Family = Moka<String, Arc<Entry>>;

/// An in-process cache with per-entry TTLs.
#[derive(Clone)]
pub struct MemoryCache {
    families: Arc<RwLock<HashMap<String, Family>>>,
    capacity_per_family: u64,
    /// Pub/sub in process: per channel, each subscriber's number and
    /// delivery (the engines of one process that share this cache).
    channels: Arc<Mutex<HashMap<String, Subscribers>>>,
}

/// One channel's subscribers: each one's number and delivery.
type Subscribers = Vec<(u64, Deliver)>;

/// Numbers the in-process subscriptions.
static SUBSCRIBERS: AtomicU64 = AtomicU64::new(0);

impl Default for MemoryCache {
    fn default() -> Self {
        MemoryCache::with_capacity(MemoryCache::DEFAULT_CAPACITY_PER_FAMILY)
    }
}

impl MemoryCache {
    /// Entries one key family may hold before moka evicts its least useful.
    pub const DEFAULT_CAPACITY_PER_FAMILY: u64 = 200_000;

    /// A cache holding at most `capacity_per_family` entries per key family.
    pub fn with_capacity(capacity_per_family: u64) -> Self {
        MemoryCache {
            families: Arc::new(RwLock::new(HashMap::new())),
            capacity_per_family,
            channels: Arc::default(),
        }
    }

    /// Entries still held in memory, expired or not, after moka's pending
    /// evictions ran: what the process actually pays for.
    pub fn resident_entries(&self) -> u64 {
        self.read_families()
            .values()
            .map(|family| {
                family.run_pending_tasks();
                family.entry_count()
            })
            .sum()
    }

    /// The moka instance of `key`'s family, created on first use.
    fn family(&self, key: &str) -> Family {
        let name = family_of(key);
        if let Some(family) = self.read_families().get(name) {
            return family.clone();
        }
        let mut families = self.families.write().unwrap_or_else(|e| e.into_inner());
        families
            .entry(name.to_owned())
            .or_insert_with(|| {
                Moka::builder()
                    .max_capacity(self.capacity_per_family)
                    .expire_after(PerEntryTtl)
                    .build()
            })
            .clone()
    }

    fn read_families(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Family>> {
        self.families.read().unwrap_or_else(|e| e.into_inner())
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
        self.family(key)
            .insert(key.to_owned(), entry(value, ttl, false));
        Ok(())
    }

    fn add(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        let inserted = self
            .family(key)
            .entry(key.to_owned())
            .or_insert_with(|| entry(value, ttl, false));
        Ok(inserted.is_fresh())
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        Ok(self.family(key).get(key).map(|e| e.bytes.clone()))
    }

    fn forget(&self, key: &str) -> Result<bool, CacheError> {
        Ok(self.family(key).remove(key).is_some())
    }

    fn increment(&self, key: &str, ttl: Duration) -> Result<u64, CacheError> {
        let result = self
            .family(key)
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

    fn claim(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        let result =
            self.family(key)
                .entry(key.to_owned())
                .and_compute_with(|current| match current {
                    Some(held) if held.value().bytes != value => Op::Nop,
                    _ => Op::Put(entry(value, ttl, false)),
                });
        Ok(matches!(
            result,
            CompResult::Inserted(_) | CompResult::ReplacedWith(_)
        ))
    }

    fn release(&self, key: &str, value: &[u8]) -> Result<bool, CacheError> {
        let result =
            self.family(key)
                .entry(key.to_owned())
                .and_compute_with(|current| match current {
                    Some(held) if held.value().bytes == value => Op::Remove,
                    _ => Op::Nop,
                });
        Ok(matches!(result, CompResult::Removed(_)))
    }

    fn count_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
        let mut live = 0;
        for (name, family) in self.read_families().iter() {
            if name.starts_with(prefix) || prefix.starts_with(name.as_str()) {
                family.run_pending_tasks();
                live += family
                    .iter()
                    .filter(|(key, _)| key.starts_with(prefix))
                    .count();
            }
        }
        Ok(live)
    }

    fn count_family(&self, prefix: &str) -> Result<usize, CacheError> {
        if family_of(prefix) != prefix {
            return self.count_prefix(prefix);
        }
        let Some(family) = self.read_families().get(prefix).cloned() else {
            return Ok(0);
        };
        family.run_pending_tasks();
        Ok(usize::try_from(family.entry_count()).unwrap_or(usize::MAX))
    }

    fn publish(&self, channel: &str, message: &[u8]) -> Result<(), CacheError> {
        let subscribers: Vec<Deliver> = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(channel)
            .map(|list| list.iter().map(|(_, d)| d.clone()).collect())
            .unwrap_or_default();
        for deliver in subscribers {
            deliver(Some(message));
        }
        Ok(())
    }

    fn subscribe(&self, channel: &str, deliver: Deliver) -> Result<Subscription, CacheError> {
        let number = SUBSCRIBERS.fetch_add(1, Ordering::Relaxed);
        self.channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(channel.to_owned())
            .or_default()
            .push((number, deliver));
        let (channels, channel) = (self.channels.clone(), channel.to_owned());
        Ok(Subscription::new(
            Arc::new(AtomicBool::new(false)),
            Box::new(move || {
                let mut channels = channels.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(list) = channels.get_mut(&channel) {
                    list.retain(|(n, _)| *n != number);
                    if list.is_empty() {
                        channels.remove(&channel);
                    }
                }
            }),
        ))
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
        cache.put(KEY, b"x", Duration::from_secs(600)).unwrap();
        assert_eq!(cache.get(KEY).unwrap(), Some(b"x".to_vec()));
        assert_eq!(cache.count_prefix("test-only:").unwrap(), 1);
        // A put replaces the TTL too; the entry then expires on its own.
        cache.put(KEY, b"y", Duration::from_millis(30)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while cache.get(KEY).unwrap().is_some() {
            assert!(Instant::now() < deadline, "the entry never expired");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(cache.count_prefix("test-only:").unwrap(), 0);
        // moka's timer wheel evicts at about one-second granularity.
        let deadline = Instant::now() + Duration::from_secs(30);
        while cache.resident_entries() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(cache.resident_entries(), 0);
    }

    #[test]
    fn add_is_exclusive_until_expiry_and_counters_keep_their_bucket() {
        // No step here depends on how fast the machine runs: exclusivity is
        // checked under a TTL no test run outlives, and expiry is waited for.
        let cache = MemoryCache::default();
        let long = Duration::from_secs(600);
        assert!(cache.add(KEY, b"1", long).unwrap());
        assert!(!cache.add(KEY, b"2", long).unwrap(), "held: add refuses");
        assert!(cache.forget(KEY).unwrap());
        assert!(!cache.forget(KEY).unwrap());

        let short = Duration::from_millis(40);
        assert!(cache.add(KEY, b"3", short).unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cache.add(KEY, b"4", short).unwrap() {
            assert!(Instant::now() < deadline, "an added key never expired");
            std::thread::sleep(Duration::from_millis(5));
        }

        let counter = "test-only:n";
        for expected in 1..=3 {
            assert_eq!(cache.increment(counter, long).unwrap(), expected);
        }
        // A bucket's TTL runs from its first increment: increments that keep
        // coming faster than the TTL must still see it end and start over at
        // 1. Were each increment to extend it, it would count up for ever.
        let other = "test-only:m";
        let deadline = Instant::now() + Duration::from_secs(30);
        assert_eq!(cache.increment(other, short).unwrap(), 1);
        loop {
            let n = cache.increment(other, short).unwrap();
            if n == 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "increments extended the bucket: {n} counted over 30 s of a 40 ms bucket"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_claim_takes_or_renews_its_own_value_and_a_release_removes_only_its_own() {
        let cache = MemoryCache::default();
        let ttl = Duration::from_millis(200);
        assert!(cache.claim(KEY, b"a", ttl).unwrap(), "absent: taken");
        assert!(!cache.claim(KEY, b"b", ttl).unwrap(), "held by a");
        assert!(cache.claim(KEY, b"a", ttl).unwrap(), "renewed by a");
        assert!(!cache.release(KEY, b"b").unwrap(), "b cannot release a's");
        assert_eq!(cache.get(KEY).unwrap(), Some(b"a".to_vec()));
        assert!(cache.release(KEY, b"a").unwrap());
        assert!(!cache.release(KEY, b"a").unwrap());
        assert!(
            cache.claim(KEY, b"b", ttl).unwrap(),
            "free again: b takes it"
        );
        // Not renewed, it expires and another takes it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cache.claim(KEY, b"c", ttl).unwrap() {
            assert!(Instant::now() < deadline, "b's claim never expired");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(cache.get(KEY).unwrap(), Some(b"c".to_vec()));
    }

    #[test]
    fn a_flood_of_one_family_evicts_none_of_another_and_counts_are_kept_on_write() {
        let cache = MemoryCache::with_capacity(1_000);
        let ttl = Duration::from_secs(60);
        for i in 0..500 {
            cache
                .put(&format!("test-only:steady:{i}"), b"v", ttl)
                .unwrap();
        }
        for i in 0..20_000 {
            cache
                .put(&format!("test-only:flood:{i}"), b"v", ttl)
                .unwrap();
        }
        assert_eq!(cache.count_prefix("test-only:steady:").unwrap(), 500);
        assert!((0..500).all(|i| cache
            .get(&format!("test-only:steady:{i}"))
            .unwrap()
            .is_some()));
        assert!(cache.count_family("test-only:flood:").unwrap() <= 1_000);
        assert_eq!(cache.count_family("test-only:steady:").unwrap(), 500);
        assert_eq!(cache.count_family("test-only:absent:").unwrap(), 0);
        // A family count reads a counter: it does not grow with the keys.
        let big = MemoryCache::default();
        for i in 0..100_000 {
            big.put(&format!("test-only:many:{i}"), b"v", ttl).unwrap();
        }
        assert_eq!(big.count_family("test-only:many:").unwrap(), 100_000);
        let began = Instant::now();
        for _ in 0..100 {
            big.count_family("test-only:many:").unwrap();
        }
        assert!(
            began.elapsed() < Duration::from_millis(500),
            "100 family counts took {:?}",
            began.elapsed()
        );
    }

    #[test]
    fn families_are_cut_at_the_second_colon() {
        assert_eq!(family_of("test-only:a:b:c"), "test-only:a:");
        assert_eq!(family_of("test-only:a"), "test-only:");
        assert_eq!(family_of("plain"), "");
    }
}
