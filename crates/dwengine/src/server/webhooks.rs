//! Webhook intake (`POST /api/bridge-adapters/webhook/{adapter}`).
//!
//! An integration (a payment provider, an alerting system) delivers one
//! event that starts a workflow, signals one or updates one. The route and
//! the body are the reference server's bridge-adapter shape
//! (`action`, `idempotency_key`, `target`, `input`, `correlation`); the
//! authentication is the webhook's own, since a provider cannot hold a
//! bearer token: each adapter is configured (`DW_WEBHOOKS`) with the one
//! namespace it delivers into and a shared secret, and every delivery is
//! signed with HMAC-SHA256 over `<timestamp>.<body>`, the timestamp within
//! the replay window (`server.webhooks.replay_window_seconds`), the
//! signature compared in constant time and remembered until the window has
//! passed, so a captured delivery cannot be sent again.
//!
//! The handler is thin ([`super::webhook_intake`]): a delivery becomes the control plane's own
//! `start_workflow`, `signal` or `begin_update` call, so the intake checks (payload sizes,
//! namespace admission, the pending signal and update counts and every
//! structural limit) and the idempotency are the control plane's. The
//! idempotency key becomes the command's `request_id`
//! (`webhook:<adapter>:<key>`), so a provider's retried delivery converges
//! on the command the first one made (the same run, signal or update id,
//! answered `duplicate`) and never adds a second one.

use std::collections::BTreeMap;
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::{json, Map, Value};
use sha2::Sha256;

/// The variable that registers webhooks: `adapter@namespace=secret`, comma-separated.
pub const WEBHOOKS_ENV: &str = "DW_WEBHOOKS";
/// At most this many webhooks may be registered.
pub const MAX_WEBHOOKS: usize = 64;
/// The longest adapter name.
pub const MAX_ADAPTER_CHARS: usize = 64;
/// The shortest secret.
pub const MIN_SECRET_BYTES: usize = 16;
/// The longest idempotency key.
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 191;
/// The replay window's config key.
pub const REPLAY_WINDOW_KEY: &str = "server.webhooks.replay_window_seconds";
/// The replay window's default.
pub const DEFAULT_REPLAY_WINDOW_SECONDS: u64 = 300;
/// The longest replay window: its replay keys (twice the window) stay
/// within the Redis backend's key-count horizon (960 seconds).
pub const MAX_REPLAY_WINDOW_SECONDS: u64 = 450;
/// The delivery's signing time, Unix seconds.
pub const TIMESTAMP_HEADER: &str = "x-durable-workflow-webhook-timestamp";
/// `sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`.
pub const SIGNATURE_HEADER: &str = "x-durable-workflow-webhook-signature";
/// The replay-protection keys (`webhook_replay_protection`): one per
/// accepted signed delivery, for twice the replay window.
pub struct ReplayKeys;

impl ReplayKeys {
    /// The family of every replay-protection key.
    pub const PREFIX: &'static str = "server:webhook-replay:";

    /// The key of a delivery's signature (both names hashed).
    pub fn key(adapter: &str, signature_hex: &str) -> String {
        format!(
            "{}{}",
            Self::PREFIX,
            crate::cache::hash_dimensions(&[adapter, signature_hex])
        )
    }
}
/// The outcome contract (the reference server's).
pub const SCHEMA: &str = "durable-workflow.v2.bridge-adapter-outcome.contract";

/// One registered webhook.
#[derive(Clone, PartialEq, Eq)]
pub struct Webhook {
    /// Its name in the route.
    pub adapter: String,
    /// The namespace its deliveries act in.
    pub namespace: String,
    pub(crate) secret: Vec<u8>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("adapter", &self.adapter)
            .field("namespace", &self.namespace)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// The registered webhooks and the replay window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhooks {
    by_adapter: BTreeMap<String, Webhook>,
    /// How far a delivery's timestamp may be from the server's clock, and
    /// how long its signature is remembered.
    pub replay_window: Duration,
}

impl Default for Webhooks {
    fn default() -> Self {
        Webhooks {
            by_adapter: BTreeMap::new(),
            replay_window: Duration::from_secs(DEFAULT_REPLAY_WINDOW_SECONDS),
        }
    }
}

