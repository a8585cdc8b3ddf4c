//! The Rust extractor's walk over token trees: items, contexts, macro bodies.
//!
//! What the gate needs from a Rust file is small: every string literal that
//! is code (not a doc comment), the item each one sits in, the items a
//! policy `owner` may name, and the arguments of a few macro and
//! constructor calls. None of that needs a syntax tree, only to know where
//! items start and end, which a token walk sees from their keywords:
//!
//! - **code** (what a parser would parse): at each statement start of a
//!   module, block, `impl` or `trait` body, attributes and an item header
//!   (`pub const fn`, `impl<T> Trait for Type`, `mod name { … }`) decide
//!   the context of everything up to the item's end, and module-level items
//!   (through inline modules) are the file's owners. Attributes follow
//!   `syn`'s reading: `#[doc]` is prose, `#[path(…)]` is tokens,
//!   `#[path = expr]` is code. `Type::new(…)` calls are read as the parser
//!   read them ([`super::rust_prom`]).
//! - **tokens** (macro bodies, attribute arguments): every literal, nested
//!   macro invocations, `concat!` joined, the metric libraries' macros.
//!
//! Recursion follows group nesting, which the caller bounds before walking.

use std::borrow::Cow;

use super::collect::{Collector, LitInfo};
use super::exposition::is_metric_name;
use super::rust_lex::{Delim, Kind};
use super::rust_tt::{concat_piece, Src};
use super::{lexical, ExtractConfig, FileFacts, Label, LiteralKind, TextRange};

/// `metrics` macros that emit a series (the walker dispatches them to
/// [`super::rust_prom`], which reads their arguments), with how many positional value
/// arguments (not labels) follow the name in their old-style forms.
pub(crate) const METRICS_EMITTERS: &[(&str, usize)] = &[
    ("counter", 0),
    ("gauge", 0),
    ("histogram", 0),
    ("increment_counter", 0),
    ("increment_gauge", 1),
    ("decrement_gauge", 1),
    ("absolute_counter", 1),
];

/// The facts of a tokenized file. `levels` are level buffers to walk with
/// (see [`Walker::with_level`]), left there for the next file.
pub(crate) fn walk<'t>(
    src: Src<'t>,
    config: &'t ExtractConfig,
    module_path: &'t [String],
    levels: &mut Vec<Vec<u32>>,
) -> FileFacts {
    let mut walker = Walker {
        src,
        collector: Collector::new(src.text, config),
        context: Vec::new(),
        items: Vec::new(),
        path: module_path.iter().map(String::as_str).collect(),
        spare_levels: std::mem::take(levels),
    };
    let mut top = walker.spare_levels.pop().unwrap_or_default();
    src.level_in_into(0, src.toks.len() as u32, &mut top);
    walker.code(&top, Level::Items { collect: true });
    walker.spare_levels.push(top);
    let items = std::mem::take(&mut walker.items);
    *levels = std::mem::take(&mut walker.spare_levels);
    walker.collector.finish(items, None)
}

/// A metric name argument that is one literal (or one `concat!`) whose
/// whole value is a metric name.
pub(super) struct NameSite {
    pub(super) name: String,
    pub(super) range: TextRange,
}

/// Where in the code a level of tokens sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// A module or block: items may start at each statement; `collect`
    /// when they are module items a policy owner may name.
    Items { collect: bool },
    /// An `impl` body: `fn` and `const` read as `Type::name`.
    Impl,
    /// A `trait` body: likewise `Trait::name`.
    Trait,
    /// Anything else: an expression, signature, field list or `extern`
    /// block (whose items have no context of their own).
    Expr,
}

/// The kinds of item whose extent or name matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Fn,
    /// `struct`, `enum`, `union`.
    Adt,
    Trait,
    TraitAlias,
    Impl,
    Mod,
    Const,
    Static,
    Type,
    /// `use`, `extern crate`: nothing inside.
    Plain,
    /// `extern "C" { … }`.
    Foreign,
    /// `macro_rules! name { … }` (or any `mac! name { … }`).
    MacroRules,
    /// What `syn` leaves as tokens (a `fn` without a body outside a trait).
    Verbatim,
}

/// An item found at a statement start: indices are into the level's slice.
#[derive(Debug)]
struct Item {
    kind: ItemKind,
    /// The keyword (`fn`, `impl`, …).
    keyword: usize,
    /// The name token.
    name: Option<usize>,
    /// The body group, when the item has one.
    body: Option<usize>,
    /// Just past the item.
    end: usize,
}

