//! The per-file accumulator every extraction path feeds.
//!
//! The parser path, the macro-token path and the lexical fallback all see the
//! same literal more than once in some shapes (`counter!("dw_x", …)` is both a
//! literal and a macro argument), and all need the same keep rule, metric scan
//! and byte-offset-to-line conversion. Keeping that in one place is what makes
//! "exactly one site per name and literal position, the richest one" hold no
//! matter which path found it first.

use foldhash::HashMap;
use std::borrow::Cow;
use std::ops::Range;

use super::exposition::{find_bytes, for_each_metric_site};
use super::{
    ExtractConfig, FileFacts, Label, LineIndex, Literal, LiteralKind, MetricSite, MetricVia,
    TextRange, SCAN_LIMIT_SUFFIX,
};

/// One decoded literal (or joined `concat!`) as the extraction paths see it.
#[derive(Debug, Clone)]
pub(crate) struct LitInfo<'a> {
    pub value: Cow<'a, str>,
    pub kind: LiteralKind,
    /// Byte range of the whole token (or macro invocation) in the file.
    pub span: Range<usize>,
    /// Byte offset in the file where `value` starts, when the source bytes
    /// between the quotes are exactly the value; lets sites point at the
    /// name itself instead of the whole literal.
    pub verbatim_at: Option<usize>,
    /// Where each run of `value` came from, for values pieced together from
    /// several places (escapes, joined concatenations, placeholders); empty
    /// when `verbatim_at` (or the whole span) says it all.
    pub runs: &'a [Run],
}

/// A run of a literal value starting at `value_at` that was copied from the
/// file at `source_at` (`verbatim`), or produced by decoding the source
/// there (an escape, a placeholder), in which case every offset inside it
/// maps to `source_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub value_at: usize,
    pub source_at: usize,
    pub verbatim: bool,
}

/// The file offset of value offset `at` under `runs` (sorted by `value_at`).
pub(crate) fn run_offset(runs: &[Run], at: usize) -> Option<usize> {
    let slot = runs.partition_point(|r| r.value_at <= at).checked_sub(1)?;
    let run = runs[slot];
    Some(if run.verbatim {
        run.source_at + (at - run.value_at)
    } else {
        run.source_at
    })
}

impl LitInfo<'_> {
    /// The file byte range of `value[part]`, or the whole token when the
    /// value is not written verbatim.
    pub fn source_range(&self, part: Range<usize>) -> Range<usize> {
        if let (Some(start), Some(last)) = (
            run_offset(self.runs, part.start),
            run_offset(self.runs, part.end.saturating_sub(1).max(part.start)),
        ) {
            // The end maps from the last byte so that a part ending a run is
            // not stretched to the next run's source position.
            let end = if part.end > part.start {
                last + 1
            } else {
                start
            };
            return start..end.max(start);
        }
        match self.verbatim_at {
            Some(at) => at + part.start..at + part.end,
            None => self.span.clone(),
        }
    }
}

pub(crate) struct Collector<'t> {
    text: &'t str,
    config: &'t ExtractConfig,
    index: Option<LineIndex>,
    literals: Vec<Literal>,
    metrics: Vec<MetricSite>,
    /// (name, start, end) → index into `metrics`, built once `metrics`
    /// holds more than `scan_up_to` sites; until then `metrics` is searched
    /// in turn (a file has a few sites, and hashing a copy of each name
    /// into a fresh table cost more than comparing them).
    site_slots: HashMap<(String, usize, usize), usize>,
    scan_up_to: usize,
}

/// How many sites [`Collector::site`] compares one by one before it indexes
/// them.
const SITES_SCANNED: usize = 16;

impl<'t> Collector<'t> {
    pub fn new(text: &'t str, config: &'t ExtractConfig) -> Self {
        Collector {
            text,
            config,
            index: None,
            literals: Vec::new(),
            metrics: Vec::new(),
            site_slots: HashMap::default(),
            scan_up_to: SITES_SCANNED,
        }
    }

