//! The JavaScript and TypeScript extractor.
//!
//! Node-side tooling (load generators, dashboards) writes metric names and
//! keys in `'…'`, `"…"` and template literals, where `${expr}` becomes the
//! placeholder `${}` (normalization cuts a key there). The only hard part
//! of lexing JavaScript is telling a regular expression from a division;
//! the usual rule (a `/` after an operand divides, anywhere else it opens a
//! regex) covers the common cases, so a quote inside `/'/` does not start a
//! string. Comments are skipped; classes and functions give literals their
//! context.

use super::clike::{comment_end, comment_or_string};
use super::strings::{line_end, Escapes, Interp, Quote};
use super::tokens::{assign_contexts, into_facts, lex, Join, Lexer, Tok};
use super::{ExtractConfig, FileFacts, LiteralKind};

/// Facts of one JavaScript or TypeScript file.
pub(crate) fn extract(text: &str, config: &ExtractConfig) -> FileFacts {
    let mut toks = lex(text, 0..text.len(), &mut JsLexer);
    assign_contexts(text, &mut toks, |toks, i, _| {
        let word = toks[i].word(text)?;
        matches!(word, "class" | "function")
            .then(|| toks.get(i + 1)?.word(text).map(str::to_owned))
            .flatten()
    });
    into_facts(text, config, &toks, Join::PLUS, Vec::new(), |_| {})
}

struct JsLexer;

/// Keywords after which a `/` starts a regex, not a division.
const BEFORE_REGEX: &[&str] = &[
    "return",
    "typeof",
    "instanceof",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "case",
    "do",
    "else",
    "yield",
    "await",
];

impl Lexer for JsLexer {
    fn special(&mut self, text: &str, i: usize, toks: &mut Vec<Tok>) -> Option<usize> {
        let b = text.as_bytes();
        if b[i] == b'/' && comment_end(b, i).is_none() && regex_allowed(text, toks) {
            // Not closed on its line: a division after all.
            return regex_end(b, i);
        }
        comment_or_string(text, i, toks, |open| match open {
            b'"' => Some((Quote::c_line(b"\""), LiteralKind::Str)),
            b'\'' => Some((Quote::c_line(b"'"), LiteralKind::Str)),
            b'`' => Some((
                Quote::verbatim(b"`")
                    .escapes(Escapes::C)
                    .interp(Interp::Template),
                LiteralKind::Str,
            )),
            _ => None,
        })
    }

    fn word_bytes(&self) -> &'static [u8] {
        b"$"
    }
}

/// Whether a `/` here would start a regex: not after an operand.
fn regex_allowed(text: &str, toks: &[Tok]) -> bool {
    match toks.last() {
        None => true,
        Some(Tok::Str(_)) => false,
        Some(tok @ Tok::Word(_)) => tok.word(text).is_some_and(|w| BEFORE_REGEX.contains(&w)),
        Some(tok) => !matches!(tok.punct(text), Some(b')' | b']' | b'}')),
    }
}

/// The end of the regex literal at `i` (flags included), or `None` if the
/// line has no closing `/` (then it was a division after all).
fn regex_end(b: &[u8], i: usize) -> Option<usize> {
    let stop = line_end(b, i);
    let mut in_class = false;
    let mut j = i + 1;
    while j < stop {
        match b[j] {
            b'\\' => j += 1,
            b'[' => in_class = true,
            b']' => in_class = false,
            b'/' if !in_class => {
                let flags = b[j + 1..stop]
                    .iter()
                    .take_while(|c| c.is_ascii_alphabetic())
                    .count();
                return Some(j + 1 + flags);
            }
            _ => {}
        }
        j += 1;
    }
    None
}
