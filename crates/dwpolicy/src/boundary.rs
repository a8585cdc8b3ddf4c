//! Request-boundary limits of the standalone server.
//!
//! These run at the HTTP edge, before a start, signal, update or query
//! reaches the control plane, so an oversized or malformed request is refused
//! without the server writing a row. Validation collects every failing field
//! into one `validation_failed` answer, so a client fixes a request in one
//! round trip; only an oversized body short-circuits with
//! `payload_too_large`, since nothing in it should be parsed.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::env::{process_lookup, EnvConfigError, EnvReader};
use crate::history::json_len;
use crate::limits::StructuralLimits;

/// Longest `workflow_id`, in characters (controller validator).
pub const MAX_WORKFLOW_ID_CHARS: usize = 128;
/// Longest `workflow_type`, `task_queue` or `business_key`, in characters.
pub const MAX_NAME_CHARS: usize = 255;
/// Longest `request_id` (deduplication token), in characters.
pub const MAX_REQUEST_ID_CHARS: usize = 255;
/// Longest cancel/terminate/archive `reason`, in characters.
pub const MAX_REASON_CHARS: usize = 1000;

/// The configurable request limits (`server.limits.*`); `0` disables one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestLimits {
    /// Whole HTTP body, bytes (default 2 MiB, `DW_MAX_PAYLOAD_BYTES`).
    pub max_payload_bytes: u64,
    /// Serialized memo, bytes (default 256 KiB, `DW_MAX_MEMO_BYTES`).
    pub max_memo_bytes: u64,
    /// Registered custom search attributes per namespace (default 100, `DW_MAX_SEARCH_ATTRIBUTES`).
    pub max_search_attributes: u64,
    /// One search attribute key, bytes (default 128, `DW_MAX_SEARCH_ATTRIBUTE_KEY_LENGTH`).
    pub max_search_attribute_key_length: u64,
    /// Each string value or array element, bytes (default 2 KiB, `DW_MAX_SEARCH_ATTRIBUTE_VALUE_BYTES`).
    pub max_search_attribute_value_bytes: u64,
    /// Signal/update/query name path segment, bytes (default 256, `DW_MAX_OPERATION_NAME_LENGTH`).
    pub max_operation_name_length: u64,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_payload_bytes: 2 * 1024 * 1024,
            max_memo_bytes: 256 * 1024,
            max_search_attributes: 100,
            max_search_attribute_key_length: 128,
            max_search_attribute_value_bytes: 2 * 1024,
            max_operation_name_length: 256,
        }
    }
}

/// A request refused at the boundary, in the control plane's error envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum BoundaryError {
    /// One or more fields are invalid (HTTP 422).
    #[error("{message}")]
    ValidationFailed {
        /// A summary sentence.
        message: String,
        /// Every problem, keyed by field.
        validation_errors: BTreeMap<String, Vec<String>>,
    },
    /// The body is larger than `max_payload_bytes` (HTTP 413).
    #[error("{message}")]
    PayloadTooLarge {
        /// A summary sentence.
        message: String,
        /// The body size in bytes.
        size: u64,
        /// The configured limit.
        limit: u64,
    },
}

impl BoundaryError {
    /// The HTTP status: 422 or 413.
    pub fn status(&self) -> u16 {
        match self {
            BoundaryError::ValidationFailed { .. } => 422,
            BoundaryError::PayloadTooLarge { .. } => 413,
        }
    }

    /// The machine-readable reason: `validation_failed` or `payload_too_large`.
    pub fn reason(&self) -> &'static str {
        match self {
            BoundaryError::ValidationFailed { .. } => "validation_failed",
            BoundaryError::PayloadTooLarge { .. } => "payload_too_large",
        }
    }
}

/// The `limits` object published by `GET /api/cluster/info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ClusterLimits {
    /// See [`RequestLimits::max_payload_bytes`].
    pub max_payload_bytes: u64,
    /// See [`RequestLimits::max_memo_bytes`].
    pub max_memo_bytes: u64,
    /// See [`RequestLimits::max_search_attributes`].
    pub max_search_attributes: u64,
    /// See [`RequestLimits::max_search_attribute_key_length`].
    pub max_search_attribute_key_length: u64,
    /// See [`RequestLimits::max_search_attribute_value_bytes`].
    pub max_search_attribute_value_bytes: u64,
    /// See [`RequestLimits::max_operation_name_length`].
    pub max_operation_name_length: u64,
    /// The structural `pending_activity_count`.
    pub max_pending_activities: u64,
    /// The structural `pending_child_count`.
    pub max_pending_children: u64,
}

impl RequestLimits {
    /// Reads the `DW_MAX_*` variables from the process environment.
    pub fn from_env() -> Result<Self, EnvConfigError> {
        Self::from_env_with(process_lookup)
    }

