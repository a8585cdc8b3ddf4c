//! Wait slots across real processes: a killed holder frees its slot at once.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::process::Node;

fn spawn(cache_path: &Path) -> Node {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .env("DW_SERVER_ID", "node-restartable")
        .env("DW_AUTH", "none")
        .env("DW_BIND", "127.0.0.1:0")
        .env("DW_DATABASE_PATH", ":memory:")
        .env("DW_POLLING_CACHE_PATH", cache_path)
        .env("DW_LONG_POLL_MAX_WAITS", "1")
        .env_remove("DW_REDIS_URL")
        // Warnings reach the test output; the start-up record does not.
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("dwserver starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the first line names the address");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Node {
        child,
        base: format!("http://{addr}"),
    }
}

fn poll(base: &str, id: &str, timeout_ms: u64) -> (u16, Value) {
    let body = json!({ "task_queue": "q", "worker_id": "w",
                       "poll_request_id": id, "timeout_seconds": timeout_ms as f64 / 1000.0 });
    match ureq::post(&format!("{base}/api/worker/workflow-tasks/poll")).send_json(body) {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => (0, json!({ "transport": e.to_string() })),
    }
}

fn slot_files(root: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let Ok(nodes) = std::fs::read_dir(root.join("wait-slots")) else {
        return files;
    };
    for node in nodes.flatten() {
        let pool = node.path().join("workflow");
        for entry in std::fs::read_dir(pool).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with("slot-") {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    files
}

#[test]
fn killing_a_holder_releases_its_slot_and_the_next_admission_reuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = spawn(dir.path());
    let base = first.base.clone();
    // A long poll on an empty queue holds the node's only wait slot.
    let holder = std::thread::spawn(move || poll(&base, "holder", 30_000));
    let deadline = Instant::now() + Duration::from_secs(10);
    while slot_files(dir.path()).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = slot_files(dir.path());
    assert_eq!(held.len(), 1, "the wait holds one slot file");
    let (status, refused) = poll(&first.base, "second", 1_000);
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["cap"], "global_cap");

    let mut first = first;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let _ = holder.join();

    // The kernel released the dead holder's lock: a restarted node with the
    // same id admits a wait at once and reuses the same file.
    let second = spawn(dir.path());
    // Admitted (a slot still held would answer 429 at once), not left
    // waiting on the dead holder's lock: its 300 ms wait ends it.
    let (status, answer) = poll(&second.base, "after-restart", 300);
    assert_eq!(status, 200, "{answer}");
    assert!(answer["task"].is_null());
    assert_eq!(answer["poll_status"], "timeout", "{answer}");
    assert_eq!(
        slot_files(dir.path()),
        held,
        "the idle slot file was reused, not duplicated"
    );
}

/// A wait-slot directory that cannot be created (here under a regular
/// file; a read-only mount fails the same way) refuses the start: the
/// process exits non-zero at once, naming the path, before it listens.
#[test]
fn an_unwritable_wait_slot_directory_refuses_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, b"a file").unwrap();
    let unwritable = file.join("polling");
    let output = Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .env("DW_SERVER_ID", "node-unwritable")
        .env("DW_AUTH", "none")
        .env("DW_BIND", "127.0.0.1:0")
        .env("DW_DATABASE_PATH", ":memory:")
        .env("DW_POLLING_CACHE_PATH", &unwritable)
        .env_remove("DW_REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("dwserver runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("listening on"),
        "it never listened: {stdout}"
    );
    assert!(
        stderr.contains("wait slot storage") && stderr.contains("not-a-directory"),
        "the error names the storage and its path: {stderr}"
    );
}
