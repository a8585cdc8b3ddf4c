//! The rules layer: the rule plumbing ([`Rule`], [`Context`], the runner),
//! the registry of `check`'s rules, and [`config`], which says which
//! severity each runs at and which codes a policy may name. A rule reads
//! the [`crate::inventory`] and the [`crate::policy`] (and [`crate::base`]);
//! commands that find other things (`evidence verify`, `live`) define their
//! codes as [`Rule::external`] above this layer, which never looks up at them.
//!
//! The rule registry.
//!
//! One file per rule. A rule file's `//!` doc comment (with `## What it
//! does`, `## Why is this bad?` and `## Example`) is the rule's only
//! documentation: `dwlint explain CODE` prints it straight from the source,
//! which is embedded at compile time, so docs and code cannot drift.

pub mod config;

use std::path::Path;
use std::sync::Mutex;

use dwpolicy::{Policy, PolicyFinding, Span};

use crate::base::diagnostic::{Anchor, Diagnostic, Severity};
use crate::inventory::{Inventory, MetricIndex};
use crate::policy::PolicyFile;

mod cache_prefix_namespace;
mod doc_missing_mention;
mod doc_stale_mention;
mod invalid_metric_name;
mod label_mismatch;
mod missing_review_field;
mod overlapping_cache_prefix;
mod parse_fallback;
mod per_run_remote_write_label;
mod uncapped_user_controlled_dimension;
mod undeclared_cache_prefix;
mod undeclared_metric;
mod undeclared_scan_limit;
mod unreadable_file;
mod unresolved_owner;
mod unreviewed_cardinality_class;
pub mod unused_allow;
mod unused_cache_policy;
mod unused_metric_policy;
mod unused_scan_limit_policy;

/// What a rule looks at, which decides whether it can be limited to
/// changed files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Findings sit in one source file and depend only on it and the policy.
    File,
    /// Findings depend on the whole tree (unused entries, docs, owners).
    Tree,
}

/// A rule: its code, default severity, documentation and check.
pub struct Rule {
    /// The stable code.
    pub code: &'static str,
    /// Severity unless configured otherwise.
    pub default_severity: Severity,
    /// Whether findings are file-local.
    pub scope: Scope,
    source: &'static str,
    check: fn(&Context, &mut Vec<Diagnostic>),
}

macro_rules! rule {
    ($module:ident, $severity:ident, $scope:ident) => {
        Rule {
            code: $module::CODE,
            default_severity: Severity::$severity,
            scope: Scope::$scope,
            source: include_str!(concat!(stringify!($module), ".rs")),
            check: $module::check,
        }
    };
}

/// Every rule, in documentation order.
pub static RULES: &[Rule] = &[
    rule!(undeclared_cache_prefix, Error, File),
    rule!(unused_cache_policy, Error, Tree),
    rule!(undeclared_metric, Error, File),
    rule!(unused_metric_policy, Error, Tree),
    rule!(label_mismatch, Error, File),
    rule!(undeclared_scan_limit, Error, File),
    rule!(unused_scan_limit_policy, Error, Tree),
    rule!(missing_review_field, Error, Tree),
    rule!(cache_prefix_namespace, Error, Tree),
    rule!(invalid_metric_name, Error, Tree),
    rule!(unreviewed_cardinality_class, Error, Tree),
    rule!(uncapped_user_controlled_dimension, Error, Tree),
    rule!(unresolved_owner, Error, Tree),
    rule!(overlapping_cache_prefix, Error, Tree),
    rule!(doc_missing_mention, Error, Tree),
    rule!(doc_stale_mention, Warning, Tree),
    rule!(per_run_remote_write_label, Error, File),
    rule!(parse_fallback, Warning, File),
    rule!(unreadable_file, Warning, File),
    rule!(unused_allow, Warning, Tree),
];

impl Rule {
    /// What `dwlint explain CODE` prints, and what `docs/rules/CODE.md` holds.
    pub fn explanation(&self) -> String {
        format!(
            "# {}\n\nDefault severity: {}\n\n{}",
            self.code,
            self.default_severity.as_str(),
            self.doc()
        )
    }

    /// Where the rule's documentation is published: `docs/rules/CODE.md` at
    /// this version's tag of the repository (SARIF `helpUri`).
    pub fn help_uri(&self) -> String {
        format!(
            "{}/blob/v{}/docs/rules/{}.md",
            env!("CARGO_PKG_REPOSITORY"),
            env!("CARGO_PKG_VERSION"),
            self.code
        )
    }

    /// A rule that `check` never runs: its findings come from another
    /// command (`evidence verify`, `live`), which still needs a [`Rule`] for
    /// the reporters' rule metadata. `source` is `//!` Markdown like a rule
    /// file's head.
    pub const fn external(code: &'static str, source: &'static str) -> Rule {
        Rule {
            code,
            default_severity: Severity::Error,
            scope: Scope::Tree,
            source,
            check: |_, _| {},
        }
    }

