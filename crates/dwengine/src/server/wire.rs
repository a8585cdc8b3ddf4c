//! The wire protocol's request bodies and the shapes the server answers with.
//!
//! Bodies keep unknown fields (a minor protocol version may add optional
//! ones); what the server reads is typed here, range-checked by
//! [`Checks`] so every out-of-range number is a 422 naming its field.
//! Payloads (`input`, `arguments`, `result`) stay opaque [`Value`]s: the
//! server stores and returns codec envelopes without decoding them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::{HistoryEvent, RunId};

/// The control-plane version this server speaks.
pub const CONTROL_PLANE_VERSION: &str = "2";
/// The worker protocol versions this server speaks, oldest first.
pub const WORKER_PROTOCOL_VERSIONS: [&str; 2] = ["1.19", "1.20"];
/// The header naming the control-plane version.
pub const CONTROL_PLANE_HEADER: &str = "x-durable-workflow-control-plane-version";
/// The header naming the worker protocol version.
pub const PROTOCOL_HEADER: &str = "x-durable-workflow-protocol-version";
/// The header naming the namespace.
pub const NAMESPACE_HEADER: &str = "x-namespace";
/// Ten years: the longest timer, timeout or wait a request may name.
pub const MAX_DURATION_SECONDS: i64 = 10 * 365 * 24 * 3600;
/// The largest history or list page.
pub const MAX_PAGE_SIZE: i64 = 1000;

/// `POST /api/workflows`.
#[derive(Debug, Deserialize)]
pub struct StartWorkflow {
    /// The caller's workflow id.
    #[serde(default)]
    pub workflow_id: String,
    /// The workflow type.
    #[serde(default)]
    pub workflow_type: String,
    /// The task queue its workers poll.
    #[serde(default)]
    pub task_queue: String,
    /// Start arguments (an opaque payload envelope).
    #[serde(default)]
    pub input: Value,
    /// Whole-execution budget, seconds.
    #[serde(default)]
    pub execution_timeout_seconds: Option<i64>,
    /// One run's budget, seconds.
    #[serde(default)]
    pub run_timeout_seconds: Option<i64>,
    /// `fail` (default) or `use-existing` while a run is open.
    #[serde(default)]
    pub duplicate_policy: Option<String>,
    /// Initial memo.
    #[serde(default)]
    pub memo: Option<Map<String, Value>>,
    /// Initial search attributes.
    #[serde(default)]
    pub search_attributes: Option<Map<String, Value>>,
    /// Optional business key.
    #[serde(default)]
    pub business_key: Option<String>,
    /// Dispatch priority 0..=9 (recorded).
    #[serde(default)]
    pub priority: Option<i64>,
    /// Makes a retried start converge on the run the first attempt made.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Pins the run to this worker build (before the queue's promoted one).
    #[serde(default)]
    pub build_id: Option<String>,
    /// The same as `build_id`, which wins when both are given.
    #[serde(default)]
    pub compatibility: Option<String>,
}

