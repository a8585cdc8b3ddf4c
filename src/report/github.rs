//! `--format github`: GitHub Actions workflow commands, which the runner
//! turns into annotations on the pull request's diff, plus a Markdown table
//! for the job summary.
//!
//! GitHub shows only the first few annotations of a step, so the table in
//! `$GITHUB_STEP_SUMMARY` is where a reader finds every finding.

use std::io::Write;

use crate::base::diagnostic::Severity;
use crate::report::model::CheckReport;
use crate::report::{human, location, message_with_help};

/// Command data: the runner reads `%`, CR and LF as encoded, so they must be.
fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Command properties: also `:` and `,`, which delimit properties.
fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// The path GitHub resolves against the repository root.
fn repo_path(report: &CheckReport, file: &str) -> String {
    if file.starts_with('/') {
        file.to_owned()
    } else {
        format!("{}{file}", report.repo_prefix)
    }
}

/// Writes one `::error`/`::warning` command per finding, then the summary
/// line for the log.
pub fn write(report: &CheckReport, out: &mut dyn Write) -> std::io::Result<()> {
    for diagnostic in &report.diagnostics {
        let (file, range) = location(diagnostic, report);
        let command = match diagnostic.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        writeln!(
            out,
            "::{command} file={},line={},endLine={},col={},endColumn={},title={}::{}",
            escape_property(&repo_path(report, file)),
            range.line,
            range.end_line,
            range.column,
            range.end_column,
            escape_property(&format!("dwlint ({})", diagnostic.code)),
            escape_data(&message_with_help(diagnostic)),
        )?;
    }
    writeln!(out, "{}", human::summary(report))
}

/// A Markdown table cell: one line, no column breaks, no HTML.
fn cell(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
        .replace("\r\n", "<br>")
        .replace(['\r', '\n'], "<br>")
}

/// Appends the job-summary section: a heading with the summary line and a
/// table of every finding.
pub fn write_step_summary(report: &CheckReport, out: &mut dyn Write) -> std::io::Result<()> {
    // A blank line first: the previous step may not have ended its block.
    writeln!(out, "\n### {}\n", cell(&human::summary(report)))?;
    if report.diagnostics.is_empty() {
        return writeln!(out);
    }
    writeln!(out, "| Severity | Rule | Location | Message |")?;
    writeln!(out, "| --- | --- | --- | --- |")?;
    for diagnostic in &report.diagnostics {
        let (file, range) = location(diagnostic, report);
        writeln!(
            out,
            "| {} | `{}` | {}:{}:{} | {} |",
            diagnostic.severity.as_str(),
            diagnostic.code,
            cell(&repo_path(report, file)),
            range.line,
            range.column,
            cell(&message_with_help(diagnostic)),
        )?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_and_properties_are_escaped_as_the_runner_expects() {
        assert_eq!(escape_data("50% a\r\nb: c, d"), "50%25 a%0D%0Ab: c, d");
        assert_eq!(
            escape_property("50% a\r\nb: c, d"),
            "50%25 a%0D%0Ab%3A c%2C d"
        );
    }

    #[test]
    fn table_cells_cannot_break_the_table() {
        assert_eq!(cell("a | b\nc <x>"), "a \\| b<br>c &lt;x&gt;");
    }
}
