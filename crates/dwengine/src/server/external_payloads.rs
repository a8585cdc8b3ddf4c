//! The runtime external payload transport's operations: upload, fetch and
//! the admission check that every reference a request carries names a
//! stored payload.
//!
//! Upload verifies the declared size and SHA-256 against the bytes, then
//! stores them in one write transaction that first looks for the same
//! bytes (a retry gets the same reference and is not charged again) and
//! reads the namespace's usage for the quota. Fetch answers the bytes with
//! the integrity headers the SDK checks. Quota refusals are counted in the
//! cache family of [`RuntimeExternalPayloadQuota`].

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::external_payloads::{
    is_reference_id, is_sha256, reference, reference_of, PayloadError, RuntimeExternalPayloadQuota,
    CODEC, UPLOAD_SCHEMA,
};
use crate::server::wire::Checks;
use crate::server::{ApiError, Engine};
use crate::store::external_payloads::{PayloadRecord, Stored};

/// What an upload declares in its headers.
#[derive(Debug, Clone, Default)]
pub struct UploadHeaders {
    /// `X-Durable-Workflow-Payload-Codec`.
    pub codec: Option<String>,
    /// `X-Durable-Workflow-Payload-Size`.
    pub size: Option<String>,
    /// `X-Durable-Workflow-Payload-SHA256`.
    pub sha256: Option<String>,
}

/// An upload's bytes as they arrived, spooled to a file of this node's
/// upload directory with their length and SHA-256 counted on the way; the
/// file is removed when this is dropped (stored, refused, or abandoned by
/// a client that went away mid-body).
#[derive(Debug)]
pub struct SpooledUpload {
    path: PathBuf,
    file: File,
    /// Bytes received.
    pub size: u64,
    /// Their lowercase hex SHA-256.
    pub sha256: String,
}

impl Drop for SpooledUpload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl std::io::Read for SpooledUpload {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.read(buf)
    }
}

/// A spool file being written; removed if dropped before it is finished.
struct SpoolFile {
    path: PathBuf,
    file: Option<File>,
}

impl Drop for SpoolFile {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes the chunks `chunks` yields to a new file in `dir`, hashing them,
/// until the sender closes; the async side decides whether the body was
/// whole (a spool it drops is deleted). Runs on a blocking thread.
pub(crate) fn spool(
    dir: &Path,
    mut chunks: tokio::sync::mpsc::Receiver<bytes::Bytes>,
) -> std::io::Result<SpooledUpload> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!(
        "upload-{}-{}{SPOOL_SUFFIX}",
        crate::unix_ms(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let mut spool = SpoolFile {
        path,
        file: Some(file),
    };
    let mut digest = Sha256::new();
    let mut size = 0u64;
    while let Some(chunk) = chunks.blocking_recv() {
        digest.update(&chunk);
        size += chunk.len() as u64;
        spool
            .file
            .as_mut()
            .expect("open until finished")
            .write_all(&chunk)?;
    }
    let mut file = spool.file.take().expect("open until finished");
    file.seek(SeekFrom::Start(0))?;
    Ok(SpooledUpload {
        path: std::mem::take(&mut spool.path),
        file,
        size,
        sha256: hex(&digest.finalize()),
    })
}

/// The suffix of a spool file.
const SPOOL_SUFFIX: &str = ".part";

/// Removes the spool files a previous run of this node left behind (a
/// crash mid-upload); they belong to no request.
pub(crate) fn clear_spool(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(SPOOL_SUFFIX))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// The orphan sweep's period and per-pass cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExternalPayloadSweep {
    /// Unheld payloads past their grace deleted per pass at most.
    pub orphan_sweep_scan_limit: usize,
    /// Time between passes.
    pub interval: Duration,
}

impl ExternalPayloadSweep {
    /// The configuration key of the per-pass cap.
    pub const SCAN_LIMIT_KEY: &'static str =
        "server.external_payload_transport.orphan_sweep_scan_limit";
    /// The cap's default.
    pub const DEFAULT_SCAN_LIMIT: usize = 100;
    /// The configuration key of the orphan grace (seconds).
    pub const GRACE_KEY: &'static str = "server.external_payload_transport.orphan_grace_seconds";
    /// The variable of the period, in milliseconds.
    pub const INTERVAL_ENV: &'static str = "DW_EXTERNAL_PAYLOAD_SWEEP_INTERVAL_MS";
    /// The default period: a minute (the grace is a day).
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

