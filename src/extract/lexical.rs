//! A parser-free view of Rust source: where the string literals are, what
//! they decode to, and whether the file is too deeply nested to parse safely.
//!
//! The gate must not go blind on a file `syn` rejects (work in progress,
//! a newer syntax, a generated monster), nor crash on one that would blow the
//! stack of a recursive-descent parser. So the same small lexer that finds
//! literals for the fallback also measures nesting ([`too_complex`]). It
//! knows just enough Rust to not mistake comments, char literals and
//! lifetimes for strings. The Rust extractor reads the same two measures
//! off its tokenizer on the way through ([`GuardView`]), and asks this
//! lexer only when the tokenizer cannot settle them, so a file is lexed
//! once.
//!
//! [`GuardView`]: super::rust_lex::GuardView Literal decoding lives here too, so the parser path
//! reads values straight from the source text instead of re-lexing tokens.

use std::borrow::Cow;
use std::ops::Range;

use super::collect::{Collector, LitInfo, Run};
use super::tokens::may_matter;
use super::LiteralKind;

/// Deeper bracket nesting than this goes to the fallback instead of `syn`.
pub(crate) const MAX_NESTING: usize = 256;

/// Longest run of operator characters with no `, ; { }` in between that is
/// still handed to `syn`: unary chains, long binary chains and deeply nested
/// generics recurse without brackets.
pub(crate) const MAX_OPERATOR_RUN: usize = 1024;

#[cfg_attr(test, derive(Debug, PartialEq, Eq))]
enum Lexeme {
    /// A string-like literal (`"…"`, `r#"…"#`, `b"…"`, `c"…"`), byte range.
    Str(Range<usize>),
    Open,
    Close,
    /// `,` or `;`: ends an expression, so it ends an operator run.
    Separator,
    Operator,
}

/// What a byte starts, for [`lex`]: one table lookup instead of a chain
/// of tests per byte (the lexer runs over every Rust file the extractor
/// reads, for the nesting precheck, and most bytes are indentation and
/// identifiers).
mod class {
    pub(super) const SPACE: u8 = 0;
    pub(super) const IDENT: u8 = 1;
    pub(super) const OPEN: u8 = 2;
    pub(super) const CLOSE: u8 = 3;
    pub(super) const SEPARATOR: u8 = 4;
    pub(super) const QUOTE: u8 = 5;
    pub(super) const APOSTROPHE: u8 = 6;
    pub(super) const SLASH: u8 = 7;
    pub(super) const OPERATOR: u8 = 8;
}

const BYTE_CLASS: [u8; 256] = {
    let mut table = [class::OPERATOR; 256];
    let mut c = 0;
    while c < 256 {
        let byte = c as u8;
        table[c] = match byte {
            b'/' => class::SLASH,
            b'"' => class::QUOTE,
            b'\'' => class::APOSTROPHE,
            b'(' | b'[' | b'{' => class::OPEN,
            b')' | b']' | b'}' => class::CLOSE,
            b',' | b';' => class::SEPARATOR,
            _ if is_ident_byte(byte) => class::IDENT,
            _ if byte.is_ascii_whitespace() => class::SPACE,
            _ => class::OPERATOR,
        };
        c += 1;
    }
    table
};

/// Where the Rust code of `text` starts: after a BOM, and after a shebang
/// line, which is not Rust (skipping them keeps every offset a file
/// offset). As rustc has it, `#!` at the start opens a shebang line unless
/// the first token after it, past whitespace and comments that are not
/// doc comments, is `[`: then it is an inner attribute (`#![allow(x)]`,
/// `#! /* c */ [x]`), and its line is code.
pub(crate) fn code_start(text: &str) -> usize {
    let b = text.as_bytes();
    let start = if text.starts_with('\u{feff}') { 3 } else { 0 };
    if !b[start..].starts_with(b"#!") || b.get(after_blanks(text, start + 2)) == Some(&b'[') {
        return start;
    }
    memchr::memchr(b'\n', &b[start..]).map_or(b.len(), |n| start + n)
}

/// Past the whitespace and the comments that are not doc comments from
/// `i` (an unclosed block comment runs to the end).
fn after_blanks(text: &str, mut i: usize) -> usize {
    let b = text.as_bytes();
    while let Some(&c) = b.get(i) {
        let rest = &b[i..];
        if matches!(c, b' ' | 0x09..=0x0d) {
            i += 1;
        } else if rest.starts_with(b"//")
            && (!matches!(rest.get(2), Some(b'/' | b'!')) || rest.starts_with(b"////"))
        {
            i = memchr::memchr(b'\n', rest).map_or(b.len(), |n| i + n);
        } else if rest.starts_with(b"/**/")
            || rest.starts_with(b"/***")
            || (rest.starts_with(b"/*") && !matches!(rest.get(2), Some(b'*' | b'!')))
        {
            i = skip_block_comment(b, i);
        } else {
            match text[i..].chars().next() {
                Some(ch)
                    if !ch.is_ascii()
                        && (ch.is_whitespace() || ch == '\u{200e}' || ch == '\u{200f}') =>
                {
                    i += ch.len_utf8()
                }
                _ => return i,
            }
        }
    }
    i
}

