//! What a structural-limit check costs as a run fills up.
//!
//! The pending counters live on the run row, so scheduling the 1,999th
//! activity of a run should cost what the 1st does, and admitting a signal
//! should not slow down as signals pile up. Each activity measurement runs
//! one task that schedules `n - 1` activities untimed, times the `n`th, and
//! abandons the task so the store does not grow between iterations.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use dwengine::store::{Admission, Error, SignalRequest, StartRun, Store, StoreConfig};
use serde_json::json;

fn start(store: &mut Store, id: &str) -> dwengine::store::RunId {
    let start = StartRun {
        workflow_id: id.into(),
        workflow_type: "FanOut".into(),
        namespace: "default".into(),
        task_queue: "bench".into(),
        ..StartRun::default()
    };
    store.start_run(start).expect("start run")
}

fn schedule_nth_activity(c: &mut Criterion) {
    let mut store = Store::open_in_memory(StoreConfig::default()).expect("store");
    let run = start(&mut store, "fan-out");
    let mut group = c.benchmark_group("schedule activity");
    // The untimed set-up dwarfs the timed call, so keep the sample small.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_millis(5));
    for n in [1u64, 1000, 1999] {
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let result = store.execute_task(run, |task| {
                        for i in 1..n {
                            task.schedule_activity("item", &json!({ "i": i }))?;
                        }
                        let began = Instant::now();
                        black_box(task.schedule_activity("item", &json!({ "i": n }))?);
                        timed += began.elapsed();
                        Err(Error::Abandoned("benchmark".into()))
                    });
                    assert!(matches!(result, Err(Error::Abandoned(_))), "{result:?}");
                }
                timed
            });
        });
    }
    group.finish();
}

fn signal_admission(c: &mut Criterion) {
    let mut group = c.benchmark_group("signal admission");
    group.throughput(Throughput::Elements(1));
    for pending in [0u64, 4999] {
        let mut store = Store::open_in_memory(StoreConfig::default()).expect("store");
        let run = start(&mut store, "signalled");
        for i in 0..pending {
            let request = SignalRequest {
                name: format!("fill-{i}"),
                ..SignalRequest::default()
            };
            store.signal(run, request).expect("fill");
        }
        group.bench_with_input(BenchmarkId::new("pending", pending), &pending, |b, _| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for i in 0..iters {
                    let request = SignalRequest {
                        name: "process-item".into(),
                        payload: json!({ "item": i }),
                        request_id: None,
                    };
                    let began = Instant::now();
                    let admission = store.signal(run, request).expect("signal");
                    timed += began.elapsed();
                    // Processing it (untimed) keeps the pending count where it was.
                    match admission {
                        Admission::Accepted { id, .. } => {
                            store.process_signal(id).expect("process")
                        }
                        Admission::Rejected(r) => panic!("rejected below the limit: {r:?}"),
                    }
                }
                timed
            });
        });
    }
    group.finish();
}

criterion_group!(benches, schedule_nth_activity, signal_admission);
criterion_main!(benches);
