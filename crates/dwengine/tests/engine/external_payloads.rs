//! The runtime external payload transport over loopback HTTP: discovery,
//! upload and fetch with their integrity headers, the per-namespace quota
//! at its edges (at the limit passes, one over is refused with its fixed
//! reason), references admitted into history only when they name a stored
//! payload, `dw_runtime_external_payload_namespace_usage`, and the
//! `server:external-payload-quota:` family's bound under refusal churn on
//! the in-process cache and on Redis.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::{Cache, MemoryCache};
use dwengine::external_payloads::{parse_namespace_limits, RuntimeExternalPayloadQuota};
use dwengine::server::ServerConfig;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{cache_variants, SharedCache, TestServer};

const UPLOAD: &str = "/api/external-payloads/v1";

fn enabled(c: &mut ServerConfig) {
    c.external_payloads.threshold_bytes = 64;
    c.external_payloads.max_payload_bytes = 1024;
}

fn server(tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        enabled(c);
        tweak(c);
    })
}

fn sha(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
}

fn answer(result: Result<ureq::Response, ureq::Error>) -> ureq::Response {
    match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport error: {e}"),
    }
}

/// Uploads `data` declaring `codec`, `size` and `sha256`: (status, body).
fn upload_as(
    s: &TestServer,
    ns: &str,
    data: &[u8],
    codec: &str,
    size: &str,
    sha256: &str,
) -> (u16, Value) {
    let (status, body, _) = upload_as_with_retry_after(s, ns, data, codec, size, sha256);
    (status, body)
}

/// As [`upload_as`], also returning the `Retry-After` header.
fn upload_as_with_retry_after(
    s: &TestServer,
    ns: &str,
    data: &[u8],
    codec: &str,
    size: &str,
    sha256: &str,
) -> (u16, Value, Option<String>) {
    let response = answer(
        agent()
            .post(&format!("{}{UPLOAD}", s.base))
            .set("x-namespace", ns)
            .set("content-type", "application/octet-stream")
            .set("x-durable-workflow-payload-codec", codec)
            .set("x-durable-workflow-payload-size", size)
            .set("x-durable-workflow-payload-sha256", sha256)
            .send_bytes(data),
    );
    let retry_after = response.header("retry-after").map(str::to_owned);
    (
        response.status(),
        response.into_json().unwrap_or(Value::Null),
        retry_after,
    )
}

fn upload(s: &TestServer, ns: &str, data: &[u8]) -> (u16, Value) {
    upload_as(s, ns, data, "avro", &data.len().to_string(), &sha(data))
}

/// Uploads `data` expecting a quota refusal whose `Retry-After` header is
/// the body's `retry_after_seconds`; returns the body.
fn refused_upload(s: &TestServer, ns: &str, data: &[u8]) -> Value {
    let (status, body, retry_after) =
        upload_as_with_retry_after(s, ns, data, "avro", &data.len().to_string(), &sha(data));
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["retry_after_seconds"], 60, "{body}");
    assert_eq!(retry_after.as_deref(), Some("60"), "{body}");
    body
}

/// Fetches `id` in `ns`: (status, integrity headers, body bytes).
fn fetch(s: &TestServer, ns: &str, id: &str) -> (u16, [String; 3], Vec<u8>) {
    let response = answer(
        agent()
            .get(&format!("{}{UPLOAD}/{id}", s.base))
            .set("x-namespace", ns)
            .call(),
    );
    let header = |name| response.header(name).unwrap_or("").to_owned();
    let headers = [
        header("x-durable-workflow-payload-codec"),
        header("x-durable-workflow-payload-size"),
        header("x-durable-workflow-payload-sha256"),
    ];
    let status = response.status();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut response.into_reader(), &mut bytes).unwrap();
    (status, headers, bytes)
}

fn usage(s: &TestServer, ns: &str) -> Value {
    let (status, body) = s.get(&format!("/api/system/metrics?namespace={ns}"));
    assert_eq!(status, 200, "{body}");
    let disclosed = &body["cardinality"]["metrics"]["dw_runtime_external_payload_namespace_usage"];
    assert_eq!(
        disclosed["namespace"]["cardinality"],
        "request_scope_not_label"
    );
    assert_eq!(
        disclosed["reason"]["cardinality"],
        "finite_three_reason_inventory"
    );
    body["metrics"]["dw_runtime_external_payload_namespace_usage"].clone()
}

