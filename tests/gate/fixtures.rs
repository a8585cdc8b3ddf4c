//! Runs the real binary on every fixture tree under `fixtures/` and compares
//! its JSON and colourless human output with the snapshots kept next to the
//! fixture (`fixtures/<name>/expected-*.snap`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Every fixture: its directory, the exit code it must produce, and the
/// rule code it exists to demonstrate (`None` for the clean tree).
const FIXTURES: &[(&str, i32)] = &[
    ("clean", 0),
    ("undeclared-cache-prefix", 1),
    ("unused-cache-policy", 1),
    ("undeclared-metric", 1),
    ("unused-metric-policy", 1),
    ("label-mismatch", 1),
    ("undeclared-scan-limit", 1),
    ("unused-scan-limit-policy", 1),
    ("missing-review-field", 1),
    ("cache-prefix-namespace", 1),
    ("invalid-metric-name", 1),
    ("unreviewed-cardinality-class", 1),
    ("uncapped-user-controlled-dimension", 1),
    ("unresolved-owner", 1),
    ("overlapping-cache-prefix", 1),
    ("doc-missing-mention", 1),
    ("doc-stale-mention", 0),
    ("per-run-remote-write-label", 1),
    ("parse-fallback", 0),
    ("unreadable-file", 0),
    ("unused-allow", 1),
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn run(dir: &Path, format: &str) -> (i32, String) {
    // Run from inside the fixture, so paths (relative to the working
    // directory) are the same on every machine; ASCII frames at a fixed
    // width, as a non-UTF-8 locale asks.
    let output = Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(["check", "--color", "never", "--format", format, "."])
        .current_dir(dir)
        .env_remove("NO_COLOR")
        .env("LC_ALL", "C")
        .env("COLUMNS", "100")
        .output()
        .expect("run dwlint");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.is_empty(),
        "unexpected stderr for {}: {stderr}",
        dir.display()
    );
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).expect("utf-8 output"),
    )
}

fn check_fixture(name: &str, expected_exit: i32) {
    let dir = fixtures_dir().join(name);
    let (code, json) = run(&dir, "json");
    assert_eq!(code, expected_exit, "exit code of {name}:\n{json}");
    let report: Value = serde_json::from_str(&json).expect("valid JSON");
    let codes: Vec<&str> = report["diagnostics"]
        .as_array()
        .expect("diagnostics array")
        .iter()
        .map(|d| d["code"].as_str().expect("code"))
        .collect();
    if name == "clean" {
        assert!(
            codes.is_empty(),
            "the clean fixture has findings: {codes:?}"
        );
    } else {
        assert!(
            codes.contains(&name),
            "{name} does not report its own rule: {codes:?}"
        );
    }
    let (human_code, human) = run(&dir, "human");
    assert_eq!(
        human_code, code,
        "exit codes differ between formats for {name}"
    );
    insta::with_settings!({
        snapshot_path => dir.clone(),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("expected-json", json);
        insta::assert_snapshot!("expected-human", human);
    });
}

macro_rules! fixture_tests {
    ($($test:ident => $index:expr,)*) => {
        $(
            #[test]
            fn $test() {
                let (name, exit) = FIXTURES[$index];
                check_fixture(name, exit);
            }
        )*
    };
}

fixture_tests! {
    clean => 0,
    undeclared_cache_prefix => 1,
    unused_cache_policy => 2,
    undeclared_metric => 3,
    unused_metric_policy => 4,
    label_mismatch => 5,
    undeclared_scan_limit => 6,
    unused_scan_limit_policy => 7,
    missing_review_field => 8,
    cache_prefix_namespace => 9,
    invalid_metric_name => 10,
    unreviewed_cardinality_class => 11,
    uncapped_user_controlled_dimension => 12,
    unresolved_owner => 13,
    overlapping_cache_prefix => 14,
    doc_missing_mention => 15,
    doc_stale_mention => 16,
    per_run_remote_write_label => 17,
    parse_fallback => 18,
    unreadable_file => 19,
    unused_allow => 20,
}

#[test]
fn every_fixture_has_a_test_and_every_rule_has_a_fixture_and_docs() {
    let mut on_disk: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = FIXTURES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "fixtures on disk and FIXTURES differ");
    for rule in dwlint::rules::RULES {
        assert!(
            listed.contains(&rule.code.to_owned()),
            "rule {} has no fixture",
            rule.code
        );
        let doc = rule.doc();
        for section in ["## What it does", "## Why is this bad?", "## Example"] {
            assert!(
                doc.contains(section),
                "rule {} lacks `{section}` in its doc comment",
                rule.code
            );
        }
    }
}
