//! A durable workflow run store on SQLite that enforces structural limits.
//!
//! Runs, their append-only history, and the activities, timers, children,
//! signals, updates and failures that hang off them live in one SQLite file
//! (or in memory for tests). Every operation that could grow a run is checked
//! against dwpolicy's [`StructuralLimits`](dwpolicy::StructuralLimits) at
//! the points the structural-limit contract names, with the run's pending
//! counters kept on its row so that a check never counts rows. The
//! submodules split the store by who calls it: workflow code ([`task`]),
//! callers admitting signals and updates ([`admission`]), workers reporting
//! completions ([`completion`], [`activity_attempts`],
//! [`workflow_commands`]) and operators importing v1 history ([`import`]).
//!
//! The modules form layers; a module uses only its own layer and those
//! below it, and no two modules import each other (docs/architecture.md
//! draws the layers and a test holds the code to them):
//! - this file, the facade: module declarations and the public re-exports,
//!   nothing else;
//! - sharing one store between threads: [`shared`], [`readers`], [`writer`]
//!   and its [`syncer`] and [`checkpointer`];
//! - transitions that end runs: workflow-command application
//!   ([`workflow_commands`]), the in-process [`executor`], operator
//!   [`control`] and the deadline expiries ([`timeouts`]);
//! - [`completion`]: items and runs reaching a terminal state;
//! - the bookkeeping of one kind of row each: activity attempts, timers,
//!   streams, leases, deadlines, runs, signals and updates, schedules,
//!   payloads, namespaces and the rest;
//! - the task queue, [`dispatch`];
//! - the connection, [`Store`] ([`connection`]);
//! - the base every layer shares: configuration, the history reader, the
//!   row helpers, the write transaction, the schema, the shared protocol
//!   shapes and the model and error types.

pub mod activity_attempts;
pub(crate) mod activity_cancellation;
pub mod admission;
pub mod archive;
pub mod avro_value;
pub mod build_id_rollouts;
pub mod cancellation;
pub mod checkpointer;
pub mod children;
pub mod cohorts;
pub mod command;
pub mod completion;
pub mod config;
pub mod connection;
pub mod console;
pub mod control;
pub mod db;
pub mod deadlines;
pub mod describe;
pub mod dispatch;
pub mod durable_state;
mod error;
pub mod executor;
pub mod external_payloads;
pub mod history;
pub mod import;
pub mod leases;
pub mod local_activities;
pub mod message_deferral;
pub mod message_streams;
pub mod metrics;
pub mod model;
pub mod namespaces;
mod payload_references;
pub mod pg_schema;
pub mod prepared_local;
pub(crate) mod prepared_local_rows;
pub mod projections;
pub mod protocol;
pub mod readers;
pub mod redrive;
mod rows;
pub mod runs;
pub mod schedules;
pub mod schema;
pub mod search_attributes;
mod selection;
mod selection_cancel;
pub mod service_calls;
pub mod service_catalog;
pub mod sessions;
pub mod shared;
pub mod signal_waits;
pub(crate) mod staging;
pub(crate) mod start_stage;
pub mod sticky;
pub mod streams;
pub mod syncer;
pub mod task;
pub mod timeouts;
pub mod timers;
mod tx;
pub mod update_validations;
pub mod worker_roster;
pub mod workflow_commands;
pub mod writer;

pub use activity_attempts::{attempt_id, ActivityFence, AttemptFailure, AttemptOutcome};
pub use admission::{Admission, Rejection, SignalRequest, UpdateRequest};
pub use archive::{ArchiveMark, ArchiveOutcome, ArchivedFilter};
pub use command::{ChildWorkflow, Command, CommandOutput};
pub use completion::UpdateResolution;
pub use config::{
    Durability, StoreConfig, DEFAULT_EXTERNAL_PAYLOAD_ORPHAN_GRACE,
    DEFAULT_MAX_PENDING_PAYLOAD_BYTES,
};
pub use connection::{Store, DATABASE_DRIVER};
pub use control::{RunDescription, StopOutcome, WorkflowTaskFailure};
pub use deadlines::RunTimeouts;
pub use dispatch::{LeasedActivity, LeasedTask, TaskKind};
pub use error::Error;
pub use executor::{Next, TaskOutcome, TaskReport, APPLICATION_FAILURE};
pub use history::{HistoryPage, HistoryPageLimit, StoredEvent, StoredPage};
pub use import::{ImportMode, ImportReport, MeasuredImport, V1Projection, V1Row, V1Terminal};
pub use model::{
    ActivityId, EventType, FailureRecord, HistoryEvent, PendingCounts, Run, RunId, RunOrigin,
    RunStatus, StartRun, TimerId,
};
pub use namespaces::Namespace;
pub use protocol::RetryPolicy;
pub use redrive::{RedriveOutcome, RedriveRefusal, Redriven};
pub use runs::Started;
pub use schedules::{
    AuditEvent, AuditRow, DueSchedule, FireGate, FireRecord, NextFire, ScheduleRow,
    DELETED_SCHEDULE_AUDIT_RETENTION_MS, RECENT_ACTIONS, SCHEDULE_AUDIT_ENTRIES,
};
pub use search_attributes::Registration;
pub use service_catalog::{
    CatalogDelete, CatalogEntry, CatalogLevel, ServiceCallRow, SERVICE_CALL_RETENTION_MS,
};
pub use shared::{RunWriteStats, SharedStore};
pub use streams::{
    Appended, NewStreamItem, Reclaimed, StreamAppend, StreamItem, StreamOrigin, StreamPolicy,
    StreamState,
};
pub use task::Task;
pub use timeouts::{ActivityTimeout, TIMEOUT_CATEGORY};
pub use timers::ArmedTimer;
pub use workflow_commands::{
    WorkflowCommand, WorkflowTaskCompletion, WorkflowTaskFence, SUPPORTED_COMMANDS,
};
