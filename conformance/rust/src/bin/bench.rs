//! Throughput of dwserver under the published Rust SDK, the counterpart of
//! `conformance/bench.py` (both run by `conformance/bench`; the Rust SDK's
//! own script, with separate worker processes and two workflow shapes, is
//! `docs/bench-sdk-throughput.sh`). A client keeps `--concurrency`
//! workflows in flight for `--seconds` (the next starts as soon as one's
//! result is read) while SDK workers serve the queue.
//!
//! Shapes (`--shape`):
//! - `activity` (default): the workflow runs one activity and completes.
//! - `timer-signal`: the workflow sleeps `--timer-seconds` (a durable
//!   timer; the SDK rounds timers up to whole seconds), then waits for the
//!   signal `go`, which the client sends right after the start (so the
//!   server buffers it until the wait opens), and completes with it.
//!
//! Roles (`--role`):
//! - `all` (default): one process holds the worker and the client loops.
//! - `worker`: only the worker; runs until SIGTERM or SIGINT.
//! - `starter`: only the client loops; `--worker-pids a,b` names the
//!   worker processes whose CPU it counts beside its own.
//!
//! Before the window opens one workflow runs to completion (a worker has
//! registered and polls). Over the window it counts completed workflows, the
//! latency of each `start_workflow` round trip, and the CPU seconds (user +
//! system, from `/proc/<pid>/stat`) of the SDK processes (this one and the
//! `--worker-pids`) and, with `--server-pid`, of dwserver. Prints one JSON
//! line with the same keys as `bench.py`.
//!
//! A worker runs `--worker-slots` workflow tasks and as many activity tasks
//! at once (default 16). The Rust SDK holds one long poll per slot, and 16
//! per kind is dwserver's default per-namespace long-poll cap
//! (`DW_LONG_POLL_MAX_WAITS_PER_NAMESPACE`): more slots only meet its
//! backpressure while the queue is empty.
//!
//! Usage: `bench URL [--role all|worker|starter] [--shape activity|timer-signal]
//! [--concurrency 64] [--seconds 30] [--poll-interval-ms 50] [--worker-slots 16]
//! [--timer-seconds 1] [--queue rust-bench] [--server-pid PID] [--worker-pids a,b]`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durable_workflow::{json, Client, Uuid, Value, Worker, WorkflowResultOptions};

const ACTIVITY_WORKFLOW: &str = "rust.bench";
const TIMER_SIGNAL_WORKFLOW: &str = "rust.bench.timer_signal";

/// A process's CPU seconds (user + system) from `/proc/<pid>/stat`. A
/// process that has exited (a worker that stopped on an error) ends the
/// run with that said, not a panic: the figures would be wrong without it.
fn cpu_seconds(pid: &str) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        eprintln!(
            "bench: cannot read {path} ({error}): process {pid} has exited \
             (a worker that stopped says why on its stderr)"
        );
        std::process::exit(1)
    });
    // The fields after the command name (which may hold spaces) follow ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| -> f64 {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("{path}: no field {}", i + 3))
    };
    // utime and stime are fields 14 and 15 of stat(5); after ')' they are
    // the 12th and 13th. USER_HZ is 100 on every Linux ABI.
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    All,
    Worker,
    Starter,
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Activity,
    TimerSignal,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Activity => "activity",
            Shape::TimerSignal => "timer-signal",
        }
    }

    fn workflow_type(self) -> &'static str {
        match self {
            Shape::Activity => ACTIVITY_WORKFLOW,
            Shape::TimerSignal => TIMER_SIGNAL_WORKFLOW,
        }
    }
}

struct Options {
    url: String,
    role: Role,
    shape: Shape,
    concurrency: usize,
    seconds: f64,
    poll_ms: u64,
    slots: usize,
    timer_seconds: u64,
    queue: String,
    server_pid: Option<String>,
    worker_pids: Vec<String>,
}

const USAGE: &str = "usage: bench URL [--role all|worker|starter] [--shape activity|timer-signal] \
[--concurrency N] [--seconds S] [--poll-interval-ms MS] [--worker-slots N] [--timer-seconds S] \
[--queue NAME] [--server-pid PID] [--worker-pids PID,PID]";

fn bad(what: String) -> ! {
    eprintln!("{what}\n{USAGE}");
    std::process::exit(2)
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| bad(format!("{flag}: {value:?} is not a valid number")))
}

