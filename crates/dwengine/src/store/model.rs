//! The store's public data model: runs, their statuses and typed history.
//!
//! These types are what callers see and what the example prints as JSON, so
//! they serialize to stable, snake_case names; the database keeps the same
//! names as text so rows stay readable with the `sqlite3` shell.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Identifies one workflow run (the `runs` row id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub i64);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identifies one activity execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ActivityId(pub i64);

/// Identifies one timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TimerId(pub i64);

/// A run's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepting tasks, signals and updates.
    Running,
    /// Finished with a result.
    Completed,
    /// Finished with a failure row.
    Failed,
    /// Closed by a cancel request (no workflow code ran after it).
    Cancelled,
    /// Closed by an operator's terminate.
    Terminated,
    /// Closed by the workflow's `continue_as_new`: a new run of the same
    /// workflow id took over in the same transaction.
    ContinuedAsNew,
}

impl RunStatus {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Terminated => "terminated",
            RunStatus::ContinuedAsNew => "continued_as_new",
        }
    }

    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Running,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Terminated,
        RunStatus::ContinuedAsNew,
    ];

    /// The status stored (and sent on the wire) as `text`.
    pub fn parse(text: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The type of one history event.
///
/// Command events are the ones workflow code writes through a task; replay
/// matches them by position. The others record what happened to the run
/// from outside (completions, admissions, imports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// The run started (first event of every run).
    WorkflowStarted,
    /// Command: an activity was scheduled.
    ActivityScheduled,
    /// An activity finished with a result.
    ActivityCompleted,
    /// An activity finished with an error.
    ActivityFailed,
    /// Command: a timer was started.
    TimerStarted,
    /// Protocol command: a durable timer was scheduled (with its `sequence`).
    TimerScheduled,
    /// A timer fired.
    TimerFired,
    /// A timer was cancelled.
    TimerCancelled,
    /// Command: a child workflow run was started.
    ChildWorkflowStarted,
    /// A child run reached a terminal state.
    ChildWorkflowClosed,
    /// Command: the memo was upserted.
    MemoUpserted,
    /// Command: the search attributes were upserted.
    SearchAttributesUpserted,
    /// Command: a side effect's value was recorded.
    SideEffectRecorded,
    /// A signal was admitted.
    SignalReceived,
    /// A signal was processed.
    SignalProcessed,
    /// An update was admitted.
    UpdateAccepted,
    /// An accepted update's handler ran (replay re-applies it here).
    UpdateApplied,
    /// An update was resolved with a result.
    UpdateCompleted,
    /// An update was resolved with a rejection.
    UpdateRejected,
    /// An imported v1 log row.
    LogRecorded,
    /// An imported v1 exception row.
    ExceptionRecorded,
    /// The run completed.
    WorkflowCompleted,
    /// The run failed.
    WorkflowFailed,
    /// Protocol command: the workflow waits for a condition.
    ConditionWaitOpened,
    /// The workflow got past its open condition wait.
    ConditionWaitSatisfied,
    /// The run was cancelled.
    WorkflowCancelled,
    /// The run was terminated.
    WorkflowTerminated,
    /// An activity ended because one of its timeouts passed.
    ActivityTimedOut,
    /// The run ended because its run or execution timeout passed.
    WorkflowTimedOut,
    /// A workflow task attempt failed (recorded once per streak of failures).
    WorkflowTaskFailed,
    /// Protocol command: the workflow waits for a signal of one name.
    SignalWaitOpened,
    /// A signal was applied to the workflow's open signal wait.
    SignalApplied,
    /// Command: a version marker (`get_version` / `patched`) was recorded.
    VersionMarkerRecorded,
    /// Command: the run continued as new (its last event; names the run
    /// that took over).
    WorkflowContinuedAsNew,
    /// Protocol command: a child workflow was scheduled (`start_child_workflow`).
    ChildWorkflowScheduled,
    /// A scheduled child's run started (written with its schedule).
    ChildRunStarted,
    /// A child run completed; carries its result.
    ChildRunCompleted,
    /// A child run failed (or timed out).
    ChildRunFailed,
    /// A child run was cancelled.
    ChildRunCancelled,
    /// A child run was terminated.
    ChildRunTerminated,
    /// Protocol command: workflow code started a Nexus service operation
    /// (`start_service_operation`); names the call and its linked run.
    ServiceCallStarted,
    /// The call's linked run completed; carries its result.
    ServiceCallCompleted,
    /// The call failed: its operation could not be resolved or started, or
    /// its linked run failed, timed out or was terminated.
    ServiceCallFailed,
    /// The call's linked run was cancelled.
    ServiceCallCancelled,
    /// The first member of a durable selection (`select`) reached a
    /// terminal state: the group's one winner.
    SelectionResolved,
    /// Command: a member of a resolved selection was cancelled before it
    /// reached a terminal state (`cancel_selection_operation`).
    SelectionOperationCancelled,
    /// A client asked for cooperative cancellation of the run
    /// (`request-cancellation`): the request stays pending until a worker
    /// delivers it to workflow code at an authored call.
    CooperativeCancellationRequested,
    /// A worker delivered the pending cancellation request at the authored
    /// call it names (`deliver-cancellation`).
    CooperativeCancellationDelivered,
    /// An activity a parked cancellation delivery waited on closed as
    /// cancelled: its attempt acknowledged the cancellation or lost its
    /// lease while cleaning up.
    ActivityCancelled,
    /// A prepared local activity's attempt was admitted on its workflow
    /// task's claim (`local-activities/prepare`).
    ActivityStarted,
    /// A prepared local activity's attempt failed and its retry policy
    /// schedules another on a new workflow task.
    ActivityRetryScheduled,
}

