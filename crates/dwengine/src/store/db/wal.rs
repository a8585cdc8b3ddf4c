//! An SQLite file's write-ahead log, synced from outside SQLite.
//!
//! The group-commit writer commits with `synchronous = NORMAL`, which in
//! WAL mode differs from `FULL` in one sync only: `FULL` syncs the WAL
//! after the frames of every commit, `NORMAL` does not (both sync the WAL
//! before each checkpoint, the database after it, and the WAL's header
//! when the log starts again from its beginning). This handle makes that
//! one sync on a thread of its own ([`crate::store::syncer`]), so the
//! writer runs the next batch's SQL while the disk flushes the last one.
//!
//! It syncs the file SQLite writes: a descriptor of its own on
//! `<database>-wal`, opened again whenever the path names another inode
//! than the one held (SQLite deletes the log when its last connection
//! closes; the writer's connection is open for as long as this is used, so
//! that is a precaution, not a path the server takes). A log truncated in
//! place (`journal_size_limit`, `wal_checkpoint(TRUNCATE)`) keeps its
//! inode. `fdatasync` of a descriptor flushes every write made to the file
//! through any descriptor before the call, so frames the writer's
//! connection wrote before it handed the batch over are on disk when
//! [`WalFile::sync`] returns.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The write-ahead log of one SQLite database file.
#[derive(Debug)]
pub struct WalFile {
    path: PathBuf,
    /// The open log and its (device, inode).
    open: Option<(File, (u64, u64))>,
}

impl WalFile {
    /// The log of the database at `database` (not opened yet: it may not
    /// exist before the first commit).
    pub fn of_database(database: &Path) -> WalFile {
        let mut path = database.as_os_str().to_owned();
        path.push("-wal");
        WalFile {
            path: PathBuf::from(path),
            open: None,
        }
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes everything written to the log so far to the disk.
    pub fn sync(&mut self) -> std::io::Result<()> {
        let meta = std::fs::metadata(&self.path)?;
        let id = (meta.dev(), meta.ino());
        if self.open.as_ref().map(|(_, held)| *held) != Some(id) {
            let file = File::open(&self.path)?;
            let opened = file.metadata()?;
            // SQLite syncs the directory when it first syncs a log it
            // created (the header, in NORMAL as in FULL); once more here
            // costs one call per opening and makes the entry durable
            // whoever created it.
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir)?.sync_all()?;
            }
            self.open = Some((file, (opened.dev(), opened.ino())));
        }
        match &self.open {
            Some((file, _)) => file.sync_data(),
            None => Ok(()),
        }
    }

    /// The (device, inode) of the log this handle last synced.
    pub fn synced_inode(&self) -> Option<(u64, u64)> {
        self.open.as_ref().map(|(_, id)| *id)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::WalFile;

    /// A log deleted and created again under the same name is the one
    /// synced next, not the unlinked file the old descriptor still holds.
    #[test]
    fn a_log_created_again_is_opened_again() {
        let dir = std::env::temp_dir().join(format!("dw-wal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let db = dir.join("store.sqlite");
        let mut wal = WalFile::of_database(&db);
        assert_eq!(wal.path(), dir.join("store.sqlite-wal"));
        assert!(wal.sync().is_err(), "a missing log cannot be synced");
        std::fs::write(wal.path(), b"first").expect("written");
        wal.sync().expect("synced");
        let first = wal.synced_inode().expect("opened");
        // Keep the old inode alive so the new file cannot reuse its number.
        let old = dir.join("old-wal");
        std::fs::rename(wal.path(), &old).expect("moved away");
        std::fs::write(wal.path(), b"second").expect("written again");
        wal.sync().expect("synced again");
        let second = wal.synced_inode().expect("opened again");
        assert_ne!(first, second);
        let meta = std::fs::metadata(wal.path()).expect("the log");
        assert_eq!(second, (meta.dev(), meta.ino()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
