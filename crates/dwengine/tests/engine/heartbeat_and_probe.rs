//! Two small cache families under churn over loopback HTTP, on the
//! in-process cache and on Redis (`DW_TEST_REDIS_URL`), the backends side
//! by side so the 30-second drain is waited out once:
//! `worker_compatibility_heartbeat` (one elected registration refresh per
//! worker and write interval) and `polling_cache_availability_probe` (a
//! read-only address that never holds a key).

use crate::support;

use std::time::{Duration, Instant};

use dwengine::polling::ServerPollingCache;
use dwengine::registry::WorkerCompatibilityHeartbeatRecorder;
use serde_json::json;
use support::{cache_variants, eventually, SharedCache, TestServer};

const WORKERS: usize = 2_000;
const NAMESPACES: usize = 50;
/// How long an election holds with the server's default staleness bound
/// (90 s / 3).
const WRITE_INTERVAL: Duration = Duration::from_secs(30);
/// Redis expires a key within a millisecond of its TTL; the in-process
/// cache on its next look. Two seconds either side covers both.
const EXPIRY_SLACK: Duration = Duration::from_secs(2);

fn churn(backend: &str, s: &TestServer) {
    let cache = &s.cache;
    let ns = |i: usize| format!("tenant-{}", i % NAMESPACES);
    for n in 0..NAMESPACES {
        s.namespace(&format!("tenant-{n}"));
    }
    let began = Instant::now();
    let mut elected_at = Vec::with_capacity(WORKERS);
    for i in 0..WORKERS {
        let (status, body) = s.post_ns(
            &ns(i),
            "/api/worker/register",
            json!({ "worker_id": format!("w{i}"), "task_queue": format!("q{i}") }),
        );
        assert_eq!(status, 200, "{body}");
        // Three heartbeats: the first is elected, the others only read.
        for beat in 0..3 {
            let (status, body) = s.post_ns(
                &ns(i),
                "/api/worker/heartbeat",
                json!({ "worker_id": format!("w{i}") }),
            );
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["registration_refreshed"], beat == 0, "{body}");
            if beat == 0 {
                elected_at.push(Instant::now());
            }
        }
        // Polls that do not wait still probe nothing; waiting polls probe.
        if i % 10 == 0 {
            let (status, _) = s.post_ns(
                &ns(i),
                "/api/worker/workflow-tasks/poll",
                json!({ "task_queue": format!("q{i}"), "worker_id": format!("w{i}"),
                        "poll_request_id": format!("p{i}"), "timeout_seconds": 0.05 }),
            );
            assert_eq!(status, 200);
        }
    }
    // Unknown workers leave no throttle key behind.
    for i in 0..200 {
        let (status, _) = s.post_ns(
            "tenant-0",
            "/api/worker/heartbeat",
            json!({ "worker_id": format!("ghost-{i}") }),
        );
        assert_eq!(status, 404);
    }
    let counting = Instant::now();
    let peak = cache
        .count_family(WorkerCompatibilityHeartbeatRecorder::PREFIX)
        .unwrap();
    let counted = Instant::now();
    // On a loaded machine the churn can outlast one write interval, and
    // the first elections' keys then expire before the count: every key
    // elected well inside the interval must be there, and none older.
    let live_for_sure = elected_at
        .iter()
        .filter(|t| counted.duration_since(**t) + EXPIRY_SLACK < WRITE_INTERVAL)
        .count();
    let live_at_most = elected_at
        .iter()
        .filter(|t| counting.duration_since(**t) <= WRITE_INTERVAL + EXPIRY_SLACK)
        .count();
    let probe = cache.count_prefix(ServerPollingCache::PREFIX).unwrap();
    eprintln!(
        "[{backend}] worker_compatibility_heartbeat: {WORKERS} workers in {NAMESPACES} namespaces, 3 heartbeats each, in {:?}; peak {peak} keys (bound {WORKERS}); polling_cache_availability_probe: {probe} keys",
        began.elapsed()
    );
    assert!(
        (live_for_sure..=live_at_most).contains(&peak),
        "[{backend}] one key per worker elected in the last {WRITE_INTERVAL:?}: \
         {peak} keys, expected {live_for_sure}..={live_at_most}"
    );
    if began.elapsed() + EXPIRY_SLACK < WRITE_INTERVAL {
        assert_eq!(peak, WORKERS, "[{backend}] one key per registered worker");
    }
    assert_eq!(probe, 0, "[{backend}] the probe never writes");
}

fn drained(backend: &str, s: &TestServer) {
    assert!(
        eventually(Duration::from_secs(35), || {
            s.cache
                .count_family(WorkerCompatibilityHeartbeatRecorder::PREFIX)
                .is_ok_and(|n| n == 0)
        }),
        "[{backend}] throttle keys outlived the 30 s write interval"
    );
    eprintln!("[{backend}] worker_compatibility_heartbeat: final 0 keys");
    // A new interval: the next heartbeat is elected again.
    let (status, body) = s.post_ns(
        "tenant-1",
        "/api/worker/heartbeat",
        json!({ "worker_id": "w1" }),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["registration_refreshed"], true);
}

fn heartbeat_elections_stay_one_per_worker_and_drain_and_the_probe_writes_nothing(
    backend: &'static str,
    cache: SharedCache,
) {
    let s = TestServer::start(cache, |_| {});
    churn(backend, &s);
    drained(backend, &s);
}
cache_variants!(heartbeat_elections_stay_one_per_worker_and_drain_and_the_probe_writes_nothing);
