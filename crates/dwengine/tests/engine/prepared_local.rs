//! Prepared local activities (worker protocol 1.20, `server::prepared_local`):
//! each route under `/api/worker/workflow-tasks/{id}/local-activities/` on
//! the workflow task's own claim — its happy path, its fence (a stale
//! attempt or owner is the documented `409 stale_task_lease`), repeats that
//! answer the first receipt without writing twice, bad input (a `422`
//! naming the field), the structural limits of the ordinary paths, and a
//! cooperative cancellation request stopping a running attempt.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwpolicy::LimitKind;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn path(task: &Value, rest: &str) -> String {
    format!(
        "/api/worker/workflow-tasks/{}/local-activities/{rest}",
        task["task_id"].as_str().unwrap()
    )
}

/// Posts `body` with the task's claim to `…/local-activities/{rest}`.
fn on_claim(s: &TestServer, task: &Value, rest: &str, body: Value) -> (u16, Value) {
    let mut body = body;
    body["lease_owner"] = task["lease_owner"].clone();
    body["workflow_task_attempt"] = task["workflow_task_attempt"].clone();
    s.post(&path(task, rest), body)
}

fn descriptor(extra: Value) -> Value {
    let mut descriptor = json!({
        "type": "record_local_activity", "activity_type": "double", "execution_mode": "local",
        "arguments": { "codec": "json", "blob": "[21]" }, "payload_codec": "json",
    });
    if let (Value::Object(d), Value::Object(e)) = (&mut descriptor, extra) {
        d.extend(e);
    }
    descriptor
}

fn prepare(s: &TestServer, task: &Value, sequence: i64, nonce: &str, extra: Value) -> (u16, Value) {
    on_claim(
        s,
        task,
        "prepare",
        json!({ "sequence": sequence, "worker_attempt_id": nonce, "descriptor": descriptor(extra) }),
    )
}

/// Prepares the local call at sequence 1 on `task`'s claim, with
/// descriptor fields `extra`; its attempt id.
fn admitted_attempt(s: &TestServer, task: &Value, extra: Value) -> Value {
    let (status, admitted) = prepare(s, task, 1, "n", extra);
    assert_eq!(status, 200, "{admitted}");
    admitted["activity_attempt_id"].clone()
}

fn attempt_op(
    s: &TestServer,
    task: &Value,
    attempt: &Value,
    op: &str,
    body: Value,
) -> (u16, Value) {
    on_claim(
        s,
        task,
        &format!("{}/{op}", attempt.as_str().unwrap()),
        body,
    )
}

