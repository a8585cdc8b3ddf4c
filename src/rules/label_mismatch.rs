//! ## What it does
//! Compares the labels a declared metric is emitted with against its
//! declared dimensions. Every dimension with a label class (`bounded_*`,
//! `finite_*`) must be emitted and nothing else may be: an undeclared label
//! and a dimension declared `request_scope_*` or `*_no_label` that is emitted
//! as a label are both findings, as is a declared label that an emission site
//! leaves out. Dimensions with an unreviewed class are left to
//! `unreviewed-cardinality-class`. Sites whose labels are built at run time are not judged, and
//! an undeclared metric gets `undeclared-metric` only. Prometheus's own `le`
//! and `quantile` labels on derived series are ignored.
//!
//! ## Why is this bad?
//! The label set *is* the cardinality. Adding a label multiplies the series
//! count by the number of values it takes; emitting a request-scoped value
//! such as a namespace as a label turns a bounded surface into one that
//! grows with every tenant. The policy's dimensions are the reviewed label
//! set, so the code must match them exactly.
//!
//! ## Example
//! ```toml
//! [metrics.dw_workflow_runs_total]
//! dimensions = { namespace = "request_scope_not_label", task_queue = "bounded_series" }
//! ```
//! ```rust
//! // namespace is request-scoped: it must not become a label.
//! counter!("dw_workflow_runs_total", "namespace" => ns, "task_queue" => q).increment(1);
//! ```

use std::collections::BTreeSet;

use super::Context;
use crate::base::diagnostic::{Anchor, Diagnostic};
use crate::inventory::IMPLICIT_LABELS;

pub(super) const CODE: &str = "label-mismatch";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    for site in &ctx.inventory.metric_uses {
        let Some(labels) = &site.labels else { continue };
        let Some(metric) = ctx.metrics.resolve(&site.name) else {
            continue;
        };
        let name = &metric.name.value;
        let declared_here = || {
            let span = metric
                .dimensions
                .as_ref()
                .map_or(metric.name.span, |d| d.span);
            ctx.in_policy(span, "dimensions declared here")
        };
        let mut emitted = BTreeSet::new();
        for label in labels {
            if IMPLICIT_LABELS.contains(&label.name.as_str())
                || !emitted.insert(label.name.as_str())
            {
                continue;
            }
            let declared = metric
                .dimension_list()
                .iter()
                .find(|d| d.name.value == label.name);
            let message = match declared {
                // An unreviewed class is reported by unreviewed-cardinality-class;
                // whether it is a label is exactly what it has not decided.
                Some(d) if d.class().is_label() || !d.class().is_reviewed() => continue,
                Some(d) => format!(
                    "`{}` is emitted as a label of `{name}`, but its class \"{}\" says it is not a label",
                    label.name, d.class.value
                ),
                None => format!("`{name}` is emitted with label `{}`, which the policy does not declare", label.name),
            };
            out.push(
                Diagnostic::new(CODE, format!("{name}.{}", label.name), message)
                    .at(Anchor::labeled(site.file.clone(), label.range, "label emitted here"))
                    .related(declared_here())
                    .help(match declared {
                        Some(_) => "keep request-scoped values in the payload or request envelope, not in labels".to_owned(),
                        None => format!(
                            "declare `{}` under [metrics.{name}].dimensions with a bounded_* or finite_* class, or stop emitting it",
                            label.name
                        ),
                    }),
            );
        }
        for dimension in metric.label_dimensions() {
            if emitted.contains(dimension.name.value.as_str()) {
                continue;
            }
            out.push(
                Diagnostic::new(
                    CODE,
                    format!("{name}.{}", dimension.name.value),
                    format!(
                        "`{name}` is emitted here without its declared label `{}`",
                        dimension.name.value
                    ),
                )
                .at(Anchor::labeled(
                    site.file.clone(),
                    site.range,
                    "emitted here",
                ))
                .related(ctx.in_policy(dimension.name.span, "declared as a label here"))
                .help(
                    "emit every declared label dimension, or change the policy in the same change",
                ),
            );
        }
    }
}
