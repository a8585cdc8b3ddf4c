//! Child workflows from workflow code (`start_child_workflow`): the child
//! is a run of its own linked to its parent; the parent's history records
//! `ChildWorkflowScheduled` and `ChildRunStarted`, then the child's outcome
//! (`ChildRunCompleted` / `Failed` / `Cancelled` / `Terminated`, with the
//! fields both SDKs' replay reads) and the parent gets a workflow task. The
//! parent-close policy applies when the parent ends first; a child that
//! continues as new stays the parent's child. `pending_child_count` and the
//! child arguments' `payload_size_bytes` are checked before any row of the
//! child exists.

use crate::{common, support};

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::store::{RunStatus, Store, TaskKind, WorkflowCommand, WorkflowTaskFence};
use dwpolicy::LimitKind;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn events_of<'a>(events: &'a [Value], event_type: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .collect()
}

fn describe(s: &TestServer, id: &str) -> Value {
    let (status, body) = s.get_ns("default", &format!("/api/workflows/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

fn complete(s: &TestServer, task: &Value, commands: Value) {
    let (status, body) = s.complete(task, commands);
    assert_eq!(status, 200, "{body}");
}

fn args(blob: &str) -> Value {
    json!({ "codec": "json", "blob": blob })
}

/// Starts workflow `id` on queue `queue` and completes its first task with
/// one `start_child_workflow` of `extra` options; returns the parent's run
/// id and the child's workflow id.
fn parent_with_child(s: &TestServer, id: &str, queue: &str, extra: Value) -> (String, String) {
    let started = s.start_workflow("default", id, queue);
    let run = started["run_id"].as_str().unwrap().to_owned();
    let task = next_task(s, queue);
    let mut command = json!({
        "type": "start_child_workflow", "workflow_type": "Child",
        "queue": format!("{queue}-children"), "arguments": args("[7]"),
    });
    command
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    complete(s, &task, json!([command]));
    (run.clone(), format!("{run}:child:1"))
}

#[test]
fn a_child_runs_on_its_queue_and_its_result_resumes_the_parent() {
    let s = server();
    let (parent_run, child_id) = parent_with_child(
        &s,
        "parent",
        "family",
        json!({ "parent_close_policy": "terminate", "execution_timeout_seconds": 3600 }),
    );
    let events = s.history("parent");
    let scheduled = events_of(&events, "ChildWorkflowScheduled");
    assert_eq!(scheduled.len(), 1, "{events:?}");
    let scheduled = &scheduled[0]["payload"];
    assert_eq!(scheduled["sequence"], 1);
    assert_eq!(scheduled["child_workflow_type"], "Child");
    assert_eq!(scheduled["workflow_type"], "Child");
    assert_eq!(scheduled["child_workflow_instance_id"], child_id.as_str());
    assert_eq!(scheduled["parent_close_policy"], "terminate");
    assert_eq!(scheduled["cancellation_policy"], "abandon");
    assert_eq!(scheduled["queue"], "family-children");
    assert_eq!(scheduled["arguments"], args("[7]"));
    let child_run = scheduled["child_workflow_run_id"].as_str().unwrap();
    let started = events_of(&events, "ChildRunStarted");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["payload"]["sequence"], 1);
    assert_eq!(started[0]["payload"]["child_workflow_run_id"], child_run);
    assert_eq!(describe(&s, "parent")["pending"]["children"], 1);

    // The child is a run of its own, on its own queue, naming its parent.
    let child = describe(&s, &child_id);
    assert_eq!(child["run_id"], child_run);
    assert_eq!(child["workflow_type"], "Child");
    assert_eq!(child["task_queue"], "family-children");
    assert_eq!(child["parent_run_id"], parent_run.as_str());
    assert_eq!(child["execution_timeout_seconds"], 3600);
    let task = next_task(&s, "family-children");
    assert_eq!(task["workflow_id"], child_id.as_str(), "{task}");
    complete(
        &s,
        &task,
        json!([{ "type": "complete_workflow", "result": args("\"ok\"") }]),
    );

    // The parent resumes with the child's result.
    let task = next_task(&s, "family");
    assert_eq!(task["run_id"], parent_run.as_str(), "{task}");
    let events = s.history("parent");
    let completed = events_of(&events, "ChildRunCompleted");
    assert_eq!(completed.len(), 1, "{events:?}");
    let completed = &completed[0]["payload"];
    assert_eq!(completed["sequence"], 1);
    assert_eq!(completed["result"], args("\"ok\""));
    assert_eq!(completed["payload_codec"], "json");
    assert_eq!(completed["child_workflow_type"], "Child");
    assert_eq!(completed["child_workflow_run_id"], child_run);
    assert_eq!(completed["parent_close_policy"], "terminate");
    assert_eq!(describe(&s, "parent")["pending"]["children"], 0);
    complete(
        &s,
        &task,
        json!([{ "type": "complete_workflow", "result": args("1") }]),
    );
    assert_eq!(describe(&s, "parent")["status"], "completed");
}

#[test]
fn a_failed_or_terminated_child_gives_the_parent_its_failure() {
    let s = server();
    let (_, child_id) = parent_with_child(&s, "p-fail", "fail", json!({}));
    let task = next_task(&s, "fail-children");
    complete(
        &s,
        &task,
        json!([{ "type": "fail_workflow", "message": "card declined",
                 "exception_type": "PaymentError", "exception_class": "app.PaymentError",
                 "non_retryable": true }]),
    );
    next_task(&s, "fail");
    let events = s.history("p-fail");
    let failed = events_of(&events, "ChildRunFailed");
    assert_eq!(failed.len(), 1, "{events:?}");
    let failed = &failed[0]["payload"];
    assert_eq!(failed["sequence"], 1);
    assert_eq!(failed["message"], "card declined");
    assert_eq!(failed["exception_type"], "PaymentError");
    assert_eq!(failed["exception_class"], "app.PaymentError");
    assert_eq!(failed["non_retryable"], true);
    assert_eq!(failed["failure_category"], "application");
    assert_eq!(failed["child_workflow_instance_id"], child_id.as_str());

    let (_, child_id) = parent_with_child(&s, "p-term", "term", json!({}));
    let (status, body) = s.post(
        &format!("/api/workflows/{child_id}/terminate"),
        json!({ "reason": "operator" }),
    );
    assert_eq!(status, 200, "{body}");
    next_task(&s, "term");
    let events = s.history("p-term");
    let terminated = events_of(&events, "ChildRunTerminated");
    assert_eq!(terminated.len(), 1, "{events:?}");
    assert_eq!(terminated[0]["payload"]["reason"], "operator");
    assert_eq!(terminated[0]["payload"]["sequence"], 1);
}

#[test]
fn the_parent_close_policy_decides_what_happens_to_open_children() {
    let s = server();
    for (policy, expected) in [
        ("terminate", "terminated"),
        ("request_cancel", "cancelled"),
        ("abandon", "running"),
    ] {
        let id = format!("close-{policy}");
        let queue = format!("q-{policy}");
        let (_, child_id) =
            parent_with_child(&s, &id, &queue, json!({ "parent_close_policy": policy }));
        // The parent waits on its child: no task until the child ends.
        let (_, polled) = s.poll(
            "workflow",
            "default",
            &queue,
            &format!("again-{policy}"),
            100,
        );
        assert!(polled["task"].is_null(), "{polled}");
        let (status, body) = s.post(
            &format!("/api/workflows/{id}/terminate"),
            json!({ "reason": "done here" }),
        );
        assert_eq!(status, 200, "{body}");
        let child = describe(&s, &child_id);
        assert_eq!(child["status"], expected, "{policy}: {child}");
        if expected != "running" {
            let events = s.history(&child_id);
            let last = events.last().unwrap();
            assert_eq!(last["payload"]["parent_close_policy"], policy, "{last}");
        }
        // Nothing reaches the closed parent.
        let events = s.history(&id);
        assert_eq!(events.last().unwrap()["event_type"], "WorkflowTerminated");
    }
}

#[test]
fn a_child_that_continues_as_new_stays_the_parents_child() {
    let s = server();
    let (_, child_id) = parent_with_child(&s, "p-chain", "chain", json!({}));
    let task = next_task(&s, "chain-children");
    complete(
        &s,
        &task,
        json!([{ "type": "continue_as_new", "arguments": args("[8]") }]),
    );
    // Nothing for the parent yet: its child goes on in a new run.
    let events = s.history("p-chain");
    assert!(
        events_of(&events, "ChildRunCompleted").is_empty(),
        "{events:?}"
    );
    assert_eq!(describe(&s, "p-chain")["pending"]["children"], 1);
    let task = next_task(&s, "chain-children");
    let last_run = task["run_id"].as_str().unwrap().to_owned();
    assert_eq!(task["workflow_id"], child_id.as_str());
    assert_eq!(
        describe(&s, &child_id)["parent_run_id"],
        describe(&s, "p-chain")["run_id"]
    );
    complete(
        &s,
        &task,
        json!([{ "type": "complete_workflow", "result": args("2") }]),
    );
    next_task(&s, "chain");
    let events = s.history("p-chain");
    let completed = events_of(&events, "ChildRunCompleted");
    assert_eq!(completed.len(), 1, "{events:?}");
    assert_eq!(
        completed[0]["payload"]["child_workflow_run_id"],
        last_run.as_str()
    );
    assert_eq!(completed[0]["payload"]["result"], args("2"));
}

#[test]
fn malformed_child_commands_are_refused_by_field_and_nothing_is_applied() {
    let s = server();
    s.start_workflow("default", "bad-child", "bad-child");
    let task = next_task(&s, "bad-child");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "start_child_workflow", "workflow_type": " ", "queue": "",
                 "parent_close_policy": "explode", "cancellation_policy": "maybe",
                 "run_timeout_seconds": 0, "arguments": args("[]") }]),
    );
    assert_eq!(status, 422, "{body}");
    for field in [
        "workflow_type",
        "queue",
        "parent_close_policy",
        "cancellation_policy",
        "run_timeout_seconds",
    ] {
        assert!(
            body["validation_errors"][format!("commands.0.{field}")].is_array(),
            "{field}: {body}"
        );
    }
    assert_eq!(describe(&s, "bad-child")["pending"]["children"], 0);
    assert_eq!(describe(&s, "bad-child")["history_length"], 1);
}

