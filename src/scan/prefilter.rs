//! Which files are worth parsing, decided from their bytes.
//!
//! Almost every file in a large tree holds nothing the gate looks for, and
//! parsing is what costs. One Aho-Corasick pass over a file's bytes looks
//! for the policy's owner names, every occurrence of the cache namespace,
//! the metric prefix and the scan-limit suffix, and the inline-allow marker
//! ([`allows::MARKER`]), and stops as soon as the answer is known (an owner
//! name, or in a file other than Rust a key that could matter; the rest is
//! then searched for the marker alone). On a sparse tree, where most files
//! hold none of them, the cost is the vectorised search itself: past 32
//! patterns it halves its stride, so several owner names are searched
//! through a key they share (`owner_keys`), and the patterns are ordered
//! so that its buckets let few false candidates through (`search_order`).
//! Of the key hits only those that could matter are kept:
//!
//! - the namespace not followed by `:` (`lsp_server::Connection` holds
//!   `server:`, but a namespace with an empty family segment is no key);
//! - the metric prefix at the start of a name (not `kdw_x`; a byte before it
//!   that ends an escape such as `\n` or `\x20` still counts as a start);
//! - any scan-limit suffix or owner name.
//!
//! In a Rust file the namespace, prefix and suffix only matter inside a
//! string literal, so the file is lexed (not parsed) to see whether one is;
//! an owner name anywhere needs the parser, which knows the items a file
//! defines. Each test errs towards parsing: the prefilter may let through a
//! file the extractor then finds nothing in, never the other way round.

use aho_corasick::AhoCorasick;

use crate::extract::{lexical, ExtractConfig, SCAN_LIMIT_SUFFIX};
use crate::scan::allows;

/// What one key pattern stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    Namespace,
    MetricPrefix,
    ScanLimit,
}

/// The compiled byte prefilter for one policy.
#[derive(Debug, Clone)]
pub struct Prefilter {
    /// What [`Self::examine`] searches for in one pass, in this order of
    /// precedence where several start at one byte: the inline-allow
    /// marker, the owners' keys, then the namespace, prefix and suffix.
    all: AhoCorasick,
    /// The owners' names, grouped by the key searched for them.
    owner_keys: Vec<OwnerKey>,
    /// What each of `all`'s patterns is.
    slots: Vec<Slot>,
    /// For the marker (first) and each word: the owner keys that can
    /// start at the same byte (one is a prefix of the other), which the
    /// search hides where it reports the marker or the word.
    shadowed: Vec<Vec<usize>>,
    /// The namespace, the metric prefix and the scan-limit suffix.
    words: Vec<(String, Pattern)>,
    /// The namespace ends in `:`, so a following `:` leaves its family empty.
    namespace_colon: bool,
}

/// A string searched for in place of one or more owner names, each of
/// which holds it: where the key is found, each of its names is compared
/// with the bytes around it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OwnerKey {
    key: String,
    /// `(name, where the key starts in it)`.
    owners: Vec<(String, usize)>,
}

impl OwnerKey {
    /// Whether one of the names occurs around the key found at `at`.
    fn verified(&self, bytes: &[u8], at: usize) -> bool {
        self.owners.iter().any(|(name, offset)| {
            at.checked_sub(*offset)
                .is_some_and(|start| bytes[start..].starts_with(name.as_bytes()))
        })
    }
}

/// The most patterns (keys and owners' keys, plus the allow marker) for
/// which the automaton's vectorised search covers 32 bytes a step; past
/// that it uses the variant that covers 16 ("Fat Teddy"), and on a sparse
/// tree that search is most of the prefilter's cost.
const FULL_STRIDE_PATTERNS: usize = 32;

/// How many owner names are grouped under shared keys at most (one bit
/// each in a `u64`); a policy with more keeps one pattern per name (past
/// 64 patterns the search is not vectorised anyway).
const MAX_GROUPED_OWNERS: usize = 64;

/// The shortest key shared by several owner names: a shorter one would
/// occur in most files.
const MIN_SHARED_KEY: usize = 5;

/// How far into an owner name shared keys are looked for (the work is
/// quadratic in it).
const SHARED_KEY_WINDOW: usize = 48;

