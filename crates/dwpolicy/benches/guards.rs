//! Hot-path costs of the run-time guards: one disclosure check against a
//! 50-metric policy (goal: under 100 ns) and one series-limiter admission.
//! Run with `cargo bench -p dwpolicy`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dwpolicy::series::{SeriesLimit, PROMETHEUS_WORKFLOW_SERIES};
use dwpolicy::MetricGuard;

fn policy_with(metrics: usize) -> String {
    let mut text = String::from("schema_version = 1\n");
    for i in 0..metrics {
        text.push_str(&format!(
            r#"
[metrics.dw_bench_metric_{i}_total]
owner = "dwengine::metrics::Bench{i}"
surface = "GET /api/system/prometheus-metrics"
dimensions = {{ namespace = "request_scope_not_label", task_queue = "bounded_series", workflow_type = "bounded_series" }}
cardinality = "Capped by a series limit."
selection = "Label sets ascending."
suppression = "Suppressed series are counted."
"#
        ));
    }
    text
}

#[derive(Clone, Copy, serde::Serialize)]
struct Details {
    limit: u32,
    suppressed: u32,
}

fn disclosure(c: &mut Criterion) {
    let guard = MetricGuard::from_toml_str(&policy_with(50)).expect("bench policy is reviewed");
    assert_eq!(guard.len(), 50);
    let details = Details {
        limit: 100,
        suppressed: 3,
    };
    c.bench_function("disclosure/check_50_metric_policy", |b| {
        b.iter(|| {
            let disclosure = guard
                .disclose(
                    black_box("dw_bench_metric_37_total"),
                    [
                        ("task_queue", black_box(details)),
                        ("workflow_type", black_box(details)),
                    ],
                )
                .expect("declared");
            black_box(disclosure.dimensions.len())
        })
    });
    c.bench_function("disclosure/undeclared_metric", |b| {
        b.iter(|| {
            guard
                .disclose::<Details>(black_box("dw_bench_metric_99_total"), [])
                .is_err()
        })
    });
}

fn limiter(c: &mut Criterion) {
    // A deterministic pseudo-random stream, so runs are comparable.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let items: Vec<(String, String, u64)> = (0..4096)
        .map(|i| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (
                format!("queue-{}", i % 64),
                format!("Workflow{i}"),
                state >> 40,
            )
        })
        .collect();
    let limit = PROMETHEUS_WORKFLOW_SERIES.default_limit();
    c.bench_function("series/limiter_admit_limit_100", |b| {
        // Steady state: the limiter is full, so each admission compares
        // against the weakest kept series and sometimes displaces it.
        let mut limiter = limit.limiter();
        let mut i = 0usize;
        b.iter(|| {
            let (queue, workflow, value) = &items[i & 4095];
            i = i.wrapping_add(1);
            limiter.admit((queue.as_str(), workflow.as_str()), black_box(*value))
        })
    });
    let mut group = c.benchmark_group("series");
    // A fresh limiter per pass: includes filling it and every displacement.
    group.throughput(Throughput::Elements(items.len() as u64));
    group.bench_function("limiter_fresh_4096_admissions_limit_100", |b| {
        b.iter(|| {
            let mut limiter = limit.limiter();
            for (queue, workflow, value) in &items {
                limiter.admit((queue.as_str(), workflow.as_str()), black_box(*value));
            }
            limiter.finish().report
        })
    });
    group.finish();
    c.bench_function("series/discover_100_of_4096", |b| {
        b.iter(|| {
            SeriesLimit::new(100)
                .discover(
                    black_box(&items)
                        .iter()
                        .map(|(q, w, _)| (q.as_str(), w.as_str())),
                )
                .report
        })
    });
}

criterion_group! {
    name = guards;
    // Short runs: the shared build machine has two cores.
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    targets = disclosure, limiter
}
criterion_main!(guards);
