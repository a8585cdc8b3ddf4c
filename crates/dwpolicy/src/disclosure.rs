//! Fail-closed label-set disclosures for metric payloads.
//!
//! A metric surface may describe its label policy at run time (for example
//! the `cardinality` block of `GET /api/system/metrics`) only for a metric
//! and dimensions the reviewed policy declares. Anything else is a typed
//! error, never a best-effort pass-through, so a new label cannot reach a
//! payload without first passing the gate. The policy is indexed once at
//! construction because disclosures run on every scrape.

use std::collections::HashMap;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::load::PolicyError;
use crate::model::{CardinalityClass, Policy};

/// Why a disclosure was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DisclosureError {
    /// The metric has no `[metrics.<name>]` entry.
    #[error("metric `{metric}` is not declared in the bounded-growth policy")]
    UndeclaredMetric {
        /// The metric that was asked for.
        metric: String,
    },
    /// Some disclosed dimensions are not declared for the metric.
    #[error(
        "metric `{metric}` does not declare dimension(s) {}; declared: {}",
        .dimensions.join(", "),
        if .declared.is_empty() { "none".to_string() } else { .declared.join(", ") }
    )]
    UndeclaredDimensions {
        /// The metric.
        metric: String,
        /// Every undeclared dimension, in the order they were disclosed.
        dimensions: Vec<String>,
        /// What the policy declares for the metric, in policy order.
        declared: Vec<String>,
    },
    /// The same dimension was disclosed twice, so which details apply is ambiguous.
    #[error("dimension `{dimension}` of metric `{metric}` was disclosed more than once")]
    DuplicateDimension {
        /// The metric.
        metric: String,
        /// The repeated dimension.
        dimension: String,
    },
    /// The metric declares a dimension whose class is outside the reviewed taxonomy.
    ///
    /// Only reachable with a policy that skipped review ([`crate::load::load`]
    /// rather than [`Policy::from_toml_str`]); refusing it keeps the guard
    /// fail-closed whatever the caller loaded.
    #[error("dimension `{dimension}` of metric `{metric}` has unreviewed class \"{class}\"")]
    UnreviewedClass {
        /// The metric.
        metric: String,
        /// The dimension with the bad class.
        dimension: String,
        /// The class string.
        class: String,
    },
}

struct IndexedDimension {
    name: Box<str>,
    class_name: Box<str>,
    class: CardinalityClass,
}

struct IndexedMetric {
    name: Box<str>,
    dimensions: Box<[IndexedDimension]>,
    /// Position of the first unreviewed dimension, found once at build time.
    unreviewed: Option<usize>,
}

/// An index of the policy's metrics for fast, fail-closed disclosures.
pub struct MetricGuard {
    metrics: HashMap<Box<str>, IndexedMetric>,
}

impl MetricGuard {
    /// Indexes every metric of `policy` by name.
    pub fn new(policy: &Policy) -> Self {
        let metrics = policy
            .metrics
            .iter()
            .map(|metric| {
                let dimensions: Box<[IndexedDimension]> = metric
                    .dimension_list()
                    .iter()
                    .map(|d| IndexedDimension {
                        name: d.name.value.as_str().into(),
                        class_name: d.class.value.as_str().into(),
                        class: d.class(),
                    })
                    .collect();
                let unreviewed = dimensions.iter().position(|d| !d.class.is_reviewed());
                let name: Box<str> = metric.name.value.as_str().into();
                (
                    name.clone(),
                    IndexedMetric {
                        name,
                        dimensions,
                        unreviewed,
                    },
                )
            })
            .collect();
        MetricGuard { metrics }
    }

    /// Loads a reviewed policy from text (e.g. one embedded with `include_str!`) and indexes it.
    pub fn from_toml_str(text: &str) -> Result<Self, PolicyError> {
        Policy::from_toml_str(text).map(|policy| MetricGuard::new(&policy))
    }

    /// Number of indexed metrics.
    pub fn len(&self) -> usize {
        self.metrics.len()
    }

