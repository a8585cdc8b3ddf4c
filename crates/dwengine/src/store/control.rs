//! Control-plane operations on runs: lookup, cancel, terminate, describe,
//! retention, and the worker registry.
//!
//! Split from [`crate::store::dispatch`] because these are what operators
//! and clients ask of a run, while dispatch is what workers ask of a queue;
//! both share the store's transactions and the run row's control columns
//! added by migration 0002.

use rusqlite::{params, OptionalExtension};
use serde::Serialize;
use serde_json::json;

use crate::store::completion::{finish_run, FailureRow};
use crate::store::dispatch::enqueue_workflow;
use crate::store::model::{RunId, RunStatus};
use crate::store::rows::{load_head, now_ms};
use crate::store::tx::WriteTx;
use crate::store::{Error, EventType, Store};

/// What a cancel or terminate did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StopOutcome {
    /// Nothing was written: the run already had this stop recorded.
    pub duplicate: bool,
    /// The recorded stop carried the caller's own request id (a retry).
    pub same_request: bool,
}

/// One run's control-plane view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDescription {
    /// The run as stored.
    pub run: crate::store::Run,
    /// When cancellation was requested.
    pub cancel_requested_at_ms: Option<i64>,
    /// When the run closed.
    pub closed_at_ms: Option<i64>,
    /// When retention removed its history.
    pub details_pruned_at_ms: Option<i64>,
    /// Its failure rows.
    pub failures: Vec<crate::store::FailureRecord>,
}

