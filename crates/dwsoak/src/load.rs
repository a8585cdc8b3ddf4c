//! The load: workflow starts, signals, polls and completions spread over
//! many namespaces, task queues and poll request ids.
//!
//! Each thread plays client and worker at once: it starts a workflow on a
//! (namespace, queue) it picks, signals it, then polls that queue under a
//! fresh poll request id and completes whatever task it leases. Every poll
//! id is new, so the poll-request cache families see the churn a fleet of
//! workers creates; every namespace and queue is touched, so the
//! per-namespace families see theirs. What bounds them is the policy's
//! business; the harness only has to make them grow if they can.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::{Api, Reply};

/// Totals shared by the load threads, the sampler and `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    requests: AtomicU64,
    errors: AtomicU64,
    latency_micros: AtomicU64,
    by_status: Mutex<BTreeMap<String, u64>>,
    /// Workflows the server accepted.
    pub workflows_started: AtomicU64,
    /// Signals the server accepted.
    pub signals_sent: AtomicU64,
    /// Workflow tasks completed (each ends its run).
    pub workflows_completed: AtomicU64,
}

/// A copy of the totals at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Requests sent.
    pub requests: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Mean latency in seconds.
    pub latency_average: f64,
    /// By `status` label.
    pub by_status: BTreeMap<String, u64>,
    /// Workflows started.
    pub workflows_started: u64,
    /// Signals accepted.
    pub signals_sent: u64,
    /// Runs completed.
    pub workflows_completed: u64,
}

impl Stats {
    /// Counts one reply.
    pub fn record(&self, reply: &Reply) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if !reply.ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.latency_micros
            .fetch_add(reply.latency.as_micros() as u64, Ordering::Relaxed);
        if let Ok(mut map) = self.by_status.lock() {
            *map.entry(reply.status.clone()).or_default() += 1;
        }
    }

    /// The totals now.
    pub fn totals(&self) -> Totals {
        let requests = self.requests.load(Ordering::Relaxed);
        let micros = self.latency_micros.load(Ordering::Relaxed);
        Totals {
            requests,
            errors: self.errors.load(Ordering::Relaxed),
            latency_average: if requests == 0 {
                0.0
            } else {
                micros as f64 / requests as f64 / 1e6
            },
            by_status: self.by_status.lock().map(|m| m.clone()).unwrap_or_default(),
            workflows_started: self.workflows_started.load(Ordering::Relaxed),
            signals_sent: self.signals_sent.load(Ordering::Relaxed),
            workflows_completed: self.workflows_completed.load(Ordering::Relaxed),
        }
    }
}

/// The load mix.
#[derive(Debug, Clone)]
pub struct Mix {
    /// Namespaces `soak-ns-0..n`.
    pub namespaces: u32,
    /// Queues `q-0..n` in each.
    pub task_queues: u32,
    /// Threads.
    pub workers: u32,
    /// Starts per second over all threads (0: unpaced).
    pub starts_per_second: f64,
    /// Signals per started workflow.
    pub signals_per_workflow: u32,
}

/// The namespace names of a mix.
pub fn namespaces(count: u32) -> Vec<String> {
    (0..count).map(|i| format!("soak-ns-{i}")).collect()
}

/// Runs the load until `stop` is set; returns when every thread ended.
pub fn run(api: &Api, mix: &Mix, stats: &Arc<Stats>, stop: &Arc<AtomicBool>) {
    let names = namespaces(mix.namespaces);
    std::thread::scope(|scope| {
        for worker in 0..mix.workers {
            let (api, stats, stop, names) =
                (api.clone(), Arc::clone(stats), Arc::clone(stop), &names);
            scope.spawn(move || worker_loop(worker, &api, mix, names, &stats, &stop));
        }
    });
}

fn worker_loop(
    worker: u32,
    api: &Api,
    mix: &Mix,
    names: &[String],
    stats: &Stats,
    stop: &AtomicBool,
) {
    let worker_id = format!("soak-worker-{worker}");
    let pace = (mix.starts_per_second > 0.0)
        .then(|| Duration::from_secs_f64(f64::from(mix.workers) / mix.starts_per_second));
    let mut rng = XorShift(
        0x9E37_79B9_7F4A_7C15 ^ (u64::from(worker) + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9),
    );
    let mut registered = std::collections::BTreeSet::new();
    let mut next = Instant::now();
    let mut sequence: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let namespace = &names[rng.below(names.len() as u64) as usize];
        let queue = format!("q-{}", rng.below(u64::from(mix.task_queues)));
        if registered.insert((namespace.clone(), queue.clone())) {
            stats.record(&api.register_worker(namespace, &worker_id, &queue));
        }
        sequence += 1;
        let workflow_id = format!("soak-{worker}-{sequence}");
        let started = api.start_workflow(namespace, &workflow_id, "SoakWorkflow", &queue);
        stats.record(&started);
        if started.ok {
            stats.workflows_started.fetch_add(1, Ordering::Relaxed);
            for _ in 0..mix.signals_per_workflow {
                let signal = api.signal(namespace, &workflow_id, "advance");
                stats.record(&signal);
                if signal.ok {
                    stats.signals_sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let poll_request_id = format!("{worker_id}-poll-{sequence}");
        let poll = api.poll_workflow_task(
            namespace,
            &queue,
            &worker_id,
            &poll_request_id,
            Duration::from_millis(200),
        );
        stats.record(&poll);
        if let Some(task) = Api::leased_task(&poll) {
            let done = api.complete_workflow_task(namespace, task);
            stats.record(&done);
            if done.ok {
                stats.workflows_completed.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(pace) = pace {
            next += pace;
            let now = Instant::now();
            if next > now {
                sleep_unless_stopped(next - now, stop);
            } else {
                next = now;
            }
        }
    }
}

fn sleep_unless_stopped(total: Duration, stop: &AtomicBool) {
    let until = Instant::now() + total;
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// A small deterministic generator: the mix must be reproducible, not secret.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}
