//! Workflow starts staged in memory by the SQLite writer and written with
//! their batch's other starts in one statement per table.
//!
//! A start writes three rows (its run, its `WorkflowStarted`, its first
//! workflow task). Written one statement each, a batch of starts pays
//! every statement's fixed cost per start: binding, the statement journal
//! SQLite opens for a statement whose triggers write, stepping, resetting.
//! That fixed cost was about a quarter of the writer's time per start
//! (docs/performance.md, "Starts written together"). Here a start of a
//! group-commit batch that decides on nothing shared (the start batches'
//! condition: no namespace quota, no schedule gate, no payload reference)
//! is checked as before (its request id's earlier start, an open run of
//! its workflow id, the size limits) but its rows are only staged; the
//! writer writes all staged rows of its batch as multi-row `INSERT`s
//! before any other job runs and before `COMMIT`.
//!
//! What keeps this the same as writing each start at once:
//! - a staged start's run id is taken in order after the table's largest
//!   (as SQLite's rowid would be), and nothing else inserts a run while
//!   starts are staged: every other job runs only after a flush;
//! - a start whose namespace and workflow id a staged start already has
//!   runs after a flush too, so its duplicate checks see that run;
//! - a staged start whose transition fails is unstaged with its savepoint
//!   rolled back ([`Store::unstage_since`]);
//! - a flush runs outside any job's savepoint, so rolling one back never
//!   undoes a neighbour's rows; a flush that fails fails the whole batch,
//!   as an I/O error does, and every caller is told.
//!
//! A flush also does once what four triggers would do once a row
//! (migration 0056): while it writes, `staged_start_flush` holds a row and
//! the run summary, timeline, series and queue triggers skip; the flush
//! copies the summaries and timeline entries from the rows it wrote and
//! adds each series' and queue's starts in one statement, with the
//! queue's minute moved as `task_queue_state_add` moves it (the minute
//! read from the system clock, as SQLite's `'now'` reads it). Its row is
//! deleted before the flush returns, so no other writer ever sees it.

use std::sync::LazyLock;

use crate::store::connection::Store;
use crate::store::db::ToSql;
use crate::store::error::Error;
use crate::store::model::{RunId, StartRun};
use crate::store::rows::{now_ms, NewRun};
use crate::store::staging::StagedStart;

/// Rows per statement: a batch is written in statements of these sizes,
/// largest first, so at most three texts per table are ever prepared.
const CHUNKS: [usize; 3] = [32, 8, 1];

/// `single`, an `INSERT … VALUES (…)` of one row with numbered
/// parameters, made to insert `rows` rows: its row repeated, each copy's
/// parameters numbered after the previous copy's.
fn multi_row(single: &str, rows: usize) -> String {
    let (head, row) = single
        .split_once(" VALUES ")
        .expect("a one-row INSERT … VALUES");
    let width = row.matches('?').count();
    let mut sql = String::with_capacity(head.len() + 8 + rows * (row.len() + 4));
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for copy in 0..rows {
        if copy > 0 {
            sql.push(',');
        }
        let mut rest = row;
        while let Some(at) = rest.find('?') {
            sql.push_str(&rest[..=at]);
            rest = &rest[at + 1..];
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            let number: usize = rest[..digits].parse().expect("a numbered parameter");
            sql.push_str(&(number + copy * width).to_string());
            rest = &rest[digits..];
        }
        sql.push_str(rest);
    }
    sql
}

fn texts(single: &str) -> [String; 3] {
    CHUNKS.map(|rows| multi_row(single, rows))
}

/// The run rows: [`crate::store::rows::insert_run_with`]'s columns with
/// the id and the pinned build before and after them.
static RUNS: LazyLock<[String; 3]> = LazyLock::new(|| {
    texts(
        "INSERT INTO runs (id, workflow_id, workflow_type, namespace, task_queue, status, \
         origin, parent_run_id, memo, search_attributes, created_at_ms, continued_from_run_id, \
         history_length, history_bytes, start_request_id, execution_timeout_seconds, \
         run_timeout_seconds, deadline_at_ms, deadline_kind, resume_step_sequence, \
         redrive_request_id, build_id) VALUES (?1, ?2, ?3, ?4, ?5, 'running', 'v2', ?6, ?7, \
         ?8, ?9, ?10, 1, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
    )
});

