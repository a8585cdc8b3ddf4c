//! Schedule rows: what the server validated, and their firing state.
//!
//! The store keeps a schedule's definition as opaque JSON (the server owns
//! its meaning) next to the columns the scheduler needs: status, the next
//! fire time (the spec time plus that fire's jitter) and the spec time
//! itself, the counters describe reports, the fires `buffer_one` and
//! `buffer_all` hold while a run is open, and the last [`RECENT_ACTIONS`]
//! actions. Each change and fire also appends to the schedule's audit
//! stream (`schedule_audit`), capped at [`SCHEDULE_AUDIT_ENTRIES`] per
//! schedule in the appending transaction; a deleted schedule's stream is
//! kept for [`DELETED_SCHEDULE_AUDIT_RETENTION_MS`], then pruned. A fire
//! is claimed with a compare-and-set on `next_fire_at_ms`, so two nodes scanning the same store never fire one due time twice, and
//! a fire's start passes its [`FireGate`] in the start's own transaction,
//! so racing fires (a trigger and the sweep) see each other's runs; the
//! due scan reads at most its declared limit of rows through the partial
//! `schedules_due` index, and the buffer drain as many through
//! `schedules_buffered`. The buffer's capacity is the caller's: the store
//! refuses a fire past it in the same statement that counts.

use crate::store::db::{params, OptionalExtension, Row};
use serde_json::Value;

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::{now_ms, to_i64};
use crate::store::tx::WriteTx;

/// Actions a schedule remembers for describe (the newest last).
pub const RECENT_ACTIONS: usize = 10;
/// Entries a schedule's audit stream keeps: appending one more deletes
/// the oldest in the same transaction.
pub const SCHEDULE_AUDIT_ENTRIES: usize = 100;
/// How long a deleted schedule's audit stream stays readable (7 days);
/// the schedule sweep removes it after that, a scan limit of rows a pass.
pub const DELETED_SCHEDULE_AUDIT_RETENTION_MS: i64 = 7 * 24 * 3_600_000;

/// A lifecycle entry of a schedule's audit stream (update, pause, resume,
/// delete); creates and fires are recorded by their own store methods.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// `ScheduleCreated`, `ScheduleUpdated`, … as the SDK names them.
    pub event_type: &'static str,
    /// What changed (bounded: the request's checked fields).
    pub payload: Value,
}

/// One audit entry as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    /// Its row id.
    pub id: i64,
    /// Its position in the schedule's stream (from 1, increasing).
    pub sequence: i64,
    /// The event's type.
    pub event_type: String,
    /// When it was recorded (Unix ms).
    pub recorded_at_ms: i64,
    /// The workflow a fire started.
    pub workflow_id: Option<String>,
    /// The run a fire started.
    pub run: Option<RunId>,
    /// Its details.
    pub payload: Value,
}

/// One schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRow {
    /// Its position (the list cursor).
    pub id: i64,
    /// Its namespace.
    pub namespace: String,
    /// The caller's id.
    pub schedule_id: String,
    /// The validated definition.
    pub definition: Value,
    /// Paused or not.
    pub paused: bool,
    /// When it fires next (Unix ms, jitter included); `None` once it never will.
    pub next_fire_at_ms: Option<i64>,
    /// The spec time of that fire (Unix ms).
    pub nominal_fire_at_ms: Option<i64>,
    /// Fires left under `max_runs`.
    pub remaining_actions: Option<i64>,
    /// Runs started.
    pub fires_count: i64,
    /// Fires whose start failed.
    pub failures_count: i64,
    /// Fires skipped by the overlap policy.
    pub skipped_count: i64,
    /// The last start (Unix ms).
    pub last_fired_at_ms: Option<i64>,
    /// Why the last skip happened.
    pub last_skip_reason: Option<String>,
    /// The last started workflow id.
    pub latest_workflow_id: Option<String>,
    /// The last started run.
    pub latest_run_id: Option<RunId>,
    /// When it was paused.
    pub paused_at_ms: Option<i64>,
    /// Created (Unix ms).
    pub created_at_ms: i64,
    /// Last changed (Unix ms).
    pub updated_at_ms: i64,
    /// Fires waiting for the open run to close, oldest first.
    pub buffered: Vec<Value>,
    /// The last [`RECENT_ACTIONS`] actions, oldest first.
    pub recent_actions: Vec<Value>,
}

/// When a schedule fires next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextFire {
    /// The fire time, jitter included (Unix ms): what the due scan compares.
    pub at_ms: i64,
    /// The spec time (Unix ms): the fire's identity.
    pub nominal_ms: i64,
}

