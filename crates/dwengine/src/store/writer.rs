//! Group commit: one writer thread turns many callers' transitions into one
//! SQLite transaction, and answers each caller only after that commit.
//!
//! With `synchronous = FULL` every commit waits for an fsync, so a server
//! that commits each transition on its own is bound by the disk's flush
//! rate, whatever the number of clients. The writer keeps the durability
//! and shares the flush: callers queue their transition (a closure over the
//! store), the writer drains whatever is queued, runs each transition in
//! its own savepoint (a failing one rolls back alone and does not poison
//! its neighbours), commits once, and only then answers. A caller therefore
//! never sees success for a write that is not on disk, and a crash loses
//! only transitions nobody was told about. On SQLite the answers come from
//! a second thread ([`crate::store::syncer`]) once it synced the
//! write-ahead log, while this one runs the next batch, and a third
//! ([`crate::store::checkpointer`]) copies the log into the database
//! beside it instead of inside its commits.
//!
//! Lock order on PostgreSQL. A batch runs its transitions in the order
//! they arrived, and the triggers update the counter rows each one touches
//! (`workflow_run_series` and `task_queue_state` of its queue,
//! `namespace_durable_counts`, …) as its statements run, so two nodes'
//! batches can lock the same counter rows in opposite orders (node A
//! starts a workflow on queue a, then one on b; node B b, then a). Sorting
//! them is not possible across unrelated transitions, and not needed: every
//! write transaction takes the store's advisory write lock exclusively at
//! `BEGIN`, before any row lock (`Connection::begin_write`), so no two of
//! them hold row locks at the same time and no cycle of waits can form. A
//! transaction that does not take that lock exclusively must lock at most
//! one contested counter row, and last: a claim (`Connection::begin_claim`,
//! the lock taken shared, beside other claims only) locks the task it takes
//! with `SKIP LOCKED` (never waiting for it), rows of that task's own run,
//! and its queue's `task_queue_state` row through a trigger deferred to
//! `COMMIT`, so a claim waiting for a counter row holds no row another
//! claim waits for. The engine tests' `lock_order::` show the pair
//! deadlocking (40P01) without the lock and never with it.
//!
//! A start writer ([`Lane::Starts`], a PostgreSQL node's second writer)
//! commits workflow starts under the lock taken shared, beside claims and
//! other nodes' start batches. A start transaction locks its workflow id's
//! key without waiting (`Connection::try_lock_key`: held elsewhere, the
//! start reruns as an ordinary write), rows of its own new runs, and at
//! `COMMIT`, through deferred triggers (migration 0037), its one series'
//! counter row and then its queue's (each transaction carries one series),
//! so it waits only for a counter row, holding at most the series row
//! before the queue's: a claim holds no series row, and another start
//! transaction waiting for the series row holds no queue row, so no cycle
//! forms. One that PostgreSQL breaks anyway (40P01) fails the whole
//! transaction, and its starts are answered [`Error::NeedsWriteLock`]
//! and rerun as ordinary writes.
//!
//! A run writer ([`Lane::Runs`], a PostgreSQL node's third writer when
//! `DW_STORE_RUN_WRITER=on`) commits completions that write one existing run (an activity's report,
//! a workflow task's completion whose commands stay in its run) under the
//! lock taken shared, beside claims, start batches and other nodes' run
//! batches. Each job first takes its run's workflow id key without waiting
//! (`Store::lock_run_of_task`; a claim beside others takes the key of the
//! run it leases, and a start its workflow id's), so no two transactions
//! beside each other write one run; a job whose key is held, or whose
//! close would reach another run, is answered [`Error::NeedsWriteLock`]
//! and rerun as an ordinary write. Beyond its run a job locks counter
//! rows: `activity_execution_series` at once (an activity scheduled or
//! closed), then at `COMMIT`, through the deferred triggers, the
//! `workflow_run_series` row of a run it closed before its queues'
//! `task_queue_state` rows (a completion closes its run before it ends its
//! task). A claim locks only a queue's row at `COMMIT`, a start its series'
//! row before its queue's, and neither ever an activity series row, so
//! with one series and one queue (the common shape) every transaction
//! takes them in the order activity series, run series, queue and no
//! cycle forms. A batch mixing several queues or series can meet another
//! in a cycle; PostgreSQL breaks it (40P01) and the batch's jobs are rerun
//! as ordinary writes, as a start batch's are.
//!
//! On PostgreSQL the writer's session can be lost (the server stopped or
//! restarted, the network failed). The batch it was carrying is answered
//! with [`Error::DatabaseUnavailable`], and before each later batch the
//! writer opens a new session, at most every [`RECONNECT_INTERVAL`]; until
//! one opens, queued writes are refused the same way at once, so callers
//! get a 503 rather than a wait, and the node writes again as soon as the
//! server is back. A server that stops answering without closing the
//! session (frozen, or the network to it dropping packets) holds a call
//! until the session's deadline ([`crate::store::db::PostgresSettings`]);
//! once a call has waited past the stall bound (a quarter of the lesser of
//! that deadline and the connect timeout, kept between 0.25 and 5 s: 1.25 s
//! by default), new writes are refused at once instead of queueing behind
//! it, and `/api/ready` answers 503 ([`GroupCommitWriter::stalled`]).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::store::checkpointer::{CheckpointState, Checkpointer};
use crate::store::connection::Store;
use crate::store::db::{CallClock, Engine, SqliteSettings};
use crate::store::error::Error;
use crate::store::syncer::{SyncState, Syncer};

