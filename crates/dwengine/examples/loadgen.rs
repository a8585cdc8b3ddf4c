//! Load generator for `dwserver`: start throughput beside raw SQLite, and
//! peak server memory under large signals.
//!
//! ```sh
//! cargo build --release -p dwengine --bin dwserver --example loadgen
//! target/release/examples/loadgen starts --server target/release/dwserver --seconds 10 --connections 32
//! target/release/examples/loadgen signals --server target/release/dwserver --count 100
//! target/release/examples/loadgen raw --seconds 5 --dir /tmp/bench
//! target/release/examples/loadgen schedules --server target/release/dwserver --count 2000 --seconds 40
//! target/release/examples/loadgen writer --dir /tmp/bench --count 20000 --connections 16
//! ```
//!
//! `raw` runs only the raw SQLite loop (below) in `--dir` and prints its
//! commits per second: `docs/bench-starts.sh` runs it around wrk, whose
//! client costs the two cores less than this example's threads.
//!
//! `starts` spawns the server on a fresh SQLite file, drives `POST …/workflows`
//! from N keep-alive connections for the given time and reports starts per
//! second with p50/p99 latency; in the same directory and for the same total
//! time (half before the HTTP phase, half after), one thread commits one
//! 2-row transaction per commit to raw SQLite at `synchronous = FULL`: the
//! single-commit rate the server is measured against. `signals` runs the server under `/usr/bin/time -v`, sends N
//! signals of just under 2 MiB to one run, polls its workflow task four
//! times (each poll leases it, reads every history page, replays once and
//! hands it back) and reports the server's maximum resident set size.
//! `schedules` creates N schedules firing every second (`--policy`, default
//! `skip`; no worker, so each first run stays open), then for the given
//! time samples once a second how far behind the scheduler is: now minus
//! the earliest `next_fire_at` of the listed schedules (which every server
//! version reports), beside `dw_schedule_lag_seconds` where the server has
//! it; it ends with the fires the schedules counted (started, skipped or
//! buffered) against the moments that fell due.
//! `writer` runs no server: N threads (`--connections`) start `--count`
//! workflows through the store's group-commit writer in this process, on a
//! fresh SQLite file in `--dir` (`synchronous = FULL`), each start the
//! transaction an HTTP start runs (the workflow id's open run looked up,
//! then the run, its `WorkflowStarted` and its first workflow task), and
//! prints the commits and the writer thread's CPU per start (from
//! `/proc/self/task`): the serial part of a start, without HTTP. Under
//! `valgrind --tool=callgrind --toggle-collect='*writer::drain*'` the
//! difference between two counts' totals is the writer's instructions per
//! start, a figure the machine's load does not move.
//! Request shapes come from the tests' one wire module.

#[path = "../tests/engine/support/wire.rs"]
mod wire;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn usage() -> ! {
    eprintln!(
        "usage: loadgen starts --server PATH [--seconds N] [--connections N]\n       \
         loadgen signals --server PATH [--count N] [--bytes N]\n       \
         loadgen raw --dir DIR [--seconds N]\n       \
         loadgen schedules --server PATH [--count N] [--seconds N] [--policy P]\n       \
         loadgen writer --dir DIR [--count N] [--connections N]"
    );
    std::process::exit(2)
}

struct Args {
    mode: String,
    server: String,
    seconds: u64,
    connections: usize,
    count: usize,
    bytes: usize,
    dir: String,
    policy: String,
}

fn args() -> Args {
    let mut raw = std::env::args().skip(1);
    let mode = raw.next().unwrap_or_else(|| usage());
    let mut args = Args {
        mode,
        server: String::new(),
        seconds: 10,
        connections: 32,
        count: 100,
        bytes: 2 * 1024 * 1024 - 256,
        dir: String::new(),
        policy: "skip".into(),
    };
    while let Some(flag) = raw.next() {
        let value = raw.next().unwrap_or_else(|| usage());
        let number = || value.parse::<u64>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--server" => args.server = value.clone(),
            "--seconds" => args.seconds = number(),
            "--connections" => args.connections = number() as usize,
            "--count" => args.count = number() as usize,
            "--bytes" => args.bytes = number() as usize,
            "--dir" => args.dir = value.clone(),
            "--policy" => args.policy = value.clone(),
            _ => usage(),
        }
    }
    if args.mode == "raw" || args.mode == "writer" {
        if args.dir.is_empty() {
            usage()
        }
    } else if args.server.is_empty() {
        usage()
    }
    args
}

fn main() {
    let args = args();
    match args.mode.as_str() {
        "starts" => starts(&args),
        "signals" => signals(&args),
        "schedules" => schedules(&args),
        "writer" => writer(&args),
        "raw" => {
            let path = Path::new(&args.dir).join("raw.sqlite");
            let rate = raw_sqlite(&path, Duration::from_secs(args.seconds));
            println!("{rate:.0}");
        }
        _ => usage(),
    }
}

