//! Cancellation of a run and what its running activities hear: an attempt
//! whose run was cancelled or terminated through the control plane while
//! it held its task is told the attempt is over (its heartbeat answers
//! `cancel_requested`, its late report is a `409` both SDKs treat as final:
//! `run_cancelled` / `run_terminated`), where a worker that never held the
//! task is still fenced out as `stale_task_lease`.
//!
//! Cooperative cancellation (protocol 1.20): `request-cancellation` keeps
//! one pending request on the run (`CooperativeCancellationRequested`; a
//! repeat is `duplicate`), observed on the workflow task's poll and
//! heartbeat answers until the run closes; a worker delivers it at the
//! authored call the
//! workflow waits on (`deliver-cancellation`: checked against the history,
//! `CooperativeCancellationDelivered`, the call's timer or activity
//! stopped); the SDK's cancellation failure then closes the run as
//! `cancelled`, and a run still open at the cleanup deadline is closed as
//! `cancelled` by the timeout sweep.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

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

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_owned())
        .collect()
}

/// Starts `id` whose first task starts an hour-long timer (sequence 1) and
/// requests cooperative cancellation of it; answers the request.
fn waiting_then_requested(s: &TestServer, id: &str, body: Value) -> Value {
    s.start_workflow("default", id, "q");
    let task = next_task(s, "q");
    let (status, done) = s.complete(
        &task,
        json!([{ "type": "start_timer", "delay_seconds": 3600 }]),
    );
    assert_eq!(status, 200, "{done}");
    let (status, answer) = s.post(&format!("/api/workflows/{id}/request-cancellation"), body);
    assert_eq!(status, 200, "{answer}");
    answer
}

#[test]
fn a_cooperative_request_is_pending_until_delivered_then_the_sdks_failure_closes_it_cancelled() {
    let s = server();
    let first = waiting_then_requested(
        &s,
        "coop",
        json!({ "reason": "operator", "cleanup_timeout_seconds": 120 }),
    );
    assert_eq!(first["accepted"], true, "{first}");
    assert_eq!(first["duplicate"], false, "{first}");
    let request = first["cancellation_request"].clone();
    let request_id = request["request_id"].as_str().unwrap().to_owned();
    assert!(
        request["history_refresh_page_token"].is_string(),
        "{request}"
    );
    assert!(
        request["cleanup_deadline_at"].as_str() > request["requested_at"].as_str(),
        "{request}"
    );
    // A repeat (here run-targeted) answers the same request.
    let run = first["run_id"].as_str().unwrap();
    let (status, again) = s.post(
        &format!("/api/workflows/coop/runs/{run}/request-cancellation"),
        json!({}),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["cancellation_request"], request, "{again}");
    let requested: Vec<Value> = s
        .history("coop")
        .into_iter()
        .filter(|e| e["event_type"] == "CooperativeCancellationRequested")
        .collect();
    assert_eq!(requested.len(), 1, "{requested:?}");
    assert_eq!(
        requested[0]["payload"]["workflow_command_id"],
        request_id.as_str()
    );
    assert_eq!(requested[0]["payload"]["workflow_run_id"], run);
    assert_eq!(requested[0]["payload"]["reason"], "operator");

    // The request wakes the run: its task observes it, and so does the
    // task's heartbeat.
    let task = next_task(&s, "q");
    assert_eq!(task["cancellation_request"], request, "{task}");
    let (status, beat) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/heartbeat",
            task["task_id"].as_str().unwrap()
        ),
        json!({ "lease_owner": task["lease_owner"],
                "workflow_task_attempt": task["workflow_task_attempt"] }),
    );
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["cancellation_request"], request, "{beat}");

    // Deliveries the run's state refuses write nothing.
    let call = |request_id: &str, sequence: i64, kind: &str| {
        json!({ "request_id": request_id, "sequence": sequence, "call_kind": kind,
                "sequence_span": 1 })
    };
    for (body, reason) in [
        (
            call("someone-else", 1, "timer"),
            "cancellation_request_mismatch",
        ),
        (
            call(&request_id, 7, "timer"),
            "cancellation_call_not_recorded",
        ),
        (
            call(&request_id, 1, "activity"),
            "cancellation_call_not_recorded",
        ),
    ] {
        let (status, refused) = s.deliver_cancellation(&task, body);
        assert_eq!(status, 409, "{refused}");
        assert_eq!(refused["reason"], reason, "{refused}");
    }
    let (status, invalid) = s.deliver_cancellation(
        &task,
        json!({ "request_id": request_id, "sequence": 0, "call_kind": "nap",
                "sequence_span": 2 }),
    );
    assert_eq!(status, 422, "{invalid}");
    for field in ["sequence", "call_kind", "sequence_span"] {
        assert!(
            invalid["validation_errors"][field].is_array(),
            "{field}: {invalid}"
        );
    }
    assert!(!types(&s.history("coop")).contains(&"CooperativeCancellationDelivered".into()));

    // Delivered at the timer the workflow waits on: recorded, the timer
    // cancelled, and a retry of the same delivery converges.
    let (status, delivered) = s.deliver_cancellation(&task, call(&request_id, 1, "timer"));
    assert_eq!(status, 200, "{delivered}");
    assert_eq!(delivered["delivered"], true, "{delivered}");
    assert_eq!(delivered["request_id"], request_id.as_str(), "{delivered}");
    assert_eq!(delivered["sequence"], 1, "{delivered}");
    assert_eq!(delivered["call_kind"], "timer", "{delivered}");
    assert_eq!(delivered["operation_sequence_span"], 1, "{delivered}");
    let (status, retried) = s.deliver_cancellation(&task, call(&request_id, 1, "timer"));
    assert_eq!(status, 200, "{retried}");
    let events = s.history("coop");
    let marker: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "CooperativeCancellationDelivered")
        .collect();
    assert_eq!(marker.len(), 1, "{:?}", types(&events));
    assert_eq!(
        marker[0]["payload"]["workflow_command_id"],
        request_id.as_str()
    );
    assert_eq!(marker[0]["payload"]["call_kind"], "timer");
    // Delivered: still observed (the Rust SDK replays a history holding
    // the request only with its observation).
    let (_, beat) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/heartbeat",
            task["task_id"].as_str().unwrap()
        ),
        json!({ "lease_owner": task["lease_owner"],
                "workflow_task_attempt": task["workflow_task_attempt"] }),
    );
    assert_eq!(beat["cancellation_request"], request, "{beat}");

    // The SDK lets the cancellation end the run: cancelled, not failed.
    let (status, done) = s.complete(
        &task,
        json!([{ "type": "fail_workflow", "message": "workflow cancellation was requested",
                 "exception_type": "WorkflowCancelled" }]),
    );
    assert_eq!(status, 200, "{done}");
    let (_, described) = s.get("/api/workflows/coop");
    assert_eq!(described["status"], "cancelled", "{described}");
    let events = s.history("coop");
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "WorkflowCancelled", "{last}");
    assert_eq!(
        last["payload"]["cancellation_request_id"],
        request_id.as_str()
    );
    assert!(!types(&events).contains(&"TimerFired".into()));
    // Closed: a new request is refused.
    let (status, refused) = s.post("/api/workflows/coop/request-cancellation", json!({}));
    assert_eq!(status, 409, "{refused}");
}

