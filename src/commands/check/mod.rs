//! `dwlint check`: policy → tree walk → extraction → inventory → rules.

pub mod baseline;
pub mod output;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::base::diagnostic::{Diagnostic, Severity};
use crate::base::error::RunError;
use crate::base::timings::Stopwatch;
use crate::discover;
use crate::discover::changed::{self, ChangedFiles, Mode, Selection};
use crate::discover::walk;
use crate::extract::ExtractConfig;
use crate::inventory::Inventory;
use crate::policy::PolicyFile;
use crate::report::model::{CheckReport, Inputs};
use crate::rules::config::{self, Level, Overrides};
use crate::rules::{self, Context, Rule, Scope};
use crate::scan;
use crate::scan::prefilter::Prefilter;

/// What to check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Where to start: the root itself with `--policy`, else where policy
    /// discovery starts (see [`discover`]).
    pub root: PathBuf,
    /// Policy file; found by [`discover::discover`] when absent.
    pub policy: Option<PathBuf>,
    /// `-A/-W/-D` from the command line.
    pub overrides: Overrides,
    /// Whole tree, or only some files for file-local rules.
    pub selection: Selection,
    /// Files larger than this many bytes are skipped with a warning.
    pub max_file_bytes: u64,
}

impl CheckOptions {
    /// Options for a plain whole-tree check of `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        CheckOptions {
            root: root.into(),
            policy: None,
            overrides: Overrides::default(),
            selection: Selection::Full,
            max_file_bytes: scan::DEFAULT_MAX_FILE_BYTES,
        }
    }
}

/// Set by the `dwlint` binary, which exits as soon as the report is
/// written: [`check`] then leaves the loaded policy, the inventory, the
/// selected files, the files read ahead and the prefilter to the end of the
/// process instead of freeing their tens of thousands of strings one by one
/// (on a policy of 2,201 cache entries and as many metrics, 3 % of the run).
/// Library callers free them as usual.
static KEEP_UNTIL_EXIT: AtomicBool = AtomicBool::new(false);

/// Makes every later [`check`] in this process leave its policy and
/// inventory allocated: for a binary that exits right after the run.
pub fn keep_until_exit() {
    KEEP_UNTIL_EXIT.store(true, Ordering::Relaxed);
}

