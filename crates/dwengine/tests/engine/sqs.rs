//! The SQS queue driver, against an SQS-compatible server on loopback
//! (moto's server mode from PyPI, as `.ci/run` starts it): dwserver
//! processes built with the `sqs` feature (this module is compiled only
//! with it: `cargo test -p dwengine --features sqs --test engine sqs::`).
//!
//! A 7 s timer in 1 s chunks fires once, not before it is due, after
//! several hops through the queue; a start wakes a waiting poll through
//! the queue; the capabilities snapshot says which driver is in use; a
//! wrong queue URL, an unreachable endpoint or missing credentials stop
//! the start naming the setting; two nodes on one queue (and one
//! PostgreSQL store and Redis) hand out each task once and fire each timer
//! once, one of them SIGKILLed with the timers in flight. Each test makes
//! a queue of its own.
//!
//! Ignored ("needs an SQS endpoint") when `DW_TEST_SQS_ENDPOINT` was not
//! set at build time (dwengine's build script turns on `dw_test_sqs`).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::process::{run_refused, start, Node};
use crate::support::wire;

/// How long a start that must be refused may run before the test fails.
const REFUSAL_LIMIT: Duration = Duration::from_secs(120);

/// The endpoint of the SQS-compatible server.
fn endpoint() -> String {
    std::env::var("DW_TEST_SQS_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty())
        .expect("DW_TEST_SQS_ENDPOINT: this binary was built with it, and needs it at run time too")
}

/// Creates a standard queue named after `test` (and this process, so runs
/// never share one) and returns its URL. SQS's JSON protocol, unsigned:
/// the test server routes a request by the credential scope of its
/// `Authorization` header and checks no signature.
fn create_queue(test: &str) -> String {
    let name = format!("dw-{test}-{}", std::process::id());
    let answer = ureq::post(&format!("{}/", endpoint()))
        .set(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sqs/aws4_request, \
             SignedHeaders=host, Signature=00",
        )
        .set("X-Amz-Target", "AmazonSQS.CreateQueue")
        .set("Content-Type", "application/x-amz-json-1.0")
        .timeout(Duration::from_secs(30))
        .send_json(json!({ "QueueName": name }))
        .unwrap_or_else(|e| panic!("CreateQueue {name} on {}: {e}", endpoint()));
    let body: Value = answer.into_json().expect("CreateQueue answers JSON");
    body["QueueUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("CreateQueue answered no QueueUrl: {body}"))
        .to_owned()
}

/// A node on the SQLite file under `dir`; on the SQS queue `queue_url`
/// (with hops of `chunk` seconds) when one is given.
fn command(dir: &Path, queue_url: Option<&str>, chunk: Option<u64>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dwserver"));
    command
        .env("DW_SERVER_ID", "sqs-node")
        .env("DW_AUTH", "none")
        .env("DW_BIND", "127.0.0.1:0")
        .env("DW_DATABASE_PATH", dir.join("dw.sqlite"))
        .env("DW_POLLING_CACHE_PATH", dir.join("polling"))
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("DW_REDIS_URL")
        .env_remove("DW_CONFIG")
        .env_remove("DW_QUEUE_DRIVER")
        .env_remove("DW_SQS_ENDPOINT")
        .env_remove("DW_SQS_QUEUE_URL")
        .env_remove("DW_SQS_TIMER_CHUNK_SECONDS")
        .stdin(Stdio::null());
    if let Some(url) = queue_url {
        command
            .env("DW_QUEUE_DRIVER", "sqs")
            .env("DW_SQS_ENDPOINT", endpoint())
            .env("DW_SQS_QUEUE_URL", url);
    }
    if let Some(chunk) = chunk {
        command.env("DW_SQS_TIMER_CHUNK_SECONDS", chunk.to_string());
    }
    command
}

fn send(node: &Node, request: &wire::Request) -> (u16, Value) {
    send_to(&node.base, request)
}

fn send_to(base: &str, request: &wire::Request) -> (u16, Value) {
    let url = format!("{base}{}", request.path);
    let mut call = match request.body {
        Some(_) => ureq::post(&url),
        None => ureq::get(&url),
    }
    .timeout(Duration::from_secs(90));
    if let Some(ns) = &request.namespace {
        call = call.set("X-Namespace", ns);
    }
    let answer = match &request.body {
        Some(body) => call.send_json(body.clone()),
        None => call.call(),
    };
    match answer {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("{url}: {e}"),
    }
}

fn get(node: &Node, path: &str) -> Value {
    let (status, body) = send(
        node,
        &wire::Request {
            path: path.to_owned(),
            body: None,
            namespace: Some("default".into()),
        },
    );
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// The operator metrics' `queue` block.
fn queue_block(node: &Node) -> Value {
    get(node, "/api/system/operator-metrics")["queue"].clone()
}

/// Long-polls `queue` for a workflow task until one is leased (or a
/// generous deadline passes).
fn next_workflow_task(node: &Node, queue: &str, tag: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut n = 0;
    while Instant::now() < deadline {
        n += 1;
        let (status, answer) = send(
            node,
            &wire::poll(
                "workflow",
                "default",
                queue,
                "w1",
                &format!("{tag}-{n}"),
                20_000,
            ),
        );
        assert_eq!(status, 200, "{answer}");
        if let Some(task) = wire::polled_task(&answer) {
            return task.clone();
        }
    }
    panic!("no workflow task on {queue} within the deadline");
}

fn complete(node: &Node, task: &Value, commands: Value) {
    let body = json!({
        "lease_owner": task["lease_owner"], "commands": commands,
        "workflow_task_attempt": task["workflow_task_attempt"],
    });
    let (status, answer) = send(
        node,
        &wire::Request {
            path: format!(
                "/api/worker/workflow-tasks/{}/complete",
                task["task_id"].as_str().unwrap()
            ),
            body: Some(body),
            namespace: Some("default".into()),
        },
    );
    assert_eq!(status, 200, "{answer}");
}

/// The events of `workflow_id`'s run `run_id`, every page.
fn history(node: &Node, workflow_id: &str, run_id: &str) -> Vec<Value> {
    let body = get(
        node,
        &format!("/api/workflows/{workflow_id}/runs/{run_id}/history"),
    );
    body["events"]
        .as_array()
        .unwrap_or_else(|| panic!("history without events: {body}"))
        .clone()
}

fn count(events: &[Value], event_type: &str) -> usize {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .count()
}

#[test]
#[cfg_attr(
    not(dw_test_sqs),
    ignore = "needs an SQS endpoint: DW_TEST_SQS_ENDPOINT was not set when this test binary was built"
)]
fn a_timer_seven_chunks_long_fires_once_not_early_after_several_hops() {
    let dir = tempfile::tempdir().unwrap();
    let queue = create_queue("timer");
    // 1 s hops: SQS (and the test server, which notices a delayed message
    // up to a second late) may deliver a hop late, which only makes the
    // rest of the delay shorter; at least two hops fit in 7 s unless each
    // is late by more than 2.5 s.
    let node = start(command(dir.path(), Some(&queue), Some(1)));
    let (status, started) = send(&node, &wire::start("default", "sleeper", "orders", None));
    assert_eq!(status, 201, "{started}");
    let first = next_workflow_task(&node, "orders", "first");
    let run_id = first["run_id"].as_str().expect("run_id").to_owned();
    // Armed after this instant: due no earlier than 7 s from it.
    let armed_after = wire_now_ms();
    complete(
        &node,
        &first,
        json!([{ "type": "start_timer", "delay_seconds": 7 }]),
    );
    let due_no_earlier_than = armed_after + 7_000;
    // The polls meanwhile fire nothing themselves: the timer is the queue's.
    let second = next_workflow_task(&node, "orders", "second");
    let leased_at = wire_now_ms();
    assert!(wire::history_has(&second, "TimerFired"), "{second}");
    assert!(
        leased_at >= due_no_earlier_than,
        "the timer fired {} ms early",
        due_no_earlier_than - leased_at
    );
    let events = history(&node, "sleeper", &run_id);
    assert_eq!(count(&events, "TimerScheduled"), 1, "{events:?}");
    assert_eq!(count(&events, "TimerFired"), 1, "{events:?}");
    let fired = events
        .iter()
        .find(|e| e["event_type"] == "TimerFired")
        .unwrap();
    let block = queue_block(&node);
    println!(
        "a 7 s timer in 1 s hops: {} re-enqueues, leased {} ms after it came due at the earliest (TimerFired at {})",
        block["timer_requeues"],
        leased_at - due_no_earlier_than,
        fired["timestamp"]
    );
    // 7 s in 1 s chunks: six re-enqueues when every hop lands on time, and
    // only the delivery on or after the due time fires it.
    assert_eq!(block["driver"], "sqs", "{block}");
    assert_eq!(block["timer_chunk_seconds"], 1, "{block}");
    assert_eq!(block["timers_sent"], 1, "{block}");
    let requeues = block["timer_requeues"].as_u64().unwrap();
    assert!((2..=6).contains(&requeues), "{block}");
    assert_eq!(block["timers_fired"], 1, "{block}");
    assert_eq!(block["timers_gone"], 0, "{block}");
    complete(
        &node,
        &second,
        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "\"done\"" } }]),
    );
    let events = history(&node, "sleeper", &run_id);
    assert_eq!(count(&events, "TimerFired"), 1, "{events:?}");
    assert_eq!(count(&events, "WorkflowCompleted"), 1, "{events:?}");
}

