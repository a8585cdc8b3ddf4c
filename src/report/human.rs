//! Human output: miette reports with code frames.
//!
//! A finding about code points into the source file; where the policy is
//! involved, a related report points into the policy file ("declared here"),
//! so a reader sees both sides without opening either file.

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::Path;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceSpan};

use crate::check::CheckReport;
use crate::diagnostic::{Anchor, Diagnostic, Severity};
use crate::error::RunError;

/// Width of rendered reports, in columns.
const WIDTH: usize = 100;

/// How to draw reports.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    /// Use ANSI colours.
    pub color: bool,
}

fn handler(style: Style) -> GraphicalReportHandler {
    let theme = if style.color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    GraphicalReportHandler::new_themed(theme)
        .with_width(WIDTH)
        .with_links(false)
        .with_context_lines(1)
}

/// Reads each file with a finding once, only when a frame needs it.
struct Sources<'a> {
    root: &'a Path,
    texts: HashMap<String, Option<String>>,
}

impl Sources<'_> {
    fn text(&mut self, file: &str) -> Option<String> {
        let root = self.root;
        self.texts
            .entry(file.to_owned())
            .or_insert_with(|| {
                std::fs::read_to_string(root.join(file))
                    .or_else(|_| std::fs::read_to_string(file))
                    .ok()
            })
            .clone()
    }
}

/// One rendered report: a message, optionally framed in one file.
#[derive(Debug)]
struct Frame {
    message: String,
    code: Option<&'static str>,
    severity: miette::Severity,
    help: Option<String>,
    source: Option<NamedSource<String>>,
    labels: Vec<LabeledSpan>,
    related: Vec<Frame>,
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Frame {}

impl miette::Diagnostic for Frame {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.code.map(|c| Box::new(c) as Box<dyn fmt::Display>)
    }
    fn severity(&self) -> Option<miette::Severity> {
        Some(self.severity)
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source.as_ref().map(|s| s as &dyn miette::SourceCode)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        (!self.labels.is_empty())
            .then(|| Box::new(self.labels.iter().cloned()) as Box<dyn Iterator<Item = LabeledSpan>>)
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        (!self.related.is_empty()).then(|| {
            Box::new(self.related.iter().map(|r| r as &dyn miette::Diagnostic))
                as Box<dyn Iterator<Item = _>>
        })
    }
}

fn span(anchor: &Anchor) -> SourceSpan {
    SourceSpan::new(
        anchor.range.start.into(),
        anchor.range.end - anchor.range.start,
    )
}

fn frame_for(diagnostic: &Diagnostic, sources: &mut Sources) -> Frame {
    let severity = match diagnostic.severity {
        Severity::Error => miette::Severity::Error,
        Severity::Warning => miette::Severity::Warning,
    };
    let mut frame = Frame {
        message: diagnostic.message.clone(),
        code: Some(diagnostic.code),
        severity,
        help: diagnostic.help.clone(),
        source: None,
        labels: Vec::new(),
        related: Vec::new(),
    };
    let primary_file = diagnostic.primary.as_ref().map(|a| a.file.as_str());
    if let Some(anchor) = &diagnostic.primary {
        match sources.text(&anchor.file) {
            Some(text) if anchor.range.end <= text.len() && anchor.range.end > 0 => {
                frame.source = Some(NamedSource::new(&anchor.file, text));
                frame.labels.push(LabeledSpan::new_primary_with_span(
                    anchor.label.clone(),
                    span(anchor),
                ));
            }
            _ if frame.message.contains(anchor.file.as_str()) => {}
            _ => frame.message = format!("{}: {}", anchor.file, frame.message),
        }
    }
    for anchor in &diagnostic.related {
        if Some(anchor.file.as_str()) == primary_file && frame.source.is_some() {
            frame.labels.push(LabeledSpan::new_with_span(
                anchor.label.clone(),
                span(anchor),
            ));
            continue;
        }
        let Some(text) = sources.text(&anchor.file) else {
            continue;
        };
        frame.related.push(Frame {
            message: format!("see {}", anchor.file),
            code: None,
            severity: miette::Severity::Advice,
            help: None,
            source: Some(NamedSource::new(&anchor.file, text)),
            labels: vec![LabeledSpan::new_primary_with_span(
                anchor.label.clone(),
                span(anchor),
            )],
            related: Vec::new(),
        });
    }
    frame
}

