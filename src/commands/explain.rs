//! `dwlint explain CODE` and `dwlint rules`: every code dwlint reports.
//!
//! The rules layer knows only `check`'s rules. The codes of `evidence
//! verify` and `live` are defined with those commands and join them here,
//! above both, so that `explain`, `rules`, the shell completions and the
//! rule docs list every code while no rule looks up at a command.

use crate::base::error::RunError;
use crate::commands::{evidence, live};
use crate::rules::{self, Rule};

/// Every code dwlint reports: `check`'s rules, then `evidence verify`'s and
/// `live`'s.
pub fn every_rule() -> impl Iterator<Item = &'static Rule> {
    rules::RULES
        .iter()
        .chain(evidence::rules())
        .chain(live::rules())
        .chain(CONFIGURATION.iter())
}

/// The codes of a run that cannot start: their reports carry a code as
/// findings do (`error[invalid-policy]`), so `explain` knows them too.
static CONFIGURATION: [Rule; 1] = [Rule::external("invalid-policy", INVALID_POLICY)];

const INVALID_POLICY: &str = "\
//! ## What it does
//! Reports a policy file that cannot be loaded, one report per problem
//! with its place in the file: TOML that does not parse, a key the schema
//! does not know (with the closest known one), a value of the wrong type, a
//! missing `schema_version` or one this dwlint does not read, a `[sources]`
//! glob that does not compile, a rule code in `[rules]` that no rule has.
//! The run stops there: `check`, `docs`, `live` and `evidence verify` exit
//! 2 (a failed run, not a finding), in every `--format`.
//!
//! ## Why is this bad?
//! Every other check reads the policy; checking a tree against a policy
//! that was read in part would pass what the policy forbids. The keys and
//! their types are in docs/policy.md; `dwlint init` writes a valid draft
//! and `dwlint policy import` converts the reference PHP policy.
//!
//! ## Example
//! ```toml
//! schema_version = 1
//!
//! [cache_keys.signals]
//! prefx = \"server:signal:\"   # unknown key `prefx`; did you mean `prefix`?
//! ```
";

/// What `dwlint explain CODE` prints: the rule's documentation.
pub fn explain(code: String) -> Result<String, RunError> {
    let rule = every_rule().find(|r| r.code == code).ok_or_else(|| {
        let suggestion = rules::closest_code(&code).map(str::to_owned);
        RunError::UnknownRule { code, suggestion }
    })?;
    Ok(rule.explanation())
}

/// What `dwlint rules` prints: each code, its default severity and summary.
pub fn list() -> String {
    // The widest code sets the column, so the long evidence codes keep the
    // severities and summaries aligned.
    let width = every_rule().map(|r| r.code.len()).max().unwrap_or(0);
    let mut text = String::new();
    for rule in every_rule() {
        text.push_str(&format!(
            "{:<width$}  {:<8} {}\n",
            rule.code,
            rule.default_severity.as_str(),
            rule.summary()
        ));
    }
    text
}
