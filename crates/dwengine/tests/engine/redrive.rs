//! Redrive (`POST /api/workflows/{id}/runs/{runId}/redrive`): a run that
//! failed because its second activity's failure reached the top unhandled
//! is redriven into a successor of the same workflow id whose history holds
//! the first activity's recorded completion, so the worker schedules only
//! the failed step again; the answer names the successor, the run it
//! continues and the resume step; a retried request id answers the same
//! successor; runs that are not failed, not the newest, or whose history
//! does not replay safely are refused with their reason and nothing is
//! written.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn args(blob: &str) -> Value {
    json!({ "codec": "json", "blob": blob })
}

fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect()
}

fn complete(s: &TestServer, task: &Value, commands: Value) {
    let (status, body) = s.complete(task, commands);
    assert_eq!(status, 200, "{body}");
}

fn activity_task(s: &TestServer, queue: &str, poll: &str) -> Value {
    let (status, polled) = s.poll("activity", "default", queue, poll, 5000);
    assert_eq!(status, 200, "{polled}");
    assert!(!polled["task"].is_null(), "no activity task: {polled}");
    polled["task"].clone()
}

fn report(s: &TestServer, task: &Value, what: &str, body: Value) {
    let mut body = body;
    body["activity_attempt_id"] = task["activity_attempt_id"].clone();
    body["lease_owner"] = "w1".into();
    let (status, answer) = s.post(
        &format!(
            "/api/worker/activity-tasks/{}/{what}",
            task["task_id"].as_str().unwrap()
        ),
        body,
    );
    assert_eq!(status, 200, "{answer}");
}

fn schedule(activity_type: &str, argument: &str) -> Value {
    json!({ "type": "schedule_activity", "activity_type": activity_type,
            "arguments": args(argument),
            "retry_policy": { "max_attempts": 1 } })
}

fn redrive(s: &TestServer, id: &str, run: &str, body: Value) -> (u16, Value) {
    s.post(&format!("/api/workflows/{id}/runs/{run}/redrive"), body)
}

/// The failing fail_workflow both SDKs send when an activity failure
/// reaches the top of the workflow unhandled.
fn fail_at(failed: &Value) -> Value {
    json!([{ "type": "fail_workflow", "message": "second failed",
             "exception_type": "ActivityFailed",
             "failed_step_sequence": failed["payload"]["sequence"],
             "failed_activity_execution_id": failed["payload"]["activity_execution_id"] }])
}

/// The fingerprint the tests' worker `w1` registers for `Order`.
const DEFINITION: &str = "sha256:order-v1";

/// Registers worker `worker` on `queue`, fingerprinting `Order` as
/// `fingerprint` (none when `None`).
fn register(s: &TestServer, worker: &str, queue: &str, fingerprint: Option<&str>) {
    let mut body = json!({ "worker_id": worker, "task_queue": queue });
    if let Some(f) = fingerprint {
        body["workflow_definition_fingerprints"] = json!({ "Order": f });
    }
    let (status, answer) = s.post("/api/worker/register", body);
    assert_eq!(status, 200, "{answer}");
}

