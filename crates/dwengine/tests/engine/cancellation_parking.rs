//! Cooperative cancellation delivered at a call whose item must clean up
//! first (protocol 1.20): a child run whose `cancellation_policy` is
//! `wait_cancellation_completed`, or a running activity with that policy.
//! `deliver-cancellation` then answers `delivered: false`,
//! `claim_released: true` and `cancellation_waiting_for_child` /
//! `…_activity`, writes no delivery and releases the workflow task; the
//! child gets a cooperative request of its own, the activity's attempt
//! hears `cancel_requested` with a `cancellation_acknowledgement` receipt on
//! its status. When the child or activity closes, the parent gets its
//! `ChildRun*` / `Activity*` event and a workflow task whose worker
//! delivers again, and now the delivery is recorded.
//!
//! `acknowledge-cancellation` (an attempt reporting its callback stopped)
//! is fenced by the attempt, checked against the run's request, recorded
//! once (a repeat answers the first, `duplicate: true`), and closes an
//! activity a delivery waits for as `ActivityCancelled`.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::{catalog, next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn args(blob: &str) -> Value {
    json!({ "codec": "json", "blob": blob })
}

fn events_of(events: &[Value], event_type: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .cloned()
        .collect()
}

fn status_of(s: &TestServer, id: &str) -> Value {
    s.get(&format!("/api/workflows/{id}")).1["status"].clone()
}

fn at(request_id: &Value, sequence: i64, kind: &str) -> Value {
    json!({ "request_id": request_id, "sequence": sequence, "call_kind": kind,
            "sequence_span": 1 })
}

fn request(s: &TestServer, id: &str) -> Value {
    let (status, answer) = s.post(
        &format!("/api/workflows/{id}/request-cancellation"),
        json!({ "reason": "operator", "cleanup_timeout_seconds": 600 }),
    );
    assert_eq!(status, 200, "{answer}");
    answer["cancellation_request"]["request_id"].clone()
}

/// Polls queue `q` until one activity task is leased.
fn lease_activity(s: &TestServer, q: &str) -> Value {
    let mut task = Value::Null;
    let mut n = 0;
    assert!(
        support::eventually(std::time::Duration::from_secs(30), || {
            n += 1;
            let (status, answer) = s.post(
                "/api/worker/activity-tasks/poll",
                json!({ "task_queue": q, "worker_id": "aw",
                        "poll_request_id": format!("{q}-ap-{n}"), "timeout_seconds": 0.2 }),
            );
            assert_eq!(status, 200, "{answer}");
            task = answer["task"].clone();
            !task.is_null()
        }),
        "no activity task came"
    );
    task
}

fn activity_call(
    s: &TestServer,
    task: &Value,
    verb: &str,
    owner: &Value,
    body: Value,
) -> (u16, Value) {
    let mut body = body;
    body["activity_attempt_id"] = task["activity_attempt_id"].clone();
    body["lease_owner"] = owner.clone();
    s.post(
        &format!(
            "/api/worker/activity-tasks/{}/{verb}",
            task["task_id"].as_str().unwrap()
        ),
        body,
    )
}

/// A parent on queue `{id}` whose first task started one child on
/// `{id}-kids` with `cancellation_policy`; answers the child's workflow id.
fn parent_with_child(s: &TestServer, id: &str, policy: &str) -> String {
    let started = s.start_workflow("default", id, id);
    let run = started["run_id"].as_str().unwrap().to_owned();
    let task = next_task(s, id);
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "start_child_workflow", "workflow_type": "Child",
                 "queue": format!("{id}-kids"), "arguments": args("[]"),
                 "cancellation_policy": policy }]),
    );
    assert_eq!(status, 200, "{body}");
    // The child's first task: it waits on a timer.
    let child = next_task(s, &format!("{id}-kids"));
    let (status, body) = s.complete(
        &child,
        json!([{ "type": "start_timer", "delay_seconds": 3600 }]),
    );
    assert_eq!(status, 200, "{body}");
    format!("{run}:child:1")
}

#[test]
fn a_delivery_at_a_child_that_waits_parks_the_claim_until_the_child_has_cleaned_up() {
    let s = server();
    let child_id = parent_with_child(&s, "park-child", "wait_cancellation_completed");
    let request_id = request(&s, "park-child");
    let task = next_task(&s, "park-child");

    let (status, parked) = s.deliver_cancellation(&task, at(&request_id, 1, "child"));
    assert_eq!(status, 200, "{parked}");
    assert_eq!(parked["delivered"], false, "{parked}");
    assert_eq!(
        parked["reason"], "cancellation_waiting_for_child",
        "{parked}"
    );
    assert_eq!(parked["claim_released"], true, "{parked}");
    assert_eq!(parked["task_id"], task["task_id"], "{parked}");
    assert_eq!(parked["workflow_run_id"], task["run_id"], "{parked}");
    for field in ["request_id", "sequence", "call_kind", "sequence_span"] {
        assert!(parked[field].is_null(), "{field}: {parked}");
    }
    // Nothing delivered; the claim is gone (a report or a repeat on it is
    // a stale lease) and the child runs on.
    assert!(events_of(&s.history("park-child"), "CooperativeCancellationDelivered").is_empty());
    let (status, stale) = s.complete(&task, json!([]));
    assert_eq!(status, 409, "{stale}");
    let (status, stale) = s.deliver_cancellation(&task, at(&request_id, 1, "child"));
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["reason"], "stale_task_lease", "{stale}");
    assert_eq!(status_of(&s, &child_id), "running");

    // The child got a cooperative request of its own, by the parent's
    // deadline; its worker delivers it and the child ends cancelled.
    let child_task = next_task(&s, "park-child-kids");
    let observed = child_task["cancellation_request"].clone();
    assert!(observed["request_id"].is_string(), "{child_task}");
    assert_ne!(observed["request_id"], request_id, "{child_task}");
    assert!(
        observed["reason"].as_str().unwrap().contains("operator"),
        "{observed}"
    );
    landed(&s, &child_task, at(&observed["request_id"], 1, "timer"));
    end_cancelled(&s, &child_task);
    assert_eq!(status_of(&s, &child_id), "cancelled");

    // The parent hears the child's end and gets a task; its worker
    // delivers again at the child, now resolved after the request.
    let task = next_task(&s, "park-child");
    let events = s.history("park-child");
    assert_eq!(
        events_of(&events, "ChildRunCancelled").len(),
        1,
        "{events:?}"
    );
    let delivered = landed(&s, &task, at(&request_id, 1, "child"));
    assert_eq!(delivered["call_kind"], "child", "{delivered}");
    let (status, again) = s.deliver_cancellation(&task, at(&request_id, 1, "child"));
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        events_of(&s.history("park-child"), "CooperativeCancellationDelivered").len(),
        1
    );
    end_cancelled(&s, &task);
    assert_eq!(status_of(&s, "park-child"), "cancelled");
}

