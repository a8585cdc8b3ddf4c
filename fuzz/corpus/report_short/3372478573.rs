//! Keys under "server:docs-only:" in a doc comment are not code.
pub mod polling;
pub mod metrics;
