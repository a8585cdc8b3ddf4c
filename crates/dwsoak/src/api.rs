//! The harness's only knowledge of dwserver's HTTP routes and bodies.
//!
//! dwserver's public API is the Durable Workflow wire protocol: control
//! plane 2 under `/api/workflows` and worker protocol 1.20 under
//! `/api/worker`, each request in a registered namespace named by
//! `X-Namespace`, payloads as opaque codec envelopes, task reports fenced by
//! lease owner and attempt (docs/api.md). Every route, header and body shape
//! the harness uses stays in this one module, so the load generator and the
//! sampler follow the API by editing one file. Every call answers a
//! [`Reply`] rather than an error: a soak counts failures by `status` label
//! (HTTP code, or a transport bucket such as `timeout`) instead of stopping
//! at the first one.

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
    token: Option<String>,
}

/// The opaque payload envelope of the wire protocol.
fn envelope(json: &str) -> Value {
    json!({ "codec": "json", "blob": json })
}

impl Api {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:8080`),
    /// sending `token` as a bearer token when given.
    pub fn new(base: &str, token: Option<&str>) -> Api {
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build();
        Api {
            agent,
            base: base.trim_end_matches('/').to_owned(),
            token: token.map(str::to_owned),
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The bearer token, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let request = self.agent.request(method, &format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.set("Authorization", &format!("Bearer {token}")),
            None => request,
        }
    }

    fn get(&self, path: &str) -> ureq::Request {
        self.request("GET", path)
    }

    /// A control-plane request in `namespace`.
    fn control(&self, path: &str, namespace: &str) -> ureq::Request {
        self.request("POST", path)
            .set("X-Namespace", namespace)
            .set("X-Durable-Workflow-Control-Plane-Version", "2")
    }

    /// A worker-plane request in `namespace`.
    fn worker(&self, path: &str, namespace: &str) -> ureq::Request {
        self.request("POST", path)
            .set("X-Namespace", namespace)
            .set("X-Durable-Workflow-Protocol-Version", "1.20")
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

    /// Registers `namespace` (201, or 200 when it exists): the server serves
    /// registered namespaces only.
    pub fn register_namespace(&self, namespace: &str) -> Reply {
        self.send(
            self.request("POST", "/api/namespaces"),
            Some(json!({ "name": namespace, "description": "dwsoak load" })),
        )
    }

    /// Starts a workflow run.
    pub fn start_workflow(
        &self,
        namespace: &str,
        workflow_id: &str,
        workflow_type: &str,
        task_queue: &str,
    ) -> Reply {
        self.send(
            self.control("/api/workflows", namespace),
            Some(json!({
                "workflow_id": workflow_id,
                "workflow_type": workflow_type,
                "task_queue": task_queue,
                "input": envelope("[]"),
            })),
        )
    }

    /// Signals a running workflow.
    pub fn signal(&self, namespace: &str, workflow_id: &str, name: &str) -> Reply {
        self.send(
            self.control(
                &format!("/api/workflows/{workflow_id}/signal/{name}"),
                namespace,
            ),
            Some(json!({ "input": envelope("[1]") })),
        )
    }

    /// Registers a worker on a queue.
    pub fn register_worker(&self, namespace: &str, worker_id: &str, task_queue: &str) -> Reply {
        self.send(
            self.worker("/api/worker/register", namespace),
            Some(json!({ "worker_id": worker_id, "task_queue": task_queue, "runtime": "dwsoak" })),
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
        self.send(
            self.worker("/api/worker/workflow-tasks/poll", namespace),
            Some(json!({
                "task_queue": task_queue,
                "worker_id": worker_id,
                "poll_request_id": poll_request_id,
                "timeout_seconds": timeout.as_secs_f64(),
            })),
        )
    }

    /// The leased task of a poll reply, if it carried one.
    pub fn leased_task(reply: &Reply) -> Option<&Value> {
        reply.body.as_ref()?.get("task").filter(|t| !t.is_null())
    }

    /// Completes a leased workflow task of `namespace`, ending its run.
    pub fn complete_workflow_task(&self, namespace: &str, task: &Value) -> Reply {
        let id = match task.get("task_id") {
            Some(Value::String(id)) => id.clone(),
            Some(Value::Number(id)) => id.to_string(),
            _ => {
                return Reply {
                    status: "malformed_task".into(),
                    ok: false,
                    body: None,
                    latency: Duration::ZERO,
                }
            }
        };
        self.send(
            self.worker(
                &format!("/api/worker/workflow-tasks/{id}/complete"),
                namespace,
            ),
            Some(json!({
                "lease_owner": task.get("lease_owner"),
                "workflow_task_attempt": task.get("workflow_task_attempt"),
                "commands": [{ "type": "complete_workflow", "result": envelope("\"done\"") }],
            })),
        )
    }

    /// Live keys per cache policy ID, as the server counts them.
    pub fn cache_keys_by_policy(&self) -> Result<BTreeMap<String, u64>, String> {
        let reply = self.send(self.get("/api/system/cache-keys"), None);
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
        self.send(self.get("/api/system/health"), None).ok
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

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    use super::*;

    /// A server answering `cluster_info` to `/api/cluster/info` and `{}` to
    /// anything else; sends each other request (head and body) down the channel.
    fn fake(cluster_info: &'static str) -> (String, mpsc::Receiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) <= 2 {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let answer = if head.starts_with("GET /api/cluster/info") {
                    cluster_info
                } else {
                    let _ = tx.send(format!("{head}\n{}", String::from_utf8_lossy(&body)));
                    "{}"
                };
                let mut stream = stream;
                let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}", answer.len());
            }
        });
        (base, rx)
    }

    #[test]
    fn requests_speak_the_wire_protocol() {
        let (base, seen) = fake(r#"{"control_plane":{"version":"2"}}"#);
        let api = Api::new(&base, Some("t0k"));
        assert!(api.start_workflow("ns1", "wf", "T", "q").ok);
        let request = seen.recv().unwrap();
        assert!(
            request.starts_with("POST /api/workflows HTTP/1.1"),
            "{request}"
        );
        assert!(request.contains("X-Namespace: ns1"), "{request}");
        assert!(request.contains("Authorization: Bearer t0k"), "{request}");
        assert!(
            request.contains(r#""input":{"blob":"[]","codec":"json"}"#),
            "{request}"
        );
        let task = json!({"task_id": "7", "lease_owner": "w", "workflow_task_attempt": 2});
        assert!(api.complete_workflow_task("ns1", &task).ok);
        let request = seen.recv().unwrap();
        assert!(
            request.starts_with("POST /api/worker/workflow-tasks/7/complete"),
            "{request}"
        );
        assert!(
            request.contains("X-Durable-Workflow-Protocol-Version: 1.20"),
            "{request}"
        );
        assert!(
            request.contains(r#""type":"complete_workflow""#)
                && request.contains(r#""workflow_task_attempt":2"#),
            "{request}"
        );
        assert!(api.register_namespace("ns1").ok);
        let request = seen.recv().unwrap();
        assert!(
            request.starts_with("POST /api/namespaces HTTP/1.1"),
            "{request}"
        );
    }
}