#[test]
fn a_try_cancel_child_is_cancelled_with_the_delivery_and_nothing_waits() {
    let s = server();
    let child_id = parent_with_child(&s, "try-child", "try_cancel");
    let request_id = request(&s, "try-child");
    let task = next_task(&s, "try-child");
    landed(&s, &task, at(&request_id, 1, "child"));
    assert_eq!(status_of(&s, &child_id), "cancelled");
}

/// Starts `id` (queue `id`) whose first task schedules one activity with
/// `policy` (none when null) and leases its attempt.
fn running_activity(s: &TestServer, id: &str, policy: Value) -> Value {
    s.start_workflow("default", id, id);
    let task = next_task(s, id);
    let mut command = json!({ "type": "schedule_activity", "activity_type": "linger",
                              "queue": id, "arguments": args("[]") });
    if !policy.is_null() {
        command["cancellation_policy"] = policy;
    }
    let (status, body) = s.complete(&task, json!([command]));
    assert_eq!(status, 200, "{body}");
    lease_activity(s, id)
}

#[test]
fn a_delivery_at_a_waiting_activity_parks_until_the_attempt_acknowledges() {
    let s = server();
    let activity = running_activity(&s, "park-act", json!("wait_cancellation_completed"));
    let owner = activity["lease_owner"].clone();
    let scheduled = events_of(&s.history("park-act"), "ActivityScheduled");
    assert_eq!(
        scheduled[0]["payload"]["cancellation_policy"],
        "wait_cancellation_completed"
    );
    // Not cancelled yet: no receipt, and an acknowledgement is refused.
    let (_, look) = activity_call(&s, &activity, "status", &owner, json!({}));
    assert_eq!(look["can_continue"], true, "{look}");
    assert!(look.get("cancellation_acknowledgement").is_none(), "{look}");
    let request_id = request(&s, "park-act");
    let (status, refused) = activity_call(
        &s,
        &activity,
        "acknowledge-cancellation",
        &owner,
        json!({ "request_id": request_id }),
    );
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "activity_not_cancelled", "{refused}");

    let task = next_task(&s, "park-act");
    let (status, parked) = s.deliver_cancellation(&task, at(&request_id, 1, "activity"));
    assert_eq!(status, 200, "{parked}");
    assert_eq!(parked["delivered"], false, "{parked}");
    assert_eq!(
        parked["reason"], "cancellation_waiting_for_activity",
        "{parked}"
    );
    assert_eq!(parked["claim_released"], true, "{parked}");

    // The attempt hears it, with the receipt it acknowledges against.
    let (_, look) = activity_call(&s, &activity, "status", &owner, json!({}));
    assert_eq!(look["cancel_requested"], true, "{look}");
    assert_eq!(look["can_continue"], false, "{look}");
    let receipt = look["cancellation_acknowledgement"].clone();
    assert_eq!(receipt["request_id"], request_id, "{look}");
    assert_eq!(receipt["root_request_id"], request_id, "{look}");
    assert_eq!(receipt["callback_state"], "unknown", "{look}");
    assert!(receipt["cleanup_deadline_at"].is_string(), "{look}");
    let requested = events_of(&s.history("park-act"), "CooperativeCancellationRequested");
    assert_eq!(
        receipt["cancellation_history_event_id"], requested[0]["id"],
        "{look}"
    );
    let (_, beat) = activity_call(&s, &activity, "heartbeat", &owner, json!({}));
    assert_eq!(beat["cancel_requested"], true, "{beat}");

    // Bad input names its field; another worker, another request, or an
    // attempt id that is not this lease's are refused; nothing is written.
    let (status, invalid) =
        activity_call(&s, &activity, "acknowledge-cancellation", &owner, json!({}));
    assert_eq!(status, 422, "{invalid}");
    assert!(
        invalid["validation_errors"]["request_id"].is_array(),
        "{invalid}"
    );
    let (status, invalid) = activity_call(
        &s,
        &activity,
        "acknowledge-cancellation",
        &owner,
        json!({ "request_id": "x".repeat(256) }),
    );
    assert_eq!(status, 422, "{invalid}");
    assert!(
        invalid["validation_errors"]["request_id"].is_array(),
        "{invalid}"
    );
    let (status, stale) = activity_call(
        &s,
        &activity,
        "acknowledge-cancellation",
        &json!("intruder"),
        json!({ "request_id": request_id }),
    );
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["reason"], "stale_task_lease", "{stale}");
    let mut other_attempt = activity.clone();
    other_attempt["activity_attempt_id"] =
        json!(format!("{}.9", activity["task_id"].as_str().unwrap()));
    let (status, stale) = activity_call(
        &s,
        &other_attempt,
        "acknowledge-cancellation",
        &owner,
        json!({ "request_id": request_id }),
    );
    assert_eq!(status, 409, "{stale}");
    let (status, refused) = activity_call(
        &s,
        &activity,
        "acknowledge-cancellation",
        &owner,
        json!({ "request_id": "someone-else" }),
    );
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["reason"], "cancellation_request_mismatch",
        "{refused}"
    );
    assert!(events_of(&s.history("park-act"), "ActivityCancelled").is_empty());

    // The acknowledgement closes the activity as cancelled; a repeat
    // answers the first.
    let (status, ack) = activity_call(
        &s,
        &activity,
        "acknowledge-cancellation",
        &owner,
        json!({ "request_id": request_id }),
    );
    assert_eq!(status, 200, "{ack}");
    assert_eq!(ack["acknowledged"], true, "{ack}");
    assert_eq!(ack["duplicate"], false, "{ack}");
    assert_eq!(ack["heartbeat_recorded"], false, "{ack}");
    assert!(ack["reason"].is_null(), "{ack}");
    assert_eq!(ack["task_id"], activity["task_id"], "{ack}");
    assert_eq!(
        ack["activity_attempt_id"], activity["activity_attempt_id"],
        "{ack}"
    );
    assert_eq!(ack["lease_owner"], owner, "{ack}");
    assert_eq!(ack["request_id"], request_id, "{ack}");
    let events = s.history("park-act");
    let cancelled = events_of(&events, "ActivityCancelled");
    assert_eq!(cancelled.len(), 1, "{events:?}");
    assert_eq!(ack["history_event_id"], cancelled[0]["id"], "{ack}");
    assert_eq!(cancelled[0]["payload"]["sequence"], 1);
    assert_eq!(
        cancelled[0]["payload"]["cancellation_policy"],
        "wait_cancellation_completed"
    );
    let (status, again) = activity_call(
        &s,
        &activity,
        "acknowledge-cancellation",
        &owner,
        json!({ "request_id": request_id }),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(
        again["history_event_id"], ack["history_event_id"],
        "{again}"
    );
    assert_eq!(
        events_of(&s.history("park-act"), "ActivityCancelled").len(),
        1
    );
    // Its late report is refused as cancelled.
    let (status, late) = activity_call(
        &s,
        &activity,
        "complete",
        &owner,
        json!({ "result": args("\"late\"") }),
    );
    assert_eq!(status, 409, "{late}");

    // The run has a task again, and the delivery now lands.
    let task = next_task(&s, "park-act");
    landed(&s, &task, at(&request_id, 1, "activity"));
}

