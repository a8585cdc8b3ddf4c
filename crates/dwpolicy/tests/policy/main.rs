//! The policy crate's integration tests, in one test binary.
//!
//! One binary instead of one per file: each test binary links the whole
//! crate and its dependencies again, which cost more build time and disk on
//! a 2-core machine than the tests themselves take to run. Each module is
//! one former test file; the tests of all of them run in parallel threads of
//! this one process, so none may rely on process-wide state (environment
//! variables, the current directory) being its own. Snapshots live in
//! `snapshots/` beside this file, named `policy__<module>__<name>.snap`.

mod boundary;
mod disclosure;
mod fast_path;
mod history;
mod load;
mod structural_limits;
