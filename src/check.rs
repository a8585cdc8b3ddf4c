//! `dwlint check`: policy → tree walk → extraction → inventory → rules.

use std::path::PathBuf;

use crate::diagnostic::{Diagnostic, Severity};
use crate::error::RunError;
use crate::extract::ExtractConfig;
use crate::inventory::Inventory;
use crate::policy_file::PolicyFile;
use crate::rules::{self, Context, Rule};
use crate::scan;
use crate::walk;

/// What to check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Root of the tree; every glob and repo-relative path is relative to it.
    pub root: PathBuf,
    /// Policy file; defaults to `ROOT/policy/dw-bounded-growth.toml`.
    pub policy: Option<PathBuf>,
}

/// The outcome of a completed check.
#[derive(Debug)]
pub struct CheckReport {
    /// Findings in report order.
    pub diagnostics: Vec<Diagnostic>,
    /// How many files the policy selected.
    pub files_scanned: usize,
    /// The policy file, as shown in findings.
    pub policy_path: String,
    /// The checked root.
    pub root: PathBuf,
}

impl CheckReport {
    /// Number of findings at `severity`.
    pub fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }

    /// Whether the run should fail (exit 1).
    pub fn has_errors(&self) -> bool {
        self.count(Severity::Error) > 0
    }
}

/// Runs the gate.
pub fn check(options: &CheckOptions) -> Result<CheckReport, RunError> {
    let root = options.root.as_path();
    if !root.is_dir() {
        return Err(RunError::NoSuchPath(root.to_path_buf()));
    }
    let policy_file = PolicyFile::load(root, options.policy.as_deref())?;
    let policy = &policy_file.policy;
    let files = walk::select_files(root, &policy_file)?;
    let config = ExtractConfig {
        cache_namespace: policy.settings.cache_namespace.clone(),
        metric_prefix: policy.settings.metric_prefix.clone(),
    };
    let output = scan::scan(root, &files, &config, &owner_names(&policy_file));
    let inventory = Inventory::build(output, policy);
    let ctx = Context::new(root, &policy_file, &inventory);
    let diagnostics = rules::run(&ctx, |rule| configured_severity(&policy_file, rule));
    Ok(CheckReport {
        diagnostics,
        files_scanned: inventory.files_scanned,
        policy_path: policy_file.display_path.clone(),
        root: root.to_path_buf(),
    })
}

/// The severity `[rules]` gives a rule, or its default; `None` = allowed.
fn configured_severity(policy_file: &PolicyFile, rule: &Rule) -> Option<Severity> {
    let level = policy_file
        .policy
        .rules
        .iter()
        .rev()
        .find(|(code, _)| code.value == rule.code)
        .map(|(_, level)| level.value.as_str());
    match level {
        Some("allow") => None,
        Some("warn") => Some(Severity::Warning),
        Some("error") => Some(Severity::Error),
        _ => Some(rule.default_severity),
    }
}

/// The last path segment of every owner, so the prefilter also parses the
/// files that define owners but build no keys.
fn owner_names(policy_file: &PolicyFile) -> Vec<String> {
    let policy = &policy_file.policy;
    let owners = policy
        .cache_keys
        .iter()
        .filter_map(|c| c.owner.as_ref())
        .chain(policy.scan_limits.iter().filter_map(|s| s.owner.as_ref()))
        .chain(policy.metrics.iter().filter_map(|m| m.owner.as_ref()));
    let mut names: Vec<String> = owners
        .filter(|o| o.value.contains("::"))
        .filter_map(|o| o.value.rsplit("::").next().map(str::to_owned))
        .filter(|name| !name.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}
