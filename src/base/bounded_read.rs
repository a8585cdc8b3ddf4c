//! Reading a named input file without trusting what the name points at.
//!
//! A path on the command line (`--policy`, `policy import FILE`) may name a
//! FIFO, which blocks the open forever, or `/dev/zero`, which never ends.
//! Every such file is checked to be a regular file before it is opened, and
//! read only up to a size limit, so the worst a bad path can cost is one
//! clear error.

use std::io::Read;
use std::path::Path;

/// The largest policy (or policy to import) read: a policy with thousands
/// of entries is well under a megabyte.
pub const MAX_POLICY_BYTES: u64 = 8 << 20;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path names a directory, FIFO, socket or device.
    #[error("not a regular file (a directory, FIFO or device cannot be read as one)")]
    NotAFile,
    /// The file is larger than the limit.
    #[error("{size} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// Its size (as far as it was read).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// It is not UTF-8 text.
    #[error("not UTF-8 text (at byte {0})")]
    NotUtf8(usize),
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The text of the regular file at `path`, at most `limit` bytes.
pub fn read_text(path: &Path, limit: u64) -> Result<String, ReadError> {
    // `metadata` follows symlinks and never blocks, unlike opening a FIFO.
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        return Err(ReadError::NotAFile);
    }
    if metadata.len() > limit {
        return Err(ReadError::TooLarge {
            size: metadata.len(),
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    // The file may grow between the check and the read.
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    String::from_utf8(bytes).map_err(|e| ReadError::NotUtf8(e.utf8_error().valid_up_to()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_text(dir.path(), 10),
            Err(ReadError::NotAFile)
        ));
        let file = dir.path().join("p.toml");
        std::fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_text(&file, 10).unwrap(), "0123456789");
        assert!(matches!(
            read_text(&file, 9),
            Err(ReadError::TooLarge { size: 10, limit: 9 })
        ));
        std::fs::write(&file, b"a\xffb").unwrap();
        assert!(matches!(read_text(&file, 9), Err(ReadError::NotUtf8(1))));
        #[cfg(unix)]
        assert!(matches!(
            read_text(Path::new("/dev/zero"), 10),
            Err(ReadError::NotAFile)
        ));
    }
}
