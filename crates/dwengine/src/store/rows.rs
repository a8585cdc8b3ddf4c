//! Row-level helpers every write path shares: loading a run, appending a
//! history event, and moving a pending counter.
//!
//! Keeping these in one place is what keeps the counters honest: every path
//! that creates or closes an item moves the run's counter through [`bump`]
//! in the same transaction, and every event goes through [`append_event`],
//! which also maintains the run's history length and canonical byte total.

use std::sync::LazyLock;

use crate::store::db::{params, Connection, OptionalExtension, ToSql};
use dwpolicy::LimitKind;
use serde_json::{Map, Value};

use crate::store::error::Error;
use crate::store::model::{EventType, PendingCounts, Run, RunId, RunOrigin, RunStatus, StartRun};
use dwpolicy::{RunRef, StructuralLimits};

/// A count-limited item kind with a counter column on the run row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pending {
    Activity,
    Timer,
    Child,
    Signal,
    Update,
}

impl Pending {
    /// The statement [`bump`] runs, written out rather than formatted on
    /// every call (a `format!` is some 1,000 instructions, and the
    /// statement cache hashes the text either way).
    fn bump_sql(self) -> &'static str {
        match self {
            Pending::Activity => {
                "UPDATE runs SET pending_activity_count = pending_activity_count + ?1 WHERE id = ?2"
            }
            Pending::Timer => {
                "UPDATE runs SET pending_timer_count = pending_timer_count + ?1 WHERE id = ?2"
            }
            Pending::Child => {
                "UPDATE runs SET pending_child_count = pending_child_count + ?1 WHERE id = ?2"
            }
            Pending::Signal => {
                "UPDATE runs SET pending_signal_count = pending_signal_count + ?1 WHERE id = ?2"
            }
            Pending::Update => {
                "UPDATE runs SET pending_update_count = pending_update_count + ?1 WHERE id = ?2"
            }
        }
    }

    /// The counter's column (the test of [`Pending::bump_sql`] formats
    /// the statement from it).
    #[cfg(test)]
    fn column(self) -> &'static str {
        match self {
            Pending::Activity => "pending_activity_count",
            Pending::Timer => "pending_timer_count",
            Pending::Child => "pending_child_count",
            Pending::Signal => "pending_signal_count",
            Pending::Update => "pending_update_count",
        }
    }

    pub(crate) fn limit_kind(self) -> LimitKind {
        match self {
            Pending::Activity => LimitKind::PendingActivityCount,
            Pending::Timer => LimitKind::PendingTimerCount,
            Pending::Child => LimitKind::PendingChildCount,
            Pending::Signal => LimitKind::PendingSignalCount,
            Pending::Update => LimitKind::PendingUpdateCount,
        }
    }

    pub(crate) fn get(self, counts: &PendingCounts) -> u64 {
        match self {
            Pending::Activity => counts.activities,
            Pending::Timer => counts.timers,
            Pending::Child => counts.children,
            Pending::Signal => counts.signals,
            Pending::Update => counts.updates,
        }
    }

    pub(crate) fn slot(self, counts: &mut PendingCounts) -> &mut u64 {
        match self {
            Pending::Activity => &mut counts.activities,
            Pending::Timer => &mut counts.timers,
            Pending::Child => &mut counts.children,
            Pending::Signal => &mut counts.signals,
            Pending::Update => &mut counts.updates,
        }
    }
}

/// Moves `run`'s counter for `pending` by `delta` (the CHECK constraint
/// refuses a negative count, so a double release surfaces as an error).
pub(crate) fn bump(
    conn: &Connection,
    run: RunId,
    pending: Pending,
    delta: i64,
) -> Result<(), Error> {
    // Nothing reads its answer: on PostgreSQL it goes with the next call.
    conn.execute_queued(pending.bump_sql(), params![delta, run.0])?;
    Ok(())
}

/// The columns hot paths need, without decoding memo or search attributes.
#[derive(Debug, Clone)]
pub(crate) struct RunHead {
    pub id: RunId,
    pub workflow_id: String,
    pub workflow_type: String,
    pub status: RunStatus,
    pub origin: RunOrigin,
    pub parent: Option<RunId>,
    pub pending: PendingCounts,
}

