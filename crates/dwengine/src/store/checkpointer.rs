//! The group commit's third thread on SQLite: copy the write-ahead log into
//! the database beside the writer instead of inside its commits.
//!
//! SQLite checkpoints the log inside the `COMMIT` that takes it past its
//! mark (8,000 pages: [`LOG_CHECKPOINT_PAGES`]): it syncs the log, copies
//! the latest version of every page the log holds into the database (a
//! `pread` and a `pwrite` each, about 600 pages at the mark under starts),
//! and syncs the database, on the writer thread, while every caller of the
//! batch and every job queued behind it waits (a few milliseconds a
//! checkpoint, the p99 of starts: docs/performance.md). The writer's
//! connection now hands that off ([`Connection::hand_off_checkpoints`]): its
//! commits only report the log's length, and once it passes the mark this
//! thread, on a connection of its own, runs a `PASSIVE` checkpoint, which
//! copies every frame committed when it began while the writer goes on
//! committing after them. Durability is SQLite's: the same checkpoint, with
//! the same syncs in the same order, on another connection; a checkpoint
//! interrupted by a crash is redone from the log at the next open.
//!
//! The log starts again from its beginning only at a write that finds all
//! of it copied and no reader on old frames. A checkpoint beside a busy
//! writer never finds that: frames committed while it copied are left
//! over. So once this thread's round is done the writer copies those few
//! itself, between two batches (its tail: tens of pages and the two syncs,
//! against hundreds of pages before), and its next write starts the log
//! again.
//!
//! The log stays bounded: should it reach [`LOG_CAP_PAGES`] anyway (this
//! thread slower than the writes, or readers holding old frames so that
//! neither copy completes), the writer runs a `RESTART` checkpoint itself,
//! which waits (up to the busy timeout) for readers of old frames and
//! copies everything. docs/bounded-growth.md states the bound.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::store::db::{
    self, CheckpointMode, Checkpointed, Connection, SqliteSettings, LOG_CHECKPOINT_PAGES,
};

/// The log's length, in pages, at which the writer stops waiting for the
/// checkpointer and copies the log and starts it again itself: four times
/// the mark, about 131 MB of log at 4 KiB pages.
pub const LOG_CAP_PAGES: u32 = 4 * LOG_CHECKPOINT_PAGES;

/// The most frames the writer copies itself after the checkpointer's round
/// (those committed while it ran); a longer tail (the round lost to
/// readers) waits for the next round.
const TAIL_MOST: u32 = LOG_CHECKPOINT_PAGES / 4;

/// How much further the log grows before the writer asks again when a
/// round and its tail left it unrestarted (a reader held old frames).
const ASK_AGAIN_AFTER: u32 = LOG_CHECKPOINT_PAGES / 8;

/// What the writer and the thread share, and what tests see.
#[derive(Default)]
pub struct CheckpointState {
    /// Rounds the thread finished (whatever they copied).
    rounds: AtomicU64,
    /// Checkpoints the writer ran itself: tails after a round.
    tails: AtomicU64,
    /// `RESTART` checkpoints the writer ran at the cap.
    capped: AtomicU64,
    /// Times the writer saw the log start again from its beginning.
    restarts: AtomicU64,
    /// The longest log the writer saw after a commit, in frames.
    longest: AtomicU64,
    asks: Mutex<Asks>,
    wake: Condvar,
    /// While true the thread waits before its next round (tests).
    held: Mutex<bool>,
    released: Condvar,
}

#[derive(Default)]
struct Asks {
    /// The writer asked for a round the thread has not begun.
    wanted: bool,
    /// The writer is gone: the thread ends.
    stop: bool,
    /// The last round the writer has not looked at yet.
    finished: Option<Checkpointed>,
}

impl CheckpointState {
    /// Rounds of the checkpointer thread so far.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// Tail checkpoints the writer ran after a round.
    pub fn tails(&self) -> u64 {
        self.tails.load(Ordering::Relaxed)
    }

    /// `RESTART` checkpoints the writer ran because the log reached the cap.
    pub fn capped(&self) -> u64 {
        self.capped.load(Ordering::Relaxed)
    }