    /// The cap read from `lookup` (0 or absent: the default), with `interval`.
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>, interval: Duration) -> Self {
        ExternalPayloadSweep {
            orphan_sweep_scan_limit: lookup(Self::SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT),
            interval: interval.max(Duration::from_millis(10)),
        }
    }
}

impl Default for ExternalPayloadSweep {
    fn default() -> Self {
        Self::from_config(|_| None, Self::DEFAULT_INTERVAL)
    }
}

/// Runs [`Engine::expire_orphan_payloads`] every interval while this node
/// holds the sweep's lease, until the runtime stops. The first pass comes
/// one interval after the start, not at once as tokio's first tick would:
/// a pass at start-up gains nothing over one a period later (an orphan's
/// grace is a day by default) and raced the node's first requests, so a
/// period now means no pass sooner, which a test with a long period and a
/// zero grace relies on (its uploads were deleted when a loaded machine
/// ran that pass late).
pub(crate) async fn expire_forever(engine: Arc<Engine>) {
    let every = engine.config.external_payload_sweep.interval;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let sweep = crate::cluster::Sweep::ExternalPayloadOrphans;
        if !engine.elected(sweep) {
            continue;
        }
        let node = engine.clone();
        let pass = move || {
            node.sweep_leases.record_pass(sweep);
            node.expire_orphan_payloads(crate::unix_ms())
        };
        match tokio::task::spawn_blocking(pass).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "external payload orphan sweep failed"),
            Err(error) => tracing::warn!(%error, "external payload orphan sweep task failed"),
        }
    }
}

/// The outcome of a stored upload.
enum Upload {
    Stored(Stored),
    Refused(PayloadError),
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl Engine {
    /// One orphan sweep pass at `now_ms`: deletes at most the scan limit of
    /// payloads nothing holds whose last upload is older than the orphan
    /// grace, oldest first; returns how many.
    pub fn expire_orphan_payloads(&self, now_ms: i64) -> Result<usize, ApiError> {
        let limit = self.config.external_payload_sweep.orphan_sweep_scan_limit;
        Ok(self.write(move |store| store.expire_unreferenced_payloads(now_ms, limit))?)
    }

    /// Refuses an upload whose declared length is over the transport's
    /// limit before its body is read.
    pub fn check_payload_length(&self, length: u64) -> Result<(), ApiError> {
        let limit = self.external_payloads.settings().max_payload_bytes;
        if length > limit {
            return Err(PayloadError::Oversized {
                size: length,
                limit,
            }
            .into());
        }
        Ok(())
    }

    /// The directory this node spools upload bodies to:
    /// `<polling cache path>/payload-uploads/<node>` (local, per node).
    pub fn upload_spool_dir(&self) -> PathBuf {
        self.config
            .polling_cache_path
            .join("payload-uploads")
            .join(crate::cache::hash_dimensions(&[&self.config.server_id]))
    }

    /// Refuses an upload before its body is read: the transport off, a
    /// codec other than the SDK's, or a declared length over the limit.
    pub fn precheck_upload(&self, headers: &UploadHeaders) -> Result<(), ApiError> {
        if !self.external_payloads.settings().enabled() {
            return Err(PayloadError::Disabled.into());
        }
        let codec = headers.codec.as_deref().map(str::trim).unwrap_or_default();
        if codec != CODEC {
            return Err(PayloadError::Unsupported(format!(
                "X-Durable-Workflow-Payload-Codec must be {CODEC}; got {codec:?}"
            ))
            .into());
        }
        if let Some(declared) = headers
            .size
            .as_deref()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            self.check_payload_length(declared)?;
        }
        Ok(())
    }

    /// `POST /api/external-payloads/v1`: stores `data` for `namespace`.
    /// 201 with the reference; 200 when the same bytes were already stored.
    pub fn upload_external_payload(
        &self,
        namespace: &str,
        headers: UploadHeaders,
        data: Vec<u8>,
    ) -> Result<(u16, Value), ApiError> {
        let sha256 = hex(&Sha256::digest(&data));
        let size = data.len() as u64;
        self.store_upload(
            namespace,
            headers,
            size,
            sha256,
            Box::new(std::io::Cursor::new(data)),
        )
    }

