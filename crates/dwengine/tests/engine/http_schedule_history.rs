//! The schedule audit stream over loopback HTTP
//! (`GET /api/schedules/{id}/history`): the shape the SDK parses, paging,
//! its query checks, the per-schedule cap at its edge, and a deleted
//! schedule's stream kept for its retention and then pruned by the sweep.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::store::{DELETED_SCHEDULE_AUDIT_RETENTION_MS, SCHEDULE_AUDIT_ENTRIES};
use serde_json::{json, Value};
use support::TestServer;

fn server() -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        // The background sweep stays out of the way; tests sweep explicitly.
        c.schedule_sweep.interval = Duration::from_secs(3600);
    })
}

fn create(s: &TestServer, id: &str) {
    let (status, body) = s.post(
        "/api/schedules",
        json!({
            "schedule_id": id,
            "spec": { "intervals": [{ "every": "P1D" }] },
            "action": { "workflow_type": "report", "task_queue": "audit" },
        }),
    );
    assert_eq!(status, 201, "{body}");
}

fn ok(s: &TestServer, path: &str, body: Value) -> Value {
    let (status, answer) = s.post(path, body);
    assert_eq!(status, 200, "{path}: {answer}");
    answer
}

fn history(s: &TestServer, id: &str, query: &str) -> Value {
    let (status, body) = s.get(&format!("/api/schedules/{id}/history{query}"));
    assert_eq!(status, 200, "{body}");
    body
}

fn types(page: &Value) -> Vec<String> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_owned())
        .collect()
}

fn sequences(page: &Value) -> Vec<i64> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_i64().unwrap())
        .collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn the_history_records_every_change_and_fire_in_the_sdk_shape_and_pages() {
    let s = server();
    create(&s, "aud");
    let (status, updated) = s.put("/api/schedules/aud", json!({ "jitter_seconds": 5 }));
    assert_eq!(status, 200, "{updated}");
    ok(
        &s,
        "/api/schedules/aud/pause",
        json!({ "note": "maintenance" }),
    );
    ok(&s, "/api/schedules/aud/resume", json!({}));
    let started = ok(&s, "/api/schedules/aud/trigger", json!({}));
    assert_eq!(started["outcome"], "triggered", "{started}");
    let skipped = ok(&s, "/api/schedules/aud/trigger", json!({}));
    assert_eq!(skipped["outcome"], "skipped", "{skipped}");

    let page = history(&s, "aud", "");
    assert_eq!(
        types(&page),
        [
            "ScheduleCreated",
            "ScheduleUpdated",
            "SchedulePaused",
            "ScheduleResumed",
            "ScheduleTriggered",
            "ScheduleTriggerSkipped"
        ]
    );
    assert_eq!(sequences(&page), [1, 2, 3, 4, 5, 6]);
    assert_eq!(
        (
            &page["schedule_id"],
            &page["namespace"],
            &page["has_more"],
            &page["next_cursor"]
        ),
        (
            &json!("aud"),
            &json!("default"),
            &json!(false),
            &Value::Null
        ),
        "{page}"
    );
    let events = page["events"].as_array().unwrap();
    assert_eq!(events[1]["payload"]["fields"], json!(["jitter_seconds"]));
    assert_eq!(events[2]["payload"]["note"], "maintenance");
    let fired = &events[4];
    assert_eq!(fired["workflow_instance_id"], started["workflow_id"]);
    assert_eq!(fired["workflow_run_id"], started["run_id"]);
    assert_eq!(fired["payload"]["trigger"], "manual");
    assert_eq!(fired["payload"]["outcome"], "started");
    assert!(fired["id"].is_string() && fired["recorded_at"].is_string());
    assert!(events[5]["payload"]["reason"]
        .as_str()
        .unwrap()
        .contains("still running"));
    assert_eq!(events[5]["workflow_run_id"], Value::Null);

    // Pages: has_more and next_cursor, then after_sequence.
    let first = history(&s, "aud", "?limit=4");
    assert_eq!(sequences(&first), [1, 2, 3, 4]);
    assert_eq!(
        (&first["has_more"], &first["next_cursor"]),
        (&json!(true), &json!(4))
    );
    let rest = history(&s, "aud", "?limit=4&after_sequence=4");
    assert_eq!(sequences(&rest), [5, 6]);
    assert_eq!(
        (&rest["has_more"], &rest["next_cursor"]),
        (&json!(false), &Value::Null)
    );
    // The limit is clamped into 1..=500, as the SDK documents.
    assert_eq!(sequences(&history(&s, "aud", "?limit=0")), [1]);
    assert_eq!(sequences(&history(&s, "aud", "?limit=100000")).len(), 6);
    for bad in ["?after_sequence=-1", "?after_sequence=x", "?limit=many"] {
        let (status, body) = s.get(&format!("/api/schedules/aud/history{bad}"));
        assert_eq!(
            (status, &body["reason"]),
            (422, &json!("validation_failed")),
            "{bad}: {body}"
        );
    }

    // A deleted schedule's stream stays readable and ends with the delete.
    let (status, deleted) = s.delete_ns("default", "/api/schedules/aud");
    assert_eq!(status, 200, "{deleted}");
    let after = history(&s, "aud", "?after_sequence=6");
    assert_eq!(types(&after), ["ScheduleDeleted"]);
    assert_eq!(sequences(&after), [7]);
    let (status, unknown) = s.get("/api/schedules/never/history");
    assert_eq!(
        (status, &unknown["reason"]),
        (404, &json!("schedule_not_found")),
        "{unknown}"
    );
    // Namespaces do not see each other's streams.
    let (status, _) = s.get_ns("other", "/api/schedules/aud/history");
    assert_eq!(status, 404);
}