/// Runs the lexer over the code of `text` (from [`code_start`]); `sink`
/// returns `false` to stop early.
fn lex(text: &str, mut sink: impl FnMut(Lexeme, usize) -> bool) {
    let b = text.as_bytes();
    let class_at = |i: usize| BYTE_CLASS[usize::from(b[i])];
    // Where the name of the last raw identifier `r#name` read starts.
    let mut raw_name = usize::MAX;
    let mut i = code_start(text);
    while i < b.len() {
        let (lexeme, next) = match class_at(i) {
            class::SPACE => {
                // A run of whitespace at once: nothing in it is a lexeme.
                let mut end = i + 1;
                while end < b.len() && class_at(end) == class::SPACE {
                    end += 1;
                }
                (None, end)
            }
            // A space beyond ASCII (`U+0085`, `U+00A0`, `U+2028`…): a
            // blank to the tokenizer, so no part of a word here.
            class::IDENT if b[i] >= 0x80 && unicode_space(b, i).is_some() => {
                (None, i + unicode_space(b, i).unwrap_or(1))
            }
            class::IDENT => {
                let mut end = i + 1;
                while end < b.len()
                    && class_at(end) == class::IDENT
                    && (b[end] < 0x80 || unicode_space(b, end).is_none())
                {
                    end += 1;
                }
                // Only `r`, `b`, `c`, `br` and `cr` before `"` or `#` can
                // start a string (see `prefixed_string`), and never as the
                // name of a raw identifier.
                let named = i == raw_name;
                if !named && starts_raw_identifier(b, i, end) {
                    raw_name = end + 1;
                }
                let may_prefix = !named && end - i <= 2 && matches!(b.get(end), Some(b'"' | b'#'));
                match may_prefix.then(|| prefixed_string(b, i, end)).flatten() {
                    Some(lit_end) => (Some(Lexeme::Str(i..lit_end)), lit_end),
                    None => (None, end),
                }
            }
            class::SLASH if b.get(i + 1) == Some(&b'/') => {
                let end = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n);
                (None, end)
            }
            class::SLASH if b.get(i + 1) == Some(&b'*') => (None, skip_block_comment(b, i)),
            class::QUOTE => {
                let end = suffix_end(b, skip_quoted(b, i + 1));
                (Some(Lexeme::Str(i..end)), end)
            }
            class::APOSTROPHE => (None, skip_char_or_lifetime(text, i)),
            class::OPEN => (Some(Lexeme::Open), i + 1),
            class::CLOSE => (Some(Lexeme::Close), i + 1),
            class::SEPARATOR => (Some(Lexeme::Separator), i + 1),
            _ => (Some(Lexeme::Operator), i + 1),
        };
        if let Some(lexeme) = lexeme {
            if !sink(lexeme, i) {
                return;
            }
        }
        i = next.max(i + 1);
    }
}

const fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// Whether the word `b[start..word_end]` starts a raw identifier `r#name`
/// (as rustc reads it: `r`, `#`, then a character that can start a name).
/// Its name is a word then, even when it reads `r`, `b`, `br`, `c` or `cr`
/// before a quote: `r#r"a\"b"` is the identifier `r#r` and a plain string;
/// read as `r#` and a raw string `r"a\"`, the `b"` after it would open a
/// byte string that hides the rest of the file from the limits. A name is
/// no word that starts one (`r#r#r"a\"` is `r#r`, `#` and a raw string).
fn starts_raw_identifier(b: &[u8], start: usize, word_end: usize) -> bool {
    &b[start..word_end] == b"r"
        && b.get(word_end) == Some(&b'#')
        && b.get(word_end + 1).is_some_and(|&c| starts_suffix(c))
}

