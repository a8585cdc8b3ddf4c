//! Finding the files a policy's `[sources]` globs select.
//!
//! One walk of the root (honouring `.gitignore`, even outside a git
//! repository; on one thread for a tree of a few directories, in parallel
//! otherwise) lists every file; the policy's globs then tag each with the
//! roles its path matches: cache source, metric source, doc, remote-write
//! config. Excluded and untagged files are dropped before anything reads
//! them. The walk needs no policy, so `check` runs it while the policy is
//! being loaded ([`find_files`], then [`Sources::select`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use dwpolicy::{LoadError, Spanned};
use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};
use ignore::{WalkBuilder, WalkState};

use crate::base::error::RunError;
use crate::policy::PolicyFile;

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
    fn is_match(&self, rel: &Candidate, scratch: &mut Vec<usize>) -> bool {
        if self.unmatched.load(Ordering::Relaxed) == 0 {
            return self.set.is_match_candidate(rel);
        }
        self.set.matches_candidate_into(rel, scratch);
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
    /// The roles of the file at `rel`, prepared once for the five glob
    /// sets (preparing a path for a set cost as much as matching it).
    fn roles(&self, rel: &str, scratch: &mut Vec<usize>) -> Roles {
        let rel = Candidate::new(rel);
        let rel = &rel;
        if self.exclude.is_match_candidate(rel) {
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

/// Trees of at most this many directories are walked on one thread (see
/// [`find_files`]).
const SERIAL_WALK_DIRS: usize = 16;

/// Every file under `root` that `.gitignore` (and the other ignore files
/// the `ignore` crate honours) leaves in, in no particular order. Stops
/// early, with what it has, once `cancel` is set (the policy turned out to
/// be unusable, so nothing will read the list).
///
/// A tree of a few directories is walked on the calling thread: there the
/// parallel walker's threads cost more than they save (2,205 files in six
/// directories: 3.5–5.5 ms in parallel, 2.2 ms on one thread). A larger
/// tree is walked in parallel, about twice as fast on thousands of
/// directories (where the serial walker also looks for each ignore file by
/// name, and the parallel one reads them off the directory listing). Both
/// are `ignore`'s walkers with the same settings, so they find the same
/// files.
pub fn find_files(root: &Path, cancel: &AtomicBool) -> Vec<FoundFile> {
    if has_few_dirs(root, SERIAL_WALK_DIRS) {
        walk_serially(root, cancel)
    } else {
        walk_in_parallel(root, cancel)
    }
}

/// Whether `root` and the directories under it are at most `max_dirs`,
/// hidden ones (which the walk skips) not counted. Reads directories only
/// until it has seen one too many, so a large tree costs about one read of
/// its root, and skips those whose link count says they hold none; ignore
/// files are not consulted (an ignored directory counts, which can only
/// make a small walk parallel).
fn has_few_dirs(root: &Path, max_dirs: usize) -> bool {
    let mut unread = vec![root.to_path_buf()];
    let mut dirs = 1;
    while let Some(dir) = unread.pop() {
        if holds_no_directory(&dir) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            // The type comes with the listing; the name is a copy, made
            // only for directories.
            if entry.file_type().is_ok_and(|t| t.is_dir())
                && !entry.file_name().as_encoded_bytes().starts_with(b".")
            {
                dirs += 1;
                if dirs > max_dirs {
                    return false;
                }
                unread.push(entry.path());
            }
        }
    }
    true
}

/// Whether `dir`'s link count says that no directory is in it, so that
/// [`has_few_dirs`] need not read it (a directory of 2,201 files took about
/// 0.9 ms to list). On most Unix file systems a directory's links are its
/// name in its parent, its own `.` and each subdirectory's `..`; where the
/// count means something else (btrfs says 1) or cannot be had, this says
/// no and the directory is read. A count that is wrong can only pick the
/// slower walker, not change what is found.
#[cfg(unix)]
fn holds_no_directory(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).is_ok_and(|meta| meta.nlink() == 2)
}

#[cfg(not(unix))]
fn holds_no_directory(_dir: &Path) -> bool {
    false
}

/// The path of `entry` relative to `root`, `/`-separated; `None` for the
/// entries that are not files, or not under `root`.
fn found_file(root: &Path, entry: ignore::DirEntry) -> Option<FoundFile> {
    if !entry.file_type().is_some_and(|t| t.is_file()) {
        return None;
    }
    let rel = relative(root, entry.path())?;
    Some(FoundFile {
        rel,
        path: entry.into_path(),
    })
}

/// `path` relative to `root`, `/`-separated, as `Path::strip_prefix`
/// and a lossy conversion give it. The walk joins entry names to `root`,
/// so a path is mostly `root`, a `/` and the names: that is cut off as
/// bytes, since comparing component by component cost more than the rest
/// of [`found_file`]; any other path goes the long way.
fn relative(root: &Path, path: &Path) -> Option<String> {
    let root_bytes = root.as_os_str().as_encoded_bytes();
    let short = (!root_bytes.is_empty())
        .then_some(path.as_os_str().as_encoded_bytes())
        .and_then(|path| path.strip_prefix(root_bytes))
        .and_then(|rest| rest.strip_prefix(b"/"))
        .filter(|rest| {
            !rest.is_empty()
                && !rest.starts_with(b"/")
                && !rest.starts_with(b"./")
                && rest != b"."
                && !rest.ends_with(b"/")
                && !rest.ends_with(b"/.")
                && memchr::memchr_iter(b'/', rest).all(|i| {
                    let after = &rest[i + 1..];
                    !after.starts_with(b"/") && !after.starts_with(b"./")
                })
        })
        .and_then(|rest| std::str::from_utf8(rest).ok())
        .filter(|rel| !rel.contains('\\'));
    match short {
        Some(rel) => Some(rel.to_owned()),
        None => Some(
            path.strip_prefix(root)
                .ok()?
                .to_string_lossy()
                .replace('\\', "/"),
        ),
    }
}

/// [`find_files`] on this thread.
fn walk_serially(root: &Path, cancel: &AtomicBool) -> Vec<FoundFile> {
    let mut found = Vec::new();
    for entry in WalkBuilder::new(root).require_git(false).build() {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        if let Ok(entry) = entry {
            found.extend(found_file(root, entry));
        }
    }
    found
}

/// [`find_files`] on `ignore`'s parallel walker (one thread per core).
fn walk_in_parallel(root: &Path, cancel: &AtomicBool) -> Vec<FoundFile> {
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
                if let Ok(entry) = entry {
                    mine.files.extend(found_file(root, entry));
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut found: Vec<FoundFile>) -> Vec<String> {
        let mut rels: Vec<String> = found.drain(..).map(|f| f.rel).collect();
        rels.sort();
        rels
    }

    /// A tree with nested and negated ignore rules, an `.ignore` file and
    /// hidden entries, plus `extra` directories of one file each.
    fn ignore_tree(extra: usize) -> (tempfile::TempDir, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            (".gitignore", "ignored.rs\n/build/\n*.log\n!keep.log\n"),
            (".ignore", "secret/\n"),
            ("sub/.gitignore", "local.rs\n"),
            ("a.rs", ""),
            ("ignored.rs", ""),
            ("build/x.rs", ""),
            ("z.log", ""),
            ("keep.log", ""),
            ("local.rs", ""),
            ("secret/s.rs", ""),
            (".hidden.rs", ""),
            (".dir/x.rs", ""),
            ("sub/b.rs", ""),
            ("sub/local.rs", ""),
            ("sub/build/y.rs", ""),
            ("sub/deep/c.rs", ""),
        ];
        for (rel, text) in files {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let mut expected: Vec<String> = [
            "a.rs",
            "keep.log",
            "local.rs",
            "sub/b.rs",
            "sub/build/y.rs",
            "sub/deep/c.rs",
        ]
        .map(String::from)
        .to_vec();
        for i in 0..extra {
            let rel = format!("more/d{i}/f.rs");
            let path = dir.path().join(&rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
            expected.push(rel);
        }
        expected.sort();
        (dir, expected)
    }

    #[test]
    fn relative_paths_are_what_strip_prefix_gives() {
        let long_way = |root: &str, path: &str| {
            Path::new(path)
                .strip_prefix(root)
                .ok()
                .map(|rel| rel.to_string_lossy().replace('\\', "/"))
        };
        for root in [
            "", ".", "./", "a", "a/", "a/.", "./a", "/a", "/a/", "/", "a//b",
        ] {
            for rest in [
                "x.rs", "b/x.rs", "./x.rs", "b//x.rs", "b/./x.rs", "b/", ".", "", "a\\b.rs",
                "/x.rs", "é/x.rs",
            ] {
                for path in [
                    format!("{root}/{rest}"),
                    format!("{root}{rest}"),
                    Path::new(root).join(rest).to_string_lossy().into_owned(),
                ] {
                    assert_eq!(
                        relative(Path::new(root), Path::new(&path)),
                        long_way(root, &path),
                        "root {root:?}, path {path:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn both_walkers_honour_the_same_ignore_rules() {
        let go_on = AtomicBool::new(false);
        for extra in [0, SERIAL_WALK_DIRS + 1] {
            let (dir, expected) = ignore_tree(extra);
            let root = dir.path();
            assert_eq!(sorted(walk_serially(root, &go_on)), expected, "{extra}");
            assert_eq!(sorted(walk_in_parallel(root, &go_on)), expected, "{extra}");
            assert_eq!(sorted(find_files(root, &go_on)), expected, "{extra}");
        }
    }

    #[test]
    fn few_directories_are_counted_without_hidden_ones() {
        // The root, build, secret, sub, sub/build and sub/deep; not .dir.
        let (dir, _) = ignore_tree(0);
        assert!(has_few_dirs(dir.path(), 6));
        assert!(!has_few_dirs(dir.path(), 5));
        let (dir, _) = ignore_tree(SERIAL_WALK_DIRS);
        assert!(!has_few_dirs(dir.path(), SERIAL_WALK_DIRS));
    }

    #[test]
    fn a_cancelled_walk_stops() {
        let (dir, _) = ignore_tree(0);
        let stop = AtomicBool::new(true);
        assert_eq!(walk_serially(dir.path(), &stop).len(), 0);
        assert_eq!(walk_in_parallel(dir.path(), &stop).len(), 0);
    }
}
