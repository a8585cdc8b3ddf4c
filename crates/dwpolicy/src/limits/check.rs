//! Checking a value against a structural limit.
//!
//! The engine calls this at every enforcement point (scheduling, intake,
//! upserts, each executor iteration). The result is either a typed failure
//! whose serde form is the seed's machine-readable metadata, or, below the
//! limit, an optional approaching-limit warning that gives operators time to
//! react before a run fails.
//!
//! Exact edges, with `limit > 0` (a limit of `0` never fails nor warns):
//! - count kinds fail when `current >= limit`: `current` is how many already
//!   exist before one more is scheduled or accepted;
//! - `command_batch_size` (the batch measure) fails when `leaves > limit`, like
//!   the reference engine's `batchSize > limit` guard: the whole fan-out is
//!   counted before any of it is scheduled, so exactly 1,000 leaves pass at 1,000;
//! - size kinds fail when `bytes > limit`: a payload of exactly `limit` bytes fits;
//! - count and batch kinds warn when they do not fail and
//!   `current * 100 >= limit * threshold`, i.e. when utilization is at or above
//!   the threshold. With 2000 and 80%: 1599 (79.95%) is silent, 1600 (80%) and
//!   1601 warn; a batch of exactly its limit warns at 100%. Size kinds never
//!   warn, as in the seed, and a threshold of `0` disables warnings.
//! - `utilization_percent` is `floor(current * 100 / limit)`, so a warning never
//!   shows a utilization below its threshold.

use std::fmt;

use crate::limits::config::StructuralLimits;
use crate::limits::kind::{LimitKind, Measure};

/// The `failure_category` of every structural limit failure.
pub const FAILURE_CATEGORY: &str = "structural_limit";

/// The rejection reason when intake refuses a signal or update at a limit.
pub const REJECTION_REASON: &str = "structural_limit_exceeded";

/// Where the `tracing` warning events are emitted.
pub const WARNING_TARGET: &str = "dwpolicy::structural_limits";

/// A structural limit was reached: fail the run, or reject the command at intake.
///
/// Serializes as the seed's machine-readable metadata:
/// `{"failure_category":"structural_limit","structural_limit_kind":…,
/// "structural_limit_value":…,"structural_limit_configured":…}`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize,
)]
#[serde(into = "ExceededWire", try_from = "ExceededWire")]
#[error("structural limit [{kind}] exceeded: {value} / {configured}")]
pub struct StructuralLimitExceeded {
    /// Which limit.
    pub kind: LimitKind,
    /// The current count or size that hit it.
    pub value: u64,
    /// The configured ceiling.
    pub configured: u64,
}

impl StructuralLimitExceeded {
    /// Always [`FAILURE_CATEGORY`]; a method so callers need not import the constant.
    pub fn failure_category(&self) -> &'static str {
        FAILURE_CATEGORY
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExceededWire {
    failure_category: String,
    structural_limit_kind: LimitKind,
    structural_limit_value: u64,
    structural_limit_configured: u64,
}

impl From<StructuralLimitExceeded> for ExceededWire {
    fn from(e: StructuralLimitExceeded) -> Self {
        ExceededWire {
            failure_category: FAILURE_CATEGORY.to_owned(),
            structural_limit_kind: e.kind,
            structural_limit_value: e.value,
            structural_limit_configured: e.configured,
        }
    }
}

impl TryFrom<ExceededWire> for StructuralLimitExceeded {
    type Error = String;
    fn try_from(wire: ExceededWire) -> Result<Self, String> {
        if wire.failure_category != FAILURE_CATEGORY {
            return Err(format!(
                "failure_category must be \"{FAILURE_CATEGORY}\", found \"{}\"",
                wire.failure_category
            ));
        }
        Ok(StructuralLimitExceeded {
            kind: wire.structural_limit_kind,
            value: wire.structural_limit_value,
            configured: wire.structural_limit_configured,
        })
    }
}

/// The run a check is about; only used to label warnings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRef<'a> {
    /// The workflow run ID as the engine prints it.
    pub workflow_run_id: &'a str,
    /// The workflow type.
    pub workflow_type: &'a str,
}

