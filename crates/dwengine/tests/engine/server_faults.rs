//! The server under hostile repeats, vanished workers and large histories.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::{hash_dimensions, MemoryCache};
use dwengine::poll_requests::WorkflowTaskPollRequestStore;
use dwengine::registry::IdleWorkerSweep;
use dwengine::store::HistoryPageLimit;
use serde_json::{json, Value};
use support::{wire, TestServer};

fn server(tweak: impl FnOnce(&mut dwengine::server::ServerConfig)) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), tweak)
}

/// Worker `w`'s poll `same` of queue `q` in `ns`, waiting up to 50 s on a
/// fresh server, once it holds its wait slot: it ends when a run starts on
/// `q` (or after those 50 s, long after any test below is done with it).
fn first_poll_holding_its_slot(s: &Arc<TestServer>) -> std::thread::JoinHandle<(u16, Value)> {
    assert_eq!(s.wait_slot_files(), 0, "a fresh server holds no wait");
    let first = {
        let s = s.clone();
        std::thread::spawn(move || s.send(&wire::poll("workflow", "ns", "q", "w", "same", 50_000)))
    };
    assert!(
        support::eventually(Duration::from_secs(30), || s.wait_slot_files() == 1),
        "the first poll never waited"
    );
    first
}

/// Ends the first poll: a run on its queue, which it leases.
fn release_first_poll(s: &TestServer, first: std::thread::JoinHandle<(u16, Value)>) -> Value {
    s.start_workflow("ns", "release", "q");
    let (status, answer) = first.join().unwrap();
    assert_eq!(status, 200, "{answer}");
    let task = wire::polled_task(&answer).expect("the first poll leased the run");
    task.clone()
}

#[test]
fn a_repeat_of_a_running_poll_needs_a_wait_slot_like_any_wait() {
    let s = Arc::new(server(|c| {
        c.wait_caps.global = 1;
        c.wait_caps.per_namespace = 1;
    }));
    s.namespace("ns");
    let first = first_poll_holding_its_slot(&s);
    // The first poll holds the one slot until the run below starts, so a
    // repeat that waited (without a slot) would get the replayed task.
    let (status, body) = s.send(&wire::poll("workflow", "ns", "q", "w", "same", 1500));
    assert_eq!(
        (status, &body["reason"]),
        (429, &json!("long_poll_capacity_exhausted")),
        "the repeat waited without a slot: {body}"
    );
    // The shape both published SDKs honour as backpressure (they wait
    // retry_after_seconds and poll again, outside their retry budget).
    assert_eq!(
        body["poll_status"], "long_poll_capacity_exhausted",
        "{body}"
    );
    assert!(
        body["task"].is_null() && body.get("task").is_some(),
        "{body}"
    );
    assert_eq!(body["task_kind"], "workflow_task", "{body}");
    assert_eq!(body["task_queue"], "q", "{body}");
    assert_eq!(body["retryable"], true, "{body}");
    assert_eq!(body["retry_after_seconds"], 1, "{body}");
    release_first_poll(&s, first);
}

#[test]
fn the_replay_key_holds_a_task_reference_never_the_task() {
    let s = server(|_| {});
    s.start_workflow("ns", "big", "q");
    for i in 0..20 {
        let (status, _) = s.send(&wire::signal(
            "ns",
            "big",
            "blob",
            json!("x".repeat(50_000)),
            &format!("s{i}"),
        ));
        assert_eq!(status, 202);
    }
    let (_, first) = s.send(&wire::poll("workflow", "ns", "q", "w", "p", 0));
    let task = wire::polled_task(&first).expect("a task");
    assert!(task["history_events"].to_string().len() > 1_000_000);
    let key = format!(
        "{}{}",
        WorkflowTaskPollRequestStore::PREFIX,
        hash_dimensions(&["ns", "q", "p"])
    );
    let stored = s.cache.get(&key).unwrap().expect("a replay key");
    assert!(
        stored.len() <= 32,
        "the replay key holds {} bytes",
        stored.len()
    );
    let (_, replay) = s.send(&wire::poll("workflow", "ns", "q", "w", "p", 0));
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["task"]["task_id"], task["task_id"]);
    assert_eq!(replay["task"]["history_events"], task["history_events"]);
}

