//! Admission of signals and updates: the limit rejects the command, not the run.
//!
//! A signal or update arrives from outside the workflow (control plane,
//! webhook, client stub). When the run's pending count for it has reached
//! the limit, the command is refused with `structural_limit_exceeded` and
//! the limit metadata, nothing is written, and the run stays active so the
//! caller can retry after the workflow processes its backlog. The counter is
//! read under SQLite's write lock (an immediate transaction), so concurrent
//! admissions from several connections can never overshoot the limit.

use crate::store::db::{params, OptionalExtension};
use dwpolicy::limits::REJECTION_REASON;
use dwpolicy::{LimitKind, RunRef, StructuralLimitExceeded};
use serde::Serialize;
use serde_json::{json, Value};

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId};
use crate::store::rows::{append_event, bump, load_head, now_ms, Pending};
use crate::store::tx::WriteTx;

/// A signal for a run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SignalRequest {
    /// The signal name.
    pub name: String,
    /// Its arguments.
    pub payload: Value,
    /// Makes retries idempotent: a second request with the same id returns
    /// the first one's acceptance without admitting again.
    pub request_id: Option<String>,
}

/// An update for a run (same shape and idempotency as a signal).
pub type UpdateRequest = SignalRequest;

/// The answer to a signal or update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Admission {
    /// Stored as pending.
    Accepted {
        /// The signal or update id.
        id: i64,
        /// `true` when the request id had already been admitted.
        duplicate: bool,
    },
    /// Refused at a structural limit; nothing was written.
    Rejected(Rejection),
}

impl Admission {
    /// Whether the command was refused.
    pub fn rejected(&self) -> bool {
        matches!(self, Admission::Rejected(_))
    }
}

/// A refusal with the machine-readable limit metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rejection {
    /// Always `structural_limit_exceeded`.
    pub reason: &'static str,
    /// The limit that was reached.
    pub structural_limit_kind: LimitKind,
    /// The pending count at admission.
    pub structural_limit_value: u64,
    /// The configured ceiling.
    pub structural_limit_configured: u64,
}

impl From<StructuralLimitExceeded> for Rejection {
    fn from(e: StructuralLimitExceeded) -> Self {
        Rejection {
            reason: REJECTION_REASON,
            structural_limit_kind: e.kind,
            structural_limit_value: e.value,
            structural_limit_configured: e.configured,
        }
    }
}

/// The per-kind differences between signal and update admission.
struct Intake {
    table: &'static str,
    status: &'static str,
    pending: Pending,
    event: EventType,
    id_key: &'static str,
}

const SIGNALS: Intake = Intake {
    table: "signals",
    status: "received",
    pending: Pending::Signal,
    event: EventType::SignalReceived,
    id_key: "signal_id",
};

const UPDATES: Intake = Intake {
    table: "updates",
    status: "accepted",
    pending: Pending::Update,
    event: EventType::UpdateAccepted,
    id_key: "update_id",
};

impl Store {
    /// Admits a signal unless `pending_signal_count` is reached.
    pub fn signal(&self, run: RunId, request: SignalRequest) -> Result<Admission, Error> {
        self.admit(&SIGNALS, run, request)
    }

    /// Admits an update unless `pending_update_count` is reached.
    pub fn submit_update(&self, run: RunId, request: UpdateRequest) -> Result<Admission, Error> {
        self.admit(&UPDATES, run, request)
    }

    fn admit(
        &self,
        intake: &Intake,
        run: RunId,
        request: SignalRequest,
    ) -> Result<Admission, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        head.ensure_writable()?;
        if let Some(request_id) = &request.request_id {
            let existing: Option<i64> = tx
                .prepare_cached(&format!(
                    "SELECT id FROM {} WHERE run_id = ?1 AND request_id = ?2",
                    intake.table
                ))?
                .query_row(params![run.0, request_id], |row| row.get(0))
                .optional()?;
            if let Some(id) = existing {
                return Ok(Admission::Accepted {
                    id,
                    duplicate: true,
                });
            }
        }
        // The warning names the run by its run id (the wire `run_id`), like
        // the executor's: a workflow id spans every run of a continue-as-new chain.
        let run_label = head.id.to_string();
        let run_ref = RunRef {
            workflow_run_id: &run_label,
            workflow_type: &head.workflow_type,
        };
        let current = intake.pending.get(&head.pending);
        if let Err(exceeded) =
            self.config
                .limits
                .check_and_warn(intake.pending.limit_kind(), current, &run_ref)
        {
            return Ok(Admission::Rejected(exceeded.into()));
        }
        let payload_text = serde_json::to_string(&request.payload)?;
        let budget = self.config.max_pending_payload_bytes;
        if budget > 0 {
            let pending: i64 = tx
                .prepare_cached("SELECT pending_payload_bytes FROM runs WHERE id = ?1")?
                .query_row([run.0], |r| r.get(0))?;
            let pending = u64::try_from(pending).unwrap_or(0);
            let payload = u64::try_from(payload_text.len()).unwrap_or(u64::MAX);
            if pending.saturating_add(payload) > budget {
                return Err(Error::PendingPayloadBudget {
                    run,
                    pending_bytes: pending,
                    payload_bytes: payload,
                    limit: budget,
                });
            }
        }
        let id = store_message(&tx, intake, run, &request, &payload_text)?;
        tx.commit()?;
        Ok(Admission::Accepted {
            id,
            duplicate: false,
        })
    }

    /// A resolved update's status (`completed` or `rejected`) and result;
    /// `None` while it is still accepted.
    pub fn update_outcome(&self, update: i64) -> Result<Option<(String, Value)>, Error> {
        let row: Option<(String, Option<String>)> = self
            .conn
            .prepare_cached("SELECT status, result FROM updates WHERE id = ?1")?
            .query_row([update], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        match row {
            Some((status, result)) if status != "accepted" => {
                let result = match result {
                    Some(text) => serde_json::from_str(&text)?,
                    None => Value::Null,
                };
                Ok(Some((status, result)))
            }
            Some(_) => Ok(None),
            None => Err(Error::ItemNotFound {
                item: "update",
                id: update,
            }),
        }
    }
}

