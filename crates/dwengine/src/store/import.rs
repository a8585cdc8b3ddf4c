//! Importing a run's v1 history as a read-only v2 projection.
//!
//! The import writes the whole history in one transaction, so dwpolicy's
//! history budget bounds it before anything touches the database: the event
//! count (start event, every log, signal and exception row, and the terminal
//! event when the run ended) is checked first, then payloads are built in
//! history order and metered with the canonical byte metric, stopping at the
//! first event over the byte budget. Only a fitting import reads existing
//! rows (to refuse a second projection) and opens the write transaction. A
//! dry run stops after the budget checks. The checks need no store
//! ([`V1Projection::measure`]), so the server runs them before it hands the
//! write to the group-commit writer, whose transaction is already open.

use crate::store::db::{params, OptionalExtension};
use dwpolicy::history::HistoryUsage;
use dwpolicy::HistoryBudget;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::rows::{append_event, now_ms};
use crate::store::tx::WriteTx;

/// One v1 run as exported: its start, its rows in history order, and its end.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct V1Projection {
    /// The workflow id.
    pub workflow_id: String,
    /// The workflow type.
    pub workflow_type: String,
    /// The namespace.
    pub namespace: String,
    /// The task queue.
    pub task_queue: String,
    /// The start arguments.
    pub arguments: Value,
    /// Log, signal and exception rows, oldest first.
    pub rows: Vec<V1Row>,
    /// How the run ended, if it did.
    pub terminal: Option<V1Terminal>,
    /// Source rows that were malformed and left out of `rows` (the import
    /// records their count on the start event, so the projection says it
    /// is incomplete).
    #[serde(default)]
    pub malformed_rows: u64,
}

/// One v1 history row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum V1Row {
    /// A log row.
    Log {
        /// The logged value.
        result: Value,
    },
    /// A signal row.
    Signal {
        /// The signal name.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// An exception row.
    Exception {
        /// The exception class.
        class: String,
        /// Its message.
        message: String,
    },
}

/// How a v1 run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum V1Terminal {
    /// With a result.
    Completed {
        /// The output.
        result: Value,
    },
    /// With an error.
    Failed {
        /// The error message.
        message: String,
    },
}

/// Whether to write the projection or only check it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportMode {
    /// Check, then write in one transaction.
    Commit,
    /// Check the same limits and write nothing.
    DryRun,
}

/// What an import measured (and wrote).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// The projection run, unless this was a dry run.
    pub run: Option<RunId>,
    /// Events in the projection.
    pub events: u64,
    /// Their canonical byte metric.
    pub bytes: u64,
}

impl V1Projection {
    /// The events the projection writes, in history order.
    fn event_count(&self) -> u64 {
        let rows = u64::try_from(self.rows.len()).unwrap_or(u64::MAX);
        rows.saturating_add(1 + u64::from(self.terminal.is_some()))
    }

    fn start_payload(&self) -> Value {
        let mut start = json!({
            "workflow_id": self.workflow_id,
            "workflow_type": self.workflow_type,
            "namespace": self.namespace,
            "task_queue": self.task_queue,
            "arguments": self.arguments,
            "origin": "v1_projection",
        });
        if self.malformed_rows > 0 {
            start["malformed_rows"] = self.malformed_rows.into();
        }
        start
    }
}

fn row_event(row: &V1Row) -> (EventType, Value) {
    match row {
        V1Row::Log { result } => (EventType::LogRecorded, json!({ "result": result })),
        V1Row::Signal { name, arguments } => (
            EventType::SignalReceived,
            json!({ "name": name, "payload": arguments }),
        ),
        V1Row::Exception { class, message } => (
            EventType::ExceptionRecorded,
            json!({ "class": class, "message": message }),
        ),
    }
}

