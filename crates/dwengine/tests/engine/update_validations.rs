//! Update validators over loopback HTTP: an update a registered worker
//! validates waits, neither accepted nor in history, until a worker polling
//! with `task_kinds: ["workflow", "update_validation"]` approves it
//! (accepted, `UpdateAccepted`, a workflow task) or rejects it (422 to the
//! caller, nothing written); verdicts are fenced by lease owner and
//! attempt, a lapsed lease is handed out again, validating updates count
//! against `pending_update_count`, a wait that ends first drops the update,
//! and a worker that does not ask for validation tasks never gets one.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dwengine::cache::MemoryCache;
use dwengine::server::ServerConfig;
use serde_json::{json, Value};
use support::{eventually, TestServer};

const QUEUE: &str = "validated";
const KINDS: [&str; 2] = ["workflow", "update_validation"];

fn server(tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
    TestServer::start(Arc::new(MemoryCache::default()), tweak)
}

/// Registers `worker` on the queue; with `validates`, it validates the
/// update `add` of the workflow type `Order` (what `start_workflow` starts).
fn register(s: &TestServer, worker: &str, validates: bool) -> Value {
    let mut body = json!({
        "worker_id": worker, "task_queue": QUEUE,
        "workflow_command_contracts": { "Order": { "updates": ["add"], "update_validators": ["add"] } },
    });
    if validates {
        body["capabilities"] = json!(["update_validation_tasks", "workflow_updates"]);
    }
    let (status, answer) = s.post("/api/worker/register", body);
    assert_eq!(status, 200, "{answer}");
    answer
}

/// A started run whose first workflow task is done (the run waits).
fn started(s: &TestServer, workflow_id: &str) {
    s.start_workflow("default", workflow_id, QUEUE);
    let task = support::next_workflow_task(s, QUEUE);
    let (status, body) = s.complete(&task, json!([]));
    assert_eq!(status, 200, "{body}");
}

fn poll_kinds(s: &TestServer, worker: &str, poll_id: &str, kinds: Value, timeout: f64) -> Value {
    let (status, answer) = s.post(
        "/api/worker/workflow-tasks/poll",
        json!({ "task_queue": QUEUE, "worker_id": worker, "poll_request_id": poll_id,
                "timeout_seconds": timeout, "task_kinds": kinds }),
    );
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The next validation task a validating poll of `worker` takes (up to 30 s).
fn next_validation(s: &TestServer, worker: &str) -> Value {
    // Each poll a request id of its own (a repeated id replays its answer).
    static POLLS: AtomicUsize = AtomicUsize::new(0);
    let mut task = Value::Null;
    assert!(
        eventually(Duration::from_secs(30), || {
            let n = POLLS.fetch_add(1, Ordering::Relaxed);
            let answer = poll_kinds(s, worker, &format!("{worker}-v{n}"), json!(KINDS), 0.2);
            task = answer["task"].clone();
            !task.is_null()
        }),
        "no validation task"
    );
    assert_eq!(task["task_kind"], "update_validation", "{task}");
    task
}

fn verdict(s: &TestServer, task: &Value, outcome: &str, extra: Value) -> (u16, Value) {
    let mut body = json!({
        "lease_owner": task["lease_owner"],
        "update_validation_attempt": task["update_validation_attempt"],
    });
    if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
        body.extend(extra);
    }
    s.post(
        &format!(
            "/api/worker/update-validation-tasks/{}/{outcome}",
            task["update_validation_task_id"].as_str().unwrap()
        ),
        body,
    )
}

fn update(s: &TestServer, workflow_id: &str, body: Value) -> (u16, Value) {
    s.post(&format!("/api/workflows/{workflow_id}/update/add"), body)
}

