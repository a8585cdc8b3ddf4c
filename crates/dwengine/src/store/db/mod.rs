//! The store's database seam: one connection type the whole store talks
//! through, so the same transitions, limit checks and counters run on more
//! than one database engine.
//!
//! It exists because the store was written against rusqlite directly (some
//! 30 files, 400 call sites), and a second backend (PostgreSQL, for several
//! nodes on one database) must not mean a second copy of the store. The API
//! mirrors the part of rusqlite the store uses — [`Connection`] with
//! `prepare_cached`, `execute`, `query_row`; [`Statement`] with `execute`,
//! `query_row`, `query_map`, `query`, `exists`; [`Row::get`]; [`params!`];
//! [`OptionalExtension`]; [`params_from_iter`] — so store code changed in
//! its `use` lines, not in its logic. What differs between engines lives
//! here and nowhere else: opening and tuning a connection (SQLite's
//! pragmas, in `sqlite`), transaction control (`BEGIN IMMEDIATE` on
//! SQLite), incremental blob I/O for external payloads, and the value
//! model (SQLite's five storage classes; see `params`).
//!
//! Statements the store hands to the seam are written in the portable
//! dialect both engines accept (`ON CONFLICT`, `RETURNING`, `?N`
//! placeholders, `CAST(SUM(..) AS BIGINT)`, no scalar `MAX`/`MIN`).

mod error;
mod params;
mod postgres;
mod sqlite;
mod sqlite_statements;
mod wal;
mod wal_writes;

use std::cell::Cell;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

pub use error::{Error, OptionalExtension, Result};
pub use params::{
    params_from_iter, FromSql, FromSqlError, Params, ParamsFromIter, ToSql, ToSqlOutput, Value,
    ValueRef,
};
/// A blob parameter of `n` zero bytes (space an incremental write fills).
pub use rusqlite::blob::ZeroBlob;
/// The parameters of a statement as one slice: `params![a, b]`.
pub use rusqlite::params;
pub use wal::WalFile;

/// The log's length, in pages, past which it is copied into the database:
/// by SQLite's automatic checkpoint on an ordinary read-write connection,
/// by the checkpointer thread for the group-commit writer's
/// ([`Connection::hand_off_checkpoints`]).
pub const LOG_CHECKPOINT_PAGES: u32 = sqlite::WAL_AUTOCHECKPOINT_PAGES;

/// How a checkpoint treats the log's other users ([`Connection::checkpoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Copies what no reader still needs, waiting for nobody.
    Passive,
    /// Waits (up to the busy timeout) for other writers and for readers of
    /// old frames, copies the whole log, and leaves it to start again from
    /// its beginning at the next write.
    Restart,
}

/// What a checkpoint did: SQLite's `PRAGMA wal_checkpoint` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpointed {
    /// It could not finish (another checkpoint ran, or a reader or writer
    /// held it off past the busy timeout).
    pub busy: bool,
    /// The log's length in frames when it ran.
    pub log: u32,
    /// Frames of the log copied into the database so far (all of them:
    /// `copied == log`).
    pub copied: u32,
}

/// The log's length in frames after the last commit this thread made on a
/// connection whose checkpoints are handed off
/// ([`Connection::hand_off_checkpoints`]), or 0 when it made none since the
/// last call.
pub fn take_log_frames() -> u32 {
    sqlite::take_log_frames()
}

/// How an SQLite connection is opened.
#[derive(Debug, Clone, Copy)]
pub struct SqliteSettings {
    /// How long a statement waits for another connection's lock.
    pub busy_timeout: Duration,
    /// `synchronous = FULL` (every commit fsynced) rather than `NORMAL`.
    pub synchronous_full: bool,
}

/// How a PostgreSQL session is opened, and how long its calls may take
/// (`DW_DATABASE_*_TIMEOUT_MS`, docs/dwserver.md). A setting the
/// database URL gives itself (`connect_timeout`, `keepalives_idle`,
/// `tcp_user_timeout`, …, or `-c statement_timeout=…` in `options`) wins.
/// Zero turns a timeout off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostgresSettings {
    /// A connection attempt (TCP, startup, authentication) gives up after it.
    pub connect_timeout: Duration,
    /// The server ends a statement that runs longer (`statement_timeout`).
    pub statement_timeout: Duration,
    /// The server ends a lock wait that lasts longer (`lock_timeout`).
    pub lock_timeout: Duration,
    /// The server closes a session idle inside a transaction for longer
    /// (`idle_in_transaction_session_timeout`): a node that froze holding
    /// the write lock releases it to the others.
    pub idle_in_transaction_timeout: Duration,
    /// The node's own deadline on one call: past it the call fails as
    /// unavailable and the session is closed. What ends a call to a server
    /// that does not answer at all; above the statement and lock timeouts,
    /// so that the server's own end a call that merely runs long.
    pub call_timeout: Duration,
    /// TCP keepalives and `TCP_USER_TIMEOUT`: a peer silent this long
    /// (idle, or not acknowledging what was sent) ends the session.
    pub tcp_timeout: Duration,
}