#[test]
fn a_waiting_activity_that_completes_or_fails_ends_the_wait_without_a_retry() {
    for (verb, body, event) in [
        (
            "complete",
            json!({ "result": args("\"done\"") }),
            "ActivityCompleted",
        ),
        (
            "fail",
            json!({ "failure": { "message": "stopped" } }),
            "ActivityFailed",
        ),
    ] {
        let s = server();
        let id = format!("park-{verb}");
        s.start_workflow("default", &id, &id);
        let task = next_task(&s, &id);
        let (status, body_) = s.complete(
            &task,
            json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": id,
                     "arguments": args("[]"), "cancellation_policy": "wait_cancellation_completed",
                     "retry_policy": { "max_attempts": 5 } }]),
        );
        assert_eq!(status, 200, "{body_}");
        let activity = lease_activity(&s, &id);
        let owner = activity["lease_owner"].clone();
        let request_id = request(&s, &id);
        let task = next_task(&s, &id);
        let (_, parked) = s.deliver_cancellation(&task, at(&request_id, 1, "activity"));
        assert_eq!(
            parked["reason"], "cancellation_waiting_for_activity",
            "{parked}"
        );
        let (status, reported) = activity_call(&s, &activity, verb, &owner, body);
        assert_eq!(status, 200, "{verb}: {reported}");
        assert_ne!(reported["outcome"], "retry_scheduled", "{reported}");
        let task = next_task(&s, &id);
        assert_eq!(events_of(&s.history(&id), event).len(), 1, "{verb}");
        let (status, delivered) = s.deliver_cancellation(&task, at(&request_id, 1, "activity"));
        assert_eq!(status, 200, "{delivered}");
        assert_eq!(delivered["delivered"], true, "{verb}: {delivered}");
    }
}

#[test]
fn a_try_cancel_activity_is_stopped_at_once_and_its_acknowledgement_is_recorded_once() {
    let s = server();
    let activity = running_activity(&s, "ack-try", Value::Null);
    let owner = activity["lease_owner"].clone();
    let request_id = request(&s, "ack-try");
    let task = next_task(&s, "ack-try");
    landed(&s, &task, at(&request_id, 1, "activity"));
    let (_, look) = activity_call(&s, &activity, "status", &owner, json!({}));
    assert_eq!(look["cancel_requested"], true, "{look}");
    assert_eq!(
        look["cancellation_acknowledgement"]["request_id"], request_id,
        "{look}"
    );
    let (status, ack) = activity_call(
        &s,
        &activity,
        "acknowledge-cancellation",
        &owner,
        json!({ "request_id": request_id }),
    );
    assert_eq!(status, 200, "{ack}");
    assert_eq!(ack["duplicate"], false, "{ack}");
    let events = s.history("ack-try");
    let marker = events_of(&events, "CooperativeCancellationDelivered");
    assert_eq!(ack["history_event_id"], marker[0]["id"], "{ack}");
    assert!(
        events_of(&events, "ActivityCancelled").is_empty(),
        "{events:?}"
    );
    let (status, again) = activity_call(
        &s,
        &activity,
        "acknowledge-cancellation",
        &owner,
        json!({ "request_id": request_id }),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["history_event_id"], ack["history_event_id"]);
}