fn history_types(s: &TestServer, workflow_id: &str) -> Vec<String> {
    let (status, described) = s.get(&format!("/api/workflows/{workflow_id}"));
    assert_eq!(status, 200, "{described}");
    let run = described["run_id"].as_str().unwrap().to_owned();
    let (status, history) = s.get(&format!(
        "/api/workflows/{workflow_id}/runs/{run}/history?page_size=1000"
    ));
    assert_eq!(status, 200, "{history}");
    history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap().to_owned())
        .collect()
}

fn input(json_text: &str) -> Value {
    json!({ "codec": "json", "blob": json_text })
}

#[test]
fn discovery_advertises_the_synchronous_validation_contract_the_sdk_checks() {
    let s = server(|_| {});
    let (status, info) = s.get("/api/cluster/info");
    assert_eq!(status, 200);
    let capabilities = &info["worker_protocol"]["server_capabilities"];
    assert_eq!(capabilities["update_validation_tasks"], true);
    let contract = &capabilities["synchronous_update_validation"];
    assert_eq!(contract["supported"], true);
    assert_eq!(contract["acceptance_boundary"], "validator_approved");
    assert_eq!(contract["worker_capability"], "update_validation_tasks");
    assert_eq!(contract["workflow_contract_field"], "update_validators");
    let poll = &contract["task_poll"];
    assert_eq!(poll["strategy"], "multiplexed");
    assert_eq!(poll["endpoint"], "/worker/workflow-tasks/poll");
    assert_eq!(poll["request_field"], "task_kinds");
    assert_eq!(poll["response_discriminator"], "task.task_kind");
    assert_eq!(poll["task_kinds"], json!(KINDS));
    // Registration acknowledges the capability it asked for.
    let ack = register(&s, "w-ack", true);
    let acknowledged = ack["capabilities"].as_array().unwrap();
    assert!(
        acknowledged.contains(&json!("update_validation_tasks")),
        "{ack}"
    );
}

#[test]
fn an_approved_update_is_accepted_only_once_the_validator_approves() {
    let s = server(|_| {});
    register(&s, "validator", true);
    started(&s, "approved");
    let before = history_types(&s, "approved");
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            update(
                &s,
                "approved",
                json!({ "input": input("[5]"), "request_id": "r-approved",
                        "wait_timeout_seconds": 60 }),
            )
        });
        // A worker that does not ask for validation tasks never gets one.
        let plain = poll_kinds(&s, "plain", "plain-1", json!(["workflow"]), 0.3);
        assert!(plain["task"].is_null(), "{plain}");
        let task = next_validation(&s, "validator");
        // The queue's last poll observation is that lease, not an empty poll.
        let (_, seen) = s.get(&format!(
            "/api/system/poll-diagnostic?namespace=default&task_queue={QUEUE}"
        ));
        assert_eq!(seen["last_poll"]["kind"], "update_validation", "{seen}");
        assert_eq!(seen["last_poll"]["outcome"], "leased", "{seen}");
        assert_eq!(seen["last_poll"]["worker_id"], "validator", "{seen}");
        // While it validates: not accepted, not in history, not pending.
        assert_eq!(history_types(&s, "approved"), before);
        let (_, described) = s.get("/api/workflows/approved");
        assert_eq!(described["pending"]["updates"], 0, "{described}");
        assert_eq!(task["update_name"], "add");
        assert_eq!(task["update_arguments"], input("[5]"));
        assert_eq!(task["workflow_type"], "Order");
        assert_eq!(task["request_id"], "r-approved");
        assert_eq!(task["update_validation_attempt"], 1);
        assert_eq!(task["lease_owner"], "validator");
        let history = task["history_events"].as_array().unwrap();
        assert_eq!(history.len(), before.len(), "{task}");
        assert_eq!(history[0]["event_type"], "WorkflowStarted");
        // The fence: another worker, another attempt.
        let mut foreign = task.clone();
        foreign["lease_owner"] = "intruder".into();
        let (status, body) = verdict(&s, &foreign, "approve", json!({}));
        assert_eq!(
            (status, body["reason"].as_str()),
            (409, Some("stale_update_validation_completion")),
            "{body}"
        );
        let mut later = task.clone();
        later["update_validation_attempt"] = 2.into();
        let (status, body) = verdict(&s, &later, "approve", json!({}));
        assert_eq!(status, 409, "{body}");
        let (status, approved) = verdict(&s, &task, "approve", json!({}));
        assert_eq!(status, 200, "{approved}");
        assert_eq!(approved["outcome"], "approved");
        let (status, answer) = caller.join().unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["update_status"], "accepted", "{answer}");
        assert_eq!(answer["update_id"], approved["update_id"], "{answer}");
        // The row went with its caller's answer: a second verdict finds nothing.
        let (status, body) = verdict(&s, &task, "approve", json!({}));
        assert_eq!(
            (status, body["reason"].as_str()),
            (404, Some("update_validation_task_not_found")),
            "{body}"
        );
    });
    let after = history_types(&s, "approved");
    assert_eq!(
        after.iter().filter(|t| *t == "UpdateAccepted").count(),
        1,
        "{after:?}"
    );
    // The accepted update has its workflow task.
    let task = support::next_workflow_task(&s, QUEUE);
    assert_eq!(task["workflow_id"], "approved", "{task}");
    // The same request id again is that update, not a second validation.
    let (status, again) = update(
        &s,
        "approved",
        json!({ "input": input("[5]"), "request_id": "r-approved" }),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["retained"], true, "{again}");
}

