//! The published SDKs' Avro payload value, decoded and encoded for the one
//! schema they use (`durable_workflow.protocol.Value`, CRC-64-AVRO
//! fingerprint `e2a33dff55802237`): a record of one union field whose
//! branches are null, boolean, long, double, bytes, string, an array of
//! values and a string-keyed map of values. A blob is standard base64 of
//! the Avro single-object frame: `c3 01`, the 8-byte fingerprint, the datum.
//!
//! Payloads stay opaque to the server; this exists for the memo, which both
//! SDKs send as such an envelope (`upsert_memo.entries`) and read back as
//! one (`MemoUpserted.entries` / `merged`) while describe shows it as JSON.
//! The JSON form: null, booleans, integers (long), other numbers (double),
//! strings, arrays and objects; bytes have no JSON form and are refused, as
//! are NaN and the infinities (which no SDK writes either). Maps are encoded
//! in key order (both SDKs' canonical order), and decoding refuses a
//! duplicate key, a truncated or over-long datum, invalid UTF-8, and nesting
//! deeper than [`MAX_DEPTH`].

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{Map, Number, Value};

/// The schema's CRC-64-AVRO fingerprint, as the frame carries it.
pub const FINGERPRINT: [u8; 8] = [0xe2, 0xa3, 0x3d, 0xff, 0x55, 0x80, 0x22, 0x37];
/// The Avro single-object marker.
const MAGIC: [u8; 2] = [0xc3, 0x01];
/// The codec name of an Avro payload envelope.
pub const CODEC: &str = "avro";
/// How deeply arrays and maps may nest (the recursion of the decoder).
pub const MAX_DEPTH: usize = 64;

/// Why a blob is not a value of the schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AvroError(String);

fn error(message: impl Into<String>) -> AvroError {
    AvroError(message.into())
}

/// Decodes a `{codec: "avro", blob}` payload envelope into its JSON form.
pub fn decode_envelope(envelope: &Value) -> Result<Value, AvroError> {
    let object = envelope
        .as_object()
        .filter(|o| o.len() == 2)
        .ok_or_else(|| error("expected exactly a {codec, blob} payload envelope"))?;
    if object.get("codec").and_then(Value::as_str) != Some(CODEC) {
        return Err(error("expected the avro codec"));
    }
    let blob = object
        .get("blob")
        .and_then(Value::as_str)
        .ok_or_else(|| error("expected a string blob"))?;
    decode_blob(blob)
}

/// Decodes a base64 blob (an Avro single-object frame).
pub fn decode_blob(blob: &str) -> Result<Value, AvroError> {
    let bytes = BASE64
        .decode(blob)
        .map_err(|e| error(format!("invalid_payload_framing: not strict base64 ({e})")))?;
    decode_frame(&bytes)
}

/// Decodes an Avro single-object frame.
pub fn decode_frame(bytes: &[u8]) -> Result<Value, AvroError> {
    if bytes.len() < 10 || bytes[..2] != MAGIC {
        return Err(error(
            "invalid_payload_framing: expected the Avro single-object marker c301",
        ));
    }
    if bytes[2..10] != FINGERPRINT {
        let hex: String = bytes[2..10].iter().map(|b| format!("{b:02x}")).collect();
        return Err(error(format!(
            "unsupported_payload_schema: unknown fingerprint {hex}"
        )));
    }
    let mut reader = Reader {
        bytes: &bytes[10..],
        at: 0,
    };
    let value = reader.value(0)?;
    if reader.at != reader.bytes.len() {
        return Err(error(format!(
            "invalid_payload_framing: {} trailing bytes after the datum",
            reader.bytes.len() - reader.at
        )));
    }
    Ok(value)
}

