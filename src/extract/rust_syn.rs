//! The `syn`-based Rust extractor, kept as the reference the parser-free
//! one ([`super::rust`]) is tested against (a differential property test,
//! and the `syn-oracle` feature for anyone who wants to compare on their own
//! tree). It is not part of the gate's normal build.
//!
//! `syn` for structure, token walking for macro bodies (`rust_syn_macros`),
//! the lexical scanner when the parser cannot be trusted with the file.
//! Everything positional is read from the source text through span byte
//! offsets, so values are decoded without re-lexing.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

use proc_macro2::Span;
use syn::visit::{self, Visit};

use super::collect::{Collector, LitInfo};
use super::rust::{fallback, prechecks};
use super::rust_lex::code_start;
use super::{lexical, ExtractConfig, FileFacts};

/// [`super::extract_rust`]'s answer as `syn` gave it: the same size and
/// nesting limits, then a full parse.
pub fn extract_rust_syn(text: &str, config: &ExtractConfig, module_path: &[String]) -> FileFacts {
    if let Some(facts) = prechecks(text, config) {
        return facts;
    }
    let parsed = catch_unwind(AssertUnwindSafe(|| {
        parse_and_walk(text, config, module_path)
    }));
    // proc-macro2 keeps every parsed file's text in a thread-local source
    // map; without this a long tree walk would hold the whole tree in memory.
    let _ = catch_unwind(proc_macro2::extra::invalidate_current_thread_spans);
    match parsed {
        Ok(Ok(facts)) => facts,
        Ok(Err((message, at))) => fallback(text, config, message, at),
        Err(_) => fallback(
            text,
            config,
            "the Rust parser failed unexpectedly".to_owned(),
            0..0,
        ),
    }
}

fn parse_and_walk(
    text: &str,
    config: &ExtractConfig,
    module_path: &[String],
) -> Result<FileFacts, (String, Range<usize>)> {
    let base = code_start(text);
    let file = match syn::parse_str::<syn::File>(&text[base..]) {
        Ok(file) => file,
        Err(err) => {
            let mut at = err.span().byte_range();
            // syn has no span for "unexpected end of input"; the end is where
            // parsing stopped.
            if at == (0..0) && err.to_string().contains("end of input") {
                at = text.len() - base..text.len() - base;
            }
            return Err((
                format!("not parseable as Rust: {err}"),
                base + at.start..base + at.end,
            ));
        }
    };
    let mut items = Vec::new();
    let mut path = module_path.to_vec();
    collect_items(&file.items, &mut path, &mut items);
    let mut walker = Walker {
        collector: Collector::new(text, config),
        base,
        context: Vec::new(),
    };
    walker.visit_file(&file);
    Ok(walker.collector.finish(items, None))
}

/// Items a policy owner may name: module-level items, through inline `mod`
/// blocks; not the ones local to fn bodies or impl blocks.
fn collect_items(items: &[syn::Item], path: &mut Vec<String>, out: &mut Vec<String>) {
    for item in items {
        let ident = match item {
            syn::Item::Const(i) => &i.ident,
            syn::Item::Enum(i) => &i.ident,
            syn::Item::Fn(i) => &i.sig.ident,
            syn::Item::Macro(i) => match &i.ident {
                Some(ident) => ident,
                None => continue,
            },
            syn::Item::Mod(i) => &i.ident,
            syn::Item::Static(i) => &i.ident,
            syn::Item::Struct(i) => &i.ident,
            syn::Item::Trait(i) => &i.ident,
            syn::Item::TraitAlias(i) => &i.ident,
            syn::Item::Type(i) => &i.ident,
            syn::Item::Union(i) => &i.ident,
            _ => continue,
        };
        let name = ident_name(ident);
        if name == "_" {
            continue;
        }
        path.push(name);
        out.push(path.join("::"));
        if let syn::Item::Mod(syn::ItemMod {
            content: Some((_, inner)),
            ..
        }) = item
        {
            collect_items(inner, path, out);
        }
        path.pop();
    }
}

/// `r#type` is the item `type`.
fn ident_name(ident: &syn::Ident) -> String {
    let name = ident.to_string();
    match name.strip_prefix("r#") {
        Some(bare) => bare.to_owned(),
        None => name,
    }
}

