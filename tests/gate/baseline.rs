//! `check --write-baseline` and `check --baseline`: today's findings
//! recorded, moved code still matched, only a new finding fails the run,
//! and entries that match nothing any more are named.

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