impl RunHead {
    /// Refuses appends to projections and finished runs.
    pub(crate) fn ensure_writable(&self) -> Result<(), Error> {
        if self.origin == RunOrigin::V1Projection {
            return Err(Error::ReadOnlyProjection(self.id));
        }
        if self.status != RunStatus::Running {
            return Err(Error::RunNotActive {
                run: self.id,
                status: self.status,
            });
        }
        Ok(())
    }
}

const HEAD_COLUMNS: &str = "id, workflow_id, workflow_type, status, origin, parent_run_id, \
     pending_activity_count, pending_timer_count, pending_child_count, \
     pending_signal_count, pending_update_count";

pub(crate) fn load_head(conn: &Connection, run: RunId) -> Result<RunHead, Error> {
    // Formatted once: this runs several times a workflow.
    static SQL: LazyLock<String> =
        LazyLock::new(|| format!("SELECT {HEAD_COLUMNS} FROM runs WHERE id = ?1"));
    Ok(read_head(conn, &SQL, run, |_| Ok(()))?.0)
}

/// What a workflow task's commands are written against besides the run's
/// head (`workflow_commands::CommandWriter`).
pub(crate) struct CommandRow {
    pub namespace: String,
    pub task_queue: String,
    /// Commands the run recorded so far (the next one's sequence follows).
    pub command_count: i64,
    /// The condition wait the run has open (JSON), if any.
    pub open_condition_wait: Option<String>,
}

/// [`load_head`] and the run's [`CommandRow`] in one read: a workflow
/// task's completion needs both, and on PostgreSQL a read is a round trip
/// inside the write lock.
pub(crate) fn load_head_for_commands(
    conn: &Connection,
    run: RunId,
) -> Result<(RunHead, CommandRow), Error> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT {HEAD_COLUMNS}, namespace, task_queue, command_count, open_condition_wait \
             FROM runs WHERE id = ?1"
        )
    });
    read_head(conn, &SQL, run, |row| {
        Ok(CommandRow {
            namespace: row.get(11)?,
            task_queue: row.get(12)?,
            command_count: row.get(13)?,
            open_condition_wait: row.get(14)?,
        })
    })
}

/// Runs `sql`, which selects [`HEAD_COLUMNS`] first, for `run`: its head,
/// and what `extra` makes of the columns after them.
fn read_head<T>(
    conn: &Connection,
    sql: &str,
    run: RunId,
    extra: impl FnOnce(&crate::store::db::Row<'_>) -> crate::store::db::Result<T>,
) -> Result<(RunHead, T), Error> {
    let raw = conn
        .prepare_cached(sql)?
        .query_row([run.0], |row| {
            Ok((
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, String>(4)?,
                row.get::<_, Option<i64>>(5)?,
                [
                    row.get::<_, i64>(6)?,
                    row.get::<_, i64>(7)?,
                    row.get::<_, i64>(8)?,
                    row.get::<_, i64>(9)?,
                    row.get::<_, i64>(10)?,
                ],
                extra(row)?,
            ))
        })
        .optional()?;
    let Some((workflow_id, workflow_type, status, origin, parent, counts, extra)) = raw else {
        return Err(Error::RunNotFound(run));
    };
    let (status, origin) = status_and_origin(run, &status, &origin)?;
    let head = RunHead {
        id: run,
        workflow_id,
        workflow_type,
        status,
        origin,
        parent: parent.map(RunId),
        pending: PendingCounts {
            activities: to_u64(counts[0]),
            timers: to_u64(counts[1]),
            children: to_u64(counts[2]),
            signals: to_u64(counts[3]),
            updates: to_u64(counts[4]),
        },
    };
    Ok((head, extra))
}

/// The whole run, with its metadata decoded.
pub(crate) fn load_run(conn: &Connection, run: RunId) -> Result<Run, Error> {
    let head = load_head(conn, run)?;
    #[allow(clippy::type_complexity)]
    let (namespace, task_queue, memo, search, length, bytes, from, to, resume, build_id): (
        String,
        String,
        String,
        String,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<String>,
    ) = conn
        .prepare_cached(
            "SELECT namespace, task_queue, memo, search_attributes, history_length, history_bytes, \
             continued_from_run_id, continued_to_run_id, resume_step_sequence, build_id \
             FROM runs WHERE id = ?1",
        )?
        .query_row([run.0], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
                row.get(7)?,
                row.get(8)?,
                row.get(9)?,
            ))
        })?;
    Ok(Run {
        id: head.id,
        workflow_id: head.workflow_id,
        workflow_type: head.workflow_type,
        namespace,
        task_queue,
        status: head.status,
        origin: head.origin,
        parent: head.parent,
        memo: decode_map(&memo)?,
        search_attributes: decode_map(&search)?,
        pending: head.pending,
        history_length: to_u64(length),
        history_bytes: to_u64(bytes),
        continued_from: from.map(RunId),
        continued_to: to.map(RunId),
        resume_step_sequence: resume.map(to_u64),
        build_id,
    })
}

