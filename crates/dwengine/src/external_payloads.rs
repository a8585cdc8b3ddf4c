//! Runtime external payload storage, its per-namespace quota and
//! `dw_runtime_external_payload_namespace_usage`.
//!
//! Why it exists: a payload over `payload_size_bytes` fails its run, and
//! the structural-limit contract's way out is external storage — the SDK
//! uploads an encoded payload over the namespace's threshold to
//! `POST /api/external-payloads/v1`, the engine keeps the bytes in SQLite,
//! and requests carry only the hashed reference envelope
//! (`durable-workflow.v2.runtime-external-payload-reference.v1`: reference
//! id, codec, size and SHA-256), which is what the size limit then sees.
//! History records it as the contract's
//! `durable-workflow.v2.external-payload-reference.v1` envelope and reads
//! it back in the SDK's form (see [`crate::store::external_payloads`]).
//! Readers fetch the bytes from `GET /api/external-payloads/v1/{id}` and
//! verify the hash themselves.
//!
//! Stored bytes are durable state a namespace can grow at will, so a
//! configured namespace may hold at most so many bytes and objects. SQL
//! rows are the authority: usage is read in the insert's own transaction
//! (see [`crate::store::external_payloads`]). The cache carries only
//! telemetry: one two-minute rejection counter and one log-suppression key
//! per namespace, fixed reason and minute under
//! `server:external-payload-quota:`. A namespace without a quota writes no
//! key.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dwpolicy::MetricGuard;
use serde_json::{json, Value};

use crate::cache::{Cache, NamespaceRejections, RejectionLog};
use crate::durable_state::MetricError;
use crate::server::auth::Role;
use crate::store::external_payloads::{PayloadRecord, PayloadUsage};

/// The transport manifest's schema (`namespace.external_payload_storage.transport`).
pub const TRANSPORT_SCHEMA: &str = "durable-workflow.v2.runtime-external-payload-transport.v1";
/// The upload answer's schema.
pub const UPLOAD_SCHEMA: &str = "durable-workflow.v2.runtime-external-payload-upload.v1";
/// The reference envelope history carries instead of the bytes.
pub const REFERENCE_SCHEMA: &str = crate::store::external_payloads::RUNTIME_REFERENCE_SCHEMA;
/// The upload route.
pub const UPLOAD_PATH: &str = "/api/external-payloads/v1";
/// The fetch route as the manifest advertises it.
pub const FETCH_PATH_TEMPLATE: &str = "/api/external-payloads/v1/{referenceId}";
/// The only payload codec of Durable Workflow 2.
pub const CODEC: &str = "avro";
/// Header naming the payload codec (upload and fetch).
pub const CODEC_HEADER: &str = "x-durable-workflow-payload-codec";
/// Header naming the payload length (upload and fetch).
pub const SIZE_HEADER: &str = "x-durable-workflow-payload-size";
/// Header naming the payload's SHA-256 (upload and fetch).
pub const SHA256_HEADER: &str = "x-durable-workflow-payload-sha256";
/// The per-request timeout the manifest advertises to clients.
pub const REQUEST_TIMEOUT_SECONDS: u64 = 30;

/// The transport's settings (`server.external_payload_transport.*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalPayloadSettings {
    /// Encoded payloads longer than this go to external storage (0: the
    /// transport is off and references are refused).
    pub threshold_bytes: u64,
    /// The largest payload one upload may store.
    pub max_payload_bytes: u64,
    /// Bytes a namespace may store (0: no quota).
    pub max_bytes_per_namespace: u64,
    /// Payloads a namespace may store (0: no quota).
    pub max_objects_per_namespace: u64,
    /// Per-namespace overrides (`DW_EXTERNAL_PAYLOAD_NAMESPACE_LIMITS`).
    pub namespace_limits: HashMap<String, QuotaLimits>,
    /// The token roles that may upload (`DW_EXTERNAL_PAYLOAD_UPLOAD_ROLES`);
    /// fetching a payload is open to every role of the namespace.
    pub upload_roles: Vec<Role>,
}

