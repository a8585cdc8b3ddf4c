//! The shared store: group commit for writes, a WAL read pool for reads.

use crate::common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use dwengine::store::{Error, SharedStore};

fn shared(dir: &tempfile::TempDir) -> SharedStore {
    SharedStore::open(
        Some(&dir.path().join("runs.sqlite")),
        common::config(&[]),
        2,
    )
    .unwrap()
}

/// The writer's commit count with every commit answered so far in it.
///
/// A count read right after an answer can miss that answer's commit: the
/// writer counts a batch after it is committed, and on SQLite the syncer
/// may answer its callers before that. The writer does count a batch before
/// it begins the next, though, so a write's own transition (which runs in
/// a later batch than every commit already answered) reads a count with
/// all of them in. That write's own commit is not in it.
fn counted_commits(store: &Arc<SharedStore>) -> u64 {
    let counter = store.clone();
    store.write(move |_| Ok(counter.commits())).unwrap()
}

#[test]
fn concurrent_transitions_share_commits_and_each_is_answered_after_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(shared(&dir));
    let threads = 32;
    let per_thread = 10;
    let gate = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (store, gate) = (store.clone(), gate.clone());
            std::thread::spawn(move || {
                gate.wait();
                for i in 0..per_thread {
                    let id = format!("wf-{t}-{i}");
                    let run = store
                        .write(move |s| s.start_workflow(common::start(&id), None))
                        .unwrap()
                        .run;
                    // Answered only after the commit: a fresh read sees it.
                    let found = store.read(|s| s.run(run)).unwrap();
                    assert_eq!(found.workflow_id, format!("wf-{t}-{i}"));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let writes = (threads * per_thread) as u64;
    // Every commit counted: a count missing the last batches could pass a
    // writer that shared nothing.
    let commits = counted_commits(&store);
    assert!(
        commits >= 1,
        "a count that never moves would pass the check below"
    );
    assert!(
        commits < writes,
        "{writes} transitions took {commits} commits: none were shared"
    );
    let runs = store
        .read(|s| Ok(s.find_run("default", "wf-31-9")?.is_some()))
        .unwrap();
    assert!(runs);
    assert!(store.open_readers() <= 2, "the read pool stays bounded");
}

#[test]
fn a_failing_or_panicking_transition_rolls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(shared(&dir));
    let failing = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.write(|s| {
                s.start_workflow(common::start("doomed"), None)?;
                Err::<(), _>(Error::Abandoned("the caller gave up".into()))
            })
        })
    };
    let panicking = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.write(|s| {
                s.start_workflow(common::start("panicked"), None)?;
                if s.config().busy_timeout > Duration::ZERO {
                    panic!("a bug inside a transition");
                }
                Ok(())
            })
        })
    };
    let kept = store
        .write(|s| s.start_workflow(common::start("kept"), None))
        .unwrap();
    assert!(matches!(failing.join().unwrap(), Err(Error::Abandoned(_))));
    assert!(panicking.join().unwrap().is_err());
    let found = |id: &'static str| store.read(move |s| s.find_run("default", id)).unwrap();
    assert_eq!(found("kept"), Some(kept.run));
    assert_eq!(found("doomed"), None);
    assert_eq!(found("panicked"), None);
    // The writer survived the panic.
    store
        .write(|s| s.start_workflow(common::start("after"), None))
        .unwrap();
}