/// Schedules one activity and leases it to worker `w`; with the instant
/// taken before that lease's poll, so the lease began after it.
fn schedule_one_activity(s: &TestServer) -> (serde_json::Value, std::time::Instant) {
    s.start_workflow("ns", "wf", "q");
    let (_, polled) = s.send(&wire::poll("workflow", "ns", "q", "w", "p1", 0));
    let task = wire::polled_task(&polled).expect("a workflow task");
    let (status, body) = s.send(&wire::complete_workflow(task, false));
    assert_eq!(status, 200, "{body}");
    let asked = std::time::Instant::now();
    let (_, polled) = s.send(&wire::poll("activity", "ns", "q", "w", "a1", 0));
    let task = wire::polled_task(&polled)
        .expect("an activity task")
        .clone();
    (task, asked)
}

/// The activity lease of the two tests below. Each runs rounds on fresh
/// servers: a round whose check came later than this after the lease (or
/// the last heartbeat) began says nothing, since the lease may rightly
/// have expired, and the next round tries again; 10 such rounds fail.
const LEASE: Duration = Duration::from_millis(600);
/// Less than the lease, for the server's clock's milliseconds and sweep.
const SURELY_LEASED: Duration = Duration::from_millis(500);

#[test]
fn a_vanished_activity_worker_s_task_comes_back_after_its_lease() {
    for round in 0..10 {
        let s = server(|c| c.task_lease = LEASE);
        let (leased, asked) = schedule_one_activity(&s);
        let (_, none) = s.send(&wire::poll("activity", "ns", "q", "w", "a2", 0));
        if asked.elapsed() >= SURELY_LEASED {
            eprintln!("round {round}: the check came too late to say");
            continue;
        }
        assert!(wire::polled_task(&none).is_none(), "still leased: {none}");
        // Once the lease has passed the task comes back to another poll.
        let mut again = None;
        let mut n = 0;
        let mut asked_again = asked;
        assert!(
            support::eventually(Duration::from_secs(30), || {
                n += 1;
                asked_again = std::time::Instant::now();
                let (_, polled) = s.send(&wire::poll(
                    "activity",
                    "ns",
                    "q",
                    "w2",
                    &format!("a3-{n}"),
                    0,
                ));
                again = wire::polled_task(&polled).cloned();
                again.is_some()
            }),
            "the expired lease came back"
        );
        let again = again.unwrap();
        assert_eq!(
            (wire::task_id(&again), again["attempt_number"].as_i64()),
            (wire::task_id(&leased), Some(2))
        );
        let (status, stale) = s.send(&wire::complete_activity(&leased));
        assert_eq!(
            (status, &stale["reason"]),
            (409, &json!("stale_task_lease")),
            "the first holder lost its lease"
        );
        let (status, body) = s.send(&wire::complete_activity(&again));
        if status != 200 && asked_again.elapsed() >= SURELY_LEASED {
            eprintln!("round {round}: the completion came too late to say");
            continue;
        }
        assert_eq!(status, 200, "{body}");
        return;
    }
    panic!("no round checked the lease while it surely held");
}

