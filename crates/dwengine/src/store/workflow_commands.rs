//! A workflow task's completion as the wire protocol sends it: only the
//! commands the workflow issued since its last task, applied in one
//! transaction.
//!
//! Each command that creates an item takes the run's next workflow
//! `sequence` (the SDK's replay binds results to it). Before any row of an
//! operation exists, its structural limit is checked; a limit hit rolls the
//! whole completion back and fails the run with a `structural_limit`
//! failure, visible in describe and in a `WorkflowFailed` event, exactly as
//! the executor does for in-process workflow code. Completion is fenced: only
//! the worker holding the lease, on the attempt it was given, can complete.

use crate::store::admission::release_held_signals;
use crate::store::db::{params, Connection, OptionalExtension};
use dwpolicy::{ApproachingLimit, LimitKind, RunRef, StructuralLimitExceeded, StructuralLimits};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::store::avro_value;
use crate::store::children;
use crate::store::completion::{fail_structural, finish_run, FailureRow};
use crate::store::connection::Store;
use crate::store::deadlines;
use crate::store::dispatch::{enqueue_workflow, has_ready_workflow_task, leased_to, TaskKind};
use crate::store::error::Error;
use crate::store::local_activities::{self, LocalOutcome};
use crate::store::model::{EventType, RunId, RunStatus, StartRun};
use crate::store::protocol::codec_of;
pub use crate::store::protocol::{ParallelGroup, RetryPolicy};
use crate::store::rows::check_size;
use crate::store::rows::{
    append_event, bump, decode_map, insert_run, load_head, load_head_for_commands, load_run,
    now_ms, CommandRow, Pending, RunHead,
};
use crate::store::selection_cancel::{self, Cancelled};
use crate::store::sessions::SessionOptions;
use crate::store::signal_waits;
use crate::store::streams::{self, StreamAppend, StreamDirective, StreamOrigin, StreamPolicy};
use crate::store::timers::{self, ArmedTimer, CONDITION_TIMEOUT};
use crate::store::tx::WriteTx;

/// One command of a workflow-task completion.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkflowCommand {
    /// Schedule an activity.
    ScheduleActivity {
        /// Its type.
        activity_type: String,
        /// Its arguments (an opaque payload envelope).
        #[serde(default)]
        arguments: Value,
        /// The task queue its workers poll (the run's by default).
        #[serde(default)]
        queue: Option<String>,
        /// Retries.
        #[serde(default)]
        retry_policy: Option<RetryPolicy>,
        /// Seconds one attempt may run (its lease; expiry is a failed attempt).
        #[serde(default)]
        start_to_close_timeout: Option<u64>,
        /// Seconds the whole activity may take, retries included.
        #[serde(default)]
        schedule_to_close_timeout: Option<u64>,
        /// Seconds each attempt may wait in the queue for a worker.
        #[serde(default)]
        schedule_to_start_timeout: Option<u64>,
        /// Seconds an attempt may go without a heartbeat.
        #[serde(default)]
        heartbeat_timeout: Option<u64>,
        /// The worker session it must run in (`WorkerSessionOptions` as the
        /// SDKs send them), if any.
        #[serde(default)]
        worker_session: Option<Value>,
        /// What a cooperative cancellation delivered at it does
        /// (`try_cancel` when absent; `wait_cancellation_completed` parks
        /// the delivery while a running attempt cleans up).
        #[serde(default)]
        cancellation_policy: Option<String>,
        /// Parallel group membership.
        #[serde(flatten)]
        group: ParallelGroup,
    },
    /// Record a local activity the worker ran inline (never dispatched).
    RecordLocalActivity {
        /// Its type.
        activity_type: String,
        /// Its arguments (an opaque payload envelope).
        #[serde(default)]
        arguments: Value,
        /// What the worker's attempts came to.
        #[serde(flatten)]
        reported: LocalOutcome,
        /// Parallel group membership.
        #[serde(flatten)]
        group: ParallelGroup,
    },
    /// A local activity of an `all()` group, scheduled by a prepared
    /// checkpoint (`checkpoint-group`) before its callback runs. Never a
    /// completion command: only `store::prepared_local` takes it.
    PrepareLocalActivity {
        /// As authored.
        #[serde(flatten)]
        descriptor: crate::store::prepared_local_rows::LocalDescriptor,
    },
    /// Start a durable timer.
    StartTimer {
        /// Whole seconds until it fires.
        delay_seconds: u64,
        /// Parallel group membership.
        #[serde(flatten)]
        group: ParallelGroup,
    },
    /// Block on a workflow-evaluated condition (re-issued while it stays false).
    OpenConditionWait {
        /// The SDK's identity of this authored wait; every `ConditionWait*`
        /// event repeats it (the Rust SDK's replay requires it).
        #[serde(default)]
        condition_wait_occurrence_id: Option<String>,
        /// A stable name for the wait.
        #[serde(default)]
        condition_key: Option<String>,
        /// The predicate's fingerprint.
        #[serde(default)]
        condition_definition_fingerprint: Option<String>,
        /// Seconds until the wait times out.
        #[serde(default)]
        timeout_seconds: Option<u64>,
    },
    /// Block until a signal of one name is applied (the SDKs' `wait_signal`).
    OpenSignalWait {
        /// The signal's name.
        signal_name: String,
        /// Parallel group membership.
        #[serde(flatten)]
        group: ParallelGroup,
    },
    /// Record the version a workflow chose for a change (`get_version`,
    /// `patched`); replay answers the call from it.
    RecordVersionMarker {
        /// The change's stable id.
        change_id: String,
        /// The version chosen.
        version: i32,
        /// The oldest version the code still supports.
        min_supported: i32,
        /// The newest version the code supports.
        max_supported: i32,
    },
    /// Record a side effect's value.
    RecordSideEffect {
        /// The value (an opaque payload).
        #[serde(default)]
        result: Value,
        /// A workflow stream append or close applied with it.
        #[serde(default)]
        workflow_stream: Option<StreamDirective>,
    },
    /// Merge attributes into the run's search attributes (`null` removes
    /// one). The server checked names, types and sizes at the boundary; the
    /// merged set is checked against `search_attribute_size_bytes` here.
    UpsertSearchAttributes {
        /// The attributes to set or (with `null`) remove.
        attributes: Map<String, Value>,
        /// Their declared types (`keyword`, `int`, …), when the SDK sends
        /// them (protocol 1.16's typed search attributes): recorded on the
        /// event, which replay checks them against.
        #[serde(default)]
        attribute_types: Option<Map<String, Value>>,
    },
    /// Close the run as continued and start a new run of the same workflow
    /// id, with fresh history, in the same transaction (the SDKs'
    /// `continue_as_new`).
    ContinueAsNew {
        /// The new run's arguments (an opaque payload envelope).
        #[serde(default)]
        arguments: Value,
        /// The new run's workflow type (this run's when absent).
        #[serde(default)]
        workflow_type: Option<String>,
        /// The new run's task queue (this run's when absent).
        #[serde(default)]
        queue: Option<String>,
    },
    /// Merge entries into the run's memo (`null` removes one): both SDKs
    /// send the patch as an Avro payload envelope; the merged memo is
    /// checked against `memo_size_bytes` before it is stored.
    UpsertMemo {
        /// The patch, an Avro payload envelope of a string-keyed map.
        entries: Value,
    },
    /// Start a child workflow: a run of its own, linked to this one, whose
    /// outcome comes back as a `ChildRun*` event and a workflow task.
    StartChildWorkflow {
        /// The child's workflow type.
        workflow_type: String,
        /// Its arguments (an opaque payload envelope).
        #[serde(default)]
        arguments: Value,
        /// The task queue its workers poll (this run's when absent).
        #[serde(default)]
        queue: Option<String>,
        /// What happens to the child when this run closes first
        /// (`abandon` when absent).
        #[serde(default)]
        parent_close_policy: Option<String>,
        /// Recorded for replay (cancellation scopes are not applied).
        #[serde(default)]
        cancellation_policy: Option<String>,
        /// Retries of a failed child run.
        #[serde(default)]
        retry_policy: Option<RetryPolicy>,
        /// Seconds the child's whole execution may take.
        #[serde(default)]
        execution_timeout_seconds: Option<u64>,
        /// Seconds one run of the child may take.
        #[serde(default)]
        run_timeout_seconds: Option<u64>,
        /// Parallel group membership.
        #[serde(flatten)]
        group: ParallelGroup,
    },
    /// Start a Nexus service operation from workflow code (see
    /// `store::service_calls`): resolved in the service catalog, its bound
    /// workflow started, its outcome delivered as `ServiceCall*` events.
    StartServiceOperation {
        /// The catalog endpoint.
        endpoint_name: String,
        /// The service under it.
        service_name: String,
        /// The operation under that.
        operation_name: String,
        /// The catalog's namespace (this run's when absent).
        #[serde(default)]
        namespace: Option<String>,
        /// The caller's namespace: the run's own, when sent.
        #[serde(default)]
        caller_namespace: Option<String>,
        /// The caller's key, recorded with the call.
        #[serde(default)]
        idempotency_key: Option<String>,
        /// `sync` or `async`.
        #[serde(default)]
        mode_override: Option<String>,
        /// `accepted` or `completed`.
        #[serde(default)]
        wait_for: Option<String>,
        /// The request's codec.
        #[serde(default)]
        payload_codec: Option<String>,
        /// The request (an encoded blob or a payload envelope).
        #[serde(default)]
        request_payload: Value,
        /// The started workflow's queue (the binding's when absent).
        #[serde(default)]
        queue: Option<String>,
        /// The operation's workflow id (`service-call-<id>` when absent).
        #[serde(default)]
        target_workflow_instance_id: Option<String>,
        /// The open run of that workflow the call must attach to.
        #[serde(default)]
        target_workflow_run_id: Option<String>,
        /// `reject_duplicate` (the default) or `return_existing_active`.
        #[serde(default)]
        duplicate_start_policy: Option<String>,
        /// Recorded with the call, checked as a start's.
        #[serde(default)]
        business_key: Option<String>,
        /// The started workflow's memo.
        #[serde(default)]
        memo: Option<Map<String, Value>>,
        /// The started workflow's search attributes.
        #[serde(default)]
        search_attributes: Option<Map<String, Value>>,
    },
    /// Cancel a member of a resolved durable selection (a loser workflow
    /// code no longer needs); the member is named by its recorded identity
    /// fields (`selection_group_id`, `member_key`, `member_index`,
    /// `member_base_sequence`, `member_size`, `operation_kind`,
    /// `operation_identity`), checked against the run's history.
    CancelSelectionOperation {
        /// The command's fields as sent.
        #[serde(flatten)]
        fields: Map<String, Value>,
    },
    /// Complete the run.
    CompleteWorkflow {
        /// The result (an opaque payload envelope).
        #[serde(default)]
        result: Value,
    },
    /// Fail the run.
    FailWorkflow {
        /// Why.
        message: String,
        /// The exception's short type.
        #[serde(default)]
        exception_type: Option<String>,
        /// The exception's full class.
        #[serde(default)]
        exception_class: Option<String>,
        /// Structured details.
        #[serde(default)]
        exception: Option<Value>,
        /// Whether a retry could help.
        #[serde(default)]
        non_retryable: bool,
        /// The step whose activity failure ended the run unhandled (both
        /// SDKs send it with `failed_activity_execution_id`): recorded on
        /// `WorkflowFailed` when this run's history holds that activity's
        /// failure, the boundary a redrive resumes at.
        #[serde(default)]
        failed_step_sequence: Option<i64>,
        /// The failed activity's execution id, with `failed_step_sequence`.
        #[serde(default)]
        failed_activity_execution_id: Option<String>,
    },
    /// Resolve an accepted update with a result.
    CompleteUpdate {
        /// The update's id.
        update_id: String,
        /// Its result (an opaque payload envelope).
        #[serde(default)]
        result: Value,
    },
    /// Resolve an accepted update with a failure.
    FailUpdate {
        /// The update's id.
        update_id: String,
        /// Why.
        message: String,
        /// The exception's short type.
        #[serde(default)]
        exception_type: Option<String>,
    },
}

