//! The YAML extractor, for Prometheus scrape and remote-write configs.
//!
//! These configs are where a soak attaches labels to every series it ships
//! (`static_configs[].labels`, `global.external_labels`, relabel rules with
//! `target_label`/`replacement`), which the `per-run-remote-write-label`
//! rule reads; their scalars can also name metrics (`regex: dw_x`). They are
//! small and follow a few block-style shapes, so a line scanner that tracks
//! each key's indentation is enough and, unlike a YAML parser crate, keeps
//! exact spans. It works on a byte range, so a config that sits in a shell
//! heredoc is read in place. Comments are skipped; flow collections
//! (`labels: {a: b}`) are split just far enough to read label pairs.

use std::ops::Range;

use super::strings::{line_end, scan_body, Quote, Value};
use super::tokens::{into_facts, may_matter, Contexts, Join, StrTok, Tok};
use super::{ExtractConfig, FileFacts, LineIndex, LiteralKind, ScrapeLabel};

/// Facts of one YAML file.
pub(crate) fn extract(text: &str, config: &ExtractConfig) -> FileFacts {
    let mut labels = Vec::new();
    let toks = scan(text, 0..text.len(), &mut labels, config);
    let contexts = Contexts::default();
    let mut facts = into_facts(
        text,
        config,
        &toks,
        &contexts,
        Join::NONE,
        Vec::new(),
        |_| {},
    );
    facts.scrape_labels = resolve_labels(text, labels);
    facts
}

/// Whether a heredoc body is a Prometheus config worth reading as YAML.
pub(crate) fn looks_like_prometheus(body: &str) -> bool {
    const KEYS: &[&str] = &[
        "scrape_configs:",
        "remote_write:",
        "global:",
        "static_configs:",
        "external_labels:",
        "write_relabel_configs:",
        "job_name:",
    ];
    body.lines().any(|line| {
        let line = line.trim_start().trim_start_matches("- ");
        KEYS.iter().any(|k| line.starts_with(k))
    })
}

/// A target label found by [`scan`], with byte ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawLabel {
    name: String,
    name_at: Range<usize>,
    value: String,
    value_at: Range<usize>,
}

/// Converts byte ranges to positions.
pub(crate) fn resolve_labels(text: &str, labels: Vec<RawLabel>) -> Vec<ScrapeLabel> {
    if labels.is_empty() {
        return Vec::new();
    }
    let index = LineIndex::new(text);
    labels
        .into_iter()
        .map(|l| ScrapeLabel {
            name: l.name,
            value: l.value,
            name_range: index.range(text, l.name_at.start, l.name_at.end),
            value_range: index.range(text, l.value_at.start, l.value_at.end),
        })
        .collect()
}

/// Keys whose mapping holds target labels.
const LABEL_MAPS: &[&str] = &["labels", "external_labels"];
/// Keys whose list items are relabel rules.
const RELABEL_LISTS: &[&str] = &[
    "relabel_configs",
    "write_relabel_configs",
    "metric_relabel_configs",
];

/// One relabel rule being read: its `target_label` and `replacement`.
#[derive(Debug, Default)]
struct Relabel {
    target: Option<(String, Range<usize>)>,
    replacement: Option<(String, Range<usize>)>,
}

impl Relabel {
    fn flush(self, labels: &mut Vec<RawLabel>) {
        if let (Some((name, name_at)), Some((value, value_at))) = (self.target, self.replacement) {
            labels.push(RawLabel {
                name,
                name_at,
                value,
                value_at,
            });
        }
    }
}

