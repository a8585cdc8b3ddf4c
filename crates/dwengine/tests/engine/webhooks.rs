//! Webhook intake over loopback HTTP (`POST /api/bridge-adapters/webhook/{adapter}`):
//! signed deliveries start, signal and update through the control plane's
//! own calls; a retried delivery (signed again, the same idempotency key)
//! converges on the first one's command; unsigned, wrongly signed, stale
//! and replayed deliveries are refused and write nothing; the pending
//! signal limit holds through the webhook exactly as through the control
//! plane.

use crate::support;

use dwengine::server::auth::{Role, Tokens};
use dwengine::server::webhooks::{sign, ReplayKeys, Webhooks, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use serde_json::{json, Value};
use support::{cache_variants, memory_cache, SharedCache, TestServer};

const SECRET: &str = "whsec-0123456789abcdef";
const ROUTE: &str = "/api/bridge-adapters/webhook/";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Sends `body` to `adapter`'s route signed with `secret` at `timestamp`.
fn deliver_signed(
    s: &TestServer,
    adapter: &str,
    secret: &str,
    timestamp: i64,
    body: &Value,
) -> (u16, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let timestamp = timestamp.to_string();
    let signature = sign(secret.as_bytes(), &timestamp, &bytes);
    send(
        s,
        adapter,
        &[
            (TIMESTAMP_HEADER, timestamp.as_str()),
            (SIGNATURE_HEADER, signature.as_str()),
        ],
        &bytes,
    )
}

fn send(s: &TestServer, adapter: &str, headers: &[(&str, &str)], bytes: &[u8]) -> (u16, Value) {
    let mut request =
        ureq::post(&format!("{}{ROUTE}{adapter}", s.base)).set("content-type", "application/json");
    for (name, value) in headers {
        request = request.set(name, value);
    }
    match request.send_bytes(bytes) {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

/// A delivery of stripe's, signed now (`offset` seconds from now, so a
/// retry is a new signature of the same event).
/// Delivers `body` signed at `timestamp`. A test takes its `now()` once and
/// signs retries at fixed offsets from it: were each delivery to read the
/// clock, a retry signed at "now - 1" after the clock ticked would carry the
/// first delivery's timestamp and signature, a replay.
fn deliver(s: &TestServer, timestamp: i64, body: &Value) -> (u16, Value) {
    deliver_signed(s, "stripe", SECRET, timestamp, body)
}

fn event(action: &str, key: &str, target: Value, input: Value) -> Value {
    json!({ "action": action, "idempotency_key": key, "target": target, "input": input,
            "correlation": { "provider": "stripe" } })
}

/// `path` with an admin bearer token.
fn admin(s: &TestServer, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let request = ureq::request(method, &format!("{}{path}", s.base))
        .set("authorization", "Bearer adm")
        .set("x-namespace", "payments");
    let result = match body {
        Some(body) => request.send_json(body),
        None => request.call(),
    };
    match result {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

/// With bearer tokens configured, a webhook still needs none: its own
/// signature is its authentication. Each kind is accepted once; a retried
/// delivery, signed again with the same idempotency key, gets the first
/// delivery's run, signal or update back as `duplicate` and adds nothing.
#[test]
fn each_kind_is_accepted_once_and_a_retried_delivery_converges() {
    let t0 = now();
    let s = TestServer::start(memory_cache(), |c| {
        c.auth = Some(Tokens::new([("adm".to_owned(), Role::Admin)]));
        c.webhooks = Webhooks::default().with("stripe", "payments", SECRET);
    });
    let (status, body) = admin(
        &s,
        "POST",
        "/api/namespaces",
        Some(json!({ "name": "payments" })),
    );
    assert_eq!(status, 201, "{body}");

    let start = event(
        "start_workflow",
        "evt-start-1",
        json!({ "workflow_type": "Order", "task_queue": "orders" }),
        json!({ "order": 1001 }),
    );
    let (status, first) = deliver(&s, t0, &start);
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["outcome"], "accepted");
    assert_eq!(first["accepted"], true);
    assert_eq!(first["control_plane_outcome"], "started_new");
    assert_eq!(first["namespace"], "payments");
    assert_eq!(
        first["schema"],
        "durable-workflow.v2.bridge-adapter-outcome.contract"
    );
    let workflow_id = first["workflow_id"].as_str().unwrap().to_owned();
    assert!(workflow_id.starts_with("bridge-stripe-"), "{workflow_id}");
    let (status, again) = deliver(&s, t0 - 1, &start);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["outcome"], "duplicate");
    assert_eq!(again["accepted"], false);
    assert_eq!(
        (&again["workflow_id"], &again["run_id"]),
        (&first["workflow_id"], &first["run_id"])
    );
    let (_, runs) = admin(
        &s,
        "GET",
        &format!("/api/workflows/{workflow_id}/runs"),
        None,
    );
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1), "{runs}");
    let (_, described) = admin(&s, "GET", &format!("/api/workflows/{workflow_id}"), None);
    assert_eq!(described["status"], "running", "{described}");

    let signal = event(
        "signal_workflow",
        "evt-paid-1",
        json!({ "workflow_id": workflow_id, "signal_name": "paid" }),
        json!({ "amount": 5 }),
    );
    let (status, first) = deliver(&s, t0, &signal);
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["control_plane_outcome"], "signal_received");
    assert_eq!(first["request_id"], "webhook:stripe:evt-paid-1");
    let (status, again) = deliver(&s, t0 - 2, &signal);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["outcome"], "duplicate");
    assert_eq!(again["control_plane_outcome"], "deduped_existing_command");
    assert_eq!(again["signal_id"], first["signal_id"]);

    let update = event(
        "update_workflow",
        "evt-approve-1",
        json!({ "workflow_id": workflow_id, "update_name": "approve" }),
        Value::Null,
    );
    let (status, first) = deliver(&s, t0, &update);
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["control_plane_outcome"], "update_accepted");
    let (status, again) = deliver(&s, t0 - 3, &update);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["update_id"], first["update_id"]);
    // An update may wait for its outcome as the control plane's does; with
    // no worker here it answers accepted when its wait runs out.
    let waiting = event(
        "update_workflow",
        "evt-approve-2",
        json!({ "workflow_id": workflow_id, "update_name": "approve",
                "wait_for": "completed", "wait_timeout_seconds": 1 }),
        Value::Null,
    );
    let (status, waited) = deliver(&s, t0, &waiting);
    assert_eq!(status, 202, "{waited}");
    assert_eq!(
        (&waited["update_status"], &waited["wait_timed_out"]),
        (&json!("accepted"), &json!(true)),
        "{waited}"
    );

    let (_, described) = admin(&s, "GET", &format!("/api/workflows/{workflow_id}"), None);
    assert_eq!(described["pending"]["signals"], 1, "{described}");
    assert_eq!(described["pending"]["updates"], 2, "{described}");
    // The provider's JSON reached history as the arguments list in the
    // SDKs' Avro encoding (the one codec the published SDKs decode).
    let run_id = described["run_id"].as_str().unwrap();
    let (status, history) = admin(
        &s,
        "GET",
        &format!("/api/workflows/{workflow_id}/runs/{run_id}/history"),
        None,
    );
    assert_eq!(status, 200, "{history}");
    let events = history["events"].as_array().expect("history events");
    let payload = |event_type: &str, field: &str| {
        let event = events
            .iter()
            .find(|e| e["event_type"] == event_type)
            .unwrap_or_else(|| panic!("{event_type} in {history}"));
        let envelope = &event["payload"][field];
        assert_eq!(envelope["codec"], "avro", "{event}");
        dwengine::store::avro_value::decode_envelope(envelope).unwrap()
    };
    assert_eq!(
        payload("WorkflowStarted", "arguments"),
        json!([{ "order": 1001 }])
    );
    assert_eq!(payload("SignalReceived", "value"), json!([{ "amount": 5 }]));
    assert_eq!(payload("UpdateAccepted", "arguments"), json!([]));
    // The control plane still wants its token.
    let status = match ureq::get(&format!("{}/api/workflows", s.base)).call() {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(status, 401);
}

