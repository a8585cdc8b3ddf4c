//! Finding the generated regions of a doc and splicing new tables in.
//!
//! A region is everything between a start marker line and its end marker
//! line, `<!-- dwlint:<table>:start -->` … `<!-- dwlint:<table>:end -->`.
//! Only those bytes are ever replaced, so prose, line endings and trailing
//! whitespace elsewhere stay byte-for-byte as the author wrote them. Markers
//! inside fenced code blocks are text (a doc may show how to write them).

use std::ops::Range;

use super::tables::Table;

/// One generated region of a doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Which table it holds.
    pub table: Table,
    /// The bytes between the start marker line and the end marker line.
    pub content: Range<usize>,
    /// The start marker line's line ending, used for the generated lines.
    pub newline: &'static str,
}

/// A marker problem: the doc cannot be synced until it is fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerError {
    /// 1-based line of the offending marker.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Debug, PartialEq, Eq)]
enum Marker {
    Start(Table),
    End(Table),
}

/// The regions of `text`, in order.
pub fn regions(text: &str) -> Result<Vec<Region>, MarkerError> {
    let mut out = Vec::new();
    let mut open: Option<(Table, usize, usize, &'static str)> = None;
    let mut fence: Option<(char, usize)> = None;
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let line_no = index + 1;
        let line_start = offset;
        offset += line.len();
        let content = line.trim_end_matches(['\n', '\r']);
        // A byte order mark is not part of the first line's text.
        let content = match index {
            0 => content.strip_prefix('\u{feff}').unwrap_or(content),
            _ => content,
        };
        if let Some(next) = fence_change(content, fence) {
            fence = next;
            continue;
        }
        if fence.is_some() {
            continue;
        }
        let fail = |message: String| MarkerError {
            line: line_no,
            message,
        };
        match (parse_marker(content).map_err(fail)?, open) {
            (None, _) => {}
            (Some(Marker::Start(table)), None) => {
                let newline = if line.ends_with("\r\n") { "\r\n" } else { "\n" };
                open = Some((table, line_no, offset, newline));
            }
            (Some(Marker::Start(table)), Some((inside, at, ..))) => {
                return Err(fail(format!(
                    "`{}` start marker inside the `{}` region opened on line {at}",
                    table.name(),
                    inside.name()
                )))
            }
            (Some(Marker::End(table)), Some((inside, _, start, newline))) if table == inside => {
                out.push(Region {
                    table,
                    content: start..line_start,
                    newline,
                });
                open = None;
            }
            (Some(Marker::End(table)), Some((inside, at, ..))) => {
                return Err(fail(format!(
                    "`{}` end marker, but the region opened on line {at} is `{}`",
                    table.name(),
                    inside.name()
                )))
            }
            (Some(Marker::End(table)), None) => {
                return Err(fail(format!(
                    "`{}` end marker without a start marker",
                    table.name()
                )))
            }
        }
    }
    match open {
        Some((table, at, ..)) => Err(MarkerError {
            line: at,
            message: format!("`{}` start marker has no end marker", table.name()),
        }),
        None => Ok(out),
    }
}

/// `text` with each region's content replaced by `render(table)` lines.
pub fn splice(text: &str, regions: &[Region], render: impl Fn(Table) -> Vec<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for region in regions {
        out.push_str(&text[copied..region.content.start]);
        // Blank lines around the table: GFM would otherwise read the end
        // marker as one more table row.
        out.push_str(region.newline);
        for line in render(region.table) {
            out.push_str(&line);
            out.push_str(region.newline);
        }
        out.push_str(region.newline);
        copied = region.content.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// `<!-- dwlint:<name>:<start|end> -->`; other comments are not markers.
fn parse_marker(line: &str) -> Result<Option<Marker>, String> {
    let trimmed = line.trim();
    let Some(inner) = trimmed
        .strip_prefix("<!--")
        .and_then(|rest| rest.strip_suffix("-->"))
        .map(str::trim)
    else {
        return Ok(None);
    };
    let Some(marker) = inner.strip_prefix("dwlint:") else {
        return Ok(None);
    };
    let (name, edge) = marker.rsplit_once(':').unwrap_or((marker, ""));
    let Some(table) = Table::ALL.iter().copied().find(|t| t.name() == name) else {
        let names: Vec<&str> = Table::ALL.iter().map(|t| t.name()).collect();
        return Err(format!(
            "unknown dwlint table `{name}`; known tables: {}",
            names.join(", ")
        ));
    };
    match edge {
        "start" => Ok(Some(Marker::Start(table))),
        "end" => Ok(Some(Marker::End(table))),
        _ => Err(format!(
            "a dwlint marker ends in `:start` or `:end`, not `{marker}`"
        )),
    }
}

/// The fence state after `line`, when `line` opens or closes a fence.
fn fence_change(line: &str, fence: Option<(char, usize)>) -> Option<Option<(char, usize)>> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let mark = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = rest.chars().take_while(|c| *c == mark).count();
    if run < 3 {
        return None;
    }
    match fence {
        None => Some(Some((mark, run))),
        Some((open, len)) if open == mark && run >= len && rest[run..].trim().is_empty() => {
            Some(None)
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_skip_fenced_markers_and_keep_crlf() {
        let text = "```\n<!-- dwlint:scan-limits:start -->\n```\n<!-- dwlint:scan-limits:start -->\r\nold\r\n<!-- dwlint:scan-limits:end -->\r\n";
        let found = regions(text).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(&text[found[0].content.clone()], "old\r\n");
        assert_eq!(found[0].newline, "\r\n");
        let spliced = splice(text, &found, |_| vec!["| a |".into()]);
        assert!(
            spliced.ends_with("start -->\r\n\r\n| a |\r\n\r\n<!-- dwlint:scan-limits:end -->\r\n")
        );
    }

    #[test]
    fn a_byte_order_mark_does_not_hide_a_marker_on_the_first_line() {
        let text = "\u{feff}<!-- dwlint:cache-inventory:start -->\nold\n<!-- dwlint:cache-inventory:end -->\n";
        let found = regions(text).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(&text[found[0].content.clone()], "old\n");
        let spliced = splice(text, &found, |_| vec!["| a |".into()]);
        assert!(spliced.starts_with("\u{feff}<!-- dwlint:cache-inventory:start -->\n\n| a |\n"));
    }

    #[test]
    fn broken_markers_name_their_line() {
        let err = |text: &str| regions(text).unwrap_err();
        assert_eq!(err("\n<!-- dwlint:cache-inventory:start -->\n").line, 2);
        assert!(err("<!-- dwlint:cache-inventory:end -->")
            .message
            .contains("without a start"));
        assert!(err("<!-- dwlint:caches:start -->")
            .message
            .contains("unknown dwlint table `caches`"));
        let mismatched = "<!-- dwlint:cache-inventory:start -->\n<!-- dwlint:scan-limits:end -->\n";
        assert!(err(mismatched).message.contains("opened on line 1"));
        assert_eq!(regions("<!-- a comment -->\n").unwrap(), vec![]);
    }
}