/// User plus system CPU ticks of this process's thread `tid` (Linux).
fn thread_ticks(tid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The `writer` mode: starts through the group-commit writer, no HTTP.
fn writer(args: &Args) {
    use dwengine::store::writer::GroupCommitWriter;
    use dwengine::store::{StartRun, Store, StoreConfig};

    let dir = Path::new(&args.dir).join(format!("writer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the store directory");
    let store =
        Store::open(dir.join("runs.sqlite"), StoreConfig::default()).expect("open the store");
    let writer = Arc::new(GroupCommitWriter::start(store).expect("start the writer"));
    // The writer thread, by the name it is given.
    let mut tid = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while tid.is_none() && Instant::now() < deadline {
        for entry in std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
        {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            if comm.trim() == "dwstore-writer" {
                tid = entry.file_name().into_string().ok();
            }
        }
        if tid.is_none() {
            std::thread::yield_now();
        }
    }
    let ticks = || tid.as_deref().and_then(thread_ticks);
    let threads = args.connections.max(1);
    let each = args.count / threads;
    let (ticks0, commits0, started) = (ticks(), writer.commits(), Instant::now());
    let clients: Vec<_> = (0..threads)
        .map(|client| {
            let writer = writer.clone();
            std::thread::spawn(move || {
                for i in 0..each {
                    let start = StartRun {
                        workflow_id: format!("w-{client}-{i}"),
                        workflow_type: "Order".into(),
                        namespace: "bench".into(),
                        task_queue: "q".into(),
                        arguments: json!({"codec": "json", "blob": "[]"}),
                        ..StartRun::default()
                    };
                    let started = writer.write(move |s| {
                        if s.open_run(&start.namespace, &start.workflow_id)?.is_some() {
                            return Ok(None);
                        }
                        s.start_workflow_timed(start, None, None, None).map(Some)
                    });
                    assert!(
                        matches!(started, Ok(Some(_))),
                        "start {client}-{i}: {started:?}"
                    );
                }
            })
        })
        .collect();
    for client in clients {
        client.join().expect("a client thread panicked");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let starts = each * threads;
    let commits = writer.commits() - commits0;
    let hz = 100.0; // USER_HZ, what /proc reports ticks in on Linux
    let cpu = match (ticks0, ticks()) {
        (Some(a), Some(b)) => format!(
            "{:.4} ms",
            (b - a) as f64 * 1000.0 / hz / starts.max(1) as f64
        ),
        _ => "unknown".into(),
    };
    println!(
        "{starts} starts in {elapsed:.1} s ({:.0}/s), {commits} commits ({:.1} starts each); writer thread CPU per start {cpu}",
        starts as f64 / elapsed,
        starts as f64 / commits.max(1) as f64
    );
    drop(writer);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server child and its base URL; `time` wraps it in `/usr/bin/time -v`.
struct Server {
    child: Child,
    base: String,
}

fn spawn(server: &str, dir: &Path, time: bool) -> Server {
    let mut command = if time {
        let mut c = Command::new("/usr/bin/time");
        c.arg("-v").arg(server);
        c
    } else {
        Command::new(server)
    };
    let mut child = command
        .env("DW_SERVER_ID", "loadgen")
        .env("DW_AUTH", "none")
        .env("DW_BIND", "127.0.0.1:0")
        .env("DW_DATABASE_PATH", dir.join("runs.sqlite"))
        .env("DW_POLLING_CACHE_PATH", dir.join("polling"))
        .stdout(Stdio::piped())
        .stderr(if time { Stdio::piped() } else { Stdio::null() })
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {server}: {e}"));
    let base = wire::announced_base(&mut child);
    Server { child, base }
}

fn send(agent: &ureq::Agent, base: &str, request: &wire::Request) -> (u16, Value) {
    let url = format!("{base}{}", request.path);
    let ns = request.namespace.as_deref().unwrap_or("default");
    let result = match &request.body {
        Some(body) => agent
            .post(&url)
            .set("x-namespace", ns)
            .send_json(body.clone()),
        None => agent.get(&url).set("x-namespace", ns).call(),
    };
    match result {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn starts(args: &Args) {
    let dir = tempfile::tempdir().unwrap();
    let duration = Duration::from_secs(args.seconds);
    // The raw loop runs half before and half after the HTTP phase, so a
    // disk whose speed drifts (shared machines) weighs on both alike.
    let raw_path = dir.path().join("raw.sqlite");
    let raw_before = raw_sqlite(&raw_path, duration / 2);
    let mut server = spawn(&args.server, dir.path(), false);
    send(
        &ureq::AgentBuilder::new().build(),
        &server.base,
        &wire::namespace("bench"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..args.connections)
        .map(|c| {
            let (base, stop, errors) = (server.base.clone(), stop.clone(), errors.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().max_idle_connections(1).build();
                let mut latencies = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let request = wire::start("bench", &format!("c{c}-{n}"), "q", None);
                    let began = Instant::now();
                    let (status, _) = send(&agent, &base, &request);
                    if status == 201 {
                        latencies.push(began.elapsed());
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let mut latencies: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let _ = server.child.kill();
    let _ = server.child.wait();
    latencies.sort();
    let http_rate = latencies.len() as f64 / duration.as_secs_f64();

    let raw_after = raw_sqlite(&raw_path, duration / 2);
    let raw_rate = (raw_before + raw_after) / 2.0;
    println!(
        "{:<44} {:>10} {:>10} {:>10}",
        "measure", "per sec", "p50 ms", "p99 ms"
    );
    println!(
        "{:<44} {:>10.0} {:>10.2} {:>10.2}",
        format!("HTTP starts, {} connections", args.connections),
        http_rate,
        percentile(&latencies, 0.50).as_secs_f64() * 1000.0,
        percentile(&latencies, 0.99).as_secs_f64() * 1000.0,
    );
    println!(
        "{:<44} {:>10.0} {:>10} {:>10}",
        "raw SQLite, 1 thread, 2-row tx, sync=FULL", raw_rate, "-", "-"
    );
    println!(
        "ratio HTTP / raw: {:.2}; refused or failed starts: {}",
        http_rate / raw_rate,
        errors.load(Ordering::Relaxed)
    );
}

/// Commits per second of one thread doing one 2-row transaction per
/// commit, WAL, `synchronous = FULL`.
fn raw_sqlite(path: &Path, duration: Duration) -> f64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    let _: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, a TEXT, b INTEGER)")
        .unwrap();
    let began = Instant::now();
    let mut commits = 0u64;
    while began.elapsed() < duration {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        conn.execute("INSERT INTO t (a, b) VALUES ('run', ?1)", [commits as i64])
            .unwrap();
        conn.execute("INSERT INTO t (a, b) VALUES ('task', ?1)", [commits as i64])
            .unwrap();
        conn.execute_batch("COMMIT").unwrap();
        commits += 1;
    }
    commits as f64 / began.elapsed().as_secs_f64()
}

fn signals(args: &Args) {
    let dir = tempfile::tempdir().unwrap();
    let mut server = spawn(&args.server, dir.path(), true);
    let agent = ureq::AgentBuilder::new().build();
    let base = server.base.clone();
    send(&agent, &base, &wire::namespace("mem"));
    let (status, body) = send(&agent, &base, &wire::start("mem", "big", "q", None));
    assert_eq!(status, 201, "{body}");
    let blob = "x".repeat(args.bytes);
    let mut accepted = 0;
    let mut refused = Vec::new();
    for i in 0..args.count {
        let request = wire::signal("mem", "big", "blob", json!(blob), &format!("s{i}"));
        match send(&agent, &base, &request) {
            (202, _) => accepted += 1,
            (status, body) => refused.push(format!("{status} {}", body["reason"])),
        }
    }
    let mut pages = 0;
    for p in 0..4 {
        let poll = wire::poll("workflow", "mem", "q", "w", &format!("p{p}"), 0);
        let (_, answer) = send(&agent, &base, &poll);
        let Some(task) = wire::polled_task(&answer) else {
            println!("poll {p}: no task");
            continue;
        };
        let mut next = wire::next_history(task);
        pages += 1;
        while let Some(token) = next {
            let (_, page) = send(&agent, &base, &wire::history_page(task, &token));
            next = wire::next_history(&page);
            pages += 1;
        }
        send(&agent, &base, &poll); // the replay
        send(&agent, &base, &wire::fail_workflow(task));
    }
    stop_timed(&mut server);
    let mut report = String::new();
    server
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut report)
        .unwrap();
    let peak = report
        .lines()
        .find(|l| l.contains("Maximum resident set size"))
        .unwrap_or("Maximum resident set size: unknown");
    println!(
        "{} signals of {} bytes: {accepted} accepted, {} refused {:?}; 4 polls read {pages} history pages",
        args.count,
        args.bytes,
        refused.len(),
        refused.first()
    );
    println!("server {}", peak.trim());
}

/// Stops the server inside `/usr/bin/time` with SIGINT, so `time` reports.
fn stop_timed(server: &mut Server) {
    let time_pid = server.child.id();
    let children = std::fs::read_to_string(format!("/proc/{time_pid}/task/{time_pid}/children"))
        .unwrap_or_default();
    for pid in children.split_whitespace() {
        let _ = Command::new("kill").args(["-INT", pid]).status();
    }
    let _ = server.child.wait();
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn get(agent: &ureq::Agent, url: &str) -> Option<ureq::Response> {
    match agent.get(url).set("x-namespace", "bench").call() {
        Ok(r) => Some(r),
        Err(ureq::Error::Status(_, r)) => Some(r),
        Err(_) => None,
    }
}

/// Every schedule of the bench namespace, page by page.
fn list_schedules(agent: &ureq::Agent, base: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut url = format!("{base}/api/schedules?page_size=1000");
        if let Some(t) = &token {
            url.push_str(&format!("&next_page_token={t}"));
        }
        let Some(page) = get(agent, &url).and_then(|r| r.into_json::<Value>().ok()) else {
            return all;
        };
        all.extend(page["schedules"].as_array().cloned().unwrap_or_default());
        match page["next_page_token"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => return all,
        }
    }
}

fn schedules(args: &Args) {
    let dir = tempfile::tempdir().unwrap();
    let mut server = spawn(&args.server, dir.path(), false);
    let base = server.base.clone();
    send(
        &ureq::AgentBuilder::new().build(),
        &base,
        &wire::namespace("bench"),
    );
    let began = Instant::now();
    let makers: Vec<_> = (0..8)
        .map(|t| {
            let (base, count, policy) = (base.clone(), args.count, args.policy.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().build();
                for i in (t..count).step_by(8) {
                    let body = json!({
                        "schedule_id": format!("s{i:05}"),
                        "spec": { "intervals": [{ "every": "PT1S" }] },
                        "action": { "workflow_type": "tick", "task_queue": "q" },
                        "overlap_policy": policy,
                    });
                    let request = wire::Request {
                        path: "/api/schedules".into(),
                        namespace: Some("bench".into()),
                        body: Some(body),
                    };
                    let (status, answer) = send(&agent, &base, &request);
                    assert_eq!(status, 201, "{answer}");
                }
            })
        })
        .collect();
    for maker in makers {
        maker.join().unwrap();
    }
    println!(
        "{} one-second schedules ({}) created in {:.1} s",
        args.count,
        args.policy,
        began.elapsed().as_secs_f64()
    );
    let agent = ureq::AgentBuilder::new().build();
    let metric_url = format!("{base}/api/system/prometheus-metrics?namespace=bench");
    let start_ms = unix_ms();
    let created = list_schedules(&agent, &base);
    let counted = |list: &[Value]| -> i64 {
        list.iter()
            .map(|s| {
                s["fires_count"].as_i64().unwrap_or(0)
                    + s["info"]["skipped_trigger_count"].as_i64().unwrap_or(0)
                    + s["info"]["buffer_depth"].as_i64().unwrap_or(0)
            })
            .sum()
    };
    let counted_before = counted(&created);
    println!("{:>4} {:>12} {:>12}", "t s", "lag s", "metric s");
    let mut lags = Vec::new();
    for t in 1..=args.seconds {
        let target = began_at(start_ms, t);
        let wait = target - unix_ms();
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait as u64));
        }
        let listed = list_schedules(&agent, &base);
        let now = unix_ms();
        let earliest = listed
            .iter()
            .filter_map(|s| s["next_fire_at"].as_str())
            .filter_map(|at| at.parse::<jiff::Timestamp>().ok())
            .map(|at| at.as_millisecond())
            .min();
        let lag = earliest.map_or(0.0, |at| ((now - at).max(0)) as f64 / 1000.0);
        let metric = get(&agent, &metric_url)
            .and_then(|r| r.into_string().ok())
            .and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with("dw_schedule_lag_seconds "))
                    .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            })
            .map_or("-".to_owned(), |v| format!("{v:.3}"));
        println!("{t:>4} {lag:>12.3} {metric:>12}");
        lags.push(lag);
    }
    let elapsed_s = (unix_ms() - start_ms) as f64 / 1000.0;
    let fired = counted(&list_schedules(&agent, &base)) - counted_before;
    let _ = server.child.kill();
    let _ = server.child.wait();
    let last = lags.last().copied().unwrap_or(0.0);
    let max = lags.iter().copied().fold(0.0, f64::max);
    println!(
        "lag after {} s: {last:.1} s (max {max:.1} s); fires handled: {fired} of about {} due ({:.0}/s)",
        args.seconds,
        (args.count as f64 * elapsed_s) as u64,
        fired as f64 / elapsed_s
    );
}

fn began_at(start_ms: i64, seconds: u64) -> i64 {
    start_ms + seconds as i64 * 1000
}