#[test]
fn heartbeats_keep_an_activity_lease() {
    'round: for round in 0..10 {
        let s = server(|c| c.task_lease = LEASE);
        let (leased, asked) = schedule_one_activity(&s);
        // When the lease (or the last heartbeat) was asked for: the server
        // renewed it after this.
        let mut last = asked;
        // Heartbeats until the task has outlived three leases.
        while asked.elapsed() < 3 * LEASE {
            std::thread::sleep(Duration::from_millis(100));
            let sent = std::time::Instant::now();
            let (status, body) = s.send(&wire::heartbeat_task("activity", &leased));
            if last.elapsed() >= SURELY_LEASED && status != 200 {
                eprintln!("round {round}: a heartbeat came too late to say");
                continue 'round;
            }
            assert_eq!(status, 200, "{body}");
            last = sent;
        }
        let (_, none) = s.send(&wire::poll("activity", "ns", "q", "w2", "a2", 0));
        if last.elapsed() >= SURELY_LEASED {
            eprintln!("round {round}: the check came too late to say");
            continue;
        }
        assert!(
            wire::polled_task(&none).is_none(),
            "the heartbeats kept it: {none}"
        );
        let (status, body) = s.send(&wire::complete_activity(&leased));
        if status != 200 && last.elapsed() >= SURELY_LEASED {
            eprintln!("round {round}: the completion came too late to say");
            continue;
        }
        assert_eq!(status, 200, "{body}");
        let (status, body) = s.send(&wire::heartbeat_task("activity", &leased));
        assert_eq!((status, &body["reason"]), (409, &json!("stale_task_lease")));
        return;
    }
    panic!("no round kept its heartbeats within the lease");
}

#[test]
fn a_poll_carries_one_history_page_and_the_rest_is_paged() {
    let s = server(|c| {
        c.store.history_page = HistoryPageLimit {
            max_events: 3,
            max_bytes: 1 << 20,
        }
    });
    s.start_workflow("ns", "wf", "q");
    for i in 0..5 {
        s.send(&wire::signal("ns", "wf", "go", json!(i), &format!("s{i}")));
    }
    let (_, polled) = s.send(&wire::poll("workflow", "ns", "q", "w", "p", 0));
    let task = wire::polled_task(&polled).unwrap();
    assert_eq!(task["history_events"].as_array().unwrap().len(), 3);
    assert_eq!(task["total_history_events"], 6);
    let token = wire::next_history(task).expect("more history");
    let (status, page) = s.send(&wire::history_page(task, &token));
    assert_eq!(status, 200, "{page}");
    let sequences: Vec<_> = page["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, vec![4, 5, 6], "numbered from 1");
    assert!(page["next_history_page_token"].is_null());
}

#[test]
fn start_and_cancel_retries_converge_to_one_outcome() {
    let s = server(|_| {});
    s.namespace("ns");
    let (_, first) = s.send(&wire::start("ns", "wf", "q", Some("req-1")));
    let (status, retry) = s.send(&wire::start("ns", "wf", "q", Some("req-1")));
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["run_id"], first["run_id"]);
    assert_eq!(retry["duplicate"], true);
    for i in 0..50 {
        let (status, body) = s.send(&wire::stop("ns", "wf", false, &format!("c{}", i % 2)));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["duplicate"], i > 0);
    }
    let (_, described) = s.send(&wire::describe("ns", "wf"));
    assert_eq!(
        described["history_length"], 2,
        "the start and one cancellation"
    );
    assert_eq!(described["status"], "cancelled");
    let (status, body) = s.send(&wire::stop("ns", "wf", true, "t1"));
    assert_eq!(
        (status, &body["reason"]),
        (409, &json!("run_not_active")),
        "a cancelled run cannot be terminated"
    );
    s.send(&wire::start("ns", "wf2", "q", None));
    let (status, _) = s.send(&wire::stop("ns", "wf2", true, "t1"));
    assert_eq!(status, 200);
    let (status, again) = s.send(&wire::stop("ns", "wf2", true, "t1"));
    assert_eq!((status, &again["duplicate"]), (200, &json!(true)));
    let (status, other) = s.send(&wire::stop("ns", "wf2", true, "t2"));
    assert_eq!((status, &other["reason"]), (409, &json!("run_not_active")));
}

