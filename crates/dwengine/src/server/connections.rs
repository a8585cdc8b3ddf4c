//! The limits a node puts on its connections, as configured.
//!
//! Without them a client that opens sockets and never sends a byte (or
//! sends one a second) holds a file descriptor forever, and a thousand such
//! sockets take the process's last descriptor, so health checks go
//! unanswered. These settings are read by `server::serve`, which hands the
//! header-read timeout to hyper, caps open connections with a semaphore
//! around accept, and bounds each request body's read with a deadline;
//! `server.http.*` in the config file, `DW_SERVER_HTTP_*` in the
//! environment, all listed by `dwserver contract`.

use std::time::Duration;

/// Connection limits and timeouts of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections served at once; past it a connection is answered
    /// 503 `connection_limit` and closed. Lowered at start to fit the
    /// process's file-descriptor limit.
    pub max_connections: usize,
    /// How long a request head may take to arrive whole, counted from when
    /// the server starts waiting for it: on a new connection, and on a
    /// kept-alive one from its previous answer (so it is also the idle
    /// keep-alive timeout). hyper closes the connection when it passes.
    pub header_read_timeout: Duration,
    /// How long a request body may take to arrive whole; past it the
    /// request is answered 408 `request_body_timeout` and the connection closed.
    pub body_read_timeout: Duration,
    /// How long a stopping node lets in-flight requests finish after it
    /// stopped accepting (long polls and waits answer at once); then it exits.
    pub shutdown_deadline: Duration,
}

impl ConnectionLimits {
    /// `server.http.max_connections`.
    pub const MAX_CONNECTIONS_KEY: &'static str = "server.http.max_connections";
    /// `server.http.header_read_timeout_ms`.
    pub const HEADER_READ_TIMEOUT_KEY: &'static str = "server.http.header_read_timeout_ms";
    /// `server.http.body_read_timeout_ms`.
    pub const BODY_READ_TIMEOUT_KEY: &'static str = "server.http.body_read_timeout_ms";
    /// `server.http.shutdown_deadline_ms`.
    pub const SHUTDOWN_DEADLINE_KEY: &'static str = "server.http.shutdown_deadline_ms";

    /// The default connection cap.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
    /// File descriptors kept free of connections: the store, the cache,
    /// wait-slot lock files, logs and the refusals of connections past the cap.
    pub const RESERVED_DESCRIPTORS: u64 = 200;

    /// The connection cap that fits a process allowed `fd_limit` open
    /// files: the configured cap, or fewer so the reserve stays free.
    pub fn fitted(&self, fd_limit: Option<u64>) -> usize {
        match fd_limit {
            Some(limit) => {
                let room = limit.saturating_sub(Self::RESERVED_DESCRIPTORS).max(16);
                self.max_connections
                    .min(usize::try_from(room).unwrap_or(usize::MAX))
            }
            None => self.max_connections,
        }
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            shutdown_deadline: Duration::from_secs(20),
        }
    }
}

/// Connections the kernel may hold accepted-but-not-yet-taken for this
/// node (the `listen(2)` backlog; Linux caps it at `net.core.somaxconn`,
/// 4096 by default). `tokio::net::TcpListener::bind` asks for 128: a burst
/// of a few hundred clients connecting at once overflowed it, and with SYN
/// cookies on, the overflow was answered with resets (206 of 600 waiting
/// calls in the hostile suite).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (call within a runtime).
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As std and tokio bind: a restarted node may take its port back while
    // the old one's connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The process's soft limit on open files (Linux: /proc/self/limits).
pub fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_under_the_descriptor_limit() {
        let limits = ConnectionLimits::default();
        assert_eq!(limits.fitted(Some(1024)), 824);
        assert_eq!(limits.fitted(Some(1_000_000)), 4096);
        assert_eq!(limits.fitted(None), 4096);
        assert_eq!(limits.fitted(Some(100)), 16);
    }

    #[test]
    fn this_process_has_a_readable_limit_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(open_file_limit().is_some_and(|n| n > 0));
        }
    }
}
