//! Leases: a queued task handed to one poll for a while, renewed by its
//! worker, and taken back when it expires.
//!
//! A lease claims the oldest ready task of a (namespace, task queue) for a
//! poll request, so a repeated poll finds the task it already holds; a
//! vanished worker's lease expires and its task returns to the queue. An
//! activity's lease starts or ends an attempt, which moves the activity's
//! deadline, so each lease change re-arms it ([`deadlines`](super::deadlines))
//! in the same transaction. This module sits above the task queue
//! ([`dispatch`](super::dispatch)) and the deadlines, and below the
//! attempt reports and timeouts that end a leased task.

use std::sync::LazyLock;
use std::time::Duration;

use crate::store::db::{params, OptionalExtension, ToSql};
use serde_json::Value;

use crate::store::build_id_rollouts::draining_condition;
use crate::store::connection::Store;
use crate::store::deadlines::{rearm_activity, ActivityLease};
use crate::store::dispatch::{load_task, LeasedTask, TaskKind};
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::{now_ms, to_i64};
use crate::store::sessions::{SessionOptions, MAX_NAMESPACE_SESSIONS};
use crate::store::sticky::HELD_FOR_ANOTHER;

/// Ready tasks one lease looks at: the first that is not another worker's
/// session task (or is this worker's to admit) is leased.
const SESSION_CANDIDATES: usize = 8;

/// The candidates of a lease, up to `limit`, `more` their first column
/// after the task's own three, `also` conditions added to the candidate's
/// own (each starting with ` AND `) and `lock` the clause after the `LIMIT`.
///
/// Whether a workflow task's run has another leased is asked of that run
/// (`dispatch_by_run`), and whether the run is pinned to another build of
/// the run itself (its primary key); `LIMIT 1 OFFSET 0` keeps each so. An
/// `OFFSET` keeps PostgreSQL from turning an `EXISTS` into a join or a
/// hashed `IN`, which it planned as: a hash of every leased workflow task
/// of every run, built on each claim (on a busy queue hundreds of
/// `dispatch_leases` entries, most left by tasks leased and done since the
/// last vacuum: 220 a scan after 25 s of SDK workflows), and an anti-join
/// reading every run of the store (a sequential scan of `runs`, or all of
/// the namespace's through `runs_by_namespace` once vacuum had run: 250
/// entries a claim after 25 s).
///
/// `ORDER BY d.due_at_ms, d.id` is `dispatch_ready`'s own order (on
/// PostgreSQL the index ends with `id` since migration 0055; on SQLite
/// with the rowid), so the scan stops at the first task the claim may
/// take instead of reading, checking and sorting the queue's whole backlog.
fn candidates_sql(limit: usize, lock: &str, more: &str, also: &str) -> String {
    format!(
        "SELECT d.id, d.session_id, d.run_id, {more} FROM dispatch_tasks d \
         WHERE d.kind = ?1 AND d.namespace = ?2 \
         AND d.task_queue = ?3 AND d.status = 'ready' AND d.due_at_ms <= ?4 \
         AND (d.kind != 'workflow' OR (NOT EXISTS (SELECT 1 FROM dispatch_tasks l \
           WHERE l.run_id = d.run_id AND l.kind = 'workflow' AND l.status = 'leased' \
           LIMIT 1 OFFSET 0) \
           AND NOT {HELD_FOR_ANOTHER})) \
         AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.id = d.run_id \
           AND c.build_id IS NOT NULL AND c.build_id <> ?6 LIMIT 1 OFFSET 0) \
         AND (d.session_id IS NULL OR NOT {SESSION_BUSY}){also} \
         ORDER BY d.due_at_ms, d.id LIMIT {limit}{lock}"
    )
}

/// A lease's candidates when it is the only claim (SQLite, or PostgreSQL
/// under the write lock): up to [`SESSION_CANDIDATES`]. Formatted once,
/// as the other statements of a lease are: a `format!` of this text on
/// every lease cost some 2,500 instructions.
pub(crate) static CANDIDATES: LazyLock<String> =
    LazyLock::new(|| candidates_sql(SESSION_CANDIDATES, "", "FALSE", ""));