#[test]
fn discovery_advertises_the_transport_only_when_it_is_on() {
    let off = TestServer::start(Arc::new(MemoryCache::default()), |_| {});
    let (_, info) = off.get("/api/cluster/info");
    assert_eq!(
        info["worker_protocol"]["server_capabilities"]["runtime_external_payload_transport"],
        false
    );
    assert_eq!(
        info["namespace"]["external_payload_storage"]["enabled"],
        false
    );
    let (status, refused) = upload(&off, "default", b"payload");
    assert_eq!(status, 503, "{refused}");
    assert_eq!(refused["reason"], "external_payload_unavailable");

    let on = server(|_| {});
    let (_, info) = on.get("/api/cluster/info");
    assert_eq!(
        info["worker_protocol"]["server_capabilities"]["runtime_external_payload_transport"],
        true
    );
    let policy = &info["namespace"]["external_payload_storage"];
    assert_eq!(policy["status"], "available");
    assert_eq!(policy["threshold_bytes"], 64);
    let transport = &policy["transport"];
    assert_eq!(
        transport["schema"],
        "durable-workflow.v2.runtime-external-payload-transport.v1"
    );
    assert_eq!(transport["version"], 1);
    assert_eq!(transport["mode"], "authenticated_namespace_runtime");
    assert_eq!(
        transport["reference_schema"],
        "durable-workflow.v2.runtime-external-payload-reference.v1"
    );
    assert_eq!(
        transport["upload"],
        json!({ "method": "POST", "path": "/api/external-payloads/v1",
                "content_type": "application/octet-stream" })
    );
    assert_eq!(
        transport["fetch"]["path_template"],
        "/api/external-payloads/v1/{referenceId}"
    );
    assert_eq!(transport["limits"]["max_payload_bytes"], 1024);
}

#[test]
fn upload_and_fetch_round_trip_with_integrity_headers() {
    let s = server(|_| {});
    s.namespace("other");
    let data = vec![b'x'; 300];
    let (status, body) = upload(&s, "default", &data);
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["schema"],
        "durable-workflow.v2.runtime-external-payload-upload.v1"
    );
    assert_eq!(body["transport_version"], 1);
    let reference = body["reference"].clone();
    assert_eq!(reference.as_object().unwrap().len(), 5, "{reference}");
    assert_eq!(
        reference["schema"],
        "durable-workflow.v2.runtime-external-payload-reference.v1"
    );
    assert_eq!(reference["codec"], "avro");
    assert_eq!(reference["size_bytes"], 300);
    assert_eq!(reference["sha256"], sha(&data));
    let id = reference["reference_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("ep_") && id.len() == 29, "{id}");

    // The same bytes again: the same reference, not a second row.
    let (status, again) = upload(&s, "default", &data);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["reference"], reference);
    assert_eq!(again["deduplicated"], true);

    let (status, headers, bytes) = fetch(&s, "default", &id);
    assert_eq!(status, 200);
    assert_eq!(bytes, data);
    assert_eq!(headers, ["avro".to_owned(), "300".to_owned(), sha(&data)]);
    // Namespaces do not see each other's payloads.
    let (status, _, body) = fetch(&s, "other", &id);
    assert_eq!(status, 404);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["reason"], "external_payload_not_found");
    assert_eq!(fetch(&s, "default", "ep_nonsense").0, 404);

    // Bad declarations are refused with the SDK's reasons and store nothing.
    let size = data.len().to_string();
    for (codec, size, sha256, reason) in [
        (
            "avro",
            "299",
            sha(&data),
            "external_payload_integrity_mismatch",
        ),
        (
            "avro",
            size.as_str(),
            sha(b"other"),
            "external_payload_integrity_mismatch",
        ),
        (
            "avro",
            size.as_str(),
            sha(&data).to_uppercase(),
            "external_payload_integrity_mismatch",
        ),
        (
            "json",
            size.as_str(),
            sha(&data),
            "external_payload_unsupported",
        ),
    ] {
        let (status, refused) = upload_as(&s, "other", &data, codec, size, &sha256);
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["reason"], reason, "{refused}");
    }
    assert_eq!(usage(&s, "other")["used_objects"], 0);

    // max_payload_bytes: at the limit passes, one byte over is a 413.
    assert_eq!(upload(&s, "default", &vec![b'y'; 1024]).0, 201);
    let (status, refused) = upload(&s, "default", &vec![b'y'; 1025]);
    assert_eq!(status, 413, "{refused}");
    assert_eq!(refused["reason"], "external_payload_oversized");
    assert_eq!(refused["max_payload_bytes"], 1024);
    let m = usage(&s, "default");
    assert_eq!(
        (&m["used_objects"], &m["used_bytes"]),
        (&json!(2), &json!(1324))
    );
}