pub(super) struct Walker<'t> {
    pub(super) src: Src<'t>,
    pub(super) collector: Collector<'t>,
    /// Enclosing named items, innermost last.
    /// (Names as written borrow the file; only `Type::fn` is built.)
    context: Vec<Cow<'t, str>>,
    /// Module items found so far (fully qualified).
    items: Vec<String>,
    /// The module path of the items being collected.
    path: Vec<&'t str>,
    /// Level buffers of groups already walked, for the next groups to
    /// reuse (one allocation per nesting depth instead of one per group).
    spare_levels: Vec<Vec<u32>>,
}

/// `r#type` is the item `type`.
fn ident_name(raw: &str) -> &str {
    raw.strip_prefix("r#").unwrap_or(raw)
}

/// Keywords that cannot name a path segment (so `if !(x)` is no macro).
fn is_reserved(word: &str) -> bool {
    matches!(
        word,
        "as" | "break"
            | "const"
            | "continue"
            | "else"
            | "enum"
            | "extern"
            | "false"
            | "fn"
            | "for"
            | "if"
            | "impl"
            | "in"
            | "let"
            | "loop"
            | "match"
            | "mod"
            | "move"
            | "mut"
            | "pub"
            | "ref"
            | "return"
            | "static"
            | "struct"
            | "trait"
            | "true"
            | "type"
            | "unsafe"
            | "use"
            | "where"
            | "while"
            | "async"
            | "await"
            | "dyn"
            | "abstract"
            | "become"
            | "box"
            | "do"
            | "final"
            | "macro"
            | "override"
            | "priv"
            | "typeof"
            | "unsized"
            | "virtual"
            | "yield"
            | "try"
            | "gen"
    )
}

impl<'t> Walker<'t> {
    /// Runs `f` on the level inside group `open` (a doc comment's: empty),
    /// held in a spare buffer: one allocation per nesting depth for the
    /// whole walk (and, through [`walk`]'s caller, for every file a worker
    /// walks) instead of one per group.
    fn with_level<R>(&mut self, open: u32, f: impl FnOnce(&mut Self, &[u32]) -> R) -> R {
        let mut level = self.spare_levels.pop().unwrap_or_default();
        self.src.level_into(open, &mut level);
        let out = f(self, &level);
        self.spare_levels.push(level);
        out
    }

    // ----- code --------------------------------------------------------

    fn code(&mut self, t: &[u32], level: Level) {
        let src = self.src;
        let statements = level != Level::Expr;
        let mut stmt_start = statements;
        let mut i = 0;
        while i < t.len() {
            if stmt_start {
                // Inner attributes belong to the enclosing item, not the next.
                while let Some(next) = self.src.inner_attribute_end(t, i) {
                    self.attributes(t, i..next);
                    i = next;
                }
                let mut j = i;
                while let Some(next) = self.src.attribute_end(t, j) {
                    j = next;
                }
                if let Some(item) = self.src.item_at(t, j, level) {
                    self.item(t, i..j, &item, level);
                    i = item.end;
                    continue;
                }
                self.attributes(t, i..j);
                stmt_start = false;
                i = j;
                if i >= t.len() {
                    break;
                }
            }
            let k = t[i];
            match src.kind(k) {
                Kind::Punct { ch: b'#', .. } => {
                    if let Some(end) = self.src.attribute_end(t, i) {
                        self.attributes(t, i..end);
                        i = end;
                        continue;
                    }
                    i += 1;
                }
                Kind::Punct { ch: b';', .. } => {
                    stmt_start = statements;
                    i += 1;
                }
                Kind::Ident => {
                    let word = src.text_of(k);
                    let macro_group = (src.is_punct(t.get(i + 1), b'!')
                        && src.group(t.get(i + 2)).is_some()
                        && !is_reserved(word))
                    .then(|| t[i + 2]);
                    if let Some(g) = macro_group {
                        self.code_macro(t, i, g);
                        stmt_start = statements && src.group(Some(&g)) == Some(Delim::Brace);
                        i += 3;
                        continue;
                    }
                    if let Some(args) = src.path_call(t, i, &["new", "with_opts"]) {
                        let method = src.text_of(t[i + 3]);
                        self.ast_constructor(word, method, args);
                    }
                    stmt_start = false;
                    i += 1;
                }
                Kind::Str => {
                    self.literal_at(k);
                    stmt_start = false;
                    i += 1;
                }
                Kind::Open(delim) => {
                    let level = if delim == Delim::Brace {
                        Level::Items { collect: false }
                    } else {
                        Level::Expr
                    };
                    self.with_level(k, |walker, inner| walker.code(inner, level));
                    stmt_start = statements && delim == Delim::Brace;
                    i += 1;
                }
                _ => {
                    stmt_start = false;
                    i += 1;
                }
            }
        }
    }

