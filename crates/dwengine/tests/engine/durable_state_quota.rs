//! The durable-state quota over loopback HTTP: SQL-counted limits that
//! refuse with a fixed reason, `dw_namespace_durable_state_usage`, and
//! namespace churn that writes no keys.

use crate::support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwengine::durable_state::{parse_limits, DurableResource, NamespaceDurableStateQuota};
use serde_json::{json, Value};
use support::TestServer;

/// Resources of the fixed inventory.
const INVENTORY: usize = 7;

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        // One test churns a thousand namespaces: past the default cap.
        c.max_namespaces = 0;
        c.durable_state_limits = parse_limits(
            "tenant:open_workflow_runs=2,tenant:workflow_runs=3,tenant:worker_registrations=1",
        )
        .unwrap();
    })
}

fn start(s: &TestServer, id: &str) -> (u16, Value) {
    s.post_ns(
        "tenant",
        "/api/workflows",
        json!({ "workflow_id": id, "workflow_type": "T", "task_queue": "q" }),
    )
}

/// The refusal's `Retry-After` header is the body's `retry_after_seconds`,
/// and absent where the body gives no hint.
fn assert_header_matches_body(retry_after: Option<String>, body: &Value) {
    let header = retry_after.map(|v| Value::from(v.parse::<u64>().unwrap()));
    assert_eq!(
        header.unwrap_or(Value::Null),
        body["retry_after_seconds"],
        "{body}"
    );
}

fn start_with_header(s: &TestServer, id: &str) -> (u16, Value, Option<String>) {
    s.post_ns_header(
        "tenant",
        "/api/workflows",
        json!({ "workflow_id": id, "workflow_type": "T", "task_queue": "q" }),
        "retry-after",
    )
}

fn metric(s: &TestServer, ns: &str) -> Value {
    let (status, body) = s.get(&format!("/api/system/metrics?namespace={ns}"));
    assert_eq!(status, 200, "{body}");
    let disclosed = &body["cardinality"]["metrics"]["dw_namespace_durable_state_usage"];
    assert_eq!(
        disclosed["namespace"]["cardinality"],
        "request_scope_not_label"
    );
    assert_eq!(
        disclosed["reason"]["cardinality"],
        "finite_durable_state_reasons"
    );
    body["metrics"]["dw_namespace_durable_state_usage"].clone()
}

#[test]
fn open_runs_runs_and_registrations_are_capped_by_sql_counts() {
    let s = server();
    s.namespace("tenant");
    assert_eq!(start(&s, "a").0, 201);
    assert_eq!(start(&s, "b").0, 201);
    let (status, refused, retry_after) = start_with_header(&s, "c");
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["reason"], "namespace_open_workflow_runs_exhausted");
    assert_eq!(refused["retry_after_seconds"], 60);
    assert_header_matches_body(retry_after, &refused);
    assert_eq!(refused["resource"], "open_workflow_runs");
    assert_eq!(
        (&refused["current_value"], &refused["configured_limit"]),
        (&json!(3), &json!(2))
    );
    assert_eq!(refused["retryable"], true);

    // Closing a run frees an open-run slot; the run row stays counted.
    let (_, polled) = s.poll("workflow", "tenant", "q", "p1", 1000);
    let (status, done) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "1" } }]),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(start(&s, "c").0, 201);
    let (status, refused, retry_after) = start_with_header(&s, "d");
    assert_eq!(status, 429);
    // Three runs exist: both limits are reached; the first exhausted in inventory order is named.
    assert_eq!(refused["reason"], "namespace_workflow_runs_exhausted");
    assert_eq!(refused["retryable"], false);
    // Run rows are retained: waiting cannot help, so neither the body nor the header hints.
    assert!(refused["retry_after_seconds"].is_null(), "{refused}");
    assert_header_matches_body(retry_after, &refused);

    let register = |worker: &str| {
        s.post_ns_header(
            "tenant",
            "/api/worker/register",
            json!({ "worker_id": worker, "task_queue": "q" }),
            "retry-after",
        )
    };
    assert_eq!(register("w1").0, 200);
    assert_eq!(
        register("w1").0,
        200,
        "refreshing a registration adds nothing"
    );
    let (status, refused, retry_after) = register("w2");
    assert_eq!(status, 429, "{refused}");
    assert_eq!(
        refused["reason"],
        "namespace_worker_registrations_exhausted"
    );
    assert_eq!(refused["retry_after_seconds"], 60);
    assert_header_matches_body(retry_after, &refused);

    let m = metric(&s, "tenant");
    assert_eq!(m["configured"], true);
    for (resource, used) in [
        ("workflow_runs", 3),
        ("open_workflow_runs", 2),
        ("worker_registrations", 1),
        ("schedules", 0),
        ("workflow_streams", 0),
        ("workflow_stream_items", 0),
        ("service_catalog_entries", 0),
    ] {
        assert_eq!(m["usage"][resource], used, "{resource}: {m}");
    }
    assert_eq!(m["usage"].as_object().unwrap().len(), INVENTORY);
    assert_eq!(m["limits"]["open_workflow_runs"], 2);
    assert_eq!(m["remaining"]["workflow_runs"], 0);
    assert_eq!(m["measurement_status"], "available");
    let reasons = m["rejections_by_reason"].as_object().unwrap();
    assert_eq!(reasons.len(), INVENTORY + 1);
    assert_eq!(
        m["rejections_by_reason"]["namespace_durable_state_quota_unavailable"],
        0
    );
    let refusals: u64 = reasons.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(m["rejections_this_minute"], refusals);
    // Three refusals happened; a minute boundary between them can only lower this minute's count.
    assert!((1..=3).contains(&refusals), "{m}");
    assert!(s.keys(NamespaceDurableStateQuota::PREFIX) <= 2 * 3 * 2);
}