/// A signal's body.
#[derive(Debug, Deserialize, Default)]
pub struct SignalBody {
    /// Arguments (an opaque payload envelope).
    #[serde(default)]
    pub input: Value,
    /// The caller's command key.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// An update's body.
#[derive(Debug, Deserialize, Default)]
pub struct UpdateBody {
    /// Arguments (an opaque payload envelope).
    #[serde(default)]
    pub input: Value,
    /// `accepted` (default) or `completed`.
    #[serde(default)]
    pub wait_for: Option<String>,
    /// How long `completed` may wait, seconds.
    #[serde(default)]
    pub wait_timeout_seconds: Option<i64>,
    /// The caller's command key.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// A query's body.
#[derive(Debug, Deserialize, Default)]
pub struct QueryBody {
    /// Arguments (an opaque payload envelope).
    #[serde(default)]
    pub input: Value,
}

/// Cancel and terminate.
#[derive(Debug, Deserialize, Default)]
pub struct StopBody {
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// Makes a retried stop converge (answered `duplicate`, not 409).
    #[serde(default)]
    pub request_id: Option<String>,
}

/// `POST /api/namespaces`.
#[derive(Debug, Deserialize, Default)]
pub struct RegisterNamespace {
    /// The name.
    #[serde(default)]
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Days closed runs keep their history.
    #[serde(default)]
    pub retention_days: Option<i64>,
}

/// `GET /api/workflows` query string.
#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    /// Only this type.
    pub workflow_type: Option<String>,
    /// Only this status.
    pub status: Option<String>,
    /// A visibility query (not supported: refused with 422).
    pub query: Option<String>,
    /// Page size.
    pub page_size: Option<String>,
    /// The previous page's token.
    pub next_page_token: Option<String>,
    /// `exclude` archived runs (default), list `only` them, or `include` them.
    pub archived: Option<String>,
}

/// `GET …/history` query string.
#[derive(Debug, Deserialize, Default)]
pub struct HistoryQuery {
    /// Page size.
    pub page_size: Option<String>,
    /// The previous page's token.
    pub next_page_token: Option<String>,
}

/// `POST /api/worker/register` (the SDK's full body; the rest is kept opaque).
#[derive(Debug, Deserialize, Default)]
pub struct RegisterWorker {
    /// The worker's id.
    #[serde(default)]
    pub worker_id: String,
    /// The queue it polls.
    #[serde(default)]
    pub task_queue: String,
    /// Its runtime (`python`, …).
    #[serde(default)]
    pub runtime: Option<String>,
    /// Its SDK version.
    #[serde(default)]
    pub sdk_version: Option<String>,
    /// The capabilities it asks the server to acknowledge (names).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Its capability manifest (`local_activities`, `sticky_execution`, …:
    /// each `{"supported": bool, …}`).
    #[serde(default)]
    pub capability_manifest: Value,
    /// How many worker sessions it may hold at once (10 when absent).
    #[serde(default)]
    pub max_concurrent_worker_sessions: Option<Value>,
    /// Its build id (echoed: the Rust SDK's sticky cache keys runs by it).
    #[serde(default)]
    pub build_id: Option<String>,
    /// Per workflow type, the signals, queries and updates it handles and
    /// the updates it validates (`update_validators`).
    #[serde(default)]
    pub workflow_command_contracts: Value,
    /// Per workflow type, the SDK's fingerprint of its definition (what a
    /// redrive checks the queue's workers still run).
    #[serde(default)]
    pub workflow_definition_fingerprints: Value,
    /// The worker protocol version in force (set from the request header).
    #[serde(skip)]
    pub protocol_version: Option<String>,
}

/// The worker capabilities this server implements, acknowledged by name
/// when a registration asks for them.
pub const ACKNOWLEDGED_CAPABILITIES: [&str; 14] = [
    "condition_wait_occurrence_identity",
    "cooperative_cancellation",
    "durable_selection",
    "local_activities",
    "memo_upserts",
    "message_streams",
    "nexus_cooperative_cancellation",
    "query_tasks",
    "sticky_execution",
    "typed_search_attributes",
    "update_validation_tasks",
    "worker_sessions",
    "workflow_entry_arguments_validation",
    "workflow_updates",
];

/// The capability names the SDKs use for protocol features (acknowledged
/// only when implemented, above). Any other name a session-holding worker
/// lists is a resource it offers (`gpu`, `cache:example`): the server
/// routes session activities on it, so it acknowledges it.
pub const PROTOCOL_CAPABILITIES: [&str; 17] = [
    "condition_wait_occurrence_identity",
    "cooperative_cancellation",
    "durable_selection",
    "local_activities",
    "memo_upserts",
    "message_streams",
    "nexus_cooperative_cancellation",
    "prepared_local_activities",
    "prepared_local_activity_cancellation_policies",
    "query_tasks",
    "sticky_execution",
    "typed_search_attributes",
    "update_validation_tasks",
    "worker_sessions",
    "workflow_entry_arguments_validation",
    "workflow_updates",
    "nexus_operations",
];

/// The capability manifest entries this server implements.
pub const ACKNOWLEDGED_MANIFEST: [&str; 4] = [
    "local_activities",
    "nexus_cooperative_cancellation",
    "sticky_execution",
    "worker_sessions",
];

/// `POST /api/worker/heartbeat`.
#[derive(Debug, Deserialize, Default)]
pub struct WorkerHeartbeat {
    /// The worker's id.
    #[serde(default)]
    pub worker_id: String,
}

/// A long poll of any task kind.
#[derive(Debug, Deserialize, Default)]
pub struct PollBody {
    /// The polling worker.
    #[serde(default)]
    pub worker_id: String,
    /// The queue.
    #[serde(default)]
    pub task_queue: String,
    /// Idempotency token of this poll.
    #[serde(default)]
    pub poll_request_id: Option<String>,
    /// How long to wait for work, seconds (capped by the server).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Workflow polls: events per history page.
    #[serde(default)]
    pub history_page_size: Option<i64>,
    /// Workflow polls: the task kinds the worker takes.
    #[serde(default)]
    pub task_kinds: Option<Vec<String>>,
    /// The polling worker's build id (its compatibility cohort).
    #[serde(default)]
    pub build_id: Option<String>,
}

/// The lease fields of a workflow-task report.
#[derive(Debug, Deserialize, Default)]
pub struct WorkflowTaskLease {
    /// The worker the task was leased to.
    #[serde(default)]
    pub lease_owner: String,
    /// The attempt it was given.
    #[serde(default)]
    pub workflow_task_attempt: i64,
    /// Completion: the new commands (checked one by one).
    #[serde(default)]
    pub commands: Vec<Value>,
    /// Failure: what went wrong.
    #[serde(default)]
    pub failure: Option<Value>,
    /// History paging: the token of the next page.
    #[serde(default)]
    pub next_history_page_token: Option<String>,
    /// Completion: the worker's sticky-cache claim on the run, if it keeps
    /// the run's history (`worker_id`, `workflow_id`, `run_id`, `build_id`,
    /// `ttl_seconds`, `metrics`).
    #[serde(default)]
    pub sticky_cache: Option<Value>,
    /// Completion: what the workflow consumed of its input message
    /// streams (`stream_name`, `through_position`), checked, not stored.
    #[serde(default)]
    pub message_stream_cursors: Option<Value>,
    /// Completion: the streams it waits on (`stream_name`, `after_position`).
    #[serde(default)]
    pub message_stream_waits: Option<Value>,
}

/// The lease fields of an activity report.
#[derive(Debug, Deserialize, Default)]
pub struct ActivityReport {
    /// The attempt it was given.
    #[serde(default)]
    pub activity_attempt_id: String,
    /// The worker the attempt was leased to.
    #[serde(default)]
    pub lease_owner: String,
    /// Completion: the result (an opaque payload envelope).
    #[serde(default)]
    pub result: Value,
    /// Failure: what went wrong.
    #[serde(default)]
    pub failure: Option<ActivityFailureBody>,
}

/// An activity failure as the SDK reports it.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ActivityFailureBody {
    /// Why.
    #[serde(default)]
    pub message: String,
    /// Short exception type.
    #[serde(default, rename = "type")]
    pub failure_type: Option<String>,
    /// Full exception class.
    #[serde(default)]
    pub class: Option<String>,
    /// Whether retrying cannot help.
    #[serde(default)]
    pub non_retryable: bool,
    /// Structured details (an opaque payload).
    #[serde(default)]
    pub details: Option<Value>,
}

