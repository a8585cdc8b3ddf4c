//! Deadlines: when an open activity or a running run times out, kept on
//! the row it ends.
//!
//! An open activity's dispatch row carries its earliest due timeout, kept
//! current as the row moves ([`rearm_activity`]): while it waits for a
//! worker, its schedule-to-start (from when it became ready) and
//! schedule-to-close (from when the workflow scheduled it); while an
//! attempt runs, its start-to-close (from the lease), heartbeat (from the
//! last heartbeat or the lease) and schedule-to-close. A running run
//! carries the earlier of its run and execution deadlines ([`arm_run`]).
//!
//! Arming only: what happens when a deadline passes is
//! [`timeouts`](super::timeouts)' business, above the activity attempts it
//! retries. Every transition that moves an activity's row (a lease, a
//! heartbeat, a retry, a schedule) re-arms it here, so this module sits
//! below them all and uses only the row helpers and the connection.

use crate::store::db::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::to_i64;
use crate::store::tx::WriteTx;

/// The timeouts an activity was scheduled with, in seconds.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub(crate) struct ActivityTimeouts {
    #[serde(default)]
    start_to_close_timeout: Option<u64>,
    #[serde(default)]
    schedule_to_close_timeout: Option<u64>,
    #[serde(default)]
    schedule_to_start_timeout: Option<u64>,
    #[serde(default)]
    heartbeat_timeout: Option<u64>,
}

/// `from + seconds`, when the timeout is set.
fn after(from: i64, seconds: Option<u64>) -> Option<i64> {
    seconds.map(|s| from.saturating_add(to_i64(s.saturating_mul(1000))))
}

