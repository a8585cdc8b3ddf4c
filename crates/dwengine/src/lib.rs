//! dwengine: the durable-workflow runtime whose growth surfaces dwlint gates.
//!
//! Every cache-key family and metric this crate emits is declared in
//! `policy/dw-bounded-growth.toml` and documented in `docs/bounded-growth.md`;
//! `dwlint check` fails the change that adds one without the other. The same
//! policy is embedded at compile time ([`policy::embedded`]) so the run-time
//! guards enforce what the gate reviewed.

pub mod cache;
pub mod metrics;
pub mod policy;
pub mod polling;
pub mod readiness;
pub mod store;