/// A schedule the due scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueSchedule {
    /// Its namespace.
    pub namespace: String,
    /// Its id.
    pub schedule_id: String,
    /// The fire it is due for.
    pub fire: NextFire,
}

const COLUMNS: &str = "id, namespace, schedule_id, definition, status, next_fire_at_ms, \
    remaining_actions, fires_count, failures_count, skipped_count, last_fired_at_ms, \
    last_skip_reason, latest_workflow_id, latest_run_id, paused_at_ms, created_at_ms, \
    updated_at_ms, nominal_fire_at_ms, buffered, recent_actions";

/// A row and its JSON columns, decoded after the statement.
type Raw = (ScheduleRow, [String; 3]);

fn decode(row: &Row<'_>) -> crate::store::db::Result<Raw> {
    let status: String = row.get(4)?;
    Ok((
        ScheduleRow {
            id: row.get(0)?,
            namespace: row.get(1)?,
            schedule_id: row.get(2)?,
            definition: Value::Null,
            paused: status == "paused",
            next_fire_at_ms: row.get(5)?,
            remaining_actions: row.get(6)?,
            fires_count: row.get(7)?,
            failures_count: row.get(8)?,
            skipped_count: row.get(9)?,
            last_fired_at_ms: row.get(10)?,
            last_skip_reason: row.get(11)?,
            latest_workflow_id: row.get(12)?,
            latest_run_id: row.get::<_, Option<i64>>(13)?.map(RunId),
            paused_at_ms: row.get(14)?,
            created_at_ms: row.get(15)?,
            updated_at_ms: row.get(16)?,
            nominal_fire_at_ms: row.get(17)?,
            buffered: Vec::new(),
            recent_actions: Vec::new(),
        },
        [row.get(3)?, row.get(18)?, row.get(19)?],
    ))
}

fn with_json((mut row, [definition, buffered, recent]): Raw) -> Result<ScheduleRow, Error> {
    row.definition = serde_json::from_str(&definition)?;
    row.buffered = serde_json::from_str(&buffered)?;
    row.recent_actions = serde_json::from_str(&recent)?;
    Ok(row)
}

/// The condition a schedule fire's start commits under (see
/// [`Store::pass_fire_gate`]).
#[derive(Debug, Clone, PartialEq)]
pub enum FireGate {
    /// Start whatever is open (`allow_all`, `cancel_other`, `terminate_other`).
    Always,
    /// Only while the schedule's latest run is not running and, with
    /// `empty_buffer`, nothing is buffered (`skip`; the buffer policies).
    NoOpenRun {
        /// The buffer must be empty too.
        empty_buffer: bool,
    },
    /// Only while this is still the buffer's oldest fire and no run is
    /// open; the fire leaves the buffer with the start.
    BufferHead(Value),
}

/// How one fire ended, for the counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireRecord {
    /// A run started.
    Started {
        /// Its workflow id.
        workflow_id: String,
        /// The run.
        run: RunId,
    },
    /// The overlap policy skipped it (or the buffer was full).
    Skipped(String),
    /// Moments a catch-up passed over (older than the catch-up window, or
    /// beyond what the overlap policy starts for a backlog): all counted as
    /// skipped, in one audit entry.
    Missed {
        /// How many moments.
        moments: i64,
        /// Why.
        reason: String,
    },
    /// Buffered until the open run closes (not counted until it starts).
    Buffered,
    /// The start failed.
    Failed,
}

