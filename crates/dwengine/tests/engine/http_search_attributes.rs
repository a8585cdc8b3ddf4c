//! Search-attribute registration over loopback HTTP: the per-namespace cap
//! at its edge (default 100, 0 disables), the public server's conflicts,
//! and starts that may only carry registered attributes of the right type.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::TestServer;

const PATH: &str = "/api/search-attributes";

fn server(max: Option<u64>) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        if let Some(max) = max {
            c.request_limits.max_search_attributes = max;
        }
    })
}

fn register(s: &TestServer, ns: &str, name: &str, kind: &str) -> (u16, Value) {
    s.post_ns(ns, PATH, json!({ "name": name, "type": kind }))
}

#[test]
fn the_default_cap_admits_the_hundredth_attribute_and_refuses_the_next() {
    let s = server(None);
    for i in 0..100 {
        let (status, body) = register(&s, "default", &format!("Attr{i}"), "keyword");
        assert_eq!(status, 201, "attribute {i}: {body}");
    }
    let (status, refused) = register(&s, "default", "Attr100", "keyword");
    assert_eq!(
        (status, &refused["reason"]),
        (422, &json!("validation_failed")),
        "{refused}"
    );
    let problem = refused["validation_errors"]["search_attributes"][0]
        .as_str()
        .unwrap();
    assert!(problem.contains("at most 100"), "{problem}");
    let (_, listed) = s.get(PATH);
    assert_eq!(listed["custom_attributes"].as_object().unwrap().len(), 100);
    assert_eq!(listed["custom_attributes"]["Attr7"], "keyword");
    assert_eq!(listed["system_attributes"]["WorkflowId"], "keyword");
}

#[test]
fn the_cap_is_per_namespace_frees_on_delete_and_zero_disables_it() {
    let s = server(Some(2));
    s.namespace("other");
    for ns in ["default", "other"] {
        assert_eq!(register(&s, ns, "A", "int").0, 201);
        assert_eq!(register(&s, ns, "B", "bool").0, 201);
        assert_eq!(register(&s, ns, "C", "text").0, 422, "{ns}");
    }
    let (status, deleted) = s.delete_ns("default", &format!("{PATH}/A"));
    assert_eq!((status, &deleted["outcome"]), (200, &json!("deleted")));
    assert_eq!(s.delete_ns("default", &format!("{PATH}/A")).0, 404);
    assert_eq!(register(&s, "default", "C", "text").0, 201);

    let unlimited = server(Some(0));
    for i in 0..120 {
        assert_eq!(
            register(&unlimited, "default", &format!("N{i}"), "double").0,
            201
        );
    }
}

