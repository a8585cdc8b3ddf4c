//! What only SQLite needs: the pragmas a connection is opened with, the
//! page cap, and incremental blob I/O (which finds a row by its rowid).

use std::cell::Cell;
use std::ffi::c_int;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OptionalExtension};

use super::error::Result;
use super::{BlobColumn, CheckpointMode, Checkpointed, SqliteSettings, WalFile};

/// Plans that never look at bound values, so a cached statement stays
/// compiled however its parameters change. Without the query planner
/// stability guarantee SQLite (3.50) reads a bound `LIMIT ?N` (and a few
/// other parameters) while planning and marks the statement to be compiled
/// again whenever that parameter is bound anew, which is every execution:
/// the expired-lease scan every poll pass runs was compiled on each use, a
/// twentieth of dwserver's CPU under the Rust SDK benchmark
/// (docs/performance.md). The plans are the ones SQLite chose before it
/// peeked at such values.
fn stable_plans(conn: &Connection) -> Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// The write-ahead log's length, in pages, past which a commit of the
/// writer's connection copies the log into the database (SQLite's automatic
/// checkpoint; its default is 1,000).
///
/// A checkpoint runs on the writer thread inside the `COMMIT` that crosses
/// the mark, and every start waits for it: it reads each page the log holds
/// and writes its latest version into the database (two system calls a
/// page), syncs the log before and the database after, and the log starts
/// again from its beginning at the next write. A start rewrites the same
/// few pages at the right edge of each B-tree, so a longer log holds far
/// fewer pages per start to copy (0.25 at 1,000 pages, 0.13 at 8,000, over
/// HTTP) and its syncs come an eighth as often (docs/performance.md,
/// "Starts against raw SQLite"). The log's file stays at its longest, about
/// 33 MB at 4 KiB pages plus the commit that crosses the mark.
///
/// The group-commit writer's connection does not checkpoint at all
/// ([`hand_off_checkpoints`]): its checkpointer thread copies the log once
/// it passes this mark (`crate::store::checkpointer`). The mark stays for
/// every other read-write connection (tools, tests, a store opened without
/// the writer).
pub(super) const WAL_AUTOCHECKPOINT_PAGES: u32 = 8_000;

/// A read-write connection: WAL, the durability asked for, foreign keys.
pub(super) fn configure_writer(conn: &Connection, settings: SqliteSettings) -> Result<()> {
    conn.busy_timeout(settings.busy_timeout)?;
    stable_plans(conn)?;
    // journal_mode answers with the mode in force; memory databases keep "memory".
    let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    let _pages: i64 = conn.query_row(
        &format!("PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}"),
        [],
        |row| row.get(0),
    )?;
    let synchronous = if settings.synchronous_full {
        "FULL"
    } else {
        "NORMAL"
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    // The group-commit writer runs every job in a savepoint, and SQLite
    // runs each statement that fires triggers in one more, so it copies
    // each page a job or statement first touches into the statement
    // journal. That journal stays in memory up to SQLITE_STMTJRNL_SPILL
    // (4 MiB in this build, `.cargo/config.toml`; SQLite's default of
    // 64 KiB made every batch of more than one start spill it to a
    // temporary file) in one block, which is why temp_store is left at
    // its default: `temp_store = MEMORY` keeps it in memory without a
    // bound but in 1 KiB blocks, four mallocs and frees per page
    // (docs/performance.md, "Starts against raw SQLite").
    Ok(())
}

/// See [`super::Connection::defer_commit_sync`].
pub(super) fn defer_commit_sync(conn: &Connection) -> Result<Option<WalFile>> {
    let Some(path) = conn.path().filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |row| row.get(0))?;
    // 2 is FULL; EXTRA (3) and the others are left as they are.
    let level: i64 = conn.query_row("PRAGMA synchronous", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") || level != 2 {
        return Ok(None);
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(Some(WalFile::of_database(Path::new(path))))
}

thread_local! {
    /// The log's length in frames after the last commit made on this
    /// thread by a connection whose checkpoints are handed off; 0 when no
    /// such commit happened since [`take_log_frames`] last looked. A
    /// thread-local because SQLite calls the log's hook on the committing
    /// thread, with no room for state of ours (rusqlite takes a plain
    /// function): the writer thread has one such connection.
    static LOG_FRAMES: Cell<u32> = const { Cell::new(0) };
}

/// SQLite's hook after each commit that wrote to the log.
#[allow(clippy::unnecessary_wraps)] // the hook's signature is rusqlite's
fn record_log_frames(_wal: &rusqlite::hooks::Wal, frames: c_int) -> rusqlite::Result<()> {
    LOG_FRAMES.with(|f| f.set(u32::try_from(frames).unwrap_or(0)));
    Ok(())
}

/// See [`super::Connection::hand_off_checkpoints`].
pub(super) fn hand_off_checkpoints(conn: &Connection) -> Result<Option<PathBuf>> {
    let Some(path) = conn.path().filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Ok(None);
    }
    // SQLite's automatic checkpoint is itself a log hook: installing ours
    // replaces it, so no commit of this connection checkpoints any more.
    conn.wal_hook(Some(record_log_frames));
    Ok(Some(PathBuf::from(path)))
}

