//! Continue-as-new: a `continue_as_new` command closes the run as
//! `continued_as_new` and starts a new run of the same workflow id in the
//! same transaction, with fresh history and counters; describe, the runs
//! list and both runs' histories show the chain, and the workflow id
//! addresses its newest run. Oversized arguments fail the run before any
//! successor exists.

use crate::{common, support};

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::store::{RunStatus, TaskKind, WorkflowCommand, WorkflowTaskFence};
use dwpolicy::LimitKind;
use serde_json::{json, Value};
use support::{next_workflow_task as next_task, TestServer};

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn describe(s: &TestServer, path: &str) -> Value {
    let (status, body) = s.get_ns("default", path);
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

#[test]
fn a_chain_of_three_runs_is_one_workflow_id_each_run_with_its_own_history() {
    let s = server();
    let started = s.start_workflow("default", "chain", "chain");
    let first = started["run_id"].as_str().unwrap().to_owned();
    // The first run leaves a timer pending and continues: the timer and
    // its counter stay with the closed run.
    let task = next_task(&s, "chain");
    complete(
        &s,
        &task,
        json!([
            { "type": "start_timer", "delay_seconds": 3600 },
            { "type": "continue_as_new", "arguments": args("[1]") },
        ]),
    );
    let current = describe(&s, "/api/workflows/chain");
    let second = current["run_id"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(current["status"], "running");
    assert_eq!(current["continued_from_run_id"], first.as_str());
    assert_eq!(current["continued_to_run_id"], Value::Null);
    assert_eq!(current["workflow_type"], "Order");
    let old = describe(&s, &format!("/api/workflows/chain/runs/{first}"));
    assert_eq!(old["status"], "continued_as_new", "{old}");
    assert_eq!(old["closed_reason"], "continued", "{old}");
    assert_eq!(old["continued_to_run_id"], second.as_str());
    assert!(old.get("failure").is_none(), "{old}");
    assert_eq!(old["pending"]["timers"], 1, "{old}");
    assert_eq!(current["pending"]["timers"], 0, "{current}");

    // The closing event names the successor at the command's sequence.
    let events = s.run_history("chain", &first);
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "WorkflowContinuedAsNew");
    assert_eq!(last["payload"]["sequence"], 2, "{last}");
    assert_eq!(last["payload"]["continued_to_run_id"], second.as_str());
    assert_eq!(last["payload"]["arguments"], args("[1]"));

    // The new run starts over: its own WorkflowStarted with the new input,
    // and a workflow task whose history is only that.
    let task = next_task(&s, "chain");
    assert_eq!(task["run_id"], second.as_str(), "{task}");
    let events = s.run_history("chain", &second);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["event_type"], "WorkflowStarted");
    assert_eq!(events[0]["payload"]["arguments"], args("[1]"));
    assert_eq!(
        events[0]["payload"]["continued_from_run_id"],
        first.as_str()
    );

    // A continue that names another type and queue.
    complete(
        &s,
        &task,
        json!([{ "type": "continue_as_new", "arguments": args("[0]"),
                 "workflow_type": "OrderV2", "queue": "chain-v2" }]),
    );
    let task = next_task(&s, "chain-v2");
    let third = task["run_id"].as_str().unwrap().to_owned();
    complete(
        &s,
        &task,
        json!([{ "type": "complete_workflow", "result": args("\"done\"") }]),
    );
    let done = describe(&s, "/api/workflows/chain");
    assert_eq!(done["run_id"], third.as_str());
    assert_eq!(done["status"], "completed");
    assert_eq!(done["workflow_type"], "OrderV2");
    assert_eq!(done["task_queue"], "chain-v2");

    let listed = describe(&s, "/api/workflows/chain/runs");
    let mut runs = listed["runs"].as_array().unwrap().clone();
    runs.sort_by_key(|r| r["run_id"].as_str().unwrap().parse::<i64>().unwrap());
    let chain: Vec<(&str, &str, &Value, &Value)> = runs
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap(),
                r["status"].as_str().unwrap(),
                &r["continued_from_run_id"],
                &r["continued_to_run_id"],
            )
        })
        .collect();
    assert_eq!(
        chain,
        vec![
            (
                first.as_str(),
                "continued_as_new",
                &Value::Null,
                &json!(second)
            ),
            (
                second.as_str(),
                "continued_as_new",
                &json!(first),
                &json!(third)
            ),
            (third.as_str(), "completed", &json!(second), &Value::Null),
        ]
    );

    // The operator counts close the continued runs: nothing is left running.
    let (status, operator) = s.get("/api/system/operator-metrics");
    assert_eq!(status, 200, "{operator}");
    assert_eq!(operator["runs"]["continued_as_new"], 2, "{operator}");
    assert_eq!(operator["runs"]["running"], 0, "{operator}");
}

#[test]
fn a_continue_naming_an_empty_queue_is_refused_and_nothing_is_applied() {
    let s = server();
    s.start_workflow("default", "bad-continue", "bad-continue");
    let task = next_task(&s, "bad-continue");
    let (status, body) = s.complete(
        &task,
        json!([{ "type": "continue_as_new", "arguments": args("[]"), "queue": " " }]),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["validation_errors"]["commands.0.queue"].is_array(),
        "{body}"
    );
    let current = describe(&s, "/api/workflows/bad-continue");
    assert_eq!(current["status"], "running");
    assert_eq!(current["continued_to_run_id"], Value::Null);
}

#[test]
fn oversized_continue_arguments_fail_the_run_before_any_successor_exists() {
    let store = common::memory_store(&[(LimitKind::PayloadSizeBytes, 64)]);
    let run = store
        .start_workflow(common::start("too-big"), None)
        .unwrap()
        .run;
    let task = store
        .lease_task(
            TaskKind::Workflow,
            "default",
            "orders",
            "w",
            "p",
            Duration::from_secs(30),
        )
        .unwrap()
        .expect("a ready workflow task");
    let command: WorkflowCommand = serde_json::from_value(json!({
        "type": "continue_as_new", "arguments": { "codec": "json", "blob": "x".repeat(200) },
    }))
    .unwrap();
    let done = store
        .complete_workflow_task(
            task.task_id,
            WorkflowTaskFence {
                lease_owner: &task.lease_owner,
                attempt: task.attempt,
            },
            &[command],
        )
        .unwrap();
    assert_eq!(done.run_status, RunStatus::Failed);
    let exceeded = done.structural_limit.expect("the payload limit");
    assert_eq!(exceeded.kind, LimitKind::PayloadSizeBytes);
    // The workflow id still names the one run, failed; no successor row.
    assert_eq!(store.find_run("default", "too-big").unwrap(), Some(run));
    let stored = store.run(run).unwrap();
    assert_eq!(stored.status, RunStatus::Failed);
    assert_eq!(stored.continued_to, None);
}
