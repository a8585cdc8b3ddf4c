//! Cache-key literal normalization and prefix coverage.
//!
//! A source literal such as `"server:long-poll-signal:{ns}:{queue}"` is cut at
//! its first format placeholder and then back to its last `:`, giving the
//! family prefix `server:long-poll-signal:` that a policy entry declares.
//! The cut is language-agnostic so every extractor shares it: `{…}` (Rust,
//! Python), `%s`-style (printf), `$var`/`{$var}` (PHP) and `${…}` (shell).

/// Every cache prefix a literal value builds, normalized.
///
/// A namespace occurrence counts only at a word boundary and when a key
/// character or a placeholder follows it, so prose like `"observer: ok"` or
/// `"server: listening"` is not mistaken for a key.
pub fn cache_prefixes(value: &str, namespace: &str) -> Vec<String> {
    if namespace.is_empty() {
        return Vec::new();
    }
    let bytes = value.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = value[from..].find(namespace) {
        let start = from + found;
        from = start + namespace.len();
        let boundary = start == 0 || !is_key_byte(bytes[start - 1]);
        let next = bytes.get(from).copied();
        let continues =
            next.is_some_and(|b| is_key_byte(b) || is_placeholder_start(&value[from..]));
        if boundary && continues {
            let (prefix, key_len) = normalize_from(&value[start..], namespace.len());
            out.push(prefix);
            // A namespace occurrence inside this key is part of it.
            from = start + key_len;
        }
    }
    out
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

fn is_placeholder_start(rest: &str) -> bool {
    placeholder_len(rest).is_some()
}

/// Length of the placeholder at the start of `rest`, if one starts there.
fn placeholder_len(rest: &str) -> Option<usize> {
    let b = rest.as_bytes();
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

/// Cuts `key` (starting with the namespace) at its first placeholder after
/// the namespace and keeps everything through the last `:`; also the length
/// of the key before the cut.
fn normalize_from(key: &str, namespace_len: usize) -> (String, usize) {
    let mut end = key.len();
    for (i, c) in key.char_indices().skip_while(|(i, _)| *i < namespace_len) {
        if placeholder_len(&key[i..]).is_some()
            || !(c.is_ascii() && (is_key_byte(c as u8) || c == ':'))
        {
            end = i;
            break;
        }
    }
    let cut = &key[..end];
    let last_colon = cut.rfind(':').map_or(namespace_len, |i| i + 1);
    (cut[..last_colon.max(namespace_len)].to_owned(), end)
}

/// Whether a source prefix is covered by a declared prefix.
pub fn covers(declared: &str, source: &str) -> bool {
    source.starts_with(declared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(value: &str) -> String {
        let all = cache_prefixes(value, "server:");
        assert_eq!(all.len(), 1, "{value:?} gave {all:?}");
        all[0].clone()
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
        assert_eq!(one("server:x{}:y"), "server:");
    }

    #[test]
    fn cuts_at_printf_php_and_shell_placeholders() {
        assert_eq!(one("server:query-task:%s:%d"), "server:query-task:");
        assert_eq!(one("server:query-task:%08d"), "server:query-task:");
        assert_eq!(one("server:x:$id"), "server:x:");
        assert_eq!(one("server:x:{$id}"), "server:x:");
        assert_eq!(one("server:x:${ID}"), "server:x:");
        assert_eq!(one("server:{}"), "server:");
    }

    #[test]
    fn ignores_prose_and_words_that_merely_contain_the_namespace() {
        assert!(cache_prefixes("observer:x:", "server:").is_empty());
        assert!(cache_prefixes("server: listening on 8080", "server:").is_empty());
        assert!(cache_prefixes("server:", "server:").is_empty());
        assert_eq!(
            cache_prefixes("keys server:a: and server:b:{}", "server:"),
            vec!["server:a:", "server:b:"]
        );
        assert_eq!(one("key=server:a:b c:d"), "server:a:");
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
            cache_prefixes("server:x{}:server:y:", "server:"),
            vec!["server:", "server:y:"]
        );
    }

    #[test]
    fn coverage_is_prefix_containment() {
        assert!(covers("server:a:", "server:a:"));
        assert!(covers("server:a:", "server:a:lease:"));
        assert!(!covers("server:a:lease:", "server:a:"));
        assert!(!covers("server:ab:", "server:a:"));
    }
}
