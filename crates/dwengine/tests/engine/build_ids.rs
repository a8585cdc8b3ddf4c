//! A task queue's build-id rollout over loopback HTTP: `GET
//! /api/task-queues/{name}/build-ids` groups the queue's registrations by
//! build id beside the recorded intent; `…/drain` stops a cohort's claims
//! (other cohorts and unversioned workers go on, what it holds finishes),
//! `…/resume` lets it claim again, and `…/promote` pins fresh starts to a
//! cohort whose workers alone then take those runs' workflow tasks.

use crate::support;

use serde_json::{json, Value};
use support::TestServer;

fn server() -> TestServer {
    TestServer::start(support::memory_cache(), |_| {})
}

fn register(s: &TestServer, worker: &str, queue: &str, build: Option<&str>, runtime: &str) {
    let mut body = json!({ "worker_id": worker, "task_queue": queue, "runtime": runtime,
                           "sdk_version": format!("{runtime}-1.0") });
    if let Some(build) = build {
        body["build_id"] = build.into();
    }
    let (status, answer) = s.post("/api/worker/register", body);
    assert_eq!(status, 200, "{answer}");
}

/// One poll of `kind` by `worker`, naming `build` when given; the task or null.
fn poll(
    s: &TestServer,
    kind: &str,
    queue: &str,
    worker: &str,
    build: Option<&str>,
    id: &str,
) -> Value {
    let mut body = json!({ "task_queue": queue, "worker_id": worker,
                           "poll_request_id": id, "timeout_seconds": 0 });
    if let Some(build) = build {
        body["build_id"] = build.into();
    }
    let (status, answer) = s.post(&format!("/api/worker/{kind}-tasks/poll"), body);
    assert_eq!(status, 200, "{answer}");
    answer["task"].clone()
}

fn rollout(s: &TestServer, queue: &str, action: &str, build: Option<&str>) -> (u16, Value) {
    s.post(
        &format!("/api/task-queues/{queue}/build-ids/{action}"),
        json!({ "build_id": build }),
    )
}

fn cohorts(s: &TestServer, queue: &str) -> Value {
    let (status, list) = s.get(&format!("/api/task-queues/{queue}/build-ids"));
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["task_queue"], queue);
    assert_eq!(list["namespace"], "default");
    assert_eq!(list["stale_after_seconds"], 90);
    list["build_ids"].clone()
}

fn cohort<'a>(list: &'a Value, build: Option<&str>) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|c| c["build_id"] == json!(build))
        .unwrap_or_else(|| panic!("no cohort {build:?} in {list}"))
}

