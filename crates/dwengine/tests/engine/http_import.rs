//! `POST /api/workflows/import` over loopback HTTP: dry runs, both budget
//! dimensions at their edges, 0 disabling each, the 409 coming before any
//! existing row is read, imported runs staying read-only but closable by an
//! operator when they never ended, and malformed rows counted.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::TestServer;

fn server(max_events: u64, max_bytes: u64) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.store.history_budget.max_events = max_events;
        c.store.history_budget.max_bytes = max_bytes;
    })
}

/// A v1 run with `logs` log rows, a signal and an exception; `terminal` ends it.
fn projection(workflow_id: &str, logs: usize, terminal: Option<Value>) -> Value {
    let mut rows: Vec<Value> = (0..logs)
        .map(|i| json!({ "kind": "log", "result": { "line": i, "path": "a/b" } }))
        .collect();
    rows.push(json!({ "kind": "signal", "name": "approve", "arguments": ["ü"] }));
    rows.push(json!({ "kind": "exception", "class": "Timeout", "message": "slow" }));
    json!({
        "workflow_id": workflow_id, "workflow_type": "LegacyWorkflow",
        "task_queue": "legacy", "arguments": { "x": 1 }, "rows": rows,
        "terminal": terminal,
    })
}

fn dry(mut body: Value) -> Value {
    body["dry_run"] = true.into();
    body
}

const IMPORT: &str = "/api/workflows/import";

fn too_large(answer: &(u16, Value), dimension: &str, used: u64, limit: u64) {
    assert_eq!(answer.0, 409, "{}", answer.1);
    assert_eq!(
        answer.1["reason"], "v1_projection_too_large",
        "{}",
        answer.1
    );
    assert_eq!(
        answer.1["limit"],
        json!({ "dimension": dimension, "used": used, "limit": limit })
    );
}

#[test]
fn an_import_writes_a_projection_that_describes_and_pages_its_history() {
    let s = server(100, 0);
    let done = json!({ "status": "completed", "result": "ok" });
    let (status, imported) = s.post(IMPORT, projection("legacy-1", 3, Some(done)));
    assert_eq!(status, 201, "{imported}");
    // 1 start + 3 logs + 1 signal + 1 exception + 1 terminal.
    assert_eq!(imported["events"], 7);
    assert_eq!(imported["dry_run"], false);
    let run_id = imported["run_id"].as_str().unwrap();
    let (status, described) = s.get("/api/workflows/legacy-1");
    assert_eq!(status, 200);
    assert_eq!(described["status"], "completed");
    assert_eq!(described["origin"], "v1_projection");
    assert_eq!(described["history_bytes"], imported["bytes"]);
    let (status, history) = s.get(&format!("/api/workflows/legacy-1/runs/{run_id}/history"));
    assert_eq!(status, 200);
    assert_eq!(history["total_events"], 7);
}

#[test]
fn a_dry_run_measures_and_writes_nothing_and_enforces_the_same_limits() {
    let s = server(5, 0);
    // 1 start + 2 logs + signal + exception = 5: exactly the budget.
    let (status, measured) = s.post(IMPORT, dry(projection("dry", 2, None)));
    assert_eq!(status, 200, "{measured}");
    assert_eq!(
        (measured["events"].as_u64(), measured["dry_run"].as_bool()),
        (Some(5), Some(true))
    );
    assert!(measured.get("run_id").is_none());
    assert_eq!(s.get("/api/workflows/dry").0, 404, "nothing was written");
    too_large(
        &s.post(IMPORT, dry(projection("dry", 3, None))),
        "events",
        6,
        5,
    );
}

#[test]
fn the_event_budget_admits_the_limit_and_refuses_one_more() {
    let s = server(6, 0);
    let failed = || Some(json!({ "status": "failed", "message": "x" }));
    // 1 + 2 + 1 + 1 + terminal = 6.
    let (status, at) = s.post(IMPORT, projection("at-limit", 2, failed()));
    assert_eq!((status, at["events"].as_u64()), (201, Some(6)), "{at}");
    too_large(
        &s.post(IMPORT, projection("over", 3, failed())),
        "events",
        7,
        6,
    );
    assert_eq!(s.get("/api/workflows/over").0, 404);
}

