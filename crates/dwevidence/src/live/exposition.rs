//! A reader for Prometheus text exposition (format 0.0.4), as far as the
//! live checks need it: metric names, label pairs, and dwserver's
//! `# cardinality series_limits.<key> {json}` report comments.
//!
//! It reads on past a line it cannot read, because a live check that
//! stops at the first odd line would hide every finding after it, but it
//! records the first such line ([`Exposition::malformed`], with its line
//! and column): `dwlint live` refuses a malformed scrape (exit 2) rather
//! than pass on garbage, while the soak harness, which samples a server
//! for hours, keeps the readable lines of every sample.
//!
//! A sample line is `name`, an optional `{label="value",…}` set (a trailing
//! comma allowed, escapes `\\`, `\"`, `\n`), blanks, a value (a float,
//! `+Inf`, `-Inf` or `NaN`) and an optional integer timestamp. Reading is
//! linear in the text: no part of a line is read twice.

use std::collections::BTreeMap;

use serde_json::Value;

/// One sample line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// The metric name as written (with `_bucket`/`_sum`/`_count`).
    pub name: String,
    /// Label pairs in line order.
    pub labels: Vec<(String, String)>,
}

/// Where a scrape stopped making sense.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What was expected there.
    pub message: String,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

/// A parsed scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    /// Every readable sample line.
    pub series: Vec<Series>,
    /// `series_limits` key → report, from `# cardinality` comments.
    pub reports: BTreeMap<String, Value>,
    /// The first line that is not exposition text, if any.
    pub malformed: Option<Malformed>,
}

/// Parses exposition text.
pub fn parse(text: &str) -> Exposition {
    let mut exposition = Exposition::default();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(rest) = line.strip_prefix("# cardinality series_limits.") {
            if let Some((key, json)) = rest.split_once(' ') {
                if let Ok(report) = serde_json::from_str(json) {
                    exposition.reports.insert(key.to_owned(), report);
                }
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match sample(line) {
            Ok(series) => exposition.series.push(series),
            Err((at, message)) => {
                if exposition.malformed.is_none() {
                    let lead = raw.len() - raw.trim_start().len();
                    let column = raw[..lead + at].chars().count() + 1;
                    exposition.malformed = Some(Malformed {
                        line: index + 1,
                        column,
                        message,
                    });
                }
            }
        }
    }
    exposition
}

/// Why a line is not a sample: the byte offset in it, and what was wrong.
type LineError = (usize, String);

fn sample(line: &str) -> Result<Series, LineError> {
    let bytes = line.as_bytes();
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || bytes[0].is_ascii_digit() {
        return Err((0, "expected a metric name".to_owned()));
    }
    let (labels, after) = match line[name_end..].strip_prefix('{') {
        Some(_) => labels(line, name_end + 1)?,
        None => (Vec::new(), name_end),
    };
    value_and_timestamp(line, after)?;
    Ok(Series {
        name: name.to_owned(),
        labels,
    })
}

/// Reads `k="v",…}` from byte `from` of `line` (just after `{`); the pairs
/// and the offset after `}`.
fn labels(line: &str, from: usize) -> Result<(Vec<(String, String)>, usize), LineError> {
    let open = from - 1;
    let unclosed = || {
        (
            open,
            "the label set opened here is not closed with `}`".to_owned(),
        )
    };
    let bytes = line.as_bytes();
    let mut pairs = Vec::new();
    let mut i = from;
    loop {
        while i < bytes.len() && (bytes[i] == b',' || bytes[i].is_ascii_whitespace()) {
            i += 1;
        }
        match bytes.get(i) {
            None => return Err(unclosed()),
            Some(b'}') => return Ok((pairs, i + 1)),
            Some(_) => {}
        }
        let key_start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if i == key_start || bytes[key_start].is_ascii_digit() {
            return Err((key_start, "expected a label name".to_owned()));
        }
        let key = &line[key_start..i];
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            return Err(match bytes.get(i) {
                None => unclosed(),
                Some(_) => (i, format!("expected `=` after the label name `{key}`")),
            });
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) != Some(&b'"') {
            return Err(match bytes.get(i) {
                None => unclosed(),
                Some(_) => (i, format!("expected `\"` to open the value of `{key}`")),
            });
        }
        let quote = i;
        i += 1;
        let mut value = String::new();
        loop {
            let Some(c) = line[i..].chars().next() else {
                return Err((
                    quote,
                    format!("the value of `{key}` opened here is not closed with `\"`"),
                ));
            };
            i += c.len_utf8();
            match c {
                '\\' => {
                    let Some(next) = line[i..].chars().next() else {
                        return Err((
                            quote,
                            format!("the value of `{key}` opened here is not closed with `\"`"),
                        ));
                    };
                    i += next.len_utf8();
                    value.push(if next == 'n' { '\n' } else { next });
                }
                '"' => break,
                c => value.push(c),
            }
        }
        pairs.push((key.to_owned(), value));
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        match bytes.get(i) {
            Some(b',' | b'}') => {}
            None => return Err(unclosed()),
            Some(_) => return Err((i, "expected `,` or `}` after a label value".to_owned())),
        }
    }
}

