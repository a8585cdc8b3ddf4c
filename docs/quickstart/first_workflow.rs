//! The first workflow of docs/quickstart-server.md, with the published Rust
//! SDK (`durable-workflow`, the version conformance/rust pins; it is built in
//! that crate so that it shares its lock file and build).
//!
//! A worker and a client in one process: the worker runs the `greeter`
//! workflow, which calls the `greet` activity, sleeps on a durable timer and
//! then waits for an `approve` signal; the client starts it, signals it once
//! it waits, waits for its result and prints its history.
//!
//! ```sh
//! cargo run --manifest-path conformance/rust/Cargo.toml --bin first_workflow -- http://127.0.0.1:8080
//! ```
//!
//! The tokens come from QUICKSTART_OPERATOR_TOKEN (starting, signalling and
//! reading the workflow) and QUICKSTART_WORKER_TOKEN (polling for its tasks),
//! the values dwserver was started with.

use std::process::ExitCode;
use std::time::Duration;

use durable_workflow::{Client, Uuid, Worker, WorkflowResultOptions};
use serde_json::{json, Value};

const TASK_QUEUE: &str = "quickstart-rust";

/// How long any one wait may take on a busy machine.
const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: first_workflow URL   (e.g. http://127.0.0.1:8080)");
        return ExitCode::from(2);
    };
    match run(url.trim_end_matches('/')).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("first_workflow: {message}");
            ExitCode::FAILURE
        }
    }
}

fn token(name: &str) -> Result<String, String> {
    std::env::var(name)
        .map_err(|_| format!("{name} is not set (the token dwserver was started with)"))
}

async fn run(url: &str) -> Result<(), String> {
    let operator_token = token("QUICKSTART_OPERATOR_TOKEN")?;
    let client = Client::builder(url.to_owned())
        .namespace("default")
        .control_token(Some(operator_token.clone()))
        .worker_token(Some(token("QUICKSTART_WORKER_TOKEN")?))
        .build()
        .map_err(|e| e.to_string())?;

    let mut worker = Worker::new(client.clone(), TASK_QUEUE).poll_timeout(Duration::from_secs(1));
    worker.register_activity("greet", |_ctx, args: Value| async move {
        Ok(json!(format!("hello, {}", args[0].as_str().unwrap_or("?"))))
    });
    worker.register_workflow("greeter", |ctx, input: Value| async move {
        // Each `.await` on `ctx` is a durable step: the server records it in
        // the workflow's history, and a restarted worker replays from there.
        let greeting = ctx.activity("greet", json!([input[0].clone()])).await?;
        ctx.sleep(Duration::from_secs(2)).await?; // a durable timer
        let approval = ctx.wait_signal("approve").await?; // the signal's arguments
        Ok(json!(format!(
            "{}, approved by {}",
            greeting.as_str().unwrap_or("?"),
            approval[0].as_str().unwrap_or("?")
        )))
    });
    worker
        .declare_workflow_signals("greeter", &["approve"])
        .map_err(|e| e.to_string())?;

    let workflow_id = format!("greeter-rust-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let handle = client
        .start_workflow("greeter", TASK_QUEUE, &workflow_id, json!(["world"]))
        .await
        .map_err(|e| format!("start: {e}"))?;
    let run_id = handle
        .describe()
        .await
        .map_err(|e| format!("describe: {e}"))?
        .run_id
        .ok_or("describe gave no run id")?;
    let http = History::new(url, &operator_token, &workflow_id, &run_id);

    // The worker runs until the client side below is done.
    let mut outcome = Err("the worker stopped first".to_owned());
    let client_side = async {
        outcome = async {
            // The signal could be sent at once (the server keeps it until the
            // workflow reads it); waiting shows the run parked on its wait.
            http.until_event("SignalWaitOpened").await?;
            handle
                .signal("approve", json!(["alice"]))
                .await
                .map_err(|e| format!("signal: {e}"))?;
            handle
                .result(WorkflowResultOptions {
                    poll_interval: Duration::from_millis(100),
                    timeout: DEADLINE,
                })
                .await
                .map_err(|e| format!("result: {e}"))
        }
        .await;
    };
    worker
        .run_until(client_side)
        .await
        .map_err(|e| format!("worker: {e}"))?;
    let result = outcome?;
    println!("{workflow_id} returned {result}");

    let types = http.event_types().await?;
    println!("history: {}", types.join(", "));
    for expected in [
        "ActivityCompleted",
        "TimerFired",
        "SignalReceived",
        "WorkflowCompleted",
    ] {
        if !types.iter().any(|t| t == expected) {
            return Err(format!("no {expected} in the history"));
        }
    }
    if result != json!("hello, world, approved by alice") {
        return Err(format!("unexpected result {result}"));
    }
    Ok(())
}

/// One run's history over the plain HTTP API (docs/api.md).
struct History {
    url: String,
    token: String,
    http: reqwest::Client,
}

impl History {
    fn new(base: &str, token: &str, workflow_id: &str, run_id: &str) -> History {
        History {
            url: format!("{base}/api/workflows/{workflow_id}/runs/{run_id}/history?page_size=1000"),
            token: token.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// The run's event types, in order (one page of up to 1,000 events:
    /// this workflow has about a dozen).
    async fn event_types(&self) -> Result<Vec<String>, String> {
        let url = &self.url;
        let response = self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .header("X-Namespace", "default")
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        let page: Value = response
            .json()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !status.is_success() {
            return Err(format!("GET {url}: {status} {page}"));
        }
        Ok(page["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["event_type"].as_str().map(str::to_owned))
            .collect())
    }

    /// Waits (up to a minute) until the history holds an `event_type` event.
    async fn until_event(&self, event_type: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while tokio::time::Instant::now() < deadline {
            if let Ok(types) = self.event_types().await {
                if types.iter().any(|t| t == event_type) {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("no {event_type} event within {DEADLINE:?}"))
    }
}
