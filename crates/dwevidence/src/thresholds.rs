//! Per-policy cache-key limits: `DW_PERF_MAX_SERVER_CACHE_KEYS_BY_POLICY`
//! and `DW_PERF_MAX_FINAL_SERVER_CACHE_KEYS_BY_POLICY`.
//!
//! Both are JSON objects keyed by cache policy ID. They are validated before
//! a soak starts, because a typo in a policy ID or a limit of `"100"` would
//! otherwise let evidence drift silently away from the inventory: an unknown
//! ID, a non-integer or a negative value is an error naming the key. A map
//! that leaves IDs out is valid input (the run enforces what it has) but the
//! evidence it produces is not eligible for the trusted profile.

use std::collections::BTreeMap;

use serde_json::Value;

/// The variable holding the maximum-keys map.
pub const MAX_VAR: &str = "DW_PERF_MAX_SERVER_CACHE_KEYS_BY_POLICY";
/// The variable holding the post-drain map.
pub const MAX_FINAL_VAR: &str = "DW_PERF_MAX_FINAL_SERVER_CACHE_KEYS_BY_POLICY";

/// Why a threshold map was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    /// Not a JSON object.
    #[error("{var} must be a JSON object keyed by cache policy ID, e.g. {{\"long_poll_signals\": 500}}: {reason}")]
    NotAnObject {
        /// The variable.
        var: String,
        /// What was wrong.
        reason: String,
    },
    /// A key that is not a declared cache policy ID.
    #[error("{var}: `{key}` is not a cache policy ID in the policy{}", .suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownPolicy {
        /// The variable.
        var: String,
        /// The key.
        key: String,
        /// The nearest declared ID.
        suggestion: Option<String>,
    },
    /// A value that is not a non-negative integer.
    #[error("{var}: `{key}` must be a non-negative integer key count, not {value}")]
    NotACount {
        /// The variable.
        var: String,
        /// The key.
        key: String,
        /// The value as written.
        value: String,
    },
}

/// Parses one map against the declared cache policy IDs.
pub fn parse(
    var: &str,
    text: &str,
    ids: &[String],
) -> Result<BTreeMap<String, u64>, ThresholdError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ThresholdError::NotAnObject {
        var: var.to_owned(),
        reason: e.to_string(),
    })?;
    let Value::Object(map) = value else {
        return Err(ThresholdError::NotAnObject {
            var: var.to_owned(),
            reason: format!("got {value}"),
        });
    };
    let mut limits = BTreeMap::new();
    for (key, value) in map {
        if !ids.contains(&key) {
            let names: Vec<&str> = ids.iter().map(String::as_str).collect();
            return Err(ThresholdError::UnknownPolicy {
                var: var.to_owned(),
                suggestion: dwpolicy::load::nearest(&key, &names).map(str::to_owned),
                key,
            });
        }
        match value.as_u64() {
            Some(limit) => {
                limits.insert(key, limit);
            }
            None => {
                return Err(ThresholdError::NotACount {
                    var: var.to_owned(),
                    key,
                    value: value.to_string(),
                })
            }
        }
    }
    Ok(limits)
}

/// Declared IDs a map leaves out (empty: the map is complete).
pub fn missing<'a>(map: &BTreeMap<String, u64>, ids: &'a [String]) -> Vec<&'a str> {
    ids.iter()
        .filter(|id| !map.contains_key(*id))
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<String> {
        vec!["long_poll_signals".into(), "readiness_probe".into()]
    }

    #[test]
    fn a_complete_map_parses() {
        let map = parse(
            MAX_VAR,
            r#"{"long_poll_signals": 10, "readiness_probe": 0}"#,
            &ids(),
        )
        .unwrap();
        assert_eq!(map["long_poll_signals"], 10);
        assert!(missing(&map, &ids()).is_empty());
    }

    #[test]
    fn an_incomplete_map_parses_and_says_what_is_missing() {
        let map = parse(MAX_VAR, r#"{"long_poll_signals": 10}"#, &ids()).unwrap();
        assert_eq!(missing(&map, &ids()), ["readiness_probe"]);
    }

    #[test]
    fn unknown_ids_are_named_with_a_suggestion() {
        let e = parse(MAX_VAR, r#"{"long_poll_signal": 10}"#, &ids()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "DW_PERF_MAX_SERVER_CACHE_KEYS_BY_POLICY: `long_poll_signal` is not a cache policy ID in the policy; did you mean `long_poll_signals`?"
        );
    }

    #[test]
    fn non_integers_and_negatives_are_refused_by_key() {
        for bad in [r#""10""#, "1.5", "-1", "true", "null"] {
            let text = format!(r#"{{"readiness_probe": {bad}}}"#);
            let e = parse(MAX_FINAL_VAR, &text, &ids()).unwrap_err();
            assert!(
                matches!(&e, ThresholdError::NotACount { key, .. } if key == "readiness_probe"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn non_objects_are_refused() {
        for bad in ["[]", "5", "{", ""] {
            assert!(matches!(
                parse(MAX_VAR, bad, &ids()),
                Err(ThresholdError::NotAnObject { .. })
            ));
        }
    }
}