/// Fails activity attempt `attempt` with `message`, and the run with it:
/// the workflow's next task on `queue` fails the workflow at that failure.
fn fail_activity_and_run(s: &TestServer, queue: &str, attempt: &Value, message: &str) {
    report(
        s,
        attempt,
        "fail",
        json!({ "failure": { "message": message, "type": "Unavailable" } }),
    );
    let task = next_task(s, queue);
    let failed = task["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "ActivityFailed")
        .expect("the activity's failure is in the task's history")
        .clone();
    complete(s, &task, fail_at(&failed));
}

/// Runs `id` to a failure at its second activity (the first completed with
/// `"one"`), its tasks done by worker `w1` registered with [`DEFINITION`]:
/// the failed run's id and its history.
fn fail_at_second(s: &TestServer, id: &str, queue: &str) -> (String, Vec<Value>) {
    register(s, "w1", queue, Some(DEFINITION));
    let started = s.start_workflow("default", id, queue);
    let run = started["run_id"].as_str().unwrap().to_owned();
    let task = next_task(s, queue);
    complete(s, &task, json!([schedule("first", "[1]")]));
    let first = activity_task(s, queue, &format!("{id}-a1"));
    report(s, &first, "complete", json!({ "result": args("\"one\"") }));
    let task = next_task(s, queue);
    complete(s, &task, json!([schedule("second", "[\"one\"]")]));
    let second = activity_task(s, queue, &format!("{id}-a2"));
    fail_activity_and_run(s, queue, &second, "down");
    (run.clone(), s.run_history(id, &run))
}

#[test]
fn a_failed_run_is_redriven_reusing_its_completed_activity_and_rescheduling_the_failed_one() {
    let s = server();
    let (failed_run, failed_history) = fail_at_second(&s, "order-7", "redrive-q");
    assert_eq!(
        types(&failed_history),
        [
            "WorkflowStarted",
            "ActivityScheduled",
            "ActivityCompleted",
            "ActivityScheduled",
            "ActivityFailed",
            "WorkflowFailed"
        ]
    );
    // The boundary the SDK named is proved by the history and recorded.
    let failure = &failed_history[5]["payload"];
    assert_eq!(failure["failed_step_sequence"], 2, "{failure}");
    assert_eq!(failure["failed_step_kind"], "activity", "{failure}");
    assert_eq!(
        failure["workflow_definition_fingerprint"], DEFINITION,
        "{failure}"
    );

    let (status, redriven) = redrive(&s, "order-7", &failed_run, json!({ "request_id": "r-1" }));
    assert_eq!(status, 202, "{redriven}");
    assert_eq!(redriven["outcome"], "redriven");
    assert_eq!(redriven["command_status"], "accepted");
    assert_eq!(redriven["workflow_id"], "order-7");
    assert_eq!(redriven["continued_from_run_id"], failed_run.as_str());
    assert_eq!(redriven["resume_step_sequence"], 2);
    assert_eq!(redriven["duplicate"], false);
    let successor = redriven["run_id"].as_str().unwrap().to_owned();
    assert_ne!(successor, failed_run);

    // A retry with the same request id answers the same successor.
    let (status, again) = redrive(&s, "order-7", &failed_run, json!({ "request_id": "r-1" }));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["run_id"], successor.as_str());
    assert_eq!(again["duplicate"], true);
    // Without it, the failed run is no longer the newest: refused.
    let (status, refused) = redrive(&s, "order-7", &failed_run, json!({}));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "source_run_not_current", "{refused}");

    // The successor's first task carries the reused prefix, then the
    // worker schedules the failed step again (its sequence is 2) and the
    // run completes; the first activity never runs again.
    let task = next_task(&s, "redrive-q");
    assert_eq!(task["run_id"], successor.as_str());
    let events = task["history_events"].as_array().unwrap();
    assert_eq!(
        types(events),
        ["WorkflowStarted", "ActivityScheduled", "ActivityCompleted"]
    );
    assert_eq!(
        events[0]["payload"]["continued_from_run_id"],
        failed_run.as_str()
    );
    assert_eq!(events[0]["payload"]["resume_step_sequence"], 2);
    assert_eq!(events[0]["payload"]["arguments"], args("[]"));
    let reused = &events[2]["payload"];
    assert_eq!(reused["sequence"], 1);
    assert_eq!(reused["result"], args("\"one\""));
    assert_eq!(reused["reused_from_run_id"], failed_run.as_str());
    assert_eq!(
        reused["reused_activity_execution_id"],
        failed_history[2]["payload"]["activity_execution_id"]
    );
    complete(&s, &task, json!([schedule("second", "[\"one\"]")]));
    let again = activity_task(&s, "redrive-q", "order-7-a3");
    assert_eq!(again["activity_type"], "second", "{again}");
    assert_eq!(again["run_id"], successor.as_str(), "{again}");
    report(&s, &again, "complete", json!({ "result": args("\"two\"") }));
    let task = next_task(&s, "redrive-q");
    let events = task["history_events"].as_array().unwrap();
    let scheduled = events
        .iter()
        .filter(|e| e["event_type"] == "ActivityScheduled")
        .map(|e| e["payload"]["sequence"].clone())
        .collect::<Vec<_>>();
    assert_eq!(scheduled, [json!(1), json!(2)]);
    complete(
        &s,
        &task,
        json!([{ "type": "complete_workflow", "result": args("\"done\"") }]),
    );
    // No activity task is left: the first activity was not run again.
    let (_, none) = s.poll("activity", "default", "redrive-q", "order-7-a4", 200);
    assert!(none["task"].is_null(), "{none}");

    // Describe and the runs list show the link both ways.
    let (_, current) = s.get("/api/workflows/order-7");
    assert_eq!(current["run_id"], successor.as_str());
    assert_eq!(current["status"], "completed");
    assert_eq!(current["continued_from_run_id"], failed_run.as_str());
    assert_eq!(current["resume_step_sequence"], 2);
    assert_eq!(current["recovery_kind"], "redrive");
    let (_, old) = s.get(&format!("/api/workflows/order-7/runs/{failed_run}"));
    assert_eq!(old["status"], "failed", "{old}");
    assert_eq!(old["continued_to_run_id"], successor.as_str(), "{old}");
    assert_eq!(old["recovery_kind"], Value::Null, "{old}");
    let (_, listed) = s.get("/api/workflows/order-7/runs");
    assert_eq!(listed["run_count"], 2, "{listed}");
    // The failed run's own history is unchanged.
    assert_eq!(s.run_history("order-7", &failed_run), failed_history);
    // A request id that redrove one run cannot redrive another.
    let (status, used) = redrive(&s, "order-7", &successor, json!({ "request_id": "r-1" }));
    assert_eq!(status, 409, "{used}");
    assert_eq!(used["reason"], "request_id_already_used", "{used}");
}