    /// As [`Engine::upload_external_payload`] for a body spooled to disk:
    /// copied into its row a chunk at a time, never held whole in memory.
    pub fn upload_spooled_payload(
        &self,
        namespace: &str,
        headers: UploadHeaders,
        spooled: SpooledUpload,
    ) -> Result<(u16, Value), ApiError> {
        let (size, sha256) = (spooled.size, spooled.sha256.clone());
        self.store_upload(namespace, headers, size, sha256, Box::new(spooled))
    }

    fn store_upload(
        &self,
        namespace: &str,
        headers: UploadHeaders,
        size: u64,
        actual: String,
        mut source: Box<dyn std::io::Read + Send>,
    ) -> Result<(u16, Value), ApiError> {
        let settings = self.external_payloads.settings();
        self.precheck_upload(&headers)?;
        self.check_payload_length(size)?;
        let declared = headers.size.as_deref().map(str::trim);
        if declared != Some(size.to_string().as_str()) {
            return Err(PayloadError::IntegrityMismatch(format!(
                "X-Durable-Workflow-Payload-Size {declared:?} does not match the {size} uploaded bytes"
            ))
            .into());
        }
        let sha256 = headers.sha256.as_deref().map(str::trim).unwrap_or_default();
        if !is_sha256(sha256) || sha256 != actual {
            return Err(PayloadError::IntegrityMismatch(
                "X-Durable-Workflow-Payload-SHA256 must be the lowercase hex SHA-256 of the uploaded bytes".into(),
            )
            .into());
        }
        let limits = settings.limits(namespace);
        let ns = namespace.to_owned();
        let upload = self.write(move |store| {
            if let Some(existing) = store.find_external_payload(&ns, CODEC, &actual, size)? {
                // A fresh upload restarts the grace: the reference it
                // answers must outlive the request that names it.
                store.touch_external_payload(&existing.reference_id)?;
                return Ok(Upload::Stored(Stored::Existing(existing)));
            }
            // Counted in this transaction, so racing uploads cannot overshoot.
            if let Err(refused) = RuntimeExternalPayloadQuota::check(limits, size, || {
                store.external_payload_usage(&ns).ok()
            }) {
                return Ok(Upload::Refused(refused));
            }
            let record =
                store.insert_external_payload_from(&ns, CODEC, &actual, size, &mut source)?;
            Ok(Upload::Stored(Stored::Created(record)))
        })?;
        let stored = match upload {
            Upload::Stored(stored) => stored,
            Upload::Refused(refused) => {
                if let PayloadError::Quota { reason, .. } = &refused {
                    self.external_payloads.record(namespace, *reason);
                }
                return Err(refused.into());
            }
        };
        let status = if matches!(stored, Stored::Created(_)) {
            201
        } else {
            200
        };
        Ok((
            status,
            json!({
                "schema": UPLOAD_SCHEMA,
                "transport_version": 1,
                "reference": reference(stored.record()),
                "deduplicated": status == 200,
            }),
        ))
    }

    /// `GET /api/external-payloads/v1/{referenceId}`: the stored bytes of
    /// `namespace`'s payload. Declared integrity headers, when sent, must
    /// match the stored reference.
    pub fn fetch_external_payload(
        &self,
        namespace: &str,
        reference_id: &str,
        expected: UploadHeaders,
    ) -> Result<PayloadRecord, ApiError> {
        if !is_reference_id(reference_id) {
            return Err(PayloadError::NotFound(reference_id.to_owned()).into());
        }
        let (ns, id) = (namespace.to_owned(), reference_id.to_owned());
        let found = self.read(|store| store.external_payload_record(&ns, &id))?;
        let Some(record) = found else {
            return Err(PayloadError::NotFound(reference_id.to_owned()).into());
        };
        let size = record.size_bytes.to_string();
        for (header, stored) in [
            (&expected.codec, &record.codec),
            (&expected.size, &size),
            (&expected.sha256, &record.sha256),
        ] {
            if header.as_deref().is_some_and(|sent| sent.trim() != stored) {
                return Err(PayloadError::IntegrityMismatch(
                    "the declared payload metadata does not match the stored reference".into(),
                )
                .into());
            }
        }
        Ok(record)
    }

