//! Finding the files a policy's `[sources]` globs select.
//!
//! One parallel walk of the root (honouring `.gitignore`, even outside a git
//! repository) lists every file; the policy's globs then tag each with the
//! roles its path matches: cache source, metric source, doc, remote-write
//! config. Excluded and untagged files are dropped before anything reads
//! them. The walk needs no policy, so `check` runs it while the policy is
//! being loaded ([`find_files`], then [`Sources::select`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// Its place in the walk's list ([`find_files`]), which is how the
    /// files read ahead are known (`scan::Preread`).
    pub found_index: usize,
}

/// The longest glob compiled. Compiling is quadratic in a glob's length
/// (50,000 characters took minutes) and half a megabyte panicked inside
/// the glob compiler; a real glob is a few dozen characters.
pub const MAX_GLOB_BYTES: usize = 1024;

/// The files a policy selects, and what its globs missed.
#[derive(Debug, Default)]
pub struct Selected {
    /// Every selected file, sorted by path.
    pub files: Vec<SelectedFile>,
    /// `([sources] key, glob)` of each source glob that matched no file
    /// outside `exclude`.
    pub unmatched: Vec<(&'static str, String)>,
}

/// One `[sources]` list, compiled, remembering which of its globs matched.
struct Role {
    key: &'static str,
    set: GlobSet,
    globs: Vec<String>,
    matched: Vec<AtomicBool>,
    unmatched: AtomicUsize,
}

impl Role {
    fn new(key: &'static str, globs: &[Spanned<String>], errors: &mut Vec<LoadError>) -> Role {
        Role {
            key,
            set: glob_set(globs, errors),
            globs: globs.iter().map(|g| g.value.clone()).collect(),
            matched: globs.iter().map(|_| AtomicBool::new(false)).collect(),
            unmatched: AtomicUsize::new(globs.len()),
        }
    }

    /// Whether `rel` is in the list; notes which globs matched it while
    /// some have matched nothing yet.
    fn is_match(&self, rel: &str, scratch: &mut Vec<usize>) -> bool {
        if self.unmatched.load(Ordering::Relaxed) == 0 {
            return self.set.is_match(rel);
        }
        self.set.matches_into(rel, scratch);
        for &i in scratch.iter() {
            if !self.matched[i].swap(true, Ordering::Relaxed) {
                self.unmatched.fetch_sub(1, Ordering::Relaxed);
            }
        }
        !scratch.is_empty()
    }

    fn missed(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        self.globs
            .iter()
            .zip(&self.matched)
            .filter(|(_, m)| !m.load(Ordering::Relaxed))
            .map(|(g, _)| (self.key, g.clone()))
    }
}

struct Globs {
    cache: Role,
    metrics: Role,
    docs: Role,
    remote_write: Role,
    exclude: GlobSet,
}

impl Globs {
    fn roles(&self, rel: &str, scratch: &mut Vec<usize>) -> Roles {
        if self.exclude.is_match(rel) {
            return Roles::default();
        }
        Roles {
            cache: self.cache.is_match(rel, scratch),
            metrics: self.metrics.is_match(rel, scratch),
            docs: self.docs.is_match(rel, scratch),
            remote_write: self.remote_write.is_match(rel, scratch),
        }
    }
}

fn glob_set(globs: &[Spanned<String>], errors: &mut Vec<LoadError>) -> GlobSet {
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        if glob.value.len() > MAX_GLOB_BYTES {
            errors.push(LoadError {
                message: format!(
                    "glob of {} bytes is over the limit of {MAX_GLOB_BYTES} bytes",
                    glob.value.len()
                ),
                span: Some(glob.span),
                help: Some("split it into several shorter globs".into()),
            });
            continue;
        }
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

/// A file the walk found, before any glob looked at it.
#[derive(Debug, Clone)]
pub struct FoundFile {
    /// Path relative to the root, `/`-separated.
    pub rel: String,
    /// Path on disk.
    pub path: PathBuf,
}

/// Every file under `root` that `.gitignore` (and the other ignore files
/// the `ignore` crate honours) leaves in, in no particular order. Stops
/// early, with what it has, once `cancel` is set (the policy turned out to
/// be unusable, so nothing will read the list).
pub fn find_files(root: &Path, cancel: &AtomicBool) -> Vec<FoundFile> {
    let found = Mutex::new(Vec::new());
    WalkBuilder::new(root)
        .require_git(false)
        .build_parallel()
        .run(|| {
            let found = &found;
            // Each walker thread collects its own files and hands them over
            // once, when it finishes.
            let mut mine = Collected {
                files: Vec::new(),
                into: found,
            };
            Box::new(move |entry| {
                if cancel.load(Ordering::Relaxed) {
                    return WalkState::Quit;
                }
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
                mine.files.push(FoundFile {
                    rel,
                    path: entry.into_path(),
                });
                WalkState::Continue
            })
        });
    found.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// One walker thread's files, moved into the shared list when the thread's
/// visitor is dropped (the walk is over for it).
struct Collected<'a> {
    files: Vec<FoundFile>,
    into: &'a Mutex<Vec<FoundFile>>,
}

impl Drop for Collected<'_> {
    fn drop(&mut self) {
        let mut all = self.into.lock().unwrap_or_else(|e| e.into_inner());
        all.append(&mut self.files);
    }
}

/// A policy's `[sources]` globs, compiled.
pub struct Sources {
    globs: Globs,
}

impl Sources {
    /// Compiles the policy's globs; a glob that does not compile (or is too
    /// long) makes the policy invalid.
    pub fn compile(policy_file: &PolicyFile) -> Result<Sources, RunError> {
        let sources = &policy_file.policy.sources;
        let mut errors = Vec::new();
        let globs = Globs {
            cache: Role::new("cache", &sources.cache, &mut errors),
            metrics: Role::new("metrics", &sources.metrics, &mut errors),
            docs: Role::new("docs", &sources.docs, &mut errors),
            remote_write: Role::new("remote_write", &sources.remote_write, &mut errors),
            exclude: glob_set(&sources.exclude, &mut errors),
        };
        if !errors.is_empty() {
            return Err(RunError::PolicyInvalid {
                path: policy_file.display_path.clone(),
                text: policy_file.text.clone(),
                errors,
            });
        }
        Ok(Sources { globs })
    }

    /// The found files the globs select, sorted by path, and the source
    /// globs that selected none.
    pub fn select(&self, found: Vec<FoundFile>) -> Selected {
        let globs = &self.globs;
        let mut scratch = Vec::new();
        let mut files: Vec<SelectedFile> = found
            .into_iter()
            .enumerate()
            .filter_map(|(found_index, file)| {
                let roles = globs.roles(&file.rel, &mut scratch);
                roles.any().then_some(SelectedFile {
                    rel: file.rel,
                    path: file.path,
                    roles,
                    found_index,
                })
            })
            .collect();
        files.sort_by(|a, b| a.rel.cmp(&b.rel));
        let unmatched = [&globs.cache, &globs.metrics, &globs.remote_write]
            .into_iter()
            .flat_map(Role::missed)
            .collect();
        Selected { files, unmatched }
    }
}

/// Every file under `root` that the policy's sources select, sorted by path.
pub fn select_files(root: &Path, policy_file: &PolicyFile) -> Result<Selected, RunError> {
    let sources = Sources::compile(policy_file)?;
    Ok(sources.select(find_files(root, &AtomicBool::new(false))))
}
