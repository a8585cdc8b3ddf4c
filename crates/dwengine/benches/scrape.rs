//! What a Prometheus scrape costs as a namespace's runs grow.
//!
//! The scrape reads per-series aggregate rows that the store keeps in each
//! run's and task's own transaction, at most `limit + 1` per surface, so its
//! cost should depend on the series cap, not on the number of runs. The
//! bench builds stores of 10,000, 100,000 and 1,000,000 runs spread over
//! 5,000 task queues (each run started for remote workers, so every queue
//! also holds ready workflow tasks) directly through the store, then times
//! the whole scrape: the three bounded reads and the rendering through
//! dwpolicy's disclosure and series limiter at the default caps (100).
//!
//! Run: `cargo bench -p dwengine --bench scrape` (building the 1,000,000-run
//! store takes a minute or two; `DW_BENCH_SCRAPE_MAX_RUNS` lowers the top size).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use dwengine::metrics::activities::ActivityExecutionMetrics;
use dwengine::metrics::task_queues::TaskQueueRuntimeMetrics;
use dwengine::metrics::WorkflowRunMetrics;
use dwengine::store::{StartRun, Store, StoreConfig};

const QUEUES: u64 = 5_000;
const NAMESPACE: &str = "bench";

fn populate(runs: u64) -> Store {
    let store = Store::open_in_memory(StoreConfig::default()).expect("store");
    let began = Instant::now();
    for i in 0..runs {
        let start = StartRun {
            workflow_id: format!("wf-{i}"),
            workflow_type: "Order".into(),
            namespace: NAMESPACE.into(),
            task_queue: format!("queue-{:05}", i % QUEUES),
            ..StartRun::default()
        };
        store.start_workflow(start, None).expect("start");
    }
    eprintln!(
        "built {runs} runs in {QUEUES} queues in {:.1?}",
        began.elapsed()
    );
    store
}

fn scrape(store: &Store) -> usize {
    let guard = dwengine::policy::guard().expect("embedded policy");
    let (runs, activities, queues) = (
        WorkflowRunMetrics::new(None),
        ActivityExecutionMetrics::new(None),
        TaskQueueRuntimeMetrics::new(None),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let run_series = store
        .workflow_run_series(NAMESPACE, runs.series_limit())
        .expect("runs");
    let activity_series = store
        .activity_execution_series(NAMESPACE, activities.series_limit())
        .expect("activities");
    let queue_states = store
        .task_queue_states(NAMESPACE, queues.series_limit(), now)
        .expect("queues");
    let text = [
        runs.render(guard, run_series).expect("disclosed").text,
        activities
            .render(guard, activity_series)
            .expect("disclosed")
            .text,
        queues.render(guard, queue_states).expect("disclosed").text,
    ]
    .concat();
    text.len()
}

fn scrape_cost(c: &mut Criterion) {
    let max = std::env::var("DW_BENCH_SCRAPE_MAX_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000u64);
    let mut group = c.benchmark_group("prometheus scrape, 5000 queues");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(30)
        .measurement_time(Duration::from_secs(3));
    for runs in [10_000u64, 100_000, 1_000_000]
        .into_iter()
        .filter(|n| *n <= max)
    {
        let store = populate(runs);
        let bytes = scrape(&store);
        assert!(bytes > 0);
        group.bench_with_input(BenchmarkId::new("runs", runs), &store, |b, store| {
            b.iter(|| scrape(store))
        });
    }
    group.finish();
}

criterion_group!(benches, scrape_cost);
criterion_main!(benches);