/// Reads the YAML in `text[range]`: every scalar value that may matter
/// (see [`may_matter`]) becomes a string token; target labels are appended
/// to `labels`.
pub(crate) fn scan(
    text: &str,
    range: Range<usize>,
    labels: &mut Vec<RawLabel>,
    config: &ExtractConfig,
) -> Vec<Tok> {
    let matters = |tok: &Tok| matches!(tok, Tok::Str(s) if may_matter(&s.value.text, config));
    let b = text.as_bytes();
    let end = range.end.min(b.len());
    let mut toks = Vec::new();
    // (column, key) of the mappings the current line is nested in.
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut relabel: Option<Relabel> = None;
    let mut line = range.start.min(end);
    while line < end {
        let stop = line_end(b, line).min(end);
        let next_line = stop + 1;
        let content_end = if stop > line && b[stop - 1] == b'\r' {
            stop - 1
        } else {
            stop
        };
        let mut col = line
            + b[line..content_end]
                .iter()
                .take_while(|c| **c == b' ')
                .count();
        if col == content_end || b[col] == b'#' {
            line = next_line;
            continue;
        }
        if b[col..content_end].starts_with(b"---") || b[col..content_end].starts_with(b"...") {
            stack.clear();
            line = next_line;
            continue;
        }
        let mut item = false;
        while b[col] == b'-' && (col + 1 == content_end || b[col + 1] == b' ') {
            item = true;
            col += 1;
            while col < content_end && b[col] == b' ' {
                col += 1;
            }
            if col == content_end {
                break;
            }
        }
        let column = col - line;
        while stack.last().is_some_and(|(c, _)| *c >= column) {
            stack.pop();
        }
        let parent = stack.last().map(|(_, k)| k.as_str()).unwrap_or("");
        let in_relabel = RELABEL_LISTS.contains(&parent);
        let list_open = stack
            .iter()
            .any(|(_, k)| RELABEL_LISTS.contains(&k.as_str()));
        if !list_open || (item && in_relabel) {
            if let Some(done) = relabel.take() {
                done.flush(labels);
            }
        }
        if item && in_relabel {
            relabel = Some(Relabel::default());
        }
        if col == content_end {
            line = next_line;
            continue;
        }
        let Some((key, key_at, value_start)) = key_at(text, col, content_end) else {
            // A scalar list item (or a plain scalar continued on this line).
            let (value, after) = scalar(text, col, content_end, column, end);
            toks.extend(value.filter(matters));
            line = after.max(next_line);
            continue;
        };
        let (value, after) = scalar(text, value_start, content_end, column, end);
        match &value {
            None => stack.push((column, key.clone())),
            Some(Tok::Str(s)) if LABEL_MAPS.contains(&parent) => labels.push(RawLabel {
                name: key.clone(),
                name_at: key_at.clone(),
                value: s.value.text.clone(),
                value_at: s.span.clone(),
            }),
            Some(Tok::Str(s)) if LABEL_MAPS.contains(&key.as_str()) => {
                flow_labels(text, s.span.clone(), labels);
            }
            _ => {}
        }
        if let (true, Some(rule), Some(Tok::Str(s))) = (in_relabel, relabel.as_mut(), &value) {
            let found = Some((s.value.text.clone(), s.span.clone()));
            match key.as_str() {
                "target_label" => rule.target = found,
                "replacement" => rule.replacement = found,
                _ => {}
            }
        }
        toks.extend(value.filter(matters));
        line = after.max(next_line);
    }
    if let Some(done) = relabel {
        done.flush(labels);
    }
    toks
}

/// The key of a `key: value` line starting at `col`: the key, its range,
/// and where the value starts. `None` when the line is not a mapping entry.
fn key_at(text: &str, col: usize, end: usize) -> Option<(String, Range<usize>, usize)> {
    let b = text.as_bytes();
    if col >= end.min(b.len()) {
        return None;
    }
    if matches!(b[col], b'"' | b'\'') {
        let (value, after) = quoted(text, col, end);
        let colon = after + b[after..end].iter().take_while(|c| **c == b' ').count();
        if b.get(colon) == Some(&b':') && (colon + 1 == end || b[colon + 1] == b' ') {
            return Some((value.text, col..after, colon + 1));
        }
        return None;
    }
    let mut i = col;
    while i < end {
        if b[i] == b':' && (i + 1 == end || b[i + 1] == b' ') {
            let key = text[col..i].trim_end();
            return Some((key.to_owned(), col..col + key.len(), i + 1));
        }
        if b[i] == b' ' && b.get(i + 1) == Some(&b'#') {
            return None;
        }
        i += 1;
    }
    None
}