/// A query-task report.
#[derive(Debug, Deserialize, Default)]
pub struct QueryTaskReport {
    /// The worker the task was leased to.
    #[serde(default)]
    pub lease_owner: String,
    /// The attempt it was given.
    #[serde(default)]
    pub query_task_attempt: i64,
    /// Completion: the plain result.
    #[serde(default)]
    pub result: Value,
    /// Completion: the result's payload envelope.
    #[serde(default)]
    pub result_envelope: Value,
    /// Failure: what went wrong.
    #[serde(default)]
    pub failure: Option<Value>,
}

/// Collects range problems, each under its field name.
#[derive(Debug, Default)]
pub struct Checks {
    /// (field, problem) in the order found.
    pub problems: Vec<(String, String)>,
}

impl Checks {
    /// `value`, when present, must lie in `min..=max`.
    pub fn range(&mut self, field: &str, value: Option<i64>, min: i64, max: i64) -> &mut Self {
        if let Some(v) = value {
            if v < min || v > max {
                self.problems.push((
                    field.to_owned(),
                    format!("The {field} field must be between {min} and {max}; got {v}."),
                ));
            }
        }
        self
    }

    /// `payload`, when it is a runtime external payload reference
    /// (`{codec, external_payload}`), must be a well-formed one; whether it
    /// names a stored payload is checked by
    /// [`Engine::verify_payload_references`](crate::server::Engine::verify_payload_references).
    /// (A client-side `external_storage` reference is an opaque envelope
    /// like any other.)
    pub fn inline_payload(&mut self, field: &str, payload: &Value) -> &mut Self {
        if let Err(problem) = crate::external_payloads::reference_of(payload) {
            self.problem(&format!("{field}.external_payload"), problem);
        }
        self
    }

