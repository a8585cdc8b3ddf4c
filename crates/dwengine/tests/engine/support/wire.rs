//! The HTTP shapes the fault tests and the load generator speak, in one
//! place: the Durable Workflow wire protocol (control plane 2, worker
//! protocol 1.20, namespace in `X-Namespace`). Each function returns a
//! [`Request`]; reports on a leased task take the polled task, whose lease
//! fields (`lease_owner`, the attempt) fence the report.
#![allow(dead_code)]

use serde_json::{json, Value};

/// A request: the path (POST unless it has no body) and its JSON body.
pub struct Request {
    /// Under the server's base URL.
    pub path: String,
    /// `None`: a GET.
    pub body: Option<Value>,
    /// The `X-Namespace` header, when the route takes one.
    pub namespace: Option<String>,
}

fn post(ns: &str, path: String, body: Value) -> Request {
    Request {
        path,
        body: Some(body),
        namespace: Some(ns.to_owned()),
    }
}

fn get(ns: &str, path: String) -> Request {
    Request {
        path,
        body: None,
        namespace: Some(ns.to_owned()),
    }
}

/// Registers namespace `ns` (admin; a no-op when it exists).
pub fn namespace(ns: &str) -> Request {
    Request {
        path: "/api/namespaces".into(),
        body: Some(json!({ "name": ns })),
        namespace: None,
    }
}

/// Starts `workflow_id`; a retry with the same `request_id` converges.
pub fn start(ns: &str, workflow_id: &str, queue: &str, request_id: Option<&str>) -> Request {
    let mut body = json!({
        "workflow_id": workflow_id, "workflow_type": "Order", "task_queue": queue,
        "input": { "codec": "json", "blob": "[]" },
    });
    if let Some(id) = request_id {
        body["request_id"] = id.into();
    }
    post(ns, "/api/workflows".into(), body)
}

/// A signal with a deduplicating request id.
pub fn signal(ns: &str, workflow_id: &str, name: &str, input: Value, request_id: &str) -> Request {
    post(
        ns,
        format!("/api/workflows/{workflow_id}/signal/{name}"),
        json!({ "input": input, "request_id": request_id }),
    )
}

/// Cancel (`terminate == false`) or terminate.
pub fn stop(ns: &str, workflow_id: &str, terminate: bool, request_id: &str) -> Request {
    let verb = if terminate { "terminate" } else { "cancel" };
    post(
        ns,
        format!("/api/workflows/{workflow_id}/{verb}"),
        json!({ "reason": "test", "request_id": request_id }),
    )
}

/// The workflow's newest run.
pub fn describe(ns: &str, workflow_id: &str) -> Request {
    get(ns, format!("/api/workflows/{workflow_id}"))
}

/// Registers (or re-registers) a worker.
pub fn register(ns: &str, worker_id: &str, queue: &str) -> Request {
    post(
        ns,
        "/api/worker/register".into(),
        json!({ "worker_id": worker_id, "task_queue": queue }),
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
        ns,
        format!("/api/worker/{kind}-tasks/poll"),
        json!({
            "task_queue": queue, "worker_id": worker_id,
            "poll_request_id": poll_id, "timeout_seconds": timeout_ms as f64 / 1000.0,
        }),
    )
}

/// The task in a poll answer, if any.
pub fn polled_task(answer: &Value) -> Option<&Value> {
    answer.get("task").filter(|t| t.is_object())
}

/// The task id of a polled task.
pub fn task_id(task: &Value) -> i64 {
    task["task_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .unwrap_or(-1)
}

/// Whether a polled workflow task's history holds an event of `event_type`.
pub fn history_has(task: &Value, event_type: &str) -> bool {
    task["history_events"]
        .as_array()
        .is_some_and(|events| events.iter().any(|e| e["event_type"] == event_type))
}

fn namespace_of(task: &Value) -> &str {
    task["namespace"].as_str().unwrap_or("default")
}

fn workflow_lease(task: &Value) -> Value {
    json!({
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
    })
}

/// Completes a workflow task: schedules one activity, or completes the run.
pub fn complete_workflow(task: &Value, finish: bool) -> Request {
    let commands = if finish {
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "\"done\"" } }])
    } else {
        json!([{ "type": "schedule_activity", "activity_type": "charge",
                 "arguments": { "codec": "json", "blob": "[1]" } }])
    };
    let mut body = workflow_lease(task);
    body["commands"] = commands;
    post(
        namespace_of(task),
        format!(
            "/api/worker/workflow-tasks/{}/complete",
            task["task_id"].as_str().unwrap_or("")
        ),
        body,
    )
}

/// Fails a leased workflow task: it comes back after a backoff.
pub fn fail_workflow(task: &Value) -> Request {
    let mut body = workflow_lease(task);
    body["failure"] = json!({ "message": "test failure", "type": "TestFailure" });
    post(
        namespace_of(task),
        format!(
            "/api/worker/workflow-tasks/{}/fail",
            task["task_id"].as_str().unwrap_or("")
        ),
        body,
    )
}

/// The history page of a leased workflow task at `token`.
pub fn history_page(task: &Value, token: &str) -> Request {
    let mut body = workflow_lease(task);
    body["next_history_page_token"] = token.into();
    post(
        namespace_of(task),
        format!(
            "/api/worker/workflow-tasks/{}/history",
            task["task_id"].as_str().unwrap_or("")
        ),
        body,
    )
}

/// Where a polled task's (or a page's) history continues, if it does.
pub fn next_history(answer: &Value) -> Option<String> {
    answer["next_history_page_token"]
        .as_str()
        .map(str::to_owned)
}

fn activity_lease(task: &Value) -> Value {
    json!({
        "lease_owner": task["lease_owner"],
        "activity_attempt_id": task["activity_attempt_id"],
    })
}

/// Completes an activity task.
pub fn complete_activity(task: &Value) -> Request {
    let mut body = activity_lease(task);
    body["result"] = json!({ "codec": "json", "blob": "\"charged\"" });
    post(
        namespace_of(task),
        format!(
            "/api/worker/activity-tasks/{}/complete",
            task["task_id"].as_str().unwrap_or("")
        ),
        body,
    )
}

/// Extends a leased task's lease (`kind`: `workflow` or `activity`).
pub fn heartbeat_task(kind: &str, task: &Value) -> Request {
    let body = if kind == "activity" {
        activity_lease(task)
    } else {
        workflow_lease(task)
    };
    post(
        namespace_of(task),
        format!(
            "/api/worker/{kind}-tasks/{}/heartbeat",
            task["task_id"].as_str().unwrap_or("")
        ),
        body,
    )
}

/// The run id in a start answer.
pub fn started_run(answer: &Value) -> Option<i64> {
    answer["run_id"].as_str().and_then(|id| id.parse().ok())
}

/// Whether a describe answer shows a closed run.
pub fn finished(answer: &Value) -> bool {
    matches!(
        answer["status"].as_str(),
        Some("completed" | "failed" | "cancelled" | "terminated")
    )
}

/// Readiness.
pub fn ready() -> Request {
    Request {
        path: "/api/ready".into(),
        body: None,
        namespace: None,
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
