//! Metric names, and the labels written next to them, inside one literal value.
//!
//! Metric names show up in plain strings (`"dw_x"`), but also in hand-built
//! Prometheus text exposition (`"dw_x{queue=\"{}\"} {}\n"`), often as format
//! strings whose braces are doubled. The label names written there are what
//! the `label-mismatch` rule compares against the policy, so they have to be
//! read out of the literal. This works on the literal's *value* only, with no
//! knowledge of the host language, so every extractor can share it.

use std::ops::Range;

use super::MetricVia;

/// A metric name found in a literal value; offsets are byte offsets into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueMetric {
    /// Where the name is.
    pub name: Range<usize>,
    /// Label names written with it: `Some(vec![])` for an exposition line
    /// without labels, `None` when unknown (a bare mention, or labels built
    /// at run time).
    pub labels: Option<Vec<Range<usize>>>,
    /// [`MetricVia::Exposition`] when the value is exposition text around
    /// the name, otherwise [`MetricVia::Mention`].
    pub via: MetricVia,
}

/// Every metric name in `value`: `prefix` followed by at least one of
/// `[A-Za-z0-9_:]`, not preceded by `[A-Za-z0-9_]` (so `my_dw_x` is not
/// `dw_x`). Matching is case-sensitive. An empty prefix matches nothing.
pub fn metric_sites_in(value: &str, prefix: &str) -> Vec<ValueMetric> {
    let mut out = Vec::new();
    for_each_metric_site(value, prefix, |site| out.push(site));
    out
}

