//! Updates waiting for a worker's validator (synchronous pre-accept
//! validation).
//!
//! When a registered worker of a run's task queue declares a validator for
//! the update's name, the update is not accepted at once: it is stored here
//! as `validating` (no `updates` row, no history event) and handed to a
//! worker that polls for `update_validation` tasks. One row is both the
//! update and its validation task: leased to one worker at a time (the
//! attempt and the lease owner fence the verdict), handed out again once
//! its lease lapses, then `approved` (the `updates` row, its
//! `UpdateAccepted` event and a workflow task are written in the same
//! transaction) or `rejected` (the worker's failure, nothing in history).
//! The caller waiting for the verdict deletes the row when it answers; a
//! row whose caller went away expires at `expires_at_ms` and is deleted by
//! the run's next validated admission, and is never leased again.
//!
//! A run holds at most `pending_update_count` validating updates: they are
//! counted with its accepted, unresolved updates at admission, under the
//! write lock, and the payload budget counts their arguments likewise.

use dwpolicy::RunRef;
use serde_json::Value;

use crate::store::admission::{record_validated_update, Rejection, UpdateRequest};
use crate::store::connection::Store;
use crate::store::db::{params, OptionalExtension};
use crate::store::dispatch::enqueue_workflow;
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::{load_head, now_ms, to_i64, to_u64, Pending};
use crate::store::tx::WriteTx;

/// An update to validate before it is accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidationRequest {
    /// The update (name, arguments, request id).
    pub update: UpdateRequest,
    /// When the caller stops waiting (Unix ms): the row is dead after it.
    pub expires_at_ms: i64,
}

/// What admitting an update for validation did.
#[derive(Debug, Clone, PartialEq)]
pub enum ValidationAdmission {
    /// An update with this request id was already accepted: its id.
    AlreadyAccepted {
        /// The accepted update.
        update: i64,
    },
    /// Waiting for a worker's verdict.
    Validating {
        /// The validation row.
        validation: i64,
        /// `true` when the request id joined a validation already running.
        duplicate: bool,
    },
    /// Refused at `pending_update_count` (or nothing else: the payload
    /// budget is an error); nothing was written.
    Rejected(Rejection),
}

/// Where a validation stands.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidationState {
    /// `validating`, `approved` or `rejected`.
    pub status: String,
    /// Leases taken so far (0: never handed to a worker).
    pub attempt: u64,
    /// Approved: the accepted update's id.
    pub update_id: Option<i64>,
    /// Rejected: the worker's failure document.
    pub failure: Option<Value>,
}

/// A validation task leased to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct LeasedValidation {
    /// The validation row (the task id on the wire).
    pub id: i64,
    /// The run.
    pub run_id: i64,
    /// Its workflow id.
    pub workflow_id: String,
    /// Its workflow type.
    pub workflow_type: String,
    /// The namespace.
    pub namespace: String,
    /// The task queue.
    pub task_queue: String,
    /// The update's name.
    pub update_name: String,
    /// Its arguments.
    pub arguments: Value,
    /// Its request id.
    pub request_id: Option<String>,
    /// This lease's attempt (1 on the first delivery).
    pub attempt: u64,
    /// The worker holding it.
    pub lease_owner: String,
    /// When the lease lapses.
    pub lease_expires_at_ms: i64,
}

/// The fence on a verdict: who may approve or reject a validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictRefusal {
    /// No such validation (never issued, answered, or its caller left).
    NotFound,
    /// It is no longer validating (approved or rejected already).
    AlreadyDecided,
    /// Not leased to anyone (its caller may still be waiting).
    NotLeased,
    /// Leased to another worker, or a later attempt.
    Stale,
}

/// What an approval did.
#[derive(Debug, Clone, PartialEq)]
pub struct Approved {
    /// The run.
    pub run: RunId,
    /// The accepted update's id.
    pub update: i64,
    /// Whether a workflow task was queued for it (false: one was already).
    pub queued: bool,
}

/// The registrations of a queue that declare validators (a walk of the
/// partial index `workers_validating`, which holds only those; named,
/// since SQLite would rather walk the namespace's primary-key prefix).
const DECLARED_VALIDATORS: &str = "SELECT update_validators FROM workers \
     INDEXED BY workers_validating \
     WHERE namespace = ?1 AND task_queue = ?2 AND update_validators IS NOT NULL";

