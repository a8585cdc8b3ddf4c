//! ## What it does
//! Reports a declared policy ID, cache prefix, metric name, scan-limit ID or
//! scan-limit config key that the operator docs (`[sources].docs`) do not
//! mention anywhere, and a docs glob that matches no file. A mention is the
//! exact text, not part of a longer identifier.
//!
//! ## Why is this bad?
//! Operators read the docs, not the policy file, when a cache or a scrape
//! grows. A surface missing from the inventory they read is a surface they
//! will not look at, and the per-policy soak limits are keyed by these IDs.
//!
//! ## Example
//! ```toml
//! [cache_keys.readiness_probe]
//! prefix = "server:readiness:"
//! ```
//! passes only when `docs/bounded-growth.md` mentions both `readiness_probe`
//! and `server:readiness:`, typically as a row of its Cache Inventory table.

use aho_corasick::AhoCorasick;

use super::Context;
use crate::base::diagnostic::Diagnostic;
use dwpolicy::Spanned;

pub(super) const CODE: &str = "doc-missing-mention";

pub(super) fn check(ctx: &Context, out: &mut Vec<Diagnostic>) {
    let policy = ctx.policy();
    for glob in &policy.sources.docs {
        let pattern = glob.value.trim_start_matches("./");
        let matched = globset::Glob::new(pattern)
            .map(|g| g.compile_matcher())
            .is_ok_and(|m| ctx.inventory.docs.iter().any(|d| m.is_match(&d.rel)));
        if !matched {
            out.push(
                Diagnostic::new(
                    CODE,
                    glob.value.clone(),
                    format!("docs glob `{}` matches no file", glob.value),
                )
                .at(ctx.in_policy(glob.span, "matches nothing"))
                .help("fix the glob or add the operator doc"),
            );
        }
    }
    if ctx.inventory.docs.is_empty() {
        return;
    }
    let mut wanted: Vec<(&Spanned<String>, &str)> = Vec::new();
    for entry in &policy.cache_keys {
        wanted.push((&entry.id, "policy ID"));
        wanted.extend(entry.prefix.iter().map(|p| (p, "cache prefix")));
    }
    for entry in &policy.scan_limits {
        wanted.push((&entry.id, "scan-limit ID"));
        wanted.extend(entry.config_key.iter().map(|k| (k, "config key")));
    }
    for metric in &policy.metrics {
        wanted.push((&metric.name, "metric"));
    }
    wanted.retain(|(mention, _)| !mention.value.trim().is_empty());
    let needles: Vec<&str> = wanted.iter().map(|(m, _)| m.value.as_str()).collect();
    let found = mentioned(ctx.inventory.docs.iter().map(|d| d.text.as_str()), &needles);
    let doc_names = ctx
        .inventory
        .docs
        .iter()
        .map(|d| d.rel.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    for (i, (mention, kind)) in wanted.into_iter().enumerate() {
        if found[i] {
            continue;
        }
        out.push(
            Diagnostic::new(
                CODE,
                mention.value.clone(),
                format!("{kind} `{}` is not mentioned in {doc_names}", mention.value),
            )
            .at(ctx.in_policy(mention.span, "declared here"))
            .help(format!(
                "add `{}` to the operator docs (its inventory table)",
                mention.value
            )),
        );
    }
}

/// For each needle, whether some text mentions it as a whole identifier
/// (not as part of a longer one). A needle made only of identifier
/// characters (a policy ID, a metric name) is mentioned exactly when it is
/// one of the texts' maximal identifier runs, so those are looked up in a
/// set of the runs; the others (cache prefixes) are found with one
/// automaton pass per text. Either way the cost grows with the docs plus
/// the needles, not docs × policy entries, and the automaton, whose
/// construction cost a dense policy's run more than the search, holds only
/// the needles that need it.
fn mentioned<'t>(texts: impl Iterator<Item = &'t str> + Clone, needles: &[&str]) -> Vec<bool> {
    let mut found = vec![false; needles.len()];
    let (words, others): (Vec<usize>, Vec<usize>) = (0..needles.len())
        .partition(|&i| !needles[i].is_empty() && needles[i].bytes().all(|b| ident_byte(&b)));
    if !words.is_empty() {
        let mut runs = foldhash::HashSet::default();
        for text in texts.clone() {
            runs.extend(
                text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|run| !run.is_empty()),
            );
        }
        for &i in &words {
            found[i] = runs.contains(needles[i]);
        }
    }
    if others.is_empty() {
        return found;
    }
    let patterns: Vec<&str> = others.iter().map(|&i| needles[i]).collect();
    let hits = match StartIndex::new(&patterns) {
        Some(index) if index.cheaper_than_automaton(texts.clone()) => index.mentions(texts),
        _ => automaton_mentions(&patterns, texts),
    };
    for (p, hit) in hits.into_iter().enumerate() {
        found[others[p]] |= hit;
    }
    found
}

