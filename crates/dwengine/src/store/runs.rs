//! Starting runs and reading one run whole: its row, pending counters,
//! history and failure rows.
//!
//! A remote start commits the run, its start event and its first workflow
//! task in one transaction, so it sits above the task queue
//! ([`dispatch`](super::dispatch)); the reads use the row helpers and the
//! history reader.

use crate::store::db::{params, OptionalExtension};

use crate::store::connection::Store;
use crate::store::dispatch;
use crate::store::error::Error;
use crate::store::history;
use crate::store::model::{FailureRecord, HistoryEvent, PendingCounts, Run, RunId, StartRun};
use crate::store::rows::{self, insert_run, to_u64};
use crate::store::tx::WriteTx;

impl Store {
    /// Starts a run; arguments, memo and search attributes must fit their size limits.
    pub fn start_run(&self, start: StartRun) -> Result<RunId, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let run = insert_run(&tx, &self.config.limits, &start, None, None)?;
        tx.commit()?;
        Ok(run)
    }

    /// Starts a run for remote workers: the run, its start event and its
    /// first workflow task commit in one transaction, so no crash can leave
    /// a run that never gets a task. With a `request_id`, a retry of the
    /// same start (same namespace, workflow id and request id) returns the
    /// run the first attempt created instead of creating another.
    pub fn start_workflow(
        &self,
        start: StartRun,
        request_id: Option<&str>,
    ) -> Result<Started, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        if let Some(request_id) = request_id {
            if let Some(run) =
                self.run_started_by(&start.namespace, &start.workflow_id, request_id)?
            {
                return Ok(Started {
                    run,
                    duplicate: true,
                });
            }
        }
        let run = insert_run(&tx, &self.config.limits, &start, None, None)?;
        if let Some(request_id) = request_id {
            tx.prepare_cached("UPDATE runs SET start_request_id = ?2 WHERE id = ?1")?
                .execute(params![run.0, request_id])?;
        }
        dispatch::enqueue_workflow(&tx, run)?;
        tx.commit()?;
        Ok(Started {
            run,
            duplicate: false,
        })
    }

    /// The run a start with `request_id` created for (namespace, workflow id).
    pub fn run_started_by(
        &self,
        namespace: &str,
        workflow_id: &str,
        request_id: &str,
    ) -> Result<Option<RunId>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT id FROM runs WHERE namespace = ?1 AND workflow_id = ?2 \
                 AND start_request_id = ?3",
            )?
            .query_row(params![namespace, workflow_id, request_id], |r| r.get(0))
            .optional()?
            .map(RunId))
    }

    /// The run as stored.
    pub fn run(&self, run: RunId) -> Result<Run, Error> {
        rows::load_run(&self.conn, run)
    }

    /// The run's pending counters (one row read).
    pub fn pending_counts(&self, run: RunId) -> Result<PendingCounts, Error> {
        Ok(rows::load_head(&self.conn, run)?.pending)
    }

    /// The run's whole history in order, read page by page (for callers
    /// that need all of it: tests, the in-process executor's replay).
    pub fn history(&self, run: RunId) -> Result<Vec<HistoryEvent>, Error> {
        rows::load_history_length(&self.conn, run)?; // a missing run is an error
        let mut events = Vec::new();
        let mut from = 0;
        loop {
            let page = history::read_page(&self.conn, run, from, self.config.history_page)?;
            events.extend(page.events);
            match page.next_sequence {
                Some(next) => from = next,
                None => return Ok(events),
            }
        }
    }

    /// The run's failure rows, oldest first.
    pub fn failures(&self, run: RunId) -> Result<Vec<FailureRecord>, Error> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT failure_category, message, structural_limit_kind, structural_limit_value, \
             structural_limit_configured FROM failures WHERE run_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([run.0], |row| {
            Ok(FailureRecord {
                failure_category: row.get(0)?,
                message: row.get(1)?,
                structural_limit_kind: row.get(2)?,
                structural_limit_value: row.get::<_, Option<i64>>(3)?.map(to_u64),
                structural_limit_configured: row.get::<_, Option<i64>>(4)?.map(to_u64),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// What [`Store::start_workflow`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The run.
    pub run: RunId,
    /// `true` when the request id had already started it.
    pub duplicate: bool,
}
