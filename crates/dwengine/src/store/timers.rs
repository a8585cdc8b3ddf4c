//! Durable timers of the wire protocol: firing one and cancelling one.
//!
//! A protocol timer carries the workflow `sequence` of the command that
//! started it and its kind: an ordinary `timer`, or the `condition_timeout`
//! of a condition wait. Its `TimerFired` event names both, which is how the
//! SDK's replay tells a workflow sleep from a wait that timed out. Its
//! `timer_id` and `delay_seconds` repeat the `TimerScheduled` event's: the
//! Rust SDK's replay checks the pair and stops with
//! `timer_history_field_missing` when either is absent. Arming, firing and
//! cancelling one run inside the caller's transaction; a poll pass fires a
//! queue's due timers ([`Store::fire_due_timers`]) in one of its own,
//! queueing a workflow task for each run. With a queue driver that carries
//! timers itself (SQS, `crate::queue`), the delivery of a timer's message
//! fires it ([`Store::fire_timer_if_due`]) and the poll passes step in only
//! for a timer overdue by the driver's grace. Timers sit above the task queue
//! ([`dispatch`](super::dispatch)), which knows nothing of them beyond
//! their rows.

use crate::store::db::{params, Connection, OptionalExtension};
use serde_json::{json, Map, Value};

use crate::store::connection::Store;
use crate::store::dispatch::enqueue_workflow;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::protocol::ParallelGroup;
use crate::store::rows::{append_event, bump, load_head, now_ms, to_i64, Pending};
use crate::store::tx::WriteTx;

/// Whether (namespace ?1, task queue ?2, cohort ?4) has a timer due by ?3:
/// a read of the partial index `dispatch_due_timers_by_cohort` (timer tasks
/// only), which `kind = 'timer'` here lets the planner use.
pub(crate) const ANY_DUE_TIMER: &str =
    "SELECT 1 FROM dispatch_tasks WHERE kind = 'timer' AND namespace = ?1 \
     AND task_queue = ?2 AND build_id IS NOT DISTINCT FROM ?4 AND status = 'ready' AND due_at_ms <= ?3 \
     LIMIT 1";

/// The first ?4 timers of (namespace ?1, task queue ?2, cohort ?5) due by
/// ?3, earliest first, through the same index.
pub(crate) const DUE_TIMERS: &str =
    "SELECT id, run_id, item_id FROM dispatch_tasks WHERE kind = 'timer' \
     AND namespace = ?1 AND task_queue = ?2 AND build_id IS NOT DISTINCT FROM ?5 AND status = 'ready' \
     AND due_at_ms <= ?3 ORDER BY due_at_ms, id LIMIT ?4";

