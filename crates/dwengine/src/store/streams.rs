//! Run-scoped workflow output streams: append, close, read, reclaim.
//!
//! A run publishes ordered output to named streams (offsets 0, 1, 2, …)
//! that clients read in resumable pages. Appends come from clients over the
//! control plane or from workflow code through a completion's
//! `record_side_effect` directive; both go through [`append_in`], so an item
//! with an idempotency key is stored once however often it is retried. A
//! read from offset `n` acknowledges every item before `n`: the items after
//! the acknowledged offset are the stream's *pending* items, which an
//! append's `max_pending_items` holds back (backpressure).
//!
//! A stream ends closed or errored, explicitly or when its run ends
//! ([`close_open_streams_of_run`], called by the run's terminal
//! transition). From then it expires after its retention window; an
//! expired stream reads as gone, and [`Store::reclaim_expired_streams`]
//! deletes expired streams and their items a bounded batch at a time.

use crate::store::db::{params, Connection, OptionalExtension, Row};
use serde::Deserialize;
use serde_json::Value;

pub use crate::store::config::{
    StreamPolicy, DEFAULT_MAX_ITEMS_PER_STREAM, DEFAULT_MAX_STREAMS_PER_RUN,
    DEFAULT_STREAM_RETENTION_SECONDS,
};
use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::{RunId, RunStatus};
use crate::store::rows::{check_size, load_head, now_ms, to_i64, to_u64, RunHead};
use crate::store::tx::WriteTx;
use dwpolicy::{LimitKind, RunRef, StructuralLimits};

/// One item to append, as validated by the caller.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct NewStreamItem {
    /// The value (an opaque payload envelope), when the item carries one.
    #[serde(default)]
    pub payload: Option<Value>,
    /// The codec the payload is encoded with.
    #[serde(default)]
    pub payload_codec: Option<String>,
    /// An external payload reference (a URI the reader resolves).
    #[serde(default)]
    pub payload_reference: Option<String>,
    /// The producer's item type.
    #[serde(default)]
    pub item_type: Option<String>,
    /// The payload's content type.
    #[serde(default)]
    pub content_type: Option<String>,
    /// Makes a retried append store the item once.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// A workflow stream operation carried by a `record_side_effect` command,
/// as the SDK sends it (`append`, `close` or `error`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StreamDirective {
    /// `append`, `close` or `error`.
    pub operation: String,
    /// The stream.
    pub stream_name: String,
    /// The workflow command that issued it.
    #[serde(default)]
    pub command_identity: Option<String>,
    /// Its position among the run's stream commands.
    #[serde(default)]
    pub command_ordinal: Option<u64>,
    /// The items of an append.
    #[serde(default)]
    pub items: Vec<NewStreamItem>,
    /// An append's backpressure ceiling.
    #[serde(default)]
    pub max_pending_items: Option<u64>,
    /// Why an `error` ends the stream.
    #[serde(default)]
    pub error_reason: Option<String>,
    /// The retention window a close or error sets.
    #[serde(default)]
    pub retention_seconds: Option<u64>,
}

/// Who appended an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamOrigin {
    /// A control-plane client.
    Client,
    /// The run's workflow code (a completion directive).
    Workflow,
}

impl StreamOrigin {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamOrigin::Client => "client",
            StreamOrigin::Workflow => "workflow",
        }
    }
}

/// An append.
#[derive(Debug, Clone, Copy)]
pub struct StreamAppend<'a> {
    /// The stream (created open if the run has none of that name).
    pub name: &'a str,
    /// The items, in order.
    pub items: &'a [NewStreamItem],
    /// Who appends.
    pub origin: StreamOrigin,
    /// What appended them (a workflow command's identity).
    pub origin_reference: Option<&'a str>,
    /// Refuse the append if it would leave more unacknowledged items.
    pub max_pending_items: Option<u64>,
}

/// A stream's lifecycle and backlog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamState {
    /// Its run.
    pub run: RunId,
    /// The run's namespace.
    pub namespace: String,
    /// The run's workflow id.
    pub workflow_id: String,
    /// Its name within the run.
    pub name: String,
    /// `open`, `closed` or `errored`.
    pub status: String,
    /// Why it errored.
    pub error_reason: Option<String>,
    /// Items appended (the next offset).
    pub total_items: u64,
    /// Offsets below this were acknowledged by a read.
    pub acknowledged_offset: u64,
    /// How long it is kept once it ended.
    pub retention_seconds: u64,
    /// Opened (Unix ms).
    pub opened_at_ms: i64,
    /// The last append (Unix ms).
    pub last_appended_at_ms: Option<i64>,
    /// Closed or errored (Unix ms).
    pub closed_at_ms: Option<i64>,
    /// When it becomes reclaimable (Unix ms; `None` while open).
    pub expires_at_ms: Option<i64>,
}

