//! Several dwserver processes side by side: the real binary, started and
//! killed as an operator (or a crash) would.
//!
//! One SQLite file serves one process: a second one pointed at it refuses
//! to start, before it listens, naming the file and the holder; the lock
//! goes with its holder, whether it stops or is SIGKILLed.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::process::{run_refused, start, Node};
use crate::support::{cache_variants, SharedCache};

/// How long a start that must be refused may run before the test fails.
const REFUSAL_LIMIT: Duration = Duration::from_secs(60);

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
    assert_serving(&first.base);

    // The same file, through a symbolic link: still the same file.
    let alias = dir.path().join("alias.sqlite");
    std::os::unix::fs::symlink(&db, &alias).unwrap();
    for path in [&db, &alias] {
        let refused = run_refused(command(dir.path(), "node-b", path), REFUSAL_LIMIT);
        assert_refused(&refused, "shared.sqlite", "node-a", first.pid());
    }
    // The refused process changed nothing: the first still serves.
    assert_serving(&first.base);

    // SIGKILL: the kernel releases the lock with the process.
    first.sigkill();
    let second = start(command(dir.path(), "node-b", &db));
    assert_serving(&second.base);
    let refused = run_refused(command(dir.path(), "node-c", &db), REFUSAL_LIMIT);
    assert_refused(&refused, "shared.sqlite", "node-b", second.pid());

    // A clean stop releases it too.
    second.stop();
    let third = start(command(dir.path(), "node-c", &db));
    assert_serving(&third.base);
}

#[test]
fn in_memory_stores_take_no_lock() {
    let dir = tempfile::tempdir().unwrap();
    let memory = Path::new(":memory:");
    let a = start(command(dir.path(), "mem-a", memory));
    let b = start(command(dir.path(), "mem-b", memory));
    assert_serving(&a.base);
    assert_serving(&b.base);
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".lock")));
}

/// A supervisor may stop a node the moment it reads `listening on`: the
/// stop handlers exist before that line, so the stop is the clean one
/// (exit 0), never the default action of an unhandled SIGTERM. Before,
/// they were installed on a thread started after it, and on a loaded
/// machine most such stops killed the node (exit 143).
#[test]
fn a_node_stopped_as_soon_as_it_announces_itself_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    for n in 0..5 {
        let node = start(command(
            dir.path(),
            &format!("quick-{n}"),
            Path::new(":memory:"),
        ));
        node.stop();
    }
}

/// The `cluster` block of a node's operator metrics.
fn cluster_view(node: &Node) -> serde_json::Value {
    let (status, body) = get(&node.base, "/api/system/operator-metrics");
    assert_eq!(status, 200, "{body}");
    body["cluster"].clone()
}

/// A node `id` with its own SQLite file under `dir`, on the shared Redis
/// `redis`, its id and leases living `lease_ms`, sweeping timeouts often.
fn clustered(dir: &Path, id: &str, redis: &str, lease_ms: u64) -> Command {
    let mut command = command(dir, id, &dir.join(format!("{id}.sqlite")));
    command
        .env("DW_REDIS_URL", redis)
        .env("DW_NODE_LEASE_MS", lease_ms.to_string())
        .env("DW_TIMEOUT_SWEEP_INTERVAL_MS", "50")
        .env("DW_SCHEDULE_SWEEP_INTERVAL_MS", "50")
        .env("DW_EXTERNAL_PAYLOAD_SWEEP_INTERVAL_MS", "50");
    command
}

/// `base` answers its liveness probe 200; a 503 fails with its reason.
fn assert_serving(base: &str) {
    let (status, body) = get(base, "/api/health");
    assert_eq!(status, 200, "{base}/api/health: {body}");
}

/// Waits (generously) for `condition`, panicking with `what` if it never holds.
fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    wait_showing(what, || condition().then_some(()).ok_or_else(String::new));
}

/// Waits (generously) for `look` to answer `Ok`; if it never does, the
/// panic names `what` and the last thing `look` saw (its `Err`), so a
/// failure says what the node answered instead of only that it did not.
fn wait_showing(what: &str, mut look: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let last = match look() {
            Ok(()) => return,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "never happened: {what}; last seen: {last}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const SWEEPS: [&str; 3] = ["timeouts", "schedules", "external_payload_orphans"];

#[test]
#[cfg_attr(
    not(dw_test_redis),
    ignore = "needs Redis: DW_TEST_REDIS_URL was not set when this test binary was built"
)]
fn a_second_live_node_with_the_same_id_is_refused_and_a_killed_nodes_id_frees_when_its_heartbeat_expires(
) {
    let redis = crate::support::redis_database();
    let dir = tempfile::tempdir().unwrap();
    let key = dwengine::cluster::NodeIdentity::key("twin");
    let twin = start(clustered(dir.path(), "twin", &redis.url, 1_500));
    assert_serving(&twin.base);
    // Its heartbeat keeps the registration alive well past one TTL.
    let first = cluster_view(&twin)["node"]["heartbeats"].as_u64().unwrap();
    wait_for("three more heartbeats", || {
        cluster_view(&twin)["node"]["heartbeats"].as_u64().unwrap() >= first + 3
    });
    assert_eq!(cluster_view(&twin)["node"]["registered"], true);

    // Another process with the same id (its own SQLite file, its own
    // wait-slot directory): refused before it listens, told who holds it.
    let mut duplicate = command(dir.path(), "twin", &dir.path().join("other.sqlite"));
    duplicate
        .env("DW_REDIS_URL", &redis.url)
        .env("DW_NODE_LEASE_MS", "1500");
    let refused = run_refused(duplicate, REFUSAL_LIMIT);
    let stdout = String::from_utf8_lossy(&refused.stdout);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("listening on"), "{stdout}");
    for expected in [
        "DW_SERVER_ID \"twin\" is already registered by another live node",
        &format!("pid {}", twin.pid()),
    ] {
        assert!(
            stderr.contains(expected),
            "the error says {expected:?}: {stderr}"
        );
    }
    // A node with an id of its own joins the same cache.
    let other = start(clustered(dir.path(), "other", &redis.url, 1_500));
    assert_eq!(cluster_view(&other)["node"]["registered"], true);

    // SIGKILL: no goodbye; the id comes free when the heartbeat expires,
    // and a new node with that id then starts.
    let killed_pid = twin.pid();
    twin.sigkill();
    let mut attempts = 0;
    let restarted = loop {
        attempts += 1;
        assert!(attempts < 600, "the killed node's id never came free");
        let mut child = clustered(dir.path(), "twin", &redis.url, 1_500)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Listening (first stdout line) or refused (exit 1).
        use std::io::BufRead;
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        if let Some(addr) = line.trim().strip_prefix("listening on ") {
            break Node {
                child,
                base: format!("http://{addr}"),
            };
        }
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("pid {killed_pid}")),
            "refused only because the killed node still held the id: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(cluster_view(&restarted)["node"]["registered"], true);

    // A clean stop gives the id back at once.
    restarted.stop();
    assert_eq!(
        redis_get(&redis, &key),
        None,
        "the stopped node's id is free"
    );
    drop(other);
}

fn redis_get(redis: &crate::support::RedisDatabase, key: &str) -> Option<Vec<u8>> {
    use dwengine::cache::Cache;
    redis.cache.get(key).unwrap()
}

