//! Starts real servers on loopback and talks to them over HTTP.
//!
//! Each bound test runs twice (see [`cache_variants`]): on the in-process
//! cache and on the Redis of `DW_TEST_REDIS_URL`, each Redis test in a
//! database it leases for itself (see [`cache_for`]) so tests running in
//! parallel threads never flush or count each other's keys. A set but
//! unreachable URL fails the test: CI sets it, so Redis must run there.
#![allow(dead_code)]

pub mod catalog;
pub mod process;
pub mod wire;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use dwengine::cache::{Cache, CacheError, MemoryCache, RedisCache};
use dwengine::server::{Engine, Running, ServerConfig};
use serde_json::Value;

/// A running server, its engine's cache, and its temp storage.
pub struct TestServer {
    pub running: Running,
    pub base: String,
    pub cache: Arc<dyn Cache>,
    pub dir: tempfile::TempDir,
    agent: ureq::Agent,
}

/// A config for a test node bound to a free loopback port.
pub fn config(dir: &std::path::Path) -> ServerConfig {
    let mut config = ServerConfig::for_node("test-node", dir.to_owned());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config
}

impl TestServer {
    /// Serves a node configured by `tweak` on `cache`.
    pub fn start(cache: Arc<dyn Cache>, tweak: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        tweak(&mut config);
        // DW_TEST_BACKEND=postgres: a node whose store the test left in
        // memory gets a PostgreSQL schema of its own instead (not one that
        // caps SQLite's pages to fill its disk: that test is SQLite's).
        if crate::common::postgres()
            && config.database.is_none()
            && config.database_url.is_none()
            && config.store.max_page_count.is_none()
        {
            config.database_url = Some(crate::common::postgres_schema_url());
        }
        let engine = Engine::with_cache(config, cache.clone()).expect("engine starts");
        let running = Running::start(engine).expect("server binds");
        let base = format!("http://{}", running.addr());
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(60))
            .build();
        TestServer {
            running,
            base,
            cache,
            dir,
            agent,
        }
    }

    /// `POST path` with a JSON body: (status, JSON answer).
    pub fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.post_ns("default", path, body)
    }

    /// `POST path` in namespace `ns` (the `X-Namespace` header).
    pub fn post_ns(&self, ns: &str, path: &str, body: Value) -> (u16, Value) {
        answer(
            self.agent
                .post(&format!("{}{path}", self.base))
                .set("x-namespace", ns)
                .send_json(body),
        )
    }

    /// `POST path` in namespace `ns`, also returning response header `header`.
    pub fn post_ns_header(
        &self,
        ns: &str,
        path: &str,
        body: Value,
        header: &str,
    ) -> (u16, Value, Option<String>) {
        let response = match self
            .agent
            .post(&format!("{}{path}", self.base))
            .set("x-namespace", ns)
            .send_json(body)
        {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("transport error: {e}"),
        };
        let value = response.header(header).map(str::to_owned);
        let status = response.status();
        (status, response.into_json().unwrap_or(Value::Null), value)
    }

    /// `POST path` with raw bytes.
    pub fn post_raw(&self, path: &str, body: &[u8]) -> (u16, Value) {
        answer(
            self.agent
                .post(&format!("{}{path}", self.base))
                .set("content-type", "application/json")
                .send_bytes(body),
        )
    }

    /// Sends one request built by [`wire`].
    pub fn send(&self, request: &wire::Request) -> (u16, Value) {
        let ns = request.namespace.as_deref().unwrap_or("default");
        match &request.body {
            Some(body) => self.post_ns(ns, &request.path, body.clone()),
            None => self.get_ns(ns, &request.path),
        }
    }

    /// The wait slots this server's long polls hold: its pools' `slot-*`
    /// files. A fresh server has none; each held wait has one, and once a
    /// wait has ended a pool keeps idle files within its global cap.
    pub fn wait_slot_files(&self) -> usize {
        fn count(dir: &std::path::Path) -> usize {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|entry| {
                    if entry.path().is_dir() {
                        count(&entry.path())
                    } else {
                        usize::from(entry.file_name().to_string_lossy().starts_with("slot-"))
                    }
                })
                .sum()
        }
        count(
            &self
                .running
                .engine()
                .config()
                .polling_cache_path
                .join("wait-slots"),
        )
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> (u16, Value) {
        self.get_ns("default", path)
    }

    /// `GET path` in namespace `ns`.
    pub fn get_ns(&self, ns: &str, path: &str) -> (u16, Value) {
        answer(
            self.agent
                .get(&format!("{}{path}", self.base))
                .set("x-namespace", ns)
                .call(),
        )
    }

    /// `GET /api/ready` until it answers 200, and its answer.
    ///
    /// On PostgreSQL (`DW_TEST_BACKEND=postgres`) a node rightly answers
    /// 503 `checks.store: "unavailable"` while its writer's call to the
    /// database has been pending past the stall bound (a quarter of the
    /// lesser of the call deadline and the connect timeout, 1.25 s by
    /// default), which a loaded machine's commits can be: that answer, and
    /// only that one, is asked again. Any other answer fails the test, and
    /// so does any 503 on SQLite, whose writer never stalls this way.
    pub fn ready(&self) -> Value {
        self.ready_waiting_out(None)
    }

    /// As [`TestServer::ready`], also asking again while the node answers
    /// 503 with `checks.{check}` equal to `value`: the not-ready the test
    /// brought about and now expects to end (`"store", "unavailable"` once
    /// the database is back). A 503 for another reason fails the test at
    /// once with that reason, rather than being waited out as "not yet".
    pub fn ready_after(&self, check: &str, value: &str) -> Value {
        self.ready_waiting_out(Some((check, value)))
    }

    fn ready_waiting_out(&self, expected: Option<(&str, &str)>) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = self.get("/api/ready");
            if status == 200 {
                assert_eq!(body["status"], "ready", "{body}");
                return body;
            }
            let stalled = status == 503
                && crate::common::postgres()
                && body["checks"]["store"] == "unavailable"
                && body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("has not answered this node's writer"));
            let awaited = status == 503
                && expected.is_some_and(|(check, value)| body["checks"][check] == value);
            assert!(
                stalled || awaited,
                "readiness: {status} {body} (waiting out {})",
                match expected {
                    Some((check, value)) =>
                        format!("checks.{check} = {value:?} and a stalled writer"),
                    None => "a stalled writer only".to_owned(),
                }
            );
            assert!(
                std::time::Instant::now() < deadline,
                "still not ready after a minute: {body}"
            );
            if stalled && !awaited {
                eprintln!("readiness 503 for a stalled writer, asked again: {body}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `deliver-cancellation` of `body` (the request, the call it lands
    /// at) on workflow task `task`, as leased to its poller.
    pub fn deliver_cancellation(&self, task: &Value, mut body: Value) -> (u16, Value) {
        body["lease_owner"] = task["lease_owner"].clone();
        body["workflow_task_attempt"] = task["workflow_task_attempt"].clone();
        self.post_ns(
            task["namespace"].as_str().unwrap_or("default"),
            &format!(
                "/api/worker/workflow-tasks/{}/deliver-cancellation",
                task["task_id"].as_str().unwrap()
            ),
            body,
        )
    }

    /// Every event of run `run` of workflow `id` in `default`, in order
    /// (one page of up to 1000: a run with more fails the test rather than
    /// being cut short).
    pub fn run_history(&self, id: &str, run: &str) -> Vec<Value> {
        let (status, page) = self.get(&format!(
            "/api/workflows/{id}/runs/{run}/history?page_size=1000"
        ));
        assert_eq!(status, 200, "{page}");
        assert!(
            page["next_page_token"].is_null(),
            "more than one page: {id}"
        );
        page["events"].as_array().unwrap().clone()
    }

    /// [`TestServer::run_history`] of workflow `id`'s current run.
    pub fn history(&self, id: &str) -> Vec<Value> {
        let (status, described) = self.get(&format!("/api/workflows/{id}"));
        assert_eq!(status, 200, "{described}");
        self.run_history(id, described["run_id"].as_str().unwrap())
    }

    /// `DELETE path` in namespace `ns`.
    pub fn delete_ns(&self, ns: &str, path: &str) -> (u16, Value) {
        answer(
            self.agent
                .delete(&format!("{}{path}", self.base))
                .set("x-namespace", ns)
                .call(),
        )
    }

    /// `PUT path` with a JSON body in namespace `default`.
    pub fn put(&self, path: &str, body: Value) -> (u16, Value) {
        answer(
            self.agent
                .put(&format!("{}{path}", self.base))
                .set("x-namespace", "default")
                .send_json(body),
        )
    }

    /// `GET path` read as text: (status, content type, body).
    pub fn get_text(&self, path: &str) -> (u16, String, String) {
        let response = match self.agent.get(&format!("{}{path}", self.base)).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("transport error: {e}"),
        };
        let status = response.status();
        let content_type = response.header("content-type").unwrap_or("").to_owned();
        (status, content_type, response.into_string().unwrap())
    }

    /// Live keys under `prefix`, by scanning the backend.
    pub fn keys(&self, prefix: &str) -> usize {
        self.cache.count_prefix(prefix).unwrap()
    }

    /// Registers namespace `ns` (a no-op when it exists).
    pub fn namespace(&self, ns: &str) {
        let (status, body) = self.post("/api/namespaces", serde_json::json!({ "name": ns }));
        assert!(status == 200 || status == 201, "{status}: {body}");
    }

    /// Starts a workflow (registering its namespace); panics unless the
    /// server accepted it.
    pub fn start_workflow(&self, ns: &str, workflow_id: &str, queue: &str) -> Value {
        if ns != "default" {
            self.namespace(ns);
        }
        let (status, body) = self.post_ns(
            ns,
            "/api/workflows",
            serde_json::json!({
                "workflow_id": workflow_id, "workflow_type": "Order", "task_queue": queue,
                "input": { "codec": "json", "blob": "[]" },
            }),
        );
        assert_eq!(status, 201, "{body}");
        body
    }

    /// One poll of `kind` (`workflow`, `activity` or `query`) by worker `w1`.
    pub fn poll(
        &self,
        kind: &str,
        ns: &str,
        queue: &str,
        poll_id: &str,
        timeout_ms: u64,
    ) -> (u16, Value) {
        self.post_ns(
            ns,
            &format!("/api/worker/{kind}-tasks/poll"),
            serde_json::json!({
                "task_queue": queue, "worker_id": "w1",
                "poll_request_id": poll_id, "timeout_seconds": timeout_ms as f64 / 1000.0,
            }),
        )
    }

    /// Completes workflow task `task` (as leased to `w1`) with `commands`.
    pub fn complete(&self, task: &Value, commands: Value) -> (u16, Value) {
        self.post_ns(
            task["namespace"].as_str().unwrap_or("default"),
            &format!(
                "/api/worker/workflow-tasks/{}/complete",
                task["task_id"].as_str().unwrap()
            ),
            serde_json::json!({
                "lease_owner": task["lease_owner"], "commands": commands,
                "workflow_task_attempt": task["workflow_task_attempt"],
            }),
        )
    }
}

