//! Run-scoped workflow output streams over loopback HTTP: the round trip
//! the SDK drives (append, describe, list, resumable pages, close), the
//! workflow-side directive, every limit at its edge, the bounded reclaim
//! of one elected heartbeat, and the `stream_retention_inline` key
//! family's bound under namespace churn on the in-process cache and on
//! Redis (`DW_TEST_REDIS_URL`).

use crate::support;

use std::time::{Duration, Instant};

use dwengine::cache::MemoryCache;
use dwengine::retention::WorkflowStreamRetention;
use dwpolicy::LimitKind;
use serde_json::{json, Value};
use support::{cache_variants, eventually, SharedCache, TestServer};

fn server(tweak: impl FnOnce(&mut dwengine::server::ServerConfig)) -> TestServer {
    TestServer::start(std::sync::Arc::new(MemoryCache::default()), tweak)
}

/// Starts `workflow_id` in `ns` and returns the path of its run's streams.
fn run_streams(s: &TestServer, ns: &str, workflow_id: &str) -> String {
    let started = s.start_workflow(ns, workflow_id, "q");
    let run = started["run_id"].as_str().expect("run_id").to_owned();
    format!("/api/workflows/{workflow_id}/runs/{run}/streams")
}

fn value(n: usize) -> Value {
    json!({ "codec": "json", "blob": n.to_string() })
}

fn items(range: std::ops::Range<usize>) -> Vec<Value> {
    range.map(|n| json!({ "payload": value(n) })).collect()
}

fn append(s: &TestServer, ns: &str, path: &str, body: Value) -> (u16, Value) {
    s.post_ns(ns, &format!("{path}/items"), body)
}

fn page(s: &TestServer, path: &str, query: &str) -> (u16, Value) {
    s.get(&format!("{path}/items?{query}"))
}