fn local_types(events: &[Value]) -> Vec<(i64, String)> {
    events
        .iter()
        .filter(|e| e["payload"]["execution_mode"] == "local")
        .map(|e| {
            (
                e["payload"]["sequence"].as_i64().unwrap(),
                e["event_type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn an_attempt_is_admitted_controlled_and_recorded_once() {
    let s = server();
    s.start_workflow("default", "pla-happy", "q");
    let task = next_task(&s, "q");

    let (status, admitted) = prepare(
        &s,
        &task,
        1,
        "nonce-1",
        json!({ "heartbeat_timeout": 30, "start_to_close_timeout": 60 }),
    );
    assert_eq!(status, 200, "{admitted}");
    assert_eq!(admitted["prepared"], true, "{admitted}");
    assert_eq!(admitted["duplicate"], false, "{admitted}");
    assert_eq!(admitted["reason"], Value::Null, "{admitted}");
    assert_eq!(admitted["workflow_task_id"], task["task_id"], "{admitted}");
    assert_eq!(admitted["lease_owner"], task["lease_owner"], "{admitted}");
    assert_eq!(
        admitted["workflow_task_attempt"], task["workflow_task_attempt"],
        "{admitted}"
    );
    assert_eq!(admitted["worker_attempt_id"], "nonce-1", "{admitted}");
    assert_eq!(admitted["attempt_number"], 1, "{admitted}");
    for field in [
        "activity_execution_id",
        "activity_attempt_id",
        "server_time",
        "lease_expires_at",
        "start_to_close_deadline_at",
        "heartbeat_deadline_at",
        "history_refresh_page_token",
    ] {
        assert!(admitted[field].is_string(), "{field}: {admitted}");
    }
    assert!(
        admitted["lease_expires_at"].as_str() > admitted["server_time"].as_str(),
        "{admitted}"
    );
    assert_eq!(admitted["schedule_to_close_deadline_at"], Value::Null);
    let attempt = admitted["activity_attempt_id"].clone();

    // The same admission again answers the same attempt, writing nothing.
    let (status, again) = prepare(
        &s,
        &task,
        1,
        "nonce-1",
        json!({ "heartbeat_timeout": 30, "start_to_close_timeout": 60 }),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["activity_attempt_id"], attempt, "{again}");
    // Another nonce at the same sequence is another claim's attempt.
    let (status, other) = prepare(&s, &task, 1, "nonce-2", json!({}));
    assert_eq!(status, 409, "{other}");

    let (status, control) = attempt_op(
        &s,
        &task,
        &attempt,
        "control",
        json!({ "renew_lease": true }),
    );
    assert_eq!(status, 200, "{control}");
    assert_eq!(control["active"], true, "{control}");
    assert_eq!(control["renewed"], true, "{control}");
    assert_eq!(control["stop_required"], false, "{control}");
    assert_eq!(control["heartbeat_recorded"], false, "{control}");
    assert_eq!(
        control["heartbeat_history_event_id"],
        Value::Null,
        "{control}"
    );
    assert_eq!(
        control["start_to_close_deadline_at"], admitted["start_to_close_deadline_at"],
        "{control}"
    );

    let (status, beat) = attempt_op(
        &s,
        &task,
        &attempt,
        "heartbeat",
        json!({ "progress": { "details": { "done": 1 } } }),
    );
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["active"], true, "{beat}");
    assert_eq!(beat["renewed"], false, "{beat}");
    assert_eq!(beat["heartbeat_recorded"], true, "{beat}");
    assert!(beat["heartbeat_history_event_id"].is_string(), "{beat}");
    assert!(
        beat["heartbeat_deadline_at"].as_str() >= admitted["heartbeat_deadline_at"].as_str(),
        "{beat}"
    );

    let report = json!({ "report": { "outcome": "completed",
        "result": { "codec": "json", "blob": "42" }, "payload_codec": "json" } });
    let (status, recorded) = attempt_op(&s, &task, &attempt, "outcome", report.clone());
    assert_eq!(status, 200, "{recorded}");
    assert_eq!(recorded["recorded"], true, "{recorded}");
    assert_eq!(recorded["duplicate"], false, "{recorded}");
    assert_eq!(recorded["event_type"], "ActivityCompleted", "{recorded}");
    assert_eq!(recorded["claim_released"], false, "{recorded}");
    assert_eq!(recorded["created_task_ids"], json!([]), "{recorded}");
    assert_eq!(recorded["worker_attempt_id"], "nonce-1", "{recorded}");
    assert_eq!(recorded["activity_attempt_id"], attempt, "{recorded}");

    // A retried report answers the first receipt; another report conflicts.
    let (status, repeat) = attempt_op(&s, &task, &attempt, "outcome", report);
    assert_eq!(status, 200, "{repeat}");
    assert_eq!(repeat["duplicate"], true, "{repeat}");
    assert_eq!(repeat["event_id"], recorded["event_id"], "{repeat}");
    let (status, conflict) = attempt_op(
        &s,
        &task,
        &attempt,
        "outcome",
        json!({ "report": { "outcome": "failed", "message": "late" } }),
    );
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["reason"], "local_activity_outcome_conflict");

    // The closed attempt's authority is over.
    let (status, closed) = attempt_op(&s, &task, &attempt, "control", json!({}));
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["active"], false, "{closed}");
    assert_eq!(closed["stop_required"], true, "{closed}");
    assert_eq!(closed["reason"], "activity_attempt_closed", "{closed}");
    let (status, ack) = attempt_op(
        &s,
        &task,
        &attempt,
        "acknowledge-cancellation",
        json!({ "request_id": "r" }),
    );
    assert_eq!(status, 409, "{ack}");
    assert_eq!(ack["reason"], "cancellation_not_fenced", "{ack}");

    let events = s.history("pla-happy");
    assert_eq!(
        local_types(&events),
        vec![
            (1, "ActivityScheduled".to_owned()),
            (1, "ActivityStarted".to_owned()),
            (1, "ActivityCompleted".to_owned()),
        ]
    );
    let completed = events
        .iter()
        .find(|e| e["event_type"] == "ActivityCompleted")
        .unwrap();
    assert_eq!(completed["id"], recorded["event_id"], "{completed}");
    assert_eq!(completed["payload"]["result"]["blob"], "42", "{completed}");
    assert_eq!(completed["payload"]["activity_attempt_id"], attempt);

    // The workflow task completes as usual, after the recorded call.
    let (status, done) = s.complete(
        &task,
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "42" } }]),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["run_status"], "completed", "{done}");
}

#[test]
fn every_operation_is_fenced_by_the_claim() {
    let s = server();
    s.start_workflow("default", "pla-fence", "q");
    let task = next_task(&s, "q");
    let (status, admitted) = prepare(&s, &task, 1, "n", json!({}));
    assert_eq!(status, 200, "{admitted}");
    let attempt = admitted["activity_attempt_id"].as_str().unwrap().to_owned();

    let mut stale_attempt = task.clone();
    stale_attempt["workflow_task_attempt"] =
        json!(task["workflow_task_attempt"].as_i64().unwrap() + 1);
    let mut intruder = task.clone();
    intruder["lease_owner"] = json!("intruder");
    for stale in [&stale_attempt, &intruder] {
        for rest in [
            "prepare".to_owned(),
            "recover".to_owned(),
            "checkpoint".to_owned(),
            format!("{attempt}/control"),
            format!("{attempt}/heartbeat"),
            format!("{attempt}/outcome"),
        ] {
            let body = json!({
                "sequence": 1, "worker_attempt_id": "n", "descriptor": descriptor(json!({})),
                "checkpoint_id": "c", "start_sequence": 2,
                "commands": [{ "type": "record_side_effect", "result": { "codec": "json", "blob": "1" } }],
                "report": { "outcome": "completed", "result": { "codec": "json", "blob": "1" } },
            });
            let (status, refused) = on_claim(&s, stale, &rest, body);
            assert_eq!(status, 409, "{rest}: {refused}");
            assert_eq!(refused["reason"], "stale_task_lease", "{rest}: {refused}");
        }
    }
    // An attempt the run does not have.
    let (status, unknown) = attempt_op(&s, &task, &json!("1:99:1"), "control", json!({}));
    assert_eq!(status, 404, "{unknown}");
    assert_eq!(unknown["reason"], "local_activity_attempt_not_found");
    // Nothing was recorded by the refused calls.
    let events = s.history("pla-fence");
    assert_eq!(local_types(&events).len(), 2, "{events:?}");
    assert!(!events
        .iter()
        .any(|e| e["event_type"] == "SideEffectRecorded"));
}

