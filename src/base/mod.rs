//! The base layer: what every stage and command shares, and nothing of the
//! pipeline itself.
//!
//! Why a run fails ([`error::RunError`]), a finding ([`diagnostic`]),
//! positions in a text ([`line_index`]), reading a named input file safely
//! ([`bounded_read`]) and a run's phase timings ([`timings`]). It uses no
//! other module of the crate, so every layer may use it.

pub mod bounded_read;
pub mod diagnostic;
pub mod error;
pub mod line_index;
pub mod timings;