    /// Every runtime external payload reference inside `payloads` must
    /// name a payload stored in this namespace with the same codec, size
    /// and hash: history then never holds a reference nobody can fetch.
    /// One primary-key read per reference; a 422 names each bad one.
    pub fn verify_payload_references(
        &self,
        namespace: &str,
        payloads: &[(&str, &Value)],
    ) -> Result<(), ApiError> {
        self.verify_references_in(|| Ok(namespace.to_owned()), payloads)
    }

    /// As [`Engine::verify_payload_references`] for the payloads of a
    /// worker's report on `task`, whose namespace is read only when a
    /// reference is present.
    pub fn verify_task_payload_references(
        &self,
        task: i64,
        payloads: &[(&str, &Value)],
    ) -> Result<(), ApiError> {
        self.verify_references_in(
            || Ok(self.read(|store| store.task_queue_of(task))?.0),
            payloads,
        )
    }

    fn verify_references_in(
        &self,
        namespace: impl FnOnce() -> Result<String, ApiError>,
        payloads: &[(&str, &Value)],
    ) -> Result<(), ApiError> {
        let mut found = Vec::new();
        let mut checks = Checks::default();
        for (field, value) in payloads {
            collect(&mut (*field).to_owned(), value, &mut found, &mut checks);
        }
        if found.is_empty() && checks.problems.is_empty() {
            return Ok(());
        }
        let ns = namespace()?;
        let stored = self.read(|store| {
            found
                .into_iter()
                .map(|(field, claimed)| {
                    let row = store.external_payload_record(&ns, &claimed.reference_id)?;
                    Ok((field, claimed, row))
                })
                .collect::<Result<Vec<_>, crate::store::Error>>()
        })?;
        for (field, claimed, row) in stored {
            match row {
                Some(row) if row == claimed => {}
                Some(_) => {
                    checks.problem(
                        &format!("{field}.external_payload"),
                        "The reference's codec, size_bytes or sha256 differs from the stored payload.",
                    );
                }
                None => {
                    checks.problem(
                        &format!("{field}.external_payload"),
                        format!(
                            "No stored external payload {} in this namespace: upload it to POST {} first.",
                            claimed.reference_id,
                            crate::external_payloads::UPLOAD_PATH
                        ),
                    );
                }
            }
        }
        if checks.problems.is_empty() {
            Ok(())
        } else {
            Err(crate::server::wire::validation(checks).into())
        }
    }
}

/// Whether any of `payloads` names an external payload (well formed or
/// not): a write that stores it adds to that payload's reference count.
///
/// The answer [`collect`] would give (something found or a problem), from
/// a walk that stops at the first and keeps no path: every start asks
/// this of its input, and the walk's path string and lists were an
/// allocation or more per start (docs/performance.md, "the gate's
/// copies").
pub(crate) fn references_external_payloads(payloads: &[(&str, &Value)]) -> bool {
    payloads
        .iter()
        .any(|(_, value)| names_external_payload(value))
}

/// Whether [`collect`] finds an envelope or a problem in `value`.
fn names_external_payload(value: &Value) -> bool {
    if let Some(runtime) = crate::store::external_payloads::runtime_envelope(value) {
        return names_external_payload(&runtime);
    }
    match value {
        // `collect` records a reference or a problem here, unless
        // `reference_of` finds nothing.
        Value::Object(map) if map.contains_key("external_payload") => {
            !matches!(reference_of(value), Ok(None))
        }
        Value::Object(map) => map.values().any(names_external_payload),
        Value::Array(items) => items.iter().any(names_external_payload),
        _ => false,
    }
}

