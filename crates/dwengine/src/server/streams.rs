//! Run-scoped workflow output streams on the control plane.
//!
//! The SDK's `append_workflow_stream`, `describe_workflow_stream`,
//! `list_workflow_streams`, `subscribe_workflow_stream` and
//! `close_workflow_stream` under `/api/workflows/{id}/runs/{run}/streams`,
//! and the checks a workflow's `record_side_effect` stream directive passes
//! before its completion is applied. Requests are validated here (every
//! problem in one 422); the store does the rest in one transaction.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;
use serde_json::{json, Value};

use dwpolicy::boundary::{
    RequestValidator, MAX_NAME_CHARS, MAX_REASON_CHARS, MAX_REQUEST_ID_CHARS,
};

use crate::durable_state::DurableResource;
use crate::server::error::finish_with;
use crate::server::wire::{self, Checks};
use crate::server::{ApiError, Engine};
use crate::store::streams::StreamDirective;
use crate::store::{
    Error as StoreError, NewStreamItem, RunId, RunStatus, StreamAppend, StreamItem, StreamOrigin,
    StreamState,
};

/// The durable-state resources a stream append or close may raise.
pub(crate) const STREAM_RESOURCES: [DurableResource; 2] = [
    DurableResource::WorkflowStreams,
    DurableResource::WorkflowStreamItems,
];
/// Items one append may carry.
pub const MAX_APPEND_ITEMS: usize = 500;
/// Items one page may return (`max_items`), as the SDK checks.
pub const MAX_PAGE_ITEMS: i64 = 500;
/// Items a page returns when `max_items` is not given.
pub const DEFAULT_PAGE_ITEMS: i64 = 100;
/// The longest a read may wait for items (`wait_seconds`), as the SDK checks.
pub const MAX_WAIT_SECONDS: i64 = 60;
/// The longest retention window a close may set: 30 days.
pub const MAX_RETENTION_SECONDS: i64 = 30 * 24 * 3600;
/// The longest external payload reference.
pub const MAX_PAYLOAD_REFERENCE_CHARS: usize = 2048;
/// The largest `max_pending_items` an append may name.
pub const MAX_PENDING_ITEMS: i64 = 1_000_000_000;

/// The default cap of waiting page reads one node holds at once.
pub const DEFAULT_MAX_WAITS: usize = 256;

/// Counts the page reads waiting on this node: each waits without a
/// thread but re-reads the store every recheck, so the cap bounds those
/// reads. A read past the cap is refused with 429 `stream_wait_capacity`.
#[derive(Debug)]
pub struct StreamWaits {
    held: AtomicUsize,
    cap: usize,
}

/// One held wait, released when dropped.
#[derive(Debug)]
pub struct StreamWait<'a>(&'a AtomicUsize);

impl Drop for StreamWait<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl StreamWaits {
    /// At most `cap` waits at once.
    pub fn new(cap: usize) -> Self {
        StreamWaits {
            held: AtomicUsize::new(0),
            cap,
        }
    }

    /// A wait, or the cap when the node holds it already.
    pub fn hold(&self) -> Result<StreamWait<'_>, ApiError> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .map(|_| StreamWait(&self.held))
            .map_err(|_| ApiError::StreamWaitCapacity(self.cap))
    }
}

/// `POST …/streams/{name}/items`.
#[derive(Debug, Deserialize)]
pub struct AppendStreamBody {
    /// The items, in order.
    #[serde(default)]
    pub items: Vec<NewStreamItem>,
    /// Refuse the append if more items would stay unacknowledged.
    #[serde(default)]
    pub max_pending_items: Option<i64>,
}

/// `POST …/streams/{name}/close`.
#[derive(Debug, Default, Deserialize)]
pub struct CloseStreamBody {
    /// Marks the stream errored instead of closed.
    #[serde(default)]
    pub error_reason: Option<String>,
    /// How long the ended stream is kept.
    #[serde(default)]
    pub retention_seconds: Option<i64>,
}

/// `GET …/streams/{name}/items?from=&max_items=&wait_seconds=`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamPageQuery {
    /// The first offset wanted (and every offset before it acknowledged).
    #[serde(default)]
    pub from: Option<i64>,
    /// Items at most.
    #[serde(default)]
    pub max_items: Option<i64>,
    /// Seconds to wait for an item when none is there yet.
    #[serde(default)]
    pub wait_seconds: Option<i64>,
}

/// A validated page request.
#[derive(Debug, Clone, Copy)]
pub struct PageSpec {
    /// The run.
    pub run: RunId,
    /// The first offset wanted.
    pub from: u64,
    /// Items at most.
    pub max_items: usize,
    /// Seconds to wait for an item.
    pub wait_seconds: u64,
}