/// The savepoint around each job of a group commit.
const JOB_SAVEPOINT: &str = "group_commit_job";

/// The most transitions one commit carries; the rest wait for the next.
pub const MAX_BATCH: usize = 256;

/// How often a writer whose session was lost tries to open a new one
/// (queued writes are refused in between, not held).
pub const RECONNECT_INTERVAL: Duration = Duration::from_millis(250);

/// Why a group commit carried nothing to disk.
#[derive(Debug, Clone)]
struct Failure {
    message: String,
    /// The database was unreachable or dropped the session.
    unavailable: bool,
    /// PostgreSQL broke a lock conflict with another transaction by
    /// ending this one (a start batch's commit that met another's in a
    /// cycle): nothing was written, and its starts run again as ordinary
    /// writes.
    conflict: bool,
}

impl Failure {
    fn of(error: &crate::store::db::Error, conn: &crate::store::db::Connection) -> Failure {
        Failure {
            message: error.to_string(),
            unavailable: error.is_unavailable() || conn.is_broken(),
            conflict: error.is_lock_conflict(),
        }
    }

    /// A store write that failed the whole batch (its staged starts).
    fn of_store(error: &Error) -> Failure {
        Failure {
            message: error.to_string(),
            unavailable: matches!(error, Error::DatabaseUnavailable(_)),
            conflict: false,
        }
    }

    fn into_error(self) -> Error {
        if self.unavailable {
            Error::DatabaseUnavailable(self.message)
        } else if self.conflict {
            Error::NeedsWriteLock
        } else {
            Error::Commit(self.message)
        }
    }
}

/// Which transactions a writer's batches are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Ordinary writes: the write lock taken exclusively
    /// (`Connection::begin_write`).
    Exclusive,
    /// Workflow starts: the write lock taken shared
    /// (`Connection::begin_starts`), one transaction per key (a start's
    /// series: namespace, task queue and workflow type) in each batch, so
    /// a start transaction locks one series row and one queue row, in that
    /// order, at commit, and two nodes' start transactions never wait for
    /// each other in a cycle.
    Starts,
    /// Completions that write one existing run (an activity's report, a
    /// workflow task's completion whose commands stay in its run): the
    /// write lock taken shared (`Connection::begin_run_writes`), each job
    /// holding its run's workflow id key, in one transaction per batch.
    Runs,
}

/// Where a job of the run writer ([`Lane::Runs`]) goes in its batch's
/// transaction: its key, which orders the batch (a stable sort, so jobs of
/// one key keep their order). A completion that closes its run counts its
/// run series' row (`workflow_run_series`) at commit before its queue's,
/// as a start does; a job after another's queue change would count it
/// after, so closes go first. A job that schedules or closes an activity
/// locks its activity series' row at once, until commit; put last, it
/// holds it for the shortest time, and other nodes' run batches wait for
/// that row holding no counter row of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RunWriteOrder {
    /// The completion closes its run.
    Closes,
    /// Neither closes its run nor touches an activity.
    Other,
    /// An activity's report, or a completion scheduling activities.
    Activities,
}

