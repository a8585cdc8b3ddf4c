//! Rust source to tokens, without a parser.
//!
//! The Rust extractor needs the token trees `syn` used to give it (idents,
//! punctuation with its spacing, literals, delimited groups) but none of
//! the syntax tree, and building that tree cost more than everything else
//! the gate does on a file. This lexer produces the same tokens as
//! `proc-macro2`'s own (which `syn` parses from), with the same rules: which
//! comments are doc comments (kept, as `#[doc]` attributes are), where a
//! literal ends (escapes, raw strings with up to 255 `#`, byte and C strings,
//! suffixes, floats versus `1.foo()`), char literals versus lifetimes, raw
//! identifiers, and which input cannot be tokenized at all (an unclosed or
//! mismatched delimiter, an unterminated literal or comment, a stray
//! character): that input is reported at the offset where `proc-macro2`
//! stops, so the extractor falls back to the lexical scan exactly when it
//! did before. Tokens are 16 bytes and a group records where it closes, so
//! walking a file never recurses and never allocates per token.

use std::ops::Range;

/// A BOM and a shebang line are not Rust tokens: the tokenizer starts
/// where the nesting guard does.
pub(crate) use super::lexical::code_start;

/// A delimiter of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delim {
    Paren,
    Bracket,
    Brace,
}

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An identifier or keyword (`r#type` included, its text kept raw).
    Ident,
    /// One punctuation character; `joint` when another follows at once
    /// (`::`, `=>`, the `'` of a lifetime).
    Punct { ch: u8, joint: bool },
    /// A string, byte string or C string literal (raw or not, suffix
    /// included).
    Str,
    /// Any other literal: char, byte, number.
    OtherLit,
    /// An opening delimiter; the group ends at token `close`.
    Open(Delim),
    /// A closing delimiter.
    Close,
    /// The bracketed `[doc = "…"]` a doc comment stands for (after its `#`
    /// and, for an inner one, `!`): a group that starts with `doc`.
    Doc,
}

/// One token: its kind, its bytes, and for an `Open` the index of its
/// `Close`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: Kind,
    pub start: u32,
    pub end: u32,
    /// For `Open`: the index of the matching `Close`; otherwise unused.
    pub close: u32,
}

/// `text` cannot be tokenized; `at` is where `proc-macro2` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LexError {
    pub at: usize,
}

/// Tokens of `text[from..]` (offsets are into `text`).
pub(crate) fn tokenize(text: &str, from: usize) -> Result<Vec<Token>, LexError> {
    let mut toks = Vec::new();
    tokenize_into(text, from, &mut toks, &mut Vec::new())?;
    Ok(toks)
}

/// The nesting guard's two measures ([`lexical::too_complex`]: bracket depth
/// and operator runs) as the tokenizer saw them on its way through a file,
/// so that a file need not be lexed a second time for the guard.
///
/// The guard's small lexer and this tokenizer agree on where every
/// comment, string and char literal starts and ends, token by token, on
/// all input that tokenizes, except around a few shapes where the guard's
/// shortcuts read the bytes otherwise: a vertical tab or a non-ASCII space
/// (an operator or a word byte to it), a char escape longer than its
/// window, `'''`. Where they
/// agree, `depth` and `run` are exactly the guard's deepest nesting and
/// longest operator run; `in_step` is `false` when the file holds one of
/// those shapes, and then only the guard itself can say. A differential
/// test holds the two together on generated and real files.
///
/// [`lexical::too_complex`]: super::lexical::too_complex
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GuardView {
    /// The deepest bracket nesting.
    pub depth: usize,
    /// The longest run of operator bytes with no `, ; ( ) [ ] { }` between.
    pub run: usize,
    /// The two lexers read the file alike, so the measures are the guard's.
    pub in_step: bool,
}

impl GuardView {
    /// Whether the guard passes the file for certain: measured in step,
    /// and within both of its limits.
    pub fn clears_guard(&self) -> bool {
        self.in_step
            && self.depth <= super::lexical::MAX_NESTING
            && self.run <= super::lexical::MAX_OPERATOR_RUN
    }
}