fn wire_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap())
        .unwrap()
}

#[test]
#[cfg_attr(
    not(dw_test_sqs),
    ignore = "needs an SQS endpoint: DW_TEST_SQS_ENDPOINT was not set when this test binary was built"
)]
fn a_starts_wake_travels_through_the_queue_to_a_waiting_poll() {
    let dir = tempfile::tempdir().unwrap();
    let queue = create_queue("wake");
    let node = start(command(dir.path(), Some(&queue), None));
    // The poll waits (nothing is queued yet); the start's wake reaches it
    // as a message through the queue and back. The counters tell the wake
    // went that way: the poll itself would also look again on its own.
    let base = node.base.clone();
    let poller = std::thread::spawn(move || {
        send_to(
            &base,
            &wire::poll("workflow", "default", "inbox", "w1", "waiting", 60_000),
        )
    });
    let (status, started) = send(&node, &wire::start("default", "woken", "inbox", None));
    assert_eq!(status, 201, "{started}");
    let (status, answer) = poller.join().unwrap();
    assert_eq!(status, 200, "{answer}");
    let task =
        wire::polled_task(&answer).unwrap_or_else(|| panic!("the poll got no task: {answer}"));
    assert_eq!(task["workflow_id"], "woken");
    // The poll may have found the task on its own look before the wake
    // came back; the wake's round trip completes all the same.
    let through = crate::support::eventually(Duration::from_secs(60), || {
        let block = queue_block(&node);
        block["wakes_sent"].as_u64().unwrap() >= 1
            && block["wakes_delivered"].as_u64().unwrap() >= 1
    });
    let block = queue_block(&node);
    assert!(through, "the wake never went through the queue: {block}");
    assert_eq!(block["wakes_signalled_directly"], 0, "{block}");
    assert_eq!(block["send_failures"], 0, "{block}");
}