impl WorkflowCommand {
    /// Whether the command writes nothing but its own run's rows (and the
    /// trigger-kept counters), so a completion made of such commands may
    /// commit beside other writers in the run writer's batch
    /// ([`crate::store::db::Connection::begin_run_writes`]). A child, a
    /// service call, a continue-as-new, a search attribute, an update's
    /// caller, a worker session or a workflow stream reach beyond the
    /// run; a run's close reaching a parent or a caller is checked where
    /// it closes (`store::completion::finish_run`).
    pub fn stays_in_run(&self) -> bool {
        match self {
            WorkflowCommand::ScheduleActivity { worker_session, .. } => worker_session.is_none(),
            WorkflowCommand::RecordSideEffect {
                workflow_stream, ..
            } => workflow_stream.is_none(),
            WorkflowCommand::StartTimer { .. }
            | WorkflowCommand::OpenConditionWait { .. }
            | WorkflowCommand::OpenSignalWait { .. }
            | WorkflowCommand::RecordVersionMarker { .. }
            | WorkflowCommand::UpsertMemo { .. }
            | WorkflowCommand::CompleteWorkflow { .. }
            | WorkflowCommand::FailWorkflow { .. } => true,
            _ => false,
        }
    }
}

/// The command types [`WorkflowCommand`] reads, as they appear on the wire.
pub const SUPPORTED_COMMANDS: [&str; 17] = [
    "schedule_activity",
    "record_local_activity",
    "start_timer",
    "open_condition_wait",
    "open_signal_wait",
    "record_version_marker",
    "record_side_effect",
    "upsert_search_attributes",
    "upsert_memo",
    "start_child_workflow",
    "start_service_operation",
    "continue_as_new",
    "cancel_selection_operation",
    "complete_workflow",
    "fail_workflow",
    "complete_update",
    "fail_update",
];

/// Who may complete or fail a workflow task.
#[derive(Debug, Clone, Copy)]
pub struct WorkflowTaskFence<'a> {
    /// The worker the task was leased to.
    pub lease_owner: &'a str,
    /// The attempt it was given.
    pub attempt: u64,
}

/// Where a completion left the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkflowTaskCompletion {
    /// The run's status afterwards.
    pub run_status: RunStatus,
    /// New history events written.
    pub new_events: u64,
    /// Task queues that got new activity tasks.
    #[serde(skip)]
    pub activity_queues: Vec<String>,
    /// Whether another workflow task was queued.
    pub workflow_task_queued: bool,
    /// Other task queues (of the run's namespace) that got a workflow task:
    /// started children's, and a parent's this run's end resumed.
    #[serde(skip)]
    pub workflow_queues: Vec<String>,
    /// The structural limit that failed the run, if one did.
    pub structural_limit: Option<StructuralLimitExceeded>,
    /// The approaching-limit warnings the task wrote, at most one per kind.
    #[serde(skip)]
    pub warnings: Vec<ApproachingLimit>,
    /// The timers the task armed (for a queue driver that delivers them).
    #[serde(skip)]
    pub timers: Vec<ArmedTimer>,
}