#[test]
fn the_list_groups_registrations_by_build_and_keeps_recorded_intent() {
    let s = server();
    register(&s, "py-1", "orders", Some("v1"), "python");
    register(&s, "rs-1", "orders", Some("v1"), "rust");
    register(&s, "py-2", "orders", Some("v2"), "python");
    register(&s, "plain", "orders", None, "python");
    register(&s, "elsewhere", "billing", Some("v1"), "python");

    let list = cohorts(&s, "orders");
    assert_eq!(list.as_array().unwrap().len(), 3, "{list}");
    let v1 = cohort(&list, Some("v1"));
    assert_eq!(v1["rollout_status"], "active");
    assert_eq!(v1["drain_intent"], "active");
    assert_eq!(v1["active_worker_count"], 2);
    assert_eq!(v1["total_worker_count"], 2);
    assert_eq!(v1["draining_worker_count"], 0);
    assert_eq!(v1["stale_worker_count"], 0);
    assert_eq!(v1["runtimes"], json!(["python", "rust"]));
    assert_eq!(v1["sdk_versions"], json!(["python-1.0", "rust-1.0"]));
    assert_eq!(v1["new_start_selected"], false);
    assert!(v1["first_seen_at"].as_str().unwrap().ends_with('Z'), "{v1}");
    assert!(
        v1["last_heartbeat_at"].as_str().unwrap().ends_with('Z'),
        "{v1}"
    );
    // Named builds before the unversioned cohort.
    assert_eq!(list[2]["build_id"], Value::Null, "{list}");
    assert_eq!(cohort(&list, None)["total_worker_count"], 1);

    // The roster shows what the registration said.
    let (_, worker) = s.get("/api/workers/rs-1");
    assert_eq!(
        (
            &worker["build_id"],
            &worker["runtime"],
            &worker["sdk_version"]
        ),
        (&json!("v1"), &json!("rust"), &json!("rust-1.0"))
    );

    // A drain is recorded once: a repeat keeps the first drained_at.
    let (status, drained) = rollout(&s, "orders", "drain", Some("v1"));
    assert_eq!(status, 200, "{drained}");
    assert_eq!(
        (
            &drained["namespace"],
            &drained["task_queue"],
            &drained["build_id"]
        ),
        (&json!("default"), &json!("orders"), &json!("v1"))
    );
    assert_eq!(drained["drain_intent"], "draining");
    let drained_at = drained["drained_at"].as_str().unwrap().to_owned();
    let (_, again) = rollout(&s, "orders", "drain", Some("v1"));
    assert_eq!(again["drained_at"], drained_at.as_str());
    let list = cohorts(&s, "orders");
    let v1 = cohort(&list, Some("v1"));
    assert_eq!(v1["rollout_status"], "draining");
    assert_eq!(v1["drain_intent"], "draining");
    assert_eq!(v1["draining_worker_count"], 2);
    assert_eq!(v1["active_worker_count"], 0);
    assert_eq!(v1["drained_at"], drained_at.as_str());
    // Active cohorts list before draining ones.
    assert_eq!(list[0]["build_id"], "v2", "{list}");
    // Another queue's cohort of the same build is untouched.
    assert_eq!(
        cohort(&cohorts(&s, "billing"), Some("v1"))["drain_intent"],
        "active"
    );

    // A cohort with no workers can be drained ahead of them, and stays
    // listed while it drains; resumed, it leaves no record.
    let (status, _) = rollout(&s, "orders", "drain", Some("v3"));
    assert_eq!(status, 200);
    let v3 = cohort(&cohorts(&s, "orders"), Some("v3")).clone();
    assert_eq!(
        (&v3["rollout_status"], &v3["total_worker_count"]),
        (&json!("draining"), &json!(0))
    );
    let (status, resumed) = rollout(&s, "orders", "resume", Some("v3"));
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(
        (&resumed["drain_intent"], &resumed["drained_at"]),
        (&json!("active"), &Value::Null)
    );
    let list = cohorts(&s, "orders");
    assert!(
        !list
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["build_id"] == "v3"),
        "{list}"
    );

    // The unversioned cohort is addressed with null.
    let (status, plain) = rollout(&s, "orders", "drain", None);
    assert_eq!(status, 200, "{plain}");
    assert_eq!(plain["build_id"], Value::Null);
    assert_eq!(
        cohort(&cohorts(&s, "orders"), None)["rollout_status"],
        "draining"
    );
}

#[test]
fn a_draining_cohort_claims_nothing_new_while_others_go_on() {
    let s = server();
    register(&s, "old", "q", Some("v1"), "python");
    register(&s, "new", "q", Some("v2"), "python");
    register(&s, "plain", "q", None, "python");

    // v1 takes a run and schedules an activity, then its cohort drains.
    s.start_workflow("default", "wf-held", "q");
    let held = poll(&s, "workflow", "q", "old", Some("v1"), "old-1");
    assert_eq!(held["workflow_id"], "wf-held", "{held}");
    let (status, _) = rollout(&s, "q", "drain", Some("v1"));
    assert_eq!(status, 200);

    // What it holds finishes: its completion is accepted.
    let (status, body) = s.complete(
        &held,
        json!([{ "type": "schedule_activity", "activity_type": "charge", "queue": "q",
                 "arguments": { "codec": "json", "blob": "[]" } }]),
    );
    assert_eq!(status, 200, "{body}");
    // It claims no new task, of either kind (a worker naming no build in
    // its poll is known by its registration's).
    s.start_workflow("default", "wf-fresh", "q");
    assert!(poll(&s, "activity", "q", "old", Some("v1"), "old-2").is_null());
    assert!(poll(&s, "workflow", "q", "old", Some("v1"), "old-3").is_null());
    assert!(poll(&s, "workflow", "q", "old", None, "old-4").is_null());
    // The other cohorts do.
    let fresh = poll(&s, "workflow", "q", "new", Some("v2"), "new-1");
    assert_eq!(fresh["workflow_id"], "wf-fresh", "{fresh}");
    // The run joined the cohort of the worker that took it.
    assert_eq!(s.get("/api/workflows/wf-fresh").1["compatibility"], "v2");
    // wf-held's activity is its cohort's (v1's), as its workflow tasks
    // are: no other cohort takes it, so it waits for v1.
    assert!(poll(&s, "activity", "q", "plain", None, "plain-1").is_null());
    assert!(poll(&s, "activity", "q", "new", Some("v2"), "new-2").is_null());

    // Resumed, v1 claims again: the waiting activity, then a fresh run.
    let (status, _) = rollout(&s, "q", "resume", Some("v1"));
    assert_eq!(status, 200);
    let activity = poll(&s, "activity", "q", "old", None, "old-activity");
    assert_eq!(activity["workflow_id"], "wf-held", "{activity}");
    s.start_workflow("default", "wf-later", "q");
    let later = poll(&s, "workflow", "q", "old", None, "old-5");
    assert_eq!(later["workflow_id"], "wf-later", "{later}");
}

