//! The run-time twin of `dwlint check`: what a running server actually
//! exposes, checked against the policy.
//!
//! The static gate sees the labels a source file *writes*; a scrape shows
//! the series a server *emits*, after every code path, configuration and
//! user input had its say. Both `dwlint live` and the soak harness (at every
//! sample) run these checks, so they share this module; fetching lives here
//! too, because both need the same two surfaces of dwserver for the same
//! namespace: the Prometheus text (`/api/system/prometheus-metrics`) and its
//! JSON disclosure (`/api/system/metrics`), whose series report is what the
//! cap is checked against.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use dwpolicy::series::{
    SeriesLimitSpec, PROMETHEUS_ACTIVITY_SERIES, PROMETHEUS_TASK_QUEUE_SERIES,
    PROMETHEUS_WORKFLOW_SERIES, WORKFLOW_TASK_FAILURE_TYPES,
};
use dwpolicy::{CardinalityClass, MetricPolicy, Policy};
use serde_json::Value;

mod exposition;

pub use exposition::{parse as parse_exposition, Exposition, Malformed, Series};

/// The kinds of live finding; each is its own code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LiveCode {
    /// A metric-prefix metric the policy does not declare.
    UndeclaredMetric,
    /// A label that is not a declared dimension of its metric.
    UndeclaredLabel,
    /// A dimension declared as not-a-label, emitted as a label.
    NotALabel,
    /// More series than the declared cap, or a cap above the hard clamp.
    SeriesOverCap,
    /// A capped (bounded) metric without its suppression report.
    MissingSuppressionReport,
}

impl LiveCode {
    /// Every code, in report order.
    pub const ALL: [LiveCode; 5] = [
        LiveCode::UndeclaredMetric,
        LiveCode::UndeclaredLabel,
        LiveCode::NotALabel,
        LiveCode::SeriesOverCap,
        LiveCode::MissingSuppressionReport,
    ];

    /// The stable finding code.
    pub fn code(self) -> &'static str {
        match self {
            LiveCode::UndeclaredMetric => "live-undeclared-metric",
            LiveCode::UndeclaredLabel => "live-undeclared-label",
            LiveCode::NotALabel => "live-not-a-label",
            LiveCode::SeriesOverCap => "live-series-over-cap",
            LiveCode::MissingSuppressionReport => "live-missing-suppression-report",
        }
    }

    /// What the check finds, in one sentence.
    pub fn what(self) -> &'static str {
        match self {
            LiveCode::UndeclaredMetric => "Finds a scraped metric with the policy's metric prefix that the policy does not declare.",
            LiveCode::UndeclaredLabel => "Finds a scraped label that is not a declared dimension of its metric.",
            LiveCode::NotALabel => "Finds a dimension the policy classes as not a label (request_scope_* or *_no_label) emitted as a Prometheus label.",
            LiveCode::SeriesOverCap => "Finds a metric emitting more series than the cap its suppression report declares, or a cap above the series limit's hard clamp.",
            LiveCode::MissingSuppressionReport => "Finds a metric with bounded_* labels scraped without the suppression report (cardinality.series_limits) that accounts for the series left out.",
        }
    }

    /// Why it matters.
    pub fn why(self) -> &'static str {
        match self {
            LiveCode::UndeclaredMetric => "An undeclared metric has no reviewed cardinality contract, so nothing bounds its series.",
            LiveCode::UndeclaredLabel | LiveCode::NotALabel => "Every label is a new series axis; one the policy did not review can grow with user input and exhaust the metrics backend.",
            LiveCode::SeriesOverCap => "The cap is the promise that user-controlled labels cannot grow the series set; a scrape above it breaks the promise.",
            LiveCode::MissingSuppressionReport => "Without the report, the series the cap hid silently vanish and the surface looks healthy while it drops data.",
        }
    }
}

/// One live finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFinding {
    /// What kind.
    pub code: LiveCode,
    /// The scraped URL.
    pub surface: String,
    /// The metric (or `metric.label`).
    pub subject: String,
    /// What was seen against what the policy says.
    pub message: String,
}

/// One scraped Prometheus text surface, with the JSON disclosure scraped
/// for the same namespace when the surface is dwserver's.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The Prometheus text URL.
    pub url: String,
    /// Its parsed text.
    pub exposition: Exposition,
    /// The JSON surface's URL and body, when there is one.
    pub json: Option<(String, Value)>,
}

/// Why a scrape failed.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The request failed or answered an error status.
    #[error("GET {url}: {message}")]
    Http {
        /// The URL.
        url: String,
        /// What happened.
        message: String,
    },
    /// The JSON surface did not answer JSON.
    #[error("GET {url}: not JSON: {message}")]
    NotJson {
        /// The URL.
        url: String,
        /// serde's message.
        message: String,
    },
}