/// A lease's one candidate beside other claims (PostgreSQL): locked,
/// skipping those other claims hold, with whether another task of the
/// queue is ready (`Store::lease_task_for` says why), and none while the
/// poller's cohort (`?6`) drains on the queue (asked inside the query, as
/// [`Store::cohort_draining`] asks it, so a claim on PostgreSQL does not
/// spend a round trip of its own on it).
static CANDIDATES_BESIDE_CLAIMS: LazyLock<String> = LazyLock::new(|| {
    candidates_sql(
        1,
        " FOR UPDATE OF d SKIP LOCKED",
        "EXISTS (SELECT 1 FROM (SELECT 1 FROM dispatch_tasks o WHERE o.kind = ?1 \
         AND o.namespace = ?2 AND o.task_queue = ?3 AND o.status = 'ready' AND o.due_at_ms <= ?4 \
         AND o.id <> d.id ORDER BY o.due_at_ms LIMIT 1) other_ready)",
        &format!(" AND NOT {}", draining_condition("?2", "?3", "?6")),
    )
});

/// [`CANDIDATES_BESIDE_CLAIMS`] on a store with the run writer
/// ([`crate::store::StoreConfig::run_writer`]): with whether the claim took
/// its candidate's run key.
static CANDIDATES_KEYED: LazyLock<String> = LazyLock::new(|| {
    let locked = &*CANDIDATES_BESIDE_CLAIMS;
    // The task's run's key (as `Store::lock_run_of_task` takes it), tried once the task is
    // locked (the materialized candidate), in the same round trip: a key
    // tried in the scan itself could be taken for tasks the scan skips.
    format!(
        "WITH c (id, session_id, run_id, more_ready) AS MATERIALIZED ({locked}) \
         SELECT c.id, c.session_id, c.run_id, c.more_ready, pg_try_advisory_xact_lock(\
         hashtextextended(current_schema() || '/' || r.namespace || chr(31) || r.workflow_id, 0)) \
         FROM c JOIN runs r ON r.id = c.run_id"
    )
});

/// Whether a task of kind `?1` in (namespace `?2`, queue `?3`) is ready at
/// `?4`: one `dispatch_ready` probe, for its first entry in the index's
/// order. The order is what keeps PostgreSQL's generic plan on the index:
/// a bare `EXISTS` (which drops an `ORDER BY` and a `LIMIT` of its own)
/// was planned as a walk of the whole table once one queue held most of
/// it (`pg_schema::another_queues_backlog_leaves_a_readiness_check_on_the_ready_index`).
pub const READY_IN_QUEUE: &str = "SELECT EXISTS (SELECT 1 FROM (SELECT 1 FROM dispatch_tasks \
     WHERE kind = ?1 AND namespace = ?2 AND task_queue = ?3 AND status = 'ready' \
     AND due_at_ms <= ?4 ORDER BY due_at_ms LIMIT 1) first_ready)";

/// Whether a task of `kind` in (`namespace`, `task_queue`) is ready at
/// `now` ([`READY_IN_QUEUE`]).
fn ready_in_queue(
    conn: &crate::store::db::Connection,
    kind: TaskKind,
    namespace: &str,
    task_queue: &str,
    now: i64,
) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached(READY_IN_QUEUE)?
        .query_row(params![kind.as_str(), namespace, task_queue, now], |r| {
            r.get::<_, bool>(0)
        })?)
}

/// The statement a claim sends for its candidates when it is the only
/// claim (SQLite's), for the engine's tests of its plan.
pub fn candidates_alone() -> &'static str {
    &CANDIDATES
}

/// The statement a claim beside other claims sends for its candidate
/// (`?1` kind, `?2` namespace, `?3` task queue, `?4` now, `?5` the polling
/// worker, `?6` its cohort), for the engine's tests of its PostgreSQL plan.
pub fn candidates_beside_claims() -> &'static str {
    &CANDIDATES_BESIDE_CLAIMS
}

/// The task of kind `?1` in (namespace `?2`, queue `?3`) still leased to
/// poll request `?4`: found by that id (`dispatch_poll_requests`, migration
/// 0054; named for SQLite, whose planner prefers the index of more
/// equalities), not by walking the queue's leased tasks.
pub const LEASED_BY_POLL_REQUEST: &str = "SELECT id FROM dispatch_tasks \
     INDEXED BY dispatch_poll_requests WHERE kind = ?1 \
     AND namespace = ?2 AND task_queue = ?3 AND status = 'leased' AND poll_request_id = ?4 LIMIT 1";

/// [`Store::expired_leases`]' walk, formatted once (every poll runs it).
pub(crate) static EXPIRED_LEASES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id FROM dispatch_tasks WHERE kind = ?1 AND status = 'leased' \
         AND lease_expires_at_ms < ?2 AND NOT {ATTEMPT_TIMED_OUT} \
         ORDER BY lease_expires_at_ms LIMIT ?3"
    )
});

