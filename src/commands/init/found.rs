//! What `dwlint init` found in the tree, reduced to one entry per surface.
//!
//! `check` wants every use covered and every declaration used, and flags two
//! declared prefixes where one covers the other. So the starter policy
//! declares the shortest prefixes that cover every use, one scan limit per
//! group of matching config keys, and one metric per name (a histogram's
//! derived `_bucket`/`_sum`/… series fold into it), each with the place it
//! was first seen so a reviewer can find it.

use std::collections::BTreeMap;
use std::path::Path;

use dwpolicy::checks::is_valid_metric_name;
use dwpolicy::Settings;

use super::owner;
use crate::inventory::normalize::{self, CacheKey};
use crate::inventory::{config_key_matches, scan_limit_keys, IMPLICIT_LABELS};
use crate::scan::{ScanOutput, ScannedFile};

/// Where a surface was first seen, and who owns it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// File relative to the root.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// The guessed owner: an item the file defines, or the file itself.
    pub owner: String,
}

/// A cache prefix to declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPrefix {
    /// The normalized prefix.
    pub prefix: String,
    /// The literal it was first normalized from.
    pub literal: String,
    /// Where.
    pub site: Site,
}

/// A scan-limit key to declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundScanLimit {
    /// The longest form of the key seen.
    pub key: String,
    /// Where.
    pub site: Site,
    /// The default the code passes beside the key there
    /// (`config('…_scan_limit', 5)`), if it passes a number.
    pub default: Option<i64>,
}

/// A metric to declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundMetric {
    /// The metric name.
    pub name: String,
    /// Every label seen at an emission site, in first-seen order; `None` when
    /// no site's labels were known.
    pub labels: Option<Vec<String>>,
    /// Where.
    pub site: Site,
}

/// Everything worth a policy entry, plus what could not be declared.
#[derive(Debug, Default)]
pub struct Found {
    /// Cache prefixes, sorted.
    pub prefixes: Vec<FoundPrefix>,
    /// Scan limits, sorted by key.
    pub scan_limits: Vec<FoundScanLimit>,
    /// Metrics, sorted by name.
    pub metrics: Vec<FoundMetric>,
    /// Things found that no valid entry can declare, with why.
    pub undeclarable: Vec<(Site, String)>,
}

/// Series suffixes Prometheus derives from a histogram or summary (the list
/// `inventory` resolves declared metrics with).
const DERIVED_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count", "_created"];

/// A first sighting, before its owner is guessed.
#[derive(Clone, Copy)]
struct At<'s> {
    file: &'s ScannedFile,
    context: Option<&'s str>,
    offset: usize,
    line: usize,
}

