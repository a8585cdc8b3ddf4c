//! A reader for Prometheus text exposition (format 0.0.4), as far as the
//! live checks need it: metric names, label pairs, and dwserver's
//! `# cardinality series_limits.<key> {json}` report comments.
//!
//! It is forgiving on purpose: a line it cannot read is kept out of the
//! series rather than failing the scrape, because a live check that stops
//! at the first odd line would hide every finding after it.

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

/// A parsed scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    /// Every readable sample line.
    pub series: Vec<Series>,
    /// `series_limits` key → report, from `# cardinality` comments.
    pub reports: BTreeMap<String, Value>,
}

/// Parses exposition text.
pub fn parse(text: &str) -> Exposition {
    let mut exposition = Exposition::default();
    for line in text.lines() {
        let line = line.trim();
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
        if let Some(series) = sample(line) {
            exposition.series.push(series);
        }
    }
    exposition
}

fn sample(line: &str) -> Option<Series> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let rest = &line[name_end..];
    let labels = match rest.strip_prefix('{') {
        Some(body) => labels(body)?,
        None => Vec::new(),
    };
    Some(Series {
        name: name.to_owned(),
        labels,
    })
}

/// Reads `k="v",…}` (escapes `\\`, `\"`, `\n`).
fn labels(body: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek() == Some(&'}') {
            return Some(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=') {
            key.push(c);
        }
        chars.next()?; // '='
        if chars.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        pairs.push((key.trim().to_owned(), value));
    }
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
}