#[test]
fn the_quota_passes_at_its_limit_and_refuses_one_over_with_a_fixed_reason() {
    let s = server(|c| {
        // 0 turns the default quota off, so "free" has none.
        c.external_payloads.max_bytes_per_namespace = 0;
        c.external_payloads.max_objects_per_namespace = 0;
        c.external_payloads.namespace_limits =
            parse_namespace_limits("bytes:max_bytes=100,objects:max_objects=2").unwrap();
    });
    for ns in ["bytes", "objects", "free"] {
        s.namespace(ns);
    }
    assert_eq!(upload(&s, "bytes", &[1; 40]).0, 201);
    assert_eq!(upload(&s, "bytes", &[2; 60]).0, 201, "exactly at 100 bytes");
    let refused = refused_upload(&s, "bytes", &[3; 1]);
    assert_eq!(
        refused["reason"],
        "external_payload_namespace_bytes_exhausted"
    );
    assert_eq!(refused["resource"], "bytes");
    assert_eq!(
        (&refused["current_value"], &refused["configured_limit"]),
        (&json!(100), &json!(100))
    );
    assert_eq!(refused["retryable"], true);
    // Stored bytes are not charged twice: a repeat upload still answers.
    assert_eq!(upload(&s, "bytes", &[1; 40]).0, 200);

    assert_eq!(upload(&s, "objects", &[1; 10]).0, 201);
    assert_eq!(upload(&s, "objects", &[2; 10]).0, 201);
    let refused = refused_upload(&s, "objects", &[3; 10]);
    assert_eq!(
        refused["reason"],
        "external_payload_namespace_objects_exhausted"
    );

    let m = usage(&s, "bytes");
    assert_eq!(m["configured"], true);
    assert_eq!(
        (&m["max_bytes"], &m["max_objects"]),
        (&json!(100), &Value::Null)
    );
    assert_eq!(
        (&m["used_bytes"], &m["used_objects"]),
        (&json!(100), &json!(2))
    );
    assert_eq!(m["remaining_bytes"], 0);
    assert_eq!(m["measurement_status"], "available");
    let reasons = m["rejections_by_reason"].as_object().unwrap();
    assert_eq!(
        reasons.keys().collect::<Vec<_>>(),
        [
            "external_payload_namespace_bytes_exhausted",
            "external_payload_namespace_objects_exhausted",
            "external_payload_namespace_quota_unavailable"
        ]
    );
    // One refusal; a minute boundary can only move it out of this minute.
    assert!(m["rejections_this_minute"].as_u64().unwrap() <= 1, "{m}");
    assert_eq!(reasons["external_payload_namespace_objects_exhausted"], 0);

    let free = usage(&s, "free");
    assert_eq!(free["configured"], false);
    assert!(free["max_bytes"].is_null() && free["remaining_bytes"].is_null());
    assert_eq!(free["used_objects"], 0);
}

#[test]
fn history_admits_only_references_to_stored_payloads() {
    let s = server(|_| {});
    let data = vec![b'z'; 200];
    let (_, stored) = upload(&s, "default", &data);
    let envelope = json!({ "codec": "avro", "external_payload": stored["reference"] });
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "big", "workflow_type": "t", "task_queue": "q",
                "input": envelope }),
    );
    assert_eq!(status, 201, "{body}");
    let run = body["run_id"].as_str().unwrap();
    let (_, history) = s.get(&format!("/api/workflows/big/runs/{run}/history"));
    let text = history.to_string();
    assert!(
        text.contains(stored["reference"]["reference_id"].as_str().unwrap()),
        "{text}"
    );
    assert!(
        !text.contains(&"z".repeat(200)),
        "history holds the reference, not the bytes"
    );

    // Unknown, conflicting or other-namespace references are 422s naming the field.
    let mut unknown = envelope.clone();
    unknown["external_payload"]["reference_id"] = "ep_01ARZ3NDEKTSV4RRFFQ69G5FAV".into();
    let mut conflicting = envelope.clone();
    conflicting["external_payload"]["size_bytes"] = 199.into();
    for bad in [unknown, conflicting] {
        let (status, body) = s.post("/api/workflows/big/signal/go", json!({ "input": bad }));
        assert_eq!(status, 422, "{body}");
        assert!(
            body["validation_errors"]["input.external_payload"].is_array(),
            "{body}"
        );
    }
    s.namespace("other");
    let (status, body) = s.post_ns(
        "other",
        "/api/workflows",
        json!({ "workflow_id": "w", "workflow_type": "t", "task_queue": "q", "input": envelope }),
    );
    assert_eq!(status, 422, "{body}");

    // A worker's result reference is checked in the task's namespace.
    let (_, polled) = s.poll("workflow", "default", "q", "p1", 2000);
    let (status, body) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": { "codec": "avro",
            "external_payload": { "schema": "durable-workflow.v2.runtime-external-payload-reference.v1",
              "reference_id": "ep_01ARZ3NDEKTSV4RRFFQ69G5FAV", "codec": "avro", "size_bytes": 1,
              "sha256": "0".repeat(64) } } }]),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["validation_errors"]["commands.0.result.external_payload"].is_array(),
        "{body}"
    );
    let (status, body) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": envelope }]),
    );
    assert_eq!(status, 200, "{body}");
}