fn problems(body: &Value) -> Vec<String> {
    body["validation_errors"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn a_stream_appends_pages_resumes_deduplicates_and_closes() {
    let s = server(|_| {});
    let path = run_streams(&s, "default", "order-1");
    let stream = format!("{path}/progress");

    // Nothing opened yet: a subscriber may start first and sees an empty open stream.
    let (status, early) = page(&s, &stream, "from=0");
    assert_eq!(status, 200, "{early}");
    assert_eq!(early["items"], json!([]));
    assert_eq!(early["terminal"], false);
    assert_eq!(s.get(&stream).0, 404, "describe needs the stream to exist");

    let mut body = json!({ "items": items(0..3) });
    body["items"][0]["idempotency_key"] = "k0".into();
    body["items"][1]["payload_reference"] = "s3://bucket/blob-1".into();
    body["items"][1]["item_type"] = "progress".into();
    body["items"][1]["content_type"] = "application/json".into();
    let (status, appended) = append(&s, "default", &stream, body);
    assert_eq!(status, 200, "{appended}");
    assert_eq!(appended["accepted_offsets"], json!([0, 1, 2]));
    assert_eq!(appended["accepted"], 3);
    assert_eq!(appended["deduped"], 0);
    assert_eq!(appended["stream"]["last_offset"], 2);
    assert_eq!(appended["stream"]["status"], "open");
    assert_eq!(appended["stream"]["pending_items"], 3);

    // A retry of the keyed item is stored once and answers its first offset.
    let retry = json!({ "items": [
        { "payload": value(0), "idempotency_key": "k0" },
        { "payload": value(9), "idempotency_key": "k9" },
        { "payload": value(9), "idempotency_key": "k9" },
    ] });
    let (status, again) = append(&s, "default", &stream, retry.clone());
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["accepted_offsets"], json!([0, 3, 3]));
    assert_eq!(again["accepted"], 1);
    assert_eq!(again["deduped"], 2);

    let (status, described) = s.get(&stream);
    assert_eq!(status, 200, "{described}");
    assert_eq!(described["stream"]["total_items"], 4);
    assert_eq!(described["stream"]["stream_name"], "progress");
    let (status, listed) = s.get(&path);
    assert_eq!(status, 200);
    assert_eq!(listed["streams"].as_array().unwrap().len(), 1);

    // Resumable pages: two items, then the rest from next_offset.
    let (_, first) = page(&s, &stream, "from=0&max_items=2");
    let offsets: Vec<_> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["offset"].clone())
        .collect();
    assert_eq!(offsets, vec![json!(0), json!(1)]);
    assert_eq!(first["next_offset"], 2);
    assert_eq!(first["items"][0]["payload"], value(0));
    assert_eq!(first["items"][0]["origin"], "client");
    assert_eq!(first["items"][1]["payload_reference"], "s3://bucket/blob-1");
    assert_eq!(first["items"][1]["item_type"], "progress");
    // At least once: reading offset 0 again delivers the same item again.
    let (_, replay) = page(&s, &stream, "from=0&max_items=1");
    assert_eq!(replay["items"][0]["offset"], 0);
    let (_, rest) = page(&s, &stream, "from=2");
    assert_eq!(rest["items"].as_array().unwrap().len(), 2);
    assert_eq!(rest["next_offset"], 4);
    assert_eq!(rest["terminal"], false, "open streams are never terminal");
    // Reading from 4 acknowledged everything.
    let (_, caught_up) = page(&s, &stream, "from=4");
    assert_eq!(caught_up["stream"]["pending_items"], 0);

    // A waiting read returns as soon as an item arrives: long before its
    // 45 s wait would end.
    let began = Instant::now();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| page(&s, &stream, "from=4&wait_seconds=45"));
        std::thread::sleep(Duration::from_millis(300));
        let (status, _) = append(&s, "default", &stream, json!({ "items": items(4..5) }));
        assert_eq!(status, 200);
        let (status, woke) = waiter.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(woke["items"][0]["offset"], 4, "{woke}");
    });
    assert!(began.elapsed() < Duration::from_secs(30));
    // And with nothing to deliver it answers empty when its wait ends.
    let began = Instant::now();
    let (_, empty) = page(&s, &stream, "from=5&wait_seconds=1");
    assert_eq!(empty["items"], json!([]));
    assert!(began.elapsed() >= Duration::from_millis(900));

    // Close: terminal only once the reader has every item.
    let (status, closed) = s.post(
        &format!("{stream}/close"),
        json!({ "retention_seconds": 3600 }),
    );
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["stream"]["status"], "closed");
    assert_eq!(closed["stream"]["retention_seconds"], 3600);
    assert!(closed["stream"]["expires_at"].is_string());
    let (_, behind) = page(&s, &stream, "from=3&max_items=1");
    assert_eq!(behind["terminal"], false, "{behind}");
    let (_, end) = page(&s, &stream, "from=4");
    assert_eq!(end["terminal"], true, "{end}");
    // Closing again answers it unchanged; appending is refused, but a retry
    // whose every item is stored still answers.
    assert_eq!(
        s.post(&format!("{stream}/close"), json!({})).1["stream"]["closed_at"],
        closed["stream"]["closed_at"]
    );
    let (status, refused) = append(&s, "default", &stream, json!({ "items": items(0..1) }));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "workflow_stream_closed");
    let (status, replayed) = append(&s, "default", &stream, retry);
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["deduped"], 3);

    // Errored streams carry their reason.
    let (status, errored) = s.post(
        &format!("{path}/audit/close"),
        json!({ "error_reason": "upstream failed" }),
    );
    assert_eq!(status, 200, "{errored}");
    assert_eq!(errored["stream"]["status"], "errored");
    assert_eq!(errored["stream"]["error_reason"], "upstream failed");
    assert_eq!(errored["stream"]["total_items"], 0);

    // The capability is advertised.
    let (_, info) = s.get("/api/cluster/info");
    let capability = &info["worker_protocol"]["server_capabilities"]["message_streams"];
    assert_eq!(capability["supported"], true, "{info}");
    assert_eq!(capability["minimum_protocol_version"], "1.15");
}