/// [`metric_sites_in`] handing each site to `each` in turn: most values
/// hold none or one, and a vector for them was an allocation per value.
pub(crate) fn for_each_metric_site(value: &str, prefix: &str, mut each: impl FnMut(ValueMetric)) {
    if prefix.is_empty() {
        return;
    }
    let bytes = value.as_bytes();
    let mut lines = LineHeads::default();
    let mut sql = None;
    let mut from = 0;
    while let Some(found) = find_bytes(&bytes[from..], prefix.as_bytes()) {
        let start = from + found;
        let body = start + prefix.len();
        // The boundary and the first name byte are checked before the name
        // is measured: a word of many mid-word prefixes (`adw_adw_…`) once
        // measured the rest of the word at each of them, quadratic.
        let boundary = start == 0 || !is_word_byte(bytes[start - 1]);
        if !boundary || !bytes.get(body).is_some_and(|b| is_name_byte(*b)) {
            // A prefix can overlap itself ("dw_dw_x"), so only step one char.
            from = start + value[start..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let mut end = body;
        while end < bytes.len() && is_name_byte(bytes[end]) {
            end += 1;
        }
        from = end;
        if names_something_else(value, start, end, &mut sql) {
            continue;
        }
        let head = lines.head_at(value, start);
        each(classify(value, head, start, end));
    }
}

/// Whether the prefixed word `value[start..end]` is not a metric but a name
/// of something else that shares the prefix:
///
/// - a path (`dw_defaults::limit`, as in `#[serde(default = "…")]`, or PHP's
///   `Dw_x::class`): a name holding `::`;
/// - a file or module name (`dw_state.sqlite`, `dw_mod.func`): a name
///   followed by `.` and a letter or digit;
/// - a table in SQL (`FROM dw_runs`, `CREATE TABLE dw_workflow_runs`,
///   `INSERT INTO "dw_x"`): a name after `FROM`, `JOIN`, `INTO`, `UPDATE`,
///   `TABLE`, `EXISTS` or `REFERENCES`, upper case, or in any case when the
///   value holds a SQL statement (`select …`, `create …`).
///
/// `sql` caches whether the value holds a statement, so many sites in one
/// value search it once.
fn names_something_else(value: &str, start: usize, end: usize, sql: &mut Option<bool>) -> bool {
    let bytes = value.as_bytes();
    if find_bytes(&bytes[start..end], b"::").is_some() {
        return true;
    }
    if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_alphanumeric) {
        return true;
    }
    let Some(keyword) = word_before(bytes, start) else {
        return false;
    };
    const TABLE_KEYWORDS: [&str; 7] = [
        "FROM",
        "JOIN",
        "INTO",
        "UPDATE",
        "TABLE",
        "EXISTS",
        "REFERENCES",
    ];
    let Some(upper) = TABLE_KEYWORDS
        .iter()
        .find(|k| k.as_bytes().eq_ignore_ascii_case(keyword))
    else {
        return false;
    };
    if upper.as_bytes() == keyword {
        return true;
    }
    *sql.get_or_insert_with(|| holds_sql_statement(bytes))
}

/// The word just before `start`, past blanks and one opening quote (`"`,
/// `` ` ``, `[`); looked for within 32 bytes so that a long run of blanks
/// costs nothing per site.
fn word_before(bytes: &[u8], start: usize) -> Option<&[u8]> {
    let window = start.saturating_sub(32);
    let mut i = start;
    if i > window && matches!(bytes[i - 1], b'"' | b'`' | b'[') {
        i -= 1;
    }
    let word_end = i;
    while i > window && matches!(bytes[i - 1], b' ' | b'\t' | b'\n' | b'\r') {
        i -= 1;
    }
    if i == word_end {
        return None;
    }
    let end = i;
    while i > window && bytes[i - 1].is_ascii_alphabetic() {
        i -= 1;
    }
    let word = &bytes[i..end];
    let bounded = i == 0 || !is_word_byte(bytes[i - 1]);
    (!word.is_empty() && bounded).then_some(word)
}

/// Whether `bytes` holds a SQL statement verb followed by a blank, in any
/// case (`select `, `Create `).
fn holds_sql_statement(bytes: &[u8]) -> bool {
    const VERBS: [&[u8]; 7] = [
        b"select", b"insert", b"update", b"delete", b"create", b"alter", b"drop",
    ];
    (0..bytes.len()).any(|i| {
        let rest = &bytes[i..];
        (i == 0 || !is_word_byte(bytes[i - 1]))
            && VERBS.iter().any(|verb| {
                rest.len() > verb.len()
                    && rest[..verb.len()].eq_ignore_ascii_case(verb)
                    && rest[verb.len()].is_ascii_whitespace()
            })
    })
}

/// Where the line holding a site starts, and its first non-blank byte,
/// found by looking back only over the bytes since the previous site (the
/// sites come in order): looking back to the line start at every site was
/// quadratic on a long line of them.
#[derive(Default)]
struct LineHeads {
    /// How far the value has been looked through.
    seen: usize,
    /// The start of the line holding `seen`.
    line_start: usize,
    /// The first byte on that line that is not a space or tab, once seen.
    first_non_blank: Option<usize>,
}

impl LineHeads {
    /// The offset of the first non-blank byte on `at`'s line, or `at`
    /// itself when only blanks come before it.
    fn head_at(&mut self, value: &str, at: usize) -> usize {
        let bytes = value.as_bytes();
        let fresh = &bytes[self.seen..at];
        if let Some(newline) = memchr::memrchr(b'\n', fresh) {
            self.line_start = self.seen + newline + 1;
            self.first_non_blank = None;
        }
        if self.first_non_blank.is_none() {
            let from = self.line_start.max(self.seen);
            let blanks = &value[from..at];
            self.first_non_blank = blanks
                .char_indices()
                .find(|(_, c)| !c.is_whitespace())
                .map(|(n, _)| from + n);
        }
        self.seen = at;
        self.first_non_blank.unwrap_or(at)
    }
}

/// Where `needle` first occurs in `haystack`. `str::find` builds a two-way
/// searcher on every call and `memmem::find` a Rabin-Karp hash of the
/// needle, each costing more than the search on the short literal values
/// the extractors mostly ask about; under 64 bytes the first byte is looked
/// for and the rest compared there (at most 64 × the needle's length), a
/// longer haystack goes to `memmem`, linear in both.
pub(crate) fn find_bytes(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let Some((&first, rest)) = needle.split_first() else {
        return Some(0);
    };
    if haystack.len() >= 64 {
        return memchr::memmem::find(haystack, needle);
    }
    let last_start = haystack.len().checked_sub(needle.len())?;
    (0..=last_start).find(|&at| haystack[at] == first && haystack[at + 1..].starts_with(rest))
}

/// Whether the whole of `value` is one metric name under `prefix` (what a
/// client library's name argument must be for the gate to track it).
pub fn is_metric_name(value: &str, prefix: &str) -> bool {
    let mut whole = false;
    for_each_metric_site(value, prefix, |s| whole |= s.name == (0..value.len()));
    whole
}

/// The full name a Prometheus client library registers for `namespace`,
/// `subsystem` and `name` options: the non-empty parts joined with `_`, and
/// nothing without a name (client_golang's `BuildFQName`, which the Rust
/// `prometheus` crate copies).
pub fn full_name(namespace: &str, subsystem: &str, name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    let parts: Vec<&str> = [namespace, subsystem, name]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    Some(parts.join("_"))
}

/// What the site `value[start..end]` is, given `head`, the first non-blank
/// byte of its line (or `start` when only blanks come before it).
fn classify(value: &str, head: usize, start: usize, end: usize) -> ValueMetric {
    let line_head = &value[head..start];
    let mention = ValueMetric {
        name: start..end,
        labels: None,
        via: MetricVia::Mention,
    };
    // `# HELP` / `# TYPE` lines describe a metric, they do not emit it.
    if line_head.starts_with('#') {
        return mention;
    }
    let rest = &value[end..];
    if rest.starts_with('{') {
        return ValueMetric {
            labels: label_block(value, end),
            via: MetricVia::Exposition,
            ..mention
        };
    }
    if line_head.is_empty() {
        if let Some(sample) = rest.strip_prefix(' ') {
            let sample = sample.trim_start_matches(' ');
            let numeric = sample.starts_with(|c: char| c.is_ascii_digit())
                || (sample.starts_with('{') && !sample.starts_with("{{"));
            if numeric {
                return ValueMetric {
                    labels: Some(Vec::new()),
                    via: MetricVia::Exposition,
                    ..mention
                };
            }
        }
    }
    mention
}

/// Parses `{a="…",b="…"}` (or the format-escaped `{{…}}`) starting at `at`;
/// `None` unless the whole block is `ident="…"` pairs.
fn label_block(value: &str, at: usize) -> Option<Vec<Range<usize>>> {
    let bytes = value.as_bytes();
    let escaped = value[at..].starts_with("{{");
    let (open, close) = if escaped { ("{{", "}}") } else { ("{", "}") };
    let mut i = at + open.len();
    let mut labels = Vec::new();
    loop {
        i = skip_spaces(bytes, i);
        if value[i..].starts_with(close) {
            // A lone `{}` in a format string is a placeholder, not an empty set.
            return (escaped || !labels.is_empty()).then_some(labels);
        }
        let name_start = i;
        if !bytes
            .get(i)
            .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        {
            return None;
        }
        while bytes.get(i).is_some_and(|b| is_word_byte(*b)) {
            i += 1;
        }
        let name_end = i;
        i = skip_spaces(bytes, i);
        if bytes.get(i) != Some(&b'=') {
            return None;
        }
        i = skip_spaces(bytes, i + 1);
        if bytes.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        loop {
            match bytes.get(i)? {
                b'\\' => i += 2,
                b'"' => break,
                _ => i += 1,
            }
        }
        labels.push(name_start..name_end);
        i = skip_spaces(bytes, i + 1);
        match bytes.get(i) {
            Some(b',') => i += 1,
            _ if value[i..].starts_with(close) => return Some(labels),
            _ => return None,
        }
    }
}

fn skip_spaces(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(|b| *b == b' ' || *b == b'\t') {
        i += 1;
    }
    i.min(bytes.len())
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_name_byte(b: u8) -> bool {
    is_word_byte(b) || b == b':'
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, labels, via) with the offsets resolved, for readable asserts.
    fn sites(value: &str) -> Vec<(&str, Option<Vec<&str>>, MetricVia)> {
        metric_sites_in(value, "dw_")
            .into_iter()
            .map(|s| {
                let labels = s
                    .labels
                    .map(|l| l.into_iter().map(|r| &value[r]).collect::<Vec<_>>());
                (&value[s.name], labels, s.via)
            })
            .collect()
    }

    /// [`metric_sites_in`] as it was written before it searched with
    /// [`find_bytes`]: `str::find` from each resume point.
    fn metric_sites_by_str_find(value: &str, prefix: &str) -> Vec<ValueMetric> {
        let mut out = Vec::new();
        if prefix.is_empty() {
            return out;
        }
        let bytes = value.as_bytes();
        let mut from = 0;
        while let Some(found) = value[from..].find(prefix) {
            let start = from + found;
            let mut end = start + prefix.len();
            while end < bytes.len() && is_name_byte(bytes[end]) {
                end += 1;
            }
            let boundary = start == 0 || !is_word_byte(bytes[start - 1]);
            if !boundary || end == start + prefix.len() {
                from = start + value[start..].chars().next().map_or(1, char::len_utf8);
                continue;
            }
            from = end;
            if names_something_else(value, start, end, &mut None) {
                continue;
            }
            // The line head found the way classify once found it itself.
            let line_start = value[..start].rfind('\n').map_or(0, |i| i + 1);
            let head = start - value[line_start..start].trim_start().len();
            out.push(classify(value, head, start, end));
        }
        out
    }

    #[test]
    fn paths_file_names_and_sql_tables_are_not_metrics() {
        for value in [
            "dw_defaults::limit",
            "crate::dw_x::y",
            "Dw_x::class",
            "dw_state.sqlite",
            "/var/lib/dw_state.db",
            "SELECT id FROM dw_runs WHERE x = 1",
            "  FROM dw_runs",
            "CREATE TABLE IF NOT EXISTS dw_workflow_runs (id TEXT)",
            "CREATE TABLE dw_workflow_runs (id TEXT)",
            "insert into \"dw_runs\" values (1)",
            "select * from `dw_runs` join dw_tasks on 1",
            "UPDATE dw_runs SET a = 1",
            "FOREIGN KEY (r) REFERENCES dw_runs(id)",
        ] {
            assert_eq!(sites(value), [], "{value}");
            assert_eq!(
                metric_sites_in(&value.replace("dw_", "meilisearch_"), "meilisearch_"),
                [],
                "{value}"
            );
        }
        // Metrics still are, prose and exposition alike.
        assert_eq!(sites("read from dw_queue_depth").len(), 1);
        assert_eq!(sites("see dw_x. Then dw_y.").len(), 2);
        assert_eq!(sites("dw_x{a=\"1\"} 2").len(), 1);
        assert_eq!(sites("dw_x:rate5m").len(), 1);
    }

    #[test]
    fn the_byte_search_finds_the_sites_str_find_found() {
        // Every string literal of this crate's sources, and values built to
        // put a prefix at each edge: overlapping itself, after a multi-byte
        // character, at the very end, longer than the value.
        let mut values: Vec<String> = [
            "dw_dw_x",
            "ïdw_x dw_",
            "dw_",
            "d",
            "",
            "xdw_dw_y{a=\"1\"} 2\ndw_z 3",
            "ždw_ždw_a",
            "dw_a{{b=\"{}\"}} {}",
        ]
        .map(str::to_owned)
        .to_vec();
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut dirs = vec![src];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    values.extend(text.split('"').map(str::to_owned));
                    values.push(text);
                }
            }
        }
        let mut sites = 0;
        for prefix in [
            "dw_",
            "d",
            "dw_dw_",
            "server:",
            "ž",
            "_scan_limit",
            "\n",
            "",
        ] {
            for value in &values {
                let found = metric_sites_in(value, prefix);
                assert_eq!(
                    found,
                    metric_sites_by_str_find(value, prefix),
                    "{prefix:?} in {value:?}"
                );
                sites += found.len();
            }
        }
        assert!(
            values.len() > 5_000 && sites > 1_000,
            "{} values, {sites} sites",
            values.len()
        );
    }

    #[test]
    fn the_short_search_finds_what_memmem_finds() {
        let needles = ["", "a", "ab", "aab", "server:", "_scan_limit", "ž", "bž"];
        let mut searched = 0;
        for len in 0..70 {
            for fill in ["ab", "aab", "baa", "server:x:", "_scan_limit", "xž"] {
                let hay: String = fill.chars().cycle().take(len).collect();
                for needle in needles {
                    let want = memchr::memmem::find(hay.as_bytes(), needle.as_bytes());
                    assert_eq!(want, hay.find(needle), "{needle:?} in {hay:?}");
                    assert_eq!(
                        find_bytes(hay.as_bytes(), needle.as_bytes()),
                        want,
                        "{needle:?} in {hay:?}"
                    );
                    searched += usize::from(want.is_some());
                }
            }
        }
        assert!(searched > 1_000, "{searched}");
    }

    #[test]
    fn full_names_join_the_non_empty_parts() {
        assert_eq!(full_name("dw", "wf", "runs").as_deref(), Some("dw_wf_runs"));
        assert_eq!(full_name("dw", "", "runs").as_deref(), Some("dw_runs"));
        assert_eq!(full_name("", "wf", "runs").as_deref(), Some("wf_runs"));
        assert_eq!(full_name("", "", "dw_x").as_deref(), Some("dw_x"));
        assert_eq!(full_name("dw", "wf", ""), None);
    }

    #[test]
    fn a_metric_name_is_the_whole_value() {
        assert!(is_metric_name("dw_x_total", "dw_"));
        assert!(!is_metric_name("dw_x{a=\"b\"}", "dw_"));
        assert!(!is_metric_name("x_dw_y", "dw_"));
        assert!(!is_metric_name("dw_", "dw_"));
        assert!(!is_metric_name("", "dw_"));
    }

    #[test]
    fn names_need_a_word_boundary_and_a_body() {
        assert_eq!(sites("my_dw_x DW_V2_LIMIT dw_ x"), vec![]);
        assert_eq!(
            sites("see dw_a:b, (dw_c)"),
            vec![
                ("dw_a:b", None, MetricVia::Mention),
                ("dw_c", None, MetricVia::Mention)
            ]
        );
        assert_eq!(
            sites("dw_dw_x"),
            vec![("dw_dw_x", None, MetricVia::Mention)]
        );
        assert_eq!(metric_sites_in("dw_x", ""), vec![]);
    }

    #[test]
    fn exposition_labels_plain_and_format_escaped() {
        assert_eq!(
            sites(r#"dw_x{queue="q\"1",kind="a"} 1"#),
            vec![("dw_x", Some(vec!["queue", "kind"]), MetricVia::Exposition)]
        );
        assert_eq!(
            sites(r#"dw_runs_total{{task_queue="{}", workflow_type="{wt:?}",}} {}"#),
            vec![(
                "dw_runs_total",
                Some(vec!["task_queue", "workflow_type"]),
                MetricVia::Exposition
            )]
        );
        assert_eq!(
            sites("dw_x{{}} 0"),
            vec![("dw_x", Some(vec![]), MetricVia::Exposition)]
        );
    }

    #[test]
    fn placeholders_instead_of_labels_are_unknown() {
        assert_eq!(
            sites("dw_x{labels} {}"),
            vec![("dw_x", None, MetricVia::Exposition)]
        );
        assert_eq!(
            sites("dw_x{} 1"),
            vec![("dw_x", None, MetricVia::Exposition)]
        );
        assert_eq!(
            sites(r#"dw_x{a="unterminated"#),
            vec![("dw_x", None, MetricVia::Exposition)]
        );
    }

    #[test]
    fn bare_sample_lines_have_no_labels_and_help_lines_are_mentions() {
        let text = "# HELP dw_a Runs.\n# TYPE dw_a counter\ndw_a {}\ndw_b 12\nx dw_c 1\n";
        assert_eq!(
            sites(text),
            vec![
                ("dw_a", None, MetricVia::Mention),
                ("dw_a", None, MetricVia::Mention),
                ("dw_a", Some(vec![]), MetricVia::Exposition),
                ("dw_b", Some(vec![]), MetricVia::Exposition),
                ("dw_c", None, MetricVia::Mention),
            ]
        );
        assert_eq!(
            sites("dw_a {{x}}"),
            vec![("dw_a", None, MetricVia::Mention)]
        );
        assert_eq!(
            sites("dw_a words"),
            vec![("dw_a", None, MetricVia::Mention)]
        );
    }
}
