//! Schedules over loopback HTTP: the lifecycle, fires through the start
//! path with each overlap policy (buffers included), jitter, update,
//! backfill, time zones, recent actions, the sweep's scan limit, and every
//! schedule limit at its edge.

use crate::support;

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
    for (id, policy) in [
        ("skip", "skip"),
        ("all", "allow_all"),
        ("term", "terminate_other"),
        ("cancel", "cancel_other"),
    ] {
        let mut body = schedule(id, "PT1H");
        body["overlap_policy"] = policy.into();
        assert_eq!(create(&s, body).0, 201);
    }
    // Each pass at a schedule's next moment fires it once; the first runs
    // are still open at the second.
    let first = ms_of(&describe(&s, "cancel")["next_fire_at"]);
    assert_eq!(fire(&s, first), 4);
    assert_eq!(fire(&s, first + HOUR_MS), 4);
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
    // The next pass takes the one left behind (the other two caught up:
    // their next moment is after `later`).
    assert_eq!(fire(&s, later), 1);
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
            json!({ "schedule_id": "x", "spec": { "cron_expressions": ["@daily"], "timezone": "Mars/Olympus" },
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
                 "action": { "workflow_type": "t" }, "overlap_policy": "buffer_some" }),
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
        (
            json!({ "schedule_id": "x", "spec": { "cron_expressions": ["@daily"] },
                 "action": { "workflow_type": "t" }, "max_runs": 0 }),
            "max_runs",
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

fn ms_of(timestamp: &Value) -> i64 {
    timestamp
        .as_str()
        .unwrap_or_else(|| panic!("not a timestamp: {timestamp}"))
        .parse::<jiff::Timestamp>()
        .unwrap()
        .as_millisecond()
}

fn trigger(s: &TestServer, id: &str) -> Value {
    let (status, answer) = s.post(&format!("/api/schedules/{id}/trigger"), json!({}));
    assert_eq!(status, 200, "{answer}");
    answer
}

fn terminate(s: &TestServer, workflow_id: &str) {
    let (status, answer) = s.post(
        &format!("/api/workflows/{workflow_id}/terminate"),
        json!({ "reason": "next" }),
    );
    assert_eq!(status, 200, "{answer}");
}

fn recent(s: &TestServer, id: &str) -> Vec<Value> {
    describe(s, id)["info"]["recent_actions"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn buffer_one_keeps_one_fire_and_starts_it_when_the_run_closes() {
    let s = server(|_| {});
    let mut body = schedule("one", "P1D");
    body["overlap_policy"] = "buffer_one".into();
    assert_eq!(create(&s, body).0, 201);
    let first = trigger(&s, "one");
    assert_eq!(first["outcome"], "triggered", "{first}");
    let buffered = trigger(&s, "one");
    assert_eq!(
        (
            buffered["outcome"].as_str(),
            buffered["buffer_depth"].as_u64()
        ),
        (Some("buffered"), Some(1)),
        "{buffered}"
    );
    let full = trigger(&s, "one");
    assert_eq!(full["outcome"], "buffer_full", "{full}");
    assert!(full["reason"].as_str().unwrap().contains("buffer_one"));
    let d = describe(&s, "one");
    assert_eq!(d["info"]["buffer_depth"], 1);
    assert_eq!(d["info"]["buffered_actions"][0]["trigger"], "manual");
    assert_eq!(d["fires_count"], 1);
    let outcomes: Vec<&str> = d["info"]["recent_actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["started", "buffered", "buffer_full"]);

    // Nothing starts while the first run is open…
    assert_eq!(fire(&s, now_ms()), 0);
    terminate(&s, first["workflow_id"].as_str().unwrap());
    // …and the buffered fire starts on the first pass after it closes.
    assert_eq!(fire(&s, now_ms()), 1);
    let d = describe(&s, "one");
    assert_eq!(
        (
            d["fires_count"].as_i64(),
            d["info"]["buffer_depth"].as_i64()
        ),
        (Some(2), Some(0))
    );
    let last = recent(&s, "one").pop().unwrap();
    assert_eq!(
        (last["trigger"].as_str(), last["outcome"].as_str()),
        (Some("buffered"), Some("started")),
        "{last}"
    );
    let started = last["workflow_id"].as_str().unwrap().to_owned();
    assert_eq!(d["latest_workflow_instance_id"], started.as_str());
    assert!(started.starts_with("one-manual-"), "{started}");
    assert_eq!(
        s.get(&format!("/api/workflows/{started}")).1["status"],
        "running"
    );
    assert_eq!(fire(&s, now_ms()), 0, "the buffer is empty");
}

#[test]
fn buffer_all_holds_its_cap_and_drains_oldest_first() {
    let s = server(|_| {});
    let mut body = schedule("all", "P1D");
    body["overlap_policy"] = "buffer_all".into();
    assert_eq!(create(&s, body).0, 201);
    let first = trigger(&s, "all");
    assert_eq!(first["outcome"], "triggered");
    // The cap (100) passes at its edge; one more is dropped.
    for depth in 1..=100u64 {
        let answer = trigger(&s, "all");
        assert_eq!(answer["buffer_depth"].as_u64(), Some(depth), "{answer}");
    }
    assert_eq!(trigger(&s, "all")["outcome"], "buffer_full");
    let d = describe(&s, "all");
    assert_eq!(d["info"]["buffer_depth"], 100);
    assert_eq!(d["info"]["skipped_trigger_count"], 1);
    let queued: Vec<i64> = d["info"]["buffered_actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| ms_of(&b["buffered_at"]))
        .collect();
    assert!(queued.windows(2).all(|w| w[0] <= w[1]), "oldest first");

    // Each closed run lets exactly the oldest buffered fire start.
    let mut previous = first["workflow_id"].as_str().unwrap().to_owned();
    let mut started = Vec::new();
    for _ in 0..3 {
        terminate(&s, &previous);
        assert_eq!(fire(&s, now_ms()), 1);
        assert_eq!(fire(&s, now_ms()), 0, "one at a time");
        previous = describe(&s, "all")["latest_workflow_instance_id"]
            .as_str()
            .unwrap()
            .to_owned();
        started.push(previous.clone());
    }
    let suffixes: Vec<i64> = started
        .iter()
        .map(|w| w.rsplit('-').next().unwrap().parse().unwrap())
        .collect();
    assert!(suffixes.windows(2).all(|w| w[0] <= w[1]), "{started:?}");
    assert_eq!(describe(&s, "all")["info"]["buffer_depth"], 97);
}

#[test]
fn a_paused_schedule_keeps_its_buffer_and_the_drain_has_the_scan_limit() {
    let s = server(|c| c.schedule_sweep.due_schedule_scan_limit = 1);
    let mut open = Vec::new();
    for id in ["p", "q"] {
        let mut body = schedule(id, "P1D");
        body["overlap_policy"] = "buffer_one".into();
        assert_eq!(create(&s, body).0, 201);
        open.push(trigger(&s, id)["workflow_id"].as_str().unwrap().to_owned());
        assert_eq!(trigger(&s, id)["outcome"], "buffered");
    }
    for workflow_id in &open {
        terminate(&s, workflow_id);
    }
    assert_eq!(s.post("/api/schedules/q/pause", json!({})).0, 200);
    assert_eq!(fire(&s, now_ms()), 1, "p drains; paused q waits");
    assert_eq!(fire(&s, now_ms()), 0);
    assert_eq!(describe(&s, "q")["info"]["buffer_depth"], 1);
    assert_eq!(s.post("/api/schedules/q/resume", json!({})).0, 200);
    // Two ready buffers, a scan limit of one: one per pass.
    let mut body = schedule("r", "P1D");
    body["overlap_policy"] = "buffer_one".into();
    assert_eq!(create(&s, body).0, 201);
    let r = trigger(&s, "r")["workflow_id"].as_str().unwrap().to_owned();
    assert_eq!(trigger(&s, "r")["outcome"], "buffered");
    terminate(&s, &r);
    assert_eq!(fire(&s, now_ms()), 1);
    assert_eq!(fire(&s, now_ms()), 1);
    assert_eq!(fire(&s, now_ms()), 0);
}

#[test]
fn jitter_delays_each_scheduled_fire_within_its_window_and_before_the_next() {
    let s = server(|_| {});
    let mut delays = Vec::new();
    for i in 0..8 {
        let id = format!("j{i}");
        let mut body = schedule(&id, "PT1H");
        body["jitter_seconds"] = 3600.into(); // at its edge
        assert_eq!(create(&s, body).0, 201);
        let d = describe(&s, &id);
        assert_eq!(d["jitter_seconds"], 3600);
        let (at, nominal) = (
            ms_of(&d["next_fire_at"]),
            ms_of(&d["info"]["next_nominal_fire_at"]),
        );
        assert_eq!(nominal % HOUR_MS, 0, "the spec time is on the hour");
        assert!((0..HOUR_MS).contains(&(at - nominal)), "{at} - {nominal}");
        delays.push((id, at, nominal));
    }
    assert!(
        delays.iter().any(|(_, at, nominal)| at != nominal),
        "eight schedules all drew a zero delay: {delays:?}"
    );
    // Due at the jittered time, not the spec time; the run keeps the spec time.
    let (id, at, nominal) = delays
        .iter()
        .find(|(_, at, nominal)| at > nominal)
        .unwrap()
        .clone();
    let before = describe(&s, &id)["fires_count"].as_i64().unwrap();
    s.running.engine().fire_due_schedules(at - 1).unwrap();
    assert_eq!(describe(&s, &id)["fires_count"].as_i64(), Some(before));
    s.running.engine().fire_due_schedules(at).unwrap();
    let d = describe(&s, &id);
    assert_eq!(d["fires_count"].as_i64(), Some(before + 1));
    assert_eq!(
        d["latest_workflow_instance_id"],
        format!("{id}-{}", nominal / 1000).as_str()
    );
    let next = ms_of(&d["info"]["next_nominal_fire_at"]);
    assert_eq!(next, nominal + HOUR_MS);

    // A period shorter than the jitter bounds the delay by the period.
    let mut body = schedule("short", "PT1M");
    body["jitter_seconds"] = 3600.into();
    assert_eq!(create(&s, body).0, 201);
    let d = describe(&s, "short");
    let gap = ms_of(&d["next_fire_at"]) - ms_of(&d["info"]["next_nominal_fire_at"]);
    assert!((0..60_000).contains(&gap), "{gap}");
}

#[test]
fn update_changes_the_fields_present_and_checks_them_as_a_create() {
    let s = server(|c| c.request_limits.max_memo_bytes = 64);
    let mut body = schedule("u", "PT1H");
    body["max_runs"] = 5.into();
    assert_eq!(create(&s, body).0, 201);
    let before = describe(&s, "u");
    let (status, updated) = s.put(
        "/api/schedules/u",
        json!({
            "spec": { "cron_expressions": ["0 9 * * *"], "timezone": "Europe/Kyiv" },
            "action": { "task_queue": "elsewhere" },
            "overlap_policy": "buffer_all",
            "jitter_seconds": 0,
            "note": "moved",
            "unknown_field": "ignored",
        }),
    );
    assert_eq!(
        (status, &updated["outcome"]),
        (200, &json!("updated")),
        "{updated}"
    );
    let d = describe(&s, "u");
    assert_eq!(d["spec"]["timezone"], "Europe/Kyiv");
    assert_eq!(d["action"]["task_queue"], "elsewhere");
    assert_eq!(
        d["action"]["workflow_type"], "report",
        "merged, not replaced"
    );
    assert_eq!(d["action"]["input"], before["action"]["input"]);
    assert_eq!(d["overlap_policy"], "buffer_all");
    assert_eq!(d["note"], "moved");
    assert_eq!(d["max_runs"], 5, "absent fields stay");
    let next = ms_of(&d["next_fire_at"]);
    let local = jiff::Timestamp::from_millisecond(next)
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::get("Europe/Kyiv").unwrap());
    assert_eq!((local.hour(), local.minute()), (9, 0), "{local}");

    // A new cap counts the fires already made.
    trigger(&s, "u");
    let (status, _) = s.put("/api/schedules/u", json!({ "max_runs": 1 }));
    assert_eq!(status, 200);
    let d = describe(&s, "u");
    assert_eq!(
        (d["remaining_actions"].as_i64(), d["next_fire_at"].is_null()),
        (Some(0), true),
        "{d}"
    );

    // Every limit at its edge, through PUT.
    for (patch, ok) in [
        (json!({ "jitter_seconds": 3600 }), true),
        (json!({ "jitter_seconds": 3601 }), false),
        (json!({ "jitter_seconds": -1 }), false),
        (json!({ "max_runs": 1 }), true),
        (json!({ "max_runs": 0 }), false),
        (json!({ "note": "é".repeat(1000) }), true),
        (json!({ "note": "é".repeat(1001) }), false),
        (json!({ "memo": { "k": "x".repeat(56) } }), true),
        (json!({ "memo": { "k": "x".repeat(57) } }), false),
        (
            json!({ "action": { "workflow_type": "t".repeat(255) } }),
            true,
        ),
        (
            json!({ "action": { "workflow_type": "t".repeat(256) } }),
            false,
        ),
        (json!({ "action": { "task_queue": "q".repeat(255) } }), true),
        (
            json!({ "action": { "task_queue": "q".repeat(256) } }),
            false,
        ),
        (
            json!({ "spec": { "cron_expressions": ["@daily"], "timezone": "America/New_York" } }),
            true,
        ),
        (
            json!({ "spec": { "cron_expressions": ["@daily"], "timezone": "Mars/Olympus" } }),
            false,
        ),
        (json!({ "spec": {} }), false),
        (json!({ "overlap_policy": "buffer_one" }), true),
        (json!({ "overlap_policy": "buffer_some" }), false),
        (json!({ "search_attributes": { "Colour": "red" } }), false),
    ] {
        let (status, answer) = s.put("/api/schedules/u", patch.clone());
        if ok {
            assert_eq!(status, 200, "{patch}: {answer}");
        } else {
            assert_eq!(
                (status, &answer["reason"]),
                (422, &json!("validation_failed")),
                "{patch}: {answer}"
            );
        }
    }
    let d = describe(&s, "u");
    assert_eq!(
        d["overlap_policy"], "buffer_one",
        "refused updates changed nothing"
    );
    assert_eq!(d["spec"]["timezone"], "America/New_York");
    assert_eq!(s.put("/api/schedules/nope", json!({})).0, 404);
}

#[test]
fn backfill_fires_every_spec_time_of_the_window_once() {
    let s = server(|c| c.schedule_sweep.max_backfill_fires = 5);
    let mut body = schedule("b", "PT1M");
    body["paused"] = true.into();
    assert_eq!(create(&s, body).0, 201);
    let start = (now_ms() / 60_000 - 120) * 60_000;
    let window = |from: i64, minutes: i64| {
        json!({
            "start_time": jiff::Timestamp::from_millisecond(from).unwrap().to_string(),
            "end_time": jiff::Timestamp::from_millisecond(from + minutes * 60_000).unwrap().to_string(),
        })
    };
    // The cap (5) passes at its edge: [start, start + 5 min) holds 5 minutes.
    let (status, done) = s.post("/api/schedules/b/backfill", window(start, 5));
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        (done["outcome"].as_str(), done["fires_attempted"].as_u64()),
        (Some("backfill_started"), Some(5))
    );
    let results = done["results"].as_array().unwrap();
    for (i, result) in results.iter().enumerate() {
        let at = start + i as i64 * 60_000;
        assert_eq!(ms_of(&result["fire_time"]), at, "inclusive start, in order");
        assert_eq!(result["outcome"], "started", "{result}");
        assert_eq!(result["workflow_id"], format!("b-{}", at / 1000).as_str());
    }
    assert_eq!(describe(&s, "b")["fires_count"], 5);
    // The same window again converges on the same runs.
    let (_, again) = s.post("/api/schedules/b/backfill", window(start, 5));
    assert!(
        again["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["outcome"] == "already_started"),
        "{again}"
    );
    assert_eq!(describe(&s, "b")["fires_count"], 5);
    // One fire over the cap is refused before anything starts.
    let (status, refused) = s.post("/api/schedules/b/backfill", window(start + 3_600_000, 6));
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["validation_errors"]["end_time"].is_array(),
        "{refused}"
    );
    assert_eq!(describe(&s, "b")["fires_count"], 5);
    // An explicit overlap policy applies to each fire.
    let latest = describe(&s, "b")["latest_workflow_instance_id"]
        .as_str()
        .unwrap()
        .to_owned();
    terminate(&s, &latest);
    let mut skip = window(start + 7_200_000, 3);
    skip["overlap_policy"] = "skip".into();
    let (_, skipped) = s.post("/api/schedules/b/backfill", skip);
    let outcomes: Vec<&str> = skipped["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["started", "skipped", "skipped"]);
    for (body, field) in [
        (
            json!({ "start_time": "2026-12-01T00:00:00Z", "end_time": "2026-12-01T00:00:00Z" }),
            "end_time",
        ),
        (
            json!({ "start_time": "yesterday", "end_time": "2026-12-01T00:00:00Z" }),
            "start_time",
        ),
        (
            json!({ "start_time": "2026-12-01T00:00:00", "end_time": "2026-12-01T01:00:00Z" }),
            "start_time",
        ),
        (json!({ "end_time": "2026-12-01T00:00:00Z" }), "start_time"),
        (
            json!({ "start_time": "2026-12-01T00:00:00Z", "end_time": "2026-12-01T01:00:00Z", "overlap_policy": "most" }),
            "overlap_policy",
        ),
    ] {
        let (status, refused) = s.post("/api/schedules/b/backfill", body.clone());
        assert_eq!(status, 422, "{body}: {refused}");
        assert!(
            refused["validation_errors"][field].is_array(),
            "{field}: {refused}"
        );
    }
    assert_eq!(
        s.post("/api/schedules/nope/backfill", window(start, 1)).0,
        404
    );
}

#[test]
fn cron_specs_fire_on_the_wall_clock_of_their_zone() {
    let s = server(|_| {});
    for (id, zone) in [("kyiv", "Europe/Kyiv"), ("york", "America/New_York")] {
        let (status, created) = create(
            &s,
            json!({
                "schedule_id": id,
                "spec": { "cron_expressions": ["30 9 * * *"], "timezone": zone },
                "action": { "workflow_type": "report" },
            }),
        );
        assert_eq!(status, 201, "{created}");
        let d = describe(&s, id);
        let at = jiff::Timestamp::from_millisecond(ms_of(&d["next_fire_at"])).unwrap();
        let local = at.to_zoned(jiff::tz::TimeZone::get(zone).unwrap());
        assert_eq!((local.hour(), local.minute()), (9, 30), "{id}: {local}");
        let now = jiff::Timestamp::from_millisecond(now_ms()).unwrap();
        assert!(at > now && at.as_second() - now.as_second() <= 25 * 3600);
    }
}

#[test]
fn describe_keeps_the_last_ten_actions_and_list_filters() {
    let s = server(|_| {});
    let mut body = schedule("many", "P1D");
    body["overlap_policy"] = "allow_all".into();
    assert_eq!(create(&s, body).0, 201);
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(
            trigger(&s, "many")["workflow_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let actions = recent(&s, "many");
    assert_eq!(actions.len(), 10, "the oldest two dropped out");
    let kept: Vec<&str> = actions
        .iter()
        .map(|a| a["workflow_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        kept,
        ids[2..].iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(actions
        .iter()
        .all(|a| a["trigger"] == "manual" && a["fired_at"].is_string()));
    assert_eq!(describe(&s, "many")["fires_count"], 12);

    let mut other = schedule("other", "P1D");
    other["action"]["workflow_type"] = "cleanup".into();
    assert_eq!(create(&s, other).0, 201);
    let (_, page) = s.get("/api/schedules?workflow_type=cleanup");
    let listed: Vec<&str> = page["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["schedule_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["other"]);
    let (status, refused) = s.get("/api/schedules?query=x");
    assert_eq!(status, 422, "{refused}");
    for (size, ok) in [("1000", true), ("1", true), ("1001", false), ("0", false)] {
        let (status, _) = s.get(&format!("/api/schedules?page_size={size}"));
        assert_eq!(status == 200, ok, "page_size {size}");
    }
    let (_, first) = s.get("/api/schedules?page_size=1");
    let token = first["next_page_token"].as_str().unwrap();
    let (_, second) = s.get(&format!(
        "/api/schedules?page_size=1&next_page_token={token}"
    ));
    assert_eq!(second["schedules"][0]["schedule_id"], "other");
    assert!(second["next_page_token"].is_null());
}

#[test]
fn a_backfill_of_the_default_cap_starts_every_fire_and_one_more_is_refused() {
    let s = server(|_| {});
    let mut body = schedule("cap", "PT1S");
    body["paused"] = true.into();
    assert_eq!(create(&s, body).0, 201);
    let start = (now_ms() / 1000 - 86_400) * 1000;
    let window = |seconds: i64| {
        json!({
            "start_time": jiff::Timestamp::from_millisecond(start).unwrap().to_string(),
            "end_time": jiff::Timestamp::from_millisecond(start + seconds * 1000).unwrap().to_string(),
        })
    };
    let (status, refused) = s.post("/api/schedules/cap/backfill", window(1001));
    assert_eq!(status, 422, "{refused}");
    assert!(refused["validation_errors"]["end_time"][0]
        .as_str()
        .unwrap()
        .contains("more than 1000 fires"));
    assert_eq!(describe(&s, "cap")["fires_count"], 0, "nothing started");
    let (status, done) = s.post("/api/schedules/cap/backfill", window(1000));
    assert_eq!(status, 200);
    assert_eq!(done["fires_attempted"], 1000);
    assert_eq!(describe(&s, "cap")["fires_count"], 1000);
    assert_eq!(
        describe(&s, "cap")["info"]["recent_actions"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
}

/// The history entries of `id` (the first page of 500).
fn audit(s: &TestServer, id: &str) -> Vec<Value> {
    let (status, body) = s.get(&format!("/api/schedules/{id}/history?limit=500"));
    assert_eq!(status, 200, "{body}");
    body["events"].as_array().unwrap().clone()
}

/// Suffixes (spec times, unix seconds) of the runs a schedule started.
fn started_moments(s: &TestServer, id: &str) -> Vec<i64> {
    let mut moments: Vec<i64> = audit(s, id)
        .iter()
        .filter(|e| e["event_type"] == "ScheduleTriggered")
        .map(|e| {
            let workflow_id = e["workflow_instance_id"].as_str().unwrap();
            workflow_id.rsplit('-').next().unwrap().parse().unwrap()
        })
        .collect();
    moments.sort_unstable();
    moments
}

#[test]
fn a_schedule_behind_by_ten_moments_catches_up_in_one_pass_by_its_overlap_policy() {
    let s = server(|_| {});
    let policies = [
        "skip",
        "allow_all",
        "buffer_one",
        "buffer_all",
        "cancel_other",
        "terminate_other",
    ];
    for policy in policies {
        let mut body = schedule(policy, "PT1M");
        body["overlap_policy"] = policy.into();
        assert_eq!(create(&s, body).0, 201);
    }
    // Behind by ten moments: the first owed one and nine more.
    let first = policies
        .iter()
        .map(|p| ms_of(&describe(&s, p)["next_fire_at"]))
        .max()
        .unwrap();
    let now = first + 9 * 60_000;
    let moment = |i: i64| (first + i * 60_000) / 1000;
    let owed = |policy: &str| (now - ms_of(&describe(&s, policy)["next_fire_at"])) / 60_000 + 1;
    let owed: Vec<(&str, i64)> = policies.iter().map(|p| (*p, owed(p))).collect();
    let fired = fire(&s, now);
    // A fire each for skip, cancel_other and terminate_other, two for
    // buffer_one, every owed moment for allow_all and buffer_all.
    let expected: i64 = owed
        .iter()
        .map(|(p, n)| match *p {
            "allow_all" | "buffer_all" => *n,
            "buffer_one" => 2.min(*n),
            _ => 1,
        })
        .sum();
    assert_eq!(fired as i64, expected, "{owed:?}");
    assert_eq!(
        fire(&s, now),
        0,
        "caught up: nothing is due until the next moment"
    );

    let d = |p: &str| describe(&s, p);
    let skipped = |p: &str| d(p)["info"]["skipped_trigger_count"].as_i64().unwrap();
    let n = |p: &str| owed.iter().find(|(q, _)| *q == p).unwrap().1;
    // skip, cancel_other, terminate_other: the newest moment starts, the
    // rest are passed over, counted and explained once.
    for policy in ["skip", "cancel_other", "terminate_other"] {
        assert_eq!(started_moments(&s, policy), [moment(9)], "{policy}");
        assert_eq!(d(policy)["fires_count"], 1, "{policy}");
        assert_eq!(skipped(policy), n(policy) - 1, "{policy}");
        let missed: Vec<Value> = audit(&s, policy)
            .into_iter()
            .filter(|e| e["event_type"] == "ScheduleTriggerSkipped")
            .collect();
        assert_eq!(missed.len(), 1, "one entry for the lot: {missed:?}");
        assert_eq!(missed[0]["payload"]["missed_moments"], n(policy) - 1);
        let reason = missed[0]["payload"]["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!("overlap policy {policy} fires the newest 1 of")),
            "{reason}"
        );
        assert_eq!(d(policy)["info"]["last_skip_reason"].as_str(), Some(reason));
    }
    // allow_all: every owed moment has its run.
    let all = started_moments(&s, "allow_all");
    assert_eq!(all.len() as i64, n("allow_all"));
    assert_eq!(all.last(), Some(&moment(9)));
    assert_eq!(skipped("allow_all"), 0);
    // buffer_one: the second newest starts, the newest waits, the rest are passed over.
    assert_eq!(started_moments(&s, "buffer_one"), [moment(8)]);
    let one = d("buffer_one");
    assert_eq!(one["info"]["buffer_depth"], 1);
    assert_eq!(
        ms_of(&one["info"]["buffered_actions"][0]["scheduled_at"]) / 1000,
        moment(9)
    );
    assert_eq!(skipped("buffer_one"), n("buffer_one") - 2);
    // buffer_all: the oldest starts, every other owed moment waits in order.
    let all = d("buffer_all");
    assert_eq!(started_moments(&s, "buffer_all").len(), 1);
    assert_eq!(
        all["info"]["buffer_depth"].as_i64(),
        Some(n("buffer_all") - 1)
    );
    assert_eq!(skipped("buffer_all"), 0);
    // Each moved on to its first moment after now.
    for policy in policies {
        let next = ms_of(&d(policy)["info"]["next_nominal_fire_at"]);
        assert_eq!(next, first + 10 * 60_000, "{policy}");
    }
    // cancel_other and terminate_other stopped nothing: the backlog's
    // moments did not stop each other's runs.
    let (_, stopped) = s.get("/api/workflows?status=terminated");
    assert_eq!(stopped["workflows"].as_array().map(Vec::len), Some(0));
}

#[test]
fn moments_older_than_the_catch_up_window_are_skipped_and_allow_all_has_a_cap() {
    let s = server(|c| c.schedule_sweep.catchup_window = Duration::from_secs(300));
    let mut body = schedule("wide", "PT1M");
    body["overlap_policy"] = "allow_all".into();
    assert_eq!(create(&s, body).0, 201);
    let first = ms_of(&describe(&s, "wide")["next_fire_at"]);
    // An hour behind: 61 moments owed, the last six inside the window
    // (now - 300 s, now - 240 s, … now).
    let now = first + HOUR_MS;
    assert_eq!(fire(&s, now), 6);
    let d = describe(&s, "wide");
    assert_eq!(d["fires_count"], 6);
    assert_eq!(d["info"]["skipped_trigger_count"], 55);
    let reason = d["info"]["last_skip_reason"].as_str().unwrap();
    assert!(
        reason.contains("55 moment(s)")
            && reason.contains("older than the catch-up window of 300 s"),
        "{reason}"
    );
    let started = started_moments(&s, "wide");
    assert_eq!(started.first(), Some(&((now - 300_000) / 1000)));
    assert_eq!(started.last(), Some(&(now / 1000)));

    // allow_all's catch-up cap: the newest moments up to the cap fire.
    let s = server(|c| c.schedule_sweep.max_catchup_fires = 3);
    let mut body = schedule("capped", "PT1M");
    body["overlap_policy"] = "allow_all".into();
    body["max_runs"] = 50.into();
    assert_eq!(create(&s, body).0, 201);
    let first = ms_of(&describe(&s, "capped")["next_fire_at"]);
    assert_eq!(fire(&s, first + 9 * 60_000), 3);
    let d = describe(&s, "capped");
    assert_eq!(
        (
            d["fires_count"].as_i64(),
            d["info"]["skipped_trigger_count"].as_i64()
        ),
        (Some(3), Some(7))
    );
    assert_eq!(
        started_moments(&s, "capped"),
        [7, 8, 9].map(|i| (first + i * 60_000) / 1000)
    );
    // max_runs bounds a catch-up too.
    let mut body = schedule("few", "PT1M");
    body["overlap_policy"] = "allow_all".into();
    body["max_runs"] = 2.into();
    assert_eq!(create(&s, body).0, 201);
    let first = ms_of(&describe(&s, "few")["next_fire_at"]);
    fire(&s, first + 9 * 60_000);
    let d = describe(&s, "few");
    assert_eq!(
        (d["fires_count"].as_i64(), d["remaining_actions"].as_i64()),
        (Some(2), Some(0))
    );
    assert!(d["next_fire_at"].is_null(), "{d}");
}

fn lag_metric(s: &TestServer) -> f64 {
    let (status, _, text) = s.get_text("/api/system/prometheus-metrics?namespace=default");
    assert_eq!(status, 200, "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("dw_schedule_lag_seconds "))
        .unwrap_or_else(|| panic!("no dw_schedule_lag_seconds in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn the_lag_metric_reflects_a_backlog_and_returns_to_zero_once_caught_up() {
    let s = server(|_| {});
    assert_eq!(lag_metric(&s), 0.0, "no schedule: no lag");
    let engine = s.running.engine();
    assert_eq!(create(&s, schedule("hourly", "PT1H")).0, 201);
    let due = ms_of(&describe(&s, "hourly")["next_fire_at"]);
    // Exact at any instant: nothing owed before the due time, the time
    // past it after, and 0 once the pass has fired it.
    assert_eq!(engine.schedule_lag_ms(due - 1).unwrap(), 0);
    assert_eq!(engine.schedule_lag_ms(due + 5_000).unwrap(), 5_000);
    assert_eq!(fire(&s, due + 5_000), 1);
    assert_eq!(engine.schedule_lag_ms(due + 5_000).unwrap(), 0);

    // On the scrape, as the clock runs: a one-second schedule the sweep
    // does not reach falls behind…
    assert_eq!(create(&s, schedule("second", "PT1S")).0, 201);
    assert!(
        support::eventually(Duration::from_secs(60), || lag_metric(&s) >= 2.0),
        "{}",
        lag_metric(&s)
    );
    let (_, operator) = s.get("/api/system/operator-metrics");
    assert!(
        operator["schedule_lag_seconds"].as_f64().unwrap() >= 2.0,
        "{operator}"
    );
    // …and a pass catches it up (one start, the rest skipped): nothing is
    // owed at the pass's instant.
    let at = now_ms();
    assert_eq!(fire(&s, at), 1);
    assert_eq!(engine.schedule_lag_ms(at).unwrap(), 0);
    let d = describe(&s, "second");
    assert_eq!(d["fires_count"], 1);
    assert!(
        d["info"]["skipped_trigger_count"].as_i64().unwrap() >= 1,
        "{d}"
    );
}

#[test]
fn racing_passes_claim_each_owed_moment_once() {
    // Two nodes on one store during a sweep-lease hand-over run passes at
    // once: the batch claim is a compare-and-set per schedule, so each owed
    // moment still fires once.
    let s = Arc::new(server(|_| {}));
    let ids: Vec<String> = (0..30).map(|i| format!("race-{i:02}")).collect();
    for id in &ids {
        let mut body = schedule(id, "PT1M");
        body["overlap_policy"] = "allow_all".into();
        assert_eq!(create(&s, body).0, 201);
    }
    let due: Vec<i64> = ids
        .iter()
        .map(|id| ms_of(&describe(&s, id)["next_fire_at"]))
        .collect();
    let at = due.iter().max().unwrap() + 2 * 60_000;
    let gate = Arc::new(std::sync::Barrier::new(4));
    let passes: Vec<_> = (0..4)
        .map(|_| {
            let (s, gate) = (s.clone(), gate.clone());
            std::thread::spawn(move || {
                gate.wait();
                fire(&s, at)
            })
        })
        .collect();
    let fired: usize = passes.into_iter().map(|p| p.join().unwrap()).sum();
    let mut total = 0;
    for (id, due) in ids.iter().zip(&due) {
        let owed = (at - due) / 60_000 + 1;
        let moments = started_moments(&s, id);
        let mut unique = moments.clone();
        unique.dedup();
        assert_eq!(moments, unique, "{id}: a moment started twice");
        assert_eq!(moments.len() as i64, owed, "{id}: {moments:?}");
        assert_eq!(describe(&s, id)["fires_count"].as_i64(), Some(owed));
        total += moments.len();
    }
    assert_eq!(fired, total, "the passes together fired each moment once");
}
