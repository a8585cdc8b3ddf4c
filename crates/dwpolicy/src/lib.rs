//! The bounded-growth contract, shared by the static gate (`dwlint`) and the
//! runtime engine (`dwengine`).
//!
//! Both halves read the same policy file through [`Policy::from_toml_str`] (or
//! the two-phase [`load`] API that keeps spans for diagnostics), so the gate
//! that reviews a change and the engine that runs it cannot drift apart.
//! This crate deliberately depends on nothing heavier than `toml` and `serde`:
//! the engine links it at run time.
//!
//! The modules form layers, each using only those below it: `span`, `keys`
//! (the valid key lists) and `env` at the bottom; `model` (the policy) and
//! `checks` (its review) above them; `fast` (the one-pass reader) over the
//! model; `load` on top of the policy half, trying `fast` first and falling
//! back to `toml`. The run-time guards (`limits`, `history`, `boundary`,
//! `series`, `disclosure`) sit beside the policy half: most read their
//! settings through `env`, and `disclosure` reads the policy through `load`.
#![deny(missing_docs)]

pub mod checks;
mod fast;
mod keys;
pub mod load;
pub mod model;
pub mod span;

pub use checks::{PolicyFinding, PolicyFindingCode};
pub use load::{LoadError, LoadErrors};
pub use model::{
    CacheKeyPolicy, CardinalityClass, Dimension, MetricPolicy, Policy, ScanLimitPolicy, Settings,
    Sources,
};
pub use span::{Span, Spanned};

// Run-time guards (issue: dwpolicy run-time guards) register their modules below.
pub mod boundary;
pub mod disclosure;
pub mod env;
pub mod history;
pub mod limits;
pub mod series;

pub use boundary::{BoundaryError, ClusterLimits, RequestLimits, RequestValidator};
pub use disclosure::{DisclosedDimension, Disclosure, DisclosureError, MetricGuard};
pub use env::{EnvConfigError, InvalidEnvValue};
pub use history::{HistoryBudget, HistoryBudgetError, ProjectionTooLarge};
pub use limits::{
    ApproachingLimit, BackendCapabilities, BackendProfile, HealthSnapshot, LimitKind, RunRef,
    StructuralLimitExceeded, StructuralLimits,
};
pub use series::{SeriesLimit, SeriesLimitSpec, SeriesLimiter, SeriesReport};
