//! Token trees over the lexer's flat tokens.
//!
//! The extraction rules read token trees the way `proc-macro2` shapes them
//! (`[Ident, Punct('!'), Group]`, comma-separated arguments), so this module
//! gives the flat token list that view: a level of a tree is the list of
//! token indices at one nesting depth, a group standing for all it holds.
//! Everything here is a query; nothing allocates but [`Src::level`] (and
//! [`Src::level_into`] when the buffer it is given must grow).

use std::ops::Range;

use super::rust_lex::{Delim, Kind, Token};
use super::{lexical, LiteralKind};

/// One file's text and tokens.
#[derive(Clone, Copy)]
pub(crate) struct Src<'t> {
    pub text: &'t str,
    pub toks: &'t [Token],
}

impl<'t> Src<'t> {
    pub fn kind(&self, i: u32) -> Kind {
        self.toks[i as usize].kind
    }

    /// The token's bytes (a group: its opening delimiter).
    pub fn text_of(&self, i: u32) -> &'t str {
        let t = &self.toks[i as usize];
        &self.text[t.start as usize..t.end as usize]
    }

    /// Where the token starts.
    pub fn start(&self, i: u32) -> usize {
        self.toks[i as usize].start as usize
    }

    /// Where the token ends; a group ends after its closing delimiter.
    pub fn end(&self, i: u32) -> usize {
        let t = &self.toks[i as usize];
        match t.kind {
            Kind::Open(_) => self.toks[t.close as usize].end as usize,
            _ => t.end as usize,
        }
    }

    pub fn span(&self, i: u32) -> Range<usize> {
        self.start(i)..self.end(i)
    }

    /// The identifier's text as written (`r#type` stays raw).
    pub fn ident(&self, i: Option<&u32>) -> Option<&'t str> {
        let &i = i?;
        (self.kind(i) == Kind::Ident).then(|| self.text_of(i))
    }

    pub fn is_ident(&self, i: Option<&u32>, name: &str) -> bool {
        self.ident(i) == Some(name)
    }

    pub fn punct(&self, i: Option<&u32>) -> Option<(u8, bool)> {
        match self.kind(*i?) {
            Kind::Punct { ch, joint } => Some((ch, joint)),
            _ => None,
        }
    }

    pub fn is_punct(&self, i: Option<&u32>, c: u8) -> bool {
        self.punct(i).is_some_and(|(ch, _)| ch == c)
    }

    pub fn is_literal(&self, i: Option<&u32>) -> bool {
        i.is_some_and(|&i| matches!(self.kind(i), Kind::Str | Kind::OtherLit))
    }

    /// The delimiter of a group (a doc comment's `[doc = …]` counts as a
    /// bracket group).
    pub fn group(&self, i: Option<&u32>) -> Option<Delim> {
        match self.kind(*i?) {
            Kind::Open(delim) => Some(delim),
            Kind::Doc => Some(Delim::Bracket),
            _ => None,
        }
    }

    /// The tokens one level inside group `open`.
    pub fn level(&self, open: u32) -> Vec<u32> {
        let t = &self.toks[open as usize];
        if !matches!(t.kind, Kind::Open(_)) {
            return Vec::new();
        }
        self.level_in(open + 1, t.close)
    }

    /// [`Src::level`] written into `out` (cleared first): a walker that
    /// reuses its buffers allocates once per nesting depth, not per group.
    pub fn level_into(&self, open: u32, out: &mut Vec<u32>) {
        out.clear();
        let t = &self.toks[open as usize];
        if !matches!(t.kind, Kind::Open(_)) {
            return;
        }
        self.level_in_into(open + 1, t.close, out);
    }

    /// [`Src::level_in`] written into `out` (cleared first).
    pub fn level_in_into(&self, from: u32, to: u32, out: &mut Vec<u32>) {
        out.clear();
        let mut i = from;
        while i < to {
            out.push(i);
            i = match self.toks[i as usize].kind {
                Kind::Open(_) => self.toks[i as usize].close + 1,
                _ => i + 1,
            };
        }
    }

    /// The top-level tokens of `from..to`.
    pub fn level_in(&self, from: u32, to: u32) -> Vec<u32> {
        let next = |i: u32| match self.toks[i as usize].kind {
            Kind::Open(_) => self.toks[i as usize].close + 1,
            _ => i + 1,
        };
        // Counted first, so the level is one allocation of its exact size:
        // growing it token by token was most of the walk's allocating.
        let mut len = 0;
        let mut i = from;
        while i < to {
            len += 1;
            i = next(i);
        }
        let mut out = Vec::with_capacity(len);
        let mut i = from;
        while i < to {
            out.push(i);
            i = next(i);
        }
        out
    }

    /// Whether group `g` starts with the identifier `doc`.
    pub fn starts_with_doc(&self, g: u32) -> bool {
        match self.kind(g) {
            Kind::Doc => true,
            Kind::Open(_) => {
                let first = g + 1;
                first < self.toks[g as usize].close && self.is_ident(Some(&first), "doc")
            }
            _ => false,
        }
    }

    /// `Ident :: method (…)` at `t[i]`, with `method` one of `methods`: the
    /// argument group.
    pub fn path_call(&self, t: &[u32], i: usize, methods: &[&str]) -> Option<u32> {
        let w = t.get(i..i + 5)?;
        let ok = self.ident(Some(&w[0])).is_some()
            && self.punct(Some(&w[1])) == Some((b':', true))
            && self.is_punct(Some(&w[2]), b':')
            && self
                .ident(Some(&w[3]))
                .is_some_and(|m| methods.contains(&m))
            && self.kind(w[4]) == Kind::Open(Delim::Paren);
        ok.then_some(w[4])
    }

    /// Index of the first token of the `a::b::name` path ending at `i`.
    pub fn path_start(&self, t: &[u32], mut i: usize) -> usize {
        while i >= 3
            && self.is_punct(Some(&t[i - 1]), b':')
            && self.is_punct(Some(&t[i - 2]), b':')
            && self.ident(Some(&t[i - 3])).is_some()
        {
            i -= 3;
        }
        i
    }

    /// `target: …` / `level: …` arguments of `metrics` macros (not `a::b`).
    pub fn is_named_arg(&self, arg: &[u32]) -> bool {
        self.ident(arg.first()).is_some() && self.punct(arg.get(1)) == Some((b':', false))
    }

    /// The key of a `key => value` argument.
    pub fn pair_key<'a>(&self, arg: &'a [u32]) -> Option<&'a [u32]> {
        let at = arg.windows(2).position(|w| {
            self.punct(Some(&w[0])) == Some((b'=', true)) && self.is_punct(Some(&w[1]), b'>')
        })?;
        Some(&arg[..at])
    }

    pub fn is_number(&self, arg: &[u32]) -> bool {
        let arg = match arg {
            [minus, rest @ ..] if self.is_punct(Some(minus), b'-') => rest,
            _ => arg,
        };
        matches!(arg, [lit] if self.is_literal(Some(lit))
            && self.text_of(*lit).starts_with(|c: char| c.is_ascii_digit()))
    }

    /// `arg` without one leading `&`.
    pub fn strip_ref<'a>(&self, arg: &'a [u32]) -> &'a [u32] {
        match arg {
            [amp, rest @ ..] if self.is_punct(Some(amp), b'&') => rest,
            _ => arg,
        }
    }

    /// Top-level comma-separated arguments; a trailing comma adds nothing.
    pub fn split_args<'a>(&self, tokens: &'a [u32]) -> Vec<&'a [u32]> {
        self.args(tokens).collect()
    }

    /// [`Src::split_args`] one argument at a time, for a caller that reads
    /// them in order once (a vector of them was an allocation per macro).
    pub fn args<'a>(&self, tokens: &'a [u32]) -> impl Iterator<Item = &'a [u32]> + use<'a, 't> {
        let src = *self;
        let mut pieces = tokens
            .split(move |t| src.is_punct(Some(t), b','))
            .peekable();
        std::iter::from_fn(move || {
            let piece = pieces.next()?;
            // Only the last piece can be dropped: what a trailing comma
            // (or no tokens at all) leaves.
            (!piece.is_empty() || pieces.peek().is_some()).then_some(piece)
        })
    }
}

