//! Worker sessions: an activity that names a session runs on the one
//! worker holding it (the first session-capable worker with the session's
//! requirements creates it, or a worker creates it explicitly); the holder
//! keeps it with heartbeats; when the holder goes away another worker takes
//! it over or, when the options forbid, the session fails; closed, failed
//! and expired sessions fail the activities still waiting for them; ended
//! rows are swept a bounded batch per heartbeat.

use crate::{common, support};

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::registry::WorkerSessionSweep;
use dwengine::store::sessions::{SessionOptions, SessionProfile, SESSION_GRACE_MS};
use serde_json::{json, Value};
use support::{eventually, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn register(s: &TestServer, worker: &str, capabilities: &[&str]) -> Value {
    let mut asked = vec!["worker_sessions"];
    asked.extend_from_slice(capabilities);
    let (status, body) = s.post(
        "/api/worker/register",
        json!({ "worker_id": worker, "task_queue": "q", "capabilities": asked,
                "capability_manifest": { "worker_sessions": { "supported": true } },
                "max_concurrent_worker_sessions": 2 }),
    );
    assert_eq!(status, 200, "{body}");
    body
}

fn session(id: &str, extra: Value) -> Value {
    let mut options = json!({ "session_id": id, "requirements": ["gpu"], "lease_seconds": 120,
                              "ttl_seconds": 1800, "max_concurrent_activities": 1,
                              "create_if_missing": true, "allow_reacquire_after_failure": true });
    if let (Value::Object(o), Value::Object(e)) = (&mut options, extra) {
        o.extend(e);
    }
    options
}

fn activity(session: Value) -> Value {
    json!({ "type": "schedule_activity", "activity_type": "render", "queue": "q",
            "arguments": { "codec": "json", "blob": "[]" }, "worker_session": session })
}

/// Starts `workflow` and completes its first task with `commands`.
fn run_with(s: &TestServer, workflow: &str, commands: Value) -> Value {
    s.start_workflow("default", workflow, "q");
    let task = support::next_workflow_task(s, "q");
    let (status, body) = s.complete(&task, commands);
    assert_eq!(status, 200, "{body}");
    task
}

fn poll_activity(s: &TestServer, worker: &str, id: &str, wait_ms: u64) -> Value {
    let (status, answer) = s.post(
        "/api/worker/activity-tasks/poll",
        json!({ "task_queue": "q", "worker_id": worker, "poll_request_id": id,
                "timeout_seconds": wait_ms as f64 / 1000.0 }),
    );
    assert_eq!(status, 200, "{answer}");
    answer["task"].clone()
}

fn complete_activity(s: &TestServer, task: &Value) {
    let (status, body) = s.post(
        &format!(
            "/api/worker/activity-tasks/{}/complete",
            task["task_id"].as_str().unwrap()
        ),
        json!({ "activity_attempt_id": task["activity_attempt_id"],
                "lease_owner": task["lease_owner"],
                "result": { "codec": "json", "blob": "1" } }),
    );
    assert_eq!(status, 200, "{body}");
}

fn session_call(s: &TestServer, method: &str, path: &str, body: Value) -> (u16, Value) {
    if method == "POST" {
        return s.post(path, body);
    }
    // Both SDKs close a session with a DELETE that carries a JSON body.
    let sent = ureq::delete(&format!("{}{path}", s.base))
        .set("x-namespace", "default")
        .send_json(body);
    match sent {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

#[test]
fn registration_and_discovery_acknowledge_worker_sessions() {
    let s = server();
    let ack = register(&s, "a", &["gpu"]);
    let acknowledged: Vec<&str> = ack["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(acknowledged.contains(&"worker_sessions"), "{ack}");
    assert_eq!(
        ack["capability_manifest"]["worker_sessions"]["supported"],
        true
    );
    assert_eq!(
        ack["server_capabilities"]["worker_sessions"]["supported"],
        true
    );
    let (_, info) = s.get("/api/cluster/info");
    assert_eq!(
        info["worker_protocol"]["server_capabilities"]["worker_sessions"]["supported"],
        true
    );
    let (status, body) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "x", "task_queue": "q", "capabilities": ["worker_sessions"],
                "max_concurrent_worker_sessions": 0 }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["max_concurrent_worker_sessions"].is_array());
}

#[test]
fn a_session_s_activities_run_on_its_holder_one_at_a_time() {
    let s = server();
    register(&s, "a", &["gpu"]);
    register(&s, "b", &["gpu"]);
    register(&s, "plain", &[]);
    let s1 = session("s1", json!({}));
    run_with(
        &s,
        "render",
        json!([activity(s1.clone()), activity(s1.clone())]),
    );
    // A worker without the requirement never gets them.
    assert!(poll_activity(&s, "plain", "plain-1", 0).is_null());
    let first = poll_activity(&s, "b", "b-1", 5_000);
    assert_eq!(first["lease_owner"], "b", "{first}");
    let affinity = &first["worker_session"];
    assert_eq!(affinity["session_id"], "s1", "{first}");
    assert_eq!(affinity["status"], "active");
    assert_eq!(affinity["lease_owner"], "b");
    assert_eq!(affinity["queue"], "q");
    assert_eq!(affinity["namespace"], "default");
    assert_eq!(affinity["requirements"], json!(["gpu"]));
    assert!(affinity["lease_expires_at"].as_str().unwrap().contains('T'));
    assert!(affinity["ttl_expires_at"].as_str().unwrap().contains('T'));
    // The session runs one activity at a time, and only on b.
    assert!(poll_activity(&s, "a", "a-1", 0).is_null());
    assert!(poll_activity(&s, "b", "b-2", 0).is_null());
    // A heartbeat renews the holder lease and echoes the session.
    let (status, beat) = s.post(
        &format!(
            "/api/worker/activity-tasks/{}/heartbeat",
            first["task_id"].as_str().unwrap()
        ),
        json!({ "activity_attempt_id": first["activity_attempt_id"], "lease_owner": "b" }),
    );
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["lease_owner"], "b");
    assert_eq!(
        beat["worker_session"]["ttl_expires_at"],
        affinity["ttl_expires_at"]
    );
    complete_activity(&s, &first);
    assert!(poll_activity(&s, "a", "a-2", 0).is_null());
    let second = poll_activity(&s, "b", "b-3", 5_000);
    assert_eq!(second["worker_session"]["session_id"], "s1", "{second}");
    complete_activity(&s, &second);
    // History records the session each activity ran in (the Rust SDK's
    // replay compares it with the call's).
    let scheduled: Vec<Value> = s
        .history("render")
        .into_iter()
        .filter(|e| e["event_type"] == "ActivityScheduled")
        .collect();
    assert_eq!(scheduled.len(), 2);
    assert_eq!(scheduled[0]["payload"]["worker_session"], s1);
}

#[test]
fn explicit_sessions_answer_receipts_and_a_closed_one_fails_its_activities() {
    let s = server();
    register(&s, "a", &["gpu"]);
    register(&s, "b", &["gpu"]);
    let options = session("s2", json!({}));
    let mut create = options.clone();
    create["worker_id"] = "a".into();
    let (status, receipt) = session_call(&s, "POST", "/api/worker/sessions", create.clone());
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["admitted"], true);
    assert_eq!(receipt["outcome"], "created");
    assert_eq!(receipt["session"]["lease_owner"], "a");
    assert_eq!(receipt["session"]["queue"], "q");
    let (_, again) = session_call(&s, "POST", "/api/worker/sessions", create.clone());
    assert_eq!(again["outcome"], "reused", "{again}");
    assert_eq!(
        again["session"]["ttl_expires_at"],
        receipt["session"]["ttl_expires_at"]
    );
    let mut other = create.clone();
    other["worker_id"] = "b".into();
    let (status, held) = session_call(&s, "POST", "/api/worker/sessions", other);
    assert_eq!(
        (status, &held["reason"]),
        (409, &json!("worker_session_held")),
        "{held}"
    );
    let (status, beat) = session_call(
        &s,
        "POST",
        "/api/worker/sessions/s2/heartbeat",
        json!({ "worker_id": "a", "lease_seconds": 60 }),
    );
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["outcome"], "heartbeat_recorded");
    assert_eq!(
        beat["session"]["ttl_expires_at"],
        receipt["session"]["ttl_expires_at"]
    );
    let (status, beat) = session_call(
        &s,
        "POST",
        "/api/worker/sessions/s2/heartbeat",
        json!({ "worker_id": "b", "lease_seconds": 60 }),
    );
    assert_eq!(status, 409, "{beat}");
    let close = json!({ "worker_id": "a", "reason": "done" });
    let (status, closed) = session_call(&s, "DELETE", "/api/worker/sessions/s2", close.clone());
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["outcome"], "closed");
    assert_eq!(closed["session"]["status"], "closed");
    let (_, twice) = session_call(&s, "DELETE", "/api/worker/sessions/s2", close);
    assert_eq!(twice["outcome"], "already_closed", "{twice}");
    let (status, reopened) = session_call(&s, "POST", "/api/worker/sessions", create);
    assert_eq!(
        (status, &reopened["reason"]),
        (409, &json!("worker_session_closed"))
    );
    // An activity naming the closed session fails, for good, at the next poll.
    run_with(&s, "late", json!([activity(options)]));
    assert!(poll_activity(&s, "b", "b-1", 0).is_null());
    let failed: Vec<Value> = s
        .history("late")
        .into_iter()
        .filter(|e| e["event_type"] == "ActivityFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["payload"]["non_retryable"], true);
    assert_eq!(
        failed[0]["payload"]["exception_type"],
        "worker_session_closed"
    );
}

