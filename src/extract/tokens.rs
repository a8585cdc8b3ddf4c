//! The token stream every non-Rust lexer produces, and what is done with it
//! the same way for every language.
//!
//! A lexer only has to know its language's comments and string forms; it
//! reduces a file to string literals, words and punctuation. Joining literal
//! concatenations (`'server:' . 'x:'`, `"a" + "b"`, Python's adjacent
//! literals), feeding literals to the collector, and tracking which named
//! brace-delimited declaration a literal sits in are then shared, so no two
//! languages carry their own copy of those loops.

use std::borrow::Cow;
use std::ops::Range;

use super::collect::{Collector, LitInfo, Run};
use super::exposition::find_bytes;
use super::strings::{is_ident_byte, Value};
use super::{ExtractConfig, FileFacts, LiteralKind, SCAN_LIMIT_SUFFIX};

/// One lexeme of a non-Rust file; comments are already gone.
///
/// A file is held as a vector of these, one every few bytes, so a token is
/// kept small: a string whose value is its source as written is a position
/// only ([`PlainStr`], its value read back from the source on demand), the
/// decoded value and positions of any other string sit behind a box, and
/// the rest are offsets. Fat tokens inline made a file cost about 40 times
/// its size; a box per string, about 10 times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    Str(Box<StrTok>),
    /// A string literal whose value is exactly its source between the
    /// delimiters (no escape, no interpolation).
    Plain(PlainStr),
    /// An identifier, keyword, number or variable (`$id` in PHP).
    Word(Span32),
    /// One byte of punctuation, at this offset.
    Punct(u32),
    /// The end of a logical line, for languages where lines matter (Python).
    Newline(u32),
}

/// A byte range of a file the token extractors read: they only read files
/// of at most [`MAX_TOKENIZED`] bytes, so 32-bit offsets hold it in half
/// the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span32 {
    start: u32,
    end: u32,
}

/// The largest text the token extractors read; a larger file is scanned
/// as plain text (see `language::extract_file`).
pub(crate) const MAX_TOKENIZED: usize = u32::MAX as usize;

impl Span32 {
    pub fn new(range: Range<usize>) -> Self {
        Span32 {
            start: offset32(range.start),
            end: offset32(range.end),
        }
    }

    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    pub fn start(self) -> usize {
        self.start as usize
    }
}

/// `at` as a 32-bit offset (saturating: never reached, see [`MAX_TOKENIZED`]).
pub(crate) fn offset32(at: usize) -> u32 {
    u32::try_from(at).unwrap_or(u32::MAX)
}

/// A string literal with its decoded value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StrTok {
    /// The whole token, quotes or heredoc markers included.
    pub span: Range<usize>,
    pub value: Value,
    pub kind: LiteralKind,
    /// The code inside the literal's interpolations (`${…}`, `{…}`).
    pub interpolations: Vec<Range<usize>>,
}

/// A string literal whose value is `text[span.start + open..span.end -
/// close]`, as written: most literals of real code, kept in 12 bytes
/// instead of a boxed [`StrTok`] and read back from the source when a join
/// or a call shape needs the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlainStr {
    span: Span32,
    open: u8,
    close: u8,
    kind: LiteralKind,
}

impl PlainStr {
    /// The plain form of a scanned literal spanning `span`, if its value is
    /// one non-empty run copied verbatim from the source within it.
    fn of(span: Range<usize>, value: &Value, kind: LiteralKind) -> Option<PlainStr> {
        let [run] = value.runs.as_slice() else {
            return None;
        };
        let body_end = run.source_at.checked_add(value.text.len())?;
        if !run.verbatim || run.value_at != 0 || run.source_at < span.start || body_end > span.end {
            return None;
        }
        Some(PlainStr {
            open: u8::try_from(run.source_at - span.start).ok()?,
            close: u8::try_from(span.end - body_end).ok()?,
            span: Span32::new(span),
            kind,
        })
    }

    /// The whole token.
    pub fn span(self) -> Range<usize> {
        self.span.range()
    }

    /// The value, read from the source.
    pub fn value(self, text: &str) -> &str {
        let span = self.span();
        text.get(span.start + usize::from(self.open)..span.end - usize::from(self.close))
            .unwrap_or_default()
    }

    /// The one run of the value.
    fn run(self) -> Run {
        Run {
            value_at: 0,
            source_at: self.span.start() + usize::from(self.open),
            verbatim: true,
        }
    }