impl RunWriteOrder {
    /// The writer's key for a job of this order.
    pub fn key(self) -> String {
        match self {
            RunWriteOrder::Closes => "0",
            RunWriteOrder::Other => "1",
            RunWriteOrder::Activities => "2",
        }
        .to_owned()
    }
}

type Answer = Box<dyn FnOnce(Result<(), Failure>) + Send>;
/// Runs a transition; says whether it succeeded and how to answer its caller.
type Transition = Box<dyn FnOnce(&Store) -> (bool, Answer) + Send>;

/// A queued transition and the way to refuse it unrun.
struct Job {
    transition: Transition,
    refuse: Box<dyn FnOnce(Failure) + Send>,
    /// Jobs of one key share a transaction ([`Lane::Starts`]).
    key: String,
    /// A workflow start's namespace and workflow id when its rows may be
    /// staged ([`crate::store::start_stage`]; the SQLite writer).
    stage: Option<(String, String)>,
}

/// What a writer counts, read by other threads.
#[derive(Debug, Default)]
struct Counts {
    /// Transactions committed.
    commits: AtomicU64,
    /// Workflow starts committed from the batch's staging.
    staged_starts: AtomicU64,
}

/// The single writer of one store file (or in-memory store).
pub struct GroupCommitWriter {
    queue: Mutex<Option<Sender<Job>>>,
    store: Arc<Mutex<Store>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    counts: Arc<Counts>,
    /// The writer's PostgreSQL session's pending call.
    clock: Option<Arc<CallClock>>,
    /// The syncer thread's counters (SQLite).
    synced: Option<Arc<SyncState>>,
    /// The checkpointer thread's counters (an SQLite file).
    checkpoints: Option<Arc<CheckpointState>>,
}

impl GroupCommitWriter {
    /// Starts the writer thread over `store`.
    pub fn start(store: Store) -> std::io::Result<GroupCommitWriter> {
        GroupCommitWriter::start_lane(store, Lane::Exclusive)
    }