/// The earliest of the set deadlines, with its timeout's name.
fn earliest<const N: usize>(
    candidates: [(Option<i64>, &'static str); N],
) -> Option<(i64, &'static str)> {
    candidates
        .into_iter()
        .filter_map(|(at, kind)| at.map(|at| (at, kind)))
        .min_by_key(|(at, _)| *at)
}

impl ActivityTimeouts {
    pub(crate) fn of(options: Option<&str>) -> Result<ActivityTimeouts, Error> {
        Ok(match options {
            Some(text) => serde_json::from_str(text)?,
            None => ActivityTimeouts::default(),
        })
    }

    /// While the activity waits for a worker (ready since `ready_at`).
    fn waiting(&self, scheduled_at: i64, ready_at: i64) -> Option<(i64, &'static str)> {
        earliest([
            (
                after(ready_at, self.schedule_to_start_timeout),
                "schedule_to_start",
            ),
            (
                after(scheduled_at, self.schedule_to_close_timeout),
                "schedule_to_close",
            ),
        ])
    }

    /// While an attempt leased at `started_at` runs.
    fn running(
        &self,
        scheduled_at: i64,
        started_at: i64,
        heartbeat_at: Option<i64>,
    ) -> Option<(i64, &'static str)> {
        let beat = heartbeat_at.unwrap_or(started_at).max(started_at);
        earliest([
            (
                after(started_at, self.start_to_close_timeout),
                "start_to_close",
            ),
            (after(beat, self.heartbeat_timeout), "heartbeat"),
            (
                after(scheduled_at, self.schedule_to_close_timeout),
                "schedule_to_close",
            ),
        ])
    }

    pub(crate) fn seconds(&self, kind: &str) -> Option<u64> {
        match kind {
            "start_to_close" => self.start_to_close_timeout,
            "heartbeat" => self.heartbeat_timeout,
            "schedule_to_start" => self.schedule_to_start_timeout,
            _ => self.schedule_to_close_timeout,
        }
    }
}

/// Sets activity task `task_id`'s deadline from its current state: waiting,
/// running, or none once it is done. Writes only when it changed.
pub(crate) fn rearm_activity(conn: &Connection, task_id: i64) -> Result<(), Error> {
    type Raw = (
        String,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<String>,
    );
    let row: Option<Raw> = conn
        .prepare_cached(
            "SELECT d.status, d.created_at_ms, d.due_at_ms, d.attempt_started_at_ms, \
             d.last_heartbeat_at_ms, d.timeout_at_ms, a.options FROM dispatch_tasks d \
             JOIN activities a ON a.id = d.item_id WHERE d.id = ?1 AND d.kind = 'activity'",
        )?
        .query_row([task_id], |r| Raw::try_from(r))
        .optional()?;
    let Some((status, scheduled, due, started, beat, current, options)) = row else {
        return Ok(());
    };
    let timeouts = ActivityTimeouts::of(options.as_deref())?;
    let deadline = match status.as_str() {
        "ready" => timeouts.waiting(scheduled, due),
        "leased" => timeouts.running(scheduled, started.unwrap_or(due), beat),
        _ => None,
    };
    if deadline.map(|(at, _)| at) != current {
        conn.prepare_cached(
            "UPDATE dispatch_tasks SET timeout_at_ms = ?2, timeout_kind = ?3 WHERE id = ?1",
        )?
        .execute(params![
            task_id,
            deadline.map(|(at, _)| at),
            deadline.map(|(_, kind)| kind)
        ])?;
    }
    Ok(())
}

/// The deadline [`rearm_activity`] would set on an activity task queued
/// ready at `at` for an activity scheduled then with these timeouts
/// (seconds): its schedule-to-start and schedule-to-close from `at`. A
/// workflow task that schedules an activity writes it with the new row
/// instead of reading the row back to arm it (a round trip inside the
/// write lock on PostgreSQL for every activity scheduled).
pub(crate) fn new_activity_deadline(
    schedule_to_start_timeout: Option<u64>,
    schedule_to_close_timeout: Option<u64>,
    at: i64,
) -> Option<(i64, &'static str)> {
    ActivityTimeouts {
        schedule_to_start_timeout,
        schedule_to_close_timeout,
        ..ActivityTimeouts::default()
    }
    .waiting(at, at)
}

/// What a lease of an activity task needs of the activity's stored
/// `options` (its JSON) and its task's `created_at_ms` (`scheduled`): the
/// lease's length when the activity has a start-to-close timeout, and the
/// deadline [`rearm_activity`] would set once the attempt started at
/// `started` (its start-to-close, heartbeat and schedule-to-close), which
/// the lease writes with its own `UPDATE` instead of reading the row back.
pub(crate) fn activity_lease(
    options: Option<&str>,
    scheduled: i64,
    started: i64,
) -> Result<ActivityLease, Error> {
    let timeouts = ActivityTimeouts::of(options)?;
    Ok(ActivityLease {
        lease_ms: timeouts
            .start_to_close_timeout
            .map(|seconds| to_i64(seconds.saturating_mul(1000))),
        deadline: timeouts.running(scheduled, started, None),
    })
}

/// What [`activity_lease`] makes of an activity for its attempt's lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ActivityLease {
    /// The lease's length (ms), when the activity has a start-to-close.
    pub lease_ms: Option<i64>,
    /// When a timeout ends the attempt (Unix ms), and which one.
    pub deadline: Option<(i64, &'static str)>,
}

/// When activity task `task_id`'s schedule-to-close timeout passes, if it
/// has one.
pub(crate) fn schedule_to_close_end(conn: &Connection, task_id: i64) -> Result<Option<i64>, Error> {
    let row: Option<(i64, Option<String>)> = conn
        .prepare_cached(
            "SELECT d.created_at_ms, a.options FROM dispatch_tasks d \
             JOIN activities a ON a.id = d.item_id WHERE d.id = ?1",
        )?
        .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((scheduled, options)) = row else {
        return Ok(None);
    };
    Ok(after(
        scheduled,
        ActivityTimeouts::of(options.as_deref())?.schedule_to_close_timeout,
    ))
}

/// The earliest deadline a run created at `created` (Unix ms) with these
/// timeouts has, and which timeout sets it.
pub(crate) fn run_deadline(
    created: i64,
    execution_timeout_seconds: Option<u64>,
    run_timeout_seconds: Option<u64>,
) -> Option<(i64, &'static str)> {
    earliest([
        (after(created, run_timeout_seconds), "run"),
        (after(created, execution_timeout_seconds), "execution"),
    ])
}

/// Records `run`'s execution and run timeouts and arms the earlier one.
pub(crate) fn arm_run(
    conn: &Connection,
    run: RunId,
    execution_timeout_seconds: Option<u64>,
    run_timeout_seconds: Option<u64>,
) -> Result<(), Error> {
    let created: i64 = conn
        .prepare_cached("SELECT created_at_ms FROM runs WHERE id = ?1")?
        .query_row([run.0], |r| r.get(0))
        .optional()?
        .ok_or(Error::RunNotFound(run))?;
    let deadline = run_deadline(created, execution_timeout_seconds, run_timeout_seconds);
    conn.prepare_cached(
        "UPDATE runs SET execution_timeout_seconds = ?2, run_timeout_seconds = ?3, \
         deadline_at_ms = ?4, deadline_kind = ?5 WHERE id = ?1",
    )?
    .execute(params![
        run.0,
        execution_timeout_seconds.map(to_i64),
        run_timeout_seconds.map(to_i64),
        deadline.map(|(at, _)| at),
        deadline.map(|(_, kind)| kind)
    ])?;
    Ok(())
}

/// A run's timeout settings and deadline, as describe shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RunTimeouts {
    /// Seconds the whole execution may take.
    pub execution_timeout_seconds: Option<u64>,
    /// Seconds this run may take.
    pub run_timeout_seconds: Option<u64>,
    /// When the execution deadline passes (Unix ms).
    pub execution_deadline_at_ms: Option<i64>,
    /// When the run deadline passes (Unix ms).
    pub run_deadline_at_ms: Option<i64>,
}

impl Store {
    /// Records a run's execution and run timeouts (seconds) and arms its
    /// deadline: part of the start transition.
    pub fn arm_run_timeouts(
        &self,
        run: RunId,
        execution_timeout_seconds: Option<u64>,
        run_timeout_seconds: Option<u64>,
    ) -> Result<(), Error> {
        let tx = WriteTx::begin(&self.conn)?;
        arm_run(&tx, run, execution_timeout_seconds, run_timeout_seconds)?;
        tx.commit()
    }

    /// A run's timeouts and deadlines.
    pub fn run_timeouts(&self, run: RunId) -> Result<RunTimeouts, Error> {
        run_timeouts(&self.conn, run)
    }
}

/// A run's timeouts and deadlines, on any connection (a transition reads
/// them inside its transaction).
pub(crate) fn run_timeouts(conn: &Connection, run: RunId) -> Result<RunTimeouts, Error> {
    let row: Option<(i64, Option<i64>, Option<i64>)> = conn
        .prepare_cached(
            "SELECT created_at_ms, execution_timeout_seconds, run_timeout_seconds \
             FROM runs WHERE id = ?1",
        )?
        .query_row([run.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let (created, execution, run_timeout) = row.ok_or(Error::RunNotFound(run))?;
    let seconds = |v: Option<i64>| v.and_then(|s| u64::try_from(s).ok());
    Ok(RunTimeouts {
        execution_timeout_seconds: seconds(execution),
        run_timeout_seconds: seconds(run_timeout),
        execution_deadline_at_ms: after(created, seconds(execution)),
        run_deadline_at_ms: after(created, seconds(run_timeout)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_set_deadline_wins_and_unset_ones_never_do() {
        let t = ActivityTimeouts {
            start_to_close_timeout: Some(10),
            schedule_to_close_timeout: Some(5),
            schedule_to_start_timeout: None,
            heartbeat_timeout: Some(2),
        };
        assert_eq!(t.waiting(0, 1000), Some((5000, "schedule_to_close")));
        assert_eq!(t.running(0, 1000, None), Some((3000, "heartbeat")));
        assert_eq!(t.running(0, 1000, Some(2500)), Some((4500, "heartbeat")));
        assert_eq!(
            t.running(0, 1000, Some(4000)),
            Some((5000, "schedule_to_close"))
        );
        assert_eq!(ActivityTimeouts::default().running(0, 1, None), None);
    }
}
