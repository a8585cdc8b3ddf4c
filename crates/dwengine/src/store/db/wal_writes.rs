//! One `pwrite` per commit to the write-ahead log instead of two per page.
//!
//! SQLite appends each page of a commit to the log as a frame, and writes
//! each frame with two system calls: its 24-byte header, then the page. A
//! batch of starts commits about 28 pages, so the store's writer thread
//! made about 56 `pwrite`s per commit, an eighth of its CPU time
//! (docs/performance.md, "The writer's log writes"). This module is a thin
//! VFS over SQLite's own (`unix`) that the writer's connection opens its
//! database with: every file but the log is SQLite's own file, untouched;
//! the log's contiguous writes are gathered in memory and handed to the
//! `unix` file in one `pwrite` when the commit's last frame is complete.
//!
//! Durability and what readers see are unchanged: a commit's frames are all
//! written (or the write's error returned to SQLite, which then fails the
//! commit) before the `xWrite` of the commit frame's page returns, which is
//! before SQLite publishes the commit in the log's index, before `COMMIT`
//! returns, and so before the syncer thread's `fdatasync` of the log
//! ([`super::WalFile`]). Anything else that looks at the log's bytes (a
//! read, a sync, its size, a truncation, a file control, closing it) writes
//! what is gathered first, as does a write that does not follow on from
//! it, so the file is exactly as it would be without this layer whenever
//! SQLite or anyone else could observe it.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::OnceLock;

use rusqlite::ffi;

/// The name the writer's connection opens its database with.
pub(super) const VFS_NAME: &CStr = c"dwstore-wal-writes";

/// A frame header is 24 bytes; bytes 4..8 hold the database's size in
/// pages after the commit, non-zero only in a commit's last frame.
const FRAME_HEADER: usize = 24;

/// The most bytes written in one call: SQLite's `unix` file writes at
/// most 128 KiB - 1 per call (it masks the length to 17 bits, so a write
/// of exactly 128 KiB would write nothing and fail as a full disk). A
/// write that would take the gathered bytes past it writes them first: 31
/// frames of 4 KiB pages per call, a batch of starts (about 28) in one.
const MOST_GATHERED: usize = (1 << 17) - 1;

/// The VFS, registered once per process ([`register`]).
static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();

/// Registers the VFS (once); the name to open a connection with.
pub(super) fn register() -> Result<&'static CStr, String> {
    REGISTERED
        .get_or_init(|| {
            // SAFETY: sqlite3_vfs_find and sqlite3_vfs_register are
            // thread-safe; the VFS struct is leaked, so it outlives every
            // connection, and it copies the default VFS's methods, with
            // `pAppData` pointing at that VFS (which SQLite never frees).
            unsafe {
                let base = ffi::sqlite3_vfs_find(ptr::null());
                if base.is_null() {
                    return Err("SQLite has no default VFS".to_owned());
                }
                let mut vfs: ffi::sqlite3_vfs = ptr::read(base);
                vfs.szOsFile = c_int::try_from(std::mem::size_of::<LogFile>())
                    .map_err(|e| e.to_string())?
                    + (*base).szOsFile;
                vfs.pNext = ptr::null_mut();
                vfs.zName = VFS_NAME.as_ptr();
                vfs.pAppData = base.cast::<c_void>();
                vfs.xOpen = Some(x_open);
                vfs.xDelete = Some(x_delete);
                vfs.xAccess = Some(x_access);
                vfs.xFullPathname = Some(x_full_pathname);
                let leaked: &'static mut ffi::sqlite3_vfs = Box::leak(Box::new(vfs));
                match ffi::sqlite3_vfs_register(leaked, 0) {
                    ffi::SQLITE_OK => Ok(()),
                    rc => Err(format!("registering the store's VFS failed ({rc})")),
                }
            }
        })
        .clone()
        .map(|()| VFS_NAME)
}

/// The VFS this one wraps.
///
/// # Safety
/// `vfs` is the VFS [`register`] made.
unsafe fn base(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    (*vfs).pAppData.cast::<ffi::sqlite3_vfs>()
}

/// An open log: SQLite's `sqlite3_file` (whose methods are this module's),
/// the `unix` file it wraps (in the bytes right after this struct, which
/// SQLite allocates as `szOsFile`), and what is gathered for it.
#[repr(C)]
struct LogFile {
    file: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    gathered: *mut Gathered,
}

/// Contiguous bytes not yet written, from `start`.
#[derive(Default)]
struct Gathered {
    bytes: Vec<u8>,
    start: i64,
    /// The last write was a commit frame's header: its page ends the commit.
    commit_header: bool,
    /// Writes SQLite asked for, and writes made to the `unix` file (tests).
    asked: u64,
    made: u64,
}