#[test]
#[cfg_attr(
    not(dw_test_redis),
    ignore = "needs Redis: DW_TEST_REDIS_URL was not set when this test binary was built"
)]
fn each_sweep_runs_on_one_of_two_nodes_and_moves_to_the_other_when_its_holder_is_killed() {
    let redis = crate::support::redis_database();
    let dir = tempfile::tempdir().unwrap();
    // One sweep scope stands for the database the nodes would share (each
    // has its own SQLite file: one process per file).
    let node = |id: &str| {
        let mut command = clustered(dir.path(), id, &redis.url, 3_000);
        command.env("DW_SWEEP_SCOPE", "one-shared-store");
        start(command)
    };
    // A, started first, takes every lease before it listens.
    let a = node("node-a");
    let b = node("node-b");
    assert_eq!(cluster_view(&b)["sweeps"]["scope"], "one-shared-store");

    // A runs passes, B none; both name A as the holder. Sampled a while:
    // at no sample do both claim a sweep.
    let passes = |node: &Node, sweep: &str| {
        cluster_view(node)["sweeps"]["leases"][sweep]["passes"]
            .as_u64()
            .unwrap()
    };
    let a_before = passes(&a, "timeouts");
    wait_for("node-a runs more timeout passes", || {
        passes(&a, "timeouts") >= a_before + 10
    });
    for _ in 0..20 {
        let (va, vb) = (cluster_view(&a), cluster_view(&b));
        for sweep in SWEEPS {
            let (ea, eb) = (
                &va["sweeps"]["leases"][sweep],
                &vb["sweeps"]["leases"][sweep],
            );
            assert!(
                !(ea["elected"] == true && eb["elected"] == true),
                "both nodes run {sweep}: {va} {vb}"
            );
            if eb["elections"] == 0 {
                assert_eq!(
                    eb["passes"], 0,
                    "node-b never elected ran no {sweep} pass: {vb}"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let vb = cluster_view(&b);
    for sweep in SWEEPS {
        assert_eq!(vb["sweeps"]["leases"][sweep]["holder"], "node-a", "{vb}");
        assert_eq!(vb["sweeps"]["leases"][sweep]["elected"], false, "{vb}");
        assert_eq!(vb["sweeps"]["leases"][sweep]["passes"], 0, "{vb}");
    }
    let va = cluster_view(&a);
    for sweep in SWEEPS {
        assert_eq!(va["sweeps"]["leases"][sweep]["holder"], "node-a", "{va}");
        assert_eq!(va["sweeps"]["leases"][sweep]["elected"], true, "{va}");
        assert!(
            va["sweeps"]["leases"][sweep]["passes"].as_u64().unwrap() > 0,
            "{va}"
        );
    }

    // SIGKILL the holder: its leases expire and B takes every sweep over.
    a.sigkill();
    wait_for("node-b holds every sweep and runs passes", || {
        let vb = cluster_view(&b);
        SWEEPS.iter().all(|sweep| {
            let s = &vb["sweeps"]["leases"][sweep];
            s["elected"] == true && s["holder"] == "node-b" && s["passes"].as_u64().unwrap() > 0
        })
    });

    // A third node finds B holding them and waits its turn; when B stops
    // cleanly it hands them over at once.
    let c = node("node-c");
    let vc = cluster_view(&c);
    for sweep in SWEEPS {
        assert_eq!(vc["sweeps"]["leases"][sweep]["holder"], "node-b", "{vc}");
        assert_eq!(vc["sweeps"]["leases"][sweep]["elected"], false, "{vc}");
    }
    b.stop();
    for sweep in dwengine::cluster::Sweep::ALL {
        let key = dwengine::cluster::SweepLeases::key_in("one-shared-store", sweep);
        let held = redis_get(&redis, &key);
        assert!(
            held.as_deref()
                .is_none_or(|v| String::from_utf8_lossy(v).contains("node-c")),
            "node-b gave its lease on {} back",
            sweep.name()
        );
    }
    wait_for("node-c takes every sweep", || {
        let vc = cluster_view(&c);
        SWEEPS.iter().all(|sweep| {
            let s = &vc["sweeps"]["leases"][sweep];
            s["elected"] == true && s["holder"] == "node-c"
        })
    });
}

/// A sweep works on its node's store: nodes on one Redis with stores of
/// their own (SQLite files) must each sweep their own, never elect one
/// sweeper between them.
#[test]
#[cfg_attr(
    not(dw_test_redis),
    ignore = "needs Redis: DW_TEST_REDIS_URL was not set when this test binary was built"
)]
fn nodes_on_one_cache_with_stores_of_their_own_each_run_every_sweep() {
    let redis = crate::support::redis_database();
    let dir = tempfile::tempdir().unwrap();
    let a = start(clustered(dir.path(), "own-a", &redis.url, 3_000));
    let b = start(clustered(dir.path(), "own-b", &redis.url, 3_000));
    for (node, id) in [(&a, "own-a"), (&b, "own-b")] {
        wait_for("each node runs every sweep of its own store", || {
            let view = cluster_view(node);
            SWEEPS.iter().all(|sweep| {
                let s = &view["sweeps"]["leases"][sweep];
                s["elected"] == true && s["holder"] == id && s["passes"].as_u64().unwrap() > 0
            })
        });
        let scope = cluster_view(node)["sweeps"]["scope"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            scope.starts_with("sqlite:") && scope.contains(&format!("{id}.sqlite")),
            "{scope}"
        );
    }
}

#[test]
fn with_the_in_process_cache_a_lone_node_runs_every_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let mut lone = command(dir.path(), "lone", Path::new(":memory:"));
    lone.env("DW_TIMEOUT_SWEEP_INTERVAL_MS", "50")
        .env("DW_SCHEDULE_SWEEP_INTERVAL_MS", "50")
        .env("DW_EXTERNAL_PAYLOAD_SWEEP_INTERVAL_MS", "50");
    let lone = start(lone);
    wait_for("every sweep runs passes on the lone node", || {
        let view = cluster_view(&lone);
        view["cache_backend"] == "memory"
            && SWEEPS.iter().all(|sweep| {
                let s = &view["sweeps"]["leases"][sweep];
                s["elected"] == true && s["holder"] == "lone" && s["passes"].as_u64().unwrap() > 0
            })
    });
    assert_eq!(cluster_view(&lone)["node"]["registered"], true);
}

/// The lease primitive on both backends: a claim takes a free key or
/// renews the caller's own, never another's; a release removes only the
/// caller's own; the family's key count follows (Redis counts on write).
fn claims_and_releases_hold_leases_apart(backend: &'static str, cache: SharedCache) {
    {
        let key = "server:sweep-lease:test-claims";
        let family = "server:sweep-lease:";
        let ttl = Duration::from_secs(30);
        assert!(
            cache.claim(key, b"a", ttl).unwrap(),
            "[{backend}] free: taken"
        );
        assert!(!cache.claim(key, b"b", ttl).unwrap(), "[{backend}] a's");
        assert!(cache.claim(key, b"a", ttl).unwrap(), "[{backend}] renewed");
        assert_eq!(cache.count_family(family).unwrap(), 1, "[{backend}]");
        assert!(!cache.release(key, b"b").unwrap(), "[{backend}] not b's");
        assert_eq!(cache.get(key).unwrap().as_deref(), Some(&b"a"[..]));
        assert!(cache.release(key, b"a").unwrap(), "[{backend}]");
        assert!(!cache.release(key, b"a").unwrap(), "[{backend}] gone");
        assert_eq!(cache.count_family(family).unwrap(), 0, "[{backend}]");
        // A lapsed lease is free for the next claimant.
        assert!(cache.claim(key, b"b", Duration::from_millis(100)).unwrap());
        wait_for("b's short lease lapses and c takes it", || {
            cache.claim(key, b"c", ttl).unwrap()
        });
        assert_eq!(cache.get(key).unwrap().as_deref(), Some(&b"c"[..]));
        assert!(cache.release(key, b"c").unwrap());
    }
}

cache_variants!(claims_and_releases_hold_leases_apart);

/// Two nodes serving one PostgreSQL database (a schema of this test's own)
/// on one Redis database, each with its own id, cache connections and
/// wait-slot directory, as two machines would be; `tweak` adjusts both.
#[cfg(all(dw_test_redis, dw_test_postgres))]
fn two_nodes_on_one_database(
    redis: &crate::support::RedisDatabase,
    tweak: impl Fn(&mut dwengine::server::ServerConfig),
) -> (crate::support::TestServer, crate::support::TestServer) {
    let mut nodes = nodes_on_one_database(redis, &["node-a", "node-b"], tweak).into_iter();
    let a = nodes.next().expect("node-a");
    (a, nodes.next().expect("node-b"))
}

/// Nodes named `ids` on one PostgreSQL schema and one Redis database.
#[cfg(all(dw_test_redis, dw_test_postgres))]
fn nodes_on_one_database(
    redis: &crate::support::RedisDatabase,
    ids: &[&str],
    tweak: impl Fn(&mut dwengine::server::ServerConfig),
) -> Vec<crate::support::TestServer> {
    let url = crate::common::postgres_schema_url();
    let node = |id: &str| {
        let cache: SharedCache = std::sync::Arc::new(
            dwengine::cache::RedisCache::connect(&redis.url).expect("the leased Redis database"),
        );
        crate::support::TestServer::start(cache, |config| {
            config.server_id = id.to_owned();
            config.database_url = Some(url.clone());
            tweak(config);
        })
    };
    ids.iter().map(|id| node(id)).collect()
}

/// A start on node A wakes a workflow poll held by node B: the wake
/// crosses nodes through the Redis relay. B's idle recheck (the last
/// resort, which would find the task by itself) is set past the poll's
/// wait, so only a wake-up that crossed can answer the poll with the task.
#[test]
#[cfg_attr(
    not(all(dw_test_redis, dw_test_postgres)),
    ignore = "needs Redis and PostgreSQL: DW_TEST_REDIS_URL and DW_TEST_POSTGRES_URL were not both set when this test binary was built"
)]
fn a_poll_held_by_one_node_is_woken_by_a_start_on_another() {
    #[cfg(all(dw_test_redis, dw_test_postgres))]
    {
        const ROUNDS: usize = 12;
        let redis = crate::support::redis_database();
        let (a, b) = two_nodes_on_one_database(&redis, |config| {
            config.poll_idle_recheck = Duration::from_secs(3600);
        });
        let relay = |node: &crate::support::TestServer| {
            node.running.engine().cluster_snapshot()["wake_relay"].clone()
        };
        assert_eq!(relay(&a)["relayed"], true);
        assert_eq!(relay(&b)["relayed"], true);
        let mut latencies = Vec::new();
        for round in 0..ROUNDS {
            let queue = format!("wake-{round}");
            let workflow_id = format!("woken-{round}");
            let (answer, latency) = std::thread::scope(|scope| {
                let poll = scope.spawn(|| {
                    let answer =
                        b.poll("workflow", "default", &queue, &format!("p-{round}"), 60_000);
                    (answer, Instant::now())
                });
                // B holds the poll (subscribed to its channel) before A starts.
                wait_for("node-b holds the poll", || {
                    b.running.engine().poll_wakes().channels() == 1
                });
                let started = Instant::now();
                a.start_workflow("default", &workflow_id, &queue);
                let (answer, answered) = poll.join().expect("the poll thread");
                (answer, answered.saturating_duration_since(started))
            });
            let (status, body) = answer;
            assert_eq!(status, 200, "{body}");
            assert_eq!(
                body["task"]["workflow_id"], workflow_id,
                "round {round}: the poll held by node-b returned the task started on node-a, not a timeout: {body}"
            );
            latencies.push(latency);
        }
        let (sent, received) = (relay(&a), relay(&b));
        assert!(
            sent["published"].as_u64().unwrap() >= ROUNDS as u64,
            "{sent}"
        );
        assert!(
            received["received"].as_u64().unwrap() >= ROUNDS as u64,
            "{received}"
        );
        latencies.sort();
        eprintln!(
            "start on node-a -> poll answered by node-b: p50 {:?}, max {:?} over {ROUNDS} rounds",
            latencies[ROUNDS / 2],
            latencies[ROUNDS - 1]
        );
    }
}