    /// Starts a writer thread whose batches are `lane`'s transactions.
    pub fn start_lane(store: Store, lane: Lane) -> std::io::Result<GroupCommitWriter> {
        let clock = store.conn.call_clock();
        let answering = Answering::of(&store)?;
        let synced = match &answering {
            Answering::Here => None,
            Answering::Syncer(syncer) => Some(syncer.state().clone()),
        };
        let mut checkpointer = match store.conn.engine() {
            Engine::Sqlite => Checkpointer::start(
                &store.conn,
                SqliteSettings {
                    busy_timeout: store.config.busy_timeout,
                    synchronous_full: false,
                },
                "dwstore-checkpointer",
            )?,
            Engine::Postgres => None,
        };
        let checkpoints = checkpointer.as_ref().map(|c| c.state().clone());
        let store = Arc::new(Mutex::new(store));
        let (sender, receiver) = mpsc::channel::<Job>();
        let owned = store.clone();
        let counts = Arc::new(Counts::default());
        let counted = counts.clone();
        let name = match lane {
            Lane::Exclusive => "dwstore-writer",
            Lane::Starts => "dwstore-starts",
            Lane::Runs => "dwstore-runs",
        };
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                drain(
                    &owned,
                    &receiver,
                    &counted,
                    lane,
                    &answering,
                    &mut checkpointer,
                );
            })?;
        Ok(GroupCommitWriter {
            queue: Mutex::new(Some(sender)),
            store,
            thread: Mutex::new(Some(thread)),
            counts,
            clock,
            synced,
            checkpoints,
        })
    }

    /// Runs `transition` atomically and returns its result once committed.
    /// An `Err` from `transition` rolls back its writes only.
    pub fn write<R, F>(&self, transition: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, Error> + Send + 'static,
    {
        self.write_keyed(String::new(), transition)
    }

    /// As [`GroupCommitWriter::write`]; on a [`Lane::Starts`] writer the
    /// transition commits with the others of its `key` only.
    pub fn write_keyed<R, F>(&self, key: String, transition: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, Error> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel::<Result<R, Error>>(1);
        self.submit_keyed(key, transition, move |result| {
            let _ = reply.send(result);
        });
        // A dropped reply means the transition panicked (and was rolled back).
        answer.recv().map_err(|_| Error::WriterStopped)?
    }

    /// Queues `transition` without waiting for it: `deliver` gets its
    /// result once the transaction carrying it committed (or the failure
    /// that carried nothing to disk), on the writer thread (PostgreSQL) or
    /// its syncer thread once the log is synced (SQLite), or at once on
    /// the calling thread when the writer refuses it unqueued (stalled,
    /// stopped). `deliver` must not block: it holds up the answers (and
    /// on PostgreSQL the batches) behind it. A transition that panics is
    /// rolled back and `deliver` is dropped uncalled. An async caller hands the result to its task
    /// through a channel here instead of parking a thread on
    /// [`GroupCommitWriter::write`].
    pub fn submit_keyed<R, F, D>(&self, key: String, transition: F, deliver: D)
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, Error> + Send + 'static,
        D: FnOnce(Result<R, Error>) + Send + 'static,
    {
        self.submit_job(key, None, transition, deliver);
    }

    /// As [`GroupCommitWriter::submit_keyed`], for a workflow start of
    /// `namespace` and `workflow_id` that decides on nothing shared: on
    /// SQLite its rows are staged and written with its batch's other
    /// starts ([`crate::store::start_stage`]).
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
        self.submit_job(
            String::new(),
            Some((namespace, workflow_id)),
            transition,
            deliver,
        );
    }

    fn submit_job<R, F, D>(
        &self,
        key: String,
        stage: Option<(String, String)>,
        transition: F,
        deliver: D,
    ) where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, Error> + Send + 'static,
        D: FnOnce(Result<R, Error>) + Send + 'static,
    {
        if let Some(waited) = self.stalled() {
            deliver(Err(Error::DatabaseUnavailable(format!(
                "the database has not answered the store's writer for {:.1} s (it hangs, or the network to it drops packets): writes are refused until it answers",
                waited.as_secs_f64()
            ))));
            return;
        }
        // Exactly one of the transition's answer and the refusal runs; both
        // hold the one `deliver`.
        let deliver = Arc::new(Mutex::new(Some(deliver)));
        let refusal = deliver.clone();
        let unsent = deliver.clone();
        let job = Job {
            transition: Box::new(move |store| {
                let result = transition(store);
                let ok = result.is_ok();
                let answer: Answer = Box::new(move |commit| {
                    if let Some(deliver) = lock(&deliver).take() {
                        deliver(match commit {
                            Ok(()) => result,
                            Err(failure) => Err(failure.into_error()),
                        });
                    }
                });
                (ok, answer)
            }),
            refuse: Box::new(move |failure: Failure| {
                if let Some(deliver) = lock(&refusal).take() {
                    deliver(Err(failure.into_error()));
                }
            }),
            key,
            stage,
        };
        let queued = match lock(&self.queue).as_ref() {
            Some(queue) => queue.send(job).is_ok(),
            None => false,
        };
        if !queued {
            if let Some(deliver) = lock(&unsent).take() {
                deliver(Err(Error::WriterStopped));
            }
        }
    }

    /// How long the writer's database call has been waiting, once that is
    /// past the stall bound ([`crate::store::db::CallClock::stalled_for`]);
    /// `None` while the database answers (and always on SQLite).
    pub fn stalled(&self) -> Option<Duration> {
        self.clock.as_ref()?.stalled_for()
    }

    /// Transactions committed so far (each carries one or more transitions).
    /// A batch is counted once `commit_all` is done with it: possibly after
    /// its callers were answered (the syncer answers them on its own
    /// thread), always before the writer begins its next batch.
    pub fn commits(&self) -> u64 {
        self.counts.commits.load(Ordering::Relaxed)
    }

    /// Workflow starts committed through the SQLite writer's staging
    /// ([`crate::store::start_stage`]) so far, counted with their batch.
    pub fn staged_starts(&self) -> u64 {
        self.counts.staged_starts.load(Ordering::Relaxed)
    }

    /// The syncer thread's counters and test hold (`None` on PostgreSQL,
    /// whose writer answers its callers itself).
    pub fn sync_state(&self) -> Option<&Arc<SyncState>> {
        self.synced.as_ref()
    }

    /// The checkpointer thread's counters and test hold (`None` on
    /// PostgreSQL and in memory: no log to copy).
    pub fn checkpoint_state(&self) -> Option<&Arc<CheckpointState>> {
        self.checkpoints.as_ref()
    }

    /// The writer's own connection, between batches (in-memory stores have
    /// no other connection to read from).
    pub fn lock_store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }
}

