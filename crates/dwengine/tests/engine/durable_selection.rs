//! Durable selection (`select` in both SDKs): the members of a selection
//! are ordinary commands whose group metadata says `parallel_group_mode:
//! select`; the first member to reach a terminal state is recorded as the
//! group's one winner (`SelectionResolved`, in the same transaction as the
//! terminal event, naming that event by its wire id), and no later event
//! changes it. `cancel_selection_operation` cancels a loser by its recorded
//! identity: `SelectionOperationCancelled`, and the loser's activity stops
//! (its heartbeat says `cancel_requested`, its late report is refused as
//! `activity_cancelled`) or its timer is cancelled; a field that matches
//! nothing recorded is a 422 naming it.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

/// The selection metadata of member `index` (one leaf at `base + index`)
/// of a group of `size` members starting at `base`.
fn member(base: i64, size: i64, index: i64, key: &str, kind: &str) -> Value {
    let entry = json!({
        "parallel_group_id": format!("select-calls:{base}:{size}"),
        "parallel_group_kind": "mixed",
        "parallel_group_base_sequence": base,
        "parallel_group_size": size,
        "parallel_group_index": index,
        "parallel_group_mode": "select",
        "selection_member_key": key,
        "selection_member_index": index,
        "selection_member_base_sequence": base + index,
        "selection_member_size": 1,
        "selection_member_kind": kind,
    });
    let mut fields = entry.clone();
    fields["parallel_group_path"] = json!([entry]);
    fields
}

fn with(mut command: Value, fields: Value) -> Value {
    command
        .as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    command
}

fn activity(activity_type: &str, fields: Value) -> Value {
    with(
        json!({ "type": "schedule_activity", "activity_type": activity_type, "queue": "q",
                "arguments": { "codec": "json", "blob": "[]" } }),
        fields,
    )
}

fn timer(fields: Value) -> Value {
    with(
        json!({ "type": "start_timer", "delay_seconds": 3600 }),
        fields,
    )
}

fn of<'a>(events: &'a [Value], event_type: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .collect()
}

/// Polls activity tasks of `q` until `count` are leased; returns them by
/// activity type.
fn lease_activities(s: &TestServer, worker: &str, count: usize) -> HashMap<String, Value> {
    let mut leased = HashMap::new();
    let mut n = 0;
    assert!(
        support::eventually(std::time::Duration::from_secs(30), || {
            n += 1;
            let (status, answer) = s.post(
                "/api/worker/activity-tasks/poll",
                json!({ "task_queue": "q", "worker_id": worker,
                        "poll_request_id": format!("{worker}-{n}"),
                        "timeout_seconds": 0.2 }),
            );
            assert_eq!(status, 200, "{answer}");
            let task = answer["task"].clone();
            if let Some(activity_type) = task["activity_type"].as_str() {
                leased.insert(activity_type.to_owned(), task);
            }
            leased.len() == count
        }),
        "{count} activity tasks never came: {leased:?}"
    );
    leased
}

fn report(s: &TestServer, task: &Value, outcome: &str, body: Value) -> (u16, Value) {
    let mut body = body;
    body["activity_attempt_id"] = task["activity_attempt_id"].clone();
    body["lease_owner"] = task["lease_owner"].clone();
    s.post(
        &format!(
            "/api/worker/activity-tasks/{}/{outcome}",
            task["task_id"].as_str().unwrap()
        ),
        body,
    )
}

fn complete_activity(s: &TestServer, task: &Value) -> (u16, Value) {
    report(
        s,
        task,
        "complete",
        json!({ "result": { "codec": "json", "blob": "\"done\"" } }),
    )
}