fn answer(result: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    match result {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

/// A cache as the engine holds it, shared with the test that reads its keys.
pub type SharedCache = Arc<dyn Cache>;

/// A fresh cache of `backend` for one bound test: the in-process cache, or
/// a Redis database leased for this test alone (flushed first) from
/// `DW_TEST_REDIS_URL`. The lease ends when the test drops its last handle
/// on the cache.
pub fn cache_for(backend: &str) -> SharedCache {
    match backend {
        "memory" => memory_cache(),
        "redis" => match std::env::var("DW_TEST_REDIS_URL") {
            Ok(url) if !url.is_empty() => Arc::new(LeasedRedis::lease(&url)),
            _ => panic!(
                "the Redis variants were built to run (DW_TEST_REDIS_URL was set when this \
                 test binary was compiled) but DW_TEST_REDIS_URL is not set now"
            ),
        },
        other => panic!("no cache backend {other:?}"),
    }
}

/// Declares the two tests of a bound proof `fn NAME(backend, cache)`:
/// `NAME::memory` on the in-process cache and `NAME::redis` on Redis.
///
/// The Redis variant is compiled as ignored, with the reason, when
/// `DW_TEST_REDIS_URL` was not set at build time (dwengine's build script
/// sets the `dw_test_redis` cfg from it), so `cargo test` counts it as
/// ignored, not as passed, and says why. `.ci/run` starts redis-server and
/// sets the variable, and there a build without it fails
/// (`bounds::ci_runs_the_redis_variants`).
macro_rules! cache_variants {
    ($name:ident) => {
        mod $name {
            #[test]
            fn memory() {
                super::$name("memory", $crate::support::cache_for("memory"));
            }

            #[test]
            #[cfg_attr(
                not(dw_test_redis),
                ignore = "needs Redis: DW_TEST_REDIS_URL was not set when this test binary was built"
            )]
            fn redis() {
                super::$name("redis", $crate::support::cache_for("redis"));
            }
        }
    };
}
pub(crate) use cache_variants;