#[test]
fn a_rejected_update_reaches_its_caller_and_leaves_nothing_behind() {
    let s = server(|_| {});
    register(&s, "validator", true);
    started(&s, "rejected");
    let before = history_types(&s, "rejected");
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            update(
                &s,
                "rejected",
                json!({ "input": input("[-5]"), "wait_for": "completed",
                        "wait_timeout_seconds": 60 }),
            )
        });
        let task = next_validation(&s, "validator");
        // A rejection must say why.
        let (status, body) = verdict(&s, &task, "reject", json!({}));
        assert_eq!(status, 422, "{body}");
        assert!(body["validation_errors"]["failure"].is_array(), "{body}");
        let (status, body) = verdict(
            &s,
            &task,
            "reject",
            json!({ "failure": { "message": "amount must be positive",
                                 "reason": "update_validator_rejected", "type": "ValueError",
                                 "validation_errors": { "amount": ["must be positive"] } } }),
        );
        assert_eq!(status, 200, "{body}");
        let (status, answer) = caller.join().unwrap();
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["reason"], "update_validator_rejected", "{answer}");
        assert_eq!(answer["message"], "amount must be positive");
        assert_eq!(answer["update_status"], "rejected");
        assert_eq!(answer["failure_type"], "ValueError");
        assert_eq!(
            answer["validation_errors"],
            json!({ "amount": ["must be positive"] })
        );
    });
    assert_eq!(history_types(&s, "rejected"), before);
    let (_, described) = s.get("/api/workflows/rejected");
    assert_eq!(described["pending"]["updates"], 0, "{described}");
    // No workflow task was queued for it.
    let (status, polled) = s.poll("workflow", "default", QUEUE, "after-reject", 300);
    assert_eq!(status, 200);
    assert!(polled["task"].is_null(), "{polled}");
}

