//! Read connections of a store file, so reads never queue behind writes.
//!
//! In WAL mode a reader sees the last committed state and neither waits for
//! nor blocks the writer. A read borrows one of at most `max` connections
//! (opened on first need and kept), runs inside one read transaction so
//! every statement of it sees the same snapshot, and hands the connection
//! back. The connections are `query_only`: a write attempted through one
//! fails instead of competing with the group-commit writer. A PostgreSQL
//! session the server dropped is closed, with the idle ones, and the next
//! read opens a new one.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::store::config::StoreConfig;
use crate::store::connection::Store;
use crate::store::error::Error;

/// How long a read waits for a free connection before it is refused.
pub const READ_WAIT: Duration = Duration::from_secs(10);

/// Where a pool's connections go.
#[derive(Debug, Clone)]
enum Source {
    File(PathBuf),
    Postgres(String),
}

/// A bounded pool of read-only connections to one store file (or one
/// PostgreSQL database, whose read transactions are REPEATABLE READ
/// snapshots).
pub struct ReadPool {
    source: Source,
    config: StoreConfig,
    max: usize,
    state: Mutex<PoolState>,
    freed: Condvar,
}

struct PoolState {
    idle: Vec<Store>,
    open: usize,
}

impl ReadPool {
    /// A pool of at most `max` (at least 1) connections to `path`.
    pub fn new(path: &Path, config: StoreConfig, max: usize) -> ReadPool {
        ReadPool::with_source(Source::File(path.to_owned()), config, max)
    }

    /// A pool of at most `max` (at least 1) sessions on the PostgreSQL
    /// database `url` names.
    pub fn postgres(url: &str, config: StoreConfig, max: usize) -> ReadPool {
        ReadPool::with_source(Source::Postgres(url.to_owned()), config, max)
    }

    fn with_source(source: Source, config: StoreConfig, max: usize) -> ReadPool {
        ReadPool {
            source,
            config,
            max: max.max(1),
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
        }
    }

    /// Runs `read` on one snapshot of the store.
    pub fn read<R>(&self, read: impl FnOnce(&Store) -> Result<R, Error>) -> Result<R, Error> {
        let (mut store, mut opened) = self.take()?;
        let mut begun = store.conn.begin_read();
        while begun.is_err() && store.conn.is_broken() && !opened {
            // A session the database dropped while it sat idle (it
            // restarted): nothing ran on it, so the read begins again on
            // another, and the idle ones, gone with it, close. Only a
            // session opened just now ends the loop: each turn closes one
            // of the finitely many sessions opened before.
            self.discard(store);
            (store, opened) = self.take()?;
            begun = store.conn.begin_read();
        }
        let result = begun.map_err(Error::from).and_then(|()| {
            let result = read(&store);
            let end = store.conn.commit();
            let value = result?;
            end?;
            Ok(value)
        });
        if store.conn.is_broken() {
            // The database dropped this session (stopped, restarted): the
            // idle ones are most likely gone with it, so they are closed
            // too and the next reads open new sessions, rather than each
            // failing once on a dead one.
            self.discard(store);
            return result;
        }
        let reusable = result.is_ok() || store.conn.is_autocommit();
        self.give_back(store, reusable);
        result
    }

    /// Runs `read`, which opens its own snapshot (its statements read
    /// together, [`crate::store::db::Connection::read_together`], or in
    /// [`snapshot`]), on one of the pool's sessions: no `BEGIN` is sent
    /// ahead of it, so on PostgreSQL a read of statements that need no
    /// answer of each other's is one round trip, its `BEGIN` and `COMMIT`
    /// in its pipeline. A read on a session the database dropped while it
    /// sat idle fails on its first statement rather than on a `BEGIN` of its
    /// own: it is run again, as [`ReadPool::read`] begins again, on another
    /// session (a read changes nothing, so running it again is safe), until
    /// one opened just now fails.
    pub fn read_own<R>(
        &self,
        mut read: impl FnMut(&Store) -> Result<R, Error>,
    ) -> Result<R, Error> {
        loop {
            let (store, opened) = self.take()?;
            let result = read(&store);
            if store.conn.is_broken() {
                self.discard(store);
                if result.is_err() && !opened {
                    continue;
                }
                return result;
            }
            let reusable = store.conn.is_autocommit();
            self.give_back(store, reusable);
            return result;
        }
    }

    /// Runs `read` on one snapshot now, on the calling thread, only if
    /// that cannot wait: on a file store's idle connection (none is
    /// opened and none waited for), with SQLite's busy handler off for the
    /// read, so a lock held elsewhere (a checkpoint restarting the WAL)
    /// fails it at once instead of sleeping. `None` when it did not run
    /// or failed: a read changes nothing, so the caller then reads the
    /// ordinary way ([`ReadPool::read`], on a thread that may wait), which
    /// also reports the error. An async handler uses it to answer a small
    /// read without handing the request to a blocking thread and back
    /// (two thread wake-ups, most of a describe's CPU).
    pub fn read_now<R>(&self, read: impl FnOnce(&Store) -> Result<R, Error>) -> Option<R> {
        if !matches!(self.source, Source::File(_)) {
            return None;
        }
        let store = self.lock().idle.pop()?;
        let conn = &store.conn;
        let value = conn.set_busy_timeout(Duration::ZERO).ok().and_then(|()| {
            let begun = conn.begin_read().ok();
            let value = begun.and_then(|()| read(&store).ok());
            let ended = if conn.is_autocommit() {
                true
            } else if value.is_some() {
                conn.commit().is_ok()
            } else {
                conn.rollback().is_ok()
            };
            value.filter(|_| ended)
        });
        let reusable =
            conn.set_busy_timeout(self.config.busy_timeout).is_ok() && conn.is_autocommit();
        self.give_back(store, reusable);
        value
    }