#[test]
fn the_byte_budget_admits_the_limit_refuses_one_byte_less_and_stops_at_the_first_event_over() {
    let body = projection("bytes", 2, None);
    let measured = server(0, 0).post(IMPORT, dry(body.clone())).1;
    let total = measured["bytes"].as_u64().unwrap();
    let exact = server(0, total);
    assert_eq!(exact.post(IMPORT, body.clone()).0, 201);
    let tight = server(0, total - 1);
    // Only the last event goes over, so `used` is the whole total.
    too_large(&tight.post(IMPORT, body.clone()), "bytes", total, total - 1);
    assert_eq!(tight.get("/api/workflows/bytes").0, 404);

    // A huge early event: the check stops there, before the rest is built.
    let mut huge = projection("huge", 0, None);
    let blob = "x".repeat(10_000);
    huge["rows"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({ "kind": "log", "result": blob }));
    for _ in 0..50 {
        huge["rows"]
            .as_array_mut()
            .unwrap()
            .push(json!({ "kind": "log", "result": "tail" }));
    }
    let full = server(0, 0).post(IMPORT, dry(huge.clone())).1["bytes"]
        .as_u64()
        .unwrap();
    let budget = 5_000;
    let (status, refused) = server(0, budget).post(IMPORT, huge);
    assert_eq!(
        (status, &refused["limit"]["dimension"]),
        (409, &json!("bytes"))
    );
    let used = refused["limit"]["used"].as_u64().unwrap();
    assert!(
        used > budget && used > 10_000 && used < full,
        "used {used}, full {full}"
    );
}

#[test]
fn zero_disables_each_dimension_on_its_own() {
    let big = projection("big", 40, None); // 43 events
    let bytes = server(0, 0).post(IMPORT, dry(big.clone())).1["bytes"]
        .as_u64()
        .unwrap();
    // Events off, bytes on and tight: the byte budget still refuses.
    let (status, _) = server(0, bytes - 1).post(IMPORT, dry(big.clone()));
    assert_eq!(status, 409);
    // Bytes off, events on and tight: the event budget still refuses.
    too_large(
        &server(42, 0).post(IMPORT, dry(big.clone())),
        "events",
        43,
        42,
    );
    // Both off: anything the body limit lets through.
    assert_eq!(server(0, 0).post(IMPORT, big).0, 201);
}

#[test]
fn an_oversized_import_is_refused_before_existing_rows_are_read() {
    let s = server(6, 0);
    assert_eq!(s.post(IMPORT, projection("twice", 1, None)).0, 201);
    // A second projection of the same workflow would be refused as already
    // imported, but only after reading the existing rows: the budget answers first.
    too_large(
        &s.post(IMPORT, projection("twice", 5, None)),
        "events",
        8,
        6,
    );
    let (status, again) = s.post(IMPORT, projection("twice", 1, None));
    assert_eq!(
        (status, &again["reason"]),
        (409, &json!("v1_projection_already_imported"))
    );
}

#[test]
fn imported_runs_take_no_signals_or_updates() {
    let s = server(100, 0);
    let (status, imported) = s.post(IMPORT, projection("ro", 1, None));
    assert_eq!(status, 201);
    let run_id = imported["run_id"].as_str().unwrap().to_owned();
    for path in [
        "/api/workflows/ro/signal/approve".to_owned(),
        format!("/api/workflows/ro/runs/{run_id}/signal/approve"),
        "/api/workflows/ro/update/approve".to_owned(),
    ] {
        let (status, refused) = s.post(&path, json!({ "input": null, "reason": "x" }));
        assert_eq!(
            (status, &refused["reason"]),
            (409, &json!("v1_projection_read_only")),
            "{path}: {refused}"
        );
    }
    let history = s.get(&format!("/api/workflows/ro/runs/{run_id}/history")).1;
    assert_eq!(history["total_events"], 4, "nothing was appended");
    assert_eq!(s.get("/api/workflows/ro").1["status"], "running");
}

/// The workflow id is free again: a start is admitted and becomes the id's run.
fn start_is_admitted(s: &TestServer, workflow_id: &str, projection_run: &str) {
    let (status, started) = s.post(
        "/api/workflows",
        json!({ "workflow_id": workflow_id, "workflow_type": "V2Workflow", "task_queue": "q" }),
    );
    assert_eq!(status, 201, "{started}");
    assert_ne!(started["run_id"].as_str(), Some(projection_run));
    let described = s.get(&format!("/api/workflows/{workflow_id}")).1;
    assert_eq!(
        (&described["status"], &described["origin"]),
        (&json!("running"), &json!("v2")),
        "{described}"
    );
}