#[test]
fn every_stream_limit_holds_at_its_edge() {
    let s = server(|c| {
        c.store.limits.set(LimitKind::PayloadSizeBytes, 200);
        c.store.streams.max_streams_per_run = 3;
        c.request_limits.max_payload_bytes = 64 * 1024;
    });
    let path = run_streams(&s, "default", "limits");
    let at = |name: &str| format!("{path}/{name}");
    let ok = |status: u16, body: &Value| assert_eq!(status, 200, "{body}");

    // Stream names: the operation-name limit, 256 bytes.
    let (status, body) = append(
        &s,
        "default",
        &at(&"n".repeat(256)),
        json!({ "items": items(0..1) }),
    );
    ok(status, &body);
    let (status, body) = append(
        &s,
        "default",
        &at(&"n".repeat(257)),
        json!({ "items": items(0..1) }),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["reason"], "validation_failed");
    assert_eq!(problems(&body), vec!["stream_name"]);

    // Items per append: 1 to 500.
    let (status, body) = append(&s, "default", &at("a"), json!({ "items": items(0..500) }));
    ok(status, &body);
    assert_eq!(body["accepted"], 500);
    let (status, body) = append(&s, "default", &at("a"), json!({ "items": items(0..501) }));
    assert_eq!(status, 422, "{body}");
    assert_eq!(problems(&body), vec!["items"]);
    let (status, body) = append(&s, "default", &at("a"), json!({ "items": [] }));
    assert_eq!((status, problems(&body)), (422, vec!["items".to_owned()]));
    let (status, body) = append(
        &s,
        "default",
        &at("a"),
        json!({ "items": [{ "item_type": "x" }] }),
    );
    assert_eq!(
        (status, problems(&body)),
        (422, vec!["items.0.payload".to_owned()])
    );

    // Item fields.
    let long = |n: usize| "r".repeat(n);
    let (status, body) = append(
        &s,
        "default",
        &at("a"),
        json!({ "items": [
        { "payload_reference": long(2048), "idempotency_key": long(255), "item_type": long(255), "content_type": long(255) }
    ] }),
    );
    ok(status, &body);
    let (status, body) = append(
        &s,
        "default",
        &at("a"),
        json!({ "items": [
        { "payload_reference": long(2049), "idempotency_key": long(256), "item_type": long(256), "content_type": long(256) }
    ] }),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        problems(&body),
        vec![
            "items.0.content_type",
            "items.0.idempotency_key",
            "items.0.item_type",
            "items.0.payload_reference"
        ]
    );

    // Item payloads: payload_size_bytes (200 here), a structural admission refusal.
    let sized = |n: usize| {
        // {"codec":"json","blob":"…"} is 26 bytes around the blob.
        json!({ "items": [{ "payload": { "codec": "json", "blob": "x".repeat(n - 26) } }] })
    };
    let (status, body) = append(&s, "default", &at("b"), sized(200));
    ok(status, &body);
    let (status, body) = append(&s, "default", &at("b"), sized(201));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "structural_limit_exceeded");
    assert_eq!(body["structural_limit_kind"], "payload_size_bytes");
    assert_eq!(body["structural_limit_value"], 201);
    assert_eq!(body["structural_limit_configured"], 200);
    assert_eq!(
        s.get(&at("b")).1["stream"]["total_items"],
        1,
        "nothing was appended"
    );

    // The request body: DW_MAX_PAYLOAD_BYTES (4 KiB on a second node, so
    // the refused body is written whole before the answer) is a 413.
    let small = server(|c| c.request_limits.max_payload_bytes = 4096);
    let small_path = run_streams(&small, "default", "small");
    let reference = |n: usize| json!({ "items": [{ "payload_reference": "r".repeat(n) }] });
    // {"items":[{"payload_reference":"…"}]} is 36 bytes around the reference.
    let (status, body) = append(
        &small,
        "default",
        &format!("{small_path}/b"),
        reference(4096 - 36),
    );
    assert_eq!(
        status, 422,
        "{body}: at the body limit only the reference's own limit refuses"
    );
    assert_eq!(problems(&body), vec!["items.0.payload_reference"]);
    let (status, body) = append(
        &small,
        "default",
        &format!("{small_path}/b"),
        reference(4096 - 35),
    );
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["reason"], "payload_too_large");

    // Streams per run: 3 here ("nnn…", "a", "b").
    let (status, body) = append(&s, "default", &at("c"), json!({ "items": items(0..1) }));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "workflow_stream_limit_exceeded");
    assert_eq!(body["max_streams_per_run"], 3);
    assert_eq!(s.post(&format!("{}/close", at("c")), json!({})).0, 409);

    // Backpressure: max_pending_items counts items after the acknowledged offset.
    let path2 = run_streams(&s, "default", "pressure");
    let p = format!("{path2}/p");
    let (status, body) = append(
        &s,
        "default",
        &p,
        json!({ "items": items(0..3), "max_pending_items": 3 }),
    );
    ok(status, &body);
    let (status, body) = append(
        &s,
        "default",
        &p,
        json!({ "items": items(3..4), "max_pending_items": 3 }),
    );
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["reason"], "workflow_stream_backpressure");
    assert_eq!(body["pending_items"], 3);
    assert_eq!(body["max_pending_items"], 3);
    // Reading from 1 acknowledges offset 0: one more fits.
    assert_eq!(page(&s, &p, "from=1").0, 200);
    let (status, body) = append(
        &s,
        "default",
        &p,
        json!({ "items": items(3..4), "max_pending_items": 3 }),
    );
    ok(status, &body);
    let (status, body) = append(
        &s,
        "default",
        &p,
        json!({ "items": items(0..1), "max_pending_items": 0 }),
    );
    assert_eq!(
        (status, problems(&body)),
        (422, vec!["max_pending_items".to_owned()])
    );

    // Page parameters: from >= 0, max_items 1..=500, wait_seconds 0..=60.
    assert_eq!(page(&s, &p, "from=0&max_items=500&wait_seconds=0").0, 200);
    let (status, body) = page(&s, &p, "from=-1&max_items=501&wait_seconds=61");
    assert_eq!(status, 422, "{body}");
    assert_eq!(problems(&body), vec!["from", "max_items", "wait_seconds"]);
    assert_eq!(page(&s, &p, "max_items=0").0, 422);

    // Close: retention 1..=2,592,000 s, error_reason 1..=1,000 characters.
    let (status, body) = s.post(
        &format!("{p}/close"),
        json!({ "retention_seconds": 2_592_001, "error_reason": "e".repeat(1001) }),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(problems(&body), vec!["error_reason", "retention_seconds"]);
    let (status, body) = s.post(&format!("{p}/close"), json!({ "retention_seconds": 0 }));
    assert_eq!(
        (status, problems(&body)),
        (422, vec!["retention_seconds".to_owned()])
    );
    let (status, body) = s.post(
        &format!("{p}/close"),
        json!({ "retention_seconds": 2_592_000, "error_reason": "e".repeat(1000) }),
    );
    ok(status, &body);
    assert_eq!(body["stream"]["retention_seconds"], 2_592_000);

    // Unknown runs and streams.
    assert_eq!(
        s.get(&format!("{path2}/nope")).1["reason"],
        "workflow_stream_not_found"
    );
    assert_eq!(s.get("/api/workflows/pressure/runs/999/streams").0, 404);

    // A closed run takes no new stream; its open streams ended with it.
    let (status, body) = append(
        &s,
        "default",
        &format!("{path2}/q"),
        json!({ "items": items(0..1) }),
    );
    ok(status, &body);
    let (status, body) = s.post(
        "/api/workflows/pressure/terminate",
        json!({ "reason": "test" }),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = append(
        &s,
        "default",
        &format!("{path2}/late"),
        json!({ "items": items(0..1) }),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "run_not_active");
    let (_, q) = s.get(&format!("{path2}/q"));
    assert_eq!(q["stream"]["status"], "errored", "{q}");
    assert_eq!(q["stream"]["error_reason"], "run_terminated");

    // An imported v1 projection is read-only, message-stream appends included.
    let (status, imported) = s.post(
        "/api/workflows/import",
        json!({ "workflow_id": "legacy", "workflow_type": "Legacy", "task_queue": "legacy",
                "arguments": {}, "rows": [] }),
    );
    assert_eq!(status, 201, "{imported}");
    let legacy = format!(
        "/api/workflows/legacy/runs/{}/streams/out",
        imported["run_id"].as_str().unwrap()
    );
    let (status, body) = append(&s, "default", &legacy, json!({ "items": items(0..1) }));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "v1_projection_read_only");
}