impl Webhooks {
    /// Reads `DW_WEBHOOKS`' list; each problem names the entry's position
    /// (the secret is never quoted).
    pub fn parse(list: &str) -> Result<Webhooks, Vec<(usize, String)>> {
        let mut out = Webhooks::default();
        let mut problems = Vec::new();
        let entries = list.split(',').map(str::trim).filter(|e| !e.is_empty());
        for (n, entry) in entries.enumerate() {
            match parse_entry(entry) {
                Ok(hook) if out.by_adapter.contains_key(&hook.adapter) => problems.push((
                    n + 1,
                    format!("adapter {:?} is registered twice", hook.adapter),
                )),
                Ok(hook) => {
                    out.by_adapter.insert(hook.adapter.clone(), hook);
                }
                Err(problem) => problems.push((n + 1, problem)),
            }
        }
        if out.by_adapter.len() > MAX_WEBHOOKS {
            problems.push((
                MAX_WEBHOOKS + 1,
                format!("at most {MAX_WEBHOOKS} webhooks may be registered"),
            ));
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }

    /// These webhooks and one more (tests; the same checks as the list's).
    pub fn with(mut self, adapter: &str, namespace: &str, secret: &str) -> Webhooks {
        let hook = parse_entry(&format!("{adapter}@{namespace}={secret}"))
            .unwrap_or_else(|problem| panic!("webhook {adapter}: {problem}"));
        self.by_adapter.insert(hook.adapter.clone(), hook);
        self
    }

    /// The webhook registered as `adapter`.
    pub fn get(&self, adapter: &str) -> Option<&Webhook> {
        self.by_adapter.get(adapter)
    }

    /// How many are registered.
    pub fn len(&self) -> usize {
        self.by_adapter.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_adapter.is_empty()
    }
}

fn valid_adapter(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_ADAPTER_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

fn parse_entry(entry: &str) -> Result<Webhook, String> {
    let form = "write adapter@namespace=secret";
    let (adapter, rest) = entry
        .split_once('@')
        .ok_or_else(|| format!("no namespace: {form}"))?;
    let (namespace, secret) = rest
        .split_once('=')
        .ok_or_else(|| format!("no secret: {form}"))?;
    let (adapter, namespace, secret) = (adapter.trim(), namespace.trim(), secret.trim());
    if !valid_adapter(adapter) {
        return Err(format!(
            "the adapter name must be 1 to {MAX_ADAPTER_CHARS} letters, digits, '.', '_', ':' or '-'"
        ));
    }
    if namespace.is_empty()
        || namespace
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "adapter {adapter:?}: the namespace must be a name without whitespace ({form})"
        ));
    }
    if secret.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "adapter {adapter:?}: the secret must be at least {MIN_SECRET_BYTES} bytes (e.g. openssl rand -hex 32)"
        ));
    }
    Ok(Webhook {
        adapter: adapter.to_owned(),
        namespace: namespace.to_owned(),
        secret: secret.as_bytes().to_vec(),
    })
}

/// The signature header's value for a delivery: `sha256=` and the hex
/// HMAC-SHA256 of `<timestamp>.<body>` under `secret`.
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let bytes = mac(secret, timestamp, body).finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

pub(crate) fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What a delivery's headers said.
#[derive(Debug, Clone, Default)]
pub struct Signed {
    /// [`TIMESTAMP_HEADER`].
    pub timestamp: Option<String>,
    /// [`SIGNATURE_HEADER`].
    pub signature: Option<String>,
}

/// A refused delivery: the status, the reason and a sentence.
pub(crate) fn refusal(status: u16, reason: &str, message: String) -> (u16, Value) {
    (
        status,
        json!({ "schema": SCHEMA, "version": 1, "accepted": false, "outcome": "rejected",
                "reason": reason, "message": message }),
    )
}

/// The parts of a delivery's body.
pub(crate) struct Event {
    pub(crate) action: String,
    pub(crate) key: String,
    pub(crate) target: Map<String, Value>,
    pub(crate) input: Value,
    pub(crate) correlation: Value,
}