fn options() -> Options {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| bad("the server URL is missing".into()));
    let mut o = Options {
        url,
        role: Role::All,
        shape: Shape::Activity,
        concurrency: 64,
        seconds: 30.0,
        poll_ms: 50,
        slots: 16,
        timer_seconds: 1,
        queue: "rust-bench".into(),
        server_pid: None,
        worker_pids: Vec::new(),
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| bad(format!("{flag} needs a value")));
        match flag.as_str() {
            "--role" => {
                o.role = match value.as_str() {
                    "all" => Role::All,
                    "worker" => Role::Worker,
                    "starter" => Role::Starter,
                    _ => bad(format!("--role: {value:?} is not all, worker or starter")),
                }
            }
            "--shape" => {
                o.shape = match value.as_str() {
                    "activity" => Shape::Activity,
                    "timer-signal" => Shape::TimerSignal,
                    _ => bad(format!(
                        "--shape: {value:?} is not activity or timer-signal"
                    )),
                }
            }
            "--concurrency" => o.concurrency = number(&flag, &value),
            "--seconds" => o.seconds = number(&flag, &value),
            "--poll-interval-ms" => o.poll_ms = number(&flag, &value),
            "--worker-slots" => o.slots = number(&flag, &value),
            "--timer-seconds" => o.timer_seconds = number(&flag, &value),
            "--queue" => o.queue = value,
            "--server-pid" => o.server_pid = Some(value),
            "--worker-pids" => {
                o.worker_pids = value
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            other => bad(format!("unknown flag {other}")),
        }
    }
    if o.concurrency == 0 || o.slots == 0 || o.seconds.is_nan() || o.seconds <= 0.0 {
        bad("--concurrency, --worker-slots and --seconds must be above zero".into());
    }
    o
}

/// A worker of the queue that runs both shapes' workflows.
fn worker(client: &Client, o: &Options) -> Worker {
    let mut worker = Worker::new(client.clone(), &o.queue)
        .worker_id(format!("rust-bench-{}", Uuid::new_v4()))
        .poll_timeout(Duration::from_secs(5))
        .max_concurrent_workflow_tasks(o.slots)
        .max_concurrent_activity_tasks(o.slots);
    worker.register_activity("bench.echo", |_ctx, args: Value| async move { Ok(args) });
    worker.register_workflow(ACTIVITY_WORKFLOW, |ctx, input: Value| async move {
        ctx.activity("bench.echo", json!([input[0].clone()])).await
    });
    let timer = Duration::from_secs(o.timer_seconds);
    worker.register_workflow(TIMER_SIGNAL_WORKFLOW, move |ctx, input: Value| async move {
        ctx.sleep(timer).await?;
        let go = ctx.wait_signal("go").await?;
        Ok(json!([input[0].clone(), go]))
    });
    worker
        .declare_workflow_signals(TIMER_SIGNAL_WORKFLOW, &["go"])
        .expect("the signal declaration");
    worker
}

/// The SDK processes' CPU seconds: this one's and the named workers'.
fn sdk_cpu(worker_pids: &[String]) -> f64 {
    cpu_seconds("self") + worker_pids.iter().map(|p| cpu_seconds(p)).sum::<f64>()
}

/// Starts one workflow of `shape` (and signals it), then reads its result.
async fn one_workflow(
    client: &Client,
    o: &Options,
    id: &str,
    input: &str,
    result_options: WorkflowResultOptions,
    starts: Option<&Mutex<Vec<f64>>>,
) -> Result<Value, String> {
    let started = Instant::now();
    let handle = client
        .start_workflow(o.shape.workflow_type(), &o.queue, id, json!([input]))
        .await
        .map_err(|e| format!("start {id}: {e} ({e:?})"))?;
    if let Some(starts) = starts {
        starts.lock().unwrap().push(started.elapsed().as_secs_f64());
    }
    if o.shape == Shape::TimerSignal {
        handle
            .signal("go", json!([input]))
            .await
            .map_err(|e| format!("signal {id}: {e} ({e:?})"))?;
    }
    handle
        .result(result_options)
        .await
        .map_err(|e| format!("result {id}: {e} ({e:?})"))
}