/// Every `{codec, external_payload}` envelope in `value`, by field path.
/// `field` is the path so far, extended and cut back in place: every
/// start walks its input here, and a path allocated per key was a third
/// of the walk's instructions although it is read only when something is
/// found (docs/performance.md, "A start's round trip").
fn collect(
    field: &mut String,
    value: &Value,
    found: &mut Vec<(String, PayloadRecord)>,
    checks: &mut Checks,
) {
    // A request may also name a stored payload in the contract's form
    // (`external_storage` with a `dw-runtime:` uri): checked the same way.
    if let Some(runtime) = crate::store::external_payloads::runtime_envelope(value) {
        return collect(field, &runtime, found, checks);
    }
    let len = field.len();
    match value {
        Value::Object(map) if map.contains_key("external_payload") => match reference_of(value) {
            Ok(Some(record)) => found.push((field.clone(), record)),
            Ok(None) => {}
            Err(problem) => {
                checks.problem(&format!("{field}.external_payload"), problem);
            }
        },
        Value::Object(map) => {
            for (key, item) in map {
                field.push('.');
                field.push_str(key);
                collect(field, item, found, checks);
                field.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                use std::fmt::Write as _;
                let _ = write!(field, ".{i}");
                collect(field, item, found, checks);
                field.truncate(len);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Problems are named by their full path (keys and array indexes),
    /// and a path is cut back after each branch: siblings never carry
    /// a previous branch's keys.
    #[test]
    fn nested_envelopes_are_named_by_their_paths() {
        let bad = json!({ "codec": "json", "external_payload": 5 });
        let value = json!({
            "a": [{ "deep": { "x": 1 } }, bad.clone(), [bad.clone()]],
            "b": { "c": bad.clone() },
            "d": bad,
            "e": "plain",
        });
        let mut found = Vec::new();
        let mut checks = Checks::default();
        collect(&mut "input".to_owned(), &value, &mut found, &mut checks);
        let fields: Vec<&str> = checks.problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "input.a.1.external_payload",
                "input.a.2.0.external_payload",
                "input.b.c.external_payload",
                "input.d.external_payload",
            ]
        );
        assert!(found.is_empty());
        assert!(references_external_payloads(&[("input", &value)]));
        assert!(!references_external_payloads(&[(
            "input",
            &json!({ "codec": "json", "blob": "[]" })
        )]));
    }

    /// The short walk answers as the full one: something found or a
    /// problem, on well-formed, malformed, runtime-form and nested
    /// references and on plain inputs.
    #[test]
    fn the_short_walk_answers_as_collect() {
        // The full walk's references found and problems raised.
        let walk = |value: &Value| {
            let mut found = Vec::new();
            let mut checks = Checks::default();
            collect(&mut "input".to_owned(), value, &mut found, &mut checks);
            (found.len(), checks.problems.len())
        };
        let full = |value: &Value| walk(value) != (0, 0);
        let sha = "a".repeat(64);
        let good = json!({ "codec": "avro", "external_payload": {
            "schema": crate::external_payloads::REFERENCE_SCHEMA, "reference_id": "ep_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "codec": "avro", "size_bytes": 10, "sha256": sha } });
        let runtime = json!({ "codec": "avro", "external_storage": {
            "schema": crate::store::external_payloads::STORED_REFERENCE_SCHEMA,
            "uri": format!("{}ep_01ARZ3NDEKTSV4RRFFQ69G5FAV", crate::store::external_payloads::RUNTIME_URI_PREFIX),
            "codec": "avro", "size_bytes": 10, "sha256": sha } });
        let cases = [
            json!({ "codec": "json", "blob": "[]" }),
            json!(null),
            json!(5),
            json!("external_payload"),
            json!([]),
            json!({}),
            json!({ "external_payload": null }),
            json!({ "codec": "json", "external_payload": 5 }),
            json!({ "codec": "json", "external_payload": {}, "x": 1 }),
            good.clone(),
            json!([1, [2, [good.clone()]]]),
            json!({ "a": { "b": { "c": good } } }),
            runtime.clone(),
            json!({ "nested": [runtime] }),
            json!({ "codec": "json", "external_storage": { "uri": "elsewhere" } }),
            json!({ "a": [{ "deep": { "x": 1 } }, "external_payload", { "k": ["v"] }] }),
        ];
        for value in &cases {
            assert_eq!(
                references_external_payloads(&[("input", value)]),
                full(value),
                "{value}"
            );
        }
        assert!(cases[9..14].iter().all(full), "the references are found");
        for well_formed in [&cases[9], &cases[12]] {
            assert_eq!(walk(well_formed), (1, 0), "{well_formed}");
        }
        assert!(!full(&cases[0]) && full(&cases[7]));
    }
}