impl EventType {
    pub(crate) const ALL: [EventType; 51] = [
        EventType::WorkflowStarted,
        EventType::ActivityScheduled,
        EventType::ActivityCompleted,
        EventType::ActivityFailed,
        EventType::TimerStarted,
        EventType::TimerFired,
        EventType::TimerCancelled,
        EventType::ChildWorkflowStarted,
        EventType::ChildWorkflowClosed,
        EventType::MemoUpserted,
        EventType::SearchAttributesUpserted,
        EventType::SideEffectRecorded,
        EventType::SignalReceived,
        EventType::SignalProcessed,
        EventType::UpdateAccepted,
        EventType::UpdateCompleted,
        EventType::UpdateRejected,
        EventType::LogRecorded,
        EventType::ExceptionRecorded,
        EventType::WorkflowCompleted,
        EventType::WorkflowFailed,
        EventType::TimerScheduled,
        EventType::UpdateApplied,
        EventType::ConditionWaitOpened,
        EventType::ConditionWaitSatisfied,
        EventType::WorkflowCancelled,
        EventType::WorkflowTerminated,
        EventType::ActivityTimedOut,
        EventType::WorkflowTimedOut,
        EventType::WorkflowTaskFailed,
        EventType::SignalWaitOpened,
        EventType::SignalApplied,
        EventType::VersionMarkerRecorded,
        EventType::WorkflowContinuedAsNew,
        EventType::ChildWorkflowScheduled,
        EventType::ChildRunStarted,
        EventType::ChildRunCompleted,
        EventType::ChildRunFailed,
        EventType::ChildRunCancelled,
        EventType::ChildRunTerminated,
        EventType::ServiceCallStarted,
        EventType::ServiceCallCompleted,
        EventType::ServiceCallFailed,
        EventType::ServiceCallCancelled,
        EventType::SelectionResolved,
        EventType::SelectionOperationCancelled,
        EventType::CooperativeCancellationRequested,
        EventType::CooperativeCancellationDelivered,
        EventType::ActivityCancelled,
        EventType::ActivityStarted,
        EventType::ActivityRetryScheduled,
    ];

    /// The stored name, which is also the canonical byte metric's event type.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::WorkflowStarted => "WorkflowStarted",
            EventType::ActivityScheduled => "ActivityScheduled",
            EventType::ActivityCompleted => "ActivityCompleted",
            EventType::ActivityFailed => "ActivityFailed",
            EventType::TimerStarted => "TimerStarted",
            EventType::TimerFired => "TimerFired",
            EventType::TimerCancelled => "TimerCancelled",
            EventType::ChildWorkflowStarted => "ChildWorkflowStarted",
            EventType::ChildWorkflowClosed => "ChildWorkflowClosed",
            EventType::MemoUpserted => "MemoUpserted",
            EventType::SearchAttributesUpserted => "SearchAttributesUpserted",
            EventType::SideEffectRecorded => "SideEffectRecorded",
            EventType::SignalReceived => "SignalReceived",
            EventType::SignalProcessed => "SignalProcessed",
            EventType::UpdateAccepted => "UpdateAccepted",
            EventType::UpdateCompleted => "UpdateCompleted",
            EventType::UpdateRejected => "UpdateRejected",
            EventType::LogRecorded => "LogRecorded",
            EventType::ExceptionRecorded => "ExceptionRecorded",
            EventType::WorkflowCompleted => "WorkflowCompleted",
            EventType::WorkflowFailed => "WorkflowFailed",
            EventType::TimerScheduled => "TimerScheduled",
            EventType::UpdateApplied => "UpdateApplied",
            EventType::ConditionWaitOpened => "ConditionWaitOpened",
            EventType::ConditionWaitSatisfied => "ConditionWaitSatisfied",
            EventType::WorkflowCancelled => "WorkflowCancelled",
            EventType::WorkflowTerminated => "WorkflowTerminated",
            EventType::ActivityTimedOut => "ActivityTimedOut",
            EventType::WorkflowTimedOut => "WorkflowTimedOut",
            EventType::WorkflowTaskFailed => "WorkflowTaskFailed",
            EventType::SignalWaitOpened => "SignalWaitOpened",
            EventType::SignalApplied => "SignalApplied",
            EventType::VersionMarkerRecorded => "VersionMarkerRecorded",
            EventType::WorkflowContinuedAsNew => "WorkflowContinuedAsNew",
            EventType::ChildWorkflowScheduled => "ChildWorkflowScheduled",
            EventType::ChildRunStarted => "ChildRunStarted",
            EventType::ChildRunCompleted => "ChildRunCompleted",
            EventType::ChildRunFailed => "ChildRunFailed",
            EventType::ChildRunCancelled => "ChildRunCancelled",
            EventType::ChildRunTerminated => "ChildRunTerminated",
            EventType::ServiceCallStarted => "ServiceCallStarted",
            EventType::ServiceCallCompleted => "ServiceCallCompleted",
            EventType::ServiceCallFailed => "ServiceCallFailed",
            EventType::ServiceCallCancelled => "ServiceCallCancelled",
            EventType::SelectionResolved => "SelectionResolved",
            EventType::SelectionOperationCancelled => "SelectionOperationCancelled",
            EventType::CooperativeCancellationRequested => "CooperativeCancellationRequested",
            EventType::CooperativeCancellationDelivered => "CooperativeCancellationDelivered",
            EventType::ActivityCancelled => "ActivityCancelled",
            EventType::ActivityStarted => "ActivityStarted",
            EventType::ActivityRetryScheduled => "ActivityRetryScheduled",
        }
    }

    /// The type stored as `name`.
    pub fn from_name(name: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of a run's append-only history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryEvent {
    /// Position in the run's history, from 0.
    pub sequence: u64,
    /// What happened.
    pub event_type: EventType,
    /// Its details.
    pub payload: Value,
    /// When it was recorded (Unix ms; absent on events older than schema 4).
    pub recorded_at_ms: Option<i64>,
}