#[test]
fn an_imported_run_without_an_end_is_terminated_or_cancelled_and_frees_its_workflow_id() {
    let s = server(100, 0);
    for (workflow_id, operation, status, event) in [
        ("open-t", "terminate", "terminated", "WorkflowTerminated"),
        ("open-c", "cancel", "cancelled", "WorkflowCancelled"),
    ] {
        let (code, imported) = s.post(IMPORT, projection(workflow_id, 1, None));
        assert_eq!(code, 201, "{imported}");
        let run_id = imported["run_id"].as_str().unwrap().to_owned();
        // While the projection is open, its workflow id is taken.
        let (code, refused) = s.post(
            "/api/workflows",
            json!({ "workflow_id": workflow_id, "workflow_type": "V2Workflow", "task_queue": "q" }),
        );
        assert_eq!(
            (code, &refused["reason"]),
            (409, &json!("instance_already_started")),
            "{refused}"
        );
        let path = format!("/api/workflows/{workflow_id}/{operation}");
        let (code, closed) = s.post(&path, json!({ "reason": "legacy run abandoned" }));
        assert_eq!(code, 200, "{operation}: {closed}");
        assert_eq!(closed["outcome"], status);
        let described = s
            .get(&format!("/api/workflows/{workflow_id}/runs/{run_id}"))
            .1;
        assert_eq!(described["status"], status, "{described}");
        let history = s
            .get(&format!(
                "/api/workflows/{workflow_id}/runs/{run_id}/history"
            ))
            .1;
        assert_eq!(history["total_events"], 5, "{history}");
        let last = &history["events"][4];
        assert_eq!(last["event_type"], event);
        assert_eq!(last["payload"]["reason"], "legacy run abandoned");
        // Closed once: the second stop of the closed projection is refused
        // (a cancel repeat converges, as for any run).
        let (code, again) = s.post(
            &format!("/api/workflows/{workflow_id}/runs/{run_id}/terminate"),
            json!({}),
        );
        assert_eq!(
            (code, &again["reason"]),
            (409, &json!("run_not_active")),
            "{again}"
        );
        start_is_admitted(&s, workflow_id, &run_id);
        // The projection is still read-only and stays readable by run id.
        let (code, refused) = s.post(
            &format!("/api/workflows/{workflow_id}/runs/{run_id}/signal/approve"),
            json!({}),
        );
        assert_eq!(code, 409, "{refused}");
        // …and a second import of the same workflow is still refused.
        let (code, again) = s.post(IMPORT, projection(workflow_id, 1, None));
        assert_eq!(
            (code, &again["reason"]),
            (409, &json!("v1_projection_already_imported"))
        );
    }
}

