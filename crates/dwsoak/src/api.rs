//! The harness's only knowledge of dwserver's HTTP routes and bodies.
//!
//! The server's public API is moving to the Durable Workflow wire protocol;
//! keeping every route, header and body shape in this one module means the
//! load generator and the sampler follow that move by editing one file.
//! Every call answers a [`Reply`] rather than an error: a soak counts
//! failures by `status` label (HTTP code, or a transport bucket such as
//! `timeout`) instead of stopping at the first one.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The outcome of one request.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The `status` label: the HTTP code, or `timeout`, `connect`, `transport`.
    pub status: String,
    /// A 2xx answer.
    pub ok: bool,
    /// The JSON body, when there was one.
    pub body: Option<Value>,
    /// Wall time of the request.
    pub latency: Duration,
}

/// A client of one dwserver.
#[derive(Debug, Clone)]
pub struct Api {
    agent: ureq::Agent,
    base: String,
}

impl Api {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Api {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build();
        Api {
            agent,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn send(&self, request: ureq::Request, body: Option<Value>) -> Reply {
        let started = Instant::now();
        let result = match body {
            Some(body) => request
                .set("Content-Type", "application/json")
                .send_string(&body.to_string()),
            None => request.call(),
        };
        let latency = started.elapsed();
        match result {
            Ok(response) => Reply {
                status: response.status().to_string(),
                ok: true,
                body: response.into_json().ok(),
                latency,
            },
            Err(ureq::Error::Status(code, response)) => Reply {
                status: code.to_string(),
                ok: false,
                body: response.into_json().ok(),
                latency,
            },
            Err(ureq::Error::Transport(transport)) => Reply {
                status: transport_bucket(&transport).to_owned(),
                ok: false,
                body: None,
                latency,
            },
        }
    }

    fn post(&self, path: &str, body: Value) -> Reply {
        self.send(self.agent.post(&format!("{}{path}", self.base)), Some(body))
    }

    /// Starts a workflow run.
    pub fn start_workflow(
        &self,
        namespace: &str,
        workflow_id: &str,
        workflow_type: &str,
        task_queue: &str,
    ) -> Reply {
        self.post(
            &format!("/api/namespaces/{namespace}/workflows"),
            json!({ "workflow_id": workflow_id, "workflow_type": workflow_type, "task_queue": task_queue, "input": [] }),
        )
    }

    /// Signals a running workflow.
    pub fn signal(&self, namespace: &str, workflow_id: &str, name: &str) -> Reply {
        self.post(
            &format!("/api/namespaces/{namespace}/workflows/{workflow_id}/signal/{name}"),
            json!({ "input": [1] }),
        )
    }

    /// Registers (or heartbeats) a worker on a queue.
    pub fn register_worker(&self, namespace: &str, worker_id: &str, task_queue: &str) -> Reply {
        self.post(
            "/api/worker/register",
            json!({ "namespace": namespace, "worker_id": worker_id, "task_queue": task_queue }),
        )
    }

    /// Long-polls a workflow task under a fresh poll request id.
    pub fn poll_workflow_task(
        &self,
        namespace: &str,
        task_queue: &str,
        worker_id: &str,
        poll_request_id: &str,
        timeout: Duration,
    ) -> Reply {
        self.post(
            "/api/worker/workflow-tasks/poll",
            json!({
                "namespace": namespace,
                "task_queue": task_queue,
                "worker_id": worker_id,
                "poll_request_id": poll_request_id,
                "timeout_ms": timeout.as_millis() as u64,
            }),
        )
    }

    /// The leased task of a poll reply, if it carried one.
    pub fn leased_task(reply: &Reply) -> Option<&Value> {
        reply.body.as_ref()?.get("task").filter(|t| !t.is_null())
    }

    /// Completes a leased workflow task, ending its run.
    pub fn complete_workflow_task(&self, task: &Value) -> Reply {
        let Some(task_id) = task.get("task_id").and_then(Value::as_i64) else {
            return Reply {
                status: "malformed_task".into(),
                ok: false,
                body: None,
                latency: Duration::ZERO,
            };
        };
        self.post(
            &format!("/api/worker/workflow-tasks/{task_id}/complete"),
            json!({ "commands": [], "decision": "complete", "result": "done" }),
        )
    }

    /// Live keys per cache policy ID, as the server counts them.
    pub fn cache_keys_by_policy(&self) -> Result<BTreeMap<String, u64>, String> {
        let reply = self.send(
            self.agent
                .get(&format!("{}/api/system/cache-keys", self.base)),
            None,
        );
        if !reply.ok {
            return Err(format!(
                "GET /api/system/cache-keys answered {}",
                reply.status
            ));
        }
        let counts = reply
            .body
            .as_ref()
            .and_then(|b| b.get("keys_by_policy"))
            .and_then(Value::as_object)
            .ok_or("GET /api/system/cache-keys: no keys_by_policy object")?;
        counts
            .iter()
            .map(|(id, n)| {
                n.as_u64()
                    .map(|n| (id.clone(), n))
                    .ok_or_else(|| format!("keys_by_policy.{id} is not a count: {n}"))
            })
            .collect()
    }

    /// Whether the server answers its health route.
    pub fn healthy(&self) -> bool {
        self.send(
            self.agent.get(&format!("{}/api/system/health", self.base)),
            None,
        )
        .ok
    }
}

/// The load generator's exception buckets: a finite set, so the `status`
/// label of `dw_perf_requests_total` stays bounded.
fn transport_bucket(transport: &ureq::Transport) -> &'static str {
    match transport.kind() {
        ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns => "connect",
        ureq::ErrorKind::Io if transport.to_string().contains("timed out") => "timeout",
        _ => "transport",
    }
}