#[test]
fn namespaces_without_a_quota_report_the_inventory_and_write_no_keys() {
    let s = server();
    for i in 0..1_000 {
        let ns = format!("free-{i}");
        s.start_workflow(&ns, "w", "q");
        if i % 250 == 0 {
            let m = metric(&s, &ns);
            assert_eq!(m["configured"], false);
            assert_eq!(m["usage"]["open_workflow_runs"], 1);
            assert!(m["limits"]["open_workflow_runs"].is_null());
            assert_eq!(
                m["rejections_by_reason"].as_object().unwrap().len(),
                INVENTORY + 1
            );
        }
    }
    assert_eq!(s.keys(NamespaceDurableStateQuota::PREFIX), 0);
}

/// A schedule's fire goes through the start path, so the durable-state
/// quota refuses it like any start: the due sweep counts a failure, the
/// schedule moves on, and the refusal is counted in the metric.
#[test]
fn a_schedule_fire_is_refused_by_the_durable_state_quota() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.durable_state_limits = parse_limits("tenant:open_workflow_runs=1").unwrap();
        // The background sweep stays out of the way; the test fires explicitly.
        c.schedule_sweep.interval = std::time::Duration::from_secs(3600);
    });
    s.namespace("tenant");
    let (status, created) = s.post_ns(
        "tenant",
        "/api/schedules",
        json!({
            "schedule_id": "hourly", "overlap_policy": "allow_all",
            "spec": { "intervals": [{ "every": "PT1H" }] },
            "action": { "workflow_type": "report", "task_queue": "reports" },
        }),
    );
    assert_eq!(status, 201, "{created}");

    // The first fire opens the namespace's only run slot.
    let (status, fired) = s.post_ns("tenant", "/api/schedules/hourly/trigger", json!({}));
    assert_eq!(
        (status, &fired["outcome"]),
        (200, &json!("triggered")),
        "{fired}"
    );

    // A manual trigger past the quota is refused with the start's reason.
    let (status, refused) = s.post_ns("tenant", "/api/schedules/hourly/trigger", json!({}));
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["reason"], "namespace_open_workflow_runs_exhausted");
    assert_eq!(refused["configured_limit"], 1);

    // A due fire from the sweep is refused too: counted as a failure, no run.
    let engine = s.running.engine();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let far = now + 10 * 3_600_000;
    assert_eq!(engine.fire_due_schedules(far).unwrap(), 0);
    let (_, described) = s.get_ns("tenant", "/api/schedules/hourly");
    assert_eq!(described["fires_count"], 1, "{described}");
    assert_eq!(described["failures_count"], 2, "{described}");
    let (_, runs) = s.get_ns("tenant", "/api/workflows");
    assert_eq!(
        runs["workflows"].as_array().map(Vec::len),
        Some(1),
        "only the first fire started a run: {runs}"
    );

    let m = metric(&s, "tenant");
    assert_eq!(m["usage"]["open_workflow_runs"], 1);
    let counted = m["rejections_by_reason"]["namespace_open_workflow_runs_exhausted"]
        .as_u64()
        .unwrap();
    assert!((1..=2).contains(&counted), "{m}");
}

