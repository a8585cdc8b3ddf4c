//! The `dwlint` binary: parse arguments, run, map the result to an exit code.
//!
//! 0: no error-level finding. 1: at least one. 2: the run itself failed.

use std::process::ExitCode;

use dwlint::cli::{self, Outcome};

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
        Err((error, style)) => {
            let _ = dwlint::report::human::write_run_error(
                &error,
                style,
                &mut std::io::stderr().lock(),
            );
            ExitCode::from(2)
        }
    }
}
