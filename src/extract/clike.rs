//! What the C-family lexers (Go, JavaScript) share: `//` and `/* */`
//! comments and the step from an opening quote to a string token, so each
//! language only says which quotes open which string form.

use super::strings::{line_end, past, scan_body, Quote};
use super::tokens::{push_string, Tok};
use super::LiteralKind;

/// The end of a `//` or `/* */` comment at `i`, if one starts there.
pub(crate) fn comment_end(b: &[u8], i: usize) -> Option<usize> {
    match (b.get(i), b.get(i + 1)) {
        (Some(b'/'), Some(b'/')) => Some(line_end(b, i)),
        (Some(b'/'), Some(b'*')) => Some(past(b, i + 2, b"*/")),
        _ => None,
    }
}

/// The shared start of a C-family lexer's `special`: a comment, or one of
/// the string forms `form` maps an opening byte to.
pub(crate) fn comment_or_string(
    text: &str,
    i: usize,
    toks: &mut Vec<Tok>,
    form: impl FnOnce(u8) -> Option<(Quote<'static>, LiteralKind)>,
) -> Option<usize> {
    let b = text.as_bytes();
    if let Some(end) = comment_end(b, i) {
        return Some(end);
    }
    let (quote, kind) = form(b[i])?;
    let body = scan_body(text, i + 1, &quote);
    Some(push_string(toks, i, body, kind))
}