/// Encodes `value` as a `{codec: "avro", blob}` payload envelope.
pub fn encode_envelope(value: &Value) -> Result<Value, AvroError> {
    let mut frame = Vec::with_capacity(64);
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&FINGERPRINT);
    write_value(&mut frame, value, 0)?;
    Ok(serde_json::json!({ "codec": CODEC, "blob": BASE64.encode(frame) }))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], AvroError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| error(format!("invalid_payload_framing: truncated {what}")))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    /// A zigzag varint long.
    fn long(&mut self, what: &str) -> Result<i64, AvroError> {
        let mut raw: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1, what)?[0];
            raw |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                // Zigzag: 0, -1, 1, -2, … (the cast reinterprets the bits).
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
        }
        Err(error(format!(
            "invalid_payload_framing: over-long varint in {what}"
        )))
    }

    /// A length (of bytes, or of a block's items) that the rest can hold.
    fn length(&mut self, what: &str) -> Result<usize, AvroError> {
        let n = self.long(what)?;
        let left = self.bytes.len() - self.at;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= left)
            .ok_or_else(|| error(format!("invalid_payload_framing: bad length {n} of {what}")))
    }

    fn string(&mut self, what: &str) -> Result<String, AvroError> {
        let n = self.length(what)?;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| error(format!("invalid_payload_framing: {what} is not UTF-8")))
    }

    /// The item count of the next block (0 ends the array or map).
    fn block(&mut self, what: &str) -> Result<usize, AvroError> {
        let count = self.long(what)?;
        if count < 0 {
            // A negative count is followed by the block's size in bytes.
            self.long(what)?;
        }
        let count = count.unsigned_abs();
        let left = self.bytes.len() - self.at;
        // Every item takes at least one byte.
        usize::try_from(count)
            .ok()
            .filter(|n| *n <= left)
            .ok_or_else(|| {
                error(format!(
                    "invalid_payload_framing: bad count {count} of {what}"
                ))
            })
    }

    fn value(&mut self, depth: usize) -> Result<Value, AvroError> {
        if depth > MAX_DEPTH {
            return Err(error(format!(
                "invalid_payload_framing: values nest deeper than {MAX_DEPTH}"
            )));
        }
        Ok(match self.long("union branch")? {
            0 => Value::Null,
            1 => match self.take(1, "boolean")?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                other => {
                    return Err(error(format!(
                        "invalid_payload_framing: boolean byte {other}"
                    )))
                }
            },
            2 => Value::Number(self.long("long")?.into()),
            3 => {
                let raw: [u8; 8] = self.take(8, "double")?.try_into().expect("eight bytes");
                let double = f64::from_le_bytes(raw);
                Value::Number(
                    Number::from_f64(double)
                        .ok_or_else(|| error("invalid_payload_framing: NaN or infinite double"))?,
                )
            }
            4 => {
                let n = self.length("bytes")?;
                self.take(n, "bytes")?;
                return Err(error(
                    "bytes values have no JSON form; send the value as a string",
                ));
            }
            5 => Value::String(self.string("string")?),
            6 => {
                let mut items = Vec::new();
                loop {
                    let count = self.block("array")?;
                    if count == 0 {
                        break;
                    }
                    for _ in 0..count {
                        items.push(self.value(depth + 1)?);
                    }
                }
                Value::Array(items)
            }
            7 => {
                let mut map = Map::new();
                loop {
                    let count = self.block("map")?;
                    if count == 0 {
                        break;
                    }
                    for _ in 0..count {
                        let key = self.string("map key")?;
                        let value = self.value(depth + 1)?;
                        if map.insert(key.clone(), value).is_some() {
                            return Err(error(format!(
                                "invalid_payload_framing: duplicate map key {key:?}"
                            )));
                        }
                    }
                }
                Value::Object(map)
            }
            other => {
                return Err(error(format!(
                    "invalid_payload_framing: union branch {other} is not in the schema"
                )))
            }
        })
    }
}