/// Whether `c` can start an identifier, and so a literal's suffix (any
/// non-ASCII byte: the tokenizer settles what such a character is).
const fn starts_suffix(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

/// Just past the suffix (`u8`, `suffix`, none) of a literal that ends
/// before `at`: rustc reads `"a"r"b"` as `"a"` with the suffix `r` and a
/// plain string, and `'x'r#r"a\"` as a char with the suffix `r`, `#` and a
/// raw string, not a raw identifier `r#r`.
fn suffix_end(b: &[u8], mut at: usize) -> usize {
    if b.get(at).is_some_and(|&c| starts_suffix(c)) {
        while at < b.len() && is_ident_byte(b[at]) && unicode_space(b, at).is_none() {
            at += 1;
        }
    }
    at
}

/// The length of the space beyond ASCII that starts at `b[i]`, if one
/// does: what the tokenizer skips as whitespace (`char::is_whitespace`,
/// and the marks U+200E and U+200F). Their UTF-8 starts with `C2`, `E1`,
/// `E2` or `E3`; `b` is a `str`'s bytes, so a char starting there decodes.
fn unicode_space(b: &[u8], i: usize) -> Option<usize> {
    let len = match *b.get(i)? {
        0xc2 => 2,
        0xe1..=0xe3 => 3,
        _ => return None,
    };
    let c = std::str::from_utf8(b.get(i..i + len)?)
        .ok()?
        .chars()
        .next()?;
    (c.is_whitespace() || c == '\u{200e}' || c == '\u{200f}').then_some(len)
}

/// The end of a string literal whose prefix is the word `b[start..word_end]`
/// (`r`, `b`, `br`, `c`, `cr`), or `None` when the word is just a word.
fn prefixed_string(b: &[u8], start: usize, word_end: usize) -> Option<usize> {
    let word = &b[start..word_end];
    let raw = matches!(word, b"r" | b"br" | b"cr");
    if !raw {
        return (matches!(word, b"b" | b"c") && b.get(word_end) == Some(&b'"'))
            .then(|| suffix_end(b, skip_quoted(b, word_end + 1)));
    }
    let hashes = b[word_end..].iter().take_while(|&&c| c == b'#').count();
    let quote = word_end + hashes;
    // `r#ident` is a raw identifier, not a string.
    if b.get(quote) != Some(&b'"') {
        return None;
    }
    let mut i = quote + 1;
    while let Some(n) = memchr::memchr(b'"', &b[i..]) {
        let close = i + n;
        let tail = &b[close + 1..];
        if tail.len() >= hashes && tail[..hashes].iter().all(|&c| c == b'#') {
            return Some(suffix_end(b, close + 1 + hashes));
        }
        i = close + 1;
    }
    Some(b.len())
}

/// From just after an opening `"` to just after the closing one.
fn skip_quoted(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

fn skip_block_comment(b: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    b.len()
}

/// `'a'`, `'\n'`, `'\u{1F600}'` are char literals; `'a` is a lifetime or
/// label, of which only the quote is consumed.
fn skip_char_or_lifetime(text: &str, i: usize) -> usize {
    let b = text.as_bytes();
    if b.get(i + 1) == Some(&b'\\') {
        // Escapes are short; a missing close quote within reach means broken
        // code, and then we only step over the quote.
        let window = &b[(i + 3).min(b.len())..(i + 14).min(b.len())];
        return memchr::memchr(b'\'', window).map_or(i + 1, |n| suffix_end(b, i + 3 + n + 1));
    }
    let Some(c) = text.get(i + 1..).and_then(|rest| rest.chars().next()) else {
        return i + 1;
    };
    let close = i + 1 + c.len_utf8();
    if c != '\'' && b.get(close) == Some(&b'\'') {
        suffix_end(b, close + 1)
    } else {
        i + 1
    }
}

/// Whether any of `offsets` (ascending byte offsets) lies inside a string
/// literal: the prefilter's test that a file is worth parsing.
pub(crate) fn any_in_string(text: &str, offsets: &[usize]) -> bool {
    let mut next = 0;
    let mut found = false;
    lex(text, |lexeme, _| {
        if let Lexeme::Str(range) = lexeme {
            while next < offsets.len() && offsets[next] < range.start {
                next += 1;
            }
            found = next < offsets.len() && offsets[next] < range.end;
        }
        !found && next < offsets.len()
    });
    found
}

/// Why the file should not be handed to a recursive parser, and where.
pub(crate) fn too_complex(text: &str) -> Option<(String, usize)> {
    if !may_be_too_complex(text.as_bytes()) {
        return None;
    }
    too_complex_lexed(text)
}

/// [`too_complex`] without the byte-count shortcut.
fn too_complex_lexed(text: &str) -> Option<(String, usize)> {
    let mut depth = 0usize;
    let mut run = 0usize;
    let mut found = None;
    lex(text, |lexeme, at| {
        match lexeme {
            Lexeme::Open => {
                depth += 1;
                run = 0;
                if depth > MAX_NESTING {
                    found = Some((
                        format!("brackets nest deeper than {MAX_NESTING} levels"),
                        at,
                    ));
                }
            }
            Lexeme::Close => {
                depth = depth.saturating_sub(1);
                run = 0;
            }
            Lexeme::Separator => run = 0,
            Lexeme::Operator => {
                run += 1;
                if run > MAX_OPERATOR_RUN {
                    found = Some((
                        format!("an expression chains more than {MAX_OPERATOR_RUN} operators"),
                        at,
                    ));
                }
            }
            Lexeme::Str(_) => {}
        }
        found.is_none()
    });
    found
}

/// The guard's two measures over the whole of `text`, without stopping at
/// a limit: the deepest nesting and the longest operator run (what the
/// tokenizer's [`GuardView`](super::rust_lex::GuardView) must equal, in
/// the differential tests and under fuzzing).
pub(crate) fn guard_measures(text: &str) -> (usize, usize) {
    let (mut depth, mut run, mut deepest, mut longest) = (0usize, 0usize, 0, 0);
    lex(text, |lexeme, _| {
        match lexeme {
            Lexeme::Open => {
                depth += 1;
                run = 0;
            }
            Lexeme::Close => {
                depth = depth.saturating_sub(1);
                run = 0;
            }
            Lexeme::Separator => run = 0,
            Lexeme::Operator => run += 1,
            Lexeme::Str(_) => {}
        }
        deepest = deepest.max(depth);
        longest = longest.max(run);
        true
    });
    (deepest, longest)
}

/// Whether `b` holds more opening brackets than [`MAX_NESTING`] or more
/// operator bytes than [`MAX_OPERATOR_RUN`], counted anywhere (comments and
/// literals included): the lexer reports an `Open` or `Operator` only at
/// such a byte, so a file with fewer can pass neither limit and need not be
/// lexed for them. Small files are below both. The bytes are classified by
/// comparisons the compiler turns into vector code, 128 at a time, and the
/// count stops at the first block that puts either count over its limit
/// (the counts only grow): a real file of a few kilobytes gets there early,
/// and the whole count cost more than lexing it.
fn may_be_too_complex(b: &[u8]) -> bool {
    if b.len() <= MAX_NESTING.min(MAX_OPERATOR_RUN) {
        return false;
    }
    if b.len() <= MAX_OPERATOR_RUN {
        // Too short to hold more operator bytes than the limit: only the
        // opening brackets can pass theirs, and counting them alone (three
        // vectorised `memchr` counts) costs less than classifying every
        // byte, on the small files most trees hold.
        let count = |open: u8| memchr::memchr_iter(open, b).count();
        return count(b'(') + count(b'[') + count(b'{') > MAX_NESTING;
    }
    let (mut opens, mut operators) = (0usize, 0usize);
    for block in b.chunks(128) {
        // Byte-wide counters: a block of 128 cannot overflow them.
        let (mut block_opens, mut block_operators) = (0u8, 0u8);
        for &c in block {
            // `|`, not `||`: no branches, so the loop vectorises.
            let open = (c == b'(') | (c == b'[') | (c == b'{');
            let quiet = (c == b')')
                | (c == b']')
                | (c == b'}')
                | (c == b',')
                | (c == b';')
                | (c == b'"')
                | (c == b'\'');
            let ident = c.is_ascii_alphanumeric() | (c == b'_') | (c >= 0x80);
            let space = (c == b' ') | (c == b'\t') | (c == b'\n') | (c == b'\x0c') | (c == b'\r');
            block_opens += u8::from(open);
            block_operators += u8::from(!(open | quiet | ident | space));
        }
        opens += usize::from(block_opens);
        operators += usize::from(block_operators);
        if opens > MAX_NESTING || operators > MAX_OPERATOR_RUN {
            return true;
        }
    }
    false
}

/// Feeds every string literal of `text` to `collector` as
/// [`LiteralKind::Lexical`].
pub(crate) fn scan_literals(collector: &mut Collector<'_>) {
    let text = collector.text();
    lex(text, |lexeme, _| {
        if let Lexeme::Str(span) = lexeme {
            collect_token_literal(collector, span, None, Some(LiteralKind::Lexical));
        }
        true
    });
}

/// The string-like literal token at file bytes `span`, decoded (its value
/// pointed at verbatim when it is written verbatim); `None` for any other
/// token. The value borrows `text` when it is written verbatim: a caller is done
/// with most literals it reads before the file is, and copying each was an
/// allocation per literal.
pub(crate) fn token_lit_info(text: &str, span: Range<usize>) -> Option<LitInfo<'_>> {
    let decoded = decode_literal(text.get(span.clone())?)?;
    Some(LitInfo {
        verbatim_at: decoded
            .verbatim
            .then_some(span.start + decoded.content.start),
        runs: &[],
        value: decoded.value,
        kind: decoded.kind,
        span,
    })
}

/// Feeds the string-like literal token at file bytes `span` (in item
/// `context`) to `collector`, escapes mapped back to the source; `kind`
/// overrides the kind its prefix gives.
///
/// A token with no escape and no carriage return decodes to its own bytes
/// between the quotes, so one whose bytes hold no cache namespace, metric
/// prefix or scan-limit suffix gives the collector nothing (see
/// [`Collector::literal`]): it is not decoded. Most literals of a file that
/// holds a key are such (messages, formats, paths).
pub(crate) fn collect_token_literal(
    collector: &mut Collector<'_>,
    span: Range<usize>,
    context: Option<&str>,
    kind: Option<LiteralKind>,
) {
    let Some(repr) = collector.text().get(span.clone()) else {
        return;
    };
    if memchr::memchr2(b'\\', b'\r', repr.as_bytes()).is_none()
        && !may_matter(repr, collector.config())
    {
        return;
    }
    collect_decoded_literal(collector, span, context, kind);
}

/// [`collect_token_literal`] without its shortcut: every token decoded.
fn collect_decoded_literal(
    collector: &mut Collector<'_>,
    span: Range<usize>,
    context: Option<&str>,
    kind: Option<LiteralKind>,
) {
    let text = collector.text();
    let Some(decoded) = text.get(span.clone()).and_then(decode_literal) else {
        return;
    };
    let runs = runs_in_file(&decoded.runs, span.start);
    let lit = LitInfo {
        verbatim_at: decoded
            .verbatim
            .then_some(span.start + decoded.content.start),
        runs: &runs,
        value: decoded.value,
        kind: kind.unwrap_or(decoded.kind),
        span,
    };
    collector.literal(&lit, context);
}

/// A string-like literal token decoded from its source text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded<'a> {
    pub kind: LiteralKind,
    pub value: Cow<'a, str>,
    /// The bytes between the quotes, as an offset range into the token.
    pub content: Range<usize>,
    /// The value is exactly those bytes.
    pub verbatim: bool,
    /// Where the value's pieces sit in the token, when escapes make it
    /// differ from the source (empty otherwise).
    pub runs: Vec<Run>,
}

