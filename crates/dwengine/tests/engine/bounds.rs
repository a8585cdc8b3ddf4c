//! Each cache surface's bound, held under churn against the real server.
//!
//! Every test drives a server over loopback HTTP and measures the keys of
//! each policy by scanning the backend for the declared prefix (the same
//! count `GET /api/system/cache-keys` reports). Each runs on the in-process
//! cache and, with `DW_TEST_REDIS_URL`, on Redis (one database per test).

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dwengine::admission::{NamespaceLimit, NamespaceRequestAdmission, TaskQueueAdmission};
use dwengine::diagnostics::WorkerPollDiagnostics;
use dwengine::poll_requests::{ActivityTaskPollRequestStore, WorkflowTaskPollRequestStore};
use dwengine::polling::{LongPollSignalStore, WorkflowTaskPoller};
use dwengine::readiness::ReadinessProbe;
use dwengine::retention::HistoryRetentionEnforcer;
use serde_json::json;
use support::{cache_variants, eventually, SharedCache, TestServer};

fn by_policy(s: &TestServer) -> serde_json::Value {
    let (status, body) = s.get("/api/system/cache-keys");
    assert_eq!(status, 200);
    body["keys_by_policy"].clone()
}

fn ten_thousand_poll_request_ids_leave_no_key_once_the_ttl_passed(
    backend: &'static str,
    cache: SharedCache,
) {
    let s = TestServer::start(cache, |c| {
        c.poll_ttls.result = Duration::from_millis(1500);
        c.poll_ttls.pending_slack = Duration::from_millis(500);
    });
    s.namespace("ns");
    let started = Instant::now();
    let polls = 10_000;
    std::thread::scope(|scope| {
        for t in 0..4 {
            let s = &s;
            scope.spawn(move || {
                for i in (t..polls).step_by(4) {
                    let (status, body) = s.poll("workflow", "ns", "q", &format!("poll-{i}"), 0);
                    assert_eq!(status, 200, "[{backend}] workflow poll {i}: {body}");
                }
            });
        }
    });
    for i in 0..1000 {
        let (status, body) = s.poll("activity", "ns", "q", &format!("act-{i}"), 0);
        assert_eq!(status, 200, "[{backend}] activity poll {i}: {body}");
    }
    let elapsed = started.elapsed();
    let workflow = s.keys(WorkflowTaskPollRequestStore::PREFIX);
    let activity = s.keys(ActivityTaskPollRequestStore::PREFIX);
    eprintln!(
        "[{backend}] 11,000 polls in {elapsed:?} ({:.2} ms each on 4+1 threads); keys in the window: workflow {workflow}, activity {activity}",
        elapsed.as_secs_f64() * 1000.0 / 11_000.0
    );
    // One replay-result key per answered poll; pending keys are gone.
    assert!(workflow <= polls, "{workflow}");
    assert!(activity <= 1000, "{activity}");
    assert!(
        eventually(Duration::from_secs(6), || {
            s.keys(WorkflowTaskPollRequestStore::PREFIX) == 0
                && s.keys(ActivityTaskPollRequestStore::PREFIX) == 0
        }),
        "[{backend}] poll request keys outlived their TTL: {}",
        by_policy(&s)
    );
    // The endpoint reads counters kept on write; an expired key leaves
    // them at the backend's next eviction tick (about a second in process).
    assert!(
        eventually(Duration::from_secs(3), || {
            by_policy(&s)["workflow_task_poll_requests"] == 0
        }),
        "[{backend}] {}",
        by_policy(&s)
    );
}
cache_variants!(ten_thousand_poll_request_ids_leave_no_key_once_the_ttl_passed);

fn wake_signals_keep_one_hashed_key_per_channel_and_expire(
    backend: &'static str,
    cache: SharedCache,
) {
    let ttl = Duration::from_millis(1200);
    // Nodes told they share a store relay their wakes, and only their
    // polls read the signal keys, so only they write them.
    let s = TestServer::start(cache, |c| {
        c.signal_ttl = ttl;
        c.sweep_scope = Some("bounds-wake-signals".into());
    });
    let mut last_round = Instant::now();
    for round in 0..3 {
        last_round = Instant::now();
        for q in 0..300 {
            s.start_workflow("ns", &format!("wf-{round}-{q}"), &format!("queue-{q}"));
        }
    }
    // Three rounds over the same 300 queues: one key per channel, never
    // one per start. Every channel holds its key only when the last round
    // (which touches all 300) fit inside the TTL; on a loaded machine the
    // first keys of that round may already have expired.
    let keys = s.keys(LongPollSignalStore::PREFIX);
    let took = last_round.elapsed();
    assert!(keys <= 300, "[{backend}] {keys} keys for 300 channels");
    if took < ttl {
        assert_eq!(keys, 300, "[{backend}] round took {took:?}");
    } else {
        assert!(keys > 0, "[{backend}] no key left after a {took:?} round");
    }
    assert!(eventually(Duration::from_secs(5), || s
        .keys(LongPollSignalStore::PREFIX)
        == 0));
}
cache_variants!(wake_signals_keep_one_hashed_key_per_channel_and_expire);