/// Refusal churn writes at most one counter and one log key per
/// (namespace, reason, minute), however many refusals; namespaces without
/// a quota write none. Over HTTP, on memory and on Redis.
fn refusal_churn_is_bounded_per_namespace_reason_and_minute(
    backend: &'static str,
    cache: SharedCache,
) {
    const NAMESPACES: usize = 50;
    const REFUSALS: usize = 20;
    let s = TestServer::start(cache.clone(), |c| {
        enabled(c);
        c.external_payloads.max_objects_per_namespace = 1;
        c.external_payloads.namespace_limits =
            parse_namespace_limits("tight:max_bytes=10").unwrap();
    });
    s.namespace("tight");
    for i in 0..REFUSALS {
        let (status, body) = upload(&s, "tight", &[i as u8; 11]);
        assert_eq!(status, 429, "[{backend}] {body}");
        assert_eq!(body["reason"], "external_payload_namespace_bytes_exhausted");
    }
    for n in 0..NAMESPACES {
        let ns = format!("tenant-{n}");
        s.namespace(&ns);
        assert_eq!(upload(&s, &ns, &[1; 8]).0, 201, "[{backend}]");
        for i in 0..REFUSALS {
            let (status, body) = upload(&s, &ns, &[2, i as u8]);
            assert_eq!(status, 429, "[{backend}] {body}");
            assert_eq!(
                body["reason"],
                "external_payload_namespace_objects_exhausted"
            );
        }
    }
    let keys = s.keys(RuntimeExternalPayloadQuota::PREFIX);
    // (NAMESPACES + 1) scopes × one reason × (counter + log key) × at
    // most two minute buckets, against 21 × 20 refusals.
    let bound = (NAMESPACES + 1) * 2 * 2;
    assert!(
        (2 * (NAMESPACES + 1)..=bound).contains(&keys),
        "[{backend}] {keys} keys for {} refusals",
        (NAMESPACES + 1) * REFUSALS
    );
    let m = usage(&s, "tenant-0");
    let counted = m["rejections_by_reason"]["external_payload_namespace_objects_exhausted"]
        .as_u64()
        .unwrap();
    assert!(counted <= REFUSALS as u64, "[{backend}] {m}");
    let per_policy = s.running.engine().cache_keys_by_policy().unwrap();
    assert!(
        per_policy["runtime_external_payload_quota_rejections"] >= 2 * (NAMESPACES + 1),
        "[{backend}] {per_policy:?}"
    );
    drop(s);
    drop(cache);
}
cache_variants!(refusal_churn_is_bounded_per_namespace_reason_and_minute);

/// Without a quota (the default one turned off with 0) nothing is counted
/// and no key is written.
#[test]
fn without_a_quota_no_refusal_is_counted_and_no_key_written() {
    let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
    let s = TestServer::start(cache, |c| {
        enabled(c);
        c.external_payloads.max_bytes_per_namespace = 0;
        c.external_payloads.max_objects_per_namespace = 0;
    });
    for n in 0..200 {
        let ns = format!("open-{n}");
        s.namespace(&ns);
        assert_eq!(upload(&s, &ns, &[n as u8; 4]).0, 201);
        assert_eq!(
            upload(&s, &ns, &vec![0; 2000]).0,
            413,
            "oversized is not a quota reason"
        );
    }
    assert_eq!(s.keys(RuntimeExternalPayloadQuota::PREFIX), 0);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A server whose sweeps run only when a test asks, with `grace`.
fn lifecycle_server(grace: Duration, tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
    server(|c| {
        c.external_payload_sweep.interval = Duration::from_secs(3600);
        c.schedule_sweep.interval = Duration::from_secs(3600);
        c.store.external_payload_orphan_grace = grace;
        c.history_retention = Duration::ZERO;
        c.retention_throttle = Duration::from_millis(1);
        tweak(c);
    })
}

/// Uploads `data` and answers its `{codec, external_payload}` envelope.
fn stored(s: &TestServer, ns: &str, data: &[u8]) -> Value {
    let (status, body) = upload(s, ns, data);
    assert!(status == 201 || status == 200, "{body}");
    json!({ "codec": "avro", "external_payload": body["reference"] })
}

fn id_of(envelope: &Value) -> String {
    envelope["external_payload"]["reference_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn objects(s: &TestServer) -> (u64, u64) {
    let m = usage(s, "default");
    (
        m["used_objects"].as_u64().unwrap(),
        m["used_bytes"].as_u64().unwrap(),
    )
}

/// The elected heartbeat's pruned run (registering the worker first).
fn prune_one(s: &TestServer) -> Value {
    std::thread::sleep(Duration::from_millis(5));
    let (status, beat) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "w", "task_queue": "q" }),
    );
    assert_eq!(status, 200, "{beat}");
    beat["pruned_run_id"].clone()
}