/// A run has crossed the warning threshold of a count limit.
///
/// Carries the seed's structured log context; [`ApproachingLimit::emit`]
/// writes it through `tracing`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApproachingLimit {
    /// The run.
    pub workflow_run_id: String,
    /// Its workflow type.
    pub workflow_type: String,
    /// Which limit it approaches.
    pub limit_kind: LimitKind,
    /// The current count.
    pub current: u64,
    /// The configured ceiling.
    pub limit: u64,
    /// `floor(current * 100 / limit)`.
    pub utilization_percent: u64,
    /// The threshold that was crossed.
    pub warning_threshold_percent: u8,
}

impl ApproachingLimit {
    /// The log line, in the seed's exact wording.
    pub fn message(&self) -> String {
        self.to_string()
    }

    /// Writes the warning as a `tracing` WARN event with the structured fields.
    pub fn emit(&self) {
        tracing::warn!(
            target: WARNING_TARGET,
            workflow_run_id = %self.workflow_run_id,
            workflow_type = %self.workflow_type,
            limit_kind = self.limit_kind.as_str(),
            current = self.current,
            limit = self.limit,
            utilization_percent = self.utilization_percent,
            warning_threshold_percent = self.warning_threshold_percent,
            "{self}"
        );
    }
}

impl fmt::Display for ApproachingLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[Durable Workflow] Run {} approaching structural limit [{}]: {} / {} ({}% utilization, warning at {}%).",
            self.workflow_run_id,
            self.limit_kind,
            self.current,
            self.limit,
            self.utilization_percent,
            self.warning_threshold_percent
        )
    }
}

impl StructuralLimits {
    /// Checks `value` (a count before adding one more, or a size in bytes) against `kind`.
    ///
    /// See the module docs for the exact edges. Emits nothing; use
    /// [`StructuralLimits::check_and_warn`] to also log the warning.
    pub fn check(
        &self,
        kind: LimitKind,
        value: u64,
        run: &RunRef<'_>,
    ) -> Result<Option<ApproachingLimit>, StructuralLimitExceeded> {
        let limit = self.get(kind);
        if limit == 0 {
            return Ok(None);
        }
        let exceeded = match kind.measure() {
            Measure::Count => value >= limit,
            Measure::Batch | Measure::Size => value > limit,
        };
        if exceeded {
            return Err(StructuralLimitExceeded {
                kind,
                value,
                configured: limit,
            });
        }
        let threshold = self.warning_threshold();
        // u128 products: u64 * 100 cannot overflow there.
        let crossed = u128::from(value) * 100 >= u128::from(limit) * u128::from(threshold);
        if kind.measure() == Measure::Size || threshold == 0 || !crossed {
            return Ok(None);
        }
        let utilization = u128::from(value) * 100 / u128::from(limit);
        Ok(Some(ApproachingLimit {
            workflow_run_id: run.workflow_run_id.to_owned(),
            workflow_type: run.workflow_type.to_owned(),
            limit_kind: kind,
            current: value,
            limit,
            // value <= limit here, so utilization <= 100.
            utilization_percent: u64::try_from(utilization).unwrap_or(u64::MAX),
            warning_threshold_percent: threshold,
        }))
    }

    /// [`check`](Self::check), emitting any warning through `tracing` before returning it.
    pub fn check_and_warn(
        &self,
        kind: LimitKind,
        value: u64,
        run: &RunRef<'_>,
    ) -> Result<Option<ApproachingLimit>, StructuralLimitExceeded> {
        let outcome = self.check(kind, value, run)?;
        if let Some(warning) = &outcome {
            warning.emit();
        }
        Ok(outcome)
    }
}