#[test]
#[cfg_attr(
    not(dw_test_sqs),
    ignore = "needs an SQS endpoint: DW_TEST_SQS_ENDPOINT was not set when this test binary was built"
)]
fn the_capabilities_snapshot_names_the_sqs_delay_cap_only_on_sqs() {
    let capabilities =
        |node: &Node| get(node, "/api/system/health")["capabilities"]["structural_limits"].clone();
    let has_issue = |snapshot: &Value| {
        snapshot["issues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["code"] == "queue_max_delay_constraint")
    };
    let dir = tempfile::tempdir().unwrap();
    let queue = create_queue("capabilities");
    // On SQS, with a 2 s chunk for tests: clients are still told 900 s.
    let sqs = start(command(dir.path(), Some(&queue), Some(2)));
    let snapshot = capabilities(&sqs);
    assert_eq!(
        snapshot["backend_adjustments"]["max_single_timer_delay_seconds"], 900,
        "{snapshot}"
    );
    assert_eq!(
        snapshot["effective"]["max_single_timer_delay_seconds"], 900,
        "{snapshot}"
    );
    assert!(has_issue(&snapshot), "{snapshot}");
    let issue = snapshot["issues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["code"] == "queue_max_delay_constraint")
        .unwrap();
    assert_eq!(issue["severity"], "info");
    assert_eq!(
        issue["message"],
        "The [sqs] queue driver limits delayed dispatch to 900 seconds; timers exceeding this are chunked by the transport layer."
    );
    drop(sqs);
    // The same binary on the database driver: neither.
    let other = tempfile::tempdir().unwrap();
    let database = start(command(other.path(), None, None));
    let snapshot = capabilities(&database);
    assert!(
        snapshot["backend_adjustments"]
            .get("max_single_timer_delay_seconds")
            .is_none(),
        "{snapshot}"
    );
    assert!(
        snapshot["effective"]
            .get("max_single_timer_delay_seconds")
            .is_none(),
        "{snapshot}"
    );
    assert!(!has_issue(&snapshot), "{snapshot}");
    assert_eq!(queue_block(&database), json!({ "driver": "database" }));
}

#[test]
#[cfg_attr(
    not(dw_test_sqs),
    ignore = "needs an SQS endpoint: DW_TEST_SQS_ENDPOINT was not set when this test binary was built"
)]
fn a_wrong_queue_an_unreachable_endpoint_or_no_credentials_stop_the_start_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let assert_refused = |output: &Output, says: &[&str]| {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
        assert!(
            !stdout.contains("listening on"),
            "it never listened: {stdout}"
        );
        for expected in says {
            assert!(
                stderr.contains(expected),
                "the error says {expected:?}: {stderr}"
            );
        }
    };
    // A queue the service does not have.
    let missing = format!("{}/123456789012/dw-no-such-queue", endpoint());
    let output = run_refused(command(dir.path(), Some(&missing), None), REFUSAL_LIMIT);
    assert_refused(&output, &["DW_SQS_QUEUE_URL", &missing, "no such queue"]);
    // Nothing listening at the endpoint.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let unreachable = format!("http://127.0.0.1:{closed}");
    let mut at_nothing = command(dir.path(), Some(&missing), None);
    at_nothing.env("DW_SQS_ENDPOINT", &unreachable);
    let output = run_refused(at_nothing, REFUSAL_LIMIT);
    assert_refused(
        &output,
        &[
            "DW_SQS_ENDPOINT",
            &unreachable,
            "no SQS endpoint answers there",
        ],
    );
    // No credentials to sign with.
    let queue = create_queue("credentials");
    let mut unsigned = command(dir.path(), Some(&queue), None);
    unsigned.env_remove("AWS_ACCESS_KEY_ID");
    let output = run_refused(unsigned, REFUSAL_LIMIT);
    assert_refused(&output, &["AWS_ACCESS_KEY_ID", "signs its requests"]);
}

