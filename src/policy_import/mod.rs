//! `dwlint policy import`: the reference server's PHP policy as a TOML policy.
//!
//! A server that already gates itself with `config/dw-bounded-growth.php`
//! (a file that `return`s the policy array, with `Foo::class` owners) should
//! switch to dwlint without retyping it. The PHP file is parsed, never run
//! (see [`php_array`]), converted field by field (see [`convert`]), written
//! in the documented layout, and re-loaded with `dwpolicy` before anything
//! is written, so a successful import always produces a loadable policy.

mod convert;
pub mod php_array;

use crate::generated_file::{self, GeneratedFileError};
use std::path::PathBuf;

use crate::error::RunError;
use crate::policy_toml::{Draft, DraftSources};

/// Why an import failed (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The PHP file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The PHP file is not a constant policy array, or has the wrong shape.
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        /// The file as given.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The file exists, or writing it failed.
    #[error(transparent)]
    File(#[from] GeneratedFileError),
    /// The converted text would not load (a dwlint bug); nothing is written.
    #[error("the converted policy does not load (a dwlint bug): {0}")]
    Invalid(String),
}

/// `[sources]` of the reference server layout, which the PHP policy's own
/// test scans: cache keys in `app/`, metrics in `app/` and the perf harness,
/// remote-write configs in the perf harness, and the operator doc.
pub fn reference_sources() -> DraftSources {
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
    DraftSources {
        cache: strings(&["app/**/*.php"]),
        metrics: strings(&["app/**/*.php", "scripts/perf/**"]),
        docs: strings(&["docs/bounded-growth.md"]),
        remote_write: strings(&["scripts/perf/**"]),
        exclude: Vec::new(),
    }
}

/// The TOML policy for the PHP policy `text`, read from `file` (as shown in
/// messages).
pub fn convert_text(text: &str, file: &str) -> Result<String, ImportError> {
    let syntax = |at: usize, message: String| {
        let (line, column) = php_array::line_col(text, at);
        ImportError::Syntax {
            file: file.to_owned(),
            line,
            column,
            message,
        }
    };
    let value = php_array::parse(text).map_err(|e| ImportError::Syntax {
        file: file.to_owned(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let converted = convert::convert(&value).map_err(|e| syntax(e.at, e.message))?;
    let draft = Draft {
        header: vec![
            format!("Converted by `dwlint policy import` from {file}."),
            "[sources] follows the reference server layout; adjust it to this tree.".into(),
            "Format: docs/policy.md.".into(),
        ],
        sources: reference_sources(),
        ..converted
    };
    let toml = draft.render();
    dwpolicy::load::load(&toml).map_err(|e| ImportError::Invalid(e.to_string()))?;
    Ok(toml)
}

/// What to convert and where to put it.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The PHP policy file.
    pub file: PathBuf,
    /// Where to write; standard output when absent.
    pub output: Option<PathBuf>,
    /// Overwrite an existing output.
    pub force: bool,
}

/// Converts `options.file`; returns the TOML when there is no `--output`.
pub fn import(options: &ImportOptions) -> Result<Option<String>, RunError> {
    let text = std::fs::read_to_string(&options.file).map_err(|source| ImportError::Read {
        path: options.file.clone(),
        source,
    })?;
    let shown = options.file.to_string_lossy().replace('\\', "/");
    let toml = convert_text(&text, &shown)?;
    let Some(output) = &options.output else {
        return Ok(Some(toml));
    };
    if output.exists() && !options.force {
        return Err(ImportError::File(GeneratedFileError::Exists(output.clone())).into());
    }
    generated_file::write(output, &toml).map_err(ImportError::from)?;
    Ok(None)
}
