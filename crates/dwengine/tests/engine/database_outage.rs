//! The database goes away under a node and comes back (PostgreSQL).
//!
//! The node reaches PostgreSQL through a TCP relay of the test's own that
//! can be cut: every relayed connection is shut and each new one is closed
//! as it is accepted, which is what a node sees when the server stops or
//! the network between them fails. While cut, the node answers every call
//! with 503 `database_unavailable` (never 500, never a hang), `/api/ready`
//! says the store is unavailable; once restored it writes and reads again
//! without a restart. conformance/db-outage does the same to a real server
//! (`pg_ctl stop`) under the Python SDK's load.

#[cfg(dw_test_postgres)]
mod relay {
    use std::io::{self, Read, Write};
    use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    /// A TCP relay to `upstream` the test can cut and restore.
    pub struct Relay {
        pub addr: SocketAddr,
        cut: Arc<AtomicBool>,
        stopped: Arc<AtomicBool>,
        open: Arc<Mutex<Vec<TcpStream>>>,
    }

    impl Relay {
        pub fn start(upstream: SocketAddr) -> Relay {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
            let addr = listener.local_addr().unwrap();
            let cut = Arc::new(AtomicBool::new(false));
            let stopped = Arc::new(AtomicBool::new(false));
            let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
            let (c, s, o) = (cut.clone(), stopped.clone(), open.clone());
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if s.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    if c.load(Ordering::SeqCst) {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(upstream) else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    let mut held = o.lock().unwrap();
                    held.push(client.try_clone().unwrap());
                    held.push(server.try_clone().unwrap());
                    drop(held);
                    pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                    pipe(server, client);
                }
            });
            Relay {
                addr,
                cut,
                stopped,
                open,
            }
        }

        /// Shuts every relayed connection; new ones are closed at once.
        pub fn cut(&self) {
            self.cut.store(true, Ordering::SeqCst);
            self.drop_connections();
        }

        /// Shuts every relayed connection (new ones are relayed).
        pub fn drop_connections(&self) {
            for stream in self.open.lock().unwrap().drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }

        /// Relays new connections again.
        pub fn restore(&self) {
            self.cut.store(false, Ordering::SeqCst);
        }
    }

    impl Drop for Relay {
        fn drop(&mut self) {
            self.stopped.store(true, Ordering::SeqCst);
            self.cut();
            // Wakes the accepting thread so it sees `stopped`.
            let _ = TcpStream::connect(self.addr);
        }
    }

    /// Copies `from` to `to` on a thread until either side closes.
    fn pipe(mut from: TcpStream, mut to: TcpStream) {
        std::thread::spawn(move || {
            let mut buffer = [0u8; 16 * 1024];
            loop {
                match from.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if to.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _: io::Result<()> = to.shutdown(Shutdown::Both);
            let _: io::Result<()> = from.shutdown(Shutdown::Both);
        });
    }
}

#[cfg(dw_test_postgres)]
use std::time::Duration;

#[cfg(dw_test_postgres)]
use serde_json::{json, Value};

#[cfg(dw_test_postgres)]
use crate::support::{eventually, memory_cache, TestServer};

/// A node on a schema of its own of `DW_TEST_POSTGRES_URL`, reached
/// through a relay the test cuts.
#[cfg(dw_test_postgres)]
fn node_behind_a_relay() -> (TestServer, relay::Relay) {
    let url = crate::common::postgres_schema_url();
    let config: postgres::Config = url.parse().expect("DW_TEST_POSTGRES_URL is a URL");
    let host = match &config.get_hosts()[0] {
        postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("DW_TEST_POSTGRES_URL must name a TCP host, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let upstream = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .expect("resolve the PostgreSQL host")
        .next()
        .expect("an address of the PostgreSQL host");
    let relay = relay::Relay::start(upstream);
    let authority = format!("{host}:{port}");
    assert!(
        url.contains(&authority),
        "write DW_TEST_POSTGRES_URL with an explicit host:port ({url})"
    );
    let through_relay = url.replacen(&authority, &relay.addr.to_string(), 1);
    let server = TestServer::start(memory_cache(), |c| c.database_url = Some(through_relay));
    (server, relay)
}

#[cfg(dw_test_postgres)]
fn start_body(workflow_id: &str) -> Value {
    json!({
        "workflow_id": workflow_id, "workflow_type": "outage", "task_queue": "outage",
        "input": {"codec": "json", "blob": "[1]"},
    })
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_node_whose_database_is_gone_answers_503_and_serves_again_when_it_is_back() {
    #[cfg(dw_test_postgres)]
    {
        let (s, relay) = node_behind_a_relay();
        assert_eq!(s.post("/api/workflows", start_body("before")).0, 201);

        relay.cut();
        // A write: refused with the reason, retryable, a Retry-After.
        let (status, body, retry_after) = s.post_ns_header(
            "default",
            "/api/workflows",
            start_body("during"),
            "retry-after",
        );
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["reason"], "database_unavailable", "{body}");
        assert_eq!(body["retryable"], true, "{body}");
        assert_eq!(retry_after.as_deref(), Some("1"), "{body}");
        // A read: the same refusal, not a 500.
        let (status, body) = s.get("/api/workflows/before");
        assert_eq!(
            (status, &body["reason"]),
            (503, &json!("database_unavailable")),
            "{body}"
        );
        // The probes answer: not ready (the store), not serving.
        let (status, body) = s.get("/api/ready");
        assert_eq!(
            (status, &body["checks"]["store"]),
            (503, &json!("unavailable")),
            "{body}"
        );
        assert_eq!(s.get("/api/health").0, 503);
        // Still refused, however often asked: the writer retries its
        // session without holding callers.
        for n in 0..5 {
            let (status, body) = s.post("/api/workflows", start_body(&format!("during-{n}")));
            assert_eq!(status, 503, "{body}");
        }

        relay.restore();
        assert!(
            eventually(Duration::from_secs(60), || s.get("/api/ready").0 == 200),
            "ready again once the database is back: {}",
            s.get("/api/ready").1
        );
        assert!(
            eventually(Duration::from_secs(60), || {
                s.post("/api/workflows", start_body("after")).0 == 201
            }),
            "starts again once the database is back"
        );
        assert_eq!(s.get("/api/workflows/before").0, 200);
        assert_eq!(s.get("/api/workflows/after").0, 200);
        // What was refused was not written.
        assert_eq!(s.get("/api/workflows/during").0, 404);
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_node_idle_through_a_database_restart_serves_its_next_calls_at_once() {
    #[cfg(dw_test_postgres)]
    {
        let (s, relay) = node_behind_a_relay();
        assert_eq!(s.post("/api/workflows", start_body("before")).0, 201);
        assert_eq!(s.get("/api/workflows/before").0, 200);
        // Every session the node holds is dropped while nothing is asked of
        // it (the server restarted), and new ones connect at once.
        relay.drop_connections();
        // The first write and the first read find their sessions gone
        // before anything ran on them and begin again on new ones: no
        // caller sees the restart.
        let (status, body) = s.post("/api/workflows", start_body("after"));
        assert_eq!(status, 201, "{body}");
        let (status, body) = s.get("/api/workflows/before");
        assert_eq!(status, 200, "{body}");
        let (status, body) = s.get("/api/ready");
        assert_eq!(status, 200, "{body}");
    }
}