    /// The literal as a [`StrTok`] (allocates: only for the few literals a
    /// call shape reads).
    fn to_str_tok(self, text: &str) -> StrTok {
        StrTok {
            span: self.span(),
            value: Value {
                text: self.value(text).to_owned(),
                runs: vec![self.run()],
            },
            kind: self.kind,
            interpolations: Vec::new(),
        }
    }
}

/// The name of a declaration literals sit in.
pub(crate) type Context = std::rc::Rc<str>;

/// The declaration each string token sits in, by token index: the points
/// where it changes, so that a plain token needs no room for it. Tokens at
/// or past `end` (the interpolations' tokens, appended later) sit in none.
#[derive(Debug, Default)]
pub(crate) struct Contexts {
    changes: Vec<(usize, Option<Context>)>,
    end: usize,
}

impl Contexts {
    /// Records that the token at `at` (not before the last recorded one)
    /// sits in `context`.
    pub fn set(&mut self, at: usize, context: Option<&Context>) {
        if self.changes.last().map(|(_, c)| c.as_ref()) != Some(context) {
            self.changes.push((at, context.cloned()));
        }
        self.end = self.end.max(at + 1);
    }

    /// The declaration the token at `at` sits in.
    pub fn at(&self, at: usize) -> Option<&str> {
        if at >= self.end {
            return None;
        }
        let slot = self
            .changes
            .partition_point(|(k, _)| *k <= at)
            .checked_sub(1)?;
        self.changes[slot].1.as_deref()
    }
}

impl Tok {
    /// The byte that this token is, if it is that punctuation.
    pub fn punct(&self, text: &str) -> Option<u8> {
        match self {
            Tok::Punct(at) => text.as_bytes().get(*at as usize).copied(),
            _ => None,
        }
    }

    /// The text of a word token.
    pub fn word<'t>(&self, text: &'t str) -> Option<&'t str> {
        match self {
            Tok::Word(span) => text.get(span.range()),
            _ => None,
        }
    }

    /// Whether this token is a string literal.
    pub fn is_string(&self) -> bool {
        matches!(self, Tok::Str(_) | Tok::Plain(_))
    }

    /// The value of a string token.
    pub fn str_value<'t>(&'t self, text: &'t str) -> Option<&'t str> {
        match self {
            Tok::Str(s) => Some(&s.value.text),
            Tok::Plain(p) => Some(p.value(text)),
            _ => None,
        }
    }

    /// The string literal this token is; a plain one is built from the
    /// source.
    pub fn string(&self, text: &str) -> Option<Cow<'_, StrTok>> {
        match self {
            Tok::Str(s) => Some(Cow::Borrowed(&**s)),
            Tok::Plain(p) => Some(Cow::Owned(p.to_str_tok(text))),
            _ => None,
        }
    }

    /// Calls `f` with the literal of a string token as the collector sees
    /// it (a plain token's value borrowed from the source).
    fn with_lit<R>(&self, text: &str, f: impl FnOnce(&LitInfo<'_>) -> R) -> Option<R> {
        match self {
            Tok::Str(s) => Some(f(&s.lit())),
            Tok::Plain(p) => {
                let run = p.run();
                Some(f(&LitInfo {
                    value: p.value(text).into(),
                    kind: p.kind,
                    span: p.span(),
                    verbatim_at: None,
                    runs: std::slice::from_ref(&run),
                }))
            }
            _ => None,
        }
    }
}

/// How a language writes string concatenation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Join {
    /// The binary operator between two literals (`.` in PHP, `+` elsewhere).
    pub op: Option<u8>,
    /// Whether two literals side by side are one (Python, C-like implicit).
    pub adjacent: bool,
}

impl Join {
    /// No concatenation operator (shell words are already whole, YAML).
    pub const NONE: Join = Join {
        op: None,
        adjacent: false,
    };
    /// `+` (Go, JavaScript).
    pub const PLUS: Join = Join {
        op: Some(b'+'),
        adjacent: false,
    };
}

