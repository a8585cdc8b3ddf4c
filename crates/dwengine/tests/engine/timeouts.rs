//! Activity and run timeouts over loopback HTTP, at their edges: a
//! start-to-close expiry is an attempt the retry policy counts, the last
//! one ends the activity with `ActivityTimedOut`; schedule-to-start,
//! schedule-to-close and heartbeat timeouts end it without a worker's
//! help; a run past its run or execution timeout ends `failed` with
//! `WorkflowTimedOut`. The server's own sweep enforces them (every 50 ms
//! here), so the tests only wait.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::{eventually, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.timeout_sweep.interval = Duration::from_millis(50);
    })
}

fn envelope(json_text: &str) -> Value {
    json!({ "codec": "json", "blob": json_text })
}

/// Starts `workflow_id` on queue `q` and completes its first workflow task
/// with one `schedule_activity` carrying `options` (timeouts, retries).
fn schedule(s: &TestServer, workflow_id: &str, activity_queue: &str, options: Value) {
    schedule_on(s, "q", workflow_id, activity_queue, options);
}

/// [`schedule`], the workflow on queue `workflow_queue`.
fn schedule_on(
    s: &TestServer,
    workflow_queue: &str,
    workflow_id: &str,
    activity_queue: &str,
    options: Value,
) {
    s.start_workflow("default", workflow_id, workflow_queue);
    let (_, polled) = s.poll(
        "workflow",
        "default",
        workflow_queue,
        &format!("{workflow_id}-wf1"),
        2000,
    );
    let mut command = json!({ "type": "schedule_activity", "activity_type": "charge",
        "arguments": envelope("[]"), "queue": activity_queue });
    for (key, value) in options.as_object().unwrap() {
        command[key] = value.clone();
    }
    let (status, body) = s.complete(&polled["task"], json!([command]));
    assert_eq!(status, 200, "{body}");
}

/// The payload of the run's first event of `event_type`, once it exists.
fn wait_for_event(s: &TestServer, workflow_id: &str, event_type: &str) -> Value {
    let mut found = None;
    let seen = eventually(Duration::from_secs(10), || {
        found = s
            .history(workflow_id)
            .into_iter()
            .find(|e| e["event_type"] == event_type);
        found.is_some()
    });
    assert!(seen, "no {event_type} in {:#?}", s.history(workflow_id));
    found.unwrap()["payload"].clone()
}

fn count(events: &[Value], event_type: &str) -> usize {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .count()
}