/// Deliveries that are not signed by the adapter's secret, are signed too
/// long ago, or repeat a signature already received are refused, and none
/// writes a replay key or a command; on the in-process cache and on Redis,
/// where every node of a deployment shares the replay keys.
fn bad_signatures_stale_timestamps_and_replays_are_refused(
    backend: &'static str,
    cache: SharedCache,
) {
    let t0 = now();
    let s = TestServer::start(cache, |c| {
        c.webhooks = Webhooks::default().with("stripe", "payments", SECRET);
    });
    s.start_workflow("payments", "order-1", "orders");
    let signal = |key: &str| {
        event(
            "signal_workflow",
            key,
            json!({ "workflow_id": "order-1", "signal_name": "paid" }),
            json!([1]),
        )
    };
    let body = serde_json::to_vec(&signal("evt-1")).unwrap();
    let (status, out) = send(&s, "stripe", &[], &body);
    assert_eq!(
        (status, &out["reason"]),
        (401, &json!("webhook_signature_missing"))
    );
    let (status, out) = deliver_signed(
        &s,
        "stripe",
        "not-the-secret-at-all",
        now(),
        &signal("evt-1"),
    );
    assert_eq!(
        (status, &out["reason"]),
        (401, &json!("webhook_signature_invalid")),
        "{out}"
    );
    // An unknown adapter answers as a wrong signature: no adapter list leaks.
    let (status, out) = deliver_signed(&s, "paypal", SECRET, now(), &signal("evt-1"));
    assert_eq!(
        (status, &out["reason"]),
        (401, &json!("webhook_signature_invalid"))
    );
    // The body is signed: a changed body fails the signature.
    let timestamp = now().to_string();
    let signature = sign(SECRET.as_bytes(), &timestamp, &body);
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    let (status, out) = send(
        &s,
        "stripe",
        &[
            (TIMESTAMP_HEADER, &timestamp),
            (SIGNATURE_HEADER, &signature),
        ],
        &tampered,
    );
    assert_eq!(
        (status, &out["reason"]),
        (401, &json!("webhook_signature_invalid"))
    );
    let (status, out) = deliver_signed(&s, "stripe", SECRET, now() - 3_600, &signal("evt-1"));
    assert_eq!(
        (status, &out["reason"]),
        (401, &json!("webhook_timestamp_out_of_window")),
        "{out}"
    );
    assert_eq!(out["replay_window_seconds"], 300);
    assert_eq!(
        s.keys(ReplayKeys::PREFIX),
        0,
        "a refused delivery writes no key"
    );
    let (_, described) = s.get_ns("payments", "/api/workflows/order-1");
    assert_eq!(described["pending"]["signals"], 0, "{described}");

    // Accepted once; the very same signed request again is a replay.
    let headers = [
        (TIMESTAMP_HEADER, timestamp.as_str()),
        (SIGNATURE_HEADER, signature.as_str()),
    ];
    let (status, out) = send(&s, "stripe", &headers, &body);
    assert_eq!(status, 202, "{out}");
    for _ in 0..3 {
        let (status, out) = send(&s, "stripe", &headers, &body);
        assert_eq!(
            (status, &out["reason"]),
            (409, &json!("webhook_replayed")),
            "{out}"
        );
    }
    assert_eq!(s.keys(ReplayKeys::PREFIX), 1);
    let (_, described) = s.get_ns("payments", "/api/workflows/order-1");
    assert_eq!(described["pending"]["signals"], 1, "{described}");

    // A signed but malformed event names its fields.
    let (status, out) = deliver(
        &s,
        t0,
        &json!({ "action": "signal_workflow", "target": {} }),
    );
    assert_eq!(
        (status, &out["reason"]),
        (422, &json!("malformed_payload")),
        "{out}"
    );
    for field in [
        "idempotency_key",
        "target.workflow_id",
        "target.signal_name",
    ] {
        assert!(out["validation_errors"][field].is_array(), "{field}: {out}");
    }
    let (status, out) = deliver(
        &s,
        t0,
        &event("delete_workflow", "k", json!({}), Value::Null),
    );
    assert_eq!(
        (status, &out["reason"]),
        (422, &json!("unsupported_action")),
        "{out}"
    );
    // The control plane's own refusals come through with their status.
    let (status, out) = deliver(
        &s,
        t0,
        &event(
            "signal_workflow",
            "evt-x",
            json!({ "workflow_id": "no-such-order", "signal_name": "paid" }),
            Value::Null,
        ),
    );
    assert_eq!(
        (status, &out["reason"]),
        (404, &json!("workflow_not_found")),
        "{out}"
    );
    assert_eq!(out["outcome"], "rejected", "[{backend}]");
}
cache_variants!(bad_signatures_stale_timestamps_and_replays_are_refused);

