//! `dwlint init`: a starter policy from what a tree already contains.
//!
//! Adopting the gate on an existing engine means declaring dozens of
//! prefixes and metrics that are already in the code. `init` runs the same
//! walk, extractors and normalization as `check`, under a built-in policy
//! whose sources are every file with a language extension dwlint reads (see
//! [`default_sources`]), and writes one entry per surface it finds. The
//! result loads and resolves, but every decision a reviewer owes is left as a
//! TODO that `check` rejects (see [`draft`]), so writing it cannot make a
//! tree pass.

mod doc_ids;
mod draft;
mod found;
mod owner;

use std::path::{Path, PathBuf};

pub(crate) use draft::scan_limit_drafts;
pub use draft::{prefix_id, PLACEHOLDER_CLASS};
pub use found::Site;

use crate::base::error::RunError;
use crate::commands::generated_file::{self, GeneratedFileError};
use crate::commands::outcome::{self, Outcome};
use crate::discover::walk;
use crate::discover::CANDIDATES;
use crate::extract::ExtractConfig;
use crate::policy::draft::{Draft, DraftSources, SettingValue};
use crate::policy::DEFAULT_POLICY;
use crate::rules::config;
use crate::scan;

/// Extensions of the files `init` scans (and writes into `[sources]`).
pub const SOURCE_EXTENSIONS: &[&str] = &[
    "rs", "php", "py", "sh", "bash", "go", "js", "mjs", "cjs", "ts", "mts", "cts", "yml", "yaml",
];
/// Extensions of Prometheus scrape / remote-write configs (YAML, also as a
/// heredoc in a shell script).
pub const REMOTE_WRITE_EXTENSIONS: &[&str] = &["yml", "yaml", "sh"];
/// Never scanned: build output, vendored code, test data and tests, whose
/// literals are not shipped surfaces.
pub const EXCLUDE: &[&str] = &[
    "**/target/**",
    "**/vendor/**",
    "**/node_modules/**",
    "**/fixtures/**",
    "**/tests/**",
    "**/test/**",
];
/// The operator doc `init` lists when the tree has it.
pub const DEFAULT_DOC: &str = "docs/bounded-growth.md";

/// Why `init` could not write a policy.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The run failed as any would: no such tree, an unreadable file.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The file exists, or writing it failed.
    #[error(transparent)]
    File(#[from] GeneratedFileError),
    /// The written text would not load: a dwlint bug, never written to disk.
    #[error("dwlint init produced a policy that does not load (a dwlint bug): {0}")]
    Generated(String),
}

/// What to scan and where to write.
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// Root of the tree.
    pub root: PathBuf,
    /// Where to write [default: ROOT/policy/dw-bounded-growth.toml].
    pub policy: Option<PathBuf>,
    /// Overwrite an existing policy (its `[settings]` are kept).
    pub force: bool,
    /// `settings.cache_namespace` to scan for and write [default: `server:`,
    /// or the overwritten policy's].
    pub cache_namespace: Option<String>,
    /// `settings.metric_prefix` to scan for and write [default: `dw_`, or
    /// the overwritten policy's].
    pub metric_prefix: Option<String>,
}

/// What `init` wrote.
#[derive(Debug)]
pub struct InitReport {
    /// The policy path.
    pub path: PathBuf,
    /// The policy text.
    pub text: String,
    /// Entry counts: cache keys, scan limits, metrics.
    pub counts: (usize, usize, usize),
    /// How many files the default sources selected.
    pub files_scanned: usize,
    /// Surfaces found that no valid entry can declare.
    pub undeclarable: Vec<(Site, String)>,
    /// The reference PHP policy found in the tree, which `policy import`
    /// converts into a reviewed policy.
    pub php_policy: Option<PathBuf>,
}

/// Where a reference server keeps its PHP policy.
const PHP_POLICY: &str = "config/dw-bounded-growth.php";