#[test]
fn a_redriven_run_that_fails_again_is_redriven_again_from_the_same_prefix() {
    let s = server();
    let (failed_run, _) = fail_at_second(&s, "twice", "twice-q");
    let (status, first) = redrive(&s, "twice", &failed_run, json!({}));
    assert_eq!(status, 202, "{first}");
    let successor = first["run_id"].as_str().unwrap().to_owned();
    // The successor's retry of step 2 fails too.
    let task = next_task(&s, "twice-q");
    complete(&s, &task, json!([schedule("second", "[\"one\"]")]));
    let again = activity_task(&s, "twice-q", "twice-a3");
    fail_activity_and_run(&s, "twice-q", &again, "still down");
    let (status, second) = redrive(&s, "twice", &successor, json!({}));
    assert_eq!(status, 202, "{second}");
    assert_eq!(second["resume_step_sequence"], 2);
    let third = second["run_id"].as_str().unwrap();
    let events = s.run_history("twice", third);
    assert_eq!(
        types(&events),
        ["WorkflowStarted", "ActivityScheduled", "ActivityCompleted"]
    );
    // Reused from the run it redrove, the original result still.
    assert_eq!(
        events[2]["payload"]["reused_from_run_id"],
        successor.as_str()
    );
    assert_eq!(events[2]["payload"]["result"], args("\"one\""));
}