/// The SQL condition (on a `dispatch_tasks d` row with a session, `?4` the
/// time, `?5` the polling worker) under which its session cannot take it
/// now: another live worker holds the session, or the session already runs
/// as many activities as it allows.
const SESSION_BUSY: &str = "EXISTS (SELECT 1 FROM worker_sessions s \
     WHERE s.namespace = d.namespace AND s.session_id = d.session_id AND s.status = 'active' \
     AND s.ttl_expires_at_ms > ?4 AND s.lease_expires_at_ms > ?4 AND (s.holder != ?5 \
     OR (SELECT COUNT(*) FROM dispatch_tasks x WHERE x.namespace = d.namespace \
       AND x.session_id = d.session_id AND x.status = 'leased') >= s.max_concurrent_activities))";

/// A ready task a claim may take (its candidate query's row).
struct Candidate {
    id: i64,
    session: Option<String>,
    run: i64,
    /// Beside other claims: whether another task of the queue is ready.
    more_ready: bool,
    /// With the run writer, beside other claims: whether the claim took
    /// its run's key (else always).
    keyed: bool,
}

/// What a lease decides for a session's activity task.
enum Admission {
    /// The worker holds the session (now): it runs the task.
    Admitted(crate::store::dispatch::SessionLease),
    /// The session can never run it: the task is leased to fail it.
    Never(&'static str),
    /// Another worker should take it (this one lacks requirements or room).
    NotThisWorker,
}
use crate::store::tx::WriteTx;

/// An activity lease whose attempt timed out by the time the lease ended:
/// its timeout ([`crate::store::timeouts`]) ends the attempt, counted
/// against the retry policy, instead of lease recovery re-queueing it.
const ATTEMPT_TIMED_OUT: &str = "(kind = 'activity' AND timeout_at_ms IS NOT NULL \
     AND timeout_at_ms <= lease_expires_at_ms)";

impl Store {
    /// Runs `claim` (a poll's [`Store::lease_task`] and what goes with
    /// the lease) in one claim transaction
    /// ([`crate::store::db::Connection::begin_claim`]): on PostgreSQL
    /// beside other claims, on SQLite as any write. Inside an open
    /// transaction it is part of that one. An error rolls the claim back;
    /// [`Error::ClaimNeedsWriteLock`] says to rerun it as an ordinary
    /// write.
    pub fn claim<R>(&self, claim: impl FnOnce(&Store) -> Result<R, Error>) -> Result<R, Error> {
        if !self.conn.is_autocommit() {
            return claim(self);
        }
        self.conn.begin_claim()?;
        match claim(self) {
            Ok(value) => {
                self.conn.commit()?;
                Ok(value)
            }
            Err(e) => {
                // A failed rollback means the database already ended the
                // transaction; there is nothing left to undo.
                let _ = self.conn.rollback();
                Err(e)
            }
        }
    }

    /// Leases the oldest ready task of `kind` on (namespace, task queue) to
    /// `poll_request_id`, for `lease`.
    pub fn lease_task(
        &self,
        kind: TaskKind,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        poll_request_id: &str,
        lease: Duration,
    ) -> Result<Option<LeasedTask>, Error> {
        self.lease_task_for(
            kind,
            namespace,
            task_queue,
            owner,
            poll_request_id,
            lease,
            None,
        )
    }

