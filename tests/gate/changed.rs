//! Changed-files mode on a real git repository built in a temporary
//! directory: `--changed-since REV` and file names as pre-commit passes
//! them limit file-local findings, never tree-wide ones, and the report
//! says which mode ran. Also policy discovery from a subdirectory and
//! repository-relative paths for GitHub.

use crate::support::{dwlint_in, write};

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const POLICY: &str = r#"schema_version = 1

[sources]
cache = ["src/**/*.rs"]
metrics = ["src/**/*.rs"]
docs = ["docs/ops.md"]

[metrics.dw_runs_total]
owner = "src/lib.rs"
surface = "GET /metrics"
dimensions = {}
cardinality = "One series."

[metrics.dw_unused_total]
owner = "src/lib.rs"
surface = "GET /metrics"
dimensions = {}
cardinality = "One series."
"#;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn metric_file(name: &str) -> String {
    format!("pub fn record() {{ counter!(\"{name}\").increment(1); }}\n")
}

/// A repository whose `main` has one undeclared metric in `src/old.rs`,
/// and a branch `work` that changes files every way git knows.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    write(root, "policy/dw-bounded-growth.toml", POLICY);
    write(
        root,
        "docs/ops.md",
        "`dw_runs_total` and `dw_unused_total`.\n",
    );
    write(root, "src/lib.rs", &metric_file("dw_runs_total"));
    write(root, "src/old.rs", &metric_file("dw_old_total"));
    write(root, "src/staged.rs", "// nothing yet\n");
    git(root, &["add", "."]);
    git(root, &["commit", "-q", "-m", "base"]);
    git(root, &["checkout", "-q", "-b", "work"]);
    write(root, "src/committed.rs", &metric_file("dw_committed_total"));
    git(root, &["add", "src/committed.rs"]);
    git(root, &["commit", "-q", "-m", "on the branch"]);
    write(root, "src/staged.rs", &metric_file("dw_staged_total"));
    git(root, &["add", "src/staged.rs"]);
    write(
        root,
        "src/lib.rs",
        &(metric_file("dw_runs_total") + "pub fn more() { counter!(\"dw_unstaged_total\"); }\n"),
    );
    write(root, "src/untracked.rs", &metric_file("dw_untracked_total"));
    dir
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn subjects(report: &Value, code: &str) -> Vec<String> {
    let mut found: Vec<String> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == code)
        .map(|d| d["subject"].as_str().unwrap().to_owned())
        .collect();
    found.sort();
    found
}

#[test]
fn the_whole_tree_reports_every_finding() {
    let repo = repository();
    let out = dwlint_in(repo.path(), &["check", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    assert_eq!(report["summary"]["mode"], "full");
    assert_eq!(
        subjects(&report, "undeclared-metric"),
        [
            "dw_committed_total",
            "dw_old_total",
            "dw_staged_total",
            "dw_unstaged_total",
            "dw_untracked_total"
        ]
    );
}

#[test]
fn changed_since_limits_file_local_findings_to_changed_files() {
    let repo = repository();
    let out = dwlint_in(
        repo.path(),
        &["check", "--changed-since", "main", "--format", "json"],
    );
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    assert_eq!(report["summary"]["mode"], "changed-since");
    assert_eq!(report["summary"]["changed_since"], "main");
    assert_eq!(report["summary"]["changed_files"], 4);
    assert_eq!(
        subjects(&report, "undeclared-metric"),
        [
            "dw_committed_total",
            "dw_staged_total",
            "dw_unstaged_total",
            "dw_untracked_total"
        ],
        "dw_old_total is in an unchanged file"
    );
    assert_eq!(
        subjects(&report, "unused-metric-policy"),
        ["dw_unused_total"],
        "tree-wide rules still see the whole tree"
    );
    let human = dwlint_in(repo.path(), &["check", "--changed-since", "main"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("(4 files changed since main; policy: policy/dw-bounded-growth.toml)"),
        "{text}"
    );
}

#[test]
fn changed_since_head_still_sees_working_tree_changes() {
    let repo = repository();
    let report = json(&dwlint_in(
        repo.path(),
        &["check", "--changed-since", "HEAD", "--format", "json"],
    ));
    assert_eq!(
        subjects(&report, "undeclared-metric"),
        ["dw_staged_total", "dw_unstaged_total", "dw_untracked_total"]
    );
}

#[test]
fn file_names_from_pre_commit_limit_findings_the_same_way() {
    let repo = repository();
    let out = dwlint_in(
        repo.path(),
        &["check", "--format", "json", "src/old.rs", "docs/ops.md"],
    );
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    assert_eq!(report["summary"]["mode"], "files");
    assert_eq!(report["summary"]["changed_files"], 2);
    assert_eq!(subjects(&report, "undeclared-metric"), ["dw_old_total"]);
    assert_eq!(
        subjects(&report, "unused-metric-policy"),
        ["dw_unused_total"]
    );
    let human = dwlint_in(repo.path(), &["check", "src/lib.rs"]);
    assert!(String::from_utf8_lossy(&human.stdout).contains("(1 file given;"));
    let explicit_root = dwlint_in(
        repo.path(),
        &["check", ".", "src/old.rs", "--format", "json"],
    );
    assert_eq!(
        subjects(&json(&explicit_root), "undeclared-metric"),
        ["dw_old_total"]
    );
}

#[test]
fn a_bad_revision_or_no_repository_fails_the_run() {
    let repo = repository();
    let out = dwlint_in(repo.path(), &["check", "--changed-since", "no-such-branch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`no-such-branch` is not a commit"));
    let plain = tempfile::tempdir().unwrap();
    write(plain.path(), "policy/dw-bounded-growth.toml", POLICY);
    let out = dwlint_in(plain.path(), &["check", "--changed-since", "main"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot list changed files"));
}

#[test]
fn discovery_from_a_subdirectory_checks_the_policy_s_tree() {
    let repo = repository();
    let out = dwlint_in(&repo.path().join("src"), &["check", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        subjects(&json(&out), "unused-metric-policy"),
        ["dw_unused_total"]
    );
    let human = dwlint_in(&repo.path().join("src"), &["check"]);
    assert!(
        String::from_utf8_lossy(&human.stdout)
            .contains("(whole tree; root: ..; policy: policy/dw-bounded-growth.toml)"),
        "{}",
        String::from_utf8_lossy(&human.stdout)
    );
    std::fs::rename(
        repo.path().join("policy/dw-bounded-growth.toml"),
        repo.path().join(".dwlint.toml"),
    )
    .unwrap();
    let out = dwlint_in(&repo.path().join("src"), &["check", "--format", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn github_paths_are_relative_to_the_repository_not_the_checked_root() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    let tree = dir.path().join("engine");
    write(&tree, "policy/dw-bounded-growth.toml", POLICY);
    write(
        &tree,
        "docs/ops.md",
        "`dw_runs_total` and `dw_unused_total`.\n",
    );
    write(&tree, "src/lib.rs", &metric_file("dw_other_total"));
    let out = dwlint_in(dir.path(), &["check", "engine", "--format", "github"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("::error file=engine/src/lib.rs,line=1,"),
        "{text}"
    );
    let sarif = json(&dwlint_in(
        dir.path(),
        &["check", "engine", "--format", "sarif"],
    ));
    let uris: Vec<&str> = sarif["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert!(uris.contains(&"engine/src/lib.rs"), "{uris:?}");
    assert!(
        uris.contains(&"engine/policy/dw-bounded-growth.toml"),
        "{uris:?}"
    );
}