#[test]
fn a_queued_activity_is_not_waited_for_and_a_bad_policy_names_its_field() {
    let s = server();
    s.start_workflow("default", "park-queued", "park-queued");
    let task = next_task(&s, "park-queued");
    let (status, refused) = s.complete(
        &task,
        json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": "park-queued",
                 "arguments": args("[]"), "cancellation_policy": "eventually" }]),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["validation_errors"]["commands.0.cancellation_policy"].is_array(),
        "{refused}"
    );
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": "park-queued",
                 "arguments": args("[]"), "cancellation_policy": "wait_cancellation_completed" }]),
    );
    assert_eq!(status, 200, "{body}");
    let request_id = request(&s, "park-queued");
    let task = next_task(&s, "park-queued");
    // No attempt runs, so there is no cleanup to wait for.
    landed(&s, &task, at(&request_id, 1, "activity"));
}

/// One catalog operation in `default`: ops/jobs/run, bound to the workflow
/// type `Job` on queue `jobs`.
fn nexus_catalog(s: &TestServer) {
    catalog::endpoint_and_service(s, "default", "ops", "jobs");
    let run = catalog::start_workflow_operation("run", "sync", "Job", "jobs");
    catalog::operation(s, "default", "ops", "jobs", run);
}

#[test]
fn a_delivery_at_a_nexus_call_parks_until_the_linked_run_has_cleaned_up() {
    let s = server();
    // Discovery advertises the bridge both SDKs require before they deliver
    // at a Nexus call, and registration acknowledges it.
    let (_, info) = s.get("/api/cluster/info");
    let capabilities = &info["worker_protocol"]["server_capabilities"];
    assert_eq!(
        capabilities["nexus_cooperative_cancellation"], true,
        "{capabilities}"
    );
    assert_eq!(
        capabilities["nexus_cooperative_cancellation_binding_kinds"],
        json!(["workflow_run"])
    );
    nexus_catalog(&s);
    s.start_workflow("default", "nexus-caller", "nexus-caller");
    let task = next_task(&s, "nexus-caller");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "start_service_operation", "endpoint_name": "ops",
                 "service_name": "jobs", "operation_name": "run",
                 "mode_override": "sync", "wait_for": "completed",
                 "payload_codec": "json", "request_payload": "[1]" }]),
    );
    assert_eq!(status, 200, "{body}");
    let started = events_of(&s.history("nexus-caller"), "ServiceCallStarted");
    let linked = started[0]["payload"]["linked_workflow_instance_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job = next_task(&s, "jobs");
    let (status, body) = s.complete(
        &job,
        json!([{ "type": "start_timer", "delay_seconds": 3600 }]),
    );
    assert_eq!(status, 200, "{body}");

    let request_id = request(&s, "nexus-caller");
    let task = next_task(&s, "nexus-caller");
    let (status, parked) = s.deliver_cancellation(&task, at(&request_id, 1, "service_operation"));
    assert_eq!(status, 200, "{parked}");
    assert_eq!(parked["delivered"], false, "{parked}");
    assert_eq!(
        parked["reason"], "cancellation_waiting_for_service_operation",
        "{parked}"
    );
    assert_eq!(parked["claim_released"], true, "{parked}");
    assert!(events_of(
        &s.history("nexus-caller"),
        "CooperativeCancellationDelivered"
    )
    .is_empty());

    // The linked run got a request of its own; it cleans up and ends.
    let job = next_task(&s, "jobs");
    let observed = job["cancellation_request"].clone();
    assert!(
        observed["reason"].as_str().unwrap().contains("caller"),
        "{job}"
    );
    let (status, delivered) = s.deliver_cancellation(&job, at(&observed["request_id"], 1, "timer"));
    assert_eq!(status, 200, "{delivered}");
    end_cancelled(&s, &job);
    assert_eq!(status_of(&s, &linked), "cancelled");

    // The caller hears the call's end, and the delivery lands there.
    let task = next_task(&s, "nexus-caller");
    let events = s.history("nexus-caller");
    assert_eq!(
        events_of(&events, "ServiceCallCancelled").len(),
        1,
        "{events:?}"
    );
    let delivered = landed(&s, &task, at(&request_id, 1, "service_operation"));
    assert_eq!(delivered["call_kind"], "service_operation", "{delivered}");
}

#[test]
fn registration_acknowledges_the_nexus_bridge() {
    let s = server();
    let (status, ack) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "nexus-w", "task_queue": "q", "runtime": "rust",
                "supported_workflow_types": ["W"],
                "capabilities": ["cooperative_cancellation", "nexus_cooperative_cancellation"],
                "capability_manifest": { "nexus_cooperative_cancellation": {
                    "supported": true, "minimum_protocol_version": "1.20",
                    "implementation": "owned_workflow_run_canonical_delivery",
                    "binding_kinds": ["workflow_run"] } } }),
    );
    assert_eq!(status, 200, "{ack}");
    let accepted = ack["capabilities"].as_array().unwrap();
    assert!(
        accepted.contains(&json!("nexus_cooperative_cancellation")),
        "{ack}"
    );
    assert_eq!(
        ack["capability_manifest"]["nexus_cooperative_cancellation"]["supported"], true,
        "{ack}"
    );
    assert_eq!(
        ack["server_capabilities"]["nexus_cooperative_cancellation"], true,
        "{ack}"
    );
    assert_eq!(
        ack["server_capabilities"]["nexus_cooperative_cancellation_binding_kinds"],
        json!(["workflow_run"])
    );
}

