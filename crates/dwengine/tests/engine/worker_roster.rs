//! The operator's worker roster over loopback HTTP: `GET /api/workers`
//! (namespace-scoped, filtered by task queue and status, paged by signed
//! tokens), `GET /api/workers/{id}` and `DELETE /api/workers/{id}`.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwengine::store::worker_roster::{Drain, Liveness};
use dwengine::store::{Store, StoreConfig};
use serde_json::{json, Value};
use support::TestServer;

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |_| {})
}

fn register(s: &TestServer, ns: &str, worker: &str, queue: &str) {
    let (status, body) = s.post_ns(
        ns,
        "/api/worker/register",
        json!({ "worker_id": worker, "task_queue": queue, "runtime": "python" }),
    );
    assert_eq!(status, 200, "{body}");
}

fn ids(page: &Value) -> Vec<String> {
    page["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_roster_lists_a_namespaces_workers_by_id_filters_them_and_pages() {
    let s = server();
    s.namespace("other");
    for (worker, queue) in [("w-c", "q1"), ("w-a", "q1"), ("w-b", "q2"), ("w-d", "q1")] {
        register(&s, "default", worker, queue);
    }
    register(&s, "other", "w-z", "q1");

    let (status, all) = s.get("/api/workers");
    assert_eq!(status, 200, "{all}");
    assert_eq!(ids(&all), ["w-a", "w-b", "w-c", "w-d"]);
    assert_eq!(all["namespace"], "default");
    assert_eq!(all["stale_after_seconds"], 90);
    assert_eq!(all["next_page_token"], Value::Null);
    let a = &all["workers"][0];
    assert_eq!(
        (&a["task_queue"], &a["status"], &a["namespace"]),
        (&json!("q1"), &json!("active"), &json!("default"))
    );
    assert!(
        a["last_heartbeat_at"].as_str().unwrap().ends_with('Z'),
        "{a}"
    );

    let (_, q1) = s.get("/api/workers?task_queue=q1");
    assert_eq!(ids(&q1), ["w-a", "w-c", "w-d"]);
    let (_, active) = s.get("/api/workers?status=active");
    assert_eq!(ids(&active).len(), 4);
    let (_, stale) = s.get("/api/workers?status=stale");
    assert!(ids(&stale).is_empty(), "{stale}");
    let (_, other) = s.get_ns("other", "/api/workers");
    assert_eq!(ids(&other), ["w-z"]);

    // Pages of three, then the rest; every worker once, in order.
    let mut seen = Vec::new();
    let mut path = "/api/workers?page_size=3".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = s.get(&path);
        assert_eq!(status, 200, "{page}");
        pages += 1;
        seen.extend(ids(&page));
        match page["next_page_token"].as_str() {
            Some(token) => path = format!("/api/workers?page_size=3&next_page_token={token}"),
            None => break,
        }
    }
    assert_eq!(
        (pages, seen),
        (
            2,
            vec!["w-a".to_owned(), "w-b".into(), "w-c".into(), "w-d".into()]
        )
    );
}

#[test]
fn bad_filters_and_tokens_are_refused_naming_the_field() {
    let s = server();
    let (status, body) = s.get("/api/workers?status=sleeping");
    assert_eq!(
        (status, &body["reason"]),
        (422, &json!("validation_failed")),
        "{body}"
    );
    assert!(body["validation_errors"]["status"][0]
        .as_str()
        .unwrap()
        .contains("active, draining or stale"));
    let (status, body) = s.get("/api/workers?page_size=0");
    assert_eq!(status, 422, "{body}");
    assert!(body["validation_errors"]["page_size"].is_array(), "{body}");
    let (status, body) = s.get("/api/workers?next_page_token=n:forged:w-a");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["reason"], "invalid_page_token");
}

#[test]
fn describe_and_deregister_answer_for_one_worker_of_the_namespace() {
    let s = server();
    s.namespace("other");
    register(&s, "default", "w-1", "q1");
    let (status, described) = s.get("/api/workers/w-1");
    assert_eq!(status, 200, "{described}");
    assert_eq!(
        (
            &described["worker_id"],
            &described["task_queue"],
            &described["status"]
        ),
        (&json!("w-1"), &json!("q1"), &json!("active"))
    );
    assert_eq!(described["heartbeat_interval_seconds"], 30);
    // Another namespace does not see it, nor remove it.
    let (status, missing) = s.get_ns("other", "/api/workers/w-1");
    assert_eq!(
        (status, &missing["reason"]),
        (404, &json!("worker_not_found"))
    );
    assert_eq!(s.delete_ns("other", "/api/workers/w-1").0, 404);

    let (status, removed) = s.delete_ns("default", "/api/workers/w-1");
    assert_eq!(status, 200, "{removed}");
    assert_eq!(removed["outcome"], "deregistered");
    assert_eq!(s.get("/api/workers/w-1").0, 404);
    let (_, listed) = s.get("/api/workers");
    assert!(ids(&listed).is_empty(), "{listed}");
    assert_eq!(s.delete_ns("default", "/api/workers/w-1").0, 404);
}