/// Decodes a string, raw string, byte string or C string token (`repr` is
/// the token's source text, suffix allowed); `None` for anything else.
pub(crate) fn decode_literal(repr: &str) -> Option<Decoded<'_>> {
    let b = repr.as_bytes();
    let prefix_len = b.iter().take_while(|c| c.is_ascii_lowercase()).count();
    let (kind, raw) = match &b[..prefix_len] {
        b"" => (LiteralKind::Str, false),
        b"r" => (LiteralKind::RawStr, true),
        b"b" => (LiteralKind::ByteStr, false),
        b"br" => (LiteralKind::ByteStr, true),
        b"c" => (LiteralKind::CStr, false),
        b"cr" => (LiteralKind::CStr, true),
        _ => return None,
    };
    let hashes = if raw {
        b[prefix_len..].iter().take_while(|&&c| c == b'#').count()
    } else {
        0
    };
    let open = prefix_len + hashes;
    if b.get(open) != Some(&b'"') {
        return None;
    }
    let start = open + 1;
    let end = if raw {
        let mut close = b.len();
        for i in (start..b.len()).rev() {
            if b[i] == b'"'
                && b.len() - i > hashes
                && b[i + 1..=i + hashes].iter().all(|&c| c == b'#')
            {
                close = i;
                break;
            }
        }
        close
    } else {
        skip_quoted(b, start).saturating_sub(1).max(start)
    };
    let content = repr.get(start..end)?;
    // rustc reads CRLF as LF everywhere, raw strings included.
    let mut runs = Vec::new();
    let value = if raw {
        if content.contains('\r') {
            Cow::Owned(content.replace("\r\n", "\n"))
        } else {
            Cow::Borrowed(content)
        }
    } else if memchr::memchr2(b'\\', b'\r', content.as_bytes()).is_some() {
        // (Tested with `memchr2`: a `[char; 2]` pattern decodes every char.)
        let (value, content_runs) = unescape_with_runs(content);
        runs = content_runs
            .into_iter()
            .map(|r| Run {
                source_at: start + r.source_at,
                ..r
            })
            .collect();
        Cow::Owned(value)
    } else {
        Cow::Borrowed(content)
    };
    let verbatim = *value == *content;
    if verbatim {
        runs.clear();
    }
    Some(Decoded {
        kind,
        value,
        content: start..end,
        verbatim,
        runs,
    })
}

