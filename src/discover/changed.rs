//! Changed-files mode: which files a run reports file-local findings for.
//!
//! A pull request or a commit should be judged on what it touches, so
//! file-local rules (the rules layer's `Scope::File`) report only on
//! changed files. Tree-wide rules still look at the whole tree because a
//! change in one place (deleting the last use of a prefix) breaks them
//! elsewhere. The whole tree is still scanned: tree-wide rules need it, and
//! filtering findings afterwards keeps the rules unaware of the mode.
//!
//! Changes come from real `git` (no library binding to build or keep in
//! step with the user's git): everything since the merge base with the
//! given revision, plus staged, unstaged and untracked files.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::base::error::RunError;

/// What the user asked to limit the run to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Selection {
    /// Report on the whole tree.
    #[default]
    Full,
    /// Files changed since a git revision, plus working-tree changes.
    ChangedSince(String),
    /// Files named on the command line (as pre-commit passes them),
    /// relative to the current directory.
    Files(Vec<PathBuf>),
}

/// Which mode ran, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Every finding in the tree.
    Full,
    /// File-local findings only for files changed since `rev`.
    ChangedSince {
        /// The revision given.
        rev: String,
        /// How many changed files (under the root) there were.
        files: usize,
    },
    /// File-local findings only for the files given.
    Files {
        /// How many given files lie under the root.
        files: usize,
    },
}

impl Mode {
    /// The machine name used in JSON and SARIF.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::ChangedSince { .. } => "changed-since",
            Mode::Files { .. } => "files",
        }
    }

    /// A few words for people.
    pub fn describe(&self) -> String {
        let files = |n: usize| format!("{n} file{}", if n == 1 { "" } else { "s" });
        match self {
            Mode::Full => "whole tree".to_owned(),
            Mode::ChangedSince { rev, files: n } => {
                format!("{} changed since {rev}", files(*n))
            }
            Mode::Files { files: n } => format!("{} given", files(*n)),
        }
    }
}

/// Root-relative, `/`-separated paths whose file-local findings are kept.
#[derive(Debug, Clone, Default)]
pub struct ChangedFiles {
    files: HashSet<String>,
    dirs: Vec<String>,
}

impl ChangedFiles {
    /// Whether findings in `rel` are reported.
    pub fn contains(&self, rel: &str) -> bool {
        self.files.contains(rel)
            || self.dirs.iter().any(|d| {
                d.is_empty()
                    || rel
                        .strip_prefix(d.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            })
    }

    fn len(&self) -> usize {
        self.files.len() + self.dirs.len()
    }
}

/// Resolves `selection` against the tree at `root`: the mode to report and,
/// unless the whole tree is reported, the files to keep findings for.
pub fn resolve(
    root: &Path,
    selection: &Selection,
) -> Result<(Mode, Option<ChangedFiles>), RunError> {
    match selection {
        Selection::Full => Ok((Mode::Full, None)),
        Selection::ChangedSince(rev) => {
            let changed = changed_since(root, rev)?;
            let mode = Mode::ChangedSince {
                rev: rev.clone(),
                files: changed.len(),
            };
            Ok((mode, Some(changed)))
        }
        Selection::Files(paths) => {
            // As for the root: a path that names nothing is a failed run,
            // not a file without findings.
            if let Some(missing) = paths.iter().find(|p| std::fs::symlink_metadata(p).is_err()) {
                return Err(RunError::NoSuchPath(missing.clone()));
            }
            let changed = given_files(root, paths);
            Ok((
                Mode::Files {
                    files: changed.len(),
                },
                Some(changed),
            ))
        }
    }
}

fn given_files(root: &Path, paths: &[PathBuf]) -> ChangedFiles {
    let mut changed = ChangedFiles::default();
    let Ok(root) = root.canonicalize() else {
        return changed;
    };
    for path in paths {
        let Some(absolute) = absolute(path) else {
            continue;
        };
        let Ok(rel) = absolute.strip_prefix(&root) else {
            continue;
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if absolute.is_dir() {
            changed.dirs.push(rel);
        } else {
            changed.files.insert(rel);
        }
    }
    changed
}

/// `path` made absolute with symlinks resolved where it exists, so that it
/// compares with the canonical root; a deleted file keeps its name under
/// its canonical parent.
fn absolute(path: &Path) -> Option<PathBuf> {
    if let Ok(full) = path.canonicalize() {
        return Some(full);
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Some(parent.canonicalize().ok()?.join(path.file_name()?))
}

fn changed_since(root: &Path, rev: &str) -> Result<ChangedFiles, RunError> {
    if rev.starts_with('-') {
        return Err(RunError::Git(format!("`{rev}` is not a revision")));
    }
    git(
        root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .map_err(|_| {
        RunError::Git(format!(
            "`{rev}` is not a commit in the repository at {}",
            root.display()
        ))
    })?;
    // The merge base makes `--changed-since main` mean "what this branch
    // changed", not also everything main gained since the branch forked. A
    // shallow clone may lack it; diffing against the revision itself then
    // reports a superset, which is safe.
    let base = git(root, &["merge-base", rev, "HEAD"])
        .ok()
        .map(|out| String::from_utf8_lossy(&out).trim().to_owned())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| rev.to_owned());
    let mut changed = ChangedFiles::default();
    let diffs = git(
        root,
        &[
            "diff",
            "--name-only",
            "-z",
            "--no-renames",
            "--relative",
            &base,
            "--",
        ],
    )?;
    let untracked = git(root, &["ls-files", "-z", "--others", "--exclude-standard"])?;
    for name in diffs.split(|b| *b == 0).chain(untracked.split(|b| *b == 0)) {
        if !name.is_empty() {
            changed
                .files
                .insert(String::from_utf8_lossy(name).into_owned());
        }
    }
    Ok(changed)
}

fn git(root: &Path, args: &[&str]) -> Result<Vec<u8>, RunError> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .map_err(|e| RunError::Git(format!("cannot run git: {e}")))?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(RunError::Git(format!(
            "`git {}` failed: {}",
            args.join(" "),
            stderr.trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_match_what_lies_under_them() {
        let changed = ChangedFiles {
            files: ["src/a.rs".to_owned()].into(),
            dirs: vec!["docs".to_owned()],
        };
        assert!(changed.contains("src/a.rs"));
        assert!(changed.contains("docs/x.md"));
        assert!(!changed.contains("docsx/y.md"));
        assert!(!changed.contains("src/b.rs"));
    }

    #[test]
    fn given_files_are_made_relative_to_the_root_and_outsiders_dropped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("root/src")).unwrap();
        std::fs::write(dir.path().join("root/src/a.rs"), "").unwrap();
        std::fs::write(dir.path().join("outside.rs"), "").unwrap();
        let changed = given_files(
            &dir.path().join("root"),
            &[
                dir.path().join("root/src/a.rs"),
                dir.path().join("root/src/deleted.rs"),
                dir.path().join("outside.rs"),
            ],
        );
        assert!(changed.contains("src/a.rs"));
        assert!(changed.contains("src/deleted.rs"));
        assert_eq!(changed.len(), 2);
    }

    #[test]
    fn a_revision_that_looks_like_an_option_is_refused() {
        let err = changed_since(Path::new("."), "--output=x").unwrap_err();
        assert!(err.to_string().contains("is not a revision"), "{err}");
    }
}
