//! Workflow starts staged by the SQLite writer and written with their
//! batch's other starts in one statement per table: the same rows, answers
//! and counters as starts written one by one, whatever else the batch holds.

use crate::common;
use crate::support::{self, TestServer};

use std::sync::mpsc;
use std::sync::Arc;

use dwengine::store::build_id_rollouts::RolloutAction;
use dwengine::store::{Error, SharedStore, Started};
use serde_json::json;

fn shared(dir: &tempfile::TempDir) -> SharedStore {
    SharedStore::open(
        Some(&dir.path().join("runs.sqlite")),
        common::config(&[]),
        2,
    )
    .unwrap()
}

/// Queues a job that runs first and holds the writer until the returned
/// sender sends, so everything queued meanwhile commits after it, in as
/// few transactions as the writer makes of its queue.
fn hold_writer(store: &SharedStore) -> mpsc::Sender<()> {
    let (running, is_running) = mpsc::channel();
    let (go, wait) = mpsc::channel::<()>();
    store.submit(
        move |_| {
            running.send(()).unwrap();
            wait.recv().unwrap();
            Ok(())
        },
        |_: Result<(), Error>| {},
    );
    is_running.recv().unwrap();
    go
}

type Answer = (&'static str, Result<Started, Error>);

/// Queues a staged start of `id` (with `request` as its request id) that
/// answers on `answers`.
fn stage(
    store: &SharedStore,
    answers: &mpsc::Sender<Answer>,
    id: &'static str,
    request: Option<&'static str>,
) {
    let answers = answers.clone();
    store.submit_start(
        "default".into(),
        id.into(),
        move |s| s.start_workflow_timed(common::start(id), request, Some(600), None),
        move |started| answers.send((id, started)).unwrap(),
    );
}

/// One batch mixing staged starts with an ordinary job, a retry of a
/// staged start's request id (queued right behind it), and a staged start
/// whose transition fails:
/// the ordinary job sees the starts queued before it (they are written
/// before it runs), the retry finds the run its first attempt staged, the
/// failed start leaves nothing, and the staged runs' rows equal a start's
/// written on its own, as do the counters the triggers keep. The writer
/// counts the four starts it wrote from its staging.
#[test]
fn staged_starts_write_what_separate_starts_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(shared(&dir));
    // Written on its own (an ordinary job): the rows to compare with.
    let reference = store
        .write(|s| {
            s.start_workflow_timed(common::start("reference"), Some("req-ref"), Some(600), None)
        })
        .unwrap()
        .run;
    let before = store.staged_starts();
    let go = hold_writer(&store);
    let (answers, answered) = mpsc::channel();
    stage(&store, &answers, "staged-01", Some("req-s01"));
    // Its key is staged: the writer writes the staging before it runs.
    stage(&store, &answers, "staged-01", Some("req-s01"));
    stage(&store, &answers, "staged-02", None);
    let (seen, saw) = mpsc::channel();
    store.submit(
        |s| {
            Ok([
                s.find_run("default", "staged-01")?,
                s.find_run("default", "staged-02")?,
            ])
        },
        move |found: Result<[Option<_>; 2], Error>| seen.send(found).unwrap(),
    );
    stage(&store, &answers, "staged-03", None);
    let failing = answers.clone();
    store.submit_start(
        "default".into(),
        "doomed".into(),
        |s| {
            s.start_workflow(common::start("doomed"), None)?;
            Err::<Started, _>(Error::Abandoned("the caller gave up".into()))
        },
        move |started| failing.send(("doomed", started)).unwrap(),
    );
    stage(&store, &answers, "staged-04", None);
    drop(answers);
    go.send(()).unwrap();

    let results: Vec<Answer> = answered.iter().collect();
    assert_eq!(results.len(), 6, "every start answered once");
    let run_of = |id: &str, duplicate: bool| {
        let runs: Vec<_> = results
            .iter()
            .filter_map(|(i, r)| match r {
                Ok(started) if *i == id && started.duplicate == duplicate => Some(started.run),
                _ => None,
            })
            .collect();
        assert_eq!(runs.len(), 1, "{id} (duplicate: {duplicate}): {results:?}");
        runs[0]
    };
    let first = run_of("staged-01", false);
    assert_eq!(
        run_of("staged-01", true),
        first,
        "the retry answers the run its first attempt staged"
    );
    let others = [
        run_of("staged-02", false),
        run_of("staged-03", false),
        run_of("staged-04", false),
    ];
    assert!(results
        .iter()
        .any(|(id, r)| *id == "doomed" && matches!(r, Err(Error::Abandoned(_)))));
    let found = saw.recv().unwrap().unwrap();
    assert_eq!(
        found,
        [Some(first), Some(others[0])],
        "a job after staged starts sees them"
    );
    assert_eq!(
        store.staged_starts() - before,
        4,
        "the four new runs were written from the staging, the retry and the failed start not"
    );

    let db = rusqlite::Connection::open(dir.path().join("runs.sqlite")).unwrap();
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT COUNT(*) FROM runs"), 5);
    assert_eq!(
        count("SELECT COUNT(*) FROM runs WHERE workflow_id = 'doomed'"),
        0
    );
    // A run's row, event and task, with what names the run blanked out.
    let row = |run: i64| -> String {
        db.query_row(
            "SELECT json_array(r.workflow_type, r.namespace, r.task_queue, r.status, r.origin, \
             r.parent_run_id, r.memo, r.search_attributes, r.history_length, r.history_bytes, \
             r.execution_timeout_seconds, r.run_timeout_seconds, r.deadline_at_ms - r.created_at_ms, \
             r.deadline_kind, r.build_id, r.pending_activity_count, r.command_count, \
             (SELECT json_group_array(json_array(e.sequence, e.event_type, \
                  replace(e.payload, r.workflow_id, 'ID'), e.command_index)) \
              FROM history_events e WHERE e.run_id = r.id), \
             (SELECT json_group_array(json_array(t.kind, t.namespace, t.task_queue, t.status, \
                  t.due_at_ms <= t.created_at_ms, t.attempt)) \
              FROM dispatch_tasks t WHERE t.run_id = r.id), \
             (SELECT json_group_array(json_array(m.namespace, m.workflow_id = r.workflow_id, \
                  m.workflow_type, m.task_queue, m.status, m.history_length, \
                  m.created_at_ms = r.created_at_ms, m.closed_at_ms)) \
              FROM run_summaries m WHERE m.run_id = r.id), \
             (SELECT json_group_array(json_array(l.sequence, l.event_type, \
                  l.recorded_at_ms = e.recorded_at_ms)) \
              FROM run_timeline_entries l JOIN history_events e \
                  ON e.run_id = l.run_id AND e.sequence = l.sequence \
              WHERE l.run_id = r.id)) \
             FROM runs r WHERE r.id = ?1",
            [run],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert!(
        row(first.0).contains("[[0,\"WorkflowStarted\",1]]"),
        "its timeline entry: {}",
        row(first.0)
    );
    assert!(
        row(first.0).contains("\"WorkflowStarted\""),
        "{}",
        row(first.0)
    );
    for run in [first, others[0], others[1], others[2]] {
        assert_eq!(row(run.0), row(reference.0));
    }
    let request = |run: dwengine::store::RunId| -> Option<String> {
        db.query_row(
            "SELECT start_request_id FROM runs WHERE id = ?1",
            [run.0],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(request(first).as_deref(), Some("req-s01"));
    assert_eq!(request(others[0]), None);
    common::assert_start_counters(&db, 5);
    let ids: Vec<i64> = [reference, first, others[0], others[1], others[2]]
        .iter()
        .map(|r| r.0)
        .collect();
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "{ids:?}");
}

/// A staged start on a queue with a promoted build is pinned to it, as a
/// start written on its own is (`runs.build_id` in its one insert rather
/// than an update after it).
#[test]
fn a_staged_start_is_pinned_to_its_queues_promoted_build() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(shared(&dir));
    store
        .write(|s| {
            s.set_build_id_rollout("default", "orders", Some("v2"), RolloutAction::Promote)
                .map(|r| r.expect("the promotion is written"))
        })
        .unwrap();
    let before = store.staged_starts();
    let (answer, answered) = mpsc::channel();
    // As the server's start: the run, then its pin.
    store.submit_start(
        "default".into(),
        "pinned".into(),
        |s| {
            let started = s.start_workflow(common::start("pinned"), None)?;
            s.pin_started_run(started.run, "default", "orders", None)?;
            Ok(started)
        },
        move |started| answer.send(started).unwrap(),
    );
    let run = answered.recv().unwrap().unwrap().run;
    assert_eq!(store.staged_starts() - before, 1);
    let build = store.read(move |s| s.run(run)).unwrap().build_id;
    assert_eq!(build.as_deref(), Some("v2"));
}

/// A start over HTTP on an SQLite node goes through the staging: the
/// operator metrics count it, and its first workflow task is polled as
/// any start's.
#[test]
fn a_start_over_http_is_staged_and_its_task_polled() {
    let s = TestServer::start(support::memory_cache(), |_| {});
    let staged = || s.get("/api/system/operator-metrics").1["staged_starts"].clone();
    let before = staged().as_u64().expect("a count");
    s.start_workflow("default", "over-http", "staged-q");
    if common::postgres() {
        assert_eq!(staged(), json!(0), "PostgreSQL nodes stage nothing");
    } else {
        assert_eq!(staged(), json!(before + 1));
    }
    let task = support::next_workflow_task(&s, "staged-q");
    assert_eq!(task["workflow_id"], "over-http", "{task}");
}

/// A batch whose staged starts do not fit on disk (the store at its
/// `max_page_count`, as a full disk fails a write) fails as a whole: every
/// start of it is told so, none leaves a row, and the starts answered as
/// written have their run, event and task, with the counters equal to
/// the rows.
#[test]
fn staged_starts_that_do_not_fit_fail_their_batch_and_leave_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::config(&[]);
    let store = Arc::new(
        SharedStore::open(Some(&dir.path().join("runs.sqlite")), config.clone(), 2).unwrap(),
    );
    // The pages the schema and one start take, and then room for a few
    // batches more: the starts below fill it.
    let pages = |path: &std::path::Path| -> u64 {
        let db = rusqlite::Connection::open(path).unwrap();
        db.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap()
    };
    store
        .write(|s| s.start_workflow(common::start("first"), None))
        .unwrap();
    drop(store);
    let path = dir.path().join("runs.sqlite");
    config.max_page_count = Some(pages(&path) + 40);
    let store = Arc::new(SharedStore::open(Some(&path), config, 2).unwrap());
    let (answers, answered) = mpsc::channel();
    let mut refused = 0;
    let mut written = Vec::new();
    for round in 0..200 {
        let go = hold_writer(&store);
        for i in 0..16 {
            let answers = answers.clone();
            let id = format!("fill-{round}-{i}");
            store.submit_start(
                "default".into(),
                id.clone(),
                move |s| s.start_workflow(common::start(&id), None),
                move |started| {
                    answers
                        .send((format!("fill-{round}-{i}"), started))
                        .unwrap()
                },
            );
        }
        go.send(()).unwrap();
        for _ in 0..16 {
            let (id, started) = answered.recv().unwrap();
            match started {
                Ok(started) => written.push((id, started.run)),
                Err(e) => {
                    assert!(e.is_disk_full(), "{e}");
                    refused += 1;
                    let found = store
                        .read({
                            let id = id.clone();
                            move |s| s.find_run("default", &id)
                        })
                        .unwrap();
                    assert_eq!(found, None, "{id} was refused but left its run");
                }
            }
        }
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "the store never filled up");
    assert!(!written.is_empty(), "no batch fit before it filled");
    for (id, run) in &written {
        let history = store.read({
            let run = *run;
            move |s| s.history(run)
        });
        assert_eq!(history.unwrap().len(), 1, "{id}");
    }
    drop(store);
    let db = rusqlite::Connection::open(&path).unwrap();
    common::assert_start_counters(&db, 1 + written.len() as i64);
    let flushing: i64 = db
        .query_row("SELECT count(*) FROM staged_start_flush", [], |r| r.get(0))
        .unwrap();
    assert_eq!(flushing, 0, "a failed flush leaves the triggers counting");
}

/// A flush moves its queue's minute bucket once when the minute turned,
/// as `task_queue_state_add` moves it for a start written on its own:
/// the bucket older than a minute is dropped, the dispatches zeroed, and
/// the added count is the batch's starts.
#[test]
fn a_flush_moves_a_turned_minute_as_a_start_written_alone_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(shared(&dir));
    store
        .write(|s| s.start_workflow(common::start("reference"), None))
        .unwrap();
    let db = rusqlite::Connection::open(dir.path().join("runs.sqlite")).unwrap();
    // Last written in a minute long gone, with counts of its own.
    db.execute(
        "UPDATE task_queue_state SET recent_minute = 7, added_recent = 5, added_before = 3, \
         dispatched_recent = 9, dispatched_before = 2",
        [],
    )
    .unwrap();
    let before = store.staged_starts();
    let go = hold_writer(&store);
    let (answers, answered) = mpsc::channel();
    for id in ["minute-1", "minute-2", "minute-3"] {
        stage(&store, &answers, id, None);
    }
    drop(answers);
    go.send(()).unwrap();
    assert_eq!(answered.iter().filter(|(_, r)| r.is_ok()).count(), 3);
    assert_eq!(store.staged_starts() - before, 3);
    let bucket: (i64, i64, i64, i64, i64, i64) = db
        .query_row(
            "SELECT recent_minute, added_recent, added_before, dispatched_recent, \
             dispatched_before, workflow_ready FROM task_queue_state",
            [],
            |r| r.try_into(),
        )
        .unwrap();
    let minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        / 60;
    assert!((minute - 1..=minute).contains(&bucket.0), "{bucket:?}");
    assert_eq!(
        (bucket.1, bucket.2, bucket.3, bucket.4, bucket.5),
        (3, 0, 0, 0, 4),
        "(added, added before, dispatched, dispatched before, ready)"
    );
    let started: i64 = db
        .query_row("SELECT started FROM workflow_run_series", [], |r| r.get(0))
        .unwrap();
    assert_eq!(started, 4, "the series counts each start once");
}