    /// A macro invocation in code: the path's last segment names it, and
    /// it spans from the path's first token (a leading `::` included).
    fn code_macro(&mut self, t: &[u32], i: usize, group: u32) {
        let src = self.src;
        let mut first = src.path_start(t, i);
        if first >= 2
            && src.is_punct(t.get(first - 1), b':')
            && src.punct(t.get(first - 2)) == Some((b':', true))
            && (first < 3 || src.ident(t.get(first - 3)).is_none())
        {
            first -= 2;
        }
        let whole = src.start(t[first])..src.end(group);
        self.with_level(group, |walker, body| {
            walker.macro_invocation(src.text_of(t[i]), whole, body);
        });
    }

    /// The attributes in `t[range]`, read as `syn` reads them.
    fn attributes(&mut self, t: &[u32], range: std::ops::Range<usize>) {
        let src = self.src;
        let mut i = range.start;
        while i < range.end {
            let Some(end) = self.src.attribute_end(t, i) else {
                i += 1;
                continue;
            };
            let g = t[end - 1];
            i = end;
            if src.kind(g) == Kind::Doc {
                continue;
            }
            self.with_level(g, |walker, inner| walker.attribute(inner));
        }
    }

    /// One attribute's tokens, inside its brackets.
    fn attribute(&mut self, inner: &[u32]) {
        let src = self.src;
        // The path: `a::b`, `::a`, then a group, `= expr` or nothing.
        let mut p = usize::from(src.is_punct(inner.first(), b':'));
        p += usize::from(p == 1 && src.is_punct(inner.get(1), b':'));
        let path_from = p;
        while src.ident(inner.get(p)).is_some() {
            p += 1;
            if src.is_punct(inner.get(p), b':') && src.is_punct(inner.get(p + 1), b':') {
                p += 2;
            } else {
                break;
            }
        }
        if p == path_from + 1 && path_from == 0 && src.is_ident(inner.first(), "doc") {
            return;
        }
        match inner.get(p) {
            Some(&g) if src.group(Some(&g)).is_some() && p + 1 == inner.len() => {
                self.with_level(g, |walker, tokens| walker.walk_tokens(tokens, true));
            }
            Some(eq) if src.is_punct(Some(eq), b'=') => {
                self.code(&inner[p + 1..], Level::Expr);
            }
            None => {}
            // Not a meta `syn` would accept; its tokens are still code.
            Some(_) => self.walk_tokens(inner, true),
        }
    }

