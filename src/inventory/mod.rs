//! The inventory layer: what the scanned tree contains, in the shape the
//! rules ask about. It uses the [`crate::scan`] output, the
//! [`crate::extract`] fact types and [`crate::base`]; [`normalize`] cuts
//! cache-key literals to the prefixes a policy declares.
//!
//! Extractors report per-file facts; the inventory regroups them by what a
//! rule needs: cache prefixes used in cache sources, metric sites in metric
//! sources, scan-limit keys, scrape labels in remote-write sources, the items
//! owners may name, and the docs.

pub mod normalize;

use foldhash::{HashMap, HashSet};
use std::sync::Mutex;

use dwpolicy::{MetricPolicy, Policy};

use self::normalize::CacheKey;
use crate::base::diagnostic::{Anchor, Diagnostic};
use crate::base::line_index::TextRange;
use crate::extract::{Label, MetricVia, ScrapeLabel, SCAN_LIMIT_SUFFIX};
use crate::scan::{DocFile, ScanOutput, ScannedFile};

/// A cache-namespace literal in a cache source.
#[derive(Debug, Clone)]
pub struct CacheUse {
    /// The normalized prefix; the bare namespace when the key's family is
    /// computed (`server:{}`), which no prefix can declare.
    pub prefix: String,
    /// The literal as written (after unescaping).
    pub value: String,
    /// Where.
    pub anchor: Anchor,
}

/// A metric name in a metric source.
#[derive(Debug, Clone)]
pub struct MetricUse {
    /// The name as written.
    pub name: String,
    /// File relative to the root.
    pub file: String,
    /// Where the name is.
    pub range: TextRange,
    /// Labels emitted here, when known.
    pub labels: Option<Vec<Label>>,
    /// How the site was recognised.
    pub via: MetricVia,
}

/// A `*_scan_limit` configuration key in a source.
#[derive(Debug, Clone)]
pub struct ScanKeyUse {
    /// The key as written, e.g. `server.polling.due_timer_recovery_scan_limit`.
    pub key: String,
    /// Where.
    pub anchor: Anchor,
}

/// A target label set by a scrape or remote-write config.
#[derive(Debug, Clone)]
pub struct ScrapeLabelUse {
    /// File relative to the root.
    pub file: String,
    /// The label, its value as written, and where both are.
    pub label: ScrapeLabel,
}

/// Everything the rules can ask about the tree.
#[derive(Debug, Default)]
pub struct Inventory {
    /// How many files the policy selected.
    pub files_scanned: usize,
    /// Cache prefixes in cache sources.
    pub cache_uses: Vec<CacheUse>,
    /// Metric names in metric sources.
    pub metric_uses: Vec<MetricUse>,
    /// Scan-limit keys in cache or metric sources.
    pub scan_keys: Vec<ScanKeyUse>,
    /// Target labels in remote-write sources.
    pub scrape_labels: Vec<ScrapeLabelUse>,
    /// Qualified names of every item defined in parsed sources (Rust
    /// paths, PHP classes, Python modules and classes, Go types).
    pub items: HashSet<String>,
    /// Operator docs.
    pub docs: Vec<DocFile>,
    /// Files that could not be read or were parsed lexically.
    pub file_warnings: Vec<Diagnostic>,
    /// Inline allows, in file and line order.
    pub allows: Vec<crate::scan::allows::InlineAllow>,
}