#[test]
fn a_schedule_keeps_its_newest_entries_up_to_the_cap() {
    assert_eq!(
        SCHEDULE_AUDIT_ENTRIES, 100,
        "the contract's declared default"
    );
    let s = server();
    create(&s, "capped");
    // The create is entry 1; the first trigger starts a run, the rest are skipped.
    for _ in 1..SCHEDULE_AUDIT_ENTRIES {
        ok(&s, "/api/schedules/capped/trigger", json!({}));
    }
    let full = history(&s, "capped", "?limit=500");
    let at_cap = sequences(&full);
    assert_eq!(at_cap.len(), SCHEDULE_AUDIT_ENTRIES);
    assert_eq!((at_cap[0], at_cap[99]), (1, 100));
    assert_eq!(types(&full)[0], "ScheduleCreated");

    // One more: the oldest goes in the same append.
    ok(&s, "/api/schedules/capped/trigger", json!({}));
    let over = sequences(&history(&s, "capped", "?limit=500"));
    assert_eq!(over.len(), SCHEDULE_AUDIT_ENTRIES);
    assert_eq!((over[0], over[99]), (2, 101));
    // The fire counters are not the audit's: describe still counts every fire.
    let (_, d) = s.get("/api/schedules/capped");
    assert_eq!(d["fires_count"], 1);
    assert_eq!(
        d["info"]["skipped_trigger_count"],
        SCHEDULE_AUDIT_ENTRIES - 1,
        "100 triggers: one started, 99 skipped"
    );
}

#[test]
fn a_deleted_schedules_stream_is_pruned_by_the_sweep_after_its_retention() {
    let s = server();
    for id in ["gone-a", "gone-b", "kept"] {
        create(&s, id);
    }
    for id in ["gone-a", "gone-b"] {
        assert_eq!(
            s.delete_ns("default", &format!("/api/schedules/{id}")).0,
            200
        );
    }
    let deleted_at = now_ms();
    let sweep = |at: i64| s.running.engine().fire_due_schedules(at).unwrap();
    // A minute before the retention ends: still readable.
    sweep(deleted_at + DELETED_SCHEDULE_AUDIT_RETENTION_MS - 60_000);
    assert_eq!(
        types(&history(&s, "gone-a", "")),
        ["ScheduleCreated", "ScheduleDeleted"]
    );
    // Past it: gone (404), and the live schedule's stream is untouched.
    sweep(deleted_at + DELETED_SCHEDULE_AUDIT_RETENTION_MS + 60_000);
    for id in ["gone-a", "gone-b"] {
        let (status, body) = s.get(&format!("/api/schedules/{id}/history"));
        assert_eq!(
            (status, &body["reason"]),
            (404, &json!("schedule_not_found")),
            "{body}"
        );
    }
    // (The sweep fired it too: it was due at the swept times.)
    let kept = history(&s, "kept", "");
    assert_eq!(types(&kept)[0], "ScheduleCreated", "{kept}");
    assert_eq!(sequences(&kept)[0], 1);
}