/// Checks that `line[from..]` is blanks, a value and an optional timestamp.
fn value_and_timestamp(line: &str, from: usize) -> Result<(), LineError> {
    let rest = &line[from..];
    // Each blank-separated word with its offset in `line`.
    let mut words = rest
        .split_ascii_whitespace()
        .map(|word| (word.as_ptr() as usize - line.as_ptr() as usize, word));
    let Some((value_at, value)) = words.next() else {
        return Err((line.len(), "expected a sample value".to_owned()));
    };
    if value_at == from {
        return Err((from, "expected a blank before the sample value".to_owned()));
    }
    let number = matches!(value, "+Inf" | "-Inf" | "NaN")
        || (value.parse::<f64>().is_ok()
            && value
                .bytes()
                .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)));
    if !number {
        return Err((value_at, format!("`{value}` is not a sample value")));
    }
    if let Some((at, timestamp)) = words.next() {
        if timestamp
            .strip_prefix('-')
            .unwrap_or(timestamp)
            .parse::<u64>()
            .is_err()
        {
            return Err((at, format!("`{timestamp}` is not a timestamp")));
        }
    }
    if let Some((at, extra)) = words.next() {
        return Err((at, format!("unexpected `{extra}` after the sample")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_labels_and_reports_are_read() {
        let text = "# cardinality series_limits.workflows {\"limit\":3,\"reported\":1}\n# HELP x y\n# TYPE dw_a counter\ndw_a{task_queue=\"q\\\"1\",workflow_type=\"a,b}\"} 4\ndw_b 1\n\ngarbage{unterminated=\"x\n";
        let e = parse(text);
        assert_eq!(e.reports["workflows"]["limit"], 3);
        assert_eq!(
            e.malformed,
            Some(Malformed {
                line: 7,
                column: 22,
                message: "the value of `unterminated` opened here is not closed with `\"`".into()
            })
        );
        assert_eq!(
            e.series,
            [
                Series {
                    name: "dw_a".into(),
                    labels: vec![
                        ("task_queue".into(), "q\"1".into()),
                        ("workflow_type".into(), "a,b}".into())
                    ],
                },
                Series {
                    name: "dw_b".into(),
                    labels: vec![]
                },
            ]
        );
    }

    fn first_error(text: &str) -> String {
        parse(text).malformed.expect("malformed").to_string()
    }

    #[test]
    fn well_formed_lines_are_not_malformed() {
        let text = "# HELP a b\n# TYPE a gauge\na 1\na{x=\"1\",} 2.5e3 1700000000000\n  b{ x = \"y\" } -Inf\nc NaN\nd +Inf\ne{} 0\n";
        let e = parse(text);
        assert_eq!(e.malformed, None);
        assert_eq!(e.series.len(), 6);
    }

    #[test]
    fn malformed_lines_are_located() {
        assert_eq!(
            first_error("ok 1\n  dw_x{a=\"1\" 2\n"),
            "line 2, column 14: expected `,` or `}` after a label value"
        );
        assert_eq!(
            first_error("dw_x 1 2 3\n"),
            "line 1, column 10: unexpected `3` after the sample"
        );
        assert_eq!(
            first_error("dw_x\n"),
            "line 1, column 5: expected a sample value"
        );
        assert_eq!(
            first_error("dw_x one\n"),
            "line 1, column 6: `one` is not a sample value"
        );
        assert_eq!(
            first_error("dw_x 1 t\n"),
            "line 1, column 8: `t` is not a timestamp"
        );
        assert_eq!(
            first_error("{a=\"b\"} 1\n"),
            "line 1, column 1: expected a metric name"
        );
        assert_eq!(
            first_error("x{1=\"b\"} 1\n"),
            "line 1, column 3: expected a label name"
        );
        assert_eq!(
            first_error("x{é=\"b\"} 1\n"),
            "line 1, column 3: expected a label name"
        );
        assert_eq!(
            first_error("x{a b} 1\n"),
            "line 1, column 5: expected `=` after the label name `a`"
        );
        assert_eq!(
            first_error("x{a=b} 1\n"),
            "line 1, column 5: expected `\"` to open the value of `a`"
        );
        assert_eq!(
            first_error("x{a=\"é\"}1\n"),
            "line 1, column 9: expected a blank before the sample value"
        );
        assert_eq!(
            first_error("dw_x{a=\"1\""),
            "line 1, column 5: the label set opened here is not closed with `}`"
        );
    }

    #[test]
    fn an_unclosed_label_set_repeated_is_one_error_in_linear_time() {
        let text = "dw_x_total{".repeat(100_000);
        assert_eq!(
            first_error(&text),
            "line 1, column 22: expected `=` after the label name `dw_x_total`"
        );
    }
}
