//! `check --write-baseline FILE` and `check --baseline FILE`: adopting the
//! gate on a tree that already has findings.
//!
//! `--write-baseline` records every finding of the run (its fingerprint,
//! with the code, subject and file for a reader) and reports none of them,
//! so the run exits 0; `--baseline` leaves out the findings the file
//! records and fails only on new ones. A fingerprint is SARIF's
//! `dwlint/v1` partial fingerprint: the rule, the subject, the file and the
//! occurrence, not the line, so moving code does not make a known finding
//! new. Entries that no longer match a finding are named (fixed findings),
//! so the baseline can be rewritten to stay small.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::base::bounded_read;
use crate::base::error::RunError;
use crate::report::model::CheckReport;
use crate::report::{location, sarif};

/// The format version written in every baseline file.
const VERSION: u32 = 1;

/// The largest baseline file read (a finding's entry is about 200 bytes).
const MAX_BYTES: u64 = 64 << 20;

/// A baseline file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    dwlint_baseline: u32,
    findings: Vec<Entry>,
}

/// One recorded finding; only the fingerprint is matched.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
struct Entry {
    fingerprint: String,
    code: String,
    file: String,
    subject: String,
}

/// What applying a baseline did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Findings left out because the baseline knows them.
    pub known: usize,
    /// Baseline entries that matched no finding (fixed since).
    pub stale: Vec<String>,
}

/// A read baseline.
#[derive(Debug)]
pub struct Baseline {
    path: PathBuf,
    entries: Vec<Entry>,
}

fn entries(report: &CheckReport) -> Vec<Entry> {
    let mut entries: Vec<Entry> = report
        .diagnostics
        .iter()
        .zip(sarif::fingerprints(report))
        .map(|(d, fingerprint)| Entry {
            fingerprint,
            code: d.code.to_owned(),
            file: location(d, report).0.to_owned(),
            subject: d.subject.clone(),
        })
        .collect();
    entries.sort();
    entries
}

/// Writes every finding of `report` to `path`; how many.
pub fn write(path: &Path, report: &CheckReport) -> Result<usize, RunError> {
    let file = File {
        dwlint_baseline: VERSION,
        findings: entries(report),
    };
    let mut text = serde_json::to_string_pretty(&file).expect("a baseline serializes");
    text.push('\n');
    std::fs::write(path, text).map_err(|source| RunError::OutputFile {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(file.findings.len())
}

impl Baseline {
    /// Reads the baseline at `path`.
    pub fn read(path: &Path) -> Result<Baseline, RunError> {
        let bad = |why: String| {
            RunError::Usage(format!(
                "cannot read the baseline {}: {why}",
                crate::report::printable(&path.to_string_lossy())
            ))
        };
        let text = bounded_read::read_text(path, MAX_BYTES).map_err(|e| bad(e.to_string()))?;
        let file: File = serde_json::from_str(&text).map_err(|e| {
            bad(format!(
                "{e} (write one with `dwlint check --write-baseline {}`)",
                path.display()
            ))
        })?;
        if file.dwlint_baseline != VERSION {
            return Err(bad(format!(
                "format version {} is not {VERSION}",
                file.dwlint_baseline
            )));
        }
        Ok(Baseline {
            path: path.to_path_buf(),
            entries: file.findings,
        })
    }

    /// The baseline file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the findings the baseline knows out of `report`.
    pub fn apply(&self, report: &mut CheckReport) -> Applied {
        let known: BTreeSet<&str> = self
            .entries
            .iter()
            .map(|e| e.fingerprint.as_str())
            .collect();
        let fingerprints = sarif::fingerprints(report);
        let mut matched = BTreeSet::new();
        let mut keep = fingerprints.iter().map(|f| {
            let hit = known.contains(f.as_str());
            if hit {
                matched.insert(f.as_str());
            }
            !hit
        });
        let before = report.diagnostics.len();
        report.diagnostics.retain(|_| keep.next().unwrap_or(true));
        let stale = self
            .entries
            .iter()
            .filter(|e| !matched.contains(e.fingerprint.as_str()))
            .map(|e| format!("{} `{}` in {}", e.code, e.subject, e.file))
            .collect();
        Applied {
            known: before - report.diagnostics.len(),
            stale,
        }
    }
}