#[test]
fn a_workflow_failure_without_a_delivered_request_still_fails_the_run() {
    let s = server();
    waiting_then_requested(&s, "coop-failed", json!({}));
    let task = next_task(&s, "q");
    // Not delivered: the SDK's cancellation type alone does not cancel.
    let (status, done) = s.complete(
        &task,
        json!([{ "type": "fail_workflow", "message": "boom",
                 "exception_type": "WorkflowCancelled" }]),
    );
    assert_eq!(status, 200, "{done}");
    let (_, described) = s.get("/api/workflows/coop-failed");
    assert_eq!(described["status"], "failed", "{described}");
}

#[test]
fn a_bad_request_names_its_field() {
    let s = server();
    s.start_workflow("default", "coop-bad", "q");
    let (status, refused) = s.post(
        "/api/workflows/coop-bad/request-cancellation",
        json!({ "cleanup_timeout_seconds": 0, "reason": "x".repeat(1001) }),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["validation_errors"]["cleanup_timeout_seconds"].is_array(),
        "{refused}"
    );
    assert!(
        refused["validation_errors"]["reason"].is_array(),
        "{refused}"
    );
    let (status, missing) = s.post("/api/workflows/nobody/request-cancellation", json!({}));
    assert_eq!(status, 404, "{missing}");
}

#[test]
fn a_run_still_open_at_its_cleanup_deadline_closes_cancelled() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.timeout_sweep.interval = Duration::from_millis(50);
    });
    waiting_then_requested(&s, "coop-late", json!({ "cleanup_timeout_seconds": 1 }));
    assert!(
        support::eventually(Duration::from_secs(60), || {
            s.get("/api/workflows/coop-late").1["status"] == "cancelled"
        }),
        "the run outlived its cleanup deadline"
    );
    let events = s.history("coop-late");
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "WorkflowCancelled", "{last}");
    assert_eq!(last["payload"]["cleanup_deadline_expired"], true, "{last}");
}