/// Scrapes `target`: a dwserver base URL (no path, or `/`) is scraped on
/// both metric surfaces once per namespace; any other URL is one Prometheus
/// text endpoint (e.g. the soak harness's `/metrics`). `token` is sent as a
/// bearer token (dwserver's operator surfaces need the admin role).
pub fn scrape(
    target: &str,
    namespaces: &[String],
    token: Option<&str>,
) -> Result<Vec<Scrape>, ScrapeError> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    let base = target.trim_end_matches('/');
    let has_path = base
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    if has_path {
        let text = get(&agent, base, token)?;
        return Ok(vec![Scrape {
            url: base.to_owned(),
            exposition: exposition::parse(&text),
            json: None,
        }]);
    }
    let mut scrapes = Vec::new();
    for namespace in namespaces {
        let query = format!("namespace={}", encode(namespace));
        let prom_url = format!("{base}/api/system/prometheus-metrics?{query}");
        let json_url = format!("{base}/api/system/metrics?{query}");
        let text = get(&agent, &prom_url, token)?;
        let body = get(&agent, &json_url, token)?;
        let json: Value = serde_json::from_str(&body).map_err(|e| ScrapeError::NotJson {
            url: json_url.clone(),
            message: e.to_string(),
        })?;
        scrapes.push(Scrape {
            url: prom_url,
            exposition: exposition::parse(&text),
            json: Some((json_url, json)),
        });
    }
    Ok(scrapes)
}

fn get(agent: &ureq::Agent, url: &str, token: Option<&str>) -> Result<String, ScrapeError> {
    let failed = |message: String| ScrapeError::Http {
        url: url.to_owned(),
        message,
    };
    let request = match token {
        Some(token) => agent
            .get(url)
            .set("Authorization", &format!("Bearer {token}")),
        None => agent.get(url),
    };
    match request.call() {
        Ok(response) => response.into_string().map_err(|e| failed(e.to_string())),
        Err(ureq::Error::Status(code, response)) => {
            let body = response.into_string().unwrap_or_default();
            Err(failed(format!("HTTP {code}: {}", body.trim())))
        }
        Err(e) => Err(failed(e.to_string())),
    }
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Every finding of `scrapes` against `policy`, deduplicated, in a stable order.
pub fn check(policy: &Policy, scrapes: &[Scrape]) -> Vec<LiveFinding> {
    let mut findings = BTreeSet::new();
    for scrape in scrapes {
        check_exposition(policy, scrape, &mut findings);
        if let Some((url, json)) = &scrape.json {
            check_disclosure(policy, url, json, &mut findings);
        }
    }
    findings
        .into_iter()
        .map(|(code, surface, subject, message)| LiveFinding {
            code,
            surface,
            subject,
            message,
        })
        .collect()
}

type Found = BTreeSet<(LiveCode, String, String, String)>;

/// The declared metric a scraped name belongs to: itself, or the histogram
/// or summary it is a `_bucket`/`_sum`/`_count` line of.
fn declared<'p>(policy: &'p Policy, name: &str) -> Option<(&'p MetricPolicy, bool)> {
    if let Some(metric) = policy.metric(name) {
        return Some((metric, false));
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?;
        policy.metric(base).map(|m| (m, true))
    })
}

fn check_exposition(policy: &Policy, scrape: &Scrape, found: &mut Found) {
    let prefix = &policy.settings.metric_prefix;
    let url = &scrape.url;
    let mut series_per_metric: BTreeMap<&str, BTreeSet<&[(String, String)]>> = BTreeMap::new();
    for series in &scrape.exposition.series {
        if !series.name.starts_with(prefix.as_str()) {
            continue;
        }
        let Some((metric, derived)) = declared(policy, &series.name) else {
            found.insert((
                LiveCode::UndeclaredMetric,
                url.clone(),
                series.name.clone(),
                format!(
                    "{} is scraped but the policy declares no such metric",
                    series.name
                ),
            ));
            continue;
        };
        let name = metric.name.value.as_str();
        for (label, _) in &series.labels {
            if derived && (label == "le" || label == "quantile") {
                continue;
            }
            check_label(metric, label, url, found);
        }
        if !derived {
            series_per_metric
                .entry(name)
                .or_default()
                .insert(series.labels.as_slice());
        }
    }
    for (name, series) in series_per_metric {
        let Some(metric) = policy.metric(name) else {
            continue;
        };
        if !is_capped(metric) {
            continue;
        }
        if scrape.exposition.reports.is_empty() {
            found.insert((
                LiveCode::MissingSuppressionReport,
                url.clone(),
                name.to_owned(),
                format!("{name} has bounded labels but the scrape carries no `# cardinality series_limits.*` report"),
            ));
        }
        let limit = scrape
            .json
            .as_ref()
            .and_then(|(_, json)| disclosed_limit(json, name))
            .or_else(|| single_text_limit(&scrape.exposition));
        if let Some(limit) = limit {
            if series.len() as u64 > limit {
                found.insert((
                    LiveCode::SeriesOverCap,
                    url.clone(),
                    name.to_owned(),
                    format!(
                        "{name} emits {} series, above its reported cap of {limit}",
                        series.len()
                    ),
                ));
            }
        }
    }
}