    /// A problem with `field`.
    pub fn problem(&mut self, field: &str, message: impl Into<String>) -> &mut Self {
        self.problems.push((field.to_owned(), message.into()));
        self
    }

    /// An integer field of a JSON object (absent is fine; any other type is a problem).
    pub fn integer_field(&mut self, object: &Value, key: &str, field: &str, min: i64, max: i64) {
        match object.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.as_i64().is_some() => {
                self.range(field, n.as_i64(), min, max);
            }
            Some(other) => {
                self.problem(
                    field,
                    format!("The {field} field must be an integer; got {other}."),
                );
            }
        }
    }
}

/// A page size from a query string: 1..=[`MAX_PAGE_SIZE`], default `default`.
pub fn page_size(checks: &mut Checks, raw: Option<&str>, default: i64) -> usize {
    let Some(raw) = raw else {
        return usize::try_from(default).unwrap_or(100);
    };
    match raw.trim().parse::<i64>() {
        Ok(n) => {
            checks.range("page_size", Some(n), 1, MAX_PAGE_SIZE);
            usize::try_from(n.clamp(1, MAX_PAGE_SIZE)).unwrap_or(100)
        }
        Err(_) => {
            checks.problem("page_size", "The page_size field must be an integer.");
            100
        }
    }
}

/// The variable holding the page-token key (any text; nodes that serve
/// one client's pages in turn must share it). Without it each process
/// draws a key of its own at start.
pub const PAGE_TOKEN_KEY_ENV: &str = "DW_PAGE_TOKEN_KEY";

/// The key page tokens are authenticated with: SHA-256 of
/// `DW_PAGE_TOKEN_KEY`, or of OS randomness drawn once per process.
fn page_token_key() -> &'static [u8; 32] {
    use sha2::{Digest, Sha256};
    use std::hash::{BuildHasher, Hasher};
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let mut digest = Sha256::new();
        match std::env::var(PAGE_TOKEN_KEY_ENV) {
            Ok(secret) if !secret.is_empty() => digest.update(secret.as_bytes()),
            _ => {
                // std's RandomState is seeded from the OS generator.
                for salt in 0u64..4 {
                    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                    h.write_u64(salt);
                    digest.update(h.finish().to_le_bytes());
                }
                digest.update(std::process::id().to_le_bytes());
                digest.update(crate::unix_ms().to_le_bytes());
            }
        }
        digest.finalize().into()
    })
}

/// Bytes of a page token's MAC: the leftmost 16 of the HMAC-SHA256.
const PAGE_TOKEN_MAC_BYTES: usize = 16;

/// The HMAC-SHA256 of `message` under the page-token key (the `hmac` crate).
fn page_token_hmac(message: &[u8]) -> hmac::Hmac<sha2::Sha256> {
    use hmac::Mac;
    let mut mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(page_token_key())
        .expect("HMAC takes a key of any length");
    mac.update(message);
    mac
}

