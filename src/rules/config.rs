//! Which severity each rule runs at: its default, then the policy's
//! `[rules]` table, then the command line's `-A/-W/-D CODE`; and which
//! codes those may name, so a policy is loaded through [`load_policy`].
//!
//! The command line wins because it is the narrower, more deliberate choice
//! (one CI job or one developer), while the policy speaks for the whole
//! repository. Among flags the last one for a code wins, as with rustc, and
//! the pseudo-code `warnings` acts on whatever ends up a warning, so
//! `-W some-rule -D warnings` still fails the run on `some-rule`.

use std::path::Path;

use dwpolicy::{LoadError, Policy};

use crate::base::diagnostic::Severity;
use crate::base::error::RunError;
use crate::policy::PolicyFile;
use crate::rules::{self, Rule};

/// The pseudo-code that stands for every warning-level finding.
pub const WARNINGS: &str = "warnings";

/// A level a rule can be set to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Not run, not reported.
    Allow,
    /// Reported, does not fail the run.
    Warn,
    /// Fails the run.
    Deny,
}

impl Level {
    /// The level a `[rules]` value names (`allow`, `warn`, `error`).
    pub fn from_policy(value: &str) -> Option<Level> {
        match value {
            "allow" => Some(Level::Allow),
            "warn" => Some(Level::Warn),
            "error" => Some(Level::Deny),
            _ => None,
        }
    }

    fn apply(self) -> Option<Severity> {
        match self {
            Level::Allow => None,
            Level::Warn => Some(Severity::Warning),
            Level::Deny => Some(Severity::Error),
        }
    }
}

/// Command-line overrides, in command-line order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    entries: Vec<(Level, String)>,
}

impl Overrides {
    /// Overrides from `(level, code)` pairs in the order they were given;
    /// an unknown code is an error that names the closest known one.
    pub fn new(entries: Vec<(Level, String)>) -> Result<Overrides, RunError> {
        for (_, code) in &entries {
            if code != WARNINGS && rules::find(code).is_none() {
                return Err(RunError::UnknownRule {
                    code: code.clone(),
                    suggestion: rules::closest_code(code).map(str::to_owned),
                });
            }
        }
        Ok(Overrides { entries })
    }

    fn last_for(&self, code: &str) -> Option<Level> {
        self.entries
            .iter()
            .rev()
            .find(|(_, c)| c == code)
            .map(|(level, _)| *level)
    }

    /// The severity `rule` runs at, given the policy's level for it;
    /// `None` means the rule is allowed (not run).
    pub fn resolve(&self, rule: &Rule, policy: Option<Level>) -> Option<Severity> {
        let mut severity = Some(rule.default_severity);
        if let Some(level) = policy {
            severity = level.apply();
        }
        if let Some(level) = self.last_for(rule.code) {
            severity = level.apply();
        }
        match (severity, self.last_for(WARNINGS)) {
            (Some(Severity::Warning), Some(Level::Deny)) => Some(Severity::Error),
            (Some(Severity::Warning), Some(Level::Allow)) => None,
            (severity, _) => severity,
        }
    }
}

/// Loads the policy as [`PolicyFile::load`] does, then checks that its
/// `[rules]` table names only known codes: every problem is one
/// [`RunError::PolicyInvalid`], as the policy's own are.
pub fn load_policy(root: &Path, path: Option<&Path>) -> Result<PolicyFile, RunError> {
    known_codes_only(PolicyFile::load(root, path)?)
}

/// [`load_policy`] for a policy held in memory ([`PolicyFile::from_text`]).
pub fn policy_from_text(display_path: String, text: String) -> Result<PolicyFile, RunError> {
    known_codes_only(PolicyFile::from_text(display_path, text)?)
}

fn known_codes_only(policy_file: PolicyFile) -> Result<PolicyFile, RunError> {
    let unknown_codes = unknown_rule_codes(&policy_file.policy);
    if unknown_codes.is_empty() {
        return Ok(policy_file);
    }
    Err(RunError::PolicyInvalid {
        path: policy_file.display_path,
        text: policy_file.text,
        errors: unknown_codes,
    })
}

fn unknown_rule_codes(policy: &Policy) -> Vec<LoadError> {
    policy
        .rules
        .iter()
        .filter(|(code, _)| rules::find(&code.value).is_none())
        .map(|(code, _)| LoadError {
            message: format!("unknown rule code `{}` in [rules]", code.value),
            span: Some(code.span),
            help: Some(match rules::closest_code(&code.value) {
                Some(near) => format!("did you mean `{near}`? `dwlint rules` lists every code"),
                None => "`dwlint rules` lists every code".into(),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(code: &str) -> &'static Rule {
        rules::find(code).unwrap()
    }

    fn overrides(entries: &[(Level, &str)]) -> Overrides {
        Overrides::new(entries.iter().map(|(l, c)| (*l, c.to_string())).collect()).unwrap()
    }

    #[test]
    fn defaults_apply_without_configuration() {
        let none = Overrides::default();
        assert_eq!(
            none.resolve(rule("label-mismatch"), None),
            Some(Severity::Error)
        );
        assert_eq!(
            none.resolve(rule("doc-stale-mention"), None),
            Some(Severity::Warning)
        );
    }

    #[test]
    fn the_command_line_wins_over_the_policy_and_the_last_flag_wins() {
        let cli = overrides(&[
            (Level::Allow, "label-mismatch"),
            (Level::Warn, "label-mismatch"),
        ]);
        assert_eq!(
            cli.resolve(rule("label-mismatch"), Some(Level::Deny)),
            Some(Severity::Warning)
        );
        let policy_only = Overrides::default();
        assert_eq!(
            policy_only.resolve(rule("label-mismatch"), Some(Level::Allow)),
            None
        );
    }

    #[test]
    fn deny_warnings_promotes_every_warning_even_one_set_by_a_flag() {
        let cli = overrides(&[(Level::Warn, "label-mismatch"), (Level::Deny, WARNINGS)]);
        assert_eq!(
            cli.resolve(rule("label-mismatch"), None),
            Some(Severity::Error)
        );
        assert_eq!(
            cli.resolve(rule("doc-stale-mention"), Some(Level::Warn)),
            Some(Severity::Error)
        );
        assert_eq!(
            cli.resolve(rule("parse-fallback"), Some(Level::Allow)),
            None
        );
        let quiet = overrides(&[(Level::Allow, WARNINGS)]);
        assert_eq!(quiet.resolve(rule("doc-stale-mention"), None), None);
        assert_eq!(
            quiet.resolve(rule("label-mismatch"), None),
            Some(Severity::Error)
        );
    }

    #[test]
    fn an_unknown_code_suggests_the_closest() {
        let err = Overrides::new(vec![(Level::Deny, "label-mismatc".into())]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown rule code `label-mismatc`; did you mean `label-mismatch`?"
        );
    }
}
