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
//! closed run: the same answer from four statements instead of twelve.
//!
//! On SQLite, which has no round trips, the four run in turn on one
//! snapshot ([`Connection::read_together`](crate::store::db::Connection::read_together)).
//! The closed run's terminal event is read by a join on the run's row
//! rather than after it, in one statement with the first event.
//!
//! On PostgreSQL the four are one statement ([`ONE_STATEMENT`]): the run's
//! row joined to its first and terminal events, with its open workflow
//! tasks and failures as JSON arrays. A single statement is its own
//! snapshot, so it needs no `BEGIN` and `COMMIT` either: one statement
//! where the pipeline carried six. Every in-flight SDK workflow describes
//! itself every 50 to 500 ms, at a rate that does not fall when the server
//! slows down, so what each describe costs PostgreSQL is taken from the
//! workflows' own progress (docs/performance.md, session 22).

use std::sync::OnceLock;

use serde_json::Value;

use crate::store::archive::ArchiveMark;
use crate::store::connection::Store;
use crate::store::control::{closes_run, RunDescription, WorkflowTaskFailure};
use crate::store::db::{Engine, Row, ToSql, Together};
use crate::store::deadlines::RunTimeouts;
use crate::store::error::Error;
use crate::store::history::StoredEvent;
use crate::store::model::{EventType, FailureRecord, PendingCounts, Run, RunId, RunStatus};
use crate::store::rows::{decode_map, status_and_origin, to_i64, to_u64};

/// A run's description with its input and terminal record, and its archive
/// mark: what a detailed describe answers from.
pub type DetailedDescription = (RunDescription, (Value, Option<Value>), Option<ArchiveMark>);

/// Every column of the runs row a describe answers from (and the run's id,
/// for a describe that found the run by its workflow id), each after
/// `$t` (a table's alias and a dot, or nothing).
macro_rules! describe_columns {
    ($($t:literal)?) => {
        concat!(
            $($t,)? "workflow_id, ", $($t,)? "workflow_type, ", $($t,)? "status, ",
            $($t,)? "origin, ", $($t,)? "parent_run_id, ", $($t,)? "pending_activity_count, ",
            $($t,)? "pending_timer_count, ", $($t,)? "pending_child_count, ",
            $($t,)? "pending_signal_count, ", $($t,)? "pending_update_count, ",
            $($t,)? "namespace, ", $($t,)? "task_queue, ", $($t,)? "memo, ",
            $($t,)? "search_attributes, ", $($t,)? "history_length, ", $($t,)? "history_bytes, ",
            $($t,)? "continued_from_run_id, ", $($t,)? "continued_to_run_id, ",
            $($t,)? "resume_step_sequence, ", $($t,)? "build_id, ",
            $($t,)? "cancel_requested_at_ms, ", $($t,)? "closed_at_ms, ",
            $($t,)? "details_pruned_at, ", $($t,)? "created_at_ms, ",
            $($t,)? "execution_timeout_seconds, ", $($t,)? "run_timeout_seconds, ",
            $($t,)? "archived_at_ms, ", $($t,)? "archive_reason, ", $($t,)? "id"
        )
    };
}

/// The runs row a describe answers from.
const DESCRIBE_ROW: &str = concat!("SELECT ", describe_columns!(), " FROM runs WHERE id = ?1");

/// The run's ready or leased workflow tasks: an indexed probe of
/// `dispatch_by_run` per status.
const OPEN_WORKFLOW_TASK: &str = "SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
     WHERE run_id = ?1 AND kind = 'workflow' AND status = 'ready' \
     UNION ALL SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
     WHERE run_id = ?1 AND kind = 'workflow' AND status = 'leased'";