#[test]
fn runs_that_are_not_failed_or_whose_failure_names_no_activity_step_are_refused() {
    let s = server();
    // Running.
    let open = s.start_workflow("default", "open", "refuse-q");
    let open_run = open["run_id"].as_str().unwrap();
    let (status, body) = redrive(&s, "open", open_run, json!({}));
    assert_eq!(
        (status, &body["reason"]),
        (409, &json!("run_not_failed")),
        "{body}"
    );
    assert_eq!(body["workflow_id"], "open");
    assert_eq!(body["run_id"], open_run);
    // Completed.
    let task = next_task(&s, "refuse-q");
    complete(
        &s,
        &task,
        json!([{ "type": "complete_workflow", "result": args("1") }]),
    );
    let (status, body) = redrive(&s, "open", open_run, json!({}));
    assert_eq!(
        (status, &body["reason"]),
        (409, &json!("run_not_failed")),
        "{body}"
    );

    // Failed in workflow code (no step named): nothing to resume at.
    let plain = s.start_workflow("default", "plain", "refuse-q");
    let plain_run = plain["run_id"].as_str().unwrap();
    let task = next_task(&s, "refuse-q");
    complete(
        &s,
        &task,
        json!([{ "type": "fail_workflow", "message": "bad input" }]),
    );
    let (status, body) = redrive(&s, "plain", plain_run, json!({}));
    assert_eq!(
        (status, &body["reason"]),
        (409, &json!("unrecorded_failure_boundary")),
        "{body}"
    );

    // A boundary the history does not prove is not recorded: the step
    // named no failed activity of this run.
    let claimed = s.start_workflow("default", "claimed", "refuse-q");
    let claimed_run = claimed["run_id"].as_str().unwrap();
    let task = next_task(&s, "refuse-q");
    complete(
        &s,
        &task,
        json!([{ "type": "fail_workflow", "message": "made up",
                 "failed_step_sequence": 1, "failed_activity_execution_id": "999999" }]),
    );
    let events = s.run_history("claimed", claimed_run);
    let failure = &events.last().unwrap()["payload"];
    assert!(failure.get("failed_step_sequence").is_none(), "{failure}");
    let (status, body) = redrive(&s, "claimed", claimed_run, json!({}));
    assert_eq!(
        (status, &body["reason"]),
        (409, &json!("unrecorded_failure_boundary")),
        "{body}"
    );

    // A timer in the prefix does not replay from a copied prefix.
    let timed = s.start_workflow("default", "timed", "refuse-q");
    let timed_run = timed["run_id"].as_str().unwrap().to_owned();
    let task = next_task(&s, "refuse-q");
    complete(
        &s,
        &task,
        json!([{ "type": "start_timer", "delay_seconds": 3600 }, schedule("first", "[]")]),
    );
    let first = activity_task(&s, "refuse-q", "timed-a1");
    fail_activity_and_run(&s, "refuse-q", &first, "down");
    let (status, body) = redrive(&s, "timed", &timed_run, json!({}));
    assert_eq!(
        (status, &body["reason"]),
        (409, &json!("unsupported_history")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("TimerScheduled")
            || body["message"].as_str().unwrap().contains("TimerStarted"),
        "{body}"
    );
    // Nothing was written by any refusal: one run each.
    for id in ["open", "plain", "claimed", "timed"] {
        let (_, listed) = s.get(&format!("/api/workflows/{id}/runs"));
        assert_eq!(listed["run_count"], 1, "{id}: {listed}");
    }

    // Unknown run or workflow: 404; another workflow's run: 404.
    let (status, body) = redrive(&s, "nope", "1", json!({}));
    assert_eq!(status, 404, "{body}");
    let (status, body) = redrive(&s, "timed", plain_run, json!({}));
    assert_eq!(status, 404, "{body}");
    // A blank or over-long request id: 422 naming the field.
    let (status, body) = redrive(&s, "timed", &timed_run, json!({ "request_id": " " }));
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["request_id"].is_array(), "{body}");
    let (status, body) = redrive(
        &s,
        "timed",
        &timed_run,
        json!({ "request_id": "r".repeat(300) }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["request_id"].is_array(), "{body}");
}

#[test]
fn a_redrive_counts_against_the_namespace_run_quota_as_a_start_does() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.durable_state_limits =
            dwengine::durable_state::parse_limits("default:workflow_runs=1").unwrap();
    });
    let (failed_run, _) = fail_at_second(&s, "quota", "quota-q");
    let (status, body) = redrive(&s, "quota", &failed_run, json!({ "request_id": "q-1" }));
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        body["reason"], "namespace_workflow_runs_exhausted",
        "{body}"
    );
    let (_, listed) = s.get("/api/workflows/quota/runs");
    assert_eq!(listed["run_count"], 1, "{listed}");
    let (_, old) = s.get(&format!("/api/workflows/quota/runs/{failed_run}"));
    assert_eq!(old["continued_to_run_id"], Value::Null, "{old}");
}