#[test]
fn a_promoted_cohort_takes_the_fresh_starts_and_a_run_stays_with_its_build() {
    let s = server();
    register(&s, "old", "q", Some("v1"), "python");
    register(&s, "new", "q", Some("v2"), "python");
    register(&s, "plain", "q", None, "python");

    let (status, promoted) = rollout(&s, "q", "promote", Some("v2"));
    assert_eq!(status, 200, "{promoted}");
    assert_eq!(promoted["new_start_selected"], true);
    assert!(promoted["promoted_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(promoted["drain_intent"], "active");

    // A fresh start pins to v2: neither v1 nor unversioned workers take it.
    s.start_workflow("default", "wf-pinned", "q");
    assert!(poll(&s, "workflow", "q", "old", Some("v1"), "old-1").is_null());
    assert!(poll(&s, "workflow", "q", "plain", None, "plain-1").is_null());
    let task = poll(&s, "workflow", "q", "new", Some("v2"), "new-1");
    assert_eq!(task["workflow_id"], "wf-pinned", "{task}");
    // Describe names the build the run is pinned to.
    assert_eq!(s.get("/api/workflows/wf-pinned").1["compatibility"], "v2");
    let (status, _) = s.complete(
        &task,
        json!([{ "type": "start_timer", "delay_seconds": 0 }]),
    );
    assert_eq!(status, 200);
    // Its next workflow task (the timer fired) is v2's too.
    assert!(poll(&s, "workflow", "q", "plain", None, "plain-2").is_null());
    let mut next = Value::Null;
    assert!(support::eventually(
        std::time::Duration::from_secs(30),
        || {
            next = poll(
                &s,
                "workflow",
                "q",
                "new",
                Some("v2"),
                &format!("new-{}", rand_id()),
            );
            !next.is_null()
        }
    ));
    assert_eq!(next["workflow_id"], "wf-pinned");

    // A start naming a build pins to it, before the promoted one.
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "wf-explicit", "workflow_type": "Order", "task_queue": "q",
                "input": { "codec": "json", "blob": "[]" }, "build_id": "v1" }),
    );
    assert_eq!(status, 201, "{body}");
    assert!(poll(&s, "workflow", "q", "new", Some("v2"), "new-x").is_null());
    let explicit = poll(&s, "workflow", "q", "old", Some("v1"), "old-2");
    assert_eq!(explicit["workflow_id"], "wf-explicit", "{explicit}");
    assert_eq!(s.get("/api/workflows/wf-explicit").1["compatibility"], "v1");

    // The promoted cohort cannot be drained; a draining one cannot be promoted.
    let (status, refused) = rollout(&s, "q", "drain", Some("v2"));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "build_id_selected_for_new_starts");
    assert_eq!(refused["build_id"], "v2");
    let (status, _) = rollout(&s, "q", "drain", Some("v1"));
    assert_eq!(status, 200);
    let (status, refused) = rollout(&s, "q", "promote", Some("v1"));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "build_id_draining");
    let (status, _) = rollout(&s, "q", "resume", Some("v1"));
    assert_eq!(status, 200);

    // Promoting the unversioned cohort pins fresh starts to it.
    let (status, plain) = rollout(&s, "q", "promote", None);
    assert_eq!(status, 200, "{plain}");
    assert_eq!(
        (&plain["build_id"], &plain["new_start_selected"]),
        (&Value::Null, &json!(true))
    );
    let list = cohorts(&s, "q");
    assert_eq!(cohort(&list, None)["new_start_selected"], true);
    assert_eq!(cohort(&list, Some("v2"))["new_start_selected"], false);
    s.start_workflow("default", "wf-unversioned", "q");
    assert!(poll(&s, "workflow", "q", "new", Some("v2"), "new-y").is_null());
    let plain_task = poll(&s, "workflow", "q", "plain", None, "plain-3");
    assert_eq!(plain_task["workflow_id"], "wf-unversioned", "{plain_task}");
    assert_eq!(
        s.get("/api/workflows/wf-unversioned").1["compatibility"],
        Value::Null
    );

    // Promoting v2 again is a rollback: the unversioned cohort, which held
    // the fresh starts, is rolled back.
    let (_, back) = rollout(&s, "q", "promote", Some("v2"));
    assert_eq!(back["new_start_selected"], true);
    let list = cohorts(&s, "q");
    let unversioned = cohort(&list, None);
    assert_eq!(unversioned["new_start_selected"], false);
    assert!(
        unversioned["rolled_back_at"]
            .as_str()
            .unwrap()
            .ends_with('Z'),
        "{list}"
    );
}

