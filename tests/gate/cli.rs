//! The command line as users meet it: exit codes, error messages, `explain`
//! and `rules`, and the repository's own gate.

use crate::support::text;

use std::path::Path;
use std::process::{Command, Output};

fn dwlint(args: &[&str], dir: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dwlint"));
    command.args(args).env("NO_COLOR", "1");
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command.output().expect("run dwlint")
}

fn fixture(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn tree_with_policy(policy: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policy")).unwrap();
    std::fs::write(dir.path().join("policy/dw-bounded-growth.toml"), policy).unwrap();
    dir
}

#[test]
fn the_repository_passes_its_own_gate() {
    let out = dwlint(&["check", env!("CARGO_MANIFEST_DIR")], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("no findings"));
}

#[test]
fn exit_codes_follow_the_contract() {
    assert_eq!(
        dwlint(&["check", &fixture("clean")], None).status.code(),
        Some(0)
    );
    assert_eq!(
        dwlint(&["check", &fixture("label-mismatch")], None)
            .status
            .code(),
        Some(1)
    );
    let missing = dwlint(&["check", "/no/such/tree"], None);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("no such path: /no/such/tree"));
    let bad_flag = dwlint(&["check", "--format", "xml"], None);
    assert_eq!(bad_flag.status.code(), Some(2));
}

#[test]
fn a_tree_without_a_policy_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let out = dwlint(&["check", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("no policy file found in"), "{stderr}");
    assert!(stderr.contains("--policy"), "{stderr}");
}