#[test]
fn a_lapsed_lease_is_handed_out_again_and_fences_the_earlier_attempt() {
    let s = server(|c| c.task_lease = Duration::from_millis(400));
    register(&s, "first", true);
    register(&s, "second", true);
    started(&s, "lapsed");
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            update(
                &s,
                "lapsed",
                json!({ "input": input("[1]"), "wait_timeout_seconds": 60 }),
            )
        });
        let first = next_validation(&s, "first");
        assert_eq!(first["update_validation_attempt"], 1);
        // Unanswered, its lease lapses and another worker gets it.
        let second = next_validation(&s, "second");
        assert_eq!(second["update_validation_attempt"], 2, "{second}");
        assert_eq!(
            second["update_validation_task_id"],
            first["update_validation_task_id"]
        );
        let (status, body) = verdict(&s, &first, "approve", json!({}));
        assert_eq!(
            (status, body["reason"].as_str()),
            (409, Some("stale_update_validation_completion")),
            "{body}"
        );
        let (status, body) = verdict(&s, &second, "approve", json!({}));
        assert_eq!(status, 200, "{body}");
        let (status, answer) = caller.join().unwrap();
        assert_eq!(
            (status, &answer["update_status"]),
            (200, &json!("accepted"))
        );
    });
}

#[test]
fn validating_updates_count_against_pending_update_count() {
    let s = server(|c| c.store.limits.pending_update_count = 2);
    register(&s, "validator", true);
    started(&s, "bounded");
    std::thread::scope(|scope| {
        let callers: Vec<_> = (0..2)
            .map(|i| {
                let s = &s;
                scope.spawn(move || {
                    update(
                        s,
                        "bounded",
                        json!({ "input": input(&format!("[{i}]")), "wait_timeout_seconds": 60 }),
                    )
                })
            })
            .collect();
        let tasks = [
            next_validation(&s, "validator"),
            next_validation(&s, "validator"),
        ];
        // Two validating: the third is refused at once, nothing written.
        let (status, body) = update(&s, "bounded", json!({ "input": input("[9]") }));
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["reason"], "structural_limit_exceeded", "{body}");
        assert_eq!(body["structural_limit_kind"], "pending_update_count");
        for task in &tasks {
            let (status, body) = verdict(
                &s,
                task,
                "reject",
                json!({ "failure": { "message": "no" } }),
            );
            assert_eq!(status, 200, "{body}");
        }
        for caller in callers {
            let (status, answer) = caller.join().unwrap();
            assert_eq!(status, 422, "{answer}");
        }
    });
    // Rejected, they no longer count: an update is admitted again.
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            update(
                &s,
                "bounded",
                json!({ "input": input("[3]"), "wait_timeout_seconds": 60 }),
            )
        });
        let task = next_validation(&s, "validator");
        let (status, body) = verdict(&s, &task, "approve", json!({}));
        assert_eq!(status, 200, "{body}");
        assert_eq!(caller.join().unwrap().0, 200);
    });
}

#[test]
fn a_wait_that_ends_before_a_verdict_is_a_504_and_drops_the_update() {
    let s = server(|_| {});
    register(&s, "validator", true);
    started(&s, "late");
    let before = history_types(&s, "late");
    // Nobody polls for validation tasks.
    let (status, body) = update(
        &s,
        "late",
        json!({ "input": input("[1]"), "wait_timeout_seconds": 1 }),
    );
    assert_eq!(status, 504, "{body}");
    assert_eq!(
        body["reason"], "update_validation_task_not_claimed",
        "{body}"
    );
    assert_eq!(body["retryable"], true);
    // Dropped: no validation task is left to take, nothing in history.
    let answer = poll_kinds(&s, "validator", "after-timeout", json!(KINDS), 0.3);
    assert!(answer["task"].is_null(), "{answer}");
    assert_eq!(history_types(&s, "late"), before);
    // Taken but never answered: the other reason, and the verdict is fenced out.
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            update(
                &s,
                "late",
                json!({ "input": input("[2]"), "wait_timeout_seconds": 1 }),
            )
        });
        let task = next_validation(&s, "validator");
        let (status, body) = caller.join().unwrap();
        assert_eq!(status, 504, "{body}");
        assert_eq!(
            body["reason"], "update_validation_execution_timeout",
            "{body}"
        );
        let (status, body) = verdict(&s, &task, "approve", json!({}));
        assert_eq!(status, 404, "{body}");
    });
    assert_eq!(history_types(&s, "late"), before);
}