impl StreamState {
    /// Whether no more items can be appended.
    pub fn terminal(&self) -> bool {
        self.status != "open"
    }

    /// The newest item's offset.
    pub fn last_offset(&self) -> Option<u64> {
        self.total_items.checked_sub(1)
    }

    /// Items appended but not yet acknowledged by a read.
    pub fn pending_items(&self) -> u64 {
        self.total_items.saturating_sub(self.acknowledged_offset)
    }
}

/// One stored item.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamItem {
    /// Its position.
    pub offset: u64,
    /// Its value, if it has one.
    pub payload: Option<Value>,
    /// The payload's codec.
    pub payload_codec: Option<String>,
    /// Its external payload reference.
    pub payload_reference: Option<String>,
    /// The producer's item type.
    pub item_type: Option<String>,
    /// The payload's content type.
    pub content_type: Option<String>,
    /// The key it was deduplicated by.
    pub idempotency_key: Option<String>,
    /// `client` or `workflow`.
    pub origin: String,
    /// What appended it.
    pub origin_reference: Option<String>,
    /// Appended (Unix ms).
    pub emitted_at_ms: i64,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The stream afterwards.
    pub stream: StreamState,
    /// Each requested item's offset, new or deduplicated, in request order.
    pub offsets: Vec<u64>,
    /// Items stored by this append.
    pub accepted: u64,
    /// Items whose idempotency key was already stored.
    pub deduplicated: u64,
}

/// What one reclaim pass deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reclaimed {
    /// Expired streams removed (with all their items).
    pub streams: u64,
    /// Items removed.
    pub items: u64,
}

const COLUMNS: &str = "run_id, namespace, workflow_id, name, status, error_reason, total_items, \
     acknowledged_offset, retention_seconds, opened_at_ms, last_appended_at_ms, closed_at_ms, \
     expires_at_ms, id";

fn decode(row: &Row<'_>) -> crate::store::db::Result<(StreamState, i64)> {
    Ok((
        StreamState {
            run: RunId(row.get(0)?),
            namespace: row.get(1)?,
            workflow_id: row.get(2)?,
            name: row.get(3)?,
            status: row.get(4)?,
            error_reason: row.get(5)?,
            total_items: to_u64(row.get(6)?),
            acknowledged_offset: to_u64(row.get(7)?),
            retention_seconds: to_u64(row.get(8)?),
            opened_at_ms: row.get(9)?,
            last_appended_at_ms: row.get(10)?,
            closed_at_ms: row.get(11)?,
            expires_at_ms: row.get(12)?,
        },
        row.get(13)?,
    ))
}

/// The stream `name` of `run` (expired ones included) and its row id.
fn find(conn: &Connection, run: RunId, name: &str) -> Result<Option<(StreamState, i64)>, Error> {
    let sql = format!("SELECT {COLUMNS} FROM workflow_streams WHERE run_id = ?1 AND name = ?2");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![run.0, name], decode)
        .optional()?)
}

/// The live (unexpired) stream `name` of `run`, or [`Error::StreamNotFound`].
fn live(conn: &Connection, run: RunId, name: &str, now: i64) -> Result<(StreamState, i64), Error> {
    match find(conn, run, name)? {
        Some((state, id)) if state.expires_at_ms.is_none_or(|at| at > now) => Ok((state, id)),
        _ => Err(Error::StreamNotFound {
            run,
            name: name.to_owned(),
        }),
    }
}