impl PostgresSettings {
    /// The default connect timeout: 5 s.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default statement timeout: 15 s.
    pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(15);
    /// The default lock timeout: 10 s.
    pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
    /// The default idle-in-transaction timeout: 15 s.
    pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(15);
    /// The default call deadline: 20 s.
    pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);
    /// The default TCP timeout: 20 s.
    pub const TCP_TIMEOUT: Duration = Duration::from_secs(20);
}

impl Default for PostgresSettings {
    fn default() -> Self {
        PostgresSettings {
            connect_timeout: Self::CONNECT_TIMEOUT,
            statement_timeout: Self::STATEMENT_TIMEOUT,
            lock_timeout: Self::LOCK_TIMEOUT,
            idle_in_transaction_timeout: Self::IDLE_IN_TRANSACTION_TIMEOUT,
            call_timeout: Self::CALL_TIMEOUT,
            tcp_timeout: Self::TCP_TIMEOUT,
        }
    }
}

pub use postgres::CallClock;

/// The text a PostgreSQL session prepares for the store's `sql` (`?N`
/// placeholders as `$N`, SQLite's `INDEXED BY` hints left out), for tests
/// that plan the store's statements on PostgreSQL themselves.
pub fn postgres_text(sql: &str) -> String {
    postgres::translate(sql)
}

/// One connection to the store's database.
pub struct Connection {
    backend: Backend,
    /// A savepoint opened by [`Connection::savepoint_to_adopt`] and the
    /// connection's row changes at the time, until a write takes it over
    /// ([`Connection::adopt_savepoint`]) or its opener gives it up.
    adoptable: Cell<Option<(&'static str, u64)>>,
}

enum Backend {
    /// With the store's statement cache (`sqlite_statements`).
    Sqlite(sqlite_statements::SqliteConnection),
    /// Boxed: a session's client and statement cache are several times
    /// an SQLite handle's size.
    Postgres(Box<postgres::PgConnection>),
}

/// Which engine a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// SQLite (a file or memory), through rusqlite.
    Sqlite,
    /// PostgreSQL, through tokio-postgres driven from the calling thread,
    /// every call bounded in time (`postgres`).
    Postgres,
}

impl Engine {
    /// The name the backend contract reports as `database_driver`.
    pub fn driver_name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }
}

impl Connection {
    /// A read-write SQLite connection to the file at `path` (created if
    /// needed), in WAL mode with foreign keys on.
    pub fn open_sqlite(path: impl AsRef<Path>, settings: SqliteSettings) -> Result<Connection> {
        // Through the VFS that writes each commit's log frames in one call
        // (`wal_writes`): this connection is the file's one writer.
        let vfs = wal_writes::register().map_err(Error::Config)?;
        let conn = rusqlite::Connection::open_with_flags_and_vfs(
            path,
            rusqlite::OpenFlags::default(),
            vfs,
        )?;
        sqlite::configure_writer(&conn, settings)?;
        Ok(Connection::from_sqlite(conn))
    }

    /// A private in-memory SQLite database.
    pub fn open_sqlite_in_memory(settings: SqliteSettings) -> Result<Connection> {
        let conn = rusqlite::Connection::open_in_memory()?;
        sqlite::configure_writer(&conn, settings)?;
        Ok(Connection::from_sqlite(conn))
    }

    /// A read-only SQLite connection to a file another connection migrated.
    pub fn open_sqlite_reader(
        path: impl AsRef<Path>,
        settings: SqliteSettings,
    ) -> Result<Connection> {
        let conn = rusqlite::Connection::open(path)?;
        sqlite::configure_reader(&conn, settings)?;
        Ok(Connection::from_sqlite(conn))
    }

    /// A PostgreSQL session on the database `url` names
    /// (`postgres://user:password@host:port/database?options=…`), its
    /// calls bounded by `settings`.
    pub fn open_postgres(url: &str, settings: &PostgresSettings) -> Result<Connection> {
        Ok(Connection {
            backend: Backend::Postgres(Box::new(postgres::PgConnection::connect(url, settings)?)),
            adoptable: Cell::new(None),
        })
    }

    /// Wraps an open rusqlite connection as it is (tests, tools).
    pub fn from_sqlite(conn: rusqlite::Connection) -> Connection {
        Connection {
            backend: Backend::Sqlite(sqlite_statements::SqliteConnection::new(
                conn,
                STATEMENT_CACHE_CAPACITY,
            )),
            adoptable: Cell::new(None),
        }
    }

    /// The engine behind this connection.
    pub fn engine(&self) -> Engine {
        match &self.backend {
            Backend::Sqlite(_) => Engine::Sqlite,
            Backend::Postgres(_) => Engine::Postgres,
        }
    }

    /// Takes the sync of each commit out of SQLite's hands: on an SQLite
    /// file in WAL mode that commits with `synchronous = FULL`, switches
    /// the connection to `NORMAL` (a commit writes its frames to the log
    /// and returns without syncing it; checkpoints and the log's header are
    /// synced as before) and answers the log, which the caller must sync
    /// after each commit before it tells anyone the commit happened
    /// ([`crate::store::syncer`]). `None` (nothing changed): PostgreSQL, an
    /// in-memory database, or a durability that does not sync commits.
    pub fn defer_commit_sync(&self) -> Result<Option<WalFile>> {
        match &self.backend {
            Backend::Sqlite(conn) => sqlite::defer_commit_sync(conn),
            Backend::Postgres(_) => Ok(None),
        }
    }