/// Retention releases what a pruned run held: a payload only it named is
/// deleted in the prune's transaction (its fetch is a 404 and the quota
/// usage drops, so a refused upload now fits), one another run still
/// names stays until that run is pruned too.
#[test]
fn retention_deletes_the_payloads_only_a_pruned_run_held_and_the_quota_drops() {
    let s = lifecycle_server(Duration::ZERO, |c| {
        c.external_payloads.max_objects_per_namespace = 2;
    });
    let shared = stored(&s, "default", &[b'a'; 100]);
    let own = stored(&s, "default", &[b'b'; 200]);
    // A signal's payload is held by its run like the history's.
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "one", "workflow_type": "t", "task_queue": "q1",
                "input": shared }),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = s.post("/api/workflows/one/signal/go", json!({ "input": own }));
    assert!(status < 300, "{body}");
    let (_, polled) = s.poll("workflow", "default", "q1", "p-one", 2000);
    let (status, done) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": { "codec": "avro", "blob": "1" } }]),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(objects(&s), (2, 300));
    let refused = refused_upload(&s, "default", &[b'c'; 10]);
    assert_eq!(
        refused["reason"],
        "external_payload_namespace_objects_exhausted"
    );
    // The second run names the shared payload; it is still running.
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "two", "workflow_type": "t", "task_queue": "q2",
                "input": shared }),
    );
    assert_eq!(status, 201, "{body}");

    assert!(prune_one(&s).is_string(), "run one is pruned");
    assert_eq!(objects(&s), (1, 100), "run one's own payload is gone");
    assert_eq!(fetch(&s, "default", &id_of(&own)).0, 404);
    assert_eq!(fetch(&s, "default", &id_of(&shared)).0, 200);
    // The freed capacity admits the upload refused before.
    let extra = stored(&s, "default", &[b'c'; 10]);

    let (_, polled) = s.poll("workflow", "default", "q2", "p-two", 2000);
    let (status, _) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": { "codec": "avro", "blob": "1" } }]),
    );
    assert_eq!(status, 200);
    assert!(prune_one(&s).is_string(), "run two is pruned");
    assert_eq!(fetch(&s, "default", &id_of(&shared)).0, 404);
    // The unheld upload is the orphan sweep's, not retention's.
    assert_eq!(objects(&s), (1, 10));
    assert_eq!(fetch(&s, "default", &id_of(&extra)).0, 200);
    assert!(prune_one(&s).is_null(), "nothing left to prune");
}

/// The orphan sweep deletes uploads nothing holds once their grace has
/// passed, at most its scan limit per pass, oldest first; what a run, a
/// signal or a schedule names stays, a repeated upload restarts the grace,
/// and a deleted schedule lets go of its input.
#[test]
fn the_orphan_sweep_expires_unheld_uploads_after_the_grace_under_its_scan_limit() {
    let grace = Duration::from_secs(60);
    let s = lifecycle_server(grace, |c| {
        c.external_payload_sweep.orphan_sweep_scan_limit = 2;
    });
    let grace_ms = grace.as_millis() as i64;
    let started = stored(&s, "default", &[b's'; 70]);
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "held", "workflow_type": "t", "task_queue": "q",
                "input": started }),
    );
    assert_eq!(status, 201, "{body}");
    let signalled = stored(&s, "default", &[b'g'; 71]);
    let (status, body) = s.post(
        "/api/workflows/held/signal/go",
        json!({ "input": signalled }),
    );
    assert!(status < 300, "{body}");
    let scheduled = stored(&s, "default", &[b'h'; 72]);
    let (status, body) = s.post(
        "/api/schedules",
        json!({ "schedule_id": "nightly", "spec": { "intervals": [{ "every": "PT1H" }] },
                "action": { "workflow_type": "report", "task_queue": "reports",
                            "input": scheduled } }),
    );
    assert_eq!(status, 201, "{body}");
    let orphans: Vec<Value> = (0..5u8).map(|i| stored(&s, "default", &[i; 80])).collect();
    assert_eq!(objects(&s), (8, 70 + 71 + 72 + 400));

    // Within the grace nothing goes.
    let engine = s.running.engine();
    assert_eq!(engine.expire_orphan_payloads(now_ms()).unwrap(), 0);
    // Past it, the scan limit per pass: 2, 2, 1, then nothing.
    let later = now_ms() + grace_ms + 1;
    let mut passes = Vec::new();
    loop {
        let n = engine.expire_orphan_payloads(later).unwrap();
        passes.push(n);
        if n == 0 {
            break;
        }
        assert!(passes.len() < 10, "{passes:?}");
    }
    assert_eq!(passes, [2, 2, 1, 0]);
    assert_eq!(objects(&s), (3, 70 + 71 + 72), "the quota usage drops");
    for orphan in &orphans {
        assert_eq!(fetch(&s, "default", &id_of(orphan)).0, 404);
    }
    for held in [&started, &signalled, &scheduled] {
        assert_eq!(fetch(&s, "default", &id_of(held)).0, 200);
    }

    // A deleted schedule releases its input to the sweep.
    let (status, body) = s.delete_ns("default", "/api/schedules/nightly");
    assert!(status < 300, "{body}");
    assert_eq!(engine.expire_orphan_payloads(later).unwrap(), 1);
    assert_eq!(fetch(&s, "default", &id_of(&scheduled)).0, 404);

    // Uploading the same bytes again restarts their grace.
    let repeated = stored(&s, "default", &[b'r'; 90]);
    let first_upload_done = now_ms();
    std::thread::sleep(Duration::from_millis(20));
    let (status, again) = upload(&s, "default", &[b'r'; 90]);
    assert_eq!(status, 200, "{again}");
    // Past the first upload's grace, within the second's.
    let between = first_upload_done + grace_ms + 1;
    assert_eq!(engine.expire_orphan_payloads(between).unwrap(), 0);
    assert_eq!(fetch(&s, "default", &id_of(&repeated)).0, 200);
    assert_eq!(engine.expire_orphan_payloads(later + 3_600_000).unwrap(), 1);
    assert_eq!(fetch(&s, "default", &id_of(&repeated)).0, 404);
}

