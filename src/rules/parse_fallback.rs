//! ## What it does
//! Warns that a source file could not be parsed by its language's parser (a
//! syntax error, nesting too deep to parse safely, or a language dwlint has
//! no parser for) and was scanned lexically instead.
//!
//! ## Why is this bad?
//! The lexical scan still finds every string literal, so cache prefixes and
//! metric names are not missed, but macro-aware label extraction
//! (`counter!("dw_x", "label" => v)`, `*Vec::new(…, &[…])`) and owner
//! definitions need the parser. Label checks on that file are weaker until
//! it parses.
//!
//! ## Example
//! ```rust
//! fn broken( {            // syntax error: the file is scanned lexically
//!     let key = "server:readiness:probe";
//! }
//! ```

use super::Context;
use crate::diagnostic::Diagnostic;

pub(super) const CODE: &str = "parse-fallback";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    out.extend(
        ctx.inventory
            .file_warnings
            .iter()
            .filter(|d| d.code == CODE)
            .cloned(),
    );
}
