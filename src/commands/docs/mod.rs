//! `dwlint docs`: keep the operator docs' inventory tables equal to the policy.
//!
//! `check` only asks that the docs *mention* every surface, so a table row can
//! keep an old TTL or owner long after the policy changed. Marked tables
//! (see [`markers`]) are instead generated from the policy: `--write`
//! regenerates them, `--check` fails with a diff when they are stale. Docs
//! come from the policy's `[sources].docs`; a doc without markers is left
//! alone (it may be a runbook that only mentions surfaces), but when no doc
//! has any, the run fails: there is nothing to keep in sync, which is
//! almost certainly a setup mistake.

mod diff;
mod markers;
mod tables;

use std::path::PathBuf;

pub use diff::unified;
pub use markers::{regions, splice, MarkerError, Region};
pub use tables::Table;

use crate::base::error::RunError;
use crate::commands::outcome::{self, Outcome};
use crate::discover::{self, walk};
use crate::rules::config;

/// Why the docs could not be synced (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    /// The run failed as any would: no policy, an invalid one.
    #[error(transparent)]
    Run(#[from] RunError),
    /// `[sources].docs` selects no file.
    #[error("no operator doc matches [sources].docs ({})", .0.join(", "))]
    NoDocs(Vec<String>),
    /// No selected doc has a marker.
    #[error("no dwlint table markers in {}; nothing was changed", .0.join(", "))]
    NoMarkers(Vec<String>),
    /// A doc's markers are malformed.
    #[error("{file}:{line}: {message}")]
    Marker {
        /// The doc, relative to the root.
        file: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A doc could not be read or written.
    #[error("cannot {action} {file}: {source}")]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The doc, relative to the root.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}

impl DocsError {
    /// What to do about it.
    pub fn help(&self) -> Option<String> {
        match self {
            DocsError::NoDocs(_) => Some("list the operator doc under [sources].docs in the policy".into()),
            DocsError::NoMarkers(_) => Some(
                "wrap each inventory table in `<!-- dwlint:cache-inventory:start -->` … `<!-- dwlint:cache-inventory:end -->` (also scan-limits, metric-inventory); see docs/commands.md".into(),
            ),
            DocsError::Marker { .. } => Some("every `dwlint:<table>:start` marker needs a matching `:end` marker after it".into()),
            DocsError::Io { .. } | DocsError::Run(_) => None,
        }
    }
}

/// `--write` or `--check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Regenerate the tables in place.
    Write,
    /// Report stale tables with a diff; change nothing.
    Check,
}

/// What to sync.
#[derive(Debug, Clone)]
pub struct DocsOptions {
    /// Root of the tree.
    pub root: PathBuf,
    /// Policy file; found as `check` finds it when absent.
    pub policy: Option<PathBuf>,
    /// Write or check.
    pub mode: Mode,
}

/// What happened to one doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocStatus {
    /// Its tables already match the policy.
    Fresh,
    /// `--write` rewrote its tables.
    Updated,
    /// `--check`: its tables differ; the unified diff.
    Stale(String),
    /// It has no markers and was left alone.
    NoMarkers,
}

/// The result of a sync.
#[derive(Debug)]
pub struct DocsReport {
    /// Each selected doc (relative to the root) with its status, by path.
    pub docs: Vec<(String, DocStatus)>,
}

impl DocsReport {
    /// Whether `--check` found a stale table (exit 1).
    pub fn is_stale(&self) -> bool {
        self.docs
            .iter()
            .any(|(_, s)| matches!(s, DocStatus::Stale(_)))
    }

    /// What to print: diffs first, then one line per doc.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (_, status) in &self.docs {
            if let DocStatus::Stale(diff) = status {
                out.push_str(diff);
            }
        }
        for (file, status) in &self.docs {
            let line = match status {
                DocStatus::Fresh => format!("{file}: tables are up to date"),
                DocStatus::Updated => format!("{file}: tables regenerated from the policy"),
                DocStatus::Stale(_) => {
                    format!("{file}: tables are stale; run `dwlint docs --write`")
                }
                DocStatus::NoMarkers => format!("{file}: no dwlint markers, left unchanged"),
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// The doc `text` with every marked table regenerated from `policy`;
/// `Ok(None)` when it has no markers.
pub fn regenerate(text: &str, policy: &dwpolicy::Policy) -> Result<Option<String>, MarkerError> {
    let found = regions(text)?;
    if found.is_empty() {
        return Ok(None);
    }
    Ok(Some(splice(text, &found, |table| table.render(policy))))
}

/// `dwlint docs --write|--check`: syncs the docs and prints what it did;
/// stale tables under `--check` are findings (exit 1).
pub fn run(options: &DocsOptions) -> Result<Outcome, DocsError> {
    let report = sync(options)?;
    outcome::print(report.render().as_bytes())?;
    Ok(if report.is_stale() {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}

/// Syncs every doc the policy lists.
pub fn sync(options: &DocsOptions) -> Result<DocsReport, DocsError> {
    // Found the way `check` finds it, so both commands agree on the docs.
    let located = discover::locate(&options.root, options.policy.as_deref())?;
    let root = located.root.as_path();
    let policy_file = config::load_policy(root, Some(&located.policy))?;
    let policy = &policy_file.policy;
    // A policy that lists itself as a doc is never rewritten: its text is
    // the source of the tables, not a place for them.
    let policy_path = located.policy.canonicalize().ok();
    let docs: Vec<_> = walk::select_files(root, &policy_file)?
        .files
        .into_iter()
        .filter(|f| f.roles.docs)
        .filter(|f| policy_path.is_none() || f.path.canonicalize().ok() != policy_path)
        .collect();
    if docs.is_empty() {
        let globs = policy
            .sources
            .docs
            .iter()
            .map(|g| g.value.clone())
            .collect();
        return Err(DocsError::NoDocs(globs));
    }
    let mut report = DocsReport { docs: Vec::new() };
    for doc in &docs {
        let io = |action, source| DocsError::Io {
            action,
            file: doc.rel.clone(),
            source,
        };
        let text = std::fs::read_to_string(&doc.path).map_err(|e| io("read", e))?;
        let regenerated = regenerate(&text, policy).map_err(|e| DocsError::Marker {
            file: doc.rel.clone(),
            line: e.line,
            message: e.message,
        })?;
        let status = match (regenerated, options.mode) {
            (None, _) => DocStatus::NoMarkers,
            (Some(new), _) if new == text => DocStatus::Fresh,
            (Some(new), Mode::Write) => {
                std::fs::write(&doc.path, new).map_err(|e| io("write", e))?;
                DocStatus::Updated
            }
            (Some(new), Mode::Check) => DocStatus::Stale(unified(
                &text,
                &new,
                &format!("a/{}", doc.rel),
                &format!("b/{}", doc.rel),
            )),
        };
        report.docs.push((doc.rel.clone(), status));
    }
    if report.docs.iter().all(|(_, s)| *s == DocStatus::NoMarkers) {
        let files = report.docs.into_iter().map(|(f, _)| f).collect();
        return Err(DocsError::NoMarkers(files));
    }
    Ok(report)
}
