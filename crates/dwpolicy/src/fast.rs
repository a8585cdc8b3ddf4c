//! A fast path for loading well-formed policies.
//!
//! A large policy (thousands of `[cache_keys.<id>]` and `[metrics.<name>]`
//! tables, a megabyte of TOML) took a third of a whole `dwlint check`:
//! the `toml` crate lexes it into a token vector, then an event vector,
//! then a tree of sorted maps, and the loader walks that tree. Policies use
//! a small, regular part of TOML, so this module reads that part directly
//! into the [`Policy`] model in one pass over the bytes.
//!
//! It is only a shortcut: it returns `None` as soon as it meets anything
//! outside that part of TOML (multi-line or escaped-unicode strings, dotted
//! keys, arrays of tables, floats, a key it does not know, a duplicate, a
//! wrong type, any value the loader would refuse), and the full loader
//! (`load::load`, which tries this module first) then parses the text
//! with `toml` and reports every problem with its span. When it returns a
//! policy, that policy is equal to the one the full loader builds, spans
//! included; the loader's tests and the `policy` fuzz target hold it to
//! that. The key lists both readers check come from [`crate::keys`].

use crate::keys::{SETTING_KEYS, SEVERITY_LEVELS, SOURCE_KEYS};
use crate::model::*;
use crate::span::{Span, Spanned};

use std::borrow::Cow;

/// The policy in `text`, or `None` when the full loader must read it.
pub(crate) fn load(text: &str) -> Option<Policy> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    reader.document()
}

/// A key as written and decoded, with its span (borrowed from the text
/// unless it had escapes: most keys are field names never kept).
struct Key<'t> {
    name: Cow<'t, str>,
    span: Span,
}

/// The table that key/value lines currently belong to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Current {
    Root,
    Sources,
    Settings,
    Rules,
    CacheKey(usize),
    ScanLimit(usize),
    Metric(usize),
}

/// Which singleton tables have been opened, and which keys of the
/// current table have been set.
#[derive(Default)]
struct Seen {
    sources: bool,
    settings: bool,
    rules: bool,
    schema_version: bool,
    /// Bit `i`: the `i`th key of the current root, `[sources]` or
    /// `[settings]` table's key list is set (an entry's fields are
    /// `Option`s and record that themselves).
    fields: u32,
}

/// The bytes that end a run of plain characters in a basic string: the
/// closing quote, a backslash, and the control characters TOML forbids
/// there (tab is allowed). A table, because a large policy's tens of
/// thousands of strings are scanned byte by byte.
static ENDS_BASIC_RUN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = matches!(b as u8, b'"' | b'\\' | 0..=0x08 | 0x0a..=0x1f | 0x7f);
        b += 1;
    }
    table
};

/// Whether no two of `names` are equal: one hash-set insert each (sorting a
/// large policy's thousands of IDs compared each with a dozen others).
fn distinct<'a>(mut names: impl ExactSizeIterator<Item = &'a str>) -> bool {
    let mut seen = foldhash::HashSet::with_capacity_and_hasher(names.len(), Default::default());
    names.all(|name| seen.insert(name))
}

/// Sets an entry's field; `None` when the key was already given.
fn fill<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// The bytes of a bare key: ASCII letters and digits, `_` and `-`.
static IN_BARE_KEY: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        table[b] = byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-';
        b += 1;
    }
    table
};

struct Reader<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
}

