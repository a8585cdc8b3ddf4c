//! `dwlint policy import`: the reference server's PHP policy as a TOML policy.
//!
//! A server that already gates itself with `config/dw-bounded-growth.php`
//! (a file that `return`s the policy array, with `Foo::class` owners) should
//! switch to dwlint without retyping it. The PHP file is parsed, never run
//! (see [`php_array`]), converted field by field (see [`convert`]), written
//! in the documented layout, and re-loaded with `dwpolicy` before anything
//! is written, so a successful import always produces a loadable policy.
//!
//! The PHP format has no place for scan limits the server's own test never
//! checked, yet the code reads `*_scan_limit` config keys that `check`
//! reports as `undeclared-scan-limit`. So the tree the file belongs to is
//! scanned as `check` would scan it, and every such key the PHP policy does
//! not declare becomes a `[scan_limits]` draft with TODOs (as `init` writes
//! them), listed in the command's output.

mod convert;
pub mod php_array;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::base::error::RunError;
use crate::commands::generated_file::{self, GeneratedFileError};
use crate::commands::init::InitError;
use crate::commands::outcome::{self, Outcome};
use crate::inventory::config_key_matches;
use crate::policy::draft::{Draft, DraftSources};

/// Why an import failed (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The run failed as any would: no such root.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Surveying the tree for undeclared scan limits failed as `init`'s would.
    #[error(transparent)]
    Init(#[from] InitError),
    /// The PHP file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: crate::base::bounded_read::ReadError,
    },
    /// The PHP file is not a constant policy array, or has the wrong shape.
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        /// The file as given.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The file exists, or writing it failed.
    #[error(transparent)]
    File(#[from] GeneratedFileError),
    /// The converted text would not load (a dwlint bug); nothing is written.
    #[error("the converted policy does not load (a dwlint bug): {0}")]
    Invalid(String),
}

/// `[sources]` of the reference server layout, which the PHP policy's own
/// test scans: cache keys in `app/`, metrics in `app/` and the perf harness,
/// remote-write configs in the perf harness, and the operator doc.
pub fn reference_sources() -> DraftSources {
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
    DraftSources {
        cache: strings(&["app/**/*.php"]),
        metrics: strings(&["app/**/*.php", "scripts/perf/**"]),
        docs: strings(&["docs/bounded-growth.md"]),
        remote_write: strings(&["scripts/perf/**"]),
        exclude: Vec::new(),
    }
}

/// The TOML policy for the PHP policy `text`, read from `file` (as shown in
/// messages).
pub fn convert_text(text: &str, file: &str) -> Result<String, ImportError> {
    render(convert_draft(text, file)?)
}

