//! The group commit's second stage on SQLite: make each commit durable and
//! answer its callers, on a thread of its own, while the writer thread
//! runs the next batch.
//!
//! With `synchronous = FULL` SQLite syncs the write-ahead log inside every
//! `COMMIT`, and the writer thread, the one serial part of a server's
//! writes, sat idle for that flush and then spent a futex wake on every
//! caller it answered. The writer now commits with `NORMAL` (the frames
//! written, not synced: [`crate::store::db::Connection::defer_commit_sync`])
//! and hands the batch's answers here; this thread syncs the log (once for
//! every batch handed over meanwhile) and only then answers them, so a
//! caller is still told of a write only once it is on disk, as before.
//!
//! What differs from `FULL`: other connections (the read pool) see a batch
//! from its `COMMIT` on, a moment before it is on disk and before its
//! callers are answered. A power failure in that moment loses the batch
//! (nobody was told of it) though a reader may have shown it. No answer
//! the writer gives can rest on such a read: every write goes through the
//! writer, batches are handed here in commit order, and one sync covers
//! every frame written before it, so the answer to a write that read an
//! unsynced batch waits for a sync that covers that batch too.
//!
//! A failed sync leaves the log's state on disk unknown (Linux may drop
//! the unwritten pages and report the next sync clean), so from then on
//! every write is answered with the failure until the server restarts and
//! SQLite recovers the log, rather than answered as durable.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::store::db::WalFile;

/// Answers a committed batch's callers: `None` once the batch is durable,
/// or why it may not be.
pub type Delivery = Box<dyn FnOnce(Option<String>) + Send>;

/// One batch handed over by the writer.
struct Handed {
    /// The batch committed and wrote: it is answered after a sync.
    durable: bool,
    deliver: Delivery,
}

/// What the writer (and tests) see of the syncer thread.
#[derive(Default)]
pub struct SyncState {
    syncs: AtomicU64,
    /// Batches handed over and not answered yet.
    pending: AtomicU64,
    /// While true the thread waits before its next sync (tests).
    held: Mutex<bool>,
    released: Condvar,
}

