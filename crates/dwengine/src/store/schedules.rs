//! Schedule rows: what the server validated, and their firing state.
//!
//! The store keeps a schedule's definition as opaque JSON (the server owns
//! its meaning) next to the columns the scheduler needs: status, the next
//! fire time and the counters describe reports. A fire is claimed with a
//! compare-and-set on `next_fire_at_ms`, so two nodes scanning the same
//! store never fire one due time twice; the due scan reads at most its
//! declared limit of rows through the partial `schedules_due` index.

use rusqlite::{params, OptionalExtension, Row};
use serde_json::Value;

use crate::store::rows::{now_ms, to_i64};
use crate::store::{Error, RunId, Store};

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
    /// When it fires next (Unix ms); `None` once it never will.
    pub next_fire_at_ms: Option<i64>,
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
}

const COLUMNS: &str = "id, namespace, schedule_id, definition, status, next_fire_at_ms, \
    remaining_actions, fires_count, failures_count, skipped_count, last_fired_at_ms, \
    last_skip_reason, latest_workflow_id, latest_run_id, paused_at_ms, created_at_ms, updated_at_ms";

fn decode(row: &Row<'_>) -> rusqlite::Result<(ScheduleRow, String)> {
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
        },
        row.get(3)?,
    ))
}

fn with_definition((mut row, text): (ScheduleRow, String)) -> Result<ScheduleRow, Error> {
    row.definition = serde_json::from_str(&text)?;
    Ok(row)
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
    /// The overlap policy skipped it.
    Skipped(String),
    /// The start failed.
    Failed,
}

impl Store {
    /// Creates a schedule; false when the namespace already has that id.
    pub fn create_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        definition: &Value,
        paused: bool,
        next_fire_at_ms: Option<i64>,
        remaining_actions: Option<i64>,
    ) -> Result<bool, Error> {
        let now = now_ms();
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT OR IGNORE INTO schedules (namespace, schedule_id, definition, status, \
                 next_fire_at_ms, remaining_actions, paused_at_ms, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
            )?
            .execute(params![
                namespace,
                schedule_id,
                serde_json::to_string(definition)?,
                if paused { "paused" } else { "active" },
                next_fire_at_ms,
                remaining_actions,
                paused.then_some(now),
                now
            ])?;
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
            .map(with_definition)
            .transpose()
    }

    /// One page of the namespace's schedules after position `after`, in creation order.
    pub fn list_schedules(
        &self,
        namespace: &str,
        paused: Option<bool>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM schedules WHERE namespace = ?1 AND id > ?2 \
             AND (?3 IS NULL OR status = ?3) ORDER BY id LIMIT ?4"
        );
        let status = paused.map(|p| if p { "paused" } else { "active" });
        let rows = self
            .conn
            .prepare_cached(&sql)?
            .query_map(params![namespace, after, status, to_i64(limit)], decode)?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().map(with_definition).collect()
    }

    /// Pauses (with no next fire) or resumes (firing next at `next_fire_at_ms`); false when absent.
    pub fn set_schedule_paused(
        &self,
        namespace: &str,
        schedule_id: &str,
        paused: bool,
        next_fire_at_ms: Option<i64>,
    ) -> Result<bool, Error> {
        let now = now_ms();
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE schedules SET status = ?3, paused_at_ms = ?4, next_fire_at_ms = ?5, \
                 updated_at_ms = ?6 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![
                namespace,
                schedule_id,
                if paused { "paused" } else { "active" },
                paused.then_some(now),
                if paused { None } else { next_fire_at_ms },
                now
            ])?;
        Ok(changed == 1)
    }

    /// Deletes a schedule; false when absent. Runs it started are untouched.
    pub fn delete_schedule(&self, namespace: &str, schedule_id: &str) -> Result<bool, Error> {
        let deleted = self
            .conn
            .prepare_cached("DELETE FROM schedules WHERE namespace = ?1 AND schedule_id = ?2")?
            .execute(params![namespace, schedule_id])?;
        Ok(deleted == 1)
    }

    /// Active schedules due at `now_ms`, earliest first, at most `limit`
    /// (the declared scan limit): (namespace, schedule id, due time).
    pub fn due_schedules(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<(String, String, i64)>, Error> {
        let due = self
            .conn
            .prepare_cached(
                "SELECT namespace, schedule_id, next_fire_at_ms FROM schedules \
                 WHERE status = 'active' AND next_fire_at_ms IS NOT NULL AND next_fire_at_ms <= ?1 \
                 ORDER BY next_fire_at_ms LIMIT ?2",
            )?
            .query_map(params![now_ms, to_i64(limit)], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<Result<_, _>>()?;
        Ok(due)
    }

    /// Claims the fire due at `due_at_ms`, moving the schedule on to
    /// `next_fire_at_ms`; false when another pass claimed it (or it changed).
    pub fn claim_schedule_fire(
        &self,
        namespace: &str,
        schedule_id: &str,
        due_at_ms: i64,
        next_fire_at_ms: Option<i64>,
    ) -> Result<bool, Error> {
        let claimed = self
            .conn
            .prepare_cached(
                "UPDATE schedules SET next_fire_at_ms = ?4, updated_at_ms = ?5 \
                 WHERE namespace = ?1 AND schedule_id = ?2 AND status = 'active' \
                 AND next_fire_at_ms = ?3",
            )?
            .execute(params![
                namespace,
                schedule_id,
                due_at_ms,
                next_fire_at_ms,
                now_ms()
            ])?;
        Ok(claimed == 1)
    }

    /// Counts one fire's outcome; a start also spends one of `max_runs`
    /// and, when that was the last, leaves no next fire.
    pub fn record_schedule_fire(
        &self,
        namespace: &str,
        schedule_id: &str,
        record: &FireRecord,
    ) -> Result<(), Error> {
        let now = now_ms();
        match record {
            FireRecord::Started { workflow_id, run } => self.conn.prepare_cached(
                "UPDATE schedules SET fires_count = fires_count + 1, last_fired_at_ms = ?3, \
                 latest_workflow_id = ?4, latest_run_id = ?5, updated_at_ms = ?3, \
                 remaining_actions = CASE WHEN remaining_actions IS NULL THEN NULL \
                   ELSE MAX(remaining_actions - 1, 0) END, \
                 next_fire_at_ms = CASE WHEN remaining_actions = 1 THEN NULL ELSE next_fire_at_ms END \
                 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now, workflow_id, run.0])?,
            FireRecord::Skipped(reason) => self.conn.prepare_cached(
                "UPDATE schedules SET skipped_count = skipped_count + 1, last_skip_reason = ?4, \
                 updated_at_ms = ?3 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now, reason])?,
            FireRecord::Failed => self.conn.prepare_cached(
                "UPDATE schedules SET failures_count = failures_count + 1, updated_at_ms = ?3 \
                 WHERE namespace = ?1 AND schedule_id = ?2",
            )?
            .execute(params![namespace, schedule_id, now])?,
        };
        Ok(())
    }
}
