//! The hostile client suite: a real `dwserver` process, real sockets, and
//! clients that behave as attackers and unlucky operators do — hundreds of
//! waiting calls, idle and slow sockets, signals mid-load. Each scenario
//! asserts the figure the server must hold and prints it (`--nocapture`)
//! for docs/operations.md. The heavy scenarios live here, in a test binary
//! of their own rather than a module of `tests/engine`: they measure
//! latencies and thread counts, which the engine binary's hundreds of
//! parallel tests would disturb, and cargo runs test binaries one after
//! another. Within this binary the scenarios take turns ([`one_at_a_time`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The server under test: this build's `dwserver`, or the one
/// `DW_HOSTILE_DWSERVER` names (to measure an older build's figures).
fn dwserver_binary() -> String {
    std::env::var("DW_HOSTILE_DWSERVER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_dwserver").to_owned())
}

/// Serializes the scenarios: each measures the machine it runs on.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The address a child `dwserver` announces on its first stdout line.
fn announced_base(child: &mut Child) -> String {
    let mut line = String::new();
    let stdout = child.stdout.take().expect("the server's stdout is piped");
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the server's first line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from the server: {line:?}"));
    format!("http://{addr}")
}

/// A `dwserver` child; killed when dropped unless it already exited.
struct Server {
    child: Child,
    addr: String,
    stderr: Arc<std::sync::Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `dwserver` without auth on a free port, with `env` on top.
    fn start(env: &[(&str, &str)]) -> Server {
        Self::start_with(env, |_| {})
    }

    /// Starts `dwserver` under `ulimit -n open_files`.
    fn start_limited(env: &[(&str, &str)], open_files: u32) -> Server {
        Self::start_as(
            {
                let mut sh = Command::new("sh");
                sh.arg("-c").arg(format!(
                    "ulimit -n {open_files} && exec '{}'",
                    dwserver_binary()
                ));
                sh
            },
            env,
            tempfile::tempdir().unwrap(),
        )
    }

    fn start_with(env: &[(&str, &str)], tweak: impl FnOnce(&mut Command)) -> Server {
        let mut command = Command::new(dwserver_binary());
        tweak(&mut command);
        Self::start_as(command, env, tempfile::tempdir().unwrap())
    }

