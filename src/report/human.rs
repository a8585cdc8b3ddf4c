//! Human output, shaped like rustc's and ruff's: an `error[code]: message`
//! header, a clickable `--> path:line:col` (relative to where dwlint ran,
//! as `short` prints it), a code frame, and `= help:`.
//!
//! A finding about code points into the source file; where the policy is
//! involved, a related frame points into the policy file ("declared here").
//! That frame is drawn once per policy entry: later findings about the same
//! entry name its place and say it was shown above, so forty findings
//! against one metric do not repeat one TOML table forty times.
//!
//! Frames are ASCII when the terminal or the locale asks for it
//! (`TERM=dumb`, a non-UTF-8 `LC_ALL`/`LC_CTYPE`/`LANG`), and as wide as
//! the terminal (`COLUMNS`, else the terminal's size, else 100).

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::ops::Range;
use std::rc::Rc;

use annotate_snippets::renderer::DecorStyle;
use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};

use crate::base::diagnostic::{Anchor, Diagnostic, Severity};
use crate::base::error::RunError;
use crate::base::line_index::LineIndex;
use crate::report::model::CheckReport;
use crate::report::{printable, shown_path};

/// Width of rendered reports when nothing says otherwise, in columns.
const DEFAULT_WIDTH: usize = 100;
/// Lines of context drawn around a marked span.
const CONTEXT_LINES: usize = 1;
/// A marked span longer than this many lines is drawn as its first line.
const MAX_SPAN_LINES: usize = 6;
/// A line up to this many bytes is shown whole.
const MAX_LINE_BYTES: usize = 240;
/// How much of a long line is kept before the mark on it.
const MARGIN_BYTES: usize = 60;
/// The most of one long line a frame shows.
const MAX_WINDOW_BYTES: usize = 480;

/// How to draw reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// Use ANSI colours.
    pub color: bool,
    /// Draw frames with ASCII only.
    pub ascii: bool,
    /// Columns to fit.
    pub width: usize,
    /// Draw every finding (`--verbose`), not the first few of each rule.
    pub verbose: bool,
}

impl Style {
    /// A style for output with `color`, with the character set and width
    /// this process's terminal and locale ask for.
    pub fn new(color: bool) -> Style {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let terminal_width = || {
            std::io::stdout()
                .is_terminal()
                .then(|| terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)))
                .flatten()
        };
        let width = var("COLUMNS")
            .and_then(|c| c.trim().parse().ok())
            .or_else(terminal_width)
            .filter(|w: &usize| *w >= 20)
            .unwrap_or(DEFAULT_WIDTH);
        Style {
            color,
            ascii: wants_ascii(var("TERM").as_deref(), locale(&var).as_deref()),
            width,
            verbose: false,
        }
    }

    /// Plain ASCII at the default width (errors printed before any terminal
    /// question is worth asking).
    pub fn plain() -> Style {
        Style {
            color: false,
            ascii: true,
            width: DEFAULT_WIDTH,
            verbose: false,
        }
    }

    fn renderer(self) -> Renderer {
        let renderer = if self.color {
            Renderer::styled()
        } else {
            Renderer::plain()
        };
        renderer
            .decor_style(if self.ascii {
                DecorStyle::Ascii
            } else {
                DecorStyle::Unicode
            })
            .term_width(self.width)
    }
}

/// The locale that decides the character set: the first of `LC_ALL`,
/// `LC_CTYPE`, `LANG` that is set, as POSIX orders them.
fn locale(var: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    ["LC_ALL", "LC_CTYPE", "LANG"].iter().find_map(|n| var(n))
}

/// ASCII for a dumb terminal, or a locale that is set and not UTF-8
/// (`C`, `POSIX`, `en_US.ISO-8859-1`). No locale at all is not a request:
/// many CI runners set none and display UTF-8 fine.
fn wants_ascii(term: Option<&str>, locale: Option<&str>) -> bool {
    if term == Some("dumb") {
        return true;
    }
    locale.is_some_and(|l| {
        let l = l.to_ascii_lowercase();
        !(l.contains("utf-8") || l.contains("utf8"))
    })
}

/// A file with a finding, with its line index.
struct SourceFile {
    text: String,
    lines: LineIndex,
}

/// Reads (and indexes) each file with a finding once, only when a frame
/// needs it.
struct Sources<'a> {
    report: &'a CheckReport,
    files: HashMap<String, Option<Rc<SourceFile>>>,
}

