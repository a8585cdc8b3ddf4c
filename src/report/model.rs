//! What a report says: the findings of a run and what the run was, as
//! every reporter takes them.
//!
//! `check` fills it from the pipeline; `evidence verify` and `live` fill it
//! from their own findings (see `commands::single_report`), so every report
//! format and exit code works the same for all three.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::base::diagnostic::{Diagnostic, Severity};
use crate::base::timings::Timings;
use crate::discover::changed::Mode;
use crate::rules::Rule;

/// The outcome of a completed check (or of `evidence verify` and `live`).
pub struct CheckReport {
    /// Findings in report order.
    pub diagnostics: Vec<Diagnostic>,
    /// How many files the policy selected.
    pub files_scanned: usize,
    /// The policy file, as shown in findings.
    pub policy_path: String,
    /// The checked root.
    pub root: PathBuf,
    /// Whether discovery moved the root above the path the user gave.
    pub root_moved: bool,
    /// Where the root sits in its git repository (`""` or `dir/`), for
    /// consumers that resolve paths against the repository (GitHub).
    pub repo_prefix: String,
    /// Which mode ran.
    pub mode: Mode,
    /// Every rule with the severity it ran at (`None`: allowed, not run).
    pub severities: Vec<(&'static Rule, Option<Severity>)>,
    /// Warnings about the run rather than the tree (a source glob that
    /// matched nothing), for standard error.
    pub notes: Vec<String>,
    /// The files the run read, which no report may overwrite.
    pub inputs: Inputs,
    /// How long each phase took (printed by `check --timings`).
    pub timings: Timings,
}

impl std::fmt::Debug for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckReport")
            .field("diagnostics", &self.diagnostics)
            .field("files_scanned", &self.files_scanned)
            .field("policy_path", &self.policy_path)
            .field("root", &self.root)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl CheckReport {
    /// Number of findings at `severity`.
    pub fn count(&self, severity: Severity) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == severity)
            .count()
    }

    /// Whether the run should fail (exit 1).
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// The exit code this report implies (0 or 1).
    pub fn exit_code(&self) -> i32 {
        i32::from(self.has_errors())
    }
}

/// The files a run read: the policy and every selected file.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The checked root, canonical.
    root: Option<PathBuf>,
    /// Selected files, relative to the root.
    files: HashSet<String>,
    /// The policy, canonical.
    policy: Option<PathBuf>,
}

impl Inputs {
    /// The inputs of a run on `root` that read `files` (root-relative) and `policy`.
    pub fn new<'a>(root: &Path, files: impl Iterator<Item = &'a str>, policy: &Path) -> Inputs {
        Inputs {
            root: root.canonicalize().ok(),
            files: files.map(str::to_owned).collect(),
            policy: policy.canonicalize().ok(),
        }
    }

    /// Whether writing `path` would replace one of the inputs: the same
    /// path once symbolic links are resolved, or the same file (device and
    /// inode) under another name, as a hard link is.
    pub fn contains(&self, path: &Path) -> bool {
        // A file that does not exist yet is no input.
        let Ok(full) = path.canonicalize() else {
            return false;
        };
        if self.policy.as_ref() == Some(&full) {
            return true;
        }
        let under_root = self.root.as_ref().and_then(|r| full.strip_prefix(r).ok());
        if under_root.is_some_and(|rel| {
            self.files
                .contains(&rel.to_string_lossy().replace('\\', "/"))
        }) {
            return true;
        }
        self.hard_link_of_an_input(&full)
    }

    /// Whether `full` (canonical, existing) is a second name of an input.
    /// Only a file with more than one link can be: the inputs are looked
    /// at only then, so the usual case costs one `stat`.
    #[cfg(unix)]
    fn hard_link_of_an_input(&self, full: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(full) else {
            return false;
        };
        if meta.nlink() < 2 {
            return false;
        }
        let same = |input: &Path| {
            std::fs::metadata(input).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
        };
        self.policy.as_deref().is_some_and(same)
            || self
                .root
                .as_ref()
                .is_some_and(|root| self.files.iter().any(|rel| same(&root.join(rel))))
    }

    /// Elsewhere a hard link cannot be told apart cheaply; the canonical
    /// path check above is all there is.
    #[cfg(not(unix))]
    fn hard_link_of_an_input(&self, _full: &Path) -> bool {
        false
    }
}