/// For each pattern, whether some text mentions it, found with one
/// overlapping automaton pass per text.
fn automaton_mentions<'t>(patterns: &[&str], texts: impl Iterator<Item = &'t str>) -> Vec<bool> {
    let mut found = vec![false; patterns.len()];
    let Ok(automaton) = AhoCorasick::new(patterns) else {
        return found;
    };
    let is_ident = |b: Option<&u8>| b.is_some_and(ident_byte);
    for text in texts {
        let bytes = text.as_bytes();
        for m in automaton.find_overlapping_iter(text) {
            let needle = patterns[m.pattern().as_usize()].as_bytes();
            let before = m.start().checked_sub(1).and_then(|i| bytes.get(i));
            let ends_open = needle.last().is_some_and(ident_byte);
            if !is_ident(before) && (!ends_open || !is_ident(bytes.get(m.end()))) {
                found[m.pattern().as_usize()] = true;
            }
        }
    }
    found
}

fn ident_byte(b: &u8) -> bool {
    b.is_ascii_alphanumeric() || *b == b'_'
}

/// The needles that are not identifiers, looked up where a mention can
/// start: at each byte of the texts that no identifier byte precedes and
/// that starts some needle, one map lookup per needle length. That finds
/// exactly the occurrences the automaton's overlapping search keeps, and
/// costs less than building the automaton when the needles come in few
/// lengths and few places qualify (a dense policy's thousands of
/// `server:family-N:` prefixes: four lengths, one start per table row;
/// the automaton's construction was half the rule's cost).
struct StartIndex<'n> {
    /// Needle bytes → index into the needles.
    needles: foldhash::HashMap<&'n [u8], usize>,
    /// Distinct needle lengths, ascending.
    lengths: Vec<usize>,
    /// Whether a needle starts with the byte.
    first: [bool; 256],
    /// For each needle, the first needle equal to it.
    first_equal: Vec<usize>,
}

impl<'n> StartIndex<'n> {
    /// The index of `needles`; `None` when one is empty.
    fn new(needles: &[&'n str]) -> Option<Self> {
        let mut first = [false; 256];
        let mut lengths = Vec::new();
        let mut index = foldhash::HashMap::default();
        let mut first_equal = Vec::with_capacity(needles.len());
        for (i, needle) in needles.iter().enumerate() {
            let bytes = needle.as_bytes();
            first[usize::from(*bytes.first()?)] = true;
            lengths.push(bytes.len());
            first_equal.push(*index.entry(bytes).or_insert(i));
        }
        lengths.sort_unstable();
        lengths.dedup();
        Some(StartIndex {
            needles: index,
            lengths,
            first,
            first_equal,
        })
    }

    /// Whether the lookups in `texts` (qualifying starts × lengths) are
    /// fewer than the needles' bytes, which building the automaton costs in
    /// proportion to.
    fn cheaper_than_automaton<'t>(&self, texts: impl Iterator<Item = &'t str>) -> bool {
        let budget: usize = self
            .first_equal
            .iter()
            .enumerate()
            .filter(|&(i, &first)| i == first)
            .count()
            .saturating_mul(16);
        let mut lookups = 0usize;
        for text in texts {
            let starts = mention_starts(text.as_bytes(), &self.first).count();
            lookups = lookups.saturating_add(starts.saturating_mul(self.lengths.len()));
            if lookups > budget {
                return false;
            }
        }
        true
    }

    /// For each needle, whether some text mentions it.
    fn mentions<'t>(&self, texts: impl Iterator<Item = &'t str>) -> Vec<bool> {
        let mut hit = vec![false; self.first_equal.len()];
        for text in texts {
            let bytes = text.as_bytes();
            for at in mention_starts(bytes, &self.first) {
                let rest = &bytes[at..];
                for &len in self.lengths.iter().take_while(|&&len| len <= rest.len()) {
                    let Some(&i) = self.needles.get(&rest[..len]) else {
                        continue;
                    };
                    let ends_open = ident_byte(&rest[len - 1]);
                    if !(ends_open && rest.get(len).is_some_and(ident_byte)) {
                        hit[i] = true;
                    }
                }
            }
        }
        // Equal needles share their first one's entry.
        self.first_equal.iter().map(|&first| hit[first]).collect()
    }
}