/// Their `WorkflowStarted` events (as `insert_event_row` writes one).
static EVENTS: LazyLock<[String; 3]> = LazyLock::new(|| {
    texts(
        "INSERT INTO history_events \
         (run_id, sequence, event_type, payload, command_index, recorded_at_ms) \
         VALUES (?1, 0, 'WorkflowStarted', ?2, NULL, ?3)",
    )
});

/// Their first workflow tasks (as `enqueue_first_workflow_task` writes one).
static TASKS: LazyLock<[String; 3]> = LazyLock::new(|| {
    texts(
        "INSERT INTO dispatch_tasks \
         (kind, run_id, namespace, task_queue, status, due_at_ms, created_at_ms) \
         VALUES ('workflow', ?1, ?2, ?3, 'ready', ?4, ?5)",
    )
});

/// While this row exists the four per-row copies and counts skip
/// (migration 0056); inside the batch's transaction only.
const FLUSHING: &str = "INSERT INTO staged_start_flush (flushing) VALUES (1)";
const FLUSHED: &str = "DELETE FROM staged_start_flush";

/// The staged runs' summaries, as `run_summaries_insert` copies each run
/// (new runs: none has a summary to replace).
const SUMMARIES: &str = "INSERT INTO run_summaries \
     SELECT id, namespace, workflow_id, workflow_type, task_queue, status, history_length, \
     created_at_ms, closed_at_ms FROM runs \
     WHERE id BETWEEN ?1 AND ?2 AND details_pruned_at IS NULL";

/// Their events' timeline entries, as `run_timeline_insert` copies each.
const TIMELINE: &str = "INSERT INTO run_timeline_entries \
     SELECT run_id, sequence, event_type, recorded_at_ms FROM history_events \
     WHERE run_id BETWEEN ?1 AND ?2";

/// A series' started runs, `workflow_run_series_start`'s +1 a run at once.
const SERIES_STARTED: &str = "INSERT INTO workflow_run_series \
     (namespace, task_queue, workflow_type, started) VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (namespace, task_queue, workflow_type) DO UPDATE SET \
     started = workflow_run_series.started + excluded.started";

/// A queue's minute bucket moved on when the minute turned: the first
/// statement of `task_queue_state_add`, for one queue, with the minute
/// (`?3`) read from the same clock as SQLite's `'now'`.
const QUEUE_MINUTE: &str = "UPDATE task_queue_state SET \
     added_before = CASE recent_minute - ?3 WHEN -1 THEN added_recent ELSE 0 END, \
     dispatched_before = CASE recent_minute - ?3 WHEN -1 THEN dispatched_recent ELSE 0 END, \
     added_recent = 0, \
     dispatched_recent = 0, \
     recent_minute = ?3 \
     WHERE namespace = ?1 AND task_queue = ?2 AND recent_minute != ?3";

/// A queue's ready workflow tasks added: its second statement, +1 a task
/// at once.
const QUEUE_ADDED: &str = "INSERT INTO task_queue_state \
     (namespace, task_queue, workflow_ready, recent_minute, added_recent) \
     VALUES (?1, ?2, ?3, ?4, ?3) \
     ON CONFLICT (namespace, task_queue) DO UPDATE SET \
     workflow_ready = task_queue_state.workflow_ready + excluded.workflow_ready, \
     added_recent = task_queue_state.added_recent + excluded.added_recent";

