//! The command line around `check`: every rule documented at the place its
//! SARIF `helpUri` names, a man page per subcommand, rule codes in the
//! shell completions, and `--color` accepted by every command.

use crate::support;

use crate::support::{dwlint, text};

use std::path::Path;

fn codes() -> Vec<String> {
    let out = dwlint(&["rules"]);
    assert_eq!(out.status.code(), Some(0));
    text(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect()
}

#[test]
fn every_rule_has_its_doc_where_sarif_help_uri_points() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let codes = codes();
    assert!(codes.len() >= 18, "{codes:?}");
    for code in &codes {
        let explained = text(&dwlint(&["explain", code]).stdout);
        let path = root.join("docs/rules").join(format!("{code}.md"));
        let doc = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            doc,
            explained,
            "{} is missing or stale; regenerate with: for c in $(dwlint rules | cut -d' ' -f1); do dwlint explain $c > docs/rules/$c.md; done",
            path.display()
        );
    }
    let documented = std::fs::read_dir(root.join("docs/rules")).unwrap().count();
    assert_eq!(documented, codes.len(), "a doc in docs/rules names no rule");
    // SARIF names every rule of the run with a helpUri at that doc.
    let dir = support::fixture_copy("label-mismatch");
    let out = support::dwlint_in(dir.path(), &["check", "--format", "sarif"]);
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rules = log["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    assert!(!rules.is_empty());
    for rule in rules {
        let id = rule["id"].as_str().unwrap();
        let uri = rule["helpUri"].as_str().unwrap_or_default();
        assert_eq!(
            uri,
            format!(
                "{}/blob/v{}/docs/rules/{id}.md",
                env!("CARGO_PKG_REPOSITORY"),
                env!("CARGO_PKG_VERSION")
            )
        );
        assert!(root.join(format!("docs/rules/{id}.md")).is_file(), "{id}");
    }
}

#[test]
fn every_subcommand_has_a_man_page() {
    let base = tempfile::tempdir().unwrap();
    // A folder that does not exist yet is created, parents included.
    let dir = base.path().join("share/man/man1");
    let out = dwlint(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for page in [
        "dwlint.1",
        "dwlint-check.1",
        "dwlint-explain.1",
        "dwlint-rules.1",
        "dwlint-init.1",
        "dwlint-docs.1",
        "dwlint-policy.1",
        "dwlint-policy-import.1",
        "dwlint-completions.1",
        "dwlint-man.1",
        "dwlint-live.1",
        "dwlint-evidence-verify.1",
    ] {
        let roff =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(roff.contains(".SH NAME"), "{page}");
    }
    let check = text(&dwlint(&["man", "check"]).stdout);
    assert!(check.contains(".TH dwlint-check 1"), "{check}");
    assert!(check.contains("changed\\-since"), "{check}");
    let import = text(&dwlint(&["man", "policy", "import"]).stdout);
    assert!(import.contains(".TH dwlint-policy-import 1"), "{import}");
    let unknown = dwlint(&["man", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("no subcommand `nope`"));
    // A file where the folder should be is an error that names it.
    let file = base.path().join("taken");
    std::fs::write(&file, "").unwrap();
    let out = dwlint(&["man", "--dir", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("taken"), "{}", text(&out.stderr));
}

#[test]
fn completions_offer_rule_codes() {
    for shell in ["bash", "zsh", "fish"] {
        let script = text(&dwlint(&["completions", shell]).stdout);
        for code in ["label-mismatch", "undeclared-cache-prefix", "warnings"] {
            assert!(script.contains(code), "{shell}: no {code}");
        }
    }
    // Offered, not enforced: an unknown code still gets dwlint's own error.
    let out = dwlint(&["explain", "label-mismatc"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("label-mismatch"));
}

#[test]
fn every_command_takes_color() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    for args in [
        vec!["rules", "--color", "never"],
        vec!["explain", "label-mismatch", "--color", "always"],
        vec!["man", "--color", "never"],
        vec!["completions", "bash", "--color", "never"],
        vec!["--color", "never", "init", root],
        vec!["docs", root, "--check", "--color", "never"],
        vec!["policy", "import", "--color", "never", "missing.php"],
        vec!["check", root, "--color", "never"],
        vec!["evidence", "verify", "--color", "never", "missing.json"],
        vec!["live", "--color", "never", "--help"],
    ] {
        let out = dwlint(&args);
        let stderr = text(&out.stderr);
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
        assert_ne!(out.status.code(), None, "{args:?}");
    }
}

/// The code in an invalid policy's header (`error[invalid-policy]`) is
/// explained like a rule's, and listed with them.
#[test]
fn the_invalid_policy_code_is_explained() {
    let out = dwlint(&["explain", "invalid-policy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("## What it does"));
    assert!(text(&dwlint(&["rules"]).stdout).contains("invalid-policy"));
}