/// The oldest validation of a queue waiting for a worker (a walk of the
/// partial index `update_validations_by_queue`, which holds only
/// validating rows).
const NEXT_VALIDATION: &str = "SELECT v.id FROM update_validations v \
     JOIN runs r ON r.id = v.run_id \
     WHERE v.namespace = ?1 AND v.task_queue = ?2 AND v.status = 'validating' \
     AND v.expires_at_ms > ?3 \
     AND (v.lease_expires_at_ms IS NULL OR v.lease_expires_at_ms <= ?3) \
     AND r.status = 'running' ORDER BY v.id LIMIT 1";

const LEASE_COLUMNS: &str = "v.id, v.run_id, r.workflow_id, r.workflow_type, v.namespace, \
     v.task_queue, v.name, v.payload, v.request_id, v.attempt, v.lease_owner, \
     v.lease_expires_at_ms";

fn leased_row(row: &crate::store::db::Row<'_>) -> Result<LeasedValidation, Error> {
    let payload: String = row.get(7)?;
    Ok(LeasedValidation {
        id: row.get(0)?,
        run_id: row.get(1)?,
        workflow_id: row.get(2)?,
        workflow_type: row.get(3)?,
        namespace: row.get(4)?,
        task_queue: row.get(5)?,
        update_name: row.get(6)?,
        arguments: serde_json::from_str(&payload)?,
        request_id: row.get(8)?,
        attempt: to_u64(row.get(9)?),
        lease_owner: row.get::<_, Option<String>>(10)?.unwrap_or_default(),
        lease_expires_at_ms: row.get::<_, Option<i64>>(11)?.unwrap_or(0),
    })
}

