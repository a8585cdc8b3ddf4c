//! ## What it does
//! Reports a metric dimension whose cardinality class is outside the
//! reviewed taxonomy: `bounded_*` and `finite_*` (label classes),
//! `request_scope_*` and `*_no_label` (not labels).
//!
//! ## Why is this bad?
//! An ad hoc class such as `"small"` or `"unbounded"` says nothing the gate
//! can enforce: it does not say whether the dimension is a label, nor how its
//! series are capped. The taxonomy makes every new dimension choose, even one
//! that is not on the user-controlled list.
//!
//! ## Example
//! ```toml
//! [metrics.dw_activity_executions_total]
//! dimensions = { activity_type = "per_type" }   # use bounded_series, and cap it
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;

pub(super) const CODE: &str = "unreviewed-cardinality-class";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let findings = dwpolicy::checks::unreviewed_cardinality_classes(ctx.policy());
    out.extend(
        findings
            .into_iter()
            .map(|f| ctx.diagnostic_for_policy_finding(CODE, f)),
    );
}
