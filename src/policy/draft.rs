//! Writing policy files: the one place that knows the TOML layout people
//! read and review.
//!
//! `dwlint init` and `dwlint policy import` both produce a policy a person
//! will edit by hand, so the text must look like the examples in
//! docs/policy.md (one `[cache_keys.<id>]` table per entry, fields in the
//! documented order, metric dimensions as an inline table) and carry review
//! notes as comments. A generic serializer would reorder fields and expand
//! the inline tables, so the layout is written here; every writer then
//! re-loads its output with `dwpolicy::load::load` to prove it is valid.

/// A policy as written: plain values, optional fields omitted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Draft {
    /// Comment lines at the top of the file (without `# `).
    pub header: Vec<String>,
    /// `[sources]` globs.
    pub sources: DraftSources,
    /// `[settings]` keys, written in the given order.
    pub settings: Vec<(String, SettingValue)>,
    /// `[cache_keys.<id>]` entries, in output order.
    pub cache_keys: Vec<DraftCacheKey>,
    /// `[scan_limits.<id>]` entries.
    pub scan_limits: Vec<DraftScanLimit>,
    /// `[metrics.<name>]` entries.
    pub metrics: Vec<DraftMetric>,
}

/// `[sources]`; empty lists are omitted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftSources {
    /// Cache-prefix sources.
    pub cache: Vec<String>,
    /// Metric sources.
    pub metrics: Vec<String>,
    /// Operator docs.
    pub docs: Vec<String>,
    /// Scrape / remote-write configs.
    pub remote_write: Vec<String>,
    /// Never read.
    pub exclude: Vec<String>,
}

/// A `[settings]` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingValue {
    /// A string, e.g. `cache_namespace`.
    Str(String),
    /// A list of strings, e.g. `per_run_labels`.
    List(Vec<String>),
}

/// A cache-key entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftCacheKey {
    /// The policy ID.
    pub id: String,
    /// Comment lines written under the table header.
    pub notes: Vec<String>,
    /// Owner.
    pub owner: Option<String>,
    /// Prefix.
    pub prefix: Option<String>,
    /// Key dimensions.
    pub dimensions: Option<Vec<String>>,
    /// Review sentences.
    pub ttl: Option<String>,
    /// Review sentence.
    pub bound: Option<String>,
    /// Review sentence.
    pub admission: Option<String>,
    /// Review sentence.
    pub eviction: Option<String>,
}

/// A scan-limit entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftScanLimit {
    /// The policy ID.
    pub id: String,
    /// Comment lines written under the table header.
    pub notes: Vec<String>,
    /// Owner.
    pub owner: Option<String>,
    /// The config key.
    pub config_key: Option<String>,
    /// The default cap.
    pub default: Option<i64>,
    /// Review sentence.
    pub bound: Option<String>,
}

/// A metric entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftMetric {
    /// The metric name.
    pub name: String,
    /// Comment lines written under the table header.
    pub notes: Vec<String>,
    /// Owner.
    pub owner: Option<String>,
    /// Surface.
    pub surface: Option<String>,
    /// Dimension name → cardinality class, in output order.
    pub dimensions: Option<Vec<(String, String)>>,
    /// Review sentence.
    pub cardinality: Option<String>,
    /// Review sentence.
    pub selection: Option<String>,
    /// Review sentence.
    pub suppression: Option<String>,
}

