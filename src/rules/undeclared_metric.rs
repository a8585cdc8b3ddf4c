//! ## What it does
//! Reports a metric-prefix name (`dw_*` by default) in a metric source that
//! the policy does not declare under `[metrics.*]`. Histogram and summary
//! series (`_bucket`, `_sum`, `_count`, `_created`) count as their base
//! metric.
//!
//! ## Why is this bad?
//! Each new metric can add a series per label value. Without a declared
//! surface, owner and cardinality story, a metric labelled by a user-chosen
//! value (a workflow type, a task queue) turns every new value into a new
//! series on every scrape target.
//!
//! ## Example
//! ```rust
//! counter!("dw_signal_rejections_total", "reason" => reason).increment(1);
//! ```
//! needs
//! ```toml
//! [metrics.dw_signal_rejections_total]
//! owner = "dwengine::signals::SignalAdmission"
//! surface = "GET /api/system/prometheus-metrics"
//! dimensions = { reason = "finite_rejection_reasons" }
//! cardinality = "One series per fixed rejection reason."
//! ```

use super::Context;
use crate::base::diagnostic::{Anchor, Diagnostic};

pub(super) const CODE: &str = "undeclared-metric";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    for site in &ctx.inventory.metric_uses {
        if ctx.metrics.resolve(&site.name).is_some() {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                site.name.clone(),
                format!("metric `{}` is not declared in the policy", site.name),
            )
            .at(Anchor::labeled(
                site.file.clone(),
                site.range,
                "metric named here",
            ))
            .help(format!(
                "declare [metrics.{}] with its owner, surface, dimensions and cardinality in {}",
                site.name, ctx.policy_file.display_path
            )),
        );
    }
}