#[test]
fn bad_input_is_refused_naming_the_field() {
    let s = server();
    s.start_workflow("default", "pla-bad", "q");
    let task = next_task(&s, "q");
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "prepare",
            json!({ "worker_attempt_id": "n", "descriptor": descriptor(json!({})) }),
            "sequence",
        ),
        (
            "prepare",
            json!({ "sequence": 1, "descriptor": descriptor(json!({})) }),
            "worker_attempt_id",
        ),
        (
            "prepare",
            json!({ "sequence": 1, "worker_attempt_id": "n" }),
            "descriptor",
        ),
        (
            "prepare",
            json!({ "sequence": 1, "worker_attempt_id": "n", "descriptor": descriptor(json!({ "activity_type": "" })) }),
            "descriptor.activity_type",
        ),
        (
            "prepare",
            json!({ "sequence": 1, "worker_attempt_id": "n", "descriptor": descriptor(json!({ "type": "schedule_activity" })) }),
            "descriptor.type",
        ),
        (
            "prepare",
            json!({ "sequence": 1, "worker_attempt_id": "n", "descriptor": descriptor(json!({ "start_to_close_timeout": 0 })) }),
            "descriptor.start_to_close_timeout",
        ),
        (
            "prepare",
            json!({ "sequence": 1, "worker_attempt_id": "n",
                    "descriptor": descriptor(json!({ "cancellation_cleanup": { "request_id": "r" } })) }),
            "descriptor.cancellation_cleanup.delivery_history_event_id",
        ),
        (
            "checkpoint",
            json!({ "checkpoint_id": "c", "start_sequence": 1,
                    "commands": [{ "type": "schedule_activity", "activity_type": "a" }] }),
            "commands.0.type",
        ),
        (
            "checkpoint",
            json!({ "checkpoint_id": "c", "start_sequence": 1, "commands": [] }),
            "commands",
        ),
        (
            "checkpoint",
            json!({ "start_sequence": 1,
                    "commands": [{ "type": "record_side_effect", "result": { "codec": "json", "blob": "1" } }] }),
            "checkpoint_id",
        ),
        (
            "checkpoint-group",
            json!({ "checkpoint_id": "c", "start_sequence": 1,
                    "commands": [{ "type": "prepare_local_activity", "activity_type": "a" }] }),
            "commands.0.parallel_group_id",
        ),
    ];
    for (rest, body, field) in cases {
        let (status, refused) = on_claim(&s, &task, rest, body);
        assert_eq!(status, 422, "{rest} {field}: {refused}");
        assert!(
            refused["validation_errors"][field].is_array(),
            "{rest} {field}: {refused}"
        );
    }
    let attempt = admitted_attempt(&s, &task, json!({}));
    for (body, field) in [
        (json!({}), "report"),
        (
            json!({ "report": { "outcome": "maybe" } }),
            "report.outcome",
        ),
    ] {
        let (status, refused) = attempt_op(&s, &task, &attempt, "outcome", body);
        assert_eq!(status, 422, "{field}: {refused}");
        assert!(refused["validation_errors"][field].is_array(), "{refused}");
    }
    // A sequence past the run's next one: earlier commands come first.
    let (status, ahead) = prepare(&s, &task, 5, "m", json!({}));
    assert_eq!(status, 409, "{ahead}");
    assert_eq!(
        ahead["reason"], "local_activity_sequence_mismatch",
        "{ahead}"
    );
    // Another call at a recorded sequence is not this workflow's replay.
    let (status, changed) = prepare(
        &s,
        &task,
        1,
        "n",
        json!({ "arguments": { "codec": "json", "blob": "[7]" } }),
    );
    assert_eq!(status, 409, "{changed}");
    assert_eq!(changed["reason"], "local_activity_descriptor_mismatch");
}