/// Whether the guard's lexer takes `c` for a word byte.
const fn guard_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// [`tokenize`] into `toks` (cleared first), with `stack` for the open
/// groups: a caller that tokenizes file after file reuses both buffers
/// instead of allocating them for every file. On an error `toks` holds
/// what was read up to it. On success, what the nesting guard would have
/// measured ([`GuardView`]).
pub(crate) fn tokenize_into(
    text: &str,
    from: usize,
    toks: &mut Vec<Token>,
    stack: &mut Vec<(usize, Delim)>,
) -> Result<GuardView, LexError> {
    let b = text.as_bytes();
    toks.clear();
    stack.clear();
    toks.reserve(text.len() / 4);
    // The guard lexes from `code_start` (past a BOM and a shebang line),
    // and takes a vertical tab for an operator.
    let mut view = GuardView {
        depth: 0,
        run: 0,
        in_step: from == code_start(text) && memchr::memchr(0x0b, b).is_none(),
    };
    let mut run = 0usize;
    let mut i = from;
    loop {
        i = skip_whitespace_noting(text, i, &mut view.in_step);
        if let Some((end, inner)) = doc_comment(text, i) {
            let (start, end32) = (i as u32, end as u32);
            let mut push = |kind| {
                toks.push(Token {
                    kind,
                    start,
                    end: end32,
                    close: 0,
                })
            };
            push(Kind::Punct {
                ch: b'#',
                joint: false,
            });
            if inner {
                push(Kind::Punct {
                    ch: b'!',
                    joint: false,
                });
            }
            push(Kind::Doc);
            i = end;
            continue;
        }
        let Some(&first) = b.get(i) else {
            return match stack.last() {
                None => Ok(view),
                Some(&(open, _)) => Err(LexError {
                    at: toks[open].start as usize,
                }),
            };
        };
        let open = match first {
            b'(' if b.get(i + 1) != Some(&b'/') || !text[i..].starts_with(ERROR) => {
                Some(Delim::Paren)
            }
            b'[' => Some(Delim::Bracket),
            b'{' => Some(Delim::Brace),
            _ => None,
        };
        let close = match first {
            b')' => Some(Delim::Paren),
            b']' => Some(Delim::Bracket),
            b'}' => Some(Delim::Brace),
            _ => None,
        };
        if let Some(delim) = open {
            stack.push((toks.len(), delim));
            view.depth = view.depth.max(stack.len());
            run = 0;
            toks.push(Token {
                kind: Kind::Open(delim),
                start: i as u32,
                end: i as u32 + 1,
                close: 0,
            });
            i += 1;
        } else if let Some(delim) = close {
            match stack.pop() {
                Some((open, opened)) if opened == delim => {
                    let index = toks.len() as u32;
                    toks[open].close = index;
                    toks.push(Token {
                        kind: Kind::Close,
                        start: i as u32,
                        end: i as u32 + 1,
                        close: open as u32,
                    });
                    run = 0;
                    i += 1;
                }
                _ => return Err(LexError { at: i }),
            }
        } else {
            let (kind, end) = leaf(text, i).ok_or(LexError { at: i })?;
            match kind {
                Kind::Punct {
                    ch: b',' | b';', ..
                } => run = 0,
                // A lifetime's quote: the guard steps over it.
                Kind::Punct { ch: b'\'', .. } => {}
                Kind::Punct { .. } => {
                    run += 1;
                    view.run = view.run.max(run);
                }
                // `r#name`: a word, an operator `#` and a word to the guard.
                Kind::Ident => {
                    if b[i] == b'r' && b.get(i + 1) == Some(&b'#') {
                        run += 1;
                        view.run = view.run.max(run);
                    }
                }
                _ => guard_literal(b, i..end, stack.len(), &mut run, &mut view),
            }
            toks.push(Token {
                kind,
                start: i as u32,
                end: end as u32,
                close: 0,
            });
            i = end;
        }
    }
}

/// What the nesting guard makes of the literal at `span` of `b`, `depth`
/// groups deep: a number's `.`, `+` and `-` are operators to it, rustc's
/// `(/*ERROR*/)` a group, a string or a char nothing, unless it reads the
/// literal otherwise (see [`GuardView`]).
fn guard_literal(
    b: &[u8],
    span: Range<usize>,
    depth: usize,
    run: &mut usize,
    view: &mut GuardView,
) {
    let token = &b[span];
    match token[0] {
        b'0'..=b'9' => {
            *run += token.iter().filter(|&&c| !guard_word_byte(c)).count();
            view.run = view.run.max(*run);
        }
        b'(' => {
            // `(/*ERROR*/)`: a group holding a comment to the guard.
            view.depth = view.depth.max(depth + 1);
            *run = 0;
        }
        _ => {
            // A char (`'…'`, `b'…'`): the guard takes `'''` for a
            // lifetime, and looks for an escape's closing quote in the 11
            // bytes from the third after the opening one.
            let quote = usize::from(token[0] == b'b');
            if token.get(quote) == Some(&b'\'') {
                let close = token.iter().rposition(|&c| c == b'\'').unwrap_or(quote);
                let escaped = token.get(quote + 1) == Some(&b'\\');
                if token.get(quote + 1) == Some(&b'\'') || (escaped && close >= quote + 14) {
                    view.in_step = false;
                }
            }
        }
    }
}

/// rustc's stand-in for a failed macro expansion, one literal token.
const ERROR: &str = "(/*ERROR*/)";

#[cfg(test)]
fn skip_whitespace(text: &str, i: usize) -> usize {
    skip_whitespace_noting(text, i, &mut true)
}

/// Steps over whitespace and plain comments from `i`; clears
/// `guard_in_step` at a non-ASCII space, a word byte to the nesting guard.
fn skip_whitespace_noting(text: &str, mut i: usize, guard_in_step: &mut bool) -> usize {
    let b = text.as_bytes();
    while i < b.len() {
        // Indentation and line breaks first, in a tight loop: they are
        // most of the whitespace, and each needs no other test.
        while b.get(i).is_some_and(|&c| ASCII_SPACE[usize::from(c)]) {
            i += 1;
        }
        let Some(rest) = b.get(i..).filter(|rest| !rest.is_empty()) else {
            break;
        };
        if rest[0] == b'/' {
            if rest.starts_with(b"//")
                && (!rest.starts_with(b"///") || rest.starts_with(b"////"))
                && !rest.starts_with(b"//!")
            {
                i = until_newline(text, i).0;
                continue;
            } else if rest.starts_with(b"/**/") {
                i += 4;
                continue;
            } else if rest.starts_with(b"/*")
                && (!rest.starts_with(b"/**") || rest.starts_with(b"/***"))
                && !rest.starts_with(b"/*!")
            {
                match block_comment_end(b, i) {
                    Some(end) => {
                        i = end;
                        continue;
                    }
                    None => return i,
                }
            }
        }
        match rest[0] {
            b' ' | 0x09..=0x0d => {
                i += 1;
                continue;
            }
            c if c.is_ascii() => {}
            _ => {
                let ch = text[i..].chars().next().unwrap_or('\0');
                if ch.is_whitespace() || ch == '\u{200e}' || ch == '\u{200f}' {
                    *guard_in_step = false;
                    i += ch.len_utf8();
                    continue;
                }
            }
        }
        return i;
    }
    i
}

