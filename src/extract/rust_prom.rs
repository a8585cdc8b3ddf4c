//! The metric libraries' emitting APIs, which alone say which labels a
//! metric is emitted with.
//!
//! - `metrics`: `counter!/gauge!/histogram!(name, "k" => v, …)` and the older
//!   `increment_counter!`-style macros. `describe_*!` only describe a metric
//!   and are left to the plain literal scan (a `Mention`).
//! - `prometheus`: `register_*!` / `register_*_vec!`, `opts!`, and
//!   `XxxVec::new(Opts::new(…), &["k"])`-style constructors, with
//!   `.const_label("k", …)` chains on the options. `.namespace("dw")` and
//!   `.subsystem("x")` on the options make the registered name
//!   `dw_x_<name>`, so the site is that composed name, pointing at the name
//!   literal; when either part is not a literal the name is unknown and no
//!   site is emitted (the plain literal scan still reports the name literal
//!   if it is itself a metric name, as a `Mention`).
//!
//! Constructor calls are read two ways, as they always were: inside a macro
//! body as tokens (`token_*`), and in code as the expressions a parser sees
//! (`ast_*`: a reference, a parenthesised expression, a method chain), so
//! that each reads exactly what it did when code went through `syn`.
//!
//! Each recognised call yields one site for its name literal; the plain
//! literal scan sees the same literal too, and the collector keeps the richer
//! of the two. Names or labels that are not literals make labels unknown.

use super::collect::Collector;
use super::exposition::{full_name, is_metric_name};
use super::rust_lex::{Delim, Kind};
use super::rust_walk::{NameSite, Walker};
use super::{Label, MetricVia};

/// What a `prometheus` options expression says about a metric.
pub(super) struct PromSite {
    /// The name argument as written, not necessarily a metric name on its
    /// own: with a namespace it is only the last part of one.
    pub(super) name: NameSite,
    /// `.namespace(…)` / `.subsystem(…)` values (empty when not set); `None`
    /// when one is not a literal, which leaves the full name unknown.
    pub(super) namespace: Option<String>,
    pub(super) subsystem: Option<String>,
    /// `.const_label` keys; `None` when built at run time (`.const_labels(map)`).
    pub(super) const_labels: Option<Vec<Label>>,
}

impl PromSite {
    pub(super) fn new(name: NameSite) -> Self {
        PromSite {
            name,
            namespace: Some(String::new()),
            subsystem: Some(String::new()),
            const_labels: Some(Vec::new()),
        }
    }

    /// A chained builder call on the options that changes what the site
    /// says; `arg` is its first argument's string value, if a literal.
    pub(super) fn chained(&mut self, method: &str, arg: impl FnOnce() -> Option<String>) {
        match method {
            "namespace" => self.namespace = arg(),
            "subsystem" => self.subsystem = arg(),
            "const_labels" => self.const_labels = None,
            _ => {}
        }
    }

    pub(super) fn add_const_label(&mut self, label: Option<Label>) {
        match (&mut self.const_labels, label) {
            (Some(labels), Some(label)) => labels.push(label),
            _ => self.const_labels = None,
        }
    }
}

/// Records the site of a `prometheus` registration: the full name (when
/// namespace and subsystem are known and it is a metric name) with its
/// constant and variable labels.
pub(super) fn emit_prometheus(
    collector: &mut Collector<'_>,
    site: PromSite,
    labels: Option<Vec<Label>>,
) {
    let (Some(namespace), Some(subsystem)) = (&site.namespace, &site.subsystem) else {
        return;
    };
    let Some(name) = full_name(namespace, subsystem, &site.name.name) else {
        return;
    };
    if !is_metric_name(&name, &collector.config().metric_prefix) {
        return;
    }
    let labels = match (site.const_labels, labels) {
        (Some(mut consts), Some(labels)) => {
            consts.extend(labels);
            Some(consts)
        }
        _ => None,
    };
    collector.site(name, site.name.range, labels, MetricVia::PrometheusVec);
}

/// `Some(is_vec)` for the `prometheus` constructors worth reading.
pub(super) fn constructor_kind(ty: &str, method: &str) -> Option<bool> {
    if ty.ends_with("Vec") && method == "new" {
        return Some(true);
    }
    let single = matches!(
        ty,
        "Counter" | "IntCounter" | "Gauge" | "IntGauge" | "Histogram"
    );
    (single && (method == "new" || method == "with_opts")).then_some(false)
}