#[test]
fn a_delivery_at_an_activity_stops_it() {
    let s = server();
    s.start_workflow("default", "coop-activity", "q");
    let task = next_task(&s, "q");
    let (status, done) = s.complete(
        &task,
        json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": "q",
                 "arguments": { "codec": "json", "blob": "[]" } }]),
    );
    assert_eq!(status, 200, "{done}");
    let activity = lease_activity(&s);
    let owner = activity["lease_owner"].clone();
    let (status, look) = report(&s, &activity, "status", &owner, json!({}));
    assert_eq!(status, 200, "{look}");
    assert_eq!(look["can_continue"], true, "{look}");
    assert_eq!(look["heartbeat_recorded"], false, "{look}");
    let (status, answer) = s.post(
        "/api/workflows/coop-activity/request-cancellation",
        json!({}),
    );
    assert_eq!(status, 200, "{answer}");
    let request_id = answer["cancellation_request"]["request_id"].clone();
    let task = next_task(&s, "q");
    let (status, delivered) = s.deliver_cancellation(
        &task,
        json!({ "request_id": request_id, "sequence": 1, "call_kind": "activity" }),
    );
    assert_eq!(status, 200, "{delivered}");
    // The activity hears it on its status and heartbeat; its late report
    // is refused as cancelled.
    let (_, look) = report(&s, &activity, "status", &owner, json!({}));
    assert_eq!(look["cancel_requested"], true, "{look}");
    assert_eq!(look["can_continue"], false, "{look}");
    let (_, beat) = report(&s, &activity, "heartbeat", &owner, json!({}));
    assert_eq!(beat["cancel_requested"], true, "{beat}");
    let (status, late) = report(
        &s,
        &activity,
        "complete",
        &owner,
        json!({ "result": { "codec": "json", "blob": "\"late\"" } }),
    );
    assert_eq!(status, 409, "{late}");
    assert_eq!(late["reason"], "activity_cancelled", "{late}");
}

#[test]
fn a_cooperative_worker_is_acknowledged_at_registration() {
    let s = server();
    let (status, body) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "coop-worker", "task_queue": "q",
                "capabilities": ["cooperative_cancellation", "nexus_cooperative_cancellation"] }),
    );
    assert_eq!(status, 200, "{body}");
    // The Rust SDK's cooperative worker checks both (Nexus cooperative
    // cancellation: tests/engine/cancellation_parking.rs).
    assert_eq!(
        body["capabilities"],
        json!(["cooperative_cancellation", "nexus_cooperative_cancellation"]),
        "{body}"
    );
    assert_eq!(
        body["server_capabilities"]["cooperative_cancellation"], true,
        "{body}"
    );
}

/// A delivery at a child call applies the child's `cancellation_policy`:
/// `abandon` leaves the child running, `try_cancel` cancels it.
#[test]
fn a_delivery_at_a_child_applies_its_cancellation_policy() {
    let s = server();
    for (id, policy, child_status) in [
        ("coop-parent-abandon", "abandon", "running"),
        ("coop-parent-try", "try_cancel", "cancelled"),
    ] {
        let queue = format!("{id}-q");
        s.start_workflow("default", id, &queue);
        let task = next_task(&s, &queue);
        let child_id = format!("{id}-child");
        let (status, done) = s.complete(
            &task,
            json!([{ "type": "start_child_workflow", "workflow_type": "Child",
                     "workflow_id": child_id, "queue": "children",
                     "arguments": { "codec": "json", "blob": "[]" },
                     "cancellation_policy": policy }]),
        );
        assert_eq!(status, 200, "{done}");
        let (status, answer) = s.post(
            &format!("/api/workflows/{id}/request-cancellation"),
            json!({}),
        );
        assert_eq!(status, 200, "{answer}");
        let task = next_task(&s, &queue);
        let (status, delivered) = s.deliver_cancellation(
            &task,
            json!({ "request_id": answer["cancellation_request"]["request_id"],
                    "sequence": 1, "call_kind": "child" }),
        );
        assert_eq!(status, 200, "{policy}: {delivered}");
        let scheduled = s
            .history(id)
            .into_iter()
            .find(|e| e["event_type"] == "ChildWorkflowScheduled")
            .unwrap();
        let child = scheduled["payload"]["child_workflow_instance_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let (_, described) = s.get(&format!("/api/workflows/{child}"));
        assert_eq!(described["status"], child_status, "{policy}: {described}");
    }
}
