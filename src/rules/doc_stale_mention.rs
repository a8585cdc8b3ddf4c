//! ## What it does
//! Reports a cache prefix or metric name in the operator docs that the
//! policy does not declare (a prefix counts as declared when a declared
//! prefix covers it; `_bucket`/`_sum`/`_count` series count as their metric).
//! It is a warning by default: docs may name a retired key family on
//! purpose, to tell operators it drains.
//!
//! ## Why is this bad?
//! An operator who finds a metric in the docs will build an alert on it. A
//! name that the policy no longer declares is usually a rename the docs
//! missed, and the alert silently never fires.
//!
//! ## Example
//! ```markdown
//! | dw_workflow_runs | GET /api/system/prometheus-metrics | … |
//! ```
//! while the policy declares `dw_workflow_runs_total`.

use super::Context;
use crate::base::diagnostic::{Anchor, Diagnostic};
use crate::base::line_index::LineIndex;
use crate::inventory::normalize::{cache_prefixes_in_text, Declared, Namespace};

pub(super) const CODE: &str = "doc-stale-mention";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let policy = ctx.policy();
    let declared = Declared::new(
        policy
            .cache_keys
            .iter()
            .filter_map(|c| c.prefix.as_ref().map(|p| p.value.as_str())),
    );
    let namespace = Namespace::new(&policy.settings.cache_namespace);
    for doc in &ctx.inventory.docs {
        let lines = LineIndex::new(&doc.text);
        let mut stale = |at: usize, len: usize, subject: String, message: String| {
            out.push(
                Diagnostic::new(CODE, subject, message)
                    .at(Anchor::labeled(
                        doc.rel.clone(),
                        lines.range(&doc.text, at, at + len),
                        "mentioned here",
                    ))
                    .help(
                        "update the doc to the declared name, or declare the surface in the policy",
                    ),
            );
        };
        let mut offset = 0;
        for line in doc.text.split_inclusive('\n') {
            for prefix in cache_prefixes_in_text(line, &namespace) {
                if !declared.cover(prefix) {
                    let at = offset + line.find(prefix).unwrap_or(0);
                    let message = format!(
                        "the doc names cache prefix `{prefix}`, which the policy does not declare"
                    );
                    stale(at, prefix.len(), prefix.to_owned(), message);
                }
            }
            offset += line.len();
        }
        for (at, name) in metric_tokens(&doc.text, &policy.settings.metric_prefix) {
            if ctx.metrics.resolve(name).is_none() {
                let message =
                    format!("the doc names metric `{name}`, which the policy does not declare");
                stale(at, name.len(), name.to_owned(), message);
            }
        }
    }
}

/// Metric-looking identifiers: the prefix at an identifier start, then at
/// least one `[a-z0-9_]`.
fn metric_tokens<'t>(
    text: &'t str,
    prefix: &'t str,
) -> impl Iterator<Item = (usize, &'t str)> + 't {
    let bytes = text.as_bytes();
    text.match_indices(prefix).filter_map(move |(at, _)| {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            return None;
        }
        let rest = &bytes[at + prefix.len()..];
        let len = rest
            .iter()
            .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || **b == b'_')
            .count();
        let ends_in_word = rest.get(len).is_some_and(|b| b.is_ascii_alphanumeric());
        (len > 0 && !ends_in_word).then(|| (at, &text[at..at + prefix.len() + len]))
    })
}

#[cfg(test)]
mod tests {
    use super::metric_tokens;

    #[test]
    fn metric_tokens_skip_wildcards_and_other_identifiers() {
        let text = "every dw_* metric; dw_a_total{x=\"1\"} and my_dw_b, DW_V2_LIMIT, dw_Mixed";
        let found: Vec<_> = metric_tokens(text, "dw_").map(|(_, t)| t).collect();
        assert_eq!(found, vec!["dw_a_total"]);
    }
}