/// On its own timer, the node's sweep takes an abandoned upload off the
/// namespace's quota once its grace has passed.
#[test]
fn the_background_sweep_frees_the_quota_of_abandoned_uploads() {
    let s = lifecycle_server(Duration::from_millis(300), |c| {
        c.external_payload_sweep.interval = Duration::from_millis(50);
        c.external_payloads.max_objects_per_namespace = 1;
    });
    let abandoned = stored(&s, "default", &[b'x'; 100]);
    refused_upload(&s, "default", &[b'y'; 100]);
    assert!(
        support::eventually(Duration::from_secs(20), || objects(&s) == (0, 0)),
        "{}",
        usage(&s, "default")
    );
    assert_eq!(fetch(&s, "default", &id_of(&abandoned)).0, 404);
    assert_eq!(upload(&s, "default", &[b'y'; 100]).0, 201);
}

/// History stores the structural-limit contract's envelope,
/// `durable-workflow.v2.external-payload-reference.v1` with the hash and a
/// `dw-runtime://external-payloads/v1/<id>` uri, while every answer (the
/// history API, a worker's task) carries the SDK's runtime envelope as it
/// was sent.
#[test]
fn history_stores_the_contract_envelope_and_answers_the_sdks() {
    let s = server(|c| c.database = Some(c.polling_cache_path.join("store.sqlite")));
    let input = stored(&s, "default", &[b'i'; 150]);
    let result = stored(&s, "default", &[b'o'; 160]);
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "contract", "workflow_type": "t", "task_queue": "q",
                "input": input }),
    );
    assert_eq!(status, 201, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let (_, polled) = s.poll("workflow", "default", "q", "p-contract", 2000);
    let task_text = polled.to_string();
    assert!(task_text.contains(&input.to_string()), "{task_text}");
    assert!(
        !task_text.contains("dw-runtime://"),
        "a worker sees the SDK's envelope"
    );
    let (status, done) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": result }]),
    );
    assert_eq!(status, 200, "{done}");

    let (_, history) = s.get(&format!("/api/workflows/contract/runs/{run}/history"));
    let answered = history.to_string();
    for envelope in [&input, &result] {
        assert!(answered.contains(&envelope.to_string()), "{answered}");
    }
    assert!(!answered.contains("external-payload-reference.v1\",\"uri"));

    let db = rusqlite::Connection::open(s.dir.path().join("store.sqlite")).unwrap();
    let stored_history: Vec<String> = db
        .prepare(
            "SELECT payload FROM history_events WHERE run_id = \
             (SELECT id FROM runs WHERE workflow_id = 'contract') ORDER BY sequence",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let text = stored_history.join("\n");
    assert!(
        !text.contains("durable-workflow.v2.runtime-external-payload-reference.v1"),
        "{text}"
    );
    for (envelope, bytes) in [(&input, 150), (&result, 160)] {
        let expected = json!({ "codec": "avro", "external_storage": {
            "schema": "durable-workflow.v2.external-payload-reference.v1",
            "uri": format!("dw-runtime://external-payloads/v1/{}", id_of(envelope)),
            "sha256": envelope["external_payload"]["sha256"],
            "size_bytes": bytes, "codec": "avro" } });
        assert!(
            stored_history
                .iter()
                .any(|p| p.contains(&expected.to_string())),
            "{expected} not in {text}"
        );
    }
}