#[test]
fn checkpoints_write_the_authored_prefix_and_group_once() {
    let s = server();
    s.start_workflow("default", "pla-group", "q");
    let task = next_task(&s, "q");
    let prefix = json!({ "checkpoint_id": "prefix-1", "start_sequence": 1,
        "commands": [{ "type": "record_side_effect", "result": { "codec": "json", "blob": "1" } }] });
    let (status, first) = on_claim(&s, &task, "checkpoint", prefix.clone());
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["checkpointed"], true, "{first}");
    assert_eq!(first["duplicate"], false, "{first}");
    assert_eq!(first["task_id"], task["task_id"], "{first}");
    assert_eq!(first["start_sequence"], 1, "{first}");
    assert_eq!(first["next_sequence"], 2, "{first}");
    assert!(first["history_refresh_page_token"].is_string(), "{first}");
    let (status, again) = on_claim(&s, &task, "checkpoint", prefix);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["next_sequence"], 2, "{again}");
    // Another checkpoint must start where the run is.
    let (status, behind) = on_claim(
        &s,
        &task,
        "checkpoint",
        json!({ "checkpoint_id": "prefix-2", "start_sequence": 1,
            "commands": [{ "type": "record_side_effect", "result": { "codec": "json", "blob": "2" } }] }),
    );
    assert_eq!(status, 409, "{behind}");
    assert_eq!(behind["reason"], "checkpoint_sequence_mismatch", "{behind}");

    let member = |index: i64| {
        json!({ "parallel_group_id": "g1", "parallel_group_kind": "all",
            "parallel_group_base_sequence": 2, "parallel_group_size": 2,
            "parallel_group_index": index,
            "parallel_group_path": [{ "parallel_group_id": "g1", "parallel_group_kind": "all",
                "parallel_group_base_sequence": 2, "parallel_group_size": 2,
                "parallel_group_index": index }] })
    };
    let mut local = descriptor(member(0));
    local["type"] = json!("prepare_local_activity");
    let mut remote = json!({ "type": "schedule_activity", "activity_type": "greet", "queue": "q",
        "arguments": { "codec": "json", "blob": "[]" } });
    if let (Value::Object(r), Value::Object(m)) = (&mut remote, member(1)) {
        r.extend(m);
    }
    let group =
        json!({ "checkpoint_id": "group-1", "start_sequence": 2, "commands": [local, remote] });
    let (status, grouped) = on_claim(&s, &task, "checkpoint-group", group.clone());
    assert_eq!(status, 200, "{grouped}");
    assert_eq!(grouped["next_sequence"], 4, "{grouped}");
    assert_eq!(grouped["local_activities"][0]["sequence"], 2, "{grouped}");
    let execution = grouped["local_activities"][0]["activity_execution_id"].clone();
    assert!(execution.is_string(), "{grouped}");
    let (status, again) = on_claim(&s, &task, "checkpoint-group", group);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["local_activities"], grouped["local_activities"]);

    let events = s.history("pla-group");
    let scheduled: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "ActivityScheduled")
        .collect();
    assert_eq!(scheduled.len(), 2, "{events:?}");
    assert_eq!(scheduled[0]["payload"]["execution_mode"], "local");
    assert_eq!(scheduled[0]["payload"]["activity_execution_id"], execution);
    for (i, event) in scheduled.iter().enumerate() {
        assert_eq!(event["payload"]["sequence"], 2 + i as i64, "{event}");
        assert_eq!(
            event["payload"]["parallel_group_path"][0]["parallel_group_index"], i as i64,
            "{event}"
        );
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event_type"] == "SideEffectRecorded")
            .count(),
        1
    );
    // The group's local member is admitted at its scheduled sequence; its
    // ordinary member is an activity task.
    let (status, admitted) = prepare(&s, &task, 2, "n", member(0));
    assert_eq!(status, 200, "{admitted}");
    assert_eq!(admitted["activity_execution_id"], execution, "{admitted}");
    let (status, polled) = s.poll("activity", "default", "q", "ap-1", 2_000);
    assert_eq!(status, 200, "{polled}");
    assert_eq!(polled["task"]["activity_type"], "greet", "{polled}");
}

#[test]
fn a_retry_releases_the_claim_and_a_lost_claim_is_recovered() {
    let s = server();
    s.start_workflow("default", "pla-retry", "q");
    let task = next_task(&s, "q");
    let policy = json!({ "retry_policy": { "max_attempts": 2, "backoff_seconds": [0] } });
    let (status, admitted) = prepare(&s, &task, 1, "n1", policy.clone());
    assert_eq!(status, 200, "{admitted}");
    let first = admitted["activity_attempt_id"].clone();
    let (status, retry) = attempt_op(
        &s,
        &task,
        &first,
        "outcome",
        json!({ "report": { "outcome": "failed", "message": "boom", "exception_type": "Boom" } }),
    );
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["event_type"], "ActivityRetryScheduled", "{retry}");
    assert_eq!(retry["claim_released"], true, "{retry}");
    assert_eq!(
        retry["created_task_ids"].as_array().unwrap().len(),
        1,
        "{retry}"
    );
    // The released claim is over.
    let (status, stale) = attempt_op(&s, &task, &first, "control", json!({}));
    assert_eq!(status, 409, "{stale}");

    // The next task admits attempt 2 at the same sequence.
    let second_task = next_task(&s, "q");
    assert_eq!(
        second_task["task_id"], retry["created_task_ids"][0],
        "{second_task}"
    );
    let (status, second) = prepare(&s, &second_task, 1, "n2", policy.clone());
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["attempt_number"], 2, "{second}");
    assert_eq!(
        second["activity_execution_id"],
        admitted["activity_execution_id"]
    );
    assert_ne!(second["activity_attempt_id"], first, "{second}");

    // That claim is lost (its task fails); the next claim recovers it.
    let (status, failed) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/fail",
            second_task["task_id"].as_str().unwrap()
        ),
        json!({ "lease_owner": second_task["lease_owner"],
            "workflow_task_attempt": second_task["workflow_task_attempt"],
            "failure": { "message": "worker lost" } }),
    );
    assert_eq!(status, 200, "{failed}");
    let third_task = next_task(&s, "q");
    let (status, in_flight) = prepare(&s, &third_task, 1, "n3", policy.clone());
    assert_eq!(status, 409, "{in_flight}");
    assert_eq!(in_flight["reason"], "local_activity_attempt_in_flight");
    let recover = json!({ "sequence": 1, "descriptor": descriptor(policy) });
    let (status, recovered) = on_claim(&s, &third_task, "recover", recover.clone());
    assert_eq!(status, 200, "{recovered}");
    assert_eq!(recovered["recovered"], true, "{recovered}");
    assert_eq!(recovered["duplicate"], false, "{recovered}");
    assert_eq!(recovered["callback_stop_state"], "unknown", "{recovered}");
    assert_eq!(recovered["event_type"], "ActivityFailed", "{recovered}");
    assert_eq!(recovered["claim_released"], false, "{recovered}");
    assert_eq!(recovered["workflow_task_id"], third_task["task_id"]);
    assert_eq!(
        recovered["activity_attempt_id"],
        second["activity_attempt_id"]
    );
    let (status, again) = on_claim(&s, &third_task, "recover", recover);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    assert_eq!(again["event_id"], recovered["event_id"], "{again}");

    let events = s.history("pla-retry");
    let kinds: Vec<String> = local_types(&events).into_iter().map(|(_, k)| k).collect();
    assert_eq!(
        kinds,
        [
            "ActivityScheduled",
            "ActivityStarted",
            "ActivityRetryScheduled",
            "ActivityStarted",
            "ActivityFailed"
        ]
    );
    let failed = events
        .iter()
        .find(|e| e["event_type"] == "ActivityFailed")
        .unwrap();
    let recovery = &failed["payload"]["local_recovery"];
    assert_eq!(
        recovery["workflow_task_id"], third_task["task_id"],
        "{failed}"
    );
    assert_eq!(recovery["callback_stop_state"], "unknown", "{failed}");
    assert_eq!(
        recovery["lease_owner"], third_task["lease_owner"],
        "{failed}"
    );
}

