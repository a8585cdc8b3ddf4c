//! Bounded code frames: the few lines around a finding, each cut to a
//! window of columns, are all that miette ever sees.
//!
//! miette formats the gutter and underline of a frame with width arguments
//! as long as the column, and Rust refuses widths past 65,535: a finding on
//! a minified line panicked the human report. It also scans its source from
//! the first byte for every frame, so 200,000 findings on one 4 MB line were
//! quadratic. A [`Window`] holds a copy of only the lines it shows, with
//! long lines cut around the marked text ("…" where something was cut), and
//! reports the real line and column numbers of the file to miette.

use miette::{MietteError, MietteSpanContents, SourceCode, SourceSpan, SpanContents};

use crate::extract::LineIndex;

/// Lines shown before and after the marked lines.
const CONTEXT_LINES: usize = 1;
/// The most lines from the first mark to the last: a longer primary mark
/// is cut, and other marks beyond it get frames of their own.
const MAX_MARKED_LINES: usize = 24;
/// A line up to this many bytes is shown whole.
const MAX_LINE_BYTES: usize = 240;
/// How much of a long line is kept before the first mark on it.
const MARGIN_BYTES: usize = 60;
/// The most of one long line a frame shows.
const MAX_WINDOW_BYTES: usize = 480;
/// What stands for the cut part of a line.
const CUT: &str = "…";

/// One shown line: which bytes of the file it holds.
#[derive(Debug, Clone)]
struct ShownLine {
    /// Offset of the shown text in the snippet (after any leading `…`).
    snippet_start: usize,
    /// First shown byte in the file.
    from: usize,
    /// One past the last shown byte in the file.
    to: usize,
    /// Characters of the line left out before `from`.
    column_shift: usize,
}

/// A framed excerpt of one file, to be handed to miette as its source.
#[derive(Debug, Clone)]
pub struct Window {
    name: String,
    snippet: String,
    /// 0-based line number of the first shown line.
    first_line: usize,
    lines: Vec<ShownLine>,
}

/// A text and its line index, read once per file.
#[derive(Debug)]
pub struct Indexed {
    /// The whole text.
    pub text: String,
    /// Its line starts.
    pub lines: LineIndex,
}

impl Indexed {
    /// Indexes `text`.
    pub fn new(text: String) -> Self {
        Indexed {
            lines: LineIndex::new(&text),
            text,
        }
    }

    /// `offset` clamped into the text, on a character boundary.
    fn clamp(&self, offset: usize) -> usize {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        offset
    }

    /// (0-based line, start, end without the line break) of the line holding `offset`.
    fn line_at(&self, offset: usize) -> (usize, usize, usize) {
        let line = self.lines.line_of(offset);
        let (start, end) = self.line_bounds(line);
        (line, start, end)
    }

    fn line_bounds(&self, line: usize) -> (usize, usize) {
        let (start, end) = self.lines.line_span(line, self.text.len());
        let bytes = self.text.as_bytes();
        let mut end = end;
        if end > start && bytes[end - 1] == b'\n' {
            end -= 1;
        }
        if end > start && bytes[end - 1] == b'\r' {
            end -= 1;
        }
        (start, end)
    }
}

impl Window {
    /// Frames `ranges` (byte offsets into `source`; the first is the primary
    /// one) and returns each range's span in the window, or `None` for a
    /// range the window could not include (another frame must show it).
    pub fn frame(
        name: &str,
        source: &Indexed,
        ranges: &[(usize, usize)],
    ) -> (Window, Vec<Option<SourceSpan>>) {
        let ranges: Vec<(usize, usize)> = ranges
            .iter()
            .map(|&(start, end)| {
                let start = source.clamp(start);
                (start, source.clamp(end.max(start)))
            })
            .collect();
        let (primary_start, primary_end) = ranges.first().copied().unwrap_or((0, 0));
        let (primary_line, line_start, _) = source.line_at(primary_start);
        let primary_column = primary_start - line_start;
        let (primary_end_line, ..) = source.line_at(primary_end);
        let mut first_marked = primary_line;
        let mut last_marked = primary_end_line.min(primary_line + MAX_MARKED_LINES - 1);
        // Other marks widen the frame only as far as the cap allows.
        for &(start, end) in &ranges[1..] {
            let (line, ..) = source.line_at(start);
            let (end_line, ..) = source.line_at(end);
            let first = first_marked.min(line);
            let last = last_marked.max(end_line);
            if last - first < MAX_MARKED_LINES {
                (first_marked, last_marked) = (first, last);
            }
        }
        // A final line break ends the last line; it does not start one to show.
        let mut last_line = source.lines.line_count() - 1;
        if last_line > 0 && source.text.ends_with('\n') {
            last_line -= 1;
        }
        let first_line = first_marked.saturating_sub(CONTEXT_LINES);
        let last_line = (last_marked + CONTEXT_LINES).min(last_line).max(first_line);
        let mut window = Window {
            name: name.to_owned(),
            snippet: String::new(),
            first_line,
            lines: Vec::new(),
        };
        for line in first_line..=last_line {
            let (start, end) = source.line_bounds(line);
            let marks: Vec<(usize, usize)> = ranges
                .iter()
                .filter(|&&(s, e)| s <= end && e >= start)
                .map(|&(s, e)| (s.max(start) - start, e.min(end) - start))
                .collect();
            let (from, to) = columns(end - start, &marks, primary_column);
            let from = source.clamp(start + from);
            let to = source.clamp(start + to).max(from);
            let left_cut = from > start;
            if left_cut {
                window.snippet.push_str(CUT);
            }
            let snippet_start = window.snippet.len();
            window.snippet.push_str(&source.text[from..to]);
            if to < end {
                window.snippet.push_str(CUT);
            }
            if source.text.len() > end {
                window.snippet.push('\n');
            }
            // Only the primary line's column is ever shown (in the frame's
            // header). The line index counts on from its last position, so
            // frames of many marks along one long line stay linear.
            let column_shift = if line == primary_line && from > start {
                source.lines.line_col(&source.text, from).1 - 1
            } else {
                0
            };
            window.lines.push(ShownLine {
                snippet_start,
                from,
                to,
                column_shift,
            });
        }
        let spans = ranges.iter().map(|&r| window.span(r)).collect();
        (window, spans)
    }