impl Sources<'_> {
    fn file(&mut self, file: &str) -> Option<Rc<SourceFile>> {
        let root = &self.report.root;
        self.files
            .entry(file.to_owned())
            .or_insert_with(|| {
                std::fs::read_to_string(root.join(file))
                    .or_else(|_| std::fs::read_to_string(file))
                    .ok()
                    .map(|text| {
                        Rc::new(SourceFile {
                            lines: LineIndex::new(&text),
                            text,
                        })
                    })
            })
            .clone()
    }
}

/// The excerpt a frame shows: the span's lines (only the first when the
/// span is long) with [`CONTEXT_LINES`] around them, each line longer than
/// [`MAX_LINE_BYTES`] cut to a part of it (around the span on the span's
/// line). Lines are found through the file's line index and only the shown
/// part of a line is ever copied or counted, so a finding on a
/// multi-megabyte minified line costs what one on a short line costs, even
/// when that line holds thousands of them.
struct Excerpt {
    source: String,
    first_line: usize,
    span: Range<usize>,
    /// Characters the renderer sees before the span on its line, when the
    /// line was cut (its `-->` column must then be put back).
    cut_column: Option<usize>,
}

fn floor(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Byte offsets of 0-based `line`: start, end without the line break, end.
fn line_bounds(file: &SourceFile, line: usize) -> (usize, usize, usize) {
    let text = file.text.as_str();
    let (start, end) = file.lines.line_span(line, text.len());
    let body_end = if end > start && text.as_bytes()[end - 1] == b'\n' {
        end - 1
    } else {
        end
    };
    (start, body_end, end)
}

fn excerpt(file: &SourceFile, span: Range<usize>, ascii: bool) -> Option<Excerpt> {
    let text = file.text.as_str();
    if span.start > span.end
        || span.end > text.len()
        || !text.is_char_boundary(span.start)
        || !text.is_char_boundary(span.end)
    {
        return None;
    }
    let first = file.lines.line_of(span.start);
    let mut last_marked = file.lines.line_of(span.end);
    let mut span = span;
    if last_marked - first >= MAX_SPAN_LINES {
        span.end = line_bounds(file, first).1;
        last_marked = first;
    }
    let shown_first = first.saturating_sub(CONTEXT_LINES);
    let shown_last = (last_marked + CONTEXT_LINES).min(file.lines.line_count() - 1);
    let marker = if ascii { "..." } else { "\u{2026}" };
    let mut source = String::new();
    let mut new_span = 0..0;
    let mut cut_column = None;
    for line in shown_first..=shown_last {
        let (start, body_end, end) = line_bounds(file, line);
        let (from, to) = if body_end - start <= MAX_LINE_BYTES {
            (start, body_end)
        } else if line == first {
            let from = floor(text, span.start.saturating_sub(MARGIN_BYTES).max(start));
            (from, floor(text, (from + MAX_WINDOW_BYTES).min(body_end)))
        } else {
            (start, floor(text, start + MAX_LINE_BYTES))
        };
        let line_at = source.len();
        if from > start {
            source.push_str(marker);
        }
        let shown_at = source.len();
        source.push_str(&text[from..to]);
        if line == first {
            new_span.start = shown_at + (span.start - from);
            if from > start {
                cut_column = Some(source[line_at..new_span.start].chars().count());
            }
        }
        if (first..=last_marked).contains(&line) {
            // The span ends on this line, or runs on past its shown part.
            new_span.end = shown_at + (span.end.clamp(from, to) - from);
        }
        if to < body_end {
            source.push_str(marker);
        }
        source.push_str(&text[body_end..end]);
    }
    let end = floor(&source, new_span.end.max(new_span.start));
    Some(Excerpt {
        source,
        first_line: shown_first + 1,
        span: new_span.start..end,
        cut_column,
    })
}

/// A frame of `excerpt`, titled with `path`.
fn snippet<'t>(
    excerpt: &'t Excerpt,
    label: Option<&str>,
    path: &str,
    kind: AnnotationKind,
) -> Snippet<'t, annotate_snippets::Annotation<'t>> {
    let annotation = kind.span(excerpt.span.clone());
    let annotation = match label {
        Some(label) => annotation.label(printable(label).into_owned()),
        None => annotation,
    };
    Snippet::source(excerpt.source.as_str())
        .fold(false)
        .line_start(excerpt.first_line)
        .path(path.to_owned())
        .annotation(annotation)
}

