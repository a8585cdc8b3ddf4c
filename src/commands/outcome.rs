//! What a command concluded, and how it answers on standard output.

use std::io::Write;

use crate::base::error::RunError;

/// What a successful run concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No error-level finding.
    Clean,
    /// At least one error-level finding.
    Findings,
}

/// Writes `bytes` to standard output; a closed pipe (`dwlint … | head`) is
/// the reader's choice, not a failure.
pub fn print(bytes: &[u8]) -> Result<(), RunError> {
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(RunError::Output(e)),
        _ => Ok(()),
    }
}
