//! The console's own memory of the `dw_*` series: a bounded ring buffer
//! the operations page draws charts from.
//!
//! A sampler thread reads one namespace's Prometheus scrape (the same
//! engine call as `GET /api/system/prometheus-metrics`) every
//! [`UiSettings::sample_every`](crate::server::ui::UiSettings) and appends
//! each series' value. It keeps at most `chart_series_scan_limit` series
//! (the first ones seen; the rest are counted as suppressed, never kept)
//! and [`CHART_SAMPLES`] samples per series, dropping the oldest: its
//! memory is fixed however many series the scrape holds or how long the
//! node runs. Switching the charted namespace starts the ring afresh.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::server::ui::settings::CHART_SAMPLES;
use crate::server::Engine;

/// One charted series: its name with labels, and a value per sample time
/// (`None` where the scrape did not carry it).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// `dw_name{labels}` as the scrape spells it.
    pub name: String,
    /// Aligned with [`Snapshot::times_ms`].
    pub values: Vec<Option<f64>>,
}

/// What the charts draw.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// The namespace sampled.
    pub namespace: String,
    /// Sample times (Unix ms), oldest first.
    pub times_ms: Vec<i64>,
    /// The kept series.
    pub series: Vec<Series>,
    /// Series the last sample saw but the cap kept out.
    pub suppressed: usize,
    /// The cap.
    pub series_cap: usize,
}

#[derive(Debug, Default)]
struct Ring {
    namespace: String,
    times_ms: VecDeque<i64>,
    series: Vec<(String, VecDeque<Option<f64>>)>,
    suppressed: usize,
}

/// The ring buffer, shared by the sampler and the pages.
#[derive(Debug)]
pub struct Samples {
    ring: Mutex<Ring>,
    series_cap: usize,
}

impl Samples {
    /// An empty ring keeping at most `series_cap` series, sampling `namespace`.
    pub fn new(series_cap: usize, namespace: &str) -> Samples {
        Samples {
            ring: Mutex::new(Ring {
                namespace: namespace.to_owned(),
                ..Ring::default()
            }),
            series_cap,
        }
    }

    /// Samples `namespace` from now on (a new namespace empties the ring).
    pub fn watch(&self, namespace: &str) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.namespace != namespace {
            *ring = Ring {
                namespace: namespace.to_owned(),
                ..Ring::default()
            };
        }
    }

    /// The namespace being sampled.
    pub fn namespace(&self) -> String {
        self.ring
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .namespace
            .clone()
    }

    /// Appends one sample taken at `at_ms` from Prometheus exposition text.
    pub fn record(&self, at_ms: i64, exposition: &str) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let ring = &mut *ring;
        let earlier = ring.times_ms.len();
        ring.times_ms.push_back(at_ms);
        for (_, values) in &mut ring.series {
            values.push_back(None);
        }
        let mut suppressed = 0;
        for (name, value) in parse(exposition) {
            let kept = ring.series.len();
            match ring.series.iter_mut().find(|(n, _)| n == name) {
                Some((_, values)) => {
                    if let Some(last) = values.back_mut() {
                        *last = Some(value);
                    }
                }
                None if kept < self.series_cap => {
                    let mut values: VecDeque<Option<f64>> =
                        std::iter::repeat_n(None, earlier).collect();
                    values.push_back(Some(value));
                    ring.series.push((name.to_owned(), values));
                }
                None => suppressed += 1,
            }
        }
        ring.suppressed = suppressed;
        while ring.times_ms.len() > CHART_SAMPLES {
            ring.times_ms.pop_front();
            for (_, values) in &mut ring.series {
                values.pop_front();
            }
        }
    }

    /// A copy for drawing.
    pub fn snapshot(&self) -> Snapshot {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        Snapshot {
            namespace: ring.namespace.clone(),
            times_ms: ring.times_ms.iter().copied().collect(),
            series: ring
                .series
                .iter()
                .map(|(name, values)| Series {
                    name: name.clone(),
                    values: values.iter().copied().collect(),
                })
                .collect(),
            suppressed: ring.suppressed,
            series_cap: self.series_cap,
        }
    }
}

/// `(series, value)` of every `dw_*` sample line; histogram buckets are
/// left out (their sum and count are kept).
fn parse(exposition: &str) -> impl Iterator<Item = (&str, f64)> {
    exposition.lines().filter_map(|line| {
        let line = line.trim();
        if !line.starts_with("dw_") {
            return None;
        }
        let (name, value) = line.rsplit_once(' ')?;
        let metric = name.split('{').next().unwrap_or(name);
        if metric.ends_with("_bucket") {
            return None;
        }
        Some((name.trim(), value.parse().ok()?))
    })
}

/// Starts the sampler thread; it ends once the engine is gone.
pub fn start(engine: &Arc<Engine>, samples: Arc<Samples>, every: Duration) {
    let engine: Weak<Engine> = Arc::downgrade(engine);
    let spawned = std::thread::Builder::new()
        .name("dwserver-ui-sampler".into())
        .spawn(move || loop {
            {
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                let namespace = samples.namespace();
                // A failed scrape (a namespace that is gone, a refused
                // disclosure) is a gap in the charts, not an error page.
                if let Ok(scrape) = engine.prometheus_scrape(&namespace) {
                    samples.record(crate::unix_ms(), &scrape.text());
                }
            }
            std::thread::sleep(every);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "the console's chart sampler did not start; charts stay empty");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_a_fixed_number_of_series_and_samples() {
        // Declared metric names, so the gate sees no new metric here.
        let (a, b, c) = (
            "dw_workflow_runs_total",
            "dw_activity_executions_total",
            "dw_task_queue_runtime_state",
        );
        let bucket = "dw_workflow_run_latency_seconds";
        let text = format!(
            "# HELP x\n{a}{{q=\"1\"}} 1\n{b} 2\n{c} 3\n{bucket}_bucket{{le=\"1\"}} 9\nother 4\n"
        );
        let samples = Samples::new(2, "default");
        for i in 0..(CHART_SAMPLES as i64 + 10) {
            samples.record(i, &text);
        }
        samples.record(999, &format!("{b} 5\n"));
        let snap = samples.snapshot();
        assert_eq!(snap.times_ms.len(), CHART_SAMPLES);
        assert_eq!(snap.times_ms.last(), Some(&999));
        let names: Vec<_> = snap.series.iter().map(|s| s.name.clone()).collect();
        assert_eq!(names, [format!("{a}{{q=\"1\"}}"), b.to_owned()]);
        assert!(snap.series.iter().all(|s| s.values.len() == CHART_SAMPLES));
        assert_eq!(snap.series[0].values.last(), Some(&None));
        assert_eq!(snap.series[1].values.last(), Some(&Some(5.0)));
        assert_eq!(snap.suppressed, 0);
        samples.record(1000, &text);
        assert_eq!(samples.snapshot().suppressed, 1);
        samples.watch("other");
        assert!(samples.snapshot().times_ms.is_empty());
    }
}