/// The in-process cache alone, for a test that is not a bound proof.
pub fn memory_cache() -> Arc<dyn Cache> {
    Arc::new(MemoryCache::default())
}

/// Redis's default number of logical databases (`databases 16`).
const REDIS_DATABASES: u8 = 16;

/// Which Redis databases a test of this process holds, one bit each: the
/// tests run as threads of one binary, and two tests sharing a database
/// would flush and count each other's keys.
static LEASED: Mutex<u16> = Mutex::new(0);
static RELEASED: Condvar = Condvar::new();

/// How long a test waits before it looks again for a database another
/// process gave back: a release in this process wakes it at once, one in
/// another process cannot.
const OTHER_PROCESS_RECHECK: Duration = Duration::from_millis(250);

/// A Redis database held by one test, released when dropped.
struct LeasedRedis {
    cache: RedisCache,
    _lease: Release,
}

impl LeasedRedis {
    /// Waits for a free database (16 tests at once hold them all, counting
    /// every test process on this machine that uses the same server), flushes
    /// it and connects. A set but unusable URL fails the test: CI sets it,
    /// so Redis must run there.
    fn lease(url: &str) -> LeasedRedis {
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        let mut leased = LEASED.lock().unwrap_or_else(|e| e.into_inner());
        let (db, lock) = loop {
            let free = (0..REDIS_DATABASES)
                .filter(|db| *leased & (1 << db) == 0)
                .find_map(|db| machine_lock(url, db).map(|lock| (db, lock)));
            if let Some((db, lock)) = free {
                *leased |= 1 << db;
                break (db, lock);
            }
            let now = std::time::Instant::now();
            assert!(
                now < deadline,
                "no Redis database of {url} came free in 600 s: {REDIS_DATABASES} tests \
                 (of this process or another on this machine) hold one each"
            );
            leased = RELEASED
                .wait_timeout(leased, (deadline - now).min(OTHER_PROCESS_RECHECK))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(leased);
        // Held before connecting, so a failed connection still releases `db`.
        let lease = Release { db, _lock: lock };
        let url = format!("{}/{db}", url.trim_end_matches('/'));
        let cache = RedisCache::connect(&url)
            .unwrap_or_else(|e| panic!("DW_TEST_REDIS_URL is set but {url} is unusable: {e}"));
        cache.purge_prefix("").expect("flush the test database");
        LeasedRedis {
            cache,
            _lease: lease,
        }
    }
}

/// Takes database `db` of the Redis at `url` for this process, against every
/// other test process on this machine: an exclusive lock on a file named
/// after the server and the database, in the temporary directory. Two
/// engine suites run at once (a stress run beside a PostgreSQL matrix run,
/// say) then never flush or count each other's keys. The kernel drops the
/// lock when the process ends, however it ends, so a killed run leaves no
/// stale lease. `None` when another process holds it.
fn machine_lock(url: &str, db: u8) -> Option<std::fs::File> {
    let path = lease_file(url, db);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open the Redis lease file {}: {e}", path.display()));
    match file.try_lock() {
        Ok(()) => Some(file),
        Err(std::fs::TryLockError::WouldBlock) => None,
        Err(std::fs::TryLockError::Error(e)) => {
            panic!("lock the Redis lease file {}: {e}", path.display())
        }
    }
}

/// The lock file of database `db` of the Redis at `url`.
fn lease_file(url: &str, db: u8) -> std::path::PathBuf {
    let server: String = url
        .trim_end_matches('/')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    std::env::temp_dir().join(format!("dwengine-test-redis-{server}-db{db}.lock"))
}

/// A Redis database of this test alone, for child processes to share: its
/// URL (`redis://…/<db>`), flushed when leased, given back when dropped.
pub struct RedisDatabase {
    /// The database's URL.
    pub url: String,
    /// A client of the same database, for the test's own reads.
    pub cache: RedisCache,
    _lease: Release,
}

/// A leased Redis database of `DW_TEST_REDIS_URL`, for a test that
/// needs Redis itself (several processes sharing it): such a test is
/// compiled as ignored without the `dw_test_redis` cfg, as the Redis
/// variants of [`cache_variants`] are, so reaching this without the
/// variable is a mistake and fails.
pub fn redis_database() -> RedisDatabase {
    match std::env::var("DW_TEST_REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            let leased = LeasedRedis::lease(&url);
            let db = leased._lease.db;
            RedisDatabase {
                url: format!("{}/{db}", url.trim_end_matches('/')),
                cache: leased.cache,
                _lease: leased._lease,
            }
        }
        _ => panic!(
            "this test was built to run on Redis (DW_TEST_REDIS_URL was set when this test \
             binary was compiled) but DW_TEST_REDIS_URL is not set now"
        ),
    }
}

