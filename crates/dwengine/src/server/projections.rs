//! Projection drift and rebuild for the operator surfaces.
//!
//! `/api/system/health` and `/api/system/metrics` read the drift report
//! through the engine's [`DriftCache`](crate::projections::DriftCache);
//! `POST /api/system/projections/rebuild` writes the projections of at most
//! `limit` eligible runs again in one transition and answers with the
//! report after it.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::projections::ProjectionDriftMetrics;
use crate::server::{ApiError, Engine};
use crate::store::projections::DriftReport;

/// The body of a rebuild request.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebuildRequest {
    /// Runs to rebuild at most (default 1,000, clamped to 1..=10,000).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// The rebuild batch when the request names none.
pub const DEFAULT_REBUILD_LIMIT: usize = 1_000;
/// The largest rebuild batch one request may ask for (one transaction).
pub const MAX_REBUILD_LIMIT: usize = 10_000;

impl Engine {
    /// The drift report, at most [`DriftCache::DEFAULT_TTL`] old.
    ///
    /// [`DriftCache::DEFAULT_TTL`]: crate::projections::DriftCache::DEFAULT_TTL
    pub fn projection_drift(&self) -> Result<DriftReport, ApiError> {
        let now = crate::unix_ms();
        Ok(self
            .drift
            .get_or_compute(|| self.read(|s| s.projection_drift(now)))?)
    }

    /// The health block of the drift report.
    pub fn projection_health(&self) -> Result<Value, ApiError> {
        Ok(ProjectionDriftMetrics::health(&self.projection_drift()?))
    }

    /// Rebuilds the projections of at most `limit` eligible runs.
    pub fn rebuild_projections(&self, request: RebuildRequest) -> Result<Value, ApiError> {
        let limit = request
            .limit
            .map_or(DEFAULT_REBUILD_LIMIT, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            })
            .clamp(1, MAX_REBUILD_LIMIT);
        let rebuilt = self.write(move |s| s.rebuild_projections(limit))?;
        self.drift.invalidate();
        Ok(json!({
            "rebuilt_runs": rebuilt.rebuilt_runs,
            "more": rebuilt.more,
            "limit": limit,
            "projections": self.projection_health()?,
        }))
    }
}