/// The ASCII bytes Rust takes for whitespace: space and `\t` to `\r`.
const ASCII_SPACE: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0x09;
    while c <= 0x0d {
        table[c] = true;
        c += 1;
    }
    table[b' ' as usize] = true;
    table
};

/// The ASCII bytes that continue an identifier.
const ASCII_IDENT_CONTINUE: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 128 {
        let byte = c as u8;
        table[c] = byte == b'_' || byte.is_ascii_alphanumeric();
        c += 1;
    }
    table
};

/// Just past the `*/` closing the (nested) block comment at `start`.
fn block_comment_end(b: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    let upper = b.len().checked_sub(1)?;
    while i < upper {
        if b[i] == b'/' && b[i + 1] == b'*' {
            depth += 1;
            i += 1;
        } else if b[i] == b'*' && b[i + 1] == b'/' {
            depth -= 1;
            if depth == 0 {
                return Some(i + 2);
            }
            i += 1;
        }
        i += 1;
    }
    None
}

/// Where a line comment starting at `i` stops (before `\n`, or before the
/// `\n` of a `\r\n`), and where its content ends.
fn until_newline(text: &str, i: usize) -> (usize, usize) {
    let b = text.as_bytes();
    match memchr::memchr(b'\n', &b[i..]) {
        Some(n) if n > 0 && b[i + n - 1] == b'\r' => (i + n, i + n - 1),
        Some(n) => (i + n, i + n),
        None => (b.len(), b.len()),
    }
}

/// A doc comment at `i`: where it ends and whether it is an inner one.
fn doc_comment(text: &str, i: usize) -> Option<(usize, bool)> {
    let b = text.as_bytes();
    // Every doc comment starts with `/`; this runs before every token.
    if b.get(i) != Some(&b'/') {
        return None;
    }
    let rest = &b[i.min(b.len())..];
    let (end, content, inner) = if rest.starts_with(b"//!") {
        let (end, content_end) = until_newline(text, i + 3);
        (end, i + 3..content_end, true)
    } else if rest.starts_with(b"/*!") {
        let end = block_comment_end(b, i)?;
        (end, i + 3..end - 2, true)
    } else if rest.starts_with(b"///") {
        if rest.get(3) == Some(&b'/') {
            return None;
        }
        let (end, content_end) = until_newline(text, i + 3);
        (end, i + 3..content_end, false)
    } else if rest.starts_with(b"/**") && rest.get(3) != Some(&b'*') {
        let end = block_comment_end(b, i)?;
        (end, i + 3..end.saturating_sub(2).max(i + 3), false)
    } else {
        return None;
    };
    // A bare carriage return is not allowed in a doc comment.
    let content = &b[content.start..content.end.max(content.start)];
    let mut at = 0;
    while let Some(n) = memchr::memchr(b'\r', &content[at..]) {
        if content.get(at + n + 1) != Some(&b'\n') {
            return None;
        }
        at += n + 1;
    }
    Some((end, inner))
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_ascii_alphabetic() || (!c.is_ascii() && unicode_ident::is_xid_start(c))
}

fn is_ident_continue(c: char) -> bool {
    c == '_' || c.is_ascii_alphanumeric() || (!c.is_ascii() && unicode_ident::is_xid_continue(c))
}

fn char_at(text: &str, i: usize) -> Option<char> {
    text.get(i..)?.chars().next()
}

/// One token that is not a delimiter: its kind and end.
fn leaf(text: &str, i: usize) -> Option<(Kind, usize)> {
    // Most tokens are identifiers and punctuation, and for those the first
    // byte alone says which: no literal starts with a letter other than
    // `r`, `b` or `c`, nor with a punctuation byte other than `'`, and no
    // punctuation starts with a letter. The rest take the general path,
    // which tries each kind in turn.
    match text.as_bytes().get(i) {
        Some(b'a'..=b'z' | b'A'..=b'Z' | b'_')
            if !matches!(text.as_bytes()[i], b'r' | b'b' | b'c') =>
        {
            ident_not_raw(text, i).map(|end| (Kind::Ident, end))
        }
        Some(&c) if c != b'\'' && PUNCT_BYTE[usize::from(c)] && punct_char(text, i).is_some() => {
            punct_spacing(text, i, c)
        }
        _ => leaf_in_turn(text, i),
    }
}