    /// The window span of `start..end`, cut to the window; `None` when its
    /// start is not shown.
    fn span(&self, (start, end): (usize, usize)) -> Option<SourceSpan> {
        let last = self.lines.last()?;
        let shown = self
            .lines
            .iter()
            .find(|l| (l.from..=l.to).contains(&start))?;
        let at = shown.snippet_start + (start - shown.from);
        let end_at = match self.lines.iter().find(|l| (l.from..=l.to).contains(&end)) {
            Some(l) => l.snippet_start + (end - l.from),
            None if end > last.to => last.snippet_start + (last.to - last.from),
            // Cut off on a long line after the start: up to the cut.
            None => self
                .lines
                .iter()
                .rev()
                .find(|l| l.from <= end)
                .map_or(at, |l| l.snippet_start + (l.to - l.from)),
        };
        Some(SourceSpan::new(at.into(), end_at.saturating_sub(at)))
    }

    /// The excerpt as shown (for tests).
    #[cfg(test)]
    fn snippet(&self) -> &str {
        &self.snippet
    }
}

/// Which bytes of a line of `len` bytes to show, given the marks on it
/// (line-relative) and the primary mark's column for a line without marks.
fn columns(len: usize, marks: &[(usize, usize)], primary_column: usize) -> (usize, usize) {
    if len <= MAX_LINE_BYTES {
        return (0, len);
    }
    let (first, last_end) = match marks.first() {
        Some(&(s, e)) => (s, marks.iter().map(|m| m.1).max().unwrap_or(e)),
        None => (primary_column.min(len), primary_column.min(len)),
    };
    let from = first.saturating_sub(MARGIN_BYTES);
    let wanted = last_end
        .saturating_add(MARGIN_BYTES)
        .max(from + MAX_LINE_BYTES);
    let to = wanted.min(from + MAX_WINDOW_BYTES).min(len);
    (from, to)
}

impl SourceCode for Window {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let inner =
            self.snippet
                .as_str()
                .read_span(span, context_lines_before, context_lines_after)?;
        let line = inner.line();
        let column = match self.lines.get(line) {
            // Only an excerpt starting mid-line has a column worth fixing;
            // it is what miette prints in the frame's header.
            Some(shown) if inner.span().offset() >= shown.snippet_start => {
                let from = shown.snippet_start;
                let to = inner.span().offset().min(self.snippet.len());
                shown.column_shift + self.snippet.get(from..to).map_or(0, |s| s.chars().count())
            }
            _ => inner.column(),
        };
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.clone(),
            inner.data(),
            *inner.span(),
            line + self.first_line,
            column,
            // Counted from the top of the file, as miette's own sources do:
            // it merges two marks' excerpts by comparing these.
            inner.line_count() + self.first_line,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(text: &str, ranges: &[(usize, usize)]) -> (Window, Vec<Option<SourceSpan>>) {
        Window::frame("f.js", &Indexed::new(text.to_owned()), ranges)
    }

    #[test]
    fn short_files_are_shown_around_the_mark_with_real_line_numbers() {
        let text = "a\nb\nc \"server:x:\"\nd\ne\n";
        let at = text.find("\"server").unwrap();
        let (window, spans) = frame(text, &[(at, at + 11)]);
        assert_eq!(window.snippet(), "b\nc \"server:x:\"\nd\n");
        let span = spans[0].unwrap();
        assert_eq!(
            &window.snippet()[span.offset()..][..span.len()],
            "\"server:x:\""
        );
        let contents = window.read_span(&span, 0, 0).unwrap();
        assert_eq!((contents.line(), contents.column()), (2, 2));
    }

    #[test]
    fn a_long_line_is_cut_around_the_mark_and_keeps_its_real_column() {
        let text = format!("{}\"server:x:\"{}", "ї".repeat(70_000), "y".repeat(70_000));
        let at = text.find('"').unwrap();
        let (window, spans) = frame(&text, &[(at, at + 11)]);
        assert!(window.snippet().len() < 1_000, "{}", window.snippet().len());
        assert!(window.snippet().starts_with(CUT) && window.snippet().ends_with(CUT));
        let span = spans[0].unwrap();
        assert_eq!(
            &window.snippet()[span.offset()..][..span.len()],
            "\"server:x:\""
        );
        let contents = window.read_span(&span, 0, 0).unwrap();
        assert_eq!((contents.line(), contents.column()), (0, 70_000));
    }

    #[test]
    fn out_of_range_and_mid_character_offsets_are_clamped() {
        let text = "ї\n";
        let (window, spans) = frame(text, &[(1, 99), (50, 60)]);
        assert_eq!(window.snippet(), "ї\n");
        assert!(spans[0].is_some());
        let (_, spans) = frame("", &[(3, 4)]);
        assert_eq!(spans[0].map(|s| s.len()), Some(0));
    }

    #[test]
    fn a_mark_far_from_the_primary_one_is_left_to_another_frame() {
        let text = "x\n".repeat(100);
        let (_, spans) = frame(&text, &[(2, 3), (150, 151), (40, 41)]);
        assert!(spans[0].is_some());
        assert!(spans[1].is_none());
        assert!(spans[2].is_some());
    }
}