impl Store {
    /// Applies a leased workflow task's new commands and ends the task.
    pub fn complete_workflow_task(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        commands: &[WorkflowCommand],
    ) -> Result<WorkflowTaskCompletion, Error> {
        let limits = self.config.limits;
        let tx = WriteTx::begin(&self.conn)?;
        // Beside other writers (the run writer's batch on PostgreSQL) a
        // completion holds its run's key and writes nothing beyond its run.
        if tx.claims_side_by_side()
            && (!commands.iter().all(WorkflowCommand::stays_in_run)
                || !self.lock_run_of_task(task_id)?)
        {
            return Err(Error::NeedsWriteLock);
        }
        let (run, watermark) = fenced_workflow_task(&tx, task_id, fence)?;
        let (head, row) = load_head_for_commands(&tx, run)?;
        if head.status != RunStatus::Running {
            release_held_signals(&tx, run)?;
            end_task(&tx, task_id)?;
            tx.commit()?;
            return Ok(WorkflowTaskCompletion {
                run_status: head.status,
                new_events: 0,
                activity_queues: Vec::new(),
                workflow_task_queued: false,
                workflow_queues: Vec::new(),
                structural_limit: None,
                warnings: Vec::new(),
                timers: Vec::new(),
            });
        }
        let streams = self.config.streams;
        let mut writer = CommandWriter::new(&tx, &limits, head, row)?;
        writer.streams = streams;
        writer.worker = Some(fence.lease_owner);
        match writer.apply_all(commands) {
            Ok(()) => {}
            Err(Error::StructuralLimit(exceeded)) => {
                // Dropping the transaction rolls back every command written.
                drop(writer);
                drop(tx);
                return self.fail_task_structurally(task_id, run, exceeded);
            }
            Err(e) => return Err(e),
        }
        let timers = std::mem::take(&mut writer.armed_timers);
        let (new_events, activity_queues, workflow_queues, follow_up, warnings) = writer.finish();
        // Signals that arrived during the task follow its commands' events.
        release_held_signals(&tx, run)?;
        process_seen_signals(&tx, run, watermark)?;
        crate::store::message_streams::release_carried(&tx, run)?;
        end_task(&tx, task_id)?;
        let head = load_head(&tx, run)?;
        let run_status = head.status;
        let workflow_task_queued = queue_follow_up(&tx, &head, follow_up)?;
        tx.commit()?;
        Ok(WorkflowTaskCompletion {
            run_status,
            new_events,
            activity_queues,
            workflow_task_queued,
            workflow_queues,
            structural_limit: None,
            warnings,
            timers,
        })
    }

    /// Ends a leased workflow task without commands: the worker waits for
    /// history it already has scheduled. Signals it saw count as processed.
    pub fn release_waiting_workflow_task(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
    ) -> Result<bool, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        if !self.lock_run_of_task(task_id)? {
            return Err(Error::NeedsWriteLock);
        }
        let (run, watermark) = fenced_workflow_task(&tx, task_id, fence)?;
        release_held_signals(&tx, run)?;
        process_seen_signals(&tx, run, watermark)?;
        crate::store::message_streams::release_carried(&tx, run)?;
        end_task(&tx, task_id)?;
        let queued = queue_follow_up(&tx, &load_head(&tx, run)?, false)?;
        tx.commit()?;
        Ok(queued)
    }

    /// Records a failed workflow-task attempt and hands the task back after
    /// a backoff that doubles per attempt (1 s, 2 s, … capped at 60 s), so a
    /// workflow that cannot replay does not spin its workers.
    pub fn fail_workflow_task_attempt(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        failure: &Value,
    ) -> Result<i64, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let (run, _) = fenced_workflow_task(&tx, task_id, fence)?;
        let streak_started = tx
            .prepare_cached("SELECT last_error IS NULL FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| r.get::<_, bool>(0))?;
        let exponent = u32::try_from(fence.attempt.saturating_sub(1).min(6)).unwrap_or(6);
        let backoff_ms = (1000_i64 << exponent).min(60_000);
        let retry_at = now_ms().saturating_add(backoff_ms);
        tx.prepare_cached(
            "UPDATE dispatch_tasks SET status = 'ready', lease_owner = NULL, \
             lease_expires_at_ms = NULL, poll_request_id = NULL, due_at_ms = ?2, last_error = ?3 \
             WHERE id = ?1",
        )?
        .execute(params![task_id, retry_at, serde_json::to_string(failure)?])?;
        // History shows the first failure of a streak; the attempts after
        // it only update the task row (describe shows the newest), so a
        // workflow that keeps failing cannot grow its history.
        if streak_started {
            let field = |name: &str| failure.get(name).cloned().unwrap_or(Value::Null);
            let payload = json!({
                "workflow_task_id": task_id.to_string(),
                "workflow_task_attempt": fence.attempt,
                "message": field("message"),
                "failure_type": field("type"),
                "failure_reason": field("reason"),
                "failure_category": "workflow_task",
            });
            append_event(&tx, run, EventType::WorkflowTaskFailed, &payload, false)?;
        }
        // The retried task's delivery carries the signals held for this one.
        release_held_signals(&tx, run)?;
        tx.commit()?;
        Ok(retry_at)
    }

    /// Extends a leased workflow task's lease by `lease_ms`.
    pub fn heartbeat_workflow_task(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
        lease_ms: i64,
    ) -> Result<i64, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        fenced_workflow_task(&tx, task_id, fence)?;
        let until = now_ms().saturating_add(lease_ms);
        tx.prepare_cached("UPDATE dispatch_tasks SET lease_expires_at_ms = ?2 WHERE id = ?1")?
            .execute(params![task_id, until])?;
        tx.commit()?;
        Ok(until)
    }

    /// Checks the fence of a leased workflow task and returns its run.
    pub fn fenced_workflow_run(
        &self,
        task_id: i64,
        fence: WorkflowTaskFence<'_>,
    ) -> Result<RunId, Error> {
        Ok(fenced_workflow_task(&self.conn, task_id, fence)?.0)
    }

    fn fail_task_structurally(
        &self,
        task_id: i64,
        run: RunId,
        exceeded: StructuralLimitExceeded,
    ) -> Result<WorkflowTaskCompletion, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let head = load_head(&tx, run)?;
        let resumed = fail_structural(&tx, &head, exceeded)?;
        end_task(&tx, task_id)?;
        tx.commit()?;
        Ok(WorkflowTaskCompletion {
            run_status: RunStatus::Failed,
            new_events: 1,
            activity_queues: Vec::new(),
            workflow_task_queued: false,
            workflow_queues: resumed.into_iter().collect(),
            structural_limit: Some(exceeded),
            warnings: Vec::new(),
            timers: Vec::new(),
        })
    }
}

/// What a prepared checkpoint wrote.
pub(crate) struct CheckpointWritten {
    /// Task queues that got activity tasks.
    pub activity_queues: Vec<String>,
    /// Task queues that got workflow tasks (children).
    pub workflow_queues: Vec<String>,
    /// Timers armed.
    pub timers: Vec<ArmedTimer>,
}

/// Writes a prepared checkpoint's commands (`store::prepared_local`) in the
/// caller's transaction under the same checks as a completion's, without
/// ending the workflow task; a structural limit is the caller's to apply.
pub(crate) fn checkpoint_commands(
    tx: &Connection,
    limits: &StructuralLimits,
    streams: StreamPolicy,
    head: RunHead,
    commands: &[WorkflowCommand],
) -> Result<CheckpointWritten, Error> {
    // The caller's head stands; only the command row is read here.
    let (_, row) = load_head_for_commands(tx, head.id)?;
    let mut writer = CommandWriter::new(tx, limits, head, row)?;
    writer.streams = streams;
    writer.apply_all(commands)?;
    let timers = std::mem::take(&mut writer.armed_timers);
    let (_, activity_queues, workflow_queues, _, _) = writer.finish();
    Ok(CheckpointWritten {
        activity_queues,
        workflow_queues,
        timers,
    })
}

/// The leased workflow task `task_id` if `fence` holds: its run and the
/// newest signal its delivery showed.
fn fenced_workflow_task(
    conn: &Connection,
    task_id: i64,
    fence: WorkflowTaskFence<'_>,
) -> Result<(RunId, Option<i64>), Error> {
    let row = leased_to(
        conn,
        task_id,
        TaskKind::Workflow,
        "workflow task",
        fence.lease_owner,
    )?;
    if row.attempt != fence.attempt {
        return Err(Error::StaleTask {
            task: task_id,
            reason: "workflow_task_attempt_mismatch",
        });
    }
    Ok((row.run, row.signal_watermark))
}

fn end_task(conn: &Connection, task_id: i64) -> Result<(), Error> {
    // The fence was checked when the task was read: no row count to read.
    conn.execute_queued(
        "UPDATE dispatch_tasks SET status = 'done' WHERE id = ?1",
        [task_id],
    )?;
    Ok(())
}

