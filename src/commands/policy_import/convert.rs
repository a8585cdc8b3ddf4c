//! From the PHP policy array to a policy draft.
//!
//! The reference array has the same sections and field names as the TOML
//! format, so conversion is a checked copy: each field must have the type
//! the TOML format needs, and an unknown key is an error rather than being
//! dropped, since a dropped field could be the one a reviewer relied on.
//! A `null` field is left out, which `check` then reports as missing.
//! Entries keep the PHP file's order.

use std::collections::HashSet;

use super::php_array::{Kind, Value};
use crate::policy::draft::{Draft, DraftCacheKey, DraftMetric, DraftScanLimit, SettingValue};

/// A value of the wrong shape, at byte offset `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeError {
    /// Byte offset in the PHP file.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

type Result<T> = std::result::Result<T, ShapeError>;

const SECTIONS: &[&str] = &["cache_keys", "scan_limits", "metrics", "settings"];
// The PHP policy's fields are the TOML policy's fields: one list, owned by
// the loader, so an import can never accept a key that `check` rejects.
use dwpolicy::load::{
    CACHE_KEYS as CACHE_FIELDS, METRIC_KEYS as METRIC_FIELDS, SCAN_KEYS as SCAN_FIELDS,
    SETTING_KEYS as SETTINGS,
};

fn fail<T>(value: &Value, message: impl Into<String>) -> Result<T> {
    Err(ShapeError {
        at: value.at,
        message: message.into(),
    })
}

/// The entries of an associative array: (key text, key, value), with
/// duplicate and non-string keys rejected.
fn entries<'v>(value: &'v Value, what: &str) -> Result<Vec<(String, &'v Value, &'v Value)>> {
    let Kind::Array(items) = &value.kind else {
        return fail(
            value,
            format!("{what} must be an array, found {}", value.kind.describe()),
        );
    };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (key, item) in items {
        let Some(key) = key else {
            return fail(item, format!("every entry of {what} needs a `'key' =>`"));
        };
        let Kind::Str(name) = &key.kind else {
            return fail(
                key,
                format!(
                    "keys of {what} must be strings, found {}",
                    key.kind.describe()
                ),
            );
        };
        if !seen.insert(name.clone()) {
            return fail(key, format!("duplicate key `{name}` in {what}"));
        }
        out.push((name.clone(), key, item));
    }
    Ok(out)
}

fn unknown<T>(key: &Value, name: &str, what: &str, valid: &[&str]) -> Result<T> {
    let hint = match dwpolicy::load::nearest(name, valid) {
        Some(near) => format!("did you mean `{near}`?"),
        None => format!("valid keys: {}", valid.join(", ")),
    };
    fail(key, format!("unknown key `{name}` in {what}; {hint}"))
}

/// A text field: strings, class names and integers (`'ttl' => 900`) are
/// written as text; `null` leaves the field out.
fn text(value: &Value, what: &str) -> Result<Option<String>> {
    match &value.kind {
        Kind::Str(s) | Kind::Class(s) => Ok(Some(s.clone())),
        Kind::Int(n) => Ok(Some(n.to_string())),
        Kind::Null => Ok(None),
        other => fail(
            value,
            format!("{what} must be a string, found {}", other.describe()),
        ),
    }
}

fn list(value: &Value, what: &str) -> Result<Option<Vec<String>>> {
    let Kind::Array(items) = &value.kind else {
        return match value.kind {
            Kind::Null => Ok(None),
            _ => fail(
                value,
                format!(
                    "{what} must be a list of strings, found {}",
                    value.kind.describe()
                ),
            ),
        };
    };
    let mut out = Vec::new();
    for (key, item) in items {
        if let Some(key) = key.as_ref().filter(|k| !matches!(k.kind, Kind::Int(_))) {
            return fail(
                key,
                format!("{what} must be a list of strings, not keyed by strings"),
            );
        }
        match &item.kind {
            Kind::Str(s) => out.push(s.clone()),
            other => {
                return fail(
                    item,
                    format!("{what} must hold strings, found {}", other.describe()),
                )
            }
        }
    }
    Ok(Some(out))
}

/// The policy in `root`, the array the PHP file returns.
pub fn convert(root: &Value) -> Result<Draft> {
    let mut draft = Draft::default();
    for (section, key, value) in entries(root, "the returned array")? {
        match section.as_str() {
            "cache_keys" => {
                for (id, _, entry) in entries(value, "cache_keys")? {
                    draft.cache_keys.push(cache_key(id, entry)?);
                }
            }
            "scan_limits" => {
                for (id, _, entry) in entries(value, "scan_limits")? {
                    draft.scan_limits.push(scan_limit(id, entry)?);
                }
            }
            "metrics" => {
                for (name, _, entry) in entries(value, "metrics")? {
                    draft.metrics.push(metric(name, entry)?);
                }
            }
            "settings" => {
                for (name, key, value) in entries(value, "settings")? {
                    setting(&mut draft, name, key, value)?;
                }
            }
            _ if SETTINGS.contains(&section.as_str()) => setting(&mut draft, section, key, value)?,
            _ => {
                let valid: Vec<&str> = SECTIONS.iter().chain(SETTINGS).copied().collect();
                return unknown(key, &section, "the returned array", &valid);
            }
        }
    }
    Ok(draft)
}

