//! The Go extractor.
//!
//! Go exporters declare Prometheus metrics through `client_golang`:
//! `prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dw_x"},
//! []string{"a"})`, where the label names are a literal slice next to the
//! options. That call shape (Counter, Gauge, Histogram and Summary, `Vec` or
//! not, through `prometheus.` or `promauto.`) yields the metric with its
//! labels; `ConstLabels: prometheus.Labels{"k": …}` keys count as labels
//! too. `Namespace` and `Subsystem` fields make the registered name
//! `namespace_subsystem_name` (empty parts dropped), so the site is that
//! composed name, pointing at the `Name` literal; when any of the three is
//! not a string literal the name is unknown and no site is emitted (the
//! plain literal scan still reports a `Name` literal that is itself a
//! metric name, as a mention). Every other string (`"…"`, raw `` `…` ``) is a plain literal, and
//! rune literals and comments are skipped. Items are `package.Type`,
//! `package.Func` and `package.Type.Method`.

use std::borrow::Cow;

use super::clike::{comment_end, comment_or_string};
use super::collect::Collector;
use super::exposition::{full_name, is_metric_name};
use super::strings::{line_end, scan_body, Quote};
use super::tokens::{
    assign_contexts, find_punct, into_facts, lex, Contexts, Join, Lexer, StrTok, Tok,
};
use super::{ExtractConfig, FileFacts, Label, LiteralKind, MetricVia};

/// Facts of one Go file.
pub(crate) fn extract(text: &str, config: &ExtractConfig) -> FileFacts {
    let toks = lex(text, 0..text.len(), &mut GoLexer);
    let (items, contexts) = declarations(text, &toks);
    into_facts(
        text,
        config,
        &toks,
        &contexts,
        Join::PLUS,
        items,
        |collector| constructors(collector, text, &toks),
    )
}

struct GoLexer;

impl Lexer for GoLexer {
    fn special(&mut self, text: &str, i: usize, toks: &mut Vec<Tok>) -> Option<usize> {
        let b = text.as_bytes();
        if b[i] == b'\'' && comment_end(b, i).is_none() {
            // A rune: `'"'` must not open a string.
            let rune = scan_body(text, i + 1, &Quote::c_line(b"'")).end;
            return Some(rune.min(line_end(b, i)).max(i + 1));
        }
        comment_or_string(text, i, toks, |open| match open {
            b'"' => Some((Quote::c_line(b"\""), LiteralKind::Str)),
            b'`' => Some((Quote::verbatim(b"`"), LiteralKind::RawStr)),
            _ => None,
        })
    }
}