#[test]
fn structural_limits_apply_as_on_the_ordinary_paths() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.store.limits.set(LimitKind::PendingActivityCount, 1);
        c.store.limits.set(LimitKind::PayloadSizeBytes, 200);
    });
    // pending_activity_count: the group's second local member is past the
    // limit; the run fails and nothing of the group is written.
    s.start_workflow("default", "pla-pending", "q");
    let task = next_task(&s, "q");
    let member = |index: i64| {
        let mut local = descriptor(
            json!({ "parallel_group_id": "g", "parallel_group_kind": "all",
            "parallel_group_base_sequence": 1, "parallel_group_size": 2,
            "parallel_group_index": index }),
        );
        local["type"] = json!("prepare_local_activity");
        local
    };
    let (status, refused) = on_claim(
        &s,
        &task,
        "checkpoint-group",
        json!({ "checkpoint_id": "g", "start_sequence": 1, "commands": [member(0), member(1)] }),
    );
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "structural_limit_exceeded", "{refused}");
    let (_, described) = s.get("/api/workflows/pla-pending");
    assert_eq!(described["status"], "failed", "{described}");
    let events = s.history("pla-pending");
    assert!(local_types(&events).is_empty(), "{events:?}");

    // payload_size_bytes: oversized arguments fail the run at admission.
    s.start_workflow("default", "pla-payload", "q");
    let task = next_task(&s, "q");
    let big = json!({ "arguments": { "codec": "json", "blob": "x".repeat(300) } });
    let (status, refused) = prepare(&s, &task, 1, "n", big);
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "structural_limit_exceeded", "{refused}");
    let (_, described) = s.get("/api/workflows/pla-payload");
    assert_eq!(described["status"], "failed", "{described}");
    let events = s.history("pla-payload");
    assert!(local_types(&events).is_empty(), "{events:?}");
}