/// A start whose queue has a poll waiting on the same node wakes that poll
/// alone: no relay message reaches the other node (`kept_here`). A poll
/// that takes the single wake-up but may not take the task (another
/// build-id cohort's) hands it on through the relay, and the other node's
/// poll of the task's cohort gets it: the idle recheck is an hour, so
/// nothing else could answer that poll with the task.
#[test]
#[cfg_attr(
    not(all(dw_test_redis, dw_test_postgres)),
    ignore = "needs Redis and PostgreSQL: DW_TEST_REDIS_URL and DW_TEST_POSTGRES_URL were not both set when this test binary was built"
)]
fn a_single_wake_up_stays_on_the_node_whose_poll_takes_it_or_reaches_the_other() {
    #[cfg(all(dw_test_redis, dw_test_postgres))]
    {
        use crate::support::TestServer;
        use serde_json::{json, Value};

        let redis = crate::support::redis_database();
        let (a, b) = two_nodes_on_one_database(&redis, |config| {
            config.poll_idle_recheck = Duration::from_secs(3600);
        });
        let relayed = |node: &TestServer, field: &str| {
            node.running.engine().cluster_snapshot()["wake_relay"][field]
                .as_u64()
                .unwrap_or_else(|| panic!("wake_relay.{field} is a count"))
        };
        let register = |node: &TestServer, worker: &str, queue: &str, build: &str| {
            let (status, answer) = node.post(
                "/api/worker/register",
                json!({ "worker_id": worker, "task_queue": queue, "build_id": build,
                        "runtime": "python", "sdk_version": "python-1.0" }),
            );
            assert_eq!(status, 200, "{answer}");
        };
        let long_poll =
            |node: &TestServer, worker: &str, queue: &str, build: &str, seconds: u64| {
                let (status, answer) = node.post(
                    "/api/worker/workflow-tasks/poll",
                    json!({ "task_queue": queue, "worker_id": worker, "build_id": build,
                        "poll_request_id": format!("{worker}-{queue}"),
                        "timeout_seconds": seconds }),
                );
                assert_eq!(status, 200, "{answer}");
                answer["task"].clone()
            };
        let waiting = |node: &TestServer, queue: &str| {
            let channel = dwengine::polling::wake_channel("default", queue, "workflow");
            assert!(
                crate::support::eventually(Duration::from_secs(30), || {
                    node.running.engine().poll_wakes().subscribers(&channel) >= 1
                }),
                "a poll of {queue} waits"
            );
        };
        let start = |node: &TestServer, workflow_id: &str, queue: &str, build: &str| {
            let (status, body) = node.post(
                "/api/workflows",
                json!({ "workflow_id": workflow_id, "workflow_type": "Order",
                        "task_queue": queue, "build_id": build,
                        "input": { "codec": "json", "blob": "[]" } }),
            );
            assert_eq!(status, 201, "{body}");
        };

        // Kept: node-a's own poll takes the start's wake-up.
        register(&a, "here", "kept", "v1");
        let heard_by_b = relayed(&b, "received");
        let task: Value = std::thread::scope(|scope| {
            let poll = scope.spawn(|| long_poll(&a, "here", "kept", "v1", 60));
            waiting(&a, "kept");
            start(&a, "wf-kept", "kept", "v1");
            poll.join().expect("the poll thread")
        });
        assert_eq!(task["workflow_id"], "wf-kept", "{task}");
        assert_eq!(relayed(&a, "kept_here"), 1);
        assert_eq!(relayed(&b, "received"), heard_by_b, "node-b heard nothing");

        // Handed on: node-a's v1 poll takes the wake-up of a start pinned
        // to v2, finds nothing it may take, and node-b's v2 poll gets it.
        register(&a, "old", "handed-on", "v1");
        register(&b, "new", "handed-on", "v2");
        std::thread::scope(|scope| {
            let old = scope.spawn(|| long_poll(&a, "old", "handed-on", "v1", 5));
            waiting(&a, "handed-on");
            let new = scope.spawn(|| long_poll(&b, "new", "handed-on", "v2", 60));
            waiting(&b, "handed-on");
            start(&a, "wf-handed-on", "handed-on", "v2");
            let task = new.join().expect("node-b's poll thread");
            assert_eq!(task["workflow_id"], "wf-handed-on", "{task}");
            let none = old.join().expect("node-a's poll thread");
            assert!(none.is_null(), "{none}");
        });
        assert_eq!(relayed(&a, "kept_here"), 2, "the v1 poll took it first");
    }
}

