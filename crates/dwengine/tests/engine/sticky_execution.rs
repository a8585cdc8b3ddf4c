//! Sticky execution: a worker with a sticky cache claims a run when it
//! completes one of its workflow tasks (the completion's `sticky_cache`);
//! the run's next task is held for that worker (announced to it as
//! `sticky_replay_mode: sticky_hit_expected`) until the hold lapses or the
//! worker goes away, when any poller of the queue takes it cold. Claims
//! expire with the worker's cache TTL and are pruned by a bounded sweep of
//! the worker heartbeats.

use crate::{common, support};

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::registry::StickyExecution;
use dwengine::store::sticky::StickyClaim;
use dwengine::store::RunId;
use serde_json::{json, Value};
use support::{eventually, TestServer};

fn server(hold: Duration) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.sticky = StickyExecution {
            schedule_to_start: hold,
            ..StickyExecution::default()
        }
    })
}

fn register(s: &TestServer, worker: &str) -> Value {
    let (status, body) = s.post(
        "/api/worker/register",
        json!({ "worker_id": worker, "task_queue": "q", "build_id": "b1",
                "capabilities": ["sticky_execution", "no_such_capability"],
                "capability_manifest": {
                    "sticky_execution": { "supported": true, "minimum_protocol_version": "1.18",
                                          "implementation": "bounded_durable_history_cache" },
                    "worker_sessions_of_another_kind": { "supported": true } } }),
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// One poll by `worker` that waits at most `wait_ms`.
fn poll(s: &TestServer, worker: &str, id: &str, wait_ms: u64) -> Value {
    let (status, answer) = s.post(
        "/api/worker/workflow-tasks/poll",
        json!({ "task_queue": "q", "worker_id": worker, "poll_request_id": id,
                "build_id": "b1", "timeout_seconds": wait_ms as f64 / 1000.0 }),
    );
    assert_eq!(status, 200, "{answer}");
    answer["task"].clone()
}

/// Polls as `worker` until a task comes (up to 30 s).
fn next_task(s: &TestServer, worker: &str) -> Value {
    let mut task = Value::Null;
    let mut n = 0;
    assert!(
        eventually(Duration::from_secs(30), || {
            n += 1;
            task = poll(s, worker, &format!("{worker}-{n}"), 200);
            !task.is_null()
        }),
        "{worker} got no task"
    );
    task
}

fn claim(task: &Value, ttl: u64) -> Value {
    json!({ "worker_id": task["lease_owner"], "workflow_id": task["workflow_id"],
            "run_id": task["run_id"], "build_id": "b1", "ttl_seconds": ttl,
            "metrics": { "hit": 0, "miss": 1, "eviction": 0, "forced_cold_replay": 0 } })
}

/// Completes `task` with a timer (the run keeps going) and `sticky`.
fn complete(s: &TestServer, task: &Value, sticky: Value) -> (u16, Value) {
    s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/complete",
            task["task_id"].as_str().unwrap()
        ),
        json!({ "lease_owner": task["lease_owner"],
                "workflow_task_attempt": task["workflow_task_attempt"],
                "commands": [{ "type": "start_timer", "delay_seconds": 3600 }],
                "sticky_cache": sticky }),
    )
}

fn signal(s: &TestServer, workflow: &str) {
    let (status, body) = s.post(
        &format!("/api/workflows/{workflow}/signal/poke"),
        json!({ "input": { "codec": "json", "blob": "[]" } }),
    );
    assert_eq!(status, 202, "{body}");
}

fn sticky_worker(s: &TestServer, run: &Value) -> Option<String> {
    let run = RunId(run.as_str().unwrap().parse().unwrap());
    s.running
        .engine()
        .shared_store()
        .read(move |store| store.sticky_worker_of(run))
        .unwrap()
}

