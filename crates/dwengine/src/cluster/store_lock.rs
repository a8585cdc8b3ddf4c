//! One process per SQLite file: an OS advisory lock on a sidecar file.
//!
//! SQLite's own locking lets two processes open one file, and two dwserver
//! processes on one file would each run their own group-commit writer,
//! sweeps and wait slots against it: each believes it is alone (write
//! contention surfaces as `SQLITE_BUSY` under load, and nothing else warns).
//! So before it opens the store, a node takes an exclusive `flock` on
//! `<database>.lock` beside the file and keeps it for its whole life; a
//! second process finds it taken and refuses to start, naming the file and
//! the holder (its pid, node id and start time, which the holder writes
//! into the lock file). The kernel releases the lock when the holder's
//! file is closed, however the process ends — a clean stop, a crash or
//! SIGKILL — so there is no stale lock to clean up: the lock file may stay
//! on disk, unlocked. An in-memory store (`:memory:`, `--dev`) is private
//! to its process and takes no lock.
//!
//! The database path is made absolute and its symbolic links resolved
//! first, so two spellings of one file (a relative path, a symlink) share
//! one lock. A network file system without working `flock` (some NFS
//! set-ups) cannot give this guarantee; the store belongs on a local disk.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Why the store's lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum StoreLockError {
    /// Another process holds the lock: it serves this file now.
    #[error(
        "the SQLite store {} is in use by another dwserver process ({holder}; lock file {}): \
         two processes must never share one SQLite file. Stop that process first, or give this \
         node a database of its own (DW_DATABASE_PATH); see docs/deployment.md for several nodes",
        database.display(),
        lock.display()
    )]
    Held {
        /// The database file.
        database: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// Who holds it, as the holder wrote it (or that it did not say).
        holder: String,
    },
    /// The lock file could not be created, opened or locked.
    #[error("the SQLite store's lock file {}: {source}", lock.display())]
    Io {
        /// The lock file.
        lock: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The held lock of one SQLite file; dropping it (or the process ending)
/// releases it.
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
    path: PathBuf,
}

impl StoreLock {
    /// The sidecar lock file of the SQLite file at `database`: the
    /// resolved path with `.lock` appended (`dwserver.sqlite.lock`).
    pub fn path_for(database: &Path) -> PathBuf {
        let resolved = resolve(database);
        let mut name = resolved
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        name.push(".lock");
        resolved.with_file_name(name)
    }

    /// Takes the lock of `database` for this process, recording `server_id`
    /// and the pid in the lock file; refuses when another process holds it.
    /// The database's directory must exist.
    pub fn acquire(database: &Path, server_id: &str) -> Result<StoreLock, StoreLockError> {
        let lock = Self::path_for(database);
        let io = |source| StoreLockError::Io {
            lock: lock.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut said = String::new();
                let _ = file.read_to_string(&mut said);
                let holder = match said.trim() {
                    "" => "it has not written its pid yet".to_owned(),
                    said => said.to_owned(),
                };
                return Err(StoreLockError::Held {
                    database: resolve(database),
                    lock,
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // Held: say who holds it, for the process that will be refused.
        let holder = format!(
            "pid {}, DW_SERVER_ID {server_id:?}, since {}",
            std::process::id(),
            jiff::Timestamp::now()
        );
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(holder.as_bytes()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(StoreLock {
            _file: file,
            path: lock,
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `path` absolute, with its symbolic links resolved: the file itself when
/// it exists, else its directory (the file is created there).
fn resolve(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|dir| dir.join(name))
            .unwrap_or(absolute.clone()),
        _ => absolute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_file_is_refused_and_names_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("runs.sqlite");
        let first = StoreLock::acquire(&db, "node-a").unwrap();
        // Another spelling of the same file: a relative-looking detour.
        let detour = dir.path().join(".").join("runs.sqlite");
        let refused = StoreLock::acquire(&detour, "node-b").unwrap_err();
        let text = refused.to_string();
        assert!(matches!(refused, StoreLockError::Held { .. }), "{text}");
        assert!(text.contains("runs.sqlite"), "{text}");
        assert!(text.contains("node-a"), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(first);
        let second = StoreLock::acquire(&db, "node-b").unwrap();
        assert_eq!(second.path(), StoreLock::path_for(&db));
        assert!(second.path().ends_with("runs.sqlite.lock"));
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_to_the_file_shares_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("runs.sqlite");
        std::fs::write(&db, b"").unwrap();
        let link = dir.path().join("alias.sqlite");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let _held = StoreLock::acquire(&db, "node-a").unwrap();
        assert!(matches!(
            StoreLock::acquire(&link, "node-b"),
            Err(StoreLockError::Held { .. })
        ));
    }
}
