//! The store as a server shares it: one group-commit writer, a read pool.
//!
//! Handlers on many threads call [`SharedStore::write`] with a transition
//! and [`SharedStore::read`] with a query. A file store reads through its
//! [`ReadPool`]; an in-memory store has only the writer's connection, so its
//! reads borrow that connection between batches.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::config::StoreConfig;
use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::readers::{snapshot, ReadPool};
use crate::store::writer::{GroupCommitWriter, Lane, RunWriteOrder};

/// Read connections a file store opens at most, by default.
pub const DEFAULT_READERS: usize = 4;

/// The longest the readiness probe's PostgreSQL call waits for an answer.
pub const PROBE_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// [`SharedStore::write_run`]'s counters.
#[derive(Default)]
struct RunWriteCounts {
    beside: AtomicU64,
    rerun: AtomicU64,
}

/// What a PostgreSQL node's run writer did, for the operator metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RunWriteStats {
    /// Completions committed beside other writers, under the write lock
    /// taken shared.
    pub beside: u64,
    /// Completions rerun as ordinary writes (their run's key was held
    /// elsewhere, a step reached beyond their run, or a lock cycle).
    pub rerun: u64,
}

/// A store shared by a server's request threads.
pub struct SharedStore {
    writer: GroupCommitWriter,
    /// A PostgreSQL node's start writer: workflow starts commit in batches
    /// of their own, beside other nodes' start batches and claims
    /// ([`crate::store::db::Connection::begin_starts`]).
    starts: Option<GroupCommitWriter>,
    /// A PostgreSQL node's run writer: completions that write one existing
    /// run commit in batches of their own, beside other nodes' and beside
    /// claims and starts ([`crate::store::db::Connection::begin_run_writes`]).
    runs: Option<GroupCommitWriter>,
    /// Run writes that committed beside others, and those rerun as
    /// ordinary writes ([`SharedStore::write_run`]).
    run_writes: RunWriteCounts,
    readers: Option<ReadPool>,
    /// A PostgreSQL node's claim sessions: polls claim tasks on these,
    /// beside each other and beside other nodes' claims, instead of
    /// queueing for the one writer.
    claimers: Option<ReadPool>,
    /// One connection of the liveness probe's own, so `/api/health` never
    /// queues for a reader behind hundreds of waiting calls' looks.
    probe: Option<ReadPool>,
    config: StoreConfig,
}

impl SharedStore {
    /// Opens the file at `path` (migrating it) or, without a path, a
    /// private in-memory store; `readers` bounds the read connections.
    pub fn open(
        path: Option<&Path>,
        config: StoreConfig,
        readers: usize,
    ) -> Result<SharedStore, Error> {
        let (store, readers, probe) = match path {
            Some(path) => (
                Store::open(path, config.clone())?,
                Some(ReadPool::new(path, config.clone(), readers)),
                Some(ReadPool::new(path, config.clone(), 1)),
            ),
            None => (Store::open_in_memory(config.clone())?, None, None),
        };
        let writer = GroupCommitWriter::start(store)
            .map_err(|e| Error::Commit(format!("cannot start the writer thread: {e}")))?;
        Ok(SharedStore {
            writer,
            starts: None,
            runs: None,
            run_writes: RunWriteCounts::default(),
            readers,
            claimers: None,
            probe,
            config,
        })
    }