/// Writes every finding, then a one-line summary.
pub fn write(report: &CheckReport, style: Style, out: &mut dyn Write) -> std::io::Result<()> {
    let handler = handler(style);
    let mut sources = Sources {
        root: &report.root,
        texts: HashMap::new(),
    };
    for diagnostic in &report.diagnostics {
        let frame = frame_for(diagnostic, &mut sources);
        let mut rendered = String::new();
        if handler.render_report(&mut rendered, &frame).is_err() {
            rendered = format!(
                "{}[{}]: {}\n",
                diagnostic.severity.as_str(),
                diagnostic.code,
                diagnostic.message
            );
        }
        writeln!(out, "{rendered}")?;
    }
    writeln!(out, "{}", summary(report))
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// `dwlint: 2 errors, 1 warning in 40 files (whole tree; policy: …)`.
pub fn summary(report: &CheckReport) -> String {
    let (errors, warnings) = (
        report.count(Severity::Error),
        report.count(Severity::Warning),
    );
    let findings = if errors + warnings == 0 {
        "no findings".to_owned()
    } else {
        format!(
            "{}, {}",
            plural(errors, "error"),
            plural(warnings, "warning")
        )
    };
    // The root is named only when discovery moved it above the given path,
    // since findings' paths are then relative to a directory the user did
    // not name.
    let root = if report.root_moved {
        format!("root: {}; ", report.root.display())
    } else {
        String::new()
    };
    format!(
        "dwlint: {findings} in {} ({}; {root}policy: {})",
        plural(report.files_scanned, "file"),
        report.mode.describe(),
        report.policy_path
    )
}

/// Writes a failure of the run itself; invalid policies get one framed
/// report per problem.
pub fn write_run_error(error: &RunError, style: Style, out: &mut dyn Write) -> std::io::Result<()> {
    let handler = handler(style);
    let frames: Vec<Frame> = match error {
        RunError::PolicyInvalid { path, text, errors } => errors
            .iter()
            .map(|e| Frame {
                message: format!("{path}: {}", e.message),
                code: Some("invalid-policy"),
                severity: miette::Severity::Error,
                help: e.help.clone(),
                source: e.span.map(|_| NamedSource::new(path, text.clone())),
                labels: e
                    .span
                    .map(|s| {
                        vec![LabeledSpan::new_primary_with_span(
                            Some("here".into()),
                            SourceSpan::new(s.start.into(), s.end.saturating_sub(s.start)),
                        )]
                    })
                    .unwrap_or_default(),
                related: Vec::new(),
            })
            .collect(),
        other => vec![Frame {
            message: other.to_string(),
            code: None,
            severity: miette::Severity::Error,
            help: run_error_help(other),
            source: None,
            labels: Vec::new(),
            related: Vec::new(),
        }],
    };
    for frame in &frames {
        let mut rendered = String::new();
        if handler.render_report(&mut rendered, frame).is_err() {
            rendered = format!("error: {}\n", frame.message);
        }
        writeln!(out, "{rendered}")?;
    }
    Ok(())
}

fn run_error_help(error: &RunError) -> Option<String> {
    match error {
        RunError::NoSuchPath(_) => {
            Some("pass the root of the tree to check (default: the current directory)".into())
        }
        RunError::PolicyNotFound(_) => Some(format!(
            "looked for {} in each directory up to the repository root; create one (see docs/policy.md) or pass --policy FILE",
            crate::discover::CANDIDATES.join(", ")
        )),
        RunError::Git(_) => Some(
            "--changed-since needs a git work tree and a revision it knows (fetch it first in a shallow CI clone)".into(),
        ),
        RunError::UnknownRule { .. } => Some("`dwlint rules` lists every code".into()),
        RunError::Docs(e) => e.help(),
        _ => None,
    }
}