impl SyncState {
    /// Syncs of the log so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Whether batches handed over are still waiting for their sync or
    /// their answers (a batch committed now would wait for those).
    pub fn syncing(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    /// Holds the thread before its next sync until the guard drops, so a
    /// test can look at a batch committed and not yet synced.
    #[cfg(test)]
    pub fn hold(self: &Arc<Self>) -> SyncHold {
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = true;
        SyncHold(self.clone())
    }

    fn wait_while_held(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while *held {
            held = self.released.wait(held).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Releases the syncer when dropped ([`SyncState::hold`]).
#[cfg(test)]
pub struct SyncHold(Arc<SyncState>);

#[cfg(test)]
impl Drop for SyncHold {
    fn drop(&mut self) {
        *self.0.held.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.0.released.notify_all();
    }
}

/// The syncer thread of one writer.
pub struct Syncer {
    queue: Option<Sender<Handed>>,
    thread: Option<JoinHandle<()>>,
    state: Arc<SyncState>,
}

impl Syncer {
    /// Starts the thread; `wal` is the log to sync before answering
    /// (`None`: a store whose commits need no sync, answered in order all
    /// the same).
    pub fn start(wal: Option<WalFile>, name: &str) -> std::io::Result<Syncer> {
        let (queue, handed) = mpsc::channel();
        let state = Arc::new(SyncState::default());
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&handed, wal, &shared))?;
        Ok(Syncer {
            queue: Some(queue),
            thread: Some(thread),
            state,
        })
    }

    /// The thread's counters and test hold.
    pub fn state(&self) -> &Arc<SyncState> {
        &self.state
    }

    /// Queues a batch's answers behind the batches handed over before it.
    pub fn hand(&self, durable: bool, deliver: Delivery) {
        let handed = Handed { durable, deliver };
        self.state.pending.fetch_add(1, Ordering::AcqRel);
        if let Some(Err(mpsc::SendError(handed))) = self.queue.as_ref().map(|q| q.send(handed)) {
            // The thread is gone (it never panics: deliveries are caught),
            // so nothing can make this batch durable here.
            self.state.pending.fetch_sub(1, Ordering::AcqRel);
            (handed.deliver)(Some("the store's syncer thread stopped".to_owned()));
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        // The thread answers what was handed over, then ends.
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(handed: &Receiver<Handed>, mut wal: Option<WalFile>, state: &SyncState) {
    let mut broken: Option<String> = None;
    while let Ok(first) = handed.recv() {
        let mut round = vec![first];
        round.extend(handed.try_iter());
        state.wait_while_held();
        let unsynced = match (&broken, wal.as_mut()) {
            (Some(why), _) => Some(why.clone()),
            (None, Some(log)) if round.iter().any(|h| h.durable) => match log.sync() {
                Ok(()) => {
                    state.syncs.fetch_add(1, Ordering::Relaxed);
                    None
                }
                Err(e) => {
                    let why = format!(
                        "the store's write-ahead log {} could not be synced to disk ({e}): what was written since the last sync may be lost, so writes are refused until dwserver restarts and SQLite recovers the log",
                        log.path().display()
                    );
                    tracing::error!("{why}");
                    broken = Some(why.clone());
                    Some(why)
                }
            },
            _ => None,
        };
        let answered = round.len() as u64;
        for Handed { deliver, .. } in round {
            // A caller's delivery that panics must not stop the answers
            // to the others, nor this thread.
            let unsynced = unsynced.clone();
            let _ = catch_unwind(AssertUnwindSafe(move || deliver(unsynced)));
        }
        state.pending.fetch_sub(answered, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use crate::store::db::WalFile;
    use crate::store::writer::GroupCommitWriter;
    use crate::store::{Store, StoreConfig};

    use super::Syncer;

    /// Waits (generously: a loaded machine) until `done` holds.
    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A batch is visible to other connections from its commit on, but its
    /// callers are answered only after the syncer synced the log; a write
    /// that read that unsynced batch is answered only after a sync that
    /// covers both.
    #[test]
    fn a_batch_is_answered_only_after_the_log_is_synced() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let path = dir.path().join("runs.sqlite");
        let writer = GroupCommitWriter::start(
            Store::open(&path, StoreConfig::default()).expect("the store"),
        )
        .expect("the writer");
        let state = writer.sync_state().expect("SQLite has a syncer").clone();
        let synchronous: i64 = writer
            .lock_store()
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("the setting");
        assert_eq!(
            synchronous, 1,
            "the writer's own commits must not sync (NORMAL)"
        );
        writer
            .write(|s| {
                s.conn
                    .execute("CREATE TABLE probe (v TEXT NOT NULL)", [])
                    .map_err(crate::store::Error::from)
            })
            .expect("the table");
        let reader = rusqlite::Connection::open(&path).expect("a reader");
        let seen = |v: &str| -> bool {
            reader
                .query_row("SELECT COUNT(*) FROM probe WHERE v = ?1", [v], |r| {
                    r.get::<_, i64>(0)
                })
                .expect("read")
                == 1
        };
        let answered: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();

        let hold = state.hold();
        let synced_before = state.syncs();
        let log = answered.clone();
        writer.submit_keyed(
            String::new(),
            |s| {
                s.conn
                    .execute("INSERT INTO probe (v) VALUES ('a')", [])
                    .map_err(crate::store::Error::from)
            },
            move |r| log.lock().unwrap().push(("a".into(), r.is_ok())),
        );
        until("the first batch's commit", || seen("a"));
        // The next write reads the unsynced batch, as a claim reads a start.
        let log = answered.clone();
        writer.submit_keyed(
            String::new(),
            |s| {
                let a: i64 =
                    s.conn
                        .query_row("SELECT COUNT(*) FROM probe WHERE v = 'a'", [], |r| r.get(0))?;
                s.conn
                    .execute("INSERT INTO probe (v) VALUES ('b')", [])
                    .map_err(crate::store::Error::from)?;
                Ok(a == 1)
            },
            move |r| {
                log.lock()
                    .unwrap()
                    .push(("b".into(), matches!(r, Ok(true))))
            },
        );
        until("the second batch's commit", || seen("b"));
        assert!(
            answered.lock().unwrap().is_empty(),
            "a caller was answered before its batch was synced"
        );
        assert_eq!(state.syncs(), synced_before, "the held syncer synced");

        drop(hold);
        until("both answers", || answered.lock().unwrap().len() == 2);
        assert_eq!(
            *answered.lock().unwrap(),
            vec![("a".to_owned(), true), ("b".to_owned(), true)],
            "answered out of order, or the second write did not see the first"
        );
        assert!(state.syncs() > synced_before, "answered without a sync");
    }

    /// A sync that fails is reported to the batch it was for, and every
    /// later durable batch is refused too: after a failed fsync the log's
    /// state on disk is unknown, and a later sync's success proves nothing.
    #[test]
    fn a_failed_sync_refuses_that_batch_and_every_later_one() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        // No log at this path: its sync fails.
        let syncer = Syncer::start(
            Some(WalFile::of_database(&dir.path().join("missing.sqlite"))),
            "test-syncer",
        )
        .expect("the thread");
        let (tx, rx) = std::sync::mpsc::channel();
        for durable in [true, false, true] {
            let tx = tx.clone();
            syncer.hand(
                durable,
                Box::new(move |unsynced| tx.send(unsynced).unwrap()),
            );
        }
        let answers: Vec<Option<String>> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(60)).expect("answered"))
            .collect();
        for (n, answer) in answers.iter().enumerate() {
            let why = answer
                .as_deref()
                .unwrap_or_else(|| panic!("batch {n} answered as durable"));
            assert!(why.contains("could not be synced"), "{why}");
        }
        assert_eq!(syncer.state().syncs(), 0);
        // The log appearing later does not make the store durable again.
        std::fs::write(dir.path().join("missing.sqlite-wal"), b"").unwrap();
        syncer.hand(true, Box::new(move |unsynced| tx.send(unsynced).unwrap()));
        let later = rx.recv_timeout(Duration::from_secs(60)).expect("answered");
        assert!(later.is_some(), "a later batch was answered as durable");
    }

    /// An in-memory store has no log: its batches are answered in order
    /// by the syncer thread without a sync.
    #[test]
    fn an_in_memory_store_is_answered_without_a_sync() {
        let writer = GroupCommitWriter::start(
            Store::open_in_memory(StoreConfig::default()).expect("the store"),
        )
        .expect("the writer");
        for n in 0..3_i64 {
            assert_eq!(writer.write(move |_| Ok(n)).expect("answered"), n);
        }
        assert_eq!(writer.sync_state().expect("a syncer").syncs(), 0);
    }
}
