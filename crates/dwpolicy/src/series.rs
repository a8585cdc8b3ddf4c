//! Series caps for metric surfaces whose label values users control.
//!
//! Labels such as `task_queue` or `workflow_type` come from user input, so a
//! scrape must never emit, or even read, an unbounded number of series. This
//! module turns a configured limit into a clamped cap, discovers label sets
//! without reading past `limit + 1`, keeps a deterministic subset, and
//! accounts for the rest with suppression counters that travel in the
//! payload (`cardinality.series_limits.*`) instead of silently vanishing.
//!
//! Selection orders (both deterministic, independent of hash order):
//! - [`SeriesLimit::discover`] keeps label sets in **ascending label-set
//!   order**. It reads at most `limit + 1` items, so the source must already
//!   yield that order (e.g. SQL `ORDER BY task_queue, workflow_type`) for the
//!   kept sets to be the globally smallest; what it reads is sorted anyway, so
//!   the output order never depends on the source's.
//! - [`SeriesLimiter`] sees every series with a value and keeps the largest:
//!   **value descending, then label set ascending** on ties.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A named series-limit setting: its config key, default and hard clamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesLimitSpec {
    /// The configuration key operators set, e.g. `server.metrics.prometheus_workflow_series_limit`.
    pub config_key: &'static str,
    /// The limit when nothing is configured.
    pub default: usize,
    /// The largest limit any configuration can reach.
    pub hard_max: usize,
}

/// `dw_workflow_task_consecutive_failures`: workflow-type series, default 20, clamped to 100.
pub const WORKFLOW_TASK_FAILURE_TYPES: SeriesLimitSpec = SeriesLimitSpec {
    config_key: "server.metrics.workflow_task_failure_type_limit",
    default: 20,
    hard_max: 100,
};

/// `dw_workflow_runs_total` (and its latency): task_queue/workflow_type series, default 100, clamped to 500.
pub const PROMETHEUS_WORKFLOW_SERIES: SeriesLimitSpec = SeriesLimitSpec {
    config_key: "server.metrics.prometheus_workflow_series_limit",
    default: 100,
    hard_max: 500,
};

/// `dw_activity_executions_total` (and its latency): default 100, clamped to 500.
pub const PROMETHEUS_ACTIVITY_SERIES: SeriesLimitSpec = SeriesLimitSpec {
    config_key: "server.metrics.prometheus_activity_series_limit",
    default: 100,
    hard_max: 500,
};

/// `dw_task_queue_runtime_state`: task_queue series, default 100, clamped to 500.
pub const PROMETHEUS_TASK_QUEUE_SERIES: SeriesLimitSpec = SeriesLimitSpec {
    config_key: "server.metrics.prometheus_task_queue_series_limit",
    default: 100,
    hard_max: 500,
};

impl SeriesLimitSpec {
    /// The effective cap for a configured value (`None`: not configured).
    ///
    /// Values above [`hard_max`](Self::hard_max) are clamped down to it. Values
    /// below 1 (including negatives from a loosely typed config) are raised to 1:
    /// a zero cap would hide every series while the surface still looked healthy.
    pub fn resolve(&self, configured: Option<i64>) -> SeriesLimit {
        let hard_max = self.hard_max.max(1);
        let limit = match configured {
            None => self.default,
            Some(v) if v < 1 => 1,
            Some(v) => usize::try_from(v).unwrap_or(usize::MAX),
        };
        SeriesLimit(limit.clamp(1, hard_max))
    }

    /// The cap when nothing is configured.
    pub fn default_limit(&self) -> SeriesLimit {
        self.resolve(None)
    }
}

/// A resolved, clamped series cap (always at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeriesLimit(usize);

/// What a capped surface reports about its series set.
///
/// While every series fits (`lower_bound == false`) the counts are exact.
/// Once discovery stopped at `limit + 1`, `observed` and `suppressed_series`
/// are lower bounds and `lower_bound` says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SeriesReport {
    /// The cap in force.
    pub limit: usize,
    /// Series emitted (at most `limit`).
    pub reported: usize,
    /// Series seen: exact, or a lower bound when `lower_bound` is set.
    pub observed: usize,
    /// Series left out: exact, or a lower bound when `lower_bound` is set.
    pub suppressed_series: usize,
    /// Sum of the values of the suppressed series; absent when the values were never read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppressed_value: Option<u64>,
    /// Whether `observed` and `suppressed_series` are lower bounds.
    pub lower_bound: bool,
}

/// The label sets kept by [`SeriesLimit::discover`], and the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery<L> {
    /// Kept label sets, ascending.
    pub series: Vec<L>,
    /// Counts for the payload.
    pub report: SeriesReport,
}

/// The series kept by a [`SeriesLimiter`], and the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection<L> {
    /// Kept series with their values: value descending, then label set ascending.
    pub series: Vec<(L, u64)>,
    /// Exact counts and suppression sums for the payload.
    pub report: SeriesReport,
}

impl SeriesLimit {
    /// A cap of `limit`, raised to 1 if lower. Prefer [`SeriesLimitSpec::resolve`].
    pub fn new(limit: usize) -> Self {
        SeriesLimit(limit.max(1))
    }

