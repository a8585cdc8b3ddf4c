//! An SQLite connection with the store's own statement cache.
//!
//! It exists because rusqlite's `prepare_cached` cost about 1,900
//! instructions per statement run, some 80 statements a workflow on the
//! writer thread alone (docs/performance.md, "The statement cache and the
//! SQL text of each call"): each use trims the SQL
//! text, copies it into a new `Arc<str>`, takes the statement out of an LRU
//! list and puts it back in when done, hashing the text both times. Here a
//! use hashes the text once into a map of slots and the statement goes back
//! to its slot through the handle it was taken with: no copy, no second
//! lookup, no list to relink.
//!
//! The statements borrow the connection they were compiled on, so the two
//! live in one value: the connection boxed (its address never changes) and
//! dropped after the cache ([`SqliteConnection`]'s fields drop in order).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::{Deref, DerefMut};
use std::rc::Rc;

use rusqlite::PrepFlags;

use super::error::Result;

/// An SQLite connection and the statements compiled on it.
pub(super) struct SqliteConnection {
    /// Declared first, so dropped first: every statement in it refers to
    /// `conn`.
    statements: StatementCache,
    conn: Box<rusqlite::Connection>,
}

// SAFETY: the cached statements refer only to the connection they are moved
// with (never shared: `SqliteConnection` is not `Sync`, and a statement
// taken out of the cache borrows it, so it cannot be moved while one is in
// use); rusqlite's own cache is `Send` for the same reason.
unsafe impl Send for SqliteConnection {}

impl SqliteConnection {
    /// Keeps up to `capacity` distinct statements compiled.
    pub(super) fn new(conn: rusqlite::Connection, capacity: usize) -> SqliteConnection {
        SqliteConnection {
            statements: StatementCache {
                slots: RefCell::new(HashMap::default()),
                capacity,
            },
            conn: Box::new(conn),
        }
    }

    /// The connection for code that changes it (migrations): the cached
    /// statements are finalized first, so none refers to it while it is
    /// borrowed mutably (SQLite compiles them again on their next use).
    pub(super) fn get_mut(&mut self) -> &mut rusqlite::Connection {
        self.statements.slots.get_mut().clear();
        &mut self.conn
    }

    /// `sql` compiled once for this connection and kept: a statement that
    /// is not in use is taken from the cache, else one is compiled (and
    /// kept once it is done with). Two uses of the same text at once get
    /// two statements.
    pub(super) fn prepare_cached(&self, sql: &str) -> Result<CachedStatement<'_>> {
        let slot = self.statements.slot(sql);
        let idle = slot.borrow_mut().pop();
        let statement = match idle {
            Some(statement) => statement,
            None => {
                // SAFETY: `conn` is boxed and lives as long as `self`, and
                // outlives every statement in the cache (dropped after it,
                // and `get_mut` empties the cache before lending it out);
                // the statement handed out borrows `self`.
                let conn: &'static rusqlite::Connection =
                    unsafe { &*std::ptr::from_ref(&*self.conn) };
                conn.prepare_with_flags(sql, PrepFlags::SQLITE_PREPARE_PERSISTENT)?
            }
        };
        Ok(CachedStatement {
            statement: Some(statement),
            slot,
            _conn: std::marker::PhantomData,
        })
    }

    /// Distinct statement texts kept (tests).
    #[cfg(test)]
    pub(super) fn cached_texts(&self) -> usize {
        self.statements.slots.borrow().len()
    }
}

impl Deref for SqliteConnection {
    type Target = rusqlite::Connection;

    fn deref(&self) -> &rusqlite::Connection {
        &self.conn
    }
}

/// Idle statements by their SQL text.
struct StatementCache {
    slots: RefCell<HashMap<Box<str>, Slot, BuildHasherDefault<TextHasher>>>,
    /// Past this many texts the cache starts again from empty (the store's
    /// texts are a fixed set, well under it: see
    /// `super::STATEMENT_CACHE_CAPACITY`).
    capacity: usize,
}

/// The idle statements of one text: usually one; more only after the text
/// was in use twice at once.
type Slot = Rc<RefCell<Vec<rusqlite::Statement<'static>>>>;

impl StatementCache {
    fn slot(&self, sql: &str) -> Slot {
        let mut slots = self.slots.borrow_mut();
        if let Some(slot) = slots.get(sql) {
            return Rc::clone(slot);
        }
        if slots.len() >= self.capacity {
            // Statements in use keep their slot alive through their
            // handle and are finalized when done.
            slots.clear();
        }
        let slot = Slot::default();
        slots.insert(sql.into(), Rc::clone(&slot));
        slot
    }
}

/// A statement taken from the cache; it goes back to its slot when dropped.
pub(super) struct CachedStatement<'c> {
    statement: Option<rusqlite::Statement<'static>>,
    slot: Slot,
    _conn: std::marker::PhantomData<&'c SqliteConnection>,
}

impl Deref for CachedStatement<'_> {
    type Target = rusqlite::Statement<'static>;

    fn deref(&self) -> &Self::Target {
        self.statement.as_ref().expect("a statement until dropped")
    }
}