/// The `[settings]` a draft writes: the overwritten policy's (when it
/// loads), then the command line's prefixes; only values that differ from
/// the defaults.
fn draft_settings(existing: Option<&Path>, options: &InitOptions) -> Vec<(String, SettingValue)> {
    let defaults = dwpolicy::Settings::default();
    let mut settings = existing
        .and_then(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| dwpolicy::load::load(&text).ok())
        .map(|policy| policy.settings)
        .unwrap_or_else(|| defaults.clone());
    if let Some(namespace) = &options.cache_namespace {
        settings.cache_namespace = namespace.clone();
    }
    if let Some(prefix) = &options.metric_prefix {
        settings.metric_prefix = prefix.clone();
    }
    let mut out = Vec::new();
    let mut string = |key: &str, value: &String, default: &String| {
        if value != default {
            out.push((key.to_owned(), SettingValue::Str(value.clone())));
        }
    };
    string(
        "cache_namespace",
        &settings.cache_namespace,
        &defaults.cache_namespace,
    );
    string(
        "metric_prefix",
        &settings.metric_prefix,
        &defaults.metric_prefix,
    );
    for (key, value, default) in [
        (
            "user_controlled_dimensions",
            &settings.user_controlled_dimensions,
            &defaults.user_controlled_dimensions,
        ),
        (
            "per_run_labels",
            &settings.per_run_labels,
            &defaults.per_run_labels,
        ),
    ] {
        if value != default {
            out.push((key.to_owned(), SettingValue::List(value.clone())));
        }
    }
    out
}

/// The `[sources]` `init` scans with and writes.
pub fn default_sources(root: &Path) -> DraftSources {
    let globs = |exts: &[&str]| exts.iter().map(|e| format!("**/*.{e}")).collect::<Vec<_>>();
    DraftSources {
        cache: globs(SOURCE_EXTENSIONS),
        metrics: globs(SOURCE_EXTENSIONS),
        docs: if root.join(DEFAULT_DOC).is_file() {
            vec![DEFAULT_DOC.to_owned()]
        } else {
            Vec::new()
        },
        remote_write: globs(REMOTE_WRITE_EXTENSIONS),
        exclude: EXCLUDE.iter().map(|s| s.to_string()).collect(),
    }
}

/// `dwlint init`: writes the starter policy and says what it holds.
pub fn run(options: &InitOptions) -> Result<Outcome, InitError> {
    let report = init(options)?;
    outcome::print(summary(&report).as_bytes())?;
    Ok(Outcome::Clean)
}

/// Scans `options.root` and writes the starter policy.
pub fn init(options: &InitOptions) -> Result<InitReport, InitError> {
    let root = options.root.as_path();
    if !root.is_dir() {
        return Err(RunError::NoSuchPath(root.to_path_buf()).into());
    }
    let path = options
        .policy
        .clone()
        .unwrap_or_else(|| root.join(DEFAULT_POLICY));
    // Without --policy, any policy `check` would find at this root counts:
    // a second one beside it would silently take over.
    let existing = match &options.policy {
        Some(_) => vec![path.clone()],
        None => CANDIDATES.iter().map(|c| root.join(c)).collect(),
    };
    let found = existing.into_iter().find(|p| p.exists());
    if let Some(found) = found.clone().filter(|_| !options.force) {
        return Err(InitError::File(GeneratedFileError::Exists(found)));
    }
    let settings = draft_settings(found.as_deref(), options);
    let mut sources = default_sources(root);
    let survey = survey_with(root, &sources, &settings)?;
    // Only globs that select something: a glob per extension the tree does
    // not have would be a warning on every `check`.
    for (key, list) in [
        ("cache", &mut sources.cache),
        ("metrics", &mut sources.metrics),
        ("remote_write", &mut sources.remote_write),
    ] {
        list.retain(|glob| !survey.unmatched.iter().any(|(k, g)| *k == key && g == glob));
    }
    let draft = draft::draft(
        &survey.found,
        sources,
        &survey.settings.cache_namespace,
        &survey.doc_ids,
    );
    let draft = Draft { settings, ..draft };
    let text = draft.render();
    dwpolicy::load::load(&text).map_err(|e| InitError::Generated(e.to_string()))?;
    generated_file::write(&path, &text).map_err(InitError::from)?;
    Ok(InitReport {
        path,
        counts: (
            draft.cache_keys.len(),
            draft.scan_limits.len(),
            draft.metrics.len(),
        ),
        text,
        files_scanned: survey.files_scanned,
        undeclarable: survey.found.undeclarable,
        php_policy: Some(root.join(PHP_POLICY)).filter(|p| p.is_file()),
    })
}

