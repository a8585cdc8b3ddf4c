//! The engine's bounded-growth policy, embedded at compile time.
//!
//! The file `dwlint check` reviews is the file the engine enforces: the
//! run-time guards read this copy, so a surface cannot be declared one way
//! for the gate and behave another way in production.

use dwpolicy::{MetricGuard, Policy};

/// The policy text, as committed in `policy/dw-bounded-growth.toml`.
pub const POLICY_TOML: &str = include_str!("../../../policy/dw-bounded-growth.toml");

/// The embedded policy, parsed and validated once. A test proves the
/// committed file validates, so an error here means the binary was built
/// from an unreviewed policy.
pub fn embedded() -> Result<&'static Policy, &'static str> {
    static POLICY: std::sync::OnceLock<Result<Policy, String>> = std::sync::OnceLock::new();
    POLICY
        .get_or_init(|| Policy::from_toml_str(POLICY_TOML).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(String::as_str)
}

/// The metric guard over the embedded policy, indexed once: disclosures run
/// on every scrape, and an invalid policy refuses every disclosure.
pub fn guard() -> Result<&'static MetricGuard, &'static str> {
    static GUARD: std::sync::OnceLock<Result<MetricGuard, &'static str>> =
        std::sync::OnceLock::new();
    GUARD
        .get_or_init(|| embedded().map(MetricGuard::new))
        .as_ref()
        .map_err(|e| *e)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_policy_validates() {
        if let Err(e) = dwpolicy::Policy::from_toml_str(super::POLICY_TOML) {
            panic!("{e}");
        }
        let policy = super::embedded().expect("validated above");
        assert!(policy.metric("dw_workflow_runs_total").is_some());
    }
}