#[test]
fn when_the_holder_goes_away_another_worker_takes_over_or_the_session_fails() {
    let s = server();
    register(&s, "a", &["gpu"]);
    register(&s, "b", &["gpu"]);
    let keep = session("keep", json!({}));
    let strict = session("strict", json!({ "allow_reacquire_after_failure": false }));
    run_with(
        &s,
        "handover",
        json!([activity(keep.clone()), activity(strict.clone())]),
    );
    let first = poll_activity(&s, "a", "a-1", 5_000);
    let second = poll_activity(&s, "a", "a-2", 5_000);
    assert_eq!(first["lease_owner"], "a");
    assert_eq!(second["lease_owner"], "a");
    // a goes away: its leased tasks return to the queue only when their
    // leases expire, but its sessions' holder leases end at once.
    let (status, body) = s.delete_ns("default", "/api/worker/registrations/a");
    assert_eq!(status, 200, "{body}");
    let mut create = keep.clone();
    create["worker_id"] = "b".into();
    let (status, taken) = session_call(&s, "POST", "/api/worker/sessions", create);
    assert_eq!(status, 200, "{taken}");
    assert_eq!(taken["outcome"], "reacquired");
    assert_eq!(taken["session"]["lease_owner"], "b");
    let mut create = strict;
    create["worker_id"] = "b".into();
    let (status, refused) = session_call(&s, "POST", "/api/worker/sessions", create);
    assert_eq!(
        (status, &refused["reason"]),
        (409, &json!("worker_session_failed")),
        "{refused}"
    );
}