/// A workflow stream holds the payloads its items name on its own: they
/// outlive the pruned run, and go once the expired stream is reclaimed.
#[test]
fn a_stream_holds_its_items_payloads_until_it_is_reclaimed() {
    let s = lifecycle_server(Duration::from_secs(60), |c| {
        c.stream_retention_throttle = Duration::from_millis(1);
    });
    let item = stored(&s, "default", &[b'm'; 120]);
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "streamer", "workflow_type": "t", "task_queue": "q",
                "input": { "codec": "avro", "blob": "1" } }),
    );
    assert_eq!(status, 201, "{body}");
    let run = body["run_id"].as_str().unwrap().to_owned();
    let stream = format!("/api/workflows/streamer/runs/{run}/streams/out");
    let (status, body) = s.post(
        &format!("{stream}/items"),
        json!({ "items": [{ "payload": item }] }),
    );
    assert!(status < 300, "{body}");
    let (status, body) = s.post(
        &format!("{stream}/close"),
        json!({ "retention_seconds": 1 }),
    );
    assert!(status < 300, "{body}");
    let (status, body) = s.post(
        "/api/workflows/streamer/terminate",
        json!({ "reason": "t" }),
    );
    assert_eq!(status, 200, "{body}");
    assert!(prune_one(&s).is_string(), "the run is pruned");
    let later = now_ms() + 61_000;
    let engine = s.running.engine();
    assert_eq!(
        engine.expire_orphan_payloads(later).unwrap(),
        0,
        "the stream holds it"
    );
    assert_eq!(fetch(&s, "default", &id_of(&item)).0, 200);

    // Past the stream's retention an elected heartbeat reclaims it.
    std::thread::sleep(Duration::from_millis(1100));
    let (_, beat) = s.post("/api/worker/heartbeat", json!({ "worker_id": "w" }));
    assert_eq!(beat["stream_retention"]["streams"], 1, "{beat}");
    assert_eq!(engine.expire_orphan_payloads(later).unwrap(), 1);
    assert_eq!(fetch(&s, "default", &id_of(&item)).0, 404);
    assert_eq!(objects(&s), (0, 0));
}

/// A request may name a stored payload in the contract's form too; it is
/// checked like the SDK's envelope, so a forged `dw-runtime:` uri is a 422.
#[test]
fn contract_form_references_in_requests_must_name_stored_payloads() {
    let s = server(|_| {});
    let runtime = stored(&s, "default", &[b'k'; 130]);
    let contract = |id: &str| {
        json!({ "codec": "avro", "external_storage": {
            "schema": "durable-workflow.v2.external-payload-reference.v1",
            "uri": format!("dw-runtime://external-payloads/v1/{id}"),
            "sha256": runtime["external_payload"]["sha256"], "size_bytes": 130, "codec": "avro" } })
    };
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "forged", "workflow_type": "t", "task_queue": "q",
                "input": contract("ep_01ARZ3NDEKTSV4RRFFQ69G5FAV") }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["validation_errors"]["input.external_payload"].is_array(),
        "{body}"
    );
    let (status, body) = s.post(
        "/api/workflows",
        json!({ "workflow_id": "named", "workflow_type": "t", "task_queue": "q",
                "input": contract(&id_of(&runtime)) }),
    );
    assert_eq!(status, 201, "{body}");
    let run = body["run_id"].as_str().unwrap();
    let (_, history) = s.get(&format!("/api/workflows/named/runs/{run}/history"));
    assert!(
        history.to_string().contains(&runtime.to_string()),
        "answered in the SDK's form: {history}"
    );
}

/// Files in the node's upload spool directory.
fn spooled(s: &TestServer) -> usize {
    std::fs::read_dir(s.running.engine().upload_spool_dir())
        .map(|entries| entries.count())
        .unwrap_or(0)
}

