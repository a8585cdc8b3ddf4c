//! String-literal bodies, shared by the hand-written lexers of the non-Rust
//! languages.
//!
//! PHP, Python, shell, Go and JavaScript differ in which quotes open a
//! string and which escapes or interpolations it understands, but not in how
//! a body is walked: copy runs of source, decode an escape, step over an
//! interpolated expression without being fooled by the quotes inside it,
//! stop at the closing delimiter or, for an unterminated string, at the end
//! of the line or file. That walk lives here once, parameterised by
//! [`Quote`], and records where every run of the decoded value came from so
//! that findings point at the name inside the literal, not just at the
//! literal.

use std::ops::Range;

use super::collect::Run;

/// `$`-free identifier bytes shared by the C-like languages (an
/// interpolated `$name` ends at the first other byte; so does a word in
/// [`super::tokens`]).
pub(crate) fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// A decoded literal value with the source position of each of its runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Value {
    pub text: String,
    pub runs: Vec<Run>,
}

impl Value {
    /// Appends `src`, which sits at file offset `at`, as written.
    pub fn copy(&mut self, src: &str, at: usize) {
        if src.is_empty() {
            return;
        }
        let contiguous = self.runs.last().is_some_and(|last| {
            last.verbatim && last.source_at + (self.text.len() - last.value_at) == at
        });
        if !contiguous {
            self.runs.push(Run {
                value_at: self.text.len(),
                source_at: at,
                verbatim: true,
            });
        }
        self.text.push_str(src);
    }

    /// Appends text decoded from the source at file offset `at` (an escape,
    /// a placeholder standing for an expression).
    pub fn decoded(&mut self, text: &str, at: usize) {
        self.runs.push(Run {
            value_at: self.text.len(),
            source_at: at,
            verbatim: false,
        });
        self.text.push_str(text);
    }

    /// Appends another value (a joined concatenation).
    pub fn append(&mut self, other: &Value) {
        self.append_lit(&other.text, &other.runs);
    }

    /// Appends another value, `text` with its `runs` (a joined
    /// concatenation).
    pub fn append_lit(&mut self, text: &str, runs: &[Run]) {
        let base = self.text.len();
        self.runs.extend(runs.iter().map(|r| Run {
            value_at: base + r.value_at,
            ..*r
        }));
        self.text.push_str(text);
    }
}

/// Which backslash escapes a string form understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escapes {
    /// None: a backslash is an ordinary character (shell `'…'`, Go `` `…` ``).
    None,
    /// A backslash keeps the next character from closing the string but
    /// both stay in the value (Python raw strings).
    Raw,
    /// Only `\\` and `\<quote>` decode (PHP `'…'`, nowdoc has none).
    QuoteOnly(u8),
    /// `\\`, `\"`, `\$`, `` \` `` and line continuations (shell `"…"`).
    Shell,
    /// The C family: `\n`, `\t`, `\xHH`, `\u…`, octal, quotes, `\$`.
    C,
}

/// What an interpolation looks like inside a string form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interp {
    None,
    /// Python f-strings: `{{`/`}}` stay as written (the same escaping as a
    /// Rust format string, which the exposition reader understands) and
    /// each `{expr}` becomes the placeholder `{}`.
    PythonF,
    /// JavaScript template literals: `${expr}` becomes `${}`.
    Template,
    /// PHP and shell double quotes: `$x`, `{$x}`, `${x}`, `$(…)` and
    /// backticks stay as written, so normalization cuts at them; only
    /// their extent is needed, to not end the string at a nested quote.
    Dollar,
}

/// How one string form is delimited and decoded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quote<'q> {
    /// The closing delimiter; empty for a body whose end the caller already
    /// knows (a heredoc, scanned on the text cut at its end).
    pub close: &'q [u8],
    pub escapes: Escapes,
    pub interp: Interp,
    /// An unterminated string ends at the end of its line (everything but
    /// triple quotes, templates, heredocs and shell strings).
    pub single_line: bool,
}