    /// Times the log started again from its beginning, as the writer saw.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// The longest log after a commit so far, in frames.
    pub fn longest(&self) -> u64 {
        self.longest.load(Ordering::Relaxed)
    }

    /// Holds the thread before its next round until the guard drops, so a
    /// test can watch the writer with nobody copying for it.
    #[cfg(test)]
    pub fn hold(self: &Arc<Self>) -> CheckpointHold {
        *lock(&self.held) = true;
        CheckpointHold(self.clone())
    }

    fn wait_while_held(&self) {
        let mut held = lock(&self.held);
        while *held {
            held = self.released.wait(held).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Releases the checkpointer when dropped ([`CheckpointState::hold`]).
#[cfg(test)]
pub struct CheckpointHold(Arc<CheckpointState>);

#[cfg(test)]
impl Drop for CheckpointHold {
    fn drop(&mut self) {
        *lock(&self.0.held) = false;
        self.0.released.notify_all();
    }
}

/// The writer's side: the thread, and what the writer decided last.
pub struct Checkpointer {
    thread: Option<JoinHandle<()>>,
    state: Arc<CheckpointState>,
    /// A round is asked for or running, and its end not seen yet.
    asked: bool,
    /// The log's length at which the writer asks for a round.
    ask_at: u32,
    /// The log's length after the writer's last commit.
    last: u32,
}

impl Checkpointer {
    /// Takes the checkpoints off `conn`'s commits (an SQLite file in WAL
    /// mode: the group-commit writer's connection) and starts the thread
    /// that runs them; `None` (nothing changed) for other connections.
    pub fn start(
        conn: &Connection,
        settings: SqliteSettings,
        name: &str,
    ) -> std::io::Result<Option<Checkpointer>> {
        let Some(path) = conn.hand_off_checkpoints().map_err(std::io::Error::other)? else {
            return Ok(None);
        };
        let own =
            Connection::open_sqlite_checkpointer(&path, settings).map_err(std::io::Error::other)?;
        let state = Arc::new(CheckpointState::default());
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&own, &path, &shared))?;
        Ok(Some(Checkpointer {
            thread: Some(thread),
            state,
            asked: false,
            ask_at: LOG_CHECKPOINT_PAGES,
            last: 0,
        }))
    }

    /// The thread's counters and test hold.
    pub fn state(&self) -> &Arc<CheckpointState> {
        &self.state
    }

    /// After each batch the writer committed on `conn`, between batches:
    /// asks for a round once the log passes the mark, copies the round's
    /// tail once it ended, and copies everything itself at the cap.
    pub fn after_commit(&mut self, conn: &Connection) {
        let frames = db::take_log_frames();
        if frames == 0 {
            return; // nothing written to the log since the last look
        }
        if frames < self.last {
            self.state.restarts.fetch_add(1, Ordering::Relaxed);
            self.ask_at = LOG_CHECKPOINT_PAGES;
        }
        self.last = frames;
        self.state
            .longest
            .fetch_max(u64::from(frames), Ordering::Relaxed);
        if frames >= LOG_CAP_PAGES {
            self.copy_all(conn, frames);
            return;
        }
        if self.asked {
            let Some(round) = lock(&self.state.asks).finished.take() else {
                return; // still running
            };
            self.asked = false;
            self.ask_at = frames.saturating_add(ASK_AGAIN_AFTER);
            // A log shorter than the round's started again since: the
            // round copied all of it and nothing is left to copy.
            let tail = frames
                .checked_sub(round.copied)
                .filter(|_| frames >= round.log);
            if !round.busy && round.copied > 0 && tail.is_some_and(|left| left <= TAIL_MOST) {
                // The frames committed while the round ran: copied here,
                // where no commit can come between the copy and the next
                // write, which then starts the log again.
                match conn.checkpoint(CheckpointMode::Passive) {
                    Ok(_) => {
                        self.state.tails.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the store's writer could not copy the write-ahead log's last frames into the database")
                    }
                }
            }
            return;
        }
        if frames >= self.ask_at {
            self.asked = true;
            lock(&self.state.asks).wanted = true;
            self.state.wake.notify_one();
        }
    }

    /// The log reached the cap: copy all of it here and start it again,
    /// waiting for readers of old frames up to the busy timeout.
    fn copy_all(&mut self, conn: &Connection, frames: u32) {
        self.state.capped.fetch_add(1, Ordering::Relaxed);
        match conn.checkpoint(CheckpointMode::Restart) {
            Ok(done) if !done.busy => {}
            Ok(_) => tracing::warn!(
                frames,
                "the store's write-ahead log is past its cap and readers held it off: it grows until they finish"
            ),
            Err(e) => tracing::warn!(error = %e, frames, "the store's write-ahead log is past its cap and could not be copied into the database"),
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // The thread finishes its round, if one runs, then ends; the log
        // left is copied at the next open (or when the file's last
        // connection closes), as SQLite does.
        lock(&self.state.asks).stop = true;
        self.state.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(conn: &Connection, path: &Path, state: &CheckpointState) {
    loop {
        {
            let mut asks = lock(&state.asks);
            while !asks.wanted && !asks.stop {
                asks = state.wake.wait(asks).unwrap_or_else(|e| e.into_inner());
            }
            if asks.stop {
                return;
            }
            asks.wanted = false;
        }
        state.wait_while_held();
        let round = conn.checkpoint(CheckpointMode::Passive).unwrap_or_else(|e| {
            tracing::warn!(error = %e, database = %path.display(), "the store's checkpointer could not copy the write-ahead log into the database");
            Checkpointed {
                busy: true,
                log: 0,
                copied: 0,
            }
        });
        state.rounds.fetch_add(1, Ordering::Relaxed);
        lock(&state.asks).finished = Some(round);
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::store::db::LOG_CHECKPOINT_PAGES;
    use crate::store::writer::GroupCommitWriter;
    use crate::store::{Store, StoreConfig};

    use super::LOG_CAP_PAGES;

    const PAGE: u64 = 4096;
    /// A log frame: its header and its page.
    const FRAME: u64 = PAGE + 24;
    /// Pages a commit of [`commit`] writes, about (a row a page).
    const ROWS: u64 = 500;

    /// Waits (generously: a loaded machine) until `done` holds.
    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn size(path: &Path, suffix: &str) -> u64 {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::fs::metadata(&name).map(|m| m.len()).unwrap_or(0)
    }

    fn writer(dir: &Path) -> (PathBuf, GroupCommitWriter) {
        let path = dir.join("log.sqlite");
        let writer = GroupCommitWriter::start(
            Store::open(&path, StoreConfig::default()).expect("the store"),
        )
        .expect("the writer");
        writer
            .write(|s| {
                s.conn
                    .execute_batch("CREATE TABLE t (b BLOB NOT NULL)")
                    .map_err(crate::store::Error::from)
            })
            .expect("the table");
        (path, writer)
    }

    /// One commit of about [`ROWS`] pages, through the group commit.
    fn commit(writer: &GroupCommitWriter) {
        writer
            .write(|s| {
                s.conn
                    .execute_batch(&format!(
                        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS}) \
                         INSERT INTO t (b) SELECT randomblob(3900) FROM n"
                    ))
                    .map_err(crate::store::Error::from)
            })
            .expect("a commit");
    }

    /// A small commit: it lets the writer look at the checkpointer again.
    fn nudge(writer: &GroupCommitWriter) {
        writer
            .write(|s| {
                s.conn
                    .execute("INSERT INTO t (b) VALUES (x'00')", [])
                    .map_err(crate::store::Error::from)
            })
            .expect("a small commit");
    }

    /// The writer's commits copy nothing into the database, past the mark
    /// too (SQLite's automatic checkpoint would, inside the commit that
    /// crosses it): the log is copied by the checkpointer, which the test
    /// holds, and only once it is released; the log then starts again from
    /// its beginning.
    #[test]
    fn the_writers_commits_never_copy_the_log() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let (path, writer) = writer(dir.path());
        let state = writer
            .checkpoint_state()
            .expect("an SQLite file has a checkpointer")
            .clone();
        let hold = state.hold();
        let database = size(&path, "");
        // 10,000 pages: past the mark, short of the cap.
        let commits = (u64::from(LOG_CHECKPOINT_PAGES) + 2_000) / ROWS;
        for _ in 0..commits {
            commit(&writer);
        }
        assert!(
            state.longest() > u64::from(LOG_CHECKPOINT_PAGES),
            "the log did not pass its mark: {} frames",
            state.longest()
        );
        assert_eq!(
            size(&path, ""),
            database,
            "the writer's commits copied the log into the database"
        );
        assert_eq!((state.rounds(), state.tails(), state.capped()), (0, 0, 0));

        drop(hold);
        until("the checkpointer's round", || state.rounds() >= 1);
        until("the log starting again", || {
            nudge(&writer);
            state.restarts() >= 1
        });
        assert_eq!(state.capped(), 0, "the writer copied everything itself");
        assert!(
            size(&path, "") >= commits * ROWS * PAGE,
            "the log is not in the database: {} bytes",
            size(&path, "")
        );
        drop(writer);
    }

    /// With nobody copying the log (the checkpointer held), the writer
    /// copies it and starts it again itself at the cap: the log never
    /// holds more than the cap and one commit.
    #[test]
    fn the_writer_copies_the_log_itself_at_the_cap() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let (path, writer) = writer(dir.path());
        let state = writer.checkpoint_state().expect("a checkpointer").clone();
        let hold = state.hold();
        let commits = u64::from(LOG_CAP_PAGES) / ROWS + 4;
        for _ in 0..commits {
            commit(&writer);
        }
        assert!(
            state.capped() >= 1,
            "the writer never copied the log at the cap"
        );
        assert!(state.restarts() >= 1, "the log never started again");
        let bound = u64::from(LOG_CAP_PAGES) + ROWS + 100;
        assert!(
            state.longest() < bound,
            "the log grew to {} frames",
            state.longest()
        );
        assert!(
            size(&path, "-wal") < 32 + bound * FRAME,
            "the log's file grew to {} bytes",
            size(&path, "-wal")
        );
        assert_eq!(state.rounds(), 0, "the held checkpointer ran");
        drop(hold);
        drop(writer);
    }

    /// Sustained writes beside a reader that reads all the time: the log
    /// stays under the cap and a commit, and everything answered as
    /// committed is there when the file is opened again.
    #[test]
    fn the_log_stays_bounded_beside_a_reader_and_nothing_is_lost() {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let (path, writer) = writer(dir.path());
        let state = writer.checkpoint_state().expect("a checkpointer").clone();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stop, path) = (stop.clone(), path.clone());
            std::thread::spawn(move || {
                let conn = rusqlite::Connection::open(&path).expect("a reader");
                let mut reads = 0_u64;
                while !stop.load(Ordering::Relaxed) {
                    let _: Option<i64> = conn
                        .query_row("SELECT MAX(rowid) FROM t", [], |r| r.get(0))
                        .expect("a read");
                    reads += 1;
                }
                reads
            })
        };
        let commits = u64::from(LOG_CAP_PAGES) / ROWS + 4;
        let mut largest_log = 0;
        for _ in 0..commits {
            commit(&writer);
            largest_log = largest_log.max(size(&path, "-wal"));
        }
        stop.store(true, Ordering::Relaxed);
        assert!(
            reader.join().expect("the reader") > 0,
            "the reader never read"
        );
        assert!(state.rounds() >= 1, "the checkpointer never ran");
        // More than the cap was written: the log started again at least
        // once, after a round and its tail or at the cap.
        assert!(state.restarts() >= 1, "the log never started again");
        let bound = u64::from(LOG_CAP_PAGES) + ROWS + 100;
        assert!(
            state.longest() < bound && largest_log < 32 + bound * FRAME,
            "the log grew to {} frames, its file to {largest_log} bytes",
            state.longest()
        );
        drop(writer);
        let conn = rusqlite::Connection::open(&path).expect("opened again");
        let rows: u64 = conn
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .expect("counted");
        assert_eq!(rows, commits * ROWS, "committed rows are missing");
    }
}