/// A run claimed by worker `a` with its next task queued; `b` is registered too.
fn claimed_run(s: &TestServer, workflow: &str) -> Value {
    register(s, "a");
    register(s, "b");
    s.start_workflow("default", workflow, "q");
    let first = next_task(s, "a");
    assert_eq!(first["sticky_replay_mode"], "cold_replay", "{first}");
    let (status, body) = complete(s, &first, claim(&first, 60));
    assert_eq!(status, 200, "{body}");
    assert_eq!(sticky_worker(s, &first["run_id"]).as_deref(), Some("a"));
    signal(s, workflow);
    first
}

#[test]
fn registration_and_discovery_acknowledge_sticky_execution() {
    let s = server(StickyExecution::DEFAULT_SCHEDULE_TO_START);
    let ack = register(&s, "a");
    assert_eq!(ack["capabilities"], json!(["sticky_execution"]), "{ack}");
    assert_eq!(
        ack["capability_manifest"]["sticky_execution"]["supported"],
        true
    );
    assert_eq!(
        ack["capability_manifest"]["worker_sessions_of_another_kind"]["supported"],
        false
    );
    assert_eq!(ack["build_id"], "b1");
    assert_eq!(
        ack["server_capabilities"]["sticky_execution"]["supported"],
        true
    );
    let (_, info) = s.get("/api/cluster/info");
    let sticky = &info["worker_protocol"]["server_capabilities"]["sticky_execution"];
    assert_eq!(sticky["supported"], true, "{info}");
    assert_eq!(sticky["schedule_to_start_timeout_ms"], 5000);
    assert_eq!(sticky["max_ttl_seconds"], 3600);
}

#[test]
fn a_claimed_run_s_next_task_is_held_for_its_worker_and_announced_as_a_hit() {
    let s = server(Duration::from_secs(60));
    claimed_run(&s, "held");
    // Another worker of the queue does not get it while the hold lasts.
    assert!(poll(&s, "b", "b-1", 0).is_null());
    assert!(poll(&s, "b", "b-2", 300).is_null());
    let task = poll(&s, "a", "a-next", 5_000);
    assert_eq!(task["lease_owner"], "a", "{task}");
    assert_eq!(task["sticky_replay_mode"], "sticky_hit_expected", "{task}");
    // A repeat of the same poll replays the same answer.
    let again = poll(&s, "a", "a-next", 0);
    assert_eq!(again["task_id"], task["task_id"]);
    assert_eq!(again["sticky_replay_mode"], "sticky_hit_expected");
    // A completion without a claim (the worker dropped the run) ends it.
    let (status, body) = complete(&s, &task, Value::Null);
    assert_eq!(status, 200, "{body}");
    assert_eq!(sticky_worker(&s, &task["run_id"]), None);
}

#[test]
fn when_the_hold_lapses_another_worker_takes_the_task_cold() {
    let s = server(Duration::from_millis(400));
    let first = claimed_run(&s, "lapsed");
    // Held at first; taken by b once the hold is over (b never waits on a
    // clock of its own: it polls until the server hands the task over).
    assert!(poll(&s, "b", "b-0", 0).is_null());
    let task = next_task(&s, "b");
    assert_eq!(task["lease_owner"], "b");
    assert_eq!(task["run_id"], first["run_id"]);
    assert_eq!(task["sticky_replay_mode"], "cold_replay", "{task}");
    // The run left a's cache: the claim is gone until b claims it.
    assert_eq!(sticky_worker(&s, &task["run_id"]), None);
    let (status, body) = complete(&s, &task, claim(&task, 60));
    assert_eq!(status, 200, "{body}");
    assert_eq!(sticky_worker(&s, &task["run_id"]).as_deref(), Some("b"));
}

