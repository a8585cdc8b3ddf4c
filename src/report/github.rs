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

/// Command data: the runner reads `%`, CR and LF as encoded, so they must
/// be. Every other control or format character (ESC, DEL, C1, U+2028,
/// U+0085, bidi controls) has no encoding the runner decodes, and passed raw
/// it would reach the log viewer: it is written as a visible escape
/// (`\u{1b}`) instead, as the human report writes it.
fn escape_data(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            c if crate::report::needs_escape(c) => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
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

/// A Markdown table cell: one line, no column breaks, no HTML, no
/// invisible control or format characters.
fn cell(text: &str) -> String {
    let visible: String = text
        .chars()
        .map(|c| match c {
            '\r' | '\n' => c.to_string(),
            c if crate::report::needs_escape(c) => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect();
    visible
        .replace('&', "&amp;")
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
    fn control_and_format_characters_reach_the_log_as_visible_escapes() {
        let hostile =
            "a\u{1b}[31mred\u{7f}b\u{2028}c\u{85}d\u{202e}e\u{2066}f\u{200b}g\u{feff}h\u{9b}i";
        let data = escape_data(hostile);
        assert_eq!(
            data,
            "a\\u{1b}[31mred\\u{7f}b\\u{2028}c\\u{85}d\\u{202e}e\\u{2066}f\\u{200b}g\\u{feff}h\\u{9b}i"
        );
        for text in [data, escape_property(hostile), cell(hostile)] {
            assert!(
                !text.chars().any(crate::report::needs_escape),
                "{text:?} still holds a control or format character"
            );
        }
        // Printable non-ASCII text is left alone.
        assert_eq!(escape_data("café ✓ 名前"), "café ✓ 名前");
    }

    #[test]
    fn table_cells_cannot_break_the_table() {
        assert_eq!(cell("a | b\nc <x>"), "a \\| b<br>c &lt;x&gt;");
    }
}