#[test]
fn a_cancellation_request_stops_a_running_attempt_once_acknowledged() {
    let s = server();
    s.start_workflow("default", "pla-cancel", "q");
    let task = next_task(&s, "q");
    let attempt = admitted_attempt(&s, &task, json!({}));
    let (status, control) = attempt_op(&s, &task, &attempt, "control", json!({}));
    assert_eq!(status, 200, "{control}");
    assert_eq!(control["active"], true, "{control}");
    assert_eq!(control["fenced"], false, "{control}");

    let (status, requested) = s.post(
        "/api/workflows/pla-cancel/request-cancellation",
        json!({ "reason": "stop", "cleanup_timeout_seconds": 60 }),
    );
    assert_eq!(status, 200, "{requested}");
    let request_id = requested["cancellation_request"]["request_id"].clone();

    // The request's event records its cancellation context.
    let events = s.history("pla-cancel");
    let event = events
        .iter()
        .find(|e| e["event_type"] == "CooperativeCancellationRequested")
        .unwrap();
    let context = &event["payload"]["cancellation"];
    assert_eq!(context["request_id"], request_id, "{event}");
    assert_eq!(context["lineage"][0]["workflow_instance_id"], "pla-cancel");
    assert_eq!(
        context["cleanup_deadline_at"], event["payload"]["cleanup_deadline_at"],
        "{event}"
    );

    // The running attempt hears it: stop, with the request and its event.
    for op in ["control", "heartbeat"] {
        let (status, stop) = attempt_op(&s, &task, &attempt, op, json!({}));
        assert_eq!(status, 200, "{op}: {stop}");
        assert_eq!(stop["active"], false, "{op}: {stop}");
        assert_eq!(stop["stop_required"], true, "{op}: {stop}");
        assert_eq!(stop["renewed"], false, "{op}: {stop}");
        assert_eq!(stop["reason"], "cancellation_requested", "{op}: {stop}");
        assert_eq!(stop["fenced"], true, "{op}: {stop}");
        assert_eq!(stop["heartbeat_recorded"], false, "{op}: {stop}");
        assert_eq!(stop["cancellation_request"], *context, "{op}: {stop}");
        assert_eq!(
            stop["cancellation_history_event_id"], event["id"],
            "{op}: {stop}"
        );
    }

    // The worker acknowledges the stopped callback, once.
    let (status, wrong) = attempt_op(
        &s,
        &task,
        &attempt,
        "acknowledge-cancellation",
        json!({ "request_id": "another" }),
    );
    assert_eq!(status, 409, "{wrong}");
    assert_eq!(wrong["reason"], "cancellation_request_mismatch", "{wrong}");
    let ack = json!({ "request_id": request_id });
    let (status, first) = attempt_op(&s, &task, &attempt, "acknowledge-cancellation", ack.clone());
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["acknowledged"], true, "{first}");
    assert_eq!(first["duplicate"], false, "{first}");
    assert_eq!(first["reason"], Value::Null, "{first}");
    assert_eq!(first["history_event_id"], event["id"], "{first}");
    let (status, again) = attempt_op(&s, &task, &attempt, "acknowledge-cancellation", ack);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true, "{again}");
    // A stopped attempt has no outcome to record.
    let (status, late) = attempt_op(
        &s,
        &task,
        &attempt,
        "outcome",
        json!({ "report": { "outcome": "completed", "result": { "codec": "json", "blob": "1" } } }),
    );
    assert_eq!(status, 409, "{late}");
    assert_eq!(late["reason"], "activity_attempt_closed", "{late}");

    // The worker delivers the request at the local call.
    let (status, delivered) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/deliver-cancellation",
            task["task_id"].as_str().unwrap()
        ),
        json!({ "lease_owner": task["lease_owner"],
            "workflow_task_attempt": task["workflow_task_attempt"],
            "request_id": request_id, "sequence": 1, "call_kind": "local_activity" }),
    );
    assert_eq!(status, 200, "{delivered}");
    let events = s.history("pla-cancel");
    let kinds: Vec<String> = local_types(&events).into_iter().map(|(_, k)| k).collect();
    assert_eq!(kinds, ["ActivityScheduled", "ActivityStarted"]);
    let delivery = events
        .iter()
        .find(|e| e["event_type"] == "CooperativeCancellationDelivered")
        .unwrap();

    // A cleanup call names the delivered request and its delivery event; it
    // runs on that cleanup authority, within the cleanup deadline.
    let (status, wrong) = prepare(
        &s,
        &task,
        2,
        "c",
        json!({ "cancellation_cleanup": { "request_id": request_id, "delivery_history_event_id": "1" } }),
    );
    assert_eq!(status, 409, "{wrong}");
    assert_eq!(
        wrong["reason"], "cancellation_cleanup_not_authorized",
        "{wrong}"
    );
    let asked = json!({ "cancellation_cleanup": {
        "request_id": request_id, "delivery_history_event_id": delivery["id"] } });
    let (status, cleanup) = prepare(&s, &task, 2, "c", asked);
    assert_eq!(status, 200, "{cleanup}");
    let authority = &cleanup["cancellation_cleanup"];
    assert_eq!(authority["request_id"], request_id, "{cleanup}");
    assert_eq!(authority["root_request_id"], request_id, "{cleanup}");
    assert_eq!(
        authority["delivery_history_event_id"], delivery["id"],
        "{cleanup}"
    );
    assert_eq!(
        authority["cleanup_deadline_at"], context["cleanup_deadline_at"],
        "{cleanup}"
    );
    assert_eq!(authority.as_object().unwrap().len(), 4, "{cleanup}");
    // No heartbeat timeout: the heartbeat deadline is the cleanup deadline.
    assert_eq!(
        cleanup["heartbeat_deadline_at"], context["cleanup_deadline_at"],
        "{cleanup}"
    );
    let attempt = cleanup["activity_attempt_id"].clone();
    let (status, control) = attempt_op(&s, &task, &attempt, "control", json!({}));
    assert_eq!(status, 200, "{control}");
    assert_eq!(control["active"], true, "{control}");
    assert_eq!(control["cancellation_cleanup"], *authority, "{control}");
}

/// Requests cooperative cancellation of `id`; the request's id.
fn request_cancellation(s: &TestServer, id: &str) -> Value {
    let (status, requested) = s.post(
        &format!("/api/workflows/{id}/request-cancellation"),
        json!({ "reason": "stop", "cleanup_timeout_seconds": 60 }),
    );
    assert_eq!(status, 200, "{requested}");
    requested["cancellation_request"]["request_id"].clone()
}

/// Acknowledges `request_id` for the stopped `attempt` of the call at
/// sequence 1, then delivers it there (200 both); the delivery's answer.
fn acknowledge_and_deliver(
    s: &TestServer,
    task: &Value,
    attempt: &Value,
    request_id: &Value,
) -> Value {
    let (status, ack) = attempt_op(
        s,
        task,
        attempt,
        "acknowledge-cancellation",
        json!({ "request_id": request_id }),
    );
    assert_eq!(status, 200, "{ack}");
    let (status, delivered) = deliver_at_local(s, task, request_id, 1);
    assert_eq!(status, 200, "{delivered}");
    delivered
}