#[test]
fn workflow_code_appends_and_closes_through_its_completion_and_the_run_end_closes_the_rest() {
    let s = server(|c| c.store.limits.set(LimitKind::PayloadSizeBytes, 300));
    let path = run_streams(&s, "default", "producer");
    let (_, polled) = s.poll("workflow", "default", "q", "p1", 0);
    let task = polled["task"].clone();
    let directive = |op: &str, name: &str, extra: Value| {
        let mut d = json!({ "operation": op, "stream_name": name,
                            "command_identity": "cmd", "command_ordinal": 0 });
        if let (Value::Object(d), Value::Object(extra)) = (&mut d, extra) {
            d.extend(extra);
        }
        json!({ "type": "record_side_effect", "result": { "codec": "json", "blob": "null" },
                "workflow_stream": d })
    };
    // An invalid directive is a 422 and applies nothing.
    let (status, body) = s.complete(
        &task,
        json!([directive("append", "out", json!({ "items": [] }))]),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(problems(&body), vec!["commands.0.workflow_stream.items"]);
    let (status, body) = s.complete(&task, json!([directive("rename", "", json!({}))]));
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        problems(&body),
        vec![
            "commands.0.workflow_stream.operation",
            "commands.0.workflow_stream.stream_name"
        ]
    );
    let keyed = |n: usize| json!({ "payload": value(n), "idempotency_key": format!("dw-stream:cmd:0:{n}") });
    let (status, body) = s.complete(
        &task,
        json!([
            directive("append", "out", json!({ "items": [keyed(0), keyed(1)] })),
            directive("append", "side", json!({ "items": [keyed(0)] })),
            directive("close", "done", json!({ "retention_seconds": 60 })),
        ]),
    );
    assert_eq!(status, 200, "{body}");
    let (_, out) = page(&s, &format!("{path}/out"), "from=0");
    assert_eq!(out["items"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(out["items"][0]["origin"], "workflow");
    assert_eq!(out["items"][0]["origin_reference"], "cmd:0");
    assert_eq!(
        s.get(&format!("{path}/done")).1["stream"]["status"],
        "closed"
    );
    let (_, history) = s.get(&format!("{}/history", path.trim_end_matches("/streams")));
    let recorded: Vec<_> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "SideEffectRecorded")
        .map(|e| e["payload"]["workflow_stream"]["stream_name"].clone())
        .collect();
    assert_eq!(
        recorded,
        vec![json!("out"), json!("side"), json!("done")],
        "{history}"
    );

    // The run completes: its open streams close with it.
    s.post(
        "/api/workflows/producer/signal/go",
        json!({ "input": { "codec": "json", "blob": "[]" } }),
    );
    let (_, polled) = s.poll("workflow", "default", "q", "p2", 5000);
    let (status, body) = s.complete(
        &polled["task"],
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "1" } }]),
    );
    assert_eq!(status, 200, "{body}");
    let (_, side) = s.get(&format!("{path}/side"));
    assert_eq!(side["stream"]["status"], "closed", "{side}");
    let (_, end) = page(&s, &format!("{path}/out"), "from=2");
    assert_eq!(end["terminal"], true);

    // An oversized item payload from workflow code fails the run structurally.
    let path = run_streams(&s, "default", "oversized");
    let (_, polled) = s.poll("workflow", "default", "q", "p3", 0);
    let big = json!({ "payload": { "codec": "json", "blob": "x".repeat(400) } });
    let (status, body) = s.complete(
        &polled["task"],
        json!([directive("append", "out", json!({ "items": [big] }))]),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["run_status"], "failed");
    assert_eq!(
        body["structural_limit"]["structural_limit_kind"], "payload_size_bytes",
        "{body}"
    );
    assert_eq!(
        s.get(&format!("{path}/out")).0,
        404,
        "nothing of the completion was applied"
    );
}

