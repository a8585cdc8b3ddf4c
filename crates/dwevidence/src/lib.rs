//! Soak evidence: what a soak run records and when that record can be trusted.
//!
//! The harness that writes `build/perf/summary.json` (`dwsoak`) and the gate
//! that re-checks it (`dwlint evidence verify`) must agree on one schema and
//! one definition of the `trusted_long_soak_v1` profile, or the verifier
//! would be checking a different contract from the one the harness claims.
//! They share this crate instead of the gate (which would drag syn, clap and
//! miette into the harness) or `dwpolicy` (which the engine links and must
//! stay light): it depends only on `dwpolicy`, `serde` and a SHA-256. The
//! verifier stays independent of the harness's *verdict*: it recomputes every
//! condition from the raw fields and its own reading of the policy in the
//! tree, and reports a recorded verdict that disagrees.
#![deny(missing_docs)]

pub mod digest;
pub mod html;
pub mod live;
pub mod profile;
pub mod sample;
pub mod slope;
pub mod summary;
pub mod thresholds;

pub use profile::{evaluate, Condition, ConditionFailure, Reference};
pub use summary::{Summary, SCHEMA_VERSION};
