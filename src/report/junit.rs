//! `--format junit`: JUnit XML, which every CI system can show as a test
//! report. Each rule is one test case; each error-level finding is one
//! `<failure>` in its rule's case.
//!
//! Warning-level findings are listed in their case's `<system-out>` rather
//! than as failures, so that the test report fails exactly when the gate
//! does (exit 1); `-D warnings` turns them into failures like everywhere
//! else. Allowed rules are `<skipped>`.

use std::io::Write;

use crate::base::diagnostic::Severity;
use crate::report::model::CheckReport;
use crate::report::{location, message_with_help};

/// Text safe in XML attributes and content. Control characters XML 1.0
/// cannot carry become U+FFFD instead of making the document invalid.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Writes the whole report as one `<testsuites>` document.
pub fn write(report: &CheckReport, out: &mut dyn Write) -> std::io::Result<()> {
    let tests = report.severities.len();
    let skipped = report
        .severities
        .iter()
        .filter(|(_, s)| s.is_none())
        .count();
    let failures = report
        .severities
        .iter()
        .filter(|(rule, _)| {
            report
                .diagnostics
                .iter()
                .any(|d| d.code == rule.code && d.severity == Severity::Error)
        })
        .count();
    let counts =
        format!("tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\"");
    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(out, r#"<testsuites name="dwlint" {counts}>"#)?;
    writeln!(out, r#"  <testsuite name="dwlint" {counts}>"#)?;
    writeln!(out, "    <properties>")?;
    writeln!(
        out,
        r#"      <property name="policy" value="{}"/>"#,
        xml(&report.policy_path)
    )?;
    writeln!(
        out,
        r#"      <property name="mode" value="{}"/>"#,
        xml(&report.mode.describe())
    )?;
    writeln!(
        out,
        r#"      <property name="files_scanned" value="{}"/>"#,
        report.files_scanned
    )?;
    writeln!(out, "    </properties>")?;
    for (rule, severity) in &report.severities {
        let case = format!(r#"<testcase classname="dwlint" name="{}""#, xml(rule.code));
        let Some(severity) = severity else {
            writeln!(
                out,
                r#"    {case}><skipped message="allowed by configuration"/></testcase>"#
            )?;
            continue;
        };
        let mut findings = report
            .diagnostics
            .iter()
            .filter(|d| d.code == rule.code)
            .peekable();
        if findings.peek().is_none() {
            writeln!(out, "    {case}/>")?;
            continue;
        }
        writeln!(out, "    {case}>")?;
        if *severity == Severity::Warning {
            write!(out, "      <system-out>")?;
        }
        for diagnostic in findings {
            let (file, range) = location(diagnostic, report);
            let place = format!("{file}:{}:{}", range.line, range.column);
            let body = format!(
                "{place}: {}[{}] {}",
                diagnostic.severity.as_str(),
                diagnostic.code,
                message_with_help(diagnostic)
            );
            // The rule's severity, not the finding's, decides the markup:
            // a `<failure>` inside `<system-out>` would be invalid.
            match severity {
                Severity::Error => writeln!(
                    out,
                    r#"      <failure type="error" message="{}">{}</failure>"#,
                    xml(&format!("{place}: {}", diagnostic.message)),
                    xml(&body)
                )?,
                Severity::Warning => writeln!(out, "{}", xml(&body))?,
            }
        }
        if *severity == Severity::Warning {
            writeln!(out, "</system-out>")?;
        }
        writeln!(out, "    </testcase>")?;
    }
    writeln!(out, "  </testsuite>")?;
    writeln!(out, "</testsuites>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(
            xml("a<b>&\"'\u{1}\n"),
            "a&lt;b&gt;&amp;&quot;&apos;\u{FFFD}\n"
        );
    }
}
