//! Publishing the structural limits: health snapshot and backend capabilities.
//!
//! Operators and tools read the limits in force from these JSON documents
//! instead of the config files, so the shapes are a public contract and are
//! pinned by snapshot tests. The backend contract also says where the
//! infrastructure adds a constraint of its own that no configuration can
//! lift (SQS delay caps, SQLite's serialized writes).

use crate::limits::config::StructuralLimits;

/// The v2 health snapshot's structural-limit section: `{"structural_limits": {...}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HealthSnapshot {
    /// The active ceilings, keyed by limit kind, plus `warning_threshold_percent`.
    pub structural_limits: StructuralLimits,
}

impl HealthSnapshot {
    /// The snapshot of `limits`.
    pub fn new(limits: StructuralLimits) -> Self {
        HealthSnapshot {
            structural_limits: limits,
        }
    }
}

/// The infrastructure a process runs on, by driver name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendProfile<'a> {
    /// The queue driver, e.g. `sqs`, `redis`, `database`.
    pub queue_driver: &'a str,
    /// The database driver, e.g. `sqlite`, `mysql`, `pgsql`.
    pub database_driver: &'a str,
}

/// Amazon SQS refuses a message delay above this many seconds.
pub const SQS_MAX_DELAY_SECONDS: u64 = 900;

/// How safely the database handles concurrent writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteSafety {
    /// Writes are serialized; high pending limits contend for the lock.
    Limited,
}

/// Constraints a backend adds on top of the configured limits.
///
/// Serializes only the constraints that apply, so `{}` means "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct BackendAdjustments {
    /// Longest delay one queued message can carry; longer timers are chunked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_single_timer_delay_seconds: Option<u64>,
    /// Set when the database serializes writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrent_write_safety: Option<WriteSafety>,
}

/// How serious a [`BackendIssue`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IssueSeverity {
    /// Worth knowing; nothing to fix.
    Info,
    /// Likely to cause trouble under load.
    Warning,
    /// The configuration cannot work on this backend.
    Error,
}

/// One finding of the backend capabilities check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackendIssue {
    /// The contract section it concerns (always `structural_limits` here).
    pub component: &'static str,
    /// How serious it is.
    pub severity: IssueSeverity,
    /// A stable machine-readable code.
    pub code: &'static str,
    /// One sentence for operators.
    pub message: String,
}

/// The configured limits with backend adjustments merged in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct EffectiveLimits {
    #[serde(flatten)]
    configured: StructuralLimits,
    #[serde(flatten)]
    adjustments: BackendAdjustments,
}

/// The backend capabilities contract's `structural_limits` section.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackendCapabilities {
    /// The limits as configured.
    pub configured: StructuralLimits,
    /// What the backend adds.
    pub backend_adjustments: BackendAdjustments,
    /// `configured` and `backend_adjustments` in one object.
    pub effective: EffectiveLimits,
    /// Findings for operators, most relevant first.
    pub issues: Vec<BackendIssue>,
}

impl BackendCapabilities {
    /// Evaluates `limits` on `backend`. Driver names compare case-insensitively.
    pub fn new(limits: StructuralLimits, backend: BackendProfile<'_>) -> Self {
        let mut adjustments = BackendAdjustments::default();
        let mut issues = Vec::new();
        if backend.queue_driver.eq_ignore_ascii_case("sqs") {
            adjustments.max_single_timer_delay_seconds = Some(SQS_MAX_DELAY_SECONDS);
            issues.push(BackendIssue {
                component: "structural_limits",
                severity: IssueSeverity::Info,
                code: "queue_max_delay_constraint",
                message: format!(
                    "The [{}] queue driver limits delayed dispatch to {SQS_MAX_DELAY_SECONDS} seconds; timers exceeding this are chunked by the transport layer.",
                    backend.queue_driver
                ),
            });
        }
        if backend.database_driver.eq_ignore_ascii_case("sqlite") {
            adjustments.concurrent_write_safety = Some(WriteSafety::Limited);
            issues.push(BackendIssue {
                component: "structural_limits",
                severity: IssueSeverity::Info,
                code: "database_concurrent_write_constraint",
                message: format!(
                    "The [{}] database driver serializes writes; high pending-count limits may cause lock contention under concurrent worker load.",
                    backend.database_driver
                ),
            });
        }
        BackendCapabilities {
            configured: limits,
            backend_adjustments: adjustments,
            effective: EffectiveLimits {
                configured: limits,
                adjustments,
            },
            issues,
        }
    }
}
