//! Finding codes of `evidence verify`: one per profile condition, plus the
//! recorded-verdict check. They are [`Rule::external`]s so that SARIF,
//! JUnit and `dwlint explain` describe them like `check`'s rules, with the
//! condition's requirement as the documentation.

use std::sync::OnceLock;

use dwevidence::profile::Condition;

use crate::rules::Rule;

/// The recorded verdict disagrees with the recomputed one.
pub const RECORDED_VERDICT: &str = "evidence-recorded-verdict";

/// `evidence-<condition id with dashes>`.
pub fn code(condition: Condition) -> &'static str {
    rules()[Condition::ALL
        .iter()
        .position(|c| *c == condition)
        .unwrap_or_default()]
    .code
}

/// Every evidence code, in profile order, the recorded-verdict code last.
pub fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let mut rules: Vec<Rule> = Condition::ALL
            .iter()
            .map(|c| {
                let code = leak(format!("evidence-{}", c.id().replace('_', "-")));
                let doc = leak(format!(
                    "//! ## What it does\n//!\n//! Fails soak evidence unless: {}\n//!\n//! ## Why is this bad?\n//!\n//! The trusted_long_soak_v1 profile (docs/soak.md) requires it; an artifact that misses it is useful data, not trusted bounded-growth evidence.\n",
                    c.requirement()
                ));
                Rule::external(code, doc)
            })
            .collect();
        rules.push(Rule::external(
            RECORDED_VERDICT,
            "//! ## What it does\n//!\n//! Fails soak evidence whose recorded evidence.trust differs from the verdict recomputed from its own fields.\n//!\n//! ## Why is this bad?\n//!\n//! A verdict edited after the run, or written by a harness with another idea of the profile, would otherwise be taken at its word.\n",
        ));
        rules
    })
}

/// The evidence rule with `code`.
pub fn find_rule(code: &str) -> Option<&'static Rule> {
    rules().iter().find(|r| r.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_condition_has_a_documented_code() {
        assert_eq!(code(Condition::SampleCoverage), "evidence-sample-coverage");
        for rule in rules() {
            assert!(
                rule.summary().starts_with("Fails soak evidence"),
                "{}",
                rule.code
            );
        }
        assert!(find_rule(RECORDED_VERDICT).is_some());
    }
}
