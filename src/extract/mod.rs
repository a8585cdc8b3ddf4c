//! The extract layer, language extractors: from one file's text to the
//! facts the rules need. An extractor knows nothing of files on disk, the
//! policy or the tree; it uses only [`crate::base`] (text positions).
//!
//! An extractor sees a single file and keeps only what the gate can use:
//! string literals that mention the cache namespace or a scan-limit key,
//! metric-name sites with the labels emitted alongside them, and the items a
//! policy `owner` may name. The file text itself is dropped once a file is
//! done, so memory grows with findings, not with the tree.

mod clike;
mod collect;
pub mod exposition;
mod go;
mod js;
pub mod language;
#[cfg(test)]
mod language_tests;
pub(crate) mod lexical;
mod php;
pub mod plain;
mod python;
pub mod rust;
#[cfg(test)]
mod rust_differential;
pub(crate) mod rust_lex;
mod rust_prom;
#[cfg(any(test, feature = "syn-oracle"))]
pub mod rust_syn;
#[cfg(any(test, feature = "syn-oracle"))]
mod rust_syn_macros;
#[cfg(any(test, feature = "syn-oracle"))]
mod rust_syn_metrics;
mod rust_tt;
mod rust_walk;
mod shell;
mod strings;
#[cfg(test)]
mod test_render;
mod tokens;
mod yaml;

pub use crate::base::line_index::{LineIndex, TextRange};
pub use language::{extract_file, Language};
pub use rust::extract_rust;

/// What an extractor looks for; derived from the policy's `[settings]`.
#[derive(Debug, Clone)]
pub struct ExtractConfig {
    /// Cache-key namespace, e.g. `server:`.
    pub cache_namespace: String,
    /// Metric-name prefix, e.g. `dw_`.
    pub metric_prefix: String,
}

/// The suffix that marks a configuration key as a scan limit.
pub const SCAN_LIMIT_SUFFIX: &str = "_scan_limit";

/// How a literal was written in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LiteralKind {
    /// `"…"`
    Str,
    /// `r"…"` / `r#"…"#`
    RawStr,
    /// `b"…"` / `br"…"`
    ByteStr,
    /// `c"…"`
    CStr,
    /// The joined pieces of `concat!(…)`.
    Concat,
    /// Found by the lexical fallback, not the parser.
    Lexical,
    /// A string with interpolation: PHP `"…$x…"`, Python f-string, JS
    /// template literal, shell `"…${x}…"` (placeholders kept or marked).
    Interpolated,
    /// A heredoc or nowdoc body (PHP, shell).
    Heredoc,
    /// An unquoted word or scalar (shell word, YAML plain scalar).
    Bare,
}

/// A string literal worth keeping (it mentions the cache namespace or a
/// scan-limit key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Literal {
    /// The literal's value after unescaping (format placeholders kept as written).
    pub value: String,
    /// How it was written.
    pub kind: LiteralKind,
    /// Where it was written (the whole literal token, quotes included).
    pub range: TextRange,
    /// The innermost enclosing named item (`impl` self type, fn, struct…), if any.
    pub context: Option<String>,
}

/// How a metric name was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricVia {
    /// A bare mention: no emission semantics known at this site.
    Mention,
    /// Prometheus text exposition inside a literal: `dw_x{a="…"}`.
    Exposition,
    /// A `metrics` crate macro: `counter!("dw_x", "a" => v)`.
    MetricsMacro,
    /// A Prometheus client library's constructor: the Rust `prometheus` crate
    /// (`register_*_vec!`, `*Vec::new(Opts::new(…), &[…])`), Go
    /// `client_golang` (`prometheus.New*Vec(…)`) or JavaScript `prom-client`
    /// (`new Counter({…})`).
    PrometheusVec,
}

/// A label name emitted with a metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The label name.
    pub name: String,
    /// Where the label name was written.
    pub range: TextRange,
}

/// One place a metric name appears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricSite {
    /// The metric name, e.g. `dw_workflow_runs_total`.
    pub name: String,
    /// Where the name was written (as tight as the literal allows).
    pub range: TextRange,
    /// The emitted label names when this site emits the metric with a known
    /// label set (`Some(vec![])` = no labels); `None` when it only mentions it
    /// or the labels are built at run time.
    pub labels: Option<Vec<Label>>,
    /// How the site was recognised.
    pub via: MetricVia,
}

/// Everything one file contributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileFacts {
    /// Literals mentioning the cache namespace or a scan-limit key.
    pub literals: Vec<Literal>,
    /// Metric-name sites.
    pub metrics: Vec<MetricSite>,
    /// Fully qualified paths of the items the file defines
    /// (`crate::module::Item`, inline `mod` blocks included).
    pub items: Vec<String>,
    /// Set when the parser gave up and the lexical fallback produced the
    /// facts: the parser's message, with its location.
    pub fallback: Option<(String, TextRange)>,
    /// Prometheus target labels set by scrape or remote-write configs
    /// (`labels:`, `external_labels:`, relabel `target_label`/`replacement`).
    pub scrape_labels: Vec<ScrapeLabel>,
}

/// One label a Prometheus config attaches to every series it scrapes or
/// writes, with the value as written (variables unexpanded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrapeLabel {
    /// The label name.
    pub name: String,
    /// The value as written, quotes removed, `${VAR}` and `{{ … }}` kept.
    pub value: String,
    /// Where the label name is.
    pub name_range: TextRange,
    /// Where the value is.
    pub value_range: TextRange,
}
