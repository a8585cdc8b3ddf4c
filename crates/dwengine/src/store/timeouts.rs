//! Activity and run timeouts: each deadline lives on the row it ends, and
//! each expiry is one transaction.
//!
//! An open activity's dispatch row carries its earliest due timeout, kept
//! current as the row moves: while it waits for a worker, its
//! schedule-to-start (from when it became ready) and schedule-to-close
//! (from when the workflow scheduled it); while an attempt runs, its
//! start-to-close (from the lease), heartbeat (from the last heartbeat or
//! the lease) and schedule-to-close. A start-to-close or heartbeat expiry
//! is a failed attempt: it is retried under the activity's retry policy
//! while attempts remain and the retry can start before schedule-to-close;
//! otherwise, and for the two schedule timeouts, the activity ends with an
//! `ActivityTimedOut` event naming the timeout. A running run carries the
//! earlier of its run and execution deadlines and ends, when it passes,
//! as `failed` with a `WorkflowTimedOut` event and a `timeout` failure.
//!
//! The deadlines are cleared as rows close, so their partial indexes hold
//! only live deadlines and the sweeps ([`Store::due_activity_timeouts`],
//! [`Store::due_run_timeouts`]) are index walks that stop at their limit.

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::store::activity_attempts::{
    attempt_id, next_attempt_at, requeue_attempt, AttemptFailure,
};
use crate::store::completion::{finish_run, FailureRow};
use crate::store::dispatch::enqueue_workflow;
use crate::store::model::{RunId, RunStatus};
use crate::store::rows::{append_event, bump, load_head, now_ms, to_i64, Pending};
use crate::store::tx::WriteTx;
use crate::store::{Error, EventType, Store};

/// The failure category of a timeout (activity or run).
pub const TIMEOUT_CATEGORY: &str = "timeout";