pub(crate) fn decode_map(text: &str) -> Result<Map<String, Value>, Error> {
    match serde_json::from_str(text)? {
        Value::Object(map) => Ok(map),
        other => Err(Error::Corrupt(format!(
            "expected a JSON object, found {other}"
        ))),
    }
}

/// Appends one event to `run`'s history and returns its sequence number.
///
/// Command events also get the next command index, which is what replay
/// looks them up by.
pub(crate) fn append_event(
    conn: &Connection,
    run: RunId,
    event_type: EventType,
    payload: &Value,
    command: bool,
) -> Result<u64, Error> {
    // External payload references in the structural-limit contract's form.
    let text = crate::store::payload_references::history_text(payload)?;
    // The canonical byte metric: compact JSON with `/` and Unicode unescaped,
    // which is serde_json's output, plus the type name.
    let size = event_type.as_str().len() + text.len();
    let (sequence, command_index): (i64, i64) = conn
        .prepare_cached(
            "UPDATE runs SET history_length = history_length + 1, \
             history_bytes = history_bytes + ?2, command_count = command_count + ?3 \
             WHERE id = ?1 RETURNING history_length - 1, command_count - 1",
        )?
        .query_row(params![run.0, to_i64(size), i64::from(command)], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?
        .ok_or(Error::RunNotFound(run))?;
    insert_event_row(
        conn,
        run,
        sequence,
        event_type,
        &text,
        command.then_some(command_index),
    )?;
    // A terminal event that makes a `select` member the group's winner is
    // followed, in the same transaction, by the group's marker.
    if let Some(marker) = crate::store::selection::resolution(conn, run, event_type, payload)? {
        append_event(conn, run, EventType::SelectionResolved, &marker, false)?;
    }
    Ok(to_u64(sequence))
}

/// The history row itself; the caller has counted it on the run's row.
fn insert_event_row(
    conn: &Connection,
    run: RunId,
    sequence: i64,
    event_type: EventType,
    text: &str,
    command_index: Option<i64>,
) -> Result<(), Error> {
    // Its sequence was taken from the run's row under the write lock, so
    // nothing reads its answer: on PostgreSQL it goes with the next call.
    conn.execute_queued(
        "INSERT INTO history_events \
         (run_id, sequence, event_type, payload, command_index, recorded_at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            run.0,
            sequence,
            event_type.as_str(),
            text,
            command_index,
            now_ms()
        ],
    )?;
    Ok(())
}

/// The number of events in `run`'s history (one row read).
pub(crate) fn load_history_length(conn: &Connection, run: RunId) -> Result<u64, Error> {
    conn.prepare_cached("SELECT history_length FROM runs WHERE id = ?1")?
        .query_row([run.0], |row| row.get::<_, i64>(0))
        .optional()?
        .map(to_u64)
        .ok_or(Error::RunNotFound(run))
}

/// SQLite integers are i64; counts and sizes are never negative (CHECK constraints).
pub(crate) fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

pub(crate) fn to_i64(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| to_i64(d.as_millis()))
        .unwrap_or(0)
}

/// Checks a serialized size against a size limit (size kinds never warn).
pub(crate) fn check_size(
    limits: &StructuralLimits,
    kind: LimitKind,
    bytes: usize,
    run: &RunRef<'_>,
) -> Result<(), Error> {
    limits.check(kind, u64::try_from(bytes).unwrap_or(u64::MAX), run)?;
    Ok(())
}

