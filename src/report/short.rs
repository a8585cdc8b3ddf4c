//! `--format short`: one line per finding, `path:line:col: severity[CODE]
//! message`, the shape editors' quickfix lists and grep understand.
//!
//! Paths are the checked root as given joined with the finding's file, so
//! that they open from the directory `dwlint` ran in, as ripgrep's do.

use std::io::Write;
use std::path::Path;

use crate::report::model::CheckReport;
use crate::report::{location, printable, shown_path};

/// `file` as reachable from the current directory.
pub fn display_path(root: &Path, file: &str) -> String {
    if root == Path::new(".") || root.as_os_str().is_empty() {
        return file.to_owned();
    }
    root.join(file).to_string_lossy().replace('\\', "/")
}

/// Writes one line per finding; nothing at all for a clean run, so that
/// `dwlint check --format short | wc -l` counts findings.
pub fn write(report: &CheckReport, out: &mut dyn Write) -> std::io::Result<()> {
    for diagnostic in &report.diagnostics {
        let (file, range) = location(diagnostic, report);
        // A stray line break would split the record (and, in a GitHub
        // Actions log, could start a workflow command).
        let message = printable(&diagnostic.message);
        writeln!(
            out,
            "{}:{}:{}: {}[{}] {message}",
            printable(&shown_path(report, file)),
            range.line,
            range.column,
            diagnostic.severity.as_str(),
            diagnostic.code,
        )?;
    }
    Ok(())
}
