//! dwlint: the bounded-growth gate.
//!
//! The library holds everything; `main.rs` only maps the result of
//! [`cli::run`] to an exit code.

pub mod extract;