/// A start on a node with no poll of its queue wakes one poll of the
/// store, not every poll of the other nodes: two polls wait on node-b and
/// two on node-c, both nodes hear the relayed wake-up, one of them takes
/// it (a key added to Redis) and wakes one of its polls, which gets the
/// task; the other node leaves its polls waiting. The idle recheck is an
/// hour, so only that wake-up can answer a poll with the task.
#[test]
#[cfg_attr(
    not(all(dw_test_redis, dw_test_postgres)),
    ignore = "needs Redis and PostgreSQL: DW_TEST_REDIS_URL and DW_TEST_POSTGRES_URL were not both set when this test binary was built"
)]
fn a_relayed_start_wakes_one_poll_of_the_store() {
    #[cfg(all(dw_test_redis, dw_test_postgres))]
    {
        use serde_json::json;

        let redis = crate::support::redis_database();
        let nodes = nodes_on_one_database(&redis, &["node-a", "node-b", "node-c"], |config| {
            config.poll_idle_recheck = Duration::from_secs(3600);
        });
        let (a, waiting_nodes) = (&nodes[0], &nodes[1..]);
        let relayed = |node: &crate::support::TestServer, field: &str| {
            node.running.engine().cluster_snapshot()["wake_relay"][field]
                .as_u64()
                .unwrap_or_else(|| panic!("wake_relay.{field} is a count"))
        };
        let channel = dwengine::polling::wake_channel("default", "one-look", "workflow");
        let tasks: Vec<serde_json::Value> = std::thread::scope(|scope| {
            let polls: Vec<_> = waiting_nodes
                .iter()
                .enumerate()
                .flat_map(|(n, node)| (0..2).map(move |i| (node, format!("worker-{n}-{i}"))))
                .map(|(node, worker)| {
                    scope.spawn(move || {
                        let (status, answer) = node.post(
                            "/api/worker/workflow-tasks/poll",
                            json!({ "task_queue": "one-look", "worker_id": worker,
                                    "poll_request_id": format!("{worker}-1"),
                                    "timeout_seconds": 10 }),
                        );
                        assert_eq!(status, 200, "{answer}");
                        answer["task"].clone()
                    })
                })
                .collect();
            for node in waiting_nodes {
                assert!(
                    crate::support::eventually(Duration::from_secs(30), || {
                        node.running.engine().poll_wakes().subscribers(&channel) == 2
                    }),
                    "two polls wait on each of node-b and node-c"
                );
            }
            a.start_workflow("default", "wf-one-look", "one-look");
            polls
                .into_iter()
                .map(|poll| poll.join().expect("a poll thread"))
                .collect()
        });
        let leased: Vec<_> = tasks.iter().filter(|task| !task.is_null()).collect();
        assert_eq!(leased.len(), 1, "{tasks:?}");
        assert_eq!(leased[0]["workflow_id"], "wf-one-look");
        assert_eq!(relayed(a, "kept_here"), 0, "node-a holds no poll");
        let taken: Vec<(u64, u64)> = waiting_nodes
            .iter()
            .map(|node| {
                (
                    relayed(node, "taken_here"),
                    relayed(node, "taken_elsewhere"),
                )
            })
            .collect();
        assert!(
            taken == [(1, 0), (0, 1)] || taken == [(0, 1), (1, 0)],
            "one node took the wake-up, the other saw it taken: {taken:?}"
        );
    }
}

