//! The HTTP shapes the fault tests and the load generator speak, in one
//! place: when the routes or bodies change (the wire protocol work), this is
//! the one file to edit. Each function returns (method path, JSON body).
#![allow(dead_code)]

use serde_json::{json, Value};

/// A request: the path (POST unless it says GET) and its JSON body.
pub struct Request {
    /// Under the server's base URL.
    pub path: String,
    /// `None`: a GET.
    pub body: Option<Value>,
}

fn post(path: String, body: Value) -> Request {
    Request {
        path,
        body: Some(body),
    }
}

/// Starts `workflow_id`; a retry with the same `request_id` converges.
pub fn start(ns: &str, workflow_id: &str, queue: &str, request_id: Option<&str>) -> Request {
    let mut body =
        json!({ "workflow_id": workflow_id, "workflow_type": "Order", "task_queue": queue });
    if let Some(id) = request_id {
        body["request_id"] = id.into();
    }
    post(format!("/api/namespaces/{ns}/workflows"), body)
}

/// A signal with a deduplicating request id.
pub fn signal(ns: &str, workflow_id: &str, name: &str, input: Value, request_id: &str) -> Request {
    post(
        format!("/api/namespaces/{ns}/workflows/{workflow_id}/signal/{name}"),
        json!({ "input": input, "request_id": request_id }),
    )
}

/// Cancel (`terminate == false`) or terminate.
pub fn stop(ns: &str, workflow_id: &str, terminate: bool, request_id: &str) -> Request {
    let verb = if terminate { "terminate" } else { "cancel" };
    post(
        format!("/api/namespaces/{ns}/workflows/{workflow_id}/{verb}"),
        json!({ "reason": "test", "request_id": request_id }),
    )
}

/// The workflow's newest run.
pub fn describe(ns: &str, workflow_id: &str) -> Request {
    Request {
        path: format!("/api/namespaces/{ns}/workflows/{workflow_id}"),
        body: None,
    }
}

/// Registers or heartbeats a worker.
pub fn register(ns: &str, worker_id: &str, queue: &str) -> Request {
    post(
        "/api/worker/register".into(),
        json!({ "namespace": ns, "worker_id": worker_id, "task_queue": queue }),
    )
}

/// A long poll of `kind` (`workflow` or `activity`).
pub fn poll(
    kind: &str,
    ns: &str,
    queue: &str,
    worker_id: &str,
    poll_id: &str,
    timeout_ms: u64,
) -> Request {
    post(
        format!("/api/worker/{kind}-tasks/poll"),
        json!({
            "namespace": ns, "task_queue": queue, "worker_id": worker_id,
            "poll_request_id": poll_id, "timeout_ms": timeout_ms,
        }),
    )
}

/// The task in a poll answer, if any.
pub fn polled_task(answer: &Value) -> Option<&Value> {
    answer.get("task").filter(|t| t.is_object())
}

/// The task id of a polled task.
pub fn task_id(task: &Value) -> i64 {
    task["task_id"].as_i64().unwrap_or(-1)
}

/// Whether a polled workflow task's history holds an event of `event_type`.
pub fn history_has(task: &Value, event_type: &str) -> bool {
    task["history"]
        .as_array()
        .is_some_and(|events| events.iter().any(|e| e["event_type"] == event_type))
}

/// Completes a workflow task: schedules one activity, or completes the run.
pub fn complete_workflow(task_id: i64, finish: bool) -> Request {
    let commands =
        json!([{ "type": "schedule_activity", "activity_type": "charge", "arguments": [1] }]);
    let body = if finish {
        json!({ "commands": commands, "decision": "complete", "result": "done" })
    } else {
        json!({ "commands": commands, "decision": "wait" })
    };
    post(
        format!("/api/worker/workflow-tasks/{task_id}/complete"),
        body,
    )
}

/// Hands a leased workflow task back to its queue.
pub fn fail_workflow(task_id: i64) -> Request {
    post(
        format!("/api/worker/workflow-tasks/{task_id}/fail"),
        json!({}),
    )
}

/// The history page of a workflow task from sequence `after` on.
pub fn history_page(task_id: i64, after: u64) -> Request {
    Request {
        path: format!("/api/worker/workflow-tasks/{task_id}/history?after={after}"),
        body: None,
    }
}

/// Where a polled task's (or a page's) history continues, if it does.
pub fn next_history(answer: &Value) -> Option<u64> {
    answer
        .get("history_next_sequence")
        .or_else(|| answer.get("next_sequence"))
        .and_then(Value::as_u64)
}

/// Completes an activity task.
pub fn complete_activity(task_id: i64) -> Request {
    post(
        format!("/api/worker/activity-tasks/{task_id}/complete"),
        json!({ "result": "charged" }),
    )
}

/// Extends a leased task's lease.
pub fn heartbeat_task(kind: &str, task_id: i64) -> Request {
    post(
        format!("/api/worker/{kind}-tasks/{task_id}/heartbeat"),
        json!({}),
    )
}

/// The run id in a start answer.
pub fn started_run(answer: &Value) -> Option<i64> {
    answer["run_id"].as_i64()
}

/// Whether a describe answer shows a finished run.
pub fn finished(answer: &Value) -> bool {
    matches!(
        answer["run"]["status"].as_str(),
        Some("completed" | "failed")
    )
}

/// Readiness.
pub fn ready() -> Request {
    Request {
        path: "/api/ready".into(),
        body: None,
    }
}

/// The base URL a `dwserver` child announces on its first stdout line
/// (`listening on <addr>`); the child must have been spawned with piped stdout.
pub fn announced_base(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("the server's stdout is piped");
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the server's first line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from the server: {line:?}"));
    format!("http://{addr}")
}
