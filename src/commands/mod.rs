//! The commands layer: one module per thing `dwlint` is asked to do
//! (`check`, `init`, `docs`, `policy import`, `evidence verify`, `live`,
//! `explain` and `rules`), each running the stages below it and writing
//! through the [`crate::report`] layer. Each command's failures are its own
//! error type, wrapping the shared `RunError`; what a command concluded is
//! an [`outcome::Outcome`]. Commands may use one another (`policy import`
//! surveys a tree as `init` does) and every layer below, never `cli`.

pub mod check;
pub mod docs;
pub mod evidence;
pub mod explain;
pub mod generated_file;
pub mod init;
pub mod live;
pub mod outcome;
pub mod policy_import;
pub mod single_report;