    /// Walks one item (its attributes are `t[attrs]`) in its context.
    fn item(&mut self, t: &[u32], attrs: std::ops::Range<usize>, item: &Item, level: Level) {
        let src = self.src;
        let name = item.name.map(|n| ident_name(src.text_of(t[n])));
        let context = match (item.kind, level) {
            (ItemKind::Fn | ItemKind::Const, Level::Impl | Level::Trait) => {
                let name = name.unwrap_or_default();
                Some(match self.context.last() {
                    Some(owner) => {
                        let mut path = String::with_capacity(owner.len() + 2 + name.len());
                        path.push_str(owner);
                        path.push_str("::");
                        path.push_str(name);
                        Cow::Owned(path)
                    }
                    None => Cow::Borrowed(name),
                })
            }
            (ItemKind::Type, Level::Impl | Level::Trait) => None,
            (ItemKind::Impl, _) => {
                let header_end = item.body.unwrap_or(item.end);
                self.src
                    .self_type_name(&t[item.keyword + 1..header_end])
                    .map(Cow::Borrowed)
            }
            (
                ItemKind::Fn
                | ItemKind::Adt
                | ItemKind::Trait
                | ItemKind::Const
                | ItemKind::Static
                | ItemKind::Type
                | ItemKind::Mod,
                _,
            ) => name.map(Cow::Borrowed),
            _ => None,
        };
        let collect = matches!(level, Level::Items { collect: true });
        if collect && item.kind != ItemKind::Impl {
            if let Some(name) = name.filter(|n| *n != "_") {
                let collected = matches!(
                    item.kind,
                    ItemKind::Fn
                        | ItemKind::Adt
                        | ItemKind::Trait
                        | ItemKind::TraitAlias
                        | ItemKind::Mod
                        | ItemKind::Const
                        | ItemKind::Static
                        | ItemKind::Type
                        | ItemKind::MacroRules
                );
                if collected {
                    // `path::name`, built in place rather than joined.
                    let len = self.path.iter().map(|p| p.len() + 2).sum::<usize>() + name.len();
                    let mut path = String::with_capacity(len);
                    for part in &self.path {
                        path.push_str(part);
                        path.push_str("::");
                    }
                    path.push_str(name);
                    self.items.push(path);
                }
            }
        }
        let pushed = context.is_some();
        if let Some(context) = context {
            self.context.push(context);
        }
        if item.kind == ItemKind::Verbatim {
            self.walk_tokens(&t[attrs.start..item.end], false);
            return;
        }
        self.attributes(t, attrs.clone());
        if item.kind == ItemKind::MacroRules {
            let group = t[item.keyword + 3];
            let whole = src.start(t[item.keyword])..src.end(group);
            self.with_level(group, |walker, body| {
                walker.macro_invocation(src.text_of(t[item.keyword]), whole, body);
            });
        } else {
            // Visibility and qualifiers included: `extern "C"` is a literal.
            let header_end = item.body.unwrap_or(item.end);
            self.code(&t[attrs.end..header_end], Level::Expr);
            if let Some(body) = item.body {
                let body_level = match item.kind {
                    ItemKind::Impl => Level::Impl,
                    ItemKind::Trait => Level::Trait,
                    ItemKind::Foreign => Level::Expr,
                    ItemKind::Mod => Level::Items { collect },
                    _ => Level::Items { collect: false },
                };
                if item.kind == ItemKind::Mod && collect {
                    self.path.push(name.unwrap_or_default());
                    self.with_level(t[body], |walker, inner| walker.code(inner, body_level));
                    self.path.pop();
                } else {
                    self.with_level(t[body], |walker, inner| walker.code(inner, body_level));
                }
                self.code(&t[body + 1..item.end], Level::Expr);
            }
        }
        if pushed {
            self.context.pop();
        }
    }

    // ----- tokens --------------------------------------------------------

    /// Every literal and macro in a token stream (a macro body, attribute
    /// arguments when `in_attribute`, where `doc = "…"` is prose).
    pub(super) fn walk_tokens(&mut self, t: &[u32], in_attribute: bool) {
        let src = self.src;
        let mut i = 0;
        while i < t.len() {
            let k = t[i];
            match src.kind(k) {
                Kind::Punct { ch: b'#', .. } => {
                    let bang = usize::from(src.is_punct(t.get(i + 1), b'!'));
                    match t.get(i + 1 + bang) {
                        Some(&g)
                            if src.group(Some(&g)) == Some(Delim::Bracket)
                                && src.starts_with_doc(g) =>
                        {
                            i += 2 + bang;
                        }
                        _ => i += 1,
                    }
                }
                Kind::Ident
                    if in_attribute
                        && (src.text_of(k) == "doc" || names_a_path(src.text_of(k)))
                        && src.is_punct(t.get(i + 1), b'=') =>
                {
                    i += 3;
                }
                Kind::Ident => {
                    if src.is_punct(t.get(i + 1), b'!') {
                        if let Some(&g) = t.get(i + 2).filter(|g| src.group(Some(g)).is_some()) {
                            let start = src.start(t[src.path_start(t, i)]);
                            self.with_level(g, |walker, body| {
                                walker.macro_invocation(src.text_of(k), start..src.end(g), body);
                            });
                            i += 3;
                            continue;
                        }
                    }
                    if let Some(args) = src.path_call(t, i, &["new", "with_opts"]) {
                        let method = src.text_of(t[i + 3]);
                        self.with_level(args, |walker, args| {
                            walker.token_constructor(src.text_of(k), method, args);
                        });
                    }
                    i += 1;
                }
                Kind::Str => {
                    self.literal_at(k);
                    i += 1;
                }
                Kind::Open(_) => {
                    self.with_level(k, |walker, inner| walker.walk_tokens(inner, in_attribute));
                    i += 1;
                }
                _ => i += 1,
            }
        }
    }