/// [`leaf`] trying a literal, punctuation, an identifier and rustc's error
/// stand-in in turn: the path for every token its first byte does not
/// settle, and the reference its shortcut is tested against.
fn leaf_in_turn(text: &str, i: usize) -> Option<(Kind, usize)> {
    if let Some(lit) = literal(text, i) {
        return Some(lit);
    }
    if let Some(p) = punct(text, i) {
        return Some(p);
    }
    if let Some(end) = ident(text, i) {
        return Some((Kind::Ident, end));
    }
    if text[i..].starts_with(ERROR) {
        return Some((Kind::OtherLit, i + ERROR.len()));
    }
    None
}

fn ident(text: &str, i: usize) -> Option<usize> {
    let rest = &text[i..];
    // Every literal prefix starts with `r`, `b` or `c`; testing that byte
    // first spares the ten comparisons for nearly every identifier.
    let literal_prefix = matches!(rest.as_bytes().first(), Some(b'r' | b'b' | b'c'))
        && [
            "r\"", "r#\"", "r##", "b\"", "b'", "br\"", "br#", "c\"", "cr\"", "cr#",
        ]
        .iter()
        .any(|p| rest.starts_with(p));
    if literal_prefix {
        return None;
    }
    ident_any(text, i)
}

/// An identifier at `i`, raw or not: its end.
fn ident_any(text: &str, i: usize) -> Option<usize> {
    let raw = text[i..].starts_with("r#");
    let start = i + if raw { 2 } else { 0 };
    let end = ident_not_raw(text, start)?;
    if raw && matches!(&text[start..end], "_" | "super" | "self" | "Self" | "crate") {
        return None;
    }
    Some(end)
}

fn ident_not_raw(text: &str, i: usize) -> Option<usize> {
    // Nearly every identifier is ASCII: its bytes are checked one by one,
    // and only a non-ASCII byte sends the rest to the `char` path below.
    let b = text.as_bytes();
    if let Some(&first) = b.get(i).filter(|c| c.is_ascii()) {
        if !(first == b'_' || first.is_ascii_alphabetic()) {
            return None;
        }
        let mut end = i + 1;
        while let Some(&c) = b.get(end) {
            if ASCII_IDENT_CONTINUE[usize::from(c)] {
                end += 1;
            } else if c.is_ascii() {
                return Some(end);
            } else {
                return Some(ident_continue_end(text, end));
            }
        }
        return Some(end);
    }
    ident_not_raw_chars(text, i)
}

/// Where the identifier characters from `i` on (none needed) end.
fn ident_continue_end(text: &str, i: usize) -> usize {
    text[i..]
        .char_indices()
        .find(|&(_, c)| !is_ident_continue(c))
        .map_or(text.len(), |(at, _)| i + at)
}

/// [`ident_not_raw`] by `char`s: the path for an identifier that starts
/// with a non-ASCII character, and the reference its ASCII path is tested
/// against.
fn ident_not_raw_chars(text: &str, i: usize) -> Option<usize> {
    let mut chars = text.get(i..)?.char_indices();
    match chars.next() {
        Some((_, c)) if is_ident_start(c) => {}
        _ => return None,
    }
    let mut end = text.len();
    for (at, c) in chars {
        if !is_ident_continue(c) {
            end = i + at;
            break;
        }
    }
    Some(end)
}

/// A punctuation character at `i`, with its spacing.
fn punct(text: &str, i: usize) -> Option<(Kind, usize)> {
    let ch = punct_char(text, i)?;
    punct_spacing(text, i, ch)
}

/// [`punct`] for the punctuation character `ch` at `i` (its caller has
/// already checked it is one, as [`leaf`] has).
fn punct_spacing(text: &str, i: usize, ch: u8) -> Option<(Kind, usize)> {
    let next = i + 1;
    if ch == b'\'' {
        let after = ident_any(text, next)?;
        let b = text.as_bytes();
        if b.get(after) == Some(&b'\'')
            || (b.get(after) == Some(&b'#') && !text[next..].starts_with("r#"))
        {
            return None;
        }
        return Some((Kind::Punct { ch, joint: true }, next));
    }
    let joint = punct_char(text, next).is_some();
    Some((Kind::Punct { ch, joint }, next))
}

/// The bytes that are Rust punctuation, as a table: `punct_char` runs at
/// every token start and once more for each punctuation's spacing.
const PUNCT_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let bytes = b"~!@#$%^&*-=+|;:,<.>/?'";
    let mut n = 0;
    while n < bytes.len() {
        table[bytes[n] as usize] = true;
        n += 1;
    }
    table
};

fn punct_char(text: &str, i: usize) -> Option<u8> {
    let rest = text.as_bytes().get(i..)?;
    let c = *rest.first()?;
    // `//` and `/*` start comments, not punctuation.
    let comment = c == b'/' && matches!(rest.get(1), Some(b'/' | b'*'));
    (PUNCT_BYTE[usize::from(c)] && !comment).then_some(c)
}

/// A literal at `i`: its kind and end.
fn literal(text: &str, i: usize) -> Option<(Kind, usize)> {
    let rest = &text.as_bytes()[i..];
    let string = match rest.first()? {
        b'"' => cooked(text, i + 1, Cooked::Str),
        b'r' => raw(text, i + 1, RawKind::Str),
        b'b' if rest.get(1) == Some(&b'"') => cooked(text, i + 2, Cooked::Bytes),
        b'b' if rest.get(1) == Some(&b'r') => raw(text, i + 2, RawKind::Bytes),
        b'c' if rest.get(1) == Some(&b'"') => cooked(text, i + 2, Cooked::C),
        b'c' if rest.get(1) == Some(&b'r') => raw(text, i + 2, RawKind::C),
        _ => None,
    };
    if let Some(end) = string {
        return Some((Kind::Str, end));
    }
    let other = match rest.first()? {
        b'b' if rest.get(1) == Some(&b'\'') => byte_char(text, i + 2),
        b'\'' => character(text, i + 1),
        b'0'..=b'9' => float(text, i).or_else(|| int(text, i)),
        _ => None,
    };
    other.map(|end| (Kind::OtherLit, end))
}

