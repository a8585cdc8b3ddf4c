//! The policy layer: the policy file as the gate sees it, the model plus
//! its text, so that findings can point into it; and [`draft`], the policy
//! as `init` and `policy import` write it.
//!
//! It sits above only [`crate::base`]: loading checks the policy's own
//! structure (`dwpolicy`), not which rule codes its `[rules]` table may
//! name, which is the rules layer's to say (`rules::config::load_policy`).

pub mod draft;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use dwpolicy::{Policy, Span};

use crate::base::bounded_read;
use crate::base::diagnostic::Anchor;
use crate::base::error::RunError;
use crate::base::line_index::LineIndex;

/// The default policy location, relative to the checked root.
pub const DEFAULT_POLICY: &str = "policy/dw-bounded-growth.toml";

/// A loaded policy with its source text.
pub struct PolicyFile {
    /// Path shown in findings: relative to the root when inside it.
    pub display_path: String,
    /// The policy text.
    pub text: String,
    /// The validated model.
    pub policy: Policy,
    /// Built at the first anchor: a clean run anchors nothing here, and
    /// indexing a megabyte policy's lines cost 1 % of such a run, on the
    /// thread every other phase waits for. Behind a lock because the index
    /// remembers its last position (a `Cell`) and the rules, which anchor
    /// findings here, run on two threads.
    lines: OnceLock<Mutex<LineIndex>>,
}

impl PolicyFile {
    /// Loads `path` (or `root/policy/dw-bounded-growth.toml`), collecting every
    /// structural problem into one [`RunError::PolicyInvalid`]. Its rule
    /// codes are left to the caller to check.
    pub fn load(root: &Path, path: Option<&Path>) -> Result<PolicyFile, RunError> {
        let path: PathBuf = match path {
            Some(p) => p.to_path_buf(),
            None => {
                let default = root.join(DEFAULT_POLICY);
                if !default.exists() {
                    return Err(RunError::PolicyNotFound(default));
                }
                default
            }
        };
        let text =
            bounded_read::read_text(&path, bounded_read::MAX_POLICY_BYTES).map_err(|source| {
                RunError::PolicyUnreadable {
                    path: path.clone(),
                    source,
                }
            })?;
        Self::from_text(display_path(root, &path), text)
    }

    /// A policy held in memory (`dwlint init` discovers with one it never
    /// writes), validated exactly like a file.
    pub fn from_text(display_path: String, text: String) -> Result<PolicyFile, RunError> {
        let invalid = |errors| RunError::PolicyInvalid {
            path: display_path.clone(),
            text: text.clone(),
            errors,
        };
        let policy = dwpolicy::load::load(&text).map_err(|e| invalid(e.errors))?;
        Ok(PolicyFile {
            display_path,
            lines: OnceLock::new(),
            text,
            policy,
        })
    }

    /// An anchor on `span` of the policy file.
    pub fn anchor(&self, span: Span, label: impl Into<String>) -> Anchor {
        let range = self
            .lines
            .get_or_init(|| Mutex::new(LineIndex::new(&self.text)))
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .range(&self.text, span.start, span.end);
        Anchor::labeled(self.display_path.clone(), range, label)
    }
}

fn display_path(root: &Path, path: &Path) -> String {
    let shown = match (root.canonicalize(), path.canonicalize()) {
        (Ok(root), Ok(full)) => full
            .strip_prefix(&root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    };
    shown.to_string_lossy().replace('\\', "/")
}
