//! The discover layer: which files a run is about. This module finds the
//! policy and the root; [`walk`] lists the tree's files and selects those
//! the policy's `[sources]` name; [`changed`] says which of them changed.
//! It uses the [`crate::policy`] and [`crate::base`] layers only.
//!
//! Finding the policy, and with it the root of the checked tree, when
//! `--policy` is not given.
//!
//! Users run the gate from wherever they are, often a subdirectory, the way
//! they run cargo or ruff. The policy's globs are written relative to the
//! directory that holds the policy (the project root), so the root follows
//! the discovered policy: `dwlint check` in `crates/engine/` checks the
//! whole project that its policy describes, not a subtree where every glob
//! would match nothing. The search stops at the repository root (a directory
//! with `.git`) so that a stray file above a checkout is never picked up.

pub mod changed;
pub mod walk;

use std::path::{Path, PathBuf};

use crate::base::error::RunError;

/// The file names looked for in each directory, in order of preference;
/// the root is the directory where the search stood when one matched.
pub const CANDIDATES: &[&str] = &[
    "policy/dw-bounded-growth.toml",
    "dwlint.toml",
    ".dwlint.toml",
];

/// A discovered policy and the root its globs are relative to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The checked root: the given path, or the ancestor of it that holds the policy.
    pub root: PathBuf,
    /// The policy file.
    pub policy: PathBuf,
}

/// The root and policy a command works on: `--policy` with `start` as the
/// root, or the discovered policy and its root. Shared by every command
/// that reads the policy, so they all agree on both.
pub fn locate(start: &Path, policy: Option<&Path>) -> Result<Discovered, RunError> {
    if !start.is_dir() {
        return Err(RunError::NoSuchPath(start.to_path_buf()));
    }
    match policy {
        Some(policy) => Ok(Discovered {
            root: start.to_path_buf(),
            policy: policy.to_path_buf(),
        }),
        None => discover(start),
    }
}

/// Searches `start` and its parents for a policy file.
pub fn discover(start: &Path) -> Result<Discovered, RunError> {
    let absolute = start
        .canonicalize()
        .map_err(|_| RunError::NoSuchPath(start.to_path_buf()))?;
    for (depth, dir) in absolute.ancestors().enumerate() {
        for candidate in CANDIDATES {
            // Anything at a policy's name is taken for it, a FIFO or a
            // directory included: loading it then says what it is, where
            // passing it over said "no policy file found" beside it.
            if dir.join(candidate).exists() {
                let root = up(start, depth);
                return Ok(Discovered {
                    policy: root.join(candidate),
                    root,
                });
            }
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    Err(RunError::PolicyNotFound(start.to_path_buf()))
}

/// `start` followed by `depth` `..` components, kept relative when `start`
/// is, so that paths shown to the user stay short.
fn up(start: &Path, depth: usize) -> PathBuf {
    if depth == 0 {
        return start.to_path_buf();
    }
    let mut root = if start == Path::new(".") {
        PathBuf::new()
    } else {
        start.to_path_buf()
    };
    for _ in 0..depth {
        root.push("..");
    }
    root
}

/// Where `root` sits inside its git repository, as a `/`-terminated prefix
/// ("" at the repository root or outside any repository). GitHub resolves
/// annotation and SARIF paths against the repository root, not ours.
pub fn repo_prefix(root: &Path) -> String {
    let Ok(absolute) = root.canonicalize() else {
        return String::new();
    };
    let Some(repo) = absolute.ancestors().find(|dir| dir.join(".git").exists()) else {
        return String::new();
    };
    let Ok(inner) = absolute.strip_prefix(repo) else {
        return String::new();
    };
    let inner = inner.to_string_lossy().replace('\\', "/");
    if inner.is_empty() {
        inner
    } else {
        format!("{inner}/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "schema_version = 1\n").unwrap();
    }

    #[test]
    fn the_first_candidate_upward_wins_and_sets_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        std::fs::create_dir(base.join(".git")).unwrap();
        touch(&base.join("dwlint.toml"));
        touch(&base.join("a/.dwlint.toml"));
        std::fs::create_dir_all(base.join("a/b/c")).unwrap();
        let found = discover(&base.join("a/b/c")).unwrap();
        assert_eq!(found.root, base.join("a/b/c/../.."));
        assert_eq!(found.policy, base.join("a/b/c/../../.dwlint.toml"));
        touch(&base.join("a/b/policy/dw-bounded-growth.toml"));
        touch(&base.join("a/b/dwlint.toml"));
        let found = discover(&base.join("a/b")).unwrap();
        assert_eq!(found.root, base.join("a/b"));
        assert_eq!(found.policy, base.join("a/b/policy/dw-bounded-growth.toml"));
    }

    #[test]
    fn the_search_stops_at_the_repository_root() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("dwlint.toml"));
        std::fs::create_dir_all(dir.path().join("repo/.git")).unwrap();
        std::fs::create_dir_all(dir.path().join("repo/src")).unwrap();
        let err = discover(&dir.path().join("repo/src")).unwrap_err();
        assert!(matches!(err, RunError::PolicyNotFound(_)), "{err}");
    }

    #[test]
    fn a_relative_start_stays_relative() {
        assert_eq!(up(Path::new("."), 2), PathBuf::from("../.."));
        assert_eq!(up(Path::new("sub"), 1), PathBuf::from("sub/.."));
        assert_eq!(up(Path::new("."), 0), PathBuf::from("."));
    }

    #[test]
    fn the_repository_prefix_locates_a_subdirectory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::create_dir_all(dir.path().join("x/y")).unwrap();
        assert_eq!(repo_prefix(&dir.path().join("x/y")), "x/y/");
        assert_eq!(repo_prefix(dir.path()), "");
    }
}
