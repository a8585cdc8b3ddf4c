//! Cache-key literal normalization and prefix coverage.
//!
//! A source literal such as `"server:long-poll-signal:{ns}:{queue}"` is cut at
//! its first format placeholder and then back to its last `:`, giving the
//! family prefix `server:long-poll-signal:` that a policy entry declares.
//! The cut is language-agnostic so every extractor shares it: `{…}` (Rust,
//! Python), `%s`-style (printf), `$var`/`{$var}` (PHP) and `${…}` (shell).

/// A cache key recognised in a source literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheKey {
    /// `server:<family>:…`: the normalized family prefix a policy entry
    /// declares.
    Family(String),
    /// `server:{…}`, `server:%s:…`: the family itself is computed, so no
    /// prefix can declare it short of claiming the whole namespace.
    ComputedFamily,
}

/// Redis commands and flags after which, in the same literal, a key
/// follows (`redis-cli GET server:x:1`, `--scan --pattern 'server:x:*'`).
/// Matched case-insensitively; the list is documented in
/// docs/rules/undeclared-cache-prefix (`dwlint explain`).
pub const KEY_BUILDING_WORDS: &[&str] = &[
    "--pattern",
    "append",
    "decr",
    "decrby",
    "del",
    "exists",
    "expire",
    "get",
    "getdel",
    "getex",
    "getset",
    "hdel",
    "hget",
    "hgetall",
    "hincrby",
    "hset",
    "incr",
    "incrby",
    "keys",
    "llen",
    "lpush",
    "lrange",
    "match",
    "mget",
    "persist",
    "pexpire",
    "pttl",
    "rpush",
    "sadd",
    "scard",
    "set",
    "setex",
    "setnx",
    "smembers",
    "srem",
    "ttl",
    "type",
    "unlink",
    "zadd",
    "zcard",
    "zrange",
    "zrem",
];

/// A cache namespace and its substring searcher, built once per run:
/// building a searcher for every literal and every docs line (`str`'s
/// `match_indices`) cost more than the searches on a dense tree.
pub struct Namespace<'n> {
    text: &'n str,
    finder: memchr::memmem::Finder<'n>,
}

impl<'n> Namespace<'n> {
    /// The namespace `text`, e.g. `server:`.
    pub fn new(text: &'n str) -> Self {
        Namespace {
            text,
            finder: memchr::memmem::Finder::new(text),
        }
    }
}

/// The cache keys a source literal builds.
///
/// A key is recognised by shape and place, never by the namespace merely
/// occurring: it must start the literal (blanks aside: heredocs), or follow one of the
/// [`KEY_BUILDING_WORDS`] in it, and carry a family segment after the
/// namespace (`server:<family>:`). Image references
/// (`durableworkflow/server:0.2`), URLs and `host:port` pairs
/// (`http://server:8080`) and command names (`server:bootstrap`) are not
/// keys. A namespace directly followed by a placeholder is a key whose
/// family is computed.
pub fn cache_keys(value: &str, namespace: &str) -> Vec<CacheKey> {
    cache_keys_in(value, &Namespace::new(namespace))
}

/// [`cache_keys`] with the namespace's searcher built once by the caller.
pub fn cache_keys_in(value: &str, namespace: &Namespace) -> Vec<CacheKey> {
    occurrences(value, namespace)
        .filter(|&start| {
            let before = &value[..start];
            before.trim_start().is_empty() || follows_key_building_word(before)
        })
        .filter_map(|start| {
            let key = &value[start..];
            Some(match key_shape(key.as_bytes(), namespace.text.len())? {
                KeyShape::Family(len) => CacheKey::Family(key[..len].to_owned()),
                KeyShape::ComputedFamily => CacheKey::ComputedFamily,
            })
        })
        .collect()
}

/// The family prefixes named anywhere in prose (operator docs), at a word
/// boundary: `server:long-poll-signal:` in a sentence or a table.
pub fn cache_prefixes_in_text<'t>(text: &'t str, namespace: &Namespace) -> Vec<&'t str> {
    let mut out = Vec::new();
    let mut skip_to = 0;
    for start in occurrences(text, namespace) {
        if start < skip_to {
            // A namespace occurrence inside a key is part of that key.
            continue;
        }
        let key = &text[start..];
        if let Some(KeyShape::Family(len)) = key_shape(key.as_bytes(), namespace.text.len()) {
            skip_to = start + len;
            out.push(&key[..len]);
        }
    }
    out
}

