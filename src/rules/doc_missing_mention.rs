//! ## What it does
//! Reports a declared policy ID, cache prefix, metric name, scan-limit ID or
//! scan-limit config key that the operator docs (`[sources].docs`) do not
//! mention anywhere, and a docs glob that matches no file. A mention is the
//! exact text, not part of a longer identifier.
//!
//! ## Why is this bad?
//! Operators read the docs, not the policy file, when a cache or a scrape
//! grows. A surface missing from the inventory they read is a surface they
//! will not look at, and the per-policy soak limits are keyed by these IDs.
//!
//! ## Example
//! ```toml
//! [cache_keys.readiness_probe]
//! prefix = "server:readiness:"
//! ```
//! passes only when `docs/bounded-growth.md` mentions both `readiness_probe`
//! and `server:readiness:`, typically as a row of its Cache Inventory table.

use super::Context;
use crate::diagnostic::Diagnostic;
use dwpolicy::Spanned;

pub(super) const CODE: &str = "doc-missing-mention";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let policy = ctx.policy();
    for glob in &policy.sources.docs {
        let pattern = glob.value.trim_start_matches("./");
        let matched = globset::Glob::new(pattern)
            .map(|g| g.compile_matcher())
            .is_ok_and(|m| ctx.inventory.docs.iter().any(|d| m.is_match(&d.rel)));
        if !matched {
            out.push(
                Diagnostic::new(
                    CODE,
                    glob.value.clone(),
                    format!("docs glob `{}` matches no file", glob.value),
                )
                .at(ctx.in_policy(glob.span, "matches nothing"))
                .help("fix the glob or add the operator doc"),
            );
        }
    }
    if ctx.inventory.docs.is_empty() {
        return;
    }
    let mut wanted: Vec<(&Spanned<String>, &str)> = Vec::new();
    for entry in &policy.cache_keys {
        wanted.push((&entry.id, "policy ID"));
        wanted.extend(entry.prefix.iter().map(|p| (p, "cache prefix")));
    }
    for entry in &policy.scan_limits {
        wanted.push((&entry.id, "scan-limit ID"));
        wanted.extend(entry.config_key.iter().map(|k| (k, "config key")));
    }
    for metric in &policy.metrics {
        wanted.push((&metric.name, "metric"));
    }
    let doc_names = ctx
        .inventory
        .docs
        .iter()
        .map(|d| d.rel.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    for (mention, kind) in wanted {
        if mention.value.trim().is_empty()
            || ctx
                .inventory
                .docs
                .iter()
                .any(|d| mentions(&d.text, &mention.value))
        {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                mention.value.clone(),
                format!("{kind} `{}` is not mentioned in {doc_names}", mention.value),
            )
            .at(ctx.in_policy(mention.span, "declared here"))
            .help(format!(
                "add `{}` to the operator docs (its inventory table)",
                mention.value
            )),
        );
    }
}

/// Whether `text` contains `needle` as a whole identifier.
pub(super) fn mentions(text: &str, needle: &str) -> bool {
    let is_ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        let ends_open = needle.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        !is_ident(before) && (!ends_open || !is_ident(after))
    })
}

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn a_mention_is_a_whole_identifier() {
        assert!(mentions("| dw_x | GET |", "dw_x"));
        assert!(mentions("`dw_x`.", "dw_x"));
        assert!(!mentions("dw_x_total", "dw_x"));
        assert!(!mentions("my_dw_x", "dw_x"));
        assert!(mentions("server:a:b", "server:a:"));
    }
}