fn write_long(out: &mut Vec<u8>, n: i64) {
    // Zigzag, then 7 bits a byte (the casts reinterpret the bits).
    let mut raw = ((n << 1) ^ (n >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

fn write_string(out: &mut Vec<u8>, text: &str) {
    write_long(out, i64::try_from(text.len()).unwrap_or(i64::MAX));
    out.extend_from_slice(text.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &Value, depth: usize) -> Result<(), AvroError> {
    if depth > MAX_DEPTH {
        return Err(error(format!("values nest deeper than {MAX_DEPTH}")));
    }
    match value {
        Value::Null => write_long(out, 0),
        Value::Bool(b) => {
            write_long(out, 1);
            out.push(u8::from(*b));
        }
        Value::Number(n) => match n.as_i64() {
            Some(long) => {
                write_long(out, 2);
                write_long(out, long);
            }
            None => {
                let double = n
                    .as_f64()
                    .filter(|d| d.is_finite())
                    .ok_or_else(|| error(format!("{n} has no double form")))?;
                write_long(out, 3);
                out.extend_from_slice(&double.to_le_bytes());
            }
        },
        Value::String(text) => {
            write_long(out, 5);
            write_string(out, text);
        }
        Value::Array(items) => {
            write_long(out, 6);
            if !items.is_empty() {
                write_long(out, i64::try_from(items.len()).unwrap_or(i64::MAX));
                for item in items {
                    write_value(out, item, depth + 1)?;
                }
            }
            write_long(out, 0);
        }
        Value::Object(map) => {
            write_long(out, 7);
            if !map.is_empty() {
                write_long(out, i64::try_from(map.len()).unwrap_or(i64::MAX));
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for key in keys {
                    write_string(out, key);
                    write_value(out, &map[key.as_str()], depth + 1)?;
                }
            }
            write_long(out, 0);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Wire vectors from the Rust SDK's `schema/avro-value-v1-golden.json`
    /// (durable-workflow 4.10.2, MIT): what the SDKs write must decode to
    /// what they meant, and what the server writes must be those bytes.
    const GOLDEN: &[(&str, &str)] = &[
        ("null", "wwHioz3/VYAiNwA="),
        ("false", "wwHioz3/VYAiNwIA"),
        ("true", "wwHioz3/VYAiNwIB"),
        ("-9223372036854775808", "wwHioz3/VYAiNwT///////////8B"),
        ("9223372036854775807", "wwHioz3/VYAiNwT+//////////8B"),
        ("7", "wwHioz3/VYAiNwQO"),
        ("7.0", "wwHioz3/VYAiNwYAAAAAAAAcQA=="),
        ("-0.0", "wwHioz3/VYAiNwYAAAAAAAAAgA=="),
        ("\"héllo\"", "wwHioz3/VYAiNwoMaMOpbGxv"),
        (r#"{"a":1,"b":[false]}"#, "wwHioz3/VYAiNw4EAmEEAgJiDAICAAAA"),
        ("{}", "wwHioz3/VYAiNw4A"),
        (r#"{"0":"zero"}"#, "wwHioz3/VYAiNw4CAjAKCHplcm8A"),
        (
            r#"{"0":"zero","1":"one"}"#,
            "wwHioz3/VYAiNw4EAjAKCHplcm8CMQoGb25lAA==",
        ),
    ];

    #[test]
    fn the_sdks_golden_vectors_decode_and_encode_byte_for_byte() {
        for (json_text, blob) in GOLDEN {
            let expected: Value = serde_json::from_str(json_text).unwrap();
            assert_eq!(decode_blob(blob).unwrap(), expected, "{json_text}");
            let envelope = encode_envelope(&expected).unwrap();
            assert_eq!(envelope["blob"], *blob, "{json_text}");
            assert_eq!(envelope["codec"], "avro");
        }
        // The SDK's array case holds bytes, which have no JSON form.
        let array = "wwHioz3/VYAiNwwMAAIBBA4GAAAAAAAAHEAIBAD/Cgh0ZXh0AA==";
        assert!(decode_blob(array).unwrap_err().0.contains("bytes"));
        // A map written in another key order decodes to the same value.
        let ab = [
            0x0e, 0x04, 0x02, b'a', 0x04, 0x02, 0x02, b'b', 0x0a, 0x02, b'x', 0x00,
        ];
        let ba = [
            0x0e, 0x04, 0x02, b'b', 0x0a, 0x02, b'x', 0x02, b'a', 0x04, 0x02, 0x00,
        ];
        let (ab, ba) = (
            decode_frame(&encode_frame_raw(&ab)).unwrap(),
            decode_frame(&encode_frame_raw(&ba)).unwrap(),
        );
        assert_eq!(ab, json!({ "a": 1, "b": "x" }));
        assert_eq!(ab, ba);
    }

    #[test]
    fn the_sdks_malformed_frames_are_refused_with_their_reason() {
        let cases = [
            ("", "invalid_payload_framing"),
            ("JSUl", "invalid_payload_framing"),
            ("wwE=", "invalid_payload_framing"),
            ("wwHioz3/VYAiNw==", "invalid_payload_framing"),
            ("wwHioz3/VYAiNwI=", "invalid_payload_framing"),
            ("wwHioz3/VYAiNwQ=", "invalid_payload_framing"),
            ("wwHioz3/VYAiNwY=", "invalid_payload_framing"),
            ("wwHioz3/VYAiNwg=", "invalid_payload_framing"),
            ("wwHioz3/VYAiNwo=", "invalid_payload_framing"),
            ("wwHioz3/VYAiNww=", "invalid_payload_framing"),
            ("wwHioz3/VYAiNw4=", "invalid_payload_framing"),
            ("wwHioz3/VYAiNwAA", "invalid_payload_framing"),
            ("wwHioz3/VYAiNxA=", "invalid_payload_framing"),
            (
                "wwHioz3/VYAiNwwCDgICeAYAAAAAAAD4fwAA",
                "invalid_payload_framing",
            ),
            (
                "wwHioz3/VYAiNwwCDgICeAYAAAAAAADwfwAA",
                "invalid_payload_framing",
            ),
            (
                "wwHioz3/VYAiNwwCDgICeAYAAAAAAADw/wAA",
                "invalid_payload_framing",
            ),
            ("wwHioz3/VYAiNwwCDgICeAoC/wAA", "invalid_payload_framing"),
            ("wwEdoz3/VYAiNwA=", "unsupported_payload_schema"),
        ];
        for (blob, reason) in cases {
            let refused = decode_blob(blob).unwrap_err();
            assert!(refused.0.contains(reason), "{blob}: {refused}");
        }
        let duplicate = encode_frame_raw(&[0x0e, 0x04, 0x02, b'a', 0x00, 0x02, b'a', 0x00, 0x00]);
        assert!(decode_frame(&duplicate)
            .unwrap_err()
            .0
            .contains("duplicate"));
        let mut deep = Vec::new();
        for _ in 0..=MAX_DEPTH + 1 {
            deep.extend_from_slice(&[0x0c, 0x02]);
        }
        deep.push(0x00);
        assert!(decode_frame(&encode_frame_raw(&deep))
            .unwrap_err()
            .0
            .contains("deeper"));
        assert!(decode_envelope(&json!({ "codec": "json", "blob": "wwHioz3/VYAiNwA=" })).is_err());
        assert!(decode_envelope(&json!({ "codec": "avro" })).is_err());
    }

    fn encode_frame_raw(datum: &[u8]) -> Vec<u8> {
        let mut frame = MAGIC.to_vec();
        frame.extend_from_slice(&FINGERPRINT);
        frame.extend_from_slice(datum);
        frame
    }

    /// JSON values with an Avro form: every kind, nested a few levels.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::Number(n.into())),
            any::<f64>()
                .prop_filter("finite", |d| d.is_finite())
                .prop_map(|d| Value::Number(Number::from_f64(d).unwrap())),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn every_json_value_round_trips(value in json_value()) {
            let envelope = encode_envelope(&value).unwrap();
            prop_assert_eq!(decode_envelope(&envelope).unwrap(), value);
        }

        #[test]
        fn arbitrary_bytes_never_panic(datum in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_frame(&encode_frame_raw(&datum));
        }

        #[test]
        fn negative_block_counts_decode_like_positive_ones(items in prop::collection::vec(any::<i64>(), 1..5)) {
            // [6, -n, size, items…, 0]: the block form with its byte size.
            let mut body = Vec::new();
            for item in &items {
                write_long(&mut body, 2);
                write_long(&mut body, *item);
            }
            let mut datum = Vec::new();
            write_long(&mut datum, 6);
            write_long(&mut datum, -(items.len() as i64));
            write_long(&mut datum, body.len() as i64);
            datum.extend_from_slice(&body);
            datum.push(0);
            let decoded = decode_frame(&encode_frame_raw(&datum)).unwrap();
            prop_assert_eq!(decoded, Value::Array(items.into_iter().map(|n| n.into()).collect()));
        }
    }
}
