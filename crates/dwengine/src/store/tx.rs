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
//!
//! The group-commit writer opens a savepoint around each job, and a job's
//! first store write would nest another one in it at once, two savepoint
//! statements more per job (and one more level for SQLite to track each
//! page against). When nothing has changed since the writer's savepoint
//! opened, the write takes that savepoint over instead
//! (`Connection::adopt_savepoint`): rolling back to it undoes exactly the
//! same writes, and the writer releases it after the job.

use std::ops::Deref;

use crate::store::db::Connection;
use crate::store::error::Error;

/// The savepoint a nested write opens.
const SAVEPOINT: &str = "store_write";

/// An open write transaction or savepoint on a store connection.
pub(crate) struct WriteTx<'c> {
    conn: &'c Connection,
    scope: Scope,
    open: bool,
}

/// What a [`WriteTx`] opened.
#[derive(Clone, Copy)]
enum Scope {
    /// The transaction.
    Transaction,
    /// A savepoint of its own.
    Savepoint,
    /// Nothing: it writes in the enclosing savepoint of this name, opened
    /// with no row changed since, which its opener releases.
    Adopted(&'static str),
}

impl<'c> WriteTx<'c> {
    /// Opens a transaction, or a savepoint when one is already open.
    pub(crate) fn begin(conn: &'c Connection) -> Result<WriteTx<'c>, Error> {
        let scope = if conn.is_autocommit() {
            conn.begin_write()?;
            Scope::Transaction
        } else if let Some(name) = conn.adopt_savepoint() {
            Scope::Adopted(name)
        } else {
            conn.savepoint(SAVEPOINT)?;
            Scope::Savepoint
        };
        Ok(WriteTx {
            conn,
            scope,
            open: true,
        })
    }

    /// Commits (or releases into the enclosing transaction). Inside an
    /// enclosing transaction the writes it queued
    /// (`Connection::execute_queued`) are sent first, with the release, in
    /// one round trip: an error they meet fails this write alone (it rolls
    /// back to its savepoint when dropped), never the next job of a group
    /// commit. A transaction of its own sends them with its `COMMIT`.
    pub(crate) fn commit(mut self) -> Result<(), Error> {
        match self.scope {
            Scope::Transaction => self.conn.commit()?,
            Scope::Savepoint => {
                self.conn.release(SAVEPOINT)?;
                self.conn.send_queued()?;
            }
            Scope::Adopted(_) => self.conn.send_queued()?,
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
        let _ = match self.scope {
            Scope::Transaction => self.conn.rollback(),
            Scope::Savepoint => self.conn.rollback_to(SAVEPOINT),
            Scope::Adopted(name) => self.conn.rollback_within(name),
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

    fn sqlite() -> Connection {
        let settings = crate::store::db::SqliteSettings {
            busy_timeout: std::time::Duration::from_secs(5),
            synchronous_full: true,
        };
        let conn = Connection::open_sqlite_in_memory(settings).unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        conn
    }

    /// A write that takes over the group-commit writer's job savepoint
    /// undoes, when dropped, exactly what a savepoint of its own would
    /// have: the job's later writes (in savepoints of their own) stay, and
    /// releasing the job's savepoint commits them.
    #[test]
    fn a_write_that_adopts_the_jobs_savepoint_rolls_back_alone() {
        let conn = sqlite();
        conn.begin_write().unwrap();
        conn.execute("INSERT INTO t VALUES (0)", []).unwrap(); // an earlier job's
        conn.savepoint_to_adopt("job").unwrap();
        {
            let adopted = WriteTx::begin(&conn).unwrap();
            assert!(matches!(adopted.scope, Scope::Adopted("job")));
            adopted.execute("INSERT INTO t VALUES (1)", []).unwrap();
            // dropped: its row goes, the earlier job's stays
        }
        assert_eq!(rows(&conn), 1);
        let kept = WriteTx::begin(&conn).unwrap();
        assert!(matches!(kept.scope, Scope::Savepoint), "offered once");
        kept.execute("INSERT INTO t VALUES (2)", []).unwrap();
        {
            let inner = WriteTx::begin(&conn).unwrap();
            inner.execute("INSERT INTO t VALUES (3)", []).unwrap();
        }
        kept.commit().unwrap();
        conn.withdraw_savepoint();
        conn.release("job").unwrap();
        conn.commit().unwrap();
        let kept: Vec<i64> = conn
            .prepare("SELECT x FROM t ORDER BY x")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(kept, vec![0, 2]);
    }

    /// A job that wrote before its first `WriteTx` keeps those rows when
    /// the `WriteTx` rolls back: a row changed since the job's savepoint
    /// opened, so the write opens a savepoint of its own.
    #[test]
    fn a_write_after_the_jobs_own_rows_does_not_adopt_its_savepoint() {
        let conn = sqlite();
        conn.begin_write().unwrap();
        conn.savepoint_to_adopt("job").unwrap();
        conn.execute("INSERT INTO t VALUES (1)", []).unwrap();
        {
            let own = WriteTx::begin(&conn).unwrap();
            assert!(matches!(own.scope, Scope::Savepoint));
            own.execute("INSERT INTO t VALUES (2)", []).unwrap();
        }
        assert_eq!(rows(&conn), 1, "the job's own row stays");
        // A committed adopted write commits with the job.
        conn.withdraw_savepoint();
        conn.release("job").unwrap();
        conn.savepoint_to_adopt("job").unwrap();
        let adopted = WriteTx::begin(&conn).unwrap();
        adopted.execute("INSERT INTO t VALUES (3)", []).unwrap();
        adopted.commit().unwrap();
        assert!(!conn.is_autocommit(), "the batch is still open");
        conn.release("job").unwrap();
        conn.commit().unwrap();
        assert_eq!(rows(&conn), 2);
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
