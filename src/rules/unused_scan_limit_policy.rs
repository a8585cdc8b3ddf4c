//! ## What it does
//! Reports a `[scan_limits.*]` entry whose `config_key` no cache or metric
//! source reads.
//!
//! ## Why is this bad?
//! A declared limit that the code does not read is not a limit: the scan it
//! describes either no longer exists or ignores its configuration, and the
//! documented bound is false either way.
//!
//! ## Example
//! ```toml
//! [scan_limits.due_timer_recovery]
//! config_key = "server.polling.due_timer_recovery_scan_limit"
//! ```
//! while the poller reads `due_timer_scan_limit`: rename one to match.

use super::Context;
use crate::base::diagnostic::Diagnostic;
use crate::inventory::config_key_matches;

pub(super) const CODE: &str = "unused-scan-limit-policy";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    for entry in &ctx.policy().scan_limits {
        let Some(key) = &entry.config_key else {
            continue;
        };
        if key.value.trim().is_empty()
            || ctx
                .inventory
                .scan_keys
                .iter()
                .any(|u| config_key_matches(&key.value, &u.key))
        {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                entry.id.value.clone(),
                format!(
                    "`{}` declares config key `{}`, but no source reads it",
                    entry.id.value, key.value
                ),
            )
            .at(ctx.in_policy(key.span, "declared here, read nowhere"))
            .help("remove the entry, or make the scan read its limit from this key"),
        );
    }
}