/// Gives database `db` back to this process's pool and, by closing the lock
/// file, to the other processes on this machine.
struct Release {
    db: u8,
    _lock: std::fs::File,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut leased = LEASED.lock().unwrap_or_else(|e| e.into_inner());
        *leased &= !(1 << self.db);
        RELEASED.notify_all();
    }
}

impl Cache for LeasedRedis {
    fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), CacheError> {
        self.cache.put(key, value, ttl)
    }
    fn add(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        self.cache.add(key, value, ttl)
    }
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        self.cache.get(key)
    }
    fn forget(&self, key: &str) -> Result<bool, CacheError> {
        self.cache.forget(key)
    }
    fn increment(&self, key: &str, ttl: Duration) -> Result<u64, CacheError> {
        self.cache.increment(key, ttl)
    }
    fn claim(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        self.cache.claim(key, value, ttl)
    }
    fn release(&self, key: &str, value: &[u8]) -> Result<bool, CacheError> {
        self.cache.release(key, value)
    }
    fn count_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
        self.cache.count_prefix(prefix)
    }
    fn count_family(&self, prefix: &str) -> Result<usize, CacheError> {
        self.cache.count_family(prefix)
    }
    fn backend(&self) -> &'static str {
        self.cache.backend()
    }
    fn publish(&self, channel: &str, message: &[u8]) -> Result<(), CacheError> {
        self.cache.publish(channel, message)
    }
    fn subscribe(
        &self,
        channel: &str,
        deliver: dwengine::cache::Deliver,
    ) -> Result<dwengine::cache::Subscription, CacheError> {
        self.cache.subscribe(channel, deliver)
    }
    // Redis's own pipeline, not the trait's call-by-call default.
    fn batch(&self, ops: &[dwengine::cache::CacheOp<'_>]) -> Result<(), CacheError> {
        self.cache.batch(ops)
    }
}