/// Jobs of one batch that fail or panic after starting a workflow leave
/// nothing of it, and their neighbours in the same transaction keep theirs:
/// each job's first write takes over the writer's savepoint for that job
/// rather than opening its own, so rolling back to it must undo exactly
/// that job. The counters the start's triggers keep (the series' starts,
/// the queue's ready workflow tasks) equal the rows left.
#[test]
fn failing_jobs_in_one_batch_leave_nothing_and_their_neighbours_everything() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(shared(&dir));
    // A first job holds the writer until the batch under test is queued
    // behind it, so that batch is one transaction.
    let (running, is_running) = std::sync::mpsc::channel();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let (answers, answered) = std::sync::mpsc::channel();
    let held = answers.clone();
    store.submit(
        move |s| {
            running.send(()).unwrap();
            wait.recv().unwrap();
            s.start_workflow(common::start("first"), None).map(|_| ())
        },
        move |result| held.send(("first", result.is_ok())).unwrap(),
    );
    is_running.recv().unwrap();
    // Read while the first job runs on the writer: every batch before its
    // own was counted before its own began.
    let commits = store.commits();
    for (id, outcome) in [
        ("kept-1", "ok"),
        ("failed", "error"),
        ("kept-2", "ok"),
        ("panicked", "panic"),
        ("failed-again", "error"),
        ("kept-3", "ok"),
    ] {
        let answers = answers.clone();
        store.submit(
            move |s| {
                s.start_workflow(common::start(id), None)?;
                match outcome {
                    "error" => Err(Error::Abandoned("the caller gave up".into())),
                    "panic" if s.config().busy_timeout > Duration::ZERO => {
                        panic!("a bug inside a transition")
                    }
                    _ => Ok(()),
                }
            },
            move |result| answers.send((id, result.is_ok())).unwrap(),
        );
    }
    drop(answers);
    go.send(()).unwrap();
    let mut results: Vec<_> = answered.iter().collect();
    results.sort();
    assert_eq!(
        results,
        vec![
            ("failed", false),
            ("failed-again", false),
            ("first", true),
            ("kept-1", true),
            ("kept-2", true),
            ("kept-3", true),
        ],
        "the panicking job's callback is dropped uncalled"
    );
    // The six shared at most one transaction beyond the first job's (they
    // may also have joined that one's); every commit answered is counted.
    let shared = counted_commits(&store) - commits;
    assert!(
        (1..=2).contains(&shared),
        "seven jobs took {shared} commits: the six queued behind the first did not share one"
    );
    let found = |id: &'static str| store.read(move |s| s.find_run("default", id)).unwrap();
    for kept in ["first", "kept-1", "kept-2", "kept-3"] {
        assert!(found(kept).is_some(), "{kept}");
    }
    for gone in ["failed", "panicked", "failed-again"] {
        assert_eq!(found(gone), None, "{gone}");
    }
    let db = rusqlite::Connection::open(dir.path().join("runs.sqlite")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT COUNT(*) FROM history_events"), 4);
    assert_eq!(count("SELECT COUNT(*) FROM run_summaries"), 4);
    common::assert_start_counters(&db, 4);
}

/// A submitted transition is answered through its callback, once, after
/// the commit (a fresh read sees it), without the caller waiting; a
/// failing one with its error, a panicking one by dropping the callback
/// uncalled.
#[test]
fn a_submitted_transition_answers_its_callback_once_after_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(shared(&dir));
    let (answers, answered) = std::sync::mpsc::channel();
    for i in 0..20 {
        let (answers, id) = (answers.clone(), format!("async-{i}"));
        store.submit(
            move |s| s.start_workflow(common::start(&id), None),
            move |started| answers.send(Some(started.map(|s| s.run))).unwrap(),
        );
    }
    let failing = answers.clone();
    store.submit(
        |s| {
            s.start_workflow(common::start("doomed"), None)?;
            Err::<(), _>(Error::Abandoned("the caller gave up".into()))
        },
        move |result| failing.send(result.err().map(Err)).unwrap(),
    );
    // The callback holds a sender: dropped uncalled, it closes.
    let (dropped, closed) = std::sync::mpsc::channel::<()>();
    store.submit(
        |s| {
            s.start_workflow(common::start("panicked"), None)?;
            if s.config().busy_timeout > Duration::ZERO {
                panic!("a bug inside a transition");
            }
            Ok(())
        },
        move |_| dropped.send(()).unwrap(),
    );
    drop(answers);
    let results: Vec<_> = answered.iter().collect();
    assert_eq!(results.len(), 21, "every callback ran once");
    for result in &results {
        match result {
            Some(Ok(run)) => {
                let found = store.read(|s| s.run(*run)).unwrap();
                assert!(found.workflow_id.starts_with("async-"));
            }
            Some(Err(Error::Abandoned(_))) => {}
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert!(
        closed.recv().is_err(),
        "the panicking transition's callback was dropped uncalled"
    );
    let found = |id: &'static str| store.read(move |s| s.find_run("default", id)).unwrap();
    assert_eq!(found("doomed"), None);
    assert_eq!(found("panicked"), None);
}

#[test]
fn reads_do_not_queue_behind_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(shared(&dir));
    let run = store
        .write(|s| s.start_workflow(common::start("a"), None))
        .unwrap()
        .run;
    // The write holds its transaction open, its change made, until the
    // read below has answered (or, if reads queued behind it, 60 s).
    let (inside, writing) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let slow = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.write(move |s| {
                s.cancel(run, "slow", None)?;
                inside.send(()).unwrap();
                // Err(Timeout) here: nothing released the write, so the read
                // was waiting for it.
                Ok(released.recv_timeout(Duration::from_secs(60)).is_ok())
            })
        })
    };
    writing
        .recv_timeout(Duration::from_secs(60))
        .expect("the write began");
    let described = store.read(|s| s.describe(run)).unwrap();
    // Answered while the write still held: released only now.
    let _ = release.send(());
    let held_until_released = slow.join().unwrap().unwrap();
    assert!(held_until_released, "a read waited for the writer");
    assert_eq!(
        described.run.status,
        dwengine::store::RunStatus::Running,
        "a read sees committed state only"
    );
    let described = store.read(|s| s.describe(run)).unwrap();
    assert_eq!(described.run.status, dwengine::store::RunStatus::Cancelled);
}