#[test]
fn a_deregistered_worker_s_runs_go_to_the_queue_at_once() {
    let s = server(Duration::from_secs(3600));
    claimed_run(&s, "gone");
    assert!(poll(&s, "b", "b-0", 0).is_null());
    let (status, body) = s.delete_ns("default", "/api/worker/registrations/a");
    assert_eq!(status, 200, "{body}");
    let task = poll(&s, "b", "b-1", 5_000);
    assert_eq!(task["lease_owner"], "b", "{task}");
    assert_eq!(task["sticky_replay_mode"], "cold_replay");
}

#[test]
fn a_claim_that_names_another_worker_run_or_ttl_is_refused_by_field() {
    let s = server(StickyExecution::DEFAULT_SCHEDULE_TO_START);
    register(&s, "a");
    s.start_workflow("default", "bad", "q");
    let task = next_task(&s, "a");
    for (field, value, named) in [
        ("worker_id", json!("b"), "sticky_cache.worker_id"),
        ("run_id", json!("999999"), "sticky_cache.run_id"),
        ("workflow_id", json!("other"), "sticky_cache.workflow_id"),
        ("ttl_seconds", json!(0), "sticky_cache.ttl_seconds"),
        ("ttl_seconds", json!(3601), "sticky_cache.ttl_seconds"),
        ("build_id", json!(7), "sticky_cache.build_id"),
    ] {
        let mut bad = claim(&task, 60);
        bad[field] = value;
        let (status, body) = complete(&s, &task, bad);
        assert_eq!(status, 422, "{field}: {body}");
        assert!(
            body["validation_errors"][named].is_array(),
            "{field}: {body}"
        );
    }
    let (status, body) = complete(&s, &task, json!("a"));
    assert_eq!(status, 422, "{body}");
    // Nothing was applied: the task is still a's to complete.
    let (status, body) = complete(&s, &task, claim(&task, 60));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn expired_claims_are_pruned_a_bounded_batch_at_a_time() {
    let store = common::memory_store(&[]);
    let live = StickyClaim {
        worker_id: "w".into(),
        build_id: None,
        ttl_ms: 3_600_000,
        hold_ms: 1_000,
    };
    let expired = StickyClaim {
        ttl_ms: -1,
        ..live.clone()
    };
    for run in 1..=7 {
        store.bind_sticky(RunId(run), "ns", &expired).unwrap();
    }
    for run in 8..=10 {
        store.bind_sticky(RunId(run), "ns", &live).unwrap();
    }
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    assert_eq!(store.prune_sticky_bindings(now, 3).unwrap(), 3);
    assert_eq!(store.sticky_binding_count().unwrap(), 7);
    assert_eq!(store.prune_sticky_bindings(now, 3).unwrap(), 3);
    assert_eq!(store.prune_sticky_bindings(now, 3).unwrap(), 1);
    assert_eq!(store.prune_sticky_bindings(now, 3).unwrap(), 0);
    assert_eq!(store.sticky_binding_count().unwrap(), 3, "live claims stay");
    // A worker that goes away takes its claims with it.
    assert_eq!(store.release_sticky_worker("ns", "w").unwrap(), 3);
    assert_eq!(store.sticky_binding_count().unwrap(), 0);
}

#[test]
fn worker_heartbeats_sweep_expired_claims_within_the_scan_limit() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.sticky = StickyExecution {
            sticky_binding_prune_scan_limit: 2,
            ..StickyExecution::default()
        }
    });
    let expired = StickyClaim {
        worker_id: "w".into(),
        build_id: None,
        ttl_ms: -1,
        hold_ms: 1_000,
    };
    let count = || {
        s.running
            .engine()
            .shared_store()
            .read(|store| store.sticky_binding_count())
            .unwrap()
    };
    s.running
        .engine()
        .shared_store()
        .write(move |store| {
            for run in 1..=5 {
                store.bind_sticky(RunId(run), "default", &expired)?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(count(), 5);
    register(&s, "a");
    assert_eq!(count(), 3, "one registration sweeps at most 2");
    register(&s, "a");
    register(&s, "a");
    assert_eq!(count(), 0);
}
