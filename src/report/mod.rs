//! The report layer. Reporters turn a [`CheckReport`] ([`model`]) into text
//! for people (`human`, `short`), programs (`json`, `sarif`, `junit`) or
//! GitHub's runner (`github`). They use the rules' metadata
//! ([`crate::rules`]), the discover and base layers, and nothing that runs a
//! command: whichever command filled the model, the report reads the same.
//!
//! Every writer streams: it formats one finding at a time straight into the
//! writer, so a run with a hundred thousand findings never holds a second
//! copy of them as output text.

use std::io::Write;

use crate::base::diagnostic::Diagnostic;
use crate::base::line_index::TextRange;
use crate::report::model::CheckReport;

pub mod github;
pub mod human;
pub mod json;
pub mod junit;
pub mod model;
pub mod sarif;
pub mod short;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Format {
    /// Code frames for people (the default).
    Human,
    /// The versioned JSON report.
    Json,
    /// SARIF 2.1.0 for GitHub code scanning and other SARIF viewers.
    Sarif,
    /// GitHub Actions workflow commands (annotations).
    Github,
    /// JUnit XML: one test case per rule.
    Junit,
    /// One line per finding: `path:line:col: severity[CODE] message`.
    Short,
}

impl Format {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Human => "human",
            Format::Json => "json",
            Format::Sarif => "sarif",
            Format::Github => "github",
            Format::Junit => "junit",
            Format::Short => "short",
        }
    }

    /// Every format, in the order the help lists them.
    pub const ALL: [Format; 6] = [
        Format::Human,
        Format::Json,
        Format::Sarif,
        Format::Github,
        Format::Junit,
        Format::Short,
    ];

    /// The format called `name` on the command line.
    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Writes `report` in `format`. Returns the notes a user should see on
/// stderr (e.g. SARIF results cut at GitHub's limit).
pub fn write(
    format: Format,
    report: &CheckReport,
    style: human::Style,
    out: &mut dyn Write,
) -> std::io::Result<Vec<String>> {
    match format {
        Format::Human => human::write(report, style, out)?,
        Format::Json => json::write(report, out)?,
        Format::Sarif => return sarif::write(report, sarif::MAX_RESULTS, out),
        Format::Github => github::write(report, out)?,
        Format::Junit => junit::write(report, out)?,
        Format::Short => short::write(report, out)?,
    }
    out.flush()?;
    Ok(Vec::new())
}

/// Where a finding is reported in the location-only formats (SARIF,
/// GitHub, short).
///
/// Every finding the rules make has a place today; one without (a future
/// rule about the run as a whole) is reported at the top of the policy
/// file, because SARIF consumers such as GitHub drop results that have no
/// location, and the policy is where such a finding is resolved.
pub fn location<'a>(diagnostic: &'a Diagnostic, report: &'a CheckReport) -> (&'a str, TextRange) {
    match &diagnostic.primary {
        Some(anchor) => (anchor.file.as_str(), sane(anchor.range)),
        None => (report.policy_path.as_str(), TextRange::file_start()),
    }
}

/// A range every consumer accepts: 1-based, and never ending before it starts.
fn sane(range: TextRange) -> TextRange {
    let line = range.line.max(1);
    let column = range.column.max(1);
    let end_line = range.end_line.max(line);
    let end_column = if end_line == line {
        range.end_column.max(column)
    } else {
        range.end_column.max(1)
    };
    TextRange {
        line,
        column,
        end_line,
        end_column,
        ..range
    }
}

/// `text` with every control character escaped (`\n`, `\u{1b}`), for
/// file names and messages in line-oriented text: a raw line break in a
/// crafted file name would otherwise start a line of its own, which a
/// GitHub Actions log reads as a workflow command (`::warning …`).
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Control characters (C0, DEL, C1), the Unicode line and paragraph
/// separators that some viewers break lines at, and the invisible format
/// characters that reorder or hide text (bidi embeddings, overrides and
/// isolates, zero-width characters, the byte-order mark): what a reader
/// sees must be what the text holds.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || is_format_char(c)
}

/// The characters of Unicode's line/paragraph separator and format (`Cf`)
/// classes that a terminal, a log viewer or a browser acts on invisibly.
fn is_format_char(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

/// `file` (a finding's path: relative to the checked root, or as given for
/// a policy outside it) as reachable from the current directory, so that
/// `path:line:col` opens from where dwlint ran. `human` and `short` print
/// the same paths.
pub fn shown_path(report: &CheckReport, file: &str) -> String {
    let path = std::path::Path::new(file);
    if path.is_absolute() {
        return file.to_owned();
    }
    let from_root = short::display_path(&report.root, file);
    if file == report.policy_path && !std::path::Path::new(&from_root).exists() && path.exists() {
        // A policy outside the root is shown as it was given.
        return file.to_owned();
    }
    from_root
}

/// The message with its help, for formats that have one text field.
pub fn message_with_help(diagnostic: &Diagnostic) -> String {
    match &diagnostic.help {
        Some(help) => format!("{}\nhelp: {help}", diagnostic.message),
        None => diagnostic.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for name in ["human", "json", "sarif", "github", "junit", "short"] {
            assert_eq!(Format::from_name(name).map(Format::name), Some(name));
        }
        assert_eq!(Format::from_name("xml"), None);
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(printable("a/ї.rs"), "a/ї.rs");
        assert_eq!(
            printable("x\n::warning file=a::pwned\r\u{1b}[31m"),
            "x\\n::warning file=a::pwned\\r\\u{1b}[31m"
        );
    }

    #[test]
    fn ranges_are_made_consistent() {
        let r = sane(TextRange {
            line: 0,
            column: 0,
            end_line: 0,
            end_column: 0,
            start: 0,
            end: 0,
        });
        assert_eq!((r.line, r.column, r.end_line, r.end_column), (1, 1, 1, 1));
    }
}
