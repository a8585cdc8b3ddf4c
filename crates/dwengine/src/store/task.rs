//! The workflow-facing side of a task: commands, replay and the executor checks.
//!
//! Workflow code is deterministic and re-runs from the start on every task.
//! Each command it issues is first matched against the run's recorded
//! command events by position (replay: nothing is written and nothing
//! counts); once the recorded commands are exhausted, commands write new
//! rows and events. Every command call is one iteration of the executor's
//! main loop, and each iteration starts by checking the number of events
//! this task has written against `history_transaction_size`. Limits are
//! checked before any row of the operation exists, and a limit hit is
//! sticky: a workflow that swallows the error still fails the task.

use std::time::Duration;

use crate::store::db::{params, Connection, OptionalExtension};
use dwpolicy::{ApproachingLimit, LimitKind, RunRef, StructuralLimitExceeded, StructuralLimits};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::store::command::{ChildWorkflow, Command, CommandOutput};
use crate::store::error::Error;
use crate::store::model::{ActivityId, EventType, PendingCounts, RunId, StartRun, TimerId};
use crate::store::rows::{
    append_event, bump, decode_map, insert_run, to_i64, to_u64, Pending, RunHead,
};

/// Workflow code's view of one workflow task.
pub struct Task<'a> {
    conn: &'a Connection,
    limits: &'a StructuralLimits,
    head: RunHead,
    run_label: String,
    replay_len: u64,
    cursor: u64,
    new_events: u64,
    failed: Option<StructuralLimitExceeded>,
    warnings: Vec<ApproachingLimit>,
    memo: Option<Map<String, Value>>,
    search_attributes: Option<Map<String, Value>>,
}

/// What a finished task leaves for the executor.
pub(crate) struct TaskParts {
    pub head: RunHead,
    pub new_events: u64,
    pub replayed: u64,
    pub warnings: Vec<ApproachingLimit>,
}

impl<'a> Task<'a> {
    pub(crate) fn new(
        conn: &'a Connection,
        limits: &'a StructuralLimits,
        head: RunHead,
    ) -> Result<Self, Error> {
        let recorded: i64 = conn
            .prepare_cached("SELECT command_count FROM runs WHERE id = ?1")?
            .query_row([head.id.0], |row| row.get(0))?;
        Ok(Task {
            conn,
            limits,
            run_label: head.id.to_string(),
            head,
            replay_len: to_u64(recorded),
            cursor: 0,
            new_events: 0,
            failed: None,
            warnings: Vec::new(),
            memo: None,
            search_attributes: None,
        })
    }

    pub(crate) fn into_parts(self) -> TaskParts {
        TaskParts {
            head: self.head,
            new_events: self.new_events,
            replayed: self.cursor.min(self.replay_len),
            warnings: self.warnings,
        }
    }

    /// The run this task belongs to.
    pub fn run_id(&self) -> RunId {
        self.head.id
    }

    /// Whether the next command will be answered from recorded history.
    pub fn is_replaying(&self) -> bool {
        self.cursor < self.replay_len
    }

    /// Events this task has written so far (replay writes none).
    pub fn new_events(&self) -> u64 {
        self.new_events
    }

    /// The run's open items, including this task's.
    pub fn pending(&self) -> PendingCounts {
        self.head.pending
    }

    /// Schedules an activity after the pending-count and payload checks.
    pub fn schedule_activity(
        &mut self,
        activity_type: &str,
        arguments: &impl Serialize,
    ) -> Result<ActivityId, Error> {
        self.iteration()?;
        let arguments = serde_json::to_value(arguments)?;
        self.activity_leaf(activity_type, &arguments)
    }

    /// Starts a timer after the pending-count check.
    pub fn start_timer(&mut self, delay: Duration) -> Result<TimerId, Error> {
        self.iteration()?;
        self.timer_leaf(delay)
    }

