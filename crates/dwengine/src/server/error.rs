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
use crate::store::{Error as StoreError, Rejection};
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
    /// The node holds its cap of long-poll waits.
    #[error("long-poll capacity: {0:?}")]
    WaitCapacity(WaitRefusal),
    /// No such workflow.
    #[error("workflow {0} not found")]
    WorkflowNotFound(String),
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
    /// A worker thread failed.
    #[error("internal: {0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::Boundary(e) => e.status(),
            ApiError::Malformed(_) => 400,
            ApiError::Structural(_) => 409,
            ApiError::NamespaceLimited(_) | ApiError::WaitCapacity(_) => 429,
            ApiError::WorkflowNotFound(_) => 404,
            ApiError::Store(e) => match e {
                StoreError::RunNotFound(_) | StoreError::ItemNotFound { .. } => 404,
                StoreError::RunNotActive { .. }
                | StoreError::AlreadyClosed { .. }
                | StoreError::ReadOnlyProjection(_) => 409,
                StoreError::StructuralLimit(_) | StoreError::PendingPayloadBudget { .. } => 409,
                _ => 500,
            },
            ApiError::Cache(_) => 503,
            ApiError::WaitSlots(_) | ApiError::Disclosure(_) | ApiError::Internal(_) => 500,
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
            ApiError::NamespaceLimited(reason) => {
                json!({ "reason": "namespace_request_limited", "limit": reason, "message": self.to_string() })
            }
            ApiError::WaitCapacity(refusal) => {
                json!({ "reason": "long_poll_capacity", "cap": refusal, "message": self.to_string() })
            }
            ApiError::Disclosure(_) => {
                json!({ "reason": "metric_disclosure_refused", "message": self.to_string() })
            }
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

/// Ends boundary validation, adding a `required` error for each empty
/// field of `required`, so a client gets every problem in one answer.
pub fn finish_validation(
    mut validator: RequestValidator<'_>,
    required: &[(&str, &str)],
) -> Result<(), BoundaryError> {
    let mut errors: BTreeMap<String, Vec<String>> = match validator.finish() {
        Ok(()) => BTreeMap::new(),
        Err(BoundaryError::ValidationFailed {
            validation_errors, ..
        }) => validation_errors,
        Err(other) => return Err(other),
    };
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