impl ExternalPayloadSettings {
    /// The default largest upload: 16 MiB.
    pub const DEFAULT_MAX_PAYLOAD_BYTES: u64 = 16 * 1024 * 1024;
    /// The default byte quota of a namespace: 1 GiB. Without one, a single
    /// client grew the database by 978 MB in 10 s. 0 turns it off.
    pub const DEFAULT_MAX_BYTES_PER_NAMESPACE: u64 = 1024 * 1024 * 1024;
    /// The default object quota of a namespace: 10,000 payloads.
    pub const DEFAULT_MAX_OBJECTS_PER_NAMESPACE: u64 = 10_000;
    /// Config key of [`Self::threshold_bytes`].
    pub const THRESHOLD_KEY: &'static str = "server.external_payload_transport.threshold_bytes";
    /// Config key of [`Self::max_payload_bytes`].
    pub const MAX_PAYLOAD_KEY: &'static str = "server.external_payload_transport.max_payload_bytes";
    /// Config key of [`Self::max_bytes_per_namespace`].
    pub const MAX_BYTES_KEY: &'static str =
        "server.external_payload_transport.max_bytes_per_namespace";
    /// Config key of [`Self::max_objects_per_namespace`].
    pub const MAX_OBJECTS_KEY: &'static str =
        "server.external_payload_transport.max_objects_per_namespace";
    /// The per-namespace override variable.
    pub const NAMESPACE_LIMITS_ENV: &'static str = "DW_EXTERNAL_PAYLOAD_NAMESPACE_LIMITS";
    /// Config key of [`Self::upload_roles`].
    pub const UPLOAD_ROLES_KEY: &'static str = "server.external_payload_transport.upload_roles";
    /// The variable of [`Self::upload_roles`].
    pub const UPLOAD_ROLES_ENV: &'static str = "DW_EXTERNAL_PAYLOAD_UPLOAD_ROLES";
    /// The roles that may upload by default: all three. Both published
    /// SDKs send any payload over the threshold through the upload, from a
    /// client (start input, signal and update arguments: operator or admin
    /// tokens) and from a worker (activity results, workflow commands:
    /// worker tokens, with the completion context), so each role needs it
    /// unless a deployment knows its payloads stay small on that side.
    pub const DEFAULT_UPLOAD_ROLES: [Role; 3] = Role::ALL;

    /// Whether a token of `role` may upload.
    pub fn may_upload(&self, role: Role) -> bool {
        self.upload_roles.contains(&role)
    }

    /// Whether the transport is on.
    pub fn enabled(&self) -> bool {
        self.threshold_bytes > 0
    }

    /// `namespace`'s effective quota: its override, else the defaults.
    pub fn limits(&self, namespace: &str) -> QuotaLimits {
        let default = |n: u64| (n > 0).then_some(n);
        let over = self.namespace_limits.get(namespace);
        QuotaLimits {
            max_bytes: over
                .and_then(|o| o.max_bytes)
                .or(default(self.max_bytes_per_namespace)),
            max_objects: over
                .and_then(|o| o.max_objects)
                .or(default(self.max_objects_per_namespace)),
        }
    }

    /// `namespace.external_payload_storage` of the discovery document.
    pub fn discovery(&self, namespace: &str) -> Value {
        if !self.enabled() {
            return json!({ "enabled": false, "status": "disabled", "driver": null });
        }
        let limits = self.limits(namespace);
        json!({
            "enabled": true,
            "status": "available",
            "driver": "runtime",
            "mode": "authenticated_namespace_runtime",
            "threshold_bytes": self.threshold_bytes,
            "integrity_required": true,
            "quota": { "max_bytes": limits.max_bytes, "max_objects": limits.max_objects },
            // Client-side `external_storage` envelopes are opaque here, so the
            // SDK's own storage drivers keep working next to the transport.
            "direct_provider_adapters": { "capability_negotiated": true, "enabled": true },
            "transport": {
                "schema": TRANSPORT_SCHEMA,
                "version": 1,
                "mode": "authenticated_namespace_runtime",
                "reference_schema": REFERENCE_SCHEMA,
                "upload": { "method": "POST", "path": UPLOAD_PATH,
                            "content_type": "application/octet-stream" },
                "fetch": { "method": "GET", "path_template": FETCH_PATH_TEMPLATE },
                "limits": { "max_payload_bytes": self.max_payload_bytes,
                            "request_timeout_seconds": REQUEST_TIMEOUT_SECONDS },
            },
        })
    }
}

