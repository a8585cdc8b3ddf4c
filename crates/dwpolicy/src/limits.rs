//! Structural limits: per-run ceilings that stop a runaway workflow.
//!
//! A single workflow run can fan out, grow payloads or write history without
//! bound. These limits put a configured ceiling on each such resource, warn
//! operators as a run approaches one, and fail the run (or reject a command)
//! with a typed, machine-readable `structural_limit` failure when it is hit.
//! The submodules split the contract by concern: what the kinds are, how they
//! are configured, how a value is checked, and how the configuration is
//! published to health and backend-capability snapshots.

pub mod check;
pub mod config;
pub mod kind;
pub mod snapshot;

pub use check::{
    ApproachingLimit, RunRef, StructuralLimitExceeded, FAILURE_CATEGORY, REJECTION_REASON,
    WARNING_TARGET,
};
pub use config::StructuralLimits;
pub use kind::{LimitKind, Measure};
pub use snapshot::{
    BackendAdjustments, BackendCapabilities, BackendIssue, BackendProfile, EffectiveLimits,
    HealthSnapshot, IssueSeverity, WriteSafety, SQS_MAX_DELAY_SECONDS,
};