/// The renderer computes a frame's `-->` column from the excerpt; for a cut
/// line, the column in the file is put back.
fn column_fix(excerpt: &Excerpt, path: &str, anchor: &Anchor) -> Option<(String, String)> {
    let cut = excerpt.cut_column?;
    let line = anchor.range.line;
    Some((
        format!("{path}:{line}:{}", cut + 1),
        format!("{path}:{line}:{}", anchor.range.column),
    ))
}

/// `path:line:col`, the form editors and terminals open.
fn place(path: &str, anchor: &Anchor) -> String {
    format!("{path}:{}:{}", anchor.range.line, anchor.range.column)
}

/// The policy entry (`[metrics.dw_x]`) whose table holds byte `at`: the
/// byte offset and text of its header line.
fn policy_entry(file: &SourceFile, at: usize) -> Option<(usize, &str)> {
    let text = file.text.as_str();
    (0..=file.lines.line_of(at.min(text.len())))
        .rev()
        .map(|line| {
            let (start, body_end, _) = line_bounds(file, line);
            (start, text[start..body_end].trim())
        })
        .find(|(_, header)| header.starts_with('['))
}

/// Renders one finding; `shown` holds the policy entries already framed.
fn render(
    diagnostic: &Diagnostic,
    sources: &mut Sources,
    shown: &mut HashSet<usize>,
    style: Style,
    renderer: &Renderer,
) -> String {
    let report = sources.report;
    let level = match diagnostic.severity {
        Severity::Error => Level::ERROR,
        Severity::Warning => Level::WARNING,
    };
    // Excerpts are made first: the snippets borrow them.
    struct Framed {
        path: String,
        excerpt: Option<Excerpt>,
        entry: Option<(usize, String)>,
    }
    let mut frame_of = |anchor: &Anchor, policy_entry_of: bool| {
        let path = printable(&shown_path(report, &anchor.file)).into_owned();
        let file = sources.file(&anchor.file);
        let excerpt = file
            .as_deref()
            .and_then(|f| excerpt(f, anchor.range.start..anchor.range.end, style.ascii));
        let entry = file
            .as_deref()
            .filter(|_| policy_entry_of && anchor.file == report.policy_path)
            .and_then(|f| policy_entry(f, anchor.range.start))
            .map(|(offset, header)| (offset, printable(header).into_owned()));
        Framed {
            path,
            excerpt,
            entry,
        }
    };
    let primary = diagnostic.primary.as_ref().map(|a| (a, frame_of(a, false)));
    let related: Vec<(&Anchor, Framed)> = diagnostic
        .related
        .iter()
        .map(|a| (a, frame_of(a, true)))
        .collect();
    let message = printable(&diagnostic.message);
    let mut group = Group::with_title(level.primary_title(message.as_ref()).id(diagnostic.code));
    let mut notes: Vec<String> = Vec::new();
    let mut fixes = Vec::new();
    if let Some((anchor, framed)) = &primary {
        match &framed.excerpt {
            Some(excerpt) => {
                let label = anchor.label.as_deref();
                group = group.element(snippet(
                    excerpt,
                    label,
                    &framed.path,
                    AnnotationKind::Primary,
                ));
                fixes.extend(column_fix(excerpt, &framed.path, anchor));
            }
            None => notes.push(format!("at {}", place(&framed.path, anchor))),
        }
    }
    let mut related_groups = Vec::new();
    for (anchor, framed) in &related {
        let Some(excerpt) = &framed.excerpt else {
            continue;
        };
        let label = anchor.label.as_deref().unwrap_or("related");
        if let Some((offset, header)) = &framed.entry {
            if !shown.insert(*offset) {
                notes.push(format!(
                    "{}: {} (policy entry {header}, shown above)",
                    printable(label),
                    place(&framed.path, anchor)
                ));
                continue;
            }
        }
        let title = match &framed.entry {
            Some((_, header)) => format!("policy entry {header}"),
            None => "related".to_owned(),
        };
        fixes.extend(column_fix(excerpt, &framed.path, anchor));
        related_groups.push(
            Group::with_title(Level::NOTE.secondary_title(title)).element(snippet(
                excerpt,
                anchor.label.as_deref(),
                &framed.path,
                AnnotationKind::Context,
            )),
        );
    }
    for note in &notes {
        group = group.element(Level::NOTE.message(note.as_str()));
    }
    let help = diagnostic.help.as_deref().map(printable);
    if let Some(help) = &help {
        group = group.element(Level::HELP.message(help.as_ref()));
    }
    let mut groups = vec![group];
    groups.extend(related_groups);
    let mut rendered = renderer.render(&groups);
    for (excerpt_place, file_place) in fixes {
        rendered = rendered.replacen(&excerpt_place, &file_place, 1);
    }
    rendered
}