/// Asserts a 429 refusal of `resource` at `limit` (attempted `current`).
fn assert_exhausted(status: u16, body: &Value, resource: &str, current: u64, limit: u64) {
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        body["reason"],
        format!("namespace_{resource}_exhausted"),
        "{body}"
    );
    assert_eq!(body["resource"], resource);
    assert_eq!(
        (&body["current_value"], &body["configured_limit"]),
        (&json!(current), &json!(limit)),
        "{body}"
    );
}

fn schedule(s: &TestServer, ns: &str, id: &str) -> (u16, Value, Option<String>) {
    s.post_ns_header(
        ns,
        "/api/schedules",
        json!({
            "schedule_id": id,
            "spec": { "intervals": [{ "every": "PT1H" }] },
            "action": { "workflow_type": "report", "task_queue": "reports" },
        }),
        "retry-after",
    )
}

/// Refusals of `reasons` this minute, each at most `most` (a minute
/// boundary between a refusal and the read can only lower a count).
fn counted(m: &Value, reasons: &[&str], most: u64) -> u64 {
    reasons
        .iter()
        .map(|r| {
            let n = m["rejections_by_reason"][*r].as_u64().unwrap();
            assert!(n <= most, "{r}: {m}");
            n
        })
        .sum()
}

#[test]
fn schedules_and_service_catalog_entries_are_capped_at_their_edge() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.durable_state_limits =
            parse_limits("tenant:schedules=2,tenant:service_catalog_entries=2").unwrap();
    });
    s.namespace("tenant");
    assert_eq!(schedule(&s, "tenant", "s1").0, 201);
    assert_eq!(schedule(&s, "tenant", "s2").0, 201, "at the quota passes");
    let (status, refused, retry_after) = schedule(&s, "tenant", "s3");
    assert_exhausted(status, &refused, "schedules", 3, 2);
    // Schedules stay until deleted: waiting cannot help, so no hint.
    assert_eq!(refused["retryable"], false);
    assert!(refused["retry_after_seconds"].is_null(), "{refused}");
    assert!(retry_after.is_none());
    // The refused create left no row, and a duplicate at the quota is a
    // conflict, not a quota refusal.
    let (status, _) = s.get_ns("tenant", "/api/schedules/s3");
    assert_eq!(status, 404);
    assert_eq!(schedule(&s, "tenant", "s1").0, 409);
    // Deleting one frees its slot; another namespace is not limited.
    let (status, body) = s.delete_ns("tenant", "/api/schedules/s1");
    assert!(status < 300, "{body}");
    assert_eq!(schedule(&s, "tenant", "s3").0, 201);
    assert_eq!(schedule(&s, "default", "free").0, 201);

    let create = |path: &str, body: Value| s.post_ns("tenant", path, body);
    assert_eq!(
        create(
            "/api/service-endpoints",
            json!({ "endpoint_name": "billing" })
        )
        .0,
        201
    );
    assert_eq!(
        create(
            "/api/service-endpoints/billing/services",
            json!({ "service_name": "invoices" })
        )
        .0,
        201,
        "at the quota passes"
    );
    let operation = json!({ "operation_name": "charge", "operation_mode": "sync",
        "handler_binding_kind": "start_workflow",
        "handler_binding": { "workflow_type": "Charge", "task_queue": "payments" } });
    let (status, refused) = create(
        "/api/service-endpoints/billing/services/invoices/operations",
        operation.clone(),
    );
    assert_exhausted(status, &refused, "service_catalog_entries", 3, 2);
    assert_eq!(refused["retryable"], false);
    let (status, body) = create(
        "/api/service-endpoints",
        json!({ "endpoint_name": "billing" }),
    );
    assert_eq!(status, 409, "a duplicate is a conflict: {body}");
    let (status, listed) = s.get_ns(
        "tenant",
        "/api/service-endpoints/billing/services/invoices/operations",
    );
    assert_eq!(status, 200, "{listed}");
    assert!(
        !listed.to_string().contains("charge"),
        "the refused entry was undone: {listed}"
    );

    let m = metric(&s, "tenant");
    assert_eq!(m["usage"]["schedules"], 2);
    assert_eq!(m["usage"]["service_catalog_entries"], 2);
    assert_eq!(m["limits"]["schedules"], 2);
    assert_eq!(m["remaining"]["service_catalog_entries"], 0);
    let refusals = counted(
        &m,
        &[
            "namespace_schedules_exhausted",
            "namespace_service_catalog_entries_exhausted",
        ],
        1,
    );
    assert!((1..=2).contains(&refusals), "{m}");
    assert_eq!(metric(&s, "default")["usage"]["schedules"], 1);
}