/// Reduces scan output to the entries of a starter policy.
pub fn collect(root: &Path, scan: &ScanOutput, settings: &Settings) -> Found {
    let namespace = &settings.cache_namespace;
    let mut prefixes: BTreeMap<String, (String, At)> = BTreeMap::new();
    let mut keys: BTreeMap<String, At> = BTreeMap::new();
    let mut metrics: BTreeMap<String, (Option<Vec<String>>, At)> = BTreeMap::new();
    for file in &scan.sources {
        for literal in &file.facts.literals {
            let at = At {
                file,
                context: literal.context.as_deref(),
                offset: literal.range.start,
                line: literal.range.line,
            };
            if file.roles.cache {
                for key in normalize::cache_keys(&literal.value, namespace) {
                    let prefix = match key {
                        CacheKey::Family(prefix) => prefix,
                        CacheKey::ComputedFamily => namespace.clone(),
                    };
                    prefixes
                        .entry(prefix)
                        .or_insert_with(|| (literal.value.clone(), at));
                }
            }
            if file.roles.cache || file.roles.metrics {
                for key in scan_limit_keys(&literal.value) {
                    keys.entry(key.to_owned()).or_insert(at);
                }
            }
        }
        if !file.roles.metrics {
            continue;
        }
        for site in &file.facts.metrics {
            let at = At {
                file,
                context: None,
                offset: site.range.start,
                line: site.range.line,
            };
            let (labels, first) = metrics.entry(site.name.clone()).or_insert((None, at));
            // The owner is guessed where the metric is emitted, not where a
            // help string or test merely names it.
            if labels.is_none() && site.labels.is_some() {
                *first = at;
            }
            if let Some(seen) = &site.labels {
                let labels = labels.get_or_insert_with(Vec::new);
                for label in seen {
                    if !labels.contains(&label.name)
                        && !IMPLICIT_LABELS.contains(&label.name.as_str())
                    {
                        labels.push(label.name.clone());
                    }
                }
            }
        }
    }
    fold_derived_series(&mut metrics);
    let mut texts = Texts {
        root,
        cache: BTreeMap::new(),
    };
    let mut found = Found::default();
    for (prefix, (literal, at)) in shortest_covering(prefixes, namespace) {
        let site = texts.site(at);
        if prefix == *namespace {
            found.undeclarable.push((
                site,
                format!("`{literal}` computes its family right after `{namespace}`, so no prefix can declare it without claiming the whole namespace; write the family as a literal segment (`{namespace}<family>:…`)"),
            ));
        } else {
            found.prefixes.push(FoundPrefix {
                prefix,
                literal,
                site,
            });
        }
    }
    for (key, at) in longest_keys(keys) {
        let default = texts
            .text(&at.file.rel)
            .and_then(|text| default_beside(text, at.offset, &key));
        found.scan_limits.push(FoundScanLimit {
            key,
            site: texts.site(at),
            default,
        });
    }
    for (name, (labels, at)) in metrics {
        let site = texts.site(at);
        if is_valid_metric_name(&name, &settings.metric_prefix) {
            found.metrics.push(FoundMetric { name, labels, site });
        } else {
            let message = format!(
                "`{name}` is not a valid metric name (`{}[a-z0-9_]+`)",
                settings.metric_prefix
            );
            found.undeclarable.push((site, message));
        }
    }
    found
}

/// Drops prefixes that a shorter found prefix already covers: declaring
/// both would be an `overlapping-cache-prefix`. The bare namespace is kept
/// (to be reported as undeclarable) but covers nothing: it can never be
/// declared, so it must not swallow the families that can.
fn shortest_covering<T>(found: BTreeMap<String, T>, namespace: &str) -> Vec<(String, T)> {
    let mut kept: Vec<(String, T)> = Vec::new();
    // Sorted order puts every prefix right after the prefixes it extends.
    for (prefix, value) in found {
        let covered = kept
            .iter()
            .any(|(k, _)| k != namespace && prefix.starts_with(k.as_str()));
        if !covered {
            kept.push((prefix, value));
        }
    }
    kept
}

/// One key per group of keys that `check` treats as the same config key,
/// keeping the most qualified spelling.
fn longest_keys<T: Copy>(found: BTreeMap<String, T>) -> Vec<(String, T)> {
    let mut by_length: Vec<(String, T)> = found.into_iter().collect();
    by_length.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    let mut kept: Vec<(String, T)> = Vec::new();
    for (key, at) in by_length {
        if !kept.iter().any(|(k, _)| config_key_matches(k, &key)) {
            kept.push((key, at));
        }
    }
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    kept
}

/// `dw_x_bucket` is a series of `dw_x` when `dw_x` itself was found.
fn fold_derived_series(metrics: &mut BTreeMap<String, (Option<Vec<String>>, At)>) {
    let derived: Vec<(String, String)> = metrics
        .keys()
        .filter_map(|name| {
            DERIVED_SUFFIXES.iter().find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                metrics
                    .contains_key(base)
                    .then(|| (name.clone(), base.to_owned()))
            })
        })
        .collect();
    for (name, base) in derived {
        let Some((labels, at)) = metrics.remove(&name) else {
            continue;
        };
        let Some((base_labels, first)) = metrics.get_mut(&base) else {
            continue;
        };
        let Some(labels) = labels else { continue };
        if base_labels.is_none() {
            *first = at;
        }
        let base_labels = base_labels.get_or_insert_with(Vec::new);
        for label in labels {
            if !base_labels.contains(&label) {
                base_labels.push(label);
            }
        }
    }
}

