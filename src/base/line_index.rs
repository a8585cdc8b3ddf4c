//! Byte offsets to line/column positions for one file.
//!
//! Extractors compute positions while the text is still in memory, so the
//! rest of the pipeline never needs the file contents again (except to draw
//! a code frame for a finding).

/// Start offsets of every line of a text.
#[derive(Debug, Clone)]
pub struct LineIndex {
    line_starts: Vec<usize>,
    /// The last (byte offset, character column) `line_col` computed: later
    /// positions on the same line count on from it instead of from the line
    /// start, which is quadratic on a long minified line.
    last: std::cell::Cell<(usize, usize)>,
    /// The text is all ASCII, so a column is a byte count: most source
    /// files are, and counting the characters before each position was
    /// most of what converting it cost.
    ascii: bool,
}

/// A span in a file: byte offsets plus 1-based line and character column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TextRange {
    /// 1-based line of the first character.
    pub line: usize,
    /// 1-based column (in characters) of the first character.
    pub column: usize,
    /// 1-based line of the last character.
    pub end_line: usize,
    /// 1-based column one past the last character.
    pub end_column: usize,
    /// Byte offset of the first character.
    pub start: usize,
    /// Byte offset one past the last character.
    pub end: usize,
}

impl TextRange {
    /// The empty range at 1:1, for findings about a whole file.
    pub fn file_start() -> Self {
        TextRange {
            line: 1,
            column: 1,
            end_line: 1,
            end_column: 1,
            start: 0,
            end: 0,
        }
    }
}

impl LineIndex {
    /// Indexes `text`.
    pub fn new(text: &str) -> Self {
        // Counted first (a vector count), so the index is one allocation
        // of its exact size: growing it line by line reallocated it about
        // log2(lines) times, for every file that reports anything.
        let lines = memchr::memchr_iter(b'\n', text.as_bytes()).count();
        let mut line_starts = Vec::with_capacity(lines + 1);
        line_starts.push(0);
        line_starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1));
        LineIndex {
            line_starts,
            last: std::cell::Cell::new((0, 1)),
            ascii: text.is_ascii(),
        }
    }

    /// 1-based (line, column) of a byte offset; the column counts characters.
    /// `text` is the indexed text, as for every method here.
    pub fn line_col(&self, text: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(text.len());
        if self.ascii {
            let line = self.line_starts.partition_point(|&s| s <= offset);
            return (line, offset - self.line_starts[line - 1] + 1);
        }
        self.line_col_by_chars(text, offset)
    }

    /// [`LineIndex::line_col`] counting the characters before `offset` on
    /// its line: any text, and the reference the ASCII shortcut is tested
    /// against.
    fn line_col_by_chars(&self, text: &str, offset: usize) -> (usize, usize) {
        let offset = floor_boundary(text, offset);
        let line = self.line_starts.partition_point(|&s| s <= offset);
        let start = self.line_starts[line - 1];
        let (last, last_column) = self.last.get();
        let column = if (start..=offset).contains(&last) {
            last_column + text[last..offset].chars().count()
        } else {
            text[start..offset].chars().count() + 1
        };
        self.last.set((offset, column));
        (line, column)
    }

    /// The 0-based line holding byte `offset`.
    pub fn line_of(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&s| s <= offset) - 1
    }

    /// How many lines the text has (a final line break starts an empty one).
    pub fn line_count(&self) -> usize {
        self.line_starts.len()
    }

    /// Byte offsets of 0-based `line`, its line break included, in a text
    /// of `len` bytes.
    pub fn line_span(&self, line: usize, len: usize) -> (usize, usize) {
        let start = self.line_starts.get(line).copied().unwrap_or(len);
        let end = self.line_starts.get(line + 1).copied().unwrap_or(len);
        (start, end)
    }

    /// Byte offset of a 1-based line and 0-based character column, as
    /// proc-macro2 reports them. Out-of-range positions clamp to the text.
    pub fn offset(&self, text: &str, line: usize, column: usize) -> usize {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return text.len();
        };
        let rest = &text[start..];
        let line_len = rest.find('\n').unwrap_or(rest.len());
        rest[..line_len]
            .char_indices()
            .nth(column)
            .map_or(start + line_len, |(i, _)| start + i)
    }

    /// The range covering bytes `start..end`.
    pub fn range(&self, text: &str, start: usize, end: usize) -> TextRange {
        let (line, column) = self.line_col(text, start);
        let (end_line, end_column) = self.line_col(text, end.max(start));
        TextRange {
            line,
            column,
            end_line,
            end_column,
            start,
            end: end.max(start),
        }
    }
}

fn floor_boundary(text: &str, mut offset: usize) -> usize {
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_positions_on_one_long_line_are_not_recounted_from_its_start() {
        // A minified file: one line, a literal every few bytes. Counting each
        // column from the line start made this quadratic (a 2.4 MB line with
        // 200,000 findings took over a minute).
        let text = "ї\"server:a:\", ".repeat(160_000);
        let index = LineIndex::new(&text);
        // This thread's CPU time: a loaded machine makes the lookups wait,
        // not work more.
        let cpu = crate::base::timings::thread_cpu_time;
        let started = cpu();
        for (n, (offset, _)) in text.match_indices('"').enumerate() {
            if n % 1000 == 0 {
                let chars = text[..offset].chars().count();
                assert_eq!(index.line_col(&text, offset), (1, chars + 1));
            } else {
                index.line_col(&text, offset);
            }
        }
        assert_eq!(index.line_col(&text, 2), (1, 2));
        let used = cpu() - started;
        assert!(used < std::time::Duration::from_secs(3), "{used:?}");
    }

    #[test]
    fn an_ascii_text_gives_the_columns_counting_characters_gives() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
        let mut texts = vec![String::new(), "\n".to_owned(), "a\r\nb\n\nc".to_owned()];
        for entry in std::fs::read_dir(src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(path).unwrap();
                // Made ASCII: most of these sources quote a non-ASCII char.
                texts.push(text.replace(|c: char| !c.is_ascii(), "?"));
            }
        }
        let mut compared = 0;
        for text in &texts {
            let index = LineIndex::new(text);
            assert!(index.ascii);
            // Every offset (and past the end), in order and then backwards,
            // so the counting path's last-position cache is exercised too.
            let offsets: Vec<usize> = (0..=text.len() + 1).chain((0..=text.len()).rev()).collect();
            for offset in offsets {
                assert_eq!(
                    index.line_col(text, offset),
                    index.line_col_by_chars(text, offset.min(text.len())),
                    "{offset} of {text:?}"
                );
                compared += 1;
            }
        }
        assert!(compared > 100_000, "{compared}");
        assert!(!LineIndex::new("ї\n").ascii);
    }

    #[test]
    fn offsets_round_trip_through_lines_and_columns() {
        let text = "fn a() {}\nlet s = \"ї server:x:\";\n";
        let index = LineIndex::new(text);
        let at = text.find("server").unwrap();
        let (line, column) = index.line_col(text, at);
        assert_eq!((line, column), (2, 12));
        assert_eq!(index.offset(text, line, column - 1), at);
        assert_eq!(index.offset(text, 99, 0), text.len());
        let range = index.range(text, at, at + 9);
        assert_eq!((range.end_line, range.end_column), (2, 21));
    }
}
