//! The latency histogram both Prometheus latency metrics share.
//!
//! Buckets are fixed (0.1 s to 15 min, as the reference server reports
//! them) and kept cumulative in the store's per-series aggregate rows, so a
//! scrape copies ten counters per reported series instead of reading the
//! runs or activities behind them.

use serde_json::{json, Map, Value};

/// Upper bounds of the latency buckets, in seconds.
pub const LATENCY_BUCKETS_SECONDS: [f64; 10] =
    [0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0];

/// The `le` label of each bucket, as Prometheus writes it.
const BUCKET_LABELS: [&str; 10] = [
    "0.1", "0.5", "1", "2.5", "5", "10", "30", "60", "300", "900",
];

/// One series' latency observations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Latency {
    /// Observations.
    pub count: u64,
    /// Their sum in milliseconds.
    pub sum_ms: u64,
    /// Cumulative counts: `buckets[i]` observations took at most
    /// `LATENCY_BUCKETS_SECONDS[i]`.
    pub buckets: [u64; 10],
}

impl Latency {
    /// The sum in seconds.
    pub fn sum_seconds(&self) -> f64 {
        // Exact for any sum below 2^53 ms (285,000 years of latency).
        self.sum_ms as f64 / 1000.0
    }

    /// `(le, cumulative count)` for every bucket, ending with `+Inf` (the count).
    pub fn cumulative(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        BUCKET_LABELS
            .iter()
            .copied()
            .zip(self.buckets)
            .chain(std::iter::once(("+Inf", self.count)))
    }

    /// Writes this series' histogram samples of `name` (its `_bucket` lines,
    /// `_sum` and `_count`) with `labels` (escaped `k="v"` pairs).
    pub(crate) fn write_histogram(&self, text: &mut String, name: &str, labels: &str) {
        use std::fmt::Write;
        for (le, n) in self.cumulative() {
            let _ = writeln!(text, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
        }
        let _ = writeln!(text, "{name}_sum{{{labels}}} {}", self.sum_seconds());
        let _ = writeln!(text, "{name}_count{{{labels}}} {}", self.count);
    }

    /// `{count, sum, buckets: {le: n}}` for the JSON surfaces.
    pub fn json(&self) -> Value {
        let buckets: Map<String, Value> = BUCKET_LABELS
            .iter()
            .zip(self.buckets)
            .map(|(le, n)| ((*le).to_owned(), n.into()))
            .collect();
        json!({ "count": self.count, "sum": self.sum_seconds(), "buckets": buckets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cumulative_buckets_end_with_the_count() {
        let latency = Latency {
            count: 3,
            sum_ms: 1_500,
            buckets: [1, 1, 2, 2, 2, 2, 2, 2, 3, 3],
        };
        let all: Vec<_> = latency.cumulative().collect();
        assert_eq!(all.len(), 11);
        assert_eq!(all[0], ("0.1", 1));
        assert_eq!(all[10], ("+Inf", 3));
        assert_eq!(latency.json()["sum"], 1.5);
        assert_eq!(latency.json()["buckets"]["2.5"], 2);
        assert_eq!(BUCKET_LABELS.len(), LATENCY_BUCKETS_SECONDS.len());
        for (label, bound) in BUCKET_LABELS.iter().zip(LATENCY_BUCKETS_SECONDS) {
            assert_eq!(label.parse::<f64>().unwrap(), bound);
        }
    }
}