impl Store {
    /// Admits an update for validation unless `pending_update_count` (its
    /// accepted and validating updates together) is reached: a request id
    /// already accepted answers with that update, one still validating
    /// joins that validation. Deletes the run's dead validations (their
    /// callers gone) first.
    pub fn submit_validated_update(
        &self,
        run: RunId,
        request: ValidationRequest,
    ) -> Result<ValidationAdmission, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        head.ensure_writable()?;
        let now = now_ms();
        tx.prepare_cached(
            "DELETE FROM update_validations WHERE run_id = ?1 AND expires_at_ms <= ?2",
        )?
        .execute(params![run.0, now])?;
        let update = &request.update;
        if let Some(request_id) = &update.request_id {
            let accepted: Option<i64> = tx
                .prepare_cached("SELECT id FROM updates WHERE run_id = ?1 AND request_id = ?2")?
                .query_row(params![run.0, request_id], |r| r.get(0))
                .optional()?;
            if let Some(update) = accepted {
                return Ok(ValidationAdmission::AlreadyAccepted { update });
            }
            let joined: Option<(i64, String, Option<i64>)> = tx
                .prepare_cached(
                    "SELECT id, status, update_id FROM update_validations \
                     WHERE run_id = ?1 AND request_id = ?2 ORDER BY id DESC LIMIT 1",
                )?
                .query_row(params![run.0, request_id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            if let Some((validation, status, _)) = joined {
                if status != "rejected" {
                    return Ok(ValidationAdmission::Validating {
                        validation,
                        duplicate: true,
                    });
                }
                // A rejected update is not retained: the same request id
                // asks the validator again.
            }
        }
        let (validating, validating_bytes): (i64, i64) = tx
            .prepare_cached(
                "SELECT COUNT(*), CAST(COALESCE(SUM(payload_bytes), 0) AS BIGINT) \
                 FROM update_validations WHERE run_id = ?1 AND status = 'validating'",
            )?
            .query_row([run.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let run_label = head.id.to_string();
        let run_ref = RunRef {
            workflow_run_id: &run_label,
            workflow_type: &head.workflow_type,
        };
        let current = Pending::Update.get(&head.pending) + to_u64(validating);
        if let Err(exceeded) =
            self.config
                .limits
                .check_and_warn(Pending::Update.limit_kind(), current, &run_ref)
        {
            return Ok(ValidationAdmission::Rejected(Rejection::from(exceeded)));
        }
        let payload_text = serde_json::to_string(&update.payload)?;
        let budget = self.config.max_pending_payload_bytes;
        if budget > 0 {
            let pending: i64 = tx
                .prepare_cached("SELECT pending_payload_bytes FROM runs WHERE id = ?1")?
                .query_row([run.0], |r| r.get(0))?;
            let pending = to_u64(pending).saturating_add(to_u64(validating_bytes));
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
        let (namespace, task_queue): (String, String) = tx
            .prepare_cached("SELECT namespace, task_queue FROM runs WHERE id = ?1")?
            .query_row([run.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let validation: i64 = tx
            .prepare_cached(
                "INSERT INTO update_validations (run_id, namespace, task_queue, name, payload, \
                 payload_bytes, request_id, status, created_at_ms, expires_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'validating', ?8, ?9) RETURNING id",
            )?
            .query_row(
                params![
                    run.0,
                    namespace,
                    task_queue,
                    update.name,
                    payload_text,
                    to_i64(payload_text.len()),
                    update.request_id,
                    now,
                    request.expires_at_ms
                ],
                |r| r.get(0),
            )?;
        tx.commit()?;
        Ok(ValidationAdmission::Validating {
            validation,
            duplicate: false,
        })
    }

    /// Where validation `id` stands; `None` once deleted.
    pub fn validation_state(&self, id: i64) -> Result<Option<ValidationState>, Error> {
        let row: Option<(String, i64, Option<i64>, Option<String>)> = self
            .conn
            .prepare_cached(
                "SELECT status, attempt, update_id, failure FROM update_validations WHERE id = ?1",
            )?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        row.map(|(status, attempt, update_id, failure)| {
            Ok(ValidationState {
                status,
                attempt: to_u64(attempt),
                update_id,
                failure: failure.map(|f| serde_json::from_str(&f)).transpose()?,
            })
        })
        .transpose()
    }

    /// Ends a validation whose caller answers: deletes its row, and
    /// returns the state it found. With `only_validating`, deletes it only
    /// while no verdict came (the caller gave up); a verdict stays for the
    /// caller to read.
    pub fn end_validation(
        &self,
        id: i64,
        only_validating: bool,
    ) -> Result<Option<ValidationState>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let found = self.validation_state(id)?;
        let delete = match &found {
            Some(state) => !only_validating || state.status == "validating",
            None => false,
        };
        if delete {
            tx.prepare_cached("DELETE FROM update_validations WHERE id = ?1")?
                .execute([id])?;
        }
        tx.commit()?;
        Ok(found)
    }

    /// Whether (namespace, task queue) has a validation waiting for a
    /// worker (a read: polls with nothing to validate take no write lock).
    pub fn validation_waiting(&self, namespace: &str, task_queue: &str) -> Result<bool, Error> {
        Ok(self
            .next_validation(namespace, task_queue, now_ms())?
            .is_some())
    }

    /// The id of `run`'s accepted update with `request_id`, if any.
    pub fn accepted_update_by_request(
        &self,
        run: RunId,
        request_id: &str,
    ) -> Result<Option<i64>, Error> {
        Ok(self
            .conn
            .prepare_cached("SELECT id FROM updates WHERE run_id = ?1 AND request_id = ?2")?
            .query_row(params![run.0, request_id], |r| r.get(0))
            .optional()?)
    }

    /// Leases the oldest validation of (namespace, task queue) that waits
    /// for a worker (never leased, or its lease lapsed) and whose caller
    /// still waits, to `owner` for `lease_ms`; `poll_request_id` binds it
    /// to the poll that took it (a repeat of that poll gets it again).
    pub fn lease_validation(
        &self,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        poll_request_id: &str,
        lease_ms: i64,
    ) -> Result<Option<LeasedValidation>, Error> {
        let now = now_ms();
        let tx = WriteTx::begin(&self.conn)?;
        let Some(id) = self.next_validation(namespace, task_queue, now)? else {
            return Ok(None);
        };
        tx.prepare_cached(
            "UPDATE update_validations SET attempt = attempt + 1, lease_owner = ?2, \
             lease_expires_at_ms = ?3, poll_request_id = ?4 WHERE id = ?1",
        )?
        .execute(params![
            id,
            owner,
            now.saturating_add(lease_ms),
            poll_request_id
        ])?;
        let leased = self.leased_validation(id)?;
        tx.commit()?;
        Ok(leased)
    }

    fn next_validation(
        &self,
        namespace: &str,
        task_queue: &str,
        now: i64,
    ) -> Result<Option<i64>, Error> {
        Ok(self
            .conn
            .prepare_cached(NEXT_VALIDATION)?
            .query_row(params![namespace, task_queue, now], |r| r.get(0))
            .optional()?)
    }

    fn leased_validation(&self, id: i64) -> Result<Option<LeasedValidation>, Error> {
        let sql = format!(
            "SELECT {LEASE_COLUMNS} FROM update_validations v JOIN runs r ON r.id = v.run_id \
             WHERE v.id = ?1"
        );
        let mut statement = self.conn.prepare_cached(&sql)?;
        let mut rows = statement.query([id])?;
        match rows.next()? {
            Some(row) => Ok(Some(leased_row(&row)?)),
            None => Ok(None),
        }
    }

    /// The validation still leased (lease active, still validating) to the
    /// poll `poll_request_id` of (namespace, task queue): a repeat of that
    /// poll answers with it.
    pub fn validation_leased_to_poll(
        &self,
        namespace: &str,
        task_queue: &str,
        poll_request_id: &str,
    ) -> Result<Option<LeasedValidation>, Error> {
        if poll_request_id.is_empty() {
            return Ok(None);
        }
        let id: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT id FROM update_validations WHERE namespace = ?1 AND task_queue = ?2 \
                 AND status = 'validating' AND poll_request_id = ?3 AND lease_expires_at_ms > ?4 \
                 ORDER BY id LIMIT 1",
            )?
            .query_row(
                params![namespace, task_queue, poll_request_id, now_ms()],
                |r| r.get(0),
            )
            .optional()?;
        match id {
            Some(id) => self.leased_validation(id),
            None => Ok(None),
        }
    }

    /// The fence on a verdict: the row must be validating and leased to
    /// `owner` at `attempt` (a lapsed lease nobody took again still is).
    fn fence_verdict(
        &self,
        id: i64,
        owner: &str,
        attempt: u64,
    ) -> Result<Result<(RunId, LeasedValidation), VerdictRefusal>, Error> {
        let row: Option<(String, i64, Option<String>)> = self
            .conn
            .prepare_cached(
                "SELECT status, attempt, lease_owner FROM update_validations WHERE id = ?1",
            )?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let Some((status, held_attempt, lease_owner)) = row else {
            return Ok(Err(VerdictRefusal::NotFound));
        };
        if status != "validating" {
            return Ok(Err(VerdictRefusal::AlreadyDecided));
        }
        let Some(lease_owner) = lease_owner else {
            return Ok(Err(VerdictRefusal::NotLeased));
        };
        if lease_owner != owner || to_u64(held_attempt) != attempt {
            return Ok(Err(VerdictRefusal::Stale));
        }
        match self.leased_validation(id)? {
            Some(leased) => Ok(Ok((RunId(leased.run_id), leased))),
            None => Ok(Err(VerdictRefusal::NotFound)),
        }
    }

    /// A worker's approval: the update is accepted (its `updates` row, its
    /// `UpdateAccepted` event, a workflow task) and the validation records
    /// it, in one transaction. A closed run refuses it
    /// (`Error::RunNotActive`) and the update is never accepted.
    pub fn approve_validation(
        &self,
        id: i64,
        owner: &str,
        attempt: u64,
    ) -> Result<Result<Approved, VerdictRefusal>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let (run, leased) = match self.fence_verdict(id, owner, attempt)? {
            Ok(found) => found,
            Err(refusal) => return Ok(Err(refusal)),
        };
        load_head(&tx, run)?.ensure_writable()?;
        let update = record_validated_update(
            &tx,
            run,
            &UpdateRequest {
                name: leased.update_name,
                payload: leased.arguments,
                request_id: leased.request_id,
            },
        )?;
        let queued = enqueue_workflow(&tx, run)?;
        tx.prepare_cached(
            "UPDATE update_validations SET status = 'approved', update_id = ?2 WHERE id = ?1",
        )?
        .execute(params![id, update])?;
        tx.commit()?;
        Ok(Ok(Approved {
            run,
            update,
            queued,
        }))
    }

    /// A worker's rejection: the validation records `failure`; nothing is
    /// accepted and nothing enters history. Returns the run.
    pub fn reject_validation(
        &self,
        id: i64,
        owner: &str,
        attempt: u64,
        failure: &Value,
    ) -> Result<Result<RunId, VerdictRefusal>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let (run, _) = match self.fence_verdict(id, owner, attempt)? {
            Ok(found) => found,
            Err(refusal) => return Ok(Err(refusal)),
        };
        tx.prepare_cached(
            "UPDATE update_validations SET status = 'rejected', failure = ?2 WHERE id = ?1",
        )?
        .execute(params![id, serde_json::to_string(failure)?])?;
        tx.commit()?;
        Ok(Ok(run))
    }

    /// The rows of `run`'s validations (tests and diagnostics).
    pub fn validation_count(&self, run: RunId) -> Result<u64, Error> {
        let n: i64 = self
            .conn
            .prepare_cached("SELECT COUNT(*) FROM update_validations WHERE run_id = ?1")?
            .query_row([run.0], |r| r.get(0))?;
        Ok(to_u64(n))
    }

    /// Records the update names `worker` validates, per workflow type
    /// (`None`: none), on its registration.
    pub fn set_update_validators(
        &self,
        namespace: &str,
        worker: &str,
        validators: Option<&Value>,
    ) -> Result<(), Error> {
        let text = validators.map(serde_json::to_string).transpose()?;
        self.conn
            .prepare_cached(
                "UPDATE workers SET update_validators = ?3 WHERE namespace = ?1 AND worker_id = ?2",
            )?
            .execute(params![namespace, worker, text])?;
        Ok(())
    }

    /// Whether a registered worker of (namespace, task queue) declared a
    /// validator for update `name` of `workflow_type`. Every registration
    /// counts until it is pruned, idle ones too: an update a validator
    /// guards is never accepted unvalidated because its workers are away
    /// for a while (it waits for one, or times out).
    pub fn has_update_validator(
        &self,
        namespace: &str,
        task_queue: &str,
        workflow_type: &str,
        name: &str,
    ) -> Result<bool, Error> {
        let mut statement = self.conn.prepare_cached(DECLARED_VALIDATORS)?;
        let mut rows = statement.query(params![namespace, task_queue])?;
        while let Some(row) = rows.next()? {
            let text: String = row.get(0)?;
            let declared: Value = serde_json::from_str(&text)?;
            let names = declared.get(workflow_type).and_then(Value::as_array);
            if names.is_some_and(|names| names.iter().any(|n| n.as_str() == Some(name))) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::{DECLARED_VALIDATORS, NEXT_VALIDATION};
    use crate::store::config::StoreConfig;
    use crate::store::connection::Store;
    use crate::store::db::params;

    fn plan(store: &Store, sql: &str) -> String {
        let mut statement = store
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap();
        let rows: Vec<String> = if statement.parameter_count() == 3 {
            statement
                .query_map(params!["ns", "q", 5], |row| row.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        } else {
            statement
                .query_map(params!["ns", "q"], |row| row.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        rows.join("\n")
    }

    /// Every update asks whether a validator guards it, and every
    /// validating poll pass looks for a waiting validation: each is a walk
    /// of a partial index holding only what it looks for, never a scan of
    /// the namespace's registrations or of every validation.
    #[test]
    fn the_hot_reads_walk_their_partial_indexes() {
        let store = Store::open_in_memory(StoreConfig::default()).unwrap();
        let guard = plan(&store, DECLARED_VALIDATORS);
        assert!(guard.contains("workers_validating"), "{guard}");
        let next = plan(&store, NEXT_VALIDATION);
        assert!(next.contains("update_validations_by_queue"), "{next}");
        assert!(!next.contains("TEMP B-TREE"), "{next}");
    }
}