/// The `syn` visitor; the token-stream half lives in `rust_syn_macros`.
pub(super) struct Walker<'t> {
    pub(super) collector: Collector<'t>,
    /// Bytes skipped before the parsed text (BOM, shebang).
    pub(super) base: usize,
    /// Enclosing named items, innermost last.
    pub(super) context: Vec<String>,
}

impl Walker<'_> {
    pub(super) fn bytes(&self, span: Span) -> Range<usize> {
        let r = span.byte_range();
        self.base + r.start..self.base + r.end
    }

    /// A string-like literal token at `span`: decoded from the source text.
    pub(super) fn lit_info(&self, span: Span) -> Option<LitInfo<'static>> {
        let bytes = self.bytes(span);
        let lit = lexical::token_lit_info(self.collector.text(), bytes)?;
        Some(LitInfo {
            value: lit.value.into_owned().into(),
            kind: lit.kind,
            span: lit.span,
            verbatim_at: lit.verbatim_at,
            runs: &[],
        })
    }

    pub(super) fn literal_at(&mut self, span: Span) {
        let bytes = self.bytes(span);
        let context = self.context.last().map(String::as_str);
        lexical::collect_token_literal(&mut self.collector, bytes, context, None);
    }

    fn with_context(&mut self, name: String, f: impl FnOnce(&mut Self)) {
        self.context.push(name);
        f(self);
        self.context.pop();
    }

    /// Methods and associated consts read as `Type::name`.
    fn with_member_context(&mut self, ident: &syn::Ident, f: impl FnOnce(&mut Self)) {
        let name = match self.context.last() {
            Some(owner) => format!("{owner}::{}", ident_name(ident)),
            None => ident_name(ident),
        };
        self.with_context(name, f);
    }
}

/// The type name an `impl` block is for (`impl<T> Trait for &Foo<T>` → `Foo`).
fn self_type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| ident_name(&s.ident)),
        syn::Type::Reference(r) => self_type_name(&r.elem),
        syn::Type::Paren(p) => self_type_name(&p.elem),
        syn::Type::Group(g) => self_type_name(&g.elem),
        _ => None,
    }
}

macro_rules! named_item {
    ($method:ident, $ty:ty, $visit:path, |$node:ident| $name:expr) => {
        fn $method(&mut self, $node: &'ast $ty) {
            let name = $name;
            self.with_context(name, |w| $visit(w, $node));
        }
    };
}