    /// One `name!(…)` invocation spanning `whole` bytes.
    fn macro_invocation(&mut self, name: &str, whole: std::ops::Range<usize>, tokens: &[u32]) {
        if name == "concat" {
            if let Some(value) = self.concat_value(tokens) {
                let lit = LitInfo {
                    value: value.into(),
                    kind: LiteralKind::Concat,
                    span: whole,
                    verbatim_at: None,
                    runs: &[],
                };
                let context = self.context.last().map(|c| &**c);
                self.collector.literal(&lit, context);
                return;
            }
        } else if let Some(&(_, values)) = METRICS_EMITTERS.iter().find(|(n, _)| *n == name) {
            self.metrics_macro(tokens, values);
        } else if name.starts_with("register_") {
            self.prometheus_register(name, tokens);
        }
        self.walk_tokens(tokens, false);
    }

    /// The joined value of `concat!` when every piece is a literal (nested
    /// `concat!` included, as rustc expands it eagerly).
    pub(super) fn concat_value(&self, tokens: &[u32]) -> Option<String> {
        let src = self.src;
        let mut out = String::new();
        for arg in src.split_args(tokens) {
            match arg {
                [lit] if src.is_literal(Some(lit)) => {
                    out.push_str(&self.concat_piece(*lit, false)?)
                }
                [minus, lit] if src.is_punct(Some(minus), b'-') && src.is_literal(Some(lit)) => {
                    out.push_str(&self.concat_piece(*lit, true)?);
                }
                [b] if matches!(src.ident(Some(b)), Some("true" | "false")) => {
                    out.push_str(src.text_of(*b));
                }
                [m, bang, g]
                    if src.is_ident(Some(m), "concat")
                        && src.is_punct(Some(bang), b'!')
                        && src.group(Some(g)).is_some() =>
                {
                    out.push_str(&self.concat_value(&src.level(*g))?);
                }
                _ => return None,
            }
        }
        Some(out)
    }

    fn concat_piece(&self, lit: u32, negative: bool) -> Option<String> {
        concat_piece(self.src.text_of(lit), negative)
    }

    // ----- literals --------------------------------------------------------

    /// A string-like literal token: decoded from the source text.
    pub(super) fn lit_info(&self, lit: u32) -> Option<LitInfo<'t>> {
        lexical::token_lit_info(self.src.text, self.src.span(lit))
    }

    fn literal_at(&mut self, lit: u32) {
        let context = self.context.last().map(|c| &**c);
        lexical::collect_token_literal(&mut self.collector, self.src.span(lit), context, None);
    }

    /// A metric-name argument written as one literal or `concat!`.
    pub(super) fn token_name(&mut self, arg: &[u32]) -> Option<NameSite> {
        let lit = self.token_string(arg)?;
        self.name_site(&lit)
    }

    /// An argument written as one string literal or `concat!`, whatever its
    /// value (a name part such as a namespace need not be a metric name).
    pub(super) fn token_string(&self, arg: &[u32]) -> Option<LitInfo<'t>> {
        let src = self.src;
        match arg {
            [lit] if src.is_literal(Some(lit)) => self.lit_info(*lit),
            [m, bang, g]
                if src.is_ident(Some(m), "concat")
                    && src.is_punct(Some(bang), b'!')
                    && src.group(Some(g)).is_some() =>
            {
                Some(LitInfo {
                    value: self.concat_value(&src.level(*g))?.into(),
                    kind: LiteralKind::Concat,
                    span: src.start(*m)..src.end(*g),
                    verbatim_at: None,
                    runs: &[],
                })
            }
            _ => None,
        }
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

    fn name_site(&mut self, lit: &LitInfo<'_>) -> Option<NameSite> {
        if !is_metric_name(&lit.value, &self.collector.config().metric_prefix) {
            return None;
        }
        let whole = 0..lit.value.len();
        Some(NameSite {
            name: lit.value.clone().into_owned(),
            range: self.collector.range(lit.source_range(whole)),
        })
    }

    pub(super) fn token_label(&mut self, arg: &[u32]) -> Option<Label> {
        let [lit] = arg else {
            return None;
        };
        if !self.src.is_literal(Some(lit)) {
            return None;
        }
        let lit = self.lit_info(*lit)?;
        Some(self.label(&lit))
    }

    pub(super) fn label(&mut self, lit: &LitInfo<'_>) -> Label {
        Label {
            name: lit.value.clone().into_owned(),
            range: self.collector.range(lit.source_range(0..lit.value.len())),
        }
    }
}

/// Item headers and attributes, read from tokens alone.
impl<'t> Src<'t> {
    /// Just past the attribute (`#[…]`, `#![…]`, a doc comment) at `t[i]`.
    fn inner_attribute_end(&self, t: &[u32], i: usize) -> Option<usize> {
        if !self.is_punct(t.get(i + 1), b'!') {
            return None;
        }
        self.attribute_end(t, i)
    }