#[test]
fn a_node_holds_at_most_its_cap_of_waiting_reads() {
    let s = server(|c| c.stream_max_waits = 1);
    let stream = format!("{}/s", run_streams(&s, "default", "waits"));
    std::thread::scope(|scope| {
        // Two reads that would each wait 45 s, sent together: whichever
        // arrives first holds the one wait, the other is refused at once.
        let (done, answers) = std::sync::mpsc::channel();
        let mut readers: Vec<_> = (0..2)
            .map(|n| {
                let (s, stream, done) = (&s, &stream, done.clone());
                scope.spawn(move || {
                    let answer = page(s, stream, "from=0&wait_seconds=45");
                    let _ = done.send(n);
                    answer
                })
            })
            .map(Some)
            .collect();
        // Both would wait until the append below, so the first to answer
        // was refused, not served.
        let first = answers
            .recv_timeout(Duration::from_secs(30))
            .expect("a second waiting read was let in: neither was refused");
        let (status, refused) = readers[first].take().unwrap().join().unwrap();
        assert_eq!(status, 429, "{refused}");
        assert_eq!(refused["reason"], "stream_wait_capacity", "{refused}");
        assert_eq!(refused["max_waiting_reads"], 1);
        // …while reads that do not wait are always served.
        assert_eq!(page(&s, &stream, "from=0").0, 200);
        let (status, _) = append(&s, "default", &stream, json!({ "items": items(0..1) }));
        assert_eq!(status, 200);
        // The other read was waiting all along: the item wakes it.
        let waiter = answers
            .recv_timeout(Duration::from_secs(30))
            .expect("the waiting read woke on the append");
        let (status, woke) = readers[waiter].take().unwrap().join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(woke["items"][0]["offset"], 0, "{woke}");
    });
    // The released wait can be held again.
    let (status, body) = page(&s, &stream, "from=1&wait_seconds=1");
    assert_eq!(status, 200, "{body}");
}

