//! Writing the one report of `evidence verify` and `live`.
//!
//! `check` plans several reports per run (`--output FORMAT=FILE`); these
//! commands write exactly one, to standard output or `--output FILE`, with
//! colour only on standard output and the same tolerance of a closed pipe.
//! The writer is given the style to use.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::error::RunError;
use crate::report::human::Style;

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