    /// Opens the PostgreSQL database `url` names (migrating it): the
    /// group-commit writer's session, the start writer's, the run
    /// writer's ([`StoreConfig::run_writer`]), at most `readers` read
    /// sessions, as many claim sessions and the liveness probe's own, so a
    /// node holds `2 × readers + 3` sessions, one more with the run writer.
    pub fn open_postgres(
        url: &str,
        config: StoreConfig,
        readers: usize,
    ) -> Result<SharedStore, Error> {
        let store = Store::open_postgres(url, config.clone())?;
        let writer = GroupCommitWriter::start(store)
            .map_err(|e| Error::Commit(format!("cannot start the writer thread: {e}")))?;
        // The readiness probe gives up sooner than a request: a balancer's
        // health check waits seconds, not the call deadline.
        let mut probe = config.clone();
        let call = &mut probe.postgres.call_timeout;
        *call = if call.is_zero() {
            PROBE_CALL_TIMEOUT
        } else {
            (*call).min(PROBE_CALL_TIMEOUT)
        };
        let starts = GroupCommitWriter::start_lane(
            Store::open_postgres_reader(url, config.clone())?,
            Lane::Starts,
        )
        .map_err(|e| Error::Commit(format!("cannot start the start writer thread: {e}")))?;
        let runs = if config.run_writer {
            Some(
                GroupCommitWriter::start_lane(
                    Store::open_postgres_reader(url, config.clone())?,
                    Lane::Runs,
                )
                .map_err(|e| Error::Commit(format!("cannot start the run writer thread: {e}")))?,
            )
        } else {
            None
        };
        Ok(SharedStore {
            writer,
            starts: Some(starts),
            runs,
            run_writes: RunWriteCounts::default(),
            readers: Some(ReadPool::postgres(url, config.clone(), readers)),
            claimers: Some(ReadPool::postgres(url, config.clone(), readers)),
            probe: Some(ReadPool::postgres(url, probe, 1)),
            config,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Runs `transition` atomically in the next group commit; answers after it.
    pub fn write<R, F>(&self, transition: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, Error> + Send + 'static,
    {
        self.writer.write(transition)
    }

    /// Queues `transition` for the next group commit without waiting:
    /// `deliver` gets its result once committed
    /// ([`GroupCommitWriter::submit_keyed`]; it must not block).
    pub fn submit<R, F, D>(&self, transition: F, deliver: D)
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, Error> + Send + 'static,
        D: FnOnce(Result<R, Error>) + Send + 'static,
    {
        self.writer.submit_keyed(String::new(), transition, deliver)
    }

    /// As [`SharedStore::submit`], for a workflow start of `namespace` and
    /// `workflow_id` that decides on nothing shared (no namespace quota,
    /// schedule gate or payload reference): on SQLite the writer stages its
    /// rows and writes them with its batch's other starts
    /// ([`crate::store::start_stage`]).
    pub fn submit_start<R, F, D>(
        &self,
        namespace: String,
        workflow_id: String,
        transition: F,
        deliver: D,
    ) where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, Error> + Send + 'static,
        D: FnOnce(Result<R, Error>) + Send + 'static,
    {
        self.writer
            .submit_start(namespace, workflow_id, transition, deliver)
    }

    /// Whether every write, starts and claims too, goes through the one
    /// group-commit writer (SQLite), so [`SharedStore::start`] and
    /// [`SharedStore::claim`] are [`SharedStore::write`]s.
    pub fn has_one_writer(&self) -> bool {
        self.starts.is_none() && self.runs.is_none() && self.claimers.is_none()
    }

    /// Runs `write` (a completion that writes one existing run: see
    /// [`crate::store::db::Connection::begin_run_writes`]) atomically and
    /// returns its result once committed: on PostgreSQL in the run
    /// writer's next batch, beside other nodes' writes, where `order`
    /// places it ([`RunWriteOrder`]); on SQLite in the
    /// next group commit, as any write. One that must run as an ordinary
    /// write ([`Error::NeedsWriteLock`]: its run's key held elsewhere, a
    /// step beyond its run, or a lock cycle PostgreSQL broke by ending its
    /// batch) is rerun as one here: nothing of it was written.
    pub fn write_run<R, F>(&self, order: RunWriteOrder, write: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: Fn(&Store) -> Result<R, Error> + Clone + Send + 'static,
    {
        let Some(runs) = &self.runs else {
            return self.writer.write(write);
        };
        let (written, rerun) = self.beside_or_ordinary(runs, order.key(), write);
        let counter = if rerun {
            &self.run_writes.rerun
        } else {
            &self.run_writes.beside
        };
        if rerun || written.is_ok() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        written
    }

    /// Runs `write` in `lane`'s next transaction of `key` and, when it
    /// answers that the write needs the write lock (a held key, a step
    /// beyond what the lane may decide, or a lock cycle PostgreSQL broke
    /// by ending the transaction: nothing of it was written), again as an
    /// ordinary write; says whether it was rerun.
    fn beside_or_ordinary<R, F>(
        &self,
        lane: &GroupCommitWriter,
        key: String,
        write: F,
    ) -> (Result<R, Error>, bool)
    where
        R: Send + 'static,
        F: Fn(&Store) -> Result<R, Error> + Clone + Send + 'static,
    {
        match lane.write_keyed(key, write.clone()) {
            Err(Error::NeedsWriteLock) => (self.writer.write(write), true),
            Err(Error::Database(e)) if e.is_lock_conflict() => (self.writer.write(write), true),
            other => (other, false),
        }
    }

    /// Run writes so far (`None` without a run writer: SQLite, or
    /// [`StoreConfig::run_writer`] off).
    pub fn run_write_stats(&self) -> Option<RunWriteStats> {
        self.runs.as_ref().map(|_| RunWriteStats {
            beside: self.run_writes.beside.load(Ordering::Relaxed),
            rerun: self.run_writes.rerun.load(Ordering::Relaxed),
        })
    }

    /// Runs `start` (a workflow start that decides on nothing but its own
    /// workflow id's runs: see [`crate::store::db::Connection::begin_starts`])
    /// atomically and returns its result once committed: on PostgreSQL in
    /// the start writer's next transaction of `key` (the start's series),
    /// beside other nodes' starts; on SQLite in the next group commit, as
    /// any write. A start that must run as an ordinary write
    /// ([`Error::NeedsWriteLock`], or a lock conflict PostgreSQL broke
    /// by ending it) is rerun as one here: nothing of it was written.
    pub fn start<R, F>(&self, key: String, start: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: Fn(&Store) -> Result<R, Error> + Clone + Send + 'static,
    {
        let Some(starts) = &self.starts else {
            return self.writer.write(start);
        };
        self.beside_or_ordinary(starts, key, start).0
    }

    /// Runs `claim` (a poll taking a task) as one claim transaction
    /// ([`Store::claim`]): on PostgreSQL on a claim session, beside other
    /// claims; on SQLite in the next group commit, as any write. A claim
    /// that needs the write lock ([`Error::ClaimNeedsWriteLock`]) is rerun
    /// as an ordinary write here.
    pub fn claim<R, F>(&self, claim: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: Fn(&Store) -> Result<R, Error> + Clone + Send + 'static,
    {
        match &self.claimers {
            Some(pool) => {
                let first = claim.clone();
                match pool.session(|s| s.claim(first)) {
                    Err(Error::ClaimNeedsWriteLock) => self.writer.write(claim),
                    other => other,
                }
            }
            None => self.writer.write(claim),
        }
    }

    /// Runs `read` on one committed snapshot.
    pub fn read<R>(&self, read: impl FnOnce(&Store) -> Result<R, Error>) -> Result<R, Error> {
        match &self.readers {
            Some(pool) => pool.read(read),
            None => snapshot(&self.writer.lock_store(), read),
        }
    }

    /// Runs `read`, which opens its own snapshot, on a reader
    /// ([`ReadPool::read_own`]): no `BEGIN` goes ahead of it.
    pub fn read_own<R>(&self, read: impl FnMut(&Store) -> Result<R, Error>) -> Result<R, Error> {
        match &self.readers {
            Some(pool) => pool.read_own(read),
            None => {
                let mut read = read;
                read(&self.writer.lock_store())
            }
        }
    }

    /// As [`SharedStore::read`], on the calling thread and only if that
    /// cannot wait ([`ReadPool::read_now`]); `None` (an in-memory store, no
    /// idle reader, a failed read): read the ordinary way.
    pub fn read_now<R>(&self, read: impl FnOnce(&Store) -> Result<R, Error>) -> Option<R> {
        self.readers.as_ref()?.read_now(read)
    }

    /// As [`SharedStore::read`], through the liveness probe's own
    /// connection (a file store), never one of the shared readers.
    pub fn probe_read<R>(&self, read: impl FnOnce(&Store) -> Result<R, Error>) -> Result<R, Error> {
        match &self.probe {
            Some(pool) => pool.read(read),
            None => self.read(read),
        }
    }

    /// How long the writer's database call has been waiting, once past
    /// the stall bound ([`GroupCommitWriter::stalled`]): writes are being
    /// refused, and the node is not ready.
    pub fn stalled(&self) -> Option<std::time::Duration> {
        self.writer.stalled()
    }

    /// Transactions the writer committed so far.
    pub fn commits(&self) -> u64 {
        self.writer.commits()
    }

    /// Workflow starts the SQLite writer committed from its batches'
    /// staging ([`SharedStore::submit_start`]) so far.
    pub fn staged_starts(&self) -> u64 {
        self.writer.staged_starts()
    }

    /// Read connections opened so far (0 for an in-memory store).
    pub fn open_readers(&self) -> usize {
        self.readers.as_ref().map_or(0, ReadPool::open_connections)
    }
}
