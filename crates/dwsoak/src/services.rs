//! The services a managed soak owns: dwserver and, for Redis, redis-server.
//!
//! Owning them is what makes the samples evidence: the RSS is read from the
//! very process the load hits, the SQLite file is the one it writes, and the
//! Redis is used by nothing else. Each service logs into `build/perf/logs/`,
//! and is stopped (only the process this harness started) when dropped.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A service that could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start {service}: {message}")]
pub struct StartError {
    /// Which service.
    pub service: &'static str,
    /// Why.
    pub message: String,
}

fn failed(service: &'static str, message: impl Into<String>) -> StartError {
    StartError {
        service,
        message: message.into(),
    }
}

/// A dwserver this harness started.
#[derive(Debug)]
pub struct ManagedServer {
    child: Child,
    /// `http://ADDR`.
    pub base_url: String,
    /// Its SQLite file.
    pub database_path: PathBuf,
}

impl ManagedServer {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `bin` on an ephemeral loopback port with its store, wait
    /// slots and logs under `dir`, using Redis at `redis_url` when given.
    pub fn start(
        bin: &Path,
        dir: &Path,
        redis_url: Option<&str>,
    ) -> Result<ManagedServer, StartError> {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| failed("dwserver", e.to_string()))?;
        let database_path = dir.join("dwserver.sqlite3");
        for stale in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{stale}", database_path.display()));
        }
        let log = File::create(logs.join("dwserver.log"))
            .map_err(|e| failed("dwserver", e.to_string()))?;
        let stderr = log
            .try_clone()
            .map_err(|e| failed("dwserver", e.to_string()))?;
        let mut command = Command::new(bin);
        command
            .env("DW_SERVER_ID", "dwsoak-node-1")
            .env("DW_BIND", "127.0.0.1:0")
            // A loopback server only the harness talks to: no tokens.
            .env("DW_AUTH", "none")
            .env("DW_DATABASE_PATH", &database_path)
            .env("DW_POLLING_CACHE_PATH", dir.join("polling-cache"))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env_remove("DW_REDIS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        if let Some(url) = redis_url {
            command.env("DW_REDIS_URL", url);
        }
        let mut child = command.spawn().map_err(|e| {
            failed(
                "dwserver",
                format!("{}: {e} (build it with `cargo build -p dwengine --bin dwserver`, or pass --server-bin)", bin.display()),
            )
        })?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed("dwserver", "no stdout"))?;
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        let read = lines.read_line(&mut first);
        let addr = match (read, first.trim().strip_prefix("listening on ")) {
            (Ok(_), Some(addr)) => addr.to_owned(),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(
                    "dwserver",
                    format!(
                        "it did not report its address (see {})",
                        logs.join("dwserver.log").display()
                    ),
                ));
            }
        };
        // Keep draining stdout into the log so the server never blocks on a full pipe.
        let mut log_out = log;
        let _ = writeln!(log_out, "{}", first.trim_end());
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                let _ = writeln!(log_out, "{line}");
            }
        });
        Ok(ManagedServer {
            child,
            base_url: format!("http://{addr}"),
            database_path,
        })
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A redis-server this harness started.
#[derive(Debug)]
pub struct ManagedRedis {
    child: Child,
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
}

impl ManagedRedis {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `bin` without persistence on a free loopback port, logging to `dir/logs/redis.log`.
    pub fn start(bin: &Path, dir: &Path) -> Result<ManagedRedis, StartError> {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| failed("redis-server", e.to_string()))?;
        let port = free_port().map_err(|e| failed("redis-server", e.to_string()))?;
        let log = logs.join("redis.log");
        let child = Command::new(bin)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                failed(
                    "redis-server",
                    format!(
                        "{}: {e} (install redis-server, or pass --redis-server-bin)",
                        bin.display()
                    ),
                )
            })?;
        let redis = ManagedRedis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let client = redis::Client::open(redis.url.as_str())
            .map_err(|e| failed("redis-server", e.to_string()))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pong = client
                .get_connection_with_timeout(Duration::from_millis(200))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if pong.is_ok() {
                return Ok(redis);
            }
            if Instant::now() >= deadline {
                return Err(failed(
                    "redis-server",
                    format!("no PONG within 10 s (see {})", log.display()),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ManagedRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The dwserver next to this binary (`target/debug/dwserver` beside `target/debug/dwsoak`).
pub fn default_server_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("dwserver")))
        .unwrap_or_else(|| PathBuf::from("dwserver"))
}