/// The run's pending-signal limit refuses the webhook's signal exactly as
/// the control plane's (409 and the same structural metadata), the run
/// stays open, and a redelivery of an already accepted signal is still
/// answered as that signal.
#[test]
fn the_pending_signal_limit_holds_through_the_webhook_as_through_the_control_plane() {
    let t0 = now();
    let s = TestServer::start(memory_cache(), |c| {
        c.store.limits.pending_signal_count = 2;
        c.webhooks = Webhooks::default().with("stripe", "payments", SECRET);
    });
    s.start_workflow("payments", "order-2", "orders");
    let signal = |key: &str| {
        event(
            "signal_workflow",
            key,
            json!({ "workflow_id": "order-2", "signal_name": "paid" }),
            Value::Null,
        )
    };
    let (status, _) = s.post_ns(
        "payments",
        "/api/workflows/order-2/signal/paid",
        json!({ "request_id": "cp-1" }),
    );
    assert_eq!(status, 202);
    let (status, accepted) = deliver(&s, t0, &signal("evt-1"));
    assert_eq!(status, 202, "{accepted}");
    let (status, through_webhook) = deliver(&s, t0, &signal("evt-2"));
    let (control_status, through_control) = s.post_ns(
        "payments",
        "/api/workflows/order-2/signal/paid",
        json!({ "request_id": "cp-2" }),
    );
    assert_eq!((status, control_status), (409, 409), "{through_webhook}");
    for field in [
        "reason",
        "structural_limit_kind",
        "structural_limit_value",
        "structural_limit_configured",
    ] {
        assert_eq!(through_webhook[field], through_control[field], "{field}");
    }
    assert_eq!(through_webhook["reason"], "structural_limit_exceeded");
    assert_eq!(
        through_webhook["structural_limit_kind"],
        "pending_signal_count"
    );
    assert_eq!(through_webhook["outcome"], "rejected");
    assert_eq!(through_webhook["idempotency_key"], "evt-2");
    // A retry of the accepted delivery is its signal, not a refusal.
    let (status, again) = deliver(&s, t0 - 1, &signal("evt-1"));
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["signal_id"], accepted["signal_id"]);
    let (_, described) = s.get_ns("payments", "/api/workflows/order-2");
    assert_eq!(described["status"], "running");
    assert_eq!(described["pending"]["signals"], 2, "{described}");
}