/// The converted policy, before rendering.
fn convert_draft(text: &str, file: &str) -> Result<Draft, ImportError> {
    let syntax = |at: usize, message: String| {
        let (line, column) = php_array::line_col(text, at);
        ImportError::Syntax {
            file: file.to_owned(),
            line,
            column,
            message,
        }
    };
    let value = php_array::parse(text).map_err(|e| ImportError::Syntax {
        file: file.to_owned(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let converted = convert::convert(&value).map_err(|e| syntax(e.at, e.message))?;
    Ok(Draft {
        header: vec![
            format!("Converted by `dwlint policy import` from {file}."),
            "[sources] follows the reference server layout; adjust it to this tree.".into(),
            "Format: docs/policy.md.".into(),
        ],
        sources: reference_sources(),
        ..converted
    })
}

/// The TOML text, re-loaded before it is returned.
fn render(draft: Draft) -> Result<String, ImportError> {
    let toml = draft.render();
    dwpolicy::load::load(&toml).map_err(|e| ImportError::Invalid(e.to_string()))?;
    Ok(toml)
}

/// Adds a `[scan_limits]` draft for every `*_scan_limit` key read under
/// `root` that `draft` does not declare; returns the keys added and where
/// each was read.
fn draft_scan_limits(draft: &mut Draft, root: &Path) -> Result<Vec<(String, String)>, InitError> {
    let survey = crate::commands::init::survey(root, &draft.sources)?;
    let declared: Vec<String> = draft
        .scan_limits
        .iter()
        .filter_map(|s| s.config_key.clone())
        .collect();
    let missing: Vec<_> = survey
        .found
        .scan_limits
        .into_iter()
        .filter(|found| !declared.iter().any(|d| config_key_matches(d, &found.key)))
        .collect();
    let taken: BTreeSet<String> = draft.scan_limits.iter().map(|s| s.id.clone()).collect();
    let added = crate::commands::init::scan_limit_drafts(&missing, &survey.doc_ids, taken);
    let keys = missing
        .iter()
        .map(|s| (s.key.clone(), format!("{}:{}", s.site.file, s.site.line)))
        .collect();
    draft.scan_limits.extend(added);
    Ok(keys)
}

/// The tree a PHP policy belongs to: `ROOT/config/dw-bounded-growth.php`
/// gives `ROOT`; a file elsewhere, the current directory.
pub fn default_root(file: &Path) -> PathBuf {
    let dir = file
        .parent()
        .filter(|d| d.file_name().is_some_and(|n| n == "config"));
    match dir.and_then(Path::parent) {
        Some(root) if root.as_os_str().is_empty() => PathBuf::from("."),
        Some(root) => root.to_path_buf(),
        None => PathBuf::from("."),
    }
}

/// What `import` produced.
#[derive(Debug)]
pub struct Imported {
    /// The TOML, when there is no `--output`.
    pub toml: Option<String>,
    /// `*_scan_limit` keys read in the tree that the PHP policy does not
    /// declare, each added as a `[scan_limits]` draft with TODOs, with
    /// where it was read (`file:line`, relative to `root`).
    pub drafted_scan_limits: Vec<(String, String)>,
    /// The tree that was scanned for them.
    pub root: PathBuf,
}

/// What to convert and where to put it.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The PHP policy file.
    pub file: PathBuf,
    /// Where to write; standard output when absent.
    pub output: Option<PathBuf>,
    /// Overwrite an existing output.
    pub force: bool,
    /// The tree to scan for undeclared scan limits (see [`default_root`]).
    pub root: Option<PathBuf>,
}

/// `dwlint policy import`: converts the file and prints the policy (or
/// where it went); notes on the conversion go to standard error, since
/// standard output may be the policy itself.
pub fn run(options: &ImportOptions) -> Result<Outcome, ImportError> {
    let imported = import(options)?;
    match (&imported.toml, &options.output) {
        (Some(toml), _) => outcome::print(toml.as_bytes())?,
        (None, Some(path)) => outcome::print(format!("wrote {}\n", path.display()).as_bytes())?,
        (None, None) => {}
    }
    eprint!("{}", summary(&imported));
    Ok(Outcome::Clean)
}

/// Converts `options.file`, with drafts for the scan limits its tree reads.
pub fn import(options: &ImportOptions) -> Result<Imported, ImportError> {
    let limit = crate::base::bounded_read::MAX_POLICY_BYTES;
    let text = crate::base::bounded_read::read_text(&options.file, limit).map_err(|source| {
        ImportError::Read {
            path: options.file.clone(),
            source,
        }
    })?;
    let shown = options.file.to_string_lossy().replace('\\', "/");
    let mut draft = convert_draft(&text, &shown)?;
    let root = options
        .root
        .clone()
        .unwrap_or_else(|| default_root(&options.file));
    if !root.is_dir() {
        return Err(RunError::NoSuchPath(root).into());
    }
    let drafted_scan_limits = draft_scan_limits(&mut draft, &root)?;
    let toml = render(draft)?;
    let imported = |toml| Imported {
        toml,
        drafted_scan_limits: drafted_scan_limits.clone(),
        root: root.clone(),
    };
    let Some(output) = &options.output else {
        return Ok(imported(Some(toml)));
    };
    if output.exists() && !options.force {
        return Err(ImportError::File(GeneratedFileError::Exists(
            output.clone(),
        )));
    }
    generated_file::write(output, &toml).map_err(ImportError::from)?;
    Ok(imported(None))
}

/// What the import added beyond the PHP file, for the user to review.
pub fn summary(imported: &Imported) -> String {
    let mut out = String::new();
    for (key, site) in &imported.drafted_scan_limits {
        out.push_str(&format!(
            "note: {}: `{key}` is read here but the PHP policy does not declare it: added a [scan_limits] draft; replace its TODOs\n",
            if imported.root == Path::new(".") {
                site.clone()
            } else {
                imported.root.join(site).display().to_string()
            }
        ));
    }
    out
}