    /// Reads the `DW_MAX_*` variables through `lookup`, reporting every invalid one.
    pub fn from_env_with(
        lookup: impl FnMut(&str) -> Option<String>,
    ) -> Result<Self, EnvConfigError> {
        let d = RequestLimits::default();
        let mut reader = EnvReader::new(lookup);
        let limits = RequestLimits {
            max_payload_bytes: reader.read("DW_MAX_PAYLOAD_BYTES", d.max_payload_bytes),
            max_memo_bytes: reader.read("DW_MAX_MEMO_BYTES", d.max_memo_bytes),
            max_search_attributes: reader.read("DW_MAX_SEARCH_ATTRIBUTES", d.max_search_attributes),
            max_search_attribute_key_length: reader.read(
                "DW_MAX_SEARCH_ATTRIBUTE_KEY_LENGTH",
                d.max_search_attribute_key_length,
            ),
            max_search_attribute_value_bytes: reader.read(
                "DW_MAX_SEARCH_ATTRIBUTE_VALUE_BYTES",
                d.max_search_attribute_value_bytes,
            ),
            max_operation_name_length: reader
                .read("DW_MAX_OPERATION_NAME_LENGTH", d.max_operation_name_length),
        };
        reader.finish().map(|()| limits)
    }

    /// Refuses a body longer than `max_payload_bytes` with `payload_too_large`.
    pub fn check_body(&self, size: u64) -> Result<(), BoundaryError> {
        if over(size, self.max_payload_bytes) {
            return Err(BoundaryError::PayloadTooLarge {
                message: format!(
                    "The request body is {size} bytes; the limit is {} bytes.",
                    self.max_payload_bytes
                ),
                size,
                limit: self.max_payload_bytes,
            });
        }
        Ok(())
    }

    /// A validator that collects field errors against these limits.
    pub fn validator(&self) -> RequestValidator<'_> {
        RequestValidator {
            limits: self,
            errors: BTreeMap::new(),
        }
    }

    /// The `limits` object for cluster info, with the structural pending limits.
    pub fn cluster_limits(&self, structural: &StructuralLimits) -> ClusterLimits {
        ClusterLimits {
            max_payload_bytes: self.max_payload_bytes,
            max_memo_bytes: self.max_memo_bytes,
            max_search_attributes: self.max_search_attributes,
            max_search_attribute_key_length: self.max_search_attribute_key_length,
            max_search_attribute_value_bytes: self.max_search_attribute_value_bytes,
            max_operation_name_length: self.max_operation_name_length,
            max_pending_activities: structural.pending_activity_count,
            max_pending_children: structural.pending_child_count,
        }
    }
}

/// Whether `value` is over an enabled `limit` (`0` disables).
fn over(value: u64, limit: u64) -> bool {
    limit != 0 && value > limit
}

/// Whether `c` may not appear in an identifier: a control character (NUL,
/// ESC of an ANSI sequence, …), a bidirectional mark, embedding, override or
/// isolate (an RTL override makes `exe.txt` read `txt.exe`), or a
/// zero-width character (two ids that look the same).
pub fn is_deceptive_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{061C}'
                | '\u{FEFF}'
        )
}

/// Collects every failing field of one request.
#[derive(Debug)]
pub struct RequestValidator<'l> {
    limits: &'l RequestLimits,
    errors: BTreeMap<String, Vec<String>>,
}

