//! The validated policy model.
//!
//! Review fields are optional here on purpose: a policy entry with a missing
//! field is still a policy the gate can reason about, and the missing field is
//! reported as a finding (`missing-review-field`) rather than aborting the
//! load. Only malformed input (syntax, wrong types, unknown keys) stops it.

use crate::span::Spanned;

/// The schema version this crate reads.
pub const SCHEMA_VERSION: i64 = 1;

/// A loaded bounded-growth policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The `schema_version` key (always [`SCHEMA_VERSION`] once loaded).
    pub schema_version: i64,
    /// Where the gate looks for sources and docs.
    pub sources: Sources,
    /// Tunables with documented defaults.
    pub settings: Settings,
    /// `[cache_keys.<id>]` entries, in file order.
    pub cache_keys: Vec<CacheKeyPolicy>,
    /// `[scan_limits.<id>]` entries, in file order.
    pub scan_limits: Vec<ScanLimitPolicy>,
    /// `[metrics.<name>]` entries, in file order.
    pub metrics: Vec<MetricPolicy>,
    /// `[rules]` severity overrides: rule code to level (`allow`, `warn`, `error`).
    pub rules: Vec<(Spanned<String>, Spanned<String>)>,
}

impl Policy {
    /// The metric declared under `name`, if any.
    pub fn metric(&self, name: &str) -> Option<&MetricPolicy> {
        self.metrics.iter().find(|m| m.name.value == name)
    }

    /// The cache-key entry with policy ID `id`, if any.
    pub fn cache_key(&self, id: &str) -> Option<&CacheKeyPolicy> {
        self.cache_keys.iter().find(|c| c.id.value == id)
    }
}

/// Glob lists relative to the checked root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sources {
    /// Where cache prefixes (and scan-limit keys) are searched.
    pub cache: Vec<Spanned<String>>,
    /// Where metric names and their labels are searched.
    pub metrics: Vec<Spanned<String>>,
    /// Operator docs that must mention every declared surface.
    pub docs: Vec<Spanned<String>>,
    /// Prometheus scrape / remote-write configuration.
    pub remote_write: Vec<Spanned<String>>,
    /// Paths never scanned.
    pub exclude: Vec<Spanned<String>>,
}

/// `[settings]`: every key is optional.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Cache-key namespace owned by the server (default `server:`).
    pub cache_namespace: String,
    /// Prefix of every metric name the server owns (default `dw_`).
    pub metric_prefix: String,
    /// Dimension names whose values users control.
    pub user_controlled_dimensions: Vec<String>,
    /// Environment variables whose values change on every CI run.
    pub per_run_labels: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Settings {
            cache_namespace: "server:".into(),
            metric_prefix: "dw_".into(),
            user_controlled_dimensions: strings(&[
                "activity_type",
                "build_id",
                "namespace",
                "queue",
                "run_id",
                "task_queue",
                "worker_id",
                "workflow_id",
                "workflow_type",
            ]),
            per_run_labels: strings(&[
                "GITHUB_RUN_ID",
                "GITHUB_RUN_ATTEMPT",
                "GITHUB_SHA",
                "RUNNER_NAME",
            ]),
        }
    }
}

/// A `[cache_keys.<id>]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKeyPolicy {
    /// The policy ID (the table key), spanning the key in the header.
    pub id: Spanned<String>,
    /// Type path or repo-relative file that builds these keys.
    pub owner: Option<Spanned<String>>,
    /// The declared key prefix, e.g. `server:long-poll-signal:`.
    pub prefix: Option<Spanned<String>>,
    /// Key dimensions; `Some(vec![])` is a fixed key.
    pub dimensions: Option<Spanned<Vec<Spanned<String>>>>,
    /// Reviewed sentence: how long a key lives.
    pub ttl: Option<Spanned<String>>,
    /// Reviewed sentence: how many keys can exist.
    pub bound: Option<Spanned<String>>,
    /// Reviewed sentence: what admits a new key.
    pub admission: Option<Spanned<String>>,
    /// Reviewed sentence: what removes a key.
    pub eviction: Option<Spanned<String>>,
}

