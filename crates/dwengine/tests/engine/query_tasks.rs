//! Worker-routed query tasks over loopback HTTP: the round trip, lease
//! replay, the pending cap's refusal, and the `workflow_query_tasks` key
//! family's bound under churn on the in-process cache and on Redis.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dwengine::query_tasks::WorkflowQueryTaskBroker;
use serde_json::{json, Value};
use support::{cache_variants, eventually, memory_cache, SharedCache, TestServer};

const PREFIX: &str = WorkflowQueryTaskBroker::PREFIX;

fn register(s: &TestServer, ns: &str, worker: &str, queue: &str) {
    let (status, body) = s.post_ns(
        ns,
        "/api/worker/register",
        json!({ "worker_id": worker, "task_queue": queue }),
    );
    assert_eq!(status, 200, "{body}");
}

fn poll_query(
    s: &TestServer,
    ns: &str,
    queue: &str,
    worker: &str,
    poll_id: &str,
    timeout: f64,
) -> Value {
    let (status, body) = s.post_ns(
        ns,
        "/api/worker/query-tasks/poll",
        json!({ "task_queue": queue, "worker_id": worker, "poll_request_id": poll_id,
                "timeout_seconds": timeout }),
    );
    assert_eq!(status, 200, "{body}");
    body
}

fn report(s: &TestServer, ns: &str, task: &Value, outcome: &str, body: Value) -> (u16, Value) {
    let mut body = body;
    body["lease_owner"] = task["lease_owner"].clone();
    body["query_task_attempt"] = task["query_task_attempt"].clone();
    s.post_ns(
        ns,
        &format!(
            "/api/worker/query-tasks/{}/{outcome}",
            task["query_task_id"].as_str().unwrap()
        ),
        body,
    )
}

fn query(s: &TestServer, ns: &str, workflow: &str, name: &str) -> (u16, Value) {
    s.post_ns(
        ns,
        &format!("/api/workflows/{workflow}/query/{name}"),
        json!({ "input": { "codec": "json", "blob": "[]" } }),
    )
}

/// Polls until a query task arrives (the query's thread may not have queued it yet).
fn leased(s: &TestServer, ns: &str, queue: &str, worker: &str, poll_id: &str) -> Value {
    for _ in 0..50 {
        let answer = poll_query(s, ns, queue, worker, poll_id, 1.0);
        if answer["task"].is_object() {
            return answer;
        }
    }
    panic!("no query task arrived on {queue}");
}

/// A query waiting for its worker holds the namespace's only concurrency
/// slot, so a start in the meantime is refused with `Retry-After: 1`.
#[test]
fn a_concurrency_refusal_sends_a_retry_after() {
    use dwengine::admission::NamespaceLimit;
    let s = TestServer::start(
        std::sync::Arc::new(dwengine::cache::MemoryCache::default()),
        |c| {
            c.namespace_limits.insert(
                "narrow".into(),
                NamespaceLimit {
                    max_concurrent: 1,
                    per_minute: 0,
                },
            );
        },
    );
    s.namespace("narrow");
    s.start_workflow("narrow", "wf-1", "orders");
    register(&s, "narrow", "w1", "orders");
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| query(&s, "narrow", "wf-1", "stage"));
        // Once the task is leased the query is parked inside its slot.
        let task = leased(&s, "narrow", "orders", "w1", "p1")["task"].clone();
        let (status, body, retry_after) = s.post_ns_header(
            "narrow",
            "/api/workflows",
            json!({ "workflow_id": "wf-2", "workflow_type": "T", "task_queue": "orders" }),
            "retry-after",
        );
        assert_eq!(status, 429, "{body}");
        assert_eq!(
            body["rejection_reason"],
            "namespace_request_concurrency_exhausted"
        );
        assert_eq!(body["retryable"], true);
        assert_eq!(retry_after.as_deref(), Some("1"));
        let (status, body) = report(
            &s,
            "narrow",
            &task,
            "complete",
            json!({ "result": "ok", "result_envelope": { "codec": "json", "blob": "\"ok\"" } }),
        );
        assert_eq!(status, 200, "{body}");
        let (status, answer) = caller.join().unwrap();
        assert_eq!(status, 200, "{answer}");
    });
}