/// The keys to search for `names` (sorted, distinct, none empty), at most
/// `budget` of them when that can be had (0: as few as can be had): while
/// there are too many, the substring of at least [`MIN_SHARED_KEY`] bytes shared
/// by several names that saves the most (names it covers beyond the first,
/// times its length: longer keys occur in fewer files) replaces them.
/// Names left over are their own keys. No key is a prefix of another (a
/// longer one is merged into its prefix): the search reports one pattern
/// per starting byte, and a key hidden by its prefix would be missed.
fn owner_keys(names: &[&str], budget: usize) -> Vec<OwnerKey> {
    if names.len() > MAX_GROUPED_OWNERS {
        // Each name its own key: wherever one is reported, its name is
        // there, so one hidden by another starting at the same byte is
        // not missed, and no merging is needed (it would make a short
        // name's key stand for thousands of longer ones).
        return names
            .iter()
            .map(|&name| OwnerKey {
                key: name.to_owned(),
                owners: vec![(name.to_owned(), 0)],
            })
            .collect();
    }
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    let mut left: Vec<&str> = names.to_vec();
    if names.len() > budget {
        let mut shared: foldhash::HashMap<&str, u64> = foldhash::HashMap::default();
        for (i, name) in names.iter().enumerate() {
            let window = &name.as_bytes()[..name.len().min(SHARED_KEY_WINDOW)];
            for start in 0..window.len() {
                for end in start + MIN_SHARED_KEY..=window.len() {
                    // Only whole characters: a key is a `str`.
                    if let Some(key) = name.get(start..end) {
                        *shared.entry(key).or_default() |= 1 << i;
                    }
                }
            }
        }
        let mut uncovered: u64 = if names.len() == 64 {
            u64::MAX
        } else {
            (1 << names.len()) - 1
        };
        while uncovered.count_ones() as usize + groups.len() > budget {
            let best = shared
                .iter()
                .filter(|(_, names)| (**names & uncovered).count_ones() >= 2)
                .max_by(|(a, a_names), (b, b_names)| {
                    let saves = |key: &str, names: u64| {
                        ((names & uncovered).count_ones() as usize - 1) * key.len()
                    };
                    saves(a, **a_names)
                        .cmp(&saves(b, **b_names))
                        .then_with(|| b.cmp(a))
                });
            let Some((&key, &covers)) = best else { break };
            let covered = covers & uncovered;
            uncovered &= !covered;
            let members = (0..names.len())
                .filter(|i| covered & (1 << i) != 0)
                .map(|i| names[i])
                .collect();
            groups.push((key.to_owned(), members));
        }
        left = (0..names.len())
            .filter(|i| uncovered & (1 << i) != 0)
            .map(|i| names[i])
            .collect();
    }
    groups.extend(left.into_iter().map(|name| (name.to_owned(), vec![name])));
    // Shortest first, so that a key's prefixes are already kept.
    groups.sort_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    let mut keys: Vec<OwnerKey> = Vec::new();
    for (key, members) in groups {
        let into = keys
            .iter()
            .position(|kept| key.starts_with(kept.key.as_str()));
        let owners = members.into_iter().map(|name| {
            // The key's first place in the name: any place would do, the
            // search reports every place the key starts.
            let offset = name.find(key.as_str()).unwrap_or(0);
            (name.to_owned(), offset)
        });
        match into {
            Some(k) => keys[k].owners.extend(owners),
            None => keys.push(OwnerKey {
                owners: owners.collect(),
                key,
            }),
        }
    }
    keys
}

/// What a file's bytes hold.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Candidates {
    /// Offsets of the namespace, prefix and suffix occurrences that could
    /// be part of a key, name or config key (if inside a string).
    pub in_strings: Vec<usize>,
    /// An owner name occurs.
    pub owner: bool,
}

impl Candidates {
    /// Whether the file may hold anything at all.
    pub fn any(&self) -> bool {
        self.owner || !self.in_strings.is_empty()
    }
}

/// What [`Prefilter::examine`] found out about a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The file must go to its extractor.
    pub wanted: bool,
    /// The inline-allow marker ([`allows::MARKER`]) occurs in it.
    pub allow_marker: bool,
}

/// What one of the automaton's patterns is.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Marker,
    Owner(usize),
    Word(usize),
}

