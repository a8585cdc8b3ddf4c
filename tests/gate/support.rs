//! What every integration test shares: running the real binary, and
//! building or copying the small trees it runs on.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `dwlint ARGS` in the test's working directory, without colour and
/// without a GitHub step summary to append to.
pub fn dwlint(args: &[&str]) -> Output {
    command(args).output().expect("run dwlint")
}

/// Runs `dwlint ARGS` in `dir`.
pub fn dwlint_in(dir: &Path, args: &[&str]) -> Output {
    command(args).current_dir(dir).output().expect("run dwlint")
}

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dwlint"));
    command
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("GITHUB_STEP_SUMMARY");
    command
}

/// The finding codes of a JSON report on standard output, in report order.
pub fn json_codes(out: &Output) -> Vec<String> {
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON report ({e}): {}{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    report["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .map(|d| d["code"].as_str().expect("code").to_owned())
        .collect()
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `contents` to `root/rel`, creating directories.
pub fn write(root: &Path, rel: &str, contents: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("a file has a parent")).unwrap();
    std::fs::write(path, contents).unwrap();
}

/// A copy of `fixtures/NAME` without its snapshots, in a temporary
/// directory outside any git repository.
pub fn fixture_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    copy_tree(&from, dir.path(), &|name| name.ends_with(".snap"));
    dir
}

/// Copies the tree `from` into `to`, leaving out files `skip` names.
pub fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&str) -> bool) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target, skip);
        } else if !skip(&entry.file_name().to_string_lossy()) {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