#[test]
fn a_run_that_closes_while_its_update_validates_answers_run_not_active() {
    let s = server(|_| {});
    register(&s, "validator", true);
    started(&s, "closing");
    std::thread::scope(|scope| {
        let caller = scope.spawn(|| {
            update(
                &s,
                "closing",
                json!({ "input": input("[1]"), "wait_timeout_seconds": 60 }),
            )
        });
        let task = next_validation(&s, "validator");
        let (status, body) = s.post(
            "/api/workflows/closing/terminate",
            json!({ "reason": "test" }),
        );
        assert_eq!(status, 200, "{body}");
        let (status, answer) = caller.join().unwrap();
        assert_eq!(status, 409, "{answer}");
        assert_eq!(answer["reason"], "run_not_active", "{answer}");
        let (status, body) = verdict(&s, &task, "approve", json!({}));
        assert_eq!(status, 404, "{body}");
    });
}

#[test]
fn without_a_validating_registration_an_update_is_accepted_at_once() {
    let s = server(|_| {});
    // Declares validators in its contracts but never asked for the
    // capability (an older worker): nothing is validated.
    register(&s, "old", false);
    started(&s, "unguarded");
    let (status, answer) = update(&s, "unguarded", json!({ "input": input("[1]") }));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["update_status"], "accepted");
    assert!(history_types(&s, "unguarded").contains(&"UpdateAccepted".to_owned()));
    // A worker that asked for it, then registered again without it, no
    // longer guards the update either.
    register(&s, "turncoat", true);
    register(&s, "turncoat", false);
    let (status, answer) = update(&s, "unguarded", json!({ "input": input("[2]") }));
    assert_eq!(status, 200, "{answer}");
}

#[test]
fn task_kinds_other_than_workflow_and_update_validation_are_refused_by_name() {
    let s = server(|_| {});
    for kinds in [
        json!(["update_validation"]),
        json!(["workflow", "activity"]),
        json!(["workflow", "workflow"]),
        json!([]),
    ] {
        let (status, body) = s.post(
            "/api/worker/workflow-tasks/poll",
            json!({ "task_queue": QUEUE, "worker_id": "w", "timeout_seconds": 0,
                    "task_kinds": kinds }),
        );
        assert_eq!(status, 422, "{kinds}: {body}");
        assert!(
            body["validation_errors"]["task_kinds"].is_array(),
            "{kinds}: {body}"
        );
    }
    let (status, body) = s.post(
        "/api/worker/register",
        json!({ "worker_id": "w", "task_queue": QUEUE, "capabilities": ["update_validation_tasks"],
                "workflow_command_contracts": { "Order": { "update_validators": "add" } } }),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["validation_errors"]["workflow_command_contracts.Order.update_validators"].is_array(),
        "{body}"
    );
}

