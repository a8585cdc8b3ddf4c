//! The PHP extractor.
//!
//! Reference servers keep their cache stores in PHP, and the gate that came
//! before dwlint read them with regular expressions, so a commented-out key
//! or a `dw_` name in a docblock counted as code. This lexer knows PHP's
//! comments (`//`, `#`, `/* */`, not `#[` attributes), its four string
//! forms (`'…'`, `"…"` with `$x`/`{$x}` interpolation, heredoc, nowdoc) and
//! the `.` concatenation operator. Interpolated variables stay in the value
//! as written, which is where normalization cuts a key. Declarations give
//! the owners a policy may name: `namespace` plus class, interface, trait or
//! enum, as `App\Support\Foo`.

use super::strings::{heredoc_close, line_end, past, scan_body, Escapes, Indent, Interp, Quote};
use super::tokens::{
    assign_contexts, interpolation_toks, into_facts, lex, push_string, Contexts, Join, Lexer, Tok,
};
use super::{ExtractConfig, FileFacts, LiteralKind};

/// Facts of one PHP file.
pub(crate) fn extract(text: &str, config: &ExtractConfig) -> FileFacts {
    let mut lexer = PhpLexer {
        in_php: !text.contains("<?"),
    };
    let mut toks = lex(text, 0..text.len(), &mut lexer);
    let (items, contexts) = declarations(text, &toks);
    let inner = interpolation_toks(text, &toks, || PhpLexer { in_php: true });
    toks.extend(inner);
    let join = Join {
        op: Some(b'.'),
        adjacent: false,
    };
    into_facts(text, config, &toks, &contexts, join, items, |_| {})
}

struct PhpLexer {
    /// Outside `<?php … ?>` a file is template output, not code.
    in_php: bool,
}

const SINGLE: Quote<'static> = Quote::verbatim(b"'").escapes(Escapes::QuoteOnly(b'\''));

impl Lexer for PhpLexer {
    fn special(&mut self, text: &str, i: usize, toks: &mut Vec<Tok>) -> Option<usize> {
        let b = text.as_bytes();
        let rest = &b[i..];
        if !self.in_php {
            self.in_php = true;
            let open = memchr::memmem::find(rest, b"<?").map_or(b.len(), |n| i + n + 2);
            let tag = if b[open.min(b.len())..].starts_with(b"php") {
                3
            } else {
                usize::from(b.get(open) == Some(&b'='))
            };
            return Some((open + tag).min(b.len()));
        }
        let line_comment =
            rest.starts_with(b"//") || (rest[0] == b'#' && rest.get(1) != Some(&b'['));
        if line_comment {
            // `?>` ends a line comment as well as the PHP block.
            let stop = line_end(b, i);
            let close = memchr::memmem::find(&b[i..stop], b"?>").map_or(stop, |n| i + n);
            return Some(close);
        }
        if rest.starts_with(b"/*") {
            return Some(past(b, i + 2, b"*/"));
        }
        if rest.starts_with(b"?>") {
            self.in_php = false;
            return Some(i + 2);
        }
        let (quote, kind) = match rest[0] {
            b'\'' => (SINGLE, LiteralKind::RawStr),
            b'"' | b'`' => (
                Quote::verbatim(&rest[..1])
                    .escapes(Escapes::C)
                    .interp(Interp::Dollar),
                LiteralKind::Str,
            ),
            b'<' if rest.starts_with(b"<<<") => return Some(heredoc(text, i, toks)),
            _ => return None,
        };
        let body = scan_body(text, i + 1, &quote);
        Some(push_string(toks, i, body, kind))
    }

    fn word_bytes(&self) -> &'static [u8] {
        b"$\\"
    }
}

/// `<<<ID`, `<<<"ID"` (heredoc) or `<<<'ID'` (nowdoc) at `i`.
fn heredoc(text: &str, i: usize, toks: &mut Vec<Tok>) -> usize {
    let b = text.as_bytes();
    let mut at = i + 3;
    while matches!(b.get(at), Some(b' ' | b'\t')) {
        at += 1;
    }
    let quote = b.get(at).copied().filter(|q| matches!(q, b'\'' | b'"'));
    let name_start = at + usize::from(quote.is_some());
    let name_end = super::tokens::word_end(b, name_start, b"");
    let header_end = name_end + usize::from(quote.is_some());
    let well_formed = name_end > name_start
        && quote.is_none_or(|q| b.get(name_end) == Some(&q))
        && line_end(b, header_end) == header_end + usize::from(b.get(header_end) == Some(&b'\r'));
    if !well_formed {
        return i + 3;
    }
    let body_start = (line_end(b, header_end) + 1).min(b.len());
    let (close_line, marker_end) =
        heredoc_close(b, body_start, &b[name_start..name_end], Indent::Any);
    let body_end = if close_line > body_start && b.get(close_line - 1) == Some(&b'\n') {
        close_line - 1
    } else {
        close_line
    };
    let nowdoc = quote == Some(b'\'');
    let quote = Quote::heredoc(nowdoc, Escapes::C);
    let mut body = scan_body(&text[..body_end], body_start, &quote);
    body.end = marker_end;
    push_string(toks, i, body, LiteralKind::Heredoc)
}

/// Qualified names of the file's classes, interfaces, traits, enums and
/// functions; each literal gets the class (or function) it sits in.
fn declarations(text: &str, toks: &[Tok]) -> (Vec<String>, Contexts) {
    let mut namespace = String::new();
    let mut items = Vec::new();
    let contexts = assign_contexts(text, toks, |toks, i, open| {
        let word = toks[i].word(text)?;
        let name = toks.get(i + 1)?.word(text)?;
        let after_colons = i >= 2
            && toks[i - 1].punct(text) == Some(b':')
            && toks[i - 2].punct(text) == Some(b':');
        let after_new = i >= 1 && toks[i - 1].word(text) == Some("new");
        match word.to_ascii_lowercase().as_str() {
            "namespace" => {
                namespace = name.trim_start_matches('\\').to_owned();
                None
            }
            "class" | "interface" | "trait" | "enum" if !after_colons && !after_new => {
                let qualified = qualify(&namespace, name);
                items.push(qualified.clone());
                Some(qualified)
            }
            // A method is named through its class, which stays the
            // context; only a free function opens a context of its own.
            "function" if open.is_none() && !name.starts_with('$') => {
                let free = qualify(&namespace, name);
                items.push(free.clone());
                Some(free)
            }
            _ => None,
        }
    });
    (items, contexts)
}

fn qualify(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}\\{name}")
    }
}