/// On SQLite a start wakes one waiting poll of its queue
/// (`PollWakes::wake_one`); a poll that cannot take the task (here of
/// another build-id cohort) wakes the others, so the cohort's own waiting
/// poll gets it. The idle recheck is an hour here: without that hand-on
/// the v2 poll would answer empty at its deadline.
#[test]
fn a_single_wake_up_taken_by_another_cohorts_poll_reaches_the_right_one() {
    let s = TestServer::start(support::memory_cache(), |c| {
        c.poll_idle_recheck = std::time::Duration::from_secs(3600);
    });
    register(&s, "old", "handed-on", Some("v1"), "python");
    register(&s, "new", "handed-on", Some("v2"), "python");
    let channel = dwengine::polling::wake_channel("default", "handed-on", "workflow");
    let subscribed = |n| {
        support::eventually(std::time::Duration::from_secs(30), || {
            s.running.engine().poll_wakes().subscribers(&channel) >= n
        })
    };
    let long_poll = |worker: &str, build: &str, seconds: u64| {
        let (status, answer) = s.post(
            "/api/worker/workflow-tasks/poll",
            json!({ "task_queue": "handed-on", "worker_id": worker, "build_id": build,
                    "poll_request_id": format!("{worker}-{}", rand_id()),
                    "timeout_seconds": seconds }),
        );
        assert_eq!(status, 200, "{answer}");
        answer["task"].clone()
    };
    std::thread::scope(|scope| {
        // v1's poll waits first, so the single wake-up reaches it first.
        let old = scope.spawn(|| long_poll("old", "v1", 10));
        assert!(subscribed(1));
        let new = scope.spawn(|| long_poll("new", "v2", 60));
        assert!(subscribed(2));
        let (status, body) = s.post(
            "/api/workflows",
            json!({ "workflow_id": "wf-handed-on", "workflow_type": "Order",
                    "task_queue": "handed-on", "build_id": "v2",
                    "input": { "codec": "json", "blob": "[]" } }),
        );
        assert_eq!(status, 201, "{body}");
        let task = new.join().unwrap();
        assert_eq!(task["workflow_id"], "wf-handed-on", "{task}");
        assert!(old.join().unwrap().is_null());
    });
}

