//! Namespaces as a bounded surface: a cap on registrations (held under
//! racing registrations), deletion of a namespace that holds nothing, a
//! paged list with signed tokens, and names that refuse separators and
//! deceptive characters with a 422 naming the field.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::TestServer;

fn server(max_namespaces: u64) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.max_namespaces = max_namespaces;
    })
}

fn register(s: &TestServer, name: &str) -> (u16, Value) {
    s.post("/api/namespaces", json!({ "name": name }))
}

fn names(page: &Value) -> Vec<String> {
    page["namespaces"]
        .as_array()
        .unwrap_or_else(|| panic!("no namespaces in {page}"))
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn registrations_stop_at_the_cap_and_a_repeat_of_a_registered_name_is_still_answered() {
    let s = server(4);
    for name in ["a", "b", "c"] {
        assert_eq!(register(&s, name).0, 201, "{name}");
    }
    // default + a + b + c = 4, the cap.
    let (status, refused) = register(&s, "d");
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "namespace_limit_exceeded");
    assert_eq!(
        (&refused["namespaces"], &refused["limit"]),
        (&json!(4), &json!(4))
    );
    assert_eq!(refused["config_key"], "DW_MAX_NAMESPACES");
    assert_eq!(s.get("/api/namespaces/d").0, 404, "nothing registered");
    let (status, again) = register(&s, "a");
    assert_eq!(
        (status, &again["outcome"]),
        (200, &json!("already_registered"))
    );
    // Deleting one makes room for exactly one.
    assert_eq!(s.delete_ns("default", "/api/namespaces/c").0, 200);
    assert_eq!(register(&s, "d").0, 201);
    assert_eq!(register(&s, "e").0, 409);
    // 0 turns the cap off.
    let open = server(0);
    for i in 0..10 {
        assert_eq!(register(&open, &format!("n{i}")).0, 201);
    }
}

#[test]
fn racing_registrations_cannot_pass_the_cap_together() {
    let s = Arc::new(server(3));
    let racers: Vec<_> = (0..12)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || register(&s, &format!("racer-{i}")).0)
        })
        .collect();
    let mut statuses: Vec<u16> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    statuses.sort_unstable();
    // default holds one place: two of the twelve get in.
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(names(&s.get("/api/namespaces").1).len(), 3);
}

#[test]
fn a_namespace_that_holds_nothing_is_deleted_and_one_that_holds_a_run_or_default_is_not() {
    let s = server(100);
    assert_eq!(register(&s, "empty").0, 201);
    // Used once, so this node remembers it as registered.
    let (status, _) = s.get_ns("empty", "/api/workflows");
    assert_eq!(status, 200);
    let (status, deleted) = s.delete_ns("default", "/api/namespaces/empty");
    assert_eq!(
        (status, &deleted["outcome"]),
        (200, &json!("deleted")),
        "{deleted}"
    );
    assert_eq!(s.get("/api/namespaces/empty").0, 404);
    let (status, refused) = s.get_ns("empty", "/api/workflows");
    assert_eq!(
        (status, &refused["reason"]),
        (404, &json!("namespace_not_found")),
        "a deleted namespace takes no more requests: {refused}"
    );
    let (status, missing) = s.delete_ns("default", "/api/namespaces/empty");
    assert_eq!(
        (status, &missing["reason"]),
        (404, &json!("namespace_not_found"))
    );

    s.start_workflow("busy", "wf-1", "q");
    let (status, refused) = s.delete_ns("default", "/api/namespaces/busy");
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "namespace_not_empty");
    assert_eq!(refused["holds"], json!(["workflow_runs"]));
    assert_eq!(s.get("/api/namespaces/busy").0, 200, "still registered");

    let (status, refused) = s.delete_ns("default", "/api/namespaces/default");
    assert_eq!(
        (status, &refused["reason"]),
        (409, &json!("namespace_protected"))
    );
}

#[test]
fn the_list_is_paged_in_name_order_with_signed_tokens() {
    let s = server(100);
    for name in ["e", "b", "d", "a", "c"] {
        assert_eq!(register(&s, name).0, 201);
    }
    let mut seen = Vec::new();
    let mut path = "/api/namespaces?page_size=2".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = s.get(&path);
        assert_eq!(status, 200, "{page}");
        pages += 1;
        let got = names(&page);
        assert!(got.len() <= 2, "{page}");
        seen.extend(got);
        match page["next_page_token"].as_str() {
            Some(token) => path = format!("/api/namespaces?page_size=2&next_page_token={token}"),
            None => break,
        }
    }
    assert_eq!(seen, ["a", "b", "c", "d", "default", "e"]);
    assert_eq!(pages, 3);
    // Unpaged requests get the first 100.
    let (_, all) = s.get("/api/namespaces");
    assert_eq!(names(&all).len(), 6);
    assert_eq!(all["next_page_token"], Value::Null);
    // A forged token (base64 of a bare name) is refused.
    let forged = "bjpjMGZmZWU6Yw==";
    let (status, refused) = s.get(&format!("/api/namespaces?next_page_token={forged}"));
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = s.get("/api/namespaces?page_size=0");
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["validation_errors"]["page_size"].is_array(),
        "{refused}"
    );
}

#[test]
fn names_refuse_separators_parent_references_and_deceptive_characters_naming_the_field() {
    let s = server(100);
    for name in [
        "a/b",
        "../etc",
        "x..y",
        "back\\slash",
        "bell\u{7}",
        "nul\u{0}",
        "ansi\u{1b}[31m",
        "zero\u{200B}width",
        "rtl\u{202E}x",
        "bom\u{FEFF}",
    ] {
        let (status, refused) = register(&s, name);
        assert_eq!(status, 422, "{name:?}: {refused}");
        assert_eq!(refused["reason"], "validation_failed");
        assert!(
            refused["validation_errors"]["name"].is_array(),
            "{name:?}: {refused}"
        );
    }
    assert_eq!(register(&s, "tenant-ü.eu").0, 201);
}
