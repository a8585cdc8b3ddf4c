//! ## What it does
//! Reports a policy entry that lacks a required review field, or whose field
//! is blank or still a `TODO`.
//!
//! - `[cache_keys.*]`: `owner`, `prefix`, `dimensions` (may be `[]` for a
//!   fixed key), `ttl`, `bound`, `admission`, `eviction`.
//! - `[scan_limits.*]`: `owner`, `config_key`, `default`, `bound`.
//! - `[metrics.*]`: `owner`, `surface`, `dimensions` (may be `{}` for an
//!   unlabeled series), `cardinality`; plus `selection` and `suppression`
//!   when a dimension is `bounded_*`, because a capped series set must say
//!   which series survive the cap and how the rest are counted.
//!
//! ## Why is this bad?
//! The fields are the review. An entry without an eviction story or a bound
//! passes the gate while saying nothing about how the surface stays small.
//!
//! ## Example
//! ```toml
//! [cache_keys.readiness_probe]
//! owner = "dwengine::readiness::ReadinessProbe"
//! prefix = "server:readiness:"
//! dimensions = []
//! ttl = "10 seconds."
//! bound = ""            # empty: reported
//! # admission and eviction missing: reported
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;

pub(super) const CODE: &str = "missing-review-field";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let findings = dwpolicy::checks::missing_review_fields(ctx.policy());
    out.extend(
        findings
            .into_iter()
            .map(|f| ctx.diagnostic_for_policy_finding(CODE, f)),
    );
}