/// What starts at one byte, by precedence.
enum Found {
    Owner,
    Word,
    Nothing,
}

impl Prefilter {
    /// The prefilter for `config` and the last segments of the policy's
    /// owners; `None` when there is nothing to build it from (then every
    /// file is read by its extractor).
    pub fn new(config: &ExtractConfig, owner_names: &[String]) -> Option<Prefilter> {
        let mut words: Vec<(String, Pattern)> = Vec::new();
        for (word, pattern) in [
            (config.cache_namespace.as_str(), Pattern::Namespace),
            (config.metric_prefix.as_str(), Pattern::MetricPrefix),
            (SCAN_LIMIT_SUFFIX, Pattern::ScanLimit),
        ] {
            if !word.is_empty() {
                words.push((word.to_owned(), pattern));
            }
        }
        let mut names: Vec<&str> = owner_names
            .iter()
            .map(String::as_str)
            .filter(|o| !o.is_empty())
            .collect();
        names.sort_unstable();
        names.dedup();
        // Fewer patterns, fewer candidates the vectorised search must
        // check: owners are grouped under shared keys as far as they go.
        let owner_keys = owner_keys(&names, 0);
        let mut all: Vec<&str> = std::iter::once(allows::MARKER)
            .chain(owner_keys.iter().map(|k| k.key.as_str()))
            .chain(words.iter().map(|(w, _)| w.as_str()))
            .collect();
        all.sort_unstable();
        all.dedup();
        let all = search_order(all);
        let slots = all
            .iter()
            .map(|&p| {
                if p == allows::MARKER {
                    Slot::Marker
                } else if let Some(w) = words.iter().position(|(w, _)| w == p) {
                    Slot::Word(w)
                } else {
                    Slot::Owner(owner_keys.iter().position(|k| k.key == p).unwrap_or(0))
                }
            })
            .collect();
        let shadowed = std::iter::once(allows::MARKER)
            .chain(words.iter().map(|(w, _)| w.as_str()))
            .map(|p| {
                (0..owner_keys.len())
                    .filter(|&k| {
                        let key = owner_keys[k].key.as_str();
                        key.starts_with(p) || p.starts_with(key)
                    })
                    .collect()
            })
            .collect();
        Some(Prefilter {
            all: automaton(&all)?,
            owner_keys,
            slots,
            shadowed,
            words,
            namespace_colon: config.cache_namespace.ends_with(':'),
        })
    }

    /// Whether the key `pattern` matched at `start..end` of `bytes` could
    /// be part of a key, name or config key.
    fn keeps(&self, pattern: Pattern, bytes: &[u8], start: usize, end: usize) -> bool {
        match pattern {
            Pattern::Namespace => !(self.namespace_colon && bytes.get(end) == Some(&b':')),
            Pattern::MetricPrefix => starts_name(bytes, start),
            Pattern::ScanLimit => true,
        }
    }

    /// What starts at `at`, where the search reported the pattern `slot`
    /// (one per byte; the order of the patterns, chosen for speed by
    /// [`search_order`], says which): the marker, and an owner name around
    /// its key, else the first of the words that could matter. Any
    /// patterns that start at the same byte are prefixes of one another:
    /// the marker and the words are compared here, and the owner keys that
    /// can share a byte with the reported one are known beforehand (none,
    /// for an owner key: see [`owner_keys`]).
    fn found_at(&self, bytes: &[u8], at: usize, slot: Slot) -> (bool, Found) {
        let rest = &bytes[at..];
        let marker = rest.starts_with(allows::MARKER.as_bytes());
        let owner = match slot {
            Slot::Owner(k) => self.owner_keys[k].verified(bytes, at),
            Slot::Marker => self.owner_shadowed(0, bytes, at),
            Slot::Word(w) => self.owner_shadowed(w + 1, bytes, at),
        };
        if owner {
            return (marker, Found::Owner);
        }
        let word = self
            .words
            .iter()
            .position(|(w, _)| rest.starts_with(w.as_bytes()));
        let what = match word {
            Some(w) if self.keeps(self.words[w].1, bytes, at, at + self.words[w].0.len()) => {
                Found::Word
            }
            _ => Found::Nothing,
        };
        (marker, what)
    }