impl Store {
    /// The newest run of `workflow_id` in `namespace`.
    pub fn find_run(&self, namespace: &str, workflow_id: &str) -> Result<Option<RunId>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE namespace = ?1 AND workflow_id = ?2 \
                 ORDER BY id DESC LIMIT 1",
            )?
            .query_row(params![namespace, workflow_id], |r| r.get(0))
            .optional()?
            .map(RunId))
    }

    /// Records a cancellation request and queues a workflow task so the
    /// workflow sees it; the workflow decides how to end.
    ///
    /// A run records its cancellation once: a repeat (retried with the same
    /// request id, or a second caller's) writes nothing and answers
    /// `duplicate`, so a storm of cancels costs no history.
    pub fn request_cancel(
        &self,
        run: RunId,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<StopOutcome, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        let (requested, recorded_id): (Option<i64>, Option<String>) = tx.query_row(
            "SELECT cancel_requested_at_ms, cancel_request_id FROM runs WHERE id = ?1",
            [run.0],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if requested.is_some() {
            return Ok(StopOutcome {
                duplicate: true,
                same_request: request_id.is_some() && recorded_id.as_deref() == request_id,
            });
        }
        head.ensure_writable()?;
        tx.prepare_cached(
            "UPDATE runs SET cancel_requested_at_ms = ?2, cancel_request_id = ?3 WHERE id = ?1",
        )?
        .execute(params![run.0, now_ms(), request_id])?;
        crate::store::rows::append_event(
            &tx,
            run,
            EventType::SignalReceived,
            &json!({ "name": "__cancel_requested", "reason": reason, "request_id": request_id }),
            false,
        )?;
        enqueue_workflow(&tx, run)?;
        tx.commit()?;
        Ok(StopOutcome {
            duplicate: false,
            same_request: false,
        })
    }

    /// Ends the run at once as failed with category `terminated`.
    ///
    /// A retry with the request id that terminated the run answers
    /// `duplicate` instead of refusing a closed run; any other call on a
    /// closed run is refused, so termination is recorded once.
    pub fn terminate(
        &self,
        run: RunId,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<StopOutcome, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        if let Some(request_id) = request_id {
            let recorded: Option<String> = tx.query_row(
                "SELECT terminate_request_id FROM runs WHERE id = ?1",
                [run.0],
                |r| r.get(0),
            )?;
            if recorded.as_deref() == Some(request_id) {
                return Ok(StopOutcome {
                    duplicate: true,
                    same_request: true,
                });
            }
        }
        head.ensure_writable()?;
        tx.prepare_cached("UPDATE runs SET terminate_request_id = ?2 WHERE id = ?1")?
            .execute(params![run.0, request_id])?;
        let payload = json!({ "failure_category": "terminated", "message": reason });
        finish_run(
            &tx,
            &head,
            RunStatus::Failed,
            EventType::WorkflowFailed,
            &payload,
            Some(FailureRow {
                category: "terminated",
                message: reason,
                limit: None,
            }),
        )?;
        tx.commit()?;
        Ok(StopOutcome {
            duplicate: false,
            same_request: false,
        })
    }

    /// The run with its control-plane fields.
    pub fn describe(&self, run: RunId) -> Result<RunDescription, Error> {
        let stored = self.run(run)?;
        let (cancel, closed, pruned) = self.conn.query_row(
            "SELECT cancel_requested_at_ms, closed_at_ms, details_pruned_at_ms FROM runs WHERE id = ?1",
            [run.0],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        Ok(RunDescription {
            run: stored,
            cancel_requested_at_ms: cancel,
            closed_at_ms: closed,
            details_pruned_at_ms: pruned,
            failures: self.failures(run)?,
        })
    }

    /// Prunes the history of at most one run of `namespace` that closed
    /// before `closed_before_ms`: marks it, then deletes its history and
    /// dispatch rows. The root row stays.
    pub fn prune_one_expired_run(
        &self,
        namespace: &str,
        closed_before_ms: i64,
    ) -> Result<Option<RunId>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let run: Option<i64> = tx
            .prepare_cached(
                "SELECT id FROM runs WHERE namespace = ?1 AND status != 'running' \
                 AND closed_at_ms < ?2 AND details_pruned_at_ms IS NULL \
                 ORDER BY closed_at_ms LIMIT 1",
            )?
            .query_row(params![namespace, closed_before_ms], |r| r.get(0))
            .optional()?;
        let Some(run) = run else {
            return Ok(None);
        };
        tx.prepare_cached("UPDATE runs SET details_pruned_at_ms = ?2 WHERE id = ?1")?
            .execute(params![run, now_ms()])?;
        tx.prepare_cached("DELETE FROM history_events WHERE run_id = ?1")?
            .execute([run])?;
        tx.prepare_cached("DELETE FROM dispatch_tasks WHERE run_id = ?1")?
            .execute([run])?;
        tx.commit()?;
        Ok(Some(RunId(run)))
    }

    /// Registers a worker or refreshes its heartbeat.
    pub fn record_worker(
        &self,
        namespace: &str,
        worker_id: &str,
        task_queue: &str,
    ) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "INSERT INTO workers (namespace, worker_id, task_queue, last_heartbeat_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (namespace, worker_id) DO UPDATE SET \
                 task_queue = excluded.task_queue, last_heartbeat_ms = excluded.last_heartbeat_ms",
            )?
            .execute(params![namespace, worker_id, task_queue, now_ms()])?;
        Ok(())
    }

    /// Whether (namespace, worker id) has heartbeated since `since_ms`.
    pub fn worker_registered(
        &self,
        namespace: &str,
        worker_id: &str,
        since_ms: i64,
    ) -> Result<bool, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT 1 FROM workers WHERE namespace = ?1 AND worker_id = ?2 \
                 AND last_heartbeat_ms >= ?3",
            )?
            .query_row(params![namespace, worker_id, since_ms], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Deletes at most `limit` worker registrations whose last heartbeat is
    /// older than `idle_before_ms`, oldest first (an index walk, so the
    /// sweep costs `limit` rows however many workers exist); returns how
    /// many went.
    pub fn prune_idle_workers(&self, idle_before_ms: i64, limit: usize) -> Result<usize, Error> {
        let pruned = self
            .conn
            .prepare_cached(
                "DELETE FROM workers WHERE (namespace, worker_id) IN (SELECT namespace, worker_id \
                 FROM workers WHERE last_heartbeat_ms < ?1 ORDER BY last_heartbeat_ms LIMIT ?2)",
            )?
            .execute(params![idle_before_ms, crate::store::rows::to_i64(limit)])?;
        Ok(pruned)
    }

    /// Registered workers (tests and diagnostics).
    pub fn worker_count(&self) -> Result<u64, Error> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM workers", [], |r| r.get(0))?;
        Ok(crate::store::rows::to_u64(n))
    }
}