/// An upload streams to a spool file and is stored from it; a body cut
/// off mid-way, and a chunked body that runs past the limit (413), leave
/// no spool file behind; the default quota is on without configuration.
#[test]
fn uploads_stream_through_a_spool_file_that_never_outlives_its_request() {
    use std::io::{Read, Write};
    let s = server(|_| {});
    let data = vec![7u8; 900];
    assert_eq!(upload(&s, "default", &data).0, 201);
    assert_eq!(spooled(&s), 0, "a stored upload's spool file is removed");

    let addr = s.base.trim_start_matches("http://").to_owned();
    let head = |length: &str| {
        format!(
            "POST {UPLOAD} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n\
             x-durable-workflow-payload-codec: avro\r\nx-durable-workflow-payload-size: 1000\r\n\
             x-durable-workflow-payload-sha256: {}\r\n{length}\r\n",
            "0".repeat(64)
        )
    };
    // Half a body, then the client goes away.
    let mut cut = std::net::TcpStream::connect(&addr).unwrap();
    cut.write_all(head("Content-Length: 1000\r\n").as_bytes())
        .unwrap();
    cut.write_all(&[1u8; 500]).unwrap();
    assert!(
        support::eventually(Duration::from_secs(30), || spooled(&s) == 1),
        "the body is spooled as it arrives"
    );
    drop(cut);
    assert!(
        support::eventually(Duration::from_secs(30), || spooled(&s) == 0),
        "an abandoned upload's spool file is removed"
    );

    // A chunked body (no declared length) past the 1,024-byte limit.
    let mut long = std::net::TcpStream::connect(&addr).unwrap();
    long.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    long.write_all(head("Transfer-Encoding: chunked\r\n").as_bytes())
        .unwrap();
    for _ in 0..3 {
        let chunk = [2u8; 512];
        let _ = long.write_all(format!("{:x}\r\n", chunk.len()).as_bytes());
        let _ = long.write_all(&chunk);
        let _ = long.write_all(b"\r\n");
    }
    let _ = long.write_all(b"0\r\n\r\n");
    let mut answer = Vec::new();
    let _ = long.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("external_payload_oversized"), "{answer}");
    assert!(
        support::eventually(Duration::from_secs(30), || spooled(&s) == 0),
        "an oversized upload's spool file is removed"
    );

    let (_, info) = s.get("/api/cluster/info");
    let quota = &info["namespace"]["external_payload_storage"]["quota"];
    assert_eq!(
        (&quota["max_bytes"], &quota["max_objects"]),
        (&json!(1024u64 * 1024 * 1024), &json!(10_000)),
        "{info}"
    );
}

/// Uploads `data` to the default namespace with `token`: (status, body).
fn upload_with_token(s: &TestServer, token: &str, data: &[u8]) -> (u16, Value) {
    let response = answer(
        agent()
            .post(&format!("{}{UPLOAD}", s.base))
            .set("authorization", &format!("Bearer {token}"))
            .set("content-type", "application/octet-stream")
            .set("x-durable-workflow-payload-codec", "avro")
            .set("x-durable-workflow-payload-size", &data.len().to_string())
            .set("x-durable-workflow-payload-sha256", &sha(data))
            .send_bytes(data),
    );
    (
        response.status(),
        response.into_json().unwrap_or(Value::Null),
    )
}

#[test]
fn uploads_are_limited_to_the_configured_roles_and_fetches_are_not() {
    use dwengine::server::auth::{Role, Tokens};
    let tokens = || {
        Some(Tokens::new([
            ("wt".to_owned(), Role::Worker),
            ("ot".to_owned(), Role::Operator),
            ("at".to_owned(), Role::Admin),
        ]))
    };
    // The default: workers (activity results), operators and admins
    // (start, signal and update input) all upload, as the SDKs do.
    let s = server(|c| c.auth = tokens());
    for token in ["wt", "ot", "at"] {
        let data = vec![token.as_bytes()[0]; 200];
        let (status, body) = upload_with_token(&s, token, &data);
        assert_eq!(status, 201, "{token}: {body}");
    }

    // Narrowed to workers and operators: an admin token is refused with
    // the reason the SDKs raise ExternalPayloadUnauthorized on.
    let s = server(|c| {
        c.auth = tokens();
        c.external_payloads.upload_roles = vec![Role::Worker, Role::Operator];
    });
    let (status, stored) = upload_with_token(&s, "wt", &[b'w'; 200]);
    assert_eq!(status, 201, "{stored}");
    assert_eq!(upload_with_token(&s, "ot", &[b'o'; 200]).0, 201);
    let (status, refused) = upload_with_token(&s, "at", &[b'a'; 200]);
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["reason"], "external_payload_unauthorized");
    assert_eq!(refused["role"], "admin");
    assert_eq!(refused["allowed_roles"], json!(["worker", "operator"]));
    assert_eq!(refused["retryable"], false);
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("DW_EXTERNAL_PAYLOAD_UPLOAD_ROLES"),
        "{message}"
    );
    // Nothing was stored, and fetching stays open to every role.
    let (status, again) = upload_with_token(&s, "wt", &[b'a'; 200]);
    assert_eq!(
        status, 201,
        "not a deduplicated copy of a stored upload: {again}"
    );
    let id = stored["reference"]["reference_id"].as_str().unwrap();
    let fetched = answer(
        agent()
            .get(&format!("{}{UPLOAD}/{id}", s.base))
            .set("authorization", "Bearer at")
            .call(),
    );
    assert_eq!(fetched.status(), 200);

    // Workers only: a client's upload is refused the same way.
    let s = server(|c| {
        c.auth = tokens();
        c.external_payloads.upload_roles = vec![Role::Worker];
    });
    let (status, refused) = upload_with_token(&s, "ot", &[b'o'; 200]);
    assert_eq!((status, &refused["role"]), (403, &json!("operator")));
    assert_eq!(upload_with_token(&s, "wt", &[b'w'; 200]).0, 201);
}
