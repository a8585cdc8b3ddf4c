//! dwlint: the bounded-growth gate.
//!
//! The library holds everything; `main.rs` only maps the result of
//! [`cli::run`] to an exit code. The pipeline, in order: [`policy`] →
//! [`discover`] → [`scan`] (with the [`extract`]ors) → [`inventory`] →
//! [`rules`] → [`report`], with the [`commands`] above it and [`cli`] on
//! top; [`base`] holds what they all share. Each folder is a layer that uses
//! only the layers below it (`docs/architecture.md` draws them).

pub mod base;
pub mod cli;
pub mod commands;
pub mod discover;
pub mod extract;
#[doc(hidden)]
pub mod harness;
pub mod inventory;
pub mod policy;
pub mod report;
pub mod rules;
pub mod scan;
