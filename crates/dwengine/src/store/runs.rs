//! Starting runs and reading one run whole: its row, pending counters,
//! history and failure rows.
//!
//! A remote start commits the run, its start event and its first workflow
//! task in one transaction, so it sits above the task queue
//! ([`dispatch`](super::dispatch)); the reads use the row helpers and the
//! history reader.

use crate::store::db::{params, OptionalExtension};

use crate::store::connection::Store;
use crate::store::deadlines::run_deadline;
use crate::store::dispatch;
use crate::store::error::Error;
use crate::store::history;
use crate::store::model::{FailureRecord, HistoryEvent, PendingCounts, Run, RunId, StartRun};
use crate::store::rows::{self, insert_run, insert_run_with, now_ms, to_u64, NewRun, RunOptions};
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
        self.start_workflow_timed(start, request_id, None, None)
    }

    /// As [`Store::start_workflow`], with the run's execution and run
    /// timeouts (seconds) recorded and its deadline armed in the same row
    /// write. A start writes three rows (the run, its `WorkflowStarted`,
    /// its first workflow task), each once, and reads nothing but the
    /// request id's earlier start.
    pub fn start_workflow_timed(
        &self,
        start: StartRun,
        request_id: Option<&str>,
        execution_timeout_seconds: Option<u64>,
        run_timeout_seconds: Option<u64>,
    ) -> Result<Started, Error> {
        // A staged start writes nothing here (crate::store::start_stage),
        // so it opens no transaction or savepoint.
        let staged = self.stages_starts();
        let tx = if staged {
            None
        } else {
            Some(WriteTx::begin(&self.conn)?)
        };
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
        let created = now_ms();
        let options = RunOptions {
            start_request_id: request_id,
            execution_timeout_seconds,
            run_timeout_seconds,
            deadline: run_deadline(created, execution_timeout_seconds, run_timeout_seconds),
            created_at_ms: created,
            redrive: None,
        };
        let Some(tx) = tx else {
            // Its rows go with the batch's other starts, written before
            // anything else runs.
            let row = NewRun::checked(&self.config.limits, &start, None, None, options)?;
            let run = self.stage_start(start, row)?;
            return Ok(Started {
                run,
                duplicate: false,
            });
        };
        let run = insert_run_with(&tx, &self.config.limits, &start, None, None, options)?;
        dispatch::enqueue_first_workflow_task(&tx, run, &start.namespace, &start.task_queue)?;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::config::StoreConfig;

    fn start(id: &str) -> StartRun {
        StartRun {
            workflow_id: id.into(),
            workflow_type: "Order".into(),
            namespace: "ns".into(),
            task_queue: "q".into(),
            arguments: json!({"codec": "json", "blob": "[1]"}),
            ..StartRun::default()
        }
    }

    /// Rows inserted, updated or deleted on the store's connection so far,
    /// trigger writes included.
    fn row_writes(store: &Store) -> i64 {
        store
            .conn
            .query_row("SELECT total_changes()", [], |r| r.get(0))
            .unwrap()
    }

    /// A start writes each of its rows once: the run (already counting its
    /// first event, with its request id, timeouts and deadline), its
    /// `WorkflowStarted`, its first workflow task, and what the triggers
    /// keep of them (the run's summary and timeline entry, its series
    /// counter, its queue's counters): seven row writes, where the start
    /// used to update the run twice more (and its summary with it) after
    /// inserting it.
    #[test]
    fn a_start_writes_each_of_its_rows_once() {
        let store = Store::open_in_memory(StoreConfig::default()).unwrap();
        // The series and queue counter rows exist from here on, so both
        // starts below update them rather than create them.
        store.start_workflow(start("first"), None).unwrap();
        let before = row_writes(&store);
        let started = store
            .start_workflow_timed(start("second"), Some("req-1"), Some(600), Some(60))
            .unwrap();
        assert!(!started.duplicate);
        assert_eq!(row_writes(&store) - before, 7);

        let (length, bytes, request, execution, run_timeout, deadline, kind, created): (
            i64,
            i64,
            String,
            i64,
            i64,
            i64,
            String,
            i64,
        ) = store
            .conn
            .query_row(
                "SELECT history_length, history_bytes, start_request_id, \
                 execution_timeout_seconds, run_timeout_seconds, deadline_at_ms, deadline_kind, \
                 created_at_ms FROM runs WHERE id = ?1",
                [started.run.0],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ))
                },
            )
            .unwrap();
        let (event_type, payload): (String, String) = store
            .conn
            .query_row(
                "SELECT event_type, payload FROM history_events WHERE run_id = ?1 AND sequence = 0",
                [started.run.0],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(event_type, "WorkflowStarted");
        assert_eq!(length, 1);
        assert_eq!(
            bytes,
            i64::try_from(event_type.len() + payload.len()).unwrap()
        );
        assert_eq!(request, "req-1");
        assert_eq!((execution, run_timeout), (600, 60));
        assert_eq!((deadline, kind.as_str()), (created + 60_000, "run"));
        assert_eq!(store.history(started.run).unwrap().len(), 1);
        let summary_length: i64 = store
            .conn
            .query_row(
                "SELECT history_length FROM run_summaries WHERE run_id = ?1",
                [started.run.0],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(summary_length, 1);
        let (started_runs, ready): (i64, i64) = store
            .conn
            .query_row(
                "SELECT s.started, q.workflow_ready FROM workflow_run_series s \
                 JOIN task_queue_state q USING (namespace, task_queue) WHERE s.namespace = 'ns'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((started_runs, ready), (2, 2));
        // The retry of the same start finds the run and writes nothing.
        let again = row_writes(&store);
        let retried = store
            .start_workflow_timed(start("second"), Some("req-1"), Some(600), Some(60))
            .unwrap();
        assert_eq!((retried.run, retried.duplicate), (started.run, true));
        assert_eq!(row_writes(&store), again);
    }
}