/// Marks the signals a delivery showed (id up to `watermark`) processed and
/// releases their pending count.
fn process_seen_signals(
    conn: &Connection,
    run: RunId,
    watermark: Option<i64>,
) -> Result<(), Error> {
    let Some(watermark) = watermark else {
        return Ok(());
    };
    // Their payloads leave the run's pending-payload budget with them.
    // A signal still held (a message carried into a continued run, which
    // the task never saw) is not processed by it.
    conn.prepare_cached(
        "UPDATE runs SET pending_payload_bytes = pending_payload_bytes - \
         (SELECT COALESCE(CAST(SUM(octet_length(payload)) AS BIGINT), 0) FROM signals \
          WHERE run_id = ?1 AND status = 'received' AND id <= ?2 AND held_event IS NULL) \
         WHERE id = ?1",
    )?
    .execute(params![run.0, watermark])?;
    let processed = conn
        .prepare_cached(
            "UPDATE signals SET status = 'processed' WHERE run_id = ?1 AND status = 'received' \
             AND id <= ?2 AND held_event IS NULL",
        )?
        .execute(params![run.0, watermark])?;
    if processed > 0 {
        bump(conn, run, Pending::Signal, -(processed as i64))?;
    }
    Ok(())
}

/// Whether the run holds signals or updates no worker has seen yet.
/// After a workflow task ended, queues the run's next one when the run
/// still runs and needs it (`follow_up`, or signals or updates it has not
/// handled, counted on `head`, the run as the task left it), and says
/// whether a workflow task is ready for it now: one queued while the
/// ended task was leased becomes leasable. A closed run has none (its
/// tasks ended with it), so nothing is read for it.
fn queue_follow_up(conn: &Connection, head: &RunHead, follow_up: bool) -> Result<bool, Error> {
    if head.status != RunStatus::Running {
        return Ok(false);
    }
    let unhandled = head.pending.signals > 0 || head.pending.updates > 0;
    if (follow_up || unhandled) && enqueue_workflow(conn, head.id)? {
        return Ok(true);
    }
    has_ready_workflow_task(conn, head.id)
}

/// Closes `head` as continued and starts its successor: a new run of the
/// same workflow id (and namespace) with `arguments`, the workflow type and
/// task queue the command names or the closing run's, and the closing run's
/// memo, search attributes, run timeout and what is left of its execution
/// timeout (the execution timeout covers the whole chain). The successor
/// starts with fresh history and zeroed structural counters, its first
/// workflow task queued; the two rows name each other, the successor's
/// `WorkflowStarted` names the closing run and the closing run's last
/// event, `WorkflowContinuedAsNew` at the command's `sequence`, names the
/// successor. One transaction: a failure leaves neither.
fn continue_as_new(
    tx: &Connection,
    limits: &StructuralLimits,
    head: &RunHead,
    sequence: i64,
    arguments: &Value,
    workflow_type: Option<&str>,
    queue: Option<&str>,
) -> Result<RunId, Error> {
    let closing = load_run(tx, head.id)?;
    let timeouts = deadlines::run_timeouts(tx, head.id)?;
    let start = StartRun {
        workflow_id: closing.workflow_id.clone(),
        workflow_type: workflow_type.unwrap_or(&closing.workflow_type).to_owned(),
        namespace: closing.namespace.clone(),
        task_queue: queue.unwrap_or(&closing.task_queue).to_owned(),
        arguments: arguments.clone(),
        memo: closing.memo.clone(),
        search_attributes: closing.search_attributes.clone(),
    };
    let next = insert_run(tx, limits, &start, head.parent, Some(head.id))?;
    crate::store::cohorts::follow_cohort(tx, next, head.id)?;
    // A child that continues stays its parent's child: the link moves on.
    children::follow_continue(tx, head.id, next)?;
    crate::store::service_calls::follow_continue(tx, head.id, next)?;
    // Input message streams go on where this run left them.
    crate::store::message_streams::carry(tx, head.id, next)?;
    let now = now_ms();
    let execution_left = timeouts.execution_deadline_at_ms.map(|deadline| {
        // Whole seconds, rounded up, at least one: an execution timeout
        // already past still times the successor out at its first sweep.
        u64::try_from((deadline - now).max(1_000))
            .unwrap_or(1_000)
            .div_ceil(1_000)
    });
    if execution_left.is_some() || timeouts.run_timeout_seconds.is_some() {
        deadlines::arm_run(tx, next, execution_left, timeouts.run_timeout_seconds)?;
    }
    tx.prepare_cached("UPDATE runs SET continued_to_run_id = ?2 WHERE id = ?1")?
        .execute(params![head.id.0, next.0])?;
    let payload = json!({
        "sequence": sequence,
        "continued_to_run_id": next.0.to_string(),
        "workflow_type": start.workflow_type,
        "task_queue": start.task_queue,
        "arguments": arguments,
        "payload_codec": codec_of(arguments),
        "closed_reason": "continued",
    });
    finish_run(
        tx,
        head,
        RunStatus::ContinuedAsNew,
        EventType::WorkflowContinuedAsNew,
        &payload,
        None,
    )?;
    enqueue_workflow(tx, next)?;
    Ok(next)
}

/// Whether `run`'s activity `activity` (its execution id, as history names
/// it) is scheduled at step `step` and ended failed.
fn failed_activity_at(
    tx: &Connection,
    run: RunId,
    step: i64,
    activity: &str,
) -> Result<bool, Error> {
    let Ok(id) = activity.parse::<i64>() else {
        return Ok(false);
    };
    Ok(tx
        .prepare_cached(
            "SELECT 1 FROM activities WHERE id = ?1 AND run_id = ?2 AND sequence = ?3 \
             AND status = 'failed'",
        )?
        .query_row(params![id, run.0, step], |_| Ok(()))
        .optional()?
        .is_some())
}

/// A memo key both SDKs accept: 1 to 64 of `A-Za-z0-9_.:-`, not an integer.
pub fn valid_memo_key(key: &str) -> bool {
    let digits = key.strip_prefix('-').unwrap_or(key);
    let integer = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
        && !integer
}

/// The memo patch an `upsert_memo` command carries: its Avro envelope
/// decoded to a non-empty map of keys both SDKs accept.
pub fn memo_patch(entries: &Value) -> Result<Map<String, Value>, Error> {
    let decoded =
        avro_value::decode_envelope(entries).map_err(|e| Error::InvalidMemo(e.to_string()))?;
    let Value::Object(patch) = decoded else {
        return Err(Error::InvalidMemo(
            "the entries must decode to a string-keyed map".into(),
        ));
    };
    if patch.is_empty() {
        return Err(Error::InvalidMemo("at least one entry is required".into()));
    }
    if let Some(key) = patch.keys().find(|k| !valid_memo_key(k)) {
        return Err(Error::InvalidMemo(format!(
            "the key {key:?} must match ^(?!-?[0-9]+$)[A-Za-z0-9_.:-]{{1,64}}$"
        )));
    }
    Ok(patch)
}

/// The condition wait a run is blocked on.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OpenWait {
    condition_wait_id: String,
    #[serde(default)]
    occurrence_id: Option<String>,
    sequence: i64,
    condition_key: Option<String>,
    condition_definition_fingerprint: Option<String>,
    timeout_timer: Option<i64>,
}

/// Writes one completion's commands under the executor's checks.
struct CommandWriter<'a> {
    tx: &'a Connection,
    limits: &'a StructuralLimits,
    streams: StreamPolicy,
    head: RunHead,
    run_label: String,
    namespace: String,
    task_queue: String,
    next_sequence: i64,
    new_events: u64,
    activity_queues: Vec<String>,
    workflow_queues: Vec<String>,
    follow_up: bool,
    open_wait: Option<OpenWait>,
    /// The approaching-limit warnings this task wrote, one per kind.
    warnings: Vec<ApproachingLimit>,
    /// The timers this task armed.
    armed_timers: Vec<ArmedTimer>,
    /// The worker completing the task (its lease owner), when known.
    worker: Option<&'a str>,
}