/// The run's first event (its input, marked 0) and a closed run's last
/// event (its terminal record when it closes the run, marked 1), in one
/// statement. A terminal event is written with the status that closes the
/// run, so an open run's last event is never one and is not read: the join
/// on the run's row says which event is last, without waiting for the row.
const EVENTS: &str = "SELECT 0, sequence, event_type, payload, recorded_at_ms \
     FROM history_events WHERE run_id = ?1 AND sequence = 0 \
     UNION ALL SELECT 1, e.sequence, e.event_type, e.payload, e.recorded_at_ms \
     FROM runs r JOIN history_events e ON e.run_id = r.id AND e.sequence = r.history_length - 1 \
     WHERE r.id = ?1 AND r.status <> 'running'";

/// The run's failure rows, oldest first ([`Store::failures`]).
const FAILURES: &str = "SELECT failure_category, message, structural_limit_kind, \
     structural_limit_value, structural_limit_configured FROM failures WHERE run_id = ?1 \
     ORDER BY id";

/// A describe's statements, the run named by id (`?1`).
const BY_ID: [&str; 4] = [DESCRIBE_ROW, OPEN_WORKFLOW_TASK, EVENTS, FAILURES];

/// The run [`Store::find_run`] finds: the newest of the workflow id.
const LATEST_RUN: &str =
    "(SELECT id FROM runs WHERE namespace = ?1 AND workflow_id = ?2 ORDER BY id DESC LIMIT 1)";

/// A describe on PostgreSQL, the run named by `?1`: [`BY_ID`]'s four
/// statements as one. The runs row (columns 0–28, as [`DESCRIBE_ROW`]),
/// its first event (29–32, the input) and, of a closed run, its last event
/// (33–36, its terminal record when it closes the run: see [`EVENTS`]) by
/// joins on the history's primary key, and its ready or leased workflow
/// tasks (37: one index probe per status, as [`OPEN_WORKFLOW_TASK`], not a
/// walk of the run's done tasks) and its failures (38) as JSON arrays of
/// their columns.
/// Payloads stay columns of their own, never escaped into JSON.
pub const ONE_STATEMENT: &str = concat!(
    "SELECT ",
    describe_columns!("o."),
    ", i.sequence, i.event_type, i.payload, i.recorded_at_ms, \
     e.sequence, e.event_type, e.payload, e.recorded_at_ms, \
     (SELECT json_agg(json_build_array(t.id, t.last_error, t.attempt, t.due_at_ms))::text \
      FROM (SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
       WHERE run_id = o.id AND kind = 'workflow' AND status = 'ready' \
       UNION ALL SELECT id, last_error, attempt, due_at_ms FROM dispatch_tasks \
       WHERE run_id = o.id AND kind = 'workflow' AND status = 'leased') t), \
     (SELECT json_agg(json_build_array(f.failure_category, f.message, f.structural_limit_kind, \
      f.structural_limit_value, f.structural_limit_configured) ORDER BY f.id)::text \
      FROM failures f WHERE f.run_id = o.id) \
     FROM runs o \
     LEFT JOIN history_events i ON i.run_id = o.id AND i.sequence = 0 \
     LEFT JOIN history_events e ON e.run_id = o.id AND e.sequence = o.history_length - 1 \
     AND o.status <> 'running' \
     WHERE o.id = ?1"
);

/// [`ONE_STATEMENT`] with the run found by namespace (`?1`) and workflow
/// id (`?2`): the newest run of the workflow id, as [`Store::find_run`]
/// finds it.
pub fn one_statement_latest() -> &'static str {
    static LATEST: OnceLock<String> = OnceLock::new();
    LATEST.get_or_init(|| ONE_STATEMENT.replace("?1", LATEST_RUN))
}

/// The runs row's columns as read, before decoding.
struct RawRow {
    text: [String; 8],
    ints: [Option<i64>; 18],
    build_id: Option<String>,
    archive_reason: Option<String>,
    id: i64,
}

/// An event's columns as read.
type RawEvent = (i64, String, String, Option<i64>);

/// A workflow task's id, last error, attempt and due time.
type RawTask = (i64, Option<String>, i64, i64);

/// A failure's category, message and structural limit (kind, value,
/// configured), as [`ONE_STATEMENT`] lists them.
type RawFailure = (String, String, Option<String>, Option<i64>, Option<i64>);