    /// Whether an owner name occurs around one of the owner keys that the
    /// `i`-th of the marker and words can hide at `at`.
    fn owner_shadowed(&self, i: usize, bytes: &[u8], at: usize) -> bool {
        let rest = &bytes[at..];
        self.shadowed[i].iter().any(|&k| {
            let key = &self.owner_keys[k];
            rest.starts_with(key.key.as_bytes()) && key.verified(bytes, at)
        })
    }

    /// Every occurrence in `bytes` that could matter.
    pub fn candidates(&self, bytes: &[u8]) -> Candidates {
        let mut found = Candidates::default();
        self.search(bytes, |_, at, what| {
            match what {
                Found::Owner => found.owner = true,
                Found::Word => found.in_strings.push(at),
                Found::Nothing => {}
            }
            true
        });
        found
    }

    /// Runs the search over `bytes`, telling `sink` each place where the
    /// marker (its first argument), an owner name or a word that could
    /// matter starts, in order, until it returns `false`.
    fn search(&self, bytes: &[u8], mut sink: impl FnMut(bool, usize, Found) -> bool) {
        let mut from = 0;
        // Leftmost, resumed one byte after each match's start: the
        // vectorised skip-ahead that an overlapping search cannot use, and
        // no byte where a pattern starts is passed over.
        while let Some(hit) = self.all.find(aho_corasick::Input::new(bytes).range(from..)) {
            let at = hit.start();
            from = at + 1;
            let slot = self.slots[hit.pattern().as_usize()];
            let (marker, what) = self.found_at(bytes, at, slot);
            if !sink(marker, at, what) {
                return;
            }
        }
    }

    /// Whether the file at `rel` with `bytes` must go to its extractor
    /// (see [`Self::examine`]).
    pub fn wants(&self, rel: &str, bytes: &[u8]) -> bool {
        self.examine(rel, bytes).wanted
    }

    /// Whether the file at `rel` with `bytes` must go to its extractor
    /// (an owner name occurs, or a key candidate does: in a Rust file, one
    /// inside a string literal), and whether it holds the inline-allow
    /// marker. The same answers as [`Self::candidates`] and a search for
    /// the marker give, from one pass that stops once the first is known
    /// (the rest of the file is then searched for the marker alone).
    pub fn examine(&self, rel: &str, bytes: &[u8]) -> Verdict {
        let rust = rel.ends_with(".rs");
        let mut in_strings = Vec::new();
        let mut allow_marker = false;
        let mut wanted_at = None;
        self.search(bytes, |marker, at, what| {
            allow_marker |= marker;
            let wanted = match what {
                Found::Owner => true,
                Found::Word if !rust => true,
                Found::Word => {
                    in_strings.push(at);
                    false
                }
                Found::Nothing => false,
            };
            if wanted {
                wanted_at = Some(at);
            }
            !wanted
        });
        if let Some(at) = wanted_at {
            // Markers before `at` were found; one may start there or after.
            let allow_marker = allow_marker
                || memchr::memmem::find(&bytes[at..], allows::MARKER.as_bytes()).is_some();
            return Verdict {
                wanted: true,
                allow_marker,
            };
        }
        let wanted = !in_strings.is_empty()
            // Invalid UTF-8 is the extractor's (warning) business.
            && std::str::from_utf8(bytes)
                .map_or(true, |text| lexical::any_in_string(text, &in_strings));
        Verdict {
            wanted,
            allow_marker,
        }
    }
}

/// How often each byte occurs in source code, in 65,536ths (counted over
/// one in seven of the Rust files of `docs/bench-gate.sh`'s sparse tree;
/// other languages' code has much the same letters, blanks and
/// punctuation). Only [`search_order`]'s estimate reads it.
const BYTE_FREQUENCY: [u16; 256] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2073, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 18308, 135, 569, 150, 22, 1, 207, 120, 1022, 1022, 34, 19, 662, 222, 873, 951, 163, 108, 81,
    46, 34, 29, 29, 13, 23, 16, 987, 381, 133, 314, 248, 73, 6, 122, 62, 141, 96, 167, 91, 50, 52,
    153, 6, 36, 68, 67, 110, 130, 107, 3, 151, 222, 186, 45, 37, 40, 9, 7, 4, 227, 32, 227, 33,
    973, 230, 2239, 510, 1222, 1214, 4067, 957, 566, 720, 2124, 44, 336, 1584, 895, 2134, 2028,
    983, 56, 2377, 2134, 3127, 1107, 260, 372, 274, 400, 53, 342, 87, 342, 4, 0, 4, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// The buckets of the vectorised search (Slim Teddy) over at most
