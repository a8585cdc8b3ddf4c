//! Every output format on fixtures with several findings, as snapshots, and
//! the promise that the exit code does not depend on the format.
//!
//! Fixtures are copied into a temporary directory outside any git
//! repository and checked as `.`, so paths in the snapshots are the same on
//! every machine and in every checkout.

use crate::support::fixture_copy;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const FORMATS: &[&str] = &["human", "json", "sarif", "github", "junit", "short"];

fn dwlint(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .arg("check")
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        // Unicode frames at a fixed width (the fixtures' snapshots are ASCII).
        .env("LC_ALL", "C.UTF-8")
        .env("TERM", "xterm")
        .env("COLUMNS", "100")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("run dwlint")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

/// SARIF with the rule descriptors cut to their ids (their help is every
/// rule's documentation, checked against `Rule::doc` here instead of being
/// copied into two snapshots) and the version made stable.
fn sarif_for_snapshot(text: &str) -> String {
    let mut log: Value = serde_json::from_str(text).expect("SARIF is JSON");
    let driver = &mut log["runs"][0]["tool"]["driver"];
    assert_eq!(driver["version"], env!("CARGO_PKG_VERSION"));
    driver["version"] = "[version]".into();
    driver["semanticVersion"] = "[version]".into();
    let rules = driver["rules"].as_array().expect("rules").clone();
    assert_eq!(rules.len(), dwlint::rules::RULES.len());
    for (descriptor, rule) in rules.iter().zip(dwlint::rules::RULES) {
        assert_eq!(descriptor["id"], rule.code);
        assert_eq!(descriptor["help"]["markdown"], rule.doc().as_str());
        assert_eq!(
            descriptor["shortDescription"]["text"],
            rule.summary().as_str()
        );
    }
    driver["rules"] = rules.iter().map(|r| r["id"].clone()).collect();
    serde_json::to_string_pretty(&log).unwrap() + "\n"
}

fn snapshot_every_format(fixture: &str) {
    let dir = fixture_copy(fixture);
    for format in FORMATS {
        let out = dwlint(dir.path(), &["--color", "never", "--format", format]);
        assert_eq!(out.status.code(), Some(1), "{fixture} {format}");
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = stdout(&out);
        let text = if *format == "sarif" {
            sarif_for_snapshot(&text)
        } else {
            text
        };
        insta::assert_snapshot!(format!("{fixture}.{format}"), text);
    }
}

#[test]
fn every_format_on_label_mismatch() {
    snapshot_every_format("label-mismatch");
}

#[test]
fn every_format_on_missing_review_field() {
    snapshot_every_format("missing-review-field");
}

#[test]
fn the_github_format_appends_a_summary_table_for_the_job() {
    let dir = fixture_copy("label-mismatch");
    let summary = dir.path().join("summary.md");
    std::fs::write(&summary, "previous step\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(["check", "--format", "github"])
        .current_dir(dir.path())
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = std::fs::read_to_string(&summary).unwrap();
    assert!(text.starts_with("previous step\n"), "appends: {text}");
    insta::assert_snapshot!("label-mismatch.step-summary", text);
}

#[test]
fn exit_codes_are_the_same_in_every_format() {
    let cases: &[(&str, &[&str], i32)] = &[
        ("clean", &[], 0),
        ("label-mismatch", &[], 1),
        ("doc-stale-mention", &[], 0),
        ("doc-stale-mention", &["-D", "warnings"], 1),
        ("label-mismatch", &["-A", "label-mismatch"], 0),
        ("label-mismatch", &["-D", "no-such-rule"], 2),
    ];
    for (fixture, flags, expected) in cases {
        let dir = fixture_copy(fixture);
        for format in FORMATS {
            let mut args = vec!["--format", format];
            args.extend_from_slice(flags);
            let out = dwlint(dir.path(), &args);
            assert_eq!(
                out.status.code(),
                Some(*expected),
                "{fixture} {flags:?} --format {format}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    for format in FORMATS {
        let out = dwlint(Path::new("."), &["/no/such/tree", "--format", format]);
        assert_eq!(out.status.code(), Some(2), "{format}");
    }
}

#[test]
fn one_run_writes_several_reports() {
    let dir = fixture_copy("label-mismatch");
    let outputs = [
        "--output",
        "sarif=out/dwlint.sarif",
        "--output",
        "junit=report.xml",
        "--output",
        "short=-",
    ];
    let out = dwlint(dir.path(), &outputs);
    // `out/` does not exist: writing there fails the run, naming the file.
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("out/dwlint.sarif"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let out = dwlint(dir.path(), &outputs);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout(&out).lines().count(), 5, "short on stdout only");
    let sarif: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/dwlint.sarif")).unwrap())
            .unwrap();
    assert_eq!(sarif["runs"][0]["results"].as_array().unwrap().len(), 5);
    let junit = std::fs::read_to_string(dir.path().join("report.xml")).unwrap();
    assert_eq!(junit.matches("<failure ").count(), 5);
    let both_on_stdout = dwlint(dir.path(), &["--output", "json=-", "--output", "github=-"]);
    assert_eq!(both_on_stdout.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both_on_stdout.stderr).contains("standard output"));
}

#[test]
fn a_clean_run_in_short_format_prints_nothing() {
    let dir = fixture_copy("clean");
    let out = dwlint(dir.path(), &["--format", "short"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out), "");
}

/// `dwlint check ARGS` in `dir` with the given environment, human format.
fn human_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dwlint"));
    command
        .arg("check")
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("GITHUB_STEP_SUMMARY");
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().expect("run dwlint");
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn human_headers_and_paths_are_like_rustc_and_open_from_the_working_directory() {
    let dir = fixture_copy("label-mismatch");
    let parent = dir.path().parent().unwrap();
    let name = dir.path().file_name().unwrap().to_str().unwrap();
    let env = [("LC_ALL", "C"), ("COLUMNS", "100")];
    let human = human_in(parent, &[name], &env);
    assert!(
        human.starts_with("error[label-mismatch]: `dw_runs_total` is emitted here"),
        "{human}"
    );
    // The same clickable path:line:col as `short`, relative to where it ran.
    let short = Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(["check", "--format", "short", name])
        .current_dir(parent)
        .output()
        .unwrap();
    let first = String::from_utf8_lossy(&short.stdout)
        .lines()
        .next()
        .unwrap()
        .split(": ")
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(first, format!("{name}/src/lib.rs:9:19"));
    assert!(human.contains(&format!("--> {first}\n")), "{human}");
    // The policy entry's frame is drawn once; later findings point at it.
    assert_eq!(
        human
            .matches("note: policy entry [metrics.dw_runs_total]")
            .count(),
        1,
        "{human}"
    );
    assert!(human.matches("shown above").count() >= 2, "{human}");
}

#[test]
fn human_frames_are_ascii_when_the_terminal_or_locale_asks_and_fit_the_width() {
    let dir = fixture_copy("label-mismatch");
    let unicode = human_in(
        dir.path(),
        &["."],
        &[
            ("LC_ALL", "en_US.UTF-8"),
            ("TERM", "xterm"),
            ("COLUMNS", "100"),
        ],
    );
    assert!(unicode.contains('╭'), "{unicode}");
    for env in [
        [
            ("LC_ALL", "en_US.UTF-8"),
            ("TERM", "dumb"),
            ("COLUMNS", "100"),
        ],
        [("LC_ALL", "C"), ("TERM", "xterm"), ("COLUMNS", "100")],
        [
            ("LC_ALL", ""),
            ("LANG", "en_US.ISO-8859-1"),
            ("COLUMNS", "100"),
        ],
    ] {
        let ascii = human_in(dir.path(), &["."], &env);
        assert!(ascii.is_ascii(), "{env:?}: {ascii}");
        assert!(ascii.contains("  --> src/lib.rs:9:19"), "{env:?}: {ascii}");
    }
    // A source line longer than the terminal is cut to its width.
    let source_line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with(" 9 |"))
            .unwrap()
            .to_owned()
    };
    let narrow = source_line(&human_in(
        dir.path(),
        &["."],
        &[("LC_ALL", "C"), ("COLUMNS", "60")],
    ));
    let wide = source_line(&human_in(
        dir.path(),
        &["."],
        &[("LC_ALL", "C"), ("COLUMNS", "300")],
    ));
    assert!(narrow.len() <= 60, "{narrow}");
    assert!(wide.ends_with(".increment(1);"), "{wide}");
    assert!(!narrow.ends_with(".increment(1);"), "{narrow}");
}
