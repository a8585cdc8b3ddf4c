//! The extractor of last resort: a file in a language dwlint does not parse.
//!
//! Every line is treated as if it were one string literal, so cache prefixes,
//! scan-limit keys and metric names (with exposition labels) are still found.
//! Comments cannot be told apart here, which is why the file is reported
//! with a `parse-fallback` warning.

use super::exposition::metric_sites_in;
use super::{
    ExtractConfig, FileFacts, Label, LineIndex, Literal, LiteralKind, MetricSite, SCAN_LIMIT_SUFFIX,
};

/// Facts from a file with no language extractor.
pub fn extract_plain(text: &str, config: &ExtractConfig, extension: &str) -> FileFacts {
    let lines = LineIndex::new(text);
    let mut facts = FileFacts::default();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let content = line.trim_end_matches(['\n', '\r']);
        if content.contains(config.cache_namespace.as_str()) || content.contains(SCAN_LIMIT_SUFFIX)
        {
            facts.literals.push(Literal {
                value: content.to_owned(),
                kind: LiteralKind::Lexical,
                range: lines.range(text, offset, offset + content.len()),
                context: None,
            });
        }
        offset += line.len();
    }
    for site in metric_sites_in(text, &config.metric_prefix) {
        facts.metrics.push(MetricSite {
            name: text[site.name.clone()].to_owned(),
            range: lines.range(text, site.name.start, site.name.end),
            labels: site.labels.map(|labels| {
                labels
                    .into_iter()
                    .map(|l| Label {
                        name: text[l.clone()].to_owned(),
                        range: lines.range(text, l.start, l.end),
                    })
                    .collect()
            }),
            via: site.via,
        });
    }
    let what = if extension.is_empty() {
        "files without an extension".to_owned()
    } else {
        format!("`.{extension}` files")
    };
    facts.fallback = Some((
        format!("dwlint has no parser for {what}; scanned as plain text, comments included"),
        lines.range(text, 0, 0),
    ));
    facts
}