/// The value of a char or byte-char token (`'x'`, `'\n'`, `b'a'`).
pub(crate) fn decode_char(repr: &str) -> Option<String> {
    let inner = repr.strip_prefix('b').unwrap_or(repr).strip_prefix('\'')?;
    let inner = &inner[..inner.rfind('\'')?];
    Some(unescape(inner))
}

/// Rust escape rules; unknown escapes are kept as written and bytes above
/// 0x7F (byte strings) become U+FFFD, which is enough for name matching.
pub(crate) fn unescape(content: &str) -> String {
    unescape_with_runs(content).0
}

/// A token's runs moved to file offsets (the token starts at `token_at`).
pub(crate) fn runs_in_file(runs: &[Run], token_at: usize) -> Vec<Run> {
    runs.iter()
        .map(|r| Run {
            source_at: token_at + r.source_at,
            ..*r
        })
        .collect()
}

/// Unescapes like [`unescape`] and also says where each piece of the value
/// came from (offsets into `content`), so a name or label inside an escaped
/// literal can still be pointed at exactly.
pub(crate) fn unescape_with_runs(content: &str) -> (String, Vec<Run>) {
    let mut out = String::with_capacity(content.len());
    let mut runs: Vec<Run> = Vec::new();
    let mut chars = content.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let value_at = out.len();
        if c == '\r' && chars.peek().map(|(_, n)| *n) == Some('\n') {
            continue;
        }
        if c != '\\' {
            out.push(c);
            // Extend the current verbatim run when this char follows it.
            let continues = runs
                .last()
                .is_some_and(|r| r.verbatim && at - r.source_at == value_at - r.value_at);
            if !continues {
                runs.push(Run {
                    value_at,
                    source_at: at,
                    verbatim: true,
                });
            }
            continue;
        }
        match chars.next().map(|(_, e)| e) {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('0') => out.push('\0'),
            Some(q @ ('\\' | '"' | '\'')) => out.push(q),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).map(|(_, h)| h).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(byte) if byte < 0x80 => out.push(char::from(byte)),
                    _ => out.push(char::REPLACEMENT_CHARACTER),
                }
            }
            Some('u') => {
                let mut hex = String::new();
                if chars.peek().map(|(_, n)| *n) == Some('{') {
                    chars.next();
                    for (_, h) in chars.by_ref() {
                        if h == '}' {
                            break;
                        }
                        if h != '_' {
                            hex.push(h);
                        }
                    }
                }
                let decoded = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                out.push(decoded.unwrap_or(char::REPLACEMENT_CHARACTER));
            }
            Some('\n' | '\r') => {
                while chars
                    .peek()
                    .is_some_and(|(_, c)| matches!(c, ' ' | '\t' | '\n' | '\r'))
                {
                    chars.next();
                }
            }
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
        if out.len() > value_at {
            runs.push(Run {
                value_at,
                source_at: at,
                verbatim: false,
            });
        }
    }
    (out, runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_left_undecoded_would_have_given_nothing() {
        use crate::extract::ExtractConfig;
        // Needles whole, cut by escapes, behind CRLF, in every string form,
        // and near misses; one token per line.
        let bodies = [
            "server:a:{}",
            "dw_x_total",
            "due_scan_limit",
            "plain words",
            "dw",
            "server",
            "_scan_limi",
            "ser\\x76er:k",
            "dw\\x5fx_total",
            "dw\\u{5f}y",
            "x\\ndw_z",
            "\\\\dw_w",
            "a\r\nserver:b",
            "_scan\\x5flimit",
            "d\\\n   w_q",
            "é dw_é_total",
        ];
        let mut text = String::new();
        let mut spans = Vec::new();
        for body in bodies {
            for (open, close) in [
                ("\"", "\""),
                ("r\"", "\""),
                ("r#\"", "\"#"),
                ("b\"", "\""),
                ("c\"", "\""),
            ] {
                let start = text.len();
                text.push_str(&format!("{open}{body}{close}sfx"));
                spans.push(start..text.len());
                text.push_str(" + ");
            }
        }
        let configs = [
            ("server:", "dw_"),
            ("", "dw_"),
            ("server:", ""),
            ("e", "a"),
            ("x", "_"),
        ];
        let mut skipped = 0;
        for (namespace, prefix) in configs {
            let config = ExtractConfig {
                cache_namespace: namespace.into(),
                metric_prefix: prefix.into(),
            };
            let mut fast = Collector::new(&text, &config);
            let mut slow = Collector::new(&text, &config);
            for span in spans.iter().cloned() {
                collect_token_literal(&mut fast, span.clone(), Some("f"), None);
                collect_decoded_literal(&mut slow, span.clone(), Some("f"), None);
                let repr = &text[span];
                skipped += usize::from(
                    memchr::memchr2(b'\\', b'\r', repr.as_bytes()).is_none()
                        && !may_matter(repr, &config),
                );
            }
            let (fast, slow) = (fast.finish(Vec::new(), None), slow.finish(Vec::new(), None));
            assert_eq!(fast, slow, "{namespace:?} {prefix:?}");
            assert!(
                !slow.literals.is_empty() || namespace.is_empty(),
                "{namespace:?}"
            );
        }
        // The shortcut was taken, and not everywhere.
        assert!(
            skipped > 20 && skipped < 5 * bodies.len() * configs.len(),
            "{skipped}"
        );
    }

    /// The byte count as it was: a table lookup per byte over the whole
    /// file. [`may_be_too_complex`] must agree with it.
    fn may_be_too_complex_by_table(b: &[u8]) -> bool {
        const OPEN: u8 = 1;
        const OPERATOR: u8 = 2;
        const CLASS: [u8; 256] = {
            let mut class = [0u8; 256];
            let mut c = 0;
            while c < 256 {
                let byte = c as u8;
                class[c] = match byte {
                    b'(' | b'[' | b'{' => OPEN,
                    b')' | b']' | b'}' | b',' | b';' | b'"' | b'\'' => 0,
                    _ if is_ident_byte(byte) || byte.is_ascii_whitespace() => 0,
                    _ => OPERATOR,
                };
                c += 1;
            }
            class
        };
        if b.len() <= MAX_NESTING.min(MAX_OPERATOR_RUN) {
            return false;
        }
        let (mut opens, mut operators) = (0usize, 0usize);
        for &c in b {
            let class = CLASS[usize::from(c)];
            opens += usize::from(class == OPEN);
            operators += usize::from(class == OPERATOR);
        }
        opens > MAX_NESTING || operators > MAX_OPERATOR_RUN
    }

    #[test]
    fn the_blockwise_byte_count_agrees_with_the_table_count() {
        // Every byte value, alone and as the filler around a count right
        // at each limit, and the extractor's own sources.
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for byte in 0..=255u8 {
            for len in [256, 257, 1024, 1025, 1100] {
                cases.push(vec![byte; len]);
            }
            for (open, count) in [(b'(', 256), (b'{', 257), (b'!', 1024), (b'.', 1025)] {
                let mut text = vec![byte; 300];
                for k in 0..count {
                    match text.get_mut(3 * k) {
                        Some(at) => *at = open,
                        None => text.push(open),
                    }
                }
                cases.push(text);
            }
        }
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
        for entry in std::fs::read_dir(src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read(&path).unwrap();
                for len in [0, 255, 257, 1000, 3000, 10_000, text.len()] {
                    cases.push(text[..len.min(text.len())].to_vec());
                }
            }
        }
        let mut verdicts = [0, 0];
        for case in &cases {
            let reference = may_be_too_complex_by_table(case);
            assert_eq!(
                may_be_too_complex(case),
                reference,
                "{:?}",
                String::from_utf8_lossy(case)
            );
            verdicts[usize::from(reference)] += 1;
        }
        assert!(verdicts[0] > 100 && verdicts[1] > 100, "{verdicts:?}");
    }

    /// The lexer as it was before its byte table: a chain of tests per
    /// byte, one byte of whitespace at a time, every word offered to
    /// `prefixed_string`. The table-driven [`lex`] must agree with it.
    fn lex_bytewise(text: &str, mut sink: impl FnMut(Lexeme, usize) -> bool) {
        let b = text.as_bytes();
        let mut raw_name = usize::MAX;
        let mut i = code_start(text);
        while i < b.len() {
            let c = b[i];
            let (lexeme, next) = match c {
                b'/' if b.get(i + 1) == Some(&b'/') => {
                    let end = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n);
                    (None, end)
                }
                b'/' if b.get(i + 1) == Some(&b'*') => (None, skip_block_comment(b, i)),
                b'"' => {
                    let end = suffix_end(b, skip_quoted(b, i + 1));
                    (Some(Lexeme::Str(i..end)), end)
                }
                b'\'' => (None, skip_char_or_lifetime(text, i)),
                b'(' | b'[' | b'{' => (Some(Lexeme::Open), i + 1),
                b')' | b']' | b'}' => (Some(Lexeme::Close), i + 1),
                b',' | b';' => (Some(Lexeme::Separator), i + 1),
                _ if unicode_space(b, i).is_some() => (None, i + unicode_space(b, i).unwrap_or(1)),
                c if is_ident_byte(c) => {
                    let mut end = i;
                    while end < b.len() && is_ident_byte(b[end]) && unicode_space(b, end).is_none()
                    {
                        end += 1;
                    }
                    let named = i == raw_name;
                    if !named && starts_raw_identifier(b, i, end) {
                        raw_name = end + 1;
                    }
                    let string = (!named).then(|| prefixed_string(b, i, end)).flatten();
                    match string {
                        Some(lit_end) => (Some(Lexeme::Str(i..lit_end)), lit_end),
                        None => (None, end),
                    }
                }
                c if c.is_ascii_whitespace() => (None, i + 1),
                _ => (Some(Lexeme::Operator), i + 1),
            };
            if let Some(lexeme) = lexeme {
                if !sink(lexeme, i) {
                    return;
                }
            }
            i = next.max(i + 1);
        }
    }

    fn lexemes(
        lexer: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool),
        text: &str,
    ) -> Vec<(Lexeme, usize)> {
        let mut out = Vec::new();
        lexer(text, &mut |lexeme, at| {
            out.push((lexeme, at));
            true
        });
        out
    }

    #[test]
    fn the_table_driven_lexer_agrees_with_the_bytewise_one() {
        let table: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool) = |t, s| lex(t, s);
        let bytewise: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool) = |t, s| lex_bytewise(t, s);
        let mut texts: Vec<String> = [
            "",
            " ",
            "r",
            "br",
            "r#",
            "b\"",
            "fn f() { let x = r#\"a\"b\"#; let y = br##\"q\"##; c\"z\"; cr#\"w\"#; }",
            "rb\"x\" bc\"y\" rr#\"z\"# r#ident b'x' '\\n' 'a 'label: loop {}",
            "x\t\n\r\x0b\x0c y // line ( [\n /* block /* nested ( */ */ ) ]",
            "a /b *c /",
            "ünï \"é\" 名前 = [1, 2; 3] <<>>== .. ?",
            "\"unterminated",
            "/* unterminated",
            "r##\"unterminated\"#",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        // Real source: this crate's own Rust files.
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
        for entry in std::fs::read_dir(src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
        assert!(texts.len() > 20);
        for text in &texts {
            let reference = lexemes(bytewise, text);
            assert_eq!(lexemes(table, text), reference, "{text:?}");
            // Stopping early stops both at the same lexeme.
            let mut seen = 0;
            lex(text, |_, _| {
                seen += 1;
                seen < 3
            });
            assert_eq!(seen, reference.len().min(3));
        }
    }

    #[test]
    fn escaped_literals_map_value_offsets_back_to_the_source() {
        use crate::extract::collect::run_offset;
        let token = r#""dw_x{{a=\"{}\",worker_id=\"{}\"}}""#;
        let decoded = decode_literal(token).unwrap();
        let at = decoded.value.find("worker_id").unwrap();
        let source = run_offset(&decoded.runs, at).unwrap();
        assert_eq!(&token[source..source + "worker_id".len()], "worker_id");
        // An escape maps every offset inside it to the backslash.
        let quote = decoded.value.find('"').unwrap();
        assert_eq!(
            &token[run_offset(&decoded.runs, quote).unwrap()..][..2],
            "\\\""
        );
        assert!(decode_literal("\"plain\"").unwrap().runs.is_empty());
    }

    fn strings(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        lex(text, |lexeme, _| {
            if let Lexeme::Str(span) = lexeme {
                out.push(&text[span]);
            }
            true
        });
        out
    }

    #[test]
    fn lexer_skips_comments_chars_and_lifetimes() {
        let text = r####"
            // "line comment"
            /// "doc"
            //! "inner doc"
            /* outer /* "nested" */ "still comment" */
            /** "doc block" */
            fn f<'a>(x: &'a str) -> char { let q = '"'; let e = '\''; 'l: loop {} ; b'"' }
            let s = ("plain \" quote", r#"raw " hash"#, b"bytes", br##"b"#r"##, c"c str");
            let r#type = r"raw"; let w = "multi
            line";
        "####;
        assert_eq!(
            strings(text),
            vec![
                r#""plain \" quote""#,
                r##"r#"raw " hash"#"##,
                r#"b"bytes""#,
                r###"br##"b"#r"##"###,
                r#"c"c str""#,
                r#"r"raw""#,
                "\"multi\n            line\"",
            ]
        );
    }

    #[test]
    fn decoding_handles_escapes_and_raw_forms() {
        let d = decode_literal(r#""a\n\t\\\"\'\0\x41\u{1F600}\u{_41}""#).unwrap();
        assert_eq!(d.value, "a\n\t\\\"'\0A\u{1F600}A");
        assert!(!d.verbatim);
        let d = decode_literal("\"one \\\n    two\"").unwrap();
        assert_eq!(d.value, "one two");
        let d = decode_literal(r###"r##"x"#y"##"###).unwrap();
        assert_eq!(
            (d.kind, &*d.value, d.content.clone(), d.verbatim),
            (LiteralKind::RawStr, "x\"#y", 4..8, true)
        );
        let d = decode_literal(r#"b"\xff:""#).unwrap();
        assert_eq!((d.kind, &*d.value), (LiteralKind::ByteStr, "\u{FFFD}:"));
        assert_eq!(decode_literal(r#"c"x"suffix"#).unwrap().value, "x");
        assert_eq!(decode_literal("\"a\r\nb\"").unwrap().value, "a\nb");
        assert_eq!(decode_literal("12u8"), None);
        assert_eq!(decode_literal("'x'"), None);
        assert_eq!(decode_char(r"'\n'").as_deref(), Some("\n"));
        assert_eq!(decode_char("b'a'").as_deref(), Some("a"));
    }

    #[test]
    fn complexity_check_flags_deep_nesting_and_operator_chains() {
        assert_eq!(too_complex("fn f() { let x = [(1, 2)]; }"), None);
        let deep = format!("fn f() {{ {}1{} }}", "(".repeat(300), ")".repeat(300));
        let (message, at) = too_complex(&deep).unwrap();
        assert!(message.contains("256"), "{message}");
        assert_eq!(at, 9 + 255);
        let chain = format!("fn f() {{ let x = {}1; }}", "!".repeat(2000));
        assert!(too_complex(&chain).is_some());
        // Brackets inside strings and comments do not count.
        let quoted = format!(
            "// {}\nconst S: &str = \"{}\";",
            "(".repeat(300),
            "[".repeat(300)
        );
        assert_eq!(too_complex(&quoted), None);
    }

    #[test]
    fn a_raw_identifier_named_like_a_string_prefix_hides_nothing() {
        let table: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool) = |t, s| lex(t, s);
        let bytewise: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool) = |t, s| lex_bytewise(t, s);
        let deep = format!("{}x{}", "(".repeat(300), ")".repeat(300));
        for name in ["r", "b", "br", "c", "cr"] {
            // `r#b"a\"` read as `r#` and a byte string would end at the
            // second quote and hide the nesting behind an unclosed string.
            let text = format!("let r#{name} = 1; f(r#{name}\"a\\\"b\" {deep});");
            let (message, _) =
                too_complex(&text).unwrap_or_else(|| panic!("nesting hidden in {text:.40}"));
            assert!(message.contains("nest"), "{message}");
            assert_eq!(lexemes(table, &text), lexemes(bytewise, &text));
        }
        // A longer word ending in `r` before `#` is no raw identifier, and
        // a raw string still opens where one can.
        assert_eq!(too_complex(&format!("br#\"{deep}\"#")), None);
        assert_eq!(too_complex(&format!("x = r#\"{deep}\"#")), None);
    }

    #[test]
    fn a_raw_identifier_starts_only_where_rustc_starts_one() {
        let table: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool) = |t, s| lex(t, s);
        let bytewise: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool) = |t, s| lex_bytewise(t, s);
        let deep = format!("{}x{}", "(".repeat(300), ")".repeat(300));
        // Each holds the raw string `r"a\"`, then code nested too deep,
        // then a closed string. Before it: the raw identifier `r#r` and
        // `#`; a string with the suffix `r` and `#`; a char with one; a
        // raw identifier in a lifetime. Read as a raw identifier `r#r`
        // and a plain string `"a\" ((…)) "`, the nesting was hidden.
        for head in [
            "r#r#",
            "\"x\"r#",
            "r#\"x\"#r#",
            "b\"x\"r#",
            "'x'r#",
            "'\\n'r#",
            "'r#r#",
        ] {
            let text = format!("f({head}r\"a\\\" {deep} \"y\");");
            let (message, _) =
                too_complex(&text).unwrap_or_else(|| panic!("nesting hidden in {text:.40}"));
            assert!(message.contains("nest"), "{text:.40}: {message}");
            assert_eq!(lexemes(table, &text), lexemes(bytewise, &text));
        }
        // A suffix is part of its literal: the strings end where rustc
        // ends them.
        assert_eq!(
            strings("\"a\"r \"b\"r\"c\" 'x'r\"d\" b\"e\"_f r#\"g\"#h2 c\"i\"é 'j '\\n'k\"l\""),
            vec![
                "\"a\"r",
                "\"b\"r",
                "\"c\"",
                "\"d\"",
                "b\"e\"_f",
                "r#\"g\"#h2",
                "c\"i\"é",
                "\"l\""
            ]
        );
    }

    #[test]
    fn a_space_beyond_ascii_ends_a_word_as_it_does_for_the_tokenizer() {
        let table: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool) = |t, s| lex(t, s);
        let bytewise: fn(&str, &mut dyn FnMut(Lexeme, usize) -> bool) = |t, s| lex_bytewise(t, s);
        let deep = format!("{}x{}", "(".repeat(300), ")".repeat(300));
        // `\u{85}r` read as one word put no raw string `r#"x"#` (with the
        // suffix `r`) before `"a\"b"`: the guard read `#`, `"x"`, `#`, a
        // raw string `r"a\"b` and a string that ran on over the nesting.
        for space in ['\u{85}', '\u{a0}', '\u{200e}', '\u{2028}', '\u{3000}'] {
            let text = format!("f({space}r#\"x\"#r\"a\\\"b\" {deep} \"z\");");
            assert!(too_complex(&text).is_some(), "{space:?}");
            let text = format!("f(\"x\"{space}r\"a\\\" {deep} \"z\");");
            assert!(too_complex(&text).is_some(), "suffix {space:?}");
            assert_eq!(lexemes(table, &text), lexemes(bytewise, &text));
        }
        // Other characters beyond ASCII stay word bytes.
        assert_eq!(
            strings("é\"a\" 名r\"b\" \u{85}r\"c\""),
            vec!["\"a\"", "\"b\"", "r\"c\""]
        );
    }

    #[test]
    fn a_shebang_line_is_skipped_where_rustc_skips_it_and_hides_nothing() {
        let deep = format!("{}x{}", "(".repeat(300), ")".repeat(300));
        // The line is not Rust: a quote or a comment opener in it opened
        // a string or a comment that hid the code after it.
        for line in [
            "#!/usr/bin/env run \"",
            "#!/x/*",
            "#!/bin/r'x",
            "\u{feff}#!/x\"",
            "#!",
        ] {
            let text = format!("{line}\nfn f() {{ {deep} }}\n// \"\n");
            assert_eq!(code_start(&text), line.len(), "{line}");
            let (message, _) = too_complex(&text).unwrap_or_else(|| panic!("hidden after {line}"));
            assert!(message.contains("nest"), "{message}");
        }
        // `#!` then `[`, past whitespace and comments that are not doc
        // comments, is an inner attribute: its line is code, nesting and all.
        for head in [
            "#![a]",
            "#! [a]",
            "#!/*c*/[a]",
            "#!/**/\t[a]",
            "#!////c\n[a]",
            "#!\u{85}[a]",
            "\u{feff}#![a]",
        ] {
            let text = format!("{head} fn f() {{ {deep} }}");
            let bom = if head.starts_with('\u{feff}') { 3 } else { 0 };
            assert_eq!(code_start(&text), bom, "{head}");
            assert!(too_complex(&text).is_some(), "{head}");
        }
        // A doc comment or anything else first: a shebang line.
        for head in [
            "#!/// d\n[a]",
            "#!/** d */[a]",
            "#!//! d\n[a]",
            "#!/*! d */[a]",
            "#!x[a]",
            "#!/* open",
        ] {
            let first_line = head.find('\n').unwrap_or(head.len());
            assert_eq!(code_start(head), first_line, "{head}");
        }
        assert_eq!(code_start(""), 0);
        assert_eq!(code_start("\u{feff}"), 3);
    }

    #[test]
    fn the_byte_count_shortcut_never_changes_the_verdict() {
        let head = "fn f() {";
        let mut cases = vec![String::new(), "(".repeat(300)];
        for extra in [254, 255, 256, 257] {
            // Nesting right at the limit, in code and inside a literal.
            cases.push(format!(
                "{head}{}1{} }}",
                "(".repeat(extra),
                ")".repeat(extra)
            ));
            cases.push(format!("{head} \"{}\" }}", "[".repeat(extra + 1)));
        }
        for run in [1023, 1024, 1025, 1026] {
            cases.push(format!("{head} let x = {}1; }}", "!".repeat(run)));
            cases.push(format!("{head} let x = {}1; }}", "-/".repeat(run / 2)));
            cases.push(format!("{head} // {}\n}}", "*".repeat(run)));
            cases.push(format!("{head} a{}b }}", "+é".repeat(run / 2)));
        }
        for text in &cases {
            assert_eq!(too_complex(text), too_complex_lexed(text), "{text}");
        }
        assert!(cases.iter().any(|t| too_complex(t).is_some()));
        assert!(cases.iter().any(|t| !may_be_too_complex(t.as_bytes())));
        assert!(cases
            .iter()
            .any(|t| may_be_too_complex(t.as_bytes()) && too_complex(t).is_none()));
    }
}