/// The timeouts an activity was scheduled with, in seconds.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
struct ActivityTimeouts {
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
    fn of(options: Option<&str>) -> Result<ActivityTimeouts, Error> {
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

    fn seconds(&self, kind: &str) -> Option<u64> {
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
    let deadline = earliest([
        (after(created, run_timeout_seconds), "run"),
        (after(created, execution_timeout_seconds), "execution"),
    ]);
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

/// What an activity timeout did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActivityTimeout {
    /// The activity ended with `ActivityTimedOut`; the run's workflow
    /// task queue has a task to see it.
    TimedOut {
        /// The run's namespace.
        namespace: String,
        /// The run's (workflow) task queue.
        workflow_queue: String,
    },
    /// The timed-out attempt counted against the retry policy; the next
    /// attempt waits on the activity's queue.
    Retried {
        /// The namespace.
        namespace: String,
        /// The activity's task queue.
        activity_queue: String,
    },
    /// Nothing was due (already closed, or re-armed meanwhile).
    NotDue,
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
        let row: Option<(i64, Option<i64>, Option<i64>)> = self
            .conn
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

    /// Activity tasks whose deadline has passed, earliest first, at most
    /// `limit`: a walk of the deadline index that stops after `limit` rows.
    pub fn due_activity_timeouts(&self, limit: usize) -> Result<Vec<i64>, Error> {
        let ids = self
            .conn
            .prepare_cached(
                "SELECT id FROM dispatch_tasks WHERE timeout_at_ms IS NOT NULL \
                 AND timeout_at_ms <= ?1 ORDER BY timeout_at_ms LIMIT ?2",
            )?
            .query_map(params![now_ms(), to_i64(limit)], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Runs whose run or execution deadline has passed, earliest first, at
    /// most `limit` (an index walk, like [`Store::due_activity_timeouts`]).
    pub fn due_run_timeouts(&self, limit: usize) -> Result<Vec<RunId>, Error> {
        let ids = self
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE deadline_at_ms IS NOT NULL \
                 AND deadline_at_ms <= ?1 ORDER BY deadline_at_ms LIMIT ?2",
            )?
            .query_map(params![now_ms(), to_i64(limit)], |r| r.get(0).map(RunId))?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Enforces activity task `task_id`'s passed deadline (see the module
    /// docs); a deadline that is not due, or a row already closed, is left
    /// as it is (a closed row's stale deadline is cleared).
    pub fn time_out_activity(&self, task_id: i64) -> Result<ActivityTimeout, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let outcome = time_out(&tx, task_id)?;
        tx.commit()?;
        Ok(outcome)
    }

    /// Ends `run` as timed out if its deadline has passed: `failed`, with a
    /// `WorkflowTimedOut` event and a `timeout` failure row. Answers whether
    /// it did.
    pub fn time_out_run(&self, run: RunId) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        type Raw = (Option<i64>, Option<String>, Option<i64>, Option<i64>);
        let row: Option<Raw> = tx
            .prepare_cached(
                "SELECT deadline_at_ms, deadline_kind, execution_timeout_seconds, \
                 run_timeout_seconds FROM runs WHERE id = ?1",
            )?
            .query_row([run.0], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((Some(deadline), kind, execution, run_timeout)) = row else {
            return Ok(false);
        };
        let head = load_head(&tx, run)?;
        if head.status != RunStatus::Running {
            tx.prepare_cached("UPDATE runs SET deadline_at_ms = NULL WHERE id = ?1")?
                .execute([run.0])?;
            tx.commit()?;
            return Ok(false);
        }
        if deadline > now_ms() {
            return Ok(false);
        }
        let kind = kind.unwrap_or_else(|| "run".into());
        let seconds = if kind == "execution" {
            execution
        } else {
            run_timeout
        };
        let message = format!(
            "workflow {kind} timeout of {}s elapsed",
            seconds.unwrap_or(0)
        );
        let payload = json!({
            "message": message,
            "timeout_kind": kind,
            "closed_reason": "timed_out",
            "failure_category": TIMEOUT_CATEGORY,
            "execution_timeout_seconds": execution,
            "run_timeout_seconds": run_timeout,
        });
        let failure = FailureRow {
            category: TIMEOUT_CATEGORY,
            message: &message,
            limit: None,
        };
        finish_run(
            &tx,
            &head,
            RunStatus::Failed,
            EventType::WorkflowTimedOut,
            &payload,
            Some(failure),
        )?;
        tx.commit()?;
        Ok(true)
    }
}

fn time_out(conn: &Connection, task_id: i64) -> Result<ActivityTimeout, Error> {
    type Raw = (
        String,
        i64,
        Option<i64>,
        i64,
        Option<i64>,
        Option<String>,
        String,
        String,
    );
    let row: Option<Raw> = conn
        .prepare_cached(
            "SELECT status, run_id, item_id, attempt, timeout_at_ms, timeout_kind, \
             namespace, task_queue FROM dispatch_tasks WHERE id = ?1 AND kind = 'activity'",
        )?
        .query_row([task_id], |r| Raw::try_from(r))
        .optional()?;
    let Some((status, run, Some(activity), attempt, Some(due), kind, ns, queue)) = row else {
        return Ok(ActivityTimeout::NotDue);
    };
    let run = RunId(run);
    if status == "done" || load_head(conn, run)?.status != RunStatus::Running {
        end_task(conn, task_id)?;
        return Ok(ActivityTimeout::NotDue);
    }
    let now = now_ms();
    if due > now {
        return Ok(ActivityTimeout::NotDue);
    }
    let kind = kind.unwrap_or_else(|| "start_to_close".into());
    let options: Option<String> = conn
        .prepare_cached("SELECT options FROM activities WHERE id = ?1")?
        .query_row([activity], |r| r.get(0))?;
    let timeouts = ActivityTimeouts::of(options.as_deref())?;
    let message = format!(
        "activity {kind} timeout of {}s elapsed",
        timeouts.seconds(&kind).unwrap_or(0)
    );
    let attempt = u64::try_from(attempt).unwrap_or(0);
    if status == "leased" && matches!(kind.as_str(), "start_to_close" | "heartbeat") {
        let failure = AttemptFailure {
            message: message.clone(),
            exception_type: Some("ActivityTimeout".into()),
            ..AttemptFailure::default()
        };
        if let Some(next) = next_attempt_at(conn, task_id, activity, attempt, &failure)? {
            requeue_attempt(conn, task_id, next, &message)?;
            return Ok(ActivityTimeout::Retried {
                namespace: ns,
                activity_queue: queue,
            });
        }
    }
    let closed: Option<(Option<i64>, String)> = conn
        .prepare_cached(
            "UPDATE activities SET status = 'failed', result = ?2 WHERE id = ?1 \
             AND status = 'scheduled' RETURNING sequence, activity_type",
        )?
        .query_row(
            params![
                activity,
                serde_json::to_string(&json!({ "timeout_kind": kind, "message": message }))?
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    end_task(conn, task_id)?;
    let Some((sequence, activity_type)) = closed else {
        return Ok(ActivityTimeout::NotDue);
    };
    bump(conn, run, Pending::Activity, -1)?;
    let mut payload = json!({
        "sequence": sequence,
        "activity_execution_id": activity.to_string(),
        "activity_type": activity_type,
        "attempt_number": attempt,
        "timeout_kind": kind,
        "message": message,
        "failure_category": TIMEOUT_CATEGORY,
        "exception_type": "ActivityTimeout",
        "non_retryable": true,
    });
    if attempt > 0 {
        payload["activity_attempt_id"] = attempt_id(task_id, attempt).into();
    }
    crate::store::activity_attempts::stamp_group(conn, activity, &mut payload)?;
    append_event(conn, run, EventType::ActivityTimedOut, &payload, false)?;
    enqueue_workflow(conn, run)?;
    let workflow_queue: String = conn
        .prepare_cached("SELECT task_queue FROM runs WHERE id = ?1")?
        .query_row([run.0], |r| r.get(0))?;
    Ok(ActivityTimeout::TimedOut {
        namespace: ns,
        workflow_queue,
    })
}

fn end_task(conn: &Connection, task_id: i64) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE dispatch_tasks SET status = 'done', timeout_at_ms = NULL WHERE id = ?1",
    )?
    .execute([task_id])?;
    Ok(())
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