    /// Whether the policy declares no metric at all.
    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty()
    }

    /// Whether `metric` is declared.
    pub fn is_declared(&self, metric: &str) -> bool {
        self.metrics.contains_key(metric)
    }

    /// The Prometheus label names of `metric` (its `bounded_*`/`finite_*` dimensions), in policy order.
    pub fn label_names<'g>(
        &'g self,
        metric: &str,
    ) -> Result<impl Iterator<Item = &'g str> + 'g, DisclosureError> {
        let indexed = self.lookup(metric)?;
        Ok(indexed
            .dimensions
            .iter()
            .filter(|d| d.class.is_label())
            .map(|d| &*d.name))
    }

    fn lookup(&self, metric: &str) -> Result<&IndexedMetric, DisclosureError> {
        let indexed =
            self.metrics
                .get(metric)
                .ok_or_else(|| DisclosureError::UndeclaredMetric {
                    metric: metric.to_owned(),
                })?;
        if let Some(i) = indexed.unreviewed {
            let d = &indexed.dimensions[i];
            return Err(DisclosureError::UnreviewedClass {
                metric: metric.to_owned(),
                dimension: d.name.to_string(),
                class: d.class_name.to_string(),
            });
        }
        Ok(indexed)
    }

    /// Discloses `metric`'s label-set policy, merged with run-time details.
    ///
    /// `runtime` pairs a dimension name with what the surface knows about it
    /// right now (a series limit, suppressed counts, …). The result lists
    /// *every* declared dimension in policy order with its cardinality class;
    /// a dimension that got no run-time details carries `None`. Any
    /// undeclared metric or dimension fails the whole disclosure.
    pub fn disclose<'g, 'r, D>(
        &'g self,
        metric: &str,
        runtime: impl IntoIterator<Item = (&'r str, D)>,
    ) -> Result<Disclosure<'g, D>, DisclosureError> {
        let indexed = self.lookup(metric)?;
        let mut dimensions: Vec<DisclosedDimension<'g, D>> = indexed
            .dimensions
            .iter()
            .map(|d| DisclosedDimension {
                name: &d.name,
                cardinality: &d.class_name,
                class: d.class,
                details: None,
            })
            .collect();
        let mut undeclared = Vec::new();
        for (name, details) in runtime {
            // Dimension lists are a handful long: a scan beats hashing here.
            match dimensions.iter_mut().find(|d| d.name == name) {
                Some(slot) if slot.details.is_some() => {
                    return Err(DisclosureError::DuplicateDimension {
                        metric: metric.to_owned(),
                        dimension: name.to_owned(),
                    })
                }
                Some(slot) => slot.details = Some(details),
                None => undeclared.push(name.to_owned()),
            }
        }
        if !undeclared.is_empty() {
            return Err(DisclosureError::UndeclaredDimensions {
                metric: metric.to_owned(),
                dimensions: undeclared,
                declared: indexed
                    .dimensions
                    .iter()
                    .map(|d| d.name.to_string())
                    .collect(),
            });
        }
        Ok(Disclosure {
            metric: &indexed.name,
            dimensions,
        })
    }
}

/// The disclosed label-set policy of one metric.
///
/// Serializes as a map from dimension name to
/// `{"cardinality": <class>, ...details}`, in policy order.
#[derive(Debug, Clone, PartialEq)]
pub struct Disclosure<'g, D> {
    /// The metric name.
    pub metric: &'g str,
    /// Every declared dimension, in policy order.
    pub dimensions: Vec<DisclosedDimension<'g, D>>,
}

/// One declared dimension of a [`Disclosure`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DisclosedDimension<'g, D> {
    /// The dimension name.
    #[serde(skip)]
    pub name: &'g str,
    /// The declared class string, e.g. `bounded_series`.
    pub cardinality: &'g str,
    /// The parsed class.
    #[serde(skip)]
    pub class: CardinalityClass,
    /// The run-time details, flattened next to `cardinality` when serialized.
    ///
    /// They must serialize as a struct or map and must not use the key
    /// `cardinality`, or the merged object would repeat it.
    #[serde(flatten)]
    pub details: Option<D>,
}