impl Walker<'_> {
    /// `metrics` crate: `counter!(target: …, "dw_x", "k" => v, …)`.
    pub(super) fn metrics_macro(&mut self, tokens: &[u32], value_args: usize) {
        let src = self.src;
        let mut args = src.args(tokens).skip_while(|a| src.is_named_arg(a));
        let Some(name) = args.next().and_then(|a| self.token_name(a)) else {
            return;
        };
        let mut labels = Vec::new();
        let mut unknown = false;
        let mut collections = 0;
        for (position, arg) in args.enumerate() {
            if let Some(key) = src.pair_key(arg) {
                match self.token_label(key) {
                    Some(label) => labels.push(label),
                    None => unknown = true,
                }
            } else if position >= value_args && !src.is_number(arg) {
                collections += 1;
            }
        }
        // Old-style macros put a value before the `=>` pairs; without any
        // pair, a positional argument is a label collection built at run time.
        let labels = (!unknown && (collections == 0 || !labels.is_empty())).then_some(labels);
        self.collector
            .site(name.name, name.range, labels, MetricVia::MetricsMacro);
    }

    /// `prometheus` crate `register_*!` macros. Without `_vec` they emit no
    /// labels, except `metrics`' own old `register_counter!("x", "k" => v)`.
    pub(super) fn prometheus_register(&mut self, name: &str, tokens: &[u32]) {
        if !["counter", "gauge", "histogram"]
            .iter()
            .any(|k| name.contains(k))
        {
            return;
        }
        let src = self.src;
        let is_vec = name.contains("_vec");
        let args = src.split_args(tokens);
        if !is_vec && args.iter().any(|a| src.pair_key(a).is_some()) {
            return self.metrics_macro(tokens, 0);
        }
        let Some(site) = args.first().and_then(|a| self.token_opts(a)) else {
            return;
        };
        let labels = if is_vec {
            args[1..]
                .iter()
                .find_map(|a| self.token_label_array(a))
                .flatten()
        } else {
            Some(Vec::new())
        };
        self.emit_prometheus(site, labels);
    }

    /// `XxxVec::new(opts, &["k"])`, `Counter::new("dw_x", help)`,
    /// `Histogram::with_opts(opts)` inside a macro body.
    pub(super) fn token_constructor(&mut self, ty: &str, method: &str, tokens: &[u32]) {
        let Some(is_vec) = constructor_kind(ty, method) else {
            return;
        };
        let args = self.src.split_args(tokens);
        let Some(site) = args.first().and_then(|a| self.token_opts(a)) else {
            return;
        };
        let labels = if is_vec {
            args.get(1)
                .and_then(|a| self.token_label_array(a))
                .flatten()
        } else {
            Some(Vec::new())
        };
        self.emit_prometheus(site, labels);
    }

    /// The same constructors in code; `args` is the argument group.
    pub(super) fn ast_constructor(&mut self, ty: &str, method: &str, args: u32) {
        let Some(is_vec) = constructor_kind(ty, method) else {
            return;
        };
        let src = self.src;
        let tokens = src.level(args);
        let args = src.split_args(&tokens);
        let Some(site) = args.first().and_then(|a| self.ast_opts(a)) else {
            return;
        };
        let labels = if is_vec {
            args.get(1).and_then(|a| self.ast_label_array(a)).flatten()
        } else {
            Some(Vec::new())
        };
        self.emit_prometheus(site, labels);
    }

    fn emit_prometheus(&mut self, site: PromSite, labels: Option<Vec<Label>>) {
        emit_prometheus(&mut self.collector, site, labels);
    }

    /// An options argument as tokens: a name literal, `opts!(…)`,
    /// `histogram_opts!(…)` or `XxxOpts::new(…)`, then a `.method(…)` chain.
    fn token_opts(&mut self, arg: &[u32]) -> Option<PromSite> {
        let src = self.src;
        let arg = src.strip_ref(arg);
        let (mut site, chain) = match arg {
            [lit, chain @ ..] if src.is_literal(Some(lit)) => (self.plain_name(&arg[..1])?, chain),
            [m, bang, g, chain @ ..]
                if src.ident(Some(m)).is_some()
                    && src.is_punct(Some(bang), b'!')
                    && src.group(Some(g)).is_some() =>
            {
                if !matches!(src.ident(Some(m)), Some("opts" | "histogram_opts")) {
                    return None;
                }
                (self.opts_macro(&src.level(*g))?, chain)
            }
            _ => {
                let ctor = (0..arg.len()).find(|&i| src.path_call(arg, i, &["new"]).is_some())?;
                if !src.text_of(arg[ctor]).ends_with("Opts") {
                    return None;
                }
                let inner = src.level(arg[ctor + 4]);
                (
                    self.plain_name(src.split_args(&inner).first()?)?,
                    &arg[ctor + 5..],
                )
            }
        };
        for window in chain.windows(3) {
            let [dot, method, g] = window else {
                continue;
            };
            if !src.is_punct(Some(dot), b'.') || src.group(Some(g)).is_none() {
                continue;
            }
            let Some(method) = src.ident(Some(method)) else {
                continue;
            };
            let inner = src.level(*g);
            if method == "const_label" {
                let label = src
                    .split_args(&inner)
                    .first()
                    .and_then(|k| self.token_label(k));
                site.add_const_label(label);
            } else {
                site.chained(method, || {
                    let [arg] = src.split_args(&inner)[..] else {
                        return None;
                    };
                    Some(self.token_string(arg)?.value.into_owned())
                });
            }
        }
        Some(site)
    }

    /// The name argument of the options, whatever its value: whether it
    /// names a metric is only known once the namespace is.
    fn plain_name(&mut self, arg: &[u32]) -> Option<PromSite> {
        let lit = self.token_string(arg)?;
        Some(PromSite::new(self.raw_name_site(&lit)?))
    }

    /// `opts!(name, help)` / `opts!(name, help, labels! {"k" => "v"})`.
    fn opts_macro(&mut self, inner: &[u32]) -> Option<PromSite> {
        let src = self.src;
        let args = src.split_args(inner);
        let mut site = self.plain_name(args.first()?)?;
        for extra in args.iter().skip(2) {
            if let [l, b, map] = extra {
                if src.is_ident(Some(l), "labels")
                    && src.is_punct(Some(b), b'!')
                    && src.group(Some(map)).is_some()
                {
                    let map = src.level(*map);
                    for pair in src.split_args(&map) {
                        let label = src.pair_key(pair).and_then(|k| self.token_label(k));
                        site.add_const_label(label);
                    }
                }
            }
        }
        Some(site)
    }

    /// `&["a", "b"]` / `["a", "b"]`: `Some(Some(labels))`; an array with
    /// non-literal elements: `Some(None)`; not an array: `None`.
    fn token_label_array(&mut self, arg: &[u32]) -> Option<Option<Vec<Label>>> {
        let src = self.src;
        let [g] = src.strip_ref(arg) else {
            return None;
        };
        if src.kind(*g) != Kind::Open(Delim::Bracket) {
            return None;
        }
        let inner = src.level(*g);
        let labels = src
            .split_args(&inner)
            .into_iter()
            .map(|e| self.token_label(e))
            .collect();
        Some(labels)
    }

    // ----- the same in code, read as expressions ---------------------------

    /// Whether `expr` is one `"…"` / `r"…"` literal (what `syn` calls a
    /// `LitStr`; byte and C strings are other literals).
    fn str_literal(&self, expr: &[u32]) -> Option<u32> {
        let src = self.src;
        let [lit] = expr else {
            return None;
        };
        let text = src.text_of(*lit);
        (src.kind(*lit) == Kind::Str && (text.starts_with('"') || text.starts_with('r')))
            .then_some(*lit)
    }

    /// The inside of `(expr)` (a parenthesised expression, not a tuple).
    fn paren_inner(&self, expr: &[u32]) -> Option<Vec<u32>> {
        let src = self.src;
        let [g] = expr else {
            return None;
        };
        if src.kind(*g) != Kind::Open(Delim::Paren) {
            return None;
        }
        let inner = src.level(*g);
        let tuple = inner.is_empty() || inner.iter().any(|t| src.is_punct(Some(t), b','));
        (!tuple).then_some(inner)
    }

    /// `receiver.method(args)`: the receiver, method token and argument
    /// group.
    fn method_call<'a>(&self, expr: &'a [u32]) -> Option<(&'a [u32], u32, u32)> {
        let src = self.src;
        let [receiver @ .., dot, method, g] = expr else {
            return None;
        };
        let ok = !receiver.is_empty()
            && src.is_punct(Some(dot), b'.')
            && src.ident(Some(method)).is_some()
            && src.kind(*g) == Kind::Open(Delim::Paren);
        ok.then_some((receiver, *method, *g))
    }

    /// `path::Xxx(args)` with a plain path: its segments and argument group.
    fn path_call_expr(&self, expr: &[u32]) -> Option<(Vec<u32>, u32)> {
        let src = self.src;
        let [path @ .., g] = expr else {
            return None;
        };
        if src.kind(*g) != Kind::Open(Delim::Paren) {
            return None;
        }
        Some((self.path_segments(path)?, *g))
    }

    /// `a::b::c` (a leading `::` allowed) as its segment idents.
    fn path_segments(&self, path: &[u32]) -> Option<Vec<u32>> {
        let src = self.src;
        let colons =
            |k: usize| src.is_punct(path.get(k), b':') && src.is_punct(path.get(k + 1), b':');
        let mut at = if colons(0) { 2 } else { 0 };
        let mut segments = Vec::new();
        loop {
            let seg = *path.get(at)?;
            src.ident(Some(&seg))?;
            segments.push(seg);
            at += 1;
            if at == path.len() {
                return Some(segments);
            }
            if !colons(at) {
                return None;
            }
            at += 2;
        }
    }

    /// The options expression as a parser reads it. A method chain is
    /// peeled from its end in a loop, not recursion, so that a chain of
    /// any length costs no stack.
    fn ast_opts(&mut self, expr: &[u32]) -> Option<PromSite> {
        let src = self.src;
        let mut tokens = expr.to_vec();
        let (mut start, mut end) = (0, tokens.len());
        let mut methods = Vec::new();
        let mut site = loop {
            let expr = &tokens[start..end];
            if let Some(lit) = self.str_literal(expr) {
                let lit = self.lit_info(lit)?;
                break PromSite::new(self.raw_name_site(&lit)?);
            }
            if src.is_punct(expr.first(), b'&') {
                start += 1 + usize::from(src.is_ident(expr.get(1), "mut"));
                continue;
            }
            if let Some(inner) = self.paren_inner(expr) {
                tokens = inner;
                (start, end) = (0, tokens.len());
                continue;
            }
            if let Some((receiver, method, g)) = self.method_call(expr) {
                methods.push((method, g));
                end = start + receiver.len();
                continue;
            }
            if let Some((segments, g)) = self.path_call_expr(expr) {
                let n = segments.len();
                if n < 2
                    || src.text_of(segments[n - 1]) != "new"
                    || !src.text_of(segments[n - 2]).ends_with("Opts")
                {
                    return None;
                }
                let inner = src.level(g);
                let first = *src.split_args(&inner).first()?;
                break self.ast_opts(first)?;
            }
            // A macro: `opts!(…)`, `prometheus::histogram_opts!(…)`.
            let [path @ .., bang, g] = expr else {
                return None;
            };
            if !src.is_punct(Some(bang), b'!') || src.group(Some(g)).is_none() {
                return None;
            }
            let last = *self.path_segments(path)?.last()?;
            if !matches!(src.text_of(last), "opts" | "histogram_opts") {
                return None;
            }
            break self.opts_macro(&src.level(*g))?;
        };
        // Innermost call first, as the chain runs.
        for (method, g) in methods.into_iter().rev() {
            let method = src.text_of(method);
            let inner = src.level(g);
            let args = src.split_args(&inner);
            if method == "const_label" {
                let label = args.first().and_then(|k| self.ast_label(k));
                site.add_const_label(label);
            } else {
                site.chained(method, || match args[..] {
                    [arg] => self.ast_string(arg),
                    _ => None,
                });
            }
        }
        Some(site)
    }

    /// A string literal or `concat!` of literals, in code.
    fn ast_string(&self, expr: &[u32]) -> Option<String> {
        let src = self.src;
        if let Some(lit) = self.str_literal(expr) {
            return Some(self.lit_info(lit)?.value.into_owned());
        }
        if let Some(inner) = self.paren_inner(expr) {
            return self.ast_string(&inner);
        }
        match expr {
            [m, bang, g]
                if src.is_ident(Some(m), "concat")
                    && src.is_punct(Some(bang), b'!')
                    && src.group(Some(g)).is_some() =>
            {
                self.concat_value(&src.level(*g))
            }
            _ => None,
        }
    }

    fn ast_label_array(&mut self, mut expr: &[u32]) -> Option<Option<Vec<Label>>> {
        let src = self.src;
        while src.is_punct(expr.first(), b'&') {
            expr = &expr[1 + usize::from(src.is_ident(expr.get(1), "mut"))..];
        }
        let [g] = expr else {
            return None;
        };
        if src.kind(*g) != Kind::Open(Delim::Bracket) {
            return None;
        }
        let inner = src.level(*g);
        // `[x; n]` is a repeat expression, not an array.
        if inner.iter().any(|t| src.is_punct(Some(t), b';')) {
            return None;
        }
        Some(
            src.split_args(&inner)
                .into_iter()
                .map(|e| self.ast_label(e))
                .collect(),
        )
    }

    fn ast_label(&mut self, expr: &[u32]) -> Option<Label> {
        let lit = self.str_literal(expr)?;
        let lit = self.lit_info(lit)?;
        Some(self.label(&lit))
    }
}