/// A rule with more findings than this is grouped (unless `--verbose`):
/// a first check of a draft policy holds dozens of findings of a few
/// rules, and a reader needs one of each and the count.
const GROUP_OVER: usize = 5;

/// How many findings of a grouped rule are shown: the first in full, the
/// next ones as header and location.
const SHOWN_PER_RULE: usize = 3;

/// Writes the findings, then a one-line summary. A rule with more than
/// [`GROUP_OVER`] findings shows its first in full, the next two as header
/// and location, and is counted in a note before the summary (unless
/// [`Style::verbose`]).
pub fn write(report: &CheckReport, style: Style, out: &mut dyn Write) -> std::io::Result<()> {
    let renderer = style.renderer();
    let mut sources = Sources {
        report,
        files: HashMap::new(),
    };
    let mut shown = HashSet::new();
    let mut per_rule: HashMap<&str, usize> = HashMap::new();
    for diagnostic in &report.diagnostics {
        *per_rule.entry(diagnostic.code).or_insert(0) += 1;
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut hidden: Vec<(&str, usize)> = Vec::new();
    for diagnostic in &report.diagnostics {
        let total = per_rule[diagnostic.code];
        let nth = seen.entry(diagnostic.code).or_insert(0);
        *nth += 1;
        if style.verbose || total <= GROUP_OVER || *nth == 1 {
            let rendered = render(diagnostic, &mut sources, &mut shown, style, &renderer);
            writeln!(out, "{rendered}\n")?;
        } else if *nth <= SHOWN_PER_RULE {
            let (file, range) = crate::report::location(diagnostic, report);
            writeln!(
                out,
                "{}[{}]: {}\n  --> {}:{}:{}\n",
                diagnostic.severity.as_str(),
                diagnostic.code,
                printable(&diagnostic.message),
                printable(&shown_path(report, file)),
                range.line,
                range.column,
            )?;
        } else if *nth == SHOWN_PER_RULE + 1 {
            hidden.push((diagnostic.code, total));
        }
    }
    if !hidden.is_empty() {
        let not_shown: usize = hidden.iter().map(|(_, total)| total - SHOWN_PER_RULE).sum();
        writeln!(
            out,
            "note: {} not shown; the first {SHOWN_PER_RULE} of each rule are above (`--verbose` shows every one, `--format short` one per line):",
            plural(not_shown, "more finding")
        )?;
        hidden.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        for (code, total) in hidden {
            writeln!(out, "  {total:>6}  {code}")?;
        }
        writeln!(out)?;
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
    let renderer = style.renderer();
    match error {
        RunError::PolicyInvalid { path, text, errors } => {
            let path = printable(path);
            let file = SourceFile {
                lines: LineIndex::new(text),
                text: text.clone(),
            };
            for e in errors {
                let message = printable(&e.message);
                let title = Level::ERROR
                    .primary_title(message.as_ref())
                    .id("invalid-policy");
                let mut group = Group::with_title(title);
                let excerpt = e
                    .span
                    .and_then(|s| excerpt(&file, s.start..s.end.max(s.start), style.ascii));
                let mut fixes = Vec::new();
                let location;
                match (&excerpt, e.span) {
                    (Some(excerpt), Some(span)) => {
                        let range = file.lines.range(text, span.start, span.end.max(span.start));
                        let anchor = Anchor {
                            file: path.to_string(),
                            range,
                            label: Some("here".into()),
                        };
                        group = group.element(snippet(
                            excerpt,
                            Some("here"),
                            &path,
                            AnnotationKind::Primary,
                        ));
                        fixes.extend(column_fix(excerpt, &path, &anchor));
                    }
                    _ => {
                        location = format!("in {path}");
                        group = group.element(Level::NOTE.message(location.as_str()));
                    }
                }
                let help = e.help.as_deref().map(printable);
                if let Some(help) = &help {
                    group = group.element(Level::HELP.message(help.as_ref()));
                }
                let mut rendered = renderer.render(&[group]);
                for (shown, real) in fixes {
                    rendered = rendered.replacen(&shown, &real, 1);
                }
                writeln!(out, "{rendered}\n")?;
            }
        }
        other => write_error(
            &other.to_string(),
            run_error_help(other).as_deref(),
            style,
            out,
        )?,
    }
    Ok(())
}

/// Writes a failure that has no code frame: its message and, when there
/// is one, what to do about it (a command's own failures, and the run's
/// other than an invalid policy).
pub fn write_error(
    message: &str,
    help: Option<&str>,
    style: Style,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let message = printable(message).into_owned();
    let mut group = Group::with_title(Level::ERROR.primary_title(message.as_str()));
    if let Some(help) = help {
        group = group.element(Level::HELP.message(help));
    }
    writeln!(out, "{}\n", style.renderer().render(&[group]))
}

fn run_error_help(error: &RunError) -> Option<String> {
    match error {
        RunError::NoSuchPath(_) => {
            Some("pass the root of the tree to check (default: the current directory)".into())
        }
        RunError::PolicyNotFound(_) => Some(format!(
            "looked for {} in each directory up to the repository root; `dwlint init` writes a draft from the tree (see docs/commands.md), or pass --policy FILE",
            crate::discover::CANDIDATES.join(", ")
        )),
        RunError::Git(_) => Some(
            "--changed-since needs a git work tree and a revision it knows (fetch it first in a shallow CI clone)".into(),
        ),
        RunError::UnknownRule { .. } => Some("`dwlint rules` lists every code".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dumb_terminal_or_a_non_utf8_locale_asks_for_ascii() {
        assert!(wants_ascii(Some("dumb"), Some("en_US.UTF-8")));
        assert!(wants_ascii(Some("xterm"), Some("C")));
        assert!(wants_ascii(None, Some("POSIX")));
        assert!(wants_ascii(None, Some("de_DE.ISO-8859-1")));
        assert!(!wants_ascii(Some("xterm-256color"), Some("en_US.UTF-8")));
        assert!(!wants_ascii(None, Some("C.utf8")));
        assert!(!wants_ascii(None, None));
    }

    #[test]
    fn the_first_set_locale_variable_decides() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            locale(&env(&[("LANG", "en_US.UTF-8"), ("LC_ALL", "C")])).as_deref(),
            Some("C")
        );
        assert_eq!(
            locale(&env(&[("LANG", "en_US.UTF-8")])).as_deref(),
            Some("en_US.UTF-8")
        );
    }

    fn file(text: &str) -> SourceFile {
        SourceFile {
            lines: LineIndex::new(text),
            text: text.to_owned(),
        }
    }

    #[test]
    fn an_excerpt_is_the_span_with_a_line_of_context() {
        let text = "a\nb\nc KEY d\ne\nf\n";
        let at = text.find("KEY").unwrap();
        let e = excerpt(&file(text), at..at + 3, true).unwrap();
        assert_eq!(e.source, "b\nc KEY d\ne\n");
        assert_eq!(e.first_line, 2);
        assert_eq!(&e.source[e.span.clone()], "KEY");
        assert_eq!(e.cut_column, None);
        // A long span is drawn as its first line.
        let long = "x\n".repeat(50);
        let e = excerpt(&file(&long), 0..long.len(), true).unwrap();
        assert_eq!(&e.source[e.span.clone()], "x");
        assert!(e.source.len() < 10);
        // A span the file no longer has is no frame.
        assert!(excerpt(&file(text), 5..100, true).is_none());
    }

    #[test]
    fn a_long_line_is_cut_around_the_span() {
        let text = format!("{}KEY{}\nnext\n", "a".repeat(70_000), "b".repeat(70_000));
        let at = 70_000;
        let e = excerpt(&file(&text), at..at + 3, true).unwrap();
        assert_eq!(&e.source[e.span.clone()], "KEY");
        assert!(e.source.starts_with("...") && e.source.contains("...\nnext"));
        assert!(e.source.len() < MAX_WINDOW_BYTES + 20);
        assert_eq!(e.cut_column, Some(3 + MARGIN_BYTES));
        // Unicode marker, and a multi-byte character at the cut.
        let text = format!("{}KEY", "ї".repeat(1000));
        let at = text.find("KEY").unwrap();
        let e = excerpt(&file(&text), at..at + 3, false).unwrap();
        assert!(e.source.starts_with('\u{2026}'));
        assert_eq!(&e.source[e.span.clone()], "KEY");
    }
}