impl<'q> Quote<'q> {
    /// A one-line string with C escapes (`"…"` in Go and JavaScript).
    pub const fn c_line(close: &'q [u8]) -> Self {
        Quote {
            close,
            escapes: Escapes::C,
            interp: Interp::None,
            single_line: true,
        }
    }

    /// A string whose body is exactly its source, lines included (Go
    /// `` `…` ``, shell `'…'`, nowdoc).
    pub const fn verbatim(close: &'q [u8]) -> Self {
        Quote {
            close,
            escapes: Escapes::None,
            interp: Interp::None,
            single_line: false,
        }
    }

    /// A heredoc body, cut at its end by the caller: verbatim when the
    /// marker was quoted, otherwise with `escapes` and `$` interpolation.
    pub const fn heredoc(quoted: bool, escapes: Escapes) -> Quote<'static> {
        let body = Quote::verbatim(b"");
        if quoted {
            body
        } else {
            body.escapes(escapes).interp(Interp::Dollar)
        }
    }

    /// The same form with other escapes.
    pub const fn escapes(self, escapes: Escapes) -> Self {
        Quote { escapes, ..self }
    }

    /// The same form with interpolation.
    pub const fn interp(self, interp: Interp) -> Self {
        Quote { interp, ..self }
    }
}

/// A scanned string body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Body {
    /// Just past the closing delimiter (or where an unterminated body stops).
    pub end: usize,
    pub value: Value,
    /// An interpolation or placeholder was seen.
    pub interpolated: bool,
    /// The code inside each `${…}` (template, PHP), `{…}` (f-string),
    /// `$(…)` or `` `…` `` (shell) interpolation, delimiters excluded:
    /// literals in there are code too.
    pub interpolations: Vec<Range<usize>>,
}

/// Scans a string body that starts at `from` (just after the opening
/// delimiter). Never reads past `text`, whatever the input.
pub(crate) fn scan_body(text: &str, from: usize, quote: &Quote<'_>) -> Body {
    let b = text.as_bytes();
    let mut value = Value::default();
    let mut interpolated = false;
    let mut interpolations = Vec::new();
    let mut i = from;
    let mut run = from;
    let single = quote.single_line;
    // A single-line body ends at its line break, found when the scan gets
    // there: searching for it up front read the rest of the line for every
    // string, quadratic on a minified line.
    let mut limit = b.len();
    let end = loop {
        if single && i < limit && b[i] == b'\n' {
            limit = i;
        }
        if i >= limit {
            let run = run.min(limit);
            value.copy(&text[run..limit], run);
            break limit;
        }
        if !quote.close.is_empty() && b[i..].starts_with(quote.close) {
            value.copy(&text[run..i], run);
            break i + quote.close.len();
        }
        let step = match (b[i], quote.interp) {
            (b'\\', _) if quote.escapes != Escapes::None => {
                let (decoded, len) = escape(text, i, quote.escapes);
                if let Some(decoded) = decoded {
                    value.copy(&text[run..i], run);
                    value.decoded(&decoded, i);
                    run = (i + len).min(limit);
                }
                len
            }
            (b'{', Interp::PythonF) if b.get(i + 1) == Some(&b'{') => 2,
            (b'}', Interp::PythonF) if b.get(i + 1) == Some(&b'}') => 2,
            (b'{', Interp::PythonF) => {
                interpolated = true;
                let close = skip_balanced_until(b, i, limit, single);
                interpolations.push(inside(b, i + 1, close));
                value.copy(&text[run..i], run);
                value.decoded("{}", i);
                run = close;
                close - i
            }
            (b'$', Interp::Template) if b.get(i + 1) == Some(&b'{') => {
                interpolated = true;
                let close = skip_balanced_until(b, i + 1, limit, single);
                interpolations.push(inside(b, i + 2, close));
                value.copy(&text[run..i], run);
                value.decoded("${}", i);
                run = close;
                close - i
            }
            (b'$', Interp::Dollar) => {
                let next = b.get(i + 1).copied().unwrap_or(b' ');
                interpolated |= next.is_ascii_alphabetic() || matches!(next, b'_' | b'{' | b'(');
                if matches!(next, b'{' | b'(') {
                    let close = skip_balanced_until(b, i + 1, limit, single);
                    interpolations.push(inside_any(b, i + 2, close));
                    close - i
                } else {
                    1
                }
            }
            (b'{', Interp::Dollar) if b.get(i + 1) == Some(&b'$') => {
                interpolated = true;
                let close = skip_balanced_until(b, i, limit, single);
                interpolations.push(inside(b, i + 1, close));
                close - i
            }
            (b'`', Interp::Dollar) if quote.escapes == Escapes::Shell => {
                interpolated = true;
                let inner_end = memchr::memchr(b'`', &b[i + 1..limit]).map_or(limit, |n| i + 1 + n);
                interpolations.push(i + 1..inner_end);
                (inner_end + 1).min(limit) - i
            }
            _ => 1,
        };
        let mut next = (i + step.max(1)).min(limit);
        if single {
            // Stop at a line break the step went past; the loop ends there.
            if let Some(n) = memchr::memchr(b'\n', &b[i + 1..next.max(i + 1)]) {
                next = i + 1 + n;
            }
        }
        i = next;
        // A multi-byte step can land inside a character only on broken
        // input; resynchronise so that every slice stays on a boundary.
        while !text.is_char_boundary(i) {
            i += 1;
        }
    };
    Body {
        end,
        value,
        interpolated,
        interpolations,
    }
}

