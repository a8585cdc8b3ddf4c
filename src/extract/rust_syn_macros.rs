//! Macro bodies as token streams.
//!
//! `syn` does not parse macro bodies, yet that is where most cache keys and
//! metric names live (`format!`, `tracing::info!`, `json!`, `counter!`,
//! `lazy_static!`). The walker here finds every literal in a token stream,
//! recursively, skipping `#[doc]` attributes (which is what `///` becomes),
//! joins `concat!` pieces into one value, and hands the metric libraries'
//! macros and constructors to `rust_syn_metrics` on the way.

use proc_macro2::{Delimiter, Group, Spacing, TokenStream, TokenTree};

use super::collect::LitInfo;
use super::exposition::metric_sites_in;
use super::rust_syn::Walker;
use super::rust_tt::concat_piece;
use super::rust_walk::{NameSite, METRICS_EMITTERS};
use super::{Label, LiteralKind};

impl Walker<'_> {
    pub(super) fn walk_stream(&mut self, stream: TokenStream) {
        let tokens: Vec<TokenTree> = stream.into_iter().collect();
        self.walk_tokens(&tokens, false);
    }

    /// Attribute arguments: like any tokens, except `doc = "…"` (as written
    /// inside `cfg_attr`) is prose.
    pub(super) fn walk_attribute_tokens(&mut self, stream: TokenStream) {
        let tokens: Vec<TokenTree> = stream.into_iter().collect();
        self.walk_tokens(&tokens, true);
    }

    fn walk_tokens(&mut self, t: &[TokenTree], in_attribute: bool) {
        let mut i = 0;
        while i < t.len() {
            match &t[i] {
                TokenTree::Punct(p) if p.as_char() == '#' => {
                    let bang = usize::from(is_punct(t.get(i + 1), '!'));
                    match t.get(i + 1 + bang) {
                        Some(TokenTree::Group(g))
                            if g.delimiter() == Delimiter::Bracket && starts_with_doc(g) =>
                        {
                            i += 2 + bang;
                        }
                        _ => i += 1,
                    }
                }
                TokenTree::Ident(id)
                    if in_attribute
                        && (id == "doc" || super::rust_walk::names_a_path(&id.to_string()))
                        && is_punct(t.get(i + 1), '=') =>
                {
                    i += 3;
                }
                TokenTree::Ident(id) => {
                    if let (Some(TokenTree::Punct(p)), Some(TokenTree::Group(g))) =
                        (t.get(i + 1), t.get(i + 2))
                    {
                        if p.as_char() == '!' {
                            let start = self.bytes(t[path_start(t, i)].span()).start;
                            let end = self.bytes(g.span_close()).end;
                            self.macro_invocation(&id.to_string(), start..end, g.stream());
                            i += 3;
                            continue;
                        }
                    }
                    if let Some(args) = path_call(t, i, &["new", "with_opts"]) {
                        let ty = id.to_string();
                        let method = t[i + 3].to_string();
                        self.token_constructor(&ty, &method, args.stream());
                    }
                    i += 1;
                }
                TokenTree::Literal(lit) => {
                    self.literal_at(lit.span());
                    i += 1;
                }
                TokenTree::Group(g) => {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    self.walk_tokens(&inner, in_attribute);
                    i += 1;
                }
                TokenTree::Punct(_) => i += 1,
            }
        }
    }

    /// One `name!(…)` invocation spanning `whole` bytes.
    pub(super) fn macro_invocation(
        &mut self,
        name: &str,
        whole: std::ops::Range<usize>,
        body: TokenStream,
    ) {
        let tokens: Vec<TokenTree> = body.into_iter().collect();
        if name == "concat" {
            if let Some(value) = self.concat_value(&tokens) {
                let lit = LitInfo {
                    value: value.into(),
                    kind: LiteralKind::Concat,
                    span: whole,
                    verbatim_at: None,
                    runs: &[],
                };
                let context = self.context.last().map(String::as_str);
                self.collector.literal(&lit, context);
                return;
            }
        } else if let Some(&(_, values)) = METRICS_EMITTERS.iter().find(|(n, _)| *n == name) {
            self.metrics_macro(&tokens, values);
        } else if name.starts_with("register_") {
            self.prometheus_register(name, &tokens);
        }
        self.walk_tokens(&tokens, false);
    }

    /// The joined value of `concat!` when every piece is a literal (nested
    /// `concat!` included, as rustc expands it eagerly).
    pub(super) fn concat_value(&self, tokens: &[TokenTree]) -> Option<String> {
        let mut out = String::new();
        for arg in split_args(tokens) {
            match arg {
                [TokenTree::Literal(lit)] => out.push_str(&self.concat_piece(lit.span(), false)?),
                [TokenTree::Punct(minus), TokenTree::Literal(lit)] if minus.as_char() == '-' => {
                    out.push_str(&self.concat_piece(lit.span(), true)?);
                }
                [TokenTree::Ident(b)] if b == "true" || b == "false" => {
                    out.push_str(&b.to_string())
                }
                [TokenTree::Ident(m), TokenTree::Punct(bang), TokenTree::Group(g)]
                    if m == "concat" && bang.as_char() == '!' =>
                {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    out.push_str(&self.concat_value(&inner)?);
                }
                _ => return None,
            }
        }
        Some(out)
    }

    fn concat_piece(&self, span: proc_macro2::Span, negative: bool) -> Option<String> {
        concat_piece(self.collector.text().get(self.bytes(span))?, negative)
    }

    /// A metric-name argument written as one literal or `concat!`.
    pub(super) fn token_name(&mut self, arg: &[TokenTree]) -> Option<NameSite> {
        let lit = self.token_string(arg)?;
        self.name_site(&lit)
    }

    /// An argument written as one string literal or `concat!`, whatever its
    /// value (a name part such as a namespace need not be a metric name).
    pub(super) fn token_string(&self, arg: &[TokenTree]) -> Option<LitInfo<'static>> {
        let lit = match arg {
            [TokenTree::Literal(lit)] => self.lit_info(lit.span())?,
            [TokenTree::Ident(m), TokenTree::Punct(bang), TokenTree::Group(g)]
                if m == "concat" && bang.as_char() == '!' =>
            {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                let start = self.bytes(m.span()).start;
                LitInfo {
                    value: self.concat_value(&inner)?.into(),
                    kind: LiteralKind::Concat,
                    span: start..self.bytes(g.span_close()).end,
                    verbatim_at: None,
                    runs: &[],
                }
            }
            _ => return None,
        };
        Some(lit)
    }

    /// `lit` as a name site whatever its value, pointing at the value; only
    /// string literals (not byte or C strings) can name a metric.
    pub(super) fn raw_name_site(&mut self, lit: &LitInfo<'_>) -> Option<NameSite> {
        if !matches!(
            lit.kind,
            LiteralKind::Str | LiteralKind::RawStr | LiteralKind::Concat
        ) {
            return None;
        }
        Some(NameSite {
            name: lit.value.clone().into_owned(),
            range: self.collector.range(lit.source_range(0..lit.value.len())),
        })
    }

    pub(super) fn name_site(&mut self, lit: &LitInfo<'_>) -> Option<NameSite> {
        let found = metric_sites_in(&lit.value, &self.collector.config().metric_prefix);
        let whole = 0..lit.value.len();
        found.iter().find(|s| s.name == whole)?;
        Some(NameSite {
            name: lit.value.clone().into_owned(),
            range: self.collector.range(lit.source_range(whole)),
        })
    }

    pub(super) fn token_label(&mut self, arg: &[TokenTree]) -> Option<Label> {
        let [TokenTree::Literal(lit)] = arg else {
            return None;
        };
        let lit = self.lit_info(lit.span())?;
        Some(self.label(&lit))
    }

    pub(super) fn label(&mut self, lit: &LitInfo<'_>) -> Label {
        Label {
            name: lit.value.clone().into_owned(),
            range: self.collector.range(lit.source_range(0..lit.value.len())),
        }
    }
}