    /// As [`Store::lease_task`], for a poller of build-id cohort `cohort`
    /// (`None`: unversioned): a workflow or activity task of a run pinned
    /// to another cohort (`runs.build_id`, `''` for the unversioned one) is
    /// not its to take, as on the reference server, where an activity task
    /// carries its run's compatibility; a run no cohort holds yet is
    /// anyone's.
    #[allow(clippy::too_many_arguments)]
    pub fn lease_task_for(
        &self,
        kind: TaskKind,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        poll_request_id: &str,
        lease: Duration,
        cohort: Option<&str>,
    ) -> Result<Option<LeasedTask>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let now = now_ms();
        // One workflow task per run at a time: two workers replaying
        // different snapshots of one run would issue its commands twice. A
        // workflow task another live worker's sticky claim holds is skipped
        // until its hold ends. An activity task of a worker session another
        // live worker holds, or that already runs as many activities as the
        // session allows, is skipped; the others are admitted one by one
        // (the worker must be able to create or take over the session).
        // A claim beside others (PostgreSQL) locks the task it takes and
        // skips those other claims hold; it looks at one task only, and a
        // session's task (admitted on shared state) sends it back to run
        // as an ordinary write.
        let side_by_side = tx.claims_side_by_side();
        // A draining cohort claims no new task (what it holds finishes);
        // beside other claims the candidate query asks it.
        if !side_by_side && self.cohort_draining(namespace, task_queue, cohort)? {
            return Ok(None);
        }
        // Beside other claims, where one task is looked at, the candidate
        // row also says whether another task of the queue is ready (the
        // claimed one left out), in the same round trip: a claim session
        // asked it in a statement of its own after the UPDATE (the task
        // it took is leased by then; `o.id <> d.id` leaves it out here).
        let keyed = side_by_side && self.config.run_writer;
        let sql: &str = if keyed {
            &CANDIDATES_KEYED
        } else if side_by_side {
            &CANDIDATES_BESIDE_CLAIMS
        } else {
            &CANDIDATES
        };
        let candidates: Vec<Candidate> = tx
            .prepare_cached(sql)?
            .query_map(
                params![
                    kind.as_str(),
                    namespace,
                    task_queue,
                    now,
                    owner,
                    cohort.unwrap_or("")
                ],
                |r| {
                    Ok(Candidate {
                        id: r.get(0)?,
                        session: r.get(1)?,
                        run: r.get(2)?,
                        more_ready: r.get(3)?,
                        keyed: !keyed || r.get::<_, bool>(4)?,
                    })
                },
            )?
            .collect::<Result<_, _>>()?;
        if side_by_side && candidates.iter().any(|c| c.session.is_some()) {
            return Err(Error::ClaimNeedsWriteLock);
        }
        let several = candidates.len() > 1;
        let mut chosen = None;
        for candidate in candidates {
            let Some(session_id) = &candidate.session else {
                chosen = Some((candidate, None, None));
                break;
            };
            let id = candidate.id;
            match self.admit_session_task(id, namespace, task_queue, owner, session_id)? {
                Admission::Admitted(lease) => {
                    chosen = Some((candidate, Some(lease), None));
                    break;
                }
                Admission::Never(reason) => {
                    chosen = Some((candidate, None, Some(reason)));
                    break;
                }
                Admission::NotThisWorker => continue,
            }
        }
        let Some((candidate, session_lease, session_refused)) = chosen else {
            return Ok(None);
        };
        // Beside others on a store with the run writer the claim holds the
        // key of its task's run (taken with the candidate), so it never runs
        // beside that run's completion in the run writer's batch
        // (`Connection::begin_run_writes`): such a completion decides on the
        // run's ready workflow task, which this claim may be leasing.
        if !candidate.keyed {
            return Err(Error::ClaimNeedsWriteLock);
        }
        let id = candidate.id;
        // An activity runs for its start-to-close timeout when it has one,
        // and its deadline is armed by the lease's own write.
        let activity = match kind {
            TaskKind::Activity => activity_lease(&tx, id, now)?,
            TaskKind::Workflow => None,
        };
        let lease_ms = activity
            .and_then(|a| a.lease_ms)
            .unwrap_or(to_i64(lease.as_millis()));
        // Signals held for an earlier lease are history before this one
        // starts (a safety net: ending that lease released them already).
        if kind == TaskKind::Workflow {
            let run = crate::store::model::RunId(candidate.run);
            crate::store::admission::release_held_signals(&tx, run)?;
        }
        // The lease (`LEASE_SET`); an activity's writes its attempt's
        // deadline too.
        let expires = now.saturating_add(lease_ms);
        let deadline = activity.and_then(|a| a.deadline);
        let (deadline_at, deadline_kind) = (deadline.map(|(at, _)| at), deadline.map(|(_, k)| k));
        let mut values: Vec<&dyn ToSql> = vec![&id, &owner, &expires, &poll_request_id, &now];
        let sql = if activity.is_some() {
            values.extend([&deadline_at as &dyn ToSql, &deadline_kind]);
            &*LEASE_ARMED
        } else {
            &*LEASE
        };
        // No row count is read: the candidate is this transaction's (locked
        // beside other claims, the only writer otherwise), so the lease goes
        // ahead of the task's read below in its round trip.
        tx.execute_queued(sql, values.as_slice())?;
        // Whether another task of the queue is ready now (for this poller
        // or another): the poll that took this one then wakes the others.
        let more_ready = several
            || candidate.more_ready
            || (!side_by_side && ready_in_queue(&tx, kind, namespace, task_queue, now)?);
        let mut task = load_task(&tx, id)?;
        if let Some(task) = task.as_mut() {
            task.worker_session = session_lease;
            task.session_settled = true;
            task.session_refused = session_refused;
            task.more_ready = more_ready;
        }
        tx.commit()?;
        Ok(task)
    }

