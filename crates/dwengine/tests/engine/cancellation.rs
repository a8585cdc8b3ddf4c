//! Cancellation of a run and what its running activities hear: an attempt
//! whose run was cancelled or terminated through the control plane while
//! it held its task is told the attempt is over (its heartbeat answers
//! `cancel_requested`, its late report is a `409` both SDKs treat as final:
//! `run_cancelled` / `run_terminated`), where a worker that never held the
//! task is still fenced out as `stale_task_lease`.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

/// Polls `q` until one activity task is leased.
fn lease_activity(s: &TestServer) -> Value {
    let mut task = Value::Null;
    let mut n = 0;
    assert!(
        support::eventually(std::time::Duration::from_secs(30), || {
            n += 1;
            let (status, answer) = s.post(
                "/api/worker/activity-tasks/poll",
                json!({ "task_queue": "q", "worker_id": "aw",
                        "poll_request_id": format!("ap-{n}"), "timeout_seconds": 0.2 }),
            );
            assert_eq!(status, 200, "{answer}");
            task = answer["task"].clone();
            !task.is_null()
        }),
        "no activity task came"
    );
    task
}

fn report(s: &TestServer, task: &Value, outcome: &str, owner: &Value, body: Value) -> (u16, Value) {
    let mut body = body;
    body["activity_attempt_id"] = task["activity_attempt_id"].clone();
    body["lease_owner"] = owner.clone();
    s.post(
        &format!(
            "/api/worker/activity-tasks/{}/{outcome}",
            task["task_id"].as_str().unwrap()
        ),
        body,
    )
}

/// Starts `id` and leases the one activity its first task schedules.
fn running_activity(s: &TestServer, id: &str) -> Value {
    s.start_workflow("default", id, "q");
    let task = next_task(s, "q");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": "q",
                 "arguments": { "codec": "json", "blob": "[]" } }]),
    );
    assert_eq!(status, 200, "{body}");
    lease_activity(s)
}

fn stopped_attempt_hears(verb: &str, run_status: &str, reason: &str) {
    let s = server();
    let id = format!("stop-{verb}");
    let activity = running_activity(&s, &id);
    let owner = activity["lease_owner"].clone();
    let (status, beat) = report(&s, &activity, "heartbeat", &owner, json!({}));
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["cancel_requested"], false, "{beat}");

    let (status, body) = s.post(
        &format!("/api/workflows/{id}/{verb}"),
        json!({ "reason": "operator" }),
    );
    assert_eq!(status, 200, "{body}");

    let (status, beat) = report(&s, &activity, "heartbeat", &owner, json!({}));
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["cancel_requested"], true, "{beat}");
    assert_eq!(beat["can_continue"], false, "{beat}");
    assert_eq!(beat["heartbeat_recorded"], false, "{beat}");
    assert_eq!(beat["reason"], reason, "{beat}");
    assert_eq!(beat["run_closed_reason"], run_status, "{beat}");

    for outcome in ["complete", "fail"] {
        let body = if outcome == "complete" {
            json!({ "result": { "codec": "json", "blob": "\"late\"" } })
        } else {
            json!({ "failure": { "message": "stopped" } })
        };
        let (status, late) = report(&s, &activity, outcome, &owner, body);
        assert_eq!(status, 409, "{outcome}: {late}");
        assert_eq!(late["reason"], reason, "{outcome}: {late}");
        assert_eq!(late["cancel_requested"], true, "{late}");
        assert_eq!(late["run_closed_reason"], run_status, "{late}");
    }
    // A worker that never held the task is still fenced out.
    let (status, stale) = report(&s, &activity, "heartbeat", &json!("intruder"), json!({}));
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["reason"], "stale_task_lease", "{stale}");

    let (_, described) = s.get(&format!("/api/workflows/{id}"));
    assert_eq!(described["status"], run_status, "{described}");
}

#[test]
fn an_attempt_whose_run_was_cancelled_hears_run_cancelled() {
    stopped_attempt_hears("cancel", "cancelled", "run_cancelled");
}

#[test]
fn an_attempt_whose_run_was_terminated_hears_run_terminated() {
    stopped_attempt_hears("terminate", "terminated", "run_terminated");
}