/// Appends `per_stream` items to `streams` streams of a fresh run in `ns`
/// and closes each with a one-second retention.
fn expiring_streams(
    s: &TestServer,
    ns: &str,
    workflow_id: &str,
    streams: usize,
    per_stream: usize,
) {
    let path = run_streams(s, ns, workflow_id);
    for n in 0..streams {
        let stream = format!("{path}/s{n}");
        let (status, body) = append(s, ns, &stream, json!({ "items": items(0..per_stream) }));
        assert_eq!(status, 200, "{body}");
        let (status, body) = s.post_ns(
            ns,
            &format!("{stream}/close"),
            json!({ "retention_seconds": 1 }),
        );
        assert_eq!(status, 200, "{body}");
    }
}

fn rows(s: &TestServer, sql: &str) -> i64 {
    let db = s
        .running
        .engine()
        .config()
        .database
        .clone()
        .expect("a database file");
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

#[test]
fn one_elected_heartbeat_reclaims_at_most_ten_streams_and_five_hundred_items() {
    // The throttle is checked by a heartbeat within the window of the
    // first one; a machine too loaded to send it in time retries with a
    // window twice as long rather than fail or skip the check.
    let mut window = Duration::from_secs(2);
    'attempt: loop {
        assert!(
            window <= Duration::from_secs(32),
            "a heartbeat never came within {window:?} of the one before"
        );
        let s = server(|c| {
            c.stream_retention_throttle = window;
            c.database = Some(c.polling_cache_path.join("streams.sqlite"));
        });
        // Fifteen small streams: the stream budget binds (10 streams, 100 items).
        expiring_streams(&s, "few-items", "wide", 15, 10);
        // Ten streams of 60 items: the item budget binds (500 items, 8 streams).
        expiring_streams(&s, "many-items", "deep", 10, 60);
        // Past the streams' one-second retention.
        std::thread::sleep(Duration::from_millis(1100));
        let beat = |ns: &str| {
            let (status, body) = s.post_ns(
                ns,
                "/api/worker/register",
                json!({ "worker_id": "w", "task_queue": "q" }),
            );
            assert_eq!(status, 200, "{body}");
            body["stream_retention"].clone()
        };
        let first_sent = Instant::now();
        assert_eq!(beat("few-items"), json!({ "streams": 10, "items": 100 }));
        assert_eq!(beat("many-items"), json!({ "streams": 8, "items": 500 }));
        // Throttled within the window: the next heartbeat reclaims nothing.
        let (_, throttled) = s.post_ns(
            "few-items",
            "/api/worker/heartbeat",
            json!({ "worker_id": "w" }),
        );
        if first_sent.elapsed() >= window {
            window *= 2;
            continue 'attempt;
        }
        assert!(throttled["stream_retention"].is_null(), "{throttled}");
        // Expired streams read as gone even before they are reclaimed.
        let (_, listed) = s.get_ns("few-items", &run_path(&s, "few-items", "wide"));
        assert_eq!(listed["streams"], json!([]), "{listed}");
        // The next windows finish the rest.
        std::thread::sleep(window + Duration::from_millis(100));
        let (_, next) = s.post_ns(
            "few-items",
            "/api/worker/heartbeat",
            json!({ "worker_id": "w" }),
        );
        assert_eq!(
            next["stream_retention"],
            json!({ "streams": 5, "items": 50 })
        );
        let (_, next) = s.post_ns(
            "many-items",
            "/api/worker/heartbeat",
            json!({ "worker_id": "w" }),
        );
        assert_eq!(
            next["stream_retention"],
            json!({ "streams": 2, "items": 100 })
        );
        assert_eq!(rows(&s, "SELECT COUNT(*) FROM workflow_streams"), 0);
        assert_eq!(rows(&s, "SELECT COUNT(*) FROM workflow_stream_items"), 0);
        return;
    }
}

