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
//! only transitions nobody was told about.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::store::connection::Store;
use crate::store::error::Error;

/// The savepoint around each job of a group commit.
const JOB_SAVEPOINT: &str = "group_commit_job";

/// The most transitions one commit carries; the rest wait for the next.
pub const MAX_BATCH: usize = 256;

type Answer = Box<dyn FnOnce(Result<(), String>) + Send>;
/// Runs a transition; says whether it succeeded and how to answer its caller.
type Transition = Box<dyn FnOnce(&Store) -> (bool, Answer) + Send>;

/// A queued transition and the way to refuse it unrun.
struct Job {
    transition: Transition,
    refuse: Box<dyn FnOnce(String) + Send>,
}

/// The single writer of one store file (or in-memory store).
pub struct GroupCommitWriter {
    queue: Mutex<Option<Sender<Job>>>,
    store: Arc<Mutex<Store>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    commits: Arc<AtomicU64>,
}

impl GroupCommitWriter {
    /// Starts the writer thread over `store`.
    pub fn start(store: Store) -> std::io::Result<GroupCommitWriter> {
        let store = Arc::new(Mutex::new(store));
        let (sender, receiver) = mpsc::channel::<Job>();
        let owned = store.clone();
        let commits = Arc::new(AtomicU64::new(0));
        let counted = commits.clone();
        let thread = std::thread::Builder::new()
            .name("dwstore-writer".into())
            .spawn(move || drain(&owned, &receiver, &counted))?;
        Ok(GroupCommitWriter {
            queue: Mutex::new(Some(sender)),
            store,
            thread: Mutex::new(Some(thread)),
            commits,
        })
    }

    /// Runs `transition` atomically and returns its result once committed.
    /// An `Err` from `transition` rolls back its writes only.
    pub fn write<R, F>(&self, transition: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: FnOnce(&Store) -> Result<R, Error> + Send + 'static,
    {
        let (reply, answer) = mpsc::sync_channel::<Result<R, Error>>(1);
        let refusal = reply.clone();
        let job = Job {
            transition: Box::new(move |store| {
                let result = transition(store);
                let ok = result.is_ok();
                let deliver: Answer = Box::new(move |commit| {
                    let _ = reply.send(match commit {
                        Ok(()) => result,
                        Err(message) => Err(Error::Commit(message)),
                    });
                });
                (ok, deliver)
            }),
            refuse: Box::new(move |message| {
                let _ = refusal.send(Err(Error::Commit(message)));
            }),
        };
        {
            let queue = lock(&self.queue);
            let Some(queue) = queue.as_ref() else {
                return Err(Error::WriterStopped);
            };
            queue.send(job).map_err(|_| Error::WriterStopped)?;
        }
        // A dropped reply means the transition panicked (and was rolled back).
        answer.recv().map_err(|_| Error::WriterStopped)?
    }

    /// Transactions committed so far (each carries one or more transitions).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
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

fn drain(store: &Mutex<Store>, receiver: &Receiver<Job>, commits: &AtomicU64) {
    while let Ok(first) = receiver.recv() {
        let mut batch = VecDeque::from([first]);
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(job) => batch.push_back(job),
                Err(_) => break,
            }
        }
        let store = lock(store);
        while !batch.is_empty() {
            if commit_batch(&store, &mut batch) {
                commits.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Runs queued jobs in one transaction until the queue is empty or SQLite
/// drops the transaction; answers every job it ran. Whether it committed.
fn commit_batch(store: &Store, batch: &mut VecDeque<Job>) -> bool {
    let conn = &store.conn;
    if let Err(e) = conn.begin_write() {
        let message = e.to_string();
        for job in batch.drain(..) {
            refuse(job, &message);
        }
        return false;
    }
    let mut answers: Vec<Answer> = Vec::with_capacity(batch.len());
    let mut lost = None;
    while let Some(job) = batch.pop_front() {
        if let Err(e) = conn.savepoint(JOB_SAVEPOINT) {
            lost = Some(e.to_string());
            batch.push_front(job);
            break;
        }
        let Job { transition, .. } = job;
        match catch_unwind(AssertUnwindSafe(|| transition(store))) {
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
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (an I/O error or a
            // full disk does): nothing of this batch is on disk.
            lost = Some("the transaction was rolled back by SQLite".to_owned());
            break;
        }
    }
    let outcome = match lost {
        Some(message) => {
            if !conn.is_autocommit() {
                let _ = conn.rollback();
            }
            Err(message)
        }
        None => conn.commit().map_err(|e| {
            if !conn.is_autocommit() {
                let _ = conn.rollback();
            }
            e.to_string()
        }),
    };
    let committed = outcome.is_ok();
    for answer in answers {
        answer(outcome.clone());
    }
    committed
}

/// Answers a job that could not run, without running its transition.
fn refuse(job: Job, message: &str) {
    (job.refuse)(message.to_owned());
}
