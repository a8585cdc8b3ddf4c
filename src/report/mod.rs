//! Reporters: turning a [`CheckReport`](crate::check::CheckReport) into text
//! for people (`human`) or programs (`json`).

pub mod human;
pub mod json;
