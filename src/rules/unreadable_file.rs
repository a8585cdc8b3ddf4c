//! ## What it does
//! Warns about a selected file that could not be read: a permissions or I/O
//! error, a binary file (a NUL byte in its first 8 KiB), or text that is not
//! valid UTF-8. The run goes on without it.
//!
//! ## Why is this bad?
//! A file the gate cannot read is a file whose cache keys and metrics are
//! not checked. It is usually a generated or vendored file that belongs in
//! `[sources].exclude`.
//!
//! ## Example
//! ```toml
//! [sources]
//! metrics = ["scripts/perf/**"]   # also matches scripts/perf/baseline.bin
//! exclude = ["scripts/perf/*.bin"]
//! ```

use super::Context;
use crate::base::diagnostic::Diagnostic;

pub(super) const CODE: &str = "unreadable-file";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    out.extend(
        ctx.inventory
            .file_warnings
            .iter()
            .filter(|d| d.code == CODE)
            .cloned(),
    );
}