impl<'t> Reader<'t> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
    }

    /// A comment (if any), then the end of the line or of the text.
    fn line_end(&mut self) -> Option<()> {
        self.spaces();
        if self.peek() == Some(b'#') {
            self.comment()?;
        }
        match self.peek() {
            None => Some(()),
            Some(b'\n') => {
                self.at += 1;
                Some(())
            }
            Some(b'\r') if self.bytes.get(self.at + 1) == Some(&b'\n') => {
                self.at += 2;
                Some(())
            }
            Some(_) => None,
        }
    }

    /// `# …` up to (not including) the line break; control characters
    /// other than tab are left to the full parser.
    fn comment(&mut self) -> Option<()> {
        self.at += 1;
        while let Some(b) = self.peek() {
            match b {
                b'\n' | b'\r' => break,
                b'\t' => {}
                0..=0x1f | 0x7f => return None,
                _ => {}
            }
            self.at += 1;
        }
        Some(())
    }

    /// Blank lines, comment lines and the spaces before the next item.
    fn skip_blank(&mut self) -> Option<()> {
        loop {
            self.spaces();
            match self.peek() {
                Some(b'#' | b'\n' | b'\r') => self.line_end()?,
                _ => return Some(()),
            }
        }
    }

    /// Spaces, line breaks and comments inside an array.
    fn skip_array_blank(&mut self) -> Option<()> {
        loop {
            self.spaces();
            match self.peek() {
                Some(b'#') => self.comment()?,
                Some(b'\n') => self.at += 1,
                Some(b'\r') if self.bytes.get(self.at + 1) == Some(&b'\n') => self.at += 2,
                _ => return Some(()),
            }
        }
    }

    fn key(&mut self) -> Option<Key<'t>> {
        let start = self.at;
        let name = match self.peek()? {
            b'"' => self.basic_string()?,
            b'\'' => self.literal_string()?,
            _ => {
                let rest = &self.bytes[start..];
                self.at += rest
                    .iter()
                    .position(|b| !IN_BARE_KEY[usize::from(*b)])
                    .unwrap_or(rest.len());
                if self.at == start {
                    return None;
                }
                Cow::Borrowed(&self.text[start..self.at])
            }
        };
        Some(Key {
            name,
            span: Span::new(start..self.at),
        })
    }

    /// `"…"` with the simple escapes; `None` for anything else.
    fn basic_string(&mut self) -> Option<Cow<'t, str>> {
        self.at += 1;
        if self.peek() == Some(b'"') && self.bytes.get(self.at + 1) == Some(&b'"') {
            return None; // multi-line
        }
        let special = |b: &u8| ENDS_BASIC_RUN[usize::from(*b)];
        let start = self.at;
        let run = self.bytes[start..].iter().position(special)?;
        self.at += run;
        if self.peek()? == b'"' {
            self.at += 1;
            return Some(Cow::Borrowed(&self.text[start..start + run]));
        }
        let mut out = String::from(&self.text[start..self.at]);
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {
                    let escaped = match self.bytes.get(self.at + 1)? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'n' => '\n',
                        b't' => '\t',
                        b'r' => '\r',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        _ => return None,
                    };
                    out.push(escaped);
                    self.at += 2;
                }
                _ => return None,
            }
            let run = self.bytes[self.at..].iter().position(special)?;
            out.push_str(&self.text[self.at..self.at + run]);
            self.at += run;
        }
    }

    /// `'…'`; `None` for a multi-line literal string.
    fn literal_string(&mut self) -> Option<Cow<'t, str>> {
        self.at += 1;
        if self.peek() == Some(b'\'') && self.bytes.get(self.at + 1) == Some(&b'\'') {
            return None;
        }
        let start = self.at;
        let run = self.bytes[start..]
            .iter()
            .position(|b| matches!(b, b'\'' | 0..=0x08 | 0x0a..=0x1f | 0x7f))?;
        self.at += run;
        if self.peek()? != b'\'' {
            return None;
        }
        self.at += 1;
        Some(Cow::Borrowed(&self.text[start..start + run]))
    }

    fn string(&mut self) -> Option<Spanned<String>> {
        let start = self.at;
        let value = match self.peek()? {
            b'"' => self.basic_string()?,
            b'\'' => self.literal_string()?,
            _ => return None,
        };
        Some(Spanned::new(value.into_owned(), Span::new(start..self.at)))
    }

    /// A decimal integer without sign, underscores or leading zeros.
    fn integer(&mut self) -> Option<Spanned<i64>> {
        let start = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        let digits = &self.text[start..self.at];
        if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        // `1.5`, `1e3`, `1_000` and dates are the full parser's.
        if self
            .peek()
            .is_some_and(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'#'))
        {
            return None;
        }
        let value = digits.parse().ok()?;
        Some(Spanned::new(value, Span::new(start..self.at)))
    }

    /// `[ "a", 'b', ]`, across lines, with comments.
    fn strings(&mut self) -> Option<Spanned<Vec<Spanned<String>>>> {
        let start = self.at;
        if self.peek()? != b'[' {
            return None;
        }
        self.at += 1;
        let mut items = Vec::new();
        loop {
            self.skip_array_blank()?;
            if self.peek()? == b']' {
                break;
            }
            items.push(self.string()?);
            self.skip_array_blank()?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => break,
                _ => return None,
            }
        }
        self.at += 1;
        Some(Spanned::new(items, Span::new(start..self.at)))
    }

    /// `{ name = "class", … }` on one line, no trailing comma.
    fn dimensions(&mut self) -> Option<Spanned<Vec<Dimension>>> {
        let start = self.at;
        if self.peek()? != b'{' {
            return None;
        }
        self.at += 1;
        let mut out: Vec<Dimension> = Vec::new();
        self.spaces();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Spanned::new(out, Span::new(start..self.at)));
        }
        loop {
            self.spaces();
            let key = self.key()?;
            self.spaces();
            if self.peek()? != b'=' {
                return None;
            }
            self.at += 1;
            self.spaces();
            let class = self.string()?;
            // (A few dimensions per metric: a linear look for duplicates.)
            if out.len() >= 32 || out.iter().any(|d| d.name.value == key.name) {
                return None;
            }
            out.push(Dimension {
                name: Spanned::new(key.name.into_owned(), key.span),
                class,
            });
            self.spaces();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => break,
                _ => return None,
            }
        }
        self.at += 1;
        // The full loader lists dimensions in the order of their keys,
        // which is the order written.
        Some(Spanned::new(out, Span::new(start..self.at)))
    }

    /// `[a]` or `[a.b]` (the opening bracket already seen); `None` for an
    /// array of tables or a deeper path.
    fn header(&mut self) -> Option<(Key<'t>, Option<Key<'t>>)> {
        self.at += 1;
        if self.peek()? == b'[' {
            return None;
        }
        self.spaces();
        let first = self.key()?;
        self.spaces();
        let second = if self.peek()? == b'.' {
            self.at += 1;
            self.spaces();
            let key = self.key()?;
            self.spaces();
            Some(key)
        } else {
            None
        };
        if self.peek()? != b']' {
            return None;
        }
        self.at += 1;
        self.line_end()?;
        Some((first, second))
    }

    fn document(&mut self) -> Option<Policy> {
        if self.text.starts_with('\u{feff}') {
            return None;
        }
        let mut policy = Policy {
            schema_version: SCHEMA_VERSION,
            sources: Sources::default(),
            settings: Settings::default(),
            cache_keys: Vec::new(),
            scan_limits: Vec::new(),
            metrics: Vec::new(),
            rules: Vec::new(),
        };
        let mut seen = Seen::default();
        let mut current = Current::Root;
        loop {
            self.skip_blank()?;
            let Some(b) = self.peek() else { break };
            if b == b'[' {
                let (first, second) = self.header()?;
                seen.fields = 0;
                current = self.open(&mut policy, &mut seen, first, second)?;
                continue;
            }
            let key = self.key()?;
            self.spaces();
            if self.peek()? != b'=' {
                return None;
            }
            self.at += 1;
            self.spaces();
            self.value(&mut policy, &mut seen, current, key)?;
            self.line_end()?;
        }
        let fine = seen.schema_version
            && distinct(policy.cache_keys.iter().map(|c| c.id.as_str()))
            && distinct(policy.scan_limits.iter().map(|c| c.id.as_str()))
            && distinct(policy.metrics.iter().map(|c| c.name.as_str()))
            && distinct(policy.rules.iter().map(|(code, _)| code.as_str()));
        fine.then_some(policy)
    }

    /// Opens the table a header names; `None` for one defined twice or not
    /// in the schema.
    fn open(
        &mut self,
        policy: &mut Policy,
        seen: &mut Seen,
        first: Key<'t>,
        second: Option<Key<'t>>,
    ) -> Option<Current> {
        let once = |flag: &mut bool| (!std::mem::replace(flag, true)).then_some(());
        match (&*first.name, second) {
            ("sources", None) => once(&mut seen.sources).map(|_| Current::Sources),
            ("settings", None) => once(&mut seen.settings).map(|_| Current::Settings),
            ("rules", None) => once(&mut seen.rules).map(|_| Current::Rules),
            ("cache_keys", Some(id)) => {
                policy.cache_keys.push(CacheKeyPolicy {
                    id: Spanned::new(id.name.into_owned(), id.span),
                    owner: None,
                    prefix: None,
                    dimensions: None,
                    ttl: None,
                    bound: None,
                    admission: None,
                    eviction: None,
                });
                Some(Current::CacheKey(policy.cache_keys.len() - 1))
            }
            ("scan_limits", Some(id)) => {
                policy.scan_limits.push(ScanLimitPolicy {
                    id: Spanned::new(id.name.into_owned(), id.span),
                    owner: None,
                    config_key: None,
                    default: None,
                    bound: None,
                });
                Some(Current::ScanLimit(policy.scan_limits.len() - 1))
            }
            ("metrics", Some(name)) => {
                policy.metrics.push(MetricPolicy {
                    name: Spanned::new(name.name.into_owned(), name.span),
                    owner: None,
                    surface: None,
                    dimensions: None,
                    cardinality: None,
                    selection: None,
                    suppression: None,
                });
                Some(Current::Metric(policy.metrics.len() - 1))
            }
            _ => None,
        }
    }

    /// Reads the value of `key` into the table it belongs to.
    fn value(
        &mut self,
        policy: &mut Policy,
        seen: &mut Seen,
        current: Current,
        key: Key<'t>,
    ) -> Option<()> {
        let name = &*key.name;
        // An unknown key or a duplicate is the full loader's to report. An
        // entry's fields are all optional, so a field already `Some` is a
        // duplicate (see `fill`), and the `match` on the name below is the
        // only look-up: matching against the key lists as well compared
        // each of a large policy's 33,000 keys with several others.
        let keys: &[&str] = match current {
            Current::Root => &["schema_version"],
            Current::Sources => SOURCE_KEYS,
            Current::Settings => SETTING_KEYS,
            Current::Rules | Current::CacheKey(_) | Current::ScanLimit(_) | Current::Metric(_) => {
                &[]
            }
        };
        if !keys.is_empty() {
            let bit = 1 << keys.iter().position(|k| *k == name)?;
            if seen.fields & bit != 0 {
                return None;
            }
            seen.fields |= bit;
        }
        match current {
            Current::Root => {
                if name != "schema_version" {
                    return None;
                }
                let version = self.integer()?;
                if version.value != SCHEMA_VERSION {
                    return None;
                }
                seen.schema_version = true;
            }
            Current::Sources => {
                let slot = match name {
                    "cache" => &mut policy.sources.cache,
                    "metrics" => &mut policy.sources.metrics,
                    "docs" => &mut policy.sources.docs,
                    "remote_write" => &mut policy.sources.remote_write,
                    "exclude" => &mut policy.sources.exclude,
                    _ => return None,
                };
                *slot = self.strings()?.value;
            }
            Current::Settings => {
                let settings = &mut policy.settings;
                match name {
                    "cache_namespace" | "metric_prefix" => {
                        let value = self.string()?.value;
                        if value.is_empty() {
                            return None;
                        }
                        if name == "cache_namespace" {
                            settings.cache_namespace = value;
                        } else {
                            settings.metric_prefix = value;
                        }
                    }
                    "user_controlled_dimensions" | "per_run_labels" => {
                        let list = self.strings()?.value.into_iter().map(|s| s.value).collect();
                        if name == "per_run_labels" {
                            settings.per_run_labels = list;
                        } else {
                            settings.user_controlled_dimensions = list;
                        }
                    }
                    _ => return None,
                }
            }
            Current::Rules => {
                let level = self.string()?;
                if !SEVERITY_LEVELS.contains(&level.value.as_str()) {
                    return None;
                }
                let code = Spanned::new(key.name.into_owned(), key.span);
                policy.rules.push((code, level));
            }
            Current::CacheKey(i) => {
                let entry = &mut policy.cache_keys[i];
                match name {
                    "owner" => fill(&mut entry.owner, self.string()?)?,
                    "prefix" => fill(&mut entry.prefix, self.string()?)?,
                    "dimensions" => fill(&mut entry.dimensions, self.strings()?)?,
                    "ttl" => fill(&mut entry.ttl, self.string()?)?,
                    "bound" => fill(&mut entry.bound, self.string()?)?,
                    "admission" => fill(&mut entry.admission, self.string()?)?,
                    "eviction" => fill(&mut entry.eviction, self.string()?)?,
                    _ => return None,
                }
            }
            Current::ScanLimit(i) => {
                let entry = &mut policy.scan_limits[i];
                match name {
                    "owner" => fill(&mut entry.owner, self.string()?)?,
                    "config_key" => fill(&mut entry.config_key, self.string()?)?,
                    "default" => {
                        let default = self.integer()?;
                        if default.value < 1 {
                            return None;
                        }
                        fill(&mut entry.default, default)?;
                    }
                    "bound" => fill(&mut entry.bound, self.string()?)?,
                    _ => return None,
                }
            }
            Current::Metric(i) => {
                let entry = &mut policy.metrics[i];
                match name {
                    "owner" => fill(&mut entry.owner, self.string()?)?,
                    "surface" => fill(&mut entry.surface, self.string()?)?,
                    "dimensions" => fill(&mut entry.dimensions, self.dimensions()?)?,
                    "cardinality" => fill(&mut entry.cardinality, self.string()?)?,
                    "selection" => fill(&mut entry.selection, self.string()?)?,
                    "suppression" => fill(&mut entry.suppression, self.string()?)?,
                    _ => return None,
                }
            }
        }
        Some(())
    }
}