#[test]
fn a_waiting_attempt_that_times_out_ends_the_wait_without_a_retry() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.timeout_sweep.interval = std::time::Duration::from_millis(50);
    });
    // The delivery must reach the attempt before its start-to-close timeout
    // ends it; a loaded machine can take longer than a short timeout over
    // the set-up, so the timeout doubles (with a fresh workflow) until the
    // delivery parks in time.
    for seconds in [2, 4, 8, 16, 32, 64] {
        let id = format!("park-timeout-{seconds}");
        s.start_workflow("default", &id, &id);
        let task = next_task(&s, &id);
        let (status, body) = s.complete(
            &task,
            json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": id,
                     "arguments": args("[]"), "cancellation_policy": "wait_cancellation_completed",
                     "start_to_close_timeout": seconds, "retry_policy": { "max_attempts": 5 } }]),
        );
        assert_eq!(status, 200, "{body}");
        let activity = lease_activity(&s, &id);
        let owner = activity["lease_owner"].clone();
        let request_id = request(&s, &id);
        let task = next_task(&s, &id);
        let (_, parked) = s.deliver_cancellation(&task, at(&request_id, 1, "activity"));
        if parked["delivered"] == true {
            continue;
        }
        assert_eq!(
            parked["reason"], "cancellation_waiting_for_activity",
            "{parked}"
        );
        // The attempt's start-to-close timeout ends the activity; no retry.
        let task = next_task(&s, &id);
        let events = s.history(&id);
        assert_eq!(
            events_of(&events, "ActivityTimedOut").len(),
            1,
            "{events:?}"
        );
        let (_, none) = s.post(
            "/api/worker/activity-tasks/poll",
            json!({ "task_queue": id, "worker_id": "aw2",
                    "poll_request_id": format!("{id}-after"), "timeout_seconds": 0 }),
        );
        assert!(none["task"].is_null(), "{none}");
        // The timed-out attempt can no longer acknowledge.
        let (status, stale) = activity_call(
            &s,
            &activity,
            "acknowledge-cancellation",
            &owner,
            json!({ "request_id": request_id }),
        );
        assert_eq!(status, 409, "{stale}");
        landed(&s, &task, at(&request_id, 1, "activity"));
        return;
    }
    panic!("no delivery reached its attempt within a 64 s start-to-close timeout");
}

#[test]
fn a_waiting_attempt_whose_lease_lapses_closes_its_activity_as_cancelled() {
    use dwengine::store::cancellation::{Delivered, Delivery};
    use dwengine::store::{TaskKind, WorkflowCommand, WorkflowTaskFence};
    use std::time::Duration;

    let store = crate::common::memory_store(&[]);
    let run = store.start_run(crate::common::start("lapse")).unwrap();
    store.enqueue_workflow_task(run).unwrap();
    let start = crate::common::start("lapse");
    let (ns, queue) = (start.namespace, start.task_queue);
    let long = Duration::from_secs(600);
    let lease = |kind, id: &str, lease| {
        store
            .lease_task(kind, &ns, &queue, "w", id, lease)
            .unwrap()
            .expect("a ready task")
    };
    let task = lease(TaskKind::Workflow, "wf-1", long);
    let command: WorkflowCommand = serde_json::from_value(json!({
        "type": "schedule_activity", "activity_type": "linger", "queue": queue,
        "arguments": args("[]"), "cancellation_policy": "wait_cancellation_completed" }))
    .unwrap();
    let fence = |attempt| WorkflowTaskFence {
        lease_owner: "w",
        attempt,
    };
    store
        .complete_workflow_task(task.task_id, fence(task.attempt), &[command])
        .unwrap();
    // The attempt's lease is short; the workflow's are long.
    let attempt = lease(TaskKind::Activity, "act-1", Duration::from_millis(50));
    let (request, _) = store.request_cancellation(run, None, 600).unwrap();
    let task = lease(TaskKind::Workflow, "wf-2", long);
    let delivery = Delivery {
        request_id: request.request_id.clone(),
        sequence: 1,
        call_kind: "activity".into(),
        sequence_span: 1,
        operation_sequence: None,
        operation_sequence_span: 1,
    };
    let parked = store
        .deliver_cancellation(task.task_id, "w", task.attempt, &delivery)
        .unwrap()
        .unwrap();
    assert!(matches!(parked, Delivered::Waiting { .. }), "{parked:?}");
    assert!(
        support::eventually(Duration::from_secs(30), || store
            .expired_leases(TaskKind::Activity, 10)
            .unwrap()
            .contains(&attempt.task_id)),
        "the attempt's lease never lapsed"
    );
    assert!(store.recover_expired_lease(attempt.task_id).unwrap());
    // Closed as cancelled, not handed out again; the run has a task, and
    // the delivery lands on it.
    assert!(store
        .lease_task(TaskKind::Activity, &ns, &queue, "w", "act-2", long)
        .unwrap()
        .is_none());
    let page = store
        .history_page(run, 0, dwengine::store::HistoryPageLimit::events(1000))
        .unwrap();
    let cancelled: Vec<_> = page
        .events
        .iter()
        .filter(|e| e.event_type.as_str() == "ActivityCancelled")
        .collect();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0].payload["reason"], "attempt_lease_lapsed");
    let task = lease(TaskKind::Workflow, "wf-3", long);
    let delivered = store
        .deliver_cancellation(task.task_id, "w", task.attempt, &delivery)
        .unwrap()
        .unwrap();
    assert!(
        matches!(delivered, Delivered::Delivered(_)),
        "{delivered:?}"
    );
}

