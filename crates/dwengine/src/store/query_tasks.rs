//! Worker-routed queries: a control-plane query waits while a worker of
//! the run's task queue replays the run and answers.
//!
//! A query task row exists only while its caller waits. The caller creates
//! it, long-polls its answer and deletes it whatever happened (answer,
//! failure, timeout), so the table never holds more rows than queries in
//! flight. Completion is fenced by lease owner and attempt, like every
//! worker report.

use rusqlite::{params, OptionalExtension};
use serde::Serialize;
use serde_json::Value;

use crate::store::model::RunId;
use crate::store::rows::{load_head, now_ms, to_u64};
use crate::store::tx::WriteTx;
use crate::store::{Error, Store};

/// A query task as handed to a worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeasedQuery {
    /// The query task.
    pub query_task_id: i64,
    /// Leases taken on it so far.
    pub attempt: u64,
    /// The run to replay.
    pub run_id: RunId,
    /// The caller's workflow id.
    pub workflow_id: String,
    /// The workflow type.
    pub workflow_type: String,
    /// The namespace.
    pub namespace: String,
    /// The task queue.
    pub task_queue: String,
    /// The query's name.
    pub query_name: String,
    /// Its arguments (an opaque payload, or null).
    pub arguments: Value,
    /// The worker holding it.
    pub lease_owner: String,
    /// When its lease ends.
    pub lease_expires_at_ms: i64,
}

/// A query's answer, once a worker gave one.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryAnswer {
    /// The query ran; the worker's answer document.
    Completed(Value),
    /// The worker refused or failed it.
    Failed(Value),
}

impl Store {
    /// Queues a query for `run`'s workers; returns the query task id.
    pub fn enqueue_query(&self, run: RunId, name: &str, arguments: &Value) -> Result<i64, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        load_head(&tx, run)?;
        tx.prepare_cached(
            "INSERT INTO query_tasks (run_id, namespace, task_queue, query_name, arguments, status, \
             created_at_ms) SELECT id, namespace, task_queue, ?2, ?3, 'ready', ?4 FROM runs WHERE id = ?1",
        )?
        .execute(params![run.0, name, serde_json::to_string(arguments)?, now_ms()])?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(id)
    }

    /// Leases the oldest ready query of (namespace, task queue) to `owner`;
    /// a query whose lease expired unanswered counts as ready again.
    pub fn lease_query(
        &self,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Result<Option<LeasedQuery>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let until = now_ms().saturating_add(lease_ms);
        let leased = tx
            .prepare_cached(
                "UPDATE query_tasks SET status = 'leased', lease_owner = ?3, lease_expires_at_ms = ?4, \
                 attempt = attempt + 1 WHERE id = (SELECT id FROM query_tasks WHERE namespace = ?1 \
                 AND task_queue = ?2 AND (status = 'ready' OR (status = 'leased' AND lease_expires_at_ms < ?5)) \
                 ORDER BY id LIMIT 1) \
                 RETURNING id, run_id, query_name, arguments, attempt",
            )?
            .query_row(params![namespace, task_queue, owner, until, now_ms()], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })
            .optional()?;
        let Some((id, run, query_name, arguments, attempt)) = leased else {
            return Ok(None);
        };
        let head = load_head(&tx, RunId(run))?;
        tx.commit()?;
        Ok(Some(LeasedQuery {
            query_task_id: id,
            attempt: to_u64(attempt),
            run_id: RunId(run),
            workflow_id: head.workflow_id,
            workflow_type: head.workflow_type,
            namespace: namespace.to_owned(),
            task_queue: task_queue.to_owned(),
            query_name,
            arguments: serde_json::from_str(&arguments)?,
            lease_owner: owner.to_owned(),
            lease_expires_at_ms: until,
        }))
    }

    /// Records a worker's answer; fenced by owner and attempt.
    pub fn answer_query(
        &self,
        query_task_id: i64,
        lease_owner: &str,
        attempt: u64,
        answer: QueryAnswer,
    ) -> Result<(), Error> {
        let (status, document) = match answer {
            QueryAnswer::Completed(v) => ("completed", v),
            QueryAnswer::Failed(v) => ("failed", v),
        };
        let row: Option<(String, Option<String>, i64)> = self
            .conn
            .prepare_cached("SELECT status, lease_owner, attempt FROM query_tasks WHERE id = ?1")?
            .query_row([query_task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let stale = |reason| Error::StaleTask {
            task: query_task_id,
            reason,
        };
        match row {
            None => Err(Error::ItemNotFound {
                item: "query task",
                id: query_task_id,
            }),
            Some((s, _, _)) if s != "leased" => Err(stale("task_not_leased")),
            Some((_, owner, _)) if owner.as_deref() != Some(lease_owner) => {
                Err(stale("lease_owner_mismatch"))
            }
            Some((_, _, a)) if to_u64(a) != attempt => Err(stale("query_task_attempt_mismatch")),
            Some(_) => {
                self.conn
                    .prepare_cached(
                        "UPDATE query_tasks SET status = ?2, answer = ?3 WHERE id = ?1",
                    )?
                    .execute(params![
                        query_task_id,
                        status,
                        serde_json::to_string(&document)?
                    ])?;
                Ok(())
            }
        }
    }

    /// The answer of a query task, if one arrived.
    pub fn query_answer(&self, query_task_id: i64) -> Result<Option<QueryAnswer>, Error> {
        let row: Option<(String, Option<String>)> = self
            .conn
            .prepare_cached("SELECT status, answer FROM query_tasks WHERE id = ?1")?
            .query_row([query_task_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((status, Some(answer))) = row else {
            return Ok(None);
        };
        let answer: Value = serde_json::from_str(&answer)?;
        Ok(Some(if status == "completed" {
            QueryAnswer::Completed(answer)
        } else {
            QueryAnswer::Failed(answer)
        }))
    }

    /// Removes a query task (its caller has its answer or gave up).
    pub fn forget_query(&self, query_task_id: i64) -> Result<(), Error> {
        self.conn
            .prepare_cached("DELETE FROM query_tasks WHERE id = ?1")?
            .execute([query_task_id])?;
        Ok(())
    }
}