    /// Starts a child run after the pending-count check and the argument
    /// check, which runs before the child's run row exists.
    pub fn start_child(&mut self, child: &ChildWorkflow) -> Result<RunId, Error> {
        self.iteration()?;
        self.child_leaf(child)
    }

    /// Fans out `commands`; their leaf count is checked against
    /// `command_batch_size` before any of them is scheduled. As the
    /// reference's `batchSize > limit` guard, the batch fails only when it has
    /// more leaves than the limit: exactly 1,000 pass at 1,000.
    pub fn all(&mut self, commands: &[Command]) -> Result<Vec<CommandOutput>, Error> {
        self.iteration()?;
        let leaves = commands.iter().map(Command::leaves).sum();
        self.check(LimitKind::CommandBatchSize, leaves)?;
        self.fan_out(commands)
    }

    fn fan_out(&mut self, commands: &[Command]) -> Result<Vec<CommandOutput>, Error> {
        let mut outputs = Vec::with_capacity(commands.len());
        for command in commands {
            outputs.push(match command {
                Command::Activity {
                    activity_type,
                    arguments,
                } => CommandOutput::Activity(self.activity_leaf(activity_type, arguments)?),
                Command::Timer { delay } => CommandOutput::Timer(self.timer_leaf(*delay)?),
                Command::Child(child) => CommandOutput::Child(self.child_leaf(child)?),
                Command::All(inner) => CommandOutput::All(self.fan_out(inner)?),
            });
        }
        Ok(outputs)
    }

    /// Merges `entries` into the memo (`null` removes a key), then checks the
    /// encoded result against `memo_size_bytes` before saving it.
    pub fn upsert_memo(&mut self, entries: Map<String, Value>) -> Result<(), Error> {
        self.upsert(Metadata::Memo, entries)
    }

    /// As [`Task::upsert_memo`], for search attributes and `search_attribute_size_bytes`.
    pub fn upsert_search_attributes(&mut self, entries: Map<String, Value>) -> Result<(), Error> {
        self.upsert(Metadata::SearchAttributes, entries)
    }

    /// Runs `effect` once and records its value; replay returns the recorded value.
    pub fn side_effect<T, F>(&mut self, effect: F) -> Result<T, Error>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> T,
    {
        self.iteration()?;
        if let Some(recorded) = self.replay(EventType::SideEffectRecorded)? {
            let value = recorded.get("value").cloned().unwrap_or(Value::Null);
            return Ok(serde_json::from_value(value)?);
        }
        let value = effect();
        self.write_command(
            EventType::SideEffectRecorded,
            &json!({ "value": serde_json::to_value(&value)? }),
        )?;
        Ok(value)
    }