/// What a describe's statements read, before decoding.
#[derive(Default)]
struct Read {
    row: Option<RawRow>,
    tasks: Vec<RawTask>,
    input: Option<RawEvent>,
    terminal: Option<RawEvent>,
    failures: Vec<FailureRecord>,
}

impl Store {
    /// `run`'s description, its input and terminal record (as
    /// [`Store::run_io`] finds them) and its archive mark, on one snapshot
    /// (its own outside a read, one round trip on PostgreSQL): equal to
    /// [`Store::describe`], [`Store::run_io`] and [`Store::archive_mark`]
    /// called in turn.
    pub fn describe_detailed(&self, run: RunId) -> Result<DetailedDescription, Error> {
        if self.conn.engine() == Engine::Postgres {
            return self
                .describe_in_one(ONE_STATEMENT, &[&run.0])?
                .map(|(_, described)| described)
                .ok_or(Error::RunNotFound(run));
        }
        self.describe_with(&BY_ID, &[&run.0])?
            .map(|(_, described)| described)
            .ok_or(Error::RunNotFound(run))
    }

    /// [`Store::describe_detailed`] of the newest run of `workflow_id` in
    /// `namespace` (the run [`Store::find_run`] finds), with its id; `None`
    /// when the workflow id has no run. On PostgreSQL one statement that
    /// finds the run itself ([`one_statement_latest`]); on SQLite, which
    /// has no round trips, the run is found first and read by id, on one
    /// snapshot.
    pub fn describe_latest(
        &self,
        namespace: &str,
        workflow_id: &str,
    ) -> Result<Option<(RunId, DetailedDescription)>, Error> {
        if self.conn.engine() == Engine::Postgres {
            return self.describe_in_one(one_statement_latest(), &[&namespace, &workflow_id]);
        }
        let read = |s: &Store| match s.find_run(namespace, workflow_id)? {
            None => Ok(None),
            Some(run) => s.describe_with(&BY_ID, &[&run.0]),
        };
        if !self.conn.is_autocommit() {
            return read(self);
        }
        // A snapshot of its own, as `readers::snapshot` opens one.
        self.conn.begin_read()?;
        let result = read(self);
        let end = self.conn.commit();
        let value = result?;
        end?;
        Ok(value)
    }

    /// A describe as [`ONE_STATEMENT`] (or it with the run found by its
    /// workflow id) with `params`, decoded; `None` when it finds no run.
    fn describe_in_one(
        &self,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> Result<Option<(RunId, DetailedDescription)>, Error> {
        let mut statement = self.conn.prepare_cached(sql)?;
        let mut rows = statement.query(params)?;
        let mut read = Read::default();
        if let Some(r) = rows.next()? {
            let r = &r;
            read.row = Some(raw_row(r)?);
            read.input = event_columns(r, 29)?;
            read.terminal = event_columns(r, 33)?;
            if let Some(tasks) = r.get::<_, Option<String>>(37)? {
                read.tasks = serde_json::from_str(&tasks)?;
            }
            if let Some(failures) = r.get::<_, Option<String>>(38)? {
                let rows: Vec<RawFailure> = serde_json::from_str(&failures)?;
                read.failures = rows.into_iter().map(failure).collect();
            }
        }
        decode(read)
    }

    /// A describe's statements (`sql`, in [`BY_ID`]'s order) read
    /// together with `params`, and decoded; `None` when they find no run.
    fn describe_with(
        &self,
        sql: &[&str; 4],
        params: &[&dyn ToSql],
    ) -> Result<Option<(RunId, DetailedDescription)>, Error> {
        let mut read = Read::default();
        let Read {
            row,
            tasks,
            input,
            terminal,
            failures,
        } = &mut read;
        self.conn.read_together(&mut [
            Together {
                sql: sql[0],
                params,
                each: &mut |r| {
                    *row = Some(raw_row(r)?);
                    Ok(())
                },
            },
            Together {
                sql: sql[1],
                params,
                each: &mut |r| {
                    tasks.push((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?));
                    Ok(())
                },
            },
            Together {
                sql: sql[2],
                params,
                each: &mut |r| {
                    let event = (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
                    match r.get::<_, i64>(0)? {
                        0 => *input = Some(event),
                        _ => *terminal = Some(event),
                    }
                    Ok(())
                },
            },
            Together {
                sql: sql[3],
                params,
                each: &mut |r| {
                    failures.push(failure((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                    )));
                    Ok(())
                },
            },
        ])?;
        decode(read)
    }
}

/// The runs row's columns.
fn raw_row(r: &Row<'_>) -> crate::store::db::Result<RawRow> {
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
        id: r.get(28)?,
    })
}

