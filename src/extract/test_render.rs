//! One-fact-per-line rendering of extractor output for snapshot tests (`L`
//! literal, `M` metric site, `I` item, `R` scrape label, `F` fallback), so
//! that every extractor's snapshots read the same way and stay reviewable
//! by eye.

use std::fmt::Write as _;

use super::{FileFacts, TextRange};

/// `line:col-end_line:end_col`.
pub(crate) fn at(r: &TextRange) -> String {
    format!("{}:{}-{}:{}", r.line, r.column, r.end_line, r.end_column)
}

/// Every fact of `f`, one per line.
pub(crate) fn render(f: &FileFacts) -> String {
    let mut out = String::new();
    for l in &f.literals {
        let context = l.context.as_deref().unwrap_or("-");
        let _ = writeln!(
            out,
            "L {} {:?} {:?} in {context}",
            at(&l.range),
            l.kind,
            l.value
        );
    }
    for m in &f.metrics {
        let labels = match &m.labels {
            None => "?".to_owned(),
            Some(labels) => {
                let names: Vec<String> = labels
                    .iter()
                    .map(|l| format!("{}@{}", l.name, at(&l.range)))
                    .collect();
                format!("[{}]", names.join(", "))
            }
        };
        let _ = writeln!(out, "M {} {} {labels} {:?}", at(&m.range), m.name, m.via);
    }
    for i in &f.items {
        let _ = writeln!(out, "I {i}");
    }
    for r in &f.scrape_labels {
        let _ = writeln!(
            out,
            "R {} {}={:?}@{}",
            at(&r.name_range),
            r.name,
            r.value,
            at(&r.value_range)
        );
    }
    if let Some((message, range)) = &f.fallback {
        let _ = writeln!(out, "F {} {message}", at(range));
    }
    out
}