fn setting(draft: &mut Draft, name: String, key: &Value, value: &Value) -> Result<()> {
    let what = format!("`{name}`");
    let converted = match name.as_str() {
        "cache_namespace" | "metric_prefix" => text(value, &what)?.map(SettingValue::Str),
        "user_controlled_dimensions" | "per_run_labels" => {
            list(value, &what)?.map(SettingValue::List)
        }
        _ => return unknown(key, &name, "settings", SETTINGS),
    };
    if let Some(converted) = converted {
        draft.settings.retain(|(n, _)| *n != name);
        draft.settings.push((name, converted));
    }
    Ok(())
}

fn cache_key(id: String, entry: &Value) -> Result<DraftCacheKey> {
    let what = format!("cache_keys.{id}");
    let mut out = DraftCacheKey {
        id,
        ..DraftCacheKey::default()
    };
    for (field, key, value) in entries(entry, &what)? {
        let name = format!("`{what}.{field}`");
        match field.as_str() {
            "owner" => out.owner = text(value, &name)?,
            "prefix" => out.prefix = text(value, &name)?,
            "dimensions" => out.dimensions = list(value, &name)?,
            "ttl" => out.ttl = text(value, &name)?,
            "bound" => out.bound = text(value, &name)?,
            "admission" => out.admission = text(value, &name)?,
            "eviction" => out.eviction = text(value, &name)?,
            _ => return unknown(key, &field, &what, CACHE_FIELDS),
        }
    }
    Ok(out)
}

fn scan_limit(id: String, entry: &Value) -> Result<DraftScanLimit> {
    let what = format!("scan_limits.{id}");
    let mut out = DraftScanLimit {
        id,
        ..DraftScanLimit::default()
    };
    for (field, key, value) in entries(entry, &what)? {
        let name = format!("`{what}.{field}`");
        match field.as_str() {
            "owner" => out.owner = text(value, &name)?,
            "config_key" => out.config_key = text(value, &name)?,
            "default" => {
                out.default = match value.kind {
                    Kind::Int(n) if n > 0 => Some(n),
                    Kind::Int(n) => {
                        return fail(
                            value,
                            format!("{name} must be a positive integer, found {n}"),
                        )
                    }
                    Kind::Null => None,
                    _ => {
                        return fail(
                            value,
                            format!("{name} must be an integer, found {}", value.kind.describe()),
                        )
                    }
                }
            }
            "bound" => out.bound = text(value, &name)?,
            _ => return unknown(key, &field, &what, SCAN_FIELDS),
        }
    }
    Ok(out)
}

fn metric(name: String, entry: &Value) -> Result<DraftMetric> {
    let what = format!("metrics.{name}");
    let mut out = DraftMetric {
        name,
        ..DraftMetric::default()
    };
    for (field, key, value) in entries(entry, &what)? {
        let label = format!("`{what}.{field}`");
        match field.as_str() {
            "owner" => out.owner = text(value, &label)?,
            "surface" => out.surface = text(value, &label)?,
            "dimensions" => out.dimensions = dimensions(value, &label)?,
            "cardinality" => out.cardinality = text(value, &label)?,
            "selection" => out.selection = text(value, &label)?,
            "suppression" => out.suppression = text(value, &label)?,
            _ => return unknown(key, &field, &what, METRIC_FIELDS),
        }
    }
    Ok(out)
}

/// `['namespace' => 'request_scope_not_label', …]`; `[]` is no dimension.
fn dimensions(value: &Value, what: &str) -> Result<Option<Vec<(String, String)>>> {
    match &value.kind {
        Kind::Null => return Ok(None),
        Kind::Array(items) if items.iter().any(|(k, _)| k.is_none()) => {
            return fail(
                value,
                format!("{what} must map each dimension to its cardinality class ('task_queue' => 'bounded_series')"),
            );
        }
        _ => {}
    }
    let mut out = Vec::new();
    for (dimension, _, class) in entries(value, what)? {
        match &class.kind {
            Kind::Str(class) => out.push((dimension, class.clone())),
            other => {
                return fail(
                    class,
                    format!(
                        "the class of `{dimension}` must be a string, found {}",
                        other.describe()
                    ),
                )
            }
        }
    }
    Ok(Some(out))
}
