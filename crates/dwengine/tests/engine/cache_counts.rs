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

/// The messages `channel` carries from now on, as they arrive (kept while
/// the subscription lives).
fn listen(
    cache: &SharedCache,
    channel: &str,
) -> (
    std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    dwengine::cache::Subscription,
) {
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
    let sink = heard.clone();
    let subscription = cache
        .subscribe(
            channel,
            std::sync::Arc::new(move |message: Option<&[u8]>| {
                if let Some(bytes) = message {
                    sink.lock().unwrap().push(bytes.to_vec());
                }
            }),
        )
        .unwrap();
    (heard, subscription)
}

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

/// A batch's writes land as their own calls would (values, TTLs, family
/// counts), in order, and its message reaches a subscriber. On Redis the
/// batch is one pipeline of script calls by SHA1; a server that lost its
/// scripts (`SCRIPT FLUSH`, a restart) answers `NOSCRIPT` once, and the
/// cache sends the call anew with the scripts' text.
fn a_batch_writes_and_publishes_as_its_calls_would(backend: &'static str, cache: SharedCache) {
    let family = "test-only:batched:";
    let (first, second) = (format!("{family}first"), format!("{family}second"));
    let channel = format!("test-only:batched-channel:{}", std::process::id());
    let (heard, _subscription) = listen(&cache, &channel);
    let long = Duration::from_secs(60);
    cache.put(&first, b"old", long).unwrap();
    let batch = |value: &[u8]| {
        cache.batch(&[
            dwengine::cache::CacheOp::Put {
                key: &first,
                value,
                ttl: long,
            },
            dwengine::cache::CacheOp::Publish {
                channel: &channel,
                message: b"woken",
            },
            dwengine::cache::CacheOp::Put {
                key: &second,
                value,
                ttl: Duration::from_millis(1500),
            },
        ])
    };
    batch(b"new").unwrap();
    assert_eq!(
        cache.get(&first).unwrap().as_deref(),
        Some(&b"new"[..]),
        "[{backend}]"
    );
    assert_eq!(
        cache.get(&second).unwrap().as_deref(),
        Some(&b"new"[..]),
        "[{backend}]"
    );
    assert_eq!(cache.count_family(family).unwrap(), 2, "[{backend}]");
    assert!(
        eventually(Duration::from_secs(10), || heard.lock().unwrap().len() == 1),
        "[{backend}] the batch's message did not arrive"
    );
    assert_eq!(heard.lock().unwrap()[0], b"woken", "[{backend}]");
    if backend == "redis" {
        let url = std::env::var("DW_TEST_REDIS_URL").unwrap();
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let mut flush = || {
            redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query::<String>(&mut conn)
                .unwrap()
        };
        flush();
        batch(b"after a flush").unwrap();
        assert_eq!(
            cache.get(&second).unwrap().as_deref(),
            Some(&b"after a flush"[..])
        );
        flush();
        assert!(cache.add(&format!("{family}third"), b"1", long).unwrap());
        assert_eq!(cache.count_family(family).unwrap(), 3, "[redis]");
    }
    // The short key expires and is counted out.
    assert!(
        eventually(Duration::from_secs(10), || {
            cache
                .count_family(family)
                .is_ok_and(|n| n == 1 + usize::from(backend == "redis"))
        }),
        "[{backend}] the expired key is still counted"
    );
}
cache_variants!(a_batch_writes_and_publishes_as_its_calls_would);

/// Every call succeeds while the server loses its scripts over and over:
/// a call answered `NOSCRIPT` is sent again with the scripts' text, which
/// no later flush can refuse (a reload by `SCRIPT LOAD` and a retry by
/// SHA1 lost that race to a second flush: CI saw polls refused with 503
/// `cache_unavailable` while another test flushed the scripts), and a
/// batch sent again publishes its messages once. On the in-process cache
/// the calls run without the flushes.
fn no_call_fails_while_the_scripts_are_flushed_again_and_again(
    backend: &'static str,
    cache: SharedCache,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let family = "test-only:flushed:";
    let long = Duration::from_secs(60);
    let stop = AtomicBool::new(false);
    let flushes = AtomicUsize::new(0);
    let channel = format!("test-only:flushed-channel:{}", std::process::id());
    let (heard, _subscription) = listen(&cache, &channel);
    std::thread::scope(|scope| {
        if backend == "redis" {
            let url = std::env::var("DW_TEST_REDIS_URL").unwrap();
            let (stop, flushes) = (&stop, &flushes);
            scope.spawn(move || {
                let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    redis::cmd("SCRIPT")
                        .arg("FLUSH")
                        .query::<String>(&mut conn)
                        .unwrap();
                    flushes.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let calls = scope.spawn(|| {
            let run = || -> Result<(), String> {
                for i in 0..600 {
                    let key = format!("{family}{i}");
                    // The batch first: after a flush between two rounds
                    // its script call is the one answered `NOSCRIPT`.
                    cache
                        .batch(&[
                            dwengine::cache::CacheOp::Put {
                                key: &key,
                                value: b"first",
                                ttl: long,
                            },
                            dwengine::cache::CacheOp::Publish {
                                channel: &channel,
                                message: b"batched",
                            },
                        ])
                        .map_err(|e| format!("batch {i}: {e}"))?;
                    if !cache
                        .add(&format!("{key}-once"), b"1", long)
                        .map_err(|e| format!("add {i}: {e}"))?
                    {
                        return Err(format!("add {i} found its fresh key taken"));
                    }
                    cache
                        .put(&key, b"v", long)
                        .map_err(|e| format!("put {i}: {e}"))?;
                    if !cache
                        .forget(&format!("{key}-once"))
                        .map_err(|e| format!("forget {i}: {e}"))?
                    {
                        return Err(format!("forget {i} found nothing"));
                    }
                }
                Ok(())
            };
            let result = run();
            stop.store(true, Ordering::Relaxed);
            result
        });
        let result = calls.join().unwrap();
        assert_eq!(
            result,
            Ok(()),
            "[{backend}] after {} flushes",
            flushes.load(Ordering::Relaxed)
        );
    });
    if backend == "redis" {
        assert!(
            flushes.load(Ordering::Relaxed) > 0,
            "the flushing thread never ran"
        );
    }
    // Each batch's message is published once, even when its pipeline
    // was sent twice: once the last message is heard, every earlier
    // one (and any second copy) has been delivered before it.
    cache.publish(&channel, b"last").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || heard
            .lock()
            .unwrap()
            .last()
            .is_some_and(|m| m == b"last")),
        "[{backend}] the last message did not arrive"
    );
    let batched = heard
        .lock()
        .unwrap()
        .iter()
        .filter(|m| *m == b"batched")
        .count();
    assert_eq!(
        batched, 600,
        "[{backend}] messages published by the batches"
    );
    assert_eq!(cache.count_prefix(family).unwrap(), 600, "[{backend}]");
    assert_eq!(cache.count_family(family).unwrap(), 600, "[{backend}]");
    assert_eq!(
        cache.get(&format!("{family}599")).unwrap().as_deref(),
        Some(&b"v"[..])
    );
}
cache_variants!(no_call_fails_while_the_scripts_are_flushed_again_and_again);