/// The scalar value starting at or after `at` on the line ending at `end`,
/// as a string token (`None` when the line ends at the colon: a nested
/// block follows). A block scalar (`|`, `>`) takes the following lines
/// indented deeper than `column`, up to `limit`; returns where reading
/// continues.
fn scalar(text: &str, at: usize, end: usize, column: usize, limit: usize) -> (Option<Tok>, usize) {
    let b = text.as_bytes();
    let mut start = at + b[at..end].iter().take_while(|c| **c == b' ').count();
    // Anchors and tags come before the value.
    while start < end && matches!(b[start], b'&' | b'!') {
        let skip = b[start..end]
            .iter()
            .position(|c| *c == b' ')
            .unwrap_or(end - start);
        start += skip;
        start += b[start..end].iter().take_while(|c| **c == b' ').count();
    }
    if start == end || b[start] == b'#' {
        return (None, end);
    }
    let tok = |span: Range<usize>, value: Value, kind| {
        Some(Tok::Str(Box::new(StrTok {
            span,
            value,
            kind,
            interpolations: Vec::new(),
        })))
    };
    match b[start] {
        b'"' | b'\'' => {
            let (value, after) = quoted(text, start, end);
            (tok(start..after, value, LiteralKind::Str), end)
        }
        b'|' | b'>' => {
            let (value, span, after) = block(text, end, column, limit);
            (tok(span, value, LiteralKind::Str), after)
        }
        _ => {
            let stop = plain_end(b, start, end);
            let mut value = Value::default();
            value.copy(&text[start..stop], start);
            (tok(start..stop, value, LiteralKind::Bare), end)
        }
    }
}

/// Where a plain scalar ends: before ` #` or trailing spaces.
fn plain_end(b: &[u8], start: usize, end: usize) -> usize {
    let mut stop = end;
    for i in start..end {
        if b[i] == b'#' && i > start && b[i - 1] == b' ' {
            stop = i;
            break;
        }
    }
    while stop > start && b[stop - 1] == b' ' {
        stop -= 1;
    }
    stop
}

/// A `'…'` (with `''` for a quote) or `"…"` (with escapes) scalar at `at`,
/// on one line: its value and where it ends.
fn quoted(text: &str, at: usize, end: usize) -> (Value, usize) {
    let b = text.as_bytes();
    if b[at] == b'"' {
        let body = scan_body(&text[..end], at + 1, &Quote::c_line(b"\""));
        return (body.value, body.end);
    }
    let mut value = Value::default();
    let mut run = at + 1;
    let mut i = at + 1;
    while i < end {
        if b[i] == b'\'' {
            value.copy(&text[run..i + 1], run);
            if b.get(i + 1) == Some(&b'\'') && i + 1 < end {
                run = i + 2;
                i += 2;
                continue;
            }
            // Drop the closing quote that was copied with the run.
            value.text.pop();
            return (value, i + 1);
        }
        i += 1;
    }
    value.copy(&text[run..end], run);
    (value, end)
}

/// The lines of a block scalar after its header line (which ends at
/// `header_end`): every line blank or indented deeper than `column`.
fn block(
    text: &str,
    header_end: usize,
    column: usize,
    limit: usize,
) -> (Value, Range<usize>, usize) {
    let b = text.as_bytes();
    let mut value = Value::default();
    let start = (header_end + 1).min(limit);
    let mut line = start;
    let mut last = start;
    let mut first = None;
    while line < limit {
        let stop = line_end(b, line).min(limit);
        let indent = b[line..stop].iter().take_while(|c| **c == b' ').count();
        let blank = line + indent == stop || b[line + indent] == b'\r';
        if !blank && indent <= column {
            break;
        }
        if !blank {
            first.get_or_insert(line + indent);
            value.copy(&text[line + indent..stop], line + indent);
            last = stop;
        }
        value.decoded("\n", stop);
        line = stop + 1;
    }
    let first = first.unwrap_or(start);
    (value, first..last.max(first), line.min(limit))
}

/// `{a: b, c: "d"}`: each pair is a label.
fn flow_labels(text: &str, span: Range<usize>, labels: &mut Vec<RawLabel>) {
    let b = text.as_bytes();
    let Some(inner) = text.get(span.clone()) else {
        return;
    };
    if !inner.starts_with('{') {
        return;
    }
    let close = inner.rfind('}').map_or(span.end, |n| span.start + n);
    let mut entry = span.start + 1;
    let mut i = entry;
    while i <= close {
        let at_end = i == close;
        if at_end || b[i] == b',' {
            if let Some((name, name_at, value_start)) = key_at(text, skip_spaces(b, entry, i), i) {
                if let (Some(Tok::Str(value)), _) = scalar(text, value_start, i, usize::MAX, i) {
                    labels.push(RawLabel {
                        name,
                        name_at,
                        value: value.value.text,
                        value_at: value.span,
                    });
                }
            }
            entry = i + 1;
        } else if matches!(b[i], b'"' | b'\'') {
            i = quoted(text, i, close).1;
            continue;
        }
        i += 1;
    }
}

fn skip_spaces(b: &[u8], mut i: usize, end: usize) -> usize {
    while i < end && b[i] == b' ' {
        i += 1;
    }
    i
}