impl Draft {
    /// The policy file text.
    pub fn render(&self) -> String {
        let mut out = Writer::default();
        for line in &self.header {
            out.comment(line);
        }
        out.line("schema_version = 1");
        let s = &self.sources;
        let lists = [
            ("cache", &s.cache),
            ("metrics", &s.metrics),
            ("docs", &s.docs),
            ("remote_write", &s.remote_write),
            ("exclude", &s.exclude),
        ];
        if lists.iter().any(|(_, l)| !l.is_empty()) {
            out.table("sources", &[]);
            for (key, list) in lists {
                if !list.is_empty() {
                    out.line(&format!("{key} = {}", array(list)));
                }
            }
        }
        if !self.settings.is_empty() {
            out.table("settings", &[]);
            for (key, value) in &self.settings {
                let value = match value {
                    SettingValue::Str(s) => string(s),
                    SettingValue::List(l) => array(l),
                };
                out.line(&format!("{} = {value}", key_text(key)));
            }
        }
        for c in &self.cache_keys {
            out.table(&format!("cache_keys.{}", key_text(&c.id)), &c.notes);
            out.string("owner", &c.owner);
            out.string("prefix", &c.prefix);
            if let Some(dims) = &c.dimensions {
                out.line(&format!("dimensions = {}", array(dims)));
            }
            out.string("ttl", &c.ttl);
            out.string("bound", &c.bound);
            out.string("admission", &c.admission);
            out.string("eviction", &c.eviction);
        }
        for s in &self.scan_limits {
            out.table(&format!("scan_limits.{}", key_text(&s.id)), &s.notes);
            out.string("owner", &s.owner);
            out.string("config_key", &s.config_key);
            if let Some(default) = s.default {
                out.line(&format!("default = {default}"));
            }
            out.string("bound", &s.bound);
        }
        for m in &self.metrics {
            out.table(&format!("metrics.{}", key_text(&m.name)), &m.notes);
            out.string("owner", &m.owner);
            out.string("surface", &m.surface);
            if let Some(dims) = &m.dimensions {
                let pairs: Vec<String> = dims
                    .iter()
                    .map(|(k, v)| format!("{} = {}", key_text(k), string(v)))
                    .collect();
                let table = if pairs.is_empty() {
                    "{}".to_owned()
                } else {
                    format!("{{ {} }}", pairs.join(", "))
                };
                out.line(&format!("dimensions = {table}"));
            }
            out.string("cardinality", &m.cardinality);
            out.string("selection", &m.selection);
            out.string("suppression", &m.suppression);
        }
        out.text
    }
}

#[derive(Default)]
struct Writer {
    text: String,
}

impl Writer {
    fn line(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
    }

    fn comment(&mut self, line: &str) {
        // A note containing a newline must not end the comment early.
        for part in line.split('\n') {
            self.line(format!("# {part}").trim_end());
        }
    }

    fn table(&mut self, name: &str, notes: &[String]) {
        self.text.push('\n');
        self.line(&format!("[{name}]"));
        for note in notes {
            self.comment(note);
        }
    }

    fn string(&mut self, key: &str, value: &Option<String>) {
        if let Some(value) = value {
            self.line(&format!("{key} = {}", string(value)));
        }
    }
}

/// A TOML basic string.
pub fn string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| string(i)).collect();
    format!("[{}]", items.join(", "))
}

/// A key as written: bare when TOML allows it, quoted otherwise.
pub fn key_text(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_owned()
    } else {
        string(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_keys_survive_a_toml_round_trip() {
        let nasty = "a \"quoted\" \\ path\nwith\ttabs and \u{1} control";
        let draft = Draft {
            cache_keys: vec![DraftCacheKey {
                id: "odd id".into(),
                owner: Some(nasty.into()),
                dimensions: Some(vec![]),
                ..DraftCacheKey::default()
            }],
            metrics: vec![DraftMetric {
                name: "dw_x".into(),
                dimensions: Some(vec![("a.b".into(), "finite_x".into())]),
                ..DraftMetric::default()
            }],
            ..Draft::default()
        };
        let policy = dwpolicy::load::load(&draft.render()).unwrap();
        assert_eq!(policy.cache_keys[0].id.value, "odd id");
        assert_eq!(policy.cache_keys[0].owner.as_ref().unwrap().value, nasty);
        assert_eq!(policy.metrics[0].dimension_list()[0].name.value, "a.b");
    }

    #[test]
    fn multi_line_notes_stay_comments() {
        let draft = Draft {
            header: vec!["one\ntwo".into()],
            ..Draft::default()
        };
        assert_eq!(draft.render(), "# one\n# two\nschema_version = 1\n");
    }
}
