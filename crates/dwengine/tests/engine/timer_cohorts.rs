//! Due-timer recovery is scoped to the polled namespace, task queue and
//! build-id compatibility cohort: over loopback HTTP, a poll of one build
//! fires only the due timers of the runs that build took, unversioned
//! polls fire none of them, and the scan limit holds per cohort.

use crate::support;

use serde_json::{json, Value};
use support::TestServer;

fn poll(s: &TestServer, queue: &str, build: Option<&str>, id: &str, timeout: f64) -> Value {
    let mut body = json!({ "task_queue": queue, "worker_id": format!("w-{build:?}"),
                           "poll_request_id": id, "timeout_seconds": timeout });
    if let Some(build) = build {
        body["build_id"] = build.into();
    }
    let (status, answer) = s.post("/api/worker/workflow-tasks/poll", body);
    assert_eq!(status, 200, "{answer}");
    answer
}

fn fired_timer(task: &Value) -> bool {
    task["history_events"]
        .as_array()
        .is_some_and(|events| events.iter().any(|e| e["event_type"] == "TimerFired"))
}

#[test]
fn a_build_fires_only_its_own_runs_due_timers() {
    let cache = support::memory_cache();
    let s = TestServer::start(cache, |c| c.poller.due_timer_recovery_scan_limit = 2);
    // Runs 0..3 go to build b1, 3..6 to build b2, 6 to an unversioned worker.
    let takers: [Option<&str>; 7] = [
        Some("b1"),
        Some("b1"),
        Some("b1"),
        Some("b2"),
        Some("b2"),
        Some("b2"),
        None,
    ];
    for (i, build) in takers.iter().enumerate() {
        s.start_workflow("default", &format!("wf-{i}"), "orders");
        let task = poll(&s, "orders", *build, &format!("first-{i}"), 1.0)["task"].clone();
        assert_eq!(task["workflow_id"], format!("wf-{i}"));
        let (status, body) = s.complete(
            &task,
            json!([{ "type": "start_timer", "delay_seconds": 1 }]),
        );
        assert_eq!(status, 200, "{body}");
    }
    std::thread::sleep(std::time::Duration::from_millis(1_300));
    let leased = |build: Option<&str>, tag: &str| {
        let mut workflows = Vec::new();
        for n in 0..10 {
            let task = poll(&s, "orders", build, &format!("{tag}-{n}"), 0.0)["task"].clone();
            if task.is_null() {
                break;
            }
            assert!(fired_timer(&task), "{task}");
            workflows.push(task["workflow_id"].as_str().unwrap().to_owned());
            let (status, _) = s.complete(&task, json!([]));
            assert_eq!(status, 200);
        }
        workflows.sort();
        workflows
    };
    // b2's polls fire b2's three timers (two per pass at most), nobody else's.
    assert_eq!(leased(Some("b2"), "b2"), ["wf-3", "wf-4", "wf-5"]);
    // The unversioned cohort has its one run.
    assert_eq!(leased(None, "plain"), ["wf-6"]);
    // A build that took no run fires nothing.
    assert!(leased(Some("b3"), "b3").is_empty());
    assert_eq!(leased(Some("b1"), "b1"), ["wf-0", "wf-1", "wf-2"]);
}
