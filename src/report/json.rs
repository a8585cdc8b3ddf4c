//! The `--format json` contract (version 1): docs/json-report.md, with the
//! JSON Schema docs/json-report.schema.json that tests hold the output to.
//!
//! Field names and meanings are a public interface: CI scripts parse them.
//! New fields may be added (as `summary.mode` and `root` were); renaming or
//! removing one needs a version bump.

use std::io::Write;

use serde::ser::{Serialize, Serializer};
use serde::Serialize as DeriveSerialize;

use crate::base::diagnostic::{Diagnostic, Severity};
use crate::discover::changed::Mode;
use crate::report::model::CheckReport;

#[derive(DeriveSerialize)]
struct JsonReport<'a> {
    version: u32,
    /// The checked root as reachable from the working directory; every
    /// `file` is relative to it.
    root: String,
    diagnostics: Diagnostics<'a>,
    summary: Summary<'a>,
}

/// The findings, converted one at a time while serde writes the array.
struct Diagnostics<'a>(&'a [Diagnostic]);

impl Serialize for Diagnostics<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|d| {
            let at = d.primary.as_ref();
            JsonDiagnostic {
                code: d.code,
                severity: d.severity,
                message: &d.message,
                subject: &d.subject,
                file: at.map(|a| a.file.as_str()),
                line: at.map(|a| a.range.line),
                column: at.map(|a| a.range.column),
                end_line: at.map(|a| a.range.end_line),
                end_column: at.map(|a| a.range.end_column),
                help: d.help.as_deref(),
            }
        }))
    }
}

#[derive(DeriveSerialize)]
struct JsonDiagnostic<'a> {
    code: &'a str,
    severity: Severity,
    message: &'a str,
    subject: &'a str,
    file: Option<&'a str>,
    line: Option<usize>,
    column: Option<usize>,
    end_line: Option<usize>,
    end_column: Option<usize>,
    help: Option<&'a str>,
}

#[derive(DeriveSerialize)]
struct Summary<'a> {
    files_scanned: usize,
    errors: usize,
    warnings: usize,
    /// `full`, `changed-since` or `files`: whether file-local findings were
    /// limited to changed files.
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    changed_since: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    changed_files: Option<usize>,
}

/// Writes the report as one JSON document followed by a newline.
pub fn write(report: &CheckReport, out: &mut dyn Write) -> std::io::Result<()> {
    let (changed_since, changed_files) = match &report.mode {
        Mode::Full => (None, None),
        Mode::ChangedSince { rev, files } => (Some(rev.as_str()), Some(*files)),
        Mode::Files { files } => (None, Some(*files)),
    };
    let document = JsonReport {
        version: 1,
        root: match report.root.to_string_lossy().replace('\\', "/") {
            root if root.is_empty() => ".".to_owned(),
            root => root,
        },
        diagnostics: Diagnostics(&report.diagnostics),
        summary: Summary {
            files_scanned: report.files_scanned,
            errors: report.count(Severity::Error),
            warnings: report.count(Severity::Warning),
            mode: report.mode.name(),
            changed_since,
            changed_files,
        },
    };
    serde_json::to_writer_pretty(&mut *out, &document)?;
    writeln!(out)
}
