//! ## What it does
//! Reports an inline allow that allows nothing: one that matches no
//! finding (the finding was fixed, the code is misspelt, or the allow sits
//! on the wrong line), or one without a reason, which is not honoured.
//!
//! An inline allow is a comment in a checked source or doc file, in the
//! file's own comment syntax:
//!
//! ```text
//! // dwlint: allow(undeclared-metric) -- emitted by the vendored exporter, not ours
//! # dwlint: allow(undeclared-cache-prefix, label-mismatch) -- removed with the v1 API
//! <!-- dwlint: allow(doc-stale-mention) -- the old name, kept for the changelog -->
//! ```
//!
//! It accepts the findings of the codes it names whose location is on its
//! line or the line below it, and they are not reported. The reason after
//! ` -- ` is required. Unused allows are looked for in a whole-tree run
//! only: with `--changed-since` or FILES the findings of the other files are
//! not computed.
//!
//! ## Why is this bad?
//! An allow that matches nothing hides the next finding someone brings to
//! that line, with a reason written for another one; an allow without a
//! reason accepts a finding no reviewer can judge.
//!
//! ## Example
//! ```text
//! // dwlint: allow(undeclared-cache-prefix)           // no reason: not honoured
//! let key = format!("server:legacy-hint:{queue}");
//! // dwlint: allow(undeclared-metric) -- old exporter // nothing on this line or the next
//! ```

use std::collections::HashMap;

use crate::base::diagnostic::{Anchor, Diagnostic, Severity};
use crate::scan::allows::InlineAllow;

use super::Context;

pub const CODE: &str = "unused-allow";

/// Nothing to do while the rules run: whether an allow is used depends on
/// every other rule's findings, so [`apply`] runs after them.
pub(super) fn check(_ctx: &Context, _out: &mut Vec<Diagnostic>) {}

/// Leaves out of `diagnostics` the findings an allow with a reason
/// accepts, then, when `report_unused` (a whole-tree run) and `severity`
/// is set, adds a finding for each allow that accepted nothing.
pub fn apply(
    diagnostics: &mut Vec<Diagnostic>,
    allows: &[InlineAllow],
    severity: Option<Severity>,
    report_unused: bool,
) {
    if allows.is_empty() {
        return;
    }
    // An allow applies to its own line and the one below it.
    let mut by_line: HashMap<(&str, usize), Vec<usize>> = HashMap::new();
    for (i, allow) in allows.iter().enumerate() {
        if allow.reason.is_some() {
            for line in [allow.range.line, allow.range.line + 1] {
                by_line
                    .entry((allow.file.as_str(), line))
                    .or_default()
                    .push(i);
            }
        }
    }
    let mut used = vec![false; allows.len()];
    diagnostics.retain(|d| {
        let Some(anchor) = &d.primary else {
            return true;
        };
        let Some(candidates) = by_line.get(&(anchor.file.as_str(), anchor.range.line)) else {
            return true;
        };
        let mut accepted = false;
        for &i in candidates {
            if allows[i].codes.iter().any(|c| c == d.code) {
                used[i] = true;
                accepted = true;
            }
        }
        !accepted
    });
    let (Some(severity), true) = (severity, report_unused) else {
        return;
    };
    for (allow, used) in allows.iter().zip(used) {
        if used {
            continue;
        }
        let codes = allow.codes.join(", ");
        let (message, help) = if allow.reason.is_none() {
            (
                format!("`dwlint: allow({codes})` gives no reason, so it allows nothing"),
                "say why after ` -- `: `dwlint: allow(CODE) -- why this finding is accepted`"
                    .to_owned(),
            )
        } else {
            let unknown: Vec<String> = allow
                .codes
                .iter()
                .filter(|c| {
                    super::find(c).is_none()
                        && !c.starts_with("live-")
                        && !c.starts_with("evidence-")
                })
                .map(|c| match super::closest_code(c) {
                    Some(near) => format!("`{c}` is no rule code (did you mean `{near}`?)"),
                    None => format!("`{c}` is no rule code"),
                })
                .collect();
            let help = if unknown.is_empty() {
                "remove the allow (its finding is gone), or move it onto the finding's line or the line above".to_owned()
            } else {
                unknown.join("; ")
            };
            (
                format!("`dwlint: allow({codes})` matches no finding on its line or the next"),
                help,
            )
        };
        let mut finding = Diagnostic::new(
            CODE,
            format!("{}:{}", allow.file, allow.range.line),
            message,
        )
        .at(Anchor::labeled(
            allow.file.clone(),
            allow.range,
            "allow here",
        ))
        .help(help);
        finding.severity = severity;
        diagnostics.push(finding);
    }
    diagnostics.sort_by_cached_key(|d| d.sort_key());
}
