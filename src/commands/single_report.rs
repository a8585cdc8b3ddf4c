//! Writing the one report of `evidence verify` and `live`.
//!
//! `check` plans several reports per run (`--output FORMAT=FILE`); these
//! commands write exactly one, to standard output or `--output FILE`, with
//! colour only on standard output and the same tolerance of a closed pipe.
//! The writer is given the style to use. Their findings come from rules
//! `check` does not run, so [`findings`] builds the report around them.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::base::diagnostic::{Diagnostic, Severity};
use crate::base::error::RunError;
use crate::discover::changed::Mode;
use crate::report::human::Style;
use crate::report::model::CheckReport;
use crate::rules::Rule;

/// A report of `diagnostics`, found by `rules` (all at error severity) in
/// `inputs` things read, under the policy shown as `policy_path`.
pub fn findings(
    diagnostics: Vec<Diagnostic>,
    rules: &'static [Rule],
    inputs: usize,
    policy_path: String,
    root: PathBuf,
) -> CheckReport {
    CheckReport {
        diagnostics,
        files_scanned: inputs,
        policy_path,
        root,
        root_moved: false,
        repo_prefix: String::new(),
        mode: Mode::Full,
        severities: rules.iter().map(|r| (r, Some(Severity::Error))).collect(),
        notes: Vec::new(),
        inputs: Default::default(),
        timings: Default::default(),
    }
}

/// Runs `write` on standard output (coloured when `color`, which is
/// `--color` as resolved for standard output) or on `output`; returns its
/// notes.
pub fn write_to(
    output: Option<&PathBuf>,
    color: bool,
    write: impl Fn(Style, &mut dyn Write) -> std::io::Result<Vec<String>>,
) -> Result<Vec<String>, RunError> {
    match output {
        None => {
            let mut out = BufWriter::new(std::io::stdout().lock());
            match write(Style::new(color), &mut out).and_then(|notes| out.flush().map(|()| notes)) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Vec::new()),
                other => Ok(other?),
            }
        }
        Some(path) => {
            let failed = |source| RunError::OutputFile {
                path: path.clone(),
                source,
            };
            let file = std::fs::File::create(path).map_err(failed)?;
            let mut out = BufWriter::new(file);
            write(Style::new(false), &mut out)
                .and_then(|notes| out.flush().map(|()| notes))
                .map_err(failed)
        }
    }
}

/// Prints notes on standard error as warnings.
pub fn warn(notes: Vec<String>) {
    let mut stderr = std::io::stderr().lock();
    for note in notes {
        let _ = writeln!(stderr, "warning: {note}");
    }
}
