//! Human output: miette reports with code frames.
//!
//! A finding about code points into the source file; where the policy is
//! involved, a related report points into the policy file ("declared here"),
//! so a reader sees both sides without opening either file.

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::Path;
use std::rc::Rc;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan};

use crate::check::CheckReport;
use crate::diagnostic::{Anchor, Diagnostic, Severity};
use crate::error::RunError;
use crate::report::printable;
use crate::report::window::{Indexed, Window};

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

/// Reads (and indexes) each file with a finding once, only when a frame
/// needs it.
struct Sources<'a> {
    root: &'a Path,
    texts: HashMap<String, Option<Rc<Indexed>>>,
}

impl Sources<'_> {
    fn text(&mut self, file: &str) -> Option<Rc<Indexed>> {
        let root = self.root;
        self.texts
            .entry(file.to_owned())
            .or_insert_with(|| {
                std::fs::read_to_string(root.join(file))
                    .or_else(|_| std::fs::read_to_string(file))
                    .ok()
                    .map(|text| Rc::new(Indexed::new(text)))
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
    source: Option<Window>,
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

fn bytes(anchor: &Anchor) -> (usize, usize) {
    (anchor.range.start, anchor.range.end)
}

/// A framed report of `anchor` alone, pointing into `source`.
fn related_frame(anchor: &Anchor, source: &Indexed) -> Frame {
    let name = printable(&anchor.file);
    let (window, spans) = Window::frame(&name, source, &[bytes(anchor)]);
    Frame {
        message: format!("see {name}"),
        code: None,
        severity: miette::Severity::Advice,
        help: None,
        source: Some(window),
        labels: spans
            .into_iter()
            .flatten()
            .map(|span| LabeledSpan::new_primary_with_span(anchor.label.clone(), span))
            .collect(),
        related: Vec::new(),
    }
}

fn frame_for(diagnostic: &Diagnostic, sources: &mut Sources) -> Frame {
    let severity = match diagnostic.severity {
        Severity::Error => miette::Severity::Error,
        Severity::Warning => miette::Severity::Warning,
    };
    let mut frame = Frame {
        message: printable(&diagnostic.message).into_owned(),
        code: Some(diagnostic.code),
        severity,
        help: diagnostic
            .help
            .as_deref()
            .map(|h| printable(h).into_owned()),
        source: None,
        labels: Vec::new(),
        related: Vec::new(),
    };
    let primary_file = diagnostic.primary.as_ref().map(|a| a.file.as_str());
    // Marks in the primary file share its frame when they are close to the
    // primary mark; the others get a frame of their own.
    let mut far = Vec::new();
    if let Some(anchor) = &diagnostic.primary {
        let name = printable(&anchor.file);
        match sources.text(&anchor.file) {
            Some(source) if anchor.range.end <= source.text.len() && anchor.range.end > 0 => {
                let same_file: Vec<&Anchor> = diagnostic
                    .related
                    .iter()
                    .filter(|a| a.file == anchor.file)
                    .collect();
                let ranges: Vec<(usize, usize)> = std::iter::once(bytes(anchor))
                    .chain(same_file.iter().map(|a| bytes(a)))
                    .collect();
                let (window, spans) = Window::frame(&name, &source, &ranges);
                for (i, span) in spans.into_iter().enumerate() {
                    match (i, span) {
                        (0, Some(span)) => frame.labels.push(LabeledSpan::new_primary_with_span(
                            anchor.label.clone(),
                            span,
                        )),
                        (0, None) => {}
                        (_, Some(span)) => frame.labels.push(LabeledSpan::new_with_span(
                            same_file[i - 1].label.clone(),
                            span,
                        )),
                        (_, None) => far.push(same_file[i - 1]),
                    }
                }
                frame.source = Some(window);
            }
            _ if frame.message.contains(name.as_ref()) => {}
            _ => frame.message = format!("{name}: {}", frame.message),
        }
    }
    for anchor in &diagnostic.related {
        let framed_with_primary = Some(anchor.file.as_str()) == primary_file
            && frame.source.is_some()
            && !far.iter().any(|f| std::ptr::eq(*f, anchor));
        if framed_with_primary {
            continue;
        }
        let Some(source) = sources.text(&anchor.file) else {
            continue;
        };
        frame.related.push(related_frame(anchor, &source));
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
        format!("root: {}; ", printable(&report.root.to_string_lossy()))
    } else {
        String::new()
    };
    format!(
        "dwlint: {findings} in {} ({}; {root}policy: {})",
        plural(report.files_scanned, "file"),
        report.mode.describe(),
        printable(&report.policy_path)
    )
}

/// Writes a failure of the run itself; invalid policies get one framed
/// report per problem.
pub fn write_run_error(error: &RunError, style: Style, out: &mut dyn Write) -> std::io::Result<()> {
    let handler = handler(style);
    let frames: Vec<Frame> = match error {
        RunError::PolicyInvalid { path, text, errors } => {
            let path = printable(path);
            let source = Indexed::new(text.clone());
            errors
                .iter()
                .map(|e| {
                    let framed = e
                        .span
                        .map(|s| Window::frame(&path, &source, &[(s.start, s.end)]));
                    let (source, labels) = match framed {
                        Some((window, spans)) => (
                            Some(window),
                            spans
                                .into_iter()
                                .flatten()
                                .map(|span| {
                                    LabeledSpan::new_primary_with_span(Some("here".into()), span)
                                })
                                .collect(),
                        ),
                        None => (None, Vec::new()),
                    };
                    Frame {
                        message: format!("{path}: {}", printable(&e.message)),
                        code: Some("invalid-policy"),
                        severity: miette::Severity::Error,
                        help: e.help.clone(),
                        source,
                        labels,
                        related: Vec::new(),
                    }
                })
                .collect()
        }
        other => vec![Frame {
            message: printable(&other.to_string()).into_owned(),
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
