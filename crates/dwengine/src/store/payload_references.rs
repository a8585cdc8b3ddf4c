//! The two forms of an external payload reference, and the conversion
//! between them that every history write and read goes through.
//!
//! History stores a reference in the structural-limit contract's form,
//! the `durable-workflow.v2.external-payload-reference.v1` envelope with
//! the hash ([`to_stored_form`]): `{codec, external_storage: {schema, uri,
//! sha256, size_bytes, codec}}` whose uri is
//! `dw-runtime://external-payloads/v1/<reference_id>`. The published SDK
//! reads that envelope only through a storage driver of its own, so every
//! history read hands the SDK's runtime envelope back ([`to_wire_form`]);
//! other `external_storage` envelopes (the SDK's own drivers) pass both
//! ways untouched.
//!
//! Pure JSON rewriting, with no rows: it sits at the store's bottom layer
//! so the row helpers that append history ([`rows`](super::rows)) and the
//! history reader use it without importing the payload rows and their
//! quota ([`external_payloads`](super::external_payloads)), which sit above
//! the row helpers. It uses only the store's error type.

use serde_json::Value;

use crate::store::error::Error;

/// The reference envelope history stores (the structural-limit contract's).
pub const STORED_REFERENCE_SCHEMA: &str = "durable-workflow.v2.external-payload-reference.v1";
/// The SDK's runtime reference envelope, what every API answer carries.
pub const RUNTIME_REFERENCE_SCHEMA: &str =
    "durable-workflow.v2.runtime-external-payload-reference.v1";
/// The uri of a payload stored here, before its reference id.
pub const RUNTIME_URI_PREFIX: &str = "dw-runtime://external-payloads/v1/";

/// Rewrites every runtime envelope (`{codec, external_payload}` with the
/// SDK's five-field reference) inside `value` into the stored form;
/// answers whether anything changed.
pub fn to_stored_form(value: &mut Value) -> bool {
    rewrite(value, stored_envelope)
}

/// Rewrites every stored-form envelope naming a payload of this store
/// inside `value` back into the SDK's runtime envelope; answers whether
/// anything changed.
pub fn to_wire_form(value: &mut Value) -> bool {
    rewrite(value, runtime_envelope)
}

/// Replaces every value inside `value` that `envelope` maps (without
/// looking inside a replaced one); answers whether anything changed.
fn rewrite(value: &mut Value, envelope: fn(&Value) -> Option<Value>) -> bool {
    if let Some(replacement) = envelope(value) {
        *value = replacement;
        return true;
    }
    let mut changed = false;
    match value {
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| changed |= rewrite(v, envelope)),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| changed |= rewrite(v, envelope)),
        _ => {}
    }
    changed
}

/// Parses a stored history payload, in the SDK's runtime form.
pub(crate) fn history_payload(text: &str) -> Result<Value, Error> {
    let mut value: Value = serde_json::from_str(text)?;
    if text.contains(RUNTIME_URI_PREFIX) {
        to_wire_form(&mut value);
    }
    Ok(value)
}

/// The text history stores for `payload`: its references in the stored form.
pub(crate) fn history_text(payload: &Value) -> Result<String, Error> {
    let text = serde_json::to_string(payload)?;
    if !text.contains("\"external_payload\"") {
        return Ok(text);
    }
    let mut stored = payload.clone();
    if to_stored_form(&mut stored) {
        return Ok(serde_json::to_string(&stored)?);
    }
    Ok(text)
}

/// The fields of a reference: (reference id, codec, size, sha256).
type Fields<'a> = (&'a str, &'a str, u64, &'a str);

fn stored_envelope(value: &Value) -> Option<Value> {
    let (codec, (id, inner_codec, size, sha)) = envelope(value, "external_payload", |r| {
        (r.len() == 5 && r.get("schema")?.as_str()? == RUNTIME_REFERENCE_SCHEMA).then_some(())?;
        Some((
            r.get("reference_id")?.as_str()?,
            r.get("codec")?.as_str()?,
            r.get("size_bytes")?.as_u64()?,
            r.get("sha256")?.as_str()?,
        ))
    })?;
    Some(serde_json::json!({
        "codec": codec,
        "external_storage": {
            "schema": STORED_REFERENCE_SCHEMA,
            "uri": format!("{RUNTIME_URI_PREFIX}{id}"),
            "sha256": sha, "size_bytes": size, "codec": inner_codec,
        },
    }))
}

/// The SDK's runtime envelope of a stored-form envelope naming a payload
/// of this store (`dw-runtime:` uri); `None` for anything else.
pub fn runtime_envelope(value: &Value) -> Option<Value> {
    let (codec, (id, inner_codec, size, sha)) = envelope(value, "external_storage", |r| {
        (r.len() == 5 && r.get("schema")?.as_str()? == STORED_REFERENCE_SCHEMA).then_some(())?;
        let id = r.get("uri")?.as_str()?.strip_prefix(RUNTIME_URI_PREFIX)?;
        id.starts_with("ep_").then_some(())?;
        Some((
            id,
            r.get("codec")?.as_str()?,
            r.get("size_bytes")?.as_u64()?,
            r.get("sha256")?.as_str()?,
        ))
    })?;
    Some(serde_json::json!({
        "codec": codec,
        "external_payload": {
            "schema": RUNTIME_REFERENCE_SCHEMA,
            "reference_id": id, "codec": inner_codec, "size_bytes": size, "sha256": sha,
        },
    }))
}

/// `{codec, <key>: reference}` with exactly those two keys, and the
/// reference's fields as `fields` reads them.
fn envelope<'a>(
    value: &'a Value,
    key: &str,
    fields: impl FnOnce(&'a serde_json::Map<String, Value>) -> Option<Fields<'a>>,
) -> Option<(&'a Value, Fields<'a>)> {
    let map = value.as_object().filter(|m| m.len() == 2)?;
    let codec = map.get("codec")?;
    Some((codec, fields(map.get(key)?.as_object()?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_stores_the_contract_envelope_and_reads_back_the_sdks() {
        let runtime = serde_json::json!({ "codec": "avro", "external_payload": {
            "schema": RUNTIME_REFERENCE_SCHEMA, "reference_id": "ep_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "codec": "avro", "size_bytes": 300, "sha256": "a".repeat(64) } });
        let payload =
            serde_json::json!({ "arguments": [runtime, { "codec": "avro", "blob": "x" }] });
        let text = history_text(&payload).unwrap();
        let stored: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            stored["arguments"][0],
            serde_json::json!({ "codec": "avro", "external_storage": {
                "schema": STORED_REFERENCE_SCHEMA,
                "uri": "dw-runtime://external-payloads/v1/ep_01ARZ3NDEKTSV4RRFFQ69G5FAV",
                "sha256": "a".repeat(64), "size_bytes": 300, "codec": "avro" } })
        );
        assert!(!text.contains(RUNTIME_REFERENCE_SCHEMA), "{text}");
        assert_eq!(history_payload(&text).unwrap(), payload);
        // The SDK's own drivers' envelopes and inline payloads pass untouched.
        let driver = serde_json::json!({ "codec": "avro", "external_storage": {
            "schema": STORED_REFERENCE_SCHEMA, "uri": "s3://bucket/k", "sha256": "b".repeat(64),
            "size_bytes": 1, "codec": "avro" } });
        let text = history_text(&driver).unwrap();
        assert_eq!(history_payload(&text).unwrap(), driver);
        // A runtime envelope with an extra field is not one to rewrite.
        let mut odd = runtime.clone();
        odd["external_payload"]["extra"] = 1.into();
        assert!(!to_stored_form(&mut odd.clone()));
    }
}
