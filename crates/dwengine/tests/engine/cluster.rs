//! Several dwserver processes side by side: the real binary, started and
//! killed as an operator (or a crash) would.
//!
//! One SQLite file serves one process: a second one pointed at it refuses
//! to start, before it listens, naming the file and the holder; the lock
//! goes with its holder, whether it stops or is SIGKILLed.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::wire;

/// A dwserver child; killed (SIGKILL) on drop if still running.
struct Node {
    child: Child,
    base: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait until the process is gone.
    fn sigkill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// SIGTERM, and wait for the clean exit.
    fn stop(mut self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = self.child.wait().expect("reaped");
        assert!(status.success(), "a stopped node exits 0: {status}");
    }
}

/// The command of a node `id` on `database` (`DW_DATABASE_PATH`), its own
/// wait-slot directory under `dir`.
fn command(dir: &Path, id: &str, database: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dwserver"));
    command
        .env("DW_SERVER_ID", id)
        .env("DW_AUTH", "none")
        .env("DW_BIND", "127.0.0.1:0")
        .env("DW_DATABASE_PATH", database)
        .env("DW_POLLING_CACHE_PATH", dir.join(format!("polling-{id}")))
        .env_remove("DW_REDIS_URL")
        .env_remove("DW_CONFIG")
        .stdin(Stdio::null());
    command
}

/// `GET base+path` → (status, JSON body).
fn get(base: &str, path: &str) -> (u16, serde_json::Value) {
    match ureq::get(&format!("{base}{path}"))
        .timeout(Duration::from_secs(10))
        .call()
    {
        Ok(r) => (r.status(), r.into_json().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or_default()),
        Err(e) => panic!("GET {base}{path}: {e}"),
    }
}

/// Starts `command` and waits for its `listening on` line.
fn start(mut command: Command) -> Node {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dwserver starts");
    let base = wire::announced_base(&mut child);
    Node { child, base }
}

/// Runs `command` to its end (a refused start exits at once; the deadline
/// only guards against a start that was not refused).
fn run_refused(mut command: Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dwserver runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the second process did not exit: {}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts `output` is a refusal (exit 1, never listening) whose error
/// names `database` and the holder `holder_id` with its pid.
fn assert_refused(output: &Output, database: &str, holder_id: &str, holder_pid: u32) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("listening on"),
        "it never listened: {stdout}"
    );
    for expected in [
        database,
        "is in use by another dwserver process",
        &format!("pid {holder_pid}"),
        &format!("DW_SERVER_ID \"{holder_id}\""),
    ] {
        assert!(
            stderr.contains(expected),
            "the error says {expected:?}: {stderr}"
        );
    }
}

#[test]
fn a_second_process_on_one_sqlite_file_is_refused_until_the_holder_stops_or_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.sqlite");
    let first = start(command(dir.path(), "node-a", &db));
    let (status, _) = get(&first.base, "/api/health");
    assert_eq!(status, 200);

    // The same file, through a symbolic link: still the same file.
    let alias = dir.path().join("alias.sqlite");
    std::os::unix::fs::symlink(&db, &alias).unwrap();
    for path in [&db, &alias] {
        let refused = run_refused(command(dir.path(), "node-b", path));
        assert_refused(&refused, "shared.sqlite", "node-a", first.pid());
    }
    // The refused process changed nothing: the first still serves.
    assert_eq!(get(&first.base, "/api/health").0, 200);

    // SIGKILL: the kernel releases the lock with the process.
    first.sigkill();
    let second = start(command(dir.path(), "node-b", &db));
    assert_eq!(get(&second.base, "/api/health").0, 200);
    let refused = run_refused(command(dir.path(), "node-c", &db));
    assert_refused(&refused, "shared.sqlite", "node-b", second.pid());

    // A clean stop releases it too.
    second.stop();
    let third = start(command(dir.path(), "node-c", &db));
    assert_eq!(get(&third.base, "/api/health").0, 200);
}

#[test]
fn in_memory_stores_take_no_lock() {
    let dir = tempfile::tempdir().unwrap();
    let memory = Path::new(":memory:");
    let a = start(command(dir.path(), "mem-a", memory));
    let b = start(command(dir.path(), "mem-b", memory));
    assert_eq!(get(&a.base, "/api/health").0, 200);
    assert_eq!(get(&b.base, "/api/health").0, 200);
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".lock")));
}