/// Workers polling both nodes at once for many tasks: each task is leased
/// once, to one worker, and only that lease completes it, through either
/// node (the store's lease fencing, across nodes).
#[test]
#[cfg_attr(
    not(all(dw_test_redis, dw_test_postgres)),
    ignore = "needs Redis and PostgreSQL: DW_TEST_REDIS_URL and DW_TEST_POSTGRES_URL were not both set when this test binary was built"
)]
fn two_nodes_never_hand_one_task_to_two_workers() {
    #[cfg(all(dw_test_redis, dw_test_postgres))]
    {
        use serde_json::{json, Value};
        use std::collections::HashMap;
        use std::sync::Mutex;

        const TASKS: usize = 80;
        const POLLERS_PER_NODE: usize = 4;
        let redis = crate::support::redis_database();
        let (a, b) = two_nodes_on_one_database(&redis, |_| {});
        let nodes = [&a, &b];
        let leased: Mutex<Vec<(usize, String, Value)>> = Mutex::new(Vec::new());
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for (node, server) in nodes.iter().copied().enumerate() {
                for poller in 0..POLLERS_PER_NODE {
                    let (leased, done) = (&leased, &done);
                    scope.spawn(move || {
                        let worker = format!("worker-{node}-{poller}");
                        let mut n = 0;
                        while !done.load(std::sync::atomic::Ordering::Acquire) {
                            n += 1;
                            let (status, answer) = server.post(
                                "/api/worker/workflow-tasks/poll",
                                json!({ "task_queue": "race", "worker_id": worker,
                                        "poll_request_id": format!("{worker}-{n}"),
                                        "timeout_seconds": 1 }),
                            );
                            assert_eq!(status, 200, "{answer}");
                            if !answer["task"].is_null() {
                                leased.lock().unwrap().push((
                                    node,
                                    worker.clone(),
                                    answer["task"].clone(),
                                ));
                            }
                        }
                    });
                }
            }
            // Starts through both nodes while the workers poll.
            for i in 0..TASKS {
                nodes[i % 2].start_workflow("default", &format!("race-{i}"), "race");
            }
            wait_for("every task leased", || {
                leased.lock().unwrap().len() >= TASKS
            });
            // The workers' polls in flight end and are counted too: a task
            // handed out a second time would be among them.
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        let leased = leased.into_inner().unwrap();
        assert_eq!(leased.len(), TASKS, "each task leased exactly once");
        let mut by_task: HashMap<String, usize> = HashMap::new();
        let mut workflows: HashMap<String, usize> = HashMap::new();
        for (_, _, task) in &leased {
            *by_task
                .entry(task["task_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
            *workflows
                .entry(task["workflow_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        assert!(by_task.values().all(|n| *n == 1), "{by_task:?}");
        assert_eq!(workflows.len(), TASKS, "every workflow's task leased");
        let per_node = [0, 1].map(|n| leased.iter().filter(|(node, _, _)| *node == n).count());
        eprintln!("tasks leased through node-a and node-b: {per_node:?}");

        // Fencing across nodes: each task completes through the node that
        // did not lease it, only with its own lease; another worker's
        // report and a repeat of the completion are refused.
        for (node, worker, task) in &leased {
            let other = nodes[1 - node];
            let path = format!(
                "/api/worker/workflow-tasks/{}/complete",
                task["task_id"].as_str().unwrap()
            );
            let complete = |owner: &str| {
                other.post(
                    &path,
                    json!({ "lease_owner": owner,
                            "workflow_task_attempt": task["workflow_task_attempt"],
                            "commands": [{ "type": "complete_workflow",
                                           "result": { "codec": "json", "blob": "1" } }] }),
                )
            };
            let intruder = if worker == "worker-0-0" {
                "worker-1-1"
            } else {
                "worker-0-0"
            };
            let (status, body) = complete(intruder);
            assert_eq!(status, 409, "{body}");
            let (status, body) = complete(worker);
            assert_eq!(status, 200, "{body}");
            let (status, body) = complete(worker);
            assert_eq!(status, 409, "a task completes once: {body}");
        }
    }
}

/// A node whose registration lapsed while another live node registered the
/// same id stops answering ready (a balancer sends its traffic elsewhere)
/// until that node goes and its heartbeat takes the id back.
#[test]
fn a_node_whose_id_was_taken_over_is_not_ready_until_it_has_it_back() {
    use dwengine::cluster::{NodeIdentity, NodeToken};
    let cache = crate::support::memory_cache();
    let node = crate::support::TestServer::start(cache.clone(), |config| {
        config.node_lease = Duration::from_millis(300);
    });
    // Asked until ready, failing on any 503 but a stalled PostgreSQL
    // writer's (DW_TEST_BACKEND), which a loaded machine's first writes
    // can be.
    node.ready();
    let key = NodeIdentity::key("test-node");
    let intruder = NodeToken::new("test-node");
    // The registration lapses and the other node's start takes the id
    // (retried if this node's heartbeat re-took it in between).
    wait_for("another node holds the id", || {
        let _ = cache.forget(&key);
        cache
            .add(&key, intruder.as_bytes(), Duration::from_secs(600))
            .unwrap()
    });
    let mut body = serde_json::Value::Null;
    wait_showing("the node answers not ready for its taken id", || {
        let status;
        (status, body) = node.get("/api/ready");
        if status == 503 && body["checks"]["node_id"] == "taken" {
            Ok(())
        } else {
            Err(format!("{status} {body}"))
        }
    });
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("DW_SERVER_ID \"test-node\"") && message.contains("stop one of them"),
        "{message}"
    );
    assert_eq!(
        node.running.engine().cluster_snapshot()["node"]["registered"],
        false
    );
    // The other node stops: the heartbeat takes the id back.
    assert!(cache.release(&key, intruder.as_bytes()).unwrap());
    // Not ready for the taken id until the heartbeat has it back; not
    // ready for anything else at all.
    node.ready_after("node_id", "taken");
}

/// Claims run side by side on PostgreSQL: a claim held open in its
/// transaction (its task leased, not yet committed) does not keep another
/// worker's claim of the same queue waiting; that claim takes the other
/// task (the held one is locked and skipped, never handed out twice), and
/// once both commit the queue's counters equal its rows. Under one write
/// lock for every transaction the second claim would wait for the first:
/// it is waited on with a generous deadline, then the first is let go.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn claims_of_one_queue_run_side_by_side_on_postgres() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{Store, TaskKind};
        use std::sync::mpsc;

        const PATIENCE: Duration = Duration::from_secs(60);
        let url = crate::common::postgres_schema_url();
        let open =
            || Store::open_postgres(&url, crate::common::config(&[])).expect("a PostgreSQL store");
        let (holder, other) = (open(), open());
        for i in 0..2 {
            holder
                .start_workflow(crate::common::start(&format!("side-by-side-{i}")), None)
                .expect("start");
        }
        let lease = Duration::from_secs(30);
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::scope(|scope| {
            let holding = scope.spawn(move || {
                holder.claim(|s| {
                    let task = s.lease_task(
                        TaskKind::Workflow,
                        "default",
                        "orders",
                        "worker-a",
                        "poll-a",
                        lease,
                    )?;
                    held_tx.send(task.clone()).expect("the test waits for it");
                    // Held open (uncommitted) until the test lets go.
                    let _ = release_rx.recv_timeout(PATIENCE * 2);
                    Ok(task)
                })
            });
            let Ok(first) = held_rx.recv_timeout(PATIENCE) else {
                panic!(
                    "the first claim did not lease: {:?}",
                    holding.join().expect("the holder thread")
                );
            };
            let first = first.expect("a task for the first claim");
            scope.spawn(move || {
                let claimed = other.claim(|s| {
                    s.lease_task(
                        TaskKind::Workflow,
                        "default",
                        "orders",
                        "worker-b",
                        "poll-b",
                        lease,
                    )
                });
                let _ = done_tx.send(claimed);
            });
            let second = done_rx.recv_timeout(PATIENCE);
            release_tx.send(()).expect("the holder waits");
            let second = second
                .expect("the second claim finished while the first was still open")
                .expect("the second claim")
                .expect("the second claim found the other task");
            assert_ne!(
                first.task_id, second.task_id,
                "the task held by the open claim is skipped, not handed out twice"
            );
            assert_ne!(first.workflow_id, second.workflow_id);
            let committed = holding
                .join()
                .expect("the holder thread")
                .expect("the first claim commits");
            assert_eq!(committed, Some(first));
        });
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        let counts = client
            .query_one(
                "SELECT workflow_ready, workflow_leased FROM task_queue_state \
                 WHERE namespace = 'default' AND task_queue = 'orders'",
                &[],
            )
            .expect("the queue's counters");
        let rows = client
            .query_one(
                "SELECT COUNT(*) FILTER (WHERE status = 'ready'), \
                 COUNT(*) FILTER (WHERE status = 'leased') FROM dispatch_tasks \
                 WHERE kind = 'workflow' AND namespace = 'default' AND task_queue = 'orders'",
                &[],
            )
            .expect("the queue's rows");
        assert_eq!(
            (counts.get::<_, i64>(0), counts.get::<_, i64>(1)),
            (rows.get::<_, i64>(0), rows.get::<_, i64>(1)),
            "counters equal rows"
        );
        assert_eq!(rows.get::<_, i64>(1), 2, "both tasks leased");
    }
}

/// A claim on PostgreSQL costs few round trips: its `BEGIN` and lock go
/// with its first statement, the candidate row carries the task's run and
/// whether another task of the queue is ready, so a warm workflow-task
/// claim is the candidate query, the held-signal look, the lease's
/// UPDATE sent ahead of the task's load (whose answer it does not need),
/// the load's second read and the COMMIT: five (nine before, six until
/// the UPDATE went with the load); and the answers are what they were:
/// `more_ready` while another task waits, not for the last one.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_claim_on_postgres_sends_its_begin_with_its_first_statement() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{Store, TaskKind};

        let url = crate::common::postgres_schema_url();
        let store = Store::open_postgres(&url, crate::common::config(&[])).expect("a store");
        for i in 0..3 {
            store
                .start_workflow(crate::common::start(&format!("trips-{i}")), None)
                .expect("start");
        }
        let lease = Duration::from_secs(30);
        let claim = |poll: &str| {
            let before = store.round_trips();
            let task = store
                .claim(|s| s.lease_task(TaskKind::Workflow, "default", "orders", "w", poll, lease))
                .expect("the claim");
            (task, store.round_trips() - before)
        };
        // The first claim prepares its statements on this session.
        let (first, _) = claim("poll-1");
        assert!(first.expect("a task").more_ready);
        let (second, trips) = claim("poll-2");
        let second = second.expect("a task");
        assert!(second.more_ready, "a third task is ready");
        let (third, trips_last) = claim("poll-3");
        let third = third.expect("a task");
        assert!(!third.more_ready, "no task is left");
        assert_ne!(second.task_id, third.task_id);
        let (none, _) = claim("poll-4");
        assert!(none.is_none());
        for trips in [trips, trips_last] {
            assert_eq!(trips, 5, "round trips of a warm workflow-task claim");
        }
    }
}

/// An activity claim on PostgreSQL arms the attempt's deadline with the
/// lease's own `UPDATE`: the lease's length and the deadline come from the
/// activity's options and its task's creation, read with one statement,
/// where the lease used to read the row back after writing it and write
/// the deadline again (six round trips for a warm claim of an activity
/// with a start-to-close timeout, from eight; five since the lease goes
/// ahead of the task's load in one round trip). The deadline is what it was:
/// the attempt's start-to-close from its lease, since its schedule-to-close
/// from its scheduling is later.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn an_activity_claim_on_postgres_arms_its_deadline_with_its_lease() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{Store, TaskKind, WorkflowCommand, WorkflowTaskFence};

        let url = crate::common::postgres_schema_url();
        let store = Store::open_postgres(&url, crate::common::config(&[])).expect("a store");
        let lease = Duration::from_secs(300);
        let mut charge = WorkflowCommand::activity("charge", serde_json::json!([1]));
        if let WorkflowCommand::ScheduleActivity {
            start_to_close_timeout,
            schedule_to_close_timeout,
            ..
        } = &mut charge
        {
            *start_to_close_timeout = Some(30);
            *schedule_to_close_timeout = Some(3_600);
        }
        for i in 0..3 {
            store
                .start_workflow(crate::common::start(&format!("armed-{i}")), None)
                .expect("start");
            let task = store
                .lease_task(TaskKind::Workflow, "default", "orders", "w", "p", lease)
                .expect("a claim")
                .expect("a workflow task");
            let fence = WorkflowTaskFence {
                lease_owner: &task.lease_owner,
                attempt: task.attempt,
            };
            store
                .complete_workflow_task(task.task_id, fence, std::slice::from_ref(&charge))
                .expect("the activity is scheduled");
        }
        let claim = |poll: &str| {
            let before = store.round_trips();
            let task = store
                .claim(|s| s.lease_task(TaskKind::Activity, "default", "orders", "w", poll, lease))
                .expect("the claim")
                .expect("an activity task");
            (task, store.round_trips() - before)
        };
        // The first claim prepares its statements on this session.
        let _ = claim("poll-1");
        let (second, trips) = claim("poll-2");
        let (third, trips_last) = claim("poll-3");
        assert_ne!(second.task_id, third.task_id);
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        for task in [&second, &third] {
            let row = client
                .query_one(
                    "SELECT timeout_at_ms, timeout_kind, attempt_started_at_ms, lease_expires_at_ms \
                     FROM dispatch_tasks WHERE id = $1",
                    &[&task.task_id],
                )
                .expect("the leased task");
            let (at, kind, started, expires): (Option<i64>, Option<String>, i64, i64) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            assert_eq!(
                (at, kind.as_deref()),
                (Some(started + 30_000), Some("start_to_close")),
                "the attempt's deadline is its start-to-close from its lease"
            );
            assert_eq!(
                expires,
                started + 30_000,
                "the lease runs for the start-to-close"
            );
        }
        for trips in [trips, trips_last] {
            assert_eq!(trips, 5, "round trips of a warm activity claim");
        }
    }
}

