//! Reading and extracting every selected file, in parallel.
//!
//! Each worker thread gets a large stack so that a pathological file cannot
//! overflow it while being parsed. A byte prefilter runs before any parsing:
//! most files never mention the cache namespace, the metric prefix, a scan
//! limit or an owner, and those are counted but not parsed. Which extractor
//! reads a file is `extract::extract_file`'s decision.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use aho_corasick::AhoCorasick;

use crate::diagnostic::{Anchor, Diagnostic};
use crate::extract::{self, ExtractConfig, FileFacts, TextRange, SCAN_LIMIT_SUFFIX};
use crate::owners::ModulePaths;
use crate::walk::{Roles, SelectedFile};

/// Stack size for extraction threads.
const STACK_BYTES: usize = 256 << 20;
/// How much of a file is inspected for NUL bytes to call it binary.
const BINARY_SNIFF_BYTES: usize = 8192;

/// The facts of one scanned source file.
#[derive(Debug)]
pub struct ScannedFile {
    /// Path relative to the root.
    pub rel: String,
    /// What the file was searched for.
    pub roles: Roles,
    /// What it contributed.
    pub facts: FileFacts,
}

/// A doc file's text (docs are small and searched for many mentions).
#[derive(Debug)]
pub struct DocFile {
    /// Path relative to the root.
    pub rel: String,
    /// The text.
    pub text: String,
}

/// The result of scanning every selected file.
#[derive(Debug, Default)]
pub struct ScanOutput {
    /// Source files that contributed facts, sorted by path.
    pub sources: Vec<ScannedFile>,
    /// Doc files, sorted by path.
    pub docs: Vec<DocFile>,
    /// Files that could not be read or parsed.
    pub warnings: Vec<Diagnostic>,
    /// How many selected files were looked at.
    pub files_scanned: usize,
}

enum Outcome {
    Source(ScannedFile),
    Doc(DocFile),
    Warning(Diagnostic),
    Skipped,
}

/// Scans `files` using `threads` worker threads.
pub fn scan(
    root: &Path,
    files: &[SelectedFile],
    config: &ExtractConfig,
    owner_names: &[String],
) -> ScanOutput {
    let mut patterns: Vec<&str> = vec![
        &config.cache_namespace,
        &config.metric_prefix,
        SCAN_LIMIT_SUFFIX,
    ];
    patterns.extend(owner_names.iter().map(String::as_str));
    // Building can only fail on absurd pattern sets; then every file is parsed.
    let prefilter = AhoCorasick::new(&patterns).ok();
    let modules = ModulePaths::default();
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(files.len().max(1));
    let mut outcomes: Vec<Vec<(usize, Outcome)>> = Vec::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let worker = || {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(file) = files.get(i) else { break };
                        out.push((
                            i,
                            scan_one(root, file, config, prefilter.as_ref(), &modules),
                        ));
                    }
                    out
                };
                std::thread::Builder::new()
                    .name("dwlint-scan".into())
                    .stack_size(STACK_BYTES)
                    .spawn_scoped(scope, worker)
            })
            .collect();
        for handle in handles.into_iter().flatten() {
            if let Ok(out) = handle.join() {
                outcomes.push(out);
            }
        }
    });
    let mut merged: Vec<(usize, Outcome)> = outcomes.into_iter().flatten().collect();
    merged.sort_by_key(|(i, _)| *i);
    let mut output = ScanOutput {
        files_scanned: files.len(),
        ..ScanOutput::default()
    };
    for (_, outcome) in merged {
        match outcome {
            Outcome::Source(f) => output.sources.push(f),
            Outcome::Doc(d) => output.docs.push(d),
            Outcome::Warning(w) => output.warnings.push(w),
            Outcome::Skipped => {}
        }
    }
    output
}

fn warning(code: &'static str, rel: &str, message: String, help: &str) -> Outcome {
    Outcome::Warning(
        Diagnostic::new(code, rel, message)
            .at(Anchor::plain(rel, TextRange::file_start()))
            .help(help),
    )
}

fn scan_one(
    root: &Path,
    file: &SelectedFile,
    config: &ExtractConfig,
    prefilter: Option<&AhoCorasick>,
    modules: &ModulePaths,
) -> Outcome {
    let bytes = match std::fs::read(&file.path) {
        Ok(bytes) => bytes,
        Err(e) => {
            return warning(
                "unreadable-file",
                &file.rel,
                format!("cannot read `{}`: {e}", file.rel),
                "fix the file's permissions or exclude it in [sources].exclude",
            )
        }
    };
    if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
        return warning(
            "unreadable-file",
            &file.rel,
            format!("`{}` looks binary and was skipped", file.rel),
            "exclude binary files in [sources].exclude",
        );
    }
    // A scrape config may hold nothing but per-run variables, so the
    // remote-write files (few and small) are always read.
    let prefiltered = !file.roles.docs && !file.roles.remote_write;
    if prefiltered && prefilter.is_some_and(|p| !p.is_match(&bytes)) {
        return Outcome::Skipped;
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            return warning(
                "unreadable-file",
                &file.rel,
                format!(
                    "`{}` is not valid UTF-8 (at byte {}) and was skipped",
                    file.rel,
                    e.utf8_error().valid_up_to()
                ),
                "re-encode the file as UTF-8 or exclude it in [sources].exclude",
            )
        }
    };
    if file.roles.docs {
        return Outcome::Doc(DocFile {
            rel: file.rel.clone(),
            text,
        });
    }
    let facts = extract::extract_file(&file.rel, &text, config, || {
        modules.module_path(root, &file.rel)
    });
    Outcome::Source(ScannedFile {
        rel: file.rel.clone(),
        roles: file.roles,
        facts,
    })
}
