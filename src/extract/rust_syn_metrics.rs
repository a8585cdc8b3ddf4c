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
//! Each recognised call yields one site for its name literal; the plain
//! literal scan sees the same literal too, and the collector keeps the richer
//! of the two. Names or labels that are not literals make labels unknown.

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

use super::rust_prom::{constructor_kind, emit_prometheus, PromSite};
use super::rust_syn::Walker;
use super::rust_syn_macros::{path_call, split_args};
use super::{Label, MetricVia};

impl Walker<'_> {
    /// `metrics` crate: `counter!(target: …, "dw_x", "k" => v, …)`.
    pub(super) fn metrics_macro(&mut self, tokens: &[TokenTree], value_args: usize) {
        let args = split_args(tokens);
        let mut args = args.into_iter().skip_while(|a| is_named_arg(a));
        let Some(name) = args.next().and_then(|a| self.token_name(a)) else {
            return;
        };
        let mut labels = Vec::new();
        let mut unknown = false;
        let mut collections = 0;
        for (position, arg) in args.enumerate() {
            if let Some(key) = pair_key(arg) {
                match self.token_label(key) {
                    Some(label) => labels.push(label),
                    None => unknown = true,
                }
            } else if position >= value_args && !is_number(arg) {
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
    pub(super) fn prometheus_register(&mut self, name: &str, tokens: &[TokenTree]) {
        if !["counter", "gauge", "histogram"]
            .iter()
            .any(|k| name.contains(k))
        {
            return;
        }
        let is_vec = name.contains("_vec");
        let args = split_args(tokens);
        if !is_vec && args.iter().any(|a| pair_key(a).is_some()) {
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
    pub(super) fn token_constructor(&mut self, ty: &str, method: &str, args: TokenStream) {
        let Some(is_vec) = constructor_kind(ty, method) else {
            return;
        };
        let tokens: Vec<TokenTree> = args.into_iter().collect();
        let args = split_args(&tokens);
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

    /// The same constructors in parsed code.
    pub(super) fn ast_constructor(
        &mut self,
        ty: &str,
        method: &str,
        args: &syn::punctuated::Punctuated<syn::Expr, syn::Token![,]>,
    ) {
        let Some(is_vec) = constructor_kind(ty, method) else {
            return;
        };
        let Some(site) = args.first().and_then(|a| self.ast_opts(a)) else {
            return;
        };
        let labels = if is_vec {
            args.iter()
                .nth(1)
                .and_then(|a| self.ast_label_array(a))
                .flatten()
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
    fn token_opts(&mut self, arg: &[TokenTree]) -> Option<PromSite> {
        let arg = strip_ref(arg);
        let (mut site, chain) = match arg {
            [TokenTree::Literal(_), chain @ ..] => (self.plain_name(&arg[..1])?, chain),
            [TokenTree::Ident(m), TokenTree::Punct(bang), TokenTree::Group(g), chain @ ..]
                if bang.as_char() == '!' =>
            {
                if !(m == "opts" || m == "histogram_opts") {
                    return None;
                }
                (self.opts_macro(g.stream())?, chain)
            }
            _ => {
                let ctor = (0..arg.len()).find(|&i| path_call(arg, i, &["new"]).is_some())?;
                if !arg[ctor].to_string().ends_with("Opts") {
                    return None;
                }
                let TokenTree::Group(g) = &arg[ctor + 4] else {
                    return None;
                };
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                (
                    self.plain_name(split_args(&inner).first()?)?,
                    &arg[ctor + 5..],
                )
            }
        };
        for window in chain.windows(3) {
            let [TokenTree::Punct(dot), TokenTree::Ident(method), TokenTree::Group(g)] = window
            else {
                continue;
            };
            if dot.as_char() != '.' {
                continue;
            }
            let inner: Vec<TokenTree> = g.stream().into_iter().collect();
            if method == "const_label" {
                let label = split_args(&inner).first().and_then(|k| self.token_label(k));
                site.add_const_label(label);
            } else {
                site.chained(&method.to_string(), || {
                    let [arg] = split_args(&inner)[..] else {
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
    fn plain_name(&mut self, arg: &[TokenTree]) -> Option<PromSite> {
        let lit = self.token_string(arg)?;
        Some(PromSite::new(self.raw_name_site(&lit)?))
    }

    /// `opts!(name, help)` / `opts!(name, help, labels! {"k" => "v"})`.
    fn opts_macro(&mut self, body: TokenStream) -> Option<PromSite> {
        let inner: Vec<TokenTree> = body.into_iter().collect();
        let args = split_args(&inner);
        let mut site = self.plain_name(args.first()?)?;
        for extra in args.iter().skip(2) {
            if let [TokenTree::Ident(l), TokenTree::Punct(b), TokenTree::Group(map)] = extra {
                if l == "labels" && b.as_char() == '!' {
                    let map: Vec<TokenTree> = map.stream().into_iter().collect();
                    for pair in split_args(&map) {
                        let label = pair_key(pair).and_then(|k| self.token_label(k));
                        site.add_const_label(label);
                    }
                }
            }
        }
        Some(site)
    }

    /// `&["a", "b"]` / `["a", "b"]`: `Some(Some(labels))`; an array with
    /// non-literal elements: `Some(None)`; not an array: `None`.
    fn token_label_array(&mut self, arg: &[TokenTree]) -> Option<Option<Vec<Label>>> {
        let [TokenTree::Group(g)] = strip_ref(arg) else {
            return None;
        };
        if g.delimiter() != Delimiter::Bracket {
            return None;
        }
        let inner: Vec<TokenTree> = g.stream().into_iter().collect();
        let labels = split_args(&inner)
            .into_iter()
            .map(|e| self.token_label(e))
            .collect();
        Some(labels)
    }

    fn ast_opts(&mut self, expr: &syn::Expr) -> Option<PromSite> {
        match expr {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => {
                let lit = self.lit_info(s.span())?;
                Some(PromSite::new(self.raw_name_site(&lit)?))
            }
            syn::Expr::Reference(r) => self.ast_opts(&r.expr),
            syn::Expr::Paren(p) => self.ast_opts(&p.expr),
            syn::Expr::Group(g) => self.ast_opts(&g.expr),
            syn::Expr::Call(call) => {
                let syn::Expr::Path(p) = &*call.func else {
                    return None;
                };
                let segments = &p.path.segments;
                let n = segments.len();
                if n < 2
                    || segments[n - 1].ident != "new"
                    || !segments[n - 2].ident.to_string().ends_with("Opts")
                {
                    return None;
                }
                self.ast_opts(call.args.first()?)
            }
            syn::Expr::Macro(m) => {
                let last = m.mac.path.segments.last()?;
                if last.ident == "opts" || last.ident == "histogram_opts" {
                    self.opts_macro(m.mac.tokens.clone())
                } else {
                    None
                }
            }
            syn::Expr::MethodCall(call) => {
                let mut site = self.ast_opts(&call.receiver)?;
                if call.method == "const_label" {
                    let label = call.args.first().and_then(|k| self.ast_label(k));
                    site.add_const_label(label);
                } else {
                    site.chained(&call.method.to_string(), || match call.args.len() {
                        1 => self.ast_string(call.args.first()?),
                        _ => None,
                    });
                }
                Some(site)
            }
            _ => None,
        }
    }

    /// A string literal or `concat!` of literals, in parsed code.
    fn ast_string(&self, expr: &syn::Expr) -> Option<String> {
        match expr {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(self.lit_info(s.span())?.value.into_owned()),
            syn::Expr::Paren(p) => self.ast_string(&p.expr),
            syn::Expr::Group(g) => self.ast_string(&g.expr),
            syn::Expr::Macro(m) if m.mac.path.is_ident("concat") => {
                let tokens: Vec<TokenTree> = m.mac.tokens.clone().into_iter().collect();
                self.concat_value(&tokens)
            }
            _ => None,
        }
    }

    fn ast_label_array(&mut self, expr: &syn::Expr) -> Option<Option<Vec<Label>>> {
        match expr {
            syn::Expr::Reference(r) => self.ast_label_array(&r.expr),
            syn::Expr::Array(array) => {
                Some(array.elems.iter().map(|e| self.ast_label(e)).collect())
            }
            _ => None,
        }
    }

    fn ast_label(&mut self, expr: &syn::Expr) -> Option<Label> {
        let syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) = expr
        else {
            return None;
        };
        let lit = self.lit_info(s.span())?;
        Some(self.label(&lit))
    }
}

fn strip_ref(arg: &[TokenTree]) -> &[TokenTree] {
    match arg {
        [TokenTree::Punct(amp), rest @ ..] if amp.as_char() == '&' => rest,
        _ => arg,
    }
}

/// `target: …` / `level: …` arguments of `metrics` macros (not `a::b`).
fn is_named_arg(arg: &[TokenTree]) -> bool {
    matches!(arg, [TokenTree::Ident(_), TokenTree::Punct(p), ..]
        if p.as_char() == ':' && p.spacing() == Spacing::Alone)
}

/// The key of a `key => value` argument.
fn pair_key(arg: &[TokenTree]) -> Option<&[TokenTree]> {
    let at = arg.windows(2).position(|w| {
        matches!(w, [TokenTree::Punct(eq), TokenTree::Punct(gt)]
            if eq.as_char() == '=' && eq.spacing() == Spacing::Joint && gt.as_char() == '>')
    })?;
    Some(&arg[..at])
}

fn is_number(arg: &[TokenTree]) -> bool {
    let arg = match arg {
        [TokenTree::Punct(minus), rest @ ..] if minus.as_char() == '-' => rest,
        _ => arg,
    };
    matches!(arg, [TokenTree::Literal(lit)]
        if lit.to_string().starts_with(|c: char| c.is_ascii_digit()))
}
