//! dwlint: the bounded-growth gate.
//!
//! The library holds everything; `main.rs` only maps the result of
//! [`cli::run`] to an exit code. The pipeline, in order: [`policy_file`] →
//! [`walk`] → [`scan`] (with the [`extract`]ors) → [`inventory`] →
//! [`rules`] → [`report`].

pub mod bounded_read;
pub mod changed;
pub mod check;
pub mod cli;
pub mod commands;
pub mod diagnostic;
pub mod discover;
pub mod docs_sync;
pub mod error;
pub mod evidence;
pub mod extract;
pub mod generated_file;
#[doc(hidden)]
pub mod harness;
pub mod init;
pub mod inventory;
pub mod live;
pub mod normalize;
pub mod output;
pub mod owners;
pub mod policy_file;
pub mod policy_import;
pub mod policy_toml;
pub mod prefilter;
pub mod report;
pub mod rules;
pub mod scan;
pub mod severity;
pub mod single_report;
pub mod timings;
pub mod walk;