    /// Stops this connection's commits from checkpointing the log (SQLite's
    /// automatic checkpoint, which copies the log into the database inside
    /// the `COMMIT` that takes it past [`LOG_CHECKPOINT_PAGES`]) and counts
    /// the log's frames after each commit instead ([`take_log_frames`], on
    /// the committing thread); answers the database's path for a
    /// checkpointer's own connection ([`Connection::open_sqlite_checkpointer`]),
    /// which the caller must run, or the log grows without bound. `None`
    /// (nothing changed): PostgreSQL, or SQLite without a log (memory).
    pub fn hand_off_checkpoints(&self) -> Result<Option<std::path::PathBuf>> {
        match &self.backend {
            Backend::Sqlite(conn) => sqlite::hand_off_checkpoints(conn),
            Backend::Postgres(_) => Ok(None),
        }
    }

    /// A connection to the SQLite file at `path` that only checkpoints its
    /// log ([`Connection::checkpoint`]), with the syncs SQLite makes for
    /// that (the log before, the database after).
    pub fn open_sqlite_checkpointer(path: &Path, settings: SqliteSettings) -> Result<Connection> {
        Ok(Connection::from_sqlite(sqlite::open_checkpointer(
            path, settings,
        )?))
    }

    /// Copies the write-ahead log into the database (`PRAGMA
    /// wal_checkpoint`); PostgreSQL has nothing to copy.
    pub fn checkpoint(&self, mode: CheckpointMode) -> Result<Checkpointed> {
        match &self.backend {
            Backend::Sqlite(conn) => sqlite::checkpoint(conn, mode),
            Backend::Postgres(_) => Ok(Checkpointed {
                busy: false,
                log: 0,
                copied: 0,
            }),
        }
    }

    /// The SQLite connection underneath, for SQLite-only code (its
    /// migrations).
    pub(crate) fn sqlite_mut(&mut self) -> Option<&mut rusqlite::Connection> {
        match &mut self.backend {
            Backend::Sqlite(conn) => Some(conn.get_mut()),
            Backend::Postgres(_) => None,
        }
    }

