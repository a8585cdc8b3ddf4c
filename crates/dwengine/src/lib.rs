//! dwengine: the durable-workflow runtime whose growth surfaces dwlint gates.
//!
//! Every cache-key family and metric this crate emits is declared in
//! `policy/dw-bounded-growth.toml` and documented in `docs/bounded-growth.md`;
//! `dwlint check` fails the change that adds one without the other. The same
//! policy is embedded at compile time ([`policy::embedded`]) so the run-time
//! guards enforce what the gate reviewed.

pub mod admission;
pub mod cache;
pub mod cluster;
pub mod conformance;
pub mod diagnostics;
pub mod durable_state;
pub mod external_payloads;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod poll_requests;
pub mod polling;
pub mod projections;
pub mod query_tasks;
pub mod queue;
pub mod readiness;
pub mod registry;
pub mod retention;
pub mod schedule_spec;
pub mod server;
pub mod service_boundary;
pub mod store;
pub mod wait_slots;
pub mod waiters;
pub mod workflow_task_failures;

/// Wall-clock Unix milliseconds (0 before the epoch).
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