fn lease(store: &Store) -> dwengine::store::LeasedTask {
    store
        .lease_task(
            TaskKind::Workflow,
            "default",
            "orders",
            "w",
            "p",
            Duration::from_secs(30),
        )
        .unwrap()
        .expect("a ready workflow task")
}

fn child(arguments: Value) -> WorkflowCommand {
    serde_json::from_value(json!({
        "type": "start_child_workflow", "workflow_type": "Child", "queue": "kids",
        "arguments": arguments,
    }))
    .unwrap()
}

#[test]
fn a_parent_at_pending_child_count_fails_with_the_structural_metadata() {
    let store = common::memory_store(&[(LimitKind::PendingChildCount, 2)]);
    let run = store
        .start_workflow(common::start("many"), None)
        .unwrap()
        .run;
    let task = lease(&store);
    let commands: Vec<WorkflowCommand> = (0..3).map(|_| child(json!([]))).collect();
    let done = store
        .complete_workflow_task(
            task.task_id,
            WorkflowTaskFence {
                lease_owner: &task.lease_owner,
                attempt: task.attempt,
            },
            &commands,
        )
        .unwrap();
    assert_eq!(done.run_status, RunStatus::Failed);
    let exceeded = done.structural_limit.expect("the child limit");
    assert_eq!(exceeded.kind, LimitKind::PendingChildCount);
    assert_eq!((exceeded.value, exceeded.configured), (2, 2));
    let described = store.describe(run).unwrap();
    let failure = &described.failures[0];
    assert_eq!(failure.failure_category, "structural_limit");
    assert_eq!(
        failure.structural_limit_kind.as_deref(),
        Some("pending_child_count")
    );
    assert_eq!(failure.structural_limit_value, Some(2));
    assert_eq!(failure.structural_limit_configured, Some(2));
    // The whole completion rolled back: not even the first two children exist.
    assert_eq!(described.run.pending.children, 0);
    for sequence in 1..=3 {
        assert_eq!(
            store
                .find_run("default", &format!("{run}:child:{sequence}"))
                .unwrap(),
            None
        );
    }
}