    /// Starts `command` on the database in `dir` (kept across restarts).
    fn start_as(mut command: Command, env: &[(&str, &str)], dir: tempfile::TempDir) -> Server {
        command
            .env("DW_SERVER_ID", "hostile-node")
            .env("DW_AUTH", "none")
            .env("DW_BIND", "127.0.0.1:0")
            .env("DW_DATABASE_PATH", dir.path().join("runs.sqlite"))
            .env("DW_POLLING_CACHE_PATH", dir.path().join("polling"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("dwserver starts");
        let stderr = Arc::new(std::sync::Mutex::new(Vec::new()));
        let err = child.stderr.take().unwrap();
        let lines = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        let base = announced_base(&mut child);
        let addr = base.trim_start_matches("http://").to_owned();
        Server {
            child,
            addr,
            stderr,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's thread count, from /proc.
    fn threads(&self) -> usize {
        status_field(self.pid(), "Threads:").unwrap_or(0) as usize
    }

    /// Peak resident memory so far, in MiB.
    fn peak_rss_mib(&self) -> u64 {
        status_field(self.pid(), "VmHWM:").unwrap_or(0) / 1024
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The process's threads by name (`/proc/<pid>/task/*/comm`), for the
/// figures: which pool grew.
fn thread_names(pid: u32) -> std::collections::BTreeMap<String, usize> {
    let mut names = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        *names.entry(name.trim().to_owned()).or_insert(0) += 1;
    }
    names
}

fn status_field(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`):
/// the status and the body parsed as JSON (`Null` when it is not JSON).
fn call(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    match call_raw(addr, method, path, &[], body) {
        Ok(answer) => answer,
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

fn call_raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> std::io::Result<(u16, Value)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    parse_answer(&answer)
}

fn parse_answer(answer: &[u8]) -> std::io::Result<(u16, Value)> {
    let bad = |what: &str| std::io::Error::other(what.to_owned());
    let text = String::from_utf8_lossy(answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// A client thread with a small stack: hundreds run at once.
fn client<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(f)
        .expect("a client thread")
}

/// Probes `/api/health` on `addr` and on `control` (an idle server of the
/// same build on the same machine) in turn, `probes` times each, 20 ms
/// apart: each one's latencies. The control's figures are the machine's
/// own scheduling noise at the same moments (a loaded 2-core CI runner
/// stalls any process now and then), which the bound on `addr` allows for.
fn health_latencies(addr: &str, control: &str, probes: usize) -> (Vec<Duration>, Vec<Duration>) {
    let mut latencies = (Vec::with_capacity(probes), Vec::with_capacity(probes));
    let probe = |at: &str| {
        let began = Instant::now();
        let answer = call_raw(at, "GET", "/api/health", &[], None);
        let took = began.elapsed();
        match answer {
            Ok((200, _)) => took,
            other => panic!("health on {at} was not answered 200: {other:?} after {took:?}"),
        }
    };
    for _ in 0..probes {
        latencies.0.push(probe(addr));
        latencies.1.push(probe(control));
        std::thread::sleep(Duration::from_millis(20));
    }
    latencies
}

fn p99(latencies: &mut [Duration]) -> Duration {
    latencies.sort();
    let at = ((latencies.len() as f64) * 0.99).ceil() as usize;
    latencies[at.saturating_sub(1).min(latencies.len() - 1)]
}

/// Waits until `done` holds, checking every 20 ms, for at most `limit`.
fn until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// Starts a run on `queue` that no worker serves.
fn start_run(addr: &str, workflow_id: &str, queue: &str) {
    let (status, body) = call(
        addr,
        "POST",
        "/api/workflows",
        Some(
            &json!({ "workflow_id": workflow_id, "workflow_type": "Idle",
                      "task_queue": queue, "input": { "codec": "json", "blob": "[]" } }),
        ),
    );
    assert_eq!(status, 201, "start {workflow_id}: {body}");
}

/// How many of `answers` have each status.
fn tally(answers: &[u16]) -> std::collections::BTreeMap<u16, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for status in answers {
        *counts.entry(*status).or_insert(0) += 1;
    }
    counts
}

const WAITS: usize = 600;

/// 600 waiting calls of one kind against runs no worker serves, while
/// health is probed and a worker polls another queue: health's p99 stays
/// under [`WAIT_HEALTH_BOUND`] (not queued behind the waits), the poll is
/// served, and the process does not grow a thread per wait.
fn waits_of_one_kind(
    server: &Server,
    control: &Server,
    kind: &str,
    send: impl Fn(usize) -> (String, Value),
) {
    let addr = server.addr.clone();
    let waiting_calls = || tcp_connections(&addr) >= WAITS * 9 / 10;
    waits_with(server, control, kind, 64, waiting_calls, |i| {
        let (path, body) = send(i);
        let addr = addr.clone();
        Box::new(
            move || match call_raw(&addr, "POST", &path, &[], Some(&body)) {
                Ok((status, body)) => (status, body),
                Err(e) => (0, json!({ "transport": e.to_string() })),
            },
        )
    });
}

/// One waiting client: its final status and body (status 0: no answer).
type Waiter = Box<dyn FnOnce() -> (u16, Value) + Send>;

/// The bound on health's p99 (and on another queue's poll) while 600
/// calls wait: the property is that a probe is not queued behind the
/// waits, which hold nothing it needs, so it is answered while they are
/// still held, well before their 6 s end (before the waits held no
/// thread, the figure was 15 s). How fast this machine answers is not
/// the property: the 100 ms once asserted here, about ten times an idle
/// server's p99 (docs/operations.md), failed at load average 16.
const WAIT_HEALTH_BOUND: Duration = Duration::from_secs(3);

/// [`waits_of_one_kind`] for any client: `waiter(i)` is the i-th of the
/// 600 clients, and `piled_up` says when they are all waiting. The process
/// may grow by fewer than `new_threads` threads meanwhile (a thread per
/// wait would be 600), and health's p99 stays under [`WAIT_HEALTH_BOUND`]
/// plus twice an idle control server's at the same moments.
fn waits_with(
    server: &Server,
    control: &Server,
    kind: &str,
    new_threads: usize,
    piled_up: impl Fn() -> bool,
    waiter: impl Fn(usize) -> Waiter,
) {
    let addr = server.addr.clone();
    let threads_before = server.threads();
    let mut calls = Vec::with_capacity(WAITS);
    for i in 0..WAITS {
        calls.push(client(waiter(i)));
    }
    // Let the waits pile up before measuring.
    let pid = server.pid();
    let waiting = until(Duration::from_secs(60), || {
        status_field(pid, "Threads:").is_some() && piled_up()
    });
    let (mut latencies, mut noise) = health_latencies(&addr, &control.addr, 100);
    let threads_during = server.threads();
    let names_during = thread_names(server.pid());
    let poll_began = Instant::now();
    let (poll_status, poll) = call(
        &addr,
        "POST",
        "/api/worker/workflow-tasks/poll",
        Some(
            &json!({ "task_queue": "other-queue", "worker_id": "w-probe",
                      "poll_request_id": format!("probe-{kind}"), "timeout_seconds": 0 }),
        ),
    );
    let poll_took = poll_began.elapsed();
    let mut statuses = Vec::new();
    for call in calls {
        let (status, body) = call.join().unwrap();
        assert_ne!(
            status,
            0,
            "{kind}: a waiting call got no answer: {body}; the server's log:\n{}",
            server.log()
        );
        statuses.push(status);
    }
    let noise_p99 = p99(&mut noise);
    let p99 = p99(&mut latencies);
    let counts = tally(&statuses);
    println!(
        "FIGURE waits kind={kind} concurrent={WAITS} piled_up={waiting} \
         health_p99_ms={} idle_control_p99_ms={} threads_before={threads_before} \
         threads_during={threads_during} worker_poll_ms={} answers={counts:?}",
        p99.as_millis(),
        noise_p99.as_millis(),
        poll_took.as_millis()
    );
    assert!(waiting, "{kind}: the waits never piled up");
    // Not queued behind the waits ([`WAIT_HEALTH_BOUND`]), with twice what
    // the same machine made an idle server wait at the same moments on
    // top: about 1 ms on a quiet machine, 4-70 ms on a 2-core one at load
    // average 12, where the waiting server (a debug build) also needs CPU
    // the other sessions take.
    assert!(
        p99 < WAIT_HEALTH_BOUND + 2 * noise_p99,
        "{kind}: /api/health p99 {p99:?} with {WAITS} waits (an idle server's: {noise_p99:?})"
    );
    assert_eq!(poll_status, 200, "{kind}: the worker poll: {poll}");
    assert!(
        poll_took < WAIT_HEALTH_BOUND + 2 * noise_p99,
        "{kind}: the worker poll took {poll_took:?}"
    );
    assert!(
        threads_during < threads_before + new_threads,
        "{kind}: {threads_during} threads with {WAITS} waits (from {threads_before}): {names_during:?}"
    );
}

/// Established TCP connections to `addr`'s port, from /proc/net/tcp.
fn tcp_connections(addr: &str) -> usize {
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let local = format!(":{port:04X}");
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // Server side: local address is the server's port, state 01 (established).
            cols.len() > 3 && cols[1].ends_with(&local) && cols[3] == "01"
        })
        .count()
}

#[test]
fn waiting_queries_updates_and_service_calls_hold_no_thread() {
    let _turn = one_at_a_time();
    let server = Server::start(&[
        ("DW_SERVER_QUERY_TASKS_TIMEOUT", "6"),
        ("DW_MAX_UPDATE_WAIT_MS", "6000"),
    ]);
    let control = Server::start(&[]);
    let addr = server.addr.clone();
    start_run(&addr, "queried", "nobody-serves");
    for i in 0..10 {
        start_run(&addr, &format!("updated-{i}"), "nobody-serves");
    }
    waits_of_one_kind(&server, &control, "query", |_| {
        ("/api/workflows/queried/query/state".to_owned(), json!({}))
    });
    waits_of_one_kind(&server, &control, "update", |i| {
        (
            format!("/api/workflows/updated-{}/update/bump", i % 10),
            json!({ "wait_for": "completed", "wait_timeout_seconds": 6,
                    "request_id": format!("u-{i}") }),
        )
    });
    // Service calls waiting for their run to complete: a sync operation
    // whose workflows no worker serves.
    for (path, body) in [
        (
            "/api/service-endpoints",
            json!({ "endpoint_name": "billing" }),
        ),
        (
            "/api/service-endpoints/billing/services",
            json!({ "service_name": "invoices" }),
        ),
        (
            "/api/service-endpoints/billing/services/invoices/operations",
            json!({ "operation_name": "charge", "operation_mode": "sync",
                    "handler_binding_kind": "start_workflow",
                    "handler_binding": { "workflow_type": "Charge", "task_queue": "nobody-serves" } }),
        ),
    ] {
        let (status, answer) = call(&addr, "POST", path, Some(&body));
        assert_eq!(status, 201, "{path}: {answer}");
    }
    waits_of_one_kind(&server, &control, "service_call", |i| {
        (
            "/api/service-endpoints/billing/services/invoices/operations/charge/execute".to_owned(),
            json!({ "arguments": "WzQyXQ==", "payload_codec": "avro", "wait_for": "completed",
                    "wait_timeout_seconds": 6, "idempotency_key": format!("call-{i}") }),
        )
    });
    let _ = server.log();
}

/// A waiting client on a fresh connection: `method path` with `body`.
fn waiting_call(addr: &str, method: &'static str, path: String, body: Option<Value>) -> Waiter {
    let addr = addr.to_owned();
    Box::new(
        move || match call_raw(&addr, method, &path, &[], body.as_ref()) {
            Ok(answer) => answer,
            Err(e) => (0, json!({ "transport": e.to_string() })),
        },
    )
}

/// The other waits a client can make: a stream page read waiting for
/// items, a run's result (the SDKs' `result()`: the run described every
/// 500 ms until it ends; the server has no result wait of its own) and a
/// worker's long poll for a task. Stream reads wait without a thread up to
/// their cap, raised to 600 here so every read waits; long polls keep
/// their default caps (16 per namespace, 64 per pool), so 16 of the 600
/// wait and the rest are refused `429 long_poll_capacity_exhausted` at once.
#[test]
fn waiting_stream_reads_results_and_long_polls_leave_health_and_polls_served() {
    let _turn = one_at_a_time();
    let server = Server::start(&[("DW_WORKFLOW_STREAM_MAX_WAITS", "600")]);
    let control = Server::start(&[]);
    let addr = server.addr.clone();
    let mut runs = Vec::new();
    for i in 0..10 {
        let workflow_id = format!("waited-{i}");
        let (status, body) = call(
            &addr,
            "POST",
            "/api/workflows",
            Some(
                &json!({ "workflow_id": workflow_id, "workflow_type": "Idle",
                          "task_queue": "nobody-serves", "input": { "codec": "json", "blob": "[]" } }),
            ),
        );
        assert_eq!(status, 201, "start {workflow_id}: {body}");
        let run_id = body["run_id"].as_str().expect("a run id").to_owned();
        runs.push((workflow_id, run_id));
    }

    waits_with(
        &server,
        &control,
        "stream",
        64,
        || tcp_connections(&addr) >= WAITS * 9 / 10,
        |i| {
            let (workflow_id, run_id) = &runs[i % runs.len()];
            let path = format!(
                "/api/workflows/{workflow_id}/runs/{run_id}/streams/out/items\
                 ?from=0&max_items=10&wait_seconds=6"
            );
            waiting_call(&addr, "GET", path, None)
        },
    );

    let describing = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = describing.clone();
    waits_with(
        &server,
        &control,
        "result",
        // Each describe is an ordinary request on the shared blocking
        // pool for a moment; 600 clients at once grew it by 38-117 threads
        // on a loaded 2-core machine. A thread held per waiting client
        // would be 600.
        256,
        // No result wait holds anything on the server: the SDKs' result()
        // is a describe every 500 ms, so 600 of them are 1,200 ordinary
        // requests a second that a debug build on 2 cores answers while
        // health is probed. Health then queues behind that work, not
        // behind waits: 14-150 ms alone, 350 ms beside other builds; it
        // must still be answered while the clients are at it.
        || seen.load(std::sync::atomic::Ordering::SeqCst) >= WAITS * 9 / 10,
        |i| {
            let (workflow_id, _) = runs[i % runs.len()].clone();
            let (addr, describing) = (addr.clone(), describing.clone());
            Box::new(move || {
                let path = format!("/api/workflows/{workflow_id}");
                let began = Instant::now();
                let mut first = true;
                loop {
                    let answer = match call_raw(&addr, "GET", &path, &[], None) {
                        Ok(answer) => answer,
                        Err(e) => return (0, json!({ "transport": e.to_string() })),
                    };
                    if first {
                        describing.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        first = false;
                    }
                    let ended = matches!(
                        answer.1["status"].as_str(),
                        Some("completed" | "failed" | "terminated" | "canceled" | "cancelled")
                    );
                    if answer.0 != 200 || ended || began.elapsed() >= Duration::from_secs(6) {
                        return answer;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            })
        },
    );

    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = answered.clone();
    waits_with(
        &server,
        &control,
        "poll",
        64,
        || {
            done.load(std::sync::atomic::Ordering::SeqCst) + tcp_connections(&addr)
                >= WAITS * 9 / 10
        },
        |i| {
            let body = json!({ "task_queue": "idle-queue", "worker_id": format!("w-{i}"),
                               "poll_request_id": format!("wait-{i}"), "timeout_seconds": 6 });
            let call = waiting_call(
                &addr,
                "POST",
                "/api/worker/workflow-tasks/poll".to_owned(),
                Some(body),
            );
            let answered = answered.clone();
            Box::new(move || {
                let answer = call();
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (status, body) = &answer;
                // Held polls end empty at their timeout; the rest are the cap's refusal.
                match status {
                    200 => assert!(
                        body["task"].is_null(),
                        "a poll of an empty queue got {body}"
                    ),
                    429 => assert_eq!(body["reason"], "long_poll_capacity_exhausted", "{body}"),
                    _ => {}
                }
                answer
            })
        },
    );
    let _ = server.log();
}

/// Wait slots held by `server`'s long polls (its pools' `slot-*` files: the
/// held ones and, once a wait has ended, idle ones within each pool's
/// global cap).
fn held_wait_slots(server: &Server) -> usize {
    fn count(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| {
                let path = entry.path();
                if path.is_dir() {
                    count(&path)
                } else {
                    usize::from(entry.file_name().to_string_lossy().starts_with("slot-"))
                }
            })
            .sum()
    }
    count(&server._dir.path().join("polling").join("wait-slots"))
}

/// 600 worker long polls waiting at once on an empty queue, their caps
/// raised so every one waits: the process does not grow a thread per poll
/// (each poll's claims run on a lane of 16 threads; its waits between them
/// hold none), `/api/health` keeps the waits' p99 bound, another queue's
/// poll is served, and a run started while they wait is handed to exactly
/// one of them. Before polls waited without a thread, the process grew to
/// the blocking pool's 512 threads and held them for the whole wait.
#[test]
fn waiting_long_polls_hold_no_thread_and_one_takes_a_new_run() {
    let _turn = one_at_a_time();
    // 600 sockets and 600 slot files: more than a default 1,024 limit,
    // which the server inherits.
    raise_own_file_limit(4096);
    let server = Server::start(&[
        ("DW_LONG_POLL_MAX_WAITS", "1000"),
        ("DW_LONG_POLL_MAX_WAITS_PER_NAMESPACE", "1000"),
        // Longer than the polls wait: the one lease never expires back to
        // the queue for a second poll to take.
        ("DW_TASK_LEASE_MS", "300000"),
    ]);
    let control = Server::start(&[]);
    let addr = server.addr.clone();
    // One poll that answers at once, so the poll path's lazily made
    // threads count in the figure before.
    let (status, body) = call(
        &addr,
        "POST",
        "/api/worker/workflow-tasks/poll",
        Some(&json!({ "task_queue": "warm-up", "worker_id": "w-warm",
                      "poll_request_id": "warm-up", "timeout_seconds": 0 })),
    );
    assert_eq!(status, 200, "{body}");
    let threads_before = server.threads();
    let leased = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut polls = Vec::with_capacity(WAITS);
    for i in 0..WAITS {
        let addr = addr.clone();
        let leased = leased.clone();
        polls.push(client(move || {
            let body = json!({ "task_queue": "empty-queue", "worker_id": format!("w-{i}"),
                               "poll_request_id": format!("p-{i}"), "timeout_seconds": 40 });
            let answer = call_raw(
                &addr,
                "POST",
                "/api/worker/workflow-tasks/poll",
                &[],
                Some(&body),
            )
            .unwrap_or_else(|e| (0, json!({ "transport": e.to_string() })));
            if answer.0 == 200 && answer.1["task"].is_object() {
                leased.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            answer
        }));
    }
    // Every poll holds its wait slot: all 600 are waiting, not queued.
    let waiting = until(Duration::from_secs(30), || {
        held_wait_slots(&server) >= WAITS
    });
    let threads_during = server.threads();
    let names_during = thread_names(server.pid());
    let (mut latencies, mut noise) = health_latencies(&addr, &control.addr, 100);
    let threads_after_probes = server.threads();
    let poll_began = Instant::now();
    let (poll_status, poll) = call(
        &addr,
        "POST",
        "/api/worker/workflow-tasks/poll",
        Some(
            &json!({ "task_queue": "other-queue", "worker_id": "w-probe",
                      "poll_request_id": "probe", "timeout_seconds": 0 }),
        ),
    );
    let poll_took = poll_began.elapsed();
    // A start while they wait wakes them; one leases the task.
    let started = Instant::now();
    start_run(&addr, "handed-out", "empty-queue");
    let handed = until(Duration::from_secs(30), || {
        leased.load(std::sync::atomic::Ordering::SeqCst) >= 1
    });
    let handoff = started.elapsed();
    // The other 599 would wait out their 40 s: a graceful stop answers
    // every waiting poll at once (empty, 200), which is also what each must
    // get, so the suite does not sit idle for the rest of the wait.
    let stopped = Command::new("kill")
        .arg("-TERM")
        .arg(server.pid().to_string())
        .status()
        .unwrap();
    assert!(stopped.success(), "kill -TERM");
    let mut statuses = Vec::with_capacity(WAITS);
    for poll in polls {
        let (status, body) = poll.join().unwrap();
        assert_ne!(
            status,
            0,
            "a waiting poll got no answer: {body}; the server's log:\n{}",
            server.log()
        );
        statuses.push(status);
    }
    let leased = leased.load(std::sync::atomic::Ordering::SeqCst);
    let noise_p99 = p99(&mut noise);
    latencies.sort();
    let p50 = latencies[latencies.len() / 2];
    let p99 = p99(&mut latencies);
    println!(
        "FIGURE long_polls concurrent={WAITS} waiting={waiting} threads_before={threads_before} \
         threads_during={threads_during} threads_after_probes={threads_after_probes} \
         health_p50_ms={} health_p99_ms={} idle_control_p99_ms={} worker_poll_ms={} \
         handed_to={leased} handoff_ms={} answers={:?}",
        p50.as_millis(),
        p99.as_millis(),
        noise_p99.as_millis(),
        poll_took.as_millis(),
        handoff.as_millis(),
        tally(&statuses)
    );
    assert!(waiting, "the 600 polls never all held a wait slot");
    // The lane's 16 threads, the runtime's and the other lanes' few: far
    // under one per poll (and under the blocking pool's 512 the polls used
    // to fill).
    assert!(
        threads_during.max(threads_after_probes) < threads_before + 64,
        "{threads_during} threads with {WAITS} polls waiting (from {threads_before}): {names_during:?}"
    );
    assert!(
        p99 < WAIT_HEALTH_BOUND + 2 * noise_p99,
        "/api/health p99 {p99:?} with {WAITS} polls waiting (an idle server's: {noise_p99:?})"
    );
    assert_eq!(poll_status, 200, "the other queue's poll: {poll}");
    assert!(
        handed,
        "the run started while 600 polls waited was never handed out"
    );
    assert_eq!(
        leased, 1,
        "the one workflow task was leased by {leased} polls"
    );
    assert_eq!(
        tally(&statuses).get(&200),
        Some(&WAITS),
        "every poll answered 200"
    );
}

/// Raises this test process's open-file limit so it can open more sockets
/// than the server it attacks may (CI machines default to 1,024).
fn raise_own_file_limit(want: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < want {
            limit.rlim_cur = want.min(limit.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Whether the server closed `socket` (EOF or reset) within `limit`.
fn closed_within(socket: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let began = Instant::now();
    socket.set_read_timeout(Some(limit)).ok()?;
    let mut buf = [0u8; 512];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => return Some(began.elapsed()),
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None
            }
            Err(_) => return Some(began.elapsed()),
        }
    }
}

const IDLE_SOCKETS: usize = 1_100;

#[test]
fn idle_sockets_past_the_descriptor_limit_leave_health_answered() {
    let _turn = one_at_a_time();
    raise_own_file_limit(4096);
    let server = Server::start_limited(&[("DW_SERVER_HTTP_HEADER_READ_TIMEOUT_MS", "3000")], 1024);
    let addr = server.addr.clone();
    let mut idle = Vec::with_capacity(IDLE_SOCKETS);
    for _ in 0..IDLE_SOCKETS {
        match TcpStream::connect(&addr) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connect #{}: {e}", idle.len()),
        }
    }
    // Nine health checks while the sockets are open (never a byte sent).
    let mut answered = Vec::new();
    let began = Instant::now();
    for _ in 0..9 {
        let asked = Instant::now();
        let answer = call_raw(&addr, "GET", "/api/health", &[], None);
        answered.push((answer.as_ref().map(|a| a.0).ok(), asked.elapsed()));
        std::thread::sleep(Duration::from_millis(500));
    }
    let served_200 = answered.iter().filter(|a| a.0 == Some(200)).count();
    let refused_503 = answered.iter().filter(|a| a.0 == Some(503)).count();
    let unanswered = answered.iter().filter(|a| a.0.is_none()).count();
    // The server cuts the idle sockets it held at the header-read timeout.
    let first_cut = closed_within(&mut idle[0], Duration::from_secs(10));
    let last_cut = closed_within(&mut idle[IDLE_SOCKETS - 1], Duration::from_secs(10));
    println!(
        "FIGURE idle_sockets open={IDLE_SOCKETS} ulimit=1024 health_200={served_200}/9 \
         health_503={refused_503} unanswered={unanswered} checks_took={:?} \
         first_socket_cut={first_cut:?} last_socket_cut={last_cut:?} answers={answered:?}",
        began.elapsed()
    );
    assert_eq!(
        unanswered, 0,
        "every health check gets an answer: {answered:?}"
    );
    assert!(
        answered.iter().all(|a| a.1 < Duration::from_secs(2)),
        "each health check answered within 2 s: {answered:?}"
    );
    // A probe past the connection cap is still served, so every check is
    // a 200 while the idle sockets hold the cap (before the overflow lane
    // served probes, the first checks within the header-read timeout were
    // 503 connection_limit).
    assert_eq!(
        served_200, 9,
        "health served while the idle sockets hold the cap: {answered:?}"
    );
    assert!(
        first_cut.is_some(),
        "an idle socket the server held was closed"
    );
    assert!(last_cut.is_some(), "a socket past the cap was closed");
    drop(idle);
    let (status, _) = call(&addr, "GET", "/api/health", None);
    assert_eq!(status, 200);
}

#[test]
fn slow_heads_and_slow_bodies_are_cut_at_their_timeouts() {
    let _turn = one_at_a_time();
    let server = Server::start(&[
        ("DW_SERVER_HTTP_HEADER_READ_TIMEOUT_MS", "2000"),
        ("DW_SERVER_HTTP_BODY_READ_TIMEOUT_MS", "2000"),
    ]);
    let addr = server.addr.clone();
    // A head sent one byte a second.
    let slow_head = {
        let addr = addr.clone();
        client(move || {
            let mut socket = TcpStream::connect(&addr).unwrap();
            let head = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
            let began = Instant::now();
            for byte in head {
                if socket.write_all(&[*byte]).is_err() {
                    return Some(began.elapsed());
                }
                std::thread::sleep(Duration::from_millis(1000));
                if began.elapsed() > Duration::from_secs(20) {
                    return None;
                }
            }
            None
        })
    };
    // A body sent one byte a second.
    let slow_body = {
        let addr = addr.clone();
        client(move || {
            let mut socket = TcpStream::connect(&addr).unwrap();
            socket
                .write_all(b"POST /api/workflows HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
                .unwrap();
            let began = Instant::now();
            socket
                .set_read_timeout(Some(Duration::from_millis(900)))
                .unwrap();
            let mut answer = Vec::new();
            let mut buf = [0u8; 1024];
            while began.elapsed() < Duration::from_secs(20) {
                match socket.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                    Err(_) => {
                        if !answer.is_empty() {
                            break;
                        }
                        if socket.write_all(b" ").is_err() {
                            break;
                        }
                    }
                }
            }
            (began.elapsed(), parse_answer(&answer).ok())
        })
    };
    let head_cut = slow_head.join().unwrap();
    let (body_cut, body_answer) = slow_body.join().unwrap();
    println!(
        "FIGURE slow_clients header_timeout_ms=2000 slow_head_cut_after={head_cut:?} \
         body_timeout_ms=2000 slow_body_answered_after={body_cut:?} answer={body_answer:?}"
    );
    let head_cut = head_cut.expect("the slow head was cut");
    assert!(
        head_cut >= Duration::from_millis(1500) && head_cut < Duration::from_secs(8),
        "slow head cut after {head_cut:?}"
    );
    assert!(
        body_cut < Duration::from_secs(8),
        "slow body cut after {body_cut:?}"
    );
    let (status, body) = body_answer.expect("the slow body got an answer");
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["reason"], "request_body_timeout");
}

#[test]
fn sigterm_under_load_drains_and_exits_zero_within_the_deadline() {
    stopped_under_load("TERM");
}

/// SIGINT (Ctrl-C, and what some supervisors send) drains the same way.
#[test]
fn sigint_under_load_drains_and_exits_zero_within_the_deadline() {
    stopped_under_load("INT");
}

/// Sends `SIG<signal>` to a server under load (starts from four clients,
/// a long poll, three half-sent request heads): it exits 0 within its
/// 3 s deadline, the long poll is answered empty, and every start it
/// acknowledged is in the database after a restart.
fn stopped_under_load(signal: &str) {
    let _turn = one_at_a_time();
    let server = Server::start(&[("DW_SERVER_HTTP_SHUTDOWN_DEADLINE_MS", "3000")]);
    let addr = server.addr.clone();
    // A long poll that would wait 30 s, and three half-sent request heads.
    let long_poll = {
        let addr = addr.clone();
        client(move || {
            call_raw(
                &addr,
                "POST",
                "/api/worker/workflow-tasks/poll",
                &[],
                Some(&json!({ "task_queue": "drained", "worker_id": "w-drain",
                              "poll_request_id": "drain-1", "timeout_seconds": 30 })),
            )
        })
    };
    let mut half_sent = Vec::new();
    for _ in 0..3 {
        let mut socket = TcpStream::connect(&addr).unwrap();
        socket
            .write_all(b"POST /api/workflows HTTP/1.1\r\nHost: 1")
            .unwrap();
        half_sent.push(socket);
    }
    // Starts under load; each acknowledged one must survive the stop.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut loaders = Vec::new();
    for t in 0..4 {
        let (addr, stop) = (addr.clone(), stop.clone());
        loaders.push(client(move || {
            let mut acknowledged = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = format!("load-{t}-{i}");
                i += 1;
                let answer = call_raw(
                    &addr,
                    "POST",
                    "/api/workflows",
                    &[],
                    Some(&json!({ "workflow_id": id, "workflow_type": "Load",
                                  "task_queue": "load", "input": { "codec": "json", "blob": "[]" } })),
                );
                match answer {
                    Ok((201, _)) => acknowledged.push(id),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            acknowledged
        }));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let mut server = server;
    let signalled = Instant::now();
    let killed = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(server.pid().to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    let mut exit = None;
    while signalled.elapsed() < Duration::from_secs(15) {
        if let Some(status) = server.child.try_wait().unwrap() {
            exit = Some((status, signalled.elapsed()));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acknowledged: Vec<String> = loaders
        .into_iter()
        .flat_map(|l| l.join().unwrap())
        .collect();
    let poll = long_poll.join().unwrap();
    println!(
        "FIGURE sig{} deadline_ms=3000 exit={exit:?} acknowledged_starts={} long_poll={poll:?}",
        signal.to_lowercase(),
        acknowledged.len()
    );
    let (status, took) = exit.unwrap_or_else(|| panic!("dwserver exited after SIG{signal}"));
    assert!(status.success(), "exit status {status:?}\n{}", server.log());
    assert!(took < Duration::from_secs(6), "exit took {took:?}");
    let (poll_status, poll_body) = poll.expect("the long poll was answered");
    assert_eq!(poll_status, 200, "{poll_body}");
    assert!(poll_body["task"].is_null(), "{poll_body}");
    assert!(!acknowledged.is_empty());
    drop(half_sent);
    // Restarted on the same database, every acknowledged start is there.
    let dir = std::mem::replace(&mut server._dir, tempfile::tempdir().unwrap());
    drop(server);
    let restarted = Server::start_as(Command::new(dwserver_binary()), &[], dir);
    for id in &acknowledged {
        let (status, body) = call(
            &restarted.addr,
            "GET",
            &format!("/api/workflows/{id}"),
            None,
        );
        assert_eq!(status, 200, "acknowledged start {id} lost: {body}");
    }
}

/// A `redis-server` of this test's own on a free port (killed on drop), or
/// `None` when the machine has none and CI did not ask for Redis.
struct OwnRedis {
    child: Child,
}

impl OwnRedis {
    fn start(port: u16) -> Option<OwnRedis> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => {
                assert!(
                    std::env::var_os("DW_TEST_REDIS_URL").is_none(),
                    "DW_TEST_REDIS_URL is set but redis-server cannot start: {e}"
                );
                eprintln!("NOTICE: redis-server is missing; the Redis outage scenario was SKIPPED");
                return None;
            }
        };
        let redis = OwnRedis { child };
        let up = until(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "redis-server on port {port} did not come up");
        Some(redis)
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Redis killed for 15 s under start, signal and registration load: every
/// request answered 2xx is in the store afterwards, every one answered with
/// an error is absent (or, retried with its request id, gives the same
/// run), none is lost, and the failed wake-ups are counted.
#[test]
fn redis_killed_under_load_answers_every_committed_write_truthfully() {
    let _turn = one_at_a_time();
    let port = OwnRedis::free_port();
    let Some(redis) = OwnRedis::start(port) else {
        return;
    };
    let url = format!("redis://127.0.0.1:{port}");
    let server = Server::start(&[("DW_REDIS_URL", url.as_str())]);
    let addr = server.addr.clone();
    start_run(&addr, "signalled", "redis-load");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut loaders = Vec::new();
    for t in 0..3 {
        let (addr, stop) = (addr.clone(), stop.clone());
        loaders.push(client(move || {
            let mut answered = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = format!("redis-{t}-{i}");
                i += 1;
                let start = call_raw(
                    &addr,
                    "POST",
                    "/api/workflows",
                    &[],
                    Some(&json!({ "workflow_id": id, "workflow_type": "Load", "request_id": id,
                                  "task_queue": "redis-load", "input": { "codec": "json", "blob": "[]" } })),
                );
                let signal = call_raw(
                    &addr,
                    "POST",
                    "/api/workflows/signalled/signal/ping",
                    &[],
                    Some(&json!({ "input": { "codec": "json", "blob": "[]" }, "request_id": id })),
                );
                let register = call_raw(
                    &addr,
                    "POST",
                    "/api/worker/register",
                    &[],
                    Some(&json!({ "worker_id": id, "task_queue": "redis-load" })),
                );
                answered.push((
                    id,
                    start.map(|a| a.0).unwrap_or(0),
                    signal.map(|a| a.0).unwrap_or(0),
                    register.map(|a| a.0).unwrap_or(0),
                ));
                std::thread::sleep(Duration::from_millis(20));
            }
            answered
        }));
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut redis = redis;
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    std::thread::sleep(Duration::from_secs(15));
    let redis = OwnRedis::start(port).expect("redis-server restarts");
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered: Vec<_> = loaders
        .into_iter()
        .flat_map(|l| l.join().unwrap())
        .collect();
    let (mut present, mut absent, mut lost, mut retried_same) = (0, 0, 0, 0);
    let mut errors = std::collections::BTreeMap::new();
    for (id, start, _, _) in &answered {
        let (status, body) = call(&addr, "GET", &format!("/api/workflows/{id}"), None);
        if (200..300).contains(start) {
            if status == 200 {
                present += 1;
            } else {
                lost += 1;
            }
            continue;
        }
        *errors.entry(*start).or_insert(0) += 1;
        if status == 404 {
            absent += 1;
            continue;
        }
        // Written though answered with an error: the retry with the same
        // request id must answer the same run.
        let (retry, retried) = call(
            &addr,
            "POST",
            "/api/workflows",
            Some(
                &json!({ "workflow_id": id, "workflow_type": "Load", "request_id": id,
                          "task_queue": "redis-load", "input": { "codec": "json", "blob": "[]" } }),
            ),
        );
        if (200..300).contains(&retry) && retried["run_id"] == body["run_id"] {
            retried_same += 1;
        } else {
            lost += 1;
        }
    }
    let signal_codes = tally(&answered.iter().map(|a| a.2).collect::<Vec<_>>());
    let register_codes = tally(&answered.iter().map(|a| a.3).collect::<Vec<_>>());
    let start_codes = tally(&answered.iter().map(|a| a.1).collect::<Vec<_>>());
    let signals_acknowledged = answered.iter().filter(|a| a.2 == 202).count();
    let scrape = call_raw(&addr, "GET", "/api/system/operator-metrics", &[], None)
        .map(|a| a.1["post_commit_failures_total"].clone())
        .unwrap_or(Value::Null);
    println!(
        "FIGURE redis_outage seconds=15 starts={} start_answers={start_codes:?} \
         present={present} absent={absent} retried_same={retried_same} lost={lost} \
         signal_answers={signal_codes:?} register_answers={register_codes:?} \
         post_commit_failures_total={scrape}",
        answered.len()
    );
    assert_eq!(
        lost, 0,
        "an acknowledged start went missing or a retry diverged"
    );
    assert!(present > 0 && signals_acknowledged > 0);
    assert!(
        scrape.as_u64().is_some_and(|n| n > 0),
        "the failed wake-ups were counted: {scrape}"
    );
    assert!(server
        .log()
        .contains("a step after a committed write failed"));
    drop(redis);
}

/// One request on `socket` (kept alive): the raw answer head and body.
fn exchange(socket: &mut TcpStream, request: &str) -> String {
    socket.write_all(request.as_bytes()).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Read up to the end of the (small, length-delimited) answer.
    loop {
        let n = socket.read(&mut buf).unwrap_or(0);
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).to_string();
        if n == 0 {
            return text;
        }
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
    }
}

#[test]
fn auth_doors_scheme_case_operator_health_and_early_refusals_close() {
    let _turn = one_at_a_time();
    let server = Server::start(&[
        ("DW_AUTH", ""),
        ("DW_AUTH_OPERATOR_TOKENS", "op-token"),
        ("DW_AUTH_ADMIN_TOKENS", "admin-token-that-is-longer"),
    ]);
    let addr = server.addr.clone();
    // RFC 7235: the scheme is case-insensitive.
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} op-token");
        let (status, body) = call_raw(
            &addr,
            "GET",
            "/api/cluster/info",
            &[("Authorization", &auth)],
            None,
        )
        .unwrap();
        assert_eq!(status, 200, "{scheme}: {body}");
    }
    // /api/system/health is an operator surface (admin), as documented.
    let (status, _) = call_raw(&addr, "GET", "/api/system/health", &[], None).unwrap();
    assert_eq!(status, 401);
    let (status, _) = call_raw(
        &addr,
        "GET",
        "/api/system/health",
        &[("Authorization", "Bearer op-token")],
        None,
    )
    .unwrap();
    assert_eq!(status, 403);
    let (status, _) = call_raw(
        &addr,
        "GET",
        "/api/system/health",
        &[("Authorization", "Bearer admin-token-that-is-longer")],
        None,
    )
    .unwrap();
    assert_eq!(status, 200);
    let (status, _) = call_raw(&addr, "GET", "/api/health", &[], None).unwrap();
    assert_eq!(status, 200, "the probe needs no token");
    // An early refusal of a request with an unread body closes the
    // connection and says so, instead of racing the client's next request.
    let mut failed_next = 0;
    for i in 0..50 {
        let mut socket = TcpStream::connect(&addr).unwrap();
        let refused = exchange(
            &mut socket,
            "POST /api/workflows HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        );
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        assert!(
            refused.to_ascii_lowercase().contains("connection: close"),
            "#{i}: {refused}"
        );
        // A client that honours it reconnects; one that does not sees EOF,
        // never a half-read stream.
        let next = exchange(
            &mut socket,
            "GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        );
        if !(next.is_empty() || next.starts_with("HTTP/1.1 200")) {
            failed_next += 1;
        }
    }
    println!("FIGURE early_refusal_keepalive refused=50 next_request_garbled={failed_next}");
    assert_eq!(failed_next, 0);
}

#[test]
fn deceptive_ids_namespaces_and_malformed_chunks_are_refused_cleanly() {
    let _turn = one_at_a_time();
    let server = Server::start(&[]);
    let addr = server.addr.clone();
    for id in [
        "nul\u{0}id",
        "ansi\u{1b}[31m",
        "invoice\u{202E}fdp.exe",
        "zero\u{200B}width",
    ] {
        for field in ["workflow_id", "workflow_type", "task_queue"] {
            let mut body = json!({ "workflow_id": "ok", "workflow_type": "Ok", "task_queue": "ok",
                                   "input": { "codec": "json", "blob": "[]" } });
            body[field] = id.into();
            let (status, answer) = call(&addr, "POST", "/api/workflows", Some(&body));
            assert_eq!(status, 422, "{field}={id:?}: {answer}");
            assert!(answer.to_string().contains(field), "{answer}");
        }
    }
    for name in [
        "a/b",
        "../etc",
        "x..y",
        "zero\u{200B}width",
        "rtl\u{202E}x",
        "back\\slash",
    ] {
        let (status, answer) = call(
            &addr,
            "POST",
            "/api/namespaces",
            Some(&json!({ "name": name })),
        );
        assert_eq!(status, 422, "{name:?}: {answer}");
    }
    let (status, answer) = call(
        &addr,
        "POST",
        "/api/namespaces",
        Some(&json!({ "name": "tenant-ü" })),
    );
    assert_eq!(status, 201, "{answer}");
    // A malformed chunk size is a malformed request (400), not a too-large one.
    let mut socket = TcpStream::connect(&addr).unwrap();
    socket
        .write_all(b"POST /api/workflows HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    let (status, body) = parse_answer(&answer).expect("an answer to a malformed chunk");
    println!("FIGURE malformed_chunk status={status} body={body}");
    assert_eq!(status, 400, "{body}");
}

const UPLOADS: usize = 64;
const UPLOAD_BYTES: usize = 16 * 1024 * 1024;

/// The bytes of upload `i`, a 64 KiB block at a time: distinct per upload
/// (so none is deduplicated), never held whole by the client either.
fn upload_blocks(i: usize) -> impl Iterator<Item = Vec<u8>> {
    const BLOCK: usize = 64 * 1024;
    (0..UPLOAD_BYTES / BLOCK).map(move |b| {
        let mut block = vec![(i * 31 + b) as u8; BLOCK];
        block[..8].copy_from_slice(&(i as u64).to_le_bytes());
        block
    })
}

/// A temporary directory in memory (`/dev/shm`) when that holds `room`
/// bytes free, else an ordinary one.
fn scratch_dir_with_room(room: u64) -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    match fs4::available_space(shm) {
        Ok(free) if free >= room => tempfile::tempdir_in(shm).unwrap(),
        _ => tempfile::tempdir().unwrap(),
    }
}

/// 64 concurrent 16 MiB external payload uploads: the server streams each
/// to a spool file and copies it into its row a chunk at a time, so its
/// peak resident memory stays under 200 MB (it was 1.46 GB when each body
/// was held whole); every upload is stored, and no spool file is left.
#[test]
fn concurrent_large_uploads_stream_in_bounded_memory() {
    use sha2::{Digest, Sha256};
    let _turn = one_at_a_time();
    // The spool files and the database take 2 GiB and more: in RAM when
    // there is room, so the scenario measures the server's memory rather
    // than waiting on the disk (a minute of a 2-core CI machine's wall
    // time). Files in tmpfs are not in the process's resident set, so the
    // bound below measures the same thing on either.
    let server = Server::start_as(
        Command::new(dwserver_binary()),
        &[(
            "DW_SERVER_EXTERNAL_PAYLOAD_TRANSPORT_THRESHOLD_BYTES",
            "1024",
        )],
        scratch_dir_with_room(6 << 30),
    );
    let addr = server.addr.clone();
    let began = Instant::now();
    let baseline_mib = server.peak_rss_mib();
    let uploads: Vec<_> = (0..UPLOADS)
        .map(|i| {
            let addr = addr.clone();
            client(move || -> std::io::Result<(u16, Value)> {
                let mut digest = Sha256::new();
                for block in upload_blocks(i) {
                    digest.update(&block);
                }
                let sha: String = digest
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                let mut stream = TcpStream::connect(&addr)?;
                stream.set_read_timeout(Some(Duration::from_secs(300)))?;
                let head = format!(
                    "POST /api/external-payloads/v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
                     Content-Type: application/octet-stream\r\nContent-Length: {UPLOAD_BYTES}\r\n\
                     X-Durable-Workflow-Payload-Codec: avro\r\nX-Durable-Workflow-Payload-Size: {UPLOAD_BYTES}\r\n\
                     X-Durable-Workflow-Payload-SHA256: {sha}\r\n\r\n"
                );
                stream.write_all(head.as_bytes())?;
                for block in upload_blocks(i) {
                    stream.write_all(&block)?;
                }
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer)?;
                parse_answer(&answer)
            })
        })
        .collect();
    let mut statuses = Vec::new();
    let mut references = Vec::new();
    for upload in uploads {
        match upload.join().unwrap() {
            Ok((status, body)) => {
                assert_eq!(status, 201, "an upload: {body}");
                statuses.push(status);
                references.push(
                    body["reference"]["reference_id"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                );
            }
            Err(e) => panic!("an upload failed on the wire: {e}"),
        }
    }
    let took = began.elapsed();
    let peak_mib = server.peak_rss_mib();
    // The 64 payloads fetched back at once: streamed a chunk at a time,
    // each byte checked against what was sent (hashed as it arrives).
    let fetches: Vec<_> = references
        .into_iter()
        .enumerate()
        .map(|(i, reference)| {
            let addr = addr.clone();
            client(move || -> std::io::Result<bool> {
                let mut want = Sha256::new();
                for block in upload_blocks(i) {
                    want.update(&block);
                }
                let mut stream = TcpStream::connect(&addr)?;
                stream.set_read_timeout(Some(Duration::from_secs(300)))?;
                stream.write_all(
                    format!(
                        "GET /api/external-payloads/v1/{reference} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                )?;
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                reader.read_line(&mut line)?;
                let ok = line.contains(" 200 ");
                loop {
                    line.clear();
                    reader.read_line(&mut line)?;
                    if line == "\r\n" || line.is_empty() {
                        break;
                    }
                }
                let mut got = Sha256::new();
                let mut buf = vec![0u8; 64 * 1024];
                let mut total = 0usize;
                loop {
                    let n = reader.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    got.update(&buf[..n]);
                    total += n;
                }
                Ok(ok && total == UPLOAD_BYTES && got.finalize() == want.finalize())
            })
        })
        .collect();
    for fetch in fetches {
        assert!(
            fetch.join().unwrap().expect("a fetch on the wire"),
            "a fetched payload is the uploaded one"
        );
    }
    let fetch_peak_mib = server.peak_rss_mib();
    let spool = server._dir.path().join("polling").join("payload-uploads");
    let left: usize = std::fs::read_dir(&spool)
        .into_iter()
        .flatten()
        .flatten()
        .map(|node| std::fs::read_dir(node.path()).map_or(0, |d| d.count()))
        .sum();
    let (_, usage) = call(&addr, "GET", "/api/system/metrics?namespace=default", None);
    let used = &usage["metrics"]["dw_runtime_external_payload_namespace_usage"];
    println!(
        "FIGURE uploads concurrent={UPLOADS} bytes_each={UPLOAD_BYTES} answers={:?} took={took:?} \
         server_peak_rss_mib={peak_mib} (before: {baseline_mib}; after 64 concurrent fetches: \
         {fetch_peak_mib}) spool_files_left={left} usage={used}",
        tally(&statuses)
    );
    assert!(
        peak_mib < 200,
        "the server peaked at {peak_mib} MiB resident with {UPLOADS} uploads of 16 MiB"
    );
    // The issue bounds the uploads (above). A fetch streams 256 KiB chunks,
    // at most a few in flight each, so the 64 fetches never hold the 1 GiB
    // they send; what the process keeps beyond the chunks is the allocator's
    // per-thread arenas, which vary with how many fetches run at once:
    // measured 156 MiB on a loaded machine and 234 MiB on an idle one. The
    // bound is half of what buffering the payloads would take, so a fetch
    // that holds its payload whole fails it.
    assert!(
        fetch_peak_mib < 512,
        "the server peaked at {fetch_peak_mib} MiB resident with {UPLOADS} fetches of 16 MiB \
         (half of the 1 GiB they send)"
    );
    assert_eq!(left, 0, "no spool file outlives its upload");
    assert_eq!(used["used_objects"], UPLOADS, "{used}");
    assert_eq!(used["used_bytes"], UPLOADS * UPLOAD_BYTES, "{used}");
}

/// Long polls while the polling cache (Redis) is unreachable: a poll for a
/// queue with a ready task and a poll for an empty queue each get an
/// answer within their wait plus a margin, never a hang (today: at once,
/// `503 cache_unavailable`, nothing leased), and once Redis is back the
/// ready task is handed out exactly once.
#[test]
fn long_polls_are_answered_while_the_polling_cache_is_unreachable() {
    let _turn = one_at_a_time();
    let port = OwnRedis::free_port();
    let Some(redis) = OwnRedis::start(port) else {
        return;
    };
    let url = format!("redis://127.0.0.1:{port}");
    let server = Server::start(&[("DW_REDIS_URL", url.as_str())]);
    let addr = server.addr.clone();
    start_run(&addr, "ready-while-down", "cache-down");
    drop(redis);
    let poll = |queue: &str, id: &str| {
        let began = Instant::now();
        let answer = call_raw(
            &addr,
            "POST",
            "/api/worker/workflow-tasks/poll",
            &[],
            Some(&json!({ "task_queue": queue, "worker_id": "w-down",
                          "poll_request_id": id, "timeout_seconds": 2 })),
        );
        (answer, began.elapsed())
    };
    let (ready, ready_took) = poll("cache-down", "down-1");
    let (empty, empty_took) = poll("nothing-here", "down-2");
    println!(
        "FIGURE cache_down ready_poll={ready:?} took={ready_took:?} empty_poll={empty:?} took={empty_took:?}"
    );
    for (answer, took) in [(&ready, ready_took), (&empty, empty_took)] {
        let (status, body) = answer.as_ref().expect("an answer on the wire");
        assert!(
            took < Duration::from_secs(2) + Duration::from_secs(15),
            "answered within the wait plus a margin: {took:?}"
        );
        assert!(
            *status == 200 || (*status == 503 && body["retryable"] == true),
            "a poll answers 200 or a retryable 503: {status} {body}"
        );
        if *status == 503 {
            // The body's retry_after_seconds comes from the same method as
            // the Retry-After header.
            assert_eq!(body["retry_after_seconds"], 1, "{body}");
        }
    }
    // Redis back on the same port: the task is handed out once.
    let redis = OwnRedis::start(port).expect("redis-server again");
    let mut leased = 0;
    if ready
        .as_ref()
        .is_ok_and(|(s, b)| *s == 200 && b["task"].is_object())
    {
        leased += 1;
    }
    let served = until(Duration::from_secs(30), || {
        if leased > 0 {
            return true;
        }
        if let Ok((200, body)) = poll("cache-down", "up-1").0 {
            if body["task"].is_object() {
                leased += 1;
            }
        }
        leased > 0
    });
    assert!(served, "the ready task is served once the cache is back");
    assert_eq!(leased, 1);
    drop(redis);
}

/// Tokens bound by configuration and a registered webhook, on a real
/// dwserver configured through its environment. One operator token naming
/// eight registered caller namespaces used to get 8 of 8 service calls
/// through a 3-a-minute budget: the budget is now the token's, 3 of 8. A
/// token bound to tenant-a cannot call as tenant-b (403). A webhook
/// delivery needs its adapter's signature: a forged one is 401, the same
/// signed delivery again 409, a retry signed anew converges on the first
/// signal, and only one signal is pending.
#[test]
fn service_budgets_follow_the_token_and_webhooks_refuse_forgeries() {
    use dwengine::server::webhooks::sign;
    let _turn = one_at_a_time();
    const SECRET: &str = "whsec-hostile-0123456789";
    let server = Server::start(&[
        ("DW_AUTH", ""),
        ("DW_AUTH_ADMIN_TOKENS", "adm-token"),
        ("DW_AUTH_OPERATOR_TOKENS", "op-any,op-a@tenant-a"),
        (
            "DW_SERVER_SERVICE_BOUNDARY_MAX_REQUESTS_PER_MINUTE_PER_BOUNDARY",
            "3",
        ),
        ("DW_WEBHOOKS", &format!("stripe@tenant-a={SECRET}")),
    ]);
    let addr = server.addr.clone();
    let as_token = |token: &str, ns: &str, method: &str, path: &str, body: Option<&Value>| {
        let auth = format!("Bearer {token}");
        call_raw(
            &addr,
            method,
            path,
            &[("Authorization", &auth), ("X-Namespace", ns)],
            body,
        )
        .unwrap()
    };
    let callers: Vec<String> = (0..8).map(|n| format!("caller-{n}")).collect();
    for ns in ["payments", "tenant-a"]
        .into_iter()
        .chain(callers.iter().map(String::as_str))
    {
        let (status, body) = as_token(
            "adm-token",
            "default",
            "POST",
            "/api/namespaces",
            Some(&json!({ "name": ns })),
        );
        assert_eq!(status, 201, "{body}");
    }
    let catalog = "/api/service-endpoints";
    for (path, body) in [
        (catalog.to_owned(), json!({ "endpoint_name": "billing" })),
        (
            format!("{catalog}/billing/services"),
            json!({ "service_name": "invoices" }),
        ),
        (
            format!("{catalog}/billing/services/invoices/operations"),
            json!({ "operation_name": "charge", "operation_mode": "async",
                    "handler_binding_kind": "start_workflow",
                    "handler_binding": { "workflow_type": "Charge", "task_queue": "payments" } }),
        ),
    ] {
        let (status, answer) = as_token("adm-token", "payments", "POST", &path, Some(&body));
        assert_eq!(status, 201, "{path}: {answer}");
    }
    // All eight calls in one budget minute.
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 60;
    if into_minute > 40 {
        std::thread::sleep(Duration::from_secs(61 - into_minute));
    }
    let execute = format!("{catalog}/billing/services/invoices/operations/charge/execute");
    let call_as = |token: &str, caller: &str| {
        as_token(
            token,
            "payments",
            "POST",
            &execute,
            Some(&json!({ "arguments": "W10=", "payload_codec": "json",
                          "wait_for": "accepted", "caller_namespace": caller })),
        )
    };
    let answers: Vec<u16> = callers.iter().map(|c| call_as("op-any", c).0).collect();
    let admitted = answers.iter().filter(|s| **s == 200).count();
    println!("FIGURE service_call_budget callers_named=8 admitted={admitted} answers={answers:?}");
    assert_eq!(tally(&answers), [(200, 3), (429, 5)].into_iter().collect());
    let (status, body) = call_as("op-a", "caller-0");
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["reason"], "caller_namespace_mismatch");
    let (status, body) = as_token("op-a", "caller-0", "GET", "/api/workflows", None);
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["reason"], "namespace_forbidden");

    // The webhook signals a run of its namespace.
    let (status, body) = as_token(
        "op-a",
        "tenant-a",
        "POST",
        "/api/workflows",
        Some(
            &json!({ "workflow_id": "order-1", "workflow_type": "Order", "task_queue": "orders",
                      "input": { "codec": "json", "blob": "[]" } }),
        ),
    );
    assert_eq!(status, 201, "{body}");
    let event = json!({ "action": "signal_workflow", "idempotency_key": "evt-1",
                        "target": { "workflow_id": "order-1", "signal_name": "paid" } });
    let deliver = |timestamp: u64, secret: &str| {
        let timestamp = timestamp.to_string();
        let signature = sign(secret.as_bytes(), &timestamp, event.to_string().as_bytes());
        call_raw(
            &addr,
            "POST",
            "/api/bridge-adapters/webhook/stripe",
            &[
                ("X-Durable-Workflow-Webhook-Timestamp", &timestamp),
                ("X-Durable-Workflow-Webhook-Signature", &signature),
            ],
            Some(&event),
        )
        .unwrap()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (status, body) = deliver(now, "forged-secret-0123456789");
    assert_eq!(
        (status, &body["reason"]),
        (401, &json!("webhook_signature_invalid"))
    );
    let (status, first) = deliver(now, SECRET);
    assert_eq!(status, 202, "{first}");
    let (status, body) = deliver(now, SECRET);
    assert_eq!(
        (status, &body["reason"]),
        (409, &json!("webhook_replayed")),
        "{body}"
    );
    let (status, again) = deliver(now - 1, SECRET);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["signal_id"], first["signal_id"]);
    let (_, described) = as_token("op-a", "tenant-a", "GET", "/api/workflows/order-1", None);
    assert_eq!(described["pending"]["signals"], 1, "{described}");
    println!("FIGURE webhook forged=401 replayed=409 retried=200 pending_signals=1");
}

/// Every schedule of the default namespace (one page of up to 1,000).
fn schedules_of(addr: &str) -> Vec<Value> {
    let (status, page) = call(addr, "GET", "/api/schedules?page_size=1000", None);
    assert_eq!(status, 200, "{page}");
    page["schedules"].as_array().cloned().unwrap_or_default()
}

/// The scheduler stalled — the process stopped for 5 s, as a frozen VM, a
/// long pause or a slow failover leaves it — under 100 one-second schedules
/// whose runs stay open (no worker): each owes about five moments when it
/// resumes. They are caught up by overlap policy in one pass (`skip`: no
/// new run, the moments counted as skipped in one entry) and the lag
/// (`schedule_lag_seconds`, now minus the earliest fire still owed) comes
/// back under the sweep's interval plus a margin. Fired one late moment per
/// schedule per pass, as before, the backlog never shrank: each 1 s pass
/// moved each schedule on by one moment while another fell due.
#[test]
fn a_stalled_scheduler_catches_up_by_overlap_policy_and_its_lag_returns() {
    let _turn = one_at_a_time();
    const SCHEDULES: usize = 100;
    // Long enough for several one-second moments to pass unfired (so the
    // catch-up has to pass over them in one entry), short enough to keep
    // the suite quick: a stall of S seconds misses at least S - 1 moments
    // whatever the phase of the sweep.
    const STALL: Duration = Duration::from_secs(5);
    let server = Server::start(&[]);
    let addr = server.addr.clone();
    for i in 0..SCHEDULES {
        let body = json!({
            "schedule_id": format!("tick-{i:03}"),
            "spec": { "intervals": [{ "every": "PT1S" }] },
            "action": { "workflow_type": "tick", "task_queue": "ticks" },
        });
        let (status, answer) = call(&addr, "POST", "/api/schedules", Some(&body));
        assert_eq!(status, 201, "{answer}");
    }
    // How far behind the sweep is, from what every build reports (the
    // schedules' next_fire_at, so DW_HOSTILE_DWSERVER can name an older
    // build), and as the metric says it.
    let lag = || -> f64 {
        let now = jiff::Timestamp::now().as_millisecond();
        let earliest = schedules_of(&addr)
            .iter()
            .filter_map(|s| s["next_fire_at"].as_str()?.parse::<jiff::Timestamp>().ok())
            .map(|at| at.as_millisecond())
            .min()
            .unwrap_or(now);
        (now - earliest).max(0) as f64 / 1000.0
    };
    let metric = || -> Value {
        let (status, metrics) = call(&addr, "GET", "/api/system/operator-metrics", None);
        assert_eq!(status, 200, "{metrics}");
        metrics["schedule_lag_seconds"].clone()
    };
    // Every schedule has started its one run (the rest of its fires skip).
    assert!(
        until(Duration::from_secs(120), || schedules_of(&addr)
            .iter()
            .all(|s| s["fires_count"] == 1)),
        "{:?}",
        schedules_of(&addr).first()
    );
    let signal = |which: &str| {
        let sent = Command::new("kill")
            .arg(format!("-{which}"))
            .arg(server.pid().to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{which}");
    };
    signal("STOP");
    std::thread::sleep(STALL);
    let resumed = Instant::now();
    signal("CONT");
    let mut seen = Vec::new();
    let caught_up = until(Duration::from_secs(120), || {
        let now = lag();
        seen.push(now);
        now < 3.0
    });
    let took = resumed.elapsed();
    let reported = metric();
    let samples = format!(
        "{} samples, first {:?}, last {:?}",
        seen.len(),
        seen.first(),
        seen.last()
    );
    let rows = schedules_of(&addr);
    let skipped: Vec<i64> = rows
        .iter()
        .map(|s| s["info"]["skipped_trigger_count"].as_i64().unwrap_or(0))
        .collect();
    let missed: Vec<i64> = rows
        .iter()
        .take(5)
        .map(|s| {
            let id = s["schedule_id"].as_str().unwrap();
            let (_, history) = call(
                &addr,
                "GET",
                &format!("/api/schedules/{id}/history?limit=500"),
                None,
            );
            history["events"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| e["payload"]["missed_moments"].as_i64())
                .max()
                .unwrap_or(0)
        })
        .collect();
    println!(
        "stalled {STALL:?} under {SCHEDULES} one-second schedules: lag back under 3 s {took:?} \
         after SIGCONT ({samples}); skipped per schedule min {} max {}; the largest \
         catch-up of five schedules passed over {missed:?} moments; schedule_lag_seconds \
         {reported}",
        skipped.iter().min().unwrap_or(&0),
        skipped.iter().max().unwrap_or(&0),
    );
    assert!(caught_up, "the lag never came back: {samples}");
    // The metric tells the same (it may have grown since by a moment).
    assert!(
        reported
            .as_f64()
            .is_some_and(|l| l < seen[seen.len() - 1] + 3.0),
        "{reported}"
    );
    assert_eq!(rows.len(), SCHEDULES);
    assert!(
        rows.iter().all(|s| s["fires_count"] == 1),
        "skip started no run while the first was open"
    );
    // Each schedule's stall was passed over in one catch-up, not fired
    // late one moment a pass: one entry for the stall's moments (all but
    // one, whatever the phase, less one more for a sweep late under load).
    let stalled_moments = STALL.as_secs() as i64 - 1;
    assert!(
        missed.iter().all(|m| *m >= stalled_moments - 1),
        "{missed:?}"
    );
    // Every moment passed over is counted as skipped (before the stall a
    // schedule may have skipped more while its first run was open).
    assert!(skipped.iter().all(|s| *s >= stalled_moments), "{skipped:?}");
    assert!(
        skipped.iter().zip(&missed).all(|(s, m)| s >= m),
        "skipped {skipped:?} against passed over {missed:?}"
    );
}