#[test]
fn a_query_round_trips_and_a_retried_poll_replays_only_its_own_lease() {
    let cache = memory_cache();
    let s = TestServer::start(cache, |_| {});
    s.start_workflow("default", "wf-1", "orders");
    register(&s, "default", "w1", "orders");
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| query(&s, "default", "wf-1", "stage"));
        let first = leased(&s, "default", "orders", "w1", "p1");
        let task = &first["task"];
        assert_eq!(task["query_name"], "stage");
        assert_eq!(task["query_task_attempt"], 1);
        assert!(task["history_events"]
            .as_array()
            .is_some_and(|e| !e.is_empty()));
        // The same request again gets the same lease back ...
        let again = poll_query(&s, "default", "orders", "w1", "p1", 0.0);
        assert_eq!(again["replayed"], true);
        assert_eq!(again["task"]["query_task_id"], task["query_task_id"]);
        // ... and no other request of any worker gets it.
        let other = poll_query(&s, "default", "orders", "w1", "p2", 0.0);
        assert!(other["task"].is_null(), "{other}");
        let stranger = poll_query(&s, "default", "orders", "w2", "p1", 0.0);
        assert!(stranger["task"].is_null(), "{stranger}");
        // A report without the lease is refused as the SDK expects.
        let mut forged = task.clone();
        forged["lease_owner"] = "w2".into();
        let (status, body) = report(&s, "default", &forged, "complete", json!({}));
        assert_eq!(
            (status, body["reason"].as_str()),
            (409, Some("query_task_not_leased"))
        );
        assert_eq!(body["fence"], "lease_owner_mismatch");
        let (status, body) = report(
            &s,
            "default",
            task,
            "complete",
            json!({ "result": "waiting", "result_envelope": { "codec": "json", "blob": "\"waiting\"" } }),
        );
        assert_eq!(status, 200, "{body}");
        let (status, answer) = caller.join().unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"], "waiting");
        assert_eq!(answer["result_envelope"]["blob"], "\"waiting\"");
        // The caller has its answer: the task is gone.
        let (status, body) = report(&s, "default", task, "complete", json!({}));
        assert_eq!(
            (status, body["reason"].as_str()),
            (404, Some("query_task_not_found"))
        );
    });
    // A failed query reaches the caller as query_rejected.
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| query(&s, "default", "wf-1", "missing"));
        let task = leased(&s, "default", "orders", "w1", "p3")["task"].clone();
        let (status, _) = report(
            &s,
            "default",
            &task,
            "fail",
            json!({ "failure": { "message": "unknown query", "reason": "query_rejected" } }),
        );
        assert_eq!(status, 200);
        let (status, body) = caller.join().unwrap();
        assert_eq!(
            (status, body["reason"].as_str()),
            (409, Some("query_rejected"))
        );
        assert_eq!(body["message"], "unknown query");
    });
    // Only the registered worker's query-poller marker is left.
    assert_eq!(s.keys(PREFIX), 1, "the marker of (default, orders, w1)");
    // A query name past max_operation_name_length is refused up front.
    let (status, body) = query(&s, "default", "wf-1", &"q".repeat(300));
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["query_name"].is_array(), "{body}");
}

#[test]
fn a_full_queue_refuses_the_next_query_clearly_and_timeouts_clean_up() {
    let cache = memory_cache();
    let s = TestServer::start(cache, |c| {
        c.query_tasks.max_pending_per_queue = Some(2);
        c.query_tasks.timeout_seconds = Some(2);
    });
    s.start_workflow("default", "wf-1", "orders");
    std::thread::scope(|scope| {
        let waiting: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| query(&s, "default", "wf-1", "stage")))
            .collect();
        assert!(eventually(Duration::from_secs(2), || {
            s.keys(&format!("{PREFIX}task:")) == 2
        }));
        let (status, body) = query(&s, "default", "wf-1", "stage");
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["reason"], "query_task_queue_full");
        assert_eq!(body["max_pending_per_queue"], 2);
        assert_eq!(body["pending_query_tasks"], 2);
        assert_eq!(body["task_queue"], "orders");
        assert_eq!(
            body["config_key"],
            "server.query_tasks.max_pending_per_queue"
        );
        for caller in waiting {
            let (status, body) = caller.join().unwrap();
            assert_eq!(
                (status, body["reason"].as_str()),
                (504, Some("query_worker_timeout"))
            );
        }
    });
    assert_eq!(s.keys(PREFIX), 0, "timeouts remove tasks, queue and locks");
}

