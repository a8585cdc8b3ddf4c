//! The Python extractor.
//!
//! Soak harnesses print Prometheus exposition from f-strings, where `{{ }}`
//! are literal braces and `{expr}` is a value: `f'dw_x{{status="{s}"}} {v}'`
//! is the series `dw_x` with the label `status`. The lexer rewrites each
//! `{expr}` to `{}` and keeps the doubled braces, which is exactly a Rust
//! format string, so the shared exposition reader finds the labels however
//! complex the expressions are. Comments are skipped, and docstrings (the
//! string that opens a module, class or function body) are prose, not code.
//! Items are the module's dotted path and its top-level classes and
//! functions, as `pkg.mod.Class` and `pkg.mod:Class`.

use super::strings::{line_end, scan_body, Escapes, Interp, Quote};
use super::tokens::{
    interpolation_toks, into_facts, lex, offset32, push_string, Context, Contexts, Join, Lexer, Tok,
};
use super::{ExtractConfig, FileFacts, LiteralKind};

/// Facts of one Python file at `rel`.
pub(crate) fn extract(text: &str, config: &ExtractConfig, rel: &str) -> FileFacts {
    let mut toks = lex(text, 0..text.len(), &mut PyLexer { depth: 0 });
    let module = module_path(rel);
    // Docstrings first: the declarations' contexts are by token index.
    drop_docstrings(text, &mut toks);
    let (items, contexts) = declarations(text, &toks, &module);
    let inner = interpolation_toks(text, &toks, || PyLexer { depth: 0 });
    toks.extend(inner);
    // Adjacent literals are one: `("server:" "x:")`.
    let join = Join {
        op: Some(b'+'),
        adjacent: true,
    };
    into_facts(text, config, &toks, &contexts, join, items, |_| {})
}

/// `scripts/perf/harness.py` → `scripts.perf.harness`; a package's
/// `__init__.py` is the package.
pub(crate) fn module_path(rel: &str) -> String {
    let stem = rel
        .strip_suffix(".py")
        .or_else(|| rel.strip_suffix(".pyi"))
        .unwrap_or(rel);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.replace('/', ".")
}

struct PyLexer {
    /// Bracket depth: newlines inside brackets do not end a statement.
    depth: usize,
}

impl Lexer for PyLexer {
    fn special(&mut self, text: &str, i: usize, toks: &mut Vec<Tok>) -> Option<usize> {
        let b = text.as_bytes();
        match b[i] {
            b'#' => return Some(line_end(b, i)),
            b'\\' if b.get(i + 1) == Some(&b'\n') => return Some(i + 2),
            b'\\' if b[i + 1..].starts_with(b"\r\n") => return Some(i + 3),
            b'\n' => {
                if self.depth == 0 {
                    toks.push(Tok::Newline(offset32(i)));
                }
                return Some(i + 1);
            }
            b'(' | b'[' | b'{' => self.depth += 1,
            b')' | b']' | b'}' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        let prefix = b[i..]
            .iter()
            .take(3)
            .take_while(|c| b"rRbBuUfF".contains(c))
            .count();
        let open = i + prefix;
        let q = *b.get(open).filter(|q| matches!(q, b'\'' | b'"'))?;
        let letters = text[i..open].to_ascii_lowercase();
        if !matches!(
            letters.as_str(),
            "" | "r" | "u" | "b" | "f" | "br" | "rb" | "fr" | "rf"
        ) {
            return None;
        }
        let triple = b[open..].starts_with(&[q, q, q]);
        let raw = letters.contains('r');
        let quote = Quote {
            close: if triple {
                &b[open..open + 3]
            } else {
                &b[open..open + 1]
            },
            escapes: if raw { Escapes::Raw } else { Escapes::C },
            interp: if letters.contains('f') {
                Interp::PythonF
            } else {
                Interp::None
            },
            single_line: !triple,
        };
        let kind = match () {
            _ if letters.contains('b') => LiteralKind::ByteStr,
            _ if raw => LiteralKind::RawStr,
            _ => LiteralKind::Str,
        };
        let body = scan_body(text, open + if triple { 3 } else { 1 }, &quote);
        Some(push_string(toks, i, body, kind))
    }
}

/// Whether the token starting at `at` is the first thing on its line.
fn at_column_zero(text: &str, at: usize) -> bool {
    at == 0 || text.as_bytes().get(at - 1) == Some(&b'\n')
}

fn tok_start(tok: &Tok) -> usize {
    match tok {
        Tok::Str(s) => s.span.start,
        Tok::Plain(p) => p.span().start,
        Tok::Word(span) => span.start(),
        Tok::Punct(at) | Tok::Newline(at) => *at as usize,
    }
}

/// Top-level classes and functions; every literal gets the one it is in.
fn declarations(text: &str, toks: &[Tok], module: &str) -> (Vec<String>, Contexts) {
    let mut items = vec![module.to_owned()];
    let mut contexts = Contexts::default();
    let mut context: Option<Context> = None;
    let mut statement_start = true;
    for i in 0..toks.len() {
        let real = !matches!(toks[i], Tok::Newline(_));
        if statement_start && real && at_column_zero(text, tok_start(&toks[i])) {
            context = None;
            let mut j = i;
            if toks[j].word(text) == Some("async") {
                j += 1;
            }
            let keyword = toks.get(j).and_then(|t| t.word(text));
            let name = toks.get(j + 1).and_then(|t| t.word(text));
            if let (Some("class" | "def"), Some(name)) = (keyword, name) {
                items.push(format!("{module}.{name}"));
                items.push(format!("{module}:{name}"));
                context = Some(format!("{module}.{name}").into());
            }
        }
        statement_start = !real;
        if toks[i].is_string() {
            contexts.set(i, context.as_ref());
        }
    }
    (items, contexts)
}

/// Removes docstrings: a string that is a whole statement and the first
/// statement of the module or of a `class`/`def` body.
fn drop_docstrings(text: &str, toks: &mut Vec<Tok>) {
    let mut docstrings = Vec::new();
    // Where the previous statement started, and whether one has been seen.
    let mut previous: Option<usize> = None;
    let mut start = 0;
    let mut i = 0;
    while i < toks.len() {
        if matches!(toks[i], Tok::Newline(_)) {
            i += 1;
            start = i;
            continue;
        }
        let end = toks[i..]
            .iter()
            .position(|t| matches!(t, Tok::Newline(_)))
            .map_or(toks.len(), |n| i + n);
        let lone_string = end == start + 1 && toks[start].is_string();
        let opens_body = previous.is_some_and(|p| {
            let mut words = toks[p..start].iter().filter_map(|t| t.word(text));
            let first = words.next();
            let first = if first == Some("async") {
                words.next()
            } else {
                first
            };
            matches!(first, Some("class" | "def"))
                && toks[..start]
                    .iter()
                    .rev()
                    .find(|t| !matches!(t, Tok::Newline(_)))
                    .and_then(|t| t.punct(text))
                    == Some(b':')
        });
        if lone_string && (previous.is_none() || opens_body) {
            docstrings.push(start);
        }
        previous = Some(start);
        i = end;
        start = end;
    }
    // One pass, not a `remove` per docstring: each of those moved the rest
    // of the tokens, quadratic in a file of many functions.
    let mut docstrings = docstrings.into_iter().peekable();
    let mut at = 0;
    toks.retain(|_| {
        let drop = docstrings.next_if_eq(&at).is_some();
        at += 1;
        !drop
    });
}
