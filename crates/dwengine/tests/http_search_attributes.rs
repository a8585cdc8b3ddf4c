//! Search-attribute registration over loopback HTTP: the per-namespace cap
//! at its edge (default 100, 0 disables), the public server's conflicts,
//! and starts that may only carry registered attributes of the right type.

mod support;

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
