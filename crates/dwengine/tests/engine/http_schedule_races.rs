//! Schedule fires racing each other over loopback HTTP: many manual
//! triggers at once, and triggers against the due-schedule sweep. Under
//! `skip` and the buffer policies the overlap decision commits with the
//! start, so exactly one run starts however the callers interleave.

use crate::support;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use serde_json::{json, Value};
use support::TestServer;

const CALLERS: usize = 12;

fn server() -> Arc<TestServer> {
    Arc::new(TestServer::start(Arc::new(MemoryCache::default()), |c| {
        // The background sweep stays out of the way; tests fire explicitly.
        c.schedule_sweep.interval = Duration::from_secs(3600);
    }))
}

fn create(s: &TestServer, id: &str, policy: &str, every: &str) {
    let (status, body) = s.post(
        "/api/schedules",
        json!({
            "schedule_id": id, "overlap_policy": policy,
            "spec": { "intervals": [{ "every": every }] },
            "action": { "workflow_type": "report", "task_queue": "races" },
        }),
    );
    assert_eq!(status, 201, "{body}");
}

/// `CALLERS` triggers released together: their outcomes.
fn triggers_at_once(s: &Arc<TestServer>, id: &str) -> Vec<String> {
    let gate = Arc::new(Barrier::new(CALLERS));
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (s, gate, id) = (s.clone(), gate.clone(), id.to_owned());
            thread::spawn(move || {
                gate.wait();
                let (status, answer) = s.post(&format!("/api/schedules/{id}/trigger"), json!({}));
                assert_eq!(status, 200, "{answer}");
                answer["outcome"].as_str().unwrap().to_owned()
            })
        })
        .collect();
    callers.into_iter().map(|c| c.join().unwrap()).collect()
}

fn count(outcomes: &[String], outcome: &str) -> usize {
    outcomes.iter().filter(|o| *o == outcome).count()
}

/// The runs the schedule started, by listing its workflows.
fn runs_of(s: &TestServer, id: &str) -> usize {
    let (status, body) = s.get("/api/workflows?page_size=1000");
    assert_eq!(status, 200, "{body}");
    body["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| {
            w["workflow_id"]
                .as_str()
                .is_some_and(|w| w.starts_with(&format!("{id}-")))
        })
        .count()
}

fn describe(s: &TestServer, id: &str) -> Value {
    let (status, body) = s.get(&format!("/api/schedules/{id}"));
    assert_eq!(status, 200, "{body}");
    body
}

#[test]
fn concurrent_triggers_under_skip_start_exactly_one_run() {
    let s = server();
    for round in 0..3 {
        let id = format!("skip-{round}");
        create(&s, &id, "skip", "P1D");
        let outcomes = triggers_at_once(&s, &id);
        assert_eq!(count(&outcomes, "triggered"), 1, "{outcomes:?}");
        assert_eq!(count(&outcomes, "skipped"), CALLERS - 1, "{outcomes:?}");
        assert_eq!(runs_of(&s, &id), 1);
        let d = describe(&s, &id);
        assert_eq!(d["fires_count"], 1, "{d}");
        assert_eq!(d["info"]["skipped_trigger_count"], CALLERS - 1, "{d}");
    }
}

#[test]
fn concurrent_triggers_under_buffer_one_start_one_and_buffer_one() {
    let s = server();
    for round in 0..3 {
        let id = format!("buf-{round}");
        create(&s, &id, "buffer_one", "P1D");
        let outcomes = triggers_at_once(&s, &id);
        assert_eq!(count(&outcomes, "triggered"), 1, "{outcomes:?}");
        assert_eq!(count(&outcomes, "buffered"), 1, "{outcomes:?}");
        assert_eq!(count(&outcomes, "buffer_full"), CALLERS - 2, "{outcomes:?}");
        assert_eq!(runs_of(&s, &id), 1);
        assert_eq!(describe(&s, &id)["info"]["buffer_depth"], 1);
    }
}

#[test]
fn a_trigger_racing_the_due_fire_starts_one_run() {
    let s = server();
    for round in 0..6 {
        let id = format!("due-{round}");
        // Due at once: an interval of a second has a spec time every second.
        create(&s, &id, "skip", "PT1S");
        // Its own first moment, so it owes exactly one (earlier rounds'
        // schedules owe more and catch up by skipping).
        let far = describe(&s, &id)["next_fire_at"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_millisecond();
        let gate = Arc::new(Barrier::new(CALLERS + 1));
        let sweep = {
            let (s, gate) = (s.clone(), gate.clone());
            thread::spawn(move || {
                gate.wait();
                s.running.engine().fire_due_schedules(far).unwrap()
            })
        };
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                let (s, gate, id) = (s.clone(), gate.clone(), id.clone());
                thread::spawn(move || {
                    gate.wait();
                    let (status, answer) =
                        s.post(&format!("/api/schedules/{id}/trigger"), json!({}));
                    assert_eq!(status, 200, "{answer}");
                    answer["outcome"].as_str().unwrap().to_owned()
                })
            })
            .collect();
        let outcomes: Vec<String> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        sweep.join().unwrap();
        assert_eq!(runs_of(&s, &id), 1, "round {round}: {outcomes:?}");
        let d = describe(&s, &id);
        assert_eq!(d["fires_count"], 1, "{d}");
        // Every fire was counted once: the sweep's and the triggers', one
        // started and the rest skipped. (Earlier rounds' schedules are due
        // too; their runs are open, so their fires are skipped on them.)
        assert_eq!(d["info"]["skipped_trigger_count"], CALLERS, "{d}");
        assert_eq!(
            count(&outcomes, "skipped") + count(&outcomes, "triggered"),
            CALLERS
        );
    }
}
