//! ## What it does
//! Reports a declared `[metrics.*]` entry whose name no metric source
//! mentions (directly or through its `_bucket`/`_sum`/`_count` series).
//!
//! ## Why is this bad?
//! Dashboards and alerts are written against the policy's inventory. A
//! declared metric that nothing emits is an alert that can never fire, and a
//! stale declaration hides the rename that broke it.
//!
//! ## Example
//! ```toml
//! [metrics.dw_workflow_runs_total]   # but the code now emits dw_workflow_runs
//! ```
//! Rename the entry together with the code, or remove it.

use foldhash::HashSet;

use super::Context;
use crate::base::diagnostic::Diagnostic;

pub(super) const CODE: &str = "unused-metric-policy";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let used: HashSet<&str> = ctx
        .inventory
        .metric_uses
        .iter()
        .filter_map(|site| ctx.metrics.resolve(&site.name))
        .map(|m| m.name.value.as_str())
        .collect();
    for metric in &ctx.policy().metrics {
        if used.contains(metric.name.value.as_str()) {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                metric.name.value.clone(),
                format!(
                    "metric `{}` is declared but no metric source mentions it",
                    metric.name.value
                ),
            )
            .at(ctx.in_policy(metric.name.span, "declared here, emitted nowhere"))
            .help(
                "remove the entry, or check that [sources].metrics covers the code that emits it",
            ),
        );
    }
}