    /// Runs `work` on one of the pool's sessions as it is (no snapshot
    /// opened around it: `work` opens its own transactions, as a
    /// PostgreSQL node's claim sessions do, see
    /// [`crate::store::shared::SharedStore::claim`]). A session the
    /// database dropped is closed, with the idle ones.
    pub fn session<R>(&self, work: impl FnOnce(&Store) -> Result<R, Error>) -> Result<R, Error> {
        let (store, _) = self.take()?;
        let result = work(&store);
        if store.conn.is_broken() {
            self.discard(store);
            return result;
        }
        let reusable = store.conn.is_autocommit();
        self.give_back(store, reusable);
        result
    }

    /// Returns `store` to the idle sessions when `reusable` (out of any
    /// transaction), or closes it and frees its place; either way a
    /// waiting reader may go on.
    fn give_back(&self, store: Store, reusable: bool) {
        let mut state = self.lock();
        if reusable {
            state.idle.push(store);
        } else {
            state.open -= 1;
        }
        drop(state);
        self.freed.notify_one();
    }

    /// Closes `store`, a session the database dropped, and the idle ones.
    fn discard(&self, store: Store) {
        drop(store);
        let mut state = self.lock();
        state.open -= 1 + state.idle.len();
        state.idle.clear();
        drop(state);
        self.freed.notify_all();
    }

    /// Connections opened so far (tests).
    pub fn open_connections(&self) -> usize {
        self.lock().open
    }

    /// An idle session, or a new one (then `true`).
    fn take(&self) -> Result<(Store, bool), Error> {
        let deadline = Instant::now() + READ_WAIT;
        let mut state = self.lock();
        loop {
            if let Some(store) = state.idle.pop() {
                return Ok((store, false));
            }
            if state.open < self.max {
                state.open += 1;
                drop(state);
                let opened = match &self.source {
                    Source::File(path) => Store::open_reader(path, self.config.clone()),
                    Source::Postgres(url) => Store::open_postgres_reader(url, self.config.clone()),
                };
                return match opened {
                    Ok(store) => Ok((store, true)),
                    Err(e) => {
                        self.lock().open -= 1;
                        Err(e)
                    }
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::ReadersBusy(READ_WAIT));
            }
            state = self
                .freed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs `read` inside one read transaction on `store`.
pub(crate) fn snapshot<R>(
    store: &Store,
    read: impl FnOnce(&Store) -> Result<R, Error>,
) -> Result<R, Error> {
    store.conn.begin_read()?;
    let result = read(store);
    let end = store.conn.commit();
    let value = result?;
    end?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The busy timeout a pooled connection has now, in milliseconds.
    fn busy_timeout_ms(pool: &ReadPool) -> i64 {
        pool.read(|s| {
            Ok(s.conn
                .query_row("PRAGMA busy_timeout", [], |row| row.get(0))?)
        })
        .unwrap()
    }

    fn store_file() -> (tempfile::TempDir, PathBuf, StoreConfig) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("store.sqlite");
        let config = StoreConfig {
            busy_timeout: Duration::from_millis(300),
            ..StoreConfig::default()
        };
        drop(Store::open(&path, config.clone()).unwrap());
        (tmp, path, config)
    }

    #[test]
    fn read_now_runs_only_on_an_idle_connection_and_leaves_it_as_it_was() {
        let (_tmp, path, config) = store_file();
        let pool = ReadPool::new(&path, config, 2);
        assert_eq!(pool.read_now(|_| Ok(1)), None, "no connection opened yet");
        assert_eq!(pool.open_connections(), 0, "read_now opens none");
        assert_eq!(busy_timeout_ms(&pool), 300);
        assert_eq!(
            pool.read_now(|_| Ok(2)),
            Some(2),
            "the idle one, on this thread"
        );
        // A failed read is not answered (the caller reads the ordinary way);
        // the connection goes back, out of its transaction, its wait restored.
        assert_eq!(
            pool.read_now(|s| Ok(s
                .conn
                .query_row("SELECT nope", [], |r| r.get::<_, i64>(0))?)),
            None
        );
        assert_eq!(pool.open_connections(), 1);
        assert_eq!(busy_timeout_ms(&pool), 300);
        assert_eq!(pool.read_now(|_| Ok(3)), Some(3));
    }

    #[test]
    fn read_now_does_not_wait_for_a_lock_the_ordinary_read_waits_for() {
        let (_tmp, path, mut config) = store_file();
        // An ordinary read would wait an hour for the lock below.
        config.busy_timeout = Duration::from_secs(3600);
        let pool = std::sync::Arc::new(ReadPool::new(&path, config, 1));
        assert_eq!(busy_timeout_ms(&pool), 3_600_000);
        // Another process holding the file exclusively: in WAL mode only
        // exclusive locking keeps readers out.
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder
            .execute_batch(
                "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; CREATE TABLE held (x);",
            )
            .unwrap();
        let (sender, answer) = std::sync::mpsc::channel();
        let reader = pool.clone();
        std::thread::spawn(move || {
            let now = reader.read_now(|s| {
                Ok(s.conn
                    .query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                        r.get::<_, i64>(0)
                    })?)
            });
            let _ = sender.send(now);
        });
        // A generous deadline, far below the hour the lock would be waited for.
        let now = answer
            .recv_timeout(Duration::from_secs(120))
            .expect("read_now waited for the lock");
        assert_eq!(now, None, "refused, not answered");
        holder.execute_batch("COMMIT").unwrap();
        drop(holder);
        assert_eq!(busy_timeout_ms(&pool), 3_600_000, "its wait restored");
        assert!(
            pool.read_now(|_| Ok(())).is_some(),
            "and it reads again once the lock is gone"
        );
    }
}
