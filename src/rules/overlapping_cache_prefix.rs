//! ## What it does
//! Reports a declared cache prefix that starts with another declared prefix
//! (or repeats it).
//!
//! ## Why is this bad?
//! Coverage is by prefix, so a key under the longer prefix is covered by both
//! entries. Which TTL, bound and eviction apply is then ambiguous, and the
//! per-policy key counts of a soak double-count the same keys.
//!
//! ## Example
//! ```toml
//! [cache_keys.workflow_query_tasks]
//! prefix = "server:workflow-query-task:"
//! [cache_keys.query_task_leases]
//! prefix = "server:workflow-query-task:lease:"   # already covered above
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;

pub(super) const CODE: &str = "overlapping-cache-prefix";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let findings = dwpolicy::checks::overlapping_cache_prefixes(ctx.policy());
    out.extend(
        findings
            .into_iter()
            .map(|f| ctx.diagnostic_for_policy_finding(CODE, f)),
    );
}