/// A failure row as read.
fn failure((failure_category, message, kind, value, configured): RawFailure) -> FailureRecord {
    FailureRecord {
        failure_category,
        message,
        structural_limit_kind: kind,
        structural_limit_value: value.map(to_u64),
        structural_limit_configured: configured.map(to_u64),
    }
}

/// The event in the four columns from `first` of a describe's one
/// statement: `None` where the join found none.
fn event_columns(r: &Row<'_>, first: usize) -> crate::store::db::Result<Option<RawEvent>> {
    Ok(match r.get::<_, Option<i64>>(first)? {
        None => None,
        Some(sequence) => Some((
            sequence,
            r.get(first + 1)?,
            r.get(first + 2)?,
            r.get(first + 3)?,
        )),
    })
}

/// An event as [`crate::store::history::read_page`] reads it.
fn event(
    (sequence, event_type, text, recorded_at_ms): RawEvent,
) -> Result<crate::store::model::HistoryEvent, Error> {
    let Some(kind) = EventType::from_name(&event_type) else {
        return Err(Error::Corrupt(format!("unknown event type {event_type:?}")));
    };
    StoredEvent {
        sequence: to_u64(sequence),
        event_type: kind,
        text,
        recorded_at_ms,
    }
    .parsed()
}

/// Whether the run has a workflow task ready or leased, and the newest
/// failure of such a task ([`Store::workflow_task_open`] and
/// [`Store::workflow_task_failure`]).
fn open_workflow_task(tasks: Vec<RawTask>) -> Result<(bool, Option<WorkflowTaskFailure>), Error> {
    let open = !tasks.is_empty();
    let newest = tasks
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

/// The description from what a describe's statements read.
fn decode(read: Read) -> Result<Option<(RunId, DetailedDescription)>, Error> {
    let Some(raw) = read.row else {
        return Ok(None);
    };
    let run = RunId(raw.id);
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
    let (task_open, workflow_task_failure) = open_workflow_task(read.tasks)?;
    let workflow_task_open = running && task_open;
    let input = read
        .input
        .map(event)
        .transpose()?
        .and_then(|e| e.payload.get("arguments").cloned())
        .unwrap_or(Value::Null);
    let terminal = match read.terminal {
        Some(last) if !running => Some(event(last)?)
            .filter(|e| closes_run(e.event_type))
            .map(|e| e.payload),
        _ => None,
    };
    let execution = seconds(execution);
    let run_timeout = seconds(run_timeout);
    let described = RunDescription {
        run: stored,
        cancel_requested_at_ms: cancel,
        closed_at_ms: closed,
        details_pruned_at_ms: pruned,
        failures: read.failures,
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
    Ok(Some((run, (described, (input, terminal), archive))))
}

#[cfg(test)]
mod tests {
    use super::BY_ID;
    use crate::store::config::StoreConfig;
    use crate::store::connection::Store;

    /// describe is the most frequent request: none of its statements may
    /// build a temporary B-tree (`OpenEphemeral`: a database of its own,
    /// with a pager and a page cache, made and freed on every execution),
    /// as an `IN` list, a sort or a `UNION` instead of `UNION ALL` would.
    #[test]
    fn describe_statements_build_no_temporary_b_tree() {
        let store = Store::open_in_memory(StoreConfig::default()).unwrap();
        for sql in BY_ID {
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
