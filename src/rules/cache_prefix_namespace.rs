//! ## What it does
//! Reports a declared cache prefix that does not start with the cache
//! namespace (`settings.cache_namespace`, `server:` by default), that claims
//! the whole namespace, or that does not end in `:`.
//!
//! ## Why is this bad?
//! Coverage is prefix matching. A prefix without its closing `:` such as
//! `server:task-queue` also covers `server:task-queue-admission:`, silently
//! taking ownership of another family's keys; a prefix outside the namespace
//! is never matched by any source literal, so it reviews nothing.
//!
//! ## Example
//! ```toml
//! [cache_keys.task_queue_dispatch_counters]
//! prefix = "server:task-queue-dispatch"    # add the trailing ':'
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;

pub(super) const CODE: &str = "cache-prefix-namespace";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let findings = dwpolicy::checks::cache_prefix_namespace(ctx.policy());
    out.extend(
        findings
            .into_iter()
            .map(|f| ctx.diagnostic_for_policy_finding(CODE, f)),
    );
}
