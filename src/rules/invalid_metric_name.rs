//! ## What it does
//! Reports a `[metrics.*]` key that is not `^<metric_prefix>[a-z0-9_]+$`
//! (`dw_` by default).
//!
//! ## Why is this bad?
//! The key is matched exactly against the names the code emits. A key with
//! capitals, dashes or a missing prefix can never match a Prometheus metric
//! name, so the entry is dead and the real metric goes unreviewed.
//!
//! ## Example
//! ```toml
//! [metrics.dw-workflow-runs-total]   # Prometheus names use underscores
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;

pub(super) const CODE: &str = "invalid-metric-name";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let findings = dwpolicy::checks::invalid_metric_names(ctx.policy());
    out.extend(
        findings
            .into_iter()
            .map(|f| ctx.diagnostic_for_policy_finding(CODE, f)),
    );
}