    /// Whether a task of `kind` in (namespace, queue) is ready now, for
    /// someone: a waiting poll's pass asks it before it claims (an idle
    /// recheck then runs no claim transaction), and a poll whose single
    /// wake-up found nothing it could take before it wakes every other
    /// poll (most often another poll has just taken the task).
    pub fn queue_has_ready(
        &self,
        kind: TaskKind,
        namespace: &str,
        task_queue: &str,
    ) -> Result<bool, Error> {
        ready_in_queue(&self.conn, kind, namespace, task_queue, now_ms())
    }

    /// Whether worker `owner` may run activity task `id` of session
    /// `session_id`: it holds the session, or creates or takes it over now.
    fn admit_session_task(
        &self,
        id: i64,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        session_id: &str,
    ) -> Result<Admission, Error> {
        let options: Option<String> = self
            .conn
            .prepare_cached(
                "SELECT a.options FROM dispatch_tasks d JOIN activities a ON a.id = d.item_id \
                 WHERE d.id = ?1",
            )?
            .query_row([id], |r| r.get(0))
            .optional()?
            .flatten();
        let options: Value = match options {
            Some(text) => serde_json::from_str(&text)?,
            None => Value::Null,
        };
        let Ok(options) = SessionOptions::from_wire(&options["worker_session"], "worker_session")
        else {
            return Ok(Admission::Never("worker_session_invalid"));
        };
        debug_assert_eq!(options.session_id, session_id);
        let create = options.create_if_missing;
        Ok(
            match self.acquire_worker_session(
                namespace,
                owner,
                task_queue,
                &options,
                create,
                MAX_NAMESPACE_SESSIONS,
            )? {
                Ok((session, _)) => Admission::Admitted(session.lease()),
                Err(refused) if refused.is_final() => Admission::Never(refused.reason()),
                Err(_) => Admission::NotThisWorker,
            },
        )
    }

    /// The task still leased to `poll_request_id`, if any: the durable half
    /// of poll replay, used when the cached replay result has expired.
    pub fn leased_by_poll_request(
        &self,
        kind: TaskKind,
        namespace: &str,
        task_queue: &str,
        poll_request_id: &str,
    ) -> Result<Option<LeasedTask>, Error> {
        let id: Option<i64> = self
            .conn
            .prepare_cached(LEASED_BY_POLL_REQUEST)?
            .query_row(
                params![kind.as_str(), namespace, task_queue, poll_request_id],
                |r| r.get(0),
            )
            .optional()?;
        match id {
            Some(id) => load_task(&self.conn, id),
            None => Ok(None),
        }
    }

    /// Expired workflow-task leases, oldest first, at most `limit`.
    pub fn expired_workflow_leases(&self, limit: usize) -> Result<Vec<i64>, Error> {
        self.expired_leases(TaskKind::Workflow, limit)
    }

    /// Expired leases of `kind`, oldest first, at most `limit`: an index
    /// walk (`dispatch_leases`) that stops after `limit` rows however large
    /// the backlog is.
    pub fn expired_leases(&self, kind: TaskKind, limit: usize) -> Result<Vec<i64>, Error> {
        let ids = self
            .conn
            .prepare_cached(&EXPIRED_LEASES)?
            .query_map(params![kind.as_str(), now_ms(), to_i64(limit)], |r| {
                r.get(0)
            })?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Returns one expired lease to the queue; false if it was completed
    /// or extended meanwhile. A workflow task whose run already has another
    /// ready workflow task is retired instead: that task carries the newer
    /// history, and a run never needs two.
    pub fn recover_expired_lease(&self, task_id: i64) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let changed = tx
            .prepare_cached(&format!(
                "UPDATE dispatch_tasks SET status = CASE WHEN kind = 'workflow' AND EXISTS \
                 (SELECT 1 FROM dispatch_tasks o WHERE o.run_id = dispatch_tasks.run_id \
                 AND o.kind = 'workflow' AND o.status = 'ready') THEN 'done' ELSE 'ready' END, \
                 lease_owner = NULL, lease_expires_at_ms = NULL, poll_request_id = NULL, \
                 due_at_ms = CASE WHEN kind = 'activity' THEN ?2 ELSE due_at_ms END \
                 WHERE id = ?1 AND status = 'leased' AND lease_expires_at_ms < ?2 \
                 AND NOT {ATTEMPT_TIMED_OUT}"
            ))?
            .execute(params![task_id, now_ms()])?;
        if changed == 1 {
            // An attempt a cancellation delivery waits for is over: its
            // activity closes as cancelled instead of running again.
            if crate::store::activity_cancellation::lapsed_while_waiting(&tx, task_id)? {
                tx.commit()?;
                return Ok(true);
            }
            rearm_activity(&tx, task_id)?;
            // A workflow task that timed out gives its held signals to the next.
            let (kind, run): (String, i64) = tx
                .prepare_cached("SELECT kind, run_id FROM dispatch_tasks WHERE id = ?1")?
                .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            if kind == "workflow" {
                crate::store::admission::release_held_signals(
                    &tx,
                    crate::store::model::RunId(run),
                )?;
            }
        }
        tx.commit()?;
        Ok(changed == 1)
    }