/// How many of `staged` share each key `key` gives, in first-seen order
/// (a batch's starts mostly share one queue and one series: a scan).
fn counted<'a, K: PartialEq>(
    staged: &'a [StagedStart],
    key: impl Fn(&'a StagedStart) -> K,
) -> Vec<(K, i64)> {
    let mut counts: Vec<(K, i64)> = Vec::new();
    for s in staged {
        let k = key(s);
        match counts.iter_mut().find(|(seen, _)| *seen == k) {
            Some((_, n)) => *n += 1,
            None => counts.push((k, 1)),
        }
    }
    counts
}

impl Store {
    /// Lets (or stops letting) the running job stage its start.
    pub(crate) fn accept_staged_starts(&self, accepting: bool) {
        self.stage.borrow_mut().accepting = accepting;
    }

    /// Whether a start staged now would be: a job that may stage is
    /// running.
    pub(crate) fn stages_starts(&self) -> bool {
        self.stage.borrow().accepting
    }

    /// Whether a staged start has this namespace and workflow id (a scan:
    /// a batch stages a few dozen starts at most, hundreds at its cap).
    pub(crate) fn has_staged(&self, namespace: &str, workflow_id: &str) -> bool {
        self.stage
            .borrow()
            .staged
            .iter()
            .any(|s| s.start.workflow_id == workflow_id && s.start.namespace == namespace)
    }

    /// How many starts are staged (a mark for [`Store::unstage_since`]).
    pub(crate) fn stage_mark(&self) -> usize {
        self.stage.borrow().staged.len()
    }

    /// Drops the starts staged after `mark` (their job was rolled back).
    pub(crate) fn unstage_since(&self, mark: usize) {
        self.stage.borrow_mut().staged.truncate(mark);
    }

    /// Forgets everything staged (the batch's transaction was rolled back).
    pub(crate) fn clear_staged_starts(&self) {
        let mut stage = self.stage.borrow_mut();
        stage.accepting = false;
        stage.next_id = None;
        stage.staged.clear();
        stage.written = 0;
    }

    /// Starts the current batch's flushes wrote (counted once it commits).
    pub(crate) fn staged_written(&self) -> u64 {
        self.stage.borrow().written
    }

    /// Stages a checked start; its run id.
    pub(crate) fn stage_start(&self, start: StartRun, row: NewRun) -> Result<RunId, Error> {
        let next = match self.stage.borrow().next_id {
            Some(next) => next,
            // `max(id)` alone, so SQLite reads it off the table's last
            // row rather than scanning.
            None => {
                self.conn
                    .prepare_cached("SELECT max(id) FROM runs")?
                    .query_row([], |r| r.get::<_, Option<i64>>(0))?
                    .unwrap_or(0)
                    + 1
            }
        };
        let mut stage = self.stage.borrow_mut();
        stage.next_id = Some(next + 1);
        stage.staged.push(StagedStart {
            id: next,
            start,
            row,
            build_id: None,
            at_ms: now_ms(),
        });
        Ok(RunId(next))
    }

    /// Pins staged run `run` to `build`; `false` when `run` is not staged.
    pub(crate) fn pin_staged(&self, run: RunId, build: &str) -> bool {
        let mut stage = self.stage.borrow_mut();
        match stage.staged.iter_mut().rev().find(|s| s.id == run.0) {
            Some(staged) => {
                staged.build_id = Some(build.to_owned());
                true
            }
            None => false,
        }
    }

