//! The durable-state quota over loopback HTTP: SQL-counted limits that
//! refuse with a fixed reason, `dw_namespace_durable_state_usage`, and
//! namespace churn that writes no keys.

mod support;

use std::sync::Arc;

use dwengine::cache::MemoryCache;
use dwengine::durable_state::{parse_limits, NamespaceDurableStateQuota};
use serde_json::{json, Value};
use support::TestServer;

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
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
    assert_eq!(
        m["usage"],
        json!({ "workflow_runs": 3, "open_workflow_runs": 2, "worker_registrations": 1 })
    );
    assert_eq!(m["limits"]["open_workflow_runs"], 2);
    assert_eq!(m["remaining"]["workflow_runs"], 0);
    assert_eq!(m["measurement_status"], "available");
    let reasons = m["rejections_by_reason"].as_object().unwrap();
    assert_eq!(reasons.len(), 4);
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
            assert_eq!(m["rejections_by_reason"].as_object().unwrap().len(), 4);
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
