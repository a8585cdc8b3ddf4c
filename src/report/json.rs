//! The `--format json` contract (version 1), documented in DESIGN.md.
//!
//! Field names and meanings are a public interface: CI scripts parse them.
//! Add fields only with a version bump.

use std::io::Write;

use serde::Serialize;

use crate::check::CheckReport;
use crate::diagnostic::Severity;

#[derive(Serialize)]
struct JsonReport<'a> {
    version: u32,
    diagnostics: Vec<JsonDiagnostic<'a>>,
    summary: Summary,
}

#[derive(Serialize)]
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

#[derive(Serialize)]
struct Summary {
    files_scanned: usize,
    errors: usize,
    warnings: usize,
}

/// Writes the report as one JSON document followed by a newline.
pub fn write(report: &CheckReport, out: &mut dyn Write) -> std::io::Result<()> {
    let diagnostics = report
        .diagnostics
        .iter()
        .map(|d| {
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
        })
        .collect();
    let document = JsonReport {
        version: 1,
        diagnostics,
        summary: Summary {
            files_scanned: report.files_scanned,
            errors: report.count(Severity::Error),
            warnings: report.count(Severity::Warning),
        },
    };
    serde_json::to_writer_pretty(&mut *out, &document)?;
    writeln!(out)
}
