//! Why a run could not be completed (exit code 2).
//!
//! Findings are not errors: a run that finds problems succeeded. These are
//! the failures every stage and command shares: bad arguments, a missing
//! tree, an unreadable or malformed policy, a report that cannot be
//! written. A command's own failures (`init` finding a policy already
//! there, `live` failing to scrape) are its own error type, defined with the
//! command, which wraps this one; the binary maps each to its exit code.

use std::path::PathBuf;

use dwpolicy::LoadError;

/// A failure of the run itself.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The tree to check does not exist.
    #[error("no such path: {}", .0.display())]
    NoSuchPath(PathBuf),
    /// No policy was given and none was found from this directory upward.
    #[error("no policy file found in {} or its parent directories", .0.display())]
    PolicyNotFound(PathBuf),
    /// The policy file could not be read.
    #[error("cannot read policy file {}: {source}", .path.display())]
    PolicyUnreadable {
        /// The policy path.
        path: PathBuf,
        /// Why.
        source: crate::base::bounded_read::ReadError,
    },
    /// The policy file is not a valid policy; every problem is listed.
    #[error("invalid policy file {path}: {} problem(s)", .errors.len())]
    PolicyInvalid {
        /// The policy path as shown to the user.
        path: String,
        /// The policy text, for code frames.
        text: String,
        /// Every problem.
        errors: Vec<LoadError>,
    },
    /// `dwlint explain` or `-A/-W/-D` was given a code no rule has.
    #[error("unknown rule code `{code}`{}", .suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownRule {
        /// The code given.
        code: String,
        /// The closest known code.
        suggestion: Option<String>,
    },
    /// The command line is inconsistent in a way clap cannot see (e.g. two
    /// reports sent to standard output).
    #[error("{0}")]
    Usage(String),
    /// Asking git for the changed files failed.
    #[error("cannot list changed files: {0}")]
    Git(String),
    /// A report file could not be written.
    #[error("cannot write the report to {}: {source}", .path.display())]
    OutputFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing the report failed.
    #[error("cannot write the report: {0}")]
    Output(#[from] std::io::Error),
}