/// A node alone (its own SQLite file, no sweep scope shared with others)
/// has no relay, and its polls never read a signal key (its board wakes
/// them), so its starts write none: the key cost an eighth of the HTTP
/// threads' CPU per start. A poll it holds is still woken by a start.
fn a_node_alone_writes_no_wake_signal_and_still_wakes_its_polls(
    backend: &'static str,
    cache: SharedCache,
) {
    let s = TestServer::start(cache, |c| {
        c.database = Some(c.polling_cache_path.join("store.sqlite"));
    });
    s.namespace("ns");
    // A fresh server holds no wait slot, so the one awaited below is the
    // poll's.
    assert_eq!(s.wait_slot_files(), 0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let poller = scope.spawn(|| s.poll("workflow", "ns", "lone-q", "lp", 50_000));
        assert!(
            eventually(Duration::from_secs(30), || s.wait_slot_files() == 1),
            "[{backend}] the poll never waited"
        );
        for q in 0..20 {
            s.start_workflow("ns", &format!("lone-{q}"), &format!("queue-{q}"));
        }
        s.start_workflow("ns", "lone-polled", "lone-q");
        let (status, answer) = poller.join().unwrap();
        assert_eq!(status, 200, "[{backend}] {answer}");
        assert_eq!(
            answer["task"]["workflow_id"], "lone-polled",
            "[{backend}] {answer}"
        );
    });
    // Woken, not run out: its 50 s wait began after `started`.
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "[{backend}] the poll ran out its wait instead of being woken"
    );
    assert_eq!(
        s.keys(LongPollSignalStore::PREFIX),
        0,
        "[{backend}] a node alone wrote wake signal keys nobody reads"
    );
}
cache_variants!(a_node_alone_writes_no_wake_signal_and_still_wakes_its_polls);