/// The outcome's common fields: who, what, which key, and a redacted target.
pub(crate) fn outcome(webhook: &Webhook, event: &Event) -> Value {
    let mut target = Map::new();
    for field in [
        "workflow_id",
        "workflow_type",
        "signal_name",
        "update_name",
        "task_queue",
        "business_key",
    ] {
        if let Some(value) = event.target.get(field).filter(|v| v.is_string()) {
            target.insert(field.to_owned(), value.clone());
        }
    }
    let mut out = json!({
        "schema": SCHEMA, "version": 1, "adapter": webhook.adapter,
        "namespace": webhook.namespace, "action": event.action,
        "idempotency_key": event.key, "target": target,
    });
    if !event.correlation.is_null() {
        out["correlation"] = event.correlation.clone();
    }
    out
}

/// The command's `request_id`: the adapter and the provider's key, so a
/// redelivery converges on the first delivery's command.
pub fn request_id(adapter: &str, key: &str) -> String {
    let plain = format!("webhook:{adapter}:{key}");
    if plain.chars().count() <= dwpolicy::boundary::MAX_REQUEST_ID_CHARS {
        plain
    } else {
        format!("webhook:{adapter}:sha256:{}", sha256_hex(key, 32))
    }
}

/// A start's workflow id when the target names none (as the reference
/// server: `bridge-<adapter>-<hash of the key>`).
pub fn derived_workflow_id(adapter: &str, key: &str) -> String {
    format!("bridge-{adapter}-{}", sha256_hex(key, 32))
}

fn sha256_hex(text: &str, digits: usize) -> String {
    use sha2::Digest;
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex[..digits.min(hex.len())].to_owned()
}

/// The event's `input` as the payload envelope the SDKs decode: a
/// `{codec, blob}` envelope as sent; otherwise the arguments list (a JSON
/// array as the arguments, any other value as the one argument, none as no
/// arguments) in the SDKs' Avro value encoding (`codec: "avro"`), as their
/// clients send a start's or a signal's arguments. A value the encoding
/// cannot hold is the problem's text.
pub(crate) fn envelope(input: &Value) -> Result<Value, String> {
    let is_envelope = input.get("codec").is_some_and(Value::is_string)
        && input.get("blob").is_some_and(Value::is_string);
    if is_envelope {
        return Ok(input.clone());
    }
    let arguments = match input {
        Value::Null => Value::Array(Vec::new()),
        Value::Array(_) => input.clone(),
        other => Value::Array(vec![other.clone()]),
    };
    crate::store::avro_value::encode_envelope(&arguments).map_err(|e| e.to_string())
}

