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
//!
//! A node also refuses to start, with a clear error, on a database it
//! cannot use: one that does not answer (refused, or hung past the
//! connect timeout) and one a newer dwserver migrated.
//!
//! The relay can also hang: it accepts and reads, and forwards nothing
//! until released, which is what a node sees when the server freezes
//! (SIGSTOP, a stalled host) or the network drops packets (TCP delivers
//! what was held once it heals). Nothing is refused and no session closes,
//! so only the node's own deadlines end its calls.

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
        hung: Arc<AtomicBool>,
        stopped: Arc<AtomicBool>,
        open: Arc<Mutex<Vec<TcpStream>>>,
    }

    impl Relay {
        pub fn start(upstream: SocketAddr) -> Relay {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
            let addr = listener.local_addr().unwrap();
            let cut = Arc::new(AtomicBool::new(false));
            let hung = Arc::new(AtomicBool::new(false));
            let stopped = Arc::new(AtomicBool::new(false));
            let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
            let (c, h, s, o) = (cut.clone(), hung.clone(), stopped.clone(), open.clone());
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
                    pipe(
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        h.clone(),
                    );
                    pipe(server, client, h.clone());
                }
            });
            Relay {
                addr,
                cut,
                hung,
                stopped,
                open,
            }
        }

        /// Holds every byte either way, on the connections open and on
        /// new ones (accepted, never answered), until [`Relay::release`].
        pub fn hang(&self) {
            self.hung.store(true, Ordering::SeqCst);
        }

        /// Forwards what was held, and everything after.
        pub fn release(&self) {
            self.hung.store(false, Ordering::SeqCst);
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
            self.release();
            self.cut();
            // Wakes the accepting thread so it sees `stopped`.
            let _ = TcpStream::connect(self.addr);
        }
    }

    /// Copies `from` to `to` on a thread until either side closes; while
    /// `hung`, what it read waits (the relay's pace, not a test's clock).
    fn pipe(mut from: TcpStream, mut to: TcpStream, hung: Arc<AtomicBool>) {
        std::thread::spawn(move || {
            let mut buffer = [0u8; 16 * 1024];
            loop {
                while hung.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                match from.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        while hung.load(Ordering::SeqCst) {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
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
    node_behind_a_relay_with(|_| {})
}

/// As [`node_behind_a_relay`], the node's configuration changed by `tweak`.
#[cfg(dw_test_postgres)]
fn node_behind_a_relay_with(
    tweak: impl FnOnce(&mut dwengine::server::ServerConfig),
) -> (TestServer, relay::Relay) {
    let (server, relay, _) = node_and_url(tweak);
    (server, relay)
}

/// `DW_TEST_POSTGRES_URL` on a schema of its own: its URL, the URL that
/// reaches it through a relay, and the relay.
#[cfg(dw_test_postgres)]
fn url_behind_a_relay() -> (String, String, relay::Relay) {
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
    (url, through_relay, relay)
}

/// As [`node_behind_a_relay_with`], with the URL that reaches the node's
/// schema directly (not through the relay).
#[cfg(dw_test_postgres)]
fn node_and_url(
    tweak: impl FnOnce(&mut dwengine::server::ServerConfig),
) -> (TestServer, relay::Relay, String) {
    let (url, through_relay, relay) = url_behind_a_relay();
    let server = TestServer::start(memory_cache(), |c| {
        c.database_url = Some(through_relay);
        tweak(c);
    });
    (server, relay, url)
}

/// Timeouts short enough for a test: the server ends a lock wait after
/// 1 s and a statement after 2 s, the node gives up on a call after 4 s.
#[cfg(dw_test_postgres)]
fn short_timeouts(c: &mut dwengine::server::ServerConfig) {
    c.store.postgres = dwengine::store::db::PostgresSettings {
        connect_timeout: Duration::from_secs(2),
        statement_timeout: Duration::from_secs(2),
        lock_timeout: Duration::from_secs(1),
        idle_in_transaction_timeout: Duration::from_secs(2),
        call_timeout: Duration::from_secs(4),
        tcp_timeout: Duration::from_secs(5),
    };
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
        // Ready again once the database is back; a 503 for another reason
        // than the store's fails at once.
        s.ready_after("store", "unavailable");
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
        // Ready (a stalled writer's 503 on a loaded machine is asked again).
        s.ready();
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_node_whose_database_hangs_answers_503_within_its_deadline_and_recovers() {
    #[cfg(dw_test_postgres)]
    {
        let (s, relay) = node_behind_a_relay_with(short_timeouts);
        assert_eq!(s.post("/api/workflows", start_body("before")).0, 201);
        assert_eq!(s.get("/api/workflows/before").0, 200);

        relay.hang();
        // A write that reaches the frozen database: answered (the HTTP
        // client gives up only after 60 s), 503 with the reason.
        let (status, body) = s.post("/api/workflows", start_body("during"));
        assert_eq!(
            (status, &body["reason"], &body["retryable"]),
            (503, &json!("database_unavailable"), &json!(true)),
            "{body}"
        );
        // A read, the same.
        let (status, body) = s.get("/api/workflows/before");
        assert_eq!(
            (status, &body["reason"]),
            (503, &json!("database_unavailable")),
            "{body}"
        );
        // Not ready.
        assert!(
            eventually(Duration::from_secs(60), || {
                let (status, body) = s.get("/api/ready");
                status == 503 && body["checks"]["store"] == "unavailable"
            }),
            "not ready while the database hangs: {}",
            s.get("/api/ready").1
        );
        // Calls from many clients at once are all answered.
        let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
            let calls: Vec<_> = (0..8)
                .map(|n| {
                    let s = &s;
                    scope.spawn(move || {
                        if n % 2 == 0 {
                            s.post("/api/workflows", start_body(&format!("many-{n}")))
                        } else {
                            s.get("/api/workflows/before")
                        }
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        let other: Vec<_> = answers
            .iter()
            .filter(|(status, _)| *status != 503)
            .collect();
        assert!(other.is_empty(), "{other:?}");

        relay.release();
        // Ready again once the database answers; a 503 for another reason
        // than the store's fails at once.
        s.ready_after("store", "unavailable");
        assert!(
            eventually(Duration::from_secs(60), || {
                s.post("/api/workflows", start_body("after")).0 == 201
            }),
            "starts again once the database answers"
        );
        // Nothing acknowledged is lost; what was refused is not written.
        assert_eq!(s.get("/api/workflows/before").0, 200);
        assert_eq!(s.get("/api/workflows/after").0, 200);
        for refused in ["during", "many-0", "many-2"] {
            assert_eq!(
                s.get(&format!("/api/workflows/{refused}")).0,
                404,
                "{refused}"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_write_lock_held_past_the_lock_timeout_is_a_503_and_the_session_serves_on() {
    #[cfg(dw_test_postgres)]
    {
        let (s, _relay, url) = node_and_url(short_timeouts);
        assert_eq!(s.post("/api/workflows", start_body("before")).0, 201);
        // Another session of the node's schema holds the store's write lock
        // (a node frozen inside a write transaction would).
        let mut holder = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut tx = holder.transaction().unwrap();
        tx.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))",
            &[&dwengine::store::db::WRITE_LOCK],
        )
        .unwrap();
        let (status, body) = s.post("/api/workflows", start_body("waits"));
        assert_eq!(
            (status, &body["reason"], &body["retryable"]),
            (503, &json!("database_unavailable"), &json!(true)),
            "{body}"
        );
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("lock timeout")),
            "{body}"
        );
        // Reads take no lock: they answer meanwhile.
        assert_eq!(s.get("/api/workflows/before").0, 200);
        tx.rollback().unwrap();
        // The session whose lock wait failed serves the next write.
        let (status, body) = s.post("/api/workflows", start_body("after"));
        assert_eq!(status, 201, "{body}");
        assert_eq!(s.get("/api/workflows/waits").0, 404);
    }
}

/// A writer that waits for the store's write lock while the database
/// answers (another node's transaction holds the lock: a busy cluster, not
/// a hung server) is not stalled, however long past the stall bound it
/// waits: the node's reads are answered meanwhile, so new writes queue
/// for the lock (bounded by `lock_timeout`) instead of being refused with
/// a 503, and every one commits once the lock is free. (Before, a lock
/// wait of 1.6 s under a three-node benchmark made a node refuse writes
/// and its readiness fail.)
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_writer_waiting_for_the_write_lock_on_a_database_that_answers_is_not_stalled() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::shared::SharedStore;

        let url = crate::common::postgres_schema_url();
        let store = SharedStore::open_postgres(&url, dwengine::store::StoreConfig::default(), 1)
            .expect("the store");
        let start = |id: &str| {
            let id = id.to_owned();
            move |s: &dwengine::store::Store| s.start_run(crate::common::start(&id)).map(|_| ())
        };
        store.write(start("before")).expect("a write before");
        // Another node's write transaction, holding the lock.
        let other =
            dwengine::store::db::Connection::open_postgres(&url, &Default::default()).unwrap();
        other.begin_write().unwrap();
        std::thread::scope(|scope| {
            let first = scope.spawn(|| store.write(start("first")));
            // Twice the default stall bound (1.25 s) of reads answered
            // while the writer waits, and never a stall.
            let began = std::time::Instant::now();
            while began.elapsed() < Duration::from_millis(2_500) {
                let runs = store
                    .read(|s| s.runs_of("default", "first", 10))
                    .expect("a read while the writer waits");
                assert!(runs.is_empty(), "the first write waits for the lock");
                assert_eq!(store.stalled(), None, "a lock wait is not a stall");
            }
            // A write now is queued for the lock, not refused.
            let second = scope.spawn(|| store.write(start("second")));
            other.execute_batch("ROLLBACK").unwrap();
            first
                .join()
                .unwrap()
                .expect("the first write, once the lock is free");
            second
                .join()
                .unwrap()
                .expect("the second write, queued meanwhile");
        });
        for id in ["before", "first", "second"] {
            let runs = store.read(|s| s.runs_of("default", id, 10)).unwrap();
            assert_eq!(runs.len(), 1, "{id}");
        }
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_writer_waiting_on_a_hung_database_refuses_new_writes_unrun() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::shared::SharedStore;
        use std::sync::atomic::{AtomicBool, Ordering};

        let (direct, url, relay) = url_behind_a_relay();
        let mut config = dwengine::store::StoreConfig::default();
        let mut node = dwengine::server::ServerConfig::for_node("n", std::env::temp_dir());
        short_timeouts(&mut node);
        config.postgres = node.store.postgres;
        let store = SharedStore::open_postgres(&url, config, 1).unwrap();
        let start = |id: String| {
            move |s: &dwengine::store::Store| s.start_run(crate::common::start(&id)).map(|_| ())
        };
        store.write(start("before".into())).expect("a write before");

        relay.hang();
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            // Writes keep the writer busy with the hung database (each is
            // answered when its call, or the new session's connect, gives up).
            let busy = scope.spawn(|| {
                let mut n = 0;
                while !done.load(Ordering::SeqCst) {
                    let answer = store.write(start(format!("busy-{n}")));
                    let error = answer.expect_err("no write succeeds while the database hangs");
                    assert!(error.is_unavailable(), "{error}");
                    n += 1;
                }
            });
            // Meanwhile a write finds the writer stalled and is refused
            // without being queued.
            let refused = eventually(Duration::from_secs(60), || {
                if store.stalled().is_none() {
                    return false;
                }
                match store.write(start("refused".into())) {
                    Err(dwengine::store::Error::DatabaseUnavailable(m)) => {
                        m.contains("has not answered the store's writer")
                    }
                    other => panic!("a write while the database hangs: {other:?}"),
                }
            });
            done.store(true, Ordering::SeqCst);
            busy.join().unwrap();
            assert!(
                refused,
                "no write was refused unrun while the writer's call hung"
            );
        });

        relay.release();
        assert!(
            eventually(Duration::from_secs(60), || store
                .write(start("after".into()))
                .is_ok()),
            "writes again once the database answers"
        );
        assert!(store.stalled().is_none());
        let conn =
            dwengine::store::db::Connection::open_postgres(&direct, &Default::default()).unwrap();
        let found = |id: &str| -> i64 {
            conn.query_row(
                "SELECT COUNT(*) FROM runs WHERE workflow_id = ?1",
                [id],
                |row| row.get(0),
            )
            .unwrap()
        };
        assert_eq!(
            (found("before"), found("after"), found("refused")),
            (1, 1, 0)
        );
    }
}

/// The error a node's start ends with on `url`, a store of `tweak`'s
/// configuration.
#[cfg(dw_test_postgres)]
fn start_error(
    url: &str,
    tweak: impl FnOnce(&mut dwengine::server::ServerConfig),
) -> dwengine::server::StartError {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::config(dir.path());
    config.database_url = Some(url.to_owned());
    tweak(&mut config);
    match dwengine::server::Engine::with_cache(config, memory_cache()) {
        Ok(_) => panic!("a node started on {url}"),
        Err(e) => e,
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_node_refuses_to_start_on_a_database_it_cannot_reach_naming_the_url_without_its_password() {
    #[cfg(dw_test_postgres)]
    {
        // Nothing listens: refused.
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let error =
            start_error(&format!("postgres://dw:s3cret@127.0.0.1:{port}/dw"), |_| {}).to_string();
        assert!(
            error.starts_with(&format!(
                "the PostgreSQL database of DW_DATABASE_URL (postgres://dw:***@127.0.0.1:{port}/dw) cannot be opened: "
            )),
            "{error}"
        );
        assert!(!error.contains("s3cret"), "{error}");
        // A server that accepts and never answers: the start gives up
        // after the connect timeout rather than waiting for ever.
        let (_, through_relay, relay) = url_behind_a_relay();
        relay.hang();
        let error = start_error(&through_relay, short_timeouts).to_string();
        assert!(
            error.contains("cannot be opened: ") && error.contains("no session within 2.0 s"),
            "{error}"
        );
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_node_refuses_to_start_on_a_schema_a_newer_dwserver_migrated() {
    #[cfg(dw_test_postgres)]
    {
        let url = crate::common::postgres_schema_url();
        let mut newer = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        dwengine::store::pg_schema::migrate(&mut newer).unwrap();
        let version = dwengine::store::pg_schema::SCHEMA_VERSION + 1;
        newer
            .execute(
                "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES ($1, 'from_a_newer_release', 0)",
                &[&version],
            )
            .unwrap();
        let error = start_error(&url, |_| {}).to_string();
        assert!(
            error.contains(&format!(
                "cannot be opened: the database's schema is at version {version}, newer than this dwserver knows ({})",
                dwengine::store::pg_schema::SCHEMA_VERSION
            )) && error.contains("run that release or a later one"),
            "{error}"
        );
        // Refused before anything was written: the newer rows are as they were.
        let recorded: i64 = newer
            .query_one("SELECT MAX(version) FROM schema_migrations", &[])
            .unwrap()
            .get(0);
        assert_eq!(recorded, version);
    }
}

/// A node frozen inside a write transaction (its process stopped, its host
/// stalled) holds the store's write lock; the other nodes' writes wait
/// for it only until PostgreSQL closes the idle session
/// (`idle_in_transaction_session_timeout`), answering 503 meanwhile.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_node_frozen_holding_the_write_lock_loses_it_to_the_others() {
    #[cfg(dw_test_postgres)]
    {
        let (s, _relay, url) = node_and_url(short_timeouts);
        assert_eq!(s.post("/api/workflows", start_body("before")).0, 201);
        let mut frozen_node = dwengine::server::ServerConfig::for_node("f", std::env::temp_dir());
        short_timeouts(&mut frozen_node);
        let frozen =
            dwengine::store::db::Connection::open_postgres(&url, &frozen_node.store.postgres)
                .unwrap();
        frozen.begin_write().unwrap();
        let (status, body) = s.post("/api/workflows", start_body("blocked"));
        assert_eq!(
            (status, &body["reason"]),
            (503, &json!("database_unavailable")),
            "{body}"
        );
        assert!(
            eventually(Duration::from_secs(60), || {
                s.post("/api/workflows", start_body("after")).0 == 201
            }),
            "the frozen node's session was never closed"
        );
        let error = frozen
            .execute_batch("SELECT 1")
            .expect_err("the server closed the frozen session");
        assert!(error.is_unavailable(), "{error}");
        assert_eq!(s.get("/api/workflows/blocked").0, 404);
    }
}