impl Store {
    /// Creates a schedule (its audit stream gains `ScheduleCreated`); false
    /// when the namespace already has that id.
    pub fn create_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        definition: &Value,
        paused: bool,
        next: Option<NextFire>,
        remaining_actions: Option<i64>,
    ) -> Result<bool, Error> {
        let now = now_ms();
        let next = next.filter(|_| !paused);
        let tx = WriteTx::begin(&self.conn)?;
        let inserted = tx
            .prepare_cached(
                "INSERT INTO schedules (namespace, schedule_id, definition, status, \
                 next_fire_at_ms, nominal_fire_at_ms, remaining_actions, paused_at_ms, \
                 created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9) \
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                namespace,
                schedule_id,
                serde_json::to_string(definition)?,
                if paused { "paused" } else { "active" },
                next.map(|n| n.at_ms),
                next.map(|n| n.nominal_ms),
                remaining_actions,
                paused.then_some(now),
                now
            ])?;
        if inserted == 1 {
            let created = serde_json::json!({
                "paused": paused, "overlap_policy": definition["overlap_policy"],
                "workflow_type": definition["action"]["workflow_type"],
                "note": definition["note"],
            });
            self.append_audit(namespace, schedule_id, "ScheduleCreated", None, &created)?;
        }
        tx.commit()?;
        Ok(inserted == 1)
    }

    /// The schedule, if it exists.
    pub fn schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
    ) -> Result<Option<ScheduleRow>, Error> {
        let sql =
            format!("SELECT {COLUMNS} FROM schedules WHERE namespace = ?1 AND schedule_id = ?2");
        self.conn
            .prepare_cached(&sql)?
            .query_row(params![namespace, schedule_id], decode)
            .optional()?
            .map(with_json)
            .transpose()
    }

    /// One page of the namespace's schedules after position `after`, in
    /// creation order, optionally only paused or active ones and only those
    /// whose action starts `workflow_type`.
    pub fn list_schedules(
        &self,
        namespace: &str,
        paused: Option<bool>,
        workflow_type: Option<&str>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM schedules WHERE namespace = ?1 AND id > ?2 \
             AND (status = ?3 OR ?3 IS NULL) \
             AND (json_extract(definition, '$.action.workflow_type') = ?5 OR ?5 IS NULL) \
             ORDER BY id LIMIT ?4"
        );
        let status = paused.map(|p| if p { "paused" } else { "active" });
        let rows = self
            .conn
            .prepare_cached(&sql)?
            .query_map(
                params![namespace, after, status, to_i64(limit), workflow_type],
                decode,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().map(with_json).collect()
    }

    /// Pauses (with no next fire) or resumes (firing next at `next`),
    /// keeping `note` as the schedule's note when given; false when absent.
    pub fn set_schedule_paused(
        &self,
        namespace: &str,
        schedule_id: &str,
        paused: bool,
        next: Option<NextFire>,
        note: Option<&str>,
        audit: &AuditEvent,
    ) -> Result<bool, Error> {
        let now = now_ms();
        let next = next.filter(|_| !paused);
        let tx = WriteTx::begin(&self.conn)?;
        let changed = tx
            .prepare_cached(
                "UPDATE schedules SET status = ?3, paused_at_ms = ?4, next_fire_at_ms = ?5, \
                 nominal_fire_at_ms = ?6, updated_at_ms = ?7, \
                 definition = CASE WHEN CAST(?8 AS TEXT) IS NULL THEN definition \
                   ELSE json_set(definition, '$.note', ?8) END \
                 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![
                namespace,
                schedule_id,
                if paused { "paused" } else { "active" },
                paused.then_some(now),
                next.map(|n| n.at_ms),
                next.map(|n| n.nominal_ms),
                now,
                note
            ])?;
        if changed == 1 {
            self.append_audit(
                namespace,
                schedule_id,
                audit.event_type,
                None,
                &audit.payload,
            )?;
        }
        tx.commit()?;
        Ok(changed == 1)
    }

    /// Replaces the definition; an active schedule fires next at `next`
    /// (a paused one keeps none), and `remaining_actions` is set as given.
    /// False when absent.
    pub fn update_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        definition: &Value,
        next: Option<NextFire>,
        remaining_actions: Option<i64>,
        audit: &AuditEvent,
    ) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let changed = tx
            .prepare_cached(
                "UPDATE schedules SET definition = ?3, remaining_actions = ?6, updated_at_ms = ?7, \
                 next_fire_at_ms = CASE WHEN status = 'active' THEN CAST(?4 AS BIGINT) ELSE NULL END, \
                 nominal_fire_at_ms = CASE WHEN status = 'active' THEN CAST(?5 AS BIGINT) ELSE NULL END \
                 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![
                namespace,
                schedule_id,
                serde_json::to_string(definition)?,
                next.map(|n| n.at_ms),
                next.map(|n| n.nominal_ms),
                remaining_actions,
                now_ms()
            ])?;
        if changed == 1 {
            self.append_audit(
                namespace,
                schedule_id,
                audit.event_type,
                None,
                &audit.payload,
            )?;
        }
        tx.commit()?;
        Ok(changed == 1)
    }

    /// Deletes a schedule; false when absent. Runs it started are
    /// untouched; its audit stream, ending with `audit`, stays readable for
    /// [`DELETED_SCHEDULE_AUDIT_RETENTION_MS`].
    pub fn delete_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        audit: &AuditEvent,
    ) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let deleted = tx
            .prepare_cached("DELETE FROM schedules WHERE namespace = ?1 AND schedule_id = ?2")?
            .execute(params![namespace, schedule_id])?;
        if deleted == 1 {
            self.append_audit(
                namespace,
                schedule_id,
                audit.event_type,
                None,
                &audit.payload,
            )?;
            tx.prepare_cached(
                "UPDATE schedule_audit SET deleted_at_ms = ?3 \
                 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now_ms()])?;
        }
        tx.commit()?;
        Ok(deleted == 1)
    }

    /// Appends one entry to the schedule's audit stream and deletes what
    /// falls past [`SCHEDULE_AUDIT_ENTRIES`], in one transaction.
    fn append_audit(
        &self,
        namespace: &str,
        schedule_id: &str,
        event_type: &str,
        started: Option<(&str, RunId)>,
        payload: &Value,
    ) -> Result<(), Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let sequence: i64 = tx
            .prepare_cached(
                "SELECT COALESCE(MAX(sequence), 0) + 1 FROM schedule_audit \
                 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .query_row(params![namespace, schedule_id], |r| r.get(0))?;
        tx.prepare_cached(
            "INSERT INTO schedule_audit (namespace, schedule_id, sequence, event_type, \
             recorded_at_ms, workflow_id, run_id, payload) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            namespace,
            schedule_id,
            sequence,
            event_type,
            now_ms(),
            started.map(|(w, _)| w),
            started.map(|(_, r)| r.0),
            serde_json::to_string(payload)?
        ])?;
        tx.prepare_cached(
            "DELETE FROM schedule_audit WHERE namespace = ?1 AND schedule_id = ?2 \
             AND sequence <= ?3",
        )?
        .execute(params![
            namespace,
            schedule_id,
            sequence - to_i64(SCHEDULE_AUDIT_ENTRIES)
        ])?;
        tx.commit()?;
        Ok(())
    }

    /// The schedule's audit entries after `after_sequence`, oldest first,
    /// at most `limit`.
    pub fn schedule_audit(
        &self,
        namespace: &str,
        schedule_id: &str,
        after_sequence: i64,
        limit: usize,
    ) -> Result<Vec<AuditRow>, Error> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT id, sequence, event_type, recorded_at_ms, workflow_id, run_id, payload \
                 FROM schedule_audit WHERE namespace = ?1 AND schedule_id = ?2 AND sequence > ?3 \
                 ORDER BY sequence LIMIT ?4",
            )?
            .query_map(
                params![namespace, schedule_id, after_sequence, to_i64(limit)],
                |r| {
                    Ok((
                        AuditRow {
                            id: r.get(0)?,
                            sequence: r.get(1)?,
                            event_type: r.get(2)?,
                            recorded_at_ms: r.get(3)?,
                            workflow_id: r.get(4)?,
                            run: r.get::<_, Option<i64>>(5)?.map(RunId),
                            payload: Value::Null,
                        },
                        r.get::<_, String>(6)?,
                    ))
                },
            )?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter()
            .map(|(mut row, payload)| {
                row.payload = serde_json::from_str(&payload)?;
                Ok(row)
            })
            .collect()
    }

    /// Whether the schedule has any audit entry (a deleted one's stream
    /// is readable until its retention ends).
    pub fn schedule_audit_exists(&self, namespace: &str, schedule_id: &str) -> Result<bool, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT 1 FROM schedule_audit WHERE namespace = ?1 AND schedule_id = ?2 LIMIT 1",
            )?
            .exists(params![namespace, schedule_id])?)
    }

    /// Deletes at most `limit` audit entries of schedules deleted at or
    /// before `cutoff_ms`, oldest deletion first (through the partial
    /// index of deleted streams): how many.
    pub fn prune_deleted_schedule_audit(
        &self,
        cutoff_ms: i64,
        limit: usize,
    ) -> Result<usize, Error> {
        let deleted = self
            .conn
            .prepare_cached(
                "DELETE FROM schedule_audit WHERE id IN (SELECT id FROM schedule_audit \
                 WHERE deleted_at_ms IS NOT NULL AND deleted_at_ms <= ?1 \
                 ORDER BY deleted_at_ms LIMIT ?2)",
            )?
            .execute(params![cutoff_ms, to_i64(limit)])?;
        Ok(deleted)
    }

    /// Active schedules due at `now_ms`, earliest first, at most `limit`
    /// (the declared scan limit).
    pub fn due_schedules(&self, now_ms: i64, limit: usize) -> Result<Vec<DueSchedule>, Error> {
        let due = self
            .conn
            .prepare_cached(
                "SELECT namespace, schedule_id, next_fire_at_ms, \
                 COALESCE(nominal_fire_at_ms, next_fire_at_ms) FROM schedules \
                 WHERE status = 'active' AND next_fire_at_ms IS NOT NULL AND next_fire_at_ms <= ?1 \
                 ORDER BY next_fire_at_ms LIMIT ?2",
            )?
            .query_map(params![now_ms, to_i64(limit)], |r| {
                Ok(DueSchedule {
                    namespace: r.get(0)?,
                    schedule_id: r.get(1)?,
                    fire: NextFire {
                        at_ms: r.get(2)?,
                        nominal_ms: r.get(3)?,
                    },
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(due)
    }

    /// The fire time (jitter included, Unix ms) of the earliest fire an
    /// active schedule still owes: how far behind the scheduler is, read
    /// through the partial `schedules_due` index (one row).
    pub fn earliest_schedule_fire(&self) -> Result<Option<i64>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT next_fire_at_ms FROM schedules \
                 WHERE status = 'active' AND next_fire_at_ms IS NOT NULL \
                 ORDER BY next_fire_at_ms LIMIT 1",
            )?
            .query_row([], |r| r.get(0))
            .optional()?)
    }

    /// Claims the fire due at `due_at_ms`, moving the schedule on to `next`;
    /// false when another pass claimed it (or it changed).
    pub fn claim_schedule_fire(
        &self,
        namespace: &str,
        schedule_id: &str,
        due_at_ms: i64,
        next: Option<NextFire>,
    ) -> Result<bool, Error> {
        let claimed = self
            .conn
            .prepare_cached(
                "UPDATE schedules SET next_fire_at_ms = ?4, nominal_fire_at_ms = ?5, \
                 updated_at_ms = ?6 WHERE namespace = ?1 AND schedule_id = ?2 \
                 AND status = 'active' AND next_fire_at_ms = ?3",
            )?
            .execute(params![
                namespace,
                schedule_id,
                due_at_ms,
                next.map(|n| n.at_ms),
                next.map(|n| n.nominal_ms),
                now_ms()
            ])?;
        Ok(claimed == 1)
    }

    /// Counts one fire's outcome and remembers `action` among the recent
    /// ones; a start also spends one of `max_runs` and, when that was the
    /// last, leaves no next fire.
    pub fn record_schedule_fire(
        &self,
        namespace: &str,
        schedule_id: &str,
        record: &FireRecord,
        action: &Value,
    ) -> Result<(), Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let now = now_ms();
        match record {
            FireRecord::Started { workflow_id, run } => tx.prepare_cached(
                "UPDATE schedules SET fires_count = fires_count + 1, last_fired_at_ms = ?3, \
                 latest_workflow_id = ?4, latest_run_id = ?5, updated_at_ms = ?3, \
                 remaining_actions = CASE WHEN remaining_actions IS NULL THEN NULL \
                   WHEN remaining_actions > 1 THEN remaining_actions - 1 ELSE 0 END, \
                 next_fire_at_ms = CASE WHEN remaining_actions = 1 THEN NULL ELSE next_fire_at_ms END, \
                 nominal_fire_at_ms = CASE WHEN remaining_actions = 1 THEN NULL ELSE nominal_fire_at_ms END \
                 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now, workflow_id, run.0])?,
            FireRecord::Skipped(reason) => tx.prepare_cached(
                "UPDATE schedules SET skipped_count = skipped_count + ?5, last_skip_reason = ?4, \
                 updated_at_ms = ?3 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now, reason, 1_i64])?,
            FireRecord::Missed { moments, reason } => tx.prepare_cached(
                "UPDATE schedules SET skipped_count = skipped_count + ?5, last_skip_reason = ?4, \
                 updated_at_ms = ?3 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now, reason, moments])?,
            FireRecord::Buffered => tx.prepare_cached(
                "UPDATE schedules SET updated_at_ms = ?3 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now])?,
            FireRecord::Failed => tx.prepare_cached(
                "UPDATE schedules SET failures_count = failures_count + 1, updated_at_ms = ?3 \
                 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now])?,
        };
        let recent: Option<String> = tx
            .prepare_cached(
                "SELECT recent_actions FROM schedules WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .query_row(params![namespace, schedule_id], |r| r.get(0))
            .optional()?;
        if let Some(recent) = recent {
            let (event_type, started) = match record {
                FireRecord::Started { workflow_id, run } => {
                    ("ScheduleTriggered", Some((workflow_id.as_str(), *run)))
                }
                FireRecord::Skipped(_) | FireRecord::Missed { .. } => {
                    ("ScheduleTriggerSkipped", None)
                }
                FireRecord::Buffered => ("ScheduleTriggerBuffered", None),
                FireRecord::Failed => ("ScheduleTriggerFailed", None),
            };
            self.append_audit(namespace, schedule_id, event_type, started, action)?;
            let mut recent: Vec<Value> = serde_json::from_str(&recent)?;
            recent.push(action.clone());
            let excess = recent.len().saturating_sub(RECENT_ACTIONS);
            recent.drain(..excess);
            tx.prepare_cached(
                "UPDATE schedules SET recent_actions = ?3 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![
                namespace,
                schedule_id,
                serde_json::to_string(&recent)?
            ])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Appends `fire` to the schedule's buffer unless it already holds
    /// `capacity` fires: the depth afterwards, or `None` when full (or absent).
    pub fn buffer_schedule_fire(
        &self,
        namespace: &str,
        schedule_id: &str,
        fire: &Value,
        capacity: usize,
    ) -> Result<Option<usize>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let buffered: Option<String> = tx
            .prepare_cached(
                "SELECT buffered FROM schedules WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .query_row(params![namespace, schedule_id], |r| r.get(0))
            .optional()?;
        let Some(buffered) = buffered else {
            return Ok(None);
        };
        let mut buffered: Vec<Value> = serde_json::from_str(&buffered)?;
        if buffered.len() >= capacity {
            return Ok(None);
        }
        buffered.push(fire.clone());
        self.store_buffer(&tx, namespace, schedule_id, &buffered)?;
        tx.commit()?;
        Ok(Some(buffered.len()))
    }

    /// Whether a fire under `gate` may start now; false when the schedule
    /// is gone. A [`FireGate::BufferHead`] that passes takes its fire off
    /// the buffer. Called inside the start's write transaction, so the
    /// check, the run and the record the start leaves commit together and
    /// a second caller sees the first one's run.
    pub fn pass_fire_gate(
        &self,
        namespace: &str,
        schedule_id: &str,
        gate: &FireGate,
    ) -> Result<bool, Error> {
        let Some(row) = self.schedule(namespace, schedule_id)? else {
            return Ok(false);
        };
        let open = |row: &ScheduleRow| -> Result<bool, Error> {
            let Some(run) = row.latest_run_id else {
                return Ok(false);
            };
            Ok(self
                .conn
                .prepare_cached("SELECT 1 FROM runs WHERE id = ?1 AND status = 'running'")?
                .exists([run.0])?)
        };
        match gate {
            FireGate::Always => Ok(true),
            FireGate::NoOpenRun { empty_buffer } => {
                let buffer_ok = !*empty_buffer || row.buffered.is_empty();
                Ok(buffer_ok && !open(&row)?)
            }
            FireGate::BufferHead(expected) => {
                if row.buffered.first() != Some(expected) || open(&row)? {
                    return Ok(false);
                }
                let tx = WriteTx::begin(&self.conn)?;
                self.store_buffer(&tx, namespace, schedule_id, &row.buffered[1..])?;
                tx.commit()?;
                Ok(true)
            }
        }
    }

    fn store_buffer(
        &self,
        tx: &WriteTx<'_>,
        namespace: &str,
        schedule_id: &str,
        buffered: &[Value],
    ) -> Result<(), Error> {
        tx.prepare_cached(
            "UPDATE schedules SET buffered = ?3, buffered_count = ?4, updated_at_ms = ?5 \
             WHERE namespace = ?1 AND schedule_id = ?2",
        )?
        .execute(params![
            namespace,
            schedule_id,
            serde_json::to_string(buffered)?,
            to_i64(buffered.len()),
            now_ms()
        ])?;
        Ok(())
    }

    /// Active schedules holding buffered fires whose latest run is no
    /// longer running (so the oldest fire may start), in creation order, at most
    /// `limit` (the declared scan limit): (namespace, schedule id).
    pub fn drainable_schedules(&self, limit: usize) -> Result<Vec<(String, String)>, Error> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT s.namespace, s.schedule_id FROM schedules s WHERE s.buffered_count > 0 \
                 AND s.status = 'active' AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = s.latest_run_id \
                   AND r.status = 'running') \
                 ORDER BY s.id LIMIT ?1",
            )?
            .query_map([to_i64(limit)], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }
}