/// Open items per run, as maintained on the run row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PendingCounts {
    /// Scheduled activities.
    pub activities: u64,
    /// Pending timers.
    pub timers: u64,
    /// Open child runs.
    pub children: u64,
    /// Received, unprocessed signals.
    pub signals: u64,
    /// Accepted, unresolved updates.
    pub updates: u64,
}

/// Where a run came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOrigin {
    /// Started by this engine.
    V2,
    /// Imported from v1 history; read-only.
    V1Projection,
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    /// Its id.
    pub id: RunId,
    /// The caller's workflow id.
    pub workflow_id: String,
    /// The workflow type.
    pub workflow_type: String,
    /// The namespace.
    pub namespace: String,
    /// The task queue.
    pub task_queue: String,
    /// Its state.
    pub status: RunStatus,
    /// Whether it is a read-only v1 projection.
    pub origin: RunOrigin,
    /// The parent run, for a child.
    pub parent: Option<RunId>,
    /// Non-indexed metadata.
    pub memo: Map<String, Value>,
    /// Indexed metadata.
    pub search_attributes: Map<String, Value>,
    /// Open items.
    pub pending: PendingCounts,
    /// Number of history events.
    pub history_length: u64,
    /// Canonical byte metric summed over the history.
    pub history_bytes: u64,
    /// The run this one continued (continue-as-new), if any.
    pub continued_from: Option<RunId>,
    /// The run that continued this one: its continue-as-new successor, or
    /// for a failed run the successor a redrive started.
    pub continued_to: Option<RunId>,
    /// For a run a redrive started: the failed step it resumes at (its
    /// history holds the completed steps before it).
    pub resume_step_sequence: Option<u64>,
    /// The worker build its workflow tasks go to (its start's pin or the
    /// cohort of the first worker that took it; `Some("")`: pinned to the
    /// unversioned cohort; `None`: not yet any build's).
    pub build_id: Option<String>,
}

/// What [`crate::store::connection::Store::start_run`] needs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StartRun {
    /// The caller's workflow id.
    pub workflow_id: String,
    /// The workflow type.
    pub workflow_type: String,
    /// The namespace.
    pub namespace: String,
    /// The task queue.
    pub task_queue: String,
    /// The start arguments.
    pub arguments: Value,
    /// Initial memo.
    pub memo: Map<String, Value>,
    /// Initial search attributes.
    pub search_attributes: Map<String, Value>,
}

/// One stored failure (`failures` row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureRecord {
    /// `structural_limit`, or `application` for a failure the workflow chose.
    pub failure_category: String,
    /// Human-readable summary.
    pub message: String,
    /// The limit kind, for structural failures.
    pub structural_limit_kind: Option<String>,
    /// The value that hit it.
    pub structural_limit_value: Option<u64>,
    /// The configured ceiling.
    pub structural_limit_configured: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for t in EventType::ALL {
            assert_eq!(EventType::from_name(t.as_str()), Some(t));
            assert_eq!(
                serde_json::to_value(t).unwrap(),
                Value::String(t.as_str().to_owned())
            );
        }
        assert_eq!(EventType::from_name("Nope"), None);
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
        }
    }
}