/// Checks a stream name: required, within the operation-name length.
fn check_name(v: &mut RequestValidator<'_>, checks: &mut Checks, field: &str, name: &str) {
    v.operation_name(field, name);
    if name.trim().is_empty() {
        checks.problem(field, format!("The {field} field is required."));
    }
}

/// Checks the items of an append, each problem under `{prefix}items.{i}.…`.
fn check_items(
    v: &mut RequestValidator<'_>,
    checks: &mut Checks,
    prefix: &str,
    items: &[NewStreamItem],
    max_pending_items: Option<i64>,
) {
    let field = format!("{prefix}items");
    if items.is_empty() {
        checks.problem(&field, "The items field must hold at least one item.");
    } else if items.len() > MAX_APPEND_ITEMS {
        checks.problem(
            &field,
            format!(
                "The items field may hold at most {MAX_APPEND_ITEMS} items; got {}.",
                items.len()
            ),
        );
    }
    for (i, item) in items.iter().enumerate().take(MAX_APPEND_ITEMS) {
        let at = |name: &str| format!("{field}.{i}.{name}");
        let payload = item.payload.as_ref().filter(|p| !p.is_null());
        match (payload, &item.payload_reference) {
            (None, None) => {
                checks.problem(
                    &at("payload"),
                    "Each item needs a payload or a payload_reference.",
                );
            }
            (Some(payload), _) => {
                checks.inline_payload(&at("payload"), payload);
            }
            _ => {}
        }
        if let Some(reference) = &item.payload_reference {
            if reference.trim().is_empty() {
                checks.problem(
                    &at("payload_reference"),
                    "The payload_reference must not be empty.",
                );
            }
            v.text(
                &at("payload_reference"),
                reference,
                MAX_PAYLOAD_REFERENCE_CHARS,
            );
        }
        for (name, value, max) in [
            ("payload_codec", &item.payload_codec, MAX_NAME_CHARS),
            ("item_type", &item.item_type, MAX_NAME_CHARS),
            ("content_type", &item.content_type, MAX_NAME_CHARS),
            (
                "idempotency_key",
                &item.idempotency_key,
                MAX_REQUEST_ID_CHARS,
            ),
        ] {
            if let Some(text) = value {
                v.text(&at(name), text, max);
            }
        }
    }
    checks.range(
        &format!("{prefix}max_pending_items"),
        max_pending_items,
        1,
        MAX_PENDING_ITEMS,
    );
}

/// Checks a close: a non-empty reason within 1,000 characters, a
/// retention window of 1 s to 30 days.
fn check_close(
    v: &mut RequestValidator<'_>,
    checks: &mut Checks,
    prefix: &str,
    error_reason: Option<&str>,
    retention_seconds: Option<i64>,
) {
    if let Some(reason) = error_reason {
        let field = format!("{prefix}error_reason");
        if reason.trim().is_empty() {
            checks.problem(&field, "The error_reason must not be empty.");
        }
        v.text(&field, reason, MAX_REASON_CHARS);
    }
    checks.range(
        &format!("{prefix}retention_seconds"),
        retention_seconds,
        1,
        MAX_RETENTION_SECONDS,
    );
}

/// Checks a completion's `commands.<i>.workflow_stream` directive, adding
/// every problem to `checks` (the caller answers them in one 422).
pub(crate) fn check_directive(
    limits: &dwpolicy::boundary::RequestLimits,
    checks: &mut Checks,
    prefix: &str,
    raw: &Value,
) {
    let directive: StreamDirective = match serde_json::from_value(raw.clone()) {
        Ok(directive) => directive,
        Err(e) => {
            checks.problem(prefix, e.to_string());
            return;
        }
    };
    let mut v = limits.validator();
    let at = format!("{prefix}.");
    check_name(
        &mut v,
        checks,
        &format!("{at}stream_name"),
        &directive.stream_name,
    );
    let signed = |n: Option<u64>| n.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    match directive.operation.as_str() {
        "append" => check_items(
            &mut v,
            checks,
            &at,
            &directive.items,
            signed(directive.max_pending_items),
        ),
        "close" | "error" => {
            if directive.operation == "error" && directive.error_reason.is_none() {
                checks.problem(
                    &format!("{at}error_reason"),
                    "An error directive needs an error_reason.",
                );
            }
            check_close(
                &mut v,
                checks,
                &at,
                directive.error_reason.as_deref(),
                signed(directive.retention_seconds),
            );
        }
        other => {
            checks.problem(
                &format!("{at}operation"),
                format!("The operation must be append, close or error; got {other:?}."),
            );
        }
    }
    if let Err(dwpolicy::boundary::BoundaryError::ValidationFailed {
        validation_errors, ..
    }) = v.finish()
    {
        for (field, problems) in validation_errors {
            for problem in problems {
                checks.problem(&field, problem);
            }
        }
    }
}