#[test]
fn a_syntax_error_names_file_line_and_column() {
    let dir = tree_with_policy("schema_version = 1\n[sources\ncache = []\n");
    let out = dwlint(&["check", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("policy/dw-bounded-growth.toml"), "{stderr}");
    assert!(stderr.contains("TOML syntax error"), "{stderr}");
    assert!(stderr.contains("dw-bounded-growth.toml:2:"), "{stderr}");
}

#[test]
fn every_structural_problem_is_reported_at_once_with_suggestions() {
    let dir = tree_with_policy(
        "schema_version = 1\n[sources]\ncahce = [\"src/**\"]\n[settings]\nmetric_prefix = 5\n[metrics.dw_x]\nowner = \"a\"\nsurfce = \"b\"\n",
    );
    let out = dwlint(&["check", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("unknown key `cahce` in [sources]"),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `cache`?"), "{stderr}");
    assert!(
        stderr.contains("`settings.metric_prefix` must be a string, found integer"),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `surface`?"), "{stderr}");
    assert!(stderr.contains("dw-bounded-growth.toml:3:1"), "{stderr}");
    assert!(stderr.contains("dw-bounded-growth.toml:5:17"), "{stderr}");
}

#[test]
fn an_unknown_rule_code_in_the_policy_suggests_the_closest() {
    let dir = tree_with_policy("schema_version = 1\n[rules]\nlabel-mismatchh = \"warn\"\n");
    let out = dwlint(&["check", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("did you mean `label-mismatch`?"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_explicit_policy_path_is_used() {
    let policy = format!("{}/policy/dw-bounded-growth.toml", fixture("clean"));
    let out = dwlint(&["check", &fixture("clean"), "--policy", &policy], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = dwlint(
        &[
            "check",
            &fixture("clean"),
            "--policy",
            "/no/such/policy.toml",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read policy file /no/such/policy.toml"));
}

#[test]
fn rules_can_be_allowed_or_downgraded_in_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(&fixture("label-mismatch")).to_path_buf();
    for rel in ["Cargo.toml", "src/lib.rs", "docs/ops.md"] {
        std::fs::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), dir.path().join(rel)).unwrap();
    }
    let policy = std::fs::read_to_string(src.join("policy/dw-bounded-growth.toml")).unwrap();
    std::fs::create_dir_all(dir.path().join("policy")).unwrap();
    let with_rules = format!("{policy}\n[rules]\nlabel-mismatch = \"warn\"\n");
    std::fs::write(dir.path().join("policy/dw-bounded-growth.toml"), with_rules).unwrap();
    let out = dwlint(
        &["check", dir.path().to_str().unwrap(), "--format", "json"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("\"severity\": \"warning\""));
}

#[test]
fn explain_prints_the_rule_documentation() {
    let out = dwlint(&["explain", "label-mismatch"], None);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    for section in [
        "# label-mismatch",
        "## What it does",
        "## Why is this bad?",
        "## Example",
    ] {
        assert!(stdout.contains(section), "{stdout}");
    }
    let unknown = dwlint(&["explain", "label-mismatc"], None);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("did you mean `label-mismatch`?"));
}

#[test]
fn rules_lists_every_rule_with_its_severity() {
    let out = dwlint(&["rules"], None);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    for rule in dwlint::rules::RULES {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(rule.code))
            .expect(rule.code);
        assert!(line.contains(rule.default_severity.as_str()), "{line}");
    }
    assert!(stdout
        .lines()
        .any(|l| l.starts_with("doc-stale-mention") && l.contains("warning")));
}

#[test]
fn rules_aligns_its_columns_past_the_longest_code() {
    let out = dwlint(&["rules"], None);
    let stdout = text(&out.stdout);
    // The severity column starts at the same place on every line, the long
    // evidence codes' lines included, with at least two spaces before it.
    let columns: std::collections::BTreeSet<usize> = stdout
        .lines()
        .map(|l| {
            let code = l.split(' ').next().unwrap();
            let severity = l[code.len()..].len() - l[code.len()..].trim_start().len();
            assert!(severity >= 2, "{l}");
            code.len() + severity
        })
        .collect();
    assert_eq!(columns.len(), 1, "{stdout}");
    // Two spaces after the longest code, no wider.
    let longest = stdout
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .max_by_key(|code| code.len())
        .unwrap();
    assert_eq!(columns.first(), Some(&(longest.len() + 2)), "{stdout}");
}

#[test]
fn check_defaults_to_the_current_directory() {
    let out = dwlint(&["check"], Some(Path::new(&fixture("clean"))));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn command_line_severities_win_over_the_policy() {
    let stale = fixture("doc-stale-mention");
    let out = dwlint(
        &["check", &stale, "-D", "warnings", "--format", "json"],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "-D warnings fails on warnings");
    assert!(!text(&out.stdout).contains("\"severity\": \"warning\""));
    let out = dwlint(
        &[
            "check",
            &stale,
            "-A",
            "doc-stale-mention",
            "--format",
            "short",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "");
    let labels = fixture("label-mismatch");
    let out = dwlint(&["check", &labels, "-W", "label-mismatch"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = dwlint(
        &["check", &labels, "-W", "label-mismatch", "-D", "warnings"],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "-D warnings also covers -W");
    let out = dwlint(
        &[
            "check",
            &labels,
            "--allow",
            "label-mismatch",
            "--deny",
            "label-mismatch",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "the last flag wins");
}

#[test]
fn an_unknown_code_on_the_command_line_suggests_the_closest() {
    let out = dwlint(
        &["check", &fixture("clean"), "-D", "doc-stale-mentoin"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("unknown rule code `doc-stale-mentoin`; did you mean `doc-stale-mention`?"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn completions_and_the_man_page_come_from_the_clap_definition() {
    for (shell, marker) in [
        ("bash", "_dwlint()"),
        ("zsh", "#compdef dwlint"),
        ("fish", "complete -c dwlint"),
    ] {
        let out = dwlint(&["completions", shell], None);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("changed-since"),
            "{shell} completes check's options"
        );
    }
    let man = dwlint(&["man"], None);
    assert_eq!(man.status.code(), Some(0));
    let page = text(&man.stdout);
    assert!(page.starts_with(".ie \\n(.g .ds Aq"), "{page}");
    assert!(page.contains(".TH dwlint 1"), "{page}");
    assert!(page.contains("completions"), "{page}");
    assert_eq!(
        dwlint(&["completions", "tcsh"], None).status.code(),
        Some(2)
    );
}

#[test]
fn nested_and_repeated_prefixes_report_each_shadowed_entry_once() {
    // Every pair used to be a finding: 2,000 entries sharing one prefix made
    // two million findings, and a chain of nested prefixes ran out of memory.
    let mut policy = String::from("schema_version = 1\n");
    let mut prefix = String::from("server:");
    for i in 0..300 {
        prefix.push_str(&format!("f{i}:"));
        for copy in 0..2 {
            policy.push_str(&format!(
                "[cache_keys.k{i}_{copy}]\nowner = \"x\"\nprefix = \"{prefix}\"\ndimensions = []\n\
                 ttl = \"t\"\nbound = \"b\"\nadmission = \"a\"\neviction = \"e\"\n"
            ));
        }
    }
    let dir = tree_with_policy(&policy);
    let out = dwlint(
        &["check", "--format", "short", "-A", "unresolved-owner"],
        Some(dir.path()),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let overlaps: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("[overlapping-cache-prefix]"))
        .collect();
    // All but the first entry is shadowed, each reported once, against the
    // nearest covering prefix (its twin, or the previous link of the chain).
    assert_eq!(overlaps.len(), 599);
    assert!(overlaps
        .iter()
        .any(|l| l.contains("of `k5_1` is covered by `server:") && l.contains("of `k5_0`")));
    assert!(overlaps
        .iter()
        .any(|l| l.contains("of `k5_0` is covered by `server:") && l.contains("of `k4_0`")));
}

#[test]
fn timings_go_to_standard_error_and_leave_the_report_alone() {
    let plain = dwlint(&["check", &fixture("label-mismatch")], None);
    let timed = dwlint(&["check", "--timings", &fixture("label-mismatch")], None);
    assert_eq!(timed.status.code(), plain.status.code());
    assert_eq!(text(&timed.stdout), text(&plain.stdout));
    assert!(!text(&plain.stderr).contains("timings"));
    let stderr = text(&timed.stderr);
    let phases = [
        "locate the policy",
        "load the policy",
        "beside it: walk the tree",
        "beside it: read files ahead",
        "select files, build the prefilter",
        "read and extract",
        "build the inventory",
        "run the rules",
        "check",
    ];
    let mut from = stderr.find("timings (wall clock):").expect(&stderr);
    for phase in phases {
        let at = stderr[from..]
            .find(&format!(" ms {phase}"))
            .or_else(|| stderr[from..].find(&format!(" ms   {phase}")))
            .unwrap_or_else(|| panic!("{phase} missing or out of order in:\n{stderr}"));
        from += at + 1;
    }
}
