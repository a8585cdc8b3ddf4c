//! Loading a policy file in two phases.
//!
//! Phase one parses TOML into a tree that keeps the byte span of every key
//! and value. Phase two walks that tree into the typed [`Policy`], collecting
//! *every* structural problem (wrong type, unknown key, bad schema version)
//! instead of stopping at the first, the way cargo-deny reports its config.
//! Semantic review problems are not load errors; see [`crate::checks`].

use std::fmt;

use toml::de::{DeTable, DeValue};
use toml::Spanned as TomlSpanned;

use crate::checks::{self, PolicyFinding};
use crate::keys::SEVERITY_LEVELS;
pub use crate::keys::{CACHE_KEYS, METRIC_KEYS, SCAN_KEYS, SETTING_KEYS, SOURCE_KEYS, TOP_KEYS};
use crate::model::*;
use crate::span::{Span, Spanned};

/// One structural problem in a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// What is wrong.
    pub message: String,
    /// Where, when the problem has a location.
    pub span: Option<Span>,
    /// What to do about it.
    pub help: Option<String>,
}

/// Every structural problem found while loading one policy file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_load_errors(.errors, .text.as_deref()))]
pub struct LoadErrors {
    /// The problems, in file order.
    pub errors: Vec<LoadError>,
    text: Option<String>,
}

fn render_load_errors(errors: &[LoadError], text: Option<&str>) -> String {
    let mut out = format!("invalid policy ({} problem(s))", errors.len());
    for error in errors {
        out.push_str("\n  ");
        if let (Some(span), Some(text)) = (error.span, text) {
            let (line, column) = Span::line_col(text, span.start);
            out.push_str(&format!("{line}:{column}: "));
        }
        out.push_str(&error.message);
        if let Some(help) = &error.help {
            out.push_str(&format!(" ({help})"));
        }
    }
    out
}

/// Why [`Policy::from_toml_str`] refused a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file is not a well-formed policy.
    #[error(transparent)]
    Load(#[from] LoadErrors),
    /// The file is well-formed but fails review checks.
    #[error("policy fails review: {}", render_findings(.0, .1))]
    Review(Vec<PolicyFinding>, String),
}

