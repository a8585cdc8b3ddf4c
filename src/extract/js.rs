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
//!
//! `prom-client` metrics are declared as `new Counter({ name: 'dw_x', help,
//! labelNames: ['a'] })` (also `Gauge`, `Histogram`, `Summary`, bare or
//! through one qualifier such as `client.`, TypeScript type arguments
//! allowed). That shape yields the metric with its labels: none when
//! `labelNames` is absent, unknown when it is not an array of plain string
//! literals (or a spread could supply it). A name that is not one plain
//! literal yields no site beyond what the literal scan finds.

use std::borrow::Cow;

use super::clike::{comment_end, comment_or_string};
use super::collect::Collector;
use super::exposition::is_metric_name;
use super::strings::{line_end, Escapes, Interp, Quote};
use super::tokens::{
    assign_contexts, interpolation_toks, into_facts, lex, offset32, Join, Lexer, StrTok, Tok,
};
use super::{ExtractConfig, FileFacts, Label, LiteralKind, MetricVia};

/// Facts of one JavaScript or TypeScript file.
pub(crate) fn extract(text: &str, config: &ExtractConfig) -> FileFacts {
    let mut toks = lex(text, 0..text.len(), &mut JsLexer);
    let contexts = assign_contexts(text, &toks, |toks, i, _| {
        let word = toks[i].word(text)?;
        matches!(word, "class" | "function")
            .then(|| toks.get(i + 1)?.word(text).map(str::to_owned))
            .flatten()
    });
    let inner = interpolation_toks(text, &toks, || JsLexer);
    toks.extend(inner);
    into_facts(
        text,
        config,
        &toks,
        &contexts,
        Join::PLUS,
        Vec::new(),
        |collector| constructors(collector, text, &toks),
    )
}

/// The `prom-client` metric classes.
const METRIC_CLASSES: &[&str] = &["Counter", "Gauge", "Histogram", "Summary"];

/// `new [q.]Counter[<…>]({ name: 'dw_x', labelNames: ['a'] , … })`.
fn constructors(collector: &mut Collector<'_>, text: &str, toks: &[Tok]) {
    let punct = |j: usize| toks.get(j).and_then(|t| t.punct(text));
    let word = |j: usize| toks.get(j).and_then(|t| t.word(text));
    // Built at the first constructor site: most files have none.
    let mut closers: Option<Closers> = None;
    for i in 0..toks.len() {
        if word(i) != Some("new") {
            continue;
        }
        let mut j = i + 1;
        if word(j).is_some() && punct(j + 1) == Some(b'.') {
            j += 2;
        }
        if !word(j).is_some_and(|w| METRIC_CLASSES.contains(&w)) {
            continue;
        }
        j += 1;
        if punct(j) == Some(b'<') {
            let Some(close) = type_arguments_end(text, toks, j) else {
                continue;
            };
            j = close + 1;
        }
        if punct(j) != Some(b'(') || punct(j + 1) != Some(b'{') {
            continue;
        }
        let closers = closers.get_or_insert_with(|| Closers::new(text, toks));
        let Some(fields) = object_fields(text, toks, closers, j + 1) else {
            continue;
        };
        let Some(Some(name)) = fields.literal("name", text) else {
            continue;
        };
        if !is_metric_name(&name.value.text, &collector.config().metric_prefix) {
            continue;
        }
        let labels = match fields.value("labelNames") {
            _ if fields.spread => None,
            None => Some(Vec::new()),
            Some(value) => string_array(text, value)
                .map(|keys| keys.iter().map(|k| label(collector, k)).collect()),
        };
        let lit = name.lit();
        let range = collector.range(lit.source_range(0..lit.value.len()));
        collector.site(
            name.value.text.clone(),
            range,
            labels,
            MetricVia::PrometheusVec,
        );
    }
}

fn label(collector: &mut Collector<'_>, key: &StrTok) -> Label {
    let lit = key.lit();
    Label {
        name: key.value.text.clone(),
        range: collector.range(lit.source_range(0..lit.value.len())),
    }
}

/// The index of the `>` closing TypeScript type arguments opened at `open`;
/// `None` if the angle brackets do not balance before a `(`/`;`. Type
/// arguments of a metric class are a few label names, so the scan is capped
/// to keep a file of unclosed `new Counter<` linear.
fn type_arguments_end(text: &str, toks: &[Tok], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, tok) in toks.iter().enumerate().skip(open).take(256) {
        match tok.punct(text) {
            Some(b'<') => depth += 1,
            Some(b'>') => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j);
                }
            }
            Some(b'(' | b')' | b';' | b'{' | b'}') => return None,
            _ => {}
        }
    }
    None
}

