//! The commands layer: one module per thing `dwlint` is asked to do
//! (`check`, `init`, `docs`, `policy import`, `evidence verify`, `live`),
//! each running the stages below it.

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