fn render_findings(findings: &[PolicyFinding], text: &str) -> String {
    findings
        .iter()
        .map(|f| {
            let (line, column) = Span::line_col(text, f.span.start);
            format!("{line}:{column}: [{}] {}", f.code.as_str(), f.message)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl Policy {
    /// Parses, validates and review-checks a policy held in memory.
    ///
    /// This is the engine's entry point: it accepts a policy only when the
    /// gate would report no policy finding for it.
    pub fn from_toml_str(text: &str) -> Result<Policy, PolicyError> {
        let policy = load(text)?;
        let findings = checks::all(&policy);
        if findings.is_empty() {
            Ok(policy)
        } else {
            Err(PolicyError::Review(findings, text.to_owned()))
        }
    }
}

/// Parses and structurally validates a policy, collecting every problem.
///
/// A well-formed policy written in the plain TOML that policies use is read
/// by a fast path ([`crate::fast`]); anything else, and every policy with
/// a problem, by the `toml` parser, which keeps the span of every key and
/// value for the error report.
pub fn load(text: &str) -> Result<Policy, LoadErrors> {
    match crate::fast::load(text) {
        Some(policy) => Ok(policy),
        None => load_with_toml(text),
    }
}

/// Whether the fast path agrees with the `toml` parser on `text`: it either
/// leaves the text to the parser, or builds the same policy the parser's
/// path accepts. For the differential tests and the `policy` fuzz target.
#[doc(hidden)]
pub fn fast_path_agrees(text: &str) -> bool {
    match crate::fast::load(text) {
        None => true,
        Some(fast) => load_with_toml(text).is_ok_and(|full| full == fast),
    }
}

/// Whether the fast path reads `text` itself (for tests that must know it
/// is exercised).
#[doc(hidden)]
pub fn fast_path_reads(text: &str) -> bool {
    crate::fast::load(text).is_some()
}

/// [`load`] through the `toml` parser alone.
fn load_with_toml(text: &str) -> Result<Policy, LoadErrors> {
    let fail = |errors| LoadErrors {
        errors,
        text: Some(text.to_owned()),
    };
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(error) => {
            return Err(fail(vec![LoadError {
                message: format!("TOML syntax error: {}", error.message().trim()),
                span: error.span().map(Span::new),
                help: Some("fix the TOML syntax; see docs/policy.md for the format".into()),
            }]))
        }
    };
    let mut loader = Loader::default();
    let policy = loader.policy(root.get_ref(), Span::new(root.span()));
    if loader.errors.is_empty() {
        Ok(policy)
    } else {
        loader.errors.sort_by_key(|e| e.span.map(|s| s.start));
        Err(fail(loader.errors))
    }
}

type Key<'i> = TomlSpanned<std::borrow::Cow<'i, str>>;

type Entry<'a, 'i> = (
    &'a TomlSpanned<std::borrow::Cow<'i, str>>,
    &'a TomlSpanned<DeValue<'i>>,
);

/// Where a value sits in the policy (`metrics.dw_x.owner`), spelled out
/// only when a problem is reported: a policy with thousands of entries
/// would otherwise format a path for every field it loads.
#[derive(Clone, Copy)]
struct Path<'a> {
    parts: [&'a str; 4],
    len: usize,
    /// Appends `[]` (an item of an array).
    item: bool,
}

impl<'a> Path<'a> {
    fn new(first: &'a str) -> Self {
        Path {
            parts: [first, "", "", ""],
            len: 1,
            item: false,
        }
    }

    /// The path one level down (paths are at most four levels deep:
    /// `metrics.<name>.dimensions.<dimension>`).
    fn field(self, name: &'a str) -> Self {
        let mut parts = self.parts;
        let len = (self.len + 1).min(parts.len());
        parts[len - 1] = name;
        Path { parts, len, ..self }
    }

    fn item(self) -> Self {
        Path { item: true, ..self }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.parts[..self.len].join("."))?;
        if self.item {
            f.write_str("[]")?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Loader {
    errors: Vec<LoadError>,
}

fn span_of<T>(spanned: &TomlSpanned<T>) -> Span {
    Span::new(spanned.span())
}

/// Entries of a table in file order (the parser's map is sorted by key).
fn entries<'a, 'i>(table: &'a DeTable<'i>) -> Vec<Entry<'a, 'i>> {
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    entries
}

/// The closest of `candidates` to `key`, if it is close enough to be a typo.
pub fn nearest<'c>(key: &str, candidates: &[&'c str]) -> Option<&'c str> {
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(key, c), *c))
        .filter(|(score, _)| *score >= 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

impl Loader {
    fn error(&mut self, span: Span, message: String, help: Option<String>) {
        self.errors.push(LoadError {
            message,
            span: Some(span),
            help,
        });
    }

    fn unknown_key(
        &mut self,
        key: &TomlSpanned<std::borrow::Cow<'_, str>>,
        within: fmt::Arguments<'_>,
        valid: &[&str],
    ) {
        let help = match nearest(key.get_ref(), valid) {
            Some(near) => format!("did you mean `{near}`?"),
            None => format!("valid keys are: {}", valid.join(", ")),
        };
        self.error(
            span_of(key),
            format!("unknown key `{}` in {within}", key.get_ref()),
            Some(help),
        );
    }

    fn table<'a, 'i>(
        &mut self,
        value: &'a TomlSpanned<DeValue<'i>>,
        what: Path<'_>,
    ) -> Option<&'a DeTable<'i>> {
        match value.get_ref() {
            DeValue::Table(table) => Some(table),
            other => {
                self.type_error(value, what, "a table", other);
                None
            }
        }
    }

    fn type_error(
        &mut self,
        value: &TomlSpanned<DeValue<'_>>,
        what: Path<'_>,
        expected: &str,
        found: &DeValue<'_>,
    ) {
        self.error(
            span_of(value),
            format!("`{what}` must be {expected}, found {}", found.type_str()),
            None,
        );
    }

    fn string(
        &mut self,
        value: &TomlSpanned<DeValue<'_>>,
        what: Path<'_>,
    ) -> Option<Spanned<String>> {
        match value.get_ref() {
            DeValue::String(s) => Some(Spanned::new(s.to_string(), span_of(value))),
            other => {
                self.type_error(value, what, "a string", other);
                None
            }
        }
    }

    fn integer(
        &mut self,
        value: &TomlSpanned<DeValue<'_>>,
        what: Path<'_>,
    ) -> Option<Spanned<i64>> {
        match value.get_ref() {
            DeValue::Integer(int) => {
                let digits = int.as_str().replace('_', "");
                match i64::from_str_radix(&digits, int.radix()) {
                    Ok(n) => Some(Spanned::new(n, span_of(value))),
                    Err(_) => {
                        self.error(span_of(value), format!("`{what}` is out of range"), None);
                        None
                    }
                }
            }
            other => {
                self.type_error(value, what, "an integer", other);
                None
            }
        }
    }

    fn strings(
        &mut self,
        value: &TomlSpanned<DeValue<'_>>,
        what: Path<'_>,
    ) -> Option<Spanned<Vec<Spanned<String>>>> {
        let DeValue::Array(items) = value.get_ref() else {
            self.type_error(value, what, "an array of strings", value.get_ref());
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items.iter() {
            if let Some(s) = self.string(item, what.item()) {
                out.push(s);
            }
        }
        Some(Spanned::new(out, span_of(value)))
    }

    fn policy(&mut self, root: &DeTable<'_>, root_span: Span) -> Policy {
        let mut policy = Policy {
            schema_version: SCHEMA_VERSION,
            sources: Sources::default(),
            settings: Settings::default(),
            cache_keys: Vec::new(),
            scan_limits: Vec::new(),
            metrics: Vec::new(),
            rules: Vec::new(),
        };
        let mut saw_version = false;
        for (key, value) in entries(root) {
            match key.get_ref().as_ref() {
                "schema_version" => {
                    saw_version = true;
                    if let Some(v) = self.integer(value, Path::new("schema_version")) {
                        if v.value != SCHEMA_VERSION {
                            self.error(
                                v.span,
                                format!("unsupported schema_version {}", v.value),
                                Some(format!(
                                    "this dwlint reads schema_version = {SCHEMA_VERSION}"
                                )),
                            );
                        }
                    }
                }
                "sources" => {
                    if let Some(table) = self.table(value, Path::new("sources")) {
                        policy.sources = self.sources(table);
                    }
                }
                "settings" => {
                    if let Some(table) = self.table(value, Path::new("settings")) {
                        self.settings(table, &mut policy.settings);
                    }
                }
                "cache_keys" => {
                    policy.cache_keys = self.each_entry(value, "cache_keys", Self::cache_key)
                }
                "scan_limits" => {
                    policy.scan_limits = self.each_entry(value, "scan_limits", Self::scan_limit)
                }
                "metrics" => policy.metrics = self.each_entry(value, "metrics", Self::metric),
                "rules" => {
                    if let Some(table) = self.table(value, Path::new("rules")) {
                        policy.rules = self.rules(table);
                    }
                }
                _ => self.unknown_key(key, format_args!("the policy"), TOP_KEYS),
            }
        }
        if !saw_version {
            self.error(
                Span::new(root_span.start..root_span.start),
                "missing `schema_version`".into(),
                Some(format!(
                    "add `schema_version = {SCHEMA_VERSION}` at the top of the policy"
                )),
            );
        }
        policy
    }

    fn sources(&mut self, table: &DeTable<'_>) -> Sources {
        let mut sources = Sources::default();
        for (key, value) in entries(table) {
            let name = key.get_ref().as_ref();
            let slot = match name {
                "cache" => &mut sources.cache,
                "metrics" => &mut sources.metrics,
                "docs" => &mut sources.docs,
                "remote_write" => &mut sources.remote_write,
                "exclude" => &mut sources.exclude,
                _ => {
                    self.unknown_key(key, format_args!("[sources]"), SOURCE_KEYS);
                    continue;
                }
            };
            if let Some(globs) = self.strings(value, Path::new("sources").field(name)) {
                *slot = globs.value;
            }
        }
        sources
    }

    fn settings(&mut self, table: &DeTable<'_>, settings: &mut Settings) {
        let path = Path::new("settings");
        for (key, value) in entries(table) {
            let name = key.get_ref().as_ref();
            match name {
                "cache_namespace" => {
                    if let Some(s) = self.non_empty(value, path.field(name)) {
                        settings.cache_namespace = s;
                    }
                }
                "metric_prefix" => {
                    if let Some(s) = self.non_empty(value, path.field(name)) {
                        settings.metric_prefix = s;
                    }
                }
                "user_controlled_dimensions" => {
                    if let Some(list) = self.strings(value, path.field(name)) {
                        settings.user_controlled_dimensions =
                            list.value.into_iter().map(|s| s.value).collect();
                    }
                }
                "per_run_labels" => {
                    if let Some(list) = self.strings(value, path.field(name)) {
                        settings.per_run_labels = list.value.into_iter().map(|s| s.value).collect();
                    }
                }
                _ => self.unknown_key(key, format_args!("[settings]"), SETTING_KEYS),
            }
        }
    }

    fn non_empty(&mut self, value: &TomlSpanned<DeValue<'_>>, what: Path<'_>) -> Option<String> {
        let s = self.string(value, what)?;
        if s.value.is_empty() {
            self.error(s.span, format!("`{what}` must not be empty"), None);
            return None;
        }
        Some(s.value)
    }

    fn each_entry<T>(
        &mut self,
        value: &TomlSpanned<DeValue<'_>>,
        what: &str,
        mut build: impl FnMut(&mut Self, &Key<'_>, &DeTable<'_>) -> T,
    ) -> Vec<T> {
        let Some(table) = self.table(value, Path::new(what)) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(table.len());
        for (key, entry) in entries(table) {
            if let Some(fields) = self.table(entry, Path::new(what).field(key.get_ref())) {
                out.push(build(self, key, fields));
            }
        }
        out
    }

    fn cache_key(&mut self, id: &Key<'_>, table: &DeTable<'_>) -> CacheKeyPolicy {
        let mut entry = CacheKeyPolicy {
            id: Spanned::new(id.get_ref().to_string(), span_of(id)),
            owner: None,
            prefix: None,
            dimensions: None,
            ttl: None,
            bound: None,
            admission: None,
            eviction: None,
        };
        let path = Path::new("cache_keys").field(id.get_ref());
        for (key, value) in entries(table) {
            let field = key.get_ref().as_ref();
            let what = path.field(field);
            match field {
                "owner" => entry.owner = self.string(value, what),
                "prefix" => entry.prefix = self.string(value, what),
                "dimensions" => entry.dimensions = self.strings(value, what),
                "ttl" => entry.ttl = self.string(value, what),
                "bound" => entry.bound = self.string(value, what),
                "admission" => entry.admission = self.string(value, what),
                "eviction" => entry.eviction = self.string(value, what),
                _ => self.unknown_key(key, format_args!("[{path}]"), CACHE_KEYS),
            }
        }
        entry
    }

    fn scan_limit(&mut self, id: &Key<'_>, table: &DeTable<'_>) -> ScanLimitPolicy {
        let mut entry = ScanLimitPolicy {
            id: Spanned::new(id.get_ref().to_string(), span_of(id)),
            owner: None,
            config_key: None,
            default: None,
            bound: None,
        };
        let path = Path::new("scan_limits").field(id.get_ref());
        for (key, value) in entries(table) {
            let field = key.get_ref().as_ref();
            let what = path.field(field);
            match field {
                "owner" => entry.owner = self.string(value, what),
                "config_key" => entry.config_key = self.string(value, what),
                "default" => {
                    entry.default = self.integer(value, what);
                    if let Some(d) = &entry.default {
                        if d.value < 1 {
                            self.error(
                                d.span,
                                format!("`{what}` must be a positive integer"),
                                Some(
                                    "a scan limit of 0 would leave the scan unbounded or disabled"
                                        .into(),
                                ),
                            );
                        }
                    }
                }
                "bound" => entry.bound = self.string(value, what),
                _ => self.unknown_key(key, format_args!("[{path}]"), SCAN_KEYS),
            }
        }
        entry
    }

    fn metric(&mut self, name: &Key<'_>, table: &DeTable<'_>) -> MetricPolicy {
        let mut entry = MetricPolicy {
            name: Spanned::new(name.get_ref().to_string(), span_of(name)),
            owner: None,
            surface: None,
            dimensions: None,
            cardinality: None,
            selection: None,
            suppression: None,
        };
        let path = Path::new("metrics").field(name.get_ref());
        for (key, value) in entries(table) {
            let field = key.get_ref().as_ref();
            let what = path.field(field);
            match field {
                "owner" => entry.owner = self.string(value, what),
                "surface" => entry.surface = self.string(value, what),
                "dimensions" => entry.dimensions = self.dimensions(value, what),
                "cardinality" => entry.cardinality = self.string(value, what),
                "selection" => entry.selection = self.string(value, what),
                "suppression" => entry.suppression = self.string(value, what),
                _ => self.unknown_key(key, format_args!("[{path}]"), METRIC_KEYS),
            }
        }
        entry
    }

    fn dimensions(
        &mut self,
        value: &TomlSpanned<DeValue<'_>>,
        what: Path<'_>,
    ) -> Option<Spanned<Vec<Dimension>>> {
        let DeValue::Table(table) = value.get_ref() else {
            self.error(
                span_of(value),
                format!(
                    "`{what}` must be a table of dimension = \"cardinality_class\", found {}",
                    value.get_ref().type_str()
                ),
                Some("for example: dimensions = { task_queue = \"bounded_series\" }".into()),
            );
            return None;
        };
        let mut out = Vec::with_capacity(table.len());
        for (key, class) in entries(table) {
            let dimension = key.get_ref();
            if let Some(class) = self.string(class, what.field(dimension)) {
                out.push(Dimension {
                    name: Spanned::new(dimension.to_string(), span_of(key)),
                    class,
                });
            }
        }
        Some(Spanned::new(out, span_of(value)))
    }

    fn rules(&mut self, table: &DeTable<'_>) -> Vec<(Spanned<String>, Spanned<String>)> {
        let mut out = Vec::new();
        for (key, value) in entries(table) {
            let Some(level) = self.string(value, Path::new("rules").field(key.get_ref())) else {
                continue;
            };
            if !SEVERITY_LEVELS.contains(&level.value.as_str()) {
                let help = match nearest(&level.value, SEVERITY_LEVELS) {
                    Some(near) => format!("did you mean \"{near}\"?"),
                    None => "use \"allow\", \"warn\" or \"error\"".into(),
                };
                self.error(
                    level.span,
                    format!("unknown severity \"{}\"", level.value),
                    Some(help),
                );
                continue;
            }
            let code = Spanned::new(key.get_ref().to_string(), span_of(key));
            out.push((code, level));
        }
        out
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