/// A `[scan_limits.<id>]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanLimitPolicy {
    /// The policy ID (the table key).
    pub id: Spanned<String>,
    /// Type path or repo-relative file that runs the scan.
    pub owner: Option<Spanned<String>>,
    /// The configuration key that caps the scan, e.g. `server.polling.x_scan_limit`.
    pub config_key: Option<Spanned<String>>,
    /// The default cap.
    pub default: Option<Spanned<i64>>,
    /// Reviewed sentence: what the scan touches at most.
    pub bound: Option<Spanned<String>>,
}

/// A `[metrics.<name>]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricPolicy {
    /// The metric name (the table key).
    pub name: Spanned<String>,
    /// Type path or repo-relative file that emits the metric.
    pub owner: Option<Spanned<String>>,
    /// Where the metric is exposed, e.g. `GET /api/system/metrics`.
    pub surface: Option<Spanned<String>>,
    /// Declared dimensions with their cardinality classes.
    pub dimensions: Option<Spanned<Vec<Dimension>>>,
    /// Reviewed sentence: how many series can exist.
    pub cardinality: Option<Spanned<String>>,
    /// Reviewed sentence: which series are reported when capped.
    pub selection: Option<Spanned<String>>,
    /// Reviewed sentence: how suppressed series are accounted for.
    pub suppression: Option<Spanned<String>>,
}

impl MetricPolicy {
    /// The declared dimensions (empty when the key is absent).
    pub fn dimension_list(&self) -> &[Dimension] {
        self.dimensions.as_ref().map_or(&[], |d| d.value.as_slice())
    }

    /// Dimensions whose class makes them Prometheus labels.
    pub fn label_dimensions(&self) -> impl Iterator<Item = &Dimension> {
        self.dimension_list()
            .iter()
            .filter(|d| d.class().is_label())
    }
}

/// A metric dimension and its cardinality class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dimension {
    /// The dimension (label) name.
    pub name: Spanned<String>,
    /// The raw class string, e.g. `bounded_series`.
    pub class: Spanned<String>,
}

impl Dimension {
    /// The parsed cardinality class.
    pub fn class(&self) -> CardinalityClass {
        CardinalityClass::parse(&self.class.value)
    }
}

/// The reviewed cardinality taxonomy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardinalityClass {
    /// `bounded_*`: a label whose series set is capped at run time.
    Bounded,
    /// `finite_*`: a label drawn from a fixed, reviewed inventory.
    Finite,
    /// `request_scope_*`: carried in the request envelope, never a label.
    RequestScope,
    /// `*_no_label`: not a label at all.
    NoLabel,
    /// Anything else: not reviewed.
    Unreviewed,
}

impl CardinalityClass {
    /// Classifies a class string.
    pub fn parse(class: &str) -> Self {
        let has_suffix = |prefix: &str| class.len() > prefix.len() && class.starts_with(prefix);
        if has_suffix("bounded_") {
            CardinalityClass::Bounded
        } else if has_suffix("finite_") {
            CardinalityClass::Finite
        } else if has_suffix("request_scope_") {
            CardinalityClass::RequestScope
        } else if class.len() > "_no_label".len() && class.ends_with("_no_label") {
            CardinalityClass::NoLabel
        } else {
            CardinalityClass::Unreviewed
        }
    }

    /// Whether a dimension of this class is emitted as a Prometheus label.
    pub fn is_label(self) -> bool {
        matches!(self, CardinalityClass::Bounded | CardinalityClass::Finite)
    }

    /// Whether the class is part of the reviewed taxonomy.
    pub fn is_reviewed(self) -> bool {
        self != CardinalityClass::Unreviewed
    }
}

#[cfg(test)]
mod tests {
    use super::CardinalityClass as C;

    #[test]
    fn taxonomy_classifies_by_prefix_and_suffix() {
        assert_eq!(C::parse("bounded_series"), C::Bounded);
        assert_eq!(C::parse("finite_projection_tables"), C::Finite);
        assert_eq!(C::parse("request_scope_not_label"), C::RequestScope);
        assert_eq!(C::parse("server_scope_no_label"), C::NoLabel);
        assert_eq!(C::parse("unbounded"), C::Unreviewed);
        assert_eq!(C::parse("bounded_"), C::Unreviewed);
        assert_eq!(C::parse("_no_label"), C::Unreviewed);
        assert!(C::Finite.is_label() && !C::RequestScope.is_label());
    }
}