/// See [`super::take_log_frames`].
pub(super) fn take_log_frames() -> u32 {
    LOG_FRAMES.with(|f| f.replace(0))
}

/// See [`super::Connection::open_sqlite_checkpointer`].
pub(super) fn open_checkpointer(path: &Path, settings: SqliteSettings) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(settings.busy_timeout)?;
    // A checkpoint syncs the log before it copies and the database after
    // it at NORMAL as at FULL (and not at all at OFF).
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// See [`super::Connection::checkpoint`].
pub(super) fn checkpoint(conn: &Connection, mode: CheckpointMode) -> Result<Checkpointed> {
    let sql = match mode {
        CheckpointMode::Passive => "PRAGMA wal_checkpoint(PASSIVE)",
        CheckpointMode::Restart => "PRAGMA wal_checkpoint(RESTART)",
    };
    let (busy, log, copied): (i64, i64, i64) =
        conn.query_row(sql, [], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    Ok(Checkpointed {
        busy: busy != 0,
        log: u32::try_from(log).unwrap_or(0),
        copied: u32::try_from(copied).unwrap_or(0),
    })
}

/// A read connection: it refuses writes.
pub(super) fn configure_reader(conn: &Connection, settings: SqliteSettings) -> Result<()> {
    conn.busy_timeout(settings.busy_timeout)?;
    stable_plans(conn)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(())
}

pub(super) fn set_max_page_count(conn: &Connection, pages: u64) -> Result<()> {
    let _set: i64 = conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |row| {
        row.get(0)
    })?;
    Ok(())
}