/// A describe on PostgreSQL is one round trip once its statements are
/// prepared: its snapshot's `BEGIN`, its five reads and its `COMMIT` go as
/// one pipeline (`Connection::read_together`), by run id or by workflow id,
/// for an open run and for a closed one (whose terminal event is read by a
/// join, not after the row), and for a workflow id with no run. It was
/// seven. Fails if any of them goes back to a round trip of its own; the
/// same for the history page an SDK reads once the run closed.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_describe_on_postgres_is_one_round_trip() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{RunStatus, Store};

        let url = crate::common::postgres_schema_url();
        let store = Store::open_postgres(&url, crate::common::config(&[])).expect("a store");
        let run = store
            .start_workflow(crate::common::start("described"), None)
            .expect("start")
            .run;
        let trips = |describe: &dyn Fn() -> Option<RunStatus>| {
            let before = store.round_trips();
            let status = describe();
            (status, store.round_trips() - before)
        };
        let latest = || {
            store
                .describe_latest("default", "described")
                .expect("describe")
                .map(|(_, (d, (_, terminal), _))| {
                    assert_eq!(terminal.is_some(), d.run.status != RunStatus::Running);
                    d.run.status
                })
        };
        let by_id = || Some(store.describe_detailed(run).expect("describe").0.run.status);
        // The first of each prepares its statements on this session.
        latest();
        by_id();
        assert_eq!(
            trips(&latest),
            (Some(RunStatus::Running), 1),
            "by workflow id"
        );
        assert_eq!(trips(&by_id), (Some(RunStatus::Running), 1), "by run id");
        let missing = || {
            store
                .describe_latest("default", "no-such-workflow")
                .expect("describe")
                .map(|(_, (d, _, _))| d.run.status)
        };
        assert_eq!(trips(&missing), (None, 1), "a workflow id with no run");
        store.terminate(run, "done", None).expect("terminate");
        assert_eq!(
            trips(&latest),
            (Some(RunStatus::Terminated), 1),
            "closed, by workflow id"
        );
        assert_eq!(
            trips(&by_id),
            (Some(RunStatus::Terminated), 1),
            "closed, by run id"
        );
        // The history page the SDK reads next: the run's row and the page
        // together, one round trip too (once prepared), paged as before.
        let page = |from: u64, events: usize| {
            let limit = dwengine::store::HistoryPageLimit::events(events);
            store
                .history_page_of("default", "described", run, from, limit)
                .expect("a page")
        };
        let whole = page(0, 1000).expect("the run's page");
        let before = store.round_trips();
        let (first, length) = page(0, 1).expect("the run's page");
        assert_eq!(
            store.round_trips() - before,
            1,
            "round trips of a history page"
        );
        assert_eq!(length, whole.1);
        assert_eq!(whole.0.events.len() as u64, length);
        assert_eq!(first.events, whole.0.events[..1]);
        assert_eq!(first.next_sequence, Some(1));
        let (rest, _) = page(1, 1000).expect("the run's page");
        assert_eq!(rest.events, whole.0.events[1..]);
        assert_eq!(rest.next_sequence, None);
        assert!(
            store
                .history_page_of("default", "another", run, 0, Default::default())
                .expect("a page")
                .is_none(),
            "a run of another workflow id is not found"
        );
    }
}

/// A worker's report finds where its task belongs (namespace, queue, run,
/// the run's queue) in one round trip inside its write transaction, where
/// it took two for a workflow task's completion and three for an
/// activity's report.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_reports_task_home_is_one_round_trip_on_postgres() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{Store, TaskKind, WorkflowCommand, WorkflowTaskFence};

        let url = crate::common::postgres_schema_url();
        let store = Store::open_postgres(&url, crate::common::config(&[])).expect("a store");
        let run = store
            .start_workflow(crate::common::start("homed"), None)
            .expect("start")
            .run;
        let lease = |kind| {
            store
                .lease_task(kind, "default", "orders", "w", "p", Duration::from_secs(30))
                .expect("a claim")
                .expect("a ready task")
        };
        let task = lease(TaskKind::Workflow);
        let mut activity = WorkflowCommand::activity("charge", serde_json::json!([1]));
        if let WorkflowCommand::ScheduleActivity { queue, .. } = &mut activity {
            *queue = Some("payments".into());
        }
        store
            .complete_workflow_task(
                task.task_id,
                WorkflowTaskFence {
                    lease_owner: &task.lease_owner,
                    attempt: task.attempt,
                },
                &[activity],
            )
            .expect("the workflow task completes");
        let activity = store
            .lease_task(
                TaskKind::Activity,
                "default",
                "payments",
                "w",
                "p2",
                Duration::from_secs(30),
            )
            .expect("a claim")
            .expect("the activity task on its own queue");
        store.task_home(activity.task_id).expect("warm");
        let before = store.round_trips();
        let home = store.task_home(activity.task_id).expect("the task's home");
        assert_eq!(store.round_trips() - before, 1);
        assert_eq!(
            (home.namespace.as_str(), home.task_queue.as_str(), home.run),
            ("default", "payments", run)
        );
        assert_eq!(home.run_task_queue, "orders");
        assert!(matches!(
            store.task_home(i64::MAX),
            Err(dwengine::store::Error::ItemNotFound { item: "task", .. })
        ));
    }
}

/// Writes queued while a PostgreSQL node's writer waits at `BEGIN` for the
/// write lock (other nodes' writers and the claims hold it) join the
/// transaction that waited, instead of each paying a transaction and a
/// lock wait of its own after it: one commit for all of them.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn writes_queued_while_the_writer_waits_for_the_lock_join_its_transaction() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{SharedStore, Store};
        use std::sync::mpsc;

        const PATIENCE: Duration = Duration::from_secs(60);
        const QUEUED: usize = 8;
        let url = crate::common::postgres_schema_url();
        let mut config = crate::common::config(&[]);
        // The lock is held while the test looks and queues, however slow
        // the machine: no lock wait may end by its timeout.
        config.postgres.lock_timeout = PATIENCE * 2;
        let store = SharedStore::open_postgres(&url, config, 1).expect("a node's store");
        let start =
            |id: String| move |s: &Store| s.start_run(crate::common::start(&id)).map(|_| ());
        store.write(start("warm".into())).expect("a first write");

        // Another session holds the write lock, as another node's writer
        // in its transaction would.
        let mut holder = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let mut held = holder.transaction().unwrap();
        held.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))",
            &[&dwengine::store::db::WRITE_LOCK],
        )
        .unwrap();
        let before = store.commits();
        let (answered, answers) = mpsc::channel();
        let submit = |id: String| {
            let answered = answered.clone();
            store.submit(start(id), move |result| {
                let _ = answered.send(result);
            });
        };
        submit("first".into());
        // The writer took the first write alone and waits for the lock.
        let mut watcher = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let waiting = crate::support::eventually(PATIENCE, || {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                     AND classid::bigint = $1::bigint AND objid = hashtext(current_schema())::oid",
                    &[&i64::from(dwengine::store::db::WRITE_LOCK)],
                )
                .unwrap()
                .get(0);
            waiting == 1
        });
        assert!(waiting, "the writer never waited for the write lock");
        for n in 0..QUEUED {
            submit(format!("queued-{n}"));
        }
        held.rollback().unwrap();
        for _ in 0..=QUEUED {
            answers
                .recv_timeout(PATIENCE)
                .expect("every write is answered")
                .expect("every write commits");
        }
        assert_eq!(
            store.commits() - before,
            1,
            "the writes queued during the lock wait committed in the transaction that waited"
        );
    }
}