    /// The clock of a PostgreSQL session's pending call (`None` on
    /// SQLite): how long the database has kept it waiting.
    pub fn call_clock(&self) -> Option<std::sync::Arc<CallClock>> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(conn) => Some(conn.clock()),
        }
    }

    /// Applies (`true`) or lifts the node's deadline on each call of a
    /// PostgreSQL session (a migration may wait on another node's as long
    /// as that takes); nothing on SQLite.
    pub(crate) fn set_call_deadline(&self, on: bool) {
        if let Backend::Postgres(conn) = &self.backend {
            conn.set_call_deadline(on);
        }
    }

    /// Caps an SQLite database at `pages` pages (a write past it fails as
    /// a full disk does).
    pub fn set_max_page_count(&self, pages: u64) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(conn) => sqlite::set_max_page_count(conn, pages),
            // A PostgreSQL database is sized by its server, not per session.
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// A statement compiled once per connection and kept (up to
    /// [`STATEMENT_CACHE_CAPACITY`] of them).
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        match &self.backend {
            Backend::Sqlite(conn) => Ok(Statement {
                inner: StatementInner::SqliteCached(conn.prepare_cached(sql)?),
            }),
            Backend::Postgres(conn) => Ok(Statement {
                inner: StatementInner::Postgres(conn, conn.prepare_cached(sql)?),
            }),
        }
    }

    /// A statement compiled for one use (SQL that varies per call).
    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        match &self.backend {
            Backend::Sqlite(conn) => Ok(Statement {
                inner: StatementInner::Sqlite(conn.prepare(sql)?),
            }),
            Backend::Postgres(conn) => Ok(Statement {
                inner: StatementInner::Postgres(conn, conn.prepare(sql)?),
            }),
        }
    }

    /// Runs one statement; the number of rows it changed.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare(sql)?.execute(params)
    }

    /// The first row of one statement, through `map`; [`Error::NoRows`]
    /// when there is none.
    pub fn query_row<T, P, F>(&self, sql: &str, params: P, map: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        self.prepare(sql)?.query_row(params, map)
    }

    /// Runs `insert`, an `INSERT … VALUES` of one row into a table keyed by
    /// an integer `id`, written without a `RETURNING` clause, through the
    /// statement cache; the new row's `id`. On SQLite the id is the
    /// connection's last inserted rowid, read once the statement is done
    /// (its triggers' inserts do not change it): with `RETURNING id`
    /// SQLite gathers the returned rows in a temporary B-tree that every
    /// execution opens and drops, 6 % of the instructions of a workflow
    /// start's statements (docs/performance.md, "CHECK constraints without
    /// IN lists, the run id without RETURNING"). On PostgreSQL the statement
    /// carries `RETURNING id`. An insert that may add no row (`ON CONFLICT DO
    /// NOTHING`, `INSERT … SELECT`) cannot use this: [`Error::NoRows`]
    /// when it added none.
    pub fn insert_returning_id<P: Params>(&self, insert: &str, params: P) -> Result<i64> {
        match &self.backend {
            Backend::Sqlite(conn) => {
                let mut statement = conn.prepare_cached(insert)?;
                let added = params.with_values(|values| statement.execute(values))?;
                if added != 1 {
                    return Err(Error::NoRows);
                }
                Ok(conn.last_insert_rowid())
            }
            Backend::Postgres(_) => self
                .prepare_cached(&format!("{insert} RETURNING id"))?
                .query_row(params, |r| r.get(0)),
        }
    }

    /// Runs `sql`, a write whose answer no code reads (no rows, no row
    /// count), without a round trip of its own where it can: on PostgreSQL,
    /// inside a transaction, it is queued and goes pipelined ahead of the
    /// transaction's next statement or its end, in that call's one write
    /// (`PgConnection::queue`), so a write transaction holding the write
    /// lock waits for one answer where it waited for several. An error it
    /// meets fails that next call, and the transaction is aborted: its
    /// caller rolls back, as on any error. So never for a statement whose
    /// error is read as an outcome (a unique violation meaning
    /// "duplicate") or whose row count decides anything (a fenced
    /// `UPDATE`). A store write sends what it queued before it reports
    /// success ([`crate::store::tx::WriteTx::commit`]). On SQLite, and
    /// outside a transaction, it runs at once.
    pub fn execute_queued<P: Params>(&self, sql: &str, params: P) -> Result<()> {
        match &self.backend {
            Backend::Postgres(conn) if !conn.is_autocommit() => {
                let statement = conn.prepare_cached(sql)?;
                params.with_values(|values| conn.queue(&statement, values))
            }
            _ => self.prepare_cached(sql)?.execute(params).map(|_| ()),
        }
    }

    /// Sends the writes [`Connection::execute_queued`] queued (and the
    /// savepoint commands deferred with them) now, in one round trip, and
    /// answers their first error; nothing when none is queued.
    pub fn send_queued(&self) -> Result<()> {
        match &self.backend {
            Backend::Postgres(conn) if conn.has_queued_writes() => conn.flush(),
            _ => Ok(()),
        }
    }

    /// Runs statements with no parameters, separated by `;` (schema text).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(conn) => Ok(conn.execute_batch(sql)?),
            Backend::Postgres(conn) => conn.batch(sql),
        }
    }

    /// Whether the connection is lost for good (a PostgreSQL session the
    /// server closed or whose socket failed): nothing more runs on it
    /// until [`Connection::reconnect`]. An SQLite connection never is.
    pub fn is_broken(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(_) => false,
            Backend::Postgres(conn) => conn.is_broken(),
        }
    }

    /// Replaces a lost PostgreSQL session with a new one on the same
    /// database (an error when the server still cannot be reached); does
    /// nothing on SQLite.
    pub fn reconnect(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(conn) => conn.reconnect(),
        }
    }

    /// Whether no transaction is open.
    pub fn is_autocommit(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(conn) => conn.is_autocommit(),
            Backend::Postgres(conn) => conn.is_autocommit(),
        }
    }

    /// Rows the last statement changed.
    pub fn changes(&self) -> u64 {
        match &self.backend {
            Backend::Sqlite(conn) => conn.changes(),
            Backend::Postgres(conn) => conn.changes(),
        }
    }

    /// Opens a write transaction with the write lock taken up front, so a
    /// counter read under it cannot go stale before the write that
    /// depends on it.
    ///
    /// SQLite: `BEGIN IMMEDIATE`. PostgreSQL: `BEGIN` (READ COMMITTED)
    /// and `pg_advisory_xact_lock` on [`WRITE_LOCK`] in the same round
    /// trip: every write transaction of every node sharing the database
    /// takes the one lock exclusively, so writes are serialized across
    /// connections and nodes exactly as SQLite serializes them in one
    /// file, and each statement after the lock sees every write committed
    /// before it (READ COMMITTED takes a snapshot per statement; a
    /// REPEATABLE READ snapshot would predate the wait for the lock).
    ///
    /// Why a global lock and not row locks for these: a write transition
    /// reads before it writes across many rows (admission counters of a
    /// namespace, "is a workflow task already queued for this run", a
    /// run's history length, structural limits), and its decision is only
    /// right if nothing else writes between the read and the write. The
    /// one transition that needs none of that is a task claim, which takes
    /// the lock shared instead ([`Connection::begin_claim`]).
    ///
    /// The cost: write transactions do not run in parallel, so the
    /// database's write rate is that of one session (group commit
    /// amortizes it over many callers); reads never take the lock. Three
    /// kinds of transaction need none of those reads beyond one run and
    /// take the lock shared instead: task claims
    /// ([`Connection::begin_claim`]), batches of workflow starts
    /// ([`Connection::begin_starts`]) and batches of completions that
    /// write one run ([`Connection::begin_run_writes`]).
    pub fn begin_write(&self) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => self.control("BEGIN IMMEDIATE"),
            Backend::Postgres(conn) => conn.begin(
                &format!(
                    "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({WRITE_LOCK}, hashtext(current_schema()))"
                ),
                false,
                false,
            ),
        }
    }

    /// Opens a claim transaction: a worker's poll taking one ready task.
    ///
    /// SQLite: `BEGIN IMMEDIATE`, as any write (one writer per file).
    /// PostgreSQL: the write lock taken *shared*
    /// (`pg_advisory_xact_lock_shared`), so claims run side by side with
    /// each other on every node and never beside an ordinary write. Two
    /// claims keep apart through row locks: each locks the task it takes
    /// with `FOR UPDATE SKIP LOCKED` (another claim's task is skipped, not
    /// waited for), and what else a claim writes belongs to that task or
    /// its run. Everything a claim reads that an ordinary write changes
    /// (a run's queued workflow task, its signals, sticky bindings) cannot
    /// change under it, since the ordinary writes wait for the lock. A
    /// claim that finds it must decide on shared state (a worker session's
    /// admission) stops and is rerun as an ordinary write
    /// ([`Connection::claims_side_by_side`] tells the store which it is).
    ///
    /// On PostgreSQL the `BEGIN` and the lock go with the claim's first
    /// statement, in its round trip (`PgConnection::begin_deferred`): a
    /// claim rolls back on any error ([`crate::store::Store::claim`]), so
    /// one the lock wait or a dropped session fails ends as before.
    pub fn begin_claim(&self) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => self.control("BEGIN IMMEDIATE"),
            Backend::Postgres(conn) => {
                conn.begin_deferred(&Self::shared_begin(), true);
                Ok(())
            }
        }
    }

    /// PostgreSQL's `BEGIN` with the write lock taken shared.
    fn shared_begin() -> String {
        format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock_shared({WRITE_LOCK}, hashtext(current_schema()))"
        )
    }

    /// Opens a transaction of workflow starts (new runs with their first
    /// event and task): on SQLite `BEGIN IMMEDIATE`, as any write; on
    /// PostgreSQL the write lock taken *shared*, as a claim takes it, so
    /// the start batches of every node run beside each other and beside
    /// claims, never beside an ordinary write.
    ///
    /// What a start reads that another start could change is its workflow
    /// id's runs (an open run, a request id already used): each start
    /// first takes that id's key lock ([`Connection::try_lock_key`]) and
    /// runs as an ordinary write instead when another transaction holds it.
    /// What it writes is rows of its own new run, plus the counters kept by
    /// triggers (`workflow_run_series`, `task_queue_state`), which on
    /// PostgreSQL count at commit (deferred triggers, migration 0037), so
    /// two start batches wait for each other only while one commits. A
    /// start that must decide on shared state (a namespace quota, an
    /// external payload's references, a schedule's fire) is not sent here.
    pub fn begin_starts(&self) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => self.control("BEGIN IMMEDIATE"),
            Backend::Postgres(conn) => conn.begin(&Self::shared_begin(), true, false),
        }
    }

    /// Opens a transaction of the run writer ([`crate::store::writer::Lane::Runs`]):
    /// completions that write rows of one existing run (an activity's
    /// report, a workflow task's completion whose commands stay in its
    /// run). On SQLite `BEGIN IMMEDIATE`, as any write; on PostgreSQL the
    /// write lock taken *shared*, as starts and claims take it, so one
    /// node's completions commit beside other nodes' and beside claims and
    /// start batches, never beside an ordinary write.
    ///
    /// What such a completion reads that another transaction beside it
    /// could change is its own run: each first takes its run's workflow id
    /// key without waiting ([`crate::store::Store::lock_run_of_task`]), the
    /// key a start of that id takes, and a claim beside others takes the
    /// key of the run whose task it leases; one that finds the key held,
    /// or that would reach another run or a namespace's shared state (a
    /// child, a parent, a service call's caller, a worker session, an
    /// external payload), ends as [`crate::store::Error::NeedsWriteLock`]
    /// and is rerun as an ordinary write. What it writes beyond its run is
    /// the trigger-kept counters, whose lock order `store::writer`
    /// explains.
    pub fn begin_run_writes(&self) -> Result<()> {
        self.begin_starts()
    }

    /// Takes the transaction-scoped lock on `key` (a workflow id in its
    /// namespace) if no other transaction holds it: `false` when another
    /// does (this one does not wait, so it can never wait in a cycle).
    /// SQLite: always `true` (its one writer holds the file).
    pub fn try_lock_key(&self, key: &str) -> Result<bool> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(true),
            Backend::Postgres(_) => self
                .prepare_cached(
                    "SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '/' || ?1, 0))",
                )?
                .query_row([key], |r| r.get::<_, bool>(0)),
        }
    }

    /// Brings the trigger-kept counters up to date with the open write
    /// transaction's own rows before it reads them: PostgreSQL counts runs
    /// and queued tasks at commit (migration 0037), so a transaction that
    /// decides on those counts (a namespace's quota of runs) fires its
    /// pending counts first. Nothing on SQLite, or outside a write.
    pub fn settle_counters(&self) -> Result<()> {
        match &self.backend {
            Backend::Postgres(conn) if conn.in_write_transaction() => {
                conn.batch("SET CONSTRAINTS ALL IMMEDIATE; SET CONSTRAINTS ALL DEFERRED")
            }
            _ => Ok(()),
        }
    }

    /// Whether the open transaction runs beside others, the write lock
    /// taken shared (a PostgreSQL claim, start batch or run writer's
    /// batch): it must lock the rows and keys it takes and must not decide
    /// on shared state.
    pub fn claims_side_by_side(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(_) => false,
            Backend::Postgres(conn) => conn.holds_shared_lock(),
        }
    }

    /// How long an SQLite statement waits for a lock another connection
    /// holds (zero: it fails with `SQLITE_BUSY` at once). A PostgreSQL
    /// session has no such setting: nothing changes.
    pub fn set_busy_timeout(&self, timeout: Duration) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(conn) => Ok(conn.busy_timeout(timeout)?),
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// Round trips this connection made to its server (PostgreSQL; 0 on
    /// SQLite, which has none), for tests that count a step's.
    pub fn round_trips(&self) -> u64 {
        match &self.backend {
            Backend::Sqlite(_) => 0,
            Backend::Postgres(conn) => conn.calls(),
        }
    }

    /// Runs `reads`, statements that need no answer of each other's, on
    /// one snapshot, each row through its `each`, in order. Outside a
    /// transaction the snapshot is their own: opened before them and ended
    /// after them. On PostgreSQL they go as one pipeline with that `BEGIN`
    /// and `COMMIT`: one round trip where each statement, and the snapshot's
    /// opening and end, would have been one each (a warm describe: seven).
    /// On SQLite, which has no round trips, they run in turn. Inside an open
    /// transaction they join it (still one pipeline on PostgreSQL).
    pub fn read_together(&self, reads: &mut [Together<'_>]) -> Result<()> {
        let own = self.is_autocommit();
        match &self.backend {
            Backend::Sqlite(_) => {
                if own {
                    self.begin_read()?;
                }
                let result = reads.iter_mut().try_for_each(|read| {
                    let mut statement = self.prepare_cached(read.sql)?;
                    let mut rows = statement.query(read.params)?;
                    while let Some(row) = rows.next()? {
                        (read.each)(&row)?;
                    }
                    Ok(())
                });
                if !own {
                    return result;
                }
                let end = if result.is_ok() {
                    self.commit()
                } else {
                    self.rollback()
                };
                result?;
                end
            }
            Backend::Postgres(conn) => {
                let statements = reads
                    .iter()
                    .map(|read| Ok((conn.prepare_cached(read.sql)?, read.params)))
                    .collect::<Result<Vec<_>>>()?;
                let answered = conn.pipeline(
                    own.then_some(READ_SNAPSHOT),
                    &statements,
                    own.then_some("COMMIT"),
                )?;
                for (read, rows) in reads.iter_mut().zip(&answered) {
                    for row in rows {
                        (read.each)(&Row {
                            inner: RowInner::Postgres(row),
                        })?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Opens a read transaction: every read until [`Connection::commit`]
    /// sees one snapshot.
    pub fn begin_read(&self) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => self.control("BEGIN"),
            Backend::Postgres(conn) => conn.begin(READ_SNAPSHOT, false, true),
        }
    }

    /// Commits the open transaction.
    pub fn commit(&self) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => self.control("COMMIT"),
            Backend::Postgres(conn) => conn.end("COMMIT"),
        }
    }

    /// Rolls the open transaction back.
    pub fn rollback(&self) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => self.control("ROLLBACK"),
            Backend::Postgres(conn) => conn.end("ROLLBACK"),
        }
    }

    /// Opens savepoint `name` inside the open transaction. On PostgreSQL
    /// the command goes with the next one, in its round trip
    /// (`PgConnection::defer`), so an error it meets is reported there.
    pub fn savepoint(&self, name: &str) -> Result<()> {
        // `concat`, not `format!`: a savepoint opens and closes several
        // times a workflow, and `format!` costs several times as much.
        self.deferred_control(&["SAVEPOINT ", name].concat())
    }

    /// Opens savepoint `name` as [`Connection::savepoint`] does, and on
    /// SQLite offers it to the first write that begins before any row
    /// changes ([`Connection::adopt_savepoint`]): the group-commit writer's
    /// savepoint around each job, which the job's first store write would
    /// otherwise nest a savepoint of its own in, with nothing between the
    /// two to tell them apart. (On PostgreSQL a savepoint costs no round
    /// trip, and none is offered.)
    pub fn savepoint_to_adopt(&self, name: &'static str) -> Result<()> {
        self.savepoint(name)?;
        if let Backend::Sqlite(conn) = &self.backend {
            self.adoptable.set(Some((name, conn.total_changes())));
        }
        Ok(())
    }

    /// Rows inserted, updated or deleted on this connection so far,
    /// trigger writes included (SQLite's `total_changes()`); 0 on
    /// PostgreSQL.
    pub fn total_changes(&self) -> u64 {
        match &self.backend {
            Backend::Sqlite(conn) => conn.total_changes(),
            Backend::Postgres(_) => 0,
        }
    }

    /// Takes over the savepoint [`Connection::savepoint_to_adopt`] opened,
    /// if no row changed since (`total_changes()`, trigger writes
    /// included): rolling back to it then undoes exactly what rolling back
    /// a savepoint opened here would, and releasing it is its opener's
    /// part. Offered once: later writes open savepoints of their own.
    pub(crate) fn adopt_savepoint(&self) -> Option<&'static str> {
        let (name, changes) = self.adoptable.take()?;
        match &self.backend {
            Backend::Sqlite(conn) if conn.total_changes() == changes => Some(name),
            _ => None,
        }
    }

    /// Withdraws the offer of [`Connection::savepoint_to_adopt`] (its
    /// opener is about to release or roll back the savepoint).
    pub fn withdraw_savepoint(&self) {
        self.adoptable.set(None);
    }

    /// Undoes everything since savepoint `name` and leaves it open.
    pub(crate) fn rollback_within(&self, name: &str) -> Result<()> {
        self.control(&format!("ROLLBACK TO SAVEPOINT {name}"))
    }

    /// Releases savepoint `name` into the enclosing transaction (on
    /// PostgreSQL with the next command, as [`Connection::savepoint`]).
    pub fn release(&self, name: &str) -> Result<()> {
        self.deferred_control(&["RELEASE SAVEPOINT ", name].concat())
    }

    /// Savepoint control: at once on SQLite (a function call), with the
    /// next command on PostgreSQL (no round trip of its own).
    fn deferred_control(&self, sql: &str) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => self.control(sql),
            Backend::Postgres(conn) => {
                conn.defer(sql);
                Ok(())
            }
        }
    }

    /// Undoes everything since savepoint `name` and closes it.
    pub fn rollback_to(&self, name: &str) -> Result<()> {
        self.rollback_within(name)?;
        self.release(name)
    }

    /// Transaction control: through the statement cache on SQLite (the
    /// statements every write runs several times are compiled once per
    /// connection), as a simple query on PostgreSQL.
    fn control(&self, sql: &str) -> Result<()> {
        match &self.backend {
            Backend::Sqlite(_) => {
                self.prepare_cached(sql)?.execute([])?;
                Ok(())
            }
            Backend::Postgres(conn) => conn.batch(sql),
        }
    }

    /// Fills the blob in `column` of the `table` row whose `key_column` is
    /// `key` from `source`, `size` bytes, a chunk at a time (the row was
    /// inserted with a [`ZeroBlob`] of that size); the bytes copied.
    pub fn write_blob(
        &self,
        blob: BlobColumn<'_>,
        key: &str,
        source: &mut dyn Read,
        size: u64,
    ) -> Result<u64> {
        match &self.backend {
            Backend::Sqlite(conn) => sqlite::write_blob(conn, blob, key, source, size),
            Backend::Postgres(conn) => {
                conn.write_blob(blob.table, blob.column, blob.key_column, key, source, size)
            }
        }
    }

    /// Up to `len` bytes of the blob from `offset` (only those bytes are
    /// read); `None` when no row has `key`, empty at or past its end.
    pub fn read_blob_chunk(
        &self,
        blob: BlobColumn<'_>,
        key: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>> {
        match &self.backend {
            Backend::Sqlite(conn) => sqlite::read_blob_chunk(conn, blob, key, offset, len),
            Backend::Postgres(conn) => {
                conn.read_blob_chunk(blob.table, blob.column, blob.key_column, key, offset, len)
            }
        }
    }
}