#[test]
fn a_busy_queue_lock_is_a_503_with_its_own_reason_and_a_retry_after() {
    let cache = memory_cache();
    let s = TestServer::start(cache.clone(), |c| c.query_tasks.timeout_seconds = Some(1));
    s.start_workflow("default", "wf-1", "orders");
    // Another call holds the queue's lock (as a stuck holder would).
    let lock = WorkflowQueryTaskBroker::queue_lock_key("default", "orders");
    assert!(cache.add(&lock, b"other", Duration::from_secs(10)).unwrap());
    let began = Instant::now();
    let (status, body, retry_after) = s.post_ns_header(
        "default",
        "/api/workflows/wf-1/query/stage",
        json!({ "input": { "codec": "json", "blob": "[]" } }),
        "retry-after",
    );
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["reason"], "query_task_queue_busy", "{body}");
    assert_eq!(body["retryable"], true);
    assert_eq!(body["retry_after_seconds"], 1);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(
        began.elapsed() >= Duration::from_secs(2),
        "waited for the lock"
    );
    assert_eq!(s.keys(&format!("{PREFIX}task:")), 0, "nothing was queued");
    // Once the lock is free the same query is queued (and, with no
    // worker, times out).
    assert!(cache.forget(&lock).unwrap());
    let (status, body) = query(&s, "default", "wf-1", "stage");
    assert_eq!(
        (status, body["reason"].as_str()),
        (504, Some("query_worker_timeout")),
        "{body}"
    );
}