fn namespace_admission_keys_exist_only_for_configured_namespaces_and_stay_under_the_limit(
    backend: &'static str,
    cache: SharedCache,
) {
    let s = TestServer::start(cache, |c| {
        // Churns past the default namespace cap on purpose.
        c.max_namespaces = 0;
        c.namespace_limits.insert(
            "rated".into(),
            NamespaceLimit {
                max_concurrent: 4,
                per_minute: 30,
            },
        );
        c.namespace_limits.insert(
            "narrow".into(),
            NamespaceLimit {
                max_concurrent: 2,
                per_minute: 0,
            },
        );
    });
    s.namespace("rated");
    for ns in 0..1000 {
        s.start_workflow(&format!("tenant-{ns}"), "wf", "q");
    }
    assert_eq!(
        s.keys(NamespaceRequestAdmission::PREFIX),
        0,
        "[{backend}] unconfigured namespaces write nothing"
    );

    // The rate bucket is the wall-clock minute: start the 40 requests early
    // in a minute so that one bucket sees them all.
    let minute_of = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs() / 60;
    // Waited for with a request a second, not one long sleep: the server
    // closes a connection idle past its header-read timeout (10 s), and
    // the client's next POST on that pooled connection would fail.
    let into_minute = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            % 60
    };
    while into_minute() > 40 {
        assert_eq!(s.get("/api/health").0, 200, "[{backend}]");
        std::thread::sleep(Duration::from_millis(500));
    }
    let first_minute = minute_of(SystemTime::now());
    let mut limited = 0;
    for i in 0..40 {
        let (status, body) = s.post_ns(
            "rated",
            "/api/workflows",
            json!({ "workflow_id": format!("r{i}"), "workflow_type": "T", "task_queue": "q" }),
        );
        if status == 429 {
            assert_eq!(body["limit"], "rate_limited");
            limited += 1;
        }
    }
    if minute_of(SystemTime::now()) == first_minute {
        assert_eq!(limited, 10, "[{backend}] 30 per minute out of 40");
    } else {
        // A loaded machine crossed a minute anyway: a fresh bucket admits
        // again, so fewer are refused, never more.
        assert!(limited <= 10, "[{backend}] {limited}");
    }
    // Rate bucket(s), rejection bucket(s) and their log-suppression
    // key(s) only: no slot is left held.
    assert!(
        s.keys(NamespaceRequestAdmission::PREFIX) <= 6,
        "[{backend}]"
    );

    s.start_workflow("narrow", "n", "q");
    let max_slots = AtomicUsize::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    let slot_prefix = format!("{}slot:", NamespaceRequestAdmission::PREFIX);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                max_slots.fetch_max(s.keys(&slot_prefix), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let workers: Vec<_> = (0..16)
            .map(|_| {
                scope.spawn(|| {
                    for _ in 0..20 {
                        let (status, _) = s.get_ns("narrow", "/api/workflows/n");
                        assert!(status == 200 || status == 429, "{status}");
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    let max_slots = max_slots.load(Ordering::Relaxed);
    eprintln!("[{backend}] most concurrent slot keys seen for a limit of 2: {max_slots}");
    assert!(max_slots <= 2, "[{backend}] {max_slots}");
    assert_eq!(
        s.keys(&slot_prefix),
        0,
        "slots are released with their requests"
    );
}
cache_variants!(
    namespace_admission_keys_exist_only_for_configured_namespaces_and_stay_under_the_limit
);

fn minute() -> u64 {
    dwengine::cache::minute_bucket(std::time::SystemTime::now())
}

fn dispatch_budgets_write_keys_only_when_capped_and_stop_at_the_cap(
    backend: &'static str,
    cache: SharedCache,
) {
    let s = TestServer::start(cache.clone(), |_| {});
    for i in 0..5 {
        s.start_workflow("ns", &format!("u{i}"), "free");
        s.poll("workflow", "ns", "free", &format!("u{i}"), 0);
    }
    assert_eq!(s.keys(TaskQueueAdmission::LOCK_PREFIX), 0, "[{backend}]");
    assert_eq!(s.keys(TaskQueueAdmission::COUNTER_PREFIX), 0, "[{backend}]");
    drop(s);

    let s = TestServer::start(cache, |c| c.dispatches_per_minute = Some(3));
    let mut attempt = 0;
    loop {
        attempt += 1;
        let queue = format!("capped-{attempt}");
        let before = minute();
        for i in 0..10 {
            s.start_workflow("ns", &format!("c{attempt}-{i}"), &queue);
        }
        let leased = (0..10)
            .filter(|i| {
                !s.poll("workflow", "ns", &queue, &format!("c{attempt}-{i}"), 0)
                    .1["task"]
                    .is_null()
            })
            .count();
        if minute() != before && attempt < 3 {
            continue; // the budget legitimately reset mid-test
        }
        assert_eq!(leased, 3, "[{backend}]");
        break;
    }
    assert_eq!(
        s.keys(TaskQueueAdmission::LOCK_PREFIX),
        0,
        "[{backend}] locks are released"
    );
    assert!(
        s.keys(TaskQueueAdmission::COUNTER_PREFIX) <= attempt,
        "[{backend}]"
    );
}
cache_variants!(dispatch_budgets_write_keys_only_when_capped_and_stop_at_the_cap);

fn expired_lease_recovery_is_capped_per_pass_and_suppressed_per_task(
    backend: &'static str,
    cache: SharedCache,
) {
    // All 12 leases must be taken before the first one expires, or a poll of
    // the set-up itself runs a recovery pass. A loaded machine can take
    // longer than a short lease over the set-up, so the lease doubles (every
    // backend afresh) until the set-up fits in it; the cap per pass is the
    // same property at any lease.
    let mut lease = Duration::from_millis(200);
    let mut cache = Some(cache);
    'attempt: loop {
        {
            let cache = cache.take().unwrap_or_else(|| support::cache_for(backend));
            let s = TestServer::start(cache, |c| {
                c.task_lease = lease;
                c.recovery_suppression = Duration::from_millis(1500);
            });
            let set_up = Instant::now();
            for i in 0..12 {
                s.start_workflow("ns", &format!("e{i}"), "q");
                let (_, leased) = s.poll("workflow", "ns", "q", &format!("first-{i}"), 0);
                assert!(leased["task"].is_object());
            }
            if set_up.elapsed() >= lease {
                lease *= 2;
                assert!(
                    lease <= Duration::from_secs(30),
                    "[{backend}] 12 starts and polls took {:?}",
                    set_up.elapsed()
                );
                continue 'attempt;
            }
            // Every lease has expired once the last one has.
            std::thread::sleep(lease + Duration::from_millis(100));
            let (_, recovered) = s.poll("workflow", "ns", "q", "after-expiry", 0);
            assert_eq!(
                recovered["task"]["workflow_task_attempt"], 2,
                "[{backend}] the recovered task is leased again"
            );
            assert_eq!(
                s.keys(WorkflowTaskPoller::RECOVERY_PREFIX),
                WorkflowTaskPoller::DEFAULT_SCAN_LIMIT,
                "[{backend}] one pass recovers at most the scan limit"
            );
            for i in 0..4 {
                s.poll("workflow", "ns", "q", &format!("more-{i}"), 0);
            }
            assert!(s.keys(WorkflowTaskPoller::RECOVERY_PREFIX) <= 12 + 1);
            assert!(eventually(Duration::from_secs(30), || s
                .keys(WorkflowTaskPoller::RECOVERY_PREFIX)
                == 0));
        }
        break;
    }
}
cache_variants!(expired_lease_recovery_is_capped_per_pass_and_suppressed_per_task);

fn heartbeats_elect_one_pruning_pass_per_namespace(backend: &'static str, cache: SharedCache) {
    // Long enough for 600 heartbeats on a loaded debug build, short enough to
    // watch the keys drain.
    const THROTTLE: Duration = Duration::from_secs(3);
    let s = TestServer::start(cache, |c| {
        c.history_retention = Duration::ZERO;
        c.retention_throttle = THROTTLE;
    });
    s.start_workflow("ns", "old", "q");
    let (_, task) = s.poll("workflow", "ns", "q", "p", 0);
    let (status, done) = s.complete(
        &task["task"],
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "1" } }]),
    );
    assert_eq!(status, 200, "{done}");
    std::thread::sleep(Duration::from_millis(5));
    let beat = |ns: &str| {
        s.post_ns(
            ns,
            "/api/worker/register",
            json!({ "worker_id": "w", "task_queue": "q" }),
        )
        .1
    };
    assert!(
        beat("ns")["pruned_run_id"].is_string(),
        "[{backend}] the elected heartbeat prunes"
    );
    assert!(
        s.post_ns("ns", "/api/worker/heartbeat", json!({ "worker_id": "w" }))
            .1["pruned_run_id"]
            .is_null(),
        "[{backend}] throttled"
    );
    let (_, described) = s.get_ns("ns", "/api/workflows/old");
    assert!(described["details_pruned_at"].is_string(), "{described}");
    let churn = Instant::now();
    for ns in 0..200 {
        s.namespace(&format!("tenant-{ns}"));
        for _ in 0..3 {
            beat(&format!("tenant-{ns}"));
        }
    }
    let keys = s.keys(HistoryRetentionEnforcer::PREFIX);
    if churn.elapsed() < THROTTLE {
        assert_eq!(keys, 201, "[{backend}] one key per namespace");
    } else {
        // The first namespaces' keys may already have expired: the bound
        // still holds, only the exact count is unknowable.
        assert!(keys <= 201, "[{backend}] one key per namespace: {keys}");
    }
    assert!(eventually(THROTTLE + Duration::from_secs(5), || s
        .keys(HistoryRetentionEnforcer::PREFIX)
        == 0));
}
cache_variants!(heartbeats_elect_one_pruning_pass_per_namespace);

