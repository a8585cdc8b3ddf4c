//! The shell extractor.
//!
//! Soak scripts set metric names in `${VAR:-default}` expansions, build keys
//! in double-quoted strings, and write Prometheus configs through heredocs
//! (`cat > prometheus.yml <<EOF`). In shell every word is a string, so a
//! word (its quoted and unquoted pieces joined, expansions kept as written
//! so normalization cuts there) is one literal; the default of an expansion
//! is a literal of its own. `#` starts a comment only where a word could
//! start, so `$#`, `${#x}` and `a#b` are not comments. A heredoc whose body
//! is a Prometheus YAML config is read by the YAML extractor, which also
//! reports its target labels.

use std::collections::VecDeque;

use super::strings::{
    heredoc_close, line_end, scan_body, skip_balanced, Escapes, Indent, Interp, Quote, Value,
};
use super::tokens::{
    interpolation_toks, into_facts, lex, may_matter, push_string, Contexts, Join, Lexer, StrTok,
    Tok,
};
use super::{yaml, ExtractConfig, FileFacts, LiteralKind};

/// Facts of one shell script.
pub(crate) fn extract(text: &str, config: &ExtractConfig) -> FileFacts {
    let mut lexer = ShLexer::new(config);
    let mut toks = lex(text, 0..text.len(), &mut lexer);
    let inner = interpolation_toks(text, &toks, || ShLexer::new(config));
    toks.extend(inner);
    let mut labels = Vec::new();
    for body in &lexer.yaml_bodies {
        toks.extend(yaml::scan(text, body.clone(), &mut labels, config));
    }
    let contexts = Contexts::default();
    let mut facts = into_facts(
        text,
        config,
        &toks,
        &contexts,
        Join::NONE,
        Vec::new(),
        |_| {},
    );
    facts.scrape_labels = yaml::resolve_labels(text, labels);
    facts
}

/// Of the interpolations the string scanner records, only command
/// substitutions (`$(…)`, `` `…` ``) hold code whose literals are literals
/// of their own; a `${VAR:-default}` default is already one (see
/// [`expansion_default`]), and its name is no code at all.
fn command_substitutions(
    text: &str,
    ranges: Vec<std::ops::Range<usize>>,
) -> Vec<std::ops::Range<usize>> {
    let b = text.as_bytes();
    ranges
        .into_iter()
        .filter(|r| {
            r.start
                .checked_sub(1)
                .is_some_and(|open| matches!(b.get(open), Some(b'(' | b'`')))
        })
        .collect()
}

/// A heredoc announced on the current line, read after its newline.
#[derive(Debug)]
struct Pending {
    start: usize,
    marker: String,
    tabs: bool,
    quoted: bool,
    yaml_target: bool,
}

#[derive(Debug)]
struct ShLexer<'c> {
    config: &'c ExtractConfig,
    pending: VecDeque<Pending>,
    yaml_bodies: Vec<std::ops::Range<usize>>,
}

/// Bytes that end an unquoted word.
fn is_meta(c: u8) -> bool {
    c.is_ascii_whitespace() || b";&|()<>".contains(&c)
}

impl Lexer for ShLexer<'_> {
    fn special(&mut self, text: &str, i: usize, toks: &mut Vec<Tok>) -> Option<usize> {
        let b = text.as_bytes();
        match b[i] {
            b'#' => Some(line_end(b, i)),
            b'\n' => Some(self.heredoc_body(text, i, toks)),
            b'<' if b.get(i + 1) == Some(&b'<') && b.get(i + 2) != Some(&b'<') => {
                Some(self.heredoc_header(text, i))
            }
            c if is_meta(c) => None,
            _ => Some(word(text, i, toks, self.config, 0)),
        }
    }
}

impl<'c> ShLexer<'c> {
    fn new(config: &'c ExtractConfig) -> Self {
        ShLexer {
            config,
            pending: VecDeque::new(),
            yaml_bodies: Vec::new(),
        }
    }

