//! A process killed in the middle of a task leaves no partial rows.
//!
//! The test re-executes its own binary as a child process that opens the
//! store, starts a task, writes a fan-out's worth of rows and then waits to
//! be killed with the task still open; the parent kills it (SIGKILL on
//! Unix), reopens the file and checks that none of the task's writes exist.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dwengine::store::{ChildWorkflow, Next, RunId, RunStatus, Store};
use serde_json::{json, Map};

const DB_ENV: &str = "DWENGINE_CRASH_TEST_DB";
const RUN_ENV: &str = "DWENGINE_CRASH_TEST_RUN";
const MID_TASK: &str = "mid-task: rows written, not committed";

/// The child's side. Without the variables it is not a child and does nothing.
#[test]
fn crash_child_process() {
    let (Ok(path), Ok(run)) = (std::env::var(DB_ENV), std::env::var(RUN_ENV)) else {
        return;
    };
    let run = RunId(run.parse().unwrap());
    let store = Store::open(path, common::config(&[])).unwrap();
    let _ = store.execute_task(run, |task| {
        for i in 0..50 {
            task.schedule_activity("charge", &json!({ "i": i }))?;
        }
        task.start_timer(Duration::from_secs(60))?;
        task.start_child(&ChildWorkflow {
            workflow_id: "child".into(),
            workflow_type: "Child".into(),
            arguments: json!(null),
        })?;
        let mut memo = Map::new();
        memo.insert("stage".into(), json!("half-way"));
        task.upsert_memo(memo)?;
        println!("{MID_TASK}");
        std::thread::sleep(Duration::from_secs(120));
        Ok(Next::Wait)
    });
    panic!("the parent should have killed this process");
}

#[test]
fn a_task_killed_mid_way_leaves_no_partial_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.sqlite");
    let run = {
        let mut store = Store::open(&path, common::config(&[])).unwrap();
        common::started(&mut store, "crash")
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &crate::support::test_path(module_path!(), "crash_child_process"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DB_ENV, &path)
        .env(RUN_ENV, run.0.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains(MID_TASK) {
                let _ = tx.send(());
                return;
            }
        }
    });
    let reached = rx.recv_timeout(Duration::from_secs(60));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(
        reached.is_ok(),
        "the child never reached the middle of its task"
    );
    assert!(!status.success(), "the child was killed, not finished");

    let store = Store::open(&path, common::config(&[])).unwrap();
    let state = store.run(run).unwrap();
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.history_length, 1, "only the start event");
    assert!(state.memo.is_empty());
    assert_eq!(state.pending, Default::default());
    let check = rusqlite::Connection::open(&path).unwrap();
    for table in ["activities", "timers", "children", "failures"] {
        let rows: i64 = check
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0, "{table} kept a partial row");
    }
    let runs: i64 = check
        .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 1, "the child run row was not kept");
    // The lock died with the process: the run takes a new task at once.
    let report = store
        .execute_task(run, |task| {
            task.schedule_activity("charge", &1)?;
            Ok(Next::Wait)
        })
        .unwrap();
    assert_eq!(report.new_events, 1);
}