impl Default for ExternalPayloadSettings {
    fn default() -> Self {
        ExternalPayloadSettings {
            threshold_bytes: 0,
            max_payload_bytes: Self::DEFAULT_MAX_PAYLOAD_BYTES,
            max_bytes_per_namespace: Self::DEFAULT_MAX_BYTES_PER_NAMESPACE,
            max_objects_per_namespace: Self::DEFAULT_MAX_OBJECTS_PER_NAMESPACE,
            namespace_limits: HashMap::new(),
            upload_roles: Self::DEFAULT_UPLOAD_ROLES.to_vec(),
        }
    }
}

/// One namespace's quota (`None`: unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Stored bytes.
    pub max_bytes: Option<u64>,
    /// Stored payloads.
    pub max_objects: Option<u64>,
}

impl QuotaLimits {
    fn configured(&self) -> bool {
        self.max_bytes.is_some() || self.max_objects.is_some()
    }
}

/// Parses `DW_EXTERNAL_PAYLOAD_NAMESPACE_LIMITS`: comma-separated
/// `namespace:max_bytes=N` / `namespace:max_objects=N` items.
pub fn parse_namespace_limits(spec: &str) -> Result<HashMap<String, QuotaLimits>, String> {
    let mut limits: HashMap<String, QuotaLimits> = HashMap::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let shape =
            || format!("{item:?}: expected namespace:max_bytes=N or namespace:max_objects=N");
        let (scope, value) = item.split_once('=').ok_or_else(shape)?;
        let (namespace, field) = scope.rsplit_once(':').ok_or_else(shape)?;
        let namespace = namespace.trim();
        if namespace.is_empty() {
            return Err(format!("{item:?}: the namespace is empty"));
        }
        let n: u64 = value
            .trim()
            .parse()
            .map_err(|_| format!("{item:?}: the limit is not a non-negative integer"))?;
        let entry = limits.entry(namespace.to_owned()).or_default();
        match field.trim() {
            "max_bytes" => entry.max_bytes = Some(n),
            "max_objects" => entry.max_objects = Some(n),
            other => {
                return Err(format!(
                    "{item:?}: unknown field {other:?} (one of max_bytes, max_objects)"
                ))
            }
        }
    }
    Ok(limits)
}

/// The fixed inventory of quota rejection reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaReason {
    /// The upload would pass the namespace's byte quota (429).
    BytesExhausted,
    /// The namespace holds its quota of payloads (429).
    ObjectsExhausted,
    /// The usage could not be read (503).
    Unavailable,
}

impl QuotaReason {
    /// The inventory, in report order.
    pub const ALL: [QuotaReason; 3] = [
        QuotaReason::BytesExhausted,
        QuotaReason::ObjectsExhausted,
        QuotaReason::Unavailable,
    ];

    /// The reason's wire and metric name.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaReason::BytesExhausted => "external_payload_namespace_bytes_exhausted",
            QuotaReason::ObjectsExhausted => "external_payload_namespace_objects_exhausted",
            QuotaReason::Unavailable => "external_payload_namespace_quota_unavailable",
        }
    }
}