/// Opens stream `name` on a writable run, within the per-run stream cap.
fn open(
    conn: &Connection,
    head: &RunHead,
    name: &str,
    policy: &StreamPolicy,
) -> Result<(StreamState, i64), Error> {
    head.ensure_writable()?;
    let streams: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM workflow_streams WHERE run_id = ?1")?
        .query_row([head.id.0], |r| r.get(0))?;
    let streams = to_u64(streams);
    if policy.max_streams_per_run > 0 && streams >= policy.max_streams_per_run {
        return Err(Error::StreamCountLimit {
            run: head.id,
            streams,
            limit: policy.max_streams_per_run,
        });
    }
    conn.prepare_cached(
        "INSERT INTO workflow_streams (run_id, namespace, workflow_id, name, status, \
         retention_seconds, opened_at_ms) \
         SELECT id, namespace, workflow_id, CAST(?2 AS TEXT), 'open', CAST(?3 AS BIGINT), \
         CAST(?4 AS BIGINT) FROM runs WHERE id = ?1",
    )?
    .execute(params![
        head.id.0,
        name,
        to_i64(policy.default_retention_seconds.max(1)),
        now_ms()
    ])?;
    find(conn, head.id, name)?.ok_or(Error::RunNotFound(head.id))
}

/// Appends inside an open transaction (a client append or a completion).
pub(crate) fn append_in(
    conn: &Connection,
    head: &RunHead,
    limits: &StructuralLimits,
    policy: &StreamPolicy,
    append: StreamAppend<'_>,
) -> Result<Appended, Error> {
    let existing = find(conn, head.id, append.name)?;
    // Each item's offset when its idempotency key is already stored (in
    // the stream, or earlier in this same request).
    let mut offsets: Vec<Option<u64>> = Vec::with_capacity(append.items.len());
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for (index, item) in append.items.iter().enumerate() {
        let Some(key) = item.idempotency_key.as_deref() else {
            offsets.push(None);
            continue;
        };
        let stored = match &existing {
            Some((_, id)) => conn
                .prepare_cached(
                    "SELECT item_offset FROM workflow_stream_items \
                     WHERE stream_id = ?1 AND idempotency_key = ?2",
                )?
                .query_row(params![id, key], |r| r.get::<_, i64>(0))
                .optional()?
                .map(to_u64),
            None => None,
        };
        offsets.push(stored);
        if stored.is_none() {
            seen.push((key, index));
        }
    }
    let earlier: Vec<Option<usize>> = append
        .items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let key = item.idempotency_key.as_deref()?;
            seen.iter()
                .find(|(k, first)| *k == key && *first < index)
                .map(|(_, first)| *first)
        })
        .collect();
    let new_items = offsets
        .iter()
        .zip(&earlier)
        .filter(|(stored, earlier)| stored.is_none() && earlier.is_none())
        .count() as u64;
    if new_items == 0 {
        // A retry of an append that was stored whole: answer it again, even
        // after the stream or its run ended.
        if let Some((stream, _)) = &existing {
            return Ok(Appended {
                stream: stream.clone(),
                offsets: offsets.into_iter().flatten().collect(),
                accepted: 0,
                deduplicated: append.items.len() as u64,
            });
        }
    }
    let (stream, stream_id) = match existing {
        Some(found) => {
            head.ensure_writable()?;
            found
        }
        None => open(conn, head, append.name, policy)?,
    };
    if stream.terminal() {
        return Err(Error::StreamClosed {
            run: head.id,
            name: append.name.to_owned(),
            status: stream.status,
        });
    }
    if let Some(max) = append.max_pending_items {
        let pending = stream.pending_items();
        if pending.saturating_add(new_items) > max {
            return Err(Error::StreamBackpressure {
                name: append.name.to_owned(),
                pending_items: pending,
                requested: new_items,
                max_pending_items: max,
            });
        }
    }
    // The whole append is refused when its new items would pass the cap;
    // a retry of stored items (no new ones) was answered above.
    let cap = policy.max_items_per_stream;
    if cap > 0 && stream.total_items.saturating_add(new_items) > cap {
        return Err(Error::StreamItemLimit {
            run: head.id,
            name: append.name.to_owned(),
            items: stream.total_items,
            requested: new_items,
            limit: cap,
        });
    }
    let run_label = head.id.to_string();
    let run_ref = RunRef {
        workflow_run_id: &run_label,
        workflow_type: &head.workflow_type,
    };
    let now = now_ms();
    let mut next = stream.total_items;
    let mut assigned: Vec<u64> = Vec::with_capacity(append.items.len());
    let mut accepted = 0;
    for (index, item) in append.items.iter().enumerate() {
        if let Some(offset) = offsets[index] {
            assigned.push(offset);
            continue;
        }
        if let Some(first) = earlier[index] {
            assigned.push(assigned[first]);
            continue;
        }
        let payload = item
            .payload
            .as_ref()
            .map(serde_json::to_string)
            .transpose()?;
        if let Some(text) = &payload {
            check_size(limits, LimitKind::PayloadSizeBytes, text.len(), &run_ref)?;
        }
        let codec = item.payload_codec.clone().or_else(|| {
            item.payload
                .as_ref()
                .map(crate::store::protocol::codec_of)
                .and_then(|codec| codec.as_str().map(str::to_owned))
        });
        conn.prepare_cached(
            "INSERT INTO workflow_stream_items (stream_id, item_offset, idempotency_key, payload, \
             payload_codec, payload_reference, item_type, content_type, origin, origin_reference, \
             emitted_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?
        .execute(params![
            stream_id,
            to_i64(next),
            item.idempotency_key,
            payload,
            codec,
            item.payload_reference,
            item.item_type,
            item.content_type,
            append.origin.as_str(),
            append.origin_reference,
            now
        ])?;
        assigned.push(next);
        next += 1;
        accepted += 1;
    }
    conn.prepare_cached(
        "UPDATE workflow_streams SET total_items = ?2, last_appended_at_ms = ?3 WHERE id = ?1",
    )?
    .execute(params![stream_id, to_i64(next), now])?;
    let (stream, _) = find(conn, head.id, append.name)?.ok_or(Error::RunNotFound(head.id))?;
    Ok(Appended {
        stream,
        offsets: assigned,
        accepted,
        deduplicated: append.items.len() as u64 - accepted,
    })
}