/// [`FULL_STRIDE_PATTERNS`] patterns.
const BUCKETS: usize = 8;

/// How many leading bytes the vectorised search fingerprints.
const FINGERPRINT_BYTES: usize = 3;

/// `patterns` (distinct, sorted) in the order that gives the vectorised
/// search the fewest false candidates by an estimate, when it is the
/// full-stride kind; other pattern sets are left as they are.
///
/// The search puts each pattern in one of eight buckets, by its place in
/// the list (pattern `i` in bucket `7 - i % 8`) unless a pattern before it
/// has the same low nibbles in its first three bytes, whose bucket it
/// joins. At every position it tests each bucket's fingerprint: byte `j`
/// must have a low nibble and a high nibble that some pattern of the
/// bucket has at `j`. Mixing unlike patterns in a bucket lets through the
/// products of their nibbles, and each candidate costs a check: with the
/// policy's owners in the order they came, the check was most of the
/// search's cost. So patterns are given buckets one at a time, each where
/// it adds the least estimated candidate rate (the product over the
/// fingerprint's bytes of the frequency of the bytes it lets through),
/// the most frequent fingerprints first; then the list is written so that
/// the search makes those buckets. Only the speed depends on the order:
/// at every byte where the search reports a pattern, the patterns it can
/// hide there are checked too ([`Prefilter::found_at`]).
fn search_order(patterns: Vec<&str>) -> Vec<&str> {
    let fingerprint = |p: &str| {
        let b = p.as_bytes();
        let mut f = [0u8; FINGERPRINT_BYTES];
        f[..b.len().min(FINGERPRINT_BYTES)].copy_from_slice(&b[..b.len().min(FINGERPRINT_BYTES)]);
        f
    };
    if patterns.len() > FULL_STRIDE_PATTERNS || patterns.iter().any(|p| p.len() < FINGERPRINT_BYTES)
    {
        return patterns;
    }
    // Patterns whose first bytes share their low nibbles land together.
    let mut units: Vec<Vec<&str>> = Vec::new();
    for p in &patterns {
        let low = fingerprint(p).map(|c| c & 0xF);
        match units
            .iter_mut()
            .find(|u| fingerprint(u[0]).map(|c| c & 0xF) == low)
        {
            Some(unit) => unit.push(p),
            None => units.push(vec![p]),
        }
    }
    // The estimated candidate rate of a bucket holding `members`.
    let rate = |members: &[&str]| -> f64 {
        if members.is_empty() {
            return 0.0;
        }
        (0..FINGERPRINT_BYTES)
            .map(|j| {
                let (mut low, mut high) = (0u16, 0u16);
                for m in members {
                    let c = m.as_bytes()[j];
                    low |= 1 << (c & 0xF);
                    high |= 1 << (c >> 4);
                }
                let nibbles = |set: u16| (0..16usize).filter(move |n| set & (1 << n) != 0);
                nibbles(high)
                    .flat_map(|h| nibbles(low).map(move |l| h << 4 | l))
                    .map(|c| f64::from(BYTE_FREQUENCY[c]) / 65536.0)
                    .sum::<f64>()
            })
            .product()
    };
    units.sort_by(|a, b| rate(b).total_cmp(&rate(a)).then_with(|| a.cmp(b)));
    // Unit heads take the places 0..units.len(); place `i` is bucket
    // `7 - i % 8`, so bucket `b` has room for the heads of the places
    // `7 - b`, `15 - b`, …
    let heads = units.len();
    let room = |b: usize| {
        let r = BUCKETS - 1 - b;
        heads / BUCKETS + usize::from(r < heads % BUCKETS)
    };
    // Each bucket's units, and all their patterns.
    let mut held: Vec<Vec<usize>> = vec![Vec::new(); BUCKETS];
    let mut members: Vec<Vec<&str>> = vec![Vec::new(); BUCKETS];
    for (u, unit) in units.iter().enumerate() {
        let added = |b: usize| {
            let mut with = members[b].clone();
            with.extend(unit.iter().copied());
            rate(&with) - rate(&members[b])
        };
        let best = (0..BUCKETS)
            .filter(|&b| held[b].len() < room(b))
            .min_by(|&x, &y| added(x).total_cmp(&added(y)).then(x.cmp(&y)));
        let Some(b) = best else { return patterns };
        held[b].push(u);
        members[b].extend(unit.iter().copied());
    }
    let mut order = vec![""; heads];
    let mut rest = Vec::new();
    for (b, held) in held.iter().enumerate() {
        for (k, &u) in held.iter().enumerate() {
            order[k * BUCKETS + (BUCKETS - 1 - b)] = units[u][0];
            rest.extend(units[u][1..].iter().copied());
        }
    }
    // The other members of a unit follow every head: they join its bucket
    // whatever their place.
    order.extend(rest);
    order
}