#[test]
fn heartbeats_sweep_idle_worker_registrations_a_bounded_batch_at_a_time() {
    // Every registration is a heartbeat that sweeps, so the 20 must all be
    // registered before the first of them is idle, or the set-up sweeps
    // itself. A loaded machine can take longer than a short idle window
    // over the set-up: the window doubles (on a fresh server) until the
    // set-up fits in it. The batch bound is the same property at any window.
    let mut idle_after = Duration::from_millis(200);
    loop {
        let s = server(|c| {
            c.worker_sweep = IdleWorkerSweep {
                idle_worker_prune_scan_limit: 5,
                idle_after,
            }
        });
        s.namespace("ns");
        let set_up = std::time::Instant::now();
        for i in 0..20 {
            s.send(&wire::register("ns", &format!("w{i}"), "q"));
        }
        let workers = || {
            s.running
                .engine()
                .shared_store()
                .read(|store| store.worker_count())
                .unwrap()
        };
        let registered = workers();
        if set_up.elapsed() >= idle_after {
            idle_after *= 2;
            assert!(
                idle_after <= Duration::from_secs(30),
                "20 registrations took {:?}",
                set_up.elapsed()
            );
            continue;
        }
        assert_eq!(registered, 20);
        // Every one of the 20 is idle once the last one is.
        std::thread::sleep(idle_after + Duration::from_millis(100));
        s.send(&wire::register("ns", "live", "q"));
        assert_eq!(workers(), 16, "20 idle - 5 swept + the live one");
        for _ in 0..3 {
            s.send(&wire::register("ns", "live", "q"));
        }
        assert_eq!(workers(), 1);
        return;
    }
}

#[test]
fn a_run_s_unprocessed_payload_bytes_have_a_budget() {
    let s = server(|c| c.store.max_pending_payload_bytes = 5_000);
    s.start_workflow("ns", "wf", "q");
    let blob = json!("x".repeat(3_000));
    let (status, _) = s.send(&wire::signal("ns", "wf", "blob", blob.clone(), "s1"));
    assert_eq!(status, 202);
    let (status, body) = s.send(&wire::signal("ns", "wf", "blob", blob, "s2"));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "pending_payload_bytes_exceeded");
    assert_eq!(body["limit"], 5_000);
    assert_eq!(body["pending_bytes"], 3_002);
}

#[test]
fn unknown_workers_create_poll_keys_only_within_their_budget() {
    let s = server(|c| c.unknown_worker_poll_keys = 3);
    s.namespace("ns");
    let families = [
        WorkflowTaskPollRequestStore::PREFIX,
        dwengine::diagnostics::WorkerPollDiagnostics::PREFIX,
    ];
    let keys = || families.iter().map(|f| s.keys(f)).sum::<usize>();
    for i in 0..20 {
        let poll = wire::poll(
            "workflow",
            "ns",
            &format!("q{i}"),
            "stranger",
            &format!("p{i}"),
            0,
        );
        assert_eq!(s.send(&poll).0, 200);
    }
    assert_eq!(keys(), 6, "3 replay keys and 3 diagnostics, then none");
    s.send(&wire::register("ns", "known", "q"));
    for i in 0..5 {
        let poll = wire::poll("workflow", "ns", "q", "known", &format!("k{i}"), 0);
        assert_eq!(s.send(&poll).0, 200);
    }
    assert_eq!(
        keys(),
        6 + 5 + 1,
        "a registered worker's polls keep their keys"
    );
    // Served without keys, a leased task still replays through the store.
    s.start_workflow("ns", "wf", "q");
    let (_, first) = s.send(&wire::poll("workflow", "ns", "q", "stranger", "x", 0));
    let (_, repeat) = s.send(&wire::poll("workflow", "ns", "q", "stranger", "x", 0));
    assert_eq!(
        wire::task_id(wire::polled_task(&first).unwrap()),
        wire::task_id(wire::polled_task(&repeat).unwrap())
    );
}

