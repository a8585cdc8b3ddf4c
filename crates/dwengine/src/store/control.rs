//! Control-plane operations on runs: lookup, cancel, terminate, describe,
//! retention, and the worker registry.
//!
//! Split from [`crate::store::dispatch`] because these are what operators
//! and clients ask of a run, while dispatch is what workers ask of a queue;
//! both share the store's transactions and the run row's control columns
//! added by migration 0002.

use crate::store::db::{params, OptionalExtension};
use serde::Serialize;
use serde_json::{json, Value};

use crate::store::archive::ArchivedFilter;
use crate::store::completion::finish_run;
use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::history::read_event;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::rows::{load_head, now_ms, to_i64, to_u64};
use crate::store::tx::WriteTx;

/// A deregistered worker's workflow-task leases handed back to their
/// queues: a walk of the leased tasks (`dispatch_leases`, which holds no
/// other task since migration 0049).
pub(crate) const RELEASE_WORKER_LEASES: &str =
    "UPDATE dispatch_tasks SET status = 'ready', lease_owner = NULL, \
     lease_expires_at_ms = NULL, poll_request_id = NULL \
     WHERE namespace = ?1 AND lease_owner = ?2 AND status = 'leased' AND kind = 'workflow'";

/// Whether an event of this type is a run's terminal record (its last
/// event, written with the status that closes it).
pub(crate) fn closes_run(event: EventType) -> bool {
    matches!(
        event,
        EventType::WorkflowCompleted
            | EventType::WorkflowFailed
            | EventType::WorkflowCancelled
            | EventType::WorkflowTerminated
            | EventType::WorkflowTimedOut
            | EventType::WorkflowContinuedAsNew
    )
}

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
    pub run: crate::store::model::Run,
    /// When cancellation was requested.
    pub cancel_requested_at_ms: Option<i64>,
    /// When the run closed.
    pub closed_at_ms: Option<i64>,
    /// When retention removed its history.
    pub details_pruned_at_ms: Option<i64>,
    /// Its failure rows.
    pub failures: Vec<crate::store::model::FailureRecord>,
    /// Its timeouts and deadlines.
    pub timeouts: crate::store::deadlines::RunTimeouts,
    /// Why its pending workflow task last failed, while that task is open.
    pub workflow_task_failure: Option<WorkflowTaskFailure>,
    /// Whether the run is open with a workflow task ready or leased: its
    /// code has something to do. An open run without one is waiting (on
    /// an activity, a timer, a signal, a child, …).
    pub workflow_task_open: bool,
}

