//! `dwserver` as a child process, for the tests that need several of them
//! (a cluster on one store, a node on an SQS queue) or need one refused at
//! start: one place that spawns a node, reads the address it announces,
//! stops or kills it, and waits for a refused start to exit.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::wire;

/// A running `dwserver` child, killed and reaped when dropped.
pub struct Node {
    pub child: Child,
    /// `http://<addr>` it announced.
    pub base: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait until the process is gone.
    pub fn sigkill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// SIGTERM, and wait for the clean exit.
    pub fn stop(mut self) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = self.child.wait().expect("reaped");
        assert!(status.success(), "a stopped node exits 0: {status}");
    }
}

/// Starts `command` and waits for its `listening on` line.
pub fn start(mut command: Command) -> Node {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dwserver starts");
    let base = wire::announced_base(&mut child);
    Node { child, base }
}

/// Runs `command` to its end: a refused start exits at once; `limit` only
/// guards against a start that was not refused, which fails the test.
pub fn run_refused(mut command: Command, limit: Duration) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dwserver runs");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the start was not refused: the process still ran after {limit:?}: {}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}