#[test]
fn the_store_keeps_a_page_by_liveness_and_after_an_id() {
    let store = Store::open_in_memory(StoreConfig::default()).unwrap();
    for w in ["b", "a", "c"] {
        store.record_worker("ns", w, "q").unwrap();
    }
    let ids = |page: Vec<dwengine::store::worker_roster::WorkerRegistration>| {
        page.into_iter()
            .map(|w| w.worker_id)
            .collect::<BTreeSet<_>>()
    };
    let far = i64::MAX / 2;
    let all = store
        .worker_roster("ns", None, Liveness::Any, Drain::Any, None, 10)
        .unwrap();
    assert_eq!(
        ids(all),
        BTreeSet::from(["a".into(), "b".into(), "c".into()])
    );
    let stale = store
        .worker_roster("ns", None, Liveness::Before(far), Drain::Any, Some("a"), 1)
        .unwrap();
    assert_eq!(ids(stale), BTreeSet::from(["b".to_owned()]));
    let none = store
        .worker_roster("ns", None, Liveness::Since(far), Drain::Any, None, 10)
        .unwrap();
    assert!(none.is_empty());
    let other_queue = store
        .worker_roster("ns", Some("q2"), Liveness::Any, Drain::Any, None, 10)
        .unwrap();
    assert!(other_queue.is_empty());
}

/// The next workflow task of `queue`, leased to `w1` (waits for it).
fn lease(s: &TestServer, queue: &str) -> Value {
    let mut task = Value::Null;
    let mut n = 0;
    assert!(
        support::eventually(std::time::Duration::from_secs(30), || {
            n += 1;
            let (status, answer) =
                s.poll("workflow", "default", queue, &format!("{queue}-{n}"), 200);
            assert_eq!(status, 200, "{answer}");
            task = answer["task"].clone();
            !task.is_null()
        }),
        "no workflow task on {queue}"
    );
    task
}

#[test]
fn task_queues_list_by_name_with_counts_and_describe_pollers_and_leases() {
    let s = server();
    register(&s, "default", "w1", "tq-b");
    s.start_workflow("default", "wf-1", "tq-b");
    s.start_workflow("default", "wf-2", "tq-b");
    s.start_workflow("default", "wf-3", "tq-a");
    let task = lease(&s, "tq-b");

    let (status, listed) = s.get("/api/task-queues");
    assert_eq!(status, 200, "{listed}");
    let names: Vec<&str> = listed["task_queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tq-a", "tq-b"]);
    let b = &listed["task_queues"][1];
    assert_eq!(
        (
            &b["stats"]["workflow_tasks"]["ready_count"],
            &b["stats"]["workflow_tasks"]["leased_count"]
        ),
        (&json!(1), &json!(1)),
        "{b}"
    );
    let (_, first) = s.get("/api/task-queues?page_size=1");
    assert_eq!(first["task_queues"][0]["name"], "tq-a");
    let token = first["next_page_token"].as_str().unwrap();
    let (_, second) = s.get(&format!(
        "/api/task-queues?page_size=1&next_page_token={token}"
    ));
    assert_eq!(second["task_queues"][0]["name"], "tq-b");
    assert_eq!(second["next_page_token"], Value::Null);

    let (status, described) = s.get("/api/task-queues/tq-b");
    assert_eq!(status, 200, "{described}");
    assert_eq!(
        (&described["name"], &described["namespace"]),
        (&json!("tq-b"), &json!("default"))
    );
    assert_eq!(described["pollers"][0]["worker_id"], "w1");
    let leases = described["current_leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "{described}");
    assert_eq!(
        (
            &leases[0]["task_id"],
            &leases[0]["task_kind"],
            &leases[0]["lease_owner"]
        ),
        (&task["task_id"], &json!("workflow"), &json!("w1"))
    );
    assert_eq!(leases[0]["workflow_id"], task["workflow_id"]);

    // A queue only a worker serves is described; an unknown one is a 404;
    // another namespace sees neither.
    register(&s, "default", "w2", "tq-idle");
    let (status, idle) = s.get("/api/task-queues/tq-idle");
    assert_eq!(status, 200, "{idle}");
    assert_eq!(idle["stats"]["workflow_tasks"]["ready_count"], 0);
    assert_eq!(idle["current_leases"], json!([]));
    let (status, missing) = s.get("/api/task-queues/tq-none");
    assert_eq!(
        (status, &missing["reason"]),
        (404, &json!("task_queue_not_found"))
    );
    s.namespace("other");
    let (_, other) = s.get_ns("other", "/api/task-queues");
    assert_eq!(other["task_queues"], json!([]));
    assert_eq!(s.get_ns("other", "/api/task-queues/tq-b").0, 404);
}