impl<'ast> Visit<'ast> for Walker<'_> {
    named_item!(visit_item_fn, syn::ItemFn, visit::visit_item_fn, |node| {
        ident_name(&node.sig.ident)
    });
    named_item!(
        visit_item_struct,
        syn::ItemStruct,
        visit::visit_item_struct,
        |node| ident_name(&node.ident)
    );
    named_item!(
        visit_item_enum,
        syn::ItemEnum,
        visit::visit_item_enum,
        |node| ident_name(&node.ident)
    );
    named_item!(
        visit_item_union,
        syn::ItemUnion,
        visit::visit_item_union,
        |node| ident_name(&node.ident)
    );
    named_item!(
        visit_item_trait,
        syn::ItemTrait,
        visit::visit_item_trait,
        |node| ident_name(&node.ident)
    );
    named_item!(
        visit_item_const,
        syn::ItemConst,
        visit::visit_item_const,
        |node| ident_name(&node.ident)
    );
    named_item!(
        visit_item_static,
        syn::ItemStatic,
        visit::visit_item_static,
        |node| ident_name(&node.ident)
    );
    named_item!(
        visit_item_type,
        syn::ItemType,
        visit::visit_item_type,
        |node| ident_name(&node.ident)
    );
    named_item!(
        visit_item_mod,
        syn::ItemMod,
        visit::visit_item_mod,
        |node| ident_name(&node.ident)
    );

    fn visit_item_impl(&mut self, node: &'ast syn::ItemImpl) {
        match self_type_name(&node.self_ty) {
            Some(name) => self.with_context(name, |w| visit::visit_item_impl(w, node)),
            None => visit::visit_item_impl(self, node),
        }
    }

    fn visit_impl_item_fn(&mut self, node: &'ast syn::ImplItemFn) {
        self.with_member_context(&node.sig.ident, |w| visit::visit_impl_item_fn(w, node));
    }

    fn visit_impl_item_const(&mut self, node: &'ast syn::ImplItemConst) {
        self.with_member_context(&node.ident, |w| visit::visit_impl_item_const(w, node));
    }

    fn visit_trait_item_fn(&mut self, node: &'ast syn::TraitItemFn) {
        self.with_member_context(&node.sig.ident, |w| visit::visit_trait_item_fn(w, node));
    }

    fn visit_trait_item_const(&mut self, node: &'ast syn::TraitItemConst) {
        self.with_member_context(&node.ident, |w| visit::visit_trait_item_const(w, node));
    }

    fn visit_attribute(&mut self, node: &'ast syn::Attribute) {
        // Doc comments are prose, not code.
        if node.path().is_ident("doc") {
            return;
        }
        match &node.meta {
            syn::Meta::List(list) => self.walk_attribute_tokens(list.tokens.clone()),
            syn::Meta::NameValue(nv) => self.visit_expr(&nv.value),
            syn::Meta::Path(_) => {}
        }
    }

    fn visit_macro(&mut self, node: &'ast syn::Macro) {
        let Some(last) = node.path.segments.last() else {
            return;
        };
        let start = match (&node.path.leading_colon, node.path.segments.first()) {
            (Some(colon), _) => self.bytes(colon.spans[0]).start,
            (None, Some(first)) => self.bytes(first.ident.span()).start,
            (None, None) => return,
        };
        let end = self.bytes(node.delimiter.span().close()).end;
        let name = last.ident.to_string();
        self.macro_invocation(&name, start..end, node.tokens.clone());
    }

    fn visit_lit_str(&mut self, node: &'ast syn::LitStr) {
        self.literal_at(node.span());
    }

    fn visit_lit_byte_str(&mut self, node: &'ast syn::LitByteStr) {
        self.literal_at(node.span());
    }

    fn visit_lit_cstr(&mut self, node: &'ast syn::LitCStr) {
        self.literal_at(node.span());
    }

    fn visit_expr_call(&mut self, node: &'ast syn::ExprCall) {
        if let syn::Expr::Path(p) = &*node.func {
            let segments = &p.path.segments;
            if segments.len() >= 2 {
                let ty = &segments[segments.len() - 2].ident;
                let method = &segments[segments.len() - 1].ident;
                if method == "new" || method == "with_opts" {
                    self.ast_constructor(&ty.to_string(), &method.to_string(), &node.args);
                }
            }
        }
        visit::visit_expr_call(self, node);
    }

    // `syn` keeps syntax it does not model as raw tokens; they are still code.
    fn visit_expr(&mut self, node: &'ast syn::Expr) {
        match node {
            syn::Expr::Verbatim(tokens) => self.walk_stream(tokens.clone()),
            _ => visit::visit_expr(self, node),
        }
    }

    fn visit_item(&mut self, node: &'ast syn::Item) {
        match node {
            syn::Item::Verbatim(tokens) => self.walk_stream(tokens.clone()),
            _ => visit::visit_item(self, node),
        }
    }

    fn visit_impl_item(&mut self, node: &'ast syn::ImplItem) {
        match node {
            syn::ImplItem::Verbatim(tokens) => self.walk_stream(tokens.clone()),
            _ => visit::visit_impl_item(self, node),
        }
    }

    fn visit_trait_item(&mut self, node: &'ast syn::TraitItem) {
        match node {
            syn::TraitItem::Verbatim(tokens) => self.walk_stream(tokens.clone()),
            _ => visit::visit_trait_item(self, node),
        }
    }

    fn visit_foreign_item(&mut self, node: &'ast syn::ForeignItem) {
        match node {
            syn::ForeignItem::Verbatim(tokens) => self.walk_stream(tokens.clone()),
            _ => visit::visit_foreign_item(self, node),
        }
    }

    fn visit_type(&mut self, node: &'ast syn::Type) {
        match node {
            syn::Type::Verbatim(tokens) => self.walk_stream(tokens.clone()),
            _ => visit::visit_type(self, node),
        }
    }

    fn visit_pat(&mut self, node: &'ast syn::Pat) {
        match node {
            syn::Pat::Verbatim(tokens) => self.walk_stream(tokens.clone()),
            _ => visit::visit_pat(self, node),
        }
    }
}