/// Starts of the namespace at a word boundary: not inside a longer word
/// (`observer:`), a path or image reference (`org/server:`), a URL host
/// (`//server:`) or another key (`x:server:`). Non-overlapping, left to
/// right, as `str::match_indices` finds them.
fn occurrences<'v>(value: &'v str, namespace: &'v Namespace) -> impl Iterator<Item = usize> + 'v {
    let bytes = value.as_bytes();
    // An empty namespace names no key (and would match everywhere).
    let usable = !namespace.text.is_empty();
    let searched = if usable { bytes } else { &[][..] };
    namespace.finder.find_iter(searched).filter(move |&at| {
        usable && (at == 0 || !(is_key_byte(bytes[at - 1]) || b"/:@".contains(&bytes[at - 1])))
    })
}

/// Whether the text before a namespace occurrence ends with a key-building
/// word and blanks, with an optional opening quote in between.
fn follows_key_building_word(before: &str) -> bool {
    let trimmed = before.strip_suffix(['\'', '"']).unwrap_or(before);
    let word_end = trimmed.trim_end_matches([' ', '\t']);
    if word_end.len() == trimmed.len() {
        return false;
    }
    let word = word_end
        .rsplit(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .next()
        .unwrap_or("");
    KEY_BUILDING_WORDS
        .iter()
        .any(|w| w.eq_ignore_ascii_case(word))
}

/// The shape of a key found at a namespace occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyShape {
    /// The family prefix is the key's first `usize` bytes.
    Family(usize),
    /// A placeholder stands where the family would.
    ComputedFamily,
}

/// The key starting at `key[0]` (the namespace), if it has the shape of
/// one: a family segment ending in `:`, or a placeholder right after the
/// namespace or inside the family segment. Bytes, not chars: every byte a
/// key may hold is ASCII, so the first other byte ends it wherever a char
/// would.
fn key_shape(key: &[u8], namespace_len: usize) -> Option<KeyShape> {
    let rest = &key[namespace_len..];
    let family_len = rest.iter().take_while(|&&b| is_key_byte(b)).count();
    let after = &rest[family_len..];
    if placeholder_len(after).is_some() {
        return Some(KeyShape::ComputedFamily);
    }
    if family_len == 0 || after.first() != Some(&b':') {
        return None;
    }
    Some(KeyShape::Family(family_prefix_len(key, namespace_len)))
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// Length of the placeholder at the start of `rest`, if one starts there.
fn placeholder_len(rest: &[u8]) -> Option<usize> {
    let b = rest;
    match b.first()? {
        b'{' => Some(1),
        b'$' if b
            .get(1)
            .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, b'_' | b'{')) =>
        {
            Some(1)
        }
        b'%' if b
            .get(1)
            .is_some_and(|c| b"sdifuxXoeEgGcbp-+ 0123456789.'".contains(c)) =>
        {
            Some(1)
        }
        _ => None,
    }
}

/// How much of `key` (starting with the namespace) is its family prefix:
/// cut at the first placeholder or non-key byte after the namespace, then
/// kept through the last `:`.
fn family_prefix_len(key: &[u8], namespace_len: usize) -> usize {
    let end = (namespace_len..key.len())
        .find(|&i| {
            let b = key[i];
            placeholder_len(&key[i..]).is_some() || !(is_key_byte(b) || b == b':')
        })
        .unwrap_or(key.len());
    let last_colon = key[..end]
        .iter()
        .rposition(|&b| b == b':')
        .map_or(namespace_len, |i| i + 1);
    last_colon.max(namespace_len)
}

/// Whether a source prefix is covered by a declared prefix.
pub fn covers(declared: &str, source: &str) -> bool {
    source.starts_with(declared)
}

/// Declared prefixes, indexed so that whether any covers a source prefix
/// takes one lookup per declared prefix length: comparing every declared
/// prefix with every source prefix was quadratic on a policy with
/// thousands of entries, and looking up every leading part of the source
/// hashed each of them (a policy's prefixes come in a few lengths).
#[derive(Debug, Default)]
pub struct Declared<'a> {
    prefixes: foldhash::HashSet<&'a str>,
    /// The distinct byte lengths of `prefixes`, ascending.
    lengths: Vec<usize>,
}

impl<'a> Declared<'a> {
    /// Indexes `prefixes`.
    pub fn new(prefixes: impl IntoIterator<Item = &'a str>) -> Self {
        let prefixes: foldhash::HashSet<&'a str> = prefixes.into_iter().collect();
        let mut lengths: Vec<usize> = prefixes.iter().map(|p| p.len()).collect();
        lengths.sort_unstable();
        lengths.dedup();
        Declared { prefixes, lengths }
    }

    /// Whether some declared prefix [`covers`] `source`.
    pub fn cover(&self, source: &str) -> bool {
        self.lengths
            .iter()
            .take_while(|&&len| len <= source.len())
            .any(|&len| {
                source
                    .get(..len)
                    .is_some_and(|head| self.prefixes.contains(head))
            })
    }
}

/// Source prefixes, sorted so that whether a declared prefix covers any of
/// them is a binary search.
#[derive(Debug, Default)]
pub struct Used<'a> {
    sorted: Vec<&'a str>,
}

