//! API errors and the machine-readable bodies clients branch on.
//!
//! Every refusal carries a stable `reason`; boundary failures keep
//! dwpolicy's shape (`validation_errors`, `size`/`limit`) and structural
//! limits keep the seed's `structural_limit_*` metadata, so clients never
//! parse messages.

use std::collections::BTreeMap;

use dwpolicy::boundary::{BoundaryError, RequestValidator};
use dwpolicy::DisclosureError;
use serde_json::{json, Value};

use crate::admission::NamespaceRejection;
use crate::cache::CacheError;
use crate::query_tasks::BrokerError;
use crate::service_boundary::{
    BoundaryRefusal, ServiceBoundaryBudgets, SharedServiceBoundaryPolicy,
};
use crate::store::{Error as StoreError, Rejection};

/// `Retry-After` of a write refused because the store's disk is full.
pub const STORAGE_FULL_RETRY_AFTER_SECONDS: u64 = 30;

/// `Retry-After` of a request refused because the cache is unreachable.
pub const CACHE_UNAVAILABLE_RETRY_AFTER_SECONDS: u64 = 1;

/// `Retry-After` of a request refused because the database (PostgreSQL)
/// is unreachable: the node opens a new session as soon as it answers.
pub const DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS: u64 = 1;
use crate::wait_slots::{WaitRefusal, WaitSlotError};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 413 or 422 at the request boundary.
    #[error(transparent)]
    Boundary(#[from] BoundaryError),
    /// The body is not the JSON the endpoint takes.
    #[error("malformed request body: {0}")]
    Malformed(String),
    /// A structural limit refused the command (nothing was written).
    #[error("structural limit {0:?}")]
    Structural(Rejection),
    /// The namespace's request budget refused it.
    #[error("namespace request limit: {0:?}")]
    NamespaceLimited(NamespaceRejection),
    /// The namespace's durable-state quota refused the mutation.
    #[error("durable-state quota: {}", .0.reason())]
    DurableState(crate::durable_state::DurableRejection),
    /// The external payload transport refused an upload or a fetch.
    #[error("external payload: {0}")]
    ExternalPayload(#[from] crate::external_payloads::PayloadError),
    /// The node holds its cap of long-poll waits. The body is the SDKs'
    /// poll-capacity backpressure (reason and poll status
    /// `long_poll_capacity_exhausted`, no task, the polled kind and queue,
    /// retryable after `retry_after_seconds`): both published SDKs wait that
    /// long and poll again without spending their retry budget.
    #[error("long-poll capacity: {refusal:?}")]
    WaitCapacity {
        /// Which cap refused the wait.
        refusal: WaitRefusal,
        /// The polled kind as the SDKs name it (`workflow_task`,
        /// `activity_task`, `query_task`).
        task_kind: &'static str,
        /// The polled task queue.
        task_queue: String,
    },
    /// The request body did not arrive within the body-read timeout.
    #[error("{0}")]
    BodyTimedOut(String),
    /// The node holds its cap of waiting queries, updates or service calls.
    #[error("this node already holds {} waiting {} calls ({})", .0.cap, .0.kind.as_str(), crate::server::node_config::config_key_variable(.0.kind.config_key()))]
    CallWaitCapacity(crate::waiters::WaitRefused),
    /// The node holds its cap of waiting stream reads.
    #[error("this node already holds {0} waiting stream reads (DW_WORKFLOW_STREAM_MAX_WAITS)")]
    StreamWaitCapacity(usize),
    /// No such workflow (or run).
    #[error("workflow {0} not found")]
    WorkflowNotFound(String),
    /// `X-Namespace` names a namespace nobody registered.
    #[error("namespace {0:?} is not registered")]
    NamespaceNotFound(String),
    /// A registration past `DW_MAX_NAMESPACES`.
    #[error("{count} namespaces are registered, the most this server takes (DW_MAX_NAMESPACES = {limit})")]
    NamespaceCountLimit {
        /// Registered now.
        count: u64,
        /// The cap.
        limit: u64,
    },
    /// A delete of a namespace that still holds rows, or of `default`.
    #[error("namespace {namespace:?} cannot be deleted: {why}")]
    NamespaceNotDeletable {
        /// The namespace.
        namespace: String,
        /// `namespace_not_empty` or `namespace_protected`.
        reason: &'static str,
        /// What it still holds.
        holds: Vec<&'static str>,
        /// Why, in words.
        why: String,
    },
    /// A start for a workflow id whose run is still open.
    #[error("workflow {workflow_id} already has an open run ({run_id})")]
    AlreadyStarted {
        /// The workflow id.
        workflow_id: String,
        /// The open run.
        run_id: String,
        /// The open run's workflow type.
        workflow_type: String,
    },
    /// An operation on a run that has closed.
    #[error("run {run_id} is {status}")]
    RunClosed {
        /// The operation (`signal`, `update`, `query`, `cancel`, `terminate`).
        operation: &'static str,
        /// The run.
        run_id: String,
        /// Its terminal status.
        status: String,
    },
    /// No such registered worker.
    #[error("worker {0:?} is not registered")]
    WorkerNotFound(String),
    /// A page token this server did not issue.
    #[error("next_page_token {0:?} is not a token this server issued")]
    InvalidPageToken(String),
    /// The worker refused or failed a query.
    #[error("query rejected: {0}")]
    QueryRejected(String, Value),
    /// The query-task broker refused (queue full, unknown or stale task).
    #[error(transparent)]
    QueryTask(crate::query_tasks::BrokerError),
    /// No worker answered a query in time.
    #[error("no worker answered the query within {0} ms")]
    QueryTimeout(u128),
    /// The workflow refused an update.
    #[error("update failed: {0}")]
    UpdateFailed(String, Value),
    /// The store refused (not found, closed, …).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The cache backend failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// Wait-slot storage failed.
    #[error(transparent)]
    WaitSlots(#[from] WaitSlotError),
    /// The policy refused a metric's label-set disclosure (fail closed).
    #[error(transparent)]
    Disclosure(#[from] DisclosureError),
    /// A search-attribute registration or removal that conflicts (409).
    #[error("{message}")]
    SearchAttributeConflict {
        /// `name_reserved`, `attribute_already_exists` or `system_attribute`.
        reason: &'static str,
        /// A sentence.
        message: String,
        /// The registered type, for `attribute_already_exists`.
        existing_type: Option<String>,
    },
    /// A cooperative cancellation delivery the run's state refuses (409).
    #[error("{message}")]
    CancellationRefused {
        /// Which check failed (`cancellation_not_requested`, …).
        reason: &'static str,
        /// A sentence saying what to do.
        message: String,
    },
    /// A prepared local activity operation the attempt's or the run's
    /// state refuses (404 for an unknown attempt, else 409).
    #[error("{message}")]
    LocalActivityRefused {
        /// 404 or 409.
        status: u16,
        /// Which check failed (`local_activity_sequence_mismatch`, …).
        reason: &'static str,
        /// A sentence saying what happened and what to do.
        message: String,
    },
    /// A schedule id the namespace already has.
    #[error("schedule {0:?} already exists in this namespace")]
    ScheduleExists(String),
    /// No such schedule in the namespace.
    #[error("schedule {0:?} does not exist in this namespace")]
    ScheduleNotFound(String),
    /// A task queue no task was queued on and no active worker serves.
    #[error("task queue {0:?} has no tasks and no active workers in this namespace")]
    TaskQueueNotFound(String),
    /// No such custom search attribute in the namespace.
    #[error("custom search attribute {0:?} is not registered in this namespace")]
    SearchAttributeNotFound(String),
    /// A service-catalog refusal: an entry not found, already existing or
    /// still in use.
    #[error("{message}")]
    ServiceCatalog {
        /// 404 or 409.
        status: u16,
        /// `endpoint_not_found`, `service_already_exists`, …
        reason: &'static str,
        /// A sentence.
        message: String,
        /// The names involved (merged into the body).
        details: Value,
    },
    /// An update validation's refusal or outcome: a validator's rejection
    /// (422), a verdict on a task the worker no longer holds (404, 409), no
    /// verdict in time (504).
    #[error("{message}")]
    UpdateValidation {
        /// 404, 409, 422 or 504.
        status: u16,
        /// `update_validator_rejected`, `stale_update_validation_completion`, …
        reason: &'static str,
        /// A sentence.
        message: String,
        /// The names involved (merged into the body).
        details: Value,
    },
    /// A redrive the source run's state or history refuses (409; nothing
    /// was written).
    #[error("{message}")]
    RedriveRefused {
        /// 409, or 410 for a run whose history retention pruned.
        status: u16,
        /// `run_not_failed`, `source_run_not_current`, …
        reason: &'static str,
        /// What was found and what to do.
        message: String,
        /// The workflow and run (merged into the body).
        details: Value,
    },
    /// A configured service-call budget refused the call (nothing recorded).
    #[error("service-call budget: {refusal:?}")]
    ServiceBoundary {
        /// Which budget, and how far over.
        refusal: BoundaryRefusal,
        /// The call's names (merged into the body).
        details: Value,
    },
    /// A build-id rollout write the queue's recorded intent refuses (409).
    #[error("{message}")]
    BuildIdRollout {
        /// `build_id_rollout_limit_exceeded`, `build_id_draining` or
        /// `build_id_selected_for_new_starts`.
        reason: &'static str,
        /// A sentence saying what to do.
        message: String,
        /// The task queue and build id (merged into the body).
        details: Value,
    },
    /// A worker thread failed.
    #[error("internal: {0}")]
    Internal(String),
}

impl From<crate::durable_state::MetricError> for ApiError {
    fn from(e: crate::durable_state::MetricError) -> Self {
        match e {
            crate::durable_state::MetricError::Disclosure(e) => ApiError::from(e),
            crate::durable_state::MetricError::Cache(e) => ApiError::Cache(e),
        }
    }
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::Boundary(e) => e.status(),
            ApiError::Malformed(_) => 400,
            ApiError::BodyTimedOut(_) => 408,
            ApiError::Structural(_) => 409,
            ApiError::NamespaceLimited(NamespaceRejection::Unavailable)
            | ApiError::DurableState(crate::durable_state::DurableRejection::Unavailable) => 503,
            ApiError::DurableState(_) => 429,
            ApiError::ExternalPayload(e) => e.status(),
            ApiError::NamespaceLimited(_)
            | ApiError::WaitCapacity { .. }
            | ApiError::CallWaitCapacity(_)
            | ApiError::StreamWaitCapacity(_) => 429,
            ApiError::WorkflowNotFound(_)
            | ApiError::NamespaceNotFound(_)
            | ApiError::WorkerNotFound(_)
            | ApiError::SearchAttributeNotFound(_)
            | ApiError::ScheduleNotFound(_)
            | ApiError::TaskQueueNotFound(_) => 404,
            ApiError::SearchAttributeConflict { .. }
            | ApiError::ScheduleExists(_)
            | ApiError::CancellationRefused { .. }
            | ApiError::BuildIdRollout { .. } => 409,
            ApiError::LocalActivityRefused { status, .. } => *status,
            ApiError::NamespaceCountLimit { .. } | ApiError::NamespaceNotDeletable { .. } => 409,
            ApiError::AlreadyStarted { .. }
            | ApiError::RunClosed { .. }
            | ApiError::QueryRejected(..) => 409,
            ApiError::InvalidPageToken(_) => 400,
            ApiError::QueryTimeout(_) => 504,
            ApiError::QueryTask(e) => match e {
                BrokerError::QueueFull { .. } => 429,
                BrokerError::NotFound(_) => 404,
                BrokerError::Stale { .. } => 409,
                BrokerError::QueueLockBusy | BrokerError::Cache(_) => 503,
            },
            ApiError::UpdateFailed(..) => 422,
            ApiError::ServiceCatalog { status, .. } => *status,
            ApiError::UpdateValidation { status, .. } => *status,
            ApiError::RedriveRefused { status, .. } => *status,
            ApiError::ServiceBoundary {
                refusal: BoundaryRefusal::RateLimited { .. },
                ..
            } => 429,
            ApiError::ServiceBoundary { .. } => 503,
            ApiError::Store(e) if e.is_disk_full() => 507,
            ApiError::Store(e) if e.is_unavailable() => 503,
            ApiError::Store(e) => match e {
                StoreError::RunNotFound(_)
                | StoreError::ItemNotFound { .. }
                | StoreError::StreamNotFound { .. } => 404,
                StoreError::StreamClosed { .. }
                | StoreError::StreamCountLimit { .. }
                | StoreError::StreamItemLimit { .. } => 409,
                StoreError::StreamBackpressure { .. } => 429,
                StoreError::RunNotActive { .. }
                | StoreError::AlreadyClosed { .. }
                | StoreError::StaleTask { .. }
                | StoreError::AttemptRunClosed { .. }
                | StoreError::ReadOnlyProjection(_)
                | StoreError::ProjectionTooLarge(_)
                | StoreError::RunNotClosed(_)
                | StoreError::AlreadyImported { .. } => 409,
                StoreError::UnknownUpdate(_)
                | StoreError::InvalidMemo(_)
                | StoreError::UnknownSelectionMember(_) => 422,
                StoreError::StructuralLimit(_) | StoreError::PendingPayloadBudget { .. } => 409,
                _ => 500,
            },
            ApiError::Cache(_) => 503,
            ApiError::WaitSlots(_) | ApiError::Disclosure(_) | ApiError::Internal(_) => 500,
        }
    }

    /// Seconds the client should wait before retrying (the `Retry-After`
    /// header), for refusals that clear by themselves. A refusal whose body
    /// carries `retry_after_seconds` takes it from the same method, so the
    /// header and the body always agree.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            // The queue lock is held for one broker call (its TTL, 10 s,
            // only covers a holder that died): a second is plenty.
            ApiError::QueryTask(BrokerError::QueueLockBusy) => Some(1),
            // Space is freed by an operator or by retention, not at once.
            ApiError::Store(e) if e.is_disk_full() => Some(STORAGE_FULL_RETRY_AFTER_SECONDS),
            // The database server stopped, restarting or unreachable.
            ApiError::Store(e) if e.is_unavailable() => {
                Some(DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS)
            }
            ApiError::ServiceBoundary {
                refusal:
                    BoundaryRefusal::RateLimited {
                        retry_after_seconds,
                        ..
                    },
                ..
            } => Some(*retry_after_seconds),
            ApiError::ServiceBoundary { .. } => Some(1),
            ApiError::DurableState(rejection) => rejection.retry_after_seconds(),
            ApiError::ExternalPayload(e) => e.retry_after_seconds(),
            // The polling cache (Redis) unreachable: a long poll or a write
            // that needs it first is refused before anything is written and
            // succeeds once the cache answers again.
            ApiError::Cache(_) => Some(CACHE_UNAVAILABLE_RETRY_AFTER_SECONDS),
            // Rate and concurrency budgets, long-poll caps, full query
            // queues, stream backpressure and stream wait caps clear within a
            // second or so.
            _ if self.status() == 429 => Some(1),
            _ => None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        match self {
            ApiError::Boundary(e) => serde_json::to_value(e).unwrap_or(Value::Null),
            ApiError::Structural(rejection) => {
                let mut body = serde_json::to_value(rejection).unwrap_or(Value::Null);
                if let Value::Object(map) = &mut body {
                    map.insert(
                        "message".into(),
                        "A structural limit refused the command; nothing was written.".into(),
                    );
                }
                body
            }
            ApiError::Store(StoreError::StructuralLimit(exceeded)) => {
                let rejection = Rejection::from(*exceeded);
                let mut body = serde_json::to_value(rejection).unwrap_or(Value::Null);
                if let Value::Object(map) = &mut body {
                    map.insert("message".into(), exceeded.to_string().into());
                }
                body
            }
            ApiError::Store(StoreError::PendingPayloadBudget {
                pending_bytes,
                payload_bytes,
                limit,
                ..
            }) => json!({
                "reason": "pending_payload_bytes_exceeded",
                "pending_bytes": pending_bytes,
                "payload_bytes": payload_bytes,
                "limit": limit,
                "message": self.to_string(),
            }),
            ApiError::DurableState(rejection) => rejection.body(),
            ApiError::ExternalPayload(e) => e.body(),
            ApiError::NamespaceLimited(reason) => {
                json!({ "reason": "namespace_request_limited", "limit": reason,
                        "rejection_reason": reason.metric_reason(), "retryable": true,
                        "message": self.to_string() })
            }
            ApiError::StreamWaitCapacity(cap) => json!({
                "reason": "stream_wait_capacity", "max_waiting_reads": cap, "retryable": true,
                "message": self.to_string(),
                "hint": "retry after Retry-After seconds, or read without wait_seconds",
            }),
            ApiError::WaitCapacity {
                refusal,
                task_kind,
                task_queue,
            } => json!({
                "reason": "long_poll_capacity_exhausted",
                "poll_status": "long_poll_capacity_exhausted",
                "task": null,
                "task_kind": task_kind,
                "task_queue": task_queue,
                "cap": refusal,
                "retryable": true,
                "retry_after_seconds": self.retry_after_seconds(),
                "message": self.to_string(),
            }),
            ApiError::BodyTimedOut(_) => json!({
                "reason": "request_body_timeout", "message": self.to_string(),
                "hint": "send the whole body within the timeout; large payloads go through /api/external-payloads",
            }),
            ApiError::CallWaitCapacity(refused) => json!({
                "reason": "wait_capacity", "wait_kind": refused.kind, "max_waits": refused.cap,
                "retryable": true, "message": self.to_string(),
                "hint": "retry after Retry-After seconds, or ask without waiting (wait_for=accepted)",
            }),
            ApiError::Disclosure(_) => {
                json!({ "reason": "metric_disclosure_refused", "message": self.to_string() })
            }
            ApiError::WorkflowNotFound(_) => {
                json!({ "reason": "workflow_not_found", "message": self.to_string() })
            }
            ApiError::NamespaceCountLimit { count, limit } => json!({
                "reason": "namespace_limit_exceeded", "namespaces": count, "limit": limit,
                "config_key": "DW_MAX_NAMESPACES", "message": self.to_string(),
                "hint": "delete an unused namespace (DELETE /api/namespaces/{name}) or raise DW_MAX_NAMESPACES",
            }),
            ApiError::NamespaceNotDeletable {
                namespace,
                reason,
                holds,
                ..
            } => json!({
                "reason": reason, "namespace": namespace, "holds": holds,
                "message": self.to_string(),
            }),
            ApiError::NamespaceNotFound(ns) => json!({
                "reason": "namespace_not_found", "namespace": ns, "message": self.to_string(),
                "hint": "register it with POST /api/namespaces (admin) or send X-Namespace: default",
            }),
            ApiError::Store(e) if e.is_disk_full() => json!({
                "reason": "storage_full", "retryable": true,
                "retry_after_seconds": STORAGE_FULL_RETRY_AFTER_SECONDS,
                "message": format!("the store cannot write: its disk is full ({e}); nothing was written"),
            }),
            // The database answers but this node's read connections are all
            // taken: an overload of this node, not an outage, and the
            // remedy is the operator's (more readers or more nodes) or time.
            ApiError::Store(StoreError::ReadersBusy(waited)) => json!({
                "reason": "store_readers_busy", "retryable": true,
                "retry_after_seconds": DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS,
                "waited_ms": u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                "message": format!(
                    "every read connection of this node stayed busy for {waited:?}, so the request was not served (nothing was written)"
                ),
                "hint": "retry after retry_after_seconds; if this persists the node is overloaded: raise DW_STORE_READERS or add a node",
            }),
            ApiError::Store(e) if e.is_unavailable() => {
                let cause = match e {
                    StoreError::DatabaseUnavailable(cause) => cause.clone(),
                    other => other.to_string(),
                };
                json!({
                    "reason": "database_unavailable", "retryable": true,
                    "retry_after_seconds": DATABASE_UNAVAILABLE_RETRY_AFTER_SECONDS,
                    "message": format!(
                        "the store's database cannot be reached ({cause}); retry once it is back: a write refused so was not done, or, if its commit was cut off, is found by the retry (a start by its workflow id, a signal or update by its request id)"
                    ),
                })
            }
            ApiError::AlreadyStarted {
                workflow_id,
                run_id,
                workflow_type,
            } => json!({
                "reason": "instance_already_started", "workflow_id": workflow_id,
                "run_id": run_id, "workflow_type": workflow_type, "message": self.to_string(),
            }),
            ApiError::RunClosed {
                operation,
                run_id,
                status,
            } => json!({
                "reason": "run_not_active", "control_plane_operation": operation,
                "run_id": run_id, "status": status, "message": self.to_string(),
            }),
            ApiError::WorkerNotFound(_) => {
                json!({ "reason": "worker_not_found", "message": self.to_string() })
            }
            ApiError::InvalidPageToken(_) => {
                json!({ "reason": "invalid_page_token", "message": self.to_string() })
            }
            ApiError::QueryRejected(message, failure) => json!({
                "reason": "query_rejected", "message": message, "failure": failure,
                "control_plane_operation": "query",
            }),
            ApiError::QueryTimeout(_) => {
                json!({ "reason": "query_worker_timeout", "message": self.to_string() })
            }
            ApiError::QueryTask(BrokerError::QueueFull {
                task_queue,
                pending,
                limit,
            }) => json!({
                "reason": "query_task_queue_full", "task_queue": task_queue,
                "pending_query_tasks": pending, "max_pending_per_queue": limit,
                "config_key": crate::query_tasks::QueryTaskSettings::MAX_PENDING_KEY,
                "message": self.to_string(),
                "hint": "retry once pending queries are answered or time out, or raise the cap (at most 10000)",
            }),
            ApiError::ServiceCatalog {
                reason,
                message,
                details,
                ..
            }
            | ApiError::UpdateValidation {
                reason,
                message,
                details,
                ..
            }
            | ApiError::RedriveRefused {
                reason,
                message,
                details,
                ..
            }
            | ApiError::BuildIdRollout {
                reason,
                message,
                details,
            } => {
                let mut body = json!({ "reason": reason, "message": message });
                merge(&mut body, details);
                body
            }
            ApiError::ServiceBoundary { refusal, details } => {
                let mut body = match refusal {
                    BoundaryRefusal::RateLimited {
                        scope,
                        limit,
                        observed,
                        retry_after_seconds,
                    } => json!({
                        "reason": "service_call_rate_limited",
                        "outcome": "rejected_throttled",
                        "admission_scope": scope,
                        "requests_per_minute": limit,
                        "observed_window_count": observed,
                        "retry_after_seconds": retry_after_seconds,
                        "retryable": true,
                        "config_key": match scope {
                            crate::service_boundary::BudgetScope::CallerNamespace => ServiceBoundaryBudgets::PER_NAMESPACE_KEY,
                            crate::service_boundary::BudgetScope::Boundary => ServiceBoundaryBudgets::PER_BOUNDARY_KEY,
                        },
                        "message": "The shared service-call budget of this window is spent; retry after retry_after_seconds.",
                    }),
                    BoundaryRefusal::Unavailable => json!({
                        "reason": "service_boundary_admission_unavailable",
                        "outcome": "rejected_throttled",
                        "retry_after_seconds": 1,
                        "retryable": true,
                        "message": "A service-call budget is configured but the cache holding it cannot be reached.",
                    }),
                };
                body["policy_name"] = SharedServiceBoundaryPolicy::POLICY_NAME.into();
                merge(&mut body, details);
                body
            }
            ApiError::QueryTask(BrokerError::QueueLockBusy) => json!({
                "reason": "query_task_queue_busy", "retryable": true,
                "retry_after_seconds": self.retry_after_seconds(),
                "message": self.to_string(),
                "hint": "the task queue's query-task lock is held by another call; retry after Retry-After seconds",
            }),
            ApiError::QueryTask(BrokerError::NotFound(task)) => json!({
                "reason": "query_task_not_found", "query_task_id": task, "message": self.to_string(),
            }),
            ApiError::QueryTask(BrokerError::Stale { task, reason }) => json!({
                "reason": "query_task_not_leased", "query_task_id": task, "fence": reason,
                "message": self.to_string(),
            }),
            ApiError::UpdateFailed(message, body) => {
                let mut out = json!({
                    "reason": "update_failed", "update_status": "failed",
                    "failure_message": message, "message": message,
                });
                if let (Value::Object(out), Value::Object(extra)) = (&mut out, body) {
                    for (k, v) in extra {
                        out.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                out
            }
            ApiError::Store(StoreError::StaleTask { task, reason }) => json!({
                "reason": "stale_task_lease", "task_id": task.to_string(), "fence": reason,
                "message": self.to_string(),
            }),
            // The shape both SDKs treat as final for the attempt (the Rust
            // SDK's activity_task_rejection_is_final): nothing to retry.
            ApiError::Store(StoreError::AttemptRunClosed { task, status }) => json!({
                "reason": run_closed_reason(*status), "task_id": task.to_string(),
                "cancel_requested": true, "can_continue": false,
                "run_closed_reason": status.as_str(), "message": self.to_string(),
            }),
            ApiError::Store(StoreError::ProjectionTooLarge(too_large)) => json!({
                "reason": too_large.reason, "limit": too_large.limit,
                "message": self.to_string(),
            }),
            ApiError::Store(StoreError::AlreadyImported { run, .. }) => json!({
                "reason": "v1_projection_already_imported", "run_id": run.to_string(),
                "message": self.to_string(),
            }),
            ApiError::Store(StoreError::ReadOnlyProjection(run)) => json!({
                "reason": "v1_projection_read_only", "run_id": run.to_string(),
                "message": self.to_string(),
            }),
            ApiError::Store(StoreError::RunNotClosed(run)) => json!({
                "reason": "run_not_closed", "control_plane_operation": "archive",
                "run_id": run.to_string(), "status": "running", "message": self.to_string(),
            }),
            ApiError::SearchAttributeConflict {
                reason,
                message,
                existing_type,
            } => {
                let mut body = json!({ "reason": reason, "message": message });
                if let Some(kind) = existing_type {
                    body["type"] = kind.clone().into();
                }
                body
            }
            ApiError::CancellationRefused { reason, message } => json!({
                "reason": reason, "delivered": false, "message": message,
            }),
            ApiError::LocalActivityRefused {
                reason, message, ..
            } => json!({
                "reason": reason, "message": message,
            }),
            ApiError::ScheduleExists(id) => json!({
                "reason": "schedule_already_exists", "schedule_id": id, "message": self.to_string(),
            }),
            ApiError::ScheduleNotFound(id) => json!({
                "reason": "schedule_not_found", "schedule_id": id, "message": self.to_string(),
            }),
            ApiError::TaskQueueNotFound(name) => json!({
                "reason": "task_queue_not_found", "task_queue": name, "message": self.to_string(),
            }),
            ApiError::SearchAttributeNotFound(name) => json!({
                "reason": "search_attribute_not_found", "name": name, "message": self.to_string(),
            }),
            ApiError::Store(StoreError::StreamNotFound { run, name }) => json!({
                "reason": "workflow_stream_not_found", "run_id": run.to_string(),
                "stream_name": name, "message": self.to_string(),
            }),
            ApiError::Store(StoreError::StreamClosed { run, name, status }) => json!({
                "reason": "workflow_stream_closed", "run_id": run.to_string(),
                "stream_name": name, "status": status, "message": self.to_string(),
            }),
            ApiError::Store(StoreError::StreamBackpressure {
                name,
                pending_items,
                requested,
                max_pending_items,
            }) => json!({
                "reason": "workflow_stream_backpressure", "stream_name": name,
                "pending_items": pending_items, "requested_items": requested,
                "max_pending_items": max_pending_items, "retryable": true,
                "message": self.to_string(),
                "hint": "read the stream (a read from offset n acknowledges every item before n), then retry",
            }),
            ApiError::Store(StoreError::StreamCountLimit {
                run,
                streams,
                limit,
            }) => json!({
                "reason": "workflow_stream_limit_exceeded", "run_id": run.to_string(),
                "streams": streams, "max_streams_per_run": limit,
                "config_key": "DW_WORKFLOW_STREAMS_PER_RUN", "message": self.to_string(),
            }),
            ApiError::Store(StoreError::StreamItemLimit {
                run,
                name,
                items,
                requested,
                limit,
            }) => json!({
                "reason": "workflow_stream_item_limit_exceeded", "run_id": run.to_string(),
                "stream_name": name, "items": items, "requested_items": requested,
                "max_items_per_stream": limit,
                "config_key": "DW_WORKFLOW_STREAM_MAX_ITEMS", "message": self.to_string(),
            }),
            ApiError::Store(StoreError::InvalidMemo(problem)) => json!({
                "reason": "validation_failed", "message": self.to_string(),
                "validation_errors": { "entries": [problem] },
            }),
            ApiError::Store(StoreError::AlreadyClosed {
                item: "activity",
                status,
                ..
            }) if status == "cancelled" => json!({
                "reason": "activity_cancelled", "message": self.to_string(),
            }),
            ApiError::Store(StoreError::UnknownSelectionMember(problem)) => json!({
                "reason": "validation_failed", "message": self.to_string(),
                "validation_errors": { "commands": [problem] },
            }),
            ApiError::Store(StoreError::UnknownUpdate(id)) => json!({
                "reason": "validation_failed", "message": self.to_string(),
                "validation_errors": { "update_id": [format!("Update {id:?} is not an accepted update of this run.")] },
            }),
            ApiError::Cache(_) => json!({
                "reason": "cache_unavailable", "retryable": true,
                "retry_after_seconds": CACHE_UNAVAILABLE_RETRY_AFTER_SECONDS,
                "message": self.to_string(),
            }),
            other => {
                let reason = match other.status() {
                    400 => "malformed_request",
                    404 => "not_found",
                    409 => "conflict",
                    503 => "cache_unavailable",
                    _ => "internal_error",
                };
                json!({ "reason": reason, "message": other.to_string() })
            }
        }
    }
}

/// The reason an activity attempt's report names when its run closed under
/// it: the two the SDKs know by name, and `run_closed` for the rest.
pub fn run_closed_reason(status: crate::store::RunStatus) -> &'static str {
    match status {
        crate::store::RunStatus::Cancelled => "run_cancelled",
        crate::store::RunStatus::Terminated => "run_terminated",
        _ => "run_closed",
    }
}

/// Adds `extra`'s fields to `body` where `body` has none of that name.
fn merge(body: &mut Value, extra: &Value) {
    if let (Value::Object(body), Value::Object(extra)) = (body, extra) {
        for (k, v) in extra {
            body.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// Ends boundary validation, adding a `required` error for each empty
/// field of `required`, so a client gets every problem in one answer.
pub fn finish_validation(
    validator: RequestValidator<'_>,
    required: &[(&str, &str)],
) -> Result<(), BoundaryError> {
    finish_with(validator, required, &[])
}

/// As [`finish_validation`], with further (field, problem) pairs found by
/// the caller (range checks), all in one 422.
pub fn finish_with(
    mut validator: RequestValidator<'_>,
    required: &[(&str, &str)],
    problems: &[(String, String)],
) -> Result<(), BoundaryError> {
    let mut errors: BTreeMap<String, Vec<String>> = match validator.finish() {
        Ok(()) => BTreeMap::new(),
        Err(BoundaryError::ValidationFailed {
            validation_errors, ..
        }) => validation_errors,
        Err(other) => return Err(other),
    };
    for (field, problem) in problems {
        errors
            .entry(field.clone())
            .or_default()
            .push(problem.clone());
    }
    for (field, value) in required {
        if value.trim().is_empty() {
            errors
                .entry((*field).to_owned())
                .or_default()
                .push(format!("The {field} field is required."));
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    let count: usize = errors.values().map(Vec::len).sum();
    Err(BoundaryError::ValidationFailed {
        message: format!(
            "The request is invalid: {count} problem(s) in {} field(s).",
            errors.len()
        ),
        validation_errors: errors,
    })
}

#[cfg(test)]
mod cache_refusal_tests {
    use super::*;

    #[test]
    fn a_refusal_for_an_unreachable_cache_says_when_to_retry() {
        let refused = ApiError::Cache(CacheError::Backend("connection refused".into()));
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.retry_after_seconds(), Some(1));
        let body = refused.body();
        assert_eq!(body["reason"], "cache_unavailable");
        assert_eq!(body["retryable"], true);
        assert_eq!(
            body["retry_after_seconds"], 1,
            "the header and the body agree"
        );
    }

    #[test]
    fn busy_readers_are_an_overload_not_an_outage() {
        let refused = ApiError::Store(StoreError::ReadersBusy(crate::store::readers::READ_WAIT));
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.retry_after_seconds(), Some(1));
        let body = refused.body();
        assert_eq!(body["reason"], "store_readers_busy", "{body}");
        assert_eq!(body["retryable"], true);
        assert_eq!(body["retry_after_seconds"], 1);
        assert_eq!(body["waited_ms"], 10_000);
        assert!(
            body["hint"].as_str().unwrap().contains("DW_STORE_READERS"),
            "{body}"
        );
        // An outage keeps its own reason.
        let down = ApiError::Store(StoreError::DatabaseUnavailable("refused".into()));
        assert_eq!(down.body()["reason"], "database_unavailable");
    }
}
