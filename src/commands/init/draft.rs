//! Turning what `init` found into a starter policy that cannot pass review
//! by accident.
//!
//! Everything a person must decide is left in a form `check` rejects: review
//! sentences start with `TODO` (`missing-review-field`), a cache entry's
//! `dimensions`, a metric's `dimensions` when no labels were seen, and a scan
//! limit's `default` are left out (also `missing-review-field`), and each label seen gets the class
//! [`PLACEHOLDER_CLASS`], which is outside the taxonomy
//! (`unreviewed-cardinality-class`). What the tree already says (prefix,
//! config key, metric name, the labels emitted) is filled in.

use std::collections::BTreeSet;

use super::doc_ids::DocIds;
use super::found::{Found, FoundScanLimit, Site};
use crate::extract::SCAN_LIMIT_SUFFIX;
use crate::policy::draft::{Draft, DraftCacheKey, DraftMetric, DraftScanLimit, DraftSources};

/// The class given to every label seen: it names the choice to make and
/// fails `unreviewed-cardinality-class` until it is made.
pub const PLACEHOLDER_CLASS: &str = "TODO_bounded_or_finite";

/// The starter policy for `found`, scanned with `sources`.
///
/// IDs are the ones the docs' tables already give a prefix or config key
/// ([`DocIds`]), else derived from the family name or the key.
pub fn draft(
    found: &Found,
    sources: DraftSources,
    cache_namespace: &str,
    doc_ids: &DocIds,
) -> Draft {
    let mut draft = Draft {
        header: HEADER.iter().map(|s| s.to_string()).collect(),
        sources,
        ..Draft::default()
    };
    let mut ids = BTreeSet::new();
    for p in &found.prefixes {
        let id = doc_ids
            .for_prefix(&p.prefix)
            .map_or_else(|| prefix_id(&p.prefix, cache_namespace), str::to_owned);
        let id = unique(&mut ids, id);
        draft.cache_keys.push(DraftCacheKey {
            id,
            notes: vec![
                format!("found in {}: {}", at(&p.site), one_line(&p.literal)),
                "TODO: add `dimensions = [...]`, what varies in the key ([] for a fixed key)"
                    .into(),
            ],
            owner: Some(p.site.owner.clone()),
            prefix: Some(p.prefix.clone()),
            dimensions: None,
            ttl: todo("how long one key lives"),
            bound: todo("how many keys can exist at once"),
            admission: todo("what may create a key, and what caps that"),
            eviction: todo("what removes a key"),
        });
    }
    draft.scan_limits = scan_limit_drafts(&found.scan_limits, doc_ids, BTreeSet::new());
    for m in &found.metrics {
        // Without labels seen, `dimensions` is left out: `check` reports the
        // missing field until someone writes the labels, or `{}` to record
        // that the metric was reviewed as having none.
        let labels_note = match &m.labels {
            Some(labels) if labels.is_empty() => "TODO: emitted without labels here; after checking every emission site, add `dimensions = {}` (reviewed: no dimensions)".to_owned(),
            Some(labels) => format!(
                "labels seen: {}; give each a reviewed class (bounded_*, finite_*, request_scope_*, *_no_label)",
                labels.join(", ")
            ),
            None => "TODO: no emission site with known labels was found; add `dimensions = { label = \"class\" }` for the labels it is emitted with, or `dimensions = {}` (reviewed: no dimensions)".to_owned(),
        };
        let mut notes = vec![format!("found in {}", at(&m.site)), labels_note];
        if m.labels.as_ref().is_some_and(|l| !l.is_empty()) {
            notes.push("a bounded_* dimension also needs `selection` and `suppression`".into());
        }
        draft.metrics.push(DraftMetric {
            name: m.name.clone(),
            notes,
            owner: Some(m.site.owner.clone()),
            surface: todo("where the metric is exposed, e.g. GET /metrics"),
            dimensions: m.labels.as_ref().filter(|l| !l.is_empty()).map(|labels| {
                labels
                    .iter()
                    .map(|l| (l.clone(), PLACEHOLDER_CLASS.to_owned()))
                    .collect()
            }),
            cardinality: todo("how many series can exist"),
            selection: None,
            suppression: None,
        });
    }
    draft
}

/// One `[scan_limits]` draft per found key, with IDs the docs use (else
/// the key's leaf without `_scan_limit`) and not among `taken`.
pub(crate) fn scan_limit_drafts(
    found: &[FoundScanLimit],
    doc_ids: &DocIds,
    mut taken: BTreeSet<String>,
) -> Vec<DraftScanLimit> {
    let mut out = Vec::new();
    for s in found {
        let leaf = s.key.rsplit('.').next().unwrap_or(&s.key);
        let id = doc_ids.for_config_key(&s.key).map_or_else(
            || leaf.trim_end_matches(SCAN_LIMIT_SUFFIX).to_owned(),
            str::to_owned,
        );
        let id = unique(&mut taken, id);
        let default_note = match s.default {
            Some(n) => {
                format!("default {n}: the value the code passes beside the key there; confirm it")
            }
            None => "TODO: add `default = N`, the cap the code uses when the key is not configured"
                .into(),
        };
        out.push(DraftScanLimit {
            id,
            notes: vec![format!("found in {}", at(&s.site)), default_note],
            owner: Some(s.site.owner.clone()),
            config_key: Some(s.key.clone()),
            default: s.default,
            bound: todo("what one scan touches at most"),
        });
    }
    out
}

const HEADER: &[&str] = &[
    "Starter bounded-growth policy written by `dwlint init` from what it found in the tree.",
    "Nothing here is reviewed: replace every \"TODO: ...\" with a reviewed sentence, add the",
    "missing `dimensions` and `default` keys, and give every dimension a class from the",
    "taxonomy. `dwlint check` fails until then. Owners are guesses (the enclosing type, or",
    "the file); confirm them. Format: docs/policy.md.",
];

fn todo(what: &str) -> Option<String> {
    Some(format!("TODO: {what}"))
}

fn at(site: &Site) -> String {
    format!("{}:{}", site.file, site.line)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `server:long-poll-signal:` → `long_poll_signal`.
pub fn prefix_id(prefix: &str, namespace: &str) -> String {
    let family = prefix.strip_prefix(namespace).unwrap_or(prefix);
    let mut id = String::new();
    for c in family.chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c.to_ascii_lowercase());
        } else if !id.ends_with('_') {
            id.push('_');
        }
    }
    let id = id.trim_matches('_');
    if id.is_empty() {
        "cache".to_owned()
    } else {
        id.to_owned()
    }
}

/// `id`, or `id_2`, `id_3`… when an earlier entry took it.
fn unique(taken: &mut BTreeSet<String>, id: String) -> String {
    let mut candidate = id.clone();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = format!("{id}_{n}");
        n += 1;
    }
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_from_the_family_name() {
        assert_eq!(
            prefix_id("server:long-poll-signal:", "server:"),
            "long_poll_signal"
        );
        assert_eq!(prefix_id("server:a:B.c:", "server:"), "a_b_c");
        assert_eq!(prefix_id("server:::", "server:"), "cache");
        let mut taken = BTreeSet::new();
        assert_eq!(unique(&mut taken, "a".into()), "a");
        assert_eq!(unique(&mut taken, "a".into()), "a_2");
    }

    #[test]
    fn the_placeholder_class_is_not_reviewed() {
        assert!(!dwpolicy::CardinalityClass::parse(PLACEHOLDER_CLASS).is_reviewed());
    }
}