impl Store {
    /// Whether (namespace, task queue, build-id cohort) has a timer due:
    /// the read that lets a poll pass skip the write transaction when
    /// nothing is due. `cohort` is the polling worker's build id (`None`:
    /// unversioned workers).
    ///
    /// A timer due less than `grace_ms` ago is not counted: a queue driver
    /// that delivers timers itself (SQS) fires it, and a poll pass steps in
    /// only for a delivery that is late by more than the grace (0 on the
    /// database driver, which delivers nothing).
    pub fn has_due_timers(
        &self,
        namespace: &str,
        task_queue: &str,
        cohort: Option<&str>,
        grace_ms: i64,
    ) -> Result<bool, Error> {
        Ok(self
            .conn
            .prepare_cached(ANY_DUE_TIMER)?
            .query_row(
                params![
                    namespace,
                    task_queue,
                    now_ms().saturating_sub(grace_ms),
                    cohort
                ],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Fires at most `limit` due timers of (namespace, task queue, build-id
    /// cohort) due at least `grace_ms` ago ([`Store::has_due_timers`]),
    /// earliest first, queueing a workflow task for each run; returns how
    /// many fired.
    pub fn fire_due_timers(
        &self,
        namespace: &str,
        task_queue: &str,
        cohort: Option<&str>,
        limit: usize,
        grace_ms: i64,
    ) -> Result<usize, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let due: Vec<(i64, i64, i64)> = tx
            .prepare_cached(DUE_TIMERS)?
            .query_map(
                params![
                    namespace,
                    task_queue,
                    now_ms().saturating_sub(grace_ms),
                    to_i64(limit),
                    cohort
                ],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?
            .collect::<Result<_, _>>()?;
        for (id, run, timer) in &due {
            fire(&tx, RunId(*run), *timer)?;
            tx.prepare_cached("UPDATE dispatch_tasks SET status = 'done' WHERE id = ?1")?
                .execute([id])?;
            enqueue_workflow(&tx, RunId(*run))?;
        }
        tx.commit()?;
        Ok(due.len())
    }

    /// When armed timer `timer` comes due (unix ms): `None` once it fired
    /// or was cancelled, or for a timer this store never armed. A queue
    /// driver that carries timers asks this before each re-enqueue, so a
    /// cancelled timer's chain of delayed messages ends at its next hop.
    pub fn armed_timer_due_at(&self, timer: i64) -> Result<Option<i64>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT due_at_ms FROM dispatch_tasks WHERE kind = 'timer' AND item_id = ?1 \
                 AND status = 'ready'",
            )?
            .query_row([timer], |r| r.get(0))
            .optional()?)
    }

    /// Fires armed timer `timer` if it is due, exactly as a poll pass fires
    /// a due timer (the `TimerFired` event, the dispatch row closed, a
    /// workflow task queued for the run), whatever the cohort of its run;
    /// returns the (namespace, task queue) of that workflow task. `None`
    /// when it is not due yet, already fired or cancelled: a second
    /// delivery of the same timer fires nothing.
    pub fn fire_timer_if_due(&self, timer: i64) -> Result<Option<(String, String)>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let row: Option<(i64, i64, String, String)> = tx
            .prepare_cached(
                "SELECT id, run_id, namespace, task_queue FROM dispatch_tasks WHERE kind = 'timer' \
                 AND item_id = ?1 AND status = 'ready' AND due_at_ms <= ?2",
            )?
            .query_row(params![timer, now_ms()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((id, run, namespace, task_queue)) = row else {
            return Ok(None);
        };
        fire(&tx, RunId(run), timer)?;
        tx.prepare_cached("UPDATE dispatch_tasks SET status = 'done' WHERE id = ?1")?
            .execute([id])?;
        enqueue_workflow(&tx, RunId(run))?;
        tx.commit()?;
        Ok(Some((namespace, task_queue)))
    }
}

/// The timer kind of a condition wait's timeout.
pub const CONDITION_TIMEOUT: &str = "condition_timeout";

/// Fires `timer` of `run` (a no-op for a timer already fired or cancelled):
/// the row closes, the pending count drops, and a running run gets its
/// `TimerFired` event; a condition timeout also closes the run's open wait.
pub(crate) fn fire(conn: &Connection, run: RunId, timer: i64) -> Result<(), Error> {
    let Some(row) = close(conn, timer, "fired")? else {
        return Ok(());
    };
    if load_head(conn, run)?.status != RunStatus::Running {
        return Ok(());
    }
    let mut payload = Map::new();
    payload.insert("timer_id".into(), timer.to_string().into());
    payload.insert("delay_seconds".into(), (row.delay_ms / 1000).into());
    if let Some(sequence) = row.sequence {
        payload.insert("sequence".into(), sequence.into());
    }
    if let Some(kind) = &row.kind {
        payload.insert("timer_kind".into(), kind.clone().into());
    }
    if let Some(wait) = &row.condition_wait_id {
        payload.insert("condition_wait_id".into(), wait.clone().into());
        conn.prepare_cached(
            "UPDATE runs SET open_condition_wait = NULL WHERE id = ?1 \
             AND json_extract(open_condition_wait, '$.condition_wait_id') = ?2",
        )?
        .execute(params![run.0, wait])?;
    }
    let mut payload = Value::Object(payload);
    if let Some(group) = &row.group {
        let group: ParallelGroup = serde_json::from_str(group)?;
        group.stamp(&mut payload);
    }
    append_event(conn, run, EventType::TimerFired, &payload, false)?;
    Ok(())
}

/// Cancels a pending timer and its dispatch row, without a history event
/// (the SDK replays a satisfied wait from `ConditionWaitSatisfied`).
pub(crate) fn cancel_quietly(conn: &Connection, timer: i64) -> Result<(), Error> {
    if close(conn, timer, "cancelled")?.is_some() {
        conn.prepare_cached(
            "UPDATE dispatch_tasks SET status = 'done' WHERE kind = 'timer' AND item_id = ?1",
        )?
        .execute([timer])?;
    }
    Ok(())
}

/// What a protocol timer is armed with.
pub(crate) struct Arm<'a> {
    pub namespace: &'a str,
    pub task_queue: &'a str,
    pub delay_seconds: u64,
    pub sequence: i64,
    pub kind: &'a str,
    pub condition_wait_id: Option<&'a str>,
    pub group: Option<&'a ParallelGroup>,
}

/// A timer a commit armed: its id and when it comes due. A queue driver
/// that delivers timers itself (SQS) is handed these after the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArmedTimer {
    /// The timer's id (`timer_id` of its history events).
    pub timer_id: i64,
    /// When it comes due, unix milliseconds.
    pub due_at_ms: i64,
}