/// The advisory lock every PostgreSQL write transaction holds, exclusively
/// (see [`Connection::begin_write`]), and every claim shared (see
/// [`Connection::begin_claim`]): the two-key form, this constant (the bytes
/// of "dwwl") and the hash of the session's schema, so stores in two
/// schemas of one database (the test matrix gives each test its own) do
/// not serialize each other, while every node of one store takes the same
/// lock. Distinct from the migrations' lock (a one-key lock).
pub const WRITE_LOCK: i32 = 0x6477_776c;

/// How a PostgreSQL read snapshot opens: every statement of the
/// transaction sees the database as it was at its first.
const READ_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// One statement of [`Connection::read_together`]: its SQL (prepared
/// through the statement cache), its parameters, and what is done with
/// each row it returns.
pub struct Together<'a> {
    /// The statement.
    pub sql: &'a str,
    /// Its parameters, in order.
    pub params: &'a [&'a dyn ToSql],
    /// Called with each row, in order; an error stops the read.
    pub each: &'a mut dyn FnMut(&Row<'_>) -> Result<()>,
}

/// Where a blob lives: its table, its column, and the unique text column
/// that names its row.
#[derive(Debug, Clone, Copy)]
pub struct BlobColumn<'a> {
    /// The table.
    pub table: &'a str,
    /// The blob column.
    pub column: &'a str,
    /// The unique key column a row is found by.
    pub key_column: &'a str,
}

