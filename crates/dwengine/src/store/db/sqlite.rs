//! What only SQLite needs: the pragmas a connection is opened with, the
//! page cap, and incremental blob I/O (which finds a row by its rowid).

use std::io::{Read, Seek, SeekFrom};

use rusqlite::{Connection, OptionalExtension};

use super::error::Result;
use super::{BlobColumn, SqliteSettings};

/// A read-write connection: WAL, the durability asked for, foreign keys.
pub(super) fn configure_writer(conn: &Connection, settings: SqliteSettings) -> Result<()> {
    conn.busy_timeout(settings.busy_timeout)?;
    // journal_mode answers with the mode in force; memory databases keep "memory".
    let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    let synchronous = if settings.synchronous_full {
        "FULL"
    } else {
        "NORMAL"
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    Ok(())
}

/// A read connection: it refuses writes.
pub(super) fn configure_reader(conn: &Connection, settings: SqliteSettings) -> Result<()> {
    conn.busy_timeout(settings.busy_timeout)?;
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