/// Starts workflow `id` whose first task schedules a selection of a slow
/// activity, a fast activity and a long timer (sequences 1, 2, 3).
fn selection(s: &TestServer, id: &str) {
    s.start_workflow("default", id, "q");
    let task = next_task(s, "q");
    let (status, body) = s.complete(
        &task,
        json!([
            activity("slow", member(1, 3, 0, "slow", "activity")),
            activity("fast", member(1, 3, 1, "fast", "activity")),
            timer(member(1, 3, 2, "timer", "timer")),
        ]),
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn the_first_member_to_complete_is_recorded_as_the_one_winner() {
    let s = server();
    selection(&s, "sel-win");
    let leased = lease_activities(&s, "w", 2);
    let (fast, slow) = (&leased["fast"], &leased["slow"]);
    let (status, body) = complete_activity(&s, fast);
    assert_eq!(status, 200, "{body}");
    let events = s.history("sel-win");
    let completed = of(&events, "ActivityCompleted");
    let resolved = of(&events, "SelectionResolved");
    assert_eq!(resolved.len(), 1, "{events:?}");
    let marker = &resolved[0]["payload"];
    assert_eq!(
        *marker,
        json!({
            "selection_group_id": "select-calls:1:3",
            "selection_group_base_sequence": 1,
            "selection_group_size": 3,
            "member_key": "fast",
            "member_index": 1,
            "member_base_sequence": 2,
            "member_size": 1,
            "operation_kind": "activity",
            "operation_identity": of(&events, "ActivityScheduled")[1]["payload"]["activity_execution_id"],
            "outcome": "completed",
            // The event that resolved it, by its wire id (a string).
            "resolution_event_id": completed[0]["id"],
            "resolution_event_type": "ActivityCompleted",
        })
    );
    assert!(completed[0]["id"].is_string(), "{:?}", completed[0]);
    // The marker follows its terminal event, and the member events carry
    // the selection metadata both SDKs' replay checks.
    let position = |e: &Value| e["sequence"].as_u64().unwrap();
    assert_eq!(position(resolved[0]), position(completed[0]) + 1);
    assert_eq!(completed[0]["payload"]["parallel_group_mode"], "select");
    assert_eq!(completed[0]["payload"]["selection_member_key"], "fast");
    // The loser completing later changes nothing.
    let (status, body) = complete_activity(&s, slow);
    assert_eq!(status, 200, "{body}");
    let events = s.history("sel-win");
    assert_eq!(of(&events, "ActivityCompleted").len(), 2);
    assert_eq!(of(&events, "SelectionResolved").len(), 1);
}

#[test]
fn a_member_that_fails_first_wins_with_outcome_failed() {
    let s = server();
    selection(&s, "sel-fail");
    let leased = lease_activities(&s, "w", 2);
    let (status, body) = report(
        &s,
        &leased["slow"],
        "fail",
        json!({ "failure": { "message": "boom", "non_retryable": true } }),
    );
    assert_eq!(status, 200, "{body}");
    let events = s.history("sel-fail");
    let resolved = of(&events, "SelectionResolved");
    assert_eq!(resolved.len(), 1, "{events:?}");
    assert_eq!(resolved[0]["payload"]["member_key"], "slow");
    assert_eq!(resolved[0]["payload"]["outcome"], "failed");
    assert_eq!(
        resolved[0]["payload"]["resolution_event_type"],
        "ActivityFailed"
    );
    assert_eq!(
        resolved[0]["payload"]["resolution_event_id"],
        of(&events, "ActivityFailed")[0]["id"]
    );
}

#[test]
fn ordinary_groups_get_no_selection_marker() {
    let s = server();
    s.start_workflow("default", "all-group", "q");
    let task = next_task(&s, "q");
    let mut fields = member(1, 1, 0, "only", "activity");
    for key in [
        "parallel_group_mode",
        "selection_member_key",
        "selection_member_index",
        "selection_member_base_sequence",
        "selection_member_size",
        "selection_member_kind",
        "parallel_group_path",
    ] {
        fields.as_object_mut().unwrap().remove(key);
    }
    fields["parallel_group_id"] = json!("activity-calls:1:1");
    let (status, body) = s.complete(&task, json!([activity("only", fields)]));
    assert_eq!(status, 200, "{body}");
    let leased = lease_activities(&s, "w", 1);
    assert_eq!(complete_activity(&s, &leased["only"]).0, 200);
    let events = s.history("all-group");
    assert_eq!(of(&events, "ActivityCompleted").len(), 1);
    assert!(of(&events, "SelectionResolved").is_empty(), "{events:?}");
}

/// The `cancel_selection_operation` command for member `key` as the
/// history recorded it.
fn cancel_command(events: &[Value], key: &str) -> Value {
    let scheduled = events
        .iter()
        .find(|e| {
            e["payload"]["selection_member_key"] == key
                && matches!(
                    e["event_type"].as_str(),
                    Some("ActivityScheduled" | "TimerScheduled")
                )
        })
        .unwrap();
    let p = &scheduled["payload"];
    let kind = p["selection_member_kind"].as_str().unwrap();
    let identity = if kind == "timer" {
        p["timer_id"].clone()
    } else {
        p["activity_execution_id"].clone()
    };
    json!({
        "type": "cancel_selection_operation",
        "selection_group_id": p["parallel_group_id"],
        "member_key": key,
        "member_index": p["selection_member_index"],
        "member_base_sequence": p["selection_member_base_sequence"],
        "member_size": p["selection_member_size"],
        "operation_kind": kind,
        "operation_identity": identity,
    })
}

#[test]
fn cancelling_the_losers_stops_them_once_and_records_it() {
    let s = server();
    selection(&s, "sel-cancel");
    let leased = lease_activities(&s, "w", 2);
    let (fast, slow) = (&leased["fast"], &leased["slow"]);
    assert_eq!(complete_activity(&s, fast).0, 200);
    let task = next_task(&s, "q");
    let events = s.history("sel-cancel");
    let commands = json!([
        cancel_command(&events, "slow"),
        cancel_command(&events, "timer")
    ]);
    let (status, body) = s.complete(&task, commands.clone());
    assert_eq!(status, 200, "{body}");
    let events = s.history("sel-cancel");
    let cancelled = of(&events, "SelectionOperationCancelled");
    assert_eq!(cancelled.len(), 2, "{events:?}");
    assert_eq!(cancelled[0]["payload"]["member_key"], "slow");
    assert_eq!(cancelled[0]["payload"]["operation_kind"], "activity");
    assert!(cancelled[0]["payload"]["cancelled_at"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    assert_eq!(cancelled[1]["payload"]["member_key"], "timer");
    // The running activity hears it on its heartbeat, and its late report
    // is refused with the reason the SDKs treat as final.
    let (status, beat) = report(&s, slow, "heartbeat", json!({}));
    assert_eq!(status, 200, "{beat}");
    assert_eq!(beat["cancel_requested"], true, "{beat}");
    let (status, refused) = complete_activity(&s, slow);
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "activity_cancelled", "{refused}");
    // Nothing is pending any more: the activity and the timer are closed.
    let (_, described) = s.get("/api/workflows/sel-cancel");
    assert_eq!(described["pending"]["activities"], 0, "{described}");
    assert_eq!(described["pending"]["timers"], 0, "{described}");
    // The workflow got a task to see the markers; repeating the commands
    // there records nothing more.
    let task = next_task(&s, "q");
    let (status, body) = s.complete(&task, commands);
    assert_eq!(status, 200, "{body}");
    let events = s.history("sel-cancel");
    assert_eq!(of(&events, "SelectionOperationCancelled").len(), 2);
    assert!(of(&events, "ActivityCompleted").len() == 1);
    assert!(of(&events, "TimerFired").is_empty());
}

#[test]
fn cancelling_a_member_that_already_finished_records_nothing() {
    let s = server();
    selection(&s, "sel-late");
    let leased = lease_activities(&s, "w", 2);
    let (fast, slow) = (&leased["fast"], &leased["slow"]);
    assert_eq!(complete_activity(&s, fast).0, 200);
    assert_eq!(complete_activity(&s, slow).0, 200);
    let task = next_task(&s, "q");
    let events = s.history("sel-late");
    let (status, body) = s.complete(&task, json!([cancel_command(&events, "slow")]));
    assert_eq!(status, 200, "{body}");
    let events = s.history("sel-late");
    assert!(
        of(&events, "SelectionOperationCancelled").is_empty(),
        "{events:?}"
    );
}

#[test]
fn a_cancellation_naming_nothing_recorded_is_a_422_and_writes_nothing() {
    let s = server();
    selection(&s, "sel-bad");
    let leased = lease_activities(&s, "w", 2);
    assert_eq!(complete_activity(&s, &leased["fast"]).0, 200);
    let task = next_task(&s, "q");
    let events = s.history("sel-bad");
    let good = cancel_command(&events, "slow");
    for (field, wrong) in [
        ("operation_identity", json!("forged")),
        ("member_key", json!("other")),
        ("member_index", json!(2)),
        ("operation_kind", json!("timer")),
        ("member_base_sequence", json!(9)),
        ("selection_group_id", json!("select-calls:7:3")),
        ("selection_group_id", json!("nonsense")),
    ] {
        let mut command = good.clone();
        command[field] = wrong;
        let (status, body) = s.complete(&task, json!([command]));
        assert_eq!(status, 422, "{field}: {body}");
        assert_eq!(body["reason"], "validation_failed", "{body}");
        let problem = body["validation_errors"]["commands"][0].as_str().unwrap();
        assert!(
            problem.contains(field) || problem.contains("no selection group"),
            "{field}: {problem}"
        );
    }
    let after = s.history("sel-bad");
    assert_eq!(
        after.len(),
        events.len(),
        "a refused completion wrote events"
    );
    // The task is still leased: the good command goes through.
    let (status, body) = s.complete(&task, json!([good]));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_selection_is_advertised_and_registration_acknowledges_it() {
    let s = server();
    let (_, info) = s.get("/api/cluster/info");
    let caps = &info["worker_protocol"]["server_capabilities"];
    assert_eq!(caps["durable_selection"]["supported"], true, "{info}");
    assert!(caps["supported_workflow_task_commands"]
        .as_array()
        .unwrap()
        .contains(&json!("cancel_selection_operation")));
    let (status, ack) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "w-sel", "task_queue": "q",
                "capabilities": ["durable_selection", "message_streams_not_a_thing"] }),
    );
    assert_eq!(status, 200, "{ack}");
    assert_eq!(ack["capabilities"], json!(["durable_selection"]), "{ack}");
}

/// A loser its workflow cancelled is neither completed nor failed: the
/// activity series count it as cancelled, and the winner as completed.
#[test]
fn a_cancelled_loser_is_counted_as_cancelled_not_failed() {
    let s = server();
    selection(&s, "sel-count");
    let leased = lease_activities(&s, "w", 2);
    assert_eq!(complete_activity(&s, &leased["fast"]).0, 200);
    let task = next_task(&s, "q");
    let events = s.history("sel-count");
    let (status, body) = s.complete(&task, json!([cancel_command(&events, "slow")]));
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = s.get("/api/system/metrics?namespace=default");
    assert_eq!(status, 200, "{metrics}");
    let series = metrics["series"]["activities"].as_array().unwrap();
    let of_type = |activity_type: &str| {
        series
            .iter()
            .find(|s| s["activity_type"] == activity_type)
            .unwrap_or_else(|| panic!("no {activity_type} series in {series:?}"))
    };
    let slow = of_type("slow");
    assert_eq!(
        (
            &slow["cancelled_total"],
            &slow["failed_total"],
            &slow["completed_total"]
        ),
        (&json!(1), &json!(0), &json!(0)),
        "{slow}"
    );
    let fast = of_type("fast");
    assert_eq!(
        (
            &fast["cancelled_total"],
            &fast["failed_total"],
            &fast["completed_total"]
        ),
        (&json!(0), &json!(0), &json!(1)),
        "{fast}"
    );
}