impl Drop for GroupCommitWriter {
    fn drop(&mut self) {
        lock(&self.queue).take();
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every write is a transaction, so a panic cannot leave SQLite half-written.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Who answers a batch's callers once it committed.
enum Answering {
    /// The writer thread, at once: PostgreSQL's `COMMIT` returns once the
    /// server made it durable.
    Here,
    /// The syncer thread, after the write-ahead log is synced
    /// ([`crate::store::syncer`]): SQLite.
    Syncer(Syncer),
}

impl Answering {
    fn of(store: &Store) -> std::io::Result<Answering> {
        if store.conn.engine() != Engine::Sqlite {
            return Ok(Answering::Here);
        }
        let wal = store
            .conn
            .defer_commit_sync()
            .map_err(std::io::Error::other)?;
        Ok(Answering::Syncer(Syncer::start(wal, "dwstore-syncer")?))
    }

    /// Answers `answers` with `outcome`, a success only once it is durable.
    fn answer(&self, answers: Vec<Answer>, outcome: Result<(), Failure>) {
        match self {
            Answering::Here => {
                for answer in answers {
                    answer(outcome.clone());
                }
            }
            Answering::Syncer(_) if answers.is_empty() => {}
            Answering::Syncer(syncer) => {
                let durable = outcome.is_ok();
                syncer.hand(
                    durable,
                    Box::new(move |unsynced| {
                        let outcome = match unsynced {
                            Some(message) if durable => Err(Failure {
                                message,
                                unavailable: false,
                                conflict: false,
                            }),
                            _ => outcome,
                        };
                        for answer in answers {
                            answer(outcome.clone());
                        }
                    }),
                );
            }
        }
    }
}

/// How a batch ends: who answers it, and what may join it before its
/// commit.
struct Pipe<'a> {
    answering: &'a Answering,
    receiver: &'a Receiver<Job>,
    lane: Lane,
}

impl Pipe<'_> {
    /// A job queued meanwhile that joins the transaction, which has run
    /// `ran` jobs, before it commits: only while the syncer is still busy
    /// with earlier batches, since this batch could not be synced before
    /// that ends anyway, and committing it early would only make it small
    /// (each commit writes the pages its jobs share again). Never waits
    /// for a job.
    fn more(&self, ran: usize) -> Option<Job> {
        match self.answering {
            Answering::Syncer(syncer)
                if self.lane == Lane::Exclusive && ran < MAX_BATCH && syncer.state().syncing() =>
            {
                self.receiver.try_recv().ok()
            }
            _ => None,
        }
    }

    /// Jobs queued while the transaction waited for its write lock, which
    /// join it (up to [`MAX_BATCH`]): an exclusive batch on PostgreSQL,
    /// where `BEGIN` waits for the lock while other nodes' writers and the
    /// claims hold it, tens of milliseconds on a busy three-node cluster.
    /// Left for the next batch, each would pay a transaction of its own:
    /// its `BEGIN` and `COMMIT`, and another wait for the lock behind the
    /// other nodes' writers. (SQLite's `BEGIN IMMEDIATE` does not wait:
    /// its one writer holds the file.)
    fn joined_at_lock(&self, batch: &mut VecDeque<Job>) {
        if matches!(self.answering, Answering::Here) && self.lane == Lane::Exclusive {
            take_queued(self.receiver, batch);
        }
    }

    fn answer(&self, answers: Vec<Answer>, outcome: Result<(), Failure>) {
        self.answering.answer(answers, outcome);
    }
}

/// Moves the jobs queued now into `batch`, up to [`MAX_BATCH`]; never
/// waits for one.
fn take_queued(receiver: &Receiver<Job>, batch: &mut VecDeque<Job>) {
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(job) => batch.push_back(job),
            Err(_) => break,
        }
    }
}