impl<'a> CommandWriter<'a> {
    /// A writer for the run `head` and `row` describe, as read in `tx`
    /// ([`load_head_for_commands`]).
    fn new(
        tx: &'a Connection,
        limits: &'a StructuralLimits,
        head: RunHead,
        row: CommandRow,
    ) -> Result<Self, Error> {
        let CommandRow {
            namespace,
            task_queue,
            command_count,
            open_condition_wait,
        } = row;
        let open_wait = open_condition_wait
            .map(|text| serde_json::from_str(&text))
            .transpose()?;
        Ok(CommandWriter {
            tx,
            limits,
            streams: StreamPolicy::default(),
            run_label: head.id.to_string(),
            head,
            namespace,
            task_queue,
            next_sequence: command_count + 1,
            new_events: 0,
            activity_queues: Vec::new(),
            workflow_queues: Vec::new(),
            follow_up: false,
            open_wait,
            warnings: Vec::new(),
            armed_timers: Vec::new(),
            worker: None,
        })
    }

    fn finish(self) -> (u64, Vec<String>, Vec<String>, bool, Vec<ApproachingLimit>) {
        (
            self.new_events,
            self.activity_queues,
            self.workflow_queues,
            self.follow_up,
            self.warnings,
        )
    }

    fn apply_all(&mut self, commands: &[WorkflowCommand]) -> Result<(), Error> {
        let updates_only = !commands.is_empty()
            && commands.iter().all(|c| {
                matches!(
                    c,
                    WorkflowCommand::CompleteUpdate { .. } | WorkflowCommand::FailUpdate { .. }
                )
            });
        if !updates_only {
            self.resolve_open_wait(commands.first())?;
        }
        // The SDK re-issues every member of a parallel group until the whole
        // group has resolved; members whose sequence is already recorded are
        // the same commands again and change nothing.
        let recorded = self.next_sequence;
        let fresh: Vec<&WorkflowCommand> = commands
            .iter()
            .filter(|c| c.group_sequence().is_none_or(|seq| seq >= recorded))
            .collect();
        // `command_batch_size` bounds the leaf operations of one `all()`
        // group (its outermost group, nested groups included), checked for
        // every group before any of its members is written; commands outside
        // a group are not a batch.
        let mut groups: Vec<(&str, u64)> = Vec::new();
        for id in fresh.iter().filter_map(|c| c.outer_group_id()) {
            match groups.iter_mut().find(|(group, _)| *group == id) {
                Some((_, leaves)) => *leaves += 1,
                None => groups.push((id, 1)),
            }
        }
        for (_, leaves) in groups {
            self.check(LimitKind::CommandBatchSize, leaves)?;
        }
        for command in fresh {
            // One executor iteration per command: the events this task has
            // written must stay under `history_transaction_size`.
            self.check(LimitKind::HistoryTransactionSize, self.new_events)?;
            if self.apply(command)? {
                break;
            }
        }
        Ok(())
    }

    /// A completion that does not re-issue the open wait proves the workflow
    /// got past it: the wait is recorded as satisfied and its timeout disarmed.
    fn resolve_open_wait(&mut self, first: Option<&WorkflowCommand>) -> Result<(), Error> {
        let Some(wait) = self.open_wait.clone() else {
            return Ok(());
        };
        if let Some(WorkflowCommand::OpenConditionWait {
            condition_wait_occurrence_id,
            condition_key,
            condition_definition_fingerprint,
            ..
        }) = first
        {
            // Another occurrence of the same condition (a loop) is a new wait.
            if *condition_wait_occurrence_id == wait.occurrence_id
                && *condition_key == wait.condition_key
                && *condition_definition_fingerprint == wait.condition_definition_fingerprint
            {
                return Ok(());
            }
        }
        if let Some(timer) = wait.timeout_timer {
            timers::cancel_quietly(self.tx, timer)?;
        }
        self.set_open_wait(None)?;
        let mut payload = json!({
            "sequence": wait.sequence,
            "condition_wait_id": wait.condition_wait_id,
            "condition_key": wait.condition_key,
            "condition_definition_fingerprint": wait.condition_definition_fingerprint,
        });
        if let Some(occurrence) = &wait.occurrence_id {
            payload["condition_wait_occurrence_id"] = occurrence.clone().into();
        }
        self.event(EventType::ConditionWaitSatisfied, &payload, false)
    }

    fn set_open_wait(&mut self, wait: Option<OpenWait>) -> Result<(), Error> {
        let text = wait.as_ref().map(serde_json::to_string).transpose()?;
        self.tx
            .prepare_cached("UPDATE runs SET open_condition_wait = ?2 WHERE id = ?1")?
            .execute(params![self.head.id.0, text])?;
        self.open_wait = wait;
        Ok(())
    }

