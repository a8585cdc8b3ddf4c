//! Throughput of dwserver under the published Rust SDK, the counterpart of
//! `conformance/bench.py` (both run by `conformance/bench`): one SDK worker
//! serves a queue while a client in the same process keeps `--concurrency`
//! workflows in flight for `--seconds` (each starts, runs one activity and
//! completes; the next starts as soon as one's result is read).
//!
//! Before the window opens one workflow runs to completion (the worker has
//! registered and polls). Over the window it counts completed workflows, the
//! latency of each `start_workflow` round trip, and the CPU seconds (user +
//! system, from `/proc/<pid>/stat`) this process and, with `--server-pid`,
//! dwserver used. Prints one JSON line with the same keys as `bench.py`.
//!
//! The worker runs `--worker-slots` workflow tasks and as many activity
//! tasks at once (default 16). The Rust SDK holds one long poll per slot,
//! and 16 per kind is dwserver's default per-namespace long-poll cap
//! (`DW_LONG_POLL_MAX_WAITS_PER_NAMESPACE`): more slots only meet its
//! backpressure while the queue is empty.
//!
//! Usage: `bench URL [--concurrency 64] [--seconds 30] [--poll-interval-ms 50]
//! [--worker-slots 16] [--server-pid PID]`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durable_workflow::{json, Client, Uuid, Value, Worker, WorkflowResultOptions};

const QUEUE: &str = "rust-bench";

/// A process's CPU seconds (user + system) from `/proc/<pid>/stat`.
fn cpu_seconds(pid: &str) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {path}: {error}"));
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

#[tokio::main]
async fn main() {
    let usage = "usage: bench URL [--concurrency N] [--seconds S] [--poll-interval-ms MS] [--worker-slots N] [--server-pid PID]";
    let mut args = std::env::args().skip(1);
    let url = args.next().expect(usage);
    let (mut concurrency, mut seconds, mut poll_ms, mut slots) = (64usize, 30.0f64, 50u64, 16usize);
    let mut server_pid: Option<String> = None;
    while let Some(flag) = args.next() {
        let value = args.next().expect(usage);
        match flag.as_str() {
            "--concurrency" => concurrency = value.parse().expect(usage),
            "--seconds" => seconds = value.parse().expect(usage),
            "--poll-interval-ms" => poll_ms = value.parse().expect(usage),
            "--worker-slots" => slots = value.parse().expect(usage),
            "--server-pid" => server_pid = Some(value),
            other => panic!("unknown flag {other}; {usage}"),
        }
    }
    let client = Client::builder(url.clone())
        .namespace("default")
        .build()
        .expect("client");
    let mut worker = Worker::new(client.clone(), QUEUE)
        .worker_id(format!("rust-bench-{}", Uuid::new_v4()))
        .poll_timeout(Duration::from_secs(5))
        .max_concurrent_workflow_tasks(slots)
        .max_concurrent_activity_tasks(slots);
    worker.register_activity("bench.echo", |_ctx, args: Value| async move { Ok(args) });
    worker.register_workflow("rust.bench", |ctx, input: Value| async move {
        ctx.activity("bench.echo", json!([input[0].clone()])).await
    });
    let result_options = WorkflowResultOptions {
        poll_interval: Duration::from_millis(poll_ms),
        timeout: Duration::from_secs(120),
    };

    let completed = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let starts = Arc::new(Mutex::new(Vec::<f64>::new()));
    let window = Arc::new(Mutex::new(None::<Window>));
    let drive = {
        let (completed, failed, starts, window) = (
            completed.clone(),
            failed.clone(),
            starts.clone(),
            window.clone(),
        );
        let server_pid = server_pid.clone();
        async move {
            // Warm-up: one workflow end to end, outside the window.
            let warm = client
                .start_workflow(
                    "rust.bench",
                    QUEUE,
                    &format!("rust-bench-warm-{}", Uuid::new_v4()),
                    json!(["warm"]),
                )
                .await
                .expect("the warm-up workflow started");
            warm.result(result_options)
                .await
                .expect("the warm-up workflow completed");

            let began = Instant::now();
            let deadline = began + Duration::from_secs_f64(seconds);
            let cpu_before = (cpu_seconds("self"), server_pid.as_deref().map(cpu_seconds));
            let loops = (0..concurrency).map(|n| {
                let (client, completed, failed, starts) = (
                    client.clone(),
                    completed.clone(),
                    failed.clone(),
                    starts.clone(),
                );
                tokio::spawn(async move {
                    let mut i = 0;
                    while Instant::now() < deadline {
                        i += 1;
                        let id = format!("rust-bench-{n}-{i}-{}", Uuid::new_v4());
                        let started = Instant::now();
                        let handle = match client
                            .start_workflow("rust.bench", QUEUE, &id, json!(["bench"]))
                            .await
                        {
                            Ok(handle) => handle,
                            Err(error) => {
                                eprintln!("start {id}: {error}");
                                failed.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        };
                        starts.lock().unwrap().push(started.elapsed().as_secs_f64());
                        match handle.result(result_options).await {
                            Ok(_) => completed.fetch_add(1, Ordering::Relaxed),
                            Err(error) => {
                                eprintln!("result {id}: {error}");
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
                sdk_cpu: cpu_seconds("self") - cpu_before.0,
                server_cpu: server_pid
                    .as_deref()
                    .zip(cpu_before.1)
                    .map(|(pid, before)| cpu_seconds(pid) - before),
            });
        }
    };
    worker.run_until(drive).await.expect("the worker ran");

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
            "concurrency": concurrency,
            "poll_interval_ms": poll_ms,
            "worker_slots": slots,
            "seconds": round2(elapsed),
            "completed": completed,
            "failed": failed,
            "workflows_completed_per_second": round2(completed as f64 / elapsed),
            "start_latency_ms_p50": round2(percentile(&starts, 0.50) * 1000.0),
            "start_latency_ms_p99": round2(percentile(&starts, 0.99) * 1000.0),
            "sdk_processes": 1,
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