/// Hundreds of distinct queues and workers over 20 namespaces, each queue
/// with a registered worker answering one query (one in 50 left to time
/// out). The bound below does not depend on how many: 600 prove it as
/// 2,000 did, in a third of the suite's longest minute.
/// The family holds at most one marker per polling worker plus a few keys
/// per query in flight, and drains once the markers' TTL has passed.
fn query_task_keys_stay_bounded_under_churn_and_drain_after_the_marker_ttl(
    backend: &'static str,
    cache: SharedCache,
) {
    const QUEUES: usize = 600;
    const THREADS: usize = 8;
    const NAMESPACES: usize = 20;
    let s = TestServer::start(cache.clone(), |c| {
        c.query_tasks.timeout_seconds = Some(1);
        c.wait_caps.global = 256;
        c.wait_caps.per_namespace = 256;
    });
    for n in 0..NAMESPACES {
        s.namespace(&format!("tenant-{n}"));
    }
    let ns = |i: usize| format!("tenant-{}", i % NAMESPACES);
    for i in 0..QUEUES {
        let ns = ns(i);
        let (status, body) = s.post_ns(
            &ns,
            "/api/workflows",
            json!({ "workflow_id": format!("wf-{i}"), "workflow_type": "Order",
                    "task_queue": format!("queue-{i}"), "input": { "codec": "json", "blob": "[]" } }),
        );
        assert_eq!(status, 201, "{body}");
        register(&s, &ns, &format!("worker-{i}"), &format!("queue-{i}"));
    }
    let done = AtomicBool::new(false);
    let peak = AtomicUsize::new(0);
    // Queries whose 1 s timeout passed before their worker answered.
    let late = AtomicUsize::new(0);
    let began = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if let Ok(n) = cache.count_family(PREFIX) {
                    peak.fetch_max(n, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        // Stops the sampler even when a worker thread panics.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _done = Done(&done);
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (s, ns, late) = (&s, &ns, &late);
                scope.spawn(move || {
                    for i in (t..QUEUES).step_by(THREADS) {
                        let (ns, queue, worker) =
                            (ns(i), format!("queue-{i}"), format!("worker-{i}"));
                        std::thread::scope(|inner| {
                            let caller = inner.spawn(|| query(s, &ns, &format!("wf-{i}"), "stage"));
                            if i % 50 == 0 {
                                let (status, _) = caller.join().unwrap();
                                assert_eq!(status, 504);
                                return;
                            }
                            // On a loaded machine the query's 1 s can pass
                            // before its worker leases or answers it: the
                            // caller then gets 504 and the task is withdrawn
                            // (the report gets 404 or 409). That is the timeout
                            // working, counted below, not a lost answer.
                            let poll = format!("poll-{i}");
                            let task = loop {
                                let answer = poll_query(s, &ns, &queue, &worker, &poll, 1.0);
                                if answer["task"].is_object() || caller.is_finished() {
                                    break answer;
                                }
                            };
                            if !task["task"].is_object() {
                                let (status, body) = caller.join().unwrap();
                                assert_eq!(status, 504, "query {i} ended unleased: {body}");
                                late.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            let (reported, _) =
                                report(s, &ns, &task["task"], "complete", json!({ "result": i }));
                            let (status, answer) = caller.join().unwrap();
                            // Reported after the query's deadline: the task
                            // is withdrawn (404) or, before its caller
                            // withdrew it, its lease is past (409 stale).
                            if reported == 404 || (reported == 409 && status == 504) {
                                assert_eq!(status, 504, "query {i}'s task vanished: {answer}");
                                late.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            // Whatever else: say what the caller got, so a
                            // failure under load can be told apart.
                            assert_eq!(
                                reported, 200,
                                "query {i}: the report got {reported}, its caller {status} {answer}"
                            );
                            assert_eq!((status, &answer["result"]), (200, &json!(i)));
                        });
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
    });
    let churned = began.elapsed();
    let peak = peak.load(Ordering::Relaxed);
    let late = late.load(Ordering::Relaxed);
    let answerable = QUEUES - QUEUES.div_ceil(50);
    assert!(
        late * 4 <= answerable,
        "[{backend}] {late} of {answerable} queries timed out before their worker answered"
    );
    let after = cache.count_family(PREFIX).unwrap();
    // One marker per polling worker (those left to time out never
    // polled), plus task, lease, queue, lock and index per query in flight.
    let markers = QUEUES - QUEUES.div_ceil(50);
    let bound = markers + 5 * THREADS;
    eprintln!(
        "[{backend}] workflow_query_tasks: {QUEUES} queries over {QUEUES} queues in {NAMESPACES} namespaces in {churned:?} ({late} timed out first); peak {peak} keys (bound {bound}), {after} right after"
    );
    assert!(peak <= bound, "[{backend}] peak {peak} > {bound}");
    assert!(after <= markers, "[{backend}] {after} keys besides markers");
    assert_eq!(
        s.keys(&format!("{PREFIX}task:")) + s.keys(&format!("{PREFIX}queue:")),
        0,
        "[{backend}] answered and timed-out queries leave no task or queue key"
    );
    // Markers live the poll's timeout (1 s) plus 5 s.
    let drain = Instant::now();
    assert!(
        eventually(Duration::from_secs(10), || cache
            .count_family(PREFIX)
            .is_ok_and(|n| n == 0)),
        "[{backend}] {} keys left after the marker TTL",
        cache.count_family(PREFIX).unwrap()
    );
    eprintln!(
        "[{backend}] workflow_query_tasks: final 0 keys, {:?} after the churn",
        drain.elapsed()
    );
}
cache_variants!(query_task_keys_stay_bounded_under_churn_and_drain_after_the_marker_ttl);

#[test]
fn a_newer_query_poll_supersedes_the_older_one_of_the_same_worker_and_queue() {
    use dwengine::poll_requests::{PollRequestTtls, QueryTaskPollRequestStore};
    let cache = memory_cache();
    let s = TestServer::start(cache.clone(), |_| {});
    s.start_workflow("default", "wf-1", "orders");
    register(&s, "default", "w1", "orders");
    let polls = QueryTaskPollRequestStore::new(cache, PollRequestTtls::default());
    std::thread::scope(|scope| {
        let old = scope.spawn(|| {
            let began = Instant::now();
            (
                poll_query(&s, "default", "orders", "w1", "old", 50.0),
                began.elapsed(),
            )
        });
        // The old poll is the worker's current one (so it has begun).
        assert!(
            eventually(Duration::from_secs(30), || polls
                .superseded("default", "orders", "w1", "new")
                .is_ok_and(|by_old| by_old)),
            "the old poll never began"
        );
        let newer = poll_query(&s, "default", "orders", "w1", "new", 0.0);
        assert!(newer["task"].is_null(), "{newer}");
        // The old poll sees the newer one at its next pass and stops, empty,
        // long before its 50 s wait, so it cannot lease a task nobody reads.
        let (answer, waited) = old.join().unwrap();
        assert!(answer["task"].is_null(), "{answer}");
        assert!(waited < Duration::from_secs(30), "{waited:?}");
    });
}

/// Thousands of distinct poll request ids from many workers and queues:
/// two keys per poll at most, one current-marker per worker and queue, and
/// nothing once the replay TTL has passed.
fn query_poll_request_keys_stay_bounded_and_drain_after_their_ttl(
    backend: &'static str,
    cache: SharedCache,
) {
    use dwengine::poll_requests::QueryTaskPollRequestStore;
    const POLLS: usize = 4_000;
    const WORKERS: usize = 400;
    let s = TestServer::start(cache.clone(), |c| {
        c.poll_ttls.result = Duration::from_secs(4);
        c.poll_ttls.pending_slack = Duration::from_millis(500);
    });
    s.namespace("tenant");
    for w in 0..WORKERS {
        register(&s, "tenant", &format!("w{w}"), &format!("q{}", w % 40));
    }
    let began = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let s = &s;
            scope.spawn(move || {
                for i in (t..POLLS).step_by(4) {
                    let w = i % WORKERS;
                    let body = poll_query(
                        s,
                        "tenant",
                        &format!("q{}", w % 40),
                        &format!("w{w}"),
                        &format!("poll-{i}"),
                        0.0,
                    );
                    assert!(body["task"].is_null());
                }
            });
        }
    });
    // An id again: a replay, not a new poll. Asked of a poll just made:
    // the churn's own ids may have outlived their 4 s by now. A replay
    // asked later than that after its poll says nothing (and another id
    // is tried, each one more key in the bound below).
    let mut extra = 0;
    loop {
        assert!(extra < 10, "[{backend}] no replay asked within the TTL");
        extra += 1;
        let id = format!("again-{extra}");
        let asked = Instant::now();
        let fresh = poll_query(&s, "tenant", "q39", "w399", &id, 0.0);
        assert_ne!(fresh["replayed"], true, "{fresh}");
        let replay = poll_query(&s, "tenant", "q39", "w399", &id, 0.0);
        if replay["replayed"] == true {
            break;
        }
        assert!(
            asked.elapsed() >= Duration::from_secs(4),
            "[{backend}] a repeated id within its TTL was not replayed: {replay}"
        );
    }
    let peak = s.keys(QueryTaskPollRequestStore::PREFIX);
    let counted = cache
        .count_family(QueryTaskPollRequestStore::PREFIX)
        .unwrap();
    eprintln!(
        "[{backend}] query_task_poll_requests: {POLLS} polls by {WORKERS} workers in {:?}; {peak} keys after (bound {}), counted {counted}",
        began.elapsed(),
        POLLS + extra + WORKERS
    );
    // One replay-result per poll id, one current-marker per worker/queue.
    assert!(peak <= POLLS + extra + WORKERS, "[{backend}] {peak}");
    assert!(
        eventually(Duration::from_secs(10), || {
            cache
                .count_family(QueryTaskPollRequestStore::PREFIX)
                .is_ok_and(|n| n == 0)
        }),
        "[{backend}] {} keys outlived their TTL",
        cache
            .count_family(QueryTaskPollRequestStore::PREFIX)
            .unwrap()
    );
    eprintln!("[{backend}] query_task_poll_requests: final 0 keys");
}
cache_variants!(query_poll_request_keys_stay_bounded_and_drain_after_their_ttl);