    /// Applies one command; `true` when it closed the run.
    fn apply(&mut self, command: &WorkflowCommand) -> Result<bool, Error> {
        match command {
            WorkflowCommand::ScheduleActivity {
                activity_type,
                arguments,
                queue,
                retry_policy,
                start_to_close_timeout,
                schedule_to_close_timeout,
                schedule_to_start_timeout,
                heartbeat_timeout,
                worker_session,
                cancellation_policy,
                group,
            } => {
                self.check_pending(Pending::Activity)?;
                self.check_payload(arguments)?;
                let sequence = self.take_sequence();
                let queue = queue.clone().unwrap_or_else(|| self.task_queue.clone());
                // Checked when the completion was parsed; kept canonical.
                let session = worker_session
                    .as_ref()
                    .filter(|s| !s.is_null())
                    .and_then(|s| SessionOptions::from_wire(s, "worker_session").ok());
                let options = json!({
                    "retry_policy": retry_policy,
                    "start_to_close_timeout": start_to_close_timeout,
                    "schedule_to_close_timeout": schedule_to_close_timeout,
                    "schedule_to_start_timeout": schedule_to_start_timeout,
                    "heartbeat_timeout": heartbeat_timeout,
                    "parallel_group": (!group.is_empty()).then_some(group),
                    "worker_session": session.as_ref().map(SessionOptions::canonical),
                    "cancellation_policy": cancellation_policy,
                });
                let options = serde_json::to_string(&options)?;
                let id = self.tx.insert_returning_id(
                    "INSERT INTO activities (run_id, activity_type, arguments, status, sequence, options) \
                     VALUES (?1, ?2, ?3, 'scheduled', ?4, ?5)",
                    params![
                        self.head.id.0,
                        activity_type,
                        serde_json::to_string(arguments)?,
                        sequence,
                        options
                    ],
                )?;
                bump(self.tx, self.head.id, Pending::Activity, 1)?;
                self.head.pending.activities += 1;
                let now = now_ms();
                // Armed as it is written: ready now, its waiting timeouts.
                // Nothing reads its id or its row count: on PostgreSQL it
                // goes with the next statement.
                let deadline = crate::store::deadlines::new_activity_deadline(
                    *schedule_to_start_timeout,
                    *schedule_to_close_timeout,
                    now,
                );
                self.tx.execute_queued(
                    "INSERT INTO dispatch_tasks (kind, run_id, item_id, namespace, task_queue, \
                     status, due_at_ms, created_at_ms, session_id, timeout_at_ms, timeout_kind) \
                     VALUES ('activity', ?1, ?2, ?3, ?4, 'ready', ?5, ?5, ?6, ?7, ?8)",
                    params![
                        self.head.id.0,
                        id,
                        self.namespace,
                        queue,
                        now,
                        session.as_ref().map(|s| s.session_id.clone()),
                        deadline.map(|(at, _)| at),
                        deadline.map(|(_, kind)| kind)
                    ],
                )?;
                let mut payload = json!({
                    "sequence": sequence,
                    "activity_execution_id": id.to_string(),
                    "activity_type": activity_type,
                    "arguments": arguments,
                    "payload_codec": codec_of(arguments),
                    "queue": queue,
                });
                if let Some(session) = &session {
                    // The Rust SDK's replay checks the session a recorded
                    // activity ran in against the call's.
                    payload["worker_session"] = session.canonical();
                }
                if let Some(policy) = cancellation_policy {
                    // Both SDKs check it on replay (`try_cancel` when absent).
                    payload["cancellation_policy"] = policy.clone().into();
                }
                group.stamp(&mut payload);
                if !self.activity_queues.contains(&queue) {
                    self.activity_queues.push(queue);
                }
                self.event(EventType::ActivityScheduled, &payload, true)?;
            }
            WorkflowCommand::RecordLocalActivity {
                activity_type,
                arguments,
                reported,
                group,
            } => {
                self.check_payload(arguments)?;
                self.check_payload(&reported.result)?;
                let sequence = self.take_sequence();
                let [(scheduled, marker), (terminal, outcome)] =
                    local_activities::events(sequence, activity_type, arguments, group, reported);
                self.event(scheduled, &marker, true)?;
                self.event(terminal, &outcome, false)?;
            }
            WorkflowCommand::PrepareLocalActivity { descriptor } => {
                self.check_pending(Pending::Activity)?;
                self.check_payload(&descriptor.arguments)?;
                let sequence = self.take_sequence();
                crate::store::prepared_local_rows::schedule(
                    self.tx,
                    self.head.id,
                    sequence,
                    descriptor,
                )?;
                self.head.pending.activities += 1;
                self.new_events += 1;
            }
            WorkflowCommand::StartTimer {
                delay_seconds,
                group,
            } => {
                self.check_pending(Pending::Timer)?;
                let sequence = self.take_sequence();
                let armed = timers::arm(
                    self.tx,
                    self.head.id,
                    &timers::Arm {
                        namespace: &self.namespace,
                        task_queue: &self.task_queue,
                        delay_seconds: *delay_seconds,
                        sequence,
                        kind: "timer",
                        condition_wait_id: None,
                        group: (!group.is_empty()).then_some(group),
                    },
                )?;
                self.armed_timers.push(armed);
                self.head.pending.timers += 1;
                let mut payload =
                    timers::scheduled_payload(armed.timer_id, sequence, *delay_seconds);
                group.stamp(&mut payload);
                self.event(EventType::TimerScheduled, &payload, true)?;
            }
            WorkflowCommand::OpenConditionWait {
                condition_wait_occurrence_id,
                condition_key,
                condition_definition_fingerprint,
                timeout_seconds,
            } => {
                if self.open_wait.is_some() {
                    // The open wait re-issued: nothing new to record.
                    return Ok(false);
                }
                if timeout_seconds.is_some() {
                    self.check_pending(Pending::Timer)?;
                }
                let sequence = self.take_sequence();
                let wait_id = format!("{}-{sequence}", self.head.id);
                let timeout_timer = match timeout_seconds {
                    Some(seconds) => {
                        self.head.pending.timers += 1;
                        let armed = timers::arm(
                            self.tx,
                            self.head.id,
                            &timers::Arm {
                                namespace: &self.namespace,
                                task_queue: &self.task_queue,
                                delay_seconds: *seconds,
                                sequence,
                                kind: CONDITION_TIMEOUT,
                                condition_wait_id: Some(&wait_id),
                                group: None,
                            },
                        )?;
                        self.armed_timers.push(armed);
                        Some(armed.timer_id)
                    }
                    None => None,
                };
                let mut payload = Map::new();
                payload.insert("sequence".into(), sequence.into());
                payload.insert("condition_wait_id".into(), wait_id.clone().into());
                if let Some(occurrence) = condition_wait_occurrence_id {
                    payload.insert(
                        "condition_wait_occurrence_id".into(),
                        occurrence.clone().into(),
                    );
                }
                if let Some(key) = condition_key {
                    payload.insert("condition_key".into(), key.clone().into());
                }
                if let Some(fingerprint) = condition_definition_fingerprint {
                    payload.insert(
                        "condition_definition_fingerprint".into(),
                        fingerprint.clone().into(),
                    );
                }
                if let Some(seconds) = timeout_seconds {
                    payload.insert("timeout_seconds".into(), (*seconds).into());
                }
                self.set_open_wait(Some(OpenWait {
                    condition_wait_id: wait_id.clone(),
                    occurrence_id: condition_wait_occurrence_id.clone(),
                    sequence,
                    condition_key: condition_key.clone(),
                    condition_definition_fingerprint: condition_definition_fingerprint.clone(),
                    timeout_timer,
                }))?;
                self.event(
                    EventType::ConditionWaitOpened,
                    &Value::Object(payload),
                    true,
                )?;
                if let (Some(timer), Some(seconds)) = (timeout_timer, timeout_seconds) {
                    // The timeout's own schedule: a replay that finds its
                    // `TimerFired` checks it against this event.
                    let payload = json!({
                        "sequence": sequence,
                        "timer_id": timer.to_string(),
                        "delay_seconds": seconds,
                        "timer_kind": CONDITION_TIMEOUT,
                        "condition_wait_id": wait_id,
                    });
                    self.event(EventType::TimerScheduled, &payload, false)?;
                }
            }
            WorkflowCommand::OpenSignalWait { signal_name, group } => {
                let sequence = self.take_sequence();
                let opened =
                    signal_waits::open(self.tx, self.head.id, sequence, signal_name, group)?;
                self.event(EventType::SignalWaitOpened, &opened, true)?;
                if signal_waits::apply_buffered(self.tx, self.head.id, sequence)? {
                    // The workflow sees the buffered signal in its next task.
                    self.new_events += 1;
                    self.follow_up = true;
                }
            }
            WorkflowCommand::RecordVersionMarker {
                change_id,
                version,
                min_supported,
                max_supported,
            } => {
                let sequence = self.take_sequence();
                let payload = json!({
                    "sequence": sequence,
                    "change_id": change_id,
                    "version": version,
                    "min_supported": min_supported,
                    "max_supported": max_supported,
                });
                self.event(EventType::VersionMarkerRecorded, &payload, true)?;
            }
            WorkflowCommand::RecordSideEffect {
                result,
                workflow_stream,
            } => {
                self.check_payload(result)?;
                let sequence = self.take_sequence();
                let mut payload = json!({
                    "sequence": sequence,
                    "result": result,
                    "payload_codec": codec_of(result),
                });
                if let Some(directive) = workflow_stream {
                    payload["workflow_stream"] = self.apply_stream(directive)?;
                }
                self.event(EventType::SideEffectRecorded, &payload, true)?;
            }
            WorkflowCommand::UpsertSearchAttributes {
                attributes,
                attribute_types,
            } => {
                let current: String = self
                    .tx
                    .prepare_cached("SELECT search_attributes FROM runs WHERE id = ?1")?
                    .query_row([self.head.id.0], |r| r.get(0))?;
                let mut merged = decode_map(&current)?;
                for (key, value) in attributes {
                    if value.is_null() {
                        merged.remove(key);
                    } else {
                        merged.insert(key.clone(), value.clone());
                    }
                }
                let text = serde_json::to_string(&merged)?;
                // Checked before anything is written: a hit fails the run.
                self.check(
                    LimitKind::SearchAttributeSizeBytes,
                    u64::try_from(text.len()).unwrap_or(u64::MAX),
                )?;
                let sequence = self.take_sequence();
                self.tx
                    .prepare_cached("UPDATE runs SET search_attributes = ?2 WHERE id = ?1")?
                    .execute(params![self.head.id.0, text])?;
                let mut payload = json!({
                    "sequence": sequence,
                    "attributes": attributes,
                    "merged": merged,
                });
                if let Some(types) = attribute_types {
                    payload["attribute_types"] = Value::Object(types.clone());
                }
                self.event(EventType::SearchAttributesUpserted, &payload, true)?;
            }
            WorkflowCommand::UpsertMemo { entries } => {
                let patch = memo_patch(entries)?;
                let current: String = self
                    .tx
                    .prepare_cached("SELECT memo FROM runs WHERE id = ?1")?
                    .query_row([self.head.id.0], |r| r.get(0))?;
                let mut merged = decode_map(&current)?;
                for (key, value) in patch {
                    if value.is_null() {
                        merged.remove(&key);
                    } else {
                        merged.insert(key, value);
                    }
                }
                // The contract's measure: the merged memo as JSON, checked
                // before it is stored (a hit fails the run, nothing stays).
                let text = serde_json::to_string(&merged)?;
                self.check(
                    LimitKind::MemoSizeBytes,
                    u64::try_from(text.len()).unwrap_or(u64::MAX),
                )?;
                let merged_envelope = avro_value::encode_envelope(&Value::Object(merged))
                    .map_err(|e| Error::InvalidMemo(format!("the merged memo: {e}")))?;
                let sequence = self.take_sequence();
                self.tx
                    .prepare_cached("UPDATE runs SET memo = ?2 WHERE id = ?1")?
                    .execute(params![self.head.id.0, text])?;
                // Both SDKs replay from the patch as sent and the merged
                // memo, each an Avro payload envelope.
                let payload = json!({
                    "sequence": sequence,
                    "entries": entries,
                    "merged": merged_envelope,
                });
                self.event(EventType::MemoUpserted, &payload, true)?;
            }
            WorkflowCommand::StartChildWorkflow {
                workflow_type,
                arguments,
                queue,
                parent_close_policy,
                cancellation_policy,
                retry_policy,
                execution_timeout_seconds,
                run_timeout_seconds,
                group,
            } => {
                // The contract's order: the pending count, then the
                // arguments' size, both before any row of the child exists.
                self.check_pending(Pending::Child)?;
                self.check_payload(arguments)?;
                let sequence = self.take_sequence();
                let queue = queue.clone().unwrap_or_else(|| self.task_queue.clone());
                let started = children::start(
                    self.tx,
                    self.limits,
                    &self.head,
                    &children::ChildStart {
                        sequence,
                        workflow_type,
                        arguments,
                        queue: &queue,
                        namespace: &self.namespace,
                        parent_close_policy: parent_close_policy.as_deref().unwrap_or("abandon"),
                        cancellation_policy: cancellation_policy.as_deref().unwrap_or("abandon"),
                        retry_policy: retry_policy.as_ref(),
                        execution_timeout_seconds: *execution_timeout_seconds,
                        run_timeout_seconds: *run_timeout_seconds,
                        group,
                    },
                )?;
                bump(self.tx, self.head.id, Pending::Child, 1)?;
                self.head.pending.children += 1;
                if !self.workflow_queues.contains(&queue) {
                    self.workflow_queues.push(queue);
                }
                self.event(EventType::ChildWorkflowScheduled, &started.scheduled, true)?;
                self.event(EventType::ChildRunStarted, &started.started, false)?;
            }
            WorkflowCommand::StartServiceOperation { .. } => {
                self.start_service_operation(command)?;
            }
            WorkflowCommand::ContinueAsNew {
                arguments,
                workflow_type,
                queue,
            } => {
                self.check_payload(arguments)?;
                let sequence = self.take_sequence();
                continue_as_new(
                    self.tx,
                    self.limits,
                    &self.head,
                    sequence,
                    arguments,
                    workflow_type.as_deref(),
                    queue.as_deref(),
                )?;
                self.new_events += 1;
                return Ok(true);
            }
            WorkflowCommand::CancelSelectionOperation { fields } => {
                if let Cancelled::Recorded(marker) =
                    selection_cancel::apply(self.tx, self.head.id, fields)?
                {
                    self.event(EventType::SelectionOperationCancelled, &marker, false)?;
                    // The workflow may await the cancelled member next: a
                    // task lets it see the marker.
                    self.follow_up = true;
                }
            }
            WorkflowCommand::CompleteWorkflow { result } => {
                self.check_payload(result)?;
                let payload = json!({ "output": result, "payload_codec": codec_of(result) });
                let resumed = finish_run(
                    self.tx,
                    &self.head,
                    RunStatus::Completed,
                    EventType::WorkflowCompleted,
                    &payload,
                    None,
                )?;
                self.workflow_queues.extend(resumed);
                self.new_events += 1;
                return Ok(true);
            }
            WorkflowCommand::FailWorkflow {
                message,
                exception_type,
                exception_class,
                exception,
                non_retryable,
                failed_step_sequence,
                failed_activity_execution_id,
            } => {
                // The SDK ending the run because its delivered cooperative
                // cancellation reached the top: the run is cancelled.
                if let Some(request) = crate::store::cancellation::ends_as_cancelled(
                    self.tx,
                    self.head.id,
                    exception_type.as_deref(),
                )? {
                    let payload = crate::store::cancellation::cancelled_payload(&request, message);
                    let resumed = finish_run(
                        self.tx,
                        &self.head,
                        RunStatus::Cancelled,
                        EventType::WorkflowCancelled,
                        &payload,
                        None,
                    )?;
                    self.workflow_queues.extend(resumed);
                    self.new_events += 1;
                    return Ok(true);
                }
                let mut payload = json!({
                    "message": message,
                    "exception_type": exception_type,
                    "exception_class": exception_class,
                    "exception": exception,
                    "non_retryable": non_retryable,
                    "failure_category": "application",
                });
                if let (Some(step), Some(activity)) = (
                    failed_step_sequence,
                    failed_activity_execution_id.as_deref(),
                ) {
                    // Only a boundary this run's history proves: the named
                    // activity of this run failed at that step.
                    if failed_activity_at(self.tx, self.head.id, *step, activity)? {
                        payload["failed_step_sequence"] = (*step).into();
                        payload["failed_activity_execution_id"] = activity.into();
                        payload["failed_step_kind"] = "activity".into();
                        // The code that failed it, which a redrive checks
                        // its queue's workers still run.
                        if let Some(worker) = self.worker {
                            if let Some(fingerprint) =
                                crate::store::redrive::registered_fingerprint(
                                    self.tx,
                                    &self.namespace,
                                    worker,
                                    &self.head.workflow_type,
                                )?
                            {
                                payload["workflow_definition_fingerprint"] = fingerprint.into();
                            }
                        }
                    }
                }
                let resumed = finish_run(
                    self.tx,
                    &self.head,
                    RunStatus::Failed,
                    EventType::WorkflowFailed,
                    &payload,
                    Some(FailureRow {
                        category: "application",
                        message,
                        limit: None,
                    }),
                )?;
                self.workflow_queues.extend(resumed);
                self.new_events += 1;
                return Ok(true);
            }
            WorkflowCommand::CompleteUpdate { update_id, result } => {
                self.check_payload(result)?;
                let (id, name, arguments) = self.accepted_update(update_id)?;
                self.resolve_update(id, "completed", result)?;
                let applied = json!({
                    "update_id": update_id,
                    "update_name": name,
                    "arguments": arguments,
                    "payload_codec": codec_of(&arguments),
                });
                self.event(EventType::UpdateApplied, &applied, false)?;
                let completed = json!({
                    "update_id": update_id,
                    "update_name": name,
                    "result": result,
                    "payload_codec": codec_of(result),
                });
                self.event(EventType::UpdateCompleted, &completed, false)?;
            }
            WorkflowCommand::FailUpdate {
                update_id,
                message,
                exception_type,
            } => {
                let (id, name, _) = self.accepted_update(update_id)?;
                let failure = json!({ "message": message, "exception_type": exception_type });
                self.resolve_update(id, "rejected", &failure)?;
                let payload = json!({
                    "update_id": update_id,
                    "update_name": name,
                    "message": message,
                    "exception_type": exception_type,
                });
                self.event(EventType::UpdateRejected, &payload, false)?;
            }
        }
        Ok(false)
    }