#[test]
fn a_storm_of_repeats_holds_no_more_threads_than_the_wait_cap() {
    const REPEATS: usize = 100;
    let s = Arc::new(server(|c| {
        c.wait_caps.global = 4;
        c.wait_caps.per_namespace = 4;
    }));
    s.namespace("ns");
    let first = first_poll_holding_its_slot(&s);
    let (tx, answers) = std::sync::mpsc::channel();
    let repeats: Vec<_> = (0..REPEATS)
        .map(|_| {
            let (s, tx) = (s.clone(), tx.clone());
            std::thread::spawn(move || {
                let answer = s.send(&wire::poll("workflow", "ns", "q", "w", "same", 50_000));
                let _ = tx.send(answer);
            })
        })
        .collect();
    // The first poll holds its slot until the run below starts, and a
    // repeat that waits holds one until then too: every other repeat is
    // refused without waiting, so at least REPEATS - 3 answer before it.
    let mut early = Vec::new();
    while early.len() < REPEATS - 3 {
        match answers.recv_timeout(Duration::from_secs(30)) {
            Ok(answer) => early.push(answer),
            Err(_) => panic!(
                "{} repeats waited beside the first poll's slot",
                REPEATS - early.len()
            ),
        }
    }
    for (status, body) in &early {
        assert_eq!(
            (*status, &body["reason"]),
            (429, &json!("long_poll_capacity_exhausted")),
            "a repeat answered before the first poll ended: {body}"
        );
    }
    // The rest of the server stays responsive meanwhile: the waits hold
    // their slots until the run starts, after this.
    assert_eq!(s.get("/api/system/health").0, 200);
    assert_eq!(
        s.wait_slot_files(),
        4,
        "the first poll and 3 repeats hold the cap"
    );
    let task = release_first_poll(&s, first);
    for repeat in repeats {
        repeat.join().unwrap();
    }
    let late: Vec<_> = answers.try_iter().collect();
    let waited = late.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!(early.len() + late.len(), REPEATS);
    assert!(
        waited <= 3,
        "{waited} repeats waited beside the first poll's slot"
    );
    // Those that waited got the first poll's answer, replayed.
    for (status, body) in &late {
        if *status == 200 {
            assert_eq!(body["replayed"], true, "{body}");
            let replayed = wire::polled_task(body).expect("the replayed task");
            assert_eq!(wire::task_id(replayed), wire::task_id(&task));
        }
    }
}

/// A full disk (the store at its `max_page_count`, which fails writes with
/// SQLITE_FULL exactly as a full disk does): a write is answered `507
/// storage_full` with `Retry-After`, nothing of it is stored, readiness
/// turns 503 while liveness and reads still answer.
#[test]
fn a_full_disk_answers_507_with_retry_after_and_turns_readiness_503() {
    let s = server(|c| c.store.max_page_count = Some(1));
    let (status, ready) = s.get("/api/ready");
    assert_eq!(status, 200, "{ready}");
    let mut full = None;
    for n in 0..2_000 {
        let id = format!("fill-{n}");
        let (status, body, retry_after) = s.post_ns_header(
            "default",
            "/api/workflows",
            json!({ "workflow_id": id, "workflow_type": "Fill", "task_queue": "q",
                    "input": { "codec": "json", "blob": format!("[\"{}\"]", "x".repeat(2_000)) } }),
            "retry-after",
        );
        match status {
            201 => continue,
            507 => {
                full = Some((id, body, retry_after));
                break;
            }
            other => panic!("start {n}: {other} {body}"),
        }
    }
    let (id, body, retry_after) = full.expect("the store filled up within 2,000 starts");
    assert_eq!(body["reason"], "storage_full", "{body}");
    assert_eq!(body["retryable"], true);
    assert_eq!(retry_after.as_deref(), Some("30"));
    assert_eq!(body["retry_after_seconds"], 30);
    let (status, _) = s.get(&format!("/api/workflows/{id}"));
    assert_eq!(status, 404, "the refused start stored nothing");
    let (status, ready) = s.get("/api/ready");
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["checks"]["store"], "full");
    assert_eq!(s.get("/api/health").0, 200, "liveness still answers");
    assert_eq!(s.get("/api/namespaces").0, 200, "reads still answer");
}