/// A start wakes one of the polls waiting on its queue, on SQLite and on
/// PostgreSQL: the others do not look (each look is a claim transaction
/// that would find nothing). Four polls wait (the idle recheck is an
/// hour, so nothing else makes them look), one start: the claims this
/// node ran are the four first looks (empty) and the one that leased the
/// task, not three more empty ones.
#[test]
fn a_start_wakes_one_waiting_poll_and_the_others_do_not_look() {
    let s = TestServer::start(support::memory_cache(), |c| {
        c.poll_idle_recheck = std::time::Duration::from_secs(3600);
    });
    let channel = dwengine::polling::wake_channel("default", "one-look", "workflow");
    let long_poll = |worker: &str| {
        let (status, answer) = s.post(
            "/api/worker/workflow-tasks/poll",
            json!({ "task_queue": "one-look", "worker_id": worker,
                    "poll_request_id": format!("{worker}-{}", rand_id()),
                    "timeout_seconds": 3 }),
        );
        assert_eq!(status, 200, "{answer}");
        answer["task"].clone()
    };
    let claims = || s.get("/api/system/operator-metrics").1["claims"].clone();
    let tasks: Vec<Value> = std::thread::scope(|scope| {
        let polls: Vec<_> = (0..4)
            .map(|i| {
                let long_poll = &long_poll;
                scope.spawn(move || long_poll(&format!("w{i}")))
            })
            .collect();
        assert!(support::eventually(
            std::time::Duration::from_secs(30),
            || {
                s.running.engine().poll_wakes().subscribers(&channel) >= 4
                    && claims()["found_nothing"] == 4
            }
        ));
        let (status, body) = s.post(
            "/api/workflows",
            json!({ "workflow_id": "wf-one-look", "workflow_type": "Order",
                    "task_queue": "one-look", "input": { "codec": "json", "blob": "[]" } }),
        );
        assert_eq!(status, 201, "{body}");
        polls.into_iter().map(|p| p.join().unwrap()).collect()
    });
    let answered: Vec<&Value> = tasks.iter().filter(|t| !t.is_null()).collect();
    assert_eq!(answered.len(), 1, "{tasks:?}");
    assert_eq!(answered[0]["workflow_id"], "wf-one-look");
    assert_eq!(
        claims(),
        json!({ "leased": 1, "found_nothing": 4 }),
        "the three other polls did not look"
    );
}

/// A waiting poll's idle recheck (here every 50 ms) reads whether a task
/// is ready before it claims: on an empty queue two polls waiting a
/// second run their two first looks and no claim after them (about forty
/// claims otherwise).
#[test]
fn an_idle_recheck_on_an_empty_queue_claims_nothing() {
    let s = TestServer::start(support::memory_cache(), |c| {
        c.poll_idle_recheck = std::time::Duration::from_millis(50);
    });
    std::thread::scope(|scope| {
        for worker in ["idle-a", "idle-b"] {
            let s = &s;
            scope.spawn(move || {
                let (status, answer) = s.post(
                    "/api/worker/workflow-tasks/poll",
                    json!({ "task_queue": "idle", "worker_id": worker,
                            "poll_request_id": format!("{worker}-{}", rand_id()),
                            "timeout_seconds": 1 }),
                );
                assert_eq!(status, 200, "{answer}");
                assert!(answer["task"].is_null(), "{answer}");
            });
        }
    });
    let (_, operator) = s.get("/api/system/operator-metrics");
    assert_eq!(
        operator["claims"],
        json!({ "leased": 0, "found_nothing": 2 }),
        "only the two first looks claimed"
    );
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn bad_rollout_writes_name_the_field() {
    let s = server();
    let (status, body) = s.post("/api/task-queues/q/build-ids/drain", json!({}));
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("build_id"), "{body}");
    let (status, body) = s.post(
        "/api/task-queues/q/build-ids/promote",
        json!({ "build_id": 7 }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("build_id"), "{body}");
    let long = "b".repeat(300);
    let (status, body) = s.post(
        "/api/task-queues/q/build-ids/resume",
        json!({ "build_id": long }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("build_id"), "{body}");
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "wf", "workflow_type": "Order", "task_queue": "q",
                "input": { "codec": "json", "blob": "[]" }, "compatibility": "c".repeat(300) }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("compatibility"), "{body}");
    // An unknown queue has no cohorts.
    assert_eq!(cohorts(&s, "nobody"), json!([]));
}