/// The top-level `key: value` entries of an object literal.
struct Fields<'t> {
    entries: Vec<(&'t str, &'t [Tok])>,
    /// Whether a `...spread` could set any field.
    spread: bool,
}

impl<'t> Fields<'t> {
    /// `Some(Some(lit))` when `key` is set to one plain string literal,
    /// `Some(None)` when set to anything else; the last entry wins, as in
    /// JavaScript.
    fn literal(&self, key: &str, text: &'t str) -> Option<Option<Cow<'t, StrTok>>> {
        Some(match self.value(key)? {
            [tok] => tok.string(text).and_then(plain),
            _ => None,
        })
    }

    /// The value tokens of `key` (empty for shorthand `{ key }`).
    fn value(&self, key: &str) -> Option<&'t [Tok]> {
        let (_, value) = self.entries.iter().rev().find(|(k, _)| *k == key)?;
        Some(value)
    }
}

/// A string literal without interpolation.
fn plain(s: Cow<'_, StrTok>) -> Option<Cow<'_, StrTok>> {
    (s.kind == LiteralKind::Str).then_some(s)
}

/// `['a', "b"]`, exactly; `None` for anything else (a variable, a spread,
/// an interpolated template, a computed element).
fn string_array<'t>(text: &str, toks: &'t [Tok]) -> Option<Vec<Cow<'t, StrTok>>> {
    // TypeScript's `[…] as const` is the same array.
    let toks = match toks {
        [array @ .., as_, const_]
            if as_.word(text) == Some("as") && const_.word(text) == Some("const") =>
        {
            array
        }
        _ => toks,
    };
    let (first, rest) = toks.split_first()?;
    let (last, inner) = rest.split_last()?;
    if first.punct(text) != Some(b'[') || last.punct(text) != Some(b']') {
        return None;
    }
    let mut out = Vec::new();
    let mut expect_string = true;
    for tok in inner {
        match tok {
            _ if expect_string && tok.is_string() => out.push(plain(tok.string(text)?)?),
            _ if !expect_string && tok.punct(text) == Some(b',') => {}
            _ => return None,
        }
        expect_string = !expect_string;
    }
    Some(out)
}

/// For each opening bracket, the index of its closing one, computed once so
/// that reading nested objects stays linear however deep they nest. Held as
/// (opener, closer) pairs sorted by the opener: a slot per token cost as
/// much memory as the tokens themselves.
struct Closers(Vec<(u32, u32)>);

impl Closers {
    fn new(text: &str, toks: &[Tok]) -> Closers {
        let mut pairs = Vec::new();
        let mut open = Vec::new();
        for (j, tok) in toks.iter().enumerate() {
            match tok.punct(text) {
                Some(b'(' | b'[' | b'{') => open.push(offset32(j)),
                Some(b')' | b']' | b'}') => {
                    if let Some(o) = open.pop() {
                        pairs.push((o, offset32(j)));
                    }
                }
                _ => {}
            }
        }
        pairs.sort_unstable();
        Closers(pairs)
    }

    /// The closing bracket of the opening one at `open`.
    fn get(&self, open: usize) -> Option<usize> {
        let k = self
            .0
            .binary_search_by_key(&offset32(open), |&(o, _)| o)
            .ok()?;
        Some(self.0[k].1 as usize)
    }
}