/// Records an admitted signal or update: its row, the run's pending count
/// and payload bytes, and its event (a signal's held while a workflow task
/// is leased). Returns its id.
fn store_message(
    conn: &crate::store::db::Connection,
    intake: &Intake,
    run: RunId,
    request: &SignalRequest,
    payload_text: &str,
) -> Result<i64, Error> {
    let id = conn.insert_returning_id(
        &format!(
            "INSERT INTO {} (run_id, name, payload, request_id, status) VALUES (?1, ?2, ?3, ?4, ?5)",
            intake.table
        ),
        params![run.0, request.name, payload_text, request.request_id, intake.status],
    )?;
    bump(conn, run, intake.pending, 1)?;
    conn.prepare_cached(
        "UPDATE runs SET pending_payload_bytes = pending_payload_bytes + ?2 WHERE id = ?1",
    )?
    .execute(params![
        run.0,
        crate::store::rows::to_i64(payload_text.len())
    ])?;
    // The protocol's shapes: a signal's arguments are its `value`, an
    // update's its `arguments`, and an update id is a string.
    let codec = crate::store::protocol::codec_of(&request.payload);
    let event = match intake.pending {
        Pending::Update => json!({
            intake.id_key: id.to_string(),
            "update_name": request.name,
            "arguments": request.payload,
            "payload_codec": codec,
            "request_id": request.request_id,
            "received_at_ms": now_ms(),
        }),
        _ => json!({
            intake.id_key: id,
            "signal_name": request.name,
            "value": request.payload,
            "payload_codec": codec,
            "request_id": request.request_id,
            "received_at_ms": now_ms(),
        }),
    };
    if intake.pending == Pending::Signal
        && crate::store::message_deferral::defer_message(conn, run, id, &request.name, &event)?
    {
        // A message before the run's first completed task, or behind
        // carried messages not delivered yet, waits for that task (see
        // message_streams::release_carried).
    } else if intake.pending == Pending::Signal && workflow_task_leased(conn, run)? {
        // The worker is running a task of this run: its completion's
        // events come first in history, then this signal's (see
        // [`release_held_signals`]). The row is stored and counted now.
        conn.prepare_cached("UPDATE signals SET held_event = ?2 WHERE id = ?1")?
            .execute(params![id, serde_json::to_string(&event)?])?;
    } else {
        append_event(conn, run, intake.event, &event, false)?;
        if intake.pending == Pending::Signal {
            // A workflow blocked in `wait_signal` for this name takes it now.
            crate::store::signal_waits::apply_arrived(conn, run, id, &request.name, payload_text)?;
        }
    }
    Ok(id)
}

/// Records an update a worker's validator approved as accepted: the
/// `updates` row, the run's pending count and payload bytes and its
/// `UpdateAccepted` event, in the caller's transaction. Its admission
/// (the limit and the payload budget) was checked when it began validating.
pub(crate) fn record_validated_update(
    conn: &crate::store::db::Connection,
    run: RunId,
    request: &UpdateRequest,
) -> Result<i64, Error> {
    let payload_text = serde_json::to_string(&request.payload)?;
    store_message(conn, &UPDATES, run, request, &payload_text)
}

/// Whether `run` has a workflow task leased to a worker now.
pub(crate) fn workflow_task_leased(
    conn: &crate::store::db::Connection,
    run: RunId,
) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT 1 FROM dispatch_tasks WHERE run_id = ?1 AND kind = 'workflow' \
             AND status = 'leased' LIMIT 1",
        )?
        .query_row([run.0], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Writes the `SignalReceived` events of `run`'s signals that arrived while
/// a workflow task was leased, oldest first, and applies each to an open
/// signal wait of its name as it would have been on arrival. Called where a
/// leased workflow task ends (completed after its commands' events, released,
/// failed, timed out), when a run closes (before its closing event) and when
/// a workflow task is leased, so a delivery never omits a signal the store
/// holds. Returns how many events it wrote.
pub(crate) fn release_held_signals(
    conn: &crate::store::db::Connection,
    run: RunId,
) -> Result<u64, Error> {
    let held: Vec<(i64, String, String, String)> = conn
        .prepare_cached(
            // Messages carried into a continued run are held past its
            // first lease (crate::store::message_streams::release_carried).
            "SELECT id, name, payload, held_event FROM signals \
             WHERE run_id = ?1 AND held_event IS NOT NULL \
             AND json_extract(held_event, '$.message_stream_deferred') IS NULL ORDER BY id",
        )?
        .query_map([run.0], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    for (id, name, payload, event) in &held {
        let event: Value = serde_json::from_str(event)?;
        conn.prepare_cached("UPDATE signals SET held_event = NULL WHERE id = ?1")?
            .execute([id])?;
        append_event(conn, run, EventType::SignalReceived, &event, false)?;
        crate::store::signal_waits::apply_arrived(conn, run, *id, name, payload)?;
    }
    Ok(held.len() as u64)
}