    /// A worker's heartbeat on a leased task: its lease now ends `lease`
    /// from now. Returns the new expiry; a task that is no longer leased
    /// (completed, or recovered after its lease expired) is refused.
    pub fn extend_lease(&self, task_id: i64, lease: Duration) -> Result<i64, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let kind: Option<String> = tx
            .prepare_cached("SELECT kind FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| r.get(0))
            .optional()?;
        let kind = match kind.as_deref() {
            Some("activity") => TaskKind::Activity,
            Some("workflow") => TaskKind::Workflow,
            _ => {
                return Err(Error::ItemNotFound {
                    item: "task",
                    id: task_id,
                })
            }
        };
        self.leased(task_id, kind)?;
        let expires = now_ms().saturating_add(to_i64(lease.as_millis()));
        tx.prepare_cached("UPDATE dispatch_tasks SET lease_expires_at_ms = ?2 WHERE id = ?1")?
            .execute(params![task_id, expires])?;
        tx.commit()?;
        Ok(expires)
    }

    /// The run of a task leased as `kind`; refuses other states.
    fn leased(&self, task_id: i64, kind: TaskKind) -> Result<RunId, Error> {
        let row: Option<(String, String, i64)> = self
            .conn
            .prepare_cached("SELECT kind, status, run_id FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        match row {
            Some((k, status, run)) if k == kind.as_str() && status == "leased" => Ok(RunId(run)),
            Some((k, status, _)) if k == kind.as_str() => Err(Error::AlreadyClosed {
                item: "task",
                id: task_id,
                status,
            }),
            _ => Err(Error::ItemNotFound {
                item: "task",
                id: task_id,
            }),
        }
    }
}

/// A lease's write of its task: the worker, the lease's end, the poll, a
/// new attempt, and the newest signal its delivery shows (completing the
/// task processes exactly those, never one that arrived after the lease).
const LEASE_SET: &str = "UPDATE dispatch_tasks SET status = 'leased', lease_owner = ?2, \
     lease_expires_at_ms = ?3, poll_request_id = ?4, attempt = attempt + 1, \
     signal_watermark = (SELECT MAX(s.id) FROM signals s WHERE s.run_id = dispatch_tasks.run_id), \
     attempt_started_at_ms = ?5, last_heartbeat_at_ms = NULL";
/// [`LEASE_SET`] of a workflow task (whose row keeps no deadline).
static LEASE: LazyLock<String> = LazyLock::new(|| format!("{LEASE_SET} WHERE id = ?1"));
/// [`LEASE_SET`] of an activity task, its attempt's deadline armed with it.
static LEASE_ARMED: LazyLock<String> =
    LazyLock::new(|| format!("{LEASE_SET}, timeout_at_ms = ?6, timeout_kind = ?7 WHERE id = ?1"));

/// What leasing activity task `task_id` at `now` needs of the activity
/// (`deadlines::activity_lease`): the lease's length if its options set
/// one, and the deadline to arm. `None` when the task has no activity row:
/// the lease then leaves its deadline as it was.
fn activity_lease(
    conn: &crate::store::db::Connection,
    task_id: i64,
    now: i64,
) -> Result<Option<ActivityLease>, Error> {
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
    Ok(Some(crate::store::deadlines::activity_lease(
        options.as_deref(),
        scheduled,
        now,
    )?))
}