fn drain(
    store: &Mutex<Store>,
    receiver: &Receiver<Job>,
    counts: &Counts,
    lane: Lane,
    answering: &Answering,
    checkpointer: &mut Option<Checkpointer>,
) {
    let pipe = Pipe {
        answering,
        receiver,
        lane,
    };
    let mut reconnect = Reconnect::default();
    while let Ok(first) = receiver.recv() {
        let mut batch = VecDeque::from([first]);
        take_queued(receiver, &mut batch);
        let mut store = lock(store);
        match lane {
            Lane::Exclusive => {
                commit_all(&mut store, batch, &mut reconnect, counts, lane, &pipe);
                if let Some(checkpointer) = checkpointer.as_mut() {
                    checkpointer.after_commit(&store.conn);
                }
            }
            Lane::Runs => {
                // One transaction, its jobs in the order of their keys
                // ([`RunWriteOrder`]): closes first, activities last.
                batch.make_contiguous().sort_by(|a, b| a.key.cmp(&b.key));
                commit_all(&mut store, batch, &mut reconnect, counts, lane, &pipe);
            }
            Lane::Starts => {
                // One transaction per key, in the order the keys arrived.
                while let Some(key) = batch.front().map(|job| job.key.clone()) {
                    let (same, rest): (VecDeque<Job>, VecDeque<Job>) =
                        batch.into_iter().partition(|job| job.key == key);
                    batch = rest;
                    commit_all(&mut store, same, &mut reconnect, counts, lane, &pipe);
                }
            }
        }
    }
}

/// Commits `batch` (as one transaction, or more when the session is lost
/// and opened again), answering every job.
fn commit_all(
    store: &mut Store,
    mut batch: VecDeque<Job>,
    reconnect: &mut Reconnect,
    counts: &Counts,
    lane: Lane,
    pipe: &Pipe<'_>,
) {
    // A session found lost when the batch begins (the database
    // restarted while the node was idle) is opened again at once and
    // the batch begun again, once: nothing of it ran.
    let mut begun_again = false;
    while !batch.is_empty() {
        if let Err(failure) = session(store, reconnect) {
            for job in batch.drain(..) {
                (job.refuse)(failure.clone());
            }
            break;
        }
        match commit_batch(store, &mut batch, !begun_again, lane, pipe, counts) {
            Batch::Answered => {}
            Batch::SessionLost => {
                begun_again = true;
                reconnect.last = None;
            }
        }
    }
}

/// What one [`commit_batch`] did.
enum Batch {
    /// Its jobs are answered: committed, or with the failure.
    Answered,
    /// The session was found lost before any job ran; the jobs are still
    /// queued, unanswered.
    SessionLost,
}

/// When the writer last tried to open a new session, and why it failed.
#[derive(Default)]
struct Reconnect {
    last: Option<(Instant, Failure)>,
}

/// The writer's session, opened again if it was lost; while the database
/// stays unreachable, the last attempt's failure (a new attempt at most
/// every [`RECONNECT_INTERVAL`]).
fn session(store: &mut Store, reconnect: &mut Reconnect) -> Result<(), Failure> {
    if !store.conn.is_broken() {
        return Ok(());
    }
    if let Some((at, failure)) = &reconnect.last {
        if at.elapsed() < RECONNECT_INTERVAL {
            return Err(failure.clone());
        }
    }
    match store.conn.reconnect() {
        Ok(()) => {
            reconnect.last = None;
            tracing::info!("the store's writer opened a new database session");
            Ok(())
        }
        Err(e) => {
            let failure = Failure {
                message: e.to_string(),
                unavailable: true,
                conflict: false,
            };
            if reconnect.last.is_none() {
                tracing::warn!(error = %e, "the store's writer lost its database session and cannot open a new one yet: writes are refused (503) until it can");
            }
            reconnect.last = Some((Instant::now(), failure.clone()));
            Err(failure)
        }
    }
}