    fn accepted_update(&self, update_id: &str) -> Result<(i64, String, Value), Error> {
        let missing = || Error::UnknownUpdate(update_id.to_owned());
        let id: i64 = update_id.parse().map_err(|_| missing())?;
        let row: Option<(String, String, String)> = self
            .tx
            .prepare_cached(
                "SELECT name, payload, status FROM updates WHERE id = ?1 AND run_id = ?2",
            )?
            .query_row(params![id, self.head.id.0], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?;
        match row {
            Some((name, payload, status)) if status == "accepted" => {
                Ok((id, name, serde_json::from_str(&payload)?))
            }
            Some((_, _, status)) => Err(Error::AlreadyClosed {
                item: "update",
                id,
                status,
            }),
            None => Err(missing()),
        }
    }

    fn resolve_update(&mut self, id: i64, status: &str, result: &Value) -> Result<(), Error> {
        self.tx
            .prepare_cached(
                "UPDATE runs SET pending_payload_bytes = pending_payload_bytes - \
                 (SELECT octet_length(payload) FROM updates WHERE id = ?2) WHERE id = ?1",
            )?
            .execute(params![self.head.id.0, id])?;
        self.tx
            .prepare_cached("UPDATE updates SET status = ?2, result = ?3 WHERE id = ?1")?
            .execute(params![id, status, serde_json::to_string(result)?])?;
        bump(self.tx, self.head.id, Pending::Update, -1)?;
        // The workflow's main loop runs in a task of its own after an update.
        self.follow_up = true;
        Ok(())
    }

    /// `start_service_operation`: the request's size is checked like
    /// any payload, then `service_calls::start` records the call and starts
    /// its workflow (or fails it at once, which the workflow sees in its
    /// next task).
    fn start_service_operation(&mut self, command: &WorkflowCommand) -> Result<(), Error> {
        let WorkflowCommand::StartServiceOperation {
            endpoint_name,
            service_name,
            operation_name,
            namespace,
            caller_namespace,
            idempotency_key,
            mode_override,
            wait_for,
            payload_codec,
            request_payload,
            queue,
            target_workflow_instance_id,
            target_workflow_run_id,
            duplicate_start_policy,
            business_key,
            memo,
            search_attributes,
        } = command
        else {
            return Ok(());
        };
        self.check_payload(request_payload)?;
        let sequence = self.take_sequence();
        let call = crate::store::service_calls::ServiceCallStart {
            sequence,
            endpoint_name,
            service_name,
            operation_name,
            target_namespace: namespace.as_deref(),
            caller_namespace: caller_namespace.as_deref(),
            idempotency_key: idempotency_key.as_deref(),
            mode_override: mode_override.as_deref(),
            wait_for: wait_for.as_deref(),
            request_payload,
            payload_codec: payload_codec.as_deref(),
            queue: queue.as_deref(),
            workflow_id: target_workflow_instance_id.as_deref(),
            run_id: target_workflow_run_id.as_deref(),
            return_existing: duplicate_start_policy.as_deref() == Some("return_existing_active"),
            business_key: business_key.as_deref(),
            memo: memo.clone().unwrap_or_default(),
            search_attributes: search_attributes.clone().unwrap_or_default(),
        };
        let started = crate::store::service_calls::start(
            self.tx,
            self.limits,
            &self.head,
            &self.namespace,
            &call,
        )?;
        if let Some(payload) = &started.started {
            self.event(EventType::ServiceCallStarted, payload, true)?;
        }
        if started.resumes_at_admission {
            self.follow_up = true;
        }
        if let Some((event, payload)) = &started.terminal {
            self.event(*event, payload, true)?;
            self.follow_up = true;
        }
        if let Some((namespace, queue)) = started.woken {
            // Pollers of another namespace's queue see it at their next look.
            if namespace == self.namespace && !self.workflow_queues.contains(&queue) {
                self.workflow_queues.push(queue);
            }
        }
        Ok(())
    }

    fn take_sequence(&mut self) -> i64 {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        sequence
    }

    fn event(&mut self, event: EventType, payload: &Value, command: bool) -> Result<(), Error> {
        append_event(self.tx, self.head.id, event, payload, command)?;
        self.new_events += 1;
        Ok(())
    }

    fn check_pending(&mut self, pending: Pending) -> Result<(), Error> {
        self.check(pending.limit_kind(), pending.get(&self.head.pending))
    }

    /// Applies a workflow stream directive in this completion's
    /// transaction; what it did goes into the side effect's event.
    fn apply_stream(&self, directive: &StreamDirective) -> Result<Value, Error> {
        let name = directive.stream_name.as_str();
        let reference = match (&directive.command_identity, directive.command_ordinal) {
            (Some(identity), Some(ordinal)) => Some(format!("{identity}:{ordinal}")),
            (Some(identity), None) => Some(identity.clone()),
            _ => None,
        };
        if directive.operation == "append" {
            let appended = streams::append_in(
                self.tx,
                &self.head,
                self.limits,
                &self.streams,
                StreamAppend {
                    name,
                    items: &directive.items,
                    origin: StreamOrigin::Workflow,
                    origin_reference: reference.as_deref(),
                    max_pending_items: directive.max_pending_items,
                },
            )?;
            return Ok(json!({
                "operation": "append", "stream_name": name,
                "accepted_offsets": appended.offsets, "accepted": appended.accepted,
                "deduped": appended.deduplicated,
            }));
        }
        let error_reason = match directive.operation.as_str() {
            "error" => Some(directive.error_reason.as_deref().unwrap_or("error")),
            _ => None,
        };
        let closed = streams::close_in(
            self.tx,
            &self.head,
            &self.streams,
            name,
            error_reason,
            directive.retention_seconds,
        )?;
        Ok(json!({
            "operation": directive.operation, "stream_name": name, "status": closed.status,
        }))
    }

    fn check_payload(&self, payload: &Value) -> Result<(), Error> {
        let run = RunRef {
            workflow_run_id: &self.run_label,
            workflow_type: &self.head.workflow_type,
        };
        check_size(
            self.limits,
            LimitKind::PayloadSizeBytes,
            serde_json::to_string(payload)?.len(),
            &run,
        )
    }

    /// Checks `value` against the limit of `kind`; past the warning
    /// threshold, the first check of each kind in this task writes the
    /// warning (one per kind per workflow task, however many items pass it).
    fn check(&mut self, kind: LimitKind, value: u64) -> Result<(), Error> {
        let run = RunRef {
            workflow_run_id: &self.run_label,
            workflow_type: &self.head.workflow_type,
        };
        match self.limits.check(kind, value, &run) {
            Ok(Some(warning)) => {
                if !self.warnings.iter().any(|w| w.limit_kind == kind) {
                    warning.emit();
                    self.warnings.push(warning);
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(exceeded) => Err(exceeded.into()),
        }
    }
}

impl WorkflowCommand {
    /// An activity with no retry policy, timeouts or group.
    pub fn activity(activity_type: impl Into<String>, arguments: Value) -> WorkflowCommand {
        WorkflowCommand::ScheduleActivity {
            activity_type: activity_type.into(),
            arguments,
            queue: None,
            retry_policy: None,
            start_to_close_timeout: None,
            schedule_to_close_timeout: None,
            schedule_to_start_timeout: None,
            heartbeat_timeout: None,
            worker_session: None,
            cancellation_policy: None,
            group: ParallelGroup::default(),
        }
    }

    /// A timer outside any group.
    pub fn timer(delay_seconds: u64) -> WorkflowCommand {
        WorkflowCommand::StartTimer {
            delay_seconds,
            group: ParallelGroup::default(),
        }
    }

    /// The parallel group metadata of a command that can be a group member.
    fn group(&self) -> Option<&ParallelGroup> {
        match self {
            WorkflowCommand::ScheduleActivity { group, .. }
            | WorkflowCommand::RecordLocalActivity { group, .. }
            | WorkflowCommand::StartTimer { group, .. }
            | WorkflowCommand::PrepareLocalActivity {
                descriptor: crate::store::prepared_local_rows::LocalDescriptor { group, .. },
            }
            | WorkflowCommand::StartChildWorkflow { group, .. }
            | WorkflowCommand::OpenSignalWait { group, .. } => Some(group),
            _ => None,
        }
    }

    /// A parallel group member's own sequence (the group's base plus its index).
    fn group_sequence(&self) -> Option<i64> {
        let group = self.group()?;
        Some(group.parallel_group_base_sequence? + group.parallel_group_index?)
    }

    /// The id of the outermost `all()` group the command is a leaf of: the
    /// first entry of its group path, or its own group without one.
    fn outer_group_id(&self) -> Option<&str> {
        let group = self.group()?;
        group
            .parallel_group_path
            .as_ref()
            .and_then(|path| path.get(0)?.get("parallel_group_id")?.as_str())
            .or(group.parallel_group_id.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::valid_memo_key;

    #[test]
    fn memo_keys_follow_the_sdks_pattern() {
        for key in ["stage", "a.b:c-d_e", "-", "1a", "-1a", &"k".repeat(64)] {
            assert!(valid_memo_key(key), "{key:?}");
        }
        for key in ["", "12", "-12", "a b", "é", &"k".repeat(65)] {
            assert!(!valid_memo_key(key), "{key:?}");
        }
    }
}