fn suffix(text: &str, i: usize) -> usize {
    ident_not_raw(text, i).unwrap_or(i)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cooked {
    Str,
    Bytes,
    C,
}

/// The end of a cooked string whose body starts at `i`, with its escapes
/// checked as rustc checks them.
fn cooked(text: &str, i: usize, form: Cooked) -> Option<usize> {
    cooked_from(text, i, form, form == Cooked::Str)
}

/// [`cooked`]; with `jump`, from one `"`, `\\` or `\r` to the next (one
/// `memchr3`), which in a plain string is all the char-by-char loop stops
/// at: every other char it steps over whole. (Byte and C strings also stop
/// at non-ASCII chars and NULs, and take the loop.)
fn cooked_from(text: &str, mut i: usize, form: Cooked, jump: bool) -> Option<usize> {
    let b = text.as_bytes();
    loop {
        if jump {
            i += memchr::memchr3(b'"', b'\\', b'\r', b.get(i..)?)?;
        }
        let c = char_at(text, i)?;
        match c {
            '"' => return Some(suffix(text, i + 1)),
            '\r' => {
                if b.get(i + 1) != Some(&b'\n') {
                    return None;
                }
                i += 2;
            }
            '\\' => {
                let e = *b.get(i + 1)?;
                i += 2;
                match e {
                    b'x' => {
                        let (hi, lo) = (*b.get(i)?, *b.get(i + 1)?);
                        let ok = match form {
                            Cooked::Str => matches!(hi, b'0'..=b'7') && lo.is_ascii_hexdigit(),
                            Cooked::Bytes => hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit(),
                            Cooked::C => {
                                hi.is_ascii_hexdigit()
                                    && lo.is_ascii_hexdigit()
                                    && !(hi == b'0' && lo == b'0')
                            }
                        };
                        if !ok {
                            return None;
                        }
                        i += 2;
                    }
                    b'n' | b'r' | b't' | b'\\' | b'\'' | b'"' => {}
                    b'0' if form != Cooked::C => {}
                    b'u' if form != Cooked::Bytes => {
                        let (value, end) = unicode_escape(text, i)?;
                        if form == Cooked::C && value == '\0' {
                            return None;
                        }
                        i = end;
                    }
                    b'\n' | b'\r' => i = trailing_backslash(b, i, e)?,
                    _ => return None,
                }
            }
            '\0' if form == Cooked::C => return None,
            c if form == Cooked::Bytes && !c.is_ascii() => return None,
            c => i += c.len_utf8(),
        }
    }
}

/// `{…}` after `\u` at `i`: the char and where the escape ends.
fn unicode_escape(text: &str, i: usize) -> Option<(char, usize)> {
    let b = text.as_bytes();
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut value = 0u32;
    let mut len = 0;
    let mut at = i + 1;
    loop {
        let c = *b.get(at)?;
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => 10 + c - b'a',
            b'A'..=b'F' => 10 + c - b'A',
            b'_' if len > 0 => {
                at += 1;
                continue;
            }
            b'}' if len > 0 => return char::from_u32(value).map(|ch| (ch, at + 1)),
            _ => return None,
        };
        if len == 6 {
            return None;
        }
        value = value * 16 + u32::from(digit);
        len += 1;
        at += 1;
    }
}

