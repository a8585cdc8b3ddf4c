//! ## What it does
//! Reports a `*_scan_limit` configuration key read in a cache or metric
//! source that no `[scan_limits.*]` entry declares as its `config_key`
//! (matching the whole dotted key, or its dotted tail).
//!
//! ## Why is this bad?
//! Recovery scans on the worker-poll path run on every poll. A scan whose
//! limit is not declared has no reviewed default and no documented bound, so
//! an old backlog can turn each poll into a long table scan.
//!
//! ## Example
//! ```rust
//! let limit = config.get("server.polling.stale_lease_scan_limit").unwrap_or(5);
//! ```
//! needs
//! ```toml
//! [scan_limits.stale_lease_recovery]
//! owner = "dwengine::polling::WorkflowTaskPoller"
//! config_key = "server.polling.stale_lease_scan_limit"
//! default = 5
//! bound = "At most 5 stale leases per poll pass."
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;
use crate::inventory::config_key_matches;

pub(super) const CODE: &str = "undeclared-scan-limit";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let declared: Vec<&str> = ctx
        .policy()
        .scan_limits
        .iter()
        .filter_map(|s| s.config_key.as_ref().map(|k| k.value.as_str()))
        .collect();
    for usage in &ctx.inventory.scan_keys {
        if declared.iter().any(|d| config_key_matches(d, &usage.key)) {
            continue;
        }
        out.push(
            Diagnostic::new(CODE, usage.key.clone(), format!("scan limit `{}` is not declared in the policy", usage.key))
                .at(usage.anchor.clone())
                .help("declare a [scan_limits.<id>] entry with this config_key, its default and its bound"),
        );
    }
}