#[test]
fn an_invalid_session_in_a_command_is_refused_by_field() {
    let s = server();
    s.start_workflow("default", "bad", "q");
    let task = support::next_workflow_task(&s, "q");
    let (status, body) = s.complete(
        &task,
        json!([activity(session(
            "s",
            json!({ "lease_seconds": 0, "requirements": [""] })
        ))]),
    );
    assert_eq!(status, 422, "{body}");
    let errors = &body["validation_errors"];
    assert!(
        errors["commands.0.worker_session.lease_seconds"].is_array(),
        "{body}"
    );
    assert!(
        errors["commands.0.worker_session.requirements.0"].is_array(),
        "{body}"
    );
}

#[test]
fn ended_sessions_are_swept_a_bounded_batch_at_a_time() {
    let store = common::memory_store(&[]);
    let profile = SessionProfile {
        capabilities: vec!["gpu".into()],
        max_sessions: 100,
    };
    store.record_worker("ns", "w", "q").unwrap();
    store
        .set_session_profile("ns", "w", Some(&profile))
        .unwrap();
    for i in 0..5 {
        let options =
            SessionOptions::from_wire(&session(&format!("s{i}"), json!({})), "s").unwrap();
        store
            .acquire_worker_session("ns", "w", "q", &options, true, 10_000)
            .unwrap()
            .unwrap();
    }
    assert_eq!(store.worker_session_count().unwrap(), 5);
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    // Within their TTL (and its grace) nothing goes.
    assert_eq!(store.prune_worker_sessions(now, 2).unwrap(), 0);
    let later = now + 1_800_000 + SESSION_GRACE_MS + 1;
    assert_eq!(store.prune_worker_sessions(later, 2).unwrap(), 2);
    assert_eq!(store.prune_worker_sessions(later, 2).unwrap(), 2);
    assert_eq!(store.prune_worker_sessions(later, 2).unwrap(), 1);
    assert_eq!(store.worker_session_count().unwrap(), 0);
    // The worker's capacity holds: a third live session is refused at 2.
    let tight = SessionProfile {
        capabilities: vec!["gpu".into()],
        max_sessions: 2,
    };
    store.set_session_profile("ns", "w", Some(&tight)).unwrap();
    for i in 0..2 {
        let options =
            SessionOptions::from_wire(&session(&format!("t{i}"), json!({})), "s").unwrap();
        assert!(store
            .acquire_worker_session("ns", "w", "q", &options, true, 10_000)
            .unwrap()
            .is_ok());
    }
    let options = SessionOptions::from_wire(&session("t2", json!({})), "s").unwrap();
    let refused = store
        .acquire_worker_session("ns", "w", "q", &options, true, 10_000)
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.reason(), "worker_session_capacity_exhausted");
}

#[test]
fn heartbeats_sweep_ended_sessions_within_the_scan_limit() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.session_sweep = WorkerSessionSweep {
            worker_session_prune_scan_limit: 1,
        }
    });
    register(&s, "a", &["gpu"]);
    let count = || {
        s.running
            .engine()
            .shared_store()
            .read(|store| store.worker_session_count())
            .unwrap()
    };
    // Two sessions whose TTL ended long ago (written directly: a TTL
    // cannot be set in the past through the API).
    s.running
        .engine()
        .shared_store()
        .write(|store| {
            for id in ["old1", "old2"] {
                let options = SessionOptions::from_wire(&session(id, json!({})), "s").unwrap();
                store
                    .acquire_worker_session("default", "a", "q", &options, true, 10_000)
                    .unwrap()
                    .unwrap();
            }
            store.age_worker_sessions_for_tests(2 * SESSION_GRACE_MS)?;
            Ok(())
        })
        .unwrap();
    assert_eq!(count(), 2);
    register(&s, "a", &["gpu"]);
    assert_eq!(count(), 1, "one registration sweeps at most 1");
    assert!(eventually(Duration::from_secs(30), || {
        register(&s, "a", &["gpu"]);
        count() == 0
    }));
}