unsafe extern "C" fn x_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let base = base(vfs);
    let Some(open) = (*base).xOpen else {
        return ffi::SQLITE_ERROR;
    };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Not the log: the `unix` file itself, in SQLite's allocation
        // (which is larger than it needs).
        return open(base, name, file, flags, out_flags);
    }
    let real = file
        .cast::<u8>()
        .add(std::mem::size_of::<LogFile>())
        .cast::<ffi::sqlite3_file>();
    let rc = open(base, name, real, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        (*file).pMethods = ptr::null();
        return rc;
    }
    ptr::write(
        file.cast::<LogFile>(),
        LogFile {
            file: ffi::sqlite3_file {
                pMethods: &LOG_METHODS,
            },
            real,
            gathered: Box::into_raw(Box::default()),
        },
    );
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_delete(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    let base = base(vfs);
    match (*base).xDelete {
        Some(delete) => delete(base, name, sync_dir),
        None => ffi::SQLITE_ERROR,
    }
}

unsafe extern "C" fn x_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    let base = base(vfs);
    match (*base).xAccess {
        Some(access) => access(base, name, flags, out),
        None => ffi::SQLITE_ERROR,
    }
}

unsafe extern "C" fn x_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    size: c_int,
    out: *mut c_char,
) -> c_int {
    let base = base(vfs);
    match (*base).xFullPathname {
        Some(full) => full(base, name, size, out),
        None => ffi::SQLITE_ERROR,
    }
}

/// The log's methods: writes gathered, everything else the `unix` file's
/// after writing what is gathered.
static LOG_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(log_close),
    xRead: Some(log_read),
    xWrite: Some(log_write),
    xTruncate: Some(log_truncate),
    xSync: Some(log_sync),
    xFileSize: Some(log_file_size),
    xLock: Some(log_lock),
    xUnlock: Some(log_unlock),
    xCheckReservedLock: Some(log_check_reserved_lock),
    xFileControl: Some(log_file_control),
    xSectorSize: Some(log_sector_size),
    xDeviceCharacteristics: Some(log_device_characteristics),
    xShmMap: Some(log_shm_map),
    xShmLock: Some(log_shm_lock),
    xShmBarrier: Some(log_shm_barrier),
    xShmUnmap: Some(log_shm_unmap),
    xFetch: Some(log_fetch),
    xUnfetch: Some(log_unfetch),
};

/// # Safety
/// `file` was opened by [`x_open`] as a log and not closed.
unsafe fn log<'a>(file: *mut ffi::sqlite3_file) -> (&'a mut Gathered, *mut ffi::sqlite3_file) {
    let log = file.cast::<LogFile>();
    (&mut *(*log).gathered, (*log).real)
}

/// The `unix` file's method `$name`.
macro_rules! real {
    ($real:expr, $name:ident) => {
        match (*(*$real).pMethods).$name {
            Some(method) => method,
            None => return ffi::SQLITE_ERROR,
        }
    };
}

/// Writes what is gathered to the `unix` file, in one call.
///
/// # Safety
/// `real` is the open `unix` file `gathered` belongs to.
unsafe fn write_gathered(gathered: &mut Gathered, real: *mut ffi::sqlite3_file) -> c_int {
    if gathered.bytes.is_empty() {
        return ffi::SQLITE_OK;
    }
    let write = real!(real, xWrite);
    let Ok(len) = c_int::try_from(gathered.bytes.len()) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    gathered.made += 1;
    let rc = write(
        real,
        gathered.bytes.as_ptr().cast::<c_void>(),
        len,
        gathered.start,
    );
    gathered.bytes.clear();
    rc
}