#[test]
fn malformed_rows_are_left_out_counted_reported_and_metered() {
    let s = server(100, 0);
    let metric = |s: &TestServer| -> u64 {
        let (status, _, text) = s.get_text("/api/system/prometheus-metrics?namespace=default");
        assert_eq!(status, 200, "{text}");
        let line = text
            .lines()
            .find(|l| l.starts_with("dw_v1_projection_malformed_rows_total "))
            .unwrap_or_else(|| panic!("no malformed-rows counter in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(metric(&s), 0);
    let mut body = projection("messy", 1, None);
    let rows = body["rows"].as_array_mut().unwrap();
    // rows 0..3 are good (a log, a signal, an exception); then six bad ones.
    rows.push(json!({ "kind": "nope" }));
    rows.push(json!("not an object"));
    rows.push(json!({ "kind": "signal", "arguments": [] }));
    rows.push(json!({ "kind": "signal", "name": " ", "arguments": [] }));
    rows.push(json!({ "kind": "exception", "class": "", "message": "m" }));
    rows.push(json!({ "kind": "log" }));
    rows.push(json!({ "kind": "log", "result": "after the bad ones" }));
    // A dry run reports them and counts nothing.
    let (status, measured) = s.post(IMPORT, dry(body.clone()));
    assert_eq!(status, 200, "{measured}");
    assert_eq!(measured["malformed_rows"], 6);
    assert_eq!(metric(&s), 0, "a dry run adds nothing to the metric");
    let (status, imported) = s.post(IMPORT, body.clone());
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["malformed_rows"], 6);
    let indexes: Vec<u64> = imported["malformed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [3, 4, 5, 6, 7, 8]);
    assert!(
        imported["malformed"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("nope"),
        "{imported}"
    );
    assert!(
        imported["malformed"][3]["reason"]
            .as_str()
            .unwrap()
            .contains("name"),
        "{imported}"
    );
    // 1 start + 4 good rows; nothing of the bad ones.
    assert_eq!(imported["events"], 5);
    let run_id = imported["run_id"].as_str().unwrap();
    let history = s
        .get(&format!("/api/workflows/messy/runs/{run_id}/history"))
        .1;
    assert_eq!(history["total_events"], 5);
    assert_eq!(history["events"][0]["payload"]["malformed_rows"], 6);
    assert_eq!(
        history["events"][4]["payload"]["result"],
        "after the bad ones"
    );
    assert_eq!(metric(&s), 6);
    let operator = s.get("/api/system/operator-metrics").1;
    assert_eq!(operator["v1_projection_malformed_rows_total"], 6);
    // A clean import says so and records nothing on its start event.
    let (status, clean) = s.post(IMPORT, projection("clean", 1, None));
    assert_eq!(status, 201);
    assert_eq!(
        (&clean["malformed_rows"], &clean["malformed"]),
        (&json!(0), &json!([]))
    );
    let run_id = clean["run_id"].as_str().unwrap();
    let history = s
        .get(&format!("/api/workflows/clean/runs/{run_id}/history"))
        .1;
    assert_eq!(history["events"][0]["payload"].get("malformed_rows"), None);
    // The answer lists at most 20; the count stays exact.
    let mut many = projection("many", 0, None);
    many["rows"] = json!((0..50).map(|_| json!({ "kind": 7 })).collect::<Vec<_>>());
    let (status, imported) = s.post(IMPORT, many);
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["malformed_rows"], 50);
    assert_eq!(imported["malformed"].as_array().unwrap().len(), 20);
    assert_eq!(metric(&s), 56);
}

#[test]
fn on_malformed_reject_refuses_the_import_naming_each_row() {
    let s = server(100, 0);
    let mut body = projection("strict", 1, None);
    body["rows"]
        .as_array_mut()
        .unwrap()
        .extend([json!({ "kind": "nope" }), json!({ "kind": "signal" })]);
    body["on_malformed"] = "reject".into();
    let (status, refused) = s.post(IMPORT, body.clone());
    assert_eq!(
        (status, &refused["reason"]),
        (422, &json!("validation_failed")),
        "{refused}"
    );
    let fields: Vec<&String> = refused["validation_errors"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(fields, ["rows.3", "rows.4"]);
    assert_eq!(s.get("/api/workflows/strict").0, 404, "nothing was written");
    body["on_malformed"] = "ignore".into();
    let (status, refused) = s.post(IMPORT, body.clone());
    assert_eq!(status, 422);
    assert!(
        refused["validation_errors"]["on_malformed"].is_array(),
        "{refused}"
    );
    body["on_malformed"] = "count".into();
    assert_eq!(s.post(IMPORT, body).0, 201);
}

#[test]
fn import_fields_are_checked_at_the_boundary() {
    let s = server(100, 0);
    let mut at_limit = projection(&"w".repeat(128), 0, None);
    at_limit["workflow_type"] = "t".repeat(255).into();
    assert_eq!(s.post(IMPORT, dry(at_limit)).0, 200);
    let mut over = projection(&"w".repeat(129), 0, None);
    over["workflow_type"] = "t".repeat(256).into();
    over["task_queue"] = "".into();
    let (status, refused) = s.post(IMPORT, over);
    assert_eq!(
        (status, &refused["reason"]),
        (422, &json!("validation_failed"))
    );
    let fields: Vec<&String> = refused["validation_errors"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(fields, ["task_queue", "workflow_id", "workflow_type"]);
    // A malformed body is a 400; a malformed row alone is counted (see below).
    let (status, _) = s.post(
        IMPORT,
        json!({ "workflow_id": "x", "rows": [], "terminal": { "status": "nope" } }),
    );
    assert_eq!(status, 400);
}

#[test]
fn a_workflow_called_import_is_reached_on_every_route_beside_the_import() {
    let s = server(100, 0);
    let (status, started) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "import", "workflow_type": "t", "task_queue": "q" }),
    );
    assert_eq!(status, 201, "{started}");
    let run_id = started["run_id"].as_str().unwrap().to_owned();
    // The static import path answers a describe of the workflow `import`.
    let (status, described) = s.get(IMPORT);
    assert_eq!(status, 200, "{described}");
    assert_eq!(
        (
            described["workflow_id"].as_str(),
            described["run_id"].as_str()
        ),
        (Some("import"), Some(run_id.as_str()))
    );
    let (status, runs) = s.get(&format!("{IMPORT}/runs"));
    assert_eq!(status, 200, "{runs}");
    let (status, run) = s.get(&format!("{IMPORT}/runs/{run_id}"));
    assert_eq!((status, run["workflow_id"].as_str()), (200, Some("import")));
    let (status, history) = s.get(&format!("{IMPORT}/runs/{run_id}/history"));
    assert_eq!(status, 200, "{history}");
    let (status, signalled) = s.post(&format!("{IMPORT}/signal/poke"), json!({}));
    assert_eq!(status, 202, "{signalled}");
    // …and the import itself is still the POST.
    let (status, imported) = s.post(IMPORT, projection("legacy-beside", 1, None));
    assert_eq!(status, 201, "{imported}");
    let (status, terminated) = s.post(&format!("{IMPORT}/terminate"), json!({ "reason": "done" }));
    assert_eq!(status, 200, "{terminated}");
    assert_eq!(s.get(IMPORT).1["status"], "terminated");
    // A workflow that does not exist is a 404 on the same path.
    let other = server(100, 0);
    let (status, missing) = other.get(IMPORT);
    assert_eq!(status, 404, "{missing}");
}