/// The entries of the object literal opened by the `{` at `brace`.
fn object_fields<'t>(
    text: &'t str,
    toks: &'t [Tok],
    closers: &Closers,
    brace: usize,
) -> Option<Fields<'t>> {
    let close = closers.get(brace)?;
    let mut fields = Fields {
        entries: Vec::new(),
        spread: false,
    };
    let mut at = brace + 1;
    while at < close {
        // The entry ends at the next comma on this level; nested brackets
        // are skipped whole.
        let mut end = at;
        while end < close && toks[end].punct(text) != Some(b',') {
            end = closers.get(end).map_or(end + 1, |c| c + 1);
        }
        let end = end.min(close);
        let entry = &toks[at..end];
        at = end + 1;
        let key = match entry.first() {
            Some(Tok::Punct(_)) if entry[0].punct(text) == Some(b'.') => {
                fields.spread = true;
                continue;
            }
            Some(Tok::Word(span)) => text.get(span.range()),
            Some(tok) if tok.is_string() => tok.str_value(text),
            _ => None,
        };
        if entry.is_empty() {
            continue;
        }
        let Some(key) = key else {
            // A computed `[key]` could be any field.
            fields.spread = true;
            continue;
        };
        // Shorthand `{ name }` is a variable: an entry with no literal value.
        let tokens = match entry.get(1).and_then(|t| t.punct(text)) {
            Some(b':') => &entry[2..],
            _ => &entry[entry.len()..],
        };
        fields.entries.push((key, tokens));
    }
    Some(fields)
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
        Some(Tok::Str(_) | Tok::Plain(_)) => false,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sites(text: &str) -> Vec<(String, Option<Vec<String>>, MetricVia)> {
        let config = ExtractConfig {
            cache_namespace: "server:".to_owned(),
            metric_prefix: "dw_".to_owned(),
        };
        extract(text, &config)
            .metrics
            .into_iter()
            .map(|m| {
                let labels = m.labels.map(|l| l.into_iter().map(|l| l.name).collect());
                (m.name, labels, m.via)
            })
            .collect()
    }

    fn vec_site(name: &str, labels: Option<&[&str]>) -> (String, Option<Vec<String>>, MetricVia) {
        let labels = labels.map(|l| l.iter().map(|s| (*s).to_owned()).collect());
        (name.to_owned(), labels, MetricVia::PrometheusVec)
    }

    fn mention(name: &str) -> (String, Option<Vec<String>>, MetricVia) {
        (name.to_owned(), None, MetricVia::Mention)
    }

    #[test]
    fn prom_client_constructors_yield_their_labels() {
        let text = "
            new client.Counter({ name: 'dw_a_total', help: 'a', labelNames: ['x', \"y\",] });
            new Gauge({ 'name': \"dw_b\", help: 'b' });
            new prom.Histogram<'r'>({ help: 'c', labelNames: ['r'], name: `dw_c_seconds` });
            new Summary({ name: 'dw_d', labelNames: [] });
        ";
        assert_eq!(
            sites(text),
            vec![
                vec_site("dw_a_total", Some(&["x", "y"])),
                vec_site("dw_b", Some(&[])),
                vec_site("dw_c_seconds", Some(&["r"])),
                vec_site("dw_d", Some(&[])),
            ]
        );
    }

    #[test]
    fn labels_not_written_as_literals_are_unknown() {
        let text = "
            new Counter({ name: 'dw_a', labelNames: names });
            new Counter({ name: 'dw_b', labelNames: [...names, 'x'] });
            new Counter({ name: 'dw_c', labelNames: [`k${i}`] });
            new Counter({ ...base, name: 'dw_d' });
            new Counter({ [key]: v, name: 'dw_e' });
            new Counter({ name: 'dw_f', labelNames });
        ";
        let names = ["dw_a", "dw_b", "dw_c", "dw_d", "dw_e", "dw_f"];
        assert_eq!(
            sites(text),
            names.iter().map(|n| vec_site(n, None)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn other_shapes_are_plain_literals() {
        let text = "
            new Counter({ name: prefix + 'total', help: 'dw_help' });
            new Map({ name: 'dw_map' });
            new Counter({ name: 'other_total', labelNames: ['dw_label'] });
            new a.b.Counter({ name: 'dw_deep' });
            new Counter('dw_positional');
            new Counter({ name: `dw_${kind}`, labelNames: ['k'] });
        ";
        let found = sites(text);
        assert!(
            found.iter().all(|s| s.2 != MetricVia::PrometheusVec),
            "{found:?}"
        );
        for name in ["dw_help", "dw_map", "dw_label", "dw_deep", "dw_positional"] {
            assert!(found.contains(&mention(name)), "{name}: {found:?}");
        }
    }

    #[test]
    fn truncated_constructors_never_panic() {
        let text =
            "new client.Counter<'a' | 'b'>({ name: 'dw_a', labelNames: ['x', 'y'] as const });";
        for cut in 0..=text.len() {
            let _ = sites(&text[..cut]);
        }
        // This thread's CPU time, which a loaded machine does not stretch.
        let cpu = crate::base::timings::thread_cpu_time;
        let started = cpu();
        for unit in ["new Counter<", "new Counter({ name: 'dw_x', labelNames: ["] {
            let _ = sites(&unit.repeat(20_000));
        }
        let used = cpu() - started;
        assert!(used < std::time::Duration::from_secs(20), "{used:?}");
        for hostile in [
            "new",
            "new Counter",
            "new Counter<",
            "new Counter<>(",
            "new Counter({",
            "new Counter({,,:",
            "new Counter({ name: }",
        ] {
            let _ = sites(hostile);
        }
    }
}
