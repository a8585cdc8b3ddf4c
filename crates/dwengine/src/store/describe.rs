//! A run's whole description read in as few statements as the answer allows.
//!
//! An SDK's `result()` is a loop of describes (every 50 to 500 ms per
//! waiting client), so a busy server answers more describes than any other
//! request. [`Store::describe`](crate::store::connection::Store::describe)
//! composes the run's row from the readers other callers share (its head,
//! its metadata, its control columns, its timeouts, its archive mark and
//! its history length: the same row read six times) and
//! [`Store::run_io`](crate::store::connection::Store::run_io) reads the
//! last history event even while the run is open, when it cannot be a
//! terminal one. [`Store::describe_detailed`] reads the row once, the open
//! workflow task's state in one statement, and the last event only of a
//! closed run: the same answer from five statements instead of twelve.

use serde_json::Value;

use crate::store::archive::ArchiveMark;
use crate::store::connection::Store;
use crate::store::control::{closes_run, RunDescription, WorkflowTaskFailure};
use crate::store::db::OptionalExtension;
use crate::store::deadlines::RunTimeouts;
use crate::store::error::Error;
use crate::store::history::read_event;
use crate::store::model::{PendingCounts, Run, RunId, RunStatus};
use crate::store::rows::{decode_map, status_and_origin, to_i64, to_u64};

/// A run's description with its input and terminal record, and its archive
/// mark: what a detailed describe answers from.
pub type DetailedDescription = (RunDescription, (Value, Option<Value>), Option<ArchiveMark>);

/// Every column of the runs row a describe answers from.
const DESCRIBE_ROW: &str = "SELECT workflow_id, workflow_type, status, origin, parent_run_id, \
     pending_activity_count, pending_timer_count, pending_child_count, pending_signal_count, \
     pending_update_count, namespace, task_queue, memo, search_attributes, history_length, \
     history_bytes, continued_from_run_id, continued_to_run_id, resume_step_sequence, build_id, \
     cancel_requested_at_ms, closed_at_ms, details_pruned_at, created_at_ms, \
     execution_timeout_seconds, run_timeout_seconds, archived_at_ms, archive_reason \
     FROM runs WHERE id = ?1";

/// The run's ready or leased workflow tasks: an indexed probe of
/// `dispatch_by_run` per status.
const OPEN_WORKFLOW_TASK: &str = "SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
     WHERE run_id = ?1 AND kind = 'workflow' AND status = 'ready' \
     UNION ALL SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
     WHERE run_id = ?1 AND kind = 'workflow' AND status = 'leased'";

/// The runs row's columns as read, before decoding.
struct RawRow {
    text: [String; 8],
    ints: [Option<i64>; 18],
    build_id: Option<String>,
    archive_reason: Option<String>,
}