impl<'a> Used<'a> {
    /// Indexes `prefixes`.
    pub fn new(prefixes: impl IntoIterator<Item = &'a str>) -> Self {
        let mut sorted: Vec<&str> = prefixes.into_iter().collect();
        sorted.sort_unstable();
        Used { sorted }
    }

    /// Whether `declared` [`covers`] some source prefix.
    pub fn covered_by(&self, declared: &str) -> bool {
        let at = self.sorted.partition_point(|s| *s < declared);
        self.sorted.get(at).is_some_and(|s| covers(declared, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_coverage_agrees_with_covers() {
        let declared = ["server:a:", "server:a:b:", "server:ї:", ""];
        let sources = ["server:a:x:", "server:ї:q:", "server:b:", "server:", "x"];
        for some in [&declared[..3], &declared[..]] {
            let index = Declared::new(some.iter().copied());
            for source in sources {
                let slow = some.iter().any(|d| covers(d, source));
                assert_eq!(index.cover(source), slow, "{some:?} {source}");
            }
            let used = Used::new(sources.iter().copied());
            for d in some {
                let slow = sources.iter().any(|s| covers(d, s));
                assert_eq!(used.covered_by(d), slow, "{d}");
            }
        }
    }

    fn one(value: &str) -> String {
        match cache_keys(value, "server:").as_slice() {
            [CacheKey::Family(prefix)] => prefix.clone(),
            other => panic!("{value:?} gave {other:?}"),
        }
    }

    fn none(value: &str) {
        assert_eq!(cache_keys(value, "server:"), vec![], "{value:?}");
    }

    #[test]
    fn cuts_at_rust_placeholders_and_keeps_through_the_last_colon() {
        assert_eq!(
            one("server:long-poll-signal:{}:{}"),
            "server:long-poll-signal:"
        );
        assert_eq!(
            one("server:long-poll-signal:{ns}"),
            "server:long-poll-signal:"
        );
        assert_eq!(one("server:a:b:{0}"), "server:a:b:");
        assert_eq!(one("server:readiness:probe"), "server:readiness:");
        assert_eq!(one("server:readiness:"), "server:readiness:");
        assert_eq!(one("\n    server:heredoc:key\n"), "server:heredoc:");
    }

    #[test]
    fn cuts_at_printf_php_and_shell_placeholders() {
        assert_eq!(one("server:query-task:%s:%d"), "server:query-task:");
        assert_eq!(one("server:query-task:%08d"), "server:query-task:");
        assert_eq!(one("server:x:$id"), "server:x:");
        assert_eq!(one("server:x:{$id}"), "server:x:");
        assert_eq!(one("server:x:${ID}"), "server:x:");
    }

    #[test]
    fn a_placeholder_in_the_family_position_is_a_computed_family() {
        for value in [
            "server:{}",
            "server:%s:%s",
            "server:{$family}:x",
            "server:x{}:y",
        ] {
            assert_eq!(
                cache_keys(value, "server:"),
                vec![CacheKey::ComputedFamily],
                "{value:?}"
            );
        }
    }

    #[test]
    fn image_references_urls_ports_and_command_names_are_not_keys() {
        none("durableworkflow/server:0.2");
        none("${DW_SERVER_IMAGE:-durableworkflow/server:${DW_SERVER_TAG:-0.2}}");
        none("s#durableworkflow/server:0.2#${image}#g");
        none("http://server:8080");
        none("http://server:8080/api/health");
        none("server:8080");
        none("server:bootstrap");
        none("server:bootstrap {--force : Run bootstrap commands}");
        none("php artisan server:bootstrap --force");
        none("observer:x:");
        none("server: listening on 8080");
        none("server:");
        none("server:*");
        // Only a key that starts the literal (or follows a key-building
        // word) is one.
        none("image: server:a:b");
        none("x:server:a:");
    }

    #[test]
    fn a_key_may_follow_a_key_building_word_in_the_same_literal() {
        assert_eq!(one("redis-cli GET server:a:1"), "server:a:");
        assert_eq!(one("redis-cli --scan --pattern 'server:a:*'"), "server:a:");
        assert_eq!(one("KEYS \"server:b:*\""), "server:b:");
        assert_eq!(one("scan 0 match server:c:*"), "server:c:");
        none("redis-cli GET");
        none("forget server:a:");
    }

    #[test]
    fn prose_names_prefixes_anywhere_at_a_word_boundary() {
        let server = Namespace::new("server:");
        assert_eq!(
            cache_prefixes_in_text("keys `server:a:` and server:b:{}", &server),
            vec!["server:a:", "server:b:"]
        );
        assert_eq!(
            cache_prefixes_in_text(
                "pull durableworkflow/server:0.2, call http://server:8080, run server:bootstrap",
                &server
            ),
            Vec::<&str>::new()
        );
        assert!(cache_prefixes_in_text("the server:* namespace", &server).is_empty());
    }

    #[test]
    fn a_namespace_inside_a_key_is_part_of_that_key() {
        // Each nested occurrence used to start a key of its own running to
        // the end: output quadratic in the literal, gigabytes for one long
        // joined literal.
        assert_eq!(one("server:a:server:b:"), "server:a:server:b:");
        let long = "server:a:".repeat(20_000);
        assert_eq!(one(&long), long);
        assert_eq!(
            cache_prefixes_in_text(&long, &Namespace::new("server:")),
            vec![long.as_str()]
        );
    }

    /// `cache_keys` and `cache_prefixes_in_text` as they were written
    /// before they searched with a prebuilt searcher and cut keys by bytes:
    /// `str::match_indices` and a cut by chars.
    mod by_chars {
        use super::super::{follows_key_building_word, is_key_byte, CacheKey};

        fn placeholder(rest: &str) -> bool {
            super::super::placeholder_len(rest.as_bytes()).is_some()
        }

        fn occurrences<'v>(value: &'v str, ns: &'v str) -> impl Iterator<Item = usize> + 'v {
            let bytes = value.as_bytes();
            value
                .match_indices(ns)
                .map(|(at, _)| at)
                .filter(move |&at| {
                    !ns.is_empty()
                        && (at == 0
                            || !(is_key_byte(bytes[at - 1]) || b"/:@".contains(&bytes[at - 1])))
                })
        }

        fn key_at(key: &str, ns_len: usize) -> Option<CacheKey> {
            let rest = &key[ns_len..];
            let family_len = rest.bytes().take_while(|&b| is_key_byte(b)).count();
            let after = &rest[family_len..];
            if placeholder(after) {
                return Some(CacheKey::ComputedFamily);
            }
            if family_len == 0 || !after.starts_with(':') {
                return None;
            }
            let mut end = key.len();
            for (i, c) in key.char_indices().skip_while(|(i, _)| *i < ns_len) {
                if placeholder(&key[i..]) || !(c.is_ascii() && (is_key_byte(c as u8) || c == ':')) {
                    end = i;
                    break;
                }
            }
            let cut = &key[..end];
            let last_colon = cut.rfind(':').map_or(ns_len, |i| i + 1);
            Some(CacheKey::Family(cut[..last_colon.max(ns_len)].to_owned()))
        }

        pub fn cache_keys(value: &str, ns: &str) -> Vec<CacheKey> {
            occurrences(value, ns)
                .filter(|&start| {
                    let before = &value[..start];
                    before.trim_start().is_empty() || follows_key_building_word(before)
                })
                .filter_map(|start| key_at(&value[start..], ns.len()))
                .collect()
        }

        pub fn prefixes(text: &str, ns: &str) -> Vec<String> {
            let mut out = Vec::new();
            let mut skip_to = 0;
            for start in occurrences(text, ns) {
                if start < skip_to {
                    continue;
                }
                if let Some(CacheKey::Family(prefix)) = key_at(&text[start..], ns.len()) {
                    skip_to = start + prefix.len();
                    out.push(prefix);
                }
            }
            out
        }
    }

    #[test]
    fn byte_cut_and_prebuilt_searcher_agree_with_the_char_cut() {
        // Every string of up to five pieces over pieces that exercise the
        // namespace, separators, placeholders and non-ASCII characters.
        let pieces = [
            "server:", "ss", "a", ":", "-", ".", "{", "%s", "%", "$x", "$", "é", "ї:", " ", "get ",
            "/", "\n", "\"",
        ];
        let namespaces = ["server:", "s", "ss", "é", ""];
        let mut texts = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..4 {
            let next: Vec<String> = layer
                .iter()
                .flat_map(|t| pieces.iter().map(move |p| format!("{t}{p}")))
                .collect();
            texts.extend(next.iter().cloned());
            layer = next;
        }
        for ns_text in namespaces {
            let ns = Namespace::new(ns_text);
            for text in &texts {
                assert_eq!(
                    cache_keys_in(text, &ns),
                    by_chars::cache_keys(text, ns_text),
                    "{text:?} in {ns_text:?}"
                );
                let prefixes: Vec<String> = cache_prefixes_in_text(text, &ns)
                    .into_iter()
                    .map(str::to_owned)
                    .collect();
                assert_eq!(
                    prefixes,
                    by_chars::prefixes(text, ns_text),
                    "{text:?} in {ns_text:?}"
                );
            }
        }
    }

    #[test]
    fn coverage_is_prefix_containment() {
        assert!(covers("server:a:", "server:a:"));
        assert!(covers("server:a:", "server:a:lease:"));
        assert!(!covers("server:a:lease:", "server:a:"));
        assert!(!covers("server:ab:", "server:a:"));
    }
}
