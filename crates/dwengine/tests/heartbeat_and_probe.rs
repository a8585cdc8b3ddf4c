//! Two small cache families under churn over loopback HTTP, on the
//! in-process cache and on Redis (`DW_TEST_REDIS_URL`), the backends side
//! by side so the 30-second drain is waited out once:
//! `worker_compatibility_heartbeat` (one elected registration refresh per
//! worker and write interval) and `polling_cache_availability_probe` (a
//! read-only address that never holds a key).

mod support;

use std::time::{Duration, Instant};

use dwengine::polling::ServerPollingCache;
use dwengine::registry::WorkerCompatibilityHeartbeatRecorder;
use serde_json::json;
use support::{backends, eventually, TestServer};

const WORKERS: usize = 2_000;
const NAMESPACES: usize = 50;

fn churn(backend: &str, s: &TestServer) {
    let cache = &s.cache;
    let ns = |i: usize| format!("tenant-{}", i % NAMESPACES);
    for n in 0..NAMESPACES {
        s.namespace(&format!("tenant-{n}"));
    }
    let began = Instant::now();
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
    let peak = cache
        .count_family(WorkerCompatibilityHeartbeatRecorder::PREFIX)
        .unwrap();
    let probe = cache.count_prefix(ServerPollingCache::PREFIX).unwrap();
    eprintln!(
        "[{backend}] worker_compatibility_heartbeat: {WORKERS} workers in {NAMESPACES} namespaces, 3 heartbeats each, in {:?}; peak {peak} keys (bound {WORKERS}); polling_cache_availability_probe: {probe} keys",
        began.elapsed()
    );
    assert_eq!(peak, WORKERS, "[{backend}] one key per registered worker");
    assert_eq!(probe, 0, "[{backend}] the probe never writes");
}

fn drained(backend: &str, s: &TestServer) {
    assert!(
        eventually(Duration::from_secs(35), || {
            s.cache
                .count_family(WorkerCompatibilityHeartbeatRecorder::PREFIX)
                .unwrap()
                == 0
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

#[test]
fn heartbeat_elections_stay_one_per_worker_and_drain_and_the_probe_writes_nothing() {
    let servers: Vec<_> = backends(14)
        .into_iter()
        .map(|(backend, cache)| (backend, TestServer::start(cache, |_| {})))
        .collect();
    std::thread::scope(|scope| {
        for (backend, s) in &servers {
            scope.spawn(move || {
                churn(backend, s);
                drained(backend, s);
            });
        }
    });
}