/// Source texts, read again only for the files an owner is guessed in.
struct Texts<'r> {
    root: &'r Path,
    cache: BTreeMap<String, Option<String>>,
}

impl Texts<'_> {
    /// The text of the file at `rel`, read once.
    fn text(&mut self, rel: &str) -> Option<&str> {
        let root = self.root;
        self.cache
            .entry(rel.to_owned())
            .or_insert_with(|| std::fs::read_to_string(root.join(rel)).ok())
            .as_deref()
    }

    fn site(&mut self, at: At) -> Site {
        let rel = &at.file.rel;
        let needs_text = at.context.is_none() && rel.ends_with(".rs");
        let text = if needs_text { self.text(rel) } else { None };
        Site {
            file: rel.clone(),
            line: at.line,
            owner: owner::guess(at.file, text, at.context, at.offset),
        }
    }
}

/// The number the code passes right after the literal `key` that starts
/// near `offset`: `config('k_scan_limit', 5)`, `env_or("k_scan_limit", 25)`
/// (the literal closed, a comma, digits, then `)`). Anything else (a
/// constant, an expression, a second argument that is not the last) is no
/// default.
fn default_beside(text: &str, offset: usize, key: &str) -> Option<i64> {
    let from = offset.min(text.len());
    let window = text.get(from..(from + key.len() + 8).min(text.len()))?;
    let after = from + window.find(key)? + key.len();
    let rest = text.get(after..)?;
    let rest = rest.strip_prefix(['"', '\'', '`'])?.trim_start();
    let rest = rest.strip_prefix(',')?.trim_start();
    let digits = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .unwrap_or(rest.len());
    let (number, rest) = rest.split_at(digits);
    if number.is_empty() || !rest.trim_start().starts_with(')') {
        return None;
    }
    number.replace('_', "").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_is_the_number_passed_beside_the_key() {
        let key = "server.polling.x_scan_limit";
        let at =
            |text: &str| default_beside(text, text.find('\'').or(text.find('"')).unwrap(), key);
        assert_eq!(at("config('server.polling.x_scan_limit', 5);"), Some(5));
        assert_eq!(
            at("env_or(\"server.polling.x_scan_limit\" , 1_000 )"),
            Some(1000)
        );
        assert_eq!(at("config('server.polling.x_scan_limit', LIMIT);"), None);
        assert_eq!(at("config('server.polling.x_scan_limit', 5 * 2);"), None);
        assert_eq!(at("get('server.polling.x_scan_limit', 5, true);"), None);
        assert_eq!(at("const K = 'server.polling.x_scan_limit';"), None);
    }

    fn kept(prefixes: &[&str]) -> Vec<String> {
        let found: BTreeMap<String, ()> = prefixes.iter().map(|p| (p.to_string(), ())).collect();
        shortest_covering(found, "server:")
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    #[test]
    fn covered_prefixes_are_dropped() {
        assert_eq!(
            kept(&["server:a:", "server:a:b:", "server:ab:", "server:b:"]),
            ["server:a:", "server:ab:", "server:b:"]
        );
    }

    #[test]
    fn the_bare_namespace_covers_no_family() {
        assert_eq!(
            kept(&["server:", "server:a:", "server:a:b:"]),
            ["server:", "server:a:"]
        );
    }

    #[test]
    fn matching_config_keys_keep_the_longest_spelling() {
        let found: BTreeMap<String, ()> = [
            "x_scan_limit",
            "server.polling.x_scan_limit",
            "polling.x_scan_limit",
            "other.x_scan_limit",
        ]
        .into_iter()
        .map(|p| (p.to_owned(), ()))
        .collect();
        let kept: Vec<String> = longest_keys(found).into_iter().map(|(k, _)| k).collect();
        assert_eq!(kept, ["other.x_scan_limit", "server.polling.x_scan_limit"]);
    }
}