#[test]
fn a_queue_description_shows_its_dispatch_budget_when_one_is_configured() {
    let s = server();
    register(&s, "default", "w1", "tq-free");
    s.start_workflow("default", "wf-free", "tq-free");
    let (_, free) = s.get("/api/task-queues/tq-free");
    let workflow = &free["admission"]["workflow_tasks"];
    assert_eq!(
        (
            &workflow["status"],
            &workflow["ready_count"],
            &workflow["active_worker_count"]
        ),
        (&json!("unlimited"), &json!(1), &json!(1)),
        "{free}"
    );
    assert!(
        workflow.get("server_max_dispatches_per_minute").is_none(),
        "{free}"
    );

    let capped = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.dispatches_per_minute = Some(5);
    });
    register(&capped, "default", "w1", "tq-capped");
    capped.start_workflow("default", "wf-capped", "tq-capped");
    let minute = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 60
    };
    let before = minute();
    lease(&capped, "tq-capped");
    let (status, described) = capped.get("/api/task-queues/tq-capped");
    let same_minute = before == minute();
    assert_eq!(status, 200, "{described}");
    let workflow = &described["admission"]["workflow_tasks"];
    assert_eq!(
        (
            &workflow["status"],
            &workflow["server_max_dispatches_per_minute"]
        ),
        (&json!("accepting"), &json!(5)),
        "{described}"
    );
    // The count is this minute's: the lease is in it unless a minute
    // boundary fell between the lease and the read.
    let used = workflow["server_dispatch_count_this_minute"]
        .as_u64()
        .unwrap();
    if same_minute {
        assert_eq!(used, 1, "{described}");
    } else {
        assert!(used <= 1, "{described}");
    }
    assert_eq!(
        workflow["server_remaining_dispatch_capacity"],
        json!(5 - used)
    );
    assert_eq!(
        described["admission"]["activity_tasks"]["server_dispatch_count_this_minute"],
        0
    );
}

#[test]
fn a_history_export_bundle_carries_the_whole_history_under_its_checksum() {
    use sha2::{Digest, Sha256};
    let s = server();
    let started = s.start_workflow("default", "wf-export", "tq-export");
    let run = started["run_id"].as_str().unwrap().to_owned();
    let (status, page) = s.get(&format!("/api/workflows/wf-export/runs/{run}/history"));
    assert_eq!(status, 200, "{page}");
    let (status, bundle) = s.get(&format!(
        "/api/workflows/wf-export/runs/{run}/history/export"
    ));
    assert_eq!(status, 200, "{bundle}");
    assert_eq!(
        (&bundle["schema"], &bundle["schema_version"]),
        (&json!("durable-workflow.v2.history-export"), &json!(1))
    );
    assert_eq!(bundle["workflow"]["instance_id"], "wf-export");
    assert_eq!(bundle["workflow"]["run_id"], json!(run));
    let exported: Vec<&Value> = bundle["history_events"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let paged = page["events"].as_array().unwrap();
    assert_eq!(exported.len(), paged.len());
    for (e, p) in exported.iter().zip(paged) {
        assert_eq!(
            (&e["type"], &e["sequence"]),
            (&p["event_type"], &p["sequence"])
        );
    }
    assert_eq!(
        bundle["workflow"]["last_history_sequence"],
        json!(paged.len())
    );
    let integrity = bundle["integrity"].clone();
    assert_eq!(integrity["checksum_algorithm"], "sha256");
    assert!(integrity.get("signature").is_none(), "{integrity}");
    let mut body = bundle.clone();
    body.as_object_mut().unwrap().remove("integrity");
    let canonical = dwengine::server::history_export::canonical_json(&body);
    assert!(
        canonical.starts_with("{\"activities\":[],\"codec_schemas\":{}"),
        "{canonical}"
    );
    let digest: String = Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(integrity["checksum"], json!(digest));

    let (status, missing) = s.get("/api/workflows/wf-export/runs/999999/history/export");
    assert_eq!(status, 404, "{missing}");
    let (status, other) = s.get_ns(
        "other",
        &format!("/api/workflows/wf-export/runs/{run}/history/export"),
    );
    assert!(status == 404 || status == 400, "{status} {other}");
}
