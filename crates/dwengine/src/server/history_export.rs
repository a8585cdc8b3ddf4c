//! `GET /api/workflows/{id}/runs/{runId}/history/export`: one run's history
//! as a `durable-workflow.v2.history-export` bundle (schema version 1), the
//! Python client's `export_history`.
//!
//! The bundle carries the run (`workflow`) and its whole history
//! (`history_events`); the sections the history already records (commands,
//! signals, updates, tasks, activities, timers, failures) are empty lists,
//! as the export names in `links.sections_in_history`. Its integrity block
//! is a SHA-256 checksum over the canonical JSON (`json-recursive-ksort-v1`:
//! object keys sorted at every depth, no whitespace, non-ASCII characters
//! escaped as UTF-16 `\uXXXX`) of the bundle without `integrity`. It is not
//! signed: this server holds no bundle signing key, and the SDK's verifier
//! accepts a bundle without `signature_algorithm` and `signature`.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::server::{wire, ApiError, Engine};
use crate::store::HistoryEvent;

/// The bundle schema the SDK's verifier reads.
pub const BUNDLE_SCHEMA: &str = "durable-workflow.v2.history-export";

impl Engine {
    /// The export bundle of `run_id` of `workflow_id`.
    pub fn export_history(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
    ) -> Result<Value, ApiError> {
        let _slot = self.admit_namespace(namespace)?;
        let run = self.target(namespace, workflow_id, Some(run_id))?;
        let page = self.history_limit(usize::MAX);
        // One snapshot: the whole history, page by page (a run's history
        // is bounded by the history budget).
        let (head, events) = self.read(|s| {
            let head = s.run(run)?;
            let mut events: Vec<HistoryEvent> = Vec::new();
            let mut after = 0;
            loop {
                let next = s.history_page(run, after, page)?;
                events.extend(next.events);
                match next.next_sequence {
                    Some(sequence) if sequence > after => after = sequence,
                    _ => break,
                }
            }
            Ok((head, events))
        })?;
        let history: Vec<Value> = events
            .iter()
            .map(|e| {
                let id = e.sequence + 1;
                json!({
                    "id": id.to_string(),
                    "sequence": id,
                    "type": e.event_type.as_str(),
                    "payload": e.payload,
                    "recorded_at": e.recorded_at_ms.map(wire::timestamp),
                })
            })
            .collect();
        let last = events.last().map_or(0, |e| e.sequence + 1);
        let mut bundle = json!({
            "schema": BUNDLE_SCHEMA,
            "schema_version": 1,
            "exported_at": wire::timestamp(crate::unix_ms()),
            "workflow": {
                "instance_id": head.workflow_id,
                "run_id": wire::run_id(head.id),
                "workflow_type": head.workflow_type,
                "namespace": head.namespace,
                "task_queue": head.task_queue,
                "status": head.status.as_str(),
                "memo": head.memo,
                "search_attributes": head.search_attributes,
                "last_history_sequence": last,
            },
            "payloads": {},
            "history_events": history,
            "commands": [],
            "signals": [],
            "updates": [],
            "tasks": [],
            "activities": [],
            "timers": [],
            "failures": [],
            "links": {
                "sections_in_history": [
                    "commands", "signals", "updates", "tasks", "activities", "timers", "failures",
                ],
            },
            "redaction": { "applied": false, "paths": [] },
            "codec_schemas": {},
            "payload_manifest": { "entries": [] },
        });
        let canonical = canonical_json(&bundle);
        let checksum = hex(&Sha256::digest(canonical.as_bytes()));
        bundle["integrity"] = json!({
            "canonicalization": "json-recursive-ksort-v1",
            "checksum_algorithm": "sha256",
            "checksum": checksum,
        });
        Ok(bundle)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `json-recursive-ksort-v1`: keys sorted by code point at every depth, no
/// whitespace, strings JSON-escaped with every non-ASCII character as
/// UTF-16 `\uXXXX` (lower-case hex), floats as the verifier writes them.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(&map[key.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        Value::Number(n) if n.is_f64() => out.push_str(&float(n.as_f64().unwrap_or(0.0))),
        other => out.push_str(&other.to_string()),
    }
}

fn write_string(s: &str, out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) >= 0x80 => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as the verifier writes it: shortest round-trip digits, fixed
/// notation for decimal exponents -4 to 16 (with `.0` when integral),
/// else `d.ddde±x`.
fn float(f: f64) -> String {
    // `{:e}` is the shortest round-trip form, `d.ddde-x`.
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..17).contains(&exponent) {
        let negative = mantissa.starts_with('-');
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        let point = 1 + exponent; // digits before the decimal point
        let mut fixed = if point <= 0 {
            format!(
                "0.{}{}",
                "0".repeat(usize::try_from(-point).unwrap_or(0)),
                digits
            )
        } else {
            let point = usize::try_from(point).unwrap_or(0);
            if digits.len() <= point {
                format!("{}{}.0", digits, "0".repeat(point - digits.len()))
            } else {
                format!("{}.{}", &digits[..point], &digits[point..])
            }
        };
        if negative {
            fixed.insert(0, '-');
        }
        fixed
    } else {
        let mantissa = if mantissa.contains('.') {
            mantissa.to_owned()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}e{exponent:+}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth_and_escapes_non_ascii() {
        let value =
            json!({ "b": [{ "z": 1, "a": "é😀" }], "a": null, "c": "line\nbreak/\u{7f}\u{1f}" });
        assert_eq!(
            canonical_json(&value),
            concat!(
                r#"{"a":null,"b":[{"a":"\u00e9\ud83d\ude00","z":1}],"c":"line\nbreak/"#,
                "\u{7f}",
                r#"\u001f"}"#
            )
        );
    }

    #[test]
    fn floats_are_written_as_the_verifier_writes_them() {
        for (f, text) in [
            (1.5, "1.5"),
            (0.0001, "0.0001"),
            (0.00001, "1.0e-5"),
            (1e16, "10000000000000000.0"),
            (1e17, "1.0e+17"),
            (-2.5e-7, "-2.5e-7"),
            (123.456, "123.456"),
            (3.0, "3.0"),
        ] {
            assert_eq!(float(f), text, "{f}");
        }
    }
}