    /// The cap as a number.
    pub fn get(self) -> usize {
        self.0
    }

    /// How many label sets discovery may read: `limit + 1`, enough to tell "exactly at the cap" from "over it".
    pub fn probe_size(self) -> usize {
        self.0.saturating_add(1)
    }

    /// Reads at most `limit + 1` label sets from `source` and keeps the smallest `limit`.
    ///
    /// The source is never pulled past `limit + 1` items, so a source backed
    /// by a cursor does bounded work whatever the backlog. Label sets must be
    /// distinct (e.g. from `GROUP BY`).
    pub fn discover<L: Ord>(self, source: impl IntoIterator<Item = L>) -> Discovery<L> {
        let mut series: Vec<L> = source.into_iter().take(self.probe_size()).collect();
        series.sort_unstable();
        let observed = series.len();
        let over = observed > self.0;
        series.truncate(self.0);
        Discovery {
            report: SeriesReport {
                limit: self.0,
                reported: series.len(),
                observed,
                suppressed_series: observed - series.len(),
                suppressed_value: None,
                lower_bound: over,
            },
            series,
        }
    }

    /// A limiter that admits valued series one at a time under this cap.
    pub fn limiter<L: Ord>(self) -> SeriesLimiter<L> {
        SeriesLimiter {
            limit: self.0,
            // Capacity is bounded by the clamp, so reserving it up front is safe.
            kept: BinaryHeap::with_capacity(self.0),
            observed: 0,
            suppressed_series: 0,
            suppressed_value: 0,
        }
    }
}

/// Whether a series is currently kept.
///
/// Provisional: a later, larger series can still displace an admitted one,
/// whose value then moves into the suppression counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Kept (possibly displacing a smaller series).
    Admitted,
    /// Not kept: counted as suppressed.
    Suppressed,
}

/// Keeps the `limit` largest series of a stream in O(limit) memory.
///
/// Each call to [`admit`](Self::admit) is one distinct series; the caller
/// aggregates values per label set before admitting them.
#[derive(Debug, Clone)]
pub struct SeriesLimiter<L> {
    limit: usize,
    // A max-heap on "worse": its top is the series to displace next.
    kept: BinaryHeap<(Reverse<u64>, L)>,
    observed: usize,
    suppressed_series: usize,
    suppressed_value: u64,
}

impl<L: Ord> SeriesLimiter<L> {
    /// Offers one series with its value.
    pub fn admit(&mut self, labels: L, value: u64) -> Admission {
        self.observed = self.observed.saturating_add(1);
        let candidate = (Reverse(value), labels);
        if self.kept.len() < self.limit {
            self.kept.push(candidate);
            return Admission::Admitted;
        }
        let Some(mut worst) = self.kept.peek_mut() else {
            // Unreachable while limit >= 1, but pushing is the harmless answer.
            self.kept.push(candidate);
            return Admission::Admitted;
        };
        if candidate < *worst {
            let displaced = std::mem::replace(&mut *worst, candidate);
            // Dropping the PeekMut restores the heap order.
            drop(worst);
            self.suppress(displaced.0 .0);
            Admission::Admitted
        } else {
            drop(worst);
            self.suppress(value);
            Admission::Suppressed
        }
    }

    fn suppress(&mut self, value: u64) {
        self.suppressed_series = self.suppressed_series.saturating_add(1);
        self.suppressed_value = self.suppressed_value.saturating_add(value);
    }

    /// Series offered so far.
    pub fn observed(&self) -> usize {
        self.observed
    }

    /// Ends the stream: the kept series in selection order, and exact counts.
    pub fn finish(self) -> Selection<L> {
        let series: Vec<(L, u64)> = self
            .kept
            .into_sorted_vec()
            .into_iter()
            .map(|(Reverse(value), labels)| (labels, value))
            .collect();
        Selection {
            report: SeriesReport {
                limit: self.limit,
                reported: series.len(),
                observed: self.observed,
                suppressed_series: self.suppressed_series,
                suppressed_value: Some(self.suppressed_value),
                lower_bound: false,
            },
            series,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn presets_carry_the_seed_values() {
        let all = [
            (WORKFLOW_TASK_FAILURE_TYPES, 20, 100),
            (PROMETHEUS_WORKFLOW_SERIES, 100, 500),
            (PROMETHEUS_ACTIVITY_SERIES, 100, 500),
            (PROMETHEUS_TASK_QUEUE_SERIES, 100, 500),
        ];
        for (spec, default, hard_max) in all {
            assert_eq!(spec.default_limit().get(), default, "{}", spec.config_key);
            assert_eq!(spec.resolve(Some(i64::MAX)).get(), hard_max);
            assert_eq!(spec.resolve(Some(hard_max as i64 + 1)).get(), hard_max);
            assert_eq!(spec.resolve(Some(hard_max as i64)).get(), hard_max);
            assert_eq!(spec.resolve(Some(7)).get(), 7);
        }
    }

    #[test]
    fn limits_below_one_are_raised_to_one() {
        assert_eq!(WORKFLOW_TASK_FAILURE_TYPES.resolve(Some(0)).get(), 1);
        assert_eq!(WORKFLOW_TASK_FAILURE_TYPES.resolve(Some(-5)).get(), 1);
        assert_eq!(SeriesLimit::new(0).get(), 1);
    }

    struct Counting<'a> {
        next: u32,
        pulled: &'a Cell<usize>,
    }

    impl Iterator for Counting<'_> {
        type Item = u32;
        fn next(&mut self) -> Option<u32> {
            self.pulled.set(self.pulled.get() + 1);
            self.next += 1;
            Some(self.next)
        }
    }