fn poll_diagnostics_keep_one_value_per_queue_whoever_polls(
    backend: &'static str,
    cache: SharedCache,
) {
    let s = TestServer::start(cache, |_| {});
    s.namespace("ns");
    for worker in 0..300 {
        s.post_ns(
            "ns",
            "/api/worker/workflow-tasks/poll",
            json!({ "task_queue": "q", "worker_id": format!("w{worker}"),
                    "poll_request_id": format!("p{worker}"), "timeout_seconds": 0 }),
        );
    }
    assert_eq!(s.keys(WorkerPollDiagnostics::PREFIX), 1, "[{backend}]");
    let (_, seen) = s.get("/api/system/poll-diagnostic?namespace=ns&task_queue=q");
    assert_eq!(seen["last_poll"]["worker_id"], "w299");
    for q in 0..50 {
        let (status, body) = s.poll("activity", "ns", &format!("q{q}"), "same", 0);
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(s.keys(WorkerPollDiagnostics::PREFIX), 51, "[{backend}]");
    // A hundred cache round trips leave no probe key behind (a stalled
    // PostgreSQL writer's transient 503 runs no probe and is asked again).
    for _ in 0..100 {
        assert_eq!(s.ready()["checks"]["cache"], "ok", "[{backend}]");
    }
    assert_eq!(s.keys(ReadinessProbe::PREFIX), 0, "[{backend}]");
}
cache_variants!(poll_diagnostics_keep_one_value_per_queue_whoever_polls);

#[test]
fn a_thousand_namespaces_cannot_create_more_wait_slots_than_the_cap() {
    let s = TestServer::start(
        std::sync::Arc::new(dwengine::cache::MemoryCache::default()),
        |c| {
            // A thousand namespaces besides `default`: past the default cap.
            c.max_namespaces = 0;
            c.wait_caps = dwengine::wait_slots::WaitCaps {
                global: 8,
                per_namespace: 2,
            };
        },
    );
    let pool = s
        .running
        .engine()
        .config()
        .polling_cache_path
        .join("wait-slots");
    let count_files = || {
        walk(&pool)
            .iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("slot-"))
            })
            .count()
    };
    for n in 0..1000 {
        s.namespace(&format!("ns-{n}"));
    }
    let most = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..24 {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= 1000 {
                    break;
                }
                let (status, body) =
                    s.poll("workflow", &format!("ns-{n}"), "q", &format!("w-{n}"), 100);
                match status {
                    200 => {}
                    429 => {
                        assert_eq!(body["reason"], "long_poll_capacity_exhausted");
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    other => panic!("{other}: {body}"),
                }
                most.fetch_max(count_files(), Ordering::Relaxed);
            });
        }
    });
    let most = most.load(Ordering::Relaxed);
    eprintln!(
        "1,000 namespaces, cap 8: at most {most} slot files, {} waits refused",
        refused.load(Ordering::Relaxed)
    );
    assert!(most <= 8 + 1, "{most}");
    assert!(refused.load(Ordering::Relaxed) > 0, "the cap was exercised");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn due_timer_recovery_fires_at_most_the_scan_limit_per_poll_pass() {
    let s = TestServer::start(
        std::sync::Arc::new(dwengine::cache::MemoryCache::default()),
        |_| {},
    );
    s.start_workflow("ns", "sleepy", "q");
    let (_, first) = s.poll("workflow", "ns", "q", "t0", 0);
    let timers: Vec<_> = (0..12)
        .map(|_| json!({ "type": "start_timer", "delay_seconds": 0 }))
        .collect();
    let (status, done) = s.complete(&first["task"], json!(timers));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["new_events"], 12);
    let fired = |answer: &serde_json::Value| {
        answer["task"]["history_events"]
            .as_array()
            .map(|h| h.iter().filter(|e| e["event_type"] == "TimerFired").count())
            .unwrap_or(0)
    };
    let mut seen = Vec::new();
    for pass in 1..=3 {
        let (_, answer) = s.poll("workflow", "ns", "q", &format!("t{pass}"), 0);
        seen.push(fired(&answer));
        // Nothing new to do: the worker waits for the rest of its timers.
        let (status, body) = s.complete(&answer["task"], json!([]));
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        seen,
        vec![5, 10, 12],
        "each pass fires at most 5 due timers"
    );
}

/// CI runs every Redis variant: a test binary built there without
/// `DW_TEST_REDIS_URL` (which would compile them as ignored) fails here,
/// and one built with it has no Redis variant left ignored. Elsewhere the
/// ignored variants are listed as such by `cargo test`, with the reason.
#[test]
fn ci_runs_the_redis_variants() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--ignored", "--format", "terse"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed = String::from_utf8_lossy(&out.stdout);
    let ignored_redis: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|name| name.ends_with("::redis"))
        .collect();
    if cfg!(dw_test_redis) {
        assert!(ignored_redis.is_empty(), "{ignored_redis:?}");
    } else {
        assert!(
            option_env!("CI").is_none(),
            "CI built the engine's tests without DW_TEST_REDIS_URL: the {} Redis variants \
             would only be reported as ignored; start redis-server and set it (.ci/run does)",
            ignored_redis.len()
        );
        assert!(ignored_redis.len() >= 15, "{ignored_redis:?}");
    }
}