/// `package.Type`, `package.Func`, `package.Type.Method`; literals get the
/// function or type they sit in.
fn declarations(text: &str, toks: &[Tok]) -> (Vec<String>, Contexts) {
    let package = toks
        .windows(2)
        .find_map(|w| {
            (w[0].word(text) == Some("package"))
                .then(|| w[1].word(text))
                .flatten()
        })
        .unwrap_or("main")
        .to_owned();
    let mut items = vec![package.clone()];
    // Depth of the bracket that opened a `type ( … )` group, if inside one.
    let mut depth = 0usize;
    let mut group: Option<usize> = None;
    let contexts = assign_contexts(text, toks, |toks, i, _| {
        match toks[i].punct(text) {
            Some(b'(' | b'[' | b'{') => depth += 1,
            Some(b')' | b']' | b'}') => {
                if group == Some(depth) {
                    group = None;
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        let word = toks[i].word(text)?;
        let next = toks.get(i + 1);
        let name = match word {
            "type" if next.and_then(|t| t.punct(text)) == Some(b'(') => {
                group = Some(depth + 1);
                return None;
            }
            "type" => next?.word(text)?.to_owned(),
            "func" if next.and_then(|t| t.punct(text)) == Some(b'(') => {
                // A method: `func (r *Recv) Name(`.
                let close = find_punct(text, toks, i + 2, b')')?;
                let receiver = toks[i + 2..close].iter().rev().find_map(|t| t.word(text))?;
                let method = toks.get(close + 1)?.word(text)?;
                format!("{receiver}.{method}")
            }
            "func" => next?.word(text)?.to_owned(),
            _ if group == Some(depth) && at_line_start(text, &toks[i]) => word.to_owned(),
            _ => return None,
        };
        let qualified = format!("{package}.{name}");
        items.push(qualified.clone());
        Some(qualified)
    });
    (items, contexts)
}

fn at_line_start(text: &str, tok: &Tok) -> bool {
    let Tok::Word(span) = tok else { return false };
    text[..span.start()]
        .bytes()
        .rev()
        .take_while(|c| *c != b'\n')
        .all(|c| c == b' ' || c == b'\t')
}

const CONSTRUCTORS: &[&str] = &[
    "NewCounterVec",
    "NewGaugeVec",
    "NewHistogramVec",
    "NewSummaryVec",
    "NewCounter",
    "NewGauge",
    "NewHistogram",
    "NewSummary",
];

/// `NewXxx[Vec](XxxOpts{Name: "dw_x", ConstLabels: …}[, []string{"a"}])`.
fn constructors(collector: &mut Collector<'_>, text: &str, toks: &[Tok]) {
    for (i, tok) in toks.iter().enumerate() {
        let Some(ctor) = tok.word(text).filter(|w| CONSTRUCTORS.contains(w)) else {
            continue;
        };
        if toks.get(i + 1).and_then(|t| t.punct(text)) != Some(b'(') {
            continue;
        }
        let opts_end = find_punct(text, toks, i + 2, b',')
            .or_else(|| find_punct(text, toks, i + 2, b')'))
            .unwrap_or(toks.len());
        let opts = &toks[i + 2..opts_end];
        let Some(Some(name)) = field(text, opts, "Name") else {
            continue;
        };
        let part = |field_name| match field(text, opts, field_name) {
            None => Some(String::new()),
            Some(value) => value.map(|s| s.into_owned().value.text),
        };
        let (Some(namespace), Some(subsystem)) = (part("Namespace"), part("Subsystem")) else {
            continue;
        };
        let Some(full) = full_name(&namespace, &subsystem, &name.value.text) else {
            continue;
        };
        if !is_metric_name(&full, &collector.config().metric_prefix) {
            continue;
        }
        let mut labels = Some(Vec::new());
        if let Some(at) = field_at(text, opts, "ConstLabels") {
            labels = map_keys(text, &opts[at..])
                .map(|keys| keys.iter().map(|k| label(collector, k)).collect());
        }
        if ctor.ends_with("Vec") {
            let list = string_slice(text, toks.get(opts_end + 1..).unwrap_or(&[]));
            labels = match (labels, list) {
                (Some(mut known), Some(list)) => {
                    known.extend(list.iter().map(|k| label(collector, k)));
                    Some(known)
                }
                _ => None,
            };
        }
        let lit = name.lit();
        let range = collector.range(lit.source_range(0..lit.value.len()));
        collector.site(full, range, labels, MetricVia::PrometheusVec);
    }
}

fn label(collector: &mut Collector<'_>, key: &StrTok) -> Label {
    let lit = key.lit();
    Label {
        name: key.value.text.clone(),
        range: collector.range(lit.source_range(0..lit.value.len())),
    }
}

/// Where `Field:` is among `opts` (the index just past the colon).
fn field_at(text: &str, opts: &[Tok], field: &str) -> Option<usize> {
    (0..opts.len().saturating_sub(1)).find_map(|j| {
        (opts[j].word(text) == Some(field) && opts[j + 1].punct(text) == Some(b':'))
            .then_some(j + 2)
    })
}

/// What is assigned to `Field:` among `opts`: `None` when the field is not
/// set, `Some(None)` when it is set to anything but one string literal
/// (`"a" + b`, a constant), whose value is then unknown.
fn field<'t>(text: &str, opts: &'t [Tok], name: &str) -> Option<Option<Cow<'t, StrTok>>> {
    let at = field_at(text, opts, name)?;
    let ends = opts
        .get(at + 1)
        .is_none_or(|t| matches!(t.punct(text), Some(b',' | b'}')));
    Some(opts.get(at).filter(|_| ends).and_then(|t| t.string(text)))
}

/// The string keys of the composite literal `Type{"k": v, …}` at the start
/// of `toks`; `None` unless it is one.
fn map_keys<'t>(text: &str, toks: &'t [Tok]) -> Option<Vec<Cow<'t, StrTok>>> {
    let open = toks.iter().position(|t| t.punct(text) == Some(b'{'))?;
    if toks[..open]
        .iter()
        .any(|t| t.punct(text).is_some_and(|p| p != b'.'))
    {
        return None;
    }
    let close = open + 1 + find_punct(text, &toks[open + 1..], 0, b'}')?;
    let mut keys = Vec::new();
    for j in open + 1..close {
        if let (Some(key), Some(b':')) = (
            toks[j].string(text),
            toks.get(j + 1).and_then(|t| t.punct(text)),
        ) {
            keys.push(key);
        }
    }
    Some(keys)
}

/// `[]string{"a", "b"}` at the start of `toks`.
fn string_slice<'t>(text: &str, toks: &'t [Tok]) -> Option<Vec<Cow<'t, StrTok>>> {
    let shape = [b'[', b']'];
    if toks.len() < 4
        || toks[0].punct(text) != Some(shape[0])
        || toks[1].punct(text) != Some(shape[1])
    {
        return None;
    }
    if toks[2].word(text) != Some("string") || toks[3].punct(text) != Some(b'{') {
        return None;
    }
    let mut out = Vec::new();
    for tok in &toks[4..] {
        if let Some(s) = tok.string(text) {
            out.push(s);
            continue;
        }
        match tok {
            _ if tok.punct(text) == Some(b',') => {}
            _ if tok.punct(text) == Some(b'}') => return Some(out),
            _ => return None,
        }
    }
    None
}