fn check_label(metric: &MetricPolicy, label: &str, url: &str, found: &mut Found) {
    let name = &metric.name.value;
    match metric
        .dimension_list()
        .iter()
        .find(|d| d.name.value == label)
    {
        None => {
            let declared: Vec<&str> = metric
                .label_dimensions()
                .map(|d| d.name.value.as_str())
                .collect();
            found.insert((
                LiveCode::UndeclaredLabel,
                url.to_owned(),
                format!("{name}.{label}"),
                format!(
                    "{name} is emitted with label `{label}`, which is not a declared dimension (declared labels: {})",
                    if declared.is_empty() { "none".to_owned() } else { declared.join(", ") }
                ),
            ));
        }
        Some(d) if !d.class().is_label() => {
            found.insert((
                LiveCode::NotALabel,
                url.to_owned(),
                format!("{name}.{label}"),
                format!(
                    "{name} is emitted with label `{label}`, declared `{}`: not a label",
                    d.class.value
                ),
            ));
        }
        Some(_) => {}
    }
}

/// A metric whose series set is capped at run time: any `bounded_*` label.
fn is_capped(metric: &MetricPolicy) -> bool {
    metric
        .dimension_list()
        .iter()
        .any(|d| d.class() == CardinalityClass::Bounded)
}

/// `cardinality.metrics.<metric>.<any bounded dimension>.limit`.
fn disclosed_limit(json: &Value, metric: &str) -> Option<u64> {
    json.pointer(&format!("/cardinality/metrics/{metric}"))?
        .as_object()?
        .values()
        .find_map(|d| d.get("limit")?.as_u64())
}

/// The text's own report when it has exactly one.
fn single_text_limit(exposition: &Exposition) -> Option<u64> {
    match exposition.reports.values().collect::<Vec<_>>().as_slice() {
        [one] => one.get("limit")?.as_u64(),
        _ => None,
    }
}

/// The series-limit settings a cardinality sentence can name.
const SPECS: [SeriesLimitSpec; 4] = [
    WORKFLOW_TASK_FAILURE_TYPES,
    PROMETHEUS_WORKFLOW_SERIES,
    PROMETHEUS_ACTIVITY_SERIES,
    PROMETHEUS_TASK_QUEUE_SERIES,
];

/// The JSON disclosure: declared metrics and dimensions, a report for every
/// bounded dimension, and no cap above its setting's hard clamp.
fn check_disclosure(policy: &Policy, url: &str, json: &Value, found: &mut Found) {
    let Some(metrics) = json
        .pointer("/cardinality/metrics")
        .and_then(Value::as_object)
    else {
        return;
    };
    for (name, dimensions) in metrics {
        let Some(metric) = policy.metric(name) else {
            found.insert((
                LiveCode::UndeclaredMetric,
                url.to_owned(),
                name.clone(),
                format!("{name} is disclosed but the policy declares no such metric"),
            ));
            continue;
        };
        let Some(dimensions) = dimensions.as_object() else {
            continue;
        };
        for (dimension, detail) in dimensions {
            let Some(declared) = metric
                .dimension_list()
                .iter()
                .find(|d| d.name.value == *dimension)
            else {
                found.insert((
                    LiveCode::UndeclaredLabel,
                    url.to_owned(),
                    format!("{name}.{dimension}"),
                    format!("{name} discloses dimension `{dimension}`, which the policy does not declare"),
                ));
                continue;
            };
            if declared.class() != CardinalityClass::Bounded {
                continue;
            }
            match detail.get("limit").and_then(Value::as_u64) {
                None => {
                    found.insert((
                        LiveCode::MissingSuppressionReport,
                        url.to_owned(),
                        name.clone(),
                        format!("{name}.{dimension} is bounded but its disclosure carries no series report (limit, reported, suppressed_series)"),
                    ));
                }
                Some(limit) => {
                    let cardinality = metric.cardinality.as_ref().map_or("", |c| c.value.as_str());
                    if let Some(spec) = SPECS.iter().find(|s| cardinality.contains(s.config_key)) {
                        if limit > spec.hard_max as u64 {
                            found.insert((
                                LiveCode::SeriesOverCap,
                                url.to_owned(),
                                name.clone(),
                                format!("{name} reports a cap of {limit}, above the hard clamp {} of {}", spec.hard_max, spec.config_key),
                            ));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