    fn attribute_end(&self, t: &[u32], i: usize) -> Option<usize> {
        let src = *self;
        if !src.is_punct(t.get(i), b'#') {
            return None;
        }
        let bang = usize::from(src.is_punct(t.get(i + 1), b'!'));
        (src.group(t.get(i + 1 + bang)) == Some(Delim::Bracket)).then_some(i + 2 + bang)
    }

    /// The item whose header starts at `t[j]` (attributes already skipped).
    fn item_at(&self, t: &[u32], j: usize, level: Level) -> Option<Item> {
        let src = *self;
        let word = |k: usize| src.ident(t.get(k));
        let mut k = j;
        let public = word(k) == Some("pub");
        if public {
            k += 1;
            if src.group(t.get(k)) == Some(Delim::Paren) {
                k += 1;
            }
        }
        // Qualifiers before the keyword.
        loop {
            let next = word(k + 1);
            let qualifies = match word(k) {
                Some("default") => matches!(
                    next,
                    Some("fn" | "const" | "type" | "unsafe" | "async" | "impl" | "extern")
                ),
                Some("const") => matches!(next, Some("fn" | "async" | "unsafe" | "extern")),
                Some("async") => matches!(next, Some("fn" | "unsafe" | "extern")),
                Some("unsafe") => {
                    matches!(next, Some("fn" | "impl" | "trait" | "extern" | "auto"))
                }
                Some("safe") => matches!(next, Some("fn" | "static")),
                Some("auto") => next == Some("trait"),
                Some("extern") => {
                    let abi = usize::from(src.kind_is(t.get(k + 1), Kind::Str));
                    if word(k + 1 + abi) == Some("fn") {
                        k += abi;
                        true
                    } else {
                        false
                    }
                }
                _ => false,
            };
            if !qualifies {
                break;
            }
            k += 1;
        }
        let named = |at: usize| src.ident(t.get(at)).map(|_| at);
        let (kind, name) = match word(k)? {
            "fn" => (ItemKind::Fn, named(k + 1)),
            "struct" | "enum" => (ItemKind::Adt, named(k + 1)),
            "union" if word(k + 1).is_some_and(|w| !is_reserved(w)) => {
                (ItemKind::Adt, named(k + 1))
            }
            "trait" => (ItemKind::Trait, named(k + 1)),
            "impl" => (ItemKind::Impl, None),
            "mod" => (ItemKind::Mod, named(k + 1)),
            "const" if src.is_punct(t.get(k + 2), b':') => (ItemKind::Const, named(k + 1)),
            "static" => {
                let at = k + 1 + usize::from(word(k + 1) == Some("mut"));
                if !src.is_punct(t.get(at + 1), b':') {
                    return None;
                }
                (ItemKind::Static, named(at))
            }
            "type" => (ItemKind::Type, named(k + 1)),
            "use" => (ItemKind::Plain, None),
            "extern" if word(k + 1) == Some("crate") => (ItemKind::Plain, None),
            "extern" => {
                let abi = usize::from(src.kind_is(t.get(k + 1), Kind::Str));
                if src.group(t.get(k + 1 + abi)) != Some(Delim::Brace) {
                    return None;
                }
                (ItemKind::Foreign, None)
            }
            // `macro_rules! name { … }`, and any `mac! name { … }` alike.
            w if !is_reserved(w)
                && src.is_punct(t.get(k + 1), b'!')
                && src.ident(t.get(k + 2)).is_some()
                && src.group(t.get(k + 3)).is_some() =>
            {
                (ItemKind::MacroRules, named(k + 2))
            }
            _ => return None,
        };
        if kind != ItemKind::Impl && kind != ItemKind::Foreign && kind != ItemKind::Plain {
            name?;
        }
        match level {
            Level::Items { .. } => {}
            Level::Impl | Level::Trait => {
                if !matches!(kind, ItemKind::Fn | ItemKind::Const | ItemKind::Type) {
                    return None;
                }
            }
            Level::Expr => return None,
        }
        let (kind, body, end) = match kind {
            ItemKind::Const | ItemKind::Static | ItemKind::Type | ItemKind::Plain => {
                (kind, None, self.semicolon_end(t, k))
            }
            ItemKind::MacroRules => {
                let end = k + 4 + usize::from(src.is_punct(t.get(k + 4), b';'));
                (kind, Some(k + 3), end)
            }
            _ => {
                let (body, end) = self.body_end(t, k);
                let kind = match (kind, body, level) {
                    (ItemKind::Trait, None, _) => ItemKind::TraitAlias,
                    // `syn` keeps a body-less `fn` outside a trait as
                    // unparsed tokens: no item, no context.
                    (ItemKind::Fn, None, Level::Items { .. } | Level::Impl) => ItemKind::Verbatim,
                    // So does it an `impl` with a visibility.
                    (ItemKind::Impl, _, _) if public => ItemKind::Verbatim,
                    _ => kind,
                };
                (kind, body, end)
            }
        };
        Some(Item {
            kind,
            keyword: k,
            name,
            body,
            end,
        })
    }