#[test]
fn a_namespace_keeps_a_bounded_number_of_rollout_records() {
    let s = server();
    let cap = dwengine::store::build_id_rollouts::MAX_NAMESPACE_ROLLOUTS;
    for n in 0..cap {
        let (status, body) = rollout(&s, "q", "drain", Some(&format!("b{n}")));
        assert_eq!(status, 200, "{body}");
    }
    let (status, refused) = rollout(&s, "q", "drain", Some("one-more"));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "build_id_rollout_limit_exceeded");
    // Changing a kept record is not a new one; resuming one without
    // workers frees its place.
    let (status, _) = rollout(&s, "q", "drain", Some("b0"));
    assert_eq!(status, 200);
    let (status, _) = rollout(&s, "q", "resume", Some("b0"));
    assert_eq!(status, 200);
    let (status, body) = rollout(&s, "q", "drain", Some("one-more"));
    assert_eq!(status, 200, "{body}");
    // Another namespace has its own.
    s.namespace("other");
    let (status, body) = s.post_ns(
        "other",
        "/api/task-queues/q/build-ids/drain",
        json!({ "build_id": "x" }),
    );
    assert_eq!(status, 200, "{body}");
}

/// The worker roster reports a drained cohort's live workers as
/// `draining` (the reference server's status), through heartbeats, on
/// describe, list (and its `status` filter) and the task queue's pollers;
/// a resume makes them `active` again.
#[test]
fn a_drained_cohorts_workers_report_draining() {
    let s = server();
    register(&s, "old", "q", Some("v1"), "python");
    register(&s, "new", "q", Some("v2"), "python");
    register(&s, "plain", "q", None, "python");
    register(&s, "other-queue", "q2", Some("v1"), "python");
    let status_of = |worker: &str| {
        let (status, described) = s.get(&format!("/api/workers/{worker}"));
        assert_eq!(status, 200, "{described}");
        described["status"].as_str().unwrap().to_owned()
    };
    let listed = |filter: &str| {
        let (status, list) = s.get(&format!("/api/workers?status={filter}"));
        assert_eq!(status, 200, "{list}");
        let mut ids: Vec<String> = list["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["worker_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(status_of("old"), "active");
    assert!(listed("draining").is_empty());

    for (build, worker) in [(Some("v1"), "old"), (None, "plain")] {
        let (status, _) = rollout(&s, "q", "drain", build);
        assert_eq!(status, 200);
        assert_eq!(status_of(worker), "draining", "{build:?}");
    }
    // A heartbeat keeps it so and reports it (each of several, elected to
    // refresh the registration or not), as a re-registration does; other
    // cohorts and the same build on another queue stay active.
    for _ in 0..2 {
        let (status, body) = s.post("/api/worker/heartbeat", json!({ "worker_id": "old" }));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "draining", "{body}");
        let (status, body) = s.post("/api/worker/heartbeat", json!({ "worker_id": "new" }));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "active", "{body}");
    }
    let (status, body) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "old", "task_queue": "q", "runtime": "python",
                "sdk_version": "python-1.0", "build_id": "v1" }),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "draining", "{body}");
    assert_eq!(status_of("old"), "draining");
    assert_eq!(status_of("new"), "active");
    assert_eq!(status_of("other-queue"), "active");
    assert_eq!(listed("draining"), ["old", "plain"]);
    assert_eq!(listed("active"), ["new", "other-queue"]);
    assert!(listed("stale").is_empty());
    let (status, queue) = s.get("/api/task-queues/q");
    assert_eq!(status, 200, "{queue}");
    let pollers = queue["pollers"].as_array().expect("pollers");
    let poller = |id: &str| {
        pollers
            .iter()
            .find(|p| p["worker_id"] == id)
            .unwrap_or_else(|| panic!("{id} in {queue}"))["status"]
            .clone()
    };
    assert_eq!(poller("old"), "draining");
    assert_eq!(poller("new"), "active");

    let (status, _) = rollout(&s, "q", "resume", Some("v1"));
    assert_eq!(status, 200);
    assert_eq!(status_of("old"), "active");
    let (_, body) = s.post("/api/worker/heartbeat", json!({ "worker_id": "old" }));
    assert_eq!(body["status"], "active", "{body}");
    assert_eq!(listed("draining"), ["plain"]);
    let (status, refused) = s.get("/api/workers?status=busy");
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["validation_errors"]["status"].is_array(),
        "{refused}"
    );
}