/// The code of an interpolation that opened before `start` and ends just
/// past its closing brace at `close` (or is cut off there).
fn inside(b: &[u8], start: usize, close: usize) -> Range<usize> {
    let end = if close > start && b.get(close - 1) == Some(&b'}') {
        close - 1
    } else {
        close
    };
    start.min(end)..end
}

/// [`inside`] for an interpolation closed by `}` or `)`.
fn inside_any(b: &[u8], start: usize, close: usize) -> Range<usize> {
    let end = if close > start && matches!(b.get(close - 1), Some(b'}' | b')')) {
        close - 1
    } else {
        close
    };
    start.min(end)..end
}

/// Decodes the escape at `i` (a backslash): the decoded text, or `None`
/// when the escape stays as written; and how many bytes it spans.
fn escape(text: &str, i: usize, style: Escapes) -> (Option<String>, usize) {
    let Some(c) = text[i + 1..].chars().next() else {
        return (None, 1);
    };
    let len = 1 + c.len_utf8();
    let simple = |s: &str| (Some(s.to_owned()), len);
    match style {
        Escapes::None | Escapes::Raw => (None, len),
        Escapes::QuoteOnly(q) => match c {
            '\\' => simple("\\"),
            c if c as u32 == u32::from(q) => (Some(c.to_string()), len),
            _ => (None, len),
        },
        Escapes::Shell => match c {
            '\\' | '"' | '$' | '`' => (Some(c.to_string()), len),
            '\n' => simple(""),
            _ => (None, len),
        },
        Escapes::C => match c {
            'n' => simple("\n"),
            't' => simple("\t"),
            'r' => simple("\r"),
            'v' => simple("\u{b}"),
            'f' => simple("\u{c}"),
            'a' => simple("\u{7}"),
            'b' => simple("\u{8}"),
            'e' => simple("\u{1b}"),
            '\n' => simple(""),
            '\\' | '"' | '\'' | '$' | '`' | '/' => (Some(c.to_string()), len),
            'x' => numeric(text, i, i + 2, (16, 2), len),
            'u' if text[i + 2..].starts_with('{') => {
                match text[i + 3..].find('}').filter(|&n| n <= 8) {
                    Some(n) => match numeric(text, i, i + 3, (16, n), len) {
                        (Some(decoded), _) => (Some(decoded), 3 + n + 1),
                        none => none,
                    },
                    None => (None, len),
                }
            }
            'u' => numeric(text, i, i + 2, (16, 4), len),
            'U' => numeric(text, i, i + 2, (16, 8), len),
            '0'..='7' => numeric(text, i, i + 1, (8, 3), len),
            _ => (None, len),
        },
    }
}