/// A stream's description as the SDK reads it.
pub fn describe(stream: &StreamState) -> Value {
    let at = |ms: Option<i64>| ms.map(wire::timestamp);
    json!({
        "workflow_id": stream.workflow_id,
        "workflow_run_id": wire::run_id(stream.run),
        "run_id": wire::run_id(stream.run),
        "stream_name": stream.name,
        "status": stream.status,
        "last_offset": stream.last_offset(),
        "total_items": stream.total_items,
        "pending_items": stream.pending_items(),
        "acknowledged_offset": stream.acknowledged_offset,
        "error_reason": stream.error_reason,
        "opened_at": wire::timestamp(stream.opened_at_ms),
        "last_appended_at": at(stream.last_appended_at_ms),
        "closed_at": at(stream.closed_at_ms),
        "retention_seconds": stream.retention_seconds,
        "expires_at": at(stream.expires_at_ms),
        "terminal": stream.terminal(),
    })
}

fn item(item: &StreamItem) -> Value {
    json!({
        "offset": item.offset,
        "payload": item.payload,
        "payload_codec": item.payload_codec,
        "payload_reference": item.payload_reference,
        "idempotency_key": item.idempotency_key,
        "item_type": item.item_type,
        "content_type": item.content_type,
        "origin": item.origin,
        "origin_reference": item.origin_reference,
        "emitted_at": wire::timestamp(item.emitted_at_ms),
    })
}

/// A store refusal on a named run, with the operation for `run_not_active`.
fn refused(e: StoreError, operation: &'static str, run: RunId) -> ApiError {
    match e {
        StoreError::RunNotActive { status, .. } => ApiError::RunClosed {
            operation,
            run_id: wire::run_id(run),
            status: status.as_str().to_owned(),
        },
        other => other.into(),
    }
}

impl Engine {
    fn stream_run(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
        name: Option<&str>,
    ) -> Result<RunId, ApiError> {
        let mut v = self.config.request_limits.validator();
        let mut checks = Checks::default();
        v.workflow_id(workflow_id);
        if let Some(name) = name {
            check_name(&mut v, &mut checks, "stream_name", name);
        }
        finish_with(v, &[], &checks.problems)?;
        self.target(namespace, workflow_id, Some(run_id))
    }

    /// `GET …/runs/{run}/streams`.
    pub fn list_streams(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
    ) -> Result<Value, ApiError> {
        let run = self.stream_run(namespace, workflow_id, run_id, None)?;
        let streams = self.read(|s| s.streams(run))?;
        Ok(json!({
            "workflow_id": workflow_id, "workflow_run_id": wire::run_id(run),
            "streams": streams.iter().map(describe).collect::<Vec<_>>(),
        }))
    }

    /// `GET …/runs/{run}/streams/{name}`.
    pub fn describe_stream(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let run = self.stream_run(namespace, workflow_id, run_id, Some(name))?;
        let stream = self.read(|s| s.stream(run, name))?;
        Ok(json!({
            "workflow_id": workflow_id, "workflow_run_id": wire::run_id(run),
            "stream": describe(&stream),
        }))
    }

