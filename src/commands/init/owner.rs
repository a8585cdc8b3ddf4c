//! Guessing the owner of a discovered surface from where it was found.
//!
//! A starter policy is only useful if its owners already resolve: an owner
//! that names nothing would add `unresolved-owner` noise to the first
//! `check`, and a person would have to hunt for the type anyway. So a guess
//! is only ever an item the file itself defines (checked against the
//! extractor's item list, the same list `check` resolves owners against) and
//! otherwise the file's own path, which always resolves.

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
/// whose text contains `offset`. `None` when the file cannot be tokenized.
fn enclosing_rust_item(text: &str, offset: usize) -> Option<String> {
    crate::extract::rust::enclosing_item(text, offset)
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