#[test]
fn names_types_and_conflicts_follow_the_public_server() {
    let s = server(None);
    assert_eq!(register(&s, "default", "Region", "keyword").0, 201);
    let (status, dup) = register(&s, "default", "Region", "text");
    assert_eq!(
        (status, &dup["reason"], &dup["type"]),
        (409, &json!("attribute_already_exists"), &json!("keyword"))
    );
    let (status, reserved) = register(&s, "default", "WorkflowType", "keyword");
    assert_eq!(
        (status, &reserved["reason"]),
        (409, &json!("name_reserved"))
    );
    let (status, system) = s.delete_ns("default", &format!("{PATH}/RunId"));
    assert_eq!(
        (status, &system["reason"]),
        (409, &json!("system_attribute"))
    );
    let (status, bad) = s.post(PATH, json!({ "name": "9lives", "type": "float" }));
    assert_eq!(status, 422);
    let fields: Vec<&String> = bad["validation_errors"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(fields, ["name", "type"]);
    // The key-length limit bounds names: 128 bytes pass, 129 do not.
    assert_eq!(register(&s, "default", &"K".repeat(128), "int").0, 201);
    assert_eq!(register(&s, "default", &"K".repeat(129), "int").0, 422);
}

#[test]
fn starts_carry_only_registered_attributes_of_their_type() {
    let s = server(None);
    assert_eq!(register(&s, "default", "Region", "keyword").0, 201);
    assert_eq!(register(&s, "default", "Tags", "keyword_list").0, 201);
    assert_eq!(register(&s, "default", "Priority", "int").0, 201);
    let start = |id: &str, attributes: Value| {
        s.post(
            "/api/workflows",
            json!({ "workflow_id": id, "workflow_type": "T", "task_queue": "q",
                    "search_attributes": attributes }),
        )
    };
    let (status, started) = start(
        "ok",
        json!({ "Region": "eu", "Tags": ["a", "b"], "Priority": 3 }),
    );
    assert_eq!(status, 201, "{started}");
    assert_eq!(
        s.get("/api/workflows/ok").1["search_attributes"]["Region"],
        "eu"
    );
    for (id, attributes) in [
        ("unregistered", json!({ "Colour": "red" })),
        ("wrong-type", json!({ "Priority": "high" })),
        ("system", json!({ "WorkflowType": "X" })),
        ("list-of-numbers", json!({ "Tags": [1] })),
    ] {
        let (status, refused) = start(id, attributes);
        assert_eq!(
            (status, &refused["reason"]),
            (422, &json!("validation_failed")),
            "{id}"
        );
        assert!(
            refused["validation_errors"]["search_attributes"].is_array(),
            "{id}: {refused}"
        );
        assert_eq!(
            s.get(&format!("/api/workflows/{id}")).0,
            404,
            "{id} was not started"
        );
    }
    // The value-size limit still applies to registered attributes: 2 KiB passes, one byte more fails.
    assert_eq!(
        start("at-limit", json!({ "Region": "x".repeat(2048) })).0,
        201
    );
    assert_eq!(
        start("over-limit", json!({ "Region": "x".repeat(2049) })).0,
        422
    );
}

/// Leases the next workflow task of `queue` (after a start or a signal).
fn next_task(s: &TestServer, queue: &str, poll: &str) -> Value {
    let (status, polled) = s.poll("workflow", "default", queue, poll, 5000);
    assert_eq!(status, 200, "{polled}");
    assert!(polled["task"].is_object(), "no task: {polled}");
    polled["task"].clone()
}

fn upsert(attributes: Value) -> Value {
    json!([{ "type": "upsert_search_attributes", "attributes": attributes }])
}

fn poke(s: &TestServer, workflow_id: &str, n: usize) {
    let (status, body) = s.post(
        &format!("/api/workflows/{workflow_id}/signal/poke"),
        json!({ "input": { "codec": "json", "blob": "[]" }, "request_id": format!("poke-{n}") }),
    );
    assert_eq!(status, 202, "{body}");
}

/// Starts `workflow_id` on its own queue and completes its first task with
/// an upsert the namespace cannot take: the server fails the task itself
/// (200 `outcome: failed`, the start's problems under `search_attributes`, a
/// `WorkflowTaskFailed` event naming them), so a worker of either SDK keeps
/// running, and the run keeps its attributes. Returns the run's queue.
fn refused_upsert(s: &TestServer, workflow_id: &str, attributes: Value, needle: &str) -> String {
    let queue = format!("q-{workflow_id}");
    s.start_workflow("default", workflow_id, &queue);
    let task = next_task(s, &queue, &format!("p-{workflow_id}"));
    let (status, refused) = s.complete(&task, upsert(attributes.clone()));
    assert_eq!(
        (status, &refused["outcome"], &refused["reason"]),
        (200, &json!("failed"), &json!("validation_failed")),
        "{attributes}: {refused}"
    );
    assert!(refused["next_attempt_at"].is_string(), "{refused}");
    let problems = refused["validation_errors"]["search_attributes"].to_string();
    assert!(problems.contains(needle), "{attributes}: {problems}");
    let (_, described) = s.get(&format!("/api/workflows/{workflow_id}"));
    assert_eq!(described["status"], "running", "{described}");
    assert_eq!(described["search_attributes"], json!({}), "{described}");
    let run_id = described["run_id"].as_str().unwrap();
    let (_, history) = s.get(&format!(
        "/api/workflows/{workflow_id}/runs/{run_id}/history"
    ));
    let failed = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "WorkflowTaskFailed")
        .cloned()
        .unwrap_or_else(|| panic!("no WorkflowTaskFailed: {history}"));
    assert!(
        failed["payload"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(needle)),
        "{failed}"
    );
    queue
}