/// Workflow starts of one series commit beside each other on PostgreSQL:
/// node A's start batch is held open (uncommitted, its run inserted) while
/// node B's start of another workflow id of the same namespace, queue and
/// type must commit meanwhile (waited on with a generous deadline, no
/// timing assertion). It fails if start batches took the write lock
/// exclusively (B waits for the lock) or if the series' and queue's counter
/// rows were locked at insert (B waits for A's row locks). Both commits are
/// counted: the counters equal the rows.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn starts_of_one_series_run_side_by_side_on_postgres() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::SharedStore;
        use std::sync::{mpsc, Arc, Mutex};

        const PATIENCE: Duration = Duration::from_secs(60);
        let url = crate::common::postgres_schema_url();
        let open = || {
            SharedStore::open_postgres(&url, crate::common::config(&[]), 1)
                .expect("a PostgreSQL node's store")
        };
        let (a, b) = (open(), open());
        let key = "default/orders/OrderWorkflow".to_owned();
        let (held_tx, held_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::scope(|scope| {
            let held_key = key.clone();
            let holding = scope.spawn(|| {
                a.start(held_key, move |s| {
                    let started = s.start_workflow(crate::common::start("held"), None)?;
                    let _ = held_tx.send(());
                    // Held open (uncommitted) until the test lets go.
                    let _ = release_rx.lock().unwrap().recv_timeout(PATIENCE * 2);
                    Ok(started.run)
                })
            });
            held_rx
                .recv_timeout(PATIENCE)
                .expect("node A's start batch inserted its run");
            scope.spawn(|| {
                let started = b.start(key, |s| {
                    s.start_workflow(crate::common::start("free"), None)
                });
                let _ = done_tx.send(started);
            });
            let second = done_rx.recv_timeout(PATIENCE);
            release_tx.send(()).expect("the holder waits");
            second
                .expect("node B's start committed while node A's start batch was still open")
                .expect("node B's start");
            holding
                .join()
                .expect("the holder thread")
                .expect("node A's start commits");
        });
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        let counted = client
            .query_one(
                "SELECT (SELECT started FROM workflow_run_series WHERE namespace = 'default' \
                 AND task_queue = 'orders' AND workflow_type = 'OrderWorkflow'), \
                 (SELECT workflow_ready FROM task_queue_state WHERE namespace = 'default' \
                 AND task_queue = 'orders')",
                &[],
            )
            .expect("the counters");
        let rows = client
            .query_one(
                "SELECT (SELECT COUNT(*) FROM runs), (SELECT COUNT(*) FROM dispatch_tasks \
                 WHERE kind = 'workflow' AND status = 'ready')",
                &[],
            )
            .expect("the rows");
        assert_eq!(rows.get::<_, i64>(0), 2, "both runs committed");
        assert_eq!(
            (counted.get::<_, i64>(0), counted.get::<_, i64>(1)),
            (rows.get::<_, i64>(0), rows.get::<_, i64>(1)),
            "counters equal rows"
        );
    }
}

/// Two nodes starting the same workflow ids at once, through HTTP: each id
/// gets exactly one run (one 201, every other attempt 409 "already
/// started"), and the counters equal the rows. Starts of one id on two
/// nodes meet on the id's lock: the one that finds it held runs again as an
/// ordinary write and sees the other's run.
#[test]
#[cfg_attr(
    not(all(dw_test_redis, dw_test_postgres)),
    ignore = "needs Redis and PostgreSQL: DW_TEST_REDIS_URL and DW_TEST_POSTGRES_URL were not both set when this test binary was built"
)]
fn two_nodes_starting_one_workflow_id_open_one_run() {
    #[cfg(all(dw_test_redis, dw_test_postgres))]
    {
        use serde_json::json;
        use std::collections::HashMap;
        use std::sync::Mutex;

        const IDS: usize = 40;
        const CALLERS_PER_NODE: usize = 3;
        let redis = crate::support::redis_database();
        let (a, b) = two_nodes_on_one_database(&redis, |_| {});
        let nodes = [&a, &b];
        let answers: Mutex<HashMap<usize, Vec<u16>>> = Mutex::new(HashMap::new());
        std::thread::scope(|scope| {
            for server in nodes {
                for caller in 0..CALLERS_PER_NODE {
                    let answers = &answers;
                    scope.spawn(move || {
                        for n in 0..IDS {
                            // Callers walk the ids in different orders.
                            let i = (n * (caller + 1) * 7 + caller) % IDS;
                            let (status, body) = server.post(
                                "/api/workflows",
                                json!({ "workflow_id": format!("one-run-{i}"),
                                        "workflow_type": "Order", "task_queue": "one-run",
                                        "input": { "codec": "json", "blob": "[]" } }),
                            );
                            assert!(status == 201 || status == 409, "{status}: {body}");
                            answers.lock().unwrap().entry(i).or_default().push(status);
                        }
                    });
                }
            }
        });
        let answers = answers.into_inner().unwrap();
        for (id, statuses) in &answers {
            let created = statuses.iter().filter(|s| **s == 201).count();
            assert_eq!(created, 1, "one-run-{id}: {statuses:?}");
        }
        let (status, body) = a.get("/api/workflows?page_size=200");
        assert_eq!(status, 200, "{body}");
        let listed = body["workflows"].as_array().expect("workflows").len();
        assert_eq!(listed, IDS, "one run per workflow id: {body}");
        // Counted at commit, once per run, whichever node started it.
        let (status, _, metrics) = b.get_text("/api/system/prometheus-metrics?namespace=default");
        assert_eq!(status, 200, "{metrics}");
        let series = format!(
            "dw_workflow_runs_total{{task_queue=\"one-run\",workflow_type=\"Order\"}} {IDS}"
        );
        assert!(
            metrics.lines().any(|line| line == series),
            "the run series counts each run once ({series}):\n{metrics}"
        );
    }
}