/// The name libtest knows test `name` of module `module_path` by
/// (`module_path!()`, whose first segment is this binary's crate), for a
/// test that re-runs this binary as a child with `--exact`.
pub fn test_path(module_path: &str, name: &str) -> String {
    let within = module_path.split_once("::").map_or("", |(_, rest)| rest);
    if within.is_empty() {
        name.to_owned()
    } else {
        format!("{within}::{name}")
    }
}

/// The next workflow task of `queue` in the default namespace, polled
/// until one is there (up to 30 s).
///
/// Each poll has a request id never used before in this process: a
/// repeated id is a replay (for the replay TTL), which answers at once with
/// what that poll found, so a task still leased to an earlier call's poll
/// would come back again instead of the next one.
pub fn next_workflow_task(s: &TestServer, queue: &str) -> Value {
    static POLLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut task = Value::Null;
    assert!(
        eventually(Duration::from_secs(30), || {
            let n = POLLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let (status, answer) = s.poll("workflow", "default", queue, &format!("next-{n}"), 200);
            assert_eq!(status, 200, "{answer}");
            assert_ne!(answer["replayed"], true, "a fresh poll id: {answer}");
            task = answer["task"].clone();
            !task.is_null()
        }),
        "no workflow task on {queue}"
    );
    task
}