impl Store {
    /// `run`'s description, its input and terminal record (as
    /// [`Store::run_io`] finds them) and its archive mark, in one snapshot
    /// when called inside a read: equal to [`Store::describe`],
    /// [`Store::run_io`] and [`Store::archive_mark`] called in turn.
    pub fn describe_detailed(&self, run: RunId) -> Result<DetailedDescription, Error> {
        let raw = self
            .conn
            .prepare_cached(DESCRIBE_ROW)?
            .query_row([run.0], |r| {
                // Text columns: workflow_id, workflow_type, status, origin,
                // namespace, task_queue, memo, search_attributes.
                let text = [
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(10)?,
                    r.get(11)?,
                    r.get(12)?,
                    r.get(13)?,
                ];
                let mut ints = [None; 18];
                for (slot, column) in ints.iter_mut().zip([
                    4, 5, 6, 7, 8, 9, 14, 15, 16, 17, 18, 20, 21, 22, 23, 24, 25, 26,
                ]) {
                    *slot = r.get(column)?;
                }
                Ok(RawRow {
                    text,
                    ints,
                    build_id: r.get(19)?,
                    archive_reason: r.get(27)?,
                })
            })
            .optional()?
            .ok_or(Error::RunNotFound(run))?;
        let [workflow_id, workflow_type, status, origin, namespace, task_queue, memo, search] =
            raw.text;
        let [parent, activities, timers, children, signals, updates, length, bytes, from, to, resume, cancel, closed, pruned, created, execution, run_timeout, archived_at] =
            raw.ints;
        let (status, origin) = status_and_origin(run, &status, &origin)?;
        let count = |v: Option<i64>| to_u64(v.unwrap_or(0));
        let seconds = |v: Option<i64>| v.and_then(|s| u64::try_from(s).ok());
        let deadline = |s: Option<u64>| {
            s.map(|s| {
                created
                    .unwrap_or(0)
                    .saturating_add(to_i64(s.saturating_mul(1000)))
            })
        };
        let history_length = count(length);
        let stored = Run {
            id: run,
            workflow_id,
            workflow_type,
            namespace,
            task_queue,
            status,
            origin,
            parent: parent.map(RunId),
            memo: decode_map(&memo)?,
            search_attributes: decode_map(&search)?,
            pending: PendingCounts {
                activities: count(activities),
                timers: count(timers),
                children: count(children),
                signals: count(signals),
                updates: count(updates),
            },
            history_length,
            history_bytes: count(bytes),
            continued_from: from.map(RunId),
            continued_to: to.map(RunId),
            resume_step_sequence: resume.map(to_u64),
            build_id: raw.build_id,
        };
        let running = status == RunStatus::Running;
        let (task_open, workflow_task_failure) = self.open_workflow_task(run)?;
        let workflow_task_open = running && task_open;
        let input = read_event(&self.conn, run, 0)?
            .and_then(|e| e.payload.get("arguments").cloned())
            .unwrap_or(Value::Null);
        // A terminal event is written with the status that closes the run,
        // so an open run's last event is never one: only a closed run's is
        // read.
        let terminal = if running {
            None
        } else {
            read_event(&self.conn, run, history_length.saturating_sub(1))?
                .filter(|e| closes_run(e.event_type))
                .map(|e| e.payload)
        };
        let execution = seconds(execution);
        let run_timeout = seconds(run_timeout);
        let described = RunDescription {
            run: stored,
            cancel_requested_at_ms: cancel,
            closed_at_ms: closed,
            details_pruned_at_ms: pruned,
            failures: self.failures(run)?,
            timeouts: RunTimeouts {
                execution_timeout_seconds: execution,
                run_timeout_seconds: run_timeout,
                execution_deadline_at_ms: deadline(execution),
                run_deadline_at_ms: deadline(run_timeout),
            },
            workflow_task_failure,
            workflow_task_open,
        };
        let archive = archived_at.map(|archived_at_ms| ArchiveMark {
            archived_at_ms,
            reason: raw.archive_reason,
        });
        Ok((described, (input, terminal), archive))
    }

    /// Whether `run` has a workflow task ready or leased, and the newest
    /// failure of such a task: [`Store::workflow_task_open`] and
    /// [`Store::workflow_task_failure`] in one statement (an indexed probe
    /// of `dispatch_by_run` per status, no temporary B-tree).
    fn open_workflow_task(&self, run: RunId) -> Result<(bool, Option<WorkflowTaskFailure>), Error> {
        let rows: Vec<(i64, Option<String>, i64, i64)> = self
            .conn
            .prepare_cached(OPEN_WORKFLOW_TASK)?
            .query_map([run.0], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<Result<_, _>>()?;
        let open = !rows.is_empty();
        let newest = rows
            .into_iter()
            .filter_map(|(id, error, attempt, due)| error.map(|e| (id, e, attempt, due)))
            .max_by_key(|row| row.0);
        let failure = match newest {
            None => None,
            Some((_, failure, attempt, due)) => Some(WorkflowTaskFailure {
                failure: serde_json::from_str(&failure)?,
                attempt: to_u64(attempt),
                next_attempt_at_ms: due,
            }),
        };
        Ok((open, failure))
    }
}

#[cfg(test)]
mod tests {
    use super::{DESCRIBE_ROW, OPEN_WORKFLOW_TASK};
    use crate::store::config::StoreConfig;
    use crate::store::connection::Store;

    /// describe is the most frequent request: none of its statements may
    /// build a temporary B-tree (`OpenEphemeral`: a database of its own,
    /// with a pager and a page cache, made and freed on every execution),
    /// as an `IN` list, a sort or a `UNION` instead of `UNION ALL` would.
    #[test]
    fn describe_statements_build_no_temporary_b_tree() {
        let store = Store::open_in_memory(StoreConfig::default()).unwrap();
        for sql in [DESCRIBE_ROW, OPEN_WORKFLOW_TASK] {
            let opcodes: Vec<String> = store
                .conn
                .prepare(&format!("EXPLAIN {sql}"))
                .unwrap()
                .query_map([1i64], |row| row.get::<_, String>(1))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(
                opcodes.iter().any(|op| op == "OpenRead"),
                "{sql}: {opcodes:?}"
            );
            assert!(
                !opcodes.iter().any(|op| op == "OpenEphemeral"),
                "{sql} opens a temporary B-tree: {opcodes:?}"
            );
        }
    }
}