/// A leftmost-first automaton over `words`: unlike an overlapping or
/// standard search it can use the vectorised (Teddy) skip-ahead.
///
/// The DFA the crate picks for a few short words is built by following
/// failure links state by state, time quadratic in a word's length (one
/// owner of 80,000 characters took 14 s of CPU); past
/// [`LONGEST_DFA_WORD`] the contiguous NFA, built in linear time, is used.
fn automaton(words: &[&str]) -> Option<AhoCorasick> {
    let mut builder = AhoCorasick::builder();
    builder.match_kind(aho_corasick::MatchKind::LeftmostFirst);
    if words.iter().any(|w| w.len() > LONGEST_DFA_WORD) {
        builder.kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA));
    }
    builder.build(words).ok()
}

/// The longest word an automaton may be built as a DFA for (owner names,
/// the last segment of a type path, are far shorter).
const LONGEST_DFA_WORD: usize = 256;

/// Whether a name may start at `start`: not after a name byte, unless an
/// escape (`\n`, `\x20`, `\040`) may end right before it.
fn starts_name(bytes: &[u8], start: usize) -> bool {
    let Some(&before) = start.checked_sub(1).and_then(|i| bytes.get(i)) else {
        return true;
    };
    if !(before.is_ascii_alphanumeric() || before == b'_') {
        return true;
    }
    bytes[start.saturating_sub(4)..start].contains(&b'\\')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefilter(owners: &[&str]) -> Prefilter {
        let config = ExtractConfig {
            cache_namespace: "server:".into(),
            metric_prefix: "dw_".into(),
        };
        let owners: Vec<String> = owners.iter().map(|o| o.to_string()).collect();
        Prefilter::new(&config, &owners).unwrap()
    }

    #[test]
    fn paths_and_identifier_tails_are_not_candidates() {
        let p = prefilter(&[]);
        assert!(!p.candidates(b"use lsp_server::Connection;").any());
        assert!(!p.candidates(b"let kdw_x = 1;").any());
        assert_eq!(p.candidates(b"\"server:x:\"").in_strings, [1]);
        assert_eq!(p.candidates(b"\"server:{id}\"").in_strings, [1]);
        assert_eq!(p.candidates(b"\"dw_x\"").in_strings, [1]);
        assert_eq!(p.candidates(b"\"a\\ndw_x\"").in_strings, [4]);
        assert_eq!(p.candidates(b"\"a\\x20dw_x\"").in_strings, [6]);
        assert_eq!(p.candidates(b"lsp_server::server:x:").in_strings, [12]);
        assert!(p.candidates(b"x.due_scan_limit").any());
    }

    #[test]
    fn rust_candidates_count_only_inside_string_literals() {
        let p = prefilter(&["Store"]);
        assert!(!p.wants("a.rs", b"fn dw_x() {} // \"server:x:\"\n/// dw_y\n"));
        assert!(p.wants("a.rs", b"fn f() { g(\"server:x:\") }"));
        assert!(p.wants("a.rs", b"fn f() { g(r#\"dw_x\"#) }"));
        assert!(p.wants("a.rs", b"struct Store;"));
        // Strings end where the tokenizer ends them: after a literal's
        // suffix and a raw C string, after a raw identifier's `#` and a
        // raw string, after a shebang line's quote (which is no string).
        assert!(p.wants("a.rs", b"f(\"x\"r#cr#\"\\\"#); g(\"server:x:\");"));
        assert!(p.wants("a.rs", b"f(r#r#r\"\\\"); g(\"server:x:\");"));
        assert!(p.wants("a.rs", b"#!/bin/x \"\nf(\"server:x:\");"));
        // An owner whose name starts like a metric is still an owner.
        let p = prefilter(&["dw_registry"]);
        assert!(p.wants("a.rs", b"fn dw_registry() {}"));
        assert!(p.candidates(b"fn dw_registry() {}").owner);
        let p = prefilter(&["Store"]);
        // Other languages are not lexed here: their extractors are cheap.
        assert!(p.wants("a.py", b"# server:x:\n"));
        assert!(!p.wants("a.py", b"nothing here\n"));
    }

    /// The owners of this repository's policy, as `owner_names` gives them.
    const POLICY_OWNERS: &[&str] = &[
        "ActivityExecutionMetrics",
        "ActivityTaskPollRequestStore",
        "ActivityTaskPoller",
        "ConformanceEvidence",
        "ExternalPayloadSweep",
        "HistoryRetentionEnforcer",
        "IdleWorkerSweep",
        "LongPollSignalStore",
        "NamespaceAdmissionMetrics",
        "NamespaceDurableStateQuota",
        "NamespaceRequestAdmission",
        "NodeIdentity",
        "ProjectionDriftMetrics",
        "PrometheusScrape",
        "QueryTaskPollRequestStore",
        "ReadinessProbe",
        "RedisCache",
        "RuntimeExternalPayloadQuota",
        "Samples",
        "ScheduleSweep",
        "ServerPollingCache",
        "ServiceCallRetention",
        "SharedServiceBoundaryPolicy",
        "SweepLeases",
        "TaskQueueAdmission",
        "TaskQueueRuntimeMetrics",
        "TimeoutSweep",
        "UiSettings",
        "WorkerCompatibilityHeartbeatRecorder",
        "WorkerPollClaimGate",
        "WorkerPollDiagnostics",
        "WorkflowQueryTaskBroker",
        "WorkflowRunMetrics",
        "WorkflowStreamRetention",
        "WorkflowTaskFailureMetrics",
        "WorkflowTaskPollRequestStore",
        "WorkflowTaskPoller",
        "perf_metrics",
    ];

    /// Each name holds its key where the key says, every name has one key,
    /// and no key is a prefix of another unless each key is its one name.
    fn assert_keys_fit(names: &[&str], keys: &[OwnerKey]) {
        let exact = keys
            .iter()
            .all(|k| k.owners.len() == 1 && k.owners[0] == (k.key.clone(), 0));
        let mut covered: Vec<&str> = Vec::new();
        for k in keys {
            for (name, offset) in &k.owners {
                assert_eq!(
                    name.get(*offset..*offset + k.key.len()),
                    Some(k.key.as_str())
                );
                covered.push(name);
            }
            for other in keys.iter().filter(|_| !exact) {
                assert!(
                    other.key == k.key || !k.key.starts_with(other.key.as_str()),
                    "{} starts with {}",
                    k.key,
                    other.key
                );
            }
        }
        covered.sort_unstable();
        assert_eq!(covered, names);
    }

    #[test]
    fn many_owners_share_keys_within_the_full_stride_budget() {
        let keys = owner_keys(POLICY_OWNERS, 28);
        assert_keys_fit(POLICY_OWNERS, &keys);
        assert!(keys.len() <= 28, "{} keys: {keys:?}", keys.len());
        assert!(keys.iter().all(|k| k.key.len() >= MIN_SHARED_KEY));
        // Few enough: one key per name.
        let keys = owner_keys(&POLICY_OWNERS[..10], 28);
        assert_keys_fit(&POLICY_OWNERS[..10], &keys);
        assert!(keys
            .iter()
            .all(|k| k.owners[0].0 == k.key && k.owners.len() == 1));
        // Too many to group: one key per name, none merged.
        let many: Vec<String> = (0..70).map(|i| format!("Store{i}")).collect();
        let mut many: Vec<&str> = many.iter().map(String::as_str).collect();
        many.sort_unstable();
        let keys = owner_keys(&many, 28);
        assert_keys_fit(&many, &keys);
        assert_eq!(keys.len(), 70);
        assert!(keys.iter().all(|k| k.owners == [(k.key.clone(), 0)]));
        // Names that are prefixes of others, and names shorter than a
        // shared key.
        let names = ["Ab", "Abc", "Abcdef", "Abcdefgh", "x", "xy"];
        let keys = owner_keys(&names, 1);
        assert_keys_fit(&names, &keys);
        assert_eq!(keys.len(), 2, "{keys:?}");
    }

    /// The answers by brute force: each byte tried against each owner
    /// name, word and the marker, and a Rust file's candidates lexed.
    fn brute_force(owners: &[&str], rel: &str, bytes: &[u8]) -> Verdict {
        let occurs = |word: &[u8]| bytes.windows(word.len()).any(|w| w == word);
        let owner = owners.iter().any(|o| !o.is_empty() && occurs(o.as_bytes()));
        let mut in_strings = Vec::new();
        for at in 0..bytes.len() {
            let rest = &bytes[at..];
            let kept = if rest.starts_with(b"server:") {
                rest.get(7) != Some(&b':')
            } else if rest.starts_with(b"dw_") {
                starts_name(bytes, at)
            } else {
                rest.starts_with(b"_scan_limit")
            };
            if kept {
                in_strings.push(at);
            }
        }
        let wanted = owner
            || (!in_strings.is_empty()
                && (!rel.ends_with(".rs")
                    || std::str::from_utf8(bytes)
                        .map_or(true, |text| lexical::any_in_string(text, &in_strings))));
        Verdict {
            wanted,
            allow_marker: occurs(allows::MARKER.as_bytes()),
        }
    }

    /// The one-pass answer is the brute-force one on files pieced together
    /// from fragments that put owners, shared keys, keys, markers, strings
    /// and comments next to and inside each other.
    #[test]
    fn one_pass_finds_what_brute_force_finds() {
        const PIECES: &[&str] = &[
            "\"",
            "// ",
            "\n",
            "server:",
            "server::",
            "dw_",
            "kdw_",
            "\\n",
            "_scan_limit",
            "Store",
            "dw_registry",
            "Stor",
            "x",
            " ",
            "r#\"",
            "\"#",
            "'",
            "/*",
            "*/",
            "server:Store",
            "dw_Store",
            "dwlint: allow(",
            "dwlint: allo",
            "Workflow",
            "TaskPollRequestStore",
            "PollRequest",
            "Metrics",
            "Activity",
            "Sweep",
            "Retention",
            "Idle",
            "Worker",
            "perf_metrics",
            "Ab",
            "cdef",
            "Store1",
            "Store12",
            "Store6",
        ];
        let with_grouped: Vec<&str> = POLICY_OWNERS
            .iter()
            .copied()
            .chain(["dw_registry", "Store", "Ab", "Abcdef", "dwlint"])
            .collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        // Too many to group: each name is its own key, some are prefixes
        // of others, of a word or of the marker.
        let many: Vec<String> = (0..70)
            .map(|i| format!("Store{i}"))
            .chain(["dw_", "dw_registry", "dwlint", "dwlint: allow(x", "server"].map(String::from))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        for owners in [
            &[][..],
            &["Store", "dw_registry"][..],
            &with_grouped[..],
            &many[..],
        ] {
            let p = prefilter(owners);
            for _ in 0..3000 {
                let text: String = (0..next(12)).map(|_| PIECES[next(PIECES.len())]).collect();
                for rel in ["a.rs", "a.py"] {
                    let bytes = text.as_bytes();
                    let expected = brute_force(owners, rel, bytes);
                    assert_eq!(
                        p.examine(rel, bytes),
                        expected,
                        "{rel} {text:?} ({owners:?})"
                    );
                    let found = p.candidates(bytes);
                    assert_eq!(
                        found.any(),
                        brute_force(owners, "a.py", bytes).wanted,
                        "{text:?}"
                    );
                }
            }
        }
    }
}