#[test]
fn a_task_queued_while_parked_parks_again_and_the_child_keeps_one_request() {
    let s = server();
    let child_id = parent_with_child(&s, "park-again", "wait_cancellation_completed");
    let request_id = request(&s, "park-again");
    let task = next_task(&s, "park-again");
    let (_, parked) = s.deliver_cancellation(&task, at(&request_id, 1, "child"));
    assert_eq!(
        parked["reason"], "cancellation_waiting_for_child",
        "{parked}"
    );
    let child_request =
        |s: &TestServer| events_of(&s.history(&child_id), "CooperativeCancellationRequested");
    assert_eq!(child_request(&s).len(), 1);
    // A signal wakes the parked run; its worker replays to the same call.
    let (status, body) = s.post(
        "/api/workflows/park-again/signal/poke",
        json!({ "arguments": args("[]") }),
    );
    assert_eq!(status, 202, "{body}");
    let task = next_task(&s, "park-again");
    let (status, again) = s.deliver_cancellation(&task, at(&request_id, 1, "child"));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["delivered"], false, "{again}");
    assert_eq!(again["claim_released"], true, "{again}");
    // The child's request is the one it had.
    let requested = child_request(&s);
    assert_eq!(requested.len(), 1, "{requested:?}");
    assert!(events_of(&s.history("park-again"), "CooperativeCancellationDelivered").is_empty());
}

/// A run whose activity (policy `abandon`, 600 s total) runs, with the
/// cooperative request delivered at it: (activity task, its owner, the
/// workflow task that delivered, the request id).
fn abandoned_activity(s: &TestServer, id: &str) -> (Value, Value, Value, Value) {
    s.start_workflow("default", id, id);
    let task = next_task(s, id);
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": id,
                 "arguments": args("[]"), "cancellation_policy": "abandon",
                 "schedule_to_close_timeout": 600 }]),
    );
    assert_eq!(status, 200, "{body}");
    let activity = lease_activity(s, id);
    let owner = activity["lease_owner"].clone();
    let request_id = request(s, id);
    let task = next_task(s, id);
    let (status, delivered) = s.deliver_cancellation(&task, at(&request_id, 1, "activity"));
    assert_eq!(status, 200, "{delivered}");
    // Delivered at once: the workflow stops waiting for the activity.
    assert_eq!(delivered["delivered"], true, "{delivered}");
    (activity, owner, task, request_id)
}

/// The workflow ends cancelled by its delivered request (the SDKs'
/// `fail_workflow` with their cancellation exception).
/// Delivers `body` on `task`, which must land (200, `delivered: true`);
/// the answer.
fn landed(s: &TestServer, task: &Value, body: Value) -> Value {
    let (status, delivered) = s.deliver_cancellation(task, body);
    assert_eq!(status, 200, "{delivered}");
    assert_eq!(delivered["delivered"], true, "{delivered}");
    delivered
}

fn end_cancelled(s: &TestServer, task: &Value) {
    let (status, body) = s.complete(
        task,
        json!([{ "type": "fail_workflow", "message": "cancelled",
                 "exception_type": "WorkflowCancelled" }]),
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn an_abandoned_activity_runs_on_and_its_outcome_resumes_nothing() {
    let s = server();
    // Abandon needs a total timeout: it is all that bounds the activity.
    s.start_workflow("default", "abandon-bad", "abandon-bad");
    let task = next_task(&s, "abandon-bad");
    let (status, refused) = s.complete(
        &task,
        json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": "abandon-bad",
                 "arguments": args("[]"), "cancellation_policy": "abandon" }]),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["validation_errors"]["commands.0.schedule_to_close_timeout"].is_array(),
        "{refused}"
    );

    let (activity, owner, task, _) = abandoned_activity(&s, "abandon-open");
    // The attempt is told nothing: it may continue.
    let (status, look) = activity_call(&s, &activity, "status", &owner, json!({}));
    assert_eq!(status, 200, "{look}");
    assert_eq!(look["can_continue"], true, "{look}");
    assert_eq!(look["cancel_requested"], false, "{look}");
    let (status, beat) = activity_call(&s, &activity, "heartbeat", &owner, json!({}));
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["cancel_requested"], false, "{beat}");
    let events = s.history("abandon-open");
    assert!(
        events_of(&events, "ActivityCancelled").is_empty(),
        "{events:?}"
    );
    // Its outcome, while the run cleans up, is accepted but resumes nothing.
    let (status, done) = activity_call(
        &s,
        &activity,
        "complete",
        &owner,
        json!({ "result": args("\"late\"") }),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["outcome"], "abandoned", "{done}");
    let events = s.history("abandon-open");
    assert!(
        events_of(&events, "ActivityCompleted").is_empty(),
        "{events:?}"
    );
    // The cleanup's claim is still the run's only workflow task.
    end_cancelled(&s, &task);
    assert_eq!(status_of(&s, "abandon-open"), "cancelled");
}

