//! ## What it does
//! In the `[sources].remote_write` files (Prometheus scrape and remote-write
//! configs, standalone or in a shell heredoc), reports a target label whose
//! value expands a per-run variable from `settings.per_run_labels`
//! (`GITHUB_RUN_ID`, `GITHUB_RUN_ATTEMPT`, `GITHUB_SHA`, `RUNNER_NAME` by
//! default). Target labels are the entries of `labels:` (under
//! `static_configs`) and `external_labels:` (under `global`), and relabel
//! rules' `target_label` with its `replacement`. The forms recognised are
//! `$VAR`, `${VAR}`, `${VAR:-default}` (and the other `${VAR…}` operators),
//! `${env:VAR}` and a template `{{ … VAR … }}` such as `{{ env "VAR" }}`.
//! Deployment-scoped values (repository, workflow name) pass.
//!
//! ## Why is this bad?
//! Every label value is part of a series' identity. A label that changes
//! with every soak run or runner starts a fresh set of series each time,
//! so the remote store grows by one full copy of every metric per run and
//! old series never come back. Per-run facts are provenance: they belong in
//! the run's summary (`summary.json`), where one record per run is the
//! intended growth, not in series labels.
//!
//! ## Example
//! ```yaml
//! scrape_configs:
//!   - job_name: dw-perf
//!     static_configs:
//!       - targets: ["localhost:9400"]
//!         labels:
//!           repository: "${GITHUB_REPOSITORY:-local}"   # fine: one value per deployment
//!           run_id: "${GITHUB_RUN_ID:-local}"           # a new series set per run
//! ```

use super::Context;
use crate::base::diagnostic::{Anchor, Diagnostic};

pub(super) const CODE: &str = "per-run-remote-write-label";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let per_run = &ctx.policy().settings.per_run_labels;
    for found in &ctx.inventory.scrape_labels {
        let label = &found.label;
        let Some(variable) = per_run.iter().find(|var| expands(&label.value, var)) else {
            continue;
        };
        out.push(
            Diagnostic::new(
                CODE,
                label.name.clone(),
                format!(
                    "scrape label `{}` takes the per-run value of `{variable}`, so every run starts new series",
                    label.name
                ),
            )
            .at(Anchor::labeled(found.file.clone(), label.name_range, "per-run label"))
            .related(Anchor::labeled(
                found.file.clone(),
                label.value_range,
                format!("expands {variable}"),
            ))
            .help(format!(
                "record {variable} in the run's summary provenance (summary.json) instead, and keep series labels deployment-scoped"
            )),
        );
    }
}

/// Whether `value` expands the environment variable `var`.
fn expands(value: &str, var: &str) -> bool {
    if var.is_empty() {
        return false;
    }
    let bytes = value.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut from = 0;
    while let Some(found) = value[from..].find(var) {
        let start = from + found;
        let end = start + var.len();
        from = end;
        let before = &value[..start];
        let after = bytes.get(end).copied();
        let word_ends = !after.is_some_and(is_word);
        let word_starts = !before.bytes().last().is_some_and(is_word);
        if !word_starts || !word_ends {
            continue;
        }
        let dollar = before.ends_with('$');
        let braced = (before.ends_with("${") || before.ends_with("${env:"))
            && after.is_some_and(|b| b"}:-=+?".contains(&b));
        let templated = before
            .rfind("{{")
            .is_some_and(|open| !before[open..].contains("}}") && value[end..].contains("}}"));
        if dollar || braced || templated {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::expands;

    #[test]
    fn variable_forms_are_recognised() {
        for value in [
            "$GITHUB_RUN_ID",
            "run-$GITHUB_RUN_ID",
            "${GITHUB_RUN_ID}",
            "${GITHUB_RUN_ID:-local}",
            "${GITHUB_RUN_ID-local}",
            "${env:GITHUB_RUN_ID}",
            "{{ env \"GITHUB_RUN_ID\" }}",
            "{{ .Env.GITHUB_RUN_ID }}",
        ] {
            assert!(expands(value, "GITHUB_RUN_ID"), "{value}");
        }
        for value in [
            "GITHUB_RUN_ID",
            "${GITHUB_RUN_ID_OLD}",
            "$XGITHUB_RUN_ID",
            "${GITHUB_REPOSITORY:-local}",
            "{{ x }} GITHUB_RUN_ID",
            "",
        ] {
            assert!(!expands(value, "GITHUB_RUN_ID"), "{value}");
        }
        assert!(!expands("$", ""));
    }
}