fn terminal_event(terminal: &V1Terminal) -> (EventType, Value, RunStatus) {
    match terminal {
        V1Terminal::Completed { result } => (
            EventType::WorkflowCompleted,
            json!({ "result": result }),
            RunStatus::Completed,
        ),
        V1Terminal::Failed { message } => (
            EventType::WorkflowFailed,
            json!({ "failure_category": "application", "message": message }),
            RunStatus::Failed,
        ),
    }
}

/// A projection that fits the history budget, its events built in history
/// order: what [`Store::write_import`] writes.
#[derive(Debug, Clone)]
pub struct MeasuredImport {
    namespace: String,
    workflow_id: String,
    workflow_type: String,
    task_queue: String,
    events: Vec<(EventType, Value)>,
    status: RunStatus,
    usage: HistoryUsage,
}

impl MeasuredImport {
    /// Events in the projection.
    pub fn events(&self) -> u64 {
        self.usage.events
    }

    /// Their canonical byte metric.
    pub fn bytes(&self) -> u64 {
        self.usage.bytes
    }

    fn report(&self, run: Option<RunId>) -> ImportReport {
        ImportReport {
            run,
            events: self.usage.events,
            bytes: self.usage.bytes,
        }
    }
}

impl V1Projection {
    /// Checks `budget` without touching any store: the event count first,
    /// before any payload is built, then the payloads in history order,
    /// stopping at the first event over the byte budget.
    pub fn measure(&self, budget: &HistoryBudget) -> Result<MeasuredImport, Error> {
        let mut meter = budget.begin(self.event_count())?;
        let mut events = Vec::with_capacity(self.rows.len() + 2);
        let start = (EventType::WorkflowStarted, self.start_payload());
        meter.add(start.0.as_str(), &start.1)?;
        events.push(start);
        for row in &self.rows {
            let (event_type, payload) = row_event(row);
            meter.add(event_type.as_str(), &payload)?;
            events.push((event_type, payload));
        }
        let mut status = RunStatus::Running;
        if let Some(terminal) = &self.terminal {
            let (event_type, payload, end) = terminal_event(terminal);
            meter.add(event_type.as_str(), &payload)?;
            events.push((event_type, payload));
            status = end;
        }
        Ok(MeasuredImport {
            namespace: self.namespace.clone(),
            workflow_id: self.workflow_id.clone(),
            workflow_type: self.workflow_type.clone(),
            task_queue: self.task_queue.clone(),
            events,
            status,
            usage: meter.finish(),
        })
    }
}

impl Store {
    /// Imports `projection` under the history budget (see the module docs for the order).
    pub fn import_v1_projection(
        &self,
        projection: &V1Projection,
        mode: ImportMode,
    ) -> Result<ImportReport, Error> {
        let measured = projection.measure(&self.config.history_budget)?;
        if mode == ImportMode::DryRun {
            return Ok(measured.report(None));
        }
        self.write_import(&measured)
    }

    /// Writes a measured projection in one transaction; the first read of
    /// existing rows refuses a second projection of the same workflow.
    pub fn write_import(&self, measured: &MeasuredImport) -> Result<ImportReport, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let existing: Option<i64> = tx
            .query_row(
                "SELECT id FROM runs WHERE namespace = ?1 AND workflow_id = ?2 \
                 AND origin = 'v1_projection'",
                params![measured.namespace, measured.workflow_id],
                |row| row.get(0),
            )
            .optional()?;
        if let Some(run) = existing {
            return Err(Error::AlreadyImported {
                workflow_id: measured.workflow_id.clone(),
                run: RunId(run),
            });
        }
        let run = RunId(tx.query_row(
            "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, origin, \
             memo, search_attributes, created_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'v1_projection', '{}', '{}', ?6) RETURNING id",
            params![
                measured.workflow_id,
                measured.workflow_type,
                measured.namespace,
                measured.task_queue,
                measured.status.as_str(),
                now_ms()
            ],
            |r| r.get(0),
        )?);
        for (event_type, payload) in &measured.events {
            append_event(&tx, run, *event_type, payload, false)?;
        }
        tx.commit()?;
        Ok(measured.report(Some(run)))
    }
}