/// The newest failure of a run's open workflow task, as the task row keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WorkflowTaskFailure {
    /// The failure the worker reported (message, type, reason, …).
    pub failure: Value,
    /// The attempt that failed.
    pub attempt: u64,
    /// When the task is handed out again (Unix ms).
    pub next_attempt_at_ms: i64,
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

    /// Ends the run at once as `terminated` (no workflow code runs after it).
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
        self.close_run(run, RunStatus::Terminated, reason, request_id)
    }

    /// Ends the run at once as `cancelled`: its open tasks and timers are
    /// dropped and no workflow code runs after it. A run is cancelled once:
    /// a repeat (a retry or a second caller) writes nothing and answers
    /// `duplicate`.
    pub fn cancel(
        &self,
        run: RunId,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<StopOutcome, Error> {
        self.close_run(run, RunStatus::Cancelled, reason, request_id)
    }

    fn close_run(
        &self,
        run: RunId,
        status: RunStatus,
        reason: &str,
        request_id: Option<&str>,
    ) -> Result<StopOutcome, Error> {
        let (column, event) = match status {
            RunStatus::Cancelled => ("cancel_request_id", EventType::WorkflowCancelled),
            _ => ("terminate_request_id", EventType::WorkflowTerminated),
        };
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        if head.status == status {
            let recorded: Option<String> = tx.query_row(
                &format!("SELECT {column} FROM runs WHERE id = ?1"),
                [run.0],
                |r| r.get(0),
            )?;
            let same_request = request_id.is_some() && recorded.as_deref() == request_id;
            // A run is cancelled once, whoever repeats it; a terminate is
            // repeated only by a retry carrying its own request id.
            if same_request || status == RunStatus::Cancelled {
                return Ok(StopOutcome {
                    duplicate: true,
                    same_request,
                });
            }
        }
        // Not `ensure_writable`: an imported v1 projection takes no workflow
        // traffic, but one that never ended (no terminal event) is closed by
        // an operator here, or it would hold its workflow id for good.
        if head.status != RunStatus::Running {
            return Err(Error::RunNotActive {
                run,
                status: head.status,
            });
        }
        tx.prepare_cached(&format!("UPDATE runs SET {column} = ?2 WHERE id = ?1"))?
            .execute(params![run.0, request_id])?;
        let payload = json!({ "reason": reason, "request_id": request_id });
        finish_run(&tx, &head, status, event, &payload, None)?;
        tx.commit()?;
        Ok(StopOutcome {
            duplicate: false,
            same_request: false,
        })
    }

    /// Takes `workflow_id`'s lock in `namespace` for the open transaction
    /// unless another transaction holds it (`false` then; nothing waits):
    /// a start beside other starts ([`crate::store::db::Connection::begin_starts`])
    /// holds it while it looks for the id's runs and writes its own. An
    /// ordinary write (the write lock held exclusively; any write on
    /// SQLite) needs none: `true`. It must not ask either, since a start
    /// batch that just committed may still be letting go of its key locks
    /// after the write lock it held shared (PostgreSQL releases a
    /// transaction's locks one by one), which would refuse it for nothing.
    pub fn lock_workflow_id(&self, namespace: &str, workflow_id: &str) -> Result<bool, Error> {
        if !self.conn.claims_side_by_side() {
            return Ok(true);
        }
        Ok(self
            .conn
            .try_lock_key(&format!("{namespace}\u{1f}{workflow_id}"))?)
    }

    /// Takes the workflow id key of task `task_id`'s run for the open
    /// transaction unless another transaction holds it, as
    /// [`Store::lock_workflow_id`] does for a start: a completion in the run
    /// writer's batch ([`crate::store::db::Connection::begin_run_writes`])
    /// holds it while it reads and writes its run. `false` also for a
    /// worker session's task (its report decides on the session, shared
    /// by runs). A claim beside others takes the same key of the run whose
    /// task it leases, with its candidate (`store::leases`). `true` when
    /// no transaction runs beside this one (an
    /// ordinary write, any write on SQLite), and for a task that is gone
    /// (the completion's own checks answer for it).
    pub fn lock_run_of_task(&self, task_id: i64) -> Result<bool, Error> {
        if !self.conn.claims_side_by_side() {
            return Ok(true);
        }
        Ok(self
            .conn
            .prepare_cached(
                "SELECT CASE WHEN d.session_id IS NULL THEN pg_try_advisory_xact_lock(\
                 hashtextextended(current_schema() || '/' || r.namespace || chr(31) || r.workflow_id, 0)) \
                 ELSE FALSE END FROM dispatch_tasks d JOIN runs r ON r.id = d.run_id WHERE d.id = ?1",
            )?
            .query_row([task_id], |r| r.get::<_, bool>(0))
            .optional()?
            .unwrap_or(true))
    }

    /// The open (running) run of `workflow_id` in `namespace`, if any.
    pub fn open_run(&self, namespace: &str, workflow_id: &str) -> Result<Option<RunId>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE namespace = ?1 AND workflow_id = ?2 \
                 AND status = 'running' ORDER BY id DESC LIMIT 1",
            )?
            .query_row(params![namespace, workflow_id], |r| r.get(0))
            .optional()?
            .map(RunId))
    }

    /// The runs of `workflow_id` in `namespace`, oldest first, at most `limit`.
    pub fn runs_of(
        &self,
        namespace: &str,
        workflow_id: &str,
        limit: usize,
    ) -> Result<Vec<RunId>, Error> {
        let ids = self
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE namespace = ?1 AND workflow_id = ?2 ORDER BY id LIMIT ?3",
            )?
            .query_map(params![namespace, workflow_id, to_i64(limit)], |r| {
                r.get(0).map(RunId)
            })?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// One page of `namespace`'s runs, newest first: runs with an id below
    /// `before` (all when `None`), matching the optional type and status and
    /// the archive filter, at most `limit`.
    pub fn list_runs(
        &self,
        namespace: &str,
        workflow_type: Option<&str>,
        status: Option<RunStatus>,
        archived: ArchivedFilter,
        before: Option<RunId>,
        limit: usize,
    ) -> Result<Vec<RunId>, Error> {
        let ids = self
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE namespace = ?1 AND id < ?2 \
                 AND (workflow_type = ?3 OR ?3 IS NULL) AND (status = ?4 OR ?4 IS NULL) \
                 AND (?6 = 'include' OR (?6 = 'only') = (archived_at_ms IS NOT NULL)) \
                 ORDER BY id DESC LIMIT ?5",
            )?
            .query_map(
                params![
                    namespace,
                    before.map_or(i64::MAX, |r| r.0),
                    workflow_type,
                    status.map(RunStatus::as_str),
                    to_i64(limit),
                    archived.as_sql()
                ],
                |r| r.get(0).map(RunId),
            )?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// The run's start arguments and, once it has one, its terminal event's
    /// payload (both as recorded; payloads stay opaque).
    pub fn run_io(&self, run: RunId) -> Result<(Value, Option<Value>), Error> {
        let first = read_event(&self.conn, run, 0)?;
        let input = first
            .and_then(|e| e.payload.get("arguments").cloned())
            .unwrap_or(Value::Null);
        let length = crate::store::rows::load_history_length(&self.conn, run)?;
        let last = read_event(&self.conn, run, length.saturating_sub(1))?;
        let terminal = last.filter(|e| closes_run(e.event_type));
        Ok((input, terminal.map(|e| e.payload)))
    }

    /// The run with its control-plane fields.
    pub fn describe(&self, run: RunId) -> Result<RunDescription, Error> {
        let stored = self.run(run)?;
        let stored_running = stored.status == RunStatus::Running;
        let (cancel, closed, pruned) = self
            .conn
            .prepare_cached(
                "SELECT cancel_requested_at_ms, closed_at_ms, details_pruned_at FROM runs \
                 WHERE id = ?1",
            )?
            .query_row([run.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(RunDescription {
            run: stored,
            cancel_requested_at_ms: cancel,
            closed_at_ms: closed,
            details_pruned_at_ms: pruned,
            failures: self.failures(run)?,
            timeouts: self.run_timeouts(run)?,
            workflow_task_failure: self.workflow_task_failure(run)?,
            workflow_task_open: stored_running && self.workflow_task_open(run)?,
        })
    }

    /// Whether `run` has a workflow task ready or leased: an indexed probe
    /// of `dispatch_by_run` per status (a `status IN (...)` list would be
    /// built into a temporary B-tree on every execution).
    pub fn workflow_task_open(&self, run: RunId) -> Result<bool, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM dispatch_tasks WHERE run_id = ?1 \
                 AND kind = 'workflow' AND status = 'ready') \
                 OR EXISTS (SELECT 1 FROM dispatch_tasks WHERE run_id = ?1 \
                 AND kind = 'workflow' AND status = 'leased')",
            )?
            .query_row([run.0], |r| r.get::<_, bool>(0))?)
    }

    /// The newest failure of `run`'s open workflow task, if it has failed.
    pub fn workflow_task_failure(&self, run: RunId) -> Result<Option<WorkflowTaskFailure>, Error> {
        // Open tasks only, found through dispatch_by_run by status (a run
        // has one open workflow task, rarely two), the newest picked here.
        // `status IN ('ready', 'leased') ... ORDER BY id DESC LIMIT 1` made
        // SQLite build the list and sort the rows in two temporary
        // B-trees, each a database of its own with a pager and a page
        // cache allocated and freed on every describe (a twelfth of
        // dwserver's CPU under the Rust SDK's result polls); one indexed
        // probe per status builds neither.
        let rows: Vec<(i64, String, i64, i64)> = self
            .conn
            .prepare_cached(
                "SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks WHERE run_id = ?1 \
                 AND kind = 'workflow' AND status = 'ready' AND last_error IS NOT NULL \
                 UNION ALL SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
                 WHERE run_id = ?1 AND kind = 'workflow' AND status = 'leased' \
                 AND last_error IS NOT NULL",
            )?
            .query_map([run.0], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<Result<_, _>>()?;
        let Some((_, failure, attempt, due)) = rows.into_iter().max_by_key(|row| row.0) else {
            return Ok(None);
        };
        Ok(Some(WorkflowTaskFailure {
            failure: serde_json::from_str(&failure)?,
            attempt: to_u64(attempt),
            next_attempt_at_ms: due,
        }))
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

    /// Refreshes a registered worker's heartbeat; `false` when it is not registered.
    pub fn touch_worker(&self, namespace: &str, worker_id: &str) -> Result<bool, Error> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE workers SET last_heartbeat_ms = ?3 WHERE namespace = ?1 AND worker_id = ?2",
            )?
            .execute(params![namespace, worker_id, now_ms()])?;
        Ok(changed == 1)
    }

    /// Removes a worker's registration and hands the workflow tasks it
    /// still holds back to their queues; `None` when it was not registered,
    /// else the number of tasks recovered.
    pub fn deregister_worker(
        &self,
        namespace: &str,
        worker_id: &str,
    ) -> Result<Option<usize>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let removed = tx
            .prepare_cached("DELETE FROM workers WHERE namespace = ?1 AND worker_id = ?2")?
            .execute(params![namespace, worker_id])?;
        if removed == 0 {
            return Ok(None);
        }
        let recovered = tx
            .prepare_cached(RELEASE_WORKER_LEASES)?
            .execute(params![namespace, worker_id])?;
        // Its sticky claims go with it: their runs' tasks go to any poller.
        self.release_sticky_worker(namespace, worker_id)?;
        // Its sessions' holder leases end: another worker may take them
        // over, or they fail (by their options).
        self.release_worker_sessions(namespace, worker_id)?;
        tx.commit()?;
        Ok(Some(recovered))
    }
}
