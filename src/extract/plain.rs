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
///
/// Each line is cut into runs of characters between blanks and quotes (`"`,
/// `'`, `` ` ``), the nearest thing to a string literal a file of unknown
/// syntax has. A run holding the cache namespace at a word boundary gives
/// one literal per occurrence, from the namespace to the next occurrence or
/// the run's end, so `cache.get(server:signal:{id})` in mid-line is a key
/// at its true column; what the run holds before the first occurrence, or
/// the whole run when it holds none, is a literal when it mentions a scan
/// limit.
pub fn extract_plain(text: &str, config: &ExtractConfig, extension: &str) -> FileFacts {
    let lines = LineIndex::new(text);
    let mut facts = FileFacts::default();
    let namespace = config.cache_namespace.as_bytes();
    let finder = memchr::memmem::Finder::new(namespace);
    let suffix = memchr::memmem::Finder::new(SCAN_LIMIT_SUFFIX);
    let bytes = text.as_bytes();
    let mut push = |start: usize, end: usize| {
        facts.literals.push(Literal {
            value: text[start..end].to_owned(),
            kind: LiteralKind::Lexical,
            range: lines.range(text, start, end),
            context: None,
        });
    };
    let separator = |b: u8| b.is_ascii_whitespace() || matches!(b, b'"' | b'\'' | b'`');
    let mut i = 0;
    while i < bytes.len() {
        if separator(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !separator(bytes[i]) {
            i += 1;
        }
        let run = &bytes[start..i];
        let mut keys = Vec::new();
        if !namespace.is_empty() {
            keys.extend(
                finder
                    .find_iter(run)
                    .filter(|&at| at == 0 || !is_key_boundary_blocker(run[at - 1]))
                    .map(|at| start + at),
            );
        }
        let head_end = keys.first().copied().unwrap_or(i);
        if suffix.find(&bytes[start..head_end]).is_some() {
            push(start, head_end);
        }
        for (n, &key) in keys.iter().enumerate() {
            push(key, keys.get(n + 1).copied().unwrap_or(i));
        }
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

/// Bytes that, just before the namespace, make it part of something else:
/// a longer word (`observer:`), a path or image (`org/server:`), a URL host
/// (`//server:`) or another key (`x:server:`).
fn is_key_boundary_blocker(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/' | b':' | b'@')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn literals(text: &str) -> Vec<(String, usize, usize)> {
        let config = ExtractConfig {
            cache_namespace: "server:".into(),
            metric_prefix: "dw_".into(),
        };
        extract_plain(text, &config, "txt")
            .literals
            .into_iter()
            .map(|l| (l.value, l.range.line, l.range.column))
            .collect()
    }

    #[test]
    fn keys_in_mid_line_are_found_at_their_columns() {
        assert_eq!(
            literals("    server:signal:{id}\nredis.get(server:poll:{q}) and \"server:x:\"+id\n"),
            [
                ("server:signal:{id}".to_owned(), 1, 5),
                ("server:poll:{q})".to_owned(), 2, 11),
                ("server:x:".to_owned(), 2, 33),
            ]
        );
    }

    #[test]
    fn the_namespace_inside_a_word_path_or_key_is_no_key() {
        assert!(literals("observer:x org/server:1 //server:a x:server:b\n").is_empty());
    }

    #[test]
    fn scan_limits_are_kept_with_what_precedes_a_key() {
        assert_eq!(
            literals("cfg.poll_scan_limit=server:a:,server:b:\n"),
            [
                ("cfg.poll_scan_limit=".to_owned(), 1, 1),
                ("server:a:,".to_owned(), 1, 21),
                ("server:b:".to_owned(), 1, 31),
            ]
        );
    }
}