#[test]
fn a_repeated_poll_gets_its_validation_again_and_a_repeated_request_id_joins_it() {
    let s = server(|_| {});
    register(&s, "validator", true);
    started(&s, "joined");
    std::thread::scope(|scope| {
        let call = || {
            update(
                &s,
                "joined",
                json!({ "input": input("[4]"), "request_id": "r-same",
                        "wait_timeout_seconds": 60 }),
            )
        };
        let first = scope.spawn(call);
        let (mut task, mut poll_id) = (Value::Null, String::new());
        let mut n = 0;
        assert!(eventually(Duration::from_secs(30), || {
            n += 1;
            poll_id = format!("repeat-{n}");
            task = poll_kinds(&s, "validator", &poll_id, json!(KINDS), 0.2)["task"].clone();
            !task.is_null()
        }));
        // The poll's retry (same request id) gets the same lease back.
        let again = poll_kinds(&s, "validator", &poll_id, json!(KINDS), 0.2);
        assert_eq!(again["replayed"], true, "{again}");
        assert_eq!(
            again["task"]["update_validation_task_id"],
            task["update_validation_task_id"]
        );
        assert_eq!(again["task"]["update_validation_attempt"], 1, "{again}");
        // A second caller with the same request id joins the validation.
        let second = scope.spawn(call);
        assert!(eventually(Duration::from_secs(30), || {
            let waiting = s
                .running
                .engine()
                .waiters()
                .held(dwengine::waiters::WaitKind::Update);
            waiting >= 2
        }));
        let (status, body) = verdict(&s, &task, "approve", json!({}));
        assert_eq!(status, 200, "{body}");
        let (first, second) = (first.join().unwrap(), second.join().unwrap());
        assert_eq!(first.0, 200, "{}", first.1);
        assert_eq!(second.0, 200, "{}", second.1);
        assert_eq!(first.1["update_id"], body["update_id"]);
        assert_eq!(second.1["update_id"], body["update_id"]);
        assert_eq!(second.1["retained"], true, "{}", second.1);
    });
    let types = history_types(&s, "joined");
    assert_eq!(
        types.iter().filter(|t| *t == "UpdateAccepted").count(),
        1,
        "{types:?}"
    );
}

#[test]
fn a_webhook_update_a_validator_guards_is_refused_before_anything_is_written() {
    use dwengine::server::webhooks::{sign, Webhooks, SIGNATURE_HEADER, TIMESTAMP_HEADER};
    const SECRET: &str = "whsec-validators-0123456789";
    let s = server(|c| c.webhooks = Webhooks::default().with("hook", "default", SECRET));
    register(&s, "validator", true);
    started(&s, "hooked");
    let before = history_types(&s, "hooked");
    let body = json!({
        "action": "update_workflow", "idempotency_key": "evt-upd-1",
        "target": { "workflow_id": "hooked", "update_name": "add" }, "input": [1],
    });
    let bytes = serde_json::to_vec(&body).unwrap();
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let signature = sign(SECRET.as_bytes(), &timestamp, &bytes);
    let answer = ureq::post(&format!("{}/api/bridge-adapters/webhook/hook", s.base))
        .set("content-type", "application/json")
        .set(TIMESTAMP_HEADER, &timestamp)
        .set(SIGNATURE_HEADER, &signature)
        .send_bytes(&bytes);
    let (status, answer) = match answer {
        Ok(r) => (r.status(), r.into_json::<Value>().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json::<Value>().unwrap()),
        Err(e) => panic!("transport error: {e}"),
    };
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("update_validation_capability_unsupported"),
        "{answer}"
    );
    assert_eq!(history_types(&s, "hooked"), before);
    let polled = poll_kinds(&s, "validator", "after-hook", json!(KINDS), 0.2);
    assert!(polled["task"].is_null(), "{polled}");
}

#[test]
fn a_joined_caller_whose_wait_ends_first_leaves_the_validation_to_its_creator() {
    let s = server(|_| {});
    register(&s, "validator", true);
    started(&s, "patient");
    std::thread::scope(|scope| {
        let creator = scope.spawn(|| {
            update(
                &s,
                "patient",
                json!({ "input": input("[6]"), "request_id": "r-shared",
                        "wait_timeout_seconds": 60 }),
            )
        });
        let task = next_validation(&s, "validator");
        // The same request id, with a short wait: it ends first.
        let (status, body) = update(
            &s,
            "patient",
            json!({ "input": input("[6]"), "request_id": "r-shared",
                    "wait_timeout_seconds": 1 }),
        );
        assert_eq!(status, 504, "{body}");
        assert_eq!(
            body["reason"], "update_validation_execution_timeout",
            "{body}"
        );
        // The validation is still the creator's: the verdict lands.
        let (status, body) = verdict(&s, &task, "approve", json!({}));
        assert_eq!(status, 200, "{body}");
        let (status, answer) = creator.join().unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["update_id"], body["update_id"]);
    });
}