/// Closes (or, with `error_reason`, errors) inside an open transaction. A
/// stream the run never opened is created already ended; an ended stream
/// is answered as it is.
pub(crate) fn close_in(
    conn: &Connection,
    head: &RunHead,
    policy: &StreamPolicy,
    name: &str,
    error_reason: Option<&str>,
    retention_seconds: Option<u64>,
) -> Result<StreamState, Error> {
    let (stream, id) = match find(conn, head.id, name)? {
        Some((stream, _)) if stream.terminal() => return Ok(stream),
        Some(found) => found,
        None => open(conn, head, name, policy)?,
    };
    let now = now_ms();
    let retention = retention_seconds.unwrap_or(stream.retention_seconds).max(1);
    conn.prepare_cached(
        "UPDATE workflow_streams SET status = ?2, error_reason = ?3, closed_at_ms = ?4, \
         retention_seconds = ?5, expires_at_ms = CAST(?4 AS BIGINT) + CAST(?5 AS BIGINT) * 1000 \
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        if error_reason.is_some() {
            "errored"
        } else {
            "closed"
        },
        error_reason,
        now,
        to_i64(retention)
    ])?;
    Ok(find(conn, head.id, name)?
        .ok_or(Error::RunNotFound(head.id))?
        .0)
}

/// Ends every open stream of a run that just ended: `closed` when it
/// completed, `errored` (`run_<status>`) otherwise. Each then expires after
/// its own retention window.
pub(crate) fn close_open_streams_of_run(
    conn: &Connection,
    run: RunId,
    status: RunStatus,
) -> Result<(), Error> {
    let (ended, reason) = match status {
        // A run that continued as new handed over normally: its streams end.
        RunStatus::Completed | RunStatus::ContinuedAsNew => ("closed", None),
        other => ("errored", Some(format!("run_{}", other.as_str()))),
    };
    conn.execute_queued(
        "UPDATE workflow_streams SET status = ?2, error_reason = ?3, closed_at_ms = ?4, \
         expires_at_ms = CAST(?4 AS BIGINT) + retention_seconds * 1000 \
         WHERE run_id = ?1 AND status = 'open'",
        params![run.0, ended, reason, now_ms()],
    )?;
    Ok(())
}