impl Inventory {
    /// Regroups scan output.
    ///
    /// On a tree of thousands of files this was a twentieth of the run with
    /// the second core idle, so the files are regrouped in two halves, the
    /// second on another thread, and the halves joined in file order.
    pub fn build(scan: ScanOutput, policy: &Policy) -> Inventory {
        let namespace = &policy.settings.cache_namespace;
        let mut first = scan.sources;
        let second = Mutex::new(Some(first.split_off(first.len() / 2)));
        let (first, second) = std::thread::scope(|scope| {
            let helper = std::thread::Builder::new()
                .name("dwlint-inventory".into())
                .spawn_scoped(scope, || {
                    let files = second.lock().unwrap_or_else(|e| e.into_inner()).take()?;
                    Some(Regrouped::of(files, namespace))
                });
            let first = Regrouped::of(first, namespace);
            // The helper may not have started (or could not be): then its
            // half is still here, and is done on this thread.
            let left = second.lock().unwrap_or_else(|e| e.into_inner()).take();
            let second = match left {
                Some(files) => Regrouped::of(files, namespace),
                None => match helper.map(|h| h.join()) {
                    Ok(Ok(Some(done))) => done,
                    Ok(Err(panic)) => std::panic::resume_unwind(panic),
                    // Whoever took the half regrouped it; a helper that
                    // could not start took nothing.
                    Ok(Ok(None)) | Err(_) => Regrouped::default(),
                },
            };
            (first, second)
        });
        let mut inventory = Inventory {
            files_scanned: scan.files_scanned,
            docs: scan.docs,
            file_warnings: scan.warnings,
            allows: scan.allows,
            ..Inventory::default()
        };
        inventory
            .items
            .reserve(first.items.len() + second.items.len());
        for part in [first, second] {
            inventory.file_warnings.extend(part.fallbacks);
            inventory.items.extend(part.items);
            inventory.scrape_labels.extend(part.scrape_labels);
            inventory.cache_uses.extend(part.cache_uses);
            inventory.scan_keys.extend(part.scan_keys);
            inventory.metric_uses.extend(part.metric_uses);
        }
        inventory
    }
}

/// Some files' facts regrouped as the inventory holds them, in file order.
#[derive(Default)]
struct Regrouped {
    fallbacks: Vec<Diagnostic>,
    items: Vec<String>,
    scrape_labels: Vec<ScrapeLabelUse>,
    cache_uses: Vec<CacheUse>,
    scan_keys: Vec<ScanKeyUse>,
    metric_uses: Vec<MetricUse>,
}

impl Regrouped {
    fn of(files: Vec<ScannedFile>, namespace: &str) -> Regrouped {
        let mut out = Regrouped::default();
        let cache_namespace = normalize::Namespace::new(namespace);
        let scan_limit_suffix = memchr::memmem::Finder::new(SCAN_LIMIT_SUFFIX);
        for file in files {
            let facts = file.facts;
            if let Some((message, range)) = facts.fallback {
                out.fallbacks.push(
                    Diagnostic::new("parse-fallback", file.rel.clone(), format!("`{}` was scanned lexically ({message})", file.rel))
                        .at(Anchor::labeled(file.rel.clone(), range, "parsing stopped here"))
                        .help("macro-aware label extraction is off for this file; fix the syntax to get it back"),
                );
            }
            out.items.extend(facts.items);
            if file.roles.remote_write {
                out.scrape_labels
                    .extend(facts.scrape_labels.into_iter().map(|label| ScrapeLabelUse {
                        file: file.rel.clone(),
                        label,
                    }));
            }
            for mut literal in facts.literals {
                // Scan-limit keys end with the suffix, so a literal without
                // it (nearly all) is not split into words.
                if (file.roles.cache || file.roles.metrics)
                    && scan_limit_suffix.find(literal.value.as_bytes()).is_some()
                {
                    for key in scan_limit_keys(&literal.value) {
                        out.scan_keys.push(ScanKeyUse {
                            key: key.to_owned(),
                            anchor: Anchor::labeled(
                                file.rel.clone(),
                                literal.range,
                                "scan limit read here",
                            ),
                        });
                    }
                }
                if file.roles.cache {
                    let keys = normalize::cache_keys_in(&literal.value, &cache_namespace);
                    let last = keys.len().saturating_sub(1);
                    for (i, key) in keys.into_iter().enumerate() {
                        let prefix = match key {
                            CacheKey::Family(prefix) => prefix,
                            CacheKey::ComputedFamily => namespace.to_owned(),
                        };
                        // The literal is not used after its last key: moved, not copied.
                        let value = if i == last {
                            std::mem::take(&mut literal.value)
                        } else {
                            literal.value.clone()
                        };
                        out.cache_uses.push(CacheUse {
                            prefix,
                            value,
                            anchor: Anchor::labeled(
                                file.rel.clone(),
                                literal.range,
                                "cache key built here",
                            ),
                        });
                    }
                }
            }
            if file.roles.metrics {
                out.metric_uses
                    .extend(facts.metrics.into_iter().map(|site| MetricUse {
                        name: site.name,
                        file: file.rel.clone(),
                        range: site.range,
                        labels: site.labels,
                        via: site.via,
                    }));
            }
        }
        out
    }
}