#[test]
fn streams_and_their_items_are_capped_at_their_edge_from_clients_and_workflow_code() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.durable_state_limits =
            parse_limits("tenant:workflow_streams=2,tenant:workflow_stream_items=5").unwrap();
    });
    let started = s.start_workflow("tenant", "producer", "q");
    let path = format!(
        "/api/workflows/producer/runs/{}/streams",
        started["run_id"].as_str().unwrap()
    );
    let item = |n: u64| {
        json!({ "payload": { "codec": "json", "blob": n.to_string() },
                               "idempotency_key": format!("k{n}") })
    };
    let append = |name: &str, items: Vec<Value>| {
        s.post_ns_header(
            "tenant",
            &format!("{path}/{name}/items"),
            json!({ "items": items }),
            "retry-after",
        )
    };
    let (status, body, _) = append("a", vec![item(0), item(1), item(2)]);
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = append("b", vec![item(3), item(4)]);
    assert_eq!(
        status, 200,
        "two streams and five items: at the quota passes: {body}"
    );

    let (status, refused, retry_after) = append("a", vec![item(5)]);
    assert_exhausted(status, &refused, "workflow_stream_items", 6, 5);
    // Ended streams expire and are reclaimed: waiting can help.
    assert_eq!(refused["retryable"], true);
    assert_eq!(refused["retry_after_seconds"], 60);
    assert_eq!(retry_after.as_deref(), Some("60"));
    // A retry of stored items adds nothing and passes at the quota.
    let (status, body, _) = append("a", vec![item(0), item(1)]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deduped"], 2);
    // A third stream, even an empty one a close would create, is refused.
    let (status, refused, _) = append("c", vec![]);
    assert_eq!(status, 422, "an empty append is invalid: {refused}");
    let (status, refused) = s.post_ns("tenant", &format!("{path}/c/close"), json!({}));
    assert_exhausted(status, &refused, "workflow_streams", 3, 2);
    // The refused writes were undone.
    let (_, a) = s.get_ns("tenant", &format!("{path}/a"));
    assert_eq!(a["stream"]["total_items"], 3, "{a}");
    let (status, _) = s.get_ns("tenant", &format!("{path}/c"));
    assert_eq!(status, 404);

    // Workflow code's appends count too: the completion is refused whole.
    let (_, polled) = s.poll("workflow", "tenant", "q", "p1", 1000);
    let directive = json!({ "type": "record_side_effect",
        "result": { "codec": "json", "blob": "null" },
        "workflow_stream": { "operation": "append", "stream_name": "b",
                             "items": [item(9)] } });
    let (status, refused) = s.complete(&polled["task"], json!([directive]));
    assert_exhausted(status, &refused, "workflow_stream_items", 6, 5);
    let (_, b) = s.get_ns("tenant", &format!("{path}/b"));
    assert_eq!(b["stream"]["total_items"], 2, "{b}");
    // A completion that closes a stream raises nothing and passes.
    let close = json!({ "type": "record_side_effect",
        "result": { "codec": "json", "blob": "null" },
        "workflow_stream": { "operation": "close", "stream_name": "b" } });
    let (status, body) = s.complete(&polled["task"], json!([close]));
    assert_eq!(status, 200, "{body}");

    let m = metric(&s, "tenant");
    assert_eq!(m["usage"]["workflow_streams"], 2);
    assert_eq!(m["usage"]["workflow_stream_items"], 5);
    assert_eq!(m["remaining"]["workflow_stream_items"], 0);
    let refusals = counted(
        &m,
        &[
            "namespace_workflow_streams_exhausted",
            "namespace_workflow_stream_items_exhausted",
        ],
        2,
    );
    assert!((1..=3).contains(&refusals), "{m}");
}

#[test]
fn server_wide_defaults_cap_every_namespace_and_overrides_win() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.durable_state_defaults
            .set(DurableResource::Schedules, Some(1));
        c.durable_state_limits = parse_limits("big:schedules=2").unwrap();
    });
    for ns in ["a", "b", "big"] {
        s.namespace(ns);
    }
    for ns in ["a", "b"] {
        assert_eq!(schedule(&s, ns, "one").0, 201);
        let (status, refused, _) = schedule(&s, ns, "two");
        assert_exhausted(status, &refused, "schedules", 2, 1);
    }
    assert_eq!(schedule(&s, "big", "one").0, 201);
    assert_eq!(schedule(&s, "big", "two").0, 201);
    let (status, refused, _) = schedule(&s, "big", "three");
    assert_exhausted(status, &refused, "schedules", 3, 2);
    let m = metric(&s, "a");
    assert_eq!(m["configured"], true);
    assert_eq!(m["limits"]["schedules"], 1);
    assert!(m["limits"]["workflow_runs"].is_null());
}