/// The facts of a lexed file: its literals (joined per `join`, each in the
/// declaration `contexts` gives it), whatever `sites` adds from
/// language-specific call shapes, and its items.
pub(crate) fn into_facts(
    text: &str,
    config: &ExtractConfig,
    toks: &[Tok],
    contexts: &Contexts,
    join: Join,
    items: Vec<String>,
    sites: impl FnOnce(&mut Collector<'_>),
) -> FileFacts {
    let mut collector = Collector::new(text, config);
    feed(&mut collector, text, toks, contexts, join);
    sites(&mut collector);
    collector.finish(items, None)
}

/// Feeds every string literal to the collector, joining literal-only
/// concatenations into one `Concat` literal (the pieces alone are not
/// reported: `'server:'` is not a key, `'server:' . 'x:'` is).
fn feed(collector: &mut Collector<'_>, text: &str, toks: &[Tok], contexts: &Contexts, join: Join) {
    let mut i = 0;
    while i < toks.len() {
        if !toks[i].is_string() {
            i += 1;
            continue;
        }
        let first = i;
        let mut pieces = vec![&toks[i]];
        let mut j = i + 1;
        loop {
            match (toks.get(j), toks.get(j + 1)) {
                (Some(next), _) if join.adjacent && next.is_string() => {
                    pieces.push(next);
                    j += 1;
                }
                (Some(op), Some(next))
                    if join.op.is_some() && op.punct(text) == join.op && next.is_string() =>
                {
                    pieces.push(next);
                    j += 2;
                }
                _ => break,
            }
        }
        i = j;
        let context = contexts.at(first);
        if let [only] = pieces.as_slice() {
            only.with_lit(text, |lit| collector.literal(lit, context));
            continue;
        }
        let mut value = Value::default();
        let mut span: Option<Range<usize>> = None;
        for piece in &pieces {
            piece.with_lit(text, |lit| {
                value.append_lit(&lit.value, lit.runs);
                let start = span.as_ref().map_or(lit.span.start, |s| s.start);
                span = Some(start..lit.span.end);
            });
        }
        let lit = LitInfo {
            value: value.text.as_str().into(),
            kind: LiteralKind::Concat,
            span: span.unwrap_or_default(),
            verbatim_at: None,
            runs: &value.runs,
        };
        collector.literal(&lit, context);
    }
}

/// Brace-delimited declarations (PHP and JS classes, Go types and funcs):
/// a declared name becomes the context of everything inside the next `{…}`.
#[derive(Debug, Default)]
pub(crate) struct Scopes {
    depth: usize,
    open: Vec<(usize, Context)>,
    pending: Option<Context>,
}

impl Scopes {
    /// A declaration whose body is the next `{` (unless a `;` comes first).
    pub fn declare(&mut self, name: String) {
        self.pending = Some(name.into());
    }

    /// Updates the nesting for punctuation `p`.
    pub fn punct(&mut self, p: u8) {
        match p {
            b'{' => {
                self.depth += 1;
                if let Some(name) = self.pending.take() {
                    self.open.push((self.depth, name));
                }
            }
            b'}' => {
                if self.open.last().is_some_and(|(d, _)| *d == self.depth) {
                    self.open.pop();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b';' => self.pending = None,
            _ => {}
        }
    }

    /// The innermost open declaration.
    pub fn current(&self) -> Option<&str> {
        self.open.last().map(|(_, name)| &**name)
    }

    /// The innermost open declaration, shared.
    fn current_context(&self) -> Option<&Context> {
        self.open.last().map(|(_, name)| name)
    }
}

/// The innermost declaration each literal sits in, as computed by
/// `declared` (the language's rule for what a declaration looks like, given
/// the token index and the declaration already open there; it returns the
/// name to open).
pub(crate) fn assign_contexts(
    text: &str,
    toks: &[Tok],
    mut declared: impl FnMut(&[Tok], usize, Option<&str>) -> Option<String>,
) -> Contexts {
    let mut scopes = Scopes::default();
    let mut contexts = Contexts::default();
    for i in 0..toks.len() {
        if let Some(name) = declared(toks, i, scopes.current()) {
            scopes.declare(name);
        }
        if let Some(p) = toks[i].punct(text) {
            scopes.punct(p);
        }
        if toks[i].is_string() {
            contexts.set(i, scopes.current_context());
        }
    }
    contexts
}

/// Whether a literal value could give the collector anything: a cache key,
/// a scan-limit key or a metric name. The shell and YAML lexers, where
/// every word or scalar is a string and nothing joins them, keep only
/// these (and those holding code), which is most of their memory.
pub(crate) fn may_matter(value: &str, config: &ExtractConfig) -> bool {
    let holds = |needle: &str| {
        !needle.is_empty() && find_bytes(value.as_bytes(), needle.as_bytes()).is_some()
    };
    holds(&config.cache_namespace) || holds(&config.metric_prefix) || holds(SCAN_LIMIT_SUFFIX)
}

/// The end of the identifier-like word starting at `i`.
pub(crate) fn word_end(b: &[u8], i: usize, extra: &[u8]) -> usize {
    let mut end = i;
    while end < b.len() && (is_ident_byte(b[end]) || extra.contains(&b[end])) {
        end += 1;
    }
    end
}

/// The index of the first token at or after `i` that is `p`, on the same
/// bracket level, before the level closes.
pub(crate) fn find_punct(text: &str, toks: &[Tok], mut i: usize, p: u8) -> Option<usize> {
    let mut depth = 0usize;
    while let Some(tok) = toks.get(i) {
        match tok.punct(text) {
            Some(c) if c == p && depth == 0 => return Some(i),
            Some(b'(' | b'[' | b'{') => depth += 1,
            Some(b')' | b']' | b'}') => {
                if depth == 0 {
                    return None;
                }
                depth -= 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// What a language adds to the shared lexing loop.
pub(crate) trait Lexer {
    /// A comment, string or other language-specific lexeme at `i`: pushes
    /// the tokens it yields (none for a comment) and returns where it ends;
    /// `None` lets the shared loop read a word, whitespace or punctuation.
    fn special(&mut self, text: &str, i: usize, toks: &mut Vec<Tok>) -> Option<usize>;

    /// Bytes besides `[A-Za-z0-9_]` that continue a word (`$`, `\`).
    fn word_bytes(&self) -> &'static [u8] {
        b""
    }
}

/// Lexes `text[range]` into tokens. Linear, and never stalls: every step
/// advances at least one byte.
pub(crate) fn lex(text: &str, range: Range<usize>, lexer: &mut impl Lexer) -> Vec<Tok> {
    let b = text.as_bytes();
    let end = range.end.min(b.len());
    let mut toks = Vec::new();
    let mut i = range.start;
    while i < end {
        let next = if let Some(stop) = lexer.special(text, i, &mut toks) {
            stop
        } else if is_ident_byte(b[i]) || lexer.word_bytes().contains(&b[i]) {
            let stop = word_end(b, i, lexer.word_bytes()).min(end).max(i + 1);
            toks.push(Tok::Word(Span32::new(i..stop)));
            stop
        } else {
            if !b[i].is_ascii_whitespace() {
                toks.push(Tok::Punct(offset32(i)));
            }
            i + 1
        };
        i = next.clamp(i + 1, end.max(i + 1));
        while i < b.len() && !text.is_char_boundary(i) {
            i += 1;
        }
    }
    toks
}

/// Pushes the string token of a scanned body and returns where it ends.
pub(crate) fn push_string(
    toks: &mut Vec<Tok>,
    start: usize,
    body: super::strings::Body,
    kind: LiteralKind,
) -> usize {
    let kind = if body.interpolated {
        LiteralKind::Interpolated
    } else {
        kind
    };
    let end = body.end;
    let plain = (body.interpolations.is_empty())
        .then(|| PlainStr::of(start..end, &body.value, kind))
        .flatten();
    toks.push(match plain {
        Some(plain) => Tok::Plain(plain),
        None => Tok::Str(Box::new(StrTok {
            span: start..end,
            value: body.value,
            kind,
            interpolations: body.interpolations,
        })),
    });
    end
}

/// How deeply interpolations inside interpolations are followed.
pub(crate) const MAX_INTERPOLATION_DEPTH: usize = 8;

/// The tokens of the code inside the interpolations of `toks`' literals
/// (and of the literals in there, up to [`MAX_INTERPOLATION_DEPTH`]), each
/// interpolation lexed by a `fresh` lexer and preceded by a `Newline` so
/// that nothing joins across. The caller appends them after its own
/// passes over `toks`: an interpolation's literals have no declaration
/// context of their own, and must not split the literal they sit in.
///
/// Each interpolation is lexed on the text cut at its end, so nothing in it
/// reaches past it, and the interpolations of one level that overlap are
/// lexed once: every level reads each byte at most once, whatever the
/// input (overlapping levels once multiplied on broken input, 830 bytes of
/// shell made 380,000 tokens).
pub(crate) fn interpolation_toks<L: Lexer>(
    text: &str,
    toks: &[Tok],
    mut fresh: impl FnMut() -> L,
) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut level = disjoint(interpolations_of(toks));
    for _ in 0..MAX_INTERPOLATION_DEPTH {
        if level.is_empty() {
            break;
        }
        let mut inner = Vec::new();
        for range in level {
            let Some(cut) = text.get(..range.end.min(text.len())) else {
                continue;
            };
            let lexed = lex(cut, range.clone(), &mut fresh());
            inner.extend(interpolations_of(&lexed));
            out.push(Tok::Newline(offset32(range.start)));
            out.extend(lexed);
        }
        level = disjoint(inner);
    }
    out
}

fn interpolations_of(toks: &[Tok]) -> Vec<Range<usize>> {
    toks.iter()
        .filter_map(|t| match t {
            Tok::Str(s) => Some(s.interpolations.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// `ranges` sorted, without empty ones and without any that overlaps one
/// kept before it.
fn disjoint(mut ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut reached = 0;
    ranges.retain(|r| {
        let fresh = r.start >= reached;
        reached = reached.max(r.end);
        fresh
    });
    ranges
}

impl StrTok {
    /// The literal as the collector sees it.
    pub fn lit(&self) -> LitInfo<'_> {
        LitInfo {
            value: self.value.text.as_str().into(),
            kind: self.kind,
            span: self.span.clone(),
            verbatim_at: None,
            runs: &self.value.runs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_two_words_at_most() {
        // A file is a vector of tokens, one every few bytes: a token of 16
        // bytes keeps the extractors near the 8x-the-file memory bound
        // (docs/performance.md), a fat one made it 40x.
        assert!(
            std::mem::size_of::<Tok>() <= 16,
            "{}",
            std::mem::size_of::<Tok>()
        );
    }

    /// A lexer of `"…"` strings with C escapes only.
    struct Quotes;

    impl Lexer for Quotes {
        fn special(&mut self, text: &str, i: usize, toks: &mut Vec<Tok>) -> Option<usize> {
            super::super::clike::comment_or_string(text, i, toks, |open| {
                (open == b'"').then(|| {
                    (
                        super::super::strings::Quote::c_line(b"\""),
                        LiteralKind::Str,
                    )
                })
            })
        }
    }

    #[test]
    fn a_literal_written_as_its_value_is_a_position_only() {
        let text = r#"x = "server:x:" + "a\nb" + "" + "unterminated"#;
        let toks = lex(text, 0..text.len(), &mut Quotes);
        let strings: Vec<&Tok> = toks.iter().filter(|t| t.is_string()).collect();
        assert!(matches!(strings[0], Tok::Plain(_)), "{:?}", strings[0]);
        assert!(
            matches!(strings[1], Tok::Str(_)),
            "an escape: {:?}",
            strings[1]
        );
        assert!(matches!(strings[2], Tok::Str(_)), "empty: {:?}", strings[2]);
        assert!(matches!(strings[3], Tok::Plain(_)), "{:?}", strings[3]);
        let values: Vec<&str> = strings.iter().filter_map(|t| t.str_value(text)).collect();
        assert_eq!(values, ["server:x:", "a\nb", "", "unterminated"]);
        // Read back, a plain literal is what the scanner decoded.
        let Tok::Plain(plain) = strings[0] else {
            unreachable!()
        };
        let built = strings[0].string(text).unwrap();
        assert_eq!(built.span, plain.span());
        assert_eq!(built.span, 4..15);
        assert_eq!(built.value.text, "server:x:");
        assert_eq!(
            built.value.runs,
            [Run {
                value_at: 0,
                source_at: 5,
                verbatim: true
            }]
        );
        let lit = strings[3].with_lit(text, |lit| (lit.span.clone(), lit.runs[0].source_at));
        assert_eq!(lit, Some((text.len() - 13..text.len(), text.len() - 12)));
    }

    #[test]
    fn contexts_are_looked_up_by_token_index() {
        let a: Context = "A".into();
        let mut contexts = Contexts::default();
        contexts.set(2, Some(&a));
        contexts.set(3, Some(&a));
        contexts.set(5, None);
        contexts.set(7, Some(&a));
        let seen: Vec<Option<&str>> = (0..9).map(|i| contexts.at(i)).collect();
        assert_eq!(
            seen,
            [
                None,
                None,
                Some("A"),
                Some("A"),
                Some("A"),
                None,
                None,
                Some("A"),
                None
            ]
        );
    }

    #[test]
    fn offsets_round_trip_through_32_bits() {
        let span = Span32::new(3..MAX_TOKENIZED);
        assert_eq!(span.range(), 3..MAX_TOKENIZED);
        assert_eq!(span.start(), 3);
        assert_eq!(offset32(MAX_TOKENIZED), u32::MAX);
    }
}