/// `*_scan_limit` keys (dotted config paths allowed) inside a literal value.
pub fn scan_limit_keys(value: &str) -> impl Iterator<Item = &str> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    value
        .split(move |c: char| !is_word(c))
        .map(|token| token.trim_matches('.'))
        .filter(|token| {
            token.ends_with(SCAN_LIMIT_SUFFIX)
                && token.len() > SCAN_LIMIT_SUFFIX.len()
                && !token.bytes().any(|b| b.is_ascii_uppercase())
        })
}

/// Whether a config key found in source is the declared `config_key`: equal,
/// or one is a dotted suffix of the other (code often reads the leaf key of
/// a config section).
pub fn config_key_matches(declared: &str, found: &str) -> bool {
    let dotted_suffix = |long: &str, short: &str| {
        long.strip_suffix(short)
            .is_some_and(|head| head.ends_with('.'))
    };
    declared == found || dotted_suffix(declared, found) || dotted_suffix(found, declared)
}

/// Series suffixes Prometheus derives from a histogram or summary name.
const DERIVED_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count", "_created"];
/// Labels Prometheus adds to derived series; never declared as dimensions.
pub const IMPLICIT_LABELS: &[&str] = &["le", "quantile"];

/// Declared metrics by name, for lookups from every metric site.
pub struct MetricIndex<'p> {
    by_name: HashMap<&'p str, &'p MetricPolicy>,
}

impl<'p> MetricIndex<'p> {
    /// Indexes the policy's metrics.
    pub fn new(policy: &'p Policy) -> Self {
        let by_name = policy
            .metrics
            .iter()
            .map(|m| (m.name.value.as_str(), m))
            .collect();
        MetricIndex { by_name }
    }

    /// The declared metric a source name refers to: itself, or the histogram
    /// or summary it derives from (`dw_x_bucket` → `dw_x`).
    pub fn resolve(&self, name: &str) -> Option<&'p MetricPolicy> {
        let exact = self.by_name.get(name).copied();
        exact.or_else(|| {
            DERIVED_SUFFIXES.iter().find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                self.by_name.get(base).copied()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_limit_keys_are_found_with_their_dotted_path() {
        let keys: Vec<_> =
            scan_limit_keys("read server.polling.due_timer_recovery_scan_limit, default 5")
                .collect();
        assert_eq!(keys, vec!["server.polling.due_timer_recovery_scan_limit"]);
        assert_eq!(scan_limit_keys("_scan_limit").count(), 0);
        assert_eq!(scan_limit_keys("Expired_scan_limit").count(), 0);
    }

    #[test]
    fn config_keys_match_by_dotted_suffix() {
        assert!(config_key_matches(
            "server.polling.x_scan_limit",
            "x_scan_limit"
        ));
        assert!(config_key_matches(
            "server.polling.x_scan_limit",
            "polling.x_scan_limit"
        ));
        assert!(!config_key_matches(
            "server.polling.x_scan_limit",
            "y.x_scan_limit"
        ));
        assert!(!config_key_matches(
            "server.polling.ax_scan_limit",
            "x_scan_limit"
        ));
    }
}