/// Inserts a pending protocol timer and arms its dispatch row.
pub(crate) fn arm(conn: &Connection, run: RunId, timer: &Arm<'_>) -> Result<ArmedTimer, Error> {
    let delay_ms = crate::store::rows::to_i64(timer.delay_seconds.saturating_mul(1000));
    let group = timer.group.map(serde_json::to_string).transpose()?;
    let id = conn.insert_returning_id(
        "INSERT INTO timers (run_id, delay_ms, status, sequence, timer_kind, condition_wait_id, \
         parallel_group) VALUES (?1, ?2, 'pending', ?3, ?4, ?5, ?6)",
        params![
            run.0,
            delay_ms,
            timer.sequence,
            timer.kind,
            timer.condition_wait_id,
            group
        ],
    )?;
    bump(conn, run, Pending::Timer, 1)?;
    let now = crate::store::rows::now_ms();
    let due_at_ms = now.saturating_add(delay_ms);
    conn.prepare_cached(
        "INSERT INTO dispatch_tasks (kind, run_id, item_id, namespace, task_queue, status, \
         due_at_ms, created_at_ms) VALUES ('timer', ?1, ?2, ?3, ?4, 'ready', ?5, ?6)",
    )?
    .execute(params![
        run.0,
        id,
        timer.namespace,
        timer.task_queue,
        due_at_ms,
        now
    ])?;
    Ok(ArmedTimer {
        timer_id: id,
        due_at_ms,
    })
}

struct TimerRow {
    delay_ms: i64,
    sequence: Option<i64>,
    kind: Option<String>,
    condition_wait_id: Option<String>,
    group: Option<String>,
}

/// Moves a pending timer to `status` and releases its count; `None` when
/// it was not pending.
fn close(conn: &Connection, timer: i64, status: &str) -> Result<Option<TimerRow>, Error> {
    let row = conn
        .prepare_cached(
            "UPDATE timers SET status = ?2 WHERE id = ?1 AND status = 'pending' \
             RETURNING run_id, delay_ms, sequence, timer_kind, condition_wait_id, parallel_group",
        )?
        .query_row(params![timer, status], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                TimerRow {
                    delay_ms: r.get(1)?,
                    sequence: r.get(2)?,
                    kind: r.get(3)?,
                    condition_wait_id: r.get(4)?,
                    group: r.get(5)?,
                },
            ))
        })
        .optional()?;
    let Some((run, row)) = row else {
        return Ok(None);
    };
    bump(conn, RunId(run), Pending::Timer, -1)?;
    Ok(Some(row))
}

/// The `TimerScheduled` payload of an ordinary timer.
pub(crate) fn scheduled_payload(timer: i64, sequence: i64, delay_seconds: u64) -> Value {
    json!({
        "sequence": sequence,
        "timer_id": timer.to_string(),
        "delay_seconds": delay_seconds,
        "timer_kind": "timer",
    })
}