/// Offsets in `bytes` where a mention may start: a byte some needle starts
/// with, not preceded by an identifier byte. When the needles start with
/// at most three distinct bytes (a policy's prefixes all start with its
/// namespace) those bytes are found with `memchr`, not by testing every
/// byte of the docs, which was most of the rule's cost on a dense policy.
fn mention_starts<'b>(bytes: &'b [u8], first: &'b [bool; 256]) -> impl Iterator<Item = usize> + 'b {
    let mut firsts = (0..=u8::MAX).filter(|&b| first[usize::from(b)]);
    let candidates: Box<dyn Iterator<Item = usize> + 'b> =
        match (firsts.next(), firsts.next(), firsts.next(), firsts.next()) {
            (Some(a), None, _, _) => Box::new(memchr::memchr_iter(a, bytes)),
            (Some(a), Some(b), None, _) => Box::new(memchr::memchr2_iter(a, b, bytes)),
            (Some(a), Some(b), Some(c), None) => Box::new(memchr::memchr3_iter(a, b, c, bytes)),
            _ => Box::new((0..bytes.len()).filter(move |&at| first[usize::from(bytes[at])])),
        };
    candidates.filter(move |&at| !(at > 0 && ident_byte(&bytes[at - 1])))
}

#[cfg(test)]
mod tests {
    fn mentions(text: &str, needle: &str) -> bool {
        super::mentioned([text].into_iter(), &[needle])[0]
    }

    #[test]
    fn a_mention_is_a_whole_identifier() {
        assert!(mentions("dw_x", "dw_x"));
        assert!(mentions("x dw_x", "dw_x"));
        assert!(mentions("é_dw_xé", "_dw_x"));
        assert!(!mentions("dw_x2", "dw_x"));
        assert!(!mentions("", "dw_x"));
        assert!(!mentions("a server:b", ":b"));
        assert!(mentions("a :b", ":b"));
        assert!(!mentions("a server:b", "r:b"));
        assert!(mentions("| dw_x | GET |", "dw_x"));
        assert!(mentions("`dw_x`.", "dw_x"));
        assert!(!mentions("dw_x_total", "dw_x"));
        assert!(!mentions("my_dw_x", "dw_x"));
        assert!(mentions("server:a:b", "server:a:"));
        assert!(mentions("éx_1é", "x_1"));
        assert!(!mentions("éx_1é", "x_"));
        assert!(mentions("a\u{2003}b_c\u{2003}", "b_c"));
    }

    #[test]
    fn words_are_found_as_the_texts_char_runs() {
        let texts = ["a_b, c9 é_d_é x-y\tz\u{ff}w", "", "dw_x_total dw_x"];
        let needles = [
            "a_b",
            "c9",
            "_d_",
            "d",
            "x",
            "y",
            "z",
            "w",
            "dw_x",
            "dw_x_total",
            "q",
            "a",
        ];
        let runs: Vec<&str> = texts
            .iter()
            .flat_map(|t| t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
            .collect();
        let found = super::mentioned(texts.iter().copied(), &needles);
        for (needle, hit) in needles.iter().zip(found) {
            assert_eq!(hit, runs.contains(needle), "{needle}");
        }
    }

    #[test]
    fn start_lookups_find_what_the_automaton_finds() {
        let texts = [
            "| a | `server:a:` | server:ab: x-y server:a:b:c :b é:b",
            "server:a:server:b: _server:c: (server:c:)x-y.z x-yz",
            "x-y",
        ];
        // Needles starting with one, two, three and more distinct bytes
        // (`memchr`, `memchr2`, `memchr3`, every byte tested).
        let needle_sets: [&[&str]; 8] = [
            &["server:a:", "server:b:", "server:c:", "server:a:b:"],
            &["server:a:", "x-y", "x-y.z"],
            &[":b", "r:b", "server:ab", "server:ab:", "server:a:"],
            &["x-y", "x-y.z", "x-y", "é:b", "y"],
            &["server:zz:", "nowhere-"],
            &["server:a:", "server:a:"],
            &["server:a:", ":b", "x-y", "é:b", "r:b"],
            &[
                "a", "b", "c", "d", "e", "f", "r", "s", "x", "y", "z", ":", "-", "é",
            ],
        ];
        for needles in needle_sets {
            for n in 0..=texts.len() {
                let index = super::StartIndex::new(needles).unwrap();
                let by_index = index.mentions(texts[..n].iter().copied());
                let by_automaton = super::automaton_mentions(needles, texts[..n].iter().copied());
                assert_eq!(by_index, by_automaton, "{needles:?} in {:?}", &texts[..n]);
            }
        }
        assert!(super::StartIndex::new(&["a", ""]).is_none());
    }
}