/// Delivers `request_id` at the local call at `sequence` on the claim.
fn deliver_at_local(
    s: &TestServer,
    task: &Value,
    request_id: &Value,
    sequence: i64,
) -> (u16, Value) {
    s.deliver_cancellation(
        task,
        json!({ "request_id": request_id, "sequence": sequence, "call_kind": "local_activity" }),
    )
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["event_type"] == kind).count()
}

#[test]
fn local_cancellation_policies_are_advertised_recorded_and_checked() {
    let s = server();
    let (_, info) = s.get("/api/cluster/info");
    assert_eq!(
        info["worker_protocol"]["server_capabilities"]
            ["prepared_local_activity_cancellation_policies"],
        json!(["try_cancel", "wait_cancellation_completed"]),
        "{info}"
    );
    s.start_workflow("default", "pla-policy", "q");
    let task = next_task(&s, "q");
    for policy in [json!("abandon"), json!("later"), json!(null), json!(3)] {
        let (status, refused) =
            prepare(&s, &task, 1, "n", json!({ "cancellation_policy": policy }));
        assert_eq!(status, 422, "{policy}: {refused}");
        assert!(
            refused["validation_errors"]["descriptor.cancellation_policy"].is_array(),
            "{policy}: {refused}"
        );
    }
    let wait = json!({ "cancellation_policy": "wait_cancellation_completed" });
    // Every event of the call records the policy as authored.
    let attempt = admitted_attempt(&s, &task, wait.clone());
    let (status, done) = attempt_op(
        &s,
        &task,
        &attempt,
        "outcome",
        json!({ "report": { "outcome": "completed", "result": { "codec": "json", "blob": "42" } } }),
    );
    assert_eq!(status, 200, "{done}");
    let events = s.history("pla-policy");
    let local: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["execution_mode"] == "local")
        .collect();
    assert_eq!(local.len(), 3, "{events:?}");
    for event in &local {
        assert_eq!(
            event["payload"]["cancellation_policy"], "wait_cancellation_completed",
            "{event}"
        );
    }
    // Replay authoring another policy at the call is not this workflow.
    let (status, changed) = prepare(
        &s,
        &task,
        1,
        "n",
        json!({ "cancellation_policy": "try_cancel" }),
    );
    assert_eq!(status, 409, "{changed}");
    assert_eq!(changed["reason"], "local_activity_descriptor_mismatch");
    // A group member is checked the same way.
    let (status, refused) = on_claim(
        &s,
        &task,
        "checkpoint-group",
        json!({ "checkpoint_id": "g", "start_sequence": 2, "commands": [{
            "type": "prepare_local_activity", "activity_type": "a", "parallel_group_id": "g1",
            "cancellation_policy": "abandon" }] }),
    );
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["validation_errors"]["commands.0.cancellation_policy"].is_array(),
        "{refused}"
    );
}

#[test]
fn a_try_cancel_delivery_fences_a_running_attempt_at_once() {
    let s = server();
    s.start_workflow("default", "pla-try", "q");
    let task = next_task(&s, "q");
    let (status, admitted) = prepare(
        &s,
        &task,
        1,
        "n",
        json!({ "cancellation_policy": "try_cancel" }),
    );
    assert_eq!(status, 200, "{admitted}");
    let attempt = admitted["activity_attempt_id"].clone();
    let request_id = request_cancellation(&s, "pla-try");
    // Delivered without waiting for the callback's stop.
    let (status, delivered) = deliver_at_local(&s, &task, &request_id, 1);
    assert_eq!(status, 200, "{delivered}");
    assert_eq!(delivered["delivered"], true, "{delivered}");
    // The attempt is fenced: its control says stop and no outcome of it is
    // recorded any more.
    let (status, control) = attempt_op(&s, &task, &attempt, "control", json!({}));
    assert_eq!(status, 200, "{control}");
    assert_eq!(control["active"], false, "{control}");
    let (status, late) = attempt_op(
        &s,
        &task,
        &attempt,
        "outcome",
        json!({ "report": { "outcome": "completed", "result": { "codec": "json", "blob": "1" } } }),
    );
    assert_eq!(status, 409, "{late}");
    assert_eq!(late["reason"], "activity_attempt_closed", "{late}");
    let events = s.history("pla-try");
    assert_eq!(count(&events, "ActivityCompleted"), 0, "{events:?}");
    assert_eq!(count(&events, "CooperativeCancellationDelivered"), 1);
}

