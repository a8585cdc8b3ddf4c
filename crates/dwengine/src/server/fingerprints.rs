//! A worker registration's `workflow_definition_fingerprints`: per workflow
//! type, the SDK's source identity of the definition it runs (the Python
//! SDK's hash of the workflow class, the Rust SDK's of the sources named
//! with `Worker::set_workflow_definition_sources`). Recorded on the
//! registration; a redrive (`server::redrive`) checks the failed run's
//! queue still runs the definition that failed it.

use serde_json::{Map, Value};

use crate::server::wire::Checks;

/// Workflow types a registration may fingerprint at most.
pub const MAX_DEFINITION_FINGERPRINTS: usize = 1_000;
/// A fingerprint's length at most (both SDKs send `sha256:` and 64 hex digits).
pub const MAX_FINGERPRINT_CHARS: usize = 255;

/// A registration's `workflow_definition_fingerprints` (workflow type ->
/// the SDK's source identity of its definition): `None` when absent or
/// null, else a map of non-empty names to non-empty strings, checked by
/// field.
pub fn definition_fingerprints(value: &Value) -> Result<Option<Map<String, Value>>, Checks> {
    const FIELD: &str = "workflow_definition_fingerprints";
    let mut checks = Checks::default();
    let map = match value {
        Value::Null => return Ok(None),
        Value::Object(map) => map,
        _ => {
            checks.problem(
                FIELD,
                "The workflow_definition_fingerprints field must be an object of workflow \
                 type to fingerprint.",
            );
            return Err(checks);
        }
    };
    if map.len() > MAX_DEFINITION_FINGERPRINTS {
        checks.problem(
            FIELD,
            format!("At most {MAX_DEFINITION_FINGERPRINTS} workflow types may be fingerprinted."),
        );
    }
    for (workflow_type, fingerprint) in map {
        let field = format!("{FIELD}.{workflow_type}");
        if workflow_type.trim().is_empty()
            || workflow_type.chars().count() > dwpolicy::boundary::MAX_NAME_CHARS
        {
            checks.problem(
                FIELD,
                format!(
                    "A workflow type must be 1 to {} characters.",
                    dwpolicy::boundary::MAX_NAME_CHARS
                ),
            );
        }
        match fingerprint.as_str() {
            Some(f) if !f.trim().is_empty() && f.chars().count() <= MAX_FINGERPRINT_CHARS => {}
            _ => {
                checks.problem(
                    &field,
                    format!("The fingerprint must be a string of 1 to {MAX_FINGERPRINT_CHARS} characters."),
                );
            }
        }
    }
    if checks.problems.is_empty() {
        Ok(Some(map.clone()))
    } else {
        Err(checks)
    }
}