#[tokio::main]
async fn main() {
    let o = Arc::new(options());
    let client = Client::builder(o.url.clone())
        .namespace("default")
        .build()
        .unwrap_or_else(|e| bad(format!("cannot build the SDK client for {}: {e}", o.url)));

    if o.role == Role::Worker {
        let worker = worker(&client, &o);
        let stop = async {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        if let Err(e) = worker.run_until(stop).await {
            eprintln!("the worker stopped: {e}");
            std::process::exit(1);
        }
        return;
    }

    let result_options = WorkflowResultOptions {
        poll_interval: Duration::from_millis(o.poll_ms),
        timeout: Duration::from_secs(120),
    };
    let completed = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let starts = Arc::new(Mutex::new(Vec::<f64>::new()));
    let window = Arc::new(Mutex::new(None::<Window>));
    let in_process = (o.role == Role::All).then(|| worker(&client, &o));
    let drive = {
        let (completed, failed, starts, window, o) = (
            completed.clone(),
            failed.clone(),
            starts.clone(),
            window.clone(),
            o.clone(),
        );
        async move {
            // Warm-up: one workflow end to end, outside the window.
            let warm_id = format!("rust-bench-warm-{}", Uuid::new_v4());
            one_workflow(&client, &o, &warm_id, "warm", result_options, None)
                .await
                .unwrap_or_else(|e| {
                    // Most often no dwserver answers at the URL: say so.
                    eprintln!("bench: the warm-up workflow failed: {e}");
                    std::process::exit(1)
                });

            let began = Instant::now();
            let deadline = began + Duration::from_secs_f64(o.seconds);
            let cpu_before = (
                sdk_cpu(&o.worker_pids),
                o.server_pid.as_deref().map(cpu_seconds),
            );
            let loops = (0..o.concurrency).map(|n| {
                let (client, completed, failed, starts, o) = (
                    client.clone(),
                    completed.clone(),
                    failed.clone(),
                    starts.clone(),
                    o.clone(),
                );
                tokio::spawn(async move {
                    let mut i = 0;
                    while Instant::now() < deadline {
                        i += 1;
                        let id = format!("rust-bench-{n}-{i}-{}", Uuid::new_v4());
                        match one_workflow(&client, &o, &id, "bench", result_options, Some(&starts))
                            .await
                        {
                            Ok(_) => completed.fetch_add(1, Ordering::Relaxed),
                            Err(error) => {
                                eprintln!("{error}");
                                failed.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                })
            });
            for task in loops.collect::<Vec<_>>() {
                task.await.expect("a client loop ran to its end");
            }
            *window.lock().unwrap() = Some(Window {
                elapsed: began.elapsed().as_secs_f64(),
                sdk_cpu: sdk_cpu(&o.worker_pids) - cpu_before.0,
                server_cpu: o
                    .server_pid
                    .as_deref()
                    .zip(cpu_before.1)
                    .map(|(pid, before)| cpu_seconds(pid) - before),
            });
        }
    };
    match in_process {
        Some(worker) => worker.run_until(drive).await.unwrap_or_else(|e| {
            eprintln!("bench: the worker stopped: {e}");
            std::process::exit(1)
        }),
        None => drive.await,
    }

    let Window {
        elapsed,
        sdk_cpu,
        server_cpu,
    } = window.lock().unwrap().take().expect("the window closed");
    let mut starts = starts.lock().unwrap().clone();
    starts.sort_by(f64::total_cmp);
    let completed = completed.load(Ordering::Relaxed);
    let failed = failed.load(Ordering::Relaxed);
    let per_workflow_ms = |cpu: f64| {
        if completed == 0 {
            f64::NAN
        } else {
            round2(cpu * 1000.0 / completed as f64)
        }
    };
    println!(
        "{}",
        json!({
            "sdk": "rust",
            "shape": o.shape.name(),
            "concurrency": o.concurrency,
            "poll_interval_ms": o.poll_ms,
            "worker_slots": o.slots,
            "seconds": round2(elapsed),
            "completed": completed,
            "failed": failed,
            "workflows_completed_per_second": round2(completed as f64 / elapsed),
            "start_latency_ms_p50": round2(percentile(&starts, 0.50) * 1000.0),
            "start_latency_ms_p99": round2(percentile(&starts, 0.99) * 1000.0),
            "sdk_processes": 1 + o.worker_pids.len(),
            "sdk_cpu_seconds": round2(sdk_cpu),
            "sdk_cpu_ms_per_workflow": per_workflow_ms(sdk_cpu),
            "server_cpu_seconds": server_cpu.map(round2),
            "server_cpu_ms_per_workflow": server_cpu.map(per_workflow_ms),
        })
    );
    if failed > 0 || completed == 0 {
        std::process::exit(1);
    }
}

/// What the measured window took: wall seconds and CPU seconds.
struct Window {
    elapsed: f64,
    sdk_cpu: f64,
    server_cpu: Option<f64>,
}