    /// Writes every staged start: the runs and their summaries, then
    /// their events and timeline entries, then their tasks, each in
    /// statements of up to 32 rows; then each series' and queue's count.
    pub(crate) fn flush_staged_starts(&self) -> Result<(), Error> {
        let staged = {
            let mut stage = self.stage.borrow_mut();
            if stage.staged.is_empty() {
                return Ok(());
            }
            stage.next_id = None;
            stage.written += stage.staged.len() as u64;
            std::mem::take(&mut stage.staged)
        };
        // Ids rise through the stage, and no other run has one in their
        // range: every other job runs after a flush.
        let first = staged.first().map_or(0, |s| s.id);
        let last = staged.last().map_or(0, |s| s.id);
        self.conn.prepare_cached(FLUSHING)?.execute([])?;
        self.write_chunks(&staged, &RUNS, |s, values| {
            values.push(&s.id);
            values.extend(s.row.columns(&s.start));
            values.push(&s.build_id);
        })?;
        self.conn
            .prepare_cached(SUMMARIES)?
            .execute(&[&first as &dyn ToSql, &last][..])?;
        self.write_chunks(&staged, &EVENTS, |s, values| {
            values.extend([&s.id as &dyn ToSql, &s.row.started_event, &s.at_ms]);
        })?;
        self.conn
            .prepare_cached(TIMELINE)?
            .execute(&[&first as &dyn ToSql, &last][..])?;
        self.write_chunks(&staged, &TASKS, |s, values| {
            values.extend([
                &s.id as &dyn ToSql,
                &s.start.namespace,
                &s.start.task_queue,
                &s.at_ms,
                &s.at_ms,
            ]);
        })?;
        for ((namespace, queue, kind), started) in counted(&staged, |s| {
            (
                &s.start.namespace,
                &s.start.task_queue,
                &s.start.workflow_type,
            )
        }) {
            self.conn
                .prepare_cached(SERIES_STARTED)?
                .execute(&[namespace as &dyn ToSql, queue, kind, &started][..])?;
        }
        let minute = now_ms().div_euclid(60_000);
        for ((namespace, queue), added) in
            counted(&staged, |s| (&s.start.namespace, &s.start.task_queue))
        {
            self.conn
                .prepare_cached(QUEUE_MINUTE)?
                .execute(&[namespace as &dyn ToSql, queue, &minute][..])?;
            self.conn
                .prepare_cached(QUEUE_ADDED)?
                .execute(&[namespace as &dyn ToSql, queue, &added, &minute][..])?;
        }
        self.conn.prepare_cached(FLUSHED)?.execute([])?;
        Ok(())
    }

    /// Runs `texts`' statements over `staged`, binding each start's values
    /// with `bind`.
    fn write_chunks<'a>(
        &self,
        staged: &'a [StagedStart],
        texts: &[String; 3],
        bind: impl Fn(&'a StagedStart, &mut Vec<&'a dyn ToSql>),
    ) -> Result<(), Error> {
        let mut rest = staged;
        let mut values = Vec::new();
        while !rest.is_empty() {
            let (size, sql) = CHUNKS
                .iter()
                .zip(texts)
                .find(|(size, _)| **size <= rest.len())
                .expect("the smallest chunk is one row");
            let (chunk, after) = rest.split_at(*size);
            values.clear();
            for s in chunk {
                bind(s, &mut values);
            }
            let written = self.conn.prepare_cached(sql)?.execute(&values[..])?;
            if written != *size {
                return Err(Error::Corrupt(format!(
                    "a staged start batch wrote {written} rows of {size}"
                )));
            }
            rest = after;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each copy of the row takes the parameter numbers after the copy
    /// before it, so the statement binds its rows' values in order.
    #[test]
    fn a_multi_row_insert_numbers_each_copys_parameters_after_the_last() {
        assert_eq!(
            multi_row("INSERT INTO t (a, b, c) VALUES (?1, 'x', ?2)", 3),
            "INSERT INTO t (a, b, c) VALUES (?1, 'x', ?2),(?3, 'x', ?4),(?5, 'x', ?6)"
        );
        assert_eq!(
            multi_row("INSERT INTO t (a) VALUES (?1)", 1),
            "INSERT INTO t (a) VALUES (?1)"
        );
        // The statements' texts are built (and checked) once.
        assert!(
            RUNS[0].ends_with("?607, ?608)"),
            "{}",
            &RUNS[0][RUNS[0].len() - 40..]
        );
        assert_eq!(EVENTS[2].matches('?').count(), 3);
        assert_eq!(TASKS[1].matches('?').count(), 40);
    }
}