    /// `POST …/runs/{run}/streams/{name}/items`.
    pub fn append_stream(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
        name: &str,
        body: AppendStreamBody,
    ) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        let mut checks = Checks::default();
        v.workflow_id(workflow_id);
        check_name(&mut v, &mut checks, "stream_name", name);
        check_items(&mut v, &mut checks, "", &body.items, body.max_pending_items);
        finish_with(v, &[], &checks.problems)?;
        let _slot = self.admit_namespace(namespace)?;
        let run = self.target(namespace, workflow_id, Some(run_id))?;
        let stream_name = name.to_owned();
        let max_pending = body.max_pending_items.map(|n| n.unsigned_abs());
        let appended = self
            .write_within_quota(namespace, &STREAM_RESOURCES, move |s| {
                s.append_stream(
                    run,
                    StreamAppend {
                        name: &stream_name,
                        items: &body.items,
                        origin: StreamOrigin::Client,
                        origin_reference: None,
                        max_pending_items: max_pending,
                    },
                )
            })?
            .map_err(|e| refused(e, "stream_append", run))?;
        // Page reads waiting on this run look again now.
        self.wake_run(run);
        Ok(json!({
            "workflow_id": workflow_id, "workflow_run_id": wire::run_id(run),
            "stream": describe(&appended.stream),
            "accepted_offsets": appended.offsets,
            "accepted": appended.accepted,
            "deduped": appended.deduplicated,
        }))
    }

    /// `POST …/runs/{run}/streams/{name}/close`.
    pub fn close_stream(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
        name: &str,
        body: CloseStreamBody,
    ) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        let mut checks = Checks::default();
        v.workflow_id(workflow_id);
        check_name(&mut v, &mut checks, "stream_name", name);
        check_close(
            &mut v,
            &mut checks,
            "",
            body.error_reason.as_deref(),
            body.retention_seconds,
        );
        finish_with(v, &[], &checks.problems)?;
        let _slot = self.admit_namespace(namespace)?;
        let run = self.target(namespace, workflow_id, Some(run_id))?;
        let stream_name = name.to_owned();
        let retention = body.retention_seconds.map(|n| n.unsigned_abs());
        // Closing a stream the run never opened creates it (already ended).
        let closed = self
            .write_within_quota(namespace, &STREAM_RESOURCES, move |s| {
                s.close_stream(run, &stream_name, body.error_reason.as_deref(), retention)
            })?
            .map_err(|e| refused(e, "stream_close", run))?;
        self.wake_run(run);
        Ok(json!({
            "workflow_id": workflow_id, "workflow_run_id": wire::run_id(run),
            "stream": describe(&closed),
        }))
    }

    /// Validates a page request and finds its run.
    pub fn stream_page_spec(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
        name: &str,
        query: &StreamPageQuery,
    ) -> Result<PageSpec, ApiError> {
        let mut v = self.config.request_limits.validator();
        let mut checks = Checks::default();
        v.workflow_id(workflow_id);
        check_name(&mut v, &mut checks, "stream_name", name);
        checks.range("from", query.from, 0, i64::MAX);
        checks.range("max_items", query.max_items, 1, MAX_PAGE_ITEMS);
        checks.range("wait_seconds", query.wait_seconds, 0, MAX_WAIT_SECONDS);
        finish_with(v, &[], &checks.problems)?;
        let run = self.target(namespace, workflow_id, Some(run_id))?;
        Ok(PageSpec {
            run,
            from: query.from.unwrap_or(0).unsigned_abs(),
            max_items: usize::try_from(query.max_items.unwrap_or(DEFAULT_PAGE_ITEMS))
                .unwrap_or(100),
            wait_seconds: query.wait_seconds.unwrap_or(0).unsigned_abs(),
        })
    }

    /// One read of a page: the answer, and whether it is worth returning
    /// now (it has items, or the stream has ended) rather than waiting.
    /// A stream the (running) run has not opened yet reads as an empty
    /// open stream, so a subscriber may start before the producer.
    pub fn stream_page(
        &self,
        workflow_id: &str,
        name: &str,
        spec: PageSpec,
    ) -> Result<(Value, bool), ApiError> {
        let run = spec.run;
        let read = self.read(
            |s| match s.stream_items(run, name, spec.from, spec.max_items) {
                Ok(found) => Ok(Some(found)),
                Err(StoreError::StreamNotFound { .. })
                    if s.run(run)?.status == RunStatus::Running =>
                {
                    Ok(None)
                }
                Err(e) => Err(e),
            },
        )?;
        let Some((stream, items)) = read else {
            let pending = json!({
                "workflow_id": workflow_id, "workflow_run_id": wire::run_id(run),
                "run_id": wire::run_id(run), "stream_name": name, "status": "open",
                "last_offset": null, "total_items": 0, "pending_items": 0, "terminal": false,
            });
            let page = json!({
                "workflow_id": workflow_id, "workflow_run_id": wire::run_id(run),
                "stream": pending, "items": [], "next_offset": spec.from, "terminal": false,
            });
            return Ok((page, false));
        };
        if spec.from > stream.acknowledged_offset && stream.total_items > stream.acknowledged_offset
        {
            let stream_name = name.to_owned();
            self.write(move |s| s.acknowledge_stream(run, &stream_name, spec.from))?;
        }
        let next_offset = items.last().map_or(spec.from, |i| i.offset + 1);
        // Terminal only once the reader has every item: a closed stream
        // with items left still pages on.
        let terminal = stream.terminal() && next_offset >= stream.total_items;
        let ready = !items.is_empty() || terminal;
        let mut described = describe(&stream);
        if spec.from > stream.acknowledged_offset {
            let acknowledged = spec.from.min(stream.total_items);
            described["acknowledged_offset"] = acknowledged.into();
            described["pending_items"] = stream.total_items.saturating_sub(acknowledged).into();
        }
        let page = json!({
            "workflow_id": workflow_id, "workflow_run_id": wire::run_id(run),
            "stream": described,
            "items": items.iter().map(item).collect::<Vec<_>>(),
            "next_offset": next_offset,
            "terminal": terminal,
        });
        Ok((page, ready))
    }
}