/// A run's activity tasks go to its cohort's workers, as its workflow
/// tasks do (the reference server gives an activity task its run's
/// compatibility); a run no cohort holds (first taken by an unversioned
/// worker) has activities anyone takes.
#[test]
fn a_runs_activities_go_to_its_cohort() {
    let s = server();
    register(&s, "old", "q", Some("v1"), "python");
    register(&s, "new", "q", Some("v2"), "python");
    register(&s, "plain", "q", None, "python");
    let schedule = json!([{ "type": "schedule_activity", "activity_type": "charge",
                             "queue": "q", "arguments": { "codec": "json", "blob": "[]" } }]);

    s.start_workflow("default", "wf-v1", "q");
    let task = poll(&s, "workflow", "q", "old", Some("v1"), "old-1");
    assert_eq!(task["workflow_id"], "wf-v1", "{task}");
    let (status, body) = s.complete(&task, schedule.clone());
    assert_eq!(status, 200, "{body}");
    assert!(poll(&s, "activity", "q", "plain", None, "plain-1").is_null());
    assert!(poll(&s, "activity", "q", "new", Some("v2"), "new-1").is_null());
    // The build a poll names wins over the registration's.
    assert!(poll(&s, "activity", "q", "old", Some("v2"), "old-2").is_null());
    let activity = poll(&s, "activity", "q", "old", None, "old-3");
    assert_eq!(activity["workflow_id"], "wf-v1", "{activity}");

    s.start_workflow("default", "wf-any", "q");
    let task = poll(&s, "workflow", "q", "plain", None, "plain-2");
    assert_eq!(task["workflow_id"], "wf-any", "{task}");
    let (status, body) = s.complete(&task, schedule);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        s.get("/api/workflows/wf-any").1["compatibility"],
        Value::Null
    );
    let activity = poll(&s, "activity", "q", "new", Some("v2"), "new-2");
    assert_eq!(activity["workflow_id"], "wf-any", "{activity}");
}

/// Runs a run starts follow its build, as on the reference server: a child
/// and a continue-as-new successor are pinned to the cohort of the run that
/// started them (a run no cohort holds passes none on), and a Nexus call's
/// workflow is a fresh start on its queue, pinned to that queue's promoted
/// cohort as `POST /api/workflows` would pin it.
#[test]
fn children_continue_as_new_and_service_call_runs_follow_their_build() {
    let s = server();
    register(&s, "old", "q", Some("v1"), "python");
    register(&s, "plain", "q", None, "python");
    let compatibility =
        |id: &str| s.get(&format!("/api/workflows/{id}")).1["compatibility"].clone();
    let args = json!({ "codec": "json", "blob": "[]" });

    // v1 takes the parent; its child (on another queue) and its
    // continue-as-new successor are v1's.
    let started = s.start_workflow("default", "wf-parent", "q");
    let parent_run = started["run_id"].as_str().unwrap().to_owned();
    let task = poll(&s, "workflow", "q", "old", Some("v1"), "old-1");
    assert_eq!(task["workflow_id"], "wf-parent", "{task}");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "start_child_workflow", "workflow_type": "Child",
                 "queue": "kids", "arguments": args }]),
    );
    assert_eq!(status, 200, "{body}");
    let child = format!("{parent_run}:child:1");
    assert_eq!(compatibility(&child), "v1");
    register(&s, "kid-plain", "kids", None, "python");
    assert!(poll(&s, "workflow", "kids", "kid-plain", None, "kid-1").is_null());
    let child_task = poll(&s, "workflow", "kids", "kid-plain", Some("v1"), "kid-2");
    assert_eq!(child_task["workflow_id"], child.as_str(), "{child_task}");

    s.start_workflow("default", "wf-chain", "q");
    let task = poll(&s, "workflow", "q", "old", Some("v1"), "old-2");
    assert_eq!(task["workflow_id"], "wf-chain", "{task}");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "continue_as_new", "arguments": args }]),
    );
    assert_eq!(status, 200, "{body}");
    let (_, described) = s.get("/api/workflows/wf-chain");
    assert_ne!(described["run_id"], task["run_id"], "{described}");
    assert_eq!(described["compatibility"], "v1");
    assert!(poll(&s, "workflow", "q", "plain", None, "plain-1").is_null());

    // A run first taken by an unversioned worker passes no build on.
    s.start_workflow("default", "wf-free", "q");
    let task = poll(&s, "workflow", "q", "plain", None, "plain-2");
    assert_eq!(task["workflow_id"], "wf-free", "{task}");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "continue_as_new", "arguments": args }]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(compatibility("wf-free"), Value::Null);

    // A Nexus call's workflow pins to its queue's promoted cohort.
    support::catalog::billing(&s, "async");
    let (status, _) = rollout(&s, "payments", "promote", Some("p2"));
    assert_eq!(status, 200);
    register(&s, "caller-plain", "calls", None, "python");
    s.start_workflow("default", "wf-caller", "calls");
    let task = poll(&s, "workflow", "calls", "caller-plain", None, "caller-1");
    assert_eq!(task["workflow_id"], "wf-caller", "{task}");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "start_service_operation", "endpoint_name": "billing",
                 "service_name": "invoices", "operation_name": "charge",
                 "mode_override": "async", "wait_for": "accepted",
                 "payload_codec": "json", "request_payload": "[1]",
                 "target_workflow_instance_id": "invoice-1" }]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(compatibility("invoice-1"), "p2");
}