/// What a tree holds under some `[sources]`: the surfaces found, and the
/// IDs its docs already give them.
pub(crate) struct Survey {
    pub found: found::Found,
    pub doc_ids: doc_ids::DocIds,
    pub settings: dwpolicy::Settings,
    pub files_scanned: usize,
    /// `([sources] key, glob)` of the globs that selected no file.
    pub unmatched: Vec<(&'static str, String)>,
}

/// Walks and scans `root` as `check` would under `sources` (default
/// settings), and reads the docs those sources name.
pub(crate) fn survey(root: &Path, sources: &DraftSources) -> Result<Survey, InitError> {
    survey_with(root, sources, &[])
}

/// [`survey`] under `settings` (the cache namespace and metric prefix to
/// look for) instead of the defaults.
fn survey_with(
    root: &Path,
    sources: &DraftSources,
    settings: &[(String, SettingValue)],
) -> Result<Survey, InitError> {
    let defaults = Draft {
        sources: sources.clone(),
        settings: settings.to_vec(),
        ..Draft::default()
    };
    let policy_file = config::policy_from_text("(dwlint init defaults)".into(), defaults.render())?;
    let settings = policy_file.policy.settings.clone();
    let files = walk::select_files(root, &policy_file)?;
    let config = ExtractConfig {
        cache_namespace: settings.cache_namespace.clone(),
        metric_prefix: settings.metric_prefix.clone(),
    };
    let output = scan::scan(
        root,
        &files.files,
        &config,
        &[],
        scan::DEFAULT_MAX_FILE_BYTES,
    );
    // Owner guessing re-parses Rust files; give it the scanner's stack so a
    // deeply nested file that scanned fine cannot overflow here.
    let found = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("dwlint-init".into())
            .stack_size(256 << 20)
            .spawn_scoped(scope, || found::collect(root, &output, &settings))
            .ok()
            .and_then(|handle| handle.join().ok())
    })
    .ok_or_else(|| InitError::Generated("guessing owners failed".into()))?;
    // The docs are optional input: an unreadable one just names nothing.
    let doc_texts: Vec<String> = sources
        .docs
        .iter()
        .filter_map(|doc| std::fs::read_to_string(root.join(doc)).ok())
        .collect();
    Ok(Survey {
        found,
        doc_ids: doc_ids::DocIds::from_docs(doc_texts.iter().map(String::as_str)),
        settings,
        files_scanned: output.files_scanned,
        unmatched: files.unmatched,
    })
}

/// The summary printed after a successful `init`.
pub fn summary(report: &InitReport) -> String {
    let (cache, scan, metrics) = report.counts;
    let mut out = format!(
        "wrote {}: {cache} cache key(s), {scan} scan limit(s), {metrics} metric(s) from {} file(s)\n",
        report.path.display(),
        report.files_scanned
    );
    for (site, why) in &report.undeclarable {
        out.push_str(&format!(
            "note: {}:{}: not declared: {why}\n",
            site.file, site.line
        ));
    }
    if let Some(php) = &report.php_policy {
        out.push_str(&format!(
            "note: {} is a reference PHP policy; `dwlint policy import {} --output {} --force` converts its reviewed entries instead of this draft's TODOs\n",
            php.display(),
            php.display(),
            report.path.display()
        ));
    }
    out.push_str("next: replace every TODO with a reviewed value, then run `dwlint check` (`dwlint check --write-baseline FILE` records what is left to fix)\n");
    out
}
