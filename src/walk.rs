//! Finding the files a policy's `[sources]` globs select.
//!
//! One parallel walk of the root (honouring `.gitignore`, even outside a git
//! repository) tags every file with the roles its path matches: cache source,
//! metric source, doc, remote-write config. Excluded and untagged files are
//! dropped before anything reads them.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dwpolicy::{LoadError, Spanned};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use ignore::{WalkBuilder, WalkState};

use crate::error::RunError;
use crate::policy_file::PolicyFile;

/// Which `[sources]` lists a file is in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Roles {
    /// Searched for cache prefixes and scan-limit keys.
    pub cache: bool,
    /// Searched for metric names and labels.
    pub metrics: bool,
    /// An operator doc.
    pub docs: bool,
    /// A scrape / remote-write config.
    pub remote_write: bool,
}

impl Roles {
    /// Whether the file is scanned as source.
    pub fn is_source(self) -> bool {
        self.cache || self.metrics || self.remote_write
    }

    fn any(self) -> bool {
        self.is_source() || self.docs
    }
}

/// A file selected by the policy.
#[derive(Debug, Clone)]
pub struct SelectedFile {
    /// Path relative to the root, `/`-separated.
    pub rel: String,
    /// Path on disk.
    pub path: PathBuf,
    /// What the file is searched for.
    pub roles: Roles,
}

struct Globs {
    cache: GlobSet,
    metrics: GlobSet,
    docs: GlobSet,
    remote_write: GlobSet,
    exclude: GlobSet,
}

impl Globs {
    fn roles(&self, rel: &str) -> Roles {
        if self.exclude.is_match(rel) {
            return Roles::default();
        }
        Roles {
            cache: self.cache.is_match(rel),
            metrics: self.metrics.is_match(rel),
            docs: self.docs.is_match(rel),
            remote_write: self.remote_write.is_match(rel),
        }
    }
}

fn glob_set(globs: &[Spanned<String>], errors: &mut Vec<LoadError>) -> GlobSet {
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        let pattern = glob.value.trim_start_matches("./");
        match GlobBuilder::new(pattern).literal_separator(true).build() {
            Ok(g) => {
                builder.add(g);
            }
            Err(e) => errors.push(LoadError {
                message: format!("invalid glob `{}`: {}", glob.value, e.kind()),
                span: Some(glob.span),
                help: Some("globs are relative to the checked root; `**` crosses directories, `*` does not".into()),
            }),
        }
    }
    builder.build().unwrap_or_else(|_| GlobSet::empty())
}

/// Every file under `root` that the policy's sources select, sorted by path.
pub fn select_files(root: &Path, policy_file: &PolicyFile) -> Result<Vec<SelectedFile>, RunError> {
    let sources = &policy_file.policy.sources;
    let mut errors = Vec::new();
    let globs = Globs {
        cache: glob_set(&sources.cache, &mut errors),
        metrics: glob_set(&sources.metrics, &mut errors),
        docs: glob_set(&sources.docs, &mut errors),
        remote_write: glob_set(&sources.remote_write, &mut errors),
        exclude: glob_set(&sources.exclude, &mut errors),
    };
    if !errors.is_empty() {
        return Err(RunError::PolicyInvalid {
            path: policy_file.display_path.clone(),
            text: policy_file.text.clone(),
            errors,
        });
    }
    let selected = Mutex::new(Vec::new());
    WalkBuilder::new(root)
        .require_git(false)
        .build_parallel()
        .run(|| {
            let globs = &globs;
            let selected = &selected;
            Box::new(move |entry| {
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return WalkState::Continue;
                }
                let Ok(rel) = entry.path().strip_prefix(root) else {
                    return WalkState::Continue;
                };
                let rel = rel.to_string_lossy().replace('\\', "/");
                let roles = globs.roles(&rel);
                if roles.any() {
                    let file = SelectedFile {
                        rel,
                        path: entry.into_path(),
                        roles,
                    };
                    selected
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(file);
                }
                WalkState::Continue
            })
        });
    let mut files = selected.into_inner().unwrap_or_else(|e| e.into_inner());
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(files)
}