fn is_punct(t: Option<&TokenTree>, c: char) -> bool {
    matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

fn starts_with_doc(g: &Group) -> bool {
    matches!(g.stream().into_iter().next(), Some(TokenTree::Ident(id)) if id == "doc")
}

/// Index of the first token of the `a::b::name` path ending at `i`.
fn path_start(t: &[TokenTree], mut i: usize) -> usize {
    while i >= 3
        && is_punct(Some(&t[i - 1]), ':')
        && is_punct(Some(&t[i - 2]), ':')
        && matches!(t[i - 3], TokenTree::Ident(_))
    {
        i -= 3;
    }
    i
}

/// `Ident :: method (…)` at `i`, with `method` one of `methods`: the
/// argument group.
pub(super) fn path_call<'a>(t: &'a [TokenTree], i: usize, methods: &[&str]) -> Option<&'a Group> {
    match t.get(i..i + 5)? {
        [TokenTree::Ident(_), TokenTree::Punct(c1), TokenTree::Punct(c2), TokenTree::Ident(m), TokenTree::Group(g)]
            if c1.as_char() == ':'
                && c1.spacing() == Spacing::Joint
                && c2.as_char() == ':'
                && g.delimiter() == Delimiter::Parenthesis
                && methods.iter().any(|name| m == name) =>
        {
            Some(g)
        }
        _ => None,
    }
}

/// Top-level comma-separated arguments; a trailing comma adds nothing.
pub(super) fn split_args(tokens: &[TokenTree]) -> Vec<&[TokenTree]> {
    let mut out: Vec<&[TokenTree]> = tokens
        .split(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
        .collect();
    if out.last().is_some_and(|a| a.is_empty()) {
        out.pop();
    }
    out
}
