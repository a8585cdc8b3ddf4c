//! The gate's integration tests, in one test binary.
//!
//! One binary instead of one per file: each test binary links the gate, the
//! engine (for `live`) and all their dependencies again, which cost more
//! build time and disk on a 2-core machine than the tests take to run. Each
//! module is one former test file; `support` (running the real `dwlint`,
//! building small trees) is shared. The tests of every module run as
//! parallel threads of this one process, so none may rely on process-wide
//! state being its own: environment variables and the current directory are
//! read, never set (a child process gets its own with `Command::env` and
//! `Command::current_dir`), and `scaling` counts only the allocations of the
//! thread that measures. Snapshots live in `snapshots/` beside this file,
//! named `gate__<module>__<name>.snap`; the fixtures' own snapshots stay in
//! `fixtures/<name>/`.

mod support;

mod baseline;
mod changed;
mod cli;
mod cli_surface;
mod doc_examples;
mod docs_sync;
mod engine_gate;
mod evidence_verify;
mod fixtures;
mod formats;
mod init;
mod json_schema;
mod layering;
mod live;
mod policy_import;
mod properties;
mod release;
mod robustness;
mod sarif_schema;
mod scaling;
mod server_tree;
mod toolchain;
