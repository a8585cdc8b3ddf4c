//! `dwlint docs`: marked tables follow the policy, prose never moves.

use crate::support::{dwlint, text};

use std::path::Path;
use std::process::Output;

fn data(rel: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/data/docs/{rel}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A tree with the test policy and `doc` as docs/bounded-growth.md.
fn tree(doc: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policy")).unwrap();
    std::fs::create_dir_all(dir.path().join("docs")).unwrap();
    std::fs::write(
        dir.path().join("policy/dw-bounded-growth.toml"),
        data("policy.toml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("docs/bounded-growth.md"), doc).unwrap();
    dir
}

fn doc(root: &Path) -> String {
    std::fs::read_to_string(root.join("docs/bounded-growth.md")).unwrap()
}

fn docs(root: &Path, mode: &str) -> Output {
    dwlint(&["docs", root.to_str().unwrap(), mode])
}

/// The parts of a doc outside its marked regions, marker lines included
/// (markers inside a ``` fence are prose).
fn prose(doc: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let (mut inside, mut fenced) = (false, false);
    for line in doc.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let marker = |edge: &str| !fenced && line.contains("dwlint:") && line.contains(edge);
        if marker(":end") {
            inside = false;
            parts.push(String::new());
        }
        if !inside {
            parts.last_mut().unwrap().push_str(line);
        }
        if marker(":start") {
            inside = true;
        }
    }
    parts
}

#[test]
fn write_regenerates_the_tables_and_keeps_the_prose_byte_for_byte() {
    let stale = data("stale.md");
    let dir = tree(&stale);
    let out = docs(dir.path(), "--write");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("docs/bounded-growth.md: tables regenerated"));
    let written = doc(dir.path());
    assert_eq!(prose(&written), prose(&stale));
    assert_eq!(prose(&written).len(), 4, "three regions");
    assert!(written.contains(
        "```markdown\n<!-- dwlint:scan-limits:start -->\nthis fenced example is not a region\n"
    ));
    insta::assert_snapshot!(written);
    // A second write is a no-op, and the result is fresh.
    assert_eq!(docs(dir.path(), "--write").status.code(), Some(0));
    assert_eq!(doc(dir.path()), written);
    let out = docs(dir.path(), "--check");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("tables are up to date"));
}

#[test]
fn check_fails_with_a_diff_and_changes_nothing() {
    let stale = data("stale.md");
    let dir = tree(&stale);
    let out = docs(dir.path(), "--check");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(doc(dir.path()), stale);
    insta::assert_snapshot!(text(&out.stdout));
}

#[test]
fn crlf_docs_keep_their_line_endings() {
    let stale = data("stale.md").replace('\n', "\r\n");
    let dir = tree(&stale);
    assert_eq!(docs(dir.path(), "--write").status.code(), Some(0));
    let written = doc(dir.path());
    assert!(!written.replace("\r\n", "").contains('\n'), "{written:?}");
    assert_eq!(prose(&written), prose(&stale));
}

#[test]
fn a_doc_without_markers_is_left_alone_and_the_run_fails() {
    let plain = "# Bounded growth\n\nlong_poll_signals, server:long-poll-signal:\n";
    let dir = tree(plain);
    for mode in ["--write", "--check"] {
        let out = docs(dir.path(), mode);
        assert_eq!(out.status.code(), Some(2));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("no dwlint table markers in docs/bounded-growth.md"),
            "{stderr}"
        );
        assert_eq!(doc(dir.path()), plain);
    }
}

#[test]
fn broken_markers_and_bad_arguments_are_exit_2() {
    let dir = tree("# x\n\n<!-- dwlint:metric-inventory:start -->\n| old |\n");
    let out = docs(dir.path(), "--write");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "docs/bounded-growth.md:3: `metric-inventory` start marker has no end marker"
        ),
        "{stderr}"
    );
    assert_eq!(
        dwlint(&["docs", dir.path().to_str().unwrap()])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        dwlint(&["docs", dir.path().to_str().unwrap(), "--write", "--check"])
            .status
            .code(),
        Some(2)
    );
    std::fs::remove_file(dir.path().join("docs/bounded-growth.md")).unwrap();
    let out = docs(dir.path(), "--check");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no operator doc matches [sources].docs"));
}

#[test]
fn the_repository_docs_are_fresh() {
    let out = docs(Path::new(env!("CARGO_MANIFEST_DIR")), "--check");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