/// Two calls on one queue get two tasks: the second does not replay the
/// first's poll, whose task is still leased.
#[test]
fn next_workflow_task_leases_the_next_task_not_the_last_one_again() {
    let s = TestServer::start(memory_cache(), |_| {});
    s.start_workflow("default", "first", "next-q");
    s.start_workflow("default", "second", "next-q");
    let one = next_workflow_task(&s, "next-q");
    let two = next_workflow_task(&s, "next-q");
    let mut ids = [
        one["workflow_id"].as_str().unwrap().to_owned(),
        two["workflow_id"].as_str().unwrap().to_owned(),
    ];
    ids.sort();
    assert_eq!(ids, ["first", "second"], "{one}\n{two}");
}

/// Waits until `condition` holds, up to `limit`. A condition that reads a
/// cache takes a failed read as "not yet" (`is_ok_and`): on a loaded
/// machine one Redis round trip can pass the client's 2 s timeout, and the
/// next look is what the wait is for.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`TestServer::ready_after`] waits out only the 503 it is told to: a node
/// not ready for another reason (here its id taken by another node) fails
/// the wait at once, with that reason in the failure, and the awaited
/// reason is waited out until the node is ready.
#[test]
fn ready_after_fails_at_once_on_another_reason_and_waits_out_its_own() {
    use dwengine::cluster::{NodeIdentity, NodeToken};
    let cache = memory_cache();
    let node = TestServer::start(cache.clone(), |config| {
        config.node_lease = Duration::from_millis(300);
    });
    node.ready();
    let key = NodeIdentity::key("test-node");
    let intruder = NodeToken::new("test-node");
    assert!(
        eventually(Duration::from_secs(60), || {
            let _ = cache.forget(&key);
            cache
                .add(&key, intruder.as_bytes(), Duration::from_secs(600))
                .unwrap()
                && node.get("/api/ready").1["checks"]["node_id"] == "taken"
        }),
        "the node never saw its id taken"
    );
    let started = std::time::Instant::now();
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        node.ready_after("store", "unavailable")
    }))
    .expect_err("a 503 for a taken id is not the store's");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("\"node_id\":\"taken\""), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "failed at once, not at the wait's end"
    );
    assert!(cache.release(&key, intruder.as_bytes()).unwrap());
    assert_eq!(node.ready_after("node_id", "taken")["status"], "ready");
}

/// The lease's machine-wide half: while one holder keeps database `db`'s
/// lock file open, no other open of it (another process's, or this one's
/// through another file) takes it; closing it frees it.
#[test]
fn a_redis_database_leased_here_is_refused_to_every_other_lease_until_released() {
    // A URL no test uses, so a concurrent suite's leases never meet this one.
    let url = format!("redis://lease-test-{}.invalid:1", std::process::id());
    let held = machine_lock(&url, 3).expect("a free database is taken");
    assert!(machine_lock(&url, 3).is_none(), "held: refused");
    assert!(machine_lock(&url, 4).is_some(), "another database is free");
    drop(held);
    assert!(machine_lock(&url, 3).is_some(), "released: taken again");
    for db in [3, 4] {
        let _ = std::fs::remove_file(lease_file(&url, db));
    }
}