#[test]
fn a_wait_policy_holds_the_delivery_until_the_stop_is_acknowledged() {
    let s = server();
    let wait = json!({ "cancellation_policy": "wait_cancellation_completed" });

    // Acknowledged first (what the Python worker does): delivered at once.
    s.start_workflow("default", "pla-wait-ack", "q");
    let task = next_task(&s, "q");
    let attempt = admitted_attempt(&s, &task, wait.clone());
    let request_id = request_cancellation(&s, "pla-wait-ack");
    let delivered = acknowledge_and_deliver(&s, &task, &attempt, &request_id);
    assert_eq!(delivered["delivered"], true, "{delivered}");

    // Not acknowledged: the delivery waits, releasing the claim; the next
    // claim finds the attempt's claim gone and delivers.
    s.start_workflow("default", "pla-wait", "q2");
    let task = next_task(&s, "q2");
    let attempt = admitted_attempt(&s, &task, wait);
    let request_id = request_cancellation(&s, "pla-wait");
    let (status, waiting) = deliver_at_local(&s, &task, &request_id, 1);
    assert_eq!(status, 200, "{waiting}");
    assert_eq!(waiting["delivered"], false, "{waiting}");
    assert_eq!(
        waiting["reason"], "cancellation_waiting_for_activity",
        "{waiting}"
    );
    assert_eq!(waiting["claim_released"], true, "{waiting}");
    assert_eq!(waiting["task_id"], task["task_id"], "{waiting}");
    let events = s.history("pla-wait");
    assert_eq!(
        count(&events, "CooperativeCancellationDelivered"),
        0,
        "{events:?}"
    );
    // The released claim reports nothing more of the attempt.
    let (status, late) = attempt_op(
        &s,
        &task,
        &attempt,
        "outcome",
        json!({ "report": { "outcome": "completed", "result": { "codec": "json", "blob": "1" } } }),
    );
    assert_eq!(status, 409, "{late}");
    let next = next_task(&s, "q2");
    assert_ne!(next["task_id"], task["task_id"], "{next}");
    let (status, delivered) = deliver_at_local(&s, &next, &request_id, 1);
    assert_eq!(status, 200, "{delivered}");
    assert_eq!(delivered["delivered"], true, "{delivered}");
    let events = s.history("pla-wait");
    assert_eq!(count(&events, "ActivityCompleted"), 0, "{events:?}");
    assert_eq!(count(&events, "CooperativeCancellationDelivered"), 1);
}

#[test]
fn cleanup_calls_inside_an_all_group_hold_the_delivered_authority() {
    let s = server();
    s.start_workflow("default", "pla-cleanup-group", "q");
    let task = next_task(&s, "q");
    let attempt = admitted_attempt(&s, &task, json!({}));
    let request_id = request_cancellation(&s, "pla-cleanup-group");
    acknowledge_and_deliver(&s, &task, &attempt, &request_id);
    let events = s.history("pla-cleanup-group");
    let delivery = events
        .iter()
        .find(|e| e["event_type"] == "CooperativeCancellationDelivered")
        .unwrap()
        .clone();
    let context = events
        .iter()
        .find(|e| e["event_type"] == "CooperativeCancellationRequested")
        .unwrap()["payload"]["cancellation"]
        .clone();

    let member = |index: i64, delivery_id: &Value| {
        let mut local = descriptor(json!({
            "parallel_group_id": "g1", "parallel_group_kind": "all",
            "parallel_group_base_sequence": 2, "parallel_group_size": 2,
            "parallel_group_index": index,
            "parallel_group_path": [{ "parallel_group_id": "g1", "parallel_group_kind": "all",
                "parallel_group_base_sequence": 2, "parallel_group_size": 2,
                "parallel_group_index": index }],
            "cancellation_cleanup": { "request_id": request_id,
                "delivery_history_event_id": delivery_id } }));
        local["type"] = json!("prepare_local_activity");
        local
    };
    // A member naming another delivery event is refused, nothing written.
    let wrong = json!({ "checkpoint_id": "cleanup-bad", "start_sequence": 2,
        "commands": [member(0, &delivery["id"]), member(1, &json!("1"))] });
    let (status, refused) = on_claim(&s, &task, "checkpoint-group", wrong);
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["reason"], "cancellation_cleanup_not_authorized",
        "{refused}"
    );
    let before = s.history("pla-cleanup-group").len();
    assert_eq!(before, events.len());

    let group = json!({ "checkpoint_id": "cleanup-1", "start_sequence": 2,
        "commands": [member(0, &delivery["id"]), member(1, &delivery["id"])] });
    let (status, grouped) = on_claim(&s, &task, "checkpoint-group", group);
    assert_eq!(status, 200, "{grouped}");
    assert_eq!(grouped["next_sequence"], 4, "{grouped}");
    let events = s.history("pla-cleanup-group");
    let scheduled: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "ActivityScheduled" && e["payload"]["sequence"] != 1)
        .collect();
    assert_eq!(scheduled.len(), 2, "{events:?}");
    for (i, sequence) in [2, 3].into_iter().enumerate() {
        // Each member runs on the request's cleanup authority, its
        // heartbeat deadline the cleanup deadline.
        let authority = &scheduled[i]["payload"]["cancellation_cleanup"];
        assert_eq!(authority["root_request_id"], request_id, "{authority}");
        let mut asked = member(i as i64, &delivery["id"]);
        asked["type"] = json!("record_local_activity");
        let (status, admitted) = prepare(&s, &task, sequence, &format!("m{sequence}"), asked);
        assert_eq!(status, 200, "{admitted}");
        let cleanup = &admitted["cancellation_cleanup"];
        assert_eq!(cleanup["request_id"], request_id, "{admitted}");
        assert_eq!(cleanup["root_request_id"], request_id, "{admitted}");
        assert_eq!(
            cleanup["delivery_history_event_id"], delivery["id"],
            "{admitted}"
        );
        assert_eq!(
            cleanup["cleanup_deadline_at"], context["cleanup_deadline_at"],
            "{admitted}"
        );
        assert_eq!(
            admitted["heartbeat_deadline_at"], context["cleanup_deadline_at"],
            "{admitted}"
        );
    }
}