    /// `<<EOF`, `<<-EOF`, `<< 'EOF'`, `<<"EOF"`, `<<\EOF` at `i`.
    fn heredoc_header(&mut self, text: &str, i: usize) -> usize {
        let b = text.as_bytes();
        let tabs = b.get(i + 2) == Some(&b'-');
        let mut at = i + 2 + usize::from(tabs);
        while matches!(b.get(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        let mut marker = String::new();
        let mut quoted = false;
        while at < b.len() && !is_meta(b[at]) {
            match b[at] {
                q @ (b'\'' | b'"') => {
                    quoted = true;
                    let close = memchr::memchr(q, &b[at + 1..line_end(b, at)])
                        .map_or(line_end(b, at), |n| at + 1 + n);
                    marker.push_str(&text[at + 1..close]);
                    at = (close + 1).min(b.len());
                }
                b'\\' => {
                    quoted = true;
                    at += 1;
                }
                _ => {
                    let next = text[at..].chars().next().map_or(1, char::len_utf8);
                    marker.push_str(&text[at..at + next]);
                    at += next;
                }
            }
        }
        if marker.is_empty() {
            return i + 2;
        }
        let line_start = text[..i].rfind('\n').map_or(0, |n| n + 1);
        let line = &text[line_start..line_end(b, i)];
        self.pending.push_back(Pending {
            start: i,
            marker,
            tabs,
            quoted,
            yaml_target: line.contains(".yml") || line.contains(".yaml"),
        });
        at
    }

    /// At a newline: reads the body of the next announced heredoc, if any.
    fn heredoc_body(&mut self, text: &str, newline: usize, toks: &mut Vec<Tok>) -> usize {
        let Some(heredoc) = self.pending.pop_front() else {
            return newline + 1;
        };
        let b = text.as_bytes();
        let body_start = newline + 1;
        let indent = if heredoc.tabs {
            Indent::Tabs
        } else {
            Indent::None
        };
        let (close_line, marker_end) =
            heredoc_close(b, body_start, heredoc.marker.as_bytes(), indent);
        let body = body_start.min(close_line)..close_line;
        if heredoc.yaml_target || yaml::looks_like_prometheus(&text[body.clone()]) {
            self.yaml_bodies.push(body);
        } else {
            let quote = Quote::heredoc(heredoc.quoted, Escapes::Shell);
            let mut scanned = scan_body(&text[..body.end], body.start, &quote);
            scanned.end = marker_end;
            scanned.interpolations = command_substitutions(text, scanned.interpolations);
            push_string(toks, heredoc.start, scanned, LiteralKind::Heredoc);
        }
        // The rest of the closing line is ordinary script again.
        marker_end.max(newline + 1)
    }
}

/// How deeply defaults inside defaults (`${A:-${B:-…}}`) are read as
/// literals of their own. Each level copies the text it holds, so without a
/// cap a file of nested expansions cost time and memory quadratic in its
/// size (93 KB took 1.5 GB); past the cap the inner text is still part of
/// the enclosing literal.
const MAX_DEFAULT_DEPTH: usize = super::tokens::MAX_INTERPOLATION_DEPTH;

/// One shell word at `i`: quoted and unquoted pieces joined. Pushes the word
/// and, before it, the default of each `${VAR:-default}` in it; `depth` is
/// how many defaults this word sits in.
fn word(text: &str, i: usize, toks: &mut Vec<Tok>, config: &ExtractConfig, depth: usize) -> usize {
    let b = text.as_bytes();
    let mut value = Value::default();
    let mut kind = LiteralKind::Bare;
    let mut interpolations = Vec::new();
    let mut at = i;
    while at < b.len() && !is_meta(b[at]) {
        let (quote, piece_kind) = match b[at] {
            b'\'' => (SINGLE, LiteralKind::RawStr),
            b'"' => (DOUBLE, LiteralKind::Str),
            b'$' if b.get(at + 1) == Some(&b'\'') => {
                at += 1;
                (ANSI_C, LiteralKind::Str)
            }
            b'$' if matches!(b.get(at + 1), Some(b'{' | b'(')) => {
                let close = skip_balanced(b, at + 1, b.len());
                let inner = at + 2..close.saturating_sub(1).max(at + 2);
                if b[at + 1] == b'{' {
                    expansion_default(text, inner, toks, config, depth);
                } else {
                    interpolations.push(inner);
                }
                value.copy(&text[at..close], at);
                kind = LiteralKind::Interpolated;
                at = close;
                continue;
            }
            b'\\' => {
                let next = text[at + 1..].chars().next().map_or(0, char::len_utf8);
                if next > 0 && b[at + 1] != b'\n' {
                    value.decoded(&text[at + 1..at + 1 + next], at);
                }
                at += 1 + next;
                continue;
            }
            c => {
                let next = text[at..].chars().next().map_or(1, char::len_utf8);
                if c == b'$' {
                    kind = LiteralKind::Interpolated;
                }
                value.copy(&text[at..at + next], at);
                at += next;
                continue;
            }
        };
        let body = scan_body(text, at + 1, &quote);
        if quote.interp == Interp::Dollar {
            quoted_defaults(text, at + 1..body.end, toks, config, depth);
        }
        if body.interpolated {
            kind = LiteralKind::Interpolated;
        } else if kind == LiteralKind::Bare {
            kind = piece_kind;
        }
        value.append(&body.value);
        interpolations.extend(command_substitutions(text, body.interpolations));
        at = body.end;
    }
    let end = at.max(i + 1).min(b.len());
    // Every shell word is a string token, and a script is mostly words: one
    // that mentions neither the namespace, the metric prefix nor a scan
    // limit, and holds no command substitution, yields nothing (shell joins
    // no literals), so it is not kept; keeping them all cost about 13 times
    // the script's size.
    if interpolations.is_empty() && !may_matter(&value.text, config) {
        return end;
    }
    toks.push(Tok::Str(Box::new(StrTok {
        span: i..end,
        value,
        kind,
        interpolations,
    })));
    end
}

/// The defaults of the `${VAR:-default}` expansions in a double-quoted
/// string's source `range`.
fn quoted_defaults(
    text: &str,
    range: std::ops::Range<usize>,
    toks: &mut Vec<Tok>,
    config: &ExtractConfig,
    depth: usize,
) {
    let b = text.as_bytes();
    let mut at = range.start;
    while let Some(n) = memchr::memmem::find(&b[at..range.end], b"${") {
        let open = at + n;
        let close = skip_balanced(b, open + 1, range.end);
        let inner = open + 2..close.saturating_sub(1).max(open + 2);
        expansion_default(text, inner, toks, config, depth);
        at = close.max(open + 2);
    }
}

/// `NAME:-default`, `NAME-default`, `NAME:=default`, `NAME=default` inside
/// `${…}`: the default is a literal too, down to [`MAX_DEFAULT_DEPTH`].
fn expansion_default(
    text: &str,
    inner: std::ops::Range<usize>,
    toks: &mut Vec<Tok>,
    config: &ExtractConfig,
    depth: usize,
) {
    if depth >= MAX_DEFAULT_DEPTH {
        return;
    }
    let Some(inner_text) = text.get(inner.clone()) else {
        return;
    };
    let name_len = inner_text
        .bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
        .count();
    let rest = &inner_text[name_len..];
    let op = [":-", ":=", "-", "="]
        .into_iter()
        .find(|op| rest.starts_with(op));
    let (Some(op), true) = (op, name_len > 0) else {
        return;
    };
    let start = inner.start + name_len + op.len();
    if start < inner.end {
        word(&text[..inner.end], start, toks, config, depth + 1);
    }
}

const SINGLE: Quote<'static> = Quote::verbatim(b"'");
const DOUBLE: Quote<'static> = Quote::verbatim(b"\"")
    .escapes(Escapes::Shell)
    .interp(Interp::Dollar);
const ANSI_C: Quote<'static> = Quote::verbatim(b"'").escapes(Escapes::C);
