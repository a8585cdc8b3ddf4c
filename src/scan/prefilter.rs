//! Which files are worth parsing, decided from their bytes.
//!
//! Almost every file in a large tree holds nothing the gate looks for, and
//! parsing is what costs. One Aho-Corasick pass over a file's bytes looks
//! for the policy's owner names and every occurrence of the cache
//! namespace, the metric prefix and the scan-limit suffix, and stops as
//! soon as the answer is known (an owner name, or in a file other than
//! Rust a key that could matter). On a sparse tree, where most files hold
//! none of them, this one pass replaced two (one for the keys, one for the
//! owners; the owners' automaton alone cost as much as both together,
//! since past 32 words the vectorised search halves its stride anyway). Of
//! the key hits only those that could matter are kept:
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

/// What one pattern stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    Namespace,
    MetricPrefix,
    ScanLimit,
}

/// The compiled byte prefilter for one policy.
#[derive(Debug, Clone)]
pub struct Prefilter {
    /// The namespace, the metric prefix and the scan-limit suffix.
    keys: AhoCorasick,
    patterns: Vec<Pattern>,
    /// The owners' names, when the policy has any.
    owners: Option<AhoCorasick>,
    /// The owners' names first, then the words of `keys`: what [`Self::wants`]
    /// searches in one pass (an owner starting where a key does wins).
    all: AhoCorasick,
    /// How many of `all`'s patterns are owner names.
    owner_count: usize,
    /// The namespace ends in `:`, so a following `:` leaves its family empty.
    namespace_colon: bool,
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

impl Prefilter {
    /// The prefilter for `config` and the last segments of the policy's
    /// owners; `None` when there is nothing to build it from (then every
    /// file is read by its extractor).
    pub fn new(config: &ExtractConfig, owner_names: &[String]) -> Option<Prefilter> {
        let mut words: Vec<&str> = Vec::new();
        let mut patterns = Vec::new();
        for (word, pattern) in [
            (config.cache_namespace.as_str(), Pattern::Namespace),
            (config.metric_prefix.as_str(), Pattern::MetricPrefix),
            (SCAN_LIMIT_SUFFIX, Pattern::ScanLimit),
        ] {
            if !word.is_empty() {
                words.push(word);
                patterns.push(pattern);
            }
        }
        let owner_names: Vec<&str> = owner_names
            .iter()
            .map(String::as_str)
            .filter(|o| !o.is_empty())
            .collect();
        let owners = match owner_names.is_empty() {
            true => None,
            false => Some(automaton(&owner_names)?),
        };
        let all: Vec<&str> = owner_names.iter().chain(&words).copied().collect();
        Some(Prefilter {
            keys: automaton(&words)?,
            patterns,
            owners,
            all: automaton(&all)?,
            owner_count: owner_names.len(),
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

    /// Every occurrence in `bytes` that could matter.
    pub fn candidates(&self, bytes: &[u8]) -> Candidates {
        Candidates {
            in_strings: self.key_candidates(bytes),
            owner: self.has_owner(bytes),
        }
    }

    /// Whether an owner name occurs in `bytes`.
    fn has_owner(&self, bytes: &[u8]) -> bool {
        self.owners.as_ref().is_some_and(|o| o.is_match(bytes))
    }

    /// The offsets of the namespace, prefix and suffix occurrences that
    /// could be part of a key, name or config key.
    fn key_candidates(&self, bytes: &[u8]) -> Vec<usize> {
        let mut found = Vec::new();
        let mut from = 0;
        // A leftmost search resumed one byte after each match's start: the
        // vectorised skip-ahead that an overlapping search cannot use, and
        // no match hidden inside another is missed.
        while let Some(hit) = self
            .keys
            .find(aho_corasick::Input::new(bytes).range(from..))
        {
            let (start, end) = (hit.start(), hit.end());
            from = start + 1;
            if self.keeps(self.patterns[hit.pattern().as_usize()], bytes, start, end) {
                found.push(start);
            }
        }
        found
    }

    /// Whether the file at `rel` with `bytes` must go to its extractor:
    /// an owner name occurs, or a key candidate does (in a Rust file, one
    /// inside a string literal). The same answer as [`Self::candidates`]
    /// gives, from one pass that stops once it is known.
    pub fn wants(&self, rel: &str, bytes: &[u8]) -> bool {
        let rust = rel.ends_with(".rs");
        let mut in_strings = Vec::new();
        let mut from = 0;
        // Leftmost-first, resumed one byte after each match's start (see
        // `key_candidates`); an owner listed first wins where a key starts
        // at the same byte, and makes the file wanted whatever else it
        // holds (searching for one costs less than lexing the file to see
        // whether a candidate sits in a string).
        while let Some(hit) = self.all.find(aho_corasick::Input::new(bytes).range(from..)) {
            let Some(key) = hit.pattern().as_usize().checked_sub(self.owner_count) else {
                return true;
            };
            let (start, end) = (hit.start(), hit.end());
            from = start + 1;
            if self.keeps(self.patterns[key], bytes, start, end) {
                if !rust {
                    return true;
                }
                in_strings.push(start);
            }
        }
        !in_strings.is_empty()
            // Invalid UTF-8 is the extractor's (warning) business.
            && std::str::from_utf8(bytes)
                .map_or(true, |text| lexical::any_in_string(text, &in_strings))
    }
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
        // An owner whose name starts like a metric is still an owner.
        let p = prefilter(&["dw_registry"]);
        assert!(p.wants("a.rs", b"fn dw_registry() {}"));
        assert!(p.candidates(b"fn dw_registry() {}").owner);
        let p = prefilter(&["Store"]);
        // Other languages are not lexed here: their extractors are cheap.
        assert!(p.wants("a.py", b"# server:x:\n"));
        assert!(!p.wants("a.py", b"nothing here\n"));
    }

    /// The one-pass answer is the two-pass one (`candidates`, then a lex
    /// of a Rust file's candidates) on files pieced together from
    /// fragments that put owners, keys, strings and comments next to and
    /// inside each other.
    #[test]
    fn one_pass_wants_what_the_candidates_want() {
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
        ];
        let two_pass = |p: &Prefilter, rel: &str, bytes: &[u8]| {
            let found = p.candidates(bytes);
            found.owner
                || (!found.in_strings.is_empty()
                    && (!rel.ends_with(".rs")
                        || std::str::from_utf8(bytes)
                            .map_or(true, |text| lexical::any_in_string(text, &found.in_strings))))
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for owners in [&[][..], &["Store", "dw_registry"][..]] {
            let p = prefilter(owners);
            for _ in 0..3000 {
                let text: String = (0..next(12)).map(|_| PIECES[next(PIECES.len())]).collect();
                for rel in ["a.rs", "a.py"] {
                    assert_eq!(
                        p.wants(rel, text.as_bytes()),
                        two_pass(&p, rel, text.as_bytes()),
                        "{rel} {text:?} (owners {owners:?})"
                    );
                }
            }
        }
    }
}