unsafe extern "C" fn log_write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    let (gathered, real) = log(file);
    gathered.asked += 1;
    let Ok(len) = usize::try_from(amount) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len);
    // The page after a commit frame's header ends the commit.
    let ends_commit = std::mem::replace(
        &mut gathered.commit_header,
        len == FRAME_HEADER && bytes[4..8] != [0; 4],
    );
    let end = gathered.start + gathered.bytes.len() as i64;
    if !gathered.bytes.is_empty() && (offset != end || gathered.bytes.len() + len > MOST_GATHERED) {
        let rc = write_gathered(gathered, real);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    if len > MOST_GATHERED {
        // Larger than SQLite itself writes to a log; as it came.
        return real!(real, xWrite)(real, data, amount, offset);
    }
    if gathered.bytes.is_empty() {
        gathered.start = offset;
    }
    gathered.bytes.extend_from_slice(bytes);
    if ends_commit {
        return write_gathered(gathered, real);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn log_close(file: *mut ffi::sqlite3_file) -> c_int {
    let (gathered, real) = log(file);
    let written = write_gathered(gathered, real);
    let closed = match (*(*real).pMethods).xClose {
        Some(close) => close(real),
        None => ffi::SQLITE_ERROR,
    };
    let opened = file.cast::<LogFile>();
    drop(Box::from_raw((*opened).gathered));
    (*opened).gathered = ptr::null_mut();
    (*file).pMethods = ptr::null();
    if written != ffi::SQLITE_OK {
        written
    } else {
        closed
    }
}

/// Writes what is gathered, then calls the `unix` file's `$method`.
macro_rules! after_writing {
    ($fn:ident, $method:ident $(, $arg:ident : $ty:ty)*) => {
        unsafe extern "C" fn $fn(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            let (gathered, real) = log(file);
            let rc = write_gathered(gathered, real);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            real!(real, $method)(real $(, $arg)*)
        }
    };
}

/// Calls the `unix` file's `$method` (nothing about the log's bytes).
macro_rules! forward {
    ($fn:ident, $method:ident $(, $arg:ident : $ty:ty)*) => {
        unsafe extern "C" fn $fn(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            let (_, real) = log(file);
            real!(real, $method)(real $(, $arg)*)
        }
    };
}

after_writing!(log_read, xRead, data: *mut c_void, amount: c_int, offset: i64);
after_writing!(log_truncate, xTruncate, size: i64);
after_writing!(log_sync, xSync, flags: c_int);
after_writing!(log_file_size, xFileSize, size: *mut i64);
after_writing!(log_file_control, xFileControl, op: c_int, arg: *mut c_void);
after_writing!(log_fetch, xFetch, offset: i64, amount: c_int, out: *mut *mut c_void);
forward!(log_lock, xLock, level: c_int);
forward!(log_unlock, xUnlock, level: c_int);
forward!(log_check_reserved_lock, xCheckReservedLock, out: *mut c_int);
forward!(log_sector_size, xSectorSize);
forward!(log_device_characteristics, xDeviceCharacteristics);
forward!(log_shm_map, xShmMap, region: c_int, size: c_int, extend: c_int, out: *mut *mut c_void);
forward!(log_shm_lock, xShmLock, offset: c_int, n: c_int, flags: c_int);
forward!(log_shm_unmap, xShmUnmap, delete: c_int);
forward!(log_unfetch, xUnfetch, offset: i64, page: *mut c_void);

unsafe extern "C" fn log_shm_barrier(file: *mut ffi::sqlite3_file) {
    let (_, real) = log(file);
    if let Some(barrier) = (*(*real).pMethods).xShmBarrier {
        barrier(real);
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::path::{Path, PathBuf};

    use rusqlite::{ffi, OpenFlags};

    use super::{register, LogFile, LOG_METHODS};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dw-wal-writes-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    }

    /// A connection through the VFS, as the store's writer opens one.
    fn writer(path: &Path) -> rusqlite::Connection {
        let vfs = register().expect("registered");
        let conn = rusqlite::Connection::open_with_flags_and_vfs(path, OpenFlags::default(), vfs)
            .expect("opened");
        let _: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .expect("WAL");
        conn.pragma_update(None, "synchronous", "NORMAL")
            .expect("NORMAL");
        conn
    }

    /// The writes SQLite asked of the connection's log, and those made to
    /// the file; `None` when the log is not this module's.
    fn log_writes(conn: &rusqlite::Connection) -> Option<(u64, u64)> {
        let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
        // SAFETY: SQLITE_FCNTL_JOURNAL_POINTER stores the open log's
        // sqlite3_file pointer (or null) in `file`; the connection is
        // idle, so nothing uses the file meanwhile, and it is read only
        // when its methods are this module's.
        unsafe {
            let rc = ffi::sqlite3_file_control(
                conn.handle(),
                c"main".as_ptr(),
                ffi::SQLITE_FCNTL_JOURNAL_POINTER,
                (&mut file as *mut *mut ffi::sqlite3_file).cast::<c_void>(),
            );
            if rc != ffi::SQLITE_OK
                || file.is_null()
                || !std::ptr::eq((*file).pMethods, &LOG_METHODS)
            {
                return None;
            }
            let gathered = &*(*file.cast::<LogFile>()).gathered;
            Some((gathered.asked, gathered.made))
        }
    }

    /// What another process would find if this one died now: the
    /// database and its log copied while the writer holds them open, read
    /// by plain SQLite (which recovers the log from its frames).
    fn rows_after_a_crash(dir: &Path, db: &Path) -> i64 {
        let copy = dir.join("copy.sqlite");
        std::fs::copy(db, &copy).expect("database copied");
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        let mut wal_copy = copy.as_os_str().to_owned();
        wal_copy.push("-wal");
        std::fs::copy(&wal, &wal_copy).expect("log copied");
        let conn = rusqlite::Connection::open(&copy).expect("copy opened");
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .expect("checked");
        assert_eq!(check, "ok");
        let rows = conn
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .expect("counted");
        drop(conn);
        for path in [copy.as_os_str().to_owned(), wal_copy] {
            let _ = std::fs::remove_file(PathBuf::from(path));
        }
        rows
    }

    /// A commit of many pages reaches the log in one write, before COMMIT
    /// returns: a reader on SQLite's own VFS sees it at once, and a copy of
    /// the files taken right after it holds it.
    #[test]
    fn a_commit_reaches_the_log_in_one_write_before_it_returns() {
        let dir = scratch("commit");
        let db = dir.join("store.sqlite");
        let conn = writer(&db);
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL); CREATE INDEX t_body ON t (body)")
            .expect("schema");
        let reader = rusqlite::Connection::open(&db).expect("a reader");
        for round in 1..=3_i64 {
            let before = log_writes(&conn).expect("the log is gathered");
            conn.execute_batch("BEGIN IMMEDIATE").expect("begun");
            for i in 0..40 {
                conn.execute(
                    "INSERT INTO t (body) VALUES (?1)",
                    [format!("{round}-{i}-{}", "x".repeat(300))],
                )
                .expect("inserted");
            }
            conn.execute_batch("COMMIT").expect("committed");
            let after = log_writes(&conn).expect("the log is gathered");
            let asked = after.0 - before.0;
            // Two writes per frame asked for (header, page); at least four
            // pages (table and index, 12 KB of rows each).
            assert!(asked >= 8, "round {round}: {asked} writes asked for");
            assert_eq!(
                after.1 - before.1,
                1,
                "round {round}: one write made of {asked}"
            );
            let seen: i64 = reader
                .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
                .expect("read");
            assert_eq!(seen, 40 * round);
            assert_eq!(rows_after_a_crash(&dir, &db), 40 * round);
        }
        drop(reader);
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A transaction larger than the page cache writes frames before its
    /// commit (and past the gathering bound); rolled back, it leaves
    /// nothing, and the commit after it everything.
    #[test]
    fn a_spilled_transaction_rolls_back_and_the_next_commits() {
        let dir = scratch("spill");
        let db = dir.join("store.sqlite");
        let conn = writer(&db);
        conn.pragma_update(None, "cache_size", 20)
            .expect("a small cache");
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            .expect("schema");
        let insert = |n: usize, tag: &str| {
            for i in 0..n {
                conn.execute(
                    "INSERT INTO t (body) VALUES (?1)",
                    [format!("{tag}-{i}-{}", "y".repeat(900))],
                )
                .expect("inserted");
            }
        };
        conn.execute_batch("BEGIN IMMEDIATE").expect("begun");
        insert(1_500, "rolled-back");
        conn.execute_batch("ROLLBACK").expect("rolled back");
        assert_eq!(rows_after_a_crash(&dir, &db), 0);
        conn.execute_batch("BEGIN IMMEDIATE").expect("begun");
        insert(1_500, "kept");
        conn.execute_batch("COMMIT").expect("committed");
        let (_, made) = log_writes(&conn).expect("the log is gathered");
        assert!(
            made > 10,
            "1.4 MiB of frames went out in calls of under 128 KiB ({made})"
        );
        assert_eq!(rows_after_a_crash(&dir, &db), 1_500);
        let kept: i64 = conn
            .query_row("SELECT COUNT(*) FROM t WHERE body LIKE 'kept-%'", [], |r| {
                r.get(0)
            })
            .expect("counted");
        assert_eq!(kept, 1_500);
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The store's writer connection writes its log through this module.
    #[test]
    fn the_store_writer_opens_its_file_through_it() {
        let dir = scratch("store");
        let db = dir.join("store.sqlite");
        let settings = super::super::SqliteSettings {
            busy_timeout: std::time::Duration::from_secs(10),
            synchronous_full: true,
        };
        let mut conn = super::super::Connection::open_sqlite(&db, settings).expect("opened");
        let raw = conn.sqlite_mut().expect("a SQLite connection");
        raw.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY); INSERT INTO t VALUES (1)")
            .expect("written");
        let (asked, made) = log_writes(raw).expect("the log is this module's");
        assert!(
            asked >= 2 && made >= 1 && made < asked,
            "{asked} asked, {made} made"
        );
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
