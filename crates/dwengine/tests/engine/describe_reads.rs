//! describe answers from one read of its run row (`Store::describe_detailed`,
//! and `Store::describe_latest` by workflow id)
//! what the composed readers answer (`Store::describe`, `Store::run_io`,
//! `Store::archive_mark`, the path describe took before): runs in every
//! state a describe shows are driven over HTTP, then the store file (or
//! PostgreSQL schema) is opened beside the node and both reads compared
//! field for field. The answer is rendered from these values alone, so
//! equal values are the same bytes on the wire; the HTTP answer is checked
//! against them too.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwengine::store::{Store, StoreConfig};
use serde_json::{json, Value};
use support::{next_workflow_task, TestServer};

fn args(blob: &str) -> Value {
    json!({ "codec": "json", "blob": blob })
}

fn start(s: &TestServer, id: &str, extra: Value) {
    let mut body = json!({
        "workflow_id": id, "workflow_type": "Order", "task_queue": id,
        "input": args("[1,\"two\"]"),
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, answer) = s.post("/api/workflows", body);
    assert_eq!(status, 201, "{answer}");
}

fn complete(s: &TestServer, id: &str, commands: Value) {
    let task = next_workflow_task(s, id);
    let (status, body) = s.complete(&task, commands);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn describe_reads_its_run_once_and_answers_as_the_composed_readers_do() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("describe.sqlite");
    let url = crate::common::postgres().then(crate::common::postgres_schema_url);
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| match &url {
        Some(url) => c.database_url = Some(url.clone()),
        None => c.database = Some(file.clone()),
    });

    let (status, body) = s.post(
        "/api/search-attributes",
        json!({ "name": "CustomerId", "type": "keyword" }),
    );
    assert_eq!(status, 201, "{body}");
    // Open: a workflow task ready, with timeouts, memo and search attributes.
    start(
        &s,
        "d-ready",
        json!({ "execution_timeout_seconds": 600, "run_timeout_seconds": 300,
                "memo": { "note": "n" }, "search_attributes": { "CustomerId": "c1" } }),
    );
    // Open and waiting: no workflow task until a signal.
    start(&s, "d-waiting", json!({}));
    complete(
        &s,
        "d-waiting",
        json!([{ "type": "open_signal_wait", "signal_name": "go" }]),
    );
    // Open with a failed workflow task.
    start(&s, "d-task-failed", json!({}));
    let task = next_workflow_task(&s, "d-task-failed");
    let (status, body) = s.post(
        &format!(
            "/api/worker/workflow-tasks/{}/fail",
            task["task_id"].as_str().unwrap()
        ),
        json!({ "lease_owner": task["lease_owner"],
                "workflow_task_attempt": task["workflow_task_attempt"],
                "failure": { "message": "replay diverged", "type": "NonDeterminism" } }),
    );
    assert_eq!(status, 200, "{body}");
    // Closed every way a run closes.
    start(
        &s,
        "d-completed",
        json!({ "execution_timeout_seconds": 60 }),
    );
    complete(
        &s,
        "d-completed",
        json!([{ "type": "complete_workflow", "result": args("\"done\"") }]),
    );
    start(&s, "d-failed", json!({}));
    complete(
        &s,
        "d-failed",
        json!([{ "type": "fail_workflow", "message": "card declined",
                 "exception_type": "Declined" }]),
    );
    start(&s, "d-continued", json!({}));
    complete(
        &s,
        "d-continued",
        json!([{ "type": "continue_as_new", "arguments": args("[2]") }]),
    );
    start(&s, "d-terminated", json!({}));
    let (status, body) = s.post(
        "/api/workflows/d-terminated/terminate",
        json!({ "reason": "operator" }),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.post(
        "/api/workflows/d-terminated/archive",
        json!({ "reason": "kept" }),
    );
    assert_eq!(status, 200, "{body}");
    start(&s, "d-cancelled", json!({}));
    let (status, body) = s.post("/api/workflows/d-cancelled/cancel", json!({}));
    assert!(status < 300, "{status} {body}");

    let store = match &url {
        Some(url) => Store::open_postgres(url, StoreConfig::default()),
        None => Store::open(&file, StoreConfig::default()),
    }
    .expect("open the node's store beside it");
    let ids = [
        "d-ready",
        "d-waiting",
        "d-task-failed",
        "d-completed",
        "d-failed",
        "d-continued",
        "d-terminated",
        "d-cancelled",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for id in ids {
        // The continued run's successor too: an open run again.
        for run in store.runs_of("default", id, 10).unwrap() {
            let composed = (
                store.describe(run).unwrap(),
                store.run_io(run).unwrap(),
                store.archive_mark(run).unwrap(),
            );
            let detailed = store.describe_detailed(run).unwrap();
            assert_eq!(detailed, composed, "{id} run {run}");
            seen.insert((
                detailed.0.run.status.as_str(),
                detailed.0.workflow_task_open,
                detailed.0.workflow_task_failure.is_some(),
                detailed.1 .1.is_some(),
                detailed.2.is_some(),
            ));
        }
        let (status, answer) = s.get(&format!("/api/workflows/{id}"));
        assert_eq!(status, 200, "{answer}");
        let run = store.find_run("default", id).unwrap().unwrap();
        // By workflow id (what the route reads): the newest run, as by its id.
        let (latest_run, latest) = store.describe_latest("default", id).unwrap().unwrap();
        assert_eq!(latest_run, run, "{id}");
        assert_eq!(latest, store.describe_detailed(run).unwrap(), "{id}");
        let (described, (input, _), _) = store.describe_detailed(run).unwrap();
        assert_eq!(answer["input_envelope"], input, "{id}");
        assert_eq!(
            answer["history_length"],
            json!(described.run.history_length),
            "{id}"
        );
        assert_eq!(
            answer["workflow_task_failure"].is_object(),
            described.workflow_task_failure.is_some(),
            "{id}: {answer}"
        );
    }
    assert!(store
        .describe_latest("default", "d-none")
        .unwrap()
        .is_none());
    assert!(store
        .describe_latest("elsewhere", "d-ready")
        .unwrap()
        .is_none());
    // The states the runs were driven to all showed (status, task open,
    // task failure, terminal record, archived).
    for state in [
        ("running", true, false, false, false),
        ("running", false, false, false, false),
        ("running", true, true, false, false),
        ("completed", false, false, true, false),
        ("failed", false, false, true, false),
        ("continued_as_new", false, false, true, false),
        ("terminated", false, false, true, true),
        ("cancelled", false, false, true, false),
    ] {
        assert!(seen.contains(&state), "{state:?} not among {seen:?}");
    }
}