/// Node `id` of a cluster on one SQS queue: the PostgreSQL store
/// `database_url`, the Redis database `redis_url`, 1 s timer hops.
#[cfg(all(dw_test_postgres, dw_test_redis))]
fn cluster_command(
    dir: &Path,
    id: &str,
    database_url: &str,
    redis_url: &str,
    queue_url: &str,
) -> Command {
    let mut command = command(dir, Some(queue_url), Some(1));
    command
        .env_remove("DW_DATABASE_PATH")
        .env("DW_SERVER_ID", id)
        .env("DW_DATABASE_URL", database_url)
        .env("DW_REDIS_URL", redis_url)
        .env("DW_POLLING_CACHE_PATH", dir.join(format!("polling-{id}")));
    command
}

/// A workflow-task poll of `base` that gives up quietly on a node that is
/// gone (a transport error): the task, if one was leased.
#[cfg(all(dw_test_postgres, dw_test_redis))]
fn try_poll(base: &str, queue: &str, worker: &str, poll_id: &str) -> Option<Option<Value>> {
    let request = wire::poll("workflow", "default", queue, worker, poll_id, 2_000);
    let answer = ureq::post(&format!("{base}{}", request.path))
        .set("X-Namespace", "default")
        .timeout(Duration::from_secs(60))
        .send_json(request.body.clone().unwrap());
    match answer {
        Ok(r) => {
            let body: Value = r.into_json().unwrap_or(Value::Null);
            Some(wire::polled_task(&body).cloned())
        }
        Err(ureq::Error::Status(code, r)) => {
            panic!(
                "poll of {base}: {code} {}",
                r.into_string().unwrap_or_default()
            )
        }
        Err(_) => None,
    }
}