#[test]
fn an_abandoned_activity_outlives_its_runs_cooperative_close() {
    let s = server();
    let (activity, owner, task, _) = abandoned_activity(&s, "abandon-closed");
    end_cancelled(&s, &task);
    assert_eq!(status_of(&s, "abandon-closed"), "cancelled");
    let events = s.history("abandon-closed");
    let closed = events.last().unwrap();
    assert_eq!(closed["event_type"], "WorkflowCancelled", "{closed}");
    assert_eq!(
        closed["payload"]["abandoned_activities"][0]["sequence"], 1,
        "{closed}"
    );
    // Its attempt runs on after the close, retried within its total timeout.
    let (status, beat) = activity_call(&s, &activity, "heartbeat", &owner, json!({}));
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["cancel_requested"], false, "{beat}");
    let (status, done) = activity_call(
        &s,
        &activity,
        "complete",
        &owner,
        json!({ "result": args("\"independent\"") }),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["outcome"], "abandoned", "{done}");
    // Nothing is appended to the closed run, and no workflow task follows.
    let after = s.history("abandon-closed");
    assert_eq!(after.len(), events.len(), "{after:?}");
    assert_eq!(status_of(&s, "abandon-closed"), "cancelled");
    let (status, polled) = s.poll("workflow", "default", "abandon-closed", "wp", 300);
    assert_eq!(status, 200, "{polled}");
    assert!(polled["task"].is_null(), "{polled}");
}

#[test]
fn terminating_a_run_still_ends_its_abandoned_activity() {
    let s = server();
    let (activity, owner, _, _) = abandoned_activity(&s, "abandon-terminated");
    let (status, body) = s.post(
        "/api/workflows/abandon-terminated/terminate",
        json!({ "reason": "operator" }),
    );
    assert_eq!(status, 200, "{body}");
    let (status, late) = activity_call(
        &s,
        &activity,
        "complete",
        &owner,
        json!({ "result": args("\"late\"") }),
    );
    assert_eq!(status, 409, "{late}");
}

#[test]
fn an_abandoned_activity_is_retried_after_its_run_closed() {
    let s = server();
    let id = "abandon-retried";
    s.start_workflow("default", id, id);
    let task = next_task(&s, id);
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": id,
                 "arguments": args("[]"), "cancellation_policy": "abandon",
                 "schedule_to_close_timeout": 600,
                 "retry_policy": { "max_attempts": 2, "backoff_seconds": [1] } }]),
    );
    assert_eq!(status, 200, "{body}");
    let first = lease_activity(&s, id);
    let owner = first["lease_owner"].clone();
    let request_id = request(&s, id);
    let task = next_task(&s, id);
    let (status, delivered) = s.deliver_cancellation(&task, at(&request_id, 1, "activity"));
    assert_eq!(delivered["delivered"], true, "{status} {delivered}");
    end_cancelled(&s, &task);
    let closed = s.history(id).len();
    let (status, failed) = activity_call(
        &s,
        &first,
        "fail",
        &owner,
        json!({ "failure": { "message": "transient" } }),
    );
    assert_eq!(status, 200, "{failed}");
    assert_eq!(failed["outcome"], "retry_scheduled", "{failed}");
    // The next attempt is handed out though the run is closed.
    let second = lease_activity(&s, id);
    assert_eq!(second["task_id"], first["task_id"], "{second}");
    let (status, done) = activity_call(
        &s,
        &second,
        "complete",
        &second["lease_owner"].clone(),
        json!({ "result": args("1") }),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["outcome"], "abandoned", "{done}");
    assert_eq!(s.history(id).len(), closed);
}

#[test]
fn an_abandoned_activity_of_a_closed_run_ends_at_its_total_timeout() {
    let s = server();
    let id = "abandon-timeout";
    s.start_workflow("default", id, id);
    let task = next_task(&s, id);
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "schedule_activity", "activity_type": "linger", "queue": id,
                 "arguments": args("[]"), "cancellation_policy": "abandon",
                 "schedule_to_close_timeout": 2 }]),
    );
    assert_eq!(status, 200, "{body}");
    let activity = lease_activity(&s, id);
    let owner = activity["lease_owner"].clone();
    let request_id = request(&s, id);
    let task = next_task(&s, id);
    let (_, delivered) = s.deliver_cancellation(&task, at(&request_id, 1, "activity"));
    assert_eq!(delivered["delivered"], true, "{delivered}");
    end_cancelled(&s, &task);
    let closed = s.history(id).len();
    let pending =
        |s: &TestServer| s.get(&format!("/api/workflows/{id}")).1["pending"]["activities"].clone();
    assert_eq!(pending(&s), 1);
    // The sweep ends it at its schedule-to-close deadline: no event, no task.
    assert!(
        support::eventually(std::time::Duration::from_secs(30), || pending(&s) == 0),
        "the abandoned activity never timed out"
    );
    assert_eq!(s.history(id).len(), closed);
    let (status, late) = activity_call(
        &s,
        &activity,
        "complete",
        &owner,
        json!({ "result": args("1") }),
    );
    assert_eq!(status, 409, "{late}");
}