    fn activity_leaf(
        &mut self,
        activity_type: &str,
        arguments: &Value,
    ) -> Result<ActivityId, Error> {
        if let Some(recorded) = self.replay(EventType::ActivityScheduled)? {
            self.expect_same(&recorded, "activity_type", activity_type)?;
            return recorded_id(&recorded, "activity_id").map(ActivityId);
        }
        self.check_pending(Pending::Activity)?;
        let text = serde_json::to_string(arguments)?;
        self.check(LimitKind::PayloadSizeBytes, len_u64(text.len()))?;
        let id: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO activities (run_id, activity_type, arguments, status) \
                 VALUES (?1, ?2, ?3, 'scheduled') RETURNING id",
            )?
            .query_row(params![self.head.id.0, activity_type, text], |r| r.get(0))?;
        self.add_pending(Pending::Activity)?;
        let event =
            json!({ "activity_id": id, "activity_type": activity_type, "arguments": arguments });
        self.write_command(EventType::ActivityScheduled, &event)?;
        Ok(ActivityId(id))
    }

    fn timer_leaf(&mut self, delay: Duration) -> Result<TimerId, Error> {
        if let Some(recorded) = self.replay(EventType::TimerStarted)? {
            return recorded_id(&recorded, "timer_id").map(TimerId);
        }
        self.check_pending(Pending::Timer)?;
        let delay_ms = to_i64(delay.as_millis());
        let id: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO timers (run_id, delay_ms, status) VALUES (?1, ?2, 'pending') \
                 RETURNING id",
            )?
            .query_row(params![self.head.id.0, delay_ms], |r| r.get(0))?;
        self.add_pending(Pending::Timer)?;
        self.write_command(
            EventType::TimerStarted,
            &json!({ "timer_id": id, "delay_ms": delay_ms }),
        )?;
        Ok(TimerId(id))
    }

    fn child_leaf(&mut self, child: &ChildWorkflow) -> Result<RunId, Error> {
        if let Some(recorded) = self.replay(EventType::ChildWorkflowStarted)? {
            self.expect_same(&recorded, "workflow_type", &child.workflow_type)?;
            return recorded_id(&recorded, "child_run_id").map(RunId);
        }
        self.check_pending(Pending::Child)?;
        let size = serde_json::to_string(&child.arguments)?.len();
        self.check(LimitKind::PayloadSizeBytes, len_u64(size))?;
        let (namespace, task_queue): (String, String) = self.conn.query_row(
            "SELECT namespace, task_queue FROM runs WHERE id = ?1",
            [self.head.id.0],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let start = StartRun {
            workflow_id: child.workflow_id.clone(),
            workflow_type: child.workflow_type.clone(),
            namespace,
            task_queue,
            arguments: child.arguments.clone(),
            ..StartRun::default()
        };
        let child_run = insert_run(self.conn, self.limits, &start, Some(self.head.id), None)?;
        crate::store::cohorts::follow_cohort(self.conn, child_run, self.head.id)?;
        self.conn
            .prepare_cached(
                "INSERT INTO children (parent_run_id, child_run_id, status) VALUES (?1, ?2, 'open')",
            )?
            .execute(params![self.head.id.0, child_run.0])?;
        self.add_pending(Pending::Child)?;
        let event = json!({
            "child_run_id": child_run.0,
            "workflow_id": child.workflow_id,
            "workflow_type": child.workflow_type,
        });
        self.write_command(EventType::ChildWorkflowStarted, &event)?;
        Ok(child_run)
    }

    fn upsert(&mut self, which: Metadata, entries: Map<String, Value>) -> Result<(), Error> {
        self.iteration()?;
        if self.replay(which.event())?.is_some() {
            return Ok(());
        }
        let cached = match which {
            Metadata::Memo => &mut self.memo,
            Metadata::SearchAttributes => &mut self.search_attributes,
        };
        let mut merged = match cached.take() {
            Some(map) => map,
            None => {
                let text: String = self.conn.query_row(
                    &format!("SELECT {} FROM runs WHERE id = ?1", which.column()),
                    [self.head.id.0],
                    |row| row.get(0),
                )?;
                decode_map(&text)?
            }
        };
        let before = merged.clone();
        for (key, value) in &entries {
            if value.is_null() {
                merged.remove(key);
            } else {
                merged.insert(key.clone(), value.clone());
            }
        }
        let text = serde_json::to_string(&merged)?;
        if let Err(e) = self.check(which.limit(), len_u64(text.len())) {
            self.put_cached(which, before);
            return Err(e);
        }
        self.conn
            .prepare_cached(&format!(
                "UPDATE runs SET {} = ?2 WHERE id = ?1",
                which.column()
            ))?
            .execute(params![self.head.id.0, text])?;
        self.put_cached(which, merged);
        self.write_command(which.event(), &json!({ "entries": entries }))
    }

    fn put_cached(&mut self, which: Metadata, map: Map<String, Value>) {
        match which {
            Metadata::Memo => self.memo = Some(map),
            Metadata::SearchAttributes => self.search_attributes = Some(map),
        }
    }

    /// The start of one main-loop iteration: a recorded failure ends the task,
    /// and the events written so far must be under `history_transaction_size`.
    pub(crate) fn iteration(&mut self) -> Result<(), Error> {
        if let Some(exceeded) = self.failed {
            return Err(exceeded.into());
        }
        self.check(LimitKind::HistoryTransactionSize, self.new_events)
    }

    fn check_pending(&mut self, pending: Pending) -> Result<(), Error> {
        self.check(pending.limit_kind(), pending.get(&self.head.pending))
    }

    fn check(&mut self, kind: LimitKind, value: u64) -> Result<(), Error> {
        let run = RunRef {
            workflow_run_id: &self.run_label,
            workflow_type: &self.head.workflow_type,
        };
        match self.limits.check(kind, value, &run) {
            Ok(None) => Ok(()),
            Ok(Some(warning)) => {
                // One warning per kind per task: a fan-out past the threshold
                // would otherwise log once per scheduled item.
                if !self.warnings.iter().any(|w| w.limit_kind == kind) {
                    warning.emit();
                    self.warnings.push(warning);
                }
                Ok(())
            }
            Err(exceeded) => {
                self.failed = Some(exceeded);
                Err(exceeded.into())
            }
        }
    }

    fn add_pending(&mut self, pending: Pending) -> Result<(), Error> {
        bump(self.conn, self.head.id, pending, 1)?;
        *pending.slot(&mut self.head.pending) += 1;
        Ok(())
    }

    /// The recorded payload of the next command, if history has one.
    fn replay(&mut self, issued: EventType) -> Result<Option<Value>, Error> {
        if self.cursor >= self.replay_len {
            return Ok(None);
        }
        let index = self.cursor;
        let (recorded, payload): (String, String) = self
            .conn
            .prepare_cached(
                "SELECT event_type, payload FROM history_events WHERE run_id = ?1 AND command_index = ?2",
            )?
            .query_row(params![self.head.id.0, to_i64(index)], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?
            .ok_or_else(|| Error::Corrupt(format!("run {} lacks command {index}", self.head.id)))?;
        if recorded != issued.as_str() {
            return Err(Error::Nondeterminism {
                index,
                recorded,
                issued: issued.as_str().to_owned(),
            });
        }
        self.cursor += 1;
        Ok(Some(crate::store::payload_references::history_payload(
            &payload,
        )?))
    }

    fn expect_same(&self, recorded: &Value, field: &str, issued: &str) -> Result<(), Error> {
        let was = recorded
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default();
        if was == issued {
            return Ok(());
        }
        Err(Error::Nondeterminism {
            index: self.cursor.saturating_sub(1),
            recorded: format!("{field} {was}"),
            issued: format!("{field} {issued}"),
        })
    }

    fn write_command(&mut self, event: EventType, payload: &Value) -> Result<(), Error> {
        append_event(self.conn, self.head.id, event, payload, true)?;
        self.new_events += 1;
        Ok(())
    }

    /// The structural limit this task hit, if any.
    pub(crate) fn failure(&self) -> Option<StructuralLimitExceeded> {
        self.failed
    }
}

#[derive(Clone, Copy)]
enum Metadata {
    Memo,
    SearchAttributes,
}

impl Metadata {
    fn column(self) -> &'static str {
        match self {
            Metadata::Memo => "memo",
            Metadata::SearchAttributes => "search_attributes",
        }
    }

    fn limit(self) -> LimitKind {
        match self {
            Metadata::Memo => LimitKind::MemoSizeBytes,
            Metadata::SearchAttributes => LimitKind::SearchAttributeSizeBytes,
        }
    }

    fn event(self) -> EventType {
        match self {
            Metadata::Memo => EventType::MemoUpserted,
            Metadata::SearchAttributes => EventType::SearchAttributesUpserted,
        }
    }
}

fn recorded_id(recorded: &Value, field: &str) -> Result<i64, Error> {
    recorded
        .get(field)
        .and_then(Value::as_i64)
        .ok_or_else(|| Error::Corrupt(format!("recorded command lacks {field}")))
}

fn len_u64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}
