//! ## What it does
//! Reports a policy `owner` that names nothing in the tree. An owner is
//! either a Rust path to an item defined in the scanned sources (struct,
//! enum, union, trait, type alias, fn, const, static, mod or macro, keyed by
//! crate name and module path, inline `mod` blocks included) or a path,
//! relative to the checked root, of a file that exists.
//!
//! ## Why is this bad?
//! The owner is who answers for the surface's bound. An owner that was
//! renamed or deleted leaves the surface orphaned, and reviewers cannot find
//! the code that enforces the TTL or cap the entry promises.
//!
//! ## Example
//! ```toml
//! [cache_keys.long_poll_signals]
//! owner = "dwengine::polling::LongPollSignals"   # the type is LongPollSignalStore
//! ```

use super::Context;
use crate::diagnostic::Diagnostic;
use dwpolicy::Spanned;

pub(super) const CODE: &str = "unresolved-owner";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let policy = ctx.policy();
    let owners = policy
        .cache_keys
        .iter()
        .map(|c| (&c.id, &c.owner))
        .chain(policy.scan_limits.iter().map(|s| (&s.id, &s.owner)))
        .chain(policy.metrics.iter().map(|m| (&m.name, &m.owner)));
    for (id, owner) in owners {
        let Some(owner) = owner else { continue };
        if owner.value.trim().is_empty() || resolves(ctx, owner) {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                id.value.clone(),
                format!("owner `{}` of `{}` names nothing in the tree", owner.value, id.value),
            )
            .at(ctx.in_policy(owner.span, "not found"))
            .help("use the item's full path (crate::module::Type) or a file path relative to the checked root"),
        );
    }
}

fn resolves(ctx: &Context, owner: &Spanned<String>) -> bool {
    let owner = owner.value.trim();
    let as_path = owner.trim_start_matches("crate::").trim_start_matches("::");
    ctx.inventory.items.contains(as_path) || is_tree_file(ctx, owner)
}

fn is_tree_file(ctx: &Context, owner: &str) -> bool {
    let relative = std::path::Path::new(owner);
    !owner.contains("::")
        && relative.is_relative()
        && !relative
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        && ctx.root.join(relative).is_file()
}
