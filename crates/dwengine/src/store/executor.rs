//! Running one workflow task atomically and classifying how it ended.
//!
//! A task is one SQLite transaction taken with the write lock up front, so
//! a task either commits all of its rows, events and counter moves or none
//! of them; a process killed mid-task leaves the file as it was. A
//! structural limit hit rolls back the task's own writes (a savepoint) and
//! then, in the same transaction, records the failure the contract
//! prescribes and ends the run.

use dwpolicy::{ApproachingLimit, StructuralLimitExceeded};
use serde::Serialize;
use serde_json::{json, Value};

use crate::store::completion::{fail_structural, finish_run, FailureRow};
use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus};
use crate::store::rows::load_head;
use crate::store::task::Task;
use crate::store::tx::WriteTx;

/// The failure category of a failure the workflow code chose.
pub const APPLICATION_FAILURE: &str = "application";

/// What workflow code decides at the end of a task.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Wait for activities, timers, children or signals; the run stays running.
    Wait,
    /// The run completed with this result.
    Complete(Value),
    /// The run failed with this message.
    Fail(String),
}

/// How a task ended for the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TaskOutcome {
    /// Committed; the run waits for more work.
    Waiting,
    /// Committed; the run completed.
    Completed,
    /// Committed; the run failed as the workflow chose.
    Failed {
        /// The workflow's message.
        message: String,
    },
    /// The task's writes were discarded and the run failed at a structural limit.
    StructuralLimit(StructuralLimitExceeded),
}

/// What one task did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskReport {
    /// The run.
    pub run: RunId,
    /// How it ended.
    pub outcome: TaskOutcome,
    /// Events the task committed (0 after a structural failure, whose
    /// writes are discarded; the failure event is not the task's).
    pub new_events: u64,
    /// Recorded commands answered by replay.
    pub replayed_commands: u64,
    /// Approaching-limit warnings, at most one per kind.
    pub warnings: Vec<ApproachingLimit>,
}

/// The savepoint a task's own writes sit in (a structural limit discards them).
const SAVEPOINT: &str = "workflow_task";

impl Store {
    /// Runs one workflow task for `run`: `workflow` re-executes from the start,
    /// replaying recorded commands and writing new ones, and its decision ends
    /// the task. Errors other than a structural limit leave the database untouched.
    pub fn execute_task<F>(&self, run: RunId, workflow: F) -> Result<TaskReport, Error>
    where
        F: FnOnce(&mut Task<'_>) -> Result<Next, Error>,
    {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        head.ensure_writable()?;
        tx.savepoint(SAVEPOINT)?;
        let mut task = Task::new(&tx, &self.config.limits, head)?;
        let decided = match workflow(&mut task) {
            // The terminal event is one more iteration of the main loop.
            Ok(next @ (Next::Complete(_) | Next::Fail(_))) => task.iteration().map(|()| next),
            other => other,
        };
        // A limit the workflow swallowed still fails the task.
        let failure = task.failure().or(match &decided {
            Err(Error::StructuralLimit(exceeded)) => Some(*exceeded),
            _ => None,
        });
        let parts = task.into_parts();
        if let Some(exceeded) = failure {
            tx.rollback_to(SAVEPOINT)?;
            // Reloaded: the task's in-memory counters included its discarded writes.
            let head = load_head(&tx, run)?;
            fail_structural(&tx, &head, exceeded)?;
            tx.commit()?;
            return Ok(TaskReport {
                run,
                outcome: TaskOutcome::StructuralLimit(exceeded),
                new_events: 0,
                replayed_commands: parts.replayed,
                warnings: parts.warnings,
            });
        }
        let mut new_events = parts.new_events;
        let outcome = match decided? {
            Next::Wait => TaskOutcome::Waiting,
            Next::Complete(result) => {
                let payload = json!({ "result": result });
                finish_run(
                    &tx,
                    &parts.head,
                    RunStatus::Completed,
                    EventType::WorkflowCompleted,
                    &payload,
                    None,
                )?;
                new_events += 1;
                TaskOutcome::Completed
            }
            Next::Fail(message) => {
                let payload =
                    json!({ "failure_category": APPLICATION_FAILURE, "message": message });
                let failure = FailureRow {
                    category: APPLICATION_FAILURE,
                    message: &message,
                    limit: None,
                };
                finish_run(
                    &tx,
                    &parts.head,
                    RunStatus::Failed,
                    EventType::WorkflowFailed,
                    &payload,
                    Some(failure),
                )?;
                new_events += 1;
                TaskOutcome::Failed { message }
            }
        };
        tx.release(SAVEPOINT)?;
        tx.commit()?;
        Ok(TaskReport {
            run,
            outcome,
            new_events,
            replayed_commands: parts.replayed,
            warnings: parts.warnings,
        })
    }
}