/// Two nodes on one PostgreSQL store, one Redis and one SQS queue: four
/// workers poll both nodes at once, so every workflow task is handed out
/// exactly once; each workflow's 3 s timer (three 1 s hops) fires exactly
/// once, whichever node's consumer receives its hops; and node A is
/// SIGKILLed while the timers are on their way (hops A had received come
/// back to B when their visibility timeout ends): every workflow still
/// completes through B, with one TimerFired each.
#[test]
#[cfg_attr(
    not(all(dw_test_sqs, dw_test_postgres, dw_test_redis)),
    ignore = "needs an SQS endpoint, PostgreSQL and Redis: DW_TEST_SQS_ENDPOINT, DW_TEST_POSTGRES_URL and DW_TEST_REDIS_URL were not all set when this test binary was built"
)]
fn two_nodes_on_one_queue_hand_out_each_task_once_fire_each_timer_once_and_survive_a_kill() {
    #[cfg(all(dw_test_postgres, dw_test_redis))]
    {
        use std::collections::HashMap;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};

        const WORKFLOWS: usize = 12;
        const QUEUE: &str = "pair";
        let redis = crate::support::redis_database();
        let database_url = crate::common::postgres_schema_url();
        let queue = create_queue("pair");
        let dir = tempfile::tempdir().unwrap();
        let a = start(cluster_command(
            dir.path(),
            "sqs-a",
            &database_url,
            &redis.url,
            &queue,
        ));
        let b = start(cluster_command(
            dir.path(),
            "sqs-b",
            &database_url,
            &redis.url,
            &queue,
        ));
        for i in 0..WORKFLOWS {
            let node = if i % 2 == 0 { &a } else { &b };
            let (status, body) = send(
                node,
                &wire::start("default", &format!("pair-{i}"), QUEUE, None),
            );
            assert_eq!(status, 201, "{body}");
        }

        // Workers: each completes what it is handed (a first task arms
        // the timer, a task after TimerFired completes the workflow), and
        // counts every task id it was handed.
        let leased: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let armed = Arc::new(AtomicUsize::new(0));
        let completed = Arc::new(AtomicUsize::new(0));
        let worker = |base: String, name: String, stop: Arc<AtomicBool>| {
            let (leased, armed, completed) = (leased.clone(), armed.clone(), completed.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) && completed.load(Ordering::SeqCst) < WORKFLOWS {
                    n += 1;
                    let Some(polled) = try_poll(&base, QUEUE, &name, &format!("{name}-{n}")) else {
                        return;
                    };
                    let Some(task) = polled else { continue };
                    let id = task["task_id"].as_str().unwrap().to_owned();
                    *leased.lock().unwrap().entry(id).or_default() += 1;
                    let fired = wire::history_has(&task, "TimerFired");
                    let commands = if fired {
                        json!([{ "type": "complete_workflow", "result": { "codec": "json", "blob": "\"done\"" } }])
                    } else {
                        json!([{ "type": "start_timer", "delay_seconds": 3 }])
                    };
                    let body = json!({
                        "lease_owner": task["lease_owner"], "commands": commands,
                        "workflow_task_attempt": task["workflow_task_attempt"],
                    });
                    let (status, answer) = send_to(
                        &base,
                        &wire::Request {
                            path: format!(
                                "/api/worker/workflow-tasks/{}/complete",
                                task["task_id"].as_str().unwrap()
                            ),
                            body: Some(body),
                            namespace: Some("default".into()),
                        },
                    );
                    assert_eq!(status, 200, "{answer}");
                    if fired {
                        completed.fetch_add(1, Ordering::SeqCst);
                    } else {
                        armed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        };
        let stop_a = Arc::new(AtomicBool::new(false));
        let stop_b = Arc::new(AtomicBool::new(false));
        let on_a: Vec<_> = (0..2)
            .map(|i| worker(a.base.clone(), format!("a{i}"), stop_a.clone()))
            .collect();
        let on_b: Vec<_> = (0..2)
            .map(|i| worker(b.base.clone(), format!("b{i}"), stop_b.clone()))
            .collect();

        // Once every timer is armed (they are then on their way through
        // the queue), A's workers finish what they hold and leave, and A
        // is killed.
        assert!(
            crate::support::eventually(Duration::from_secs(120), || {
                armed.load(Ordering::SeqCst) >= WORKFLOWS
            }),
            "only {} of {WORKFLOWS} timers were armed",
            armed.load(Ordering::SeqCst)
        );
        stop_a.store(true, Ordering::SeqCst);
        for thread in on_a {
            thread.join().expect("a worker of A");
        }
        a.sigkill();

        let all_done = crate::support::eventually(Duration::from_secs(180), || {
            completed.load(Ordering::SeqCst) >= WORKFLOWS
        });
        stop_b.store(true, Ordering::SeqCst);
        for thread in on_b {
            thread.join().expect("a worker of B");
        }
        assert!(
            all_done,
            "only {} of {WORKFLOWS} workflows completed after node A was killed",
            completed.load(Ordering::SeqCst)
        );
        let leased = leased.lock().unwrap();
        let twice: Vec<_> = leased.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "tasks handed out more than once: {twice:?}"
        );
        assert_eq!(leased.len(), 2 * WORKFLOWS, "{leased:?}");
        for i in 0..WORKFLOWS {
            let workflow_id = format!("pair-{i}");
            let described = get(&b, &format!("/api/workflows/{workflow_id}"));
            let run_id = described["run_id"].as_str().unwrap();
            let events = history(&b, &workflow_id, run_id);
            assert_eq!(
                count(&events, "TimerScheduled"),
                1,
                "{workflow_id}: {events:?}"
            );
            assert_eq!(count(&events, "TimerFired"), 1, "{workflow_id}: {events:?}");
            assert_eq!(
                count(&events, "WorkflowCompleted"),
                1,
                "{workflow_id}: {events:?}"
            );
        }
        let block = queue_block(&b);
        println!(
            "two nodes on one SQS queue, A killed with the timers in flight: {WORKFLOWS} workflows, \
             each task handed out once, one TimerFired each; B's queue counters: {block}"
        );
    }
}