fn run_path(s: &TestServer, ns: &str, workflow_id: &str) -> String {
    let (_, described) = s.get_ns(ns, &format!("/api/workflows/{workflow_id}"));
    format!(
        "/api/workflows/{workflow_id}/runs/{}/streams",
        described["run_id"].as_str().unwrap()
    )
}

const NAMESPACES: usize = 2_000;
const THROTTLE: Duration = Duration::from_secs(20);

fn churn(backend: &str, s: &TestServer) {
    let cache = &s.cache;
    // One namespace with expired streams, so elections do real work.
    expiring_streams(s, "tenant-0", "w", 3, 5);
    std::thread::sleep(Duration::from_millis(1100));
    let began = Instant::now();
    let mut reclaimed = 0;
    for n in 0..NAMESPACES {
        let ns = format!("tenant-{n}");
        if n > 0 {
            s.namespace(&ns);
        }
        let (status, body) = s.post_ns(
            &ns,
            "/api/worker/register",
            json!({ "worker_id": "w", "task_queue": "q" }),
        );
        assert_eq!(status, 200, "{body}");
        assert!(
            body["stream_retention"].is_object(),
            "[{backend}] the first heartbeat is elected: {body}"
        );
        reclaimed += body["stream_retention"]["streams"].as_u64().unwrap();
        for _ in 0..2 {
            let (status, body) =
                s.post_ns(&ns, "/api/worker/heartbeat", json!({ "worker_id": "w" }));
            assert_eq!(status, 200, "{body}");
        }
    }
    // Unknown workers write no key.
    for i in 0..100 {
        let (status, _) = s.post_ns(
            "tenant-0",
            "/api/worker/heartbeat",
            json!({ "worker_id": format!("g{i}") }),
        );
        assert_eq!(status, 404);
    }
    let took = began.elapsed();
    let peak = cache.count_family(WorkflowStreamRetention::PREFIX).unwrap();
    let scanned = cache.count_prefix(WorkflowStreamRetention::PREFIX).unwrap();
    eprintln!(
        "[{backend}] stream_retention_inline: {NAMESPACES} namespaces, a registration and 2 heartbeats each, in {took:?}; peak {peak} keys (scan {scanned}; bound {NAMESPACES}); reclaimed {reclaimed} streams"
    );
    assert_eq!(reclaimed, 3, "[{backend}]");
    assert!(
        peak <= NAMESPACES && scanned <= NAMESPACES,
        "[{backend}] one key per namespace: {peak}/{scanned}"
    );
    if took < THROTTLE {
        assert_eq!(
            scanned, NAMESPACES,
            "[{backend}] one key per heartbeating namespace"
        );
    }
}