/// What `concat!` makes of one literal token `repr` (`negative` when a
/// `-` precedes it): strings and chars as their value, numbers as
/// [`number_text`]; `None` for anything `concat!` would reject.
pub(crate) fn concat_piece(repr: &str, negative: bool) -> Option<String> {
    let first = repr.bytes().next()?;
    if first.is_ascii_digit() {
        return number_text(repr).map(|n| if negative { format!("-{n}") } else { n });
    }
    if negative {
        return None;
    }
    if first == b'\'' {
        return lexical::decode_char(repr);
    }
    let decoded = lexical::decode_literal(repr)?;
    matches!(decoded.kind, LiteralKind::Str | LiteralKind::RawStr)
        .then(|| decoded.value.into_owned())
}

/// What `concat!` makes of a number token: integers in decimal, floats as
/// written; suffixes and `_` dropped.
pub(crate) fn number_text(repr: &str) -> Option<String> {
    let digits: String = repr.chars().filter(|&c| c != '_').collect();
    let (radix, body) = match digits.get(..2) {
        Some("0x") => (16, &digits[2..]),
        Some("0o") => (8, &digits[2..]),
        Some("0b") => (2, &digits[2..]),
        _ => (10, &digits[..]),
    };
    let is_float = radix == 10
        && (body.contains('.')
            || body.contains(['e', 'E'])
            || body.ends_with("f32")
            || body.ends_with("f64"));
    if is_float {
        let end = body.find('f').unwrap_or(body.len());
        return Some(body[..end].to_owned());
    }
    let end = body.find(['i', 'u']).unwrap_or(body.len());
    u128::from_str_radix(&body[..end], radix)
        .ok()
        .map(|n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::rust_lex::tokenize;

    #[test]
    fn arguments_read_one_by_one_are_the_split_and_popped_ones() {
        let mut texts = vec![
            "f!(a, b,, c,)".to_owned(),
            "f!(,)".to_owned(),
            "f!()".to_owned(),
        ];
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
        for entry in std::fs::read_dir(src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
        let mut trailing = 0;
        for text in &texts {
            let toks = tokenize(text, 0).unwrap();
            let src = Src { text, toks: &toks };
            for open in 0..toks.len() as u32 {
                let level = src.level(open);
                // What `split_args` was: every piece, then a last empty one popped.
                let mut split: Vec<&[u32]> = level.split(|t| src.is_punct(Some(t), b',')).collect();
                if split.last().is_some_and(|a| a.is_empty()) {
                    split.pop();
                    trailing += usize::from(!level.is_empty());
                }
                assert_eq!(
                    src.args(&level).collect::<Vec<_>>(),
                    split,
                    "group {open} of {text:?}"
                );
            }
        }
        assert!(trailing > 50, "{trailing}");
    }

    #[test]
    fn a_level_written_into_a_reused_buffer_is_the_allocated_level() {
        let mut texts = vec![
            "fn f() { g(a, [1, 2], { h!(x) }); } /// doc\nstruct S;".to_owned(),
            "()".to_owned(),
            "x".to_owned(),
        ];
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
        for entry in std::fs::read_dir(src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                texts.push(std::fs::read_to_string(path).unwrap());
            }
        }
        // One buffer for every call, so a stale token would show.
        let mut buffer = vec![u32::MAX; 3];
        let mut groups = 0;
        for text in &texts {
            let toks = tokenize(text, 0).unwrap();
            let src = Src { text, toks: &toks };
            for open in 0..toks.len() as u32 {
                src.level_into(open, &mut buffer);
                assert_eq!(buffer, src.level(open), "token {open} of {text:?}");
                groups += usize::from(!buffer.is_empty());
            }
        }
        assert!(groups > 1_000, "{groups}");
    }
}