/// Statements each connection keeps compiled. The store prepares about 270
/// distinct statements through `prepare_cached` (a test in the store's
/// `connection` module counts them and keeps this at twice that or more);
/// rusqlite's default of 16 made most of them miss, so a busy server spent
/// a fifth of its CPU compiling SQL (and the triggers each update of `runs`
/// compiles in). A fixed number: the cache cannot grow past it (SQLite's,
/// `sqlite_statements`, starts again from empty when a new text would).
pub const STATEMENT_CACHE_CAPACITY: usize = 1024;

/// A compiled statement.
pub struct Statement<'c> {
    inner: StatementInner<'c>,
}

enum StatementInner<'c> {
    SqliteCached(sqlite_statements::CachedStatement<'c>),
    Sqlite(rusqlite::Statement<'c>),
    Postgres(&'c postgres::PgConnection, ::postgres::Statement),
}

impl<'c> Statement<'c> {
    /// How many parameters the statement takes.
    pub fn parameter_count(&self) -> usize {
        match &self.inner {
            StatementInner::SqliteCached(statement) => statement.parameter_count(),
            StatementInner::Sqlite(statement) => statement.parameter_count(),
            StatementInner::Postgres(_, statement) => statement.params().len(),
        }
    }

    /// Runs the statement; the number of rows it changed.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        match &mut self.inner {
            StatementInner::SqliteCached(statement) => {
                Ok(params.with_values(|values| statement.execute(values))?)
            }
            StatementInner::Sqlite(statement) => {
                Ok(params.with_values(|values| statement.execute(values))?)
            }
            StatementInner::Postgres(conn, statement) => {
                params.with_values(|values| conn.execute(statement, values))
            }
        }
    }

    /// The rows the statement returns, one at a time.
    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows<'_>> {
        let inner = match &mut self.inner {
            StatementInner::SqliteCached(statement) => {
                RowsInner::Sqlite(params.with_values(|values| statement.query(values))?)
            }
            StatementInner::Sqlite(statement) => {
                RowsInner::Sqlite(params.with_values(|values| statement.query(values))?)
            }
            StatementInner::Postgres(conn, statement) => RowsInner::Postgres {
                rows: params.with_values(|values| conn.query(statement, values))?,
                next: 0,
            },
        };
        Ok(Rows { inner })
    }

    /// The first row through `map`; [`Error::NoRows`] when there is none.
    pub fn query_row<T, P, F>(&mut self, params: P, map: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let mut rows = self.query(params)?;
        match rows.next()? {
            Some(row) => map(&row),
            None => Err(Error::NoRows),
        }
    }

    /// Every row through `map`, lazily.
    pub fn query_map<T, P, F>(&mut self, params: P, map: F) -> Result<MappedRows<'_, F>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<T>,
    {
        Ok(MappedRows {
            rows: self.query(params)?,
            map,
        })
    }

    /// Whether the statement returns at least one row.
    pub fn exists<P: Params>(&mut self, params: P) -> Result<bool> {
        Ok(self.query(params)?.next()?.is_some())
    }
}