/// Why an upload or a fetch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The namespace's quota refused the upload.
    #[error("{}", .reason.as_str())]
    Quota {
        /// The fixed reason.
        reason: QuotaReason,
        /// The resource's usage before the upload (absent when unreadable).
        used: Option<u64>,
        /// What the upload asks for (bytes or one object).
        requested: u64,
        /// The configured limit.
        limit: Option<u64>,
    },
    /// The payload is longer than the transport's `max_payload_bytes` (413).
    #[error("payload of {size} bytes exceeds the {limit}-byte external payload limit")]
    Oversized {
        /// Its length.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The declared size or hash does not match the bytes (422).
    #[error("{0}")]
    IntegrityMismatch(String),
    /// The request or reference is not one this transport takes (422).
    #[error("{0}")]
    Unsupported(String),
    /// No such reference in this namespace (404).
    #[error("external payload reference {0:?} was not found in this namespace")]
    NotFound(String),
    /// The transport is off on this server (503, not retryable).
    #[error("runtime external payload storage is not enabled on this server")]
    Disabled,
}

impl PayloadError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            PayloadError::Quota {
                reason: QuotaReason::Unavailable,
                ..
            }
            | PayloadError::Disabled => 503,
            PayloadError::Quota { .. } => 429,
            PayloadError::Oversized { .. } => 413,
            PayloadError::IntegrityMismatch(_) | PayloadError::Unsupported(_) => 422,
            PayloadError::NotFound(_) => 404,
        }
    }

    /// Seconds a client should wait before retrying a quota refusal: the
    /// body's `retry_after_seconds` and the `Retry-After` header. Capacity
    /// frees as payloads expire (a minute's scale); an unreadable usage is
    /// retried soon. Other refusals do not clear by waiting (no hint).
    pub fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            PayloadError::Quota {
                reason: QuotaReason::Unavailable,
                ..
            } => Some(1),
            PayloadError::Quota { .. } => Some(60),
            _ => None,
        }
    }

    /// The refusal body.
    pub fn body(&self) -> Value {
        let message = self.to_string();
        match self {
            PayloadError::Quota {
                reason,
                used,
                requested,
                limit,
            } => {
                let resource = match reason {
                    QuotaReason::BytesExhausted => Some("bytes"),
                    QuotaReason::ObjectsExhausted => Some("objects"),
                    QuotaReason::Unavailable => None,
                };
                let message = match reason {
                    QuotaReason::BytesExhausted => {
                        "External payload byte capacity is exhausted for this namespace."
                    }
                    QuotaReason::ObjectsExhausted => {
                        "External payload object capacity is exhausted for this namespace."
                    }
                    QuotaReason::Unavailable => {
                        "External payload namespace quota could not be evaluated."
                    }
                };
                json!({
                    "reason": reason.as_str(), "resource": resource, "current_value": used,
                    "requested": requested, "configured_limit": limit,
                    "retryable": true,
                    "retry_after_seconds": self.retry_after_seconds(),
                    "message": message,
                })
            }
            PayloadError::Oversized { size, limit } => json!({
                "reason": "external_payload_oversized", "size_bytes": size,
                "max_payload_bytes": limit, "retryable": false, "message": message,
            }),
            PayloadError::IntegrityMismatch(_) => json!({
                "reason": "external_payload_integrity_mismatch", "retryable": false,
                "message": message,
            }),
            PayloadError::Unsupported(_) => json!({
                "reason": "external_payload_unsupported", "retryable": false,
                "message": message,
            }),
            PayloadError::NotFound(id) => json!({
                "reason": "external_payload_not_found", "reference_id": id,
                "retryable": false, "message": message,
            }),
            PayloadError::Disabled => json!({
                "reason": "external_payload_unavailable", "retryable": false,
                "message": message,
            }),
        }
    }
}

/// The reference envelope of a stored payload.
pub fn reference(record: &PayloadRecord) -> Value {
    json!({
        "schema": REFERENCE_SCHEMA,
        "reference_id": record.reference_id,
        "codec": record.codec,
        "size_bytes": record.size_bytes,
        "sha256": record.sha256,
    })
}

/// Whether `id` has the reference-id shape (`ep_` + 26 Crockford base32).
pub fn is_reference_id(id: &str) -> bool {
    id.len() == 29
        && id.starts_with("ep_")
        && id[3..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b.is_ascii_uppercase() && !b"ILOU".contains(&b)))
}

