//! ## What it does
//! Reports a declared `[cache_keys.*]` prefix that no literal in the cache
//! sources uses: no normalized source prefix starts with it.
//!
//! ## Why is this bad?
//! A policy entry that describes code which no longer exists is a review
//! that reviews nothing. Worse, a broad stale prefix can later cover a new,
//! unrelated key family and wave it through the gate without a review.
//!
//! ## Example
//! ```toml
//! [cache_keys.long_poll_wait_slots]
//! prefix = "server:long-poll-wait-slot:"   # wait slots moved to local files
//! ```
//! Remove the entry (and its doc mention) in the change that removes the keys.

use super::Context;
use crate::base::diagnostic::Diagnostic;
use crate::inventory::normalize::Used;

pub(super) const CODE: &str = "unused-cache-policy";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let used = Used::new(ctx.inventory.cache_uses.iter().map(|u| u.prefix.as_str()));
    for entry in &ctx.policy().cache_keys {
        let Some(prefix) = &entry.prefix else {
            continue;
        };
        if prefix.value.is_empty() || used.covered_by(&prefix.value) {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                entry.id.value.clone(),
                format!("`{}` declares prefix `{}`, but no cache source uses it", entry.id.value, prefix.value),
            )
            .at(ctx.in_policy(prefix.span, "declared here, used nowhere"))
            .help("remove the entry, or check that [sources].cache covers the code that builds these keys"),
        );
    }
}