/// Runs the gate.
pub fn check(options: &CheckOptions) -> Result<CheckReport, RunError> {
    let mut watch = Stopwatch::start();
    let located = discover::locate(&options.root, options.policy.as_deref())?;
    let root = located.root.as_path();
    watch.mark("locate the policy");
    let (policy_file, mode, changed, sources, found, preread) =
        load_and_walk(root, &located, options, &mut watch)?;
    let policy = &policy_file.policy;
    let config = ExtractConfig {
        cache_namespace: policy.settings.cache_namespace.clone(),
        metric_prefix: policy.settings.metric_prefix.clone(),
    };
    let (selected, prefilter) = select_and_build_prefilter(&sources, found, &config, &policy_file);
    watch.mark("select files, build the prefilter");
    let files = selected.files;
    let notes = selected
        .unmatched
        .iter()
        .map(|(key, glob)| {
            format!(
                "[sources].{key} glob `{}` in {} matches no file under {}",
                crate::report::printable(glob),
                crate::report::printable(&policy_file.display_path),
                crate::report::printable(&root.to_string_lossy())
            )
        })
        .collect();
    let inputs = Inputs::new(root, files.iter().map(|f| f.rel.as_str()), &located.policy);
    let output = scan::scan_with(
        root,
        &files,
        &preread,
        &config,
        prefilter.as_ref(),
        options.max_file_bytes,
    );
    watch.mark("read and extract");
    let inventory = Inventory::build(output, policy);
    watch.mark("build the inventory");
    let ctx = Context::new(root, &policy_file, &inventory);
    let severities: Vec<(&'static Rule, Option<Severity>)> = rules::RULES
        .iter()
        .map(|rule| {
            (
                rule,
                configured_severity(&policy_file, &options.overrides, rule),
            )
        })
        .collect();
    let mut diagnostics = rules::run(&ctx, |rule| {
        severities
            .iter()
            .find(|(r, _)| r.code == rule.code)
            .and_then(|(_, severity)| *severity)
    });
    if let Some(changed) = &changed {
        diagnostics.retain(|d| reported_in(d, changed));
    }
    let unused_allow = severities
        .iter()
        .find(|(r, _)| r.code == rules::unused_allow::CODE)
        .and_then(|(_, severity)| *severity);
    rules::unused_allow::apply(
        &mut diagnostics,
        &inventory.allows,
        unused_allow,
        matches!(mode, Mode::Full),
    );
    watch.mark("run the rules");
    let files_scanned = inventory.files_scanned;
    let policy_path = policy_file.display_path.clone();
    if KEEP_UNTIL_EXIT.load(Ordering::Relaxed) {
        std::mem::forget(inventory);
        std::mem::forget(policy_file);
        std::mem::forget(preread);
        std::mem::forget(prefilter);
        std::mem::forget(files);
    }
    Ok(CheckReport {
        diagnostics,
        files_scanned,
        policy_path,
        root_moved: root != options.root.as_path(),
        repo_prefix: discover::repo_prefix(root),
        root: root.to_path_buf(),
        mode,
        severities,
        notes,
        inputs,
        timings: watch.finish(),
    })
}

/// What a changed-files run compares against, as [`changed::resolve`]
/// returns it.
type Changed = (Mode, Option<ChangedFiles>);

/// The policy, the changed-files mode, the compiled `[sources]`, every
/// file found and the files read while the policy loaded.
type Loaded = (
    PolicyFile,
    Mode,
    Option<ChangedFiles>,
    walk::Sources,
    Vec<walk::FoundFile>,
    scan::Preread,
);

/// The files the policy selects, and the prefilter, built on a second
/// thread meanwhile: both take a millisecond or more on a large policy and
/// tree, and the scan needs both.
fn select_and_build_prefilter(
    sources: &walk::Sources,
    found: Vec<walk::FoundFile>,
    config: &ExtractConfig,
    policy_file: &PolicyFile,
) -> (walk::Selected, Option<Prefilter>) {
    let build = || Prefilter::new(config, &owner_names(policy_file));
    std::thread::scope(|scope| {
        let builder = std::thread::Builder::new()
            .name("dwlint-prefilter".into())
            .spawn_scoped(scope, build);
        let selected = sources.select(found);
        let prefilter = match builder {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => build(),
        };
        (selected, prefilter)
    })
}

/// Loads the policy while a second thread walks the tree and then, until
/// the policy is loaded, reads files ahead ([`scan::Preread`]): the walk
/// needs no policy, and a large policy takes longer to load than the walk.
/// The walk is told to stop when the policy (or the changed-files mode)
/// fails, since nothing will read what it finds.
fn load_and_walk(
    root: &Path,
    located: &discover::Discovered,
    options: &CheckOptions,
    watch: &mut Stopwatch,
) -> Result<Loaded, RunError> {
    let cancel = AtomicBool::new(false);
    let policy_loaded = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let walker = std::thread::Builder::new()
            .name("dwlint-walk".into())
            .spawn_scoped(scope, || {
                let started = Instant::now();
                let found = walk::find_files(root, &cancel);
                let walked = Instant::now();
                let preread =
                    scan::Preread::read_until(&found, options.max_file_bytes, &policy_loaded);
                let took = [walked - started, walked.elapsed()];
                (found, preread, took)
            });
        let loaded = (|| -> Result<(PolicyFile, Changed, walk::Sources), RunError> {
            let policy_file = config::load_policy(root, Some(&located.policy))?;
            policy_loaded.store(true, Ordering::Relaxed);
            watch.mark("load the policy");
            let changed = changed::resolve(root, &options.selection)?;
            let sources = walk::Sources::compile(&policy_file)?;
            Ok((policy_file, changed, sources))
        })();
        policy_loaded.store(true, Ordering::Relaxed);
        if loaded.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        let (policy_file, (mode, changed), sources) = loaded?;
        let walk_here = || {
            let started = Instant::now();
            let found = walk::find_files(root, &cancel);
            (
                found,
                scan::Preread::default(),
                [started.elapsed(), Duration::ZERO],
            )
        };
        let (found, preread, [walked, read_ahead]) = match walker {
            // A walker that panicked found nothing reliable: walk again here
            // rather than check an empty tree.
            Ok(handle) => handle.join().unwrap_or_else(|_| walk_here()),
            // No second thread to be had: walk on this one.
            Err(_) => walk_here(),
        };
        watch.mark("compile [sources] and changed files, join the walk");
        watch.beside("load the policy", "walk the tree", walked);
        watch.beside("load the policy", "read files ahead", read_ahead);
        Ok((policy_file, mode, changed, sources, found, preread))
    })
}

/// Whether a finding survives changed-files mode: tree-wide findings
/// always do, file-local ones when their file changed.
fn reported_in(diagnostic: &Diagnostic, changed: &ChangedFiles) -> bool {
    let file_local = rules::find(diagnostic.code).is_some_and(|r| r.scope == Scope::File);
    match &diagnostic.primary {
        Some(anchor) if file_local => changed.contains(&anchor.file),
        _ => true,
    }
}

/// The severity a rule runs at after `[rules]` and the command line;
/// `None` = allowed.
fn configured_severity(
    policy_file: &PolicyFile,
    overrides: &Overrides,
    rule: &Rule,
) -> Option<Severity> {
    let policy_level = policy_file
        .policy
        .rules
        .iter()
        .rev()
        .find(|(code, _)| code.value == rule.code)
        .and_then(|(_, level)| Level::from_policy(&level.value));
    overrides.resolve(rule, policy_level)
}

/// The last segment of every owner that names a type (`a::b::T`,
/// `App\Support\T`, `pkg.T`, `mod:T`), so the prefilter also parses the
/// files that define owners but build no keys. File-path owners need no
/// parsing.
fn owner_names(policy_file: &PolicyFile) -> Vec<String> {
    let policy = &policy_file.policy;
    let owners = policy
        .cache_keys
        .iter()
        .filter_map(|c| c.owner.as_ref())
        .chain(policy.scan_limits.iter().filter_map(|s| s.owner.as_ref()))
        .chain(policy.metrics.iter().filter_map(|m| m.owner.as_ref()));
    let separators = [':', '\\', '.'];
    // `build.rs` is a file at the root, not a type named `rs`.
    let extensions = [
        "rs", "php", "py", "go", "sh", "js", "ts", "yml", "yaml", "toml", "json",
    ];
    let mut names: Vec<String> = owners
        .filter(|o| !o.value.contains('/') && o.value.contains(separators))
        .filter_map(|o| {
            let last = o.value.rsplit(separators).next()?;
            let dotted_only = !o.value.contains([':', '\\']);
            (!(dotted_only && extensions.contains(&last))).then(|| last.to_owned())
        })
        .filter(|name| !name.is_empty())
        .collect();
    names.sort();
    names.dedup();
    names
}