/// Whether `sha256` is 64 lowercase hex digits.
pub fn is_sha256(sha256: &str) -> bool {
    sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The stored-payload identity a `{codec, external_payload}` envelope
/// claims, or why it is malformed. `Ok(None)`: not a reference envelope.
pub fn reference_of(envelope: &Value) -> Result<Option<PayloadRecord>, String> {
    let Some(object) = envelope.as_object() else {
        return Ok(None);
    };
    let Some(reference) = object.get("external_payload") else {
        return Ok(None);
    };
    if object.len() != 2 || !object.contains_key("codec") {
        return Err(
            "a runtime external payload envelope holds exactly codec and external_payload".into(),
        );
    }
    let fields = reference
        .as_object()
        .filter(|r| {
            r.len() == 5
                && ["schema", "reference_id", "codec", "size_bytes", "sha256"]
                    .iter()
                    .all(|k| r.contains_key(*k))
        })
        .ok_or(
            "external_payload must hold exactly schema, reference_id, codec, size_bytes and sha256",
        )?;
    if fields["schema"] != REFERENCE_SCHEMA {
        return Err(format!(
            "external_payload.schema must be {REFERENCE_SCHEMA}"
        ));
    }
    let id = fields["reference_id"]
        .as_str()
        .filter(|id| is_reference_id(id));
    let codec = fields["codec"].as_str().filter(|c| *c == CODEC);
    let size = fields["size_bytes"].as_u64();
    let sha = fields["sha256"].as_str().filter(|s| is_sha256(s));
    match (id, codec, size, sha) {
        (Some(id), Some(codec), Some(size), Some(sha)) if object["codec"] == codec => {
            Ok(Some(PayloadRecord {
                reference_id: id.to_owned(),
                codec: codec.to_owned(),
                size_bytes: size,
                sha256: sha.to_owned(),
            }))
        }
        _ => Err(
            "external_payload needs an ep_ reference_id, codec avro (equal to the envelope's), \
             a non-negative size_bytes and a lowercase hex sha256"
                .into(),
        ),
    }
}

/// Admits uploads of configured namespaces and counts refusals.
#[derive(Clone)]
pub struct RuntimeExternalPayloadQuota {
    cache: Arc<dyn Cache>,
    settings: Arc<ExternalPayloadSettings>,
}

impl RuntimeExternalPayloadQuota {
    /// The family of rejection counters and log-suppression keys.
    pub const PREFIX: &'static str = "server:external-payload-quota:";
    /// Counters and log keys live two minutes, so the current minute is whole.
    pub const BUCKET_TTL: Duration = Duration::from_secs(120);
    /// Its refusal counters and log-suppression keys.
    const REJECTIONS: NamespaceRejections = NamespaceRejections {
        prefix: Self::PREFIX,
        ttl: Self::BUCKET_TTL,
    };
    /// The metric this type reports.
    pub const METRIC: &'static str = "dw_runtime_external_payload_namespace_usage";

    /// A quota over `settings`.
    pub fn new(cache: Arc<dyn Cache>, settings: ExternalPayloadSettings) -> Self {
        RuntimeExternalPayloadQuota {
            cache,
            settings: Arc::new(settings),
        }
    }

    /// The transport's settings.
    pub fn settings(&self) -> &ExternalPayloadSettings {
        &self.settings
    }

    /// Whether one more payload of `size` bytes fits `limits`, given the
    /// namespace's `usage` (read in the insert's own transaction; `None`
    /// when unreadable). The object quota is checked first; a payload that
    /// brings the bytes exactly to the limit passes.
    pub fn check(
        limits: QuotaLimits,
        size: u64,
        usage: impl FnOnce() -> Option<PayloadUsage>,
    ) -> Result<(), PayloadError> {
        if !limits.configured() {
            return Ok(());
        }
        let Some(usage) = usage() else {
            return Err(PayloadError::Quota {
                reason: QuotaReason::Unavailable,
                used: None,
                requested: size,
                limit: None,
            });
        };
        if let Some(limit) = limits.max_objects {
            if usage.objects >= limit {
                return Err(PayloadError::Quota {
                    reason: QuotaReason::ObjectsExhausted,
                    used: Some(usage.objects),
                    requested: 1,
                    limit: Some(limit),
                });
            }
        }
        if let Some(limit) = limits.max_bytes {
            if size > limit.saturating_sub(usage.bytes) {
                return Err(PayloadError::Quota {
                    reason: QuotaReason::BytesExhausted,
                    used: Some(usage.bytes),
                    requested: size,
                    limit: Some(limit),
                });
            }
        }
        Ok(())
    }

    /// Counts a refusal in its minute bucket and logs it once per
    /// (namespace, reason, minute); telemetry never fails the refusal.
    pub fn record(&self, namespace: &str, reason: QuotaReason) {
        let reason = reason.as_str();
        let logged = Self::REJECTIONS.record(self.cache.as_ref(), namespace, reason);
        if logged == RejectionLog::Elected {
            tracing::warn!(
                namespace,
                reason,
                "Runtime external payload namespace quota rejected an object."
            );
        }
    }

    /// The metric payload and its disclosure: limits, SQL usage, remaining
    /// capacity and this minute's rejections per fixed reason.
    pub fn render(
        &self,
        guard: &MetricGuard,
        namespace: &str,
        usage: Option<PayloadUsage>,
    ) -> Result<(Value, Value), MetricError> {
        let reasons: Vec<&str> = QuotaReason::ALL.iter().map(|r| r.as_str()).collect();
        let disclosure = guard.disclose(
            Self::METRIC,
            [(
                "reason",
                json!({ "values": reasons, "selection": "fixed_three_reason_inventory" }),
            )],
        )?;
        let limits = self.settings.limits(namespace);
        let remaining = |limit: Option<u64>, used: Option<u64>| {
            limit.zip(used).map(|(l, u)| l.saturating_sub(u))
        };
        let (used_bytes, used_objects) = (usage.map(|u| u.bytes), usage.map(|u| u.objects));
        let (by_reason, total) = Self::REJECTIONS.this_minute(
            self.cache.as_ref(),
            namespace,
            &reasons,
            limits.configured(),
        )?;
        let payload = json!({
            "enabled": self.settings.enabled(),
            "configured": limits.configured(),
            "max_bytes": limits.max_bytes,
            "max_objects": limits.max_objects,
            "used_bytes": used_bytes,
            "used_objects": used_objects,
            "remaining_bytes": remaining(limits.max_bytes, used_bytes),
            "remaining_objects": remaining(limits.max_objects, used_objects),
            "measurement_status": if usage.is_some() { "available" } else { "unavailable" },
            "rejections_this_minute": total,
            "rejections_by_reason": by_reason,
        });
        Ok((
            payload,
            serde_json::to_value(&disclosure).unwrap_or(Value::Null),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn overrides_parse_strictly_and_fall_back_to_the_defaults() {
        let settings = ExternalPayloadSettings {
            max_bytes_per_namespace: 100,
            namespace_limits: parse_namespace_limits("a:max_objects=2, a:max_bytes=0").unwrap(),
            ..ExternalPayloadSettings::default()
        };
        assert_eq!(
            settings.limits("a"),
            QuotaLimits {
                max_bytes: Some(0),
                max_objects: Some(2)
            }
        );
        assert_eq!(
            settings.limits("b"),
            QuotaLimits {
                max_bytes: Some(100),
                max_objects: Some(ExternalPayloadSettings::DEFAULT_MAX_OBJECTS_PER_NAMESPACE)
            }
        );
        // Without configuration a namespace has the default quota; 0 turns it off.
        assert_eq!(
            ExternalPayloadSettings::default().limits("c"),
            QuotaLimits {
                max_bytes: Some(1024 * 1024 * 1024),
                max_objects: Some(10_000)
            }
        );
        let off = ExternalPayloadSettings {
            max_bytes_per_namespace: 0,
            max_objects_per_namespace: 0,
            ..ExternalPayloadSettings::default()
        };
        assert_eq!(
            off.limits("c"),
            QuotaLimits {
                max_bytes: None,
                max_objects: None
            }
        );
        let bad = parse_namespace_limits("a:max_blobs=1").unwrap_err();
        assert!(bad.contains("max_objects"), "{bad}");
        assert!(parse_namespace_limits("a:max_bytes=-1").is_err());
        assert!(parse_namespace_limits("max_bytes=1").is_err());
    }

    #[test]
    fn at_the_limit_passes_and_one_over_is_refused() {
        let limits = QuotaLimits {
            max_bytes: Some(10),
            max_objects: Some(3),
        };
        let usage = |bytes, objects| move || Some(PayloadUsage { bytes, objects });
        assert!(RuntimeExternalPayloadQuota::check(limits, 4, usage(6, 2)).is_ok());
        let refused = RuntimeExternalPayloadQuota::check(limits, 5, usage(6, 2)).unwrap_err();
        assert!(matches!(
            refused,
            PayloadError::Quota {
                reason: QuotaReason::BytesExhausted,
                ..
            }
        ));
        assert_eq!(refused.status(), 429);
        let refused = RuntimeExternalPayloadQuota::check(limits, 1, usage(0, 3)).unwrap_err();
        assert_eq!(
            refused.body()["reason"],
            "external_payload_namespace_objects_exhausted"
        );
        let refused = RuntimeExternalPayloadQuota::check(limits, 1, || None).unwrap_err();
        assert_eq!(refused.status(), 503);
        assert!(
            RuntimeExternalPayloadQuota::check(QuotaLimits::default(), 1, || panic!("read"))
                .is_ok()
        );
    }

    #[test]
    fn reference_envelopes_are_checked_exactly() {
        let record = PayloadRecord {
            reference_id: "ep_01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            codec: "avro".into(),
            size_bytes: 3,
            sha256: "a".repeat(64),
        };
        let envelope = json!({ "codec": "avro", "external_payload": reference(&record) });
        assert_eq!(reference_of(&envelope), Ok(Some(record)));
        assert_eq!(
            reference_of(&json!({ "codec": "avro", "blob": "x" })),
            Ok(None)
        );
        let mut bad = envelope.clone();
        bad["external_payload"]["sha256"] = "A".repeat(64).into();
        assert!(reference_of(&bad).is_err());
        let mut bad = envelope.clone();
        bad["external_payload"]["reference_id"] = "ep_0000000000000000000000000I".into();
        assert!(reference_of(&bad).is_err());
        let mut bad = envelope;
        bad["extra"] = 1.into();
        assert!(reference_of(&bad).is_err());
    }

    #[test]
    fn refusals_count_per_reason_and_log_once_a_minute() {
        let cache = Arc::new(MemoryCache::default());
        let quota = RuntimeExternalPayloadQuota::new(
            cache.clone(),
            ExternalPayloadSettings {
                threshold_bytes: 1,
                max_objects_per_namespace: 1,
                ..ExternalPayloadSettings::default()
            },
        );
        for _ in 0..5 {
            quota.record("a", QuotaReason::ObjectsExhausted);
        }
        let logs = format!("{}rejection-log:", RuntimeExternalPayloadQuota::PREFIX);
        assert!((1..=2).contains(&cache.count_prefix(&logs).unwrap()));
        let guard = MetricGuard::new(crate::policy::embedded().unwrap());
        let (payload, disclosure) = quota.render(&guard, "a", None).unwrap();
        let counted = payload["rejections_by_reason"]
            ["external_payload_namespace_objects_exhausted"]
            .as_u64()
            .unwrap();
        assert!((1..=5).contains(&counted));
        assert_eq!(
            payload["rejections_by_reason"].as_object().unwrap().len(),
            3
        );
        assert_eq!(payload["measurement_status"], "unavailable");
        assert_eq!(
            disclosure["reason"]["cardinality"],
            "finite_three_reason_inventory"
        );
    }
}
