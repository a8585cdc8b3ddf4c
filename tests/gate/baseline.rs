//! Adopting the gate one step at a time: `check --write-baseline` and
//! `check --baseline` (today's findings recorded, moved code still
//! matched, only a new finding fails the run, entries that match nothing
//! any more named), and inline allows.

use crate::support::{dwlint_in, fixture_copy, json_codes, text};

#[test]
fn a_baseline_passes_known_findings_and_fails_new_ones() {
    let dir = fixture_copy("undeclared-cache-prefix");
    let root = dir.path();
    let lib = root.join("src/lib.rs");
    // Without a baseline the fixture fails.
    assert_eq!(dwlint_in(root, &["check"]).status.code(), Some(1));

    let out = dwlint_in(root, &["check", "--write-baseline", "dwlint-baseline.json"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("recorded 1 finding(s) in the baseline dwlint-baseline.json"),
        "{stderr}"
    );
    let recorded = std::fs::read_to_string(root.join("dwlint-baseline.json")).unwrap();
    insta::assert_snapshot!(recorded);

    let out = dwlint_in(root, &["check", "--baseline", "dwlint-baseline.json"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}{}", text(&out.stdout));
    assert!(
        stderr.contains("1 finding(s) known to the baseline"),
        "{stderr}"
    );
    assert!(
        text(&out.stdout).contains("no findings"),
        "{}",
        text(&out.stdout)
    );

    // Lines move: the finding is the same one.
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, format!("// moved down\n\n\n{source}")).unwrap();
    let out = dwlint_in(root, &["check", "--baseline", "dwlint-baseline.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    // A new key family is a new finding, and the only one reported.
    let grown = std::fs::read_to_string(&lib)
        .unwrap()
        .replace("impl Store {", "impl Store {\n    pub fn lease(q: &str) -> String {\n        format!(\"server:lease-hint:{q}\")\n    }\n");
    std::fs::write(&lib, grown).unwrap();
    let out = dwlint_in(
        root,
        &[
            "check",
            "--baseline",
            "dwlint-baseline.json",
            "--format",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_codes(&out), ["undeclared-cache-prefix"]);
    assert!(
        text(&out.stdout).contains("server:lease-hint:"),
        "{}",
        text(&out.stdout)
    );

    // The known finding fixed: its entry is named as stale.
    let fixed = std::fs::read_to_string(&lib)
        .unwrap()
        .replace("server:poll-hint:", "server:signal:");
    std::fs::write(&lib, fixed).unwrap();
    let out = dwlint_in(root, &["check", "--baseline", "dwlint-baseline.json"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("1 baseline entry no longer matches a finding")
            && stderr.contains("server:poll-hint:"),
        "{stderr}"
    );
}

#[test]
fn a_bad_baseline_is_a_run_error() {
    let dir = fixture_copy("clean");
    let root = dir.path();
    std::fs::write(root.join("b.json"), "{\"findings\": 3}").unwrap();
    for args in [
        &["check", "--baseline", "b.json"][..],
        &["check", "--baseline", "missing.json"],
        &[
            "check",
            "--baseline",
            "b.json",
            "--write-baseline",
            "c.json",
        ],
        &["check", "--write-baseline", "src/lib.rs"],
    ] {
        let out = dwlint_in(root, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    assert!(std::fs::read_to_string(root.join("src/lib.rs"))
        .unwrap()
        .contains("pub mod"));
}

/// Inline allows (the `unused-allow` fixture shows the whole-tree report):
/// with FILES, the allows still accept their findings, but none is called
/// unused, since the findings of the other files were not computed.
#[test]
fn allows_hold_for_some_files_and_unused_ones_wait_for_a_whole_tree_run() {
    let dir = fixture_copy("unused-allow");
    let root = dir.path();
    let whole = dwlint_in(root, &["check", "--format", "json"]);
    let codes = json_codes(&whole);
    assert_eq!(
        codes.iter().filter(|c| *c == "unused-allow").count(),
        3,
        "{codes:?}"
    );
    assert!(!text(&whole.stdout).contains("server:legacy-hint:"));
    let some = dwlint_in(root, &["check", "--format", "json", "src/polling.rs"]);
    assert_eq!(json_codes(&some), ["undeclared-cache-prefix"]);
    assert!(!text(&some.stdout).contains("server:legacy-hint:"));
    // -A unused-allow silences the report, not the allows.
    let allowed = dwlint_in(root, &["check", "--format", "json", "-A", "unused-allow"]);
    assert_eq!(json_codes(&allowed), ["undeclared-cache-prefix"]);
}

/// `dwlint check` on a tree, human format, ASCII frames at 100 columns.
fn human(root: &std::path::Path, extra: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(["check", "--color", "never"])
        .args(extra)
        .current_dir(root)
        .env("LC_ALL", "C")
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// A first check with many findings of one rule shows the first three and
/// counts the rest; `--verbose` shows every one.
#[test]
fn many_findings_of_one_rule_are_grouped_unless_verbose() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    crate::support::write(
        root,
        "policy/dw-bounded-growth.toml",
        "schema_version = 1\n\n[sources]\ncache = [\"src/**/*.rs\"]\nmetrics = [\"src/**/*.rs\"]\n",
    );
    let mut lib: String = (0..7)
        .map(|i| {
            format!("pub fn k{i}(q: &str) -> String {{ format!(\"server:family{i}:{{q}}\") }}\n")
        })
        .collect();
    lib.push_str("pub fn m() -> &'static str { \"dw_one_total\" }\n");
    crate::support::write(root, "src/lib.rs", &lib);
    let grouped = human(root, &[]);
    insta::assert_snapshot!(grouped);
    let every = human(root, &["--verbose"]);
    assert_eq!(every.matches("error[undeclared-cache-prefix]").count(), 7);
    assert_eq!(every.matches("cache key built here").count(), 7);
    assert!(!every.contains("not shown"), "{every}");
}
