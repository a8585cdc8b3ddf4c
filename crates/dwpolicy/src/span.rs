//! Byte spans into the policy file.
//!
//! The gate points its diagnostics into the user's policy file, so every value
//! the loader keeps remembers where it came from. The engine ignores spans.

use std::ops::Range;

/// A half-open byte range into the policy source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    /// First byte of the range.
    pub start: usize,
    /// One past the last byte of the range.
    pub end: usize,
}

impl Span {
    /// A span covering `range`.
    pub fn new(range: Range<usize>) -> Self {
        Span {
            start: range.start,
            end: range.end,
        }
    }

    /// The span as a `Range`.
    pub fn range(self) -> Range<usize> {
        self.start..self.end
    }

    /// 1-based line and column (in characters) of `offset` in `text`.
    pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(text.len());
        let before = &text[..floor_char_boundary(text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// A value together with the span it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Where the value was written in the policy file.
    pub span: Span,
}

impl<T> Spanned<T> {
    /// Wraps `value` read from `span`.
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

impl<T> std::ops::Deref for Spanned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters_not_bytes() {
        let text = "a\nдб x";
        let x = text.find('x').unwrap();
        assert_eq!(Span::line_col(text, x), (2, 4));
        assert_eq!(Span::line_col(text, 0), (1, 1));
    }
}
