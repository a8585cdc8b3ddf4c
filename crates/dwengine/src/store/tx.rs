//! One write transaction that nests: the unit every store write path uses.
//!
//! A store method that writes must be atomic on its own (a test or the
//! in-process executor calls it directly) and also compose into a larger
//! atomic unit: a start commits with its first workflow task, an activity
//! completion with the workflow task it schedules, and the group-commit
//! writer (the `writer` module) runs many callers' transitions inside
//! one database transaction. [`WriteTx`] is both: on a connection with no
//! open transaction it is a write transaction with the write lock taken up
//! front (`Connection::begin_write`; on SQLite `BEGIN IMMEDIATE`), so a
//! counter read under it cannot go stale, and inside one it is
//! a savepoint that releases into the enclosing transaction. Dropped
//! without [`WriteTx::commit`], it rolls back exactly its own writes.

use std::ops::Deref;

use crate::store::db::Connection;
use crate::store::error::Error;

/// The savepoint a nested write opens.
const SAVEPOINT: &str = "store_write";

/// An open write transaction or savepoint on a store connection.
pub(crate) struct WriteTx<'c> {
    conn: &'c Connection,
    nested: bool,
    open: bool,
}

impl<'c> WriteTx<'c> {
    /// Opens a transaction, or a savepoint when one is already open.
    pub(crate) fn begin(conn: &'c Connection) -> Result<WriteTx<'c>, Error> {
        let nested = !conn.is_autocommit();
        if nested {
            conn.savepoint(SAVEPOINT)?;
        } else {
            conn.begin_write()?;
        }
        Ok(WriteTx {
            conn,
            nested,
            open: true,
        })
    }

    /// Commits (or releases into the enclosing transaction).
    pub(crate) fn commit(mut self) -> Result<(), Error> {
        if self.nested {
            self.conn.release(SAVEPOINT)?;
        } else {
            self.conn.commit()?;
        }
        self.open = false;
        Ok(())
    }
}

impl Deref for WriteTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        // A failed rollback means the database already rolled the
        // transaction back (an I/O error does that on SQLite); there is
        // nothing left to undo.
        let _ = if self.nested {
            self.conn.rollback_to(SAVEPOINT)
        } else {
            self.conn.rollback()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(conn: &Connection) -> i64 {
        conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_nested_write_rolls_back_alone_and_commits_with_its_parent() {
        let settings = crate::store::db::SqliteSettings {
            busy_timeout: std::time::Duration::from_secs(5),
            synchronous_full: true,
        };
        let conn = Connection::open_sqlite_in_memory(settings).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let outer = WriteTx::begin(&conn).unwrap();
        outer.execute("INSERT INTO t VALUES (1)", []).unwrap();
        {
            let inner = WriteTx::begin(&conn).unwrap();
            inner.execute("INSERT INTO t VALUES (2)", []).unwrap();
            // dropped: only its row goes
        }
        let kept = WriteTx::begin(&conn).unwrap();
        kept.execute("INSERT INTO t VALUES (3)", []).unwrap();
        kept.commit().unwrap();
        assert!(!conn.is_autocommit(), "the outer transaction is still open");
        outer.commit().unwrap();
        assert_eq!(rows(&conn), 2);
        {
            let dropped = WriteTx::begin(&conn).unwrap();
            dropped.execute("INSERT INTO t VALUES (4)", []).unwrap();
        }
        assert_eq!(rows(&conn), 2);
        assert!(conn.is_autocommit());
    }
}