/// A workflow-task completion on PostgreSQL holds the write lock for few
/// round trips: the writes whose answers no code reads (history appends,
/// counters, dispatch rows) go pipelined ahead of the next statement
/// (`Connection::execute_queued`) instead of one round trip each, and
/// nothing is read that the transaction already knows (an activity task's
/// deadline, a run's status and pending messages, an activity's options,
/// the run's row twice).
/// Counted
/// on a warm session for an SDK workflow's three completions: the
/// workflow task that schedules an activity, the activity's, and the
/// workflow task that completes the run. Fails if any of them takes more
/// than its budget.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_completion_on_postgres_sends_its_unread_writes_ahead() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::{
            attempt_id, ActivityFence, LeasedTask, RunStatus, Store, TaskKind, WorkflowCommand,
            WorkflowTaskFence,
        };

        let url = crate::common::postgres_schema_url();
        let store = Store::open_postgres(&url, crate::common::config(&[])).expect("a store");
        let lease = |kind| -> LeasedTask {
            store
                .lease_task(kind, "default", "orders", "w", "p", Duration::from_secs(30))
                .expect("a claim")
                .expect("a ready task")
        };
        let trips = |step: &dyn Fn()| {
            let before = store.round_trips();
            step();
            store.round_trips() - before
        };
        let mut counted = Vec::new();
        for i in 0..2 {
            let run = store
                .start_workflow(crate::common::start(&format!("completed-{i}")), None)
                .expect("start")
                .run;
            let task = lease(TaskKind::Workflow);
            let fence = WorkflowTaskFence {
                lease_owner: &task.lease_owner,
                attempt: task.attempt,
            };
            let schedule = trips(&|| {
                let done = store
                    .complete_workflow_task(
                        task.task_id,
                        fence,
                        &[WorkflowCommand::activity("charge", serde_json::json!([1]))],
                    )
                    .expect("the first workflow task completes");
                assert_eq!(done.run_status, RunStatus::Running);
                assert_eq!(done.activity_queues.len(), 1);
            });
            let activity = lease(TaskKind::Activity);
            let attempt = attempt_id(activity.task_id, activity.attempt);
            let activity_fence = ActivityFence {
                lease_owner: &activity.lease_owner,
                activity_attempt_id: &attempt,
            };
            let result = serde_json::json!({ "codec": "json", "blob": "1" });
            let settle = trips(&|| {
                store
                    .complete_activity_attempt(activity.task_id, activity_fence, &result)
                    .expect("the activity completes");
            });
            let task = lease(TaskKind::Workflow);
            let fence = WorkflowTaskFence {
                lease_owner: &task.lease_owner,
                attempt: task.attempt,
            };
            let complete: Vec<WorkflowCommand> = serde_json::from_value(serde_json::json!([
                { "type": "complete_workflow", "result": { "codec": "json", "blob": "2" } }
            ]))
            .expect("commands");
            let finish = trips(&|| {
                let done = store
                    .complete_workflow_task(task.task_id, fence, &complete)
                    .expect("the last workflow task completes");
                assert_eq!(done.run_status, RunStatus::Completed);
            });
            assert_eq!(
                store.describe_detailed(run).expect("describe").0.run.status,
                RunStatus::Completed
            );
            counted.push((schedule, settle, finish));
        }
        // Each in a transaction of its own here (its `BEGIN` and `COMMIT`
        // included); in the group-commit writer those are the batch's.
        // Before the unread writes were queued: 17, 15 and 26; before the
        // activity task was armed as written, the follow-up task queued in
        // one statement, the run's head and command row read together and
        // the activity and its run read once: 14, 12, 17.
        let (schedule, settle, finish) = counted[1];
        assert!(
            schedule <= 10,
            "round trips of a warm workflow-task completion that schedules an activity: {schedule} (cold then warm: {counted:?})"
        );
        assert!(
            settle <= 8,
            "round trips of a warm activity completion: {settle} (cold then warm: {counted:?})"
        );
        assert!(
            finish <= 15,
            "round trips of a warm workflow-task completion that completes the run: {finish} (cold then warm: {counted:?})"
        );
    }
}

/// A queued write that fails (`Connection::execute_queued`: its error comes
/// back with a later call) still fails its store write, and nothing of that
/// write stays. A trigger refuses, for workflow ids starting `refused`, the
/// history row of a run's completion (queued after the run's counters,
/// before its status, task and streams were written, queued too) and the
/// `done` of an activity task (an activity completion's last write, sent
/// with what ends the write). Run on its own the workflow-task completion
/// rolls back whole; an activity completion run in one group-commit job
/// before another workflow's fails alone (a write sends what it queued
/// before it reports success, not with the next job's first statement),
/// and the other one commits.
#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn a_queued_write_that_fails_rolls_back_its_whole_write() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::writer::GroupCommitWriter;
        use dwengine::store::{
            attempt_id, ActivityFence, Error, LeasedTask, Store, TaskKind, WorkflowCommand,
            WorkflowTaskFence,
        };

        let url = crate::common::postgres_schema_url();
        let store = Store::open_postgres(&url, crate::common::config(&[])).expect("a store");
        let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        client
            .batch_execute(
                "CREATE FUNCTION refused(run BIGINT) RETURNS BOOLEAN LANGUAGE sql AS \
                   $$ SELECT workflow_id LIKE 'refused%' FROM runs WHERE id = run $$; \
                 CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN RAISE EXCEPTION 'refused by the test'; END $$; \
                 CREATE TRIGGER refuse_completion BEFORE INSERT ON history_events FOR EACH ROW \
                 WHEN (NEW.event_type = 'WorkflowCompleted' AND refused(NEW.run_id)) \
                 EXECUTE FUNCTION refuse(); \
                 CREATE TRIGGER refuse_activity_done BEFORE UPDATE ON dispatch_tasks FOR EACH ROW \
                 WHEN (NEW.kind = 'activity' AND NEW.status = 'done' AND refused(NEW.run_id)) \
                 EXECUTE FUNCTION refuse()",
            )
            .expect("the refusing triggers");
        fn fence(t: &LeasedTask) -> WorkflowTaskFence<'_> {
            WorkflowTaskFence {
                lease_owner: &t.lease_owner,
                attempt: t.attempt,
            }
        }
        let lease = |kind| -> LeasedTask {
            store
                .lease_task(kind, "default", "orders", "w", "p", Duration::from_secs(30))
                .expect("a claim")
                .expect("a ready task")
        };
        // What the run's rows say: status, history length, its events, and
        // its tasks not done.
        let mut state = |workflow_id: &str| -> (String, i64, i64, i64) {
            let row = client
                .query_one(
                    "SELECT r.status, r.history_length, \
                     (SELECT COUNT(*) FROM history_events h WHERE h.run_id = r.id), \
                     (SELECT COUNT(*) FROM dispatch_tasks d WHERE d.run_id = r.id AND d.status != 'done') \
                     FROM runs r WHERE r.workflow_id = $1",
                    &[&workflow_id],
                )
                .expect("the run's rows");
            (row.get(0), row.get(1), row.get(2), row.get(3))
        };

        // On its own: the whole transaction goes.
        store
            .start_workflow(crate::common::start("refused-alone"), None)
            .expect("start");
        let task = lease(TaskKind::Workflow);
        let before = state("refused-alone");
        let complete: Vec<WorkflowCommand> = serde_json::from_value(serde_json::json!([
            { "type": "complete_workflow", "result": { "codec": "json", "blob": "2" } }
        ]))
        .expect("commands");
        let error = store
            .complete_workflow_task(task.task_id, fence(&task), &complete)
            .expect_err("the refused history row fails the completion");
        assert!(error.to_string().contains("refused by the test"), "{error}");
        assert_eq!(
            state("refused-alone"),
            before,
            "nothing of the completion stays"
        );
        assert_eq!(before.0, "running");

        // In one group-commit job before another completion: it fails alone.
        let mut activities = Vec::new();
        for id in ["refused-beside", "accepted-beside"] {
            store
                .start_workflow(crate::common::start(id), None)
                .expect("start");
            let task = lease(TaskKind::Workflow);
            assert_eq!(task.workflow_id, id);
            store
                .complete_workflow_task(
                    task.task_id,
                    fence(&task),
                    &[WorkflowCommand::activity("charge", serde_json::json!([1]))],
                )
                .expect("the activity is scheduled");
            let activity = lease(TaskKind::Activity);
            assert_eq!(activity.workflow_id, id);
            activities.push(activity);
        }
        let before = (state("refused-beside"), state("accepted-beside"));
        let writer = GroupCommitWriter::start(
            Store::open_postgres(&url, crate::common::config(&[])).expect("the writer's store"),
        )
        .expect("a writer");
        let (first, second) = writer
            .write(move |s: &Store| {
                let settle = |t: &LeasedTask| {
                    let attempt = attempt_id(t.task_id, t.attempt);
                    let fence = ActivityFence {
                        lease_owner: &t.lease_owner,
                        activity_attempt_id: &attempt,
                    };
                    let result = serde_json::json!({ "codec": "json", "blob": "1" });
                    s.complete_activity_attempt(t.task_id, fence, &result)
                };
                let first = settle(&activities[0])
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                settle(&activities[1])?;
                Ok::<_, Error>((first, ()))
            })
            .expect("the job commits");
        let _: () = second;
        let error = first.expect_err("the refused activity completion fails");
        assert!(error.contains("refused by the test"), "{error}");
        assert_eq!(
            state("refused-beside"),
            before.0,
            "nothing of the refused completion stays"
        );
        let (status, length, events, open) = state("accepted-beside");
        let (_, length_before, events_before, _) = before.1;
        assert_eq!(status, "running");
        assert_eq!(
            (length, events),
            (length_before + 1, events_before + 1),
            "its completed event"
        );
        assert_eq!(open, 1, "the activity's task done, a workflow task queued");
    }
}