impl RequestValidator<'_> {
    fn fail(&mut self, field: &str, message: String) {
        self.errors
            .entry(field.to_owned())
            .or_default()
            .push(message);
    }

    /// Checks that `value` has at most `max_chars` characters (Unicode scalar values).
    pub fn text(&mut self, field: &str, value: &str, max_chars: usize) -> &mut Self {
        // Counting stops one past the limit, so a huge value costs no more than a short one.
        let chars = value.chars().take(max_chars.saturating_add(1)).count();
        if chars > max_chars {
            self.fail(
                field,
                format!("The {field} may not be greater than {max_chars} characters."),
            );
        }
        self
    }

    /// An identifier: at most `max_chars` characters and none that
    /// hides or rewrites what a log line or a console shows
    /// ([`is_deceptive_char`]: control characters including NUL and ANSI
    /// escapes, bidirectional overrides and isolates, zero-width characters).
    pub fn identifier(&mut self, field: &str, value: &str, max_chars: usize) -> &mut Self {
        self.text(field, value, max_chars);
        if let Some(bad) = value.chars().find(|c| is_deceptive_char(*c)) {
            self.fail(
                field,
                format!(
                    "The {field} may not contain control, bidirectional or zero-width characters (found U+{:04X}).",
                    u32::from(bad)
                ),
            );
        }
        self
    }

    /// `workflow_id`: at most 128 characters, no deceptive characters.
    pub fn workflow_id(&mut self, value: &str) -> &mut Self {
        self.identifier("workflow_id", value, MAX_WORKFLOW_ID_CHARS)
    }

    /// `workflow_type`: at most 255 characters, no deceptive characters.
    pub fn workflow_type(&mut self, value: &str) -> &mut Self {
        self.identifier("workflow_type", value, MAX_NAME_CHARS)
    }

    /// `task_queue`: at most 255 characters, no deceptive characters.
    pub fn task_queue(&mut self, value: &str) -> &mut Self {
        self.identifier("task_queue", value, MAX_NAME_CHARS)
    }

    /// `business_key`: at most 255 characters.
    pub fn business_key(&mut self, value: &str) -> &mut Self {
        self.text("business_key", value, MAX_NAME_CHARS)
    }

    /// `request_id`: at most 255 characters.
    pub fn request_id(&mut self, value: &str) -> &mut Self {
        self.text("request_id", value, MAX_REQUEST_ID_CHARS)
    }

    /// `reason`: at most 1000 characters.
    pub fn reason(&mut self, value: &str) -> &mut Self {
        self.text("reason", value, MAX_REASON_CHARS)
    }

    /// A signal/update/query name under `field` (e.g. `signal_name`): at most `max_operation_name_length` bytes.
    pub fn operation_name(&mut self, field: &str, name: &str) -> &mut Self {
        let limit = self.limits.max_operation_name_length;
        if over(name.len() as u64, limit) {
            self.fail(
                field,
                format!("The {field} may not be greater than {limit} bytes."),
            );
        }
        self
    }

    /// `memo`: its compact JSON encoding is at most `max_memo_bytes`.
    pub fn memo(&mut self, memo: &Value) -> &mut Self {
        let limit = self.limits.max_memo_bytes;
        match json_len(memo) {
            Ok(size) if over(size, limit) => self.fail(
                "memo",
                format!("The memo is {size} bytes when encoded; the limit is {limit} bytes."),
            ),
            Ok(_) => {}
            Err(error) => self.fail("memo", format!("The memo cannot be encoded: {error}.")),
        }
        self
    }

    /// `search_attributes` at start: key lengths, and each string value or array element.
    pub fn search_attributes(&mut self, attributes: &Map<String, Value>) -> &mut Self {
        let key_limit = self.limits.max_search_attribute_key_length;
        let value_limit = self.limits.max_search_attribute_value_bytes;
        for (key, value) in attributes {
            if over(key.len() as u64, key_limit) {
                self.fail(
                    "search_attributes",
                    format!(
                        "The search attribute key \"{}…\" is {} bytes; the limit is {key_limit} bytes.",
                        prefix_chars(key, 32),
                        key.len()
                    ),
                );
            }
            let check = |element: &Value, position: Option<usize>| {
                let size = match element {
                    Value::String(s) => s.len() as u64,
                    // Non-string array elements are measured by their encoding.
                    other if position.is_some() => json_len(other).unwrap_or(u64::MAX),
                    _ => return None,
                };
                over(size, value_limit).then(|| {
                    let at = position.map_or(String::new(), |i| format!("[{i}]"));
                    format!(
                        "The search attribute {key}{at} is {size} bytes; the limit is {value_limit} bytes."
                    )
                })
            };
            let mut problems = Vec::new();
            match value {
                Value::Array(items) => problems.extend(
                    items
                        .iter()
                        .enumerate()
                        .filter_map(|(i, item)| check(item, Some(i))),
                ),
                other => problems.extend(check(other, None)),
            }
            for problem in problems {
                self.fail("search_attributes", problem);
            }
        }
        self
    }

    /// Registering custom search attributes: a namespace may hold at most `max_search_attributes`.
    pub fn registered_search_attributes(&mut self, total_after_registration: u64) -> &mut Self {
        let limit = self.limits.max_search_attributes;
        if over(total_after_registration, limit) {
            self.fail(
                "search_attributes",
                format!(
                    "A namespace may register at most {limit} custom search attributes; this would make {total_after_registration}."
                ),
            );
        }
        self
    }

    /// Whether any field failed so far.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// Ends validation: `validation_failed` with every failing field, if any.
    pub fn finish(&mut self) -> Result<(), BoundaryError> {
        if self.errors.is_empty() {
            return Ok(());
        }
        let validation_errors = std::mem::take(&mut self.errors);
        let count: usize = validation_errors.values().map(Vec::len).sum();
        Err(BoundaryError::ValidationFailed {
            message: format!(
                "The request is invalid: {count} problem(s) in {} field(s).",
                validation_errors.len()
            ),
            validation_errors,
        })
    }
}

fn prefix_chars(text: &str, chars: usize) -> &str {
    match text.char_indices().nth(chars) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod deceptive_tests {
    use super::*;

    #[test]
    fn identifiers_refuse_control_bidi_and_zero_width_characters() {
        let limits = RequestLimits::default();
        for bad in [
            "a\0b",
            "a\u{1b}[31mred",
            "invoice\u{202E}fdp.exe",
            "a\u{200B}b",
            "a\u{2066}b",
            "tab\tx",
        ] {
            let mut v = limits.validator();
            v.workflow_id(bad).workflow_type(bad).task_queue(bad);
            let error = v.finish().expect_err(bad);
            assert_eq!(error.status(), 422, "{bad:?}");
        }
        let mut v = limits.validator();
        v.workflow_id("order-7/ü-é")
            .workflow_type("Order Workflow")
            .task_queue("q.1");
        assert!(v.finish().is_ok());
    }
}
