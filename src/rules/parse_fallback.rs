//! ## What it does
//! Warns that a source file could not be read structurally and was scanned
//! lexically instead: a Rust file that cannot be tokenized (an unclosed or
//! mismatched bracket, an unterminated string or comment, a stray
//! character), nests too deeply, or is over 2 MiB; or a file in a language
//! dwlint has no extractor for. A Rust syntax error in well-formed tokens
//! does not stop the extractor, which reads tokens, not a syntax tree.
//!
//! ## Why is this bad?
//! The lexical scan still finds every string literal, so cache prefixes and
//! metric names are not missed, but macro-aware label extraction
//! (`counter!("dw_x", "label" => v)`, `*Vec::new(…, &[…])`) and owner
//! definitions need the structure. Label checks on that file are weaker
//! until it is fixed.
//!
//! ## Example
//! ```rust
//! fn broken( {            // `(` never closed: the file is scanned lexically
//!     let key = "server:readiness:probe";
//! }
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;

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
