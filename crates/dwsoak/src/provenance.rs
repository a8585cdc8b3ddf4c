//! Where a run came from: GitHub and runner variables, the checkout, the
//! policy digest.
//!
//! Per-run values (run id, runner name, commit) belong here, in the
//! artifact, and never in a Prometheus label: a label that changes every run
//! creates new series every run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use dwevidence::profile::GITHUB_VARS;
use dwevidence::summary::{Provenance, Runner};

/// Provenance from `lookup` (the environment) and `git` run in `checkout`.
pub fn collect(
    lookup: impl Fn(&str) -> Option<String>,
    checkout: &Path,
    base_url: &str,
    policy_path: &Path,
    policy_sha256: &str,
) -> Provenance {
    let set = |name: &str| lookup(name).filter(|v| !v.is_empty());
    let github: BTreeMap<String, String> = GITHUB_VARS
        .iter()
        .filter_map(|name| Some((name.to_string(), set(name)?)))
        .collect();
    Provenance {
        github,
        runner: Runner {
            name: set("RUNNER_NAME"),
            os: set("RUNNER_OS").or_else(|| Some(std::env::consts::OS.to_owned())),
            arch: set("RUNNER_ARCH").or_else(|| Some(std::env::consts::ARCH.to_owned())),
            environment: set("RUNNER_ENVIRONMENT"),
        },
        compose_project: set("COMPOSE_PROJECT_NAME"),
        base_url: Some(base_url.to_owned()),
        git_sha: git(checkout, &["rev-parse", "HEAD"]).map(|s| s.trim().to_owned()),
        tracked_working_tree_clean: git(
            checkout,
            &["status", "--porcelain", "--untracked-files=no"],
        )
        .map(|s| s.trim().is_empty()),
        policy_path: policy_path.to_string_lossy().into_owned(),
        policy_sha256: policy_sha256.to_owned(),
    }
}

/// Output of a successful git command; `None` outside a checkout.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_set_variables_are_recorded_and_git_is_read() {
        let env = |name: &str| match name {
            "GITHUB_SHA" => Some("abc".to_owned()),
            "GITHUB_REF" => Some(String::new()),
            "RUNNER_ENVIRONMENT" => Some("github-hosted".to_owned()),
            _ => None,
        };
        let dir = tempfile::tempdir().unwrap();
        let p = collect(env, dir.path(), "http://x", Path::new("p.toml"), "00");
        assert_eq!(
            p.github,
            BTreeMap::from([("GITHUB_SHA".into(), "abc".into())])
        );
        assert_eq!(p.runner.environment.as_deref(), Some("github-hosted"));
        assert_eq!(p.git_sha, None, "not a checkout");
        assert_eq!(p.tracked_working_tree_clean, None);
        let repo = env!("CARGO_MANIFEST_DIR");
        let p = collect(
            |_| None,
            Path::new(repo),
            "http://x",
            Path::new("p.toml"),
            "00",
        );
        assert_eq!(p.git_sha.map(|s| s.len()), Some(40));
        assert!(p.tracked_working_tree_clean.is_some());
    }
}