#[test]
fn retention_keeps_a_run_whose_abandoned_activity_still_runs() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.history_retention = std::time::Duration::ZERO;
        c.retention_throttle = std::time::Duration::from_millis(1);
    });
    let (activity, owner, task, _) = abandoned_activity(&s, "abandon-retained");
    end_cancelled(&s, &task);
    let heartbeat = |s: &TestServer, n: usize| {
        let (status, beat) = s.post(
            "/api/worker/register",
            json!({ "worker_id": format!("w{n}"), "task_queue": "elsewhere" }),
        );
        assert_eq!(status, 200, "{beat}");
        beat["pruned_run_id"].clone()
    };
    // While the abandoned activity runs, heartbeats prune nothing of it.
    let mut n = 0;
    for _ in 0..5 {
        n += 1;
        assert!(heartbeat(&s, n).is_null());
    }
    let (_, described) = s.get("/api/workflows/abandon-retained");
    assert!(described["details_pruned_at"].is_null(), "{described}");
    let (status, done) = activity_call(
        &s,
        &activity,
        "complete",
        &owner,
        json!({ "result": args("1") }),
    );
    assert_eq!(status, 200, "{done}");
    // Once it has ended, retention prunes the run.
    assert!(
        support::eventually(std::time::Duration::from_secs(30), || {
            n += 1;
            !heartbeat(&s, n).is_null()
        }),
        "the run was never pruned"
    );
    let (_, described) = s.get("/api/workflows/abandon-retained");
    assert!(described["details_pruned_at"].is_string(), "{described}");
}

#[test]
fn a_run_that_completes_leaves_its_abandon_activity_running_and_ends_the_others() {
    let s = server();
    let id = "abandon-completed";
    s.start_workflow("default", id, id);
    let task = next_task(&s, id);
    let (status, body) = s.complete(
        &task,
        json!([
            { "type": "schedule_activity", "activity_type": "linger", "queue": id,
              "arguments": args("[]"), "cancellation_policy": "abandon",
              "schedule_to_close_timeout": 600 },
            { "type": "schedule_activity", "activity_type": "linger", "queue": id,
              "arguments": args("[]") },
        ]),
    );
    assert_eq!(status, 200, "{body}");
    // The abandon activity's task (scheduled first) runs; the other waits.
    let first = lease_activity(&s, id);
    // The workflow completes without waiting for either (as a select()
    // whose losers it never cancels would).
    let (status, signalled) = s.post(
        "/api/workflows/abandon-completed/signal/nudge",
        json!({ "input": args("[]") }),
    );
    assert!(status == 200 || status == 202, "{signalled}");
    let task = next_task(&s, id);
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": args("\"done\"") }]),
    );
    assert_eq!(status, 200, "{body}");
    let events = s.history(id);
    let closed = events.last().unwrap().clone();
    assert_eq!(closed["event_type"], "WorkflowCompleted", "{closed}");
    let listed = closed["payload"]["abandoned_activities"]
        .as_array()
        .unwrap();
    assert_eq!(listed.len(), 1, "{closed}");
    assert_eq!(listed[0]["sequence"], 1, "{closed}");
    // The other activity's task ended with the run: never handed out.
    let (status, polled) = s.post(
        "/api/worker/activity-tasks/poll",
        json!({ "task_queue": id, "worker_id": "aw", "poll_request_id": "after-close",
                "timeout_seconds": 0.2 }),
    );
    assert_eq!(status, 200, "{polled}");
    assert!(polled["task"].is_null(), "{polled}");
    // The abandoned one runs on; its report is accepted and records nothing.
    let (status, done) = activity_call(
        &s,
        &first,
        "complete",
        &first["lease_owner"].clone(),
        json!({ "result": args("1") }),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["outcome"], "abandoned", "{done}");
    assert_eq!(s.history(id).len(), events.len());
}

#[test]
fn a_delivery_at_a_group_stops_its_members_but_an_abandon_one() {
    let s = server();
    let id = "abandon-group";
    s.start_workflow("default", id, id);
    let task = next_task(&s, id);
    let member = |index: i64, policy: Value| {
        let mut command = json!({ "type": "schedule_activity", "activity_type": "linger",
            "queue": id, "arguments": args("[]"), "schedule_to_close_timeout": 600,
            "parallel_group_id": "g1", "parallel_group_kind": "all",
            "parallel_group_base_sequence": 1, "parallel_group_size": 2,
            "parallel_group_index": index });
        if !policy.is_null() {
            command["cancellation_policy"] = policy;
        }
        command
    };
    let (status, body) = s.complete(
        &task,
        json!([member(0, json!("abandon")), member(1, Value::Null)]),
    );
    assert_eq!(status, 200, "{body}");
    // Both attempts run (each leased by a poll of its own).
    let mut leased = Vec::new();
    for n in 0..2 {
        let mut got = Value::Null;
        assert!(support::eventually(
            std::time::Duration::from_secs(30),
            || {
                let (_, answer) = s.post(
                    "/api/worker/activity-tasks/poll",
                    json!({ "task_queue": id, "worker_id": "aw",
                            "poll_request_id": format!("group-{n}-{}", leased.len()),
                            "timeout_seconds": 0.2 }),
                );
                got = answer["task"].clone();
                !got.is_null()
            }
        ));
        leased.push(got);
    }
    let request_id = request(&s, id);
    let task = next_task(&s, id);
    let (status, delivered) = s.deliver_cancellation(
        &task,
        json!({ "request_id": request_id, "sequence": 1, "call_kind": "parallel",
                "sequence_span": 2 }),
    );
    assert_eq!(status, 200, "{delivered}");
    assert_eq!(delivered["delivered"], true, "{delivered}");
    // The abandon member runs on; the other hears its cancellation.
    let mut continuing = Vec::new();
    for attempt in &leased {
        let (status, look) = activity_call(
            &s,
            attempt,
            "status",
            &attempt["lease_owner"].clone(),
            json!({}),
        );
        assert_eq!(status, 200, "{look}");
        continuing.push(look["can_continue"] == true);
    }
    continuing.sort();
    assert_eq!(continuing, [false, true]);
}