/// The rows of a running statement.
pub struct Rows<'s> {
    inner: RowsInner<'s>,
}

enum RowsInner<'s> {
    Sqlite(rusqlite::Rows<'s>),
    /// PostgreSQL answers a query whole.
    Postgres {
        rows: Vec<::postgres::Row>,
        next: usize,
    },
}

impl Rows<'_> {
    /// The next row, `None` past the last.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Row<'_>>> {
        match &mut self.inner {
            RowsInner::Sqlite(rows) => Ok(rows.next()?.map(|row| Row {
                inner: RowInner::Sqlite(row),
            })),
            RowsInner::Postgres { rows, next } => {
                let row = rows.get(*next);
                *next += 1;
                Ok(row.map(|row| Row {
                    inner: RowInner::Postgres(row),
                }))
            }
        }
    }
}

/// Rows through a mapping function: an iterator of its results.
pub struct MappedRows<'s, F> {
    rows: Rows<'s>,
    map: F,
}

impl<T, F> Iterator for MappedRows<'_, F>
where
    F: FnMut(&Row<'_>) -> Result<T>,
{
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        match self.rows.next() {
            Ok(Some(row)) => Some((self.map)(&row)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// One row of a result.
pub struct Row<'r> {
    inner: RowInner<'r>,
}

enum RowInner<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Postgres(&'r ::postgres::Row),
}

/// A column's position in a row.
pub trait RowIndex {
    /// The zero-based index.
    fn index(self) -> usize;
}

impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

impl Row<'_> {
    /// Column `idx` converted to `T`.
    pub fn get<I: RowIndex, T: FromSql>(&self, idx: I) -> Result<T> {
        match &self.inner {
            RowInner::Sqlite(row) => Ok(row.get(idx.index())?),
            RowInner::Postgres(row) => {
                let column = idx.index();
                let value = postgres::value(row, column)?;
                T::column_result(ValueRef::from(&value))
                    .map_err(|source| Error::Conversion { column, source })
            }
        }
    }
}

/// `Raw::try_from(row)`: a whole row as a tuple, column by column.
macro_rules! tuple_from_row {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: FromSql),+> TryFrom<&Row<'_>> for ($($name,)+) {
            type Error = Error;

            fn try_from(row: &Row<'_>) -> Result<Self> {
                Ok(($(row.get::<usize, $name>($idx)?,)+))
            }
        }
    };
}

tuple_from_row!(A 0);
tuple_from_row!(A 0, B 1);
tuple_from_row!(A 0, B 1, C 2);
tuple_from_row!(A 0, B 1, C 2, D 3);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
