//! Key counts per family are kept on write, on both cache backends.
//!
//! `GET /api/system/cache-keys` reads `Cache::count_family`: moka's entry
//! counter per family in process, and per-second expiry counters in Redis
//! moved by the same script as each write. Both must agree with a full scan
//! through creates, overwrites, exclusive adds, counters and deletes, and
//! fall to zero once the keys expire.

use crate::support;

use std::time::{Duration, Instant};

use support::{cache_variants, eventually, SharedCache};

const FAMILY: &str = "test-only:counted:";

fn family_counts_follow_every_write_and_expiry(backend: &'static str, cache: SharedCache) {
    let long = Duration::from_secs(60);
    let short = Duration::from_millis(1500);
    for i in 0..50 {
        cache.put(&format!("{FAMILY}put-{i}"), b"v", long).unwrap();
    }
    // Overwrites, also with another TTL, count once.
    for i in 0..50 {
        cache.put(&format!("{FAMILY}put-{i}"), b"w", short).unwrap();
    }
    for i in 0..20 {
        assert!(cache.add(&format!("{FAMILY}add-{i}"), b"1", short).unwrap());
        assert!(!cache.add(&format!("{FAMILY}add-{i}"), b"2", short).unwrap());
    }
    for _ in 0..5 {
        cache.increment(&format!("{FAMILY}counter"), short).unwrap();
    }
    for i in 0..10 {
        assert!(cache.forget(&format!("{FAMILY}put-{i}")).unwrap());
        assert!(!cache.forget(&format!("{FAMILY}put-{i}")).unwrap());
    }
    let scanned = cache.count_prefix(FAMILY).unwrap();
    assert_eq!(scanned, 40 + 20 + 1, "[{backend}]");
    assert_eq!(cache.count_family(FAMILY).unwrap(), scanned, "[{backend}]");
    let began = Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || {
            cache.count_family(FAMILY).is_ok_and(|n| n == 0)
        }),
        "[{backend}] {} keys still counted {:?} after they expired",
        cache.count_family(FAMILY).unwrap(),
        began.elapsed()
    );
    assert_eq!(cache.count_prefix(FAMILY).unwrap(), 0, "[{backend}]");
}
cache_variants!(family_counts_follow_every_write_and_expiry);