/// Each cohort sums up the workflow definition fingerprints its workers
/// registered, as the reference server does: the distinct (type,
/// fingerprint) pairs, and the types whose workers run different code
/// (`{workflow_type, fingerprint_count}`, by type); a cohort without
/// fingerprints counts 0 and lists no conflict.
#[test]
fn a_cohort_summarises_its_workers_definition_fingerprints() {
    let s = server();
    let register_with = |worker: &str, build: Option<&str>, fingerprints: Value| {
        let mut body = json!({ "worker_id": worker, "task_queue": "fq", "runtime": "python",
                               "workflow_definition_fingerprints": fingerprints });
        if let Some(build) = build {
            body["build_id"] = build.into();
        }
        let (status, answer) = s.post("/api/worker/register", body);
        assert_eq!(status, 200, "{answer}");
    };
    register_with(
        "a",
        Some("v1"),
        json!({ "Order": "sha256:o1", "Refund": "sha256:r1" }),
    );
    register_with(
        "b",
        Some("v1"),
        json!({ "Order": "sha256:o2", "Refund": "sha256:r1" }),
    );
    register_with(
        "c",
        Some("v1"),
        json!({ "Order": "sha256:o3", "Audit": "sha256:a1" }),
    );
    register_with("d", Some("v2"), json!({ "Order": "sha256:o9" }));
    register(&s, "e", "fq", None, "python");

    let list = cohorts(&s, "fq");
    let v1 = cohort(&list, Some("v1"));
    // Order x3, Refund x1, Audit x1.
    assert_eq!(v1["workflow_definition_fingerprint_count"], 5, "{v1}");
    assert_eq!(
        v1["workflow_definition_fingerprint_conflicts"],
        json!([{ "workflow_type": "Order", "fingerprint_count": 3 }]),
        "{v1}"
    );
    let v2 = cohort(&list, Some("v2"));
    assert_eq!(v2["workflow_definition_fingerprint_count"], 1, "{v2}");
    assert_eq!(v2["workflow_definition_fingerprint_conflicts"], json!([]));
    let plain = cohort(&list, None);
    assert_eq!(plain["workflow_definition_fingerprint_count"], 0, "{plain}");
    assert_eq!(
        plain["workflow_definition_fingerprint_conflicts"],
        json!([])
    );
    // A re-registration with one definition resolves the conflict it caused.
    register_with(
        "b",
        Some("v1"),
        json!({ "Order": "sha256:o1", "Refund": "sha256:r1" }),
    );
    register_with("c", Some("v1"), json!({ "Order": "sha256:o1" }));
    let list = cohorts(&s, "fq");
    let v1 = cohort(&list, Some("v1"));
    assert_eq!(v1["workflow_definition_fingerprint_count"], 2, "{v1}");
    assert_eq!(v1["workflow_definition_fingerprint_conflicts"], json!([]));
}