    /// Just past the first `;` from `t[k]` on (or the end).
    fn semicolon_end(&self, t: &[u32], k: usize) -> usize {
        (k..t.len())
            .find(|&at| self.is_punct(t.get(at), b';'))
            .map_or(t.len(), |at| at + 1)
    }

    /// The body of a brace-bodied item from `t[k]` on: the first brace
    /// group outside `<…>` (a const generic `{ N }` is not one), or `None`
    /// when a `;` comes first; and where the item ends.
    fn body_end(&self, t: &[u32], k: usize) -> (Option<usize>, usize) {
        let src = *self;
        let mut angles = 0usize;
        let mut at = k;
        while at < t.len() {
            match src.kind(t[at]) {
                Kind::Punct { ch: b'<', .. } => angles += 1,
                Kind::Punct { ch: b'>', .. } => angles = angles.saturating_sub(1),
                Kind::Punct {
                    ch: b'-' | b'=',
                    joint: true,
                } if src.is_punct(t.get(at + 1), b'>') => at += 1,
                Kind::Punct { ch: b';', .. } => return (None, at + 1),
                Kind::Open(Delim::Brace) if angles == 0 => return (Some(at), at + 1),
                _ => {}
            }
            at += 1;
        }
        (None, t.len())
    }

    /// The type an `impl` header is for (`<T> Trait for &Foo<T> where …`
    /// → `Foo`), as `syn` names it.
    fn self_type_name(&self, header: &[u32]) -> Option<&'t str> {
        let src = *self;
        let mut at = 0;
        // Generic parameters right after `impl`.
        if src.is_punct(header.first(), b'<') {
            at = self.skip_angles(header, 0);
        }
        let mut end = header.len();
        let mut angles = 0usize;
        let mut for_at = None;
        for (k, tok) in header.iter().enumerate().skip(at) {
            match src.kind(*tok) {
                Kind::Punct { ch: b'<', .. } => angles += 1,
                Kind::Punct { ch: b'>', .. } => {
                    let arrow = k > 0
                        && src
                            .punct(header.get(k - 1))
                            .is_some_and(|(c, j)| j && c == b'-');
                    if !arrow {
                        angles = angles.saturating_sub(1);
                    }
                }
                Kind::Ident if angles == 0 => match src.text_of(*tok) {
                    "where" => {
                        end = k;
                        break;
                    }
                    "for" if for_at.is_none() && !src.is_punct(header.get(k + 1), b'<') => {
                        for_at = Some(k);
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        let ty = &header[for_at.map_or(at, |f| f + 1)..end.max(at)];
        self.type_name(ty)
    }

    /// Just past the `<…>` opening at `t[open]`.
    fn skip_angles(&self, t: &[u32], open: usize) -> usize {
        let src = *self;
        let mut depth = 0usize;
        let mut k = open;
        while k < t.len() {
            match src.punct(t.get(k)) {
                Some((b'<', _)) => depth += 1,
                Some((b'-' | b'=', true)) if src.is_punct(t.get(k + 1), b'>') => k += 1,
                Some((b'>', _)) => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return k + 1;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        t.len()
    }

    /// The last path segment of a type, through references and parentheses.
    fn type_name(&self, ty: &[u32]) -> Option<&'t str> {
        let src = *self;
        let mut at = 0;
        // References: `&`, `&&`, `&'a`, `&mut`.
        let mut reference = false;
        while src.is_punct(ty.get(at), b'&') {
            at += 1;
            reference = true;
        }
        if reference {
            if src.is_punct(ty.get(at), b'\'') {
                at += 2;
            }
            if src.is_ident(ty.get(at), "mut") {
                at += 1;
            }
            return self.type_name(&ty[at.min(ty.len())..]);
        }
        if let [g] = ty {
            if src.group(Some(g)) == Some(Delim::Paren) && src.kind(*g) != Kind::Doc {
                let inner = src.level(*g);
                if inner.is_empty() || inner.iter().any(|k| src.is_punct(Some(k), b',')) {
                    return None;
                }
                return self.type_name(&inner);
            }
        }
        // A path: `::a::B<T>`, `<T as Tr>::Assoc`, `Fn(u8) -> u8`.
        if src.is_punct(ty.get(at), b':') && src.is_punct(ty.get(at + 1), b':') {
            at += 2;
        } else if src.is_punct(ty.get(at), b'<') {
            at = self.skip_angles(ty, at);
            if !(src.is_punct(ty.get(at), b':') && src.is_punct(ty.get(at + 1), b':')) {
                return None;
            }
            at += 2;
        }
        let mut last = None;
        loop {
            let word = src.ident(ty.get(at))?;
            if last.is_none()
                && matches!(
                    word,
                    "_" | "dyn" | "impl" | "fn" | "unsafe" | "extern" | "for"
                )
            {
                return None;
            }
            last = Some(word);
            at += 1;
            if src.is_punct(ty.get(at), b'!') {
                return None;
            }
            let colons =
                |k: usize| src.is_punct(ty.get(k), b':') && src.is_punct(ty.get(k + 1), b':');
            if colons(at) && src.is_punct(ty.get(at + 2), b'<') {
                at = self.skip_angles(ty, at + 2);
            } else if src.is_punct(ty.get(at), b'<') {
                at = self.skip_angles(ty, at);
            }
            if colons(at) {
                at += 2;
                continue;
            }
            break;
        }
        last.map(ident_name)
    }
}

impl Src<'_> {
    /// Whether `t` is a token of `kind`.
    pub fn kind_is(&self, t: Option<&u32>, kind: Kind) -> bool {
        t.is_some_and(|&t| self.kind(t) == kind)
    }
}

/// The innermost module-level item of `text` (the self type, for an `impl`
/// block; through inline modules) whose tokens, attributes included, hold
/// byte `offset`. `None` when the file cannot be tokenized or nests too
/// deeply.
pub(crate) fn enclosing_item(text: &str, offset: usize) -> Option<String> {
    if lexical::too_complex(text).is_some() {
        return None;
    }
    let toks = super::rust_lex::tokenize(text, super::rust_lex::code_start(text)).ok()?;
    let src = Src { text, toks: &toks };
    let mut level = src.level_in(0, toks.len() as u32);
    loop {
        let item = module_item_at(src, &level, offset)?;
        let name = item
            .name
            .map(|n| ident_name(src.text_of(level[n])).to_owned());
        match item.kind {
            ItemKind::Impl => {
                return src
                    .self_type_name(&level[item.keyword + 1..item.body.unwrap_or(item.end)])
                    .map(str::to_owned)
            }
            ItemKind::Mod => {
                let inner = item.body.map(|b| src.level(level[b]));
                match inner {
                    Some(inner) if module_item_at(src, &inner, offset).is_some() => level = inner,
                    _ => return name,
                }
            }
            ItemKind::Fn
            | ItemKind::Adt
            | ItemKind::Trait
            | ItemKind::Const
            | ItemKind::Static
            | ItemKind::Type => return name,
            _ => return None,
        }
    }
}

/// The item of a module `level` whose span (attributes included) holds
/// `offset`.
fn module_item_at(src: Src<'_>, level: &[u32], offset: usize) -> Option<Item> {
    let mut i = 0;
    while i < level.len() {
        while let Some(next) = src.inner_attribute_end(level, i) {
            i = next;
        }
        let mut j = i;
        while let Some(next) = src.attribute_end(level, j) {
            j = next;
        }
        match src.item_at(level, j, Level::Items { collect: true }) {
            Some(item) => {
                let start = src.start(level[i]);
                let end = src.end(level[item.end.max(1) - 1]);
                if (start..end).contains(&offset) {
                    return Some(item);
                }
                i = item.end.max(i + 1);
            }
            None => i = j.max(i + 1),
        }
    }
    None
}

/// Attribute arguments whose string value is a path to a function, module
/// or type, never a key or a metric: serde's `default = "…"`, `with = "…"`
/// and their kin, and the conversions and bounds derive macros take. Both
/// Rust walkers skip them as they skip `doc = "…"`.
pub(super) fn names_a_path(key: &str) -> bool {
    matches!(
        key,
        "default"
            | "with"
            | "serialize_with"
            | "deserialize_with"
            | "skip_serializing_if"
            | "bound"
            | "crate"
            | "remote"
            | "from"
            | "try_from"
            | "into"
            | "getter"
            | "setter"
    )
}