impl<D: Serialize> Serialize for Disclosure<'_, D> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.dimensions.len()))?;
        for dimension in &self.dimensions {
            map.serialize_entry(dimension.name, dimension)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
schema_version = 1

[metrics.dw_workflow_runs_total]
owner = "dwengine::metrics::WorkflowRunMetrics"
surface = "GET /api/system/prometheus-metrics"
dimensions = { namespace = "request_scope_not_label", task_queue = "bounded_series", workflow_type = "bounded_series" }
cardinality = "Capped by server.metrics.prometheus_workflow_series_limit."
selection = "Label sets in ascending order."
suppression = "Suppressed series are counted in the payload."

[metrics.dw_perf_errors_total]
owner = "scripts/perf/harness.py"
surface = "Perf harness /metrics"
dimensions = {}
cardinality = "No labels."
"#;

    fn guard() -> MetricGuard {
        MetricGuard::from_toml_str(POLICY).expect("test policy is reviewed")
    }

    #[test]
    fn lists_every_declared_dimension_with_merged_details() {
        let guard = guard();
        let disclosure = guard
            .disclose("dw_workflow_runs_total", [("workflow_type", 7u32)])
            .unwrap();
        let got: Vec<_> = disclosure
            .dimensions
            .iter()
            .map(|d| (d.name, d.cardinality, d.details))
            .collect();
        assert_eq!(
            got,
            [
                ("namespace", "request_scope_not_label", None),
                ("task_queue", "bounded_series", None),
                ("workflow_type", "bounded_series", Some(7)),
            ]
        );
        assert_eq!(disclosure.metric, "dw_workflow_runs_total");
    }

    #[test]
    fn refuses_undeclared_metric() {
        let error = guard()
            .disclose::<()>("dw_new_total", std::iter::empty())
            .unwrap_err();
        assert_eq!(
            error,
            DisclosureError::UndeclaredMetric {
                metric: "dw_new_total".into()
            }
        );
    }

    #[test]
    fn refuses_every_undeclared_dimension_at_once() {
        let error = guard()
            .disclose(
                "dw_workflow_runs_total",
                [("workflow_id", ()), ("task_queue", ()), ("run_id", ())],
            )
            .unwrap_err();
        let DisclosureError::UndeclaredDimensions {
            dimensions,
            declared,
            ..
        } = &error
        else {
            panic!("unexpected {error:?}");
        };
        assert_eq!(dimensions, &["workflow_id", "run_id"]);
        assert_eq!(declared, &["namespace", "task_queue", "workflow_type"]);
        assert!(error.to_string().contains("workflow_id, run_id"));
    }

    #[test]
    fn refuses_any_dimension_for_an_unlabelled_metric() {
        let error = guard()
            .disclose("dw_perf_errors_total", [("status", ())])
            .unwrap_err();
        assert!(error.to_string().contains("declared: none"), "{error}");
    }

    #[test]
    fn refuses_duplicate_dimension() {
        let error = guard()
            .disclose(
                "dw_workflow_runs_total",
                [("task_queue", 1), ("task_queue", 2)],
            )
            .unwrap_err();
        assert!(matches!(error, DisclosureError::DuplicateDimension { .. }));
    }

    #[test]
    fn refuses_unreviewed_class_from_an_unchecked_policy() {
        let text = POLICY.replace(
            "\"bounded_series\", workflow_type",
            "\"unbounded\", workflow_type",
        );
        let policy = crate::load::load(&text).unwrap();
        let error = MetricGuard::new(&policy)
            .disclose::<()>("dw_workflow_runs_total", std::iter::empty())
            .unwrap_err();
        assert_eq!(
            error,
            DisclosureError::UnreviewedClass {
                metric: "dw_workflow_runs_total".into(),
                dimension: "task_queue".into(),
                class: "unbounded".into(),
            }
        );
    }

    #[test]
    fn label_names_skip_request_scoped_dimensions() {
        let guard = guard();
        let labels: Vec<_> = guard
            .label_names("dw_workflow_runs_total")
            .unwrap()
            .collect();
        assert_eq!(labels, ["task_queue", "workflow_type"]);
        assert!(guard.label_names("dw_nope").is_err());
        assert_eq!(guard.len(), 2);
        assert!(guard.is_declared("dw_perf_errors_total") && !guard.is_empty());
    }
}