impl Store {
    /// Appends items to stream `name` of `run` (opening it if needed).
    pub fn append_stream(&self, run: RunId, append: StreamAppend<'_>) -> Result<Appended, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        let appended = append_in(
            &tx,
            &head,
            &self.config.limits,
            &self.config.streams,
            append,
        )?;
        tx.commit()?;
        Ok(appended)
    }

    /// Closes stream `name` of `run`, or marks it errored.
    pub fn close_stream(
        &self,
        run: RunId,
        name: &str,
        error_reason: Option<&str>,
        retention_seconds: Option<u64>,
    ) -> Result<StreamState, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        let closed = close_in(
            &tx,
            &head,
            &self.config.streams,
            name,
            error_reason,
            retention_seconds,
        )?;
        tx.commit()?;
        Ok(closed)
    }

    /// The live stream `name` of `run`.
    pub fn stream(&self, run: RunId, name: &str) -> Result<StreamState, Error> {
        Ok(live(&self.conn, run, name, now_ms())?.0)
    }

    /// Every live stream of `run`, by name (at most the per-run cap).
    pub fn streams(&self, run: RunId) -> Result<Vec<StreamState>, Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM workflow_streams WHERE run_id = ?1 \
             AND (expires_at_ms IS NULL OR expires_at_ms > ?2) ORDER BY name"
        );
        let rows = self
            .conn
            .prepare_cached(&sql)?
            .query_map(params![run.0, now_ms()], decode)?
            .map(|r| r.map(|(state, _)| state))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Up to `max` items of the live stream `name` from offset `from` on.
    pub fn stream_items(
        &self,
        run: RunId,
        name: &str,
        from: u64,
        max: usize,
    ) -> Result<(StreamState, Vec<StreamItem>), Error> {
        let (stream, id) = live(&self.conn, run, name, now_ms())?;
        let items = self
            .conn
            .prepare_cached(
                "SELECT item_offset, payload, payload_codec, payload_reference, item_type, \
                 content_type, idempotency_key, origin, origin_reference, emitted_at_ms \
                 FROM workflow_stream_items WHERE stream_id = ?1 AND item_offset >= ?2 \
                 ORDER BY item_offset LIMIT ?3",
            )?
            .query_map(params![id, to_i64(from), to_i64(max)], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, Option<String>>(1)?,
                    StreamItem {
                        offset: 0,
                        payload: None,
                        payload_codec: row.get(2)?,
                        payload_reference: row.get(3)?,
                        item_type: row.get(4)?,
                        content_type: row.get(5)?,
                        idempotency_key: row.get(6)?,
                        origin: row.get(7)?,
                        origin_reference: row.get(8)?,
                        emitted_at_ms: row.get(9)?,
                    },
                ))
            })?
            .map(|r| {
                let (offset, payload, mut item) = r?;
                item.offset = to_u64(offset);
                item.payload = payload.map(|t| serde_json::from_str(&t)).transpose()?;
                Ok(item)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok((stream, items))
    }

    /// Records that a reader consumed every item before `offset` (clamped
    /// to the items appended); the acknowledged offset never moves back.
    pub fn acknowledge_stream(&self, run: RunId, name: &str, offset: u64) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "UPDATE workflow_streams SET acknowledged_offset = \
                 CASE WHEN ?3 < total_items THEN ?3 ELSE total_items END \
                 WHERE run_id = ?1 AND name = ?2 \
                 AND acknowledged_offset < CASE WHEN ?3 < total_items THEN ?3 ELSE total_items END",
            )?
            .execute(params![run.0, name, to_i64(offset)])?;
        Ok(())
    }

    /// Deletes at most `max_streams` streams of `namespace` that expired by
    /// `now`, and at most `max_items` of their items, oldest expiry first. A
    /// stream goes once its last item has; one with more items than the
    /// budget is finished by later passes.
    pub fn reclaim_expired_streams(
        &self,
        namespace: &str,
        now: i64,
        max_streams: usize,
        max_items: usize,
    ) -> Result<Reclaimed, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let expired: Vec<i64> = tx
            .prepare_cached(
                "SELECT id FROM workflow_streams WHERE namespace = ?1 \
                 AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?2 \
                 ORDER BY expires_at_ms, id LIMIT ?3",
            )?
            .query_map(params![namespace, now, to_i64(max_streams)], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut reclaimed = Reclaimed::default();
        let mut budget = max_items;
        for id in expired {
            if budget > 0 {
                let deleted = tx
                    .prepare_cached(
                        "DELETE FROM workflow_stream_items WHERE stream_id = ?1 AND item_offset IN \
                         (SELECT item_offset FROM workflow_stream_items WHERE stream_id = ?1 \
                          ORDER BY item_offset LIMIT ?2)",
                    )?
                    .execute(params![id, to_i64(budget)])?;
                budget -= deleted;
                reclaimed.items += deleted as u64;
            }
            let left: bool = tx
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM workflow_stream_items WHERE stream_id = ?1)",
                )?
                .query_row([id], |r| r.get(0))?;
            if left {
                break;
            }
            tx.prepare_cached("DELETE FROM workflow_streams WHERE id = ?1")?
                .execute([id])?;
            reclaimed.streams += 1;
        }
        tx.commit()?;
        Ok(reclaimed)
    }
}
