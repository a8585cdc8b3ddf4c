//! The engine's (and the soak harness's) policy and doc, gated: the committed tree passes, and
//! removing any one policy entry or any one doc mention makes it fail.
//!
//! Works on a copy of the engine's sources, policy and operator doc in a
//! temp dir, so each mutation is checked by the real `dwlint` binary
//! without touching the repository.

use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn tree() -> tempfile::TempDir {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    copy_dir(
        &repo.join("crates/dwengine/src"),
        &dir.path().join("crates/dwengine/src"),
    );
    std::fs::copy(
        repo.join("crates/dwengine/Cargo.toml"),
        dir.path().join("crates/dwengine/Cargo.toml"),
    )
    .unwrap();
    // The soak harness's dw_perf_* metrics and remote-write config are in
    // the same policy.
    for part in ["src", "prometheus"] {
        copy_dir(
            &repo.join("crates/dwsoak").join(part),
            &dir.path().join("crates/dwsoak").join(part),
        );
    }
    std::fs::copy(
        repo.join("crates/dwsoak/Cargo.toml"),
        dir.path().join("crates/dwsoak/Cargo.toml"),
    )
    .unwrap();
    copy_dir(&repo.join("policy"), &dir.path().join("policy"));
    std::fs::create_dir_all(dir.path().join("docs")).unwrap();
    std::fs::copy(
        repo.join("docs/bounded-growth.md"),
        dir.path().join("docs/bounded-growth.md"),
    )
    .unwrap();
    dir
}

/// (exit code, the finding codes and subjects).
fn check(root: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(["check", "--format", "json", "--color", "never"])
        .arg(root)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Every `[cache_keys.X]`, `[scan_limits.X]` and `[metrics.X]` header with its section's text.
fn entries(policy: &str) -> Vec<(String, String)> {
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in policy.split_inclusive('\n') {
        let header = line.trim();
        if header.starts_with('[') {
            sections.push((header.to_owned(), String::new()));
        }
        if let Some((_, text)) = sections.last_mut() {
            text.push_str(line);
        }
    }
    sections
        .into_iter()
        .filter(|(h, _)| {
            ["[cache_keys.", "[scan_limits.", "[metrics."]
                .iter()
                .any(|p| h.starts_with(p))
        })
        .collect()
}

fn field(section: &str, key: &str) -> Option<String> {
    section.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
    })
}

#[test]
fn the_engine_passes_and_every_entry_and_doc_mention_is_load_bearing() {
    let dir = tree();
    let root = dir.path();
    let (code, out) = check(root);
    assert_eq!(code, Some(0), "the committed engine tree must pass: {out}");

    let policy_path = root.join("policy/dw-bounded-growth.toml");
    let doc_path = root.join("docs/bounded-growth.md");
    let policy = std::fs::read_to_string(&policy_path).unwrap();
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let entries = entries(&policy);
    assert!(
        entries.len() >= 13,
        "cache keys, scan limits and metrics: {}",
        entries.len()
    );

    for (header, section) in &entries {
        let id = header
            .trim_matches(|c| c == '[' || c == ']')
            .split_once('.')
            .map(|(_, id)| id.to_owned())
            .unwrap();

        std::fs::write(&policy_path, policy.replace(section.as_str(), "")).unwrap();
        let (code, out) = check(root);
        assert_eq!(code, Some(1), "removing {header} must fail the gate: {out}");
        std::fs::write(&policy_path, &policy).unwrap();

        let mut mentions = vec![id.clone()];
        mentions.extend(field(section, "prefix"));
        mentions.extend(field(section, "config_key"));
        for mention in mentions {
            let without: String = doc
                .split_inclusive('\n')
                .filter(|line| !line.contains(&mention))
                .collect();
            std::fs::write(&doc_path, without).unwrap();
            let (code, out) = check(root);
            assert_eq!(
                code,
                Some(1),
                "dropping the doc mention {mention:?} must fail: {out}"
            );
            assert!(out.contains("doc-missing-mention"), "{out}");
            std::fs::write(&doc_path, &doc).unwrap();
        }
    }
    assert_eq!(check(root).0, Some(0), "restored tree passes again");
}