/// The MAC of `message` as tokens carry it: the first 16 bytes of its
/// HMAC-SHA256 under the page-token key, in lower-case hex.
fn page_token_mac(message: &[u8]) -> String {
    use hmac::Mac;
    let tag = page_token_hmac(message).finalize().into_bytes();
    tag[..PAGE_TOKEN_MAC_BYTES]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `mac` (lower-case hex, as [`page_token_mac`] writes it) is the
/// MAC of `message`, compared in constant time by the `hmac` crate. A MAC
/// of any other length or spelling is refused before that.
fn page_token_mac_matches(message: &[u8], mac: &str) -> bool {
    use hmac::Mac;
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if mac.len() != 2 * PAGE_TOKEN_MAC_BYTES || !mac.bytes().all(lower_hex) {
        return false;
    }
    let tag: Vec<u8> = (0..PAGE_TOKEN_MAC_BYTES)
        .filter_map(|i| u8::from_str_radix(&mac[2 * i..2 * i + 2], 16).ok())
        .collect();
    page_token_hmac(message).verify_truncated_left(&tag).is_ok()
}

/// An opaque page token for a position: base64 of `position.mac`, the MAC
/// an HMAC-SHA256 under this server's key, so a client cannot forge or
/// alter one (a plain base64 integer used to be accepted as any position).
pub fn page_token(position: u64) -> String {
    use base64::Engine;
    let text = position.to_string();
    let mac = page_token_mac(text.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(format!("{text}.{mac}"))
}

/// The position a page token names; `None` for a token this server did
/// not issue (or one altered). The first page's token, base64 `0` (which
/// the SDK sends for the first history page), is the one token accepted
/// unsigned: it names the start, which anyone may read.
pub fn parse_page_token(token: &str) -> Option<u64> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    if text == "0" {
        return Some(0);
    }
    let (position, mac) = text.split_once('.')?;
    if !page_token_mac_matches(position.as_bytes(), mac) {
        return None;
    }
    position.parse().ok()
}

/// An opaque token naming the position after `name` in a listing ordered
/// by name: base64 of `n:<mac>:<name>`, the MAC as for [`page_token`].
pub fn name_page_token(name: &str) -> String {
    use base64::Engine;
    let mac = page_token_mac(format!("n:{name}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(format!("n:{mac}:{name}"))
}

/// The name a [`name_page_token`] carries; `None` for a token this server
/// did not issue (or one altered).
pub fn parse_name_page_token(token: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let (mac, name) = text.strip_prefix("n:")?.split_once(':')?;
    page_token_mac_matches(format!("n:{name}").as_bytes(), mac).then(|| name.to_owned())
}

/// Unix milliseconds as RFC 3339 UTC with microseconds (`…T12:00:00.000000Z`).
///
/// Its digits are written into a fixed buffer: through `format!` a
/// timestamp cost some 3,300 instructions, and a one-activity workflow's
/// answers carry seven (docs/performance.md, session 19). Years outside
/// 0-9999 (none a clock gives) keep `format!`, whose padding of a sign or
/// a fifth digit the buffer has no room for.
pub fn timestamp(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let micros = unix_ms.rem_euclid(1000) * 1000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = crate::schedule_spec::civil_from_days(days);
    let (Ok(year @ 0..=9999), Ok(micros)) = (u32::try_from(year), u32::try_from(micros)) else {
        return format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        );
    };
    // `rem` is within a day's seconds.
    let rem = u32::try_from(rem).unwrap_or(0);
    let mut text = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut n: u32| {
        for digit in text[at..at + width].iter_mut().rev() {
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, rem / 3600);
    put(14, 2, rem % 3600 / 60);
    put(17, 2, rem % 60);
    put(20, 6, micros);
    // Digits and separators only: always UTF-8.
    std::str::from_utf8(&text).unwrap_or_default().to_owned()
}

/// One history event as the protocol numbers it: from 1, with timestamps.
pub fn event(event: &HistoryEvent) -> Value {
    event_with(event, event.payload.clone())
}

/// [`event`] of an event the caller owns: its payload moved into the
/// answer, not copied. A workflow task's page is rendered this way;
/// `json!` copied each payload's tree through a serializer and formatted
/// the timestamp twice (docs/performance.md, "A workflow task's answer
/// without copies").
pub fn into_event(mut event: HistoryEvent) -> Value {
    let payload = std::mem::take(&mut event.payload);
    event_with(&event, payload)
}

fn event_with(event: &HistoryEvent, payload: Value) -> Value {
    let id = event.sequence + 1;
    let at: Value = event.recorded_at_ms.map(timestamp).into();
    let mut map = Map::new();
    map.insert("event_type".into(), event.event_type.as_str().into());
    // `id` is a string, as both SDKs read an event's durable id (a
    // selection's marker names the event that resolved it by it).
    map.insert("id".into(), id.to_string().into());
    map.insert("payload".into(), payload);
    map.insert("recorded_at".into(), at.clone());
    map.insert("sequence".into(), id.into());
    map.insert("timestamp".into(), at);
    Value::Object(map)
}

/// A start's answer (`201` started, `200` retried or the existing run),
/// serialized from this struct. Its fields are in the order a
/// `serde_json::Value` map writes them (sorted), so the body is byte for
/// byte the map's; building the map and then serializing it was a fifth
/// of the HTTP threads' instructions per start (docs/performance.md, "A
/// start's round trip outside the writer's SQL").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StartAnswer {
    /// Whether a retried request id found its start (new runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
    pub namespace: String,
    pub outcome: &'static str,
    pub payload_codec: String,
    pub run_id: String,
    pub status: &'static str,
    pub task_queue: String,
    pub workflow_id: String,
    pub workflow_type: String,
}

impl StartAnswer {
    /// Appends the answer's JSON to `out`: the bytes its `Serialize`
    /// writes, with the keys as constant bytes. Escaping the nine keys and
    /// the struct serializer's calls were half of the answer's
    /// serialization on every start (docs/performance.md, "the gate's
    /// copies"); the values are escaped as before.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        match self.duplicate {
            Some(true) => out.extend_from_slice(b"\"duplicate\":true,"),
            Some(false) => out.extend_from_slice(b"\"duplicate\":false,"),
            None => {}
        }
        let fields: [(&[u8], &str); 8] = [
            (b"\"namespace\":", &self.namespace),
            (b",\"outcome\":", self.outcome),
            (b",\"payload_codec\":", &self.payload_codec),
            (b",\"run_id\":", &self.run_id),
            (b",\"status\":", self.status),
            (b",\"task_queue\":", &self.task_queue),
            (b",\"workflow_id\":", &self.workflow_id),
            (b",\"workflow_type\":", &self.workflow_type),
        ];
        for (key, value) in fields {
            out.extend_from_slice(key);
            serde_json::to_writer(&mut *out, value)?;
        }
        out.push(b'}');
        Ok(())
    }

    /// The answer as a JSON value, for callers that add to it or read it:
    /// the same map its serialization writes.
    pub fn into_value(self) -> Value {
        // Strings, a bool and an optional bool: nothing here can fail to
        // become a value.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A run id as the wire carries it.
pub fn run_id(run: RunId) -> String {
    run.0.to_string()
}

/// The run a wire run id names (`None` for anything but a positive integer).
pub fn parse_run_id(text: &str) -> Option<RunId> {
    text.parse::<i64>().ok().filter(|n| *n > 0).map(RunId)
}

/// The codec a payload envelope names (`avro` when none).
pub fn codec(payload: &Value) -> String {
    payload
        .get("codec")
        .and_then(Value::as_str)
        .unwrap_or("avro")
        .to_owned()
}

/// A 422 of collected problems.
pub(crate) fn validation(checks: Checks) -> dwpolicy::boundary::BoundaryError {
    let mut errors = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (field, problem) in checks.problems {
        errors.entry(field).or_default().push(problem);
    }
    dwpolicy::boundary::BoundaryError::ValidationFailed {
        message: format!("The request is invalid: {} field(s).", errors.len()),
        validation_errors: errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventType;
    use serde_json::json;

    /// `timestamp` as it was written with `format!`: the reference.
    fn formatted_timestamp(unix_ms: i64) -> String {
        let secs = unix_ms.div_euclid(1000);
        let micros = unix_ms.rem_euclid(1000) * 1000;
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (year, month, day) = crate::schedule_spec::civil_from_days(days);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }

    /// The digits written into a buffer are the text `format!` wrote, for
    /// every millisecond of a second, every second of a day, the days
    /// around month, leap-day and year ends, years from before the epoch
    /// to 9999, and the years outside 0-9999 that keep `format!`.
    #[test]
    fn a_timestamp_is_the_text_format_wrote() {
        const DAY: i64 = 86_400_000;
        let mut times: Vec<i64> = Vec::new();
        times.extend((0..1000).map(|ms| 1_733_400_000_000 + ms));
        times.extend((0..86_400).map(|s| 1_733_356_800_000 + s * 1000 + s % 1000));
        // Every day of 1999-2001 (a leap century) and of 1969-1971.
        times.extend((10_592..11_688).map(|d| d * DAY + 45_296_789));
        times.extend((-400..800).map(|d| d * DAY - 1));
        // A day every 97 days from year -2 to 10001.
        let (first, last) = (-720_000 * DAY, 2_932_900 * DAY);
        times.extend((first..last).step_by(usize::try_from(97 * DAY).unwrap()));
        times.extend([
            0,
            -1,
            1,
            i64::from(i32::MAX) * 1000,
            253_402_300_799_999,
            253_402_300_800_000,
        ]);
        for t in times {
            assert_eq!(timestamp(t), formatted_timestamp(t), "{t}");
        }
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(timestamp(-1), "1969-12-31T23:59:59.999000Z");
        assert_eq!(
            timestamp(253_402_300_800_000),
            "10000-01-01T00:00:00.000000Z"
        );
    }

    /// `event` as it was written before `into_event`: the reference the
    /// new renderings are held to, byte for byte.
    fn event_by_json_macro(event: &HistoryEvent) -> Value {
        let id = event.sequence + 1;
        let at = event.recorded_at_ms.map(timestamp);
        json!({
            "id": id.to_string(),
            "sequence": id,
            "event_type": event.event_type.as_str(),
            "payload": event.payload,
            "recorded_at": at,
            "timestamp": at,
        })
    }

    #[test]
    fn events_render_to_the_bytes_of_the_json_macro_they_replaced() {
        let payloads = [
            json!({}),
            json!(null),
            json!({"arguments": {"codec": "json", "blob": "[1,\"\\u2028\"]"}, "workflow_id": "w",
                   "namespace": "default", "task_queue": "q", "workflow_type": "t"}),
            json!({"activity_execution_id": "1", "sequence": 7, "attempt_number": 1,
                   "result": {"codec": "avro", "blob": "ImRvbmUi"}, "nested": [[], {}, [1.5, -2, true]],
                   "text": "quote \" backslash \\ control \u{1} non-ascii é U+2028 \u{2028}"}),
            json!([1, "two", {"b": 1, "a": 2}]),
            json!("a bare string"),
            json!(12345678901234567u64),
        ];
        let mut compared = 0;
        for (i, event_type) in EventType::ALL.into_iter().enumerate() {
            for payload in &payloads {
                for recorded_at_ms in [None, Some(0), Some(1_764_547_200_123), Some(-1)] {
                    let event = HistoryEvent {
                        sequence: [0, 1, 41, u64::from(u32::MAX)][i % 4],
                        event_type,
                        payload: payload.clone(),
                        recorded_at_ms,
                    };
                    let want = serde_json::to_vec(&event_by_json_macro(&event)).unwrap();
                    assert_eq!(serde_json::to_vec(&super::event(&event)).unwrap(), want);
                    assert_eq!(serde_json::to_vec(&into_event(event)).unwrap(), want);
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, EventType::ALL.len() * payloads.len() * 4);
    }

    #[test]
    fn timestamps_are_rfc3339_with_microseconds() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(timestamp(1_764_547_200_123), "2025-12-01T00:00:00.123000Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn page_tokens_round_trip_and_reject_garbage() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert_eq!(parse_page_token(&page_token(1234)), Some(1234));
        assert_eq!(parse_page_token(&page_token(0)), Some(0));
        assert_eq!(
            parse_page_token("MA=="),
            Some(0),
            "the SDK's first-page token"
        );
        assert_eq!(parse_page_token("not base64!"), None);
        assert_eq!(parse_page_token("eA=="), None, "base64 of a non-number");
        // A plain base64 integer, the old form, is no longer a position.
        assert_eq!(parse_page_token(&b64("1234")), None);
        // Altering the position or the MAC is refused.
        let token = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(page_token(1234))
                .unwrap(),
        )
        .unwrap();
        let (_, mac) = token.split_once('.').unwrap();
        assert_eq!(parse_page_token(&b64(&format!("1235.{mac}"))), None);
        let mut flipped = mac.to_owned();
        flipped.replace_range(0..1, if mac.starts_with('0') { "1" } else { "0" });
        assert_eq!(parse_page_token(&b64(&format!("1234.{flipped}"))), None);
    }

    /// The MAC as the tokens issued before the `hmac` crate computed it:
    /// HMAC-SHA256 written out by hand (RFC 2104: the 32-byte key padded
    /// to SHA-256's 64-byte block, inner and outer pads), first 16 bytes
    /// in hex.
    fn hand_written_mac(message: &[u8]) -> String {
        use sha2::{Digest, Sha256};
        let key = page_token_key();
        let pad = |byte: u8| -> Vec<u8> {
            let mut block = vec![byte; 64];
            for (b, k) in block.iter_mut().zip(key.iter()) {
                *b ^= k;
            }
            block
        };
        let inner = Sha256::new()
            .chain_update(pad(0x36))
            .chain_update(message)
            .finalize();
        let outer = Sha256::new()
            .chain_update(pad(0x5c))
            .chain_update(inner)
            .finalize();
        outer[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn tokens_issued_before_the_hmac_crate_still_verify() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        for position in [1u64, 77, 1_234_567] {
            let text = position.to_string();
            let old = b64(&format!("{text}.{}", hand_written_mac(text.as_bytes())));
            assert_eq!(old, page_token(position), "the token format is unchanged");
            assert_eq!(parse_page_token(&old), Some(position));
        }
        for name in ["billing", "a:b"] {
            let mac = hand_written_mac(format!("n:{name}").as_bytes());
            let old = b64(&format!("n:{mac}:{name}"));
            assert_eq!(old, name_page_token(name));
            assert_eq!(parse_name_page_token(&old).as_deref(), Some(name));
        }
        // A MAC cut short, upper-cased or padded is refused, not compared
        // on its prefix.
        let mac = hand_written_mac(b"42");
        for forged in [
            &mac[..2],
            &mac[..31],
            &mac.to_uppercase(),
            &format!("{mac}00"),
        ] {
            if forged != mac {
                assert_eq!(
                    parse_page_token(&b64(&format!("42.{forged}"))),
                    None,
                    "{forged}"
                );
            }
        }
        assert_eq!(parse_page_token(&b64("42.")), None);
    }

    #[test]
    fn range_checks_name_their_field() {
        let mut checks = Checks::default();
        checks.range("delay_seconds", Some(-1), 0, 10);
        checks.integer_field(&json!({"x": "a"}), "x", "commands.0.x", 0, 1);
        checks.integer_field(&json!({"x": 5}), "x", "commands.1.x", 0, 9);
        assert_eq!(checks.problems.len(), 2);
        assert_eq!(checks.problems[0].0, "delay_seconds");
        assert_eq!(checks.problems[1].0, "commands.0.x");
    }

    /// The struct's body is byte for byte the body of the JSON map the
    /// start built before (keys sorted, `duplicate` only on new runs), and
    /// its value is that map: a field out of order, renamed or dropped
    /// fails here.
    #[test]
    fn a_start_answer_serializes_as_the_map_did() {
        let started = StartAnswer {
            duplicate: Some(false),
            namespace: "ns".into(),
            outcome: "started_new",
            payload_codec: "json".into(),
            run_id: "42".into(),
            status: "running",
            task_queue: "q \"quoted\"".into(),
            workflow_id: "w-1".into(),
            workflow_type: "Order".into(),
        };
        let map = json!({
            "workflow_id": "w-1", "run_id": "42",
            "workflow_type": "Order", "namespace": "ns",
            "task_queue": "q \"quoted\"", "status": "running",
            "payload_codec": "json", "outcome": "started_new", "duplicate": false,
        });
        let existing = StartAnswer {
            duplicate: None,
            outcome: "returned_existing_run",
            status: "completed",
            ..started.clone()
        };
        let existing_map = json!({
            "workflow_id": "w-1", "run_id": "42",
            "workflow_type": "Order", "namespace": "ns",
            "task_queue": "q \"quoted\"", "status": "completed",
            "payload_codec": "json", "outcome": "returned_existing_run",
        });
        for (answer, map) in [(started, map), (existing, existing_map)] {
            assert_eq!(
                serde_json::to_string(&answer).unwrap(),
                serde_json::to_string(&map).unwrap()
            );
            assert_eq!(answer.into_value(), map);
        }
    }

    /// The answer written with constant keys is its serialization, byte
    /// for byte, whatever its strings hold and with or without
    /// `duplicate`.
    #[test]
    fn a_start_answer_is_written_as_it_serializes() {
        let texts = [
            String::new(),
            "w-1".into(),
            "q \"quoted\" \\ back\\slash".into(),
            "tab\tnew\nline\r\u{0}\u{1f}\u{7f}".into(),
            "\u{e9}t\u{e9} \u{1f600} \u{2028}\u{2029}".into(),
            "</script>&'".into(),
            "x".repeat(600),
        ];
        let mut written = 0;
        for (i, text) in texts.iter().enumerate() {
            for duplicate in [None, Some(false), Some(true)] {
                let other = &texts[(i + 1) % texts.len()];
                let answer = StartAnswer {
                    duplicate,
                    namespace: text.clone(),
                    outcome: if duplicate.is_some() {
                        "started_new"
                    } else {
                        "returned_existing_run"
                    },
                    payload_codec: other.clone(),
                    run_id: format!("{}", 17 + i),
                    status: "running",
                    task_queue: other.clone(),
                    workflow_id: text.clone(),
                    workflow_type: format!("{text}{other}"),
                };
                let mut out = b"kept ".to_vec();
                answer.write_json(&mut out).unwrap();
                let serialized = serde_json::to_vec(&answer).unwrap();
                assert_eq!(&out[..5], b"kept ");
                assert_eq!(
                    String::from_utf8_lossy(&out[5..]),
                    String::from_utf8_lossy(&serialized)
                );
                assert_eq!(out[5..], serialized[..]);
                written += 1;
            }
        }
        assert_eq!(written, 21);
    }
}
