//! The `dwlint` binary: parse arguments, run, map the result to an exit code.
//!
//! 0: no error-level finding. 1: at least one. 2: the run itself failed.

use std::process::ExitCode;

use dwlint::cli::{self, Failure};
use dwlint::commands::outcome::Outcome;

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    // The process ends with the run: its policy and inventory need not be
    // freed first.
    dwlint::commands::check::keep_until_exit();
    match cli::run(cli) {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Findings) => ExitCode::from(1),
        Err((failure, style)) => {
            let _ = failure.write(style, &mut std::io::stderr().lock());
            ExitCode::from(exit_code(&failure))
        }
    }
}

/// Each command's failure is a failure of the run itself, whichever
/// command it came from: nothing was judged.
fn exit_code(failure: &Failure) -> u8 {
    match failure {
        Failure::Run(_)
        | Failure::Init(_)
        | Failure::Docs(_)
        | Failure::Import(_)
        | Failure::Evidence(_)
        | Failure::Live(_) => 2,
    }
}