/// After a backslash-newline (`last` is the `\n` or `\r` just consumed,
/// `i` the byte after it): where the string body resumes.
fn trailing_backslash(b: &[u8], mut i: usize, mut last: u8) -> Option<usize> {
    loop {
        if last == b'\r' {
            if b.get(i) != Some(&b'\n') {
                return None;
            }
            i += 1;
        }
        match b.get(i) {
            Some(&c @ (b' ' | b'\t' | b'\n' | b'\r')) => {
                last = c;
                i += 1;
            }
            Some(_) => return Some(i),
            None => return None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RawKind {
    Str,
    Bytes,
    C,
}

/// The end of a raw string whose `#…"` starts at `i`.
fn raw(text: &str, i: usize, form: RawKind) -> Option<usize> {
    let b = text.as_bytes();
    let hashes = b[i.min(b.len())..]
        .iter()
        .take_while(|&&c| c == b'#')
        .count();
    if b.get(i + hashes) != Some(&b'"') || hashes > 255 {
        return None;
    }
    let mut at = i + hashes + 1;
    loop {
        let c = *b.get(at)?;
        match c {
            b'"' if b[at + 1..].len() >= hashes
                && b[at + 1..at + 1 + hashes].iter().all(|&h| h == b'#') =>
            {
                return Some(suffix(text, at + 1 + hashes));
            }
            b'\r' => {
                if b.get(at + 1) != Some(&b'\n') {
                    return None;
                }
                at += 2;
            }
            0 if form == RawKind::C => return None,
            c if form == RawKind::Bytes && !c.is_ascii() => return None,
            _ => at += 1,
        }
    }
}

/// `b'…'` whose body starts at `i`.
fn byte_char(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut at = i;
    match *b.get(at)? {
        b'\\' => {
            at += 1;
            match *b.get(at)? {
                b'x' => {
                    if !(b.get(at + 1)?.is_ascii_hexdigit() && b.get(at + 2)?.is_ascii_hexdigit()) {
                        return None;
                    }
                    at += 3;
                }
                b'n' | b'r' | b't' | b'\\' | b'0' | b'\'' | b'"' => at += 1,
                _ => return None,
            }
        }
        _ => at += 1,
    }
    if !text.is_char_boundary(at.min(text.len())) || b.get(at) != Some(&b'\'') {
        return None;
    }
    Some(suffix(text, at + 1))
}

/// `'…'` whose body starts at `i`.
fn character(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    let first = char_at(text, i)?;
    let mut at = i + first.len_utf8();
    if first == '\\' {
        let e = *b.get(at)?;
        at += 1;
        match e {
            b'x' => {
                if !(matches!(b.get(at)?, b'0'..=b'7') && b.get(at + 1)?.is_ascii_hexdigit()) {
                    return None;
                }
                at += 2;
            }
            b'u' => at = unicode_escape(text, at)?.1,
            b'n' | b'r' | b't' | b'\\' | b'0' | b'\'' | b'"' => {}
            _ => return None,
        }
    }
    // The body is one character: the next one must be the quote.
    if b.get(at) != Some(&b'\'') {
        return None;
    }
    Some(suffix(text, at + 1))
}

fn word_break(text: &str, i: usize) -> Option<usize> {
    match char_at(text, i) {
        Some(c) if is_ident_continue(c) => None,
        _ => Some(i),
    }
}

/// A literal's suffix (`u8`, `f32`), then a word break.
fn with_suffix(text: &str, i: usize) -> Option<usize> {
    let end = match char_at(text, i) {
        Some(c) if is_ident_start(c) => ident_not_raw(text, i)?,
        _ => i,
    };
    word_break(text, end)
}

fn float(text: &str, i: usize) -> Option<usize> {
    with_suffix(text, float_digits(text, i)?)
}

fn float_digits(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut at = i + 1;
    let mut has_dot = false;
    let mut has_exp = false;
    while let Some(&c) = b.get(at) {
        match c {
            b'0'..=b'9' | b'_' => at += 1,
            b'.' => {
                if has_dot {
                    break;
                }
                at += 1;
                if char_at(text, at).is_some_and(|c| c == '.' || is_ident_start(c)) {
                    return None;
                }
                has_dot = true;
            }
            b'e' | b'E' => {
                at += 1;
                has_exp = true;
                break;
            }
            _ => break,
        }
    }
    if !(has_dot || has_exp) {
        return None;
    }
    if has_exp {
        let before_exp = has_dot.then_some(at - 1);
        let mut has_sign = false;
        let mut has_value = false;
        while let Some(&c) = b.get(at) {
            match c {
                b'+' | b'-' => {
                    if has_value {
                        break;
                    }
                    if has_sign {
                        return before_exp;
                    }
                    has_sign = true;
                    at += 1;
                }
                b'0'..=b'9' => {
                    has_value = true;
                    at += 1;
                }
                b'_' => at += 1,
                _ => break,
            }
        }
        if !has_value {
            return before_exp;
        }
    }
    Some(at)
}

fn int(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    let rest = &b[i..];
    let (base, mut at) = if rest.starts_with(b"0x") {
        (16, i + 2)
    } else if rest.starts_with(b"0o") {
        (8, i + 2)
    } else if rest.starts_with(b"0b") {
        (2, i + 2)
    } else {
        (10, i)
    };
    let mut empty = true;
    while let Some(&c) = b.get(at) {
        let digit = match c {
            b'0'..=b'9' => {
                if u32::from(c - b'0') >= base {
                    return None;
                }
                at += 1;
                empty = false;
                continue;
            }
            b'a'..=b'f' => 10 + u32::from(c - b'a'),
            b'A'..=b'F' => 10 + u32::from(c - b'A'),
            b'_' => {
                if empty && base == 10 {
                    return None;
                }
                at += 1;
                continue;
            }
            _ => break,
        };
        if digit >= base {
            break;
        }
        at += 1;
        empty = false;
    }
    if empty {
        return None;
    }
    with_suffix(text, at)
}

#[cfg(test)]
#[path = "rust_lex_guard_tests.rs"]
mod guard_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// Identifiers of every shape, ASCII and not, next to literal prefixes
    /// and punctuation, so every offset starts something different.
    const IDENT_MIX: &str = "fn _x9(a_b: Ünï, 名前: r#type) -> café_2 { b\"x\" r#\"y\"# br##\"z\"## c\"w\" cr#\"v\"# b'q' r#a ba cr cx_é ß\u{200d}x _ __ x\u{301}y; 9a }";

    #[test]
    fn the_ascii_identifier_path_ends_where_the_char_path_does() {
        for (i, _) in IDENT_MIX.char_indices().chain([(IDENT_MIX.len(), ' ')]) {
            assert_eq!(
                ident_not_raw(IDENT_MIX, i),
                ident_not_raw_chars(IDENT_MIX, i),
                "at {i}: {:?}",
                &IDENT_MIX[i..]
            );
        }
        // Ends of text and non-ASCII continuations after an ASCII start.
        for text in ["a", "ab", "aé", "aé ", "a\u{301}", "_", "a-b", "é"] {
            assert_eq!(
                ident_not_raw(text, 0),
                ident_not_raw_chars(text, 0),
                "{text:?}"
            );
        }
        assert_eq!(ident_not_raw("xé+", 0), Some(3));
        assert_eq!(ident_not_raw("9", 0), None);
    }

    #[test]
    fn a_token_its_first_byte_settles_ends_where_trying_each_kind_ends_it() {
        let mut texts = vec![
            IDENT_MIX.to_owned(),
            "a::b=>c..=d 'x 'y' b'z' r\"q\" r#r rb _9 __ x/y // c\n/* d */ /// e\n#![a] $x@y~z^w%v?u|t&s!r<q>p*o-n+m,l;k:j.i #[doc] (/*ERROR*/) 1.5e3f32 0x_f 'static".to_owned(),
        ];
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
        for entry in std::fs::read_dir(src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
        let mut settled = 0;
        for text in &texts {
            for (i, _) in text.char_indices() {
                let reference = leaf_in_turn(text, i);
                assert_eq!(leaf(text, i), reference, "at {i}: {:?}", &text[i..]);
                settled += usize::from(reference.is_some());
            }
        }
        assert!(settled > 10_000, "{settled}");
    }

    #[test]
    fn a_plain_string_jumped_through_ends_where_the_char_loop_ends_it() {
        let mut texts = vec![
            IDENT_MIX.to_owned(),
            "\"a\\\"b\" \"é\\u{e9}\\x41\" \"\\x80\" \"\\u{d800}\" \"x\r\ny\" \"x\ry\" \"\\\n  z\"s \"\\q\" \"ok\"suffix_é \"end".to_owned(),
            "\"".to_owned(),
            "\"\\".to_owned(),
            "\"abc\r".to_owned(),
        ];
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
        for entry in std::fs::read_dir(src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
        let mut ended = 0;
        for text in &texts {
            // Every offset a string body could start at, ends included.
            for (i, _) in text.char_indices().chain([(text.len(), ' ')]) {
                let reference = cooked_from(text, i, Cooked::Str, false);
                assert_eq!(
                    cooked_from(text, i, Cooked::Str, true),
                    reference,
                    "at {i}: {:?}",
                    &text[i..]
                );
                ended += usize::from(reference.is_some());
            }
        }
        assert!(ended > 10_000, "{ended}");
    }

    #[test]
    fn the_punctuation_table_holds_the_bytes_proc_macro2_takes_for_punctuation() {
        // proc-macro2's list, and every byte followed by each of `/`, `*`, `x`.
        let listed: &[u8] = b"~!@#$%^&*-=+|;:,<.>/?'";
        for byte in 0..=255u8 {
            for next in [&b"/"[..], b"*", b"x", b""] {
                let text = [&[byte][..], next].concat();
                let Ok(text) = std::str::from_utf8(&text) else {
                    continue;
                };
                let comment = text.starts_with("//") || text.starts_with("/*");
                let want = (listed.contains(&byte) && !comment).then_some(byte);
                assert_eq!(punct_char(text, 0), want, "{text:?}");
            }
        }
    }

    /// `skip_whitespace` as it was, one whitespace byte per turn of the
    /// loop that also tests for comments.
    fn skip_whitespace_bytewise(text: &str, mut i: usize) -> usize {
        let b = text.as_bytes();
        while i < b.len() {
            let rest = &b[i..];
            if rest[0] == b'/' {
                if rest.starts_with(b"//")
                    && (!rest.starts_with(b"///") || rest.starts_with(b"////"))
                    && !rest.starts_with(b"//!")
                {
                    i = until_newline(text, i).0;
                    continue;
                } else if rest.starts_with(b"/**/") {
                    i += 4;
                    continue;
                } else if rest.starts_with(b"/*")
                    && (!rest.starts_with(b"/**") || rest.starts_with(b"/***"))
                    && !rest.starts_with(b"/*!")
                {
                    match block_comment_end(b, i) {
                        Some(end) => {
                            i = end;
                            continue;
                        }
                        None => return i,
                    }
                }
            }
            match rest[0] {
                b' ' | 0x09..=0x0d => {
                    i += 1;
                    continue;
                }
                c if c.is_ascii() => {}
                _ => {
                    let ch = text[i..].chars().next().unwrap_or('\0');
                    if ch.is_whitespace() || ch == '\u{200e}' || ch == '\u{200f}' {
                        i += ch.len_utf8();
                        continue;
                    }
                }
            }
            return i;
        }
        i
    }

    #[test]
    fn whitespace_runs_end_where_the_bytewise_skip_ends_them() {
        let mut texts = vec![
            "  \t\n\x0b\x0c\r x \u{a0}\u{200e} // c\n  /* b /* n */ */ /// d\n /**/ /*! e */ \u{2028}y   ".to_owned(),
            "   /* unterminated".to_owned(),
            "\n\n\n".to_owned(),
        ];
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
        for entry in std::fs::read_dir(src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
        let mut moved = 0;
        for text in &texts {
            for (i, _) in text.char_indices().chain([(text.len(), ' ')]) {
                let reference = skip_whitespace_bytewise(text, i);
                assert_eq!(
                    skip_whitespace(text, i),
                    reference,
                    "at {i}: {:?}",
                    &text[i..]
                );
                moved += usize::from(reference > i);
            }
        }
        assert!(moved > 10_000, "{moved}");
        // The byte tables say what the tests they replaced said.
        for c in 0..=255u8 {
            assert_eq!(
                ASCII_SPACE[usize::from(c)],
                matches!(c, b' ' | 0x09..=0x0d),
                "{c}"
            );
            assert_eq!(
                ASCII_IDENT_CONTINUE[usize::from(c)],
                c == b'_' || c.is_ascii_alphanumeric(),
                "{c}"
            );
        }
    }

    #[test]
    fn the_first_byte_test_keeps_every_literal_prefix_out_of_identifiers() {
        let prefixes = [
            "r\"", "r#\"", "r##", "b\"", "b'", "br\"", "br#", "c\"", "cr\"", "cr#",
        ];
        for (i, _) in IDENT_MIX.char_indices() {
            let rest = &IDENT_MIX[i..];
            let reference = match prefixes.iter().any(|p| rest.starts_with(p)) {
                true => None,
                false => ident_any(IDENT_MIX, i),
            };
            assert_eq!(ident(IDENT_MIX, i), reference, "at {i}: {rest:?}");
        }
    }

    fn kinds(text: &str) -> Vec<(&str, Kind)> {
        tokenize(text, 0)
            .unwrap()
            .iter()
            .map(|t| (&text[t.start as usize..t.end as usize], t.kind))
            .collect()
    }

    fn texts(text: &str) -> Vec<&str> {
        kinds(text).into_iter().map(|(s, _)| s).collect()
    }

    #[test]
    fn literals_end_where_rustc_ends_them() {
        assert_eq!(
            texts(
                r####"r#"a"b"# br##"x"## c"c" b"b\x7f" "s\"q"suffix r#type 'a' b'\'' 1.5f32 1.foo 1..2 0x1Fu8 1e-3"####
            ),
            vec![
                r##"r#"a"b"#"##,
                r###"br##"x"##"###,
                r#"c"c""#,
                r#"b"b\x7f""#,
                r#""s\"q"suffix"#,
                "r#type",
                "'a'",
                r"b'\''",
                "1.5f32",
                "1",
                ".",
                "foo",
                "1",
                ".",
                ".",
                "2",
                "0x1Fu8",
                "1e-3",
            ]
        );
    }

    #[test]
    fn lifetimes_are_a_joint_quote_and_an_ident() {
        let k = kinds("&'a str 'l: loop");
        assert_eq!(
            k[0].1,
            Kind::Punct {
                ch: b'&',
                joint: true
            }
        );
        assert_eq!(
            k[1].1,
            Kind::Punct {
                ch: b'\'',
                joint: true
            }
        );
        assert_eq!(k[2], ("a", Kind::Ident));
        assert_eq!(texts("'l: loop"), vec!["'", "l", ":", "loop"]);
    }

    #[test]
    fn doc_comments_become_attributes_and_comments_vanish() {
        let k = kinds(
            "/// outer\n//! inner\n//// plain\n/** block */ /*! inner */ /* /* nested */ */ /**/ x",
        );
        let shapes: Vec<_> = k.iter().map(|(_, kind)| *kind).collect();
        let hash = Kind::Punct {
            ch: b'#',
            joint: false,
        };
        let bang = Kind::Punct {
            ch: b'!',
            joint: false,
        };
        assert_eq!(
            shapes,
            vec![
                hash,
                Kind::Doc,
                hash,
                bang,
                Kind::Doc,
                hash,
                Kind::Doc,
                hash,
                bang,
                Kind::Doc,
                Kind::Ident
            ]
        );
    }

    #[test]
    fn groups_know_where_they_close() {
        let toks = tokenize("f(a, [b], {c})", 0).unwrap();
        assert_eq!(toks[1].kind, Kind::Open(Delim::Paren));
        assert_eq!(toks[toks[1].close as usize].start, 13);
        assert_eq!(toks[4].close, 6);
    }

    #[test]
    fn untokenizable_input_is_reported_where_proc_macro2_stops() {
        // An unclosed group is reported at its opening delimiter, a
        // mismatched close where it stands.
        assert_eq!(tokenize("fn f( { }", 0), Err(LexError { at: 4 }));
        assert_eq!(tokenize("a { ( }", 0), Err(LexError { at: 6 }));
        assert_eq!(tokenize("x [ y", 0), Err(LexError { at: 2 }));
        assert_eq!(tokenize("let s = \"open", 0), Err(LexError { at: 8 }));
        assert_eq!(tokenize("a /* open", 0), Err(LexError { at: 2 }));
        assert_eq!(tokenize("\"\\q\"", 0), Err(LexError { at: 0 }));
        assert_eq!(tokenize("a ` b", 0), Err(LexError { at: 2 }));
        assert_eq!(tokenize("'ab'", 0), Err(LexError { at: 0 }));
        assert!(tokenize("b\"é\"", 0).is_err());
        assert!(tokenize("c\"\\0\"", 0).is_err());
        assert!(tokenize("r##\"x\"#", 0).is_err());
    }
}
