//! What every scenario needs: an SDK client, a fresh task queue, a worker
//! run until the workflow under test closes (with a generous deadline, never
//! a fixed sleep), and the run's history read over plain HTTP so a scenario
//! can check the events the SDK replays from.

use std::future::Future;
use std::time::Duration;

use durable_workflow::{Client, Uuid, Worker, WorkflowHandle, WorkflowResultOptions};
use serde_json::Value;

/// A scenario's failure: what was expected and what happened.
pub type Outcome = Result<(), String>;

/// How long any one wait in a scenario may take on a loaded 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The server under test and an SDK client of it.
#[derive(Clone)]
pub struct Harness {
    pub url: String,
    pub client: Client,
    http: reqwest::Client,
}

impl Harness {
    pub fn new(url: &str) -> Result<Self, String> {
        let client = Client::builder(url.to_owned())
            .namespace("default")
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Harness {
            url: url.trim_end_matches('/').to_owned(),
            client,
            http: reqwest::Client::new(),
        })
    }

    /// A task queue (and workflow id prefix) no other scenario uses.
    pub fn unique(&self, what: &str) -> String {
        format!("rust-{what}-{}", Uuid::new_v4())
    }

    /// A worker of `queue` that polls briefly, so it stops soon after its run closes.
    pub fn worker(&self, queue: &str) -> Worker {
        Worker::new(self.client.clone(), queue)
            .worker_id(self.unique("worker"))
            .poll_timeout(Duration::from_secs(1))
    }

    /// Runs `worker` while `during` runs and then until `handle`'s run is
    /// closed; returns the run's result (or its failure as text).
    pub async fn drive<F>(
        &self,
        worker: &Worker,
        handle: &WorkflowHandle,
        during: F,
    ) -> Result<Value, String>
    where
        F: Future<Output = Result<(), String>>,
    {
        self.drive_run(worker, handle, during, true).await
    }

    /// As [`Harness::drive`], for a scenario whose run fails a workflow task
    /// on purpose (`during` checks that failure itself).
    pub async fn drive_past_task_failures<F>(
        &self,
        worker: &Worker,
        handle: &WorkflowHandle,
        during: F,
    ) -> Result<Value, String>
    where
        F: Future<Output = Result<(), String>>,
    {
        self.drive_run(worker, handle, during, false).await
    }

    async fn drive_run<F>(
        &self,
        worker: &Worker,
        handle: &WorkflowHandle,
        during: F,
        report_task_failures: bool,
    ) -> Result<Value, String>
    where
        F: Future<Output = Result<(), String>>,
    {
        let watcher = handle.clone();
        let mut side = Ok(());
        let side_ref = &mut side;
        let mut task_failure = None;
        let failure_ref = &mut task_failure;
        let closed = async move {
            *side_ref = during.await;
            let _ = tokio::time::timeout(DEADLINE, async {
                loop {
                    if watcher.describe().await.is_ok_and(|d| d.is_terminal()) {
                        return;
                    }
                    // A workflow task the SDK failed (a replay it refused)
                    // only retries with backoff: report it at once.
                    let events = match report_task_failures {
                        true => self.history(&watcher).await.ok(),
                        false => None,
                    };
                    if let Some(events) = events {
                        if let Some(failed) = events
                            .iter()
                            .find(|e| e["event_type"] == "WorkflowTaskFailed")
                        {
                            *failure_ref = Some(failed["payload"]["message"].to_string());
                            return;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await;
        };
        worker
            .run_until(closed)
            .await
            .map_err(|e| format!("worker stopped: {e}"))?;
        side?;
        if let Some(message) = task_failure {
            return Err(format!("the SDK failed a workflow task: {message}"));
        }
        handle
            .result(WorkflowResultOptions {
                poll_interval: Duration::from_millis(50),
                timeout: Duration::from_secs(5),
            })
            .await
            .map_err(|e| format!("result: {e}"))
    }

    /// Every event of the workflow's current run, in order.
    pub async fn history(&self, handle: &WorkflowHandle) -> Result<Vec<Value>, String> {
        let run = handle
            .describe()
            .await
            .map_err(|e| format!("describe: {e}"))?
            .run_id
            .ok_or("describe has no run_id")?;
        self.run_history(&handle.workflow_id, &run).await
    }

    /// Every event of one run, in order.
    pub async fn run_history(&self, workflow_id: &str, run: &str) -> Result<Vec<Value>, String> {
        let mut events = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = format!(
                "{}/api/workflows/{workflow_id}/runs/{run}/history?page_size=1000",
                self.url
            );
            if let Some(t) = &token {
                url.push_str(&format!("&next_page_token={t}"));
            }
            let page: Value = self.get(&url).await?;
            events.extend(page["events"].as_array().cloned().unwrap_or_default());
            match page["next_page_token"].as_str() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => return Ok(events),
            }
        }
    }

    /// A GET of the control plane, as JSON.
    pub async fn get(&self, url: &str) -> Result<Value, String> {
        let response = self
            .http
            .get(url)
            .header("X-Namespace", "default")
            .header("X-Durable-Workflow-Control-Plane-Version", "2")
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("GET {url}: body: {e}"))?;
        if !status.is_success() {
            return Err(format!("GET {url}: {status} {body}"));
        }
        Ok(body)
    }

    /// A POST of the control plane with a JSON body: the status and the
    /// answer (no status is an error here; the caller decides).
    pub async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value), String> {
        self.post_ns("default", path, body).await
    }

    /// As [`Harness::post`], in namespace `namespace`.
    pub async fn post_ns(
        &self,
        namespace: &str,
        path: &str,
        body: &Value,
    ) -> Result<(u16, Value), String> {
        let url = format!("{}{path}", self.url);
        let response = self
            .http
            .post(&url)
            .header("X-Namespace", namespace)
            .header("X-Durable-Workflow-Control-Plane-Version", "2")
            .json(body)
            .send()
            .await
            .map_err(|e| format!("POST {url}: {e}"))?;
        let status = response.status().as_u16();
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("POST {url}: body: {e}"))?;
        Ok((status, body))
    }

    /// Waits until the run's history holds an event of `event_type`.
    pub async fn until_event(&self, handle: &WorkflowHandle, event_type: &str) -> Outcome {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            if let Ok(events) = self.history(handle).await {
                if events.iter().any(|e| e["event_type"] == event_type) {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("no {event_type} event within {DEADLINE:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The types of `events`, in order.
pub fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| e["event_type"].as_str())
        .collect()
}

/// Fails with `what` unless `cond` holds.
pub fn check(cond: bool, what: impl FnOnce() -> String) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}
