//! Schedules over loopback HTTP: the lifecycle, fires through the start
//! path with each overlap policy, the sweep's scan limit, and every
//! request-boundary limit at its edge.

mod support;

use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::server::ServerConfig;
use serde_json::{json, Value};
use support::TestServer;

const HOUR_MS: i64 = 3_600_000;

fn server(tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), |c| {
        // The background sweep stays out of the way; tests fire explicitly.
        c.schedule_sweep.interval = Duration::from_secs(3600);
        tweak(c);
    })
}

fn schedule(id: &str, every: &str) -> Value {
    json!({
        "schedule_id": id,
        "spec": { "intervals": [{ "every": every }] },
        "action": { "workflow_type": "report", "task_queue": "reports",
                    "input": { "codec": "json", "blob": "[1]" } },
    })
}

fn create(s: &TestServer, body: Value) -> (u16, Value) {
    s.post("/api/schedules", body)
}

fn describe(s: &TestServer, id: &str) -> Value {
    let (status, body) = s.get(&format!("/api/schedules/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

fn fire(s: &TestServer, at_ms: i64) -> usize {
    s.running.engine().fire_due_schedules(at_ms).unwrap()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn a_schedule_is_created_described_listed_fired_through_the_start_path_and_deleted() {
    let s = server(|_| {});
    let mut body = schedule("nightly", "PT1H");
    body["memo"] = json!({ "owner": "ops" });
    body["note"] = "first".into();
    let (status, created) = create(&s, body.clone());
    assert_eq!(
        (status, &created["outcome"]),
        (201, &json!("created")),
        "{created}"
    );
    let (status, duplicate) = create(&s, body);
    assert_eq!(
        (status, &duplicate["reason"]),
        (409, &json!("schedule_already_exists"))
    );

    let described = describe(&s, "nightly");
    assert_eq!(described["status"], "active");
    assert_eq!(described["overlap_policy"], "skip");
    assert_eq!(described["action"]["workflow_type"], "report");
    assert_eq!(described["spec"]["intervals"][0]["every"], "PT1H");
    assert_eq!(described["fires_count"], 0);
    let next = described["next_fire_at"].as_str().unwrap();
    assert!(
        next.ends_with(":00:00.000000Z"),
        "hourly, epoch-aligned: {next}"
    );
    let (_, page) = s.get("/api/schedules");
    assert_eq!(page["schedules"][0]["schedule_id"], "nightly");

    assert_eq!(fire(&s, now_ms() + HOUR_MS), 1);
    let fired = describe(&s, "nightly");
    assert_eq!(fired["fires_count"], 1);
    let workflow_id = fired["latest_workflow_instance_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(workflow_id.starts_with("nightly-"), "{workflow_id}");
    assert_ne!(fired["next_fire_at"], described["next_fire_at"], "moved on");
    // The run went through the start path: memo, queue and a workflow task.
    let (status, run) = s.get(&format!("/api/workflows/{workflow_id}"));
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["memo"]["owner"], "ops");
    assert_eq!(run["task_queue"], "reports");
    assert_eq!(run["status"], "running");

    let (status, deleted) = s.delete_ns("default", "/api/schedules/nightly");
    assert_eq!((status, &deleted["outcome"]), (200, &json!("deleted")));
    assert_eq!(s.get("/api/schedules/nightly").0, 404);
    assert_eq!(s.delete_ns("default", "/api/schedules/nightly").0, 404);
    assert_eq!(
        s.get(&format!("/api/workflows/{workflow_id}")).1["status"],
        "running"
    );
}

#[test]
fn overlap_policies_skip_allow_or_stop_the_previous_run() {
    let s = server(|_| {});
    let start = now_ms();
    for (id, policy) in [
        ("skip", "skip"),
        ("all", "allow_all"),
        ("term", "terminate_other"),
        ("cancel", "cancel_other"),
    ] {
        let mut body = schedule(id, "PT1M");
        body["overlap_policy"] = policy.into();
        assert_eq!(create(&s, body).0, 201);
    }
    // Each pass fires each due schedule once; the first runs are still open.
    assert_eq!(fire(&s, start + HOUR_MS), 4);
    assert_eq!(fire(&s, start + HOUR_MS), 4);
    let skip = describe(&s, "skip");
    assert_eq!(
        (
            skip["fires_count"].as_i64(),
            skip["info"]["skipped_trigger_count"].as_i64()
        ),
        (Some(1), Some(1))
    );
    assert!(skip["info"]["last_skip_reason"]
        .as_str()
        .unwrap()
        .contains("still running"));
    assert_eq!(describe(&s, "all")["fires_count"], 2);
    let (_, running) = s.get("/api/workflows?workflow_type=report&status=running");
    let open: Vec<&str> = running["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workflow_id"].as_str().unwrap())
        .collect();
    assert_eq!(open.iter().filter(|w| w.starts_with("all-")).count(), 2);
    assert_eq!(open.iter().filter(|w| w.starts_with("term-")).count(), 1);
    assert_eq!(open.iter().filter(|w| w.starts_with("cancel-")).count(), 1);
    let (_, terminated) = s.get("/api/workflows?status=terminated");
    assert_eq!(
        terminated["workflows"][0]["workflow_id"]
            .as_str()
            .unwrap()
            .split('-')
            .next(),
        Some("term")
    );
    let (_, cancelled) = s.get("/api/workflows?status=cancelled");
    assert_eq!(cancelled["workflows"].as_array().unwrap().len(), 1);
}

#[test]
fn pause_resume_trigger_and_max_runs() {
    let s = server(|_| {});
    let mut body = schedule("once", "PT1M");
    body["max_runs"] = 1.into();
    assert_eq!(create(&s, body).0, 201);
    assert_eq!(create(&s, schedule("paused", "PT1M")).0, 201);
    let (status, paused) = s.post(
        "/api/schedules/paused/pause",
        json!({ "note": "n".repeat(1000) }),
    );
    assert_eq!(
        (status, &paused["outcome"]),
        (200, &json!("paused")),
        "{paused}"
    );
    let d = describe(&s, "paused");
    assert_eq!(
        (
            d["status"].as_str(),
            d["next_fire_at"].is_null(),
            d["paused_at"].is_string()
        ),
        (Some("paused"), true, true)
    );
    assert_eq!(
        fire(&s, now_ms() + HOUR_MS),
        1,
        "only the active schedule fires"
    );
    assert_eq!(
        fire(&s, now_ms() + 2 * HOUR_MS),
        0,
        "max_runs spent, paused skipped"
    );
    let once = describe(&s, "once");
    assert_eq!(
        (
            once["remaining_actions"].as_i64(),
            once["next_fire_at"].is_null()
        ),
        (Some(0), true)
    );

    // A trigger fires a paused schedule at once, through the same start path.
    let (status, triggered) = s.post("/api/schedules/paused/trigger", json!({}));
    assert_eq!(
        (status, &triggered["outcome"]),
        (200, &json!("triggered")),
        "{triggered}"
    );
    let workflow_id = triggered["workflow_id"].as_str().unwrap();
    assert_eq!(s.get(&format!("/api/workflows/{workflow_id}")).0, 200);
    let (_, skipped) = s.post("/api/schedules/paused/trigger", json!({}));
    assert_eq!(skipped["outcome"], "skipped");
    let (_, allowed) = s.post(
        "/api/schedules/paused/trigger",
        json!({ "overlap_policy": "allow_all" }),
    );
    assert_eq!(allowed["outcome"], "triggered");

    let (status, resumed) = s.post("/api/schedules/paused/resume", json!({}));
    assert_eq!((status, &resumed["outcome"]), (200, &json!("resumed")));
    let d = describe(&s, "paused");
    assert_eq!(
        (d["status"].as_str(), d["next_fire_at"].is_string()),
        (Some("active"), true)
    );
    assert_eq!(s.post("/api/schedules/nope/pause", json!({})).0, 404);
    let (status, long) = s.post(
        "/api/schedules/paused/pause",
        json!({ "note": "n".repeat(1001) }),
    );
    assert_eq!(
        (status, long["validation_errors"]["note"].is_array()),
        (422, true)
    );
}

#[test]
fn the_due_scan_fires_at_most_its_declared_limit_per_pass() {
    let s = server(|c| c.schedule_sweep.due_schedule_scan_limit = 2);
    for id in ["a", "b", "c"] {
        assert_eq!(create(&s, schedule(id, "PT1M")).0, 201);
    }
    let later = now_ms() + HOUR_MS;
    assert_eq!(fire(&s, later), 2);
    let fired = |id: &str| describe(&s, id)["fires_count"].as_i64().unwrap();
    assert_eq!(
        fired("a") + fired("b") + fired("c"),
        2,
        "two of three per pass"
    );
    // The next pass takes the one left behind first (earliest due time).
    assert_eq!(fire(&s, later), 2);
    assert_eq!((fired("a"), fired("b"), fired("c")), (1, 1, 1));
}

#[test]
fn the_background_sweep_fires_due_schedules() {
    let s = TestServer::start(Arc::new(MemoryCache::default()), |c| {
        c.schedule_sweep.interval = Duration::from_millis(50);
    });
    assert_eq!(create(&s, schedule("tick", "PT1S")).0, 201);
    assert!(
        support::eventually(Duration::from_secs(10), || describe(&s, "tick")
            ["fires_count"]
            .as_i64()
            .unwrap_or(0)
            >= 1),
        "{}",
        describe(&s, "tick")
    );
}

#[test]
fn every_boundary_limit_passes_at_its_edge_and_fails_one_over() {
    let s = server(|c| c.request_limits.max_memo_bytes = 64);
    assert_eq!(
        s.post(
            "/api/search-attributes",
            json!({ "name": "Region", "type": "keyword" })
        )
        .0,
        201
    );
    let edge = |id: &str, tweak: &dyn Fn(&mut Value)| {
        let mut body = schedule(id, "PT1H");
        tweak(&mut body);
        create(&s, body)
    };
    // {"k":"…"} is 8 bytes plus the value: 56 characters make 64 bytes.
    type Tweak = Box<dyn Fn(&mut Value, usize)>;
    let cases: Vec<(&str, usize, Tweak)> = vec![
        (
            "memo",
            56,
            Box::new(|b, n| b["memo"] = json!({ "k": "x".repeat(n) })),
        ),
        (
            "action.workflow_type",
            255,
            Box::new(|b, n| b["action"]["workflow_type"] = "t".repeat(n).into()),
        ),
        (
            "task_queue",
            255,
            Box::new(|b, n| b["action"]["task_queue"] = "q".repeat(n).into()),
        ),
        (
            "search_attributes",
            2048,
            Box::new(|b, n| b["search_attributes"] = json!({ "Region": "r".repeat(n) })),
        ),
        (
            "note",
            1000,
            Box::new(|b, n| b["note"] = "é".repeat(n).into()),
        ),
        (
            "schedule_id",
            100,
            Box::new(|b, n| b["schedule_id"] = "s".repeat(n).into()),
        ),
    ];
    for (i, (field, limit, tweak)) in cases.iter().enumerate() {
        let (status, body) = edge(&format!("at-{i}"), &|b| tweak(b, *limit));
        assert_eq!(status, 201, "{field} at {limit}: {body}");
        let (status, body) = edge(&format!("over-{i}"), &|b| tweak(b, limit + 1));
        assert_eq!(
            (status, &body["reason"]),
            (422, &json!("validation_failed")),
            "{field} over"
        );
        let errors = body["validation_errors"].as_object().unwrap();
        let key = if *field == "action.workflow_type" {
            "workflow_type"
        } else {
            field
        };
        assert!(errors.contains_key(key), "{field}: {body}");
    }
    for (body, field) in [
        (
            json!({ "schedule_id": "x", "spec": { "cron_expressions": ["61 * * * *"] },
                 "action": { "workflow_type": "t" } }),
            "spec.cron_expressions.0",
        ),
        (
            json!({ "schedule_id": "x", "spec": {}, "action": { "workflow_type": "t" } }),
            "spec",
        ),
        (
            json!({ "schedule_id": "x", "spec": { "cron_expressions": ["@daily"], "timezone": "Europe/Kyiv" },
                 "action": { "workflow_type": "t" } }),
            "spec.timezone",
        ),
        (
            json!({ "schedule_id": "x", "spec": { "intervals": [{ "every": "1h" }] },
                 "action": { "workflow_type": "t" } }),
            "spec.intervals.0",
        ),
        (
            json!({ "schedule_id": "x", "spec": { "cron_expressions": ["@daily"] },
                 "action": { "workflow_type": "t" }, "overlap_policy": "buffer_one" }),
            "overlap_policy",
        ),
        (
            json!({ "schedule_id": "x", "spec": { "cron_expressions": ["@daily"] },
                 "action": { "workflow_type": "t" }, "search_attributes": { "Colour": "red" } }),
            "search_attributes",
        ),
        (
            json!({ "schedule_id": "x", "spec": { "cron_expressions": ["@daily"] } }),
            "action",
        ),
        (
            json!({ "schedule_id": "x", "spec": { "cron_expressions": ["@daily"] },
                 "action": { "workflow_type": "t" }, "jitter_seconds": 3601 }),
            "jitter_seconds",
        ),
    ] {
        let (status, refused) = create(&s, body);
        assert_eq!(status, 422, "{field}: {refused}");
        assert!(
            refused["validation_errors"].get(field).is_some(),
            "{field}: {refused}"
        );
    }
    assert_eq!(s.get("/api/schedules/x").0, 404, "nothing was written");
}