/// Reads up to `max` digits in `radix` at `at` for the escape whose
/// backslash is at `backslash`: the character and the escape's length, or
/// `(None, fallback)` when no digit follows.
fn numeric(
    text: &str,
    backslash: usize,
    at: usize,
    (radix, max): (u32, usize),
    fallback: usize,
) -> (Option<String>, usize) {
    let digits = text
        .get(at..)
        .unwrap_or("")
        .bytes()
        .take(max)
        .take_while(|b| char::from(*b).is_digit(radix))
        .count();
    if digits == 0 {
        return (None, fallback);
    }
    let decoded = u32::from_str_radix(&text[at..at + digits], radix)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or(char::REPLACEMENT_CHARACTER);
    (Some(decoded.to_string()), at + digits - backslash)
}

/// The index of the `\n` ending the line at `i`, or the end of the text.
pub(crate) fn line_end(b: &[u8], i: usize) -> usize {
    let i = i.min(b.len());
    memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n)
}

/// Just past the first `close` at or after `i`, or the end of the text.
pub(crate) fn past(b: &[u8], i: usize, close: &[u8]) -> usize {
    let i = i.min(b.len());
    memchr::memmem::find(&b[i..], close).map_or(b.len(), |n| i + n + close.len())
}

/// From an opening bracket at `open` to just past its matching close (or
/// `limit`), stepping over nested brackets and quoted strings, which is all
/// an interpolated expression needs.
pub(crate) fn skip_balanced(b: &[u8], open: usize, limit: usize) -> usize {
    skip_balanced_until(b, open, limit, false)
}

/// [`skip_balanced`], also stopping at a line break when `single_line`.
fn skip_balanced_until(b: &[u8], open: usize, limit: usize, single_line: bool) -> usize {
    let limit = limit.min(b.len());
    let mut depth = 0usize;
    let mut i = open;
    while i < limit {
        match b[i] {
            b'\n' if single_line => return i,
            b'{' | b'(' | b'[' => depth += 1,
            b'}' | b')' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            q @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < limit && b[i] != q {
                    if single_line && (b[i] == b'\n' || b[i..].starts_with(b"\\\n")) {
                        return i + usize::from(b[i] == b'\\');
                    }
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            _ => {}
        }
        i += 1;
    }
    limit
}

/// How far a heredoc's closing marker may be indented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Indent {
    /// The marker alone on its line (shell `<<EOF`).
    None,
    /// Leading tabs allowed (shell `<<-EOF`).
    Tabs,
    /// Any leading whitespace, and code may follow (PHP 7.3+).
    Any,
}

/// Finds the line that closes a heredoc body starting at `body_start`:
/// returns where that line starts (the body's end) and where the marker
/// ends. An unclosed heredoc runs to the end of the text.
pub(crate) fn heredoc_close(
    b: &[u8],
    body_start: usize,
    marker: &[u8],
    indent: Indent,
) -> (usize, usize) {
    let mut line = body_start.min(b.len());
    while line < b.len() {
        let stop = line_end(b, line);
        let content = &b[line..stop];
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        let lead = match indent {
            Indent::None => 0,
            Indent::Tabs => content.iter().take_while(|c| **c == b'\t').count(),
            Indent::Any => content
                .iter()
                .take_while(|c| c.is_ascii_whitespace())
                .count(),
        };
        let rest = &content[lead..];
        let closes = match indent {
            Indent::Any => {
                rest.starts_with(marker)
                    && !rest.get(marker.len()).is_some_and(|c| is_ident_byte(*c))
            }
            _ => rest == marker,
        };
        if closes && !marker.is_empty() {
            return (line, line + lead + marker.len());
        }
        line = stop + 1;
    }
    (b.len(), b.len())
}