#[test]
fn an_oversized_child_argument_fails_the_parent_before_any_child_row_exists() {
    let store = common::memory_store(&[(LimitKind::PayloadSizeBytes, 64)]);
    let run = store
        .start_workflow(common::start("big-child"), None)
        .unwrap()
        .run;
    let task = lease(&store);
    let done = store
        .complete_workflow_task(
            task.task_id,
            WorkflowTaskFence {
                lease_owner: &task.lease_owner,
                attempt: task.attempt,
            },
            &[child(json!({ "codec": "json", "blob": "x".repeat(200) }))],
        )
        .unwrap();
    assert_eq!(done.run_status, RunStatus::Failed);
    let exceeded = done.structural_limit.expect("the payload limit");
    assert_eq!(exceeded.kind, LimitKind::PayloadSizeBytes);
    assert_eq!(
        store
            .find_run("default", &format!("{run}:child:1"))
            .unwrap(),
        None
    );
    assert_eq!(store.pending_counts(run).unwrap().children, 0);
}

#[test]
fn a_failed_child_is_retried_by_its_policy_and_the_parent_hears_the_last_attempt() {
    let s = server();
    let policy = json!({ "retry_policy": { "max_attempts": 2, "backoff_seconds": [0],
                                           "non_retryable_error_types": ["Fatal"] } });
    let (_, child_id) = parent_with_child(&s, "p-retry", "retry", policy.clone());
    let first = next_task(&s, "retry-children");
    complete(
        &s,
        &first,
        json!([{ "type": "fail_workflow", "message": "flaky", "exception_type": "Flaky" }]),
    );
    // The retry is a new run of the same child; the parent hears nothing.
    let second = next_task(&s, "retry-children");
    assert_eq!(second["workflow_id"], child_id.as_str());
    assert_ne!(second["run_id"], first["run_id"]);
    let events = s.history("p-retry");
    assert!(
        events_of(&events, "ChildRunFailed").is_empty(),
        "{events:?}"
    );
    assert_eq!(describe(&s, "p-retry")["pending"]["children"], 1);
    complete(
        &s,
        &second,
        json!([{ "type": "complete_workflow", "result": args("3") }]),
    );
    next_task(&s, "retry");
    let events = s.history("p-retry");
    let completed = events_of(&events, "ChildRunCompleted");
    assert_eq!(completed.len(), 1, "{events:?}");
    assert_eq!(
        completed[0]["payload"]["child_workflow_run_id"],
        second["run_id"]
    );
    assert_eq!(
        events_of(&events, "ChildWorkflowScheduled")[0]["payload"]["retry_policy"]["max_attempts"],
        2
    );

    // A failure of a type the policy excludes reaches the parent at once.
    parent_with_child(&s, "p-fatal", "fatal", policy);
    let task = next_task(&s, "fatal-children");
    complete(
        &s,
        &task,
        json!([{ "type": "fail_workflow", "message": "broken", "exception_type": "Fatal" }]),
    );
    next_task(&s, "fatal");
    let events = s.history("p-fatal");
    let failed = events_of(&events, "ChildRunFailed");
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(
        failed[0]["payload"]["child_workflow_run_id"],
        task["run_id"]
    );
}