/// What a start sets on a new run's row beside what [`StartRun`] holds:
/// the request id a retry of the start is recognised by, and the run's
/// timeouts with the deadline they arm. Written by the run's one `INSERT`,
/// not by updates after it, so a start moves the row (and the triggers that
/// copy it into the projections) once.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunOptions<'a> {
    pub(crate) start_request_id: Option<&'a str>,
    pub(crate) execution_timeout_seconds: Option<u64>,
    pub(crate) run_timeout_seconds: Option<u64>,
    /// The earliest deadline those timeouts set, and which one it is.
    pub(crate) deadline: Option<(i64, &'static str)>,
    /// The run's `created_at_ms` (the deadline counts from it); now when 0.
    pub(crate) created_at_ms: i64,
    /// For a redrive's successor: the failed step it resumes at and the
    /// caller's request id, recorded on the row and (the step) on its
    /// `WorkflowStarted`.
    pub(crate) redrive: Option<(u64, Option<&'a str>)>,
}

/// Inserts a running v2 run and its start event, after the size checks: a
/// child names its `parent`; a run that continues another (continue-as-new)
/// names it as `continued_from`, in its row and its `WorkflowStarted`.
pub(crate) fn insert_run(
    conn: &Connection,
    limits: &StructuralLimits,
    start: &StartRun,
    parent: Option<RunId>,
    continued_from: Option<RunId>,
) -> Result<RunId, Error> {
    insert_run_with(
        conn,
        limits,
        start,
        parent,
        continued_from,
        RunOptions::default(),
    )
}

/// As [`insert_run`], with the start's [`RunOptions`]. The run row is
/// written with its history already one event long (the `WorkflowStarted`
/// inserted after it, at sequence 0), as [`append_event`] would leave it.
pub(crate) fn insert_run_with(
    conn: &Connection,
    limits: &StructuralLimits,
    start: &StartRun,
    parent: Option<RunId>,
    continued_from: Option<RunId>,
    options: RunOptions<'_>,
) -> Result<RunId, Error> {
    let row = NewRun::checked(limits, start, parent, continued_from, options)?;
    let run = RunId(conn.insert_returning_id(
        "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, origin, \
         parent_run_id, memo, search_attributes, created_at_ms, continued_from_run_id, \
         history_length, history_bytes, start_request_id, execution_timeout_seconds, \
         run_timeout_seconds, deadline_at_ms, deadline_kind, resume_step_sequence, \
         redrive_request_id) \
         VALUES (?1, ?2, ?3, ?4, 'running', 'v2', ?5, ?6, ?7, ?8, ?9, 1, ?10, ?11, ?12, ?13, \
         ?14, ?15, ?16, ?17)",
        &row.columns(start)[..],
    )?);
    insert_event_row(
        conn,
        run,
        0,
        EventType::WorkflowStarted,
        &row.started_event,
        None,
    )?;
    Ok(run)
}

/// A new run's row as [`insert_run_with`] writes it, checked and
/// serialized but not yet written: what a start batch on SQLite stages and
/// then writes with its neighbours' in one statement per table
/// ([`crate::store::start_stage`]).
#[derive(Debug, Clone)]
pub(crate) struct NewRun {
    parent: Option<i64>,
    memo: String,
    search: String,
    created_at_ms: i64,
    continued_from: Option<i64>,
    history_bytes: i64,
    start_request_id: Option<String>,
    execution_timeout_seconds: Option<i64>,
    run_timeout_seconds: Option<i64>,
    deadline_at_ms: Option<i64>,
    deadline_kind: Option<&'static str>,
    resume_step_sequence: Option<i64>,
    redrive_request_id: Option<String>,
    /// The `WorkflowStarted` event's stored text.
    pub(crate) started_event: String,
}

impl NewRun {
    /// The run's row after the size checks (arguments, memo, search
    /// attributes), with its `WorkflowStarted` serialized.
    pub(crate) fn checked(
        limits: &StructuralLimits,
        start: &StartRun,
        parent: Option<RunId>,
        continued_from: Option<RunId>,
        options: RunOptions<'_>,
    ) -> Result<NewRun, Error> {
        let run_ref = RunRef {
            workflow_run_id: &start.workflow_id,
            workflow_type: &start.workflow_type,
        };
        let arguments = serde_json::to_string(&start.arguments)?;
        check_size(
            limits,
            LimitKind::PayloadSizeBytes,
            arguments.len(),
            &run_ref,
        )?;
        let memo = serde_json::to_string(&start.memo)?;
        check_size(limits, LimitKind::MemoSizeBytes, memo.len(), &run_ref)?;
        let search = serde_json::to_string(&start.search_attributes)?;
        check_size(
            limits,
            LimitKind::SearchAttributeSizeBytes,
            search.len(),
            &run_ref,
        )?;
        let mut payload = Map::new();
        payload.insert("workflow_id".into(), start.workflow_id.clone().into());
        payload.insert("workflow_type".into(), start.workflow_type.clone().into());
        payload.insert("namespace".into(), start.namespace.clone().into());
        payload.insert("task_queue".into(), start.task_queue.clone().into());
        payload.insert("arguments".into(), start.arguments.clone());
        if let Some(parent) = parent {
            payload.insert("parent_run_id".into(), parent.0.into());
        }
        if let Some(previous) = continued_from {
            // As the wire names runs (a string), so the SDKs compare it as-is.
            payload.insert(
                "continued_from_run_id".into(),
                previous.0.to_string().into(),
            );
        }
        if let Some((resume, _)) = options.redrive {
            payload.insert("recovery_kind".into(), "redrive".into());
            payload.insert("resume_step_sequence".into(), resume.into());
        }
        let started_event =
            crate::store::payload_references::history_text(&Value::Object(payload))?;
        let created_at_ms = if options.created_at_ms == 0 {
            now_ms()
        } else {
            options.created_at_ms
        };
        Ok(NewRun {
            parent: parent.map(|p| p.0),
            memo,
            search,
            created_at_ms,
            continued_from: continued_from.map(|r| r.0),
            history_bytes: to_i64(EventType::WorkflowStarted.as_str().len() + started_event.len()),
            start_request_id: options.start_request_id.map(str::to_owned),
            execution_timeout_seconds: options.execution_timeout_seconds.map(to_i64),
            run_timeout_seconds: options.run_timeout_seconds.map(to_i64),
            deadline_at_ms: options.deadline.map(|(at, _)| at),
            deadline_kind: options.deadline.map(|(_, kind)| kind),
            resume_step_sequence: options.redrive.map(|(resume, _)| to_i64(resume)),
            redrive_request_id: options
                .redrive
                .and_then(|(_, request)| request.map(str::to_owned)),
            started_event,
        })
    }

    /// The row's 17 bound columns, in the order of [`insert_run_with`]'s
    /// statement (`status`, `origin` and `history_length` are literals).
    pub(crate) fn columns<'a>(&'a self, start: &'a StartRun) -> [&'a dyn ToSql; 17] {
        [
            &start.workflow_id,
            &start.workflow_type,
            &start.namespace,
            &start.task_queue,
            &self.parent,
            &self.memo,
            &self.search,
            &self.created_at_ms,
            &self.continued_from,
            &self.history_bytes,
            &self.start_request_id,
            &self.execution_timeout_seconds,
            &self.run_timeout_seconds,
            &self.deadline_at_ms,
            &self.deadline_kind,
            &self.resume_step_sequence,
            &self.redrive_request_id,
        ]
    }
}

/// A run row's stored `status` and `origin` columns, parsed; a value this
/// engine never writes is a corrupt row, named with its run.
pub(crate) fn status_and_origin(
    run: RunId,
    status: &str,
    origin: &str,
) -> Result<(RunStatus, RunOrigin), Error> {
    let status = RunStatus::parse(status)
        .ok_or_else(|| Error::Corrupt(format!("run {run} has status {status:?}")))?;
    let origin = match origin {
        "v2" => RunOrigin::V2,
        "v1_projection" => RunOrigin::V1Projection,
        other => return Err(Error::Corrupt(format!("run {run} has origin {other:?}"))),
    };
    Ok((status, origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each written-out statement is the one `bump` formatted from the
    /// counter's column before: a typo in a column fails here, not only
    /// when that counter first moves.
    #[test]
    fn each_counter_bump_is_the_statement_it_was_formatted_as() {
        for pending in [
            Pending::Activity,
            Pending::Timer,
            Pending::Child,
            Pending::Signal,
            Pending::Update,
        ] {
            let column = pending.column();
            assert_eq!(
                pending.bump_sql(),
                format!("UPDATE runs SET {column} = {column} + ?1 WHERE id = ?2")
            );
        }
    }
}
