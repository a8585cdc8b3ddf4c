//! Inline allows: `dwlint: allow(code, …) -- reason` in a comment, which
//! accepts a finding where it is written instead of failing the run.
//!
//! The marker is looked for in every selected file's bytes (in the
//! prefilter's pass, whether or not the file is then read further, so an
//! allow in a file that no longer holds anything is still seen and
//! reported unused) and only where a comment can start on its
//! line: after `//`, `#`, `/*`, `*`, `--`, `;` or `<!--`, which covers
//! Rust, Go, JavaScript, TypeScript, PHP, Python, shell, YAML, SQL and
//! Markdown. A reason after ` -- ` is required; a closing `*/` or `-->` is
//! not part of it.

use crate::base::line_index::{LineIndex, TextRange};

/// The marker's text.
pub const MARKER: &str = "dwlint: allow(";

/// One inline allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineAllow {
    /// The file, relative to the root.
    pub file: String,
    /// Where the marker is written (its line is the allow's line).
    pub range: TextRange,
    /// The codes it allows, as written.
    pub codes: Vec<String>,
    /// Why; `None` when none was given (the allow then allows nothing).
    pub reason: Option<String>,
}

/// The most of a line after the marker that is read for its codes and
/// reason: many markers on one long line must not each read the rest of it.
const MAX_TAIL: usize = 1024;

/// Every inline allow in `text`, the file `rel`.
pub fn find(rel: &str, text: &str) -> Vec<InlineAllow> {
    let bytes = text.as_bytes();
    let finder = memchr::memmem::Finder::new(MARKER);
    let mut lines: Option<LineIndex> = None;
    let mut out = Vec::new();
    // The line of the previous marker, measured once per line: its end
    // and where a comment first opens on it.
    let mut line_end = 0;
    let mut comment_from = None;
    for at in finder.find_iter(bytes) {
        if at >= line_end {
            let line_start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |n| n + 1);
            line_end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |n| at + n);
            let line = &text[line_start..line_end];
            comment_from = ["//", "#", "/*", "*", "--", ";", "<!--"]
                .iter()
                .filter_map(|opener| line.find(opener))
                .min()
                .map(|n| line_start + n);
        }
        if comment_from.is_none_or(|from| from >= at) {
            continue;
        }
        let tail_end = line_end.min(at + MARKER.len() + MAX_TAIL);
        let tail_end = (tail_end..=line_end)
            .find(|&n| text.is_char_boundary(n))
            .unwrap_or(line_end);
        let after = &text[at + MARKER.len()..tail_end];
        let Some(close) = after.find(')') else {
            continue;
        };
        let codes: Vec<String> = after[..close]
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect();
        let rest = after[close + 1..].trim_start();
        let reason = rest
            .strip_prefix("--")
            .map(|r| {
                let r = r.split(MARKER).next().unwrap_or("");
                r.trim()
                    .trim_end_matches("*/")
                    .trim_end_matches("-->")
                    .trim()
                    .to_owned()
            })
            .filter(|r| !r.is_empty());
        let index = lines.get_or_insert_with(|| LineIndex::new(text));
        out.push(InlineAllow {
            file: rel.to_owned(),
            range: index.range(text, at, at + MARKER.len() + close + 1),
            codes,
            reason,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(usize, Vec<String>, Option<String>)> {
        find("f", text)
            .into_iter()
            .map(|a| (a.range.line, a.codes, a.reason))
            .collect()
    }

    #[test]
    fn allows_are_read_in_every_comment_syntax() {
        let text = "a // dwlint: allow(undeclared-metric) -- legacy name, removed in 2.0\n\
                    # dwlint: allow(a, b) -- two at once\n\
                    /* dwlint: allow(x) -- block */\n\
                    <!-- dwlint: allow(doc-stale-mention) -- kept for history -->\n\
                    -- dwlint: allow(y)\n\
                    \"dwlint: allow(z) -- in a string, no comment\"\n";
        let s = |v: &str| v.to_owned();
        assert_eq!(
            found(text),
            [
                (
                    1,
                    vec![s("undeclared-metric")],
                    Some(s("legacy name, removed in 2.0"))
                ),
                (2, vec![s("a"), s("b")], Some(s("two at once"))),
                (3, vec![s("x")], Some(s("block"))),
                (4, vec![s("doc-stale-mention")], Some(s("kept for history"))),
                (5, vec![s("y")], None),
            ]
        );
    }

    #[test]
    fn many_markers_on_one_line_are_read_in_linear_time() {
        let text = format!("// {}", "dwlint: allow(a) -- r ".repeat(100_000));
        let all = find("f", &text);
        assert_eq!(all.len(), 100_000);
        assert_eq!(all[1].reason.as_deref(), Some("r"));
    }
}