/// The time between the first `from` and the first `to` event, as the
/// server recorded them.
fn between(events: &[Value], from: &str, to: &str) -> Duration {
    let at = |event_type: &str| {
        let event = events
            .iter()
            .find(|e| e["event_type"] == event_type)
            .unwrap_or_else(|| panic!("no {event_type} in {events:#?}"));
        event["recorded_at"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .unwrap_or_else(|| panic!("no recorded_at in {event}"))
    };
    let (from_at, to_at) = (at(from), at(to));
    assert!(to_at >= from_at, "{to} before {from}");
    Duration::from_millis(u64::try_from(to_at.as_millisecond() - from_at.as_millisecond()).unwrap())
}

fn activity_path(task: &Value, what: &str) -> String {
    format!(
        "/api/worker/activity-tasks/{}/{what}",
        task["task_id"].as_str().unwrap()
    )
}

#[test]
fn a_start_to_close_expiry_is_an_attempt_and_the_last_one_times_the_activity_out() {
    let s = server();
    schedule(
        &s,
        "stc",
        "acts",
        json!({ "start_to_close_timeout": 1,
                "retry_policy": { "max_attempts": 2, "backoff_seconds": [0] } }),
    );
    // Taken before the poll: the server leases attempt 1 after this, so
    // the time from here to attempt 2 is at least the attempt's lease.
    let asked = Instant::now();
    let (_, first) = s.poll("activity", "default", "acts", "a1", 2000);
    let first = first["task"].clone();
    assert_eq!(first["attempt_number"], 1);

    // The first attempt's expiry counts: the next poll gets attempt 2.
    let (_, second) = s.poll("activity", "default", "acts", "a2", 5000);
    let second = second["task"].clone();
    assert_eq!(second["attempt_number"], 2, "{second}");
    let lived = asked.elapsed();
    assert!(
        lived >= Duration::from_millis(900),
        "attempt 1 was cut short: {lived:?}"
    );
    assert_eq!(count(&s.history("stc"), "ActivityTimedOut"), 0);
    // The timed-out attempt can no longer report.
    let (status, body) = s.post(
        &activity_path(&first, "complete"),
        json!({ "activity_attempt_id": first["activity_attempt_id"],
                "lease_owner": first["lease_owner"], "result": envelope("1") }),
    );
    assert_eq!(status, 409, "{body}");

    // The second is the last the policy allows: its expiry ends the activity.
    let timed_out = wait_for_event(&s, "stc", "ActivityTimedOut");
    assert_eq!(timed_out["timeout_kind"], "start_to_close");
    assert_eq!(timed_out["attempt_number"], 2);
    assert_eq!(timed_out["sequence"], 1);
    assert_eq!(
        timed_out["activity_attempt_id"],
        second["activity_attempt_id"]
    );
    assert_eq!(timed_out["failure_category"], "timeout");
    let (_, described) = s.get("/api/workflows/stc");
    assert_eq!(described["status"], "running");
    assert_eq!(described["pending"]["activities"], 0);

    // The workflow sees it on its next task.
    let (_, polled) = s.poll("workflow", "default", "q", "stc-wf2", 2000);
    let events = polled["task"]["history_events"].as_array().unwrap();
    assert_eq!(count(events, "ActivityTimedOut"), 1);
    let (status, body) = s.post(
        &activity_path(&second, "complete"),
        json!({ "activity_attempt_id": second["activity_attempt_id"],
                "lease_owner": second["lease_owner"], "result": envelope("1") }),
    );
    assert_eq!(
        status, 409,
        "a timed-out activity takes no late result: {body}"
    );
}

#[test]
fn a_retry_that_could_not_start_before_schedule_to_close_is_not_taken() {
    let s = server();
    // Attempts remain, but the 5 s backoff would start the next one after
    // the 3 s schedule-to-close: the first expiry ends the activity.
    schedule(
        &s,
        "cutoff",
        "acts",
        json!({ "start_to_close_timeout": 1, "schedule_to_close_timeout": 3,
                "retry_policy": { "max_attempts": 5, "backoff_seconds": [5] } }),
    );
    let (_, polled) = s.poll("activity", "default", "acts", "c1", 2000);
    assert_eq!(polled["task"]["attempt_number"], 1);
    let timed_out = wait_for_event(&s, "cutoff", "ActivityTimedOut");
    // It ended at the attempt's expiry, as its kind says: a retry taken
    // would have been ended by schedule-to-close instead, with that kind.
    assert_eq!(timed_out["timeout_kind"], "start_to_close", "{timed_out}");
    assert_eq!(timed_out["attempt_number"], 1);
    // No retry is waiting for its backoff either.
    let (_, described) = s.get("/api/workflows/cutoff");
    assert_eq!(described["pending"]["activities"], 0, "{described}");
    assert_eq!(count(&s.history("cutoff"), "ActivityTimedOut"), 1);
}

#[test]
fn a_reported_failure_is_not_retried_past_schedule_to_close() {
    let s = server();
    schedule(
        &s,
        "fail-cut",
        "acts",
        json!({ "schedule_to_close_timeout": 30,
                "retry_policy": { "max_attempts": 5, "backoff_seconds": [1, 60] } }),
    );
    let report = |poll_id: &str| {
        let (_, polled) = s.poll("activity", "default", "acts", poll_id, 5000);
        let task = polled["task"].clone();
        let (status, body) = s.post(
            &activity_path(&task, "fail"),
            json!({ "activity_attempt_id": task["activity_attempt_id"],
                    "lease_owner": task["lease_owner"],
                    "failure": { "message": "declined", "type": "Declined" } }),
        );
        assert_eq!(status, 200, "{body}");
        body
    };
    // A 1 s backoff fits inside the 30 s budget: retried.
    assert_eq!(report("f1")["outcome"], "retry_scheduled");
    // A 60 s backoff would start after it: the activity fails now.
    assert_eq!(report("f2")["outcome"], "failed");
    let failed = wait_for_event(&s, "fail-cut", "ActivityFailed");
    assert_eq!(failed["attempt_number"], 2);
    assert_eq!(count(&s.history("fail-cut"), "ActivityTimedOut"), 0);
}

#[test]
fn schedule_to_start_and_schedule_to_close_time_out_with_no_worker_polling() {
    let s = server();
    schedule(
        &s,
        "sts",
        "nobody",
        json!({ "schedule_to_start_timeout": 1 }),
    );
    schedule(
        &s,
        "stcl",
        "nobody",
        json!({ "schedule_to_close_timeout": 1 }),
    );
    let sts = wait_for_event(&s, "sts", "ActivityTimedOut");
    // By the server's own clock: scheduled, then timed out a second later.
    let waited = between(&s.history("sts"), "ActivityScheduled", "ActivityTimedOut");
    assert!(
        waited >= Duration::from_millis(900),
        "schedule-to-start ended after {waited:?}"
    );
    assert_eq!(sts["timeout_kind"], "schedule_to_start");
    assert_eq!(sts["attempt_number"], 0);
    assert!(sts.get("activity_attempt_id").is_none(), "{sts}");
    let stcl = wait_for_event(&s, "stcl", "ActivityTimedOut");
    assert_eq!(stcl["timeout_kind"], "schedule_to_close");
    // Nothing is left to hand out.
    let (_, polled) = s.poll("activity", "default", "nobody", "late", 0);
    assert!(polled["task"].is_null(), "{polled}");
}

#[test]
fn heartbeats_keep_an_attempt_alive_and_their_absence_times_it_out() {
    const TIMEOUT: Duration = Duration::from_secs(1);
    let s = server();
    // One round per activity: a round is given up, not failed, when the
    // machine held the test back so long between two heartbeats that the
    // server may rightly have timed the attempt out.
    for round in 0..10 {
        let id = format!("hb-{round}");
        // Queues of its own: a given-up round's timeout is no task of the next.
        schedule_on(
            &s,
            &id,
            &id,
            &id,
            json!({ "heartbeat_timeout": 1, "start_to_close_timeout": 60 }),
        );
        // The server leased the attempt after `asked` and before `leased_by`.
        let asked = Instant::now();
        let (_, polled) = s.poll("activity", "default", &id, &format!("{id}-h"), 5000);
        let leased_by = Instant::now();
        let task = polled["task"].clone();
        assert_eq!(task["attempt_number"], 1, "{polled}");
        let beat = json!({ "activity_attempt_id": task["activity_attempt_id"],
                           "lease_owner": task["lease_owner"] });
        // When the last heartbeat (or the lease) was sent: the server took
        // it after this.
        let mut last = asked;
        let mut kept_alive = true;
        // Heartbeats until the attempt has outlived two heartbeat timeouts.
        while leased_by.elapsed() < 2 * TIMEOUT {
            std::thread::sleep(Duration::from_millis(100));
            let sent = Instant::now();
            let (status, body) = s.post(&activity_path(&task, "heartbeat"), beat.clone());
            // No more than this passed between the server's two heartbeats
            // (less a margin for its clock's milliseconds).
            let gap = last.elapsed();
            if gap + Duration::from_millis(100) >= TIMEOUT && status != 200 {
                kept_alive = false;
                break;
            }
            assert_eq!(status, 200, "a heartbeat {gap:?} after the last: {body}");
            assert_eq!(body["can_continue"], true);
            last = sent;
        }
        if !kept_alive {
            eprintln!("round {round}: the machine held a heartbeat back past the timeout");
            continue;
        }
        assert_eq!(count(&s.history(&id), "ActivityTimedOut"), 0);
        // Then the worker goes quiet.
        let timed_out = wait_for_event(&s, &id, "ActivityTimedOut");
        assert_eq!(timed_out["timeout_kind"], "heartbeat");
        assert_eq!(timed_out["attempt_number"], 1);
        let (status, _) = s.post(&activity_path(&task, "heartbeat"), beat);
        assert_eq!(status, 409);
        return;
    }
    panic!("no round kept its heartbeats within the timeout");
}

#[test]
fn a_run_past_its_run_or_execution_timeout_ends_failed_and_timed_out() {
    let s = server();
    for (id, body) in [
        (
            "run-t",
            json!({ "run_timeout_seconds": 1, "execution_timeout_seconds": 60 }),
        ),
        (
            "exec-t",
            json!({ "execution_timeout_seconds": 1, "run_timeout_seconds": 60 }),
        ),
    ] {
        let mut start = json!({ "workflow_id": id, "workflow_type": "Order", "task_queue": "q",
                                "input": envelope("[]") });
        for (key, value) in body.as_object().unwrap() {
            start[key] = value.clone();
        }
        let (status, answer) = s.post("/api/workflows", start);
        assert_eq!(status, 201, "{answer}");
    }
    let (_, described) = s.get("/api/workflows/run-t");
    assert_eq!(described["status"], "running");
    assert_eq!(described["run_timeout_seconds"], 1);
    assert!(described["run_deadline_at"].is_string(), "{described}");
    for (id, kind) in [("run-t", "run"), ("exec-t", "execution")] {
        let timed_out = wait_for_event(&s, id, "WorkflowTimedOut");
        assert_eq!(timed_out["timeout_kind"], kind);
        let (_, described) = s.get(&format!("/api/workflows/{id}"));
        assert_eq!(described["status"], "failed", "{described}");
        assert_eq!(described["closed_reason"], "timed_out");
        assert_eq!(described["failures"][0]["failure_category"], "timeout");
        let events = s.history(id);
        assert_eq!(
            events.last().unwrap()["event_type"],
            "WorkflowTimedOut",
            "the timeout is the terminal event"
        );
    }
    // A closed run has no work left, and a run without timeouts stays open.
    let (_, polled) = s.poll("workflow", "default", "q", "after", 0);
    assert!(polled["task"].is_null(), "{polled}");
    s.start_workflow("default", "open", "q");
    std::thread::sleep(Duration::from_millis(300));
    let (_, described) = s.get("/api/workflows/open");
    assert_eq!(described["status"], "running");
    assert!(described["run_deadline_at"].is_null());
}

#[test]
fn a_failed_workflow_task_shows_in_describe_and_once_per_streak_in_history() {
    let s = server();
    s.start_workflow("default", "wft", "q");
    let fail = |poll_id: &str, message: &str| {
        let (_, polled) = s.poll("workflow", "default", "q", poll_id, 5000);
        let task = polled["task"].clone();
        let (status, body) = s.post(
            &format!(
                "/api/worker/workflow-tasks/{}/fail",
                task["task_id"].as_str().unwrap()
            ),
            json!({ "lease_owner": task["lease_owner"],
                    "workflow_task_attempt": task["workflow_task_attempt"],
                    "failure": { "message": message, "type": "NonDeterminism",
                                 "stack_trace": "frame 1" } }),
        );
        assert_eq!(status, 200, "{body}");
        task
    };
    fail("f1", "replay diverged at step 3");
    let (_, described) = s.get("/api/workflows/wft");
    let failed = &described["workflow_task_failure"];
    assert_eq!(failed["failure"]["message"], "replay diverged at step 3");
    assert_eq!(failed["workflow_task_attempt"], 1);
    assert!(failed["next_attempt_at"].is_string());
    let recorded = wait_for_event(&s, "wft", "WorkflowTaskFailed");
    assert_eq!(recorded["message"], "replay diverged at step 3");
    assert_eq!(recorded["failure_type"], "NonDeterminism");
    assert!(recorded.get("stack_trace").is_none(), "{recorded}");

    // The retry (after its 1 s backoff) fails again: describe moves on,
    // history keeps the streak's first failure only.
    let second = fail("f2", "replay diverged again");
    assert_eq!(second["workflow_task_attempt"], 2);
    let (_, described) = s.get("/api/workflows/wft");
    assert_eq!(
        described["workflow_task_failure"]["failure"]["message"],
        "replay diverged again"
    );
    assert_eq!(
        described["workflow_task_failure"]["workflow_task_attempt"],
        2
    );
    assert_eq!(count(&s.history("wft"), "WorkflowTaskFailed"), 1);

    // A completed task clears it.
    let (_, polled) = s.poll("workflow", "default", "q", "f3", 5000);
    let (status, _) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": envelope("1") }]),
    );
    assert_eq!(status, 200);
    let (_, described) = s.get("/api/workflows/wft");
    assert!(
        described.get("workflow_task_failure").is_none(),
        "{described}"
    );
}