impl DerefMut for CachedStatement<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.statement.as_mut().expect("a statement until dropped")
    }
}

impl Drop for CachedStatement<'_> {
    fn drop(&mut self) {
        if let Some(mut statement) = self.statement.take() {
            // As rusqlite's cache does: an idle statement holds no copy of
            // the values it was last run with (a payload can be large).
            statement.clear_bindings();
            self.slot.borrow_mut().push(statement);
        }
    }
}

/// A multiply-rotate hash of the SQL text, eight bytes at a time (the
/// store's texts, not anyone's input: nothing to defend against): a tenth
/// of SipHash's instructions on a 300-byte statement.
#[derive(Default)]
struct TextHasher(u64);

impl TextHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for TextHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(tail));
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> SqliteConnection {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT)")
            .unwrap();
        SqliteConnection::new(conn, 4)
    }

    fn runs(statement: &rusqlite::Statement<'_>) -> i32 {
        statement.get_status(rusqlite::StatementStatus::Run)
    }

    #[test]
    fn a_text_is_compiled_once_and_its_statement_run_again() {
        let conn = open();
        let insert = "INSERT INTO t (a, b) VALUES (?1, ?2)";
        for a in 0..3 {
            let mut statement = conn.prepare_cached(insert).unwrap();
            // The run counter belongs to the compiled statement: it counts
            // the earlier uses only if this is the statement they ran.
            assert_eq!(runs(&statement), a);
            statement
                .execute(rusqlite::params![a, format!("b{a}")])
                .unwrap();
        }
        // The text built anew at another address finds the same statement.
        let again = String::from("INSERT INTO t (a, b) VALUES (?1, ?2)");
        assert_eq!(runs(&conn.prepare_cached(&again).unwrap()), 3);
        assert_eq!(conn.cached_texts(), 1);
        let count: i64 = conn
            .prepare_cached("SELECT count(*) FROM t")
            .unwrap()
            .query_row([], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 3);
    }

    #[test]
    fn the_same_text_in_use_twice_gets_two_statements() {
        let conn = open();
        for a in 0..4 {
            conn.prepare_cached("INSERT INTO t (a, b) VALUES (?1, 'x')")
                .unwrap()
                .execute([a])
                .unwrap();
        }
        let sql = "SELECT a FROM t WHERE a >= ?1 ORDER BY a";
        let mut outer = conn.prepare_cached(sql).unwrap();
        let mut rows = outer.query([0]).unwrap();
        let mut pairs = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            let a: i64 = row.get(0).unwrap();
            let mut inner = conn.prepare_cached(sql).unwrap();
            let next: Vec<i64> = inner
                .query_map([a + 1], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            pairs.push((a, next.len()));
        }
        assert_eq!(pairs, vec![(0, 3), (1, 2), (2, 1), (3, 0)]);
        drop(rows);
        drop(outer);
        // Both went back: two idle statements of one text.
        let first = conn.prepare_cached(sql).unwrap();
        let second = conn.prepare_cached(sql).unwrap();
        assert_eq!(runs(&first) + runs(&second), 5);
    }

    #[test]
    fn past_its_capacity_the_cache_starts_again_and_still_answers() {
        let conn = open();
        let held = conn.prepare_cached("SELECT 0").unwrap();
        for n in 1..=9 {
            let sql = format!("SELECT {n}");
            let got: i64 = conn
                .prepare_cached(&sql)
                .unwrap()
                .query_row([], |r| r.get(0))
                .unwrap();
            assert_eq!(got, n);
            assert!(conn.cached_texts() <= 4, "{} texts", conn.cached_texts());
        }
        // A statement in use when the cache emptied still runs.
        let mut held = held;
        assert_eq!(held.query_row([], |r| r.get::<_, i64>(0)).unwrap(), 0);
    }

    #[test]
    fn a_schema_change_through_the_mutable_connection_empties_the_cache() {
        let mut conn = open();
        conn.prepare_cached("SELECT * FROM t")
            .unwrap()
            .execute([])
            .ok();
        assert_eq!(conn.cached_texts(), 1);
        conn.get_mut()
            .execute_batch("ALTER TABLE t ADD COLUMN c INTEGER DEFAULT 7")
            .unwrap();
        assert_eq!(conn.cached_texts(), 0);
        conn.prepare_cached("INSERT INTO t (a) VALUES (1)")
            .unwrap()
            .execute([])
            .unwrap();
        let c: i64 = conn
            .prepare_cached("SELECT c FROM t")
            .unwrap()
            .query_row([], |r| r.get(0))
            .unwrap();
        assert_eq!(c, 7);
    }

    #[test]
    fn a_connection_with_statements_in_its_cache_moves_to_another_thread() {
        let conn = open();
        conn.prepare_cached("INSERT INTO t (a, b) VALUES (1, 'x')")
            .unwrap()
            .execute([])
            .unwrap();
        let count = std::thread::spawn(move || {
            conn.prepare_cached("SELECT count(*) FROM t")
                .unwrap()
                .query_row([], |r| r.get::<_, i64>(0))
                .unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(count, 1);
    }
}
