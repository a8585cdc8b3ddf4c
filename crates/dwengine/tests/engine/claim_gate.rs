//! The SQLite worker poll claim gate (`sqlite_worker_poll_claim_gate`):
//! 8 concurrent pollers drain workflow tasks from a SQLite file over
//! loopback HTTP, with the gate and without it, on the in-process cache and
//! on Redis. The gate's singleton key never exceeds one and is gone after
//! the drain; with the gate, at most one claim transaction runs at a time.
//! The figures printed are the measurement docs/bounded-growth.md quotes.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dwengine::polling::WorkerPollClaimGate;
use serde_json::json;
use support::{cache_variants, SharedCache, TestServer};

const TASKS: usize = 400;
const POLLERS: usize = 8;
/// Longer than any drain: see the server's configuration below.
const LEASE: Duration = Duration::from_secs(3_600);

fn eight_pollers_drain_a_sqlite_queue_with_and_without_the_claim_gate(
    backend: &'static str,
    cache: SharedCache,
) {
    for gate in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("claims.sqlite");
        let s = TestServer::start(cache.clone(), move |c| {
            c.sqlite_poll_claim_gate = Some(gate);
            c.database = Some(db);
            // No task is completed here, so a lease that expired before the
            // drain ends (30 s by default; a drain on a loaded machine has
            // taken longer) would hand its task out again, rightly: leases
            // outlast the test, so a task leased twice is a double lease.
            c.task_lease = LEASE;
        });
        for i in 0..TASKS {
            s.start_workflow("default", &format!("wf-{i}"), "claims");
        }
        let leased = AtomicUsize::new(0);
        let done = AtomicBool::new(false);
        let peak_keys = AtomicUsize::new(0);
        let latencies = Mutex::new(Vec::new());
        let seen = Mutex::new(std::collections::HashSet::new());
        // Set by a poller that fails: the others stop rather than poll for
        // ever for a task the failed poll may have been leased (it stays
        // leased for the whole `LEASE`), so the failure is reported.
        let failed = AtomicBool::new(false);
        let began = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    // A read that timed out (a Redis round trip past the
                    // client's 2 s on a loaded machine) is a sample not
                    // taken, as `support::eventually` takes it.
                    if let Ok(keys) = s.cache.count_prefix(WorkerPollClaimGate::PREFIX) {
                        peak_keys.fetch_max(keys, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
            let pollers: Vec<_> = (0..POLLERS)
                .map(|p| {
                    let (s, leased, latencies, seen) = (&s, &leased, &latencies, &seen);
                    let failed = &failed;
                    scope.spawn(move || {
                        let _stops_the_others = StopOnPanic(failed);
                        let mut n = 0;
                        while leased.load(Ordering::Relaxed) < TASKS && !failed.load(Ordering::Relaxed) {
                            n += 1;
                            let t = Instant::now();
                            let (status, body) = s.post(
                                "/api/worker/workflow-tasks/poll",
                                json!({ "task_queue": "claims", "worker_id": format!("w{p}"),
                                        "poll_request_id": format!("{gate}-p{p}-{n}"), "timeout_seconds": 0.2 }),
                            );
                            latencies.lock().unwrap().push(t.elapsed());
                            assert_eq!(status, 200, "{body}");
                            if let Some(id) = body["task"]["task_id"].as_str() {
                                assert!(
                                    seen.lock().unwrap().insert(id.to_owned()),
                                    "task {id} leased twice ({:?} into the drain)",
                                    began.elapsed()
                                );
                                leased.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            // The monitor stops whatever the pollers did: a poller that
            // failed is reported once the monitor is joined, where an
            // unwrap here would leave the scope waiting on it for ever.
            let joined: Vec<_> = pollers.into_iter().map(|p| p.join()).collect();
            done.store(true, Ordering::Relaxed);
            for poller in joined {
                if let Err(panic) = poller {
                    std::panic::resume_unwind(panic);
                }
            }
        });
        let drain = began.elapsed();
        let stats = s.running.engine().claim_gate().stats();
        let mut latencies = latencies.into_inner().unwrap();
        latencies.sort();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        let peak = peak_keys.load(Ordering::Relaxed);
        let mut after = usize::MAX;
        assert!(
            support::eventually(Duration::from_secs(30), || {
                s.cache
                    .count_prefix(WorkerPollClaimGate::PREFIX)
                    .map(|keys| after = keys)
                    .is_ok()
            }),
            "[{backend}] the cache answers a count within 30 s"
        );
        eprintln!(
            "[{backend}] gate {}: {TASKS} tasks by {POLLERS} pollers in {drain:?}; claim probes {} ({} empty), passes that skipped {}, most claims in flight {} ({} past the TTL); polls {} p50 {:?} p99 {:?}; gate keys peak {peak} final {after}",
            if gate { "on " } else { "off" },
            stats.probes,
            stats.empty_probes,
            stats.skipped,
            stats.max_in_flight,
            stats.overran,
            latencies.len(),
            at(0.5),
            at(0.99),
        );
        assert_eq!(leased.load(Ordering::Relaxed), TASKS);
        assert_eq!(
            after, 0,
            "[{backend}] the gate key is deleted by its holder"
        );
        if gate {
            // One claim at a time while each holder releases within the
            // key's TTL; a claim slower than that (a loaded machine) lets
            // the next in, as the gate is built to, and is counted.
            assert!(
                stats.max_in_flight == 1 || stats.overran > 0,
                "[{backend}] {} claims at once, none past the TTL",
                stats.max_in_flight
            );
            assert!(peak <= 1, "[{backend}] {peak}");
        } else {
            assert_eq!(peak, 0, "[{backend}] no key without the gate");
        }
    }
}
cache_variants!(eight_pollers_drain_a_sqlite_queue_with_and_without_the_claim_gate);

/// Raises its flag when the thread holding it unwinds from a panic.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}