    pub fn text(&self) -> &'t str {
        self.text
    }

    pub fn config(&self) -> &'t ExtractConfig {
        self.config
    }

    /// Line/column conversion; the index is only built once something is
    /// actually reported, most files that reach the parser report nothing.
    pub fn range(&mut self, bytes: Range<usize>) -> TextRange {
        let text = self.text;
        let end = bytes.end.min(text.len());
        let start = bytes.start.min(end);
        self.index
            .get_or_insert_with(|| LineIndex::new(text))
            .range(text, start, end)
    }

    /// Applies the keep rule and the metric-name scan to one literal value.
    pub fn literal(&mut self, lit: &LitInfo<'_>, context: Option<&str>) {
        let value: &str = &lit.value;
        let namespace = self.config.cache_namespace.as_str();
        // Not `str::contains`, which builds a searcher for every call.
        let holds = |needle: &str| find_bytes(value.as_bytes(), needle.as_bytes()).is_some();
        let keep = (!namespace.is_empty() && holds(namespace)) || holds(SCAN_LIMIT_SUFFIX);
        if keep {
            let range = self.range(lit.span.clone());
            self.literals.push(Literal {
                value: value.to_owned(),
                kind: lit.kind,
                range,
                context: context.map(str::to_owned),
            });
        }
        let config = self.config;
        for_each_metric_site(value, &config.metric_prefix, |found| {
            let range = self.range(lit.source_range(found.name.clone()));
            let labels = found.labels.map(|labels| {
                labels
                    .into_iter()
                    .map(|part| Label {
                        name: value[part.clone()].to_owned(),
                        range: self.range(lit.source_range(part)),
                    })
                    .collect()
            });
            self.record_site(Cow::Borrowed(&value[found.name]), range, labels, found.via);
        });
    }

    /// Records a metric site, keeping only the richest one per name and
    /// position.
    pub fn site(
        &mut self,
        name: String,
        range: TextRange,
        labels: Option<Vec<Label>>,
        via: MetricVia,
    ) {
        self.record_site(Cow::Owned(name), range, labels, via);
    }

    /// [`Collector::site`] with the name copied only when the site is kept
    /// (a literal's plain scan mostly finds a name a macro already gave).
    fn record_site(
        &mut self,
        name: Cow<'_, str>,
        range: TextRange,
        labels: Option<Vec<Label>>,
        via: MetricVia,
    ) {
        let slot = if self.metrics.len() <= self.scan_up_to {
            self.metrics.iter().position(|m| {
                (m.range.start, m.range.end) == (range.start, range.end) && *m.name == *name
            })
        } else {
            if self.site_slots.is_empty() {
                for (slot, m) in self.metrics.iter().enumerate() {
                    self.site_slots
                        .insert((m.name.clone(), m.range.start, m.range.end), slot);
                }
            }
            let key = (name.to_string(), range.start, range.end);
            let slot = self.site_slots.get(&key).copied();
            if slot.is_none() {
                self.site_slots.insert(key, self.metrics.len());
            }
            slot
        };
        let richer = slot.is_none_or(|slot| {
            let kept = &self.metrics[slot];
            richness(&labels, via) > richness(&kept.labels, kept.via)
        });
        if !richer {
            return;
        }
        let site = MetricSite {
            name: name.into_owned(),
            range,
            labels,
            via,
        };
        match slot {
            Some(slot) => self.metrics[slot] = site,
            None => self.metrics.push(site),
        }
    }

    pub fn finish(
        mut self,
        items: Vec<String>,
        fallback: Option<(String, TextRange)>,
    ) -> FileFacts {
        self.literals.sort_by_key(|l| (l.range.start, l.range.end));
        self.literals
            .dedup_by(|a, b| a.range == b.range && a.value == b.value);
        self.metrics.sort_by(|a, b| {
            (a.range.start, a.range.end, &a.name).cmp(&(b.range.start, b.range.end, &b.name))
        });
        FileFacts {
            literals: self.literals,
            metrics: self.metrics,
            items,
            fallback,
            scrape_labels: Vec::new(),
        }
    }
}

/// Known labels beat unknown ones, more labels beat fewer, and a site that
/// understood the emitting API beats a plain literal scan.
fn richness(labels: &Option<Vec<Label>>, via: MetricVia) -> (bool, usize, u8) {
    let via = match via {
        MetricVia::Mention => 0,
        MetricVia::Exposition => 1,
        MetricVia::MetricsMacro | MetricVia::PrometheusVec => 2,
    };
    (labels.is_some(), labels.as_ref().map_or(0, Vec::len), via)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sites of `calls` recorded by a collector that indexes them once
    /// it holds more than `scan_up_to` (0: from the first, as it always
    /// did before the one-by-one search).
    fn recorded(
        calls: &[(String, TextRange, Option<Vec<Label>>, MetricVia)],
        scan_up_to: usize,
    ) -> FileFacts {
        let config = ExtractConfig {
            cache_namespace: "server:".to_owned(),
            metric_prefix: "dw_".to_owned(),
        };
        let mut collector = Collector::new("", &config);
        collector.scan_up_to = scan_up_to;
        for (name, range, labels, via) in calls.iter().cloned() {
            collector.site(name, range, labels, via);
        }
        collector.finish(Vec::new(), None)
    }

    #[test]
    fn sites_searched_one_by_one_keep_what_the_index_keeps() {
        // The same few names at the same few places, over and over, each
        // time richer or poorer: every call either adds a site or competes
        // with the one already there.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as usize
        };
        let vias = [
            MetricVia::Mention,
            MetricVia::Exposition,
            MetricVia::MetricsMacro,
            MetricVia::PrometheusVec,
        ];
        let mut calls = Vec::new();
        for _ in 0..400 {
            let start = next(12);
            let range = TextRange {
                start,
                end: start + next(3),
                ..TextRange::default()
            };
            let labels = match next(3) {
                0 => None,
                n => Some(
                    (0..n + next(2))
                        .map(|l| Label {
                            name: format!("l{l}"),
                            range,
                        })
                        .collect(),
                ),
            };
            calls.push((format!("dw_{}", next(5)), range, labels, vias[next(4)]));
        }
        for len in [1, 5, SITES_SCANNED, SITES_SCANNED + 1, 40, calls.len()] {
            let calls = &calls[..len];
            let indexed = recorded(calls, 0);
            assert_eq!(recorded(calls, SITES_SCANNED), indexed, "{len} calls");
            assert_eq!(recorded(calls, usize::MAX), indexed, "{len} calls");
        }
        let kept = recorded(&calls, 0).metrics.len();
        assert!(kept > 2 * SITES_SCANNED && kept < calls.len(), "{kept}");
    }
}
