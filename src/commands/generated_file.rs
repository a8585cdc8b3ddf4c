//! Writing a file a command generates for the user (a starter policy, an
//! imported policy), never over one they already have unless told to.

use std::path::{Path, PathBuf};

/// Why a generated file was not written.
#[derive(Debug, thiserror::Error)]
pub enum GeneratedFileError {
    /// The file exists and `--force` was not given.
    #[error("{} already exists; pass --force to overwrite it", .0.display())]
    Exists(PathBuf),
    /// Creating its directory or writing it failed.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Writes `text` to `path`, creating parent directories.
pub fn write(path: &Path, text: &str) -> Result<(), GeneratedFileError> {
    let failed = |source| GeneratedFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    std::fs::write(path, text).map_err(failed)
}