#[test]
fn workflow_code_upserts_registered_attributes_at_their_edges() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.request_limits.max_search_attribute_value_bytes = 16;
    });
    for (name, kind) in [
        ("Region", "keyword"),
        ("Tier", "int"),
        ("Tags", "keyword_list"),
    ] {
        assert_eq!(register(&s, "default", name, kind).0, 201);
    }
    s.start_workflow("default", "up-1", "sa");
    let task = next_task(&s, "sa", "p1");
    let (status, done) = s.complete(
        &task,
        upsert(json!({ "Region": "x".repeat(16), "Tier": 2 })), // the value limit at its edge
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["new_events"], 1);
    let (_, described) = s.get("/api/workflows/up-1");
    assert_eq!(
        described["search_attributes"],
        json!({ "Region": "x".repeat(16), "Tier": 2 })
    );
    let run_id = described["run_id"].as_str().unwrap().to_owned();
    let (_, history) = s.get(&format!("/api/workflows/up-1/runs/{run_id}/history"));
    let event = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "SearchAttributesUpserted")
        .cloned()
        .unwrap_or_else(|| panic!("no upsert event: {history}"));
    assert_eq!(event["payload"]["sequence"], 1);
    assert_eq!(event["payload"]["merged"]["Tier"], 2);

    // A merge: null removes, new names join; list shows the result.
    poke(&s, "up-1", 1);
    let task = next_task(&s, "sa", "p2");
    let (status, done) = s.complete(&task, upsert(json!({ "Region": null, "Tags": ["a", "b"] })));
    assert_eq!(status, 200, "{done}");
    let (_, page) = s.get("/api/workflows?workflow_type=Order");
    assert_eq!(
        page["workflows"][0]["search_attributes"],
        json!({ "Tier": 2, "Tags": ["a", "b"] })
    );

    // Each refusal carries the start's problems under search_attributes and
    // fails the task; nothing changes.
    let colour = refused_upsert(
        &s,
        "refused-colour",
        json!({ "Colour": "red" }),
        "not a registered search attribute",
    );
    refused_upsert(
        &s,
        "refused-tier",
        json!({ "Tier": "two" }),
        "registered as int",
    );
    refused_upsert(
        &s,
        "refused-system",
        json!({ "WorkflowType": "x" }),
        "system search attribute",
    );
    refused_upsert(
        &s,
        "refused-long",
        json!({ "Region": "x".repeat(17) }),
        "17 bytes",
    );
    refused_upsert(
        &s,
        "refused-tags",
        json!({ "Tags": ["ok", "y".repeat(17)] }),
        "Tags[1]",
    );
    let (_, described) = s.get("/api/workflows/up-1");
    assert_eq!(
        described["search_attributes"],
        json!({ "Tier": 2, "Tags": ["a", "b"] })
    );
    // Registering the attribute lets the task's retry (after its backoff)
    // through.
    assert_eq!(register(&s, "default", "Colour", "keyword").0, 201);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let retry = loop {
        let (status, polled) = s.poll("workflow", "default", &colour, "p-colour-retry", 5000);
        assert_eq!(status, 200, "{polled}");
        if polled["task"].is_object() {
            break polled["task"].clone();
        }
        assert!(std::time::Instant::now() < deadline, "no retry: {polled}");
    };
    assert_eq!(retry["workflow_task_attempt"], 2, "{retry}");
    let (status, done) = s.complete(&retry, upsert(json!({ "Colour": "red" })));
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["outcome"], "completed", "{done}");
    assert_eq!(
        s.get("/api/workflows/refused-colour").1["search_attributes"]["Colour"],
        "red"
    );
}

#[test]
fn an_upsert_past_max_search_attributes_is_refused_and_the_merged_size_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.sqlite");
    let first = {
        let db = db.clone();
        TestServer::start(Arc::new(MemoryCache::default()), move |c| {
            c.database = Some(db);
            c.request_limits.max_search_attributes = 3;
        })
    };
    for name in ["A", "B", "C"] {
        assert_eq!(register(&first, "default", name, "keyword").0, 201);
    }
    drop(first);
    // The operator lowers the cap to 2: a run may carry 2, not 3.
    let s = TestServer::start(Arc::new(MemoryCache::default()), move |c| {
        c.database = Some(db);
        c.request_limits.max_search_attributes = 2;
        c.store.limits.search_attribute_size_bytes = 64;
    });
    refused_upsert(
        &s,
        "many",
        json!({ "A": "a", "B": "b", "C": "c" }),
        "carry 3 custom search attributes; the limit is 2",
    );
    s.start_workflow("default", "two", "sa");
    let task = next_task(&s, "sa", "m1");
    let (status, done) = s.complete(&task, upsert(json!({ "A": "a", "B": "b" })));
    assert_eq!(status, 200, "at the cap: {done}");

    // search_attribute_size_bytes (64): {"A":"…"} is 8 bytes plus the value.
    s.start_workflow("default", "edge", "sa2");
    let task = next_task(&s, "sa2", "e1");
    let (status, done) = s.complete(&task, upsert(json!({ "A": "x".repeat(56) })));
    assert_eq!(
        (status, &done["run_status"]),
        (200, &json!("running")),
        "{done}"
    );
    s.start_workflow("default", "over", "sa3");
    let task = next_task(&s, "sa3", "o1");
    let (status, done) = s.complete(&task, upsert(json!({ "A": "x".repeat(57) })));
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done["structural_limit"]["structural_limit_kind"], "search_attribute_size_bytes",
        "{done}"
    );
    assert_eq!(done["structural_limit"]["structural_limit_value"], 65);
    let (_, described) = s.get("/api/workflows/over");
    assert_eq!(described["status"], "failed");
    assert_eq!(
        described["failures"][0]["failure_category"],
        "structural_limit"
    );
    assert_eq!(
        described["failures"][0]["structural_limit_kind"],
        "search_attribute_size_bytes"
    );
    assert_eq!(
        described["search_attributes"],
        json!({}),
        "nothing was saved"
    );
}