/// The body's fields, or the validation errors naming each bad one.
pub(crate) fn parse_event(body: &[u8]) -> Result<Event, Value> {
    let mut errors = Map::new();
    let mut problem = |field: &str, message: String| {
        errors.insert(field.to_owned(), json!([message]));
    };
    let parsed: Value = match serde_json::from_slice(body) {
        Ok(Value::Object(object)) => Value::Object(object),
        Ok(_) => {
            problem("body", "The body must be a JSON object.".into());
            return Err(Value::Object(errors));
        }
        Err(e) => {
            problem("body", format!("The body is not JSON: {e}."));
            return Err(Value::Object(errors));
        }
    };
    let action = parsed["action"].as_str().unwrap_or_default().to_owned();
    if action.is_empty() {
        problem(
            "action",
            "The action field is required: start_workflow, signal_workflow or update_workflow."
                .into(),
        );
    }
    let key = parsed["idempotency_key"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if key.trim().is_empty() {
        problem(
            "idempotency_key",
            "The idempotency_key field is required: the provider's event id.".into(),
        );
    } else if key.chars().count() > MAX_IDEMPOTENCY_KEY_CHARS {
        problem(
            "idempotency_key",
            format!(
                "The idempotency_key field must be at most {MAX_IDEMPOTENCY_KEY_CHARS} characters."
            ),
        );
    }
    let target = match &parsed["target"] {
        Value::Object(target) => target.clone(),
        _ => {
            problem("target", "The target field must be an object.".into());
            Map::new()
        }
    };
    let required: &[&str] = match action.as_str() {
        "start_workflow" => &["workflow_type", "task_queue"],
        "signal_workflow" => &["workflow_id", "signal_name"],
        "update_workflow" => &["workflow_id", "update_name"],
        _ => &[],
    };
    for field in required {
        let given = target
            .get(*field)
            .and_then(Value::as_str)
            .is_some_and(|v| !v.trim().is_empty());
        if !given {
            problem(
                &format!("target.{field}"),
                format!("The target.{field} field is required for {action}."),
            );
        }
    }
    for field in [
        "workflow_id",
        "run_id",
        "business_key",
        "duplicate_policy",
        "wait_for",
    ] {
        if target
            .get(field)
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            problem(
                &format!("target.{field}"),
                format!("The target.{field} field must be a string."),
            );
        }
    }
    let correlation = parsed.get("correlation").cloned().unwrap_or(Value::Null);
    if !correlation.is_null() && !correlation.is_object() {
        problem(
            "correlation",
            "The correlation field must be an object.".into(),
        );
    }
    if !errors.is_empty() {
        return Err(Value::Object(errors));
    }
    Ok(Event {
        action,
        key,
        target,
        input: parsed.get("input").cloned().unwrap_or(Value::Null),
        correlation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_parse_and_refuse_clearly_without_quoting_secrets() {
        let hooks =
            Webhooks::parse("stripe@payments=0123456789abcdef0123, pd@ops=a-long-enough-secret==")
                .unwrap();
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks.get("stripe").unwrap().namespace, "payments");
        assert_eq!(hooks.get("pd").unwrap().secret, b"a-long-enough-secret==");
        assert!(!format!("{:?}", hooks.get("pd")).contains("long-enough"));
        let problems = Webhooks::parse(
            "ok@ns=0123456789abcdef, short@ns=tiny-secret, bad name@ns=0123456789abcdef, \
             nonamespace=0123456789abcdef, ok@ns=0123456789abcdef",
        )
        .unwrap_err();
        let at: Vec<usize> = problems.iter().map(|(n, _)| *n).collect();
        assert_eq!(at, [2, 3, 4, 5]);
        for (_, text) in &problems {
            assert!(
                !text.contains("0123456789abcdef") && !text.contains("tiny"),
                "{text}"
            );
        }
        let many: Vec<String> = (0..=MAX_WEBHOOKS)
            .map(|n| format!("a{n}@ns=0123456789abcdef"))
            .collect();
        assert!(Webhooks::parse(&many.join(",")).is_err());
    }

    #[test]
    fn signatures_cover_timestamp_and_body() {
        let secret = b"0123456789abcdef";
        let signed = sign(secret, "1700000000", b"{}");
        assert!(signed.starts_with("sha256=") && signed.len() == 7 + 64);
        assert_ne!(signed, sign(secret, "1700000001", b"{}"));
        assert_ne!(signed, sign(secret, "1700000000", b"{ }"));
        assert_ne!(signed, sign(b"0123456789abcdeF", "1700000000", b"{}"));
        let bytes = unhex(signed.strip_prefix("sha256=").unwrap()).unwrap();
        assert!(mac(secret, "1700000000", b"{}")
            .verify_slice(&bytes)
            .is_ok());
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn inputs_become_the_sdks_avro_arguments_and_ids_fit() {
        use crate::store::avro_value::decode_envelope;
        let args = |input: Value| {
            let env = envelope(&input).unwrap();
            assert_eq!(env["codec"], "avro");
            decode_envelope(&env).unwrap()
        };
        assert_eq!(args(Value::Null), json!([]));
        assert_eq!(args(json!([1, "two"])), json!([1, "two"]));
        assert_eq!(args(json!({"a": 1.5})), json!([{"a": 1.5}]));
        let env = json!({"codec": "avro", "blob": "AA=="});
        assert_eq!(envelope(&env).unwrap(), env);
        assert_eq!(request_id("stripe", "evt_1"), "webhook:stripe:evt_1");
        let long = "k".repeat(MAX_IDEMPOTENCY_KEY_CHARS);
        let id = request_id(&"a".repeat(MAX_ADAPTER_CHARS), &long);
        assert!(
            id.chars().count() <= dwpolicy::boundary::MAX_REQUEST_ID_CHARS,
            "{id}"
        );
        assert_eq!(id, request_id(&"a".repeat(MAX_ADAPTER_CHARS), &long));
        assert_eq!(derived_workflow_id("s", "k"), derived_workflow_id("s", "k"));
        assert_ne!(derived_workflow_id("s", "k"), derived_workflow_id("s", "l"));
    }
}