    /// The rule's documentation: its source file's `//!` comment as Markdown.
    pub fn doc(&self) -> String {
        let mut doc = String::new();
        for line in self.source.lines() {
            let Some(text) = line.strip_prefix("//!") else {
                break;
            };
            doc.push_str(text.strip_prefix(' ').unwrap_or(text));
            doc.push('\n');
        }
        doc
    }

    /// The first sentence under `## What it does`.
    pub fn summary(&self) -> String {
        let doc = self.doc();
        let body = doc
            .split("## What it does")
            .nth(1)
            .unwrap_or(&doc)
            .split("\n## ")
            .next()
            .unwrap_or_default();
        let text = body.split_whitespace().collect::<Vec<_>>().join(" ");
        match text.find(". ") {
            Some(end) => text[..=end].to_owned(),
            None => text,
        }
    }
}

/// The rule with `code`.
pub fn find(code: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.code == code)
}

/// The known code closest to `code`, for "did you mean" hints.
pub fn closest_code(code: &str) -> Option<&'static str> {
    let codes: Vec<&'static str> = RULES.iter().map(|r| r.code).collect();
    dwpolicy::load::nearest(code, &codes)
}

/// What every rule may look at.
pub struct Context<'a> {
    /// The checked root.
    pub root: &'a Path,
    /// The policy and its text.
    pub policy_file: &'a PolicyFile,
    /// What the tree contains.
    pub inventory: &'a Inventory,
    /// The policy's metrics by name.
    pub metrics: MetricIndex<'a>,
}

impl<'a> Context<'a> {
    /// A context over a policy and an inventory.
    pub fn new(root: &'a Path, policy_file: &'a PolicyFile, inventory: &'a Inventory) -> Self {
        Context {
            root,
            policy_file,
            inventory,
            metrics: MetricIndex::new(&policy_file.policy),
        }
    }

    /// The policy model.
    pub fn policy(&self) -> &Policy {
        &self.policy_file.policy
    }

    /// An anchor into the policy file.
    pub fn in_policy(&self, span: Span, label: impl Into<String>) -> Anchor {
        self.policy_file.anchor(span, label)
    }

    /// A diagnostic for a finding of a policy-only check from `dwpolicy`.
    fn diagnostic_for_policy_finding(
        &self,
        code: &'static str,
        finding: PolicyFinding,
    ) -> Diagnostic {
        let mut diagnostic = Diagnostic::new(code, finding.subject, finding.message)
            .at(self.in_policy(finding.span, "here"));
        if let Some((span, label)) = finding.related {
            diagnostic = diagnostic.related(self.in_policy(span, label));
        }
        diagnostic.help = finding.help;
        diagnostic
    }
}

/// Runs `rules` and returns their findings with severities applied, sorted.
///
/// The rules only read the context, so they run on two threads: this one
/// takes rules from the front of [`RULES`], a second one from the back,
/// until they meet (the slowest rules on a large policy, the doc checks and
/// owner resolution, sit at opposite ends). Findings are put back in
/// [`RULES`] order before the sort, so the report is the same as from one
/// thread.
pub fn run(ctx: &Context, severity_of: impl Fn(&Rule) -> Option<Severity>) -> Vec<Diagnostic> {
    let enabled: Vec<(&Rule, Severity)> = RULES
        .iter()
        .filter_map(|rule| Some((rule, severity_of(rule)?)))
        .collect();
    // The next rule from the front, and one past the next from the back.
    let ends = Mutex::new((0, enabled.len()));
    let take = |from_front: bool| {
        let mut ends = ends.lock().unwrap_or_else(|e| e.into_inner());
        let (front, back) = &mut *ends;
        if front == back {
            return None;
        }
        if from_front {
            *front += 1;
            Some(*front - 1)
        } else {
            *back -= 1;
            Some(*back)
        }
    };
    let run_from = |from_front: bool| {
        let mut done = Vec::new();
        while let Some(i) = take(from_front) {
            let (rule, severity) = enabled[i];
            let mut found = Vec::new();
            (rule.check)(ctx, &mut found);
            for diagnostic in &mut found {
                debug_assert_eq!(diagnostic.code, rule.code);
                diagnostic.severity = severity;
            }
            done.push((i, found));
        }
        done
    };
    let mut done = std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("dwlint-rules".into())
            .spawn_scoped(scope, || run_from(false));
        let mut done = run_from(true);
        if let Ok(helper) = helper {
            match helper.join() {
                Ok(theirs) => done.extend(theirs),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    });
    done.sort_by_key(|(i, _)| *i);
    let mut all: Vec<Diagnostic> = done.into_iter().flat_map(|(_, found)| found).collect();
    all.sort_by_cached_key(|d| d.sort_key());
    all
}