    #[test]
    fn discovery_never_reads_past_limit_plus_one() {
        let pulled = Cell::new(0);
        let source = Counting {
            next: 0,
            pulled: &pulled,
        };
        let discovery = SeriesLimit::new(100).discover(source);
        assert_eq!(pulled.get(), 101);
        assert_eq!(discovery.series.len(), 100);
        assert_eq!(discovery.series.first(), Some(&1));
        assert_eq!(discovery.series.last(), Some(&100));
    }

    #[test]
    fn discovery_counts_are_exact_within_the_cap() {
        let at_cap = SeriesLimit::new(3).discover(["c", "a", "b"]);
        assert_eq!(at_cap.series, ["a", "b", "c"]);
        assert_eq!(
            at_cap.report,
            SeriesReport {
                limit: 3,
                reported: 3,
                observed: 3,
                suppressed_series: 0,
                suppressed_value: None,
                lower_bound: false,
            }
        );
        let below = SeriesLimit::new(3).discover(["x"]);
        assert_eq!(
            (below.report.observed, below.report.lower_bound),
            (1, false)
        );
    }

    #[test]
    fn discovery_past_the_cap_reports_lower_bounds() {
        let labels = [
            ("q2", "A"),
            ("q1", "B"),
            ("q1", "A"),
            ("q3", "A"),
            ("q4", "Z"),
        ];
        let over = SeriesLimit::new(3).discover(labels);
        // Only the first four are read; they are kept in ascending label-set order.
        assert_eq!(over.series, [("q1", "A"), ("q1", "B"), ("q2", "A")]);
        assert_eq!(over.report.observed, 4);
        assert_eq!(over.report.suppressed_series, 1);
        assert!(over.report.lower_bound);
    }

    #[test]
    fn limiter_keeps_largest_values_then_smallest_labels() {
        let mut limiter = SeriesLimit::new(3).limiter();
        assert_eq!(limiter.admit("d", 5), Admission::Admitted);
        assert_eq!(limiter.admit("b", 9), Admission::Admitted);
        assert_eq!(limiter.admit("c", 5), Admission::Admitted);
        // Ties on value 5: "a" beats "d" (ascending labels), displacing it.
        assert_eq!(limiter.admit("a", 5), Admission::Admitted);
        assert_eq!(limiter.admit("e", 1), Admission::Suppressed);
        assert_eq!(limiter.admit("z", 5), Admission::Suppressed);
        assert_eq!(limiter.observed(), 6);
        let selection = limiter.finish();
        assert_eq!(selection.series, [("b", 9), ("a", 5), ("c", 5)]);
        assert_eq!(
            selection.report,
            SeriesReport {
                limit: 3,
                reported: 3,
                observed: 6,
                suppressed_series: 3,
                suppressed_value: Some(5 + 1 + 5),
                lower_bound: false,
            }
        );
    }

    #[test]
    fn limiter_selection_is_independent_of_arrival_order() {
        let items = [("a", 3), ("b", 3), ("c", 7), ("d", 1), ("e", 7), ("f", 3)];
        let run = |order: &[usize]| {
            let mut limiter = SeriesLimit::new(4).limiter();
            for &i in order {
                limiter.admit(items[i].0, items[i].1);
            }
            limiter.finish()
        };
        let forward = run(&[0, 1, 2, 3, 4, 5]);
        assert_eq!(forward, run(&[5, 4, 3, 2, 1, 0]));
        assert_eq!(forward, run(&[3, 0, 5, 1, 4, 2]));
        assert_eq!(forward.series, [("c", 7), ("e", 7), ("a", 3), ("b", 3)]);
        assert_eq!(forward.report.suppressed_value, Some(3 + 1));
    }

    #[test]
    fn suppressed_values_saturate_instead_of_overflowing() {
        let mut limiter = SeriesLimit::new(1).limiter();
        limiter.admit(0, u64::MAX);
        limiter.admit(1, u64::MAX);
        limiter.admit(2, u64::MAX);
        assert_eq!(limiter.finish().report.suppressed_value, Some(u64::MAX));
    }

    #[test]
    fn report_serializes_with_stable_keys() {
        let report = SeriesLimit::new(2).discover([1, 2, 3]).report;
        assert_eq!(
            serde_json::to_string(&report).unwrap(),
            r#"{"limit":2,"reported":2,"observed":3,"suppressed_series":1,"lower_bound":true}"#
        );
    }
}
