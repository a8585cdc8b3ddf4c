//! Guessing the owner of a discovered surface from where it was found.
//!
//! A starter policy is only useful if its owners already resolve: an owner
//! that names nothing would add `unresolved-owner` noise to the first
//! `check`, and a person would have to hunt for the type anyway. So a guess
//! is only ever an item the file itself defines (checked against the
//! extractor's item list, the same list `check` resolves owners against) and
//! otherwise the file's own path, which always resolves.

use crate::extract::lexical::too_complex;
use crate::extract::rust::code_start;
use crate::scan::ScannedFile;

/// The owner to write for a surface found at byte `offset` of `file`, whose
/// literal (if any) sat in item `context` (`Type::method`, `Type`, `fn`).
pub fn guess(
    file: &ScannedFile,
    text: Option<&str>,
    context: Option<&str>,
    offset: usize,
) -> String {
    // `Type::method` → `Type`; a qualified `App\Support\Type` → `Type`.
    let enclosing = context
        .and_then(|c| c.split("::").next())
        .and_then(|c| c.rsplit(['\\', '.']).next())
        .map(str::to_owned)
        .or_else(|| {
            let text = text?;
            file.rel
                .ends_with(".rs")
                .then(|| enclosing_rust_item(text, offset))
                .flatten()
        });
    enclosing
        .and_then(|name| defined_item(&file.facts.items, &name))
        .unwrap_or_else(|| file.rel.clone())
}

/// The item of `items` (fully qualified, in any language's separator) whose
/// last segment is `name`.
fn defined_item(items: &[String], name: &str) -> Option<String> {
    items
        .iter()
        .find(|item| item.rsplit(['\\', ':', '.']).next() == Some(name))
        .cloned()
}

/// The innermost module-level item (the self type, for an `impl` block)
/// whose text contains `offset`. `None` when the file does not parse.
fn enclosing_rust_item(text: &str, offset: usize) -> Option<String> {
    // A file too deeply nested for `check`'s parser would overflow this
    // thread's stack too; its surfaces get the file as owner.
    if too_complex(text).is_some() {
        return None;
    }
    let base = code_start(text);
    let offset = offset.checked_sub(base)?;
    let parsed = std::panic::catch_unwind(|| {
        let file = syn::parse_str::<syn::File>(text.get(base..)?).ok()?;
        innermost(&file.items, offset)
    });
    // proc-macro2 keeps parsed text in a thread-local map; do not let it grow.
    let _ = std::panic::catch_unwind(proc_macro2::extra::invalidate_current_thread_spans);
    parsed.ok().flatten()
}

fn innermost(items: &[syn::Item], offset: usize) -> Option<String> {
    use syn::spanned::Spanned;
    for item in items {
        if !item.span().byte_range().contains(&offset) {
            continue;
        }
        let ident = match item {
            syn::Item::Impl(i) => return impl_self_name(&i.self_ty),
            syn::Item::Mod(m) => {
                let inner = m
                    .content
                    .as_ref()
                    .and_then(|(_, items)| innermost(items, offset));
                return inner.or_else(|| Some(m.ident.to_string()));
            }
            syn::Item::Struct(i) => &i.ident,
            syn::Item::Enum(i) => &i.ident,
            syn::Item::Fn(i) => &i.sig.ident,
            syn::Item::Const(i) => &i.ident,
            syn::Item::Static(i) => &i.ident,
            syn::Item::Trait(i) => &i.ident,
            syn::Item::Type(i) => &i.ident,
            syn::Item::Union(i) => &i.ident,
            _ => return None,
        };
        return Some(bare(ident));
    }
    None
}

fn impl_self_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| bare(&s.ident)),
        syn::Type::Reference(r) => impl_self_name(&r.elem),
        syn::Type::Paren(p) => impl_self_name(&p.elem),
        syn::Type::Group(g) => impl_self_name(&g.elem),
        _ => None,
    }
}

fn bare(ident: &syn::Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").map(str::to_owned).unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_enclosing_item_is_the_impl_self_type_or_the_item() {
        let text = "#!/usr/bin/env rust\nstruct S;\nimpl Other for &S { fn f() { \"dw_a\"; } }\nmod m { fn g() { \"dw_b\"; } }\nfn h() { \"dw_c\"; }\n";
        let at = |needle: &str| text.find(needle).unwrap();
        assert_eq!(enclosing_rust_item(text, at("dw_a")).as_deref(), Some("S"));
        assert_eq!(enclosing_rust_item(text, at("dw_b")).as_deref(), Some("g"));
        assert_eq!(enclosing_rust_item(text, at("dw_c")).as_deref(), Some("h"));
        assert_eq!(enclosing_rust_item("fn broken( {", 3), None);
    }

    #[test]
    fn only_items_the_file_defines_are_guessed() {
        let items = vec!["eng::polling".to_owned(), "eng::polling::Store".to_owned()];
        assert_eq!(
            defined_item(&items, "Store").as_deref(),
            Some("eng::polling::Store")
        );
        assert_eq!(defined_item(&items, "Missing"), None);
        let php = vec!["App\\Support\\Store".to_owned()];
        assert_eq!(
            defined_item(&php, "Store").as_deref(),
            Some("App\\Support\\Store")
        );
    }
}