/// Runs queued jobs in one transaction until the queue is empty or SQLite
/// drops the transaction; answers every job it ran. With
/// `may_begin_again`, a session found lost at `BEGIN` leaves the jobs
/// queued ([`Batch::SessionLost`]) instead of refusing them.
fn commit_batch(
    store: &Store,
    batch: &mut VecDeque<Job>,
    may_begin_again: bool,
    lane: Lane,
    pipe: &Pipe<'_>,
    counts: &Counts,
) -> Batch {
    let conn = &store.conn;
    let begun = match lane {
        Lane::Exclusive => conn.begin_write(),
        Lane::Starts => conn.begin_starts(),
        Lane::Runs => conn.begin_run_writes(),
    };
    if let Err(e) = begun {
        if may_begin_again && conn.is_broken() {
            return Batch::SessionLost;
        }
        let failure = Failure::of(&e, conn);
        for job in batch.drain(..) {
            (job.refuse)(failure.clone());
        }
        return Batch::Answered;
    }
    pipe.joined_at_lock(batch);
    // Starts are staged only by the SQLite writer (crate::store::start_stage).
    let staging = lane == Lane::Exclusive && conn.engine() == Engine::Sqlite;
    let mut answers: Vec<Answer> = Vec::with_capacity(batch.len());
    let mut lost = None;
    let mut ran = 0;
    while let Some(job) = batch.pop_front().or_else(|| pipe.more(ran)) {
        ran += 1;
        let stages = staging && job.stage.is_some();
        // Any other job, and a start of a workflow id already staged, runs
        // after the staged starts are written, outside any job's savepoint.
        let flush_first = staging
            && match &job.stage {
                Some((namespace, workflow_id)) => store.has_staged(namespace, workflow_id),
                None => true,
            };
        if flush_first {
            if let Err(e) = store.flush_staged_starts() {
                lost = Some(Failure::of_store(&e));
                batch.push_front(job);
                break;
            }
        }
        if stages {
            // A start that stages its rows writes nothing itself, so it
            // needs no savepoint: unstaging undoes it.
            let staged = store.stage_mark();
            let changes = conn.total_changes();
            store.accept_staged_starts(true);
            let Job { transition, .. } = job;
            let result = catch_unwind(AssertUnwindSafe(|| transition(store)));
            store.accept_staged_starts(false);
            let answered = match result {
                Ok((true, answer)) => Some(answer),
                Ok((false, answer)) => {
                    store.unstage_since(staged);
                    Some(answer)
                }
                Err(_) => {
                    store.unstage_since(staged);
                    None
                }
            };
            answers.extend(answered);
            if conn.total_changes() != changes {
                // It wrote a row after all, outside any savepoint: a bug,
                // but one a rollback of the whole batch keeps off disk.
                lost = Some(Failure {
                    message: "a staged workflow start wrote a row outside its savepoint".into(),
                    unavailable: false,
                    conflict: false,
                });
                break;
            }
        } else {
            // The job's first store write takes this savepoint over rather
            // than nesting one of its own in it (`WriteTx`).
            if let Err(e) = conn.savepoint_to_adopt(JOB_SAVEPOINT) {
                lost = Some(Failure::of(&e, conn));
                batch.push_front(job);
                break;
            }
            let Job { transition, .. } = job;
            let result = catch_unwind(AssertUnwindSafe(|| transition(store)));
            conn.withdraw_savepoint();
            match result {
                Ok((true, answer)) => {
                    let _ = conn.release(JOB_SAVEPOINT);
                    answers.push(answer);
                }
                Ok((false, answer)) => {
                    let _ = conn.rollback_to(JOB_SAVEPOINT);
                    answers.push(answer);
                }
                Err(_) => {
                    let _ = conn.rollback_to(JOB_SAVEPOINT);
                }
            }
        }
        if conn.is_broken() {
            // The PostgreSQL session is gone, and with it the transaction:
            // nothing of this batch is written; the rest waits for a new
            // session.
            lost = Some(Failure {
                message: "the database session was lost in the middle of the transaction"
                    .to_owned(),
                unavailable: true,
                conflict: false,
            });
            break;
        }
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (an I/O error or a
            // full disk does): nothing of this batch is on disk.
            lost = Some(Failure {
                message: "the transaction was rolled back by SQLite".to_owned(),
                unavailable: false,
                conflict: false,
            });
            break;
        }
    }
    if lost.is_none() && staging {
        if let Err(e) = store.flush_staged_starts() {
            lost = Some(Failure::of_store(&e));
        }
    }
    let staged = store.staged_written();
    store.clear_staged_starts();
    let outcome = match lost {
        Some(failure) => {
            if !conn.is_autocommit() {
                let _ = conn.rollback();
            }
            Err(failure)
        }
        None => conn.commit().map_err(|e| {
            let failure = Failure::of(&e, conn);
            if !conn.is_autocommit() {
                let _ = conn.rollback();
            }
            failure
        }),
    };
    if outcome.is_ok() {
        // Counted before anyone is answered: a caller that reads the count
        // after its answer sees its own commit.
        counts.commits.fetch_add(1, Ordering::Relaxed);
        counts.staged_starts.fetch_add(staged, Ordering::Relaxed);
    }
    pipe.answer(answers, outcome);
    Batch::Answered
}