#[test]
fn a_prefix_longer_than_one_tasks_history_budget_is_refused_with_the_structural_metadata() {
    // Each workflow task of the failed run wrote one event; the successor
    // would start with three (its start and the step's two).
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.store
            .limits
            .set(dwpolicy::LimitKind::HistoryTransactionSize, 2);
    });
    let (failed_run, _) = fail_at_second(&s, "long", "long-q");
    let (status, body) = redrive(&s, "long", &failed_run, json!({}));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "structural_limit_exceeded", "{body}");
    assert_eq!(
        body["structural_limit_kind"], "history_transaction_size",
        "{body}"
    );
    assert_eq!(body["structural_limit_value"], 3, "{body}");
    let (_, listed) = s.get("/api/workflows/long/runs");
    assert_eq!(listed["run_count"], 1, "{listed}");
}

#[test]
fn a_redrive_needs_the_queues_workers_to_run_the_definition_that_failed_the_run() {
    let s = server();
    let (failed_run, _) = fail_at_second(&s, "changed", "changed-q");
    // A second worker of the queue runs another definition: refused.
    register(&s, "w2", "changed-q", Some("sha256:order-v2"));
    let (status, body) = redrive(&s, "changed", &failed_run, json!({}));
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["reason"], "workflow_definition_unavailable_or_changed",
        "{body}"
    );
    // Both re-register with v2: none runs v1 any more.
    register(&s, "w1", "changed-q", Some("sha256:order-v2"));
    let (_, body) = redrive(&s, "changed", &failed_run, json!({}));
    assert_eq!(
        body["reason"], "workflow_definition_unavailable_or_changed",
        "{body}"
    );
    // Back on v1 (w2 deregistered): the redrive goes ahead.
    register(&s, "w1", "changed-q", Some(DEFINITION));
    let (status, body) = s.delete_ns("default", "/api/workers/w2");
    assert_eq!(status, 200, "{body}");
    let (status, body) = redrive(&s, "changed", &failed_run, json!({}));
    assert_eq!(status, 202, "{body}");

    // A run failed by a worker that registered no fingerprint: no proof
    // the successor replays on the same code.
    register(&s, "w1", "bare-q", None);
    let started = s.start_workflow("default", "bare", "bare-q");
    let run = started["run_id"].as_str().unwrap().to_owned();
    let task = next_task(&s, "bare-q");
    complete(&s, &task, json!([schedule("first", "[1]")]));
    let first = activity_task(&s, "bare-q", "bare-a1");
    fail_activity_and_run(&s, "bare-q", &first, "down");
    let events = s.run_history("bare", &run);
    let failure = &events.last().unwrap()["payload"];
    assert_eq!(failure["failed_step_sequence"], 1, "{failure}");
    assert!(
        failure.get("workflow_definition_fingerprint").is_none(),
        "{failure}"
    );
    let (status, body) = redrive(&s, "bare", &run, json!({}));
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["reason"], "workflow_definition_unavailable_or_changed",
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("set_workflow_definition_sources"),
        "{body}"
    );
}

#[test]
fn a_registration_with_malformed_fingerprints_is_refused_naming_the_field() {
    let s = server();
    for (fingerprints, field) in [
        (json!("sha256:x"), "workflow_definition_fingerprints"),
        (
            json!({ "Order": 7 }),
            "workflow_definition_fingerprints.Order",
        ),
        (
            json!({ "Order": "" }),
            "workflow_definition_fingerprints.Order",
        ),
        (
            json!({ "Order": "x".repeat(256) }),
            "workflow_definition_fingerprints.Order",
        ),
    ] {
        let (status, body) = s.post(
            "/api/worker/register",
            json!({ "worker_id": "w9", "task_queue": "q",
                    "workflow_definition_fingerprints": fingerprints }),
        );
        assert_eq!(status, 422, "{body}");
        assert!(body["validation_errors"][field].is_array(), "{body}");
    }
}