fn drained(backend: &str, s: &TestServer) {
    let began = Instant::now();
    assert!(
        eventually(THROTTLE + Duration::from_secs(10), || {
            s.cache
                .count_prefix(WorkflowStreamRetention::PREFIX)
                .is_ok_and(|n| n == 0)
        }),
        "[{backend}] throttle keys outlived their TTL"
    );
    eprintln!(
        "[{backend}] stream_retention_inline: final 0 keys ({:?} after the churn)",
        began.elapsed()
    );
    // A new window: the next heartbeat is elected again.
    let (_, body) = s.post_ns(
        "tenant-1",
        "/api/worker/heartbeat",
        json!({ "worker_id": "w" }),
    );
    assert!(body["stream_retention"].is_object(), "{body}");
}

fn stream_retention_keys_stay_one_per_namespace_and_drain(
    backend: &'static str,
    cache: SharedCache,
) {
    let s = TestServer::start(cache, |c| {
        c.stream_retention_throttle = THROTTLE;
        // Namespace churn past the default namespace cap.
        c.max_namespaces = 0;
    });
    churn(backend, &s);
    drained(backend, &s);
}
cache_variants!(stream_retention_keys_stay_one_per_namespace_and_drain);

/// A stream holds at most `max_items_per_stream` items however long its run
/// appends: the append that would pass the cap is refused whole, from a
/// client or from workflow code, and a retry of stored items still passes.
#[test]
fn a_stream_holds_at_most_its_item_cap() {
    let s = server(|c| c.store.streams.max_items_per_stream = 5);
    let path = run_streams(&s, "default", "capped");
    let keyed = |range: std::ops::Range<usize>| -> Vec<Value> {
        range
            .map(|n| json!({ "payload": value(n), "idempotency_key": format!("k{n}") }))
            .collect()
    };
    let a = format!("{path}/a");
    let (status, body) = append(&s, "default", &a, json!({ "items": keyed(0..3) }));
    assert_eq!(status, 200, "{body}");
    let (status, body) = append(&s, "default", &a, json!({ "items": keyed(3..5) }));
    assert_eq!(status, 200, "at the cap passes: {body}");
    let (status, body) = append(&s, "default", &a, json!({ "items": keyed(4..6) }));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "workflow_stream_item_limit_exceeded");
    assert_eq!(
        (
            &body["items"],
            &body["requested_items"],
            &body["max_items_per_stream"]
        ),
        (&json!(5), &json!(1), &json!(5)),
        "{body}"
    );
    assert_eq!(body["stream_name"], "a");
    let (status, body) = append(&s, "default", &a, json!({ "items": keyed(0..5) }));
    assert_eq!(status, 200, "a retry of stored items: {body}");
    assert_eq!(body["deduped"], 5);
    let (_, described) = s.get(&a);
    assert_eq!(described["stream"]["total_items"], 5, "{described}");
    // The cap is per stream: another stream of the run has its own.
    let (status, body) = append(
        &s,
        "default",
        &format!("{path}/b"),
        json!({ "items": keyed(0..5) }),
    );
    assert_eq!(status, 200, "{body}");

    // Workflow code past the cap: the completion is refused and applies nothing.
    let (_, polled) = s.poll("workflow", "default", "q", "p1", 0);
    let directive = json!({ "type": "record_side_effect",
        "result": { "codec": "json", "blob": "null" },
        "workflow_stream": { "operation": "append", "stream_name": "b",
                             "items": [{ "payload": value(9) }] } });
    let (status, body) = s.complete(&polled["task"], json!([directive]));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "workflow_stream_item_limit_exceeded");
    let (_, described) = s.get(&format!("{path}/b"));
    assert_eq!(described["stream"]["total_items"], 5, "{described}");
    let (_, manifest) = s.get("/api/cluster/info");
    assert!(
        manifest.to_string().contains("\"max_items_per_stream\":5"),
        "the cap is discoverable: {manifest}"
    );
}