/// The rowid of the row whose key column is `key` (blob I/O opens a blob by rowid).
fn rowid(conn: &Connection, blob: BlobColumn<'_>, key: &str) -> Result<Option<i64>> {
    let sql = format!(
        "SELECT rowid FROM {} WHERE {} = ?1",
        blob.table, blob.key_column
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

pub(super) fn write_blob(
    conn: &Connection,
    blob: BlobColumn<'_>,
    key: &str,
    source: &mut dyn Read,
    size: u64,
) -> Result<u64> {
    let row = rowid(conn, blob, key)?.ok_or(super::error::Error::NoRows)?;
    let mut target = conn.blob_open(rusqlite::MAIN_DB, blob.table, blob.column, row, false)?;
    let copied = std::io::copy(&mut source.take(size), &mut target)?;
    target.close()?;
    Ok(copied)
}

pub(super) fn read_blob_chunk(
    conn: &Connection,
    blob: BlobColumn<'_>,
    key: &str,
    offset: u64,
    len: usize,
) -> Result<Option<Vec<u8>>> {
    let Some(row) = rowid(conn, blob, key)? else {
        return Ok(None);
    };
    let mut source = conn.blob_open(rusqlite::MAIN_DB, blob.table, blob.column, row, true)?;
    source.seek(SeekFrom::Start(offset))?;
    let mut chunk = Vec::with_capacity(len);
    (&mut source).take(len as u64).read_to_end(&mut chunk)?;
    Ok(Some(chunk))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rusqlite::StatementStatus;

    use super::super::SqliteSettings;

    /// A cached statement with a bound `LIMIT` runs again without being
    /// compiled again, on the writer and on a reader.
    #[test]
    fn a_bound_limit_does_not_recompile_a_cached_statement() {
        let dir = std::env::temp_dir().join(format!("dw-qpsg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let path = dir.join("plans.sqlite");
        let settings = SqliteSettings {
            busy_timeout: Duration::from_secs(10),
            synchronous_full: false,
        };
        let writer = rusqlite::Connection::open(&path).expect("the writer");
        super::configure_writer(&writer, settings).expect("configured");
        writer
            .execute_batch(
                "CREATE TABLE t (id INTEGER PRIMARY KEY, at INTEGER NOT NULL);
                 CREATE INDEX t_at ON t (at);
                 INSERT INTO t (at) VALUES (1), (2), (3), (4);",
            )
            .expect("the table");
        let reader = rusqlite::Connection::open(&path).expect("the reader");
        super::configure_reader(&reader, settings).expect("configured");
        // The control: a connection opened without the guarantee.
        let plain = rusqlite::Connection::open(&path).expect("a plain connection");
        let recompiled = |conn: &rusqlite::Connection| {
            let sql = "SELECT id FROM t WHERE at < ?1 ORDER BY at LIMIT ?2";
            for limit in [1_i64, 2, 3, 2, 1] {
                let mut stmt = conn.prepare_cached(sql).expect("prepared");
                let rows: Vec<i64> = stmt
                    .query_map([10, limit], |r| r.get(0))
                    .expect("ran")
                    .collect::<Result<_, _>>()
                    .expect("rows");
                assert_eq!(rows.len(), usize::try_from(limit).expect("small"));
            }
            let stmt = conn.prepare_cached(sql).expect("prepared");
            stmt.get_status(StatementStatus::RePrepare)
        };
        assert!(
            recompiled(&plain) > 0,
            "this SQLite no longer recompiles on a new LIMIT: stable_plans may be unneeded"
        );
        assert_eq!(
            recompiled(&writer),
            0,
            "the writer recompiled on a new LIMIT"
        );
        assert_eq!(recompiled(&reader), 0, "a reader recompiled on a new LIMIT");
        drop((writer, reader, plain));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The bundled SQLite is compiled with the speed options of the
    /// workspace's `.cargo/config.toml` (`LIBSQLITE3_FLAGS`): a build that
    /// lost them (the setting moved, or an environment overriding it) is
    /// named here instead of showing only as a slower writer.
    #[test]
    fn the_bundled_sqlite_is_built_with_the_speed_options() {
        let conn = rusqlite::Connection::open_in_memory().expect("a connection");
        let options: Vec<String> = conn
            .prepare("PRAGMA compile_options")
            .expect("prepared")
            .query_map([], |r| r.get(0))
            .expect("ran")
            .collect::<Result<_, _>>()
            .expect("the options");
        for wanted in [
            "DEFAULT_MEMSTATUS=0",
            "OMIT_SHARED_CACHE",
            "USE_ALLOCA",
            "STMTJRNL_SPILL=4194304",
        ] {
            assert!(
                options.iter().any(|o| o == wanted),
                "the bundled SQLite lacks {wanted} (LIBSQLITE3_FLAGS in .cargo/config.toml); it has {options:?}"
            );
        }
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "the bundled SQLite shares one page cache (and its mutex) among all connections: LIBSQLITE3_FLAGS in .cargo/config.toml lost -USQLITE_ENABLE_MEMORY_MANAGEMENT"
        );
    }

    /// `Connection::insert_returning_id` answers the inserted row's id, not
    /// that of a row its triggers inserted after it, and refuses an insert
    /// that added no row instead of answering an earlier row's id.
    #[test]
    fn an_insert_answers_its_own_rows_id() {
        let conn =
            super::super::Connection::from_sqlite(rusqlite::Connection::open_in_memory().unwrap());
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL); \
             CREATE TABLE log (id INTEGER PRIMARY KEY, t_id INTEGER NOT NULL); \
             CREATE TRIGGER t_log AFTER INSERT ON t BEGIN \
                 INSERT INTO log (t_id) VALUES (NEW.id); INSERT INTO log (t_id) VALUES (NEW.id); \
             END;",
        )
        .unwrap();
        for (value, expected) in [("a", 1), ("b", 2), ("c", 3)] {
            let id = conn
                .insert_returning_id("INSERT INTO t (v) VALUES (?1)", [value])
                .unwrap();
            assert_eq!(id, expected);
            let stored: String = conn
                .query_row("SELECT v FROM t WHERE id = ?1", [id], |r| r.get(0))
                .unwrap();
            assert_eq!(stored, value);
        }
        let logged: i64 = conn
            .query_row("SELECT MAX(id) FROM log", [], |r| r.get(0))
            .unwrap();
        assert_eq!(logged, 6);
        let none = conn.insert_returning_id("INSERT INTO t (v) SELECT 'd' WHERE 0", []);
        assert!(matches!(none, Err(super::super::Error::NoRows)), "{none:?}");
    }
    /// The file's writer lets the log grow to `WAL_AUTOCHECKPOINT_PAGES`
    /// before a commit copies it into the database (SQLite's default would
    /// at 1,000 pages), and then does copy it: the database file holds
    /// nothing of the first 7,000 pages written, and everything once the
    /// mark is crossed, after which the log starts again (it does not grow
    /// past the mark and the commit that crossed it).
    #[test]
    fn the_writer_checkpoints_the_log_at_its_own_mark() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let path = dir.path().join("log.sqlite");
        let settings = SqliteSettings {
            busy_timeout: Duration::from_secs(10),
            synchronous_full: false,
        };
        let conn = super::super::Connection::open_sqlite(&path, settings).expect("the writer");
        let mark: i64 = conn
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .expect("the setting");
        assert_eq!(mark, i64::from(super::WAL_AUTOCHECKPOINT_PAGES));
        conn.execute_batch("CREATE TABLE t (b BLOB NOT NULL)")
            .expect("the table");
        let size = |suffix: &str| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(&name).map(|m| m.len()).unwrap_or(0)
        };
        let page = 4096_u64;
        // About a page a row: 500 pages a commit.
        let commit = || {
            conn.execute_batch(
                "BEGIN; \
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500) \
                 INSERT INTO t (b) SELECT randomblob(3900) FROM n; \
                 COMMIT;",
            )
            .expect("a commit")
        };
        for _ in 0..14 {
            commit();
        }
        assert!(
            size("") < 64 * page,
            "the log was copied into the database before it reached its mark: {} bytes",
            size("")
        );
        for _ in 0..4 {
            commit();
        }
        assert!(
            size("") > 8_000 * page,
            "the log was not copied into the database past its mark: {} bytes",
            size("")
        );
        let wal = size("-wal");
        assert!(
            wal < (u64::from(super::WAL_AUTOCHECKPOINT_PAGES) + 1_100) * (page + 24),
            "the log grew past its mark: {wal} bytes"
        );
    }
}