#[test]
fn the_successor_keeps_the_runs_memo_and_input_and_starts_its_timeouts_afresh() {
    let s = server();
    register(&s, "w1", "memo-q", Some(DEFINITION));
    let (status, started) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "kept", "workflow_type": "Order", "task_queue": "memo-q",
                "input": args("[\"ada\"]"), "memo": { "customer": "ada" },
                "execution_timeout_seconds": 3600, "run_timeout_seconds": 600 }),
    );
    assert_eq!(status, 201, "{started}");
    let run = started["run_id"].as_str().unwrap().to_owned();
    let task = next_task(&s, "memo-q");
    complete(&s, &task, json!([schedule("first", "[1]")]));
    let first = activity_task(&s, "memo-q", "kept-a1");
    fail_activity_and_run(&s, "memo-q", &first, "down");
    let (status, redriven) = redrive(&s, "kept", &run, json!({}));
    assert_eq!(status, 202, "{redriven}");
    // Nothing completed before the failed step: the successor starts at 1.
    assert_eq!(redriven["resume_step_sequence"], 1, "{redriven}");
    let successor = redriven["run_id"].as_str().unwrap();
    let (_, described) = s.get(&format!("/api/workflows/kept/runs/{successor}"));
    assert_eq!(
        described["memo"],
        json!({ "customer": "ada" }),
        "{described}"
    );
    assert_eq!(
        described["input_envelope"],
        args("[\"ada\"]"),
        "{described}"
    );
    assert_eq!(described["execution_timeout_seconds"], 3600, "{described}");
    assert_eq!(described["run_timeout_seconds"], 600, "{described}");
    let (_, old) = s.get(&format!("/api/workflows/kept/runs/{run}"));
    assert!(
        described["run_deadline_at"].as_str() > old["run_deadline_at"].as_str(),
        "the successor's run deadline counts from its own start: {described} {old}"
    );
    let events = s.run_history("kept", successor);
    assert_eq!(types(&events), ["WorkflowStarted"]);
}

/// An archived run is read-only, as on the reference server: its redrive
/// is `409 run_archived` and writes nothing; the run's history stays
/// readable and the workflow id keeps no successor.
#[test]
fn an_archived_run_is_refused_with_run_archived_and_nothing_written() {
    let s = server();
    let (run, before) = fail_at_second(&s, "archived", "orders");
    let (status, archived) = s.post(
        "/api/workflows/archived/archive",
        json!({ "reason": "closed out" }),
    );
    assert_eq!(status, 200, "{archived}");
    let (status, refused) = redrive(&s, "archived", &run, json!({ "request_id": "r-1" }));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "run_archived", "{refused}");
    assert_eq!(refused["run_id"], run.as_str(), "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("archived"),
        "{refused}"
    );
    assert_eq!(s.run_history("archived", &run), before, "history unchanged");
    let (_, described) = s.get("/api/workflows/archived");
    assert_eq!(
        described["run_id"],
        run.as_str(),
        "no successor: {described}"
    );
    assert_eq!(described["status"], "failed");
}

/// A failed run whose history retention pruned is gone for good: its
/// redrive is `410 history_pruned`, and nothing is written.
#[test]
fn a_run_whose_history_was_pruned_is_gone_with_history_pruned() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.history_retention = std::time::Duration::ZERO;
        c.retention_throttle = std::time::Duration::from_millis(1);
    });
    let (run, _) = fail_at_second(&s, "pruned", "orders");
    // A registration prunes at most one expired run per pass.
    assert!(support::eventually(
        std::time::Duration::from_secs(30),
        || {
            register(&s, "w2", "orders", Some(DEFINITION));
            s.get("/api/workflows/pruned").1["details_pruned_at"].is_string()
        }
    ));
    let (status, refused) = redrive(&s, "pruned", &run, json!({}));
    assert_eq!(status, 410, "{refused}");
    assert_eq!(refused["reason"], "history_pruned", "{refused}");
    assert_eq!(refused["run_id"], run.as_str(), "{refused}");
    let (_, described) = s.get("/api/workflows/pruned");
    assert_eq!(
        described["run_id"],
        run.as_str(),
        "no successor: {described}"
    );
}
