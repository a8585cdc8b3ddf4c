//! Shared set-up for the store's integration tests.
#![allow(dead_code)]

use dwengine::store::{RunId, StartRun, Store, StoreConfig};
use dwpolicy::{LimitKind, StructuralLimits};

/// Limits with the given overrides on top of the defaults.
pub fn limits(overrides: &[(LimitKind, u64)]) -> StructuralLimits {
    let mut limits = StructuralLimits::default();
    for (kind, value) in overrides {
        limits.set(*kind, *value);
    }
    limits
}

pub fn config(overrides: &[(LimitKind, u64)]) -> StoreConfig {
    StoreConfig {
        limits: limits(overrides),
        ..StoreConfig::default()
    }
}

/// A fresh store with the given limit overrides: in memory (SQLite), or
/// with `DW_TEST_BACKEND=postgres` on a schema of its own in the database
/// `DW_TEST_POSTGRES_URL` names (the same tests on both backends).
pub fn memory_store(overrides: &[(LimitKind, u64)]) -> Store {
    match std::env::var("DW_TEST_BACKEND").as_deref() {
        Ok("postgres") => postgres_store(config(overrides)),
        Ok("sqlite") | Err(_) => {
            Store::open_in_memory(config(overrides)).expect("open in-memory store")
        }
        Ok(other) => panic!("DW_TEST_BACKEND={other}: expected sqlite or postgres"),
    }
}

/// Whether the store tests run on PostgreSQL (`DW_TEST_BACKEND=postgres`).
pub fn postgres() -> bool {
    std::env::var("DW_TEST_BACKEND").as_deref() == Ok("postgres")
}

/// The URL of a new schema (`dw_store_test_<pid>_<n>`, dropped first if a
/// run of the same pid left it) of the `DW_TEST_POSTGRES_URL` database: a
/// database of one test's own. The schema outlives the test (a test holds
/// its store, not a guard); the first schema a test process makes starts
/// [`sweep_dead_schemas`], so a long-lived server keeps only the schemas of
/// the last run instead of every run's.
pub fn postgres_schema_url() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static SWEEP: std::sync::Once = std::sync::Once::new();
    let url = std::env::var("DW_TEST_POSTGRES_URL")
        .expect("DW_TEST_BACKEND=postgres needs DW_TEST_POSTGRES_URL (postgres://…)");
    SWEEP.call_once(|| {
        let url = url.clone();
        // Beside the tests, not before them: a day of runs leaves
        // thousands of schemas, each a few tens of milliseconds to drop.
        std::thread::spawn(move || sweep_dead_schemas(&url));
    });
    let schema = format!(
        "dw_store_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = postgres::Client::connect(&url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("DW_TEST_POSTGRES_URL={url} is unusable: {e}"));
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .expect("create the test's schema");
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-csearch_path%3D{schema}")
}

/// Drops the `dw_store_test_<pid>_<n>` schemas whose test process is no
/// longer running on this machine (`/proc/<pid>` gone), returning how many
/// it dropped. A live process's schemas are never touched; a pid reused
/// since only keeps its dead schemas until a later sweep.
pub fn sweep_dead_schemas(url: &str) -> usize {
    // Without /proc every process would look dead, other test runs' too.
    if !std::path::Path::new("/proc/self").exists() {
        return 0;
    }
    let Ok(mut admin) = postgres::Client::connect(url, postgres::NoTls) else {
        return 0;
    };
    let Ok(rows) = admin.query(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'dw\\_store\\_test\\_%'",
        &[],
    ) else {
        return 0;
    };
    let mut dropped = 0;
    for row in rows {
        let schema: String = row.get(0);
        let pid = schema
            .strip_prefix("dw_store_test_")
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .is_ok()
        {
            dropped += 1;
        }
    }
    dropped
}

/// A store on a schema of its own (see [`postgres_schema_url`]).
fn postgres_store(config: StoreConfig) -> Store {
    Store::open_postgres(&postgres_schema_url(), config)
        .expect("open and migrate a PostgreSQL store")
}

pub fn start(workflow_id: &str) -> StartRun {
    StartRun {
        workflow_id: workflow_id.to_owned(),
        workflow_type: "OrderWorkflow".to_owned(),
        namespace: "default".to_owned(),
        task_queue: "orders".to_owned(),
        arguments: serde_json::json!({ "order": workflow_id }),
        ..StartRun::default()
    }
}

pub fn started(store: &mut Store, workflow_id: &str) -> RunId {
    store.start_run(start(workflow_id)).expect("start run")
}

/// The counters a start's triggers keep on an SQLite file equal the rows
/// they count: the series' starts its runs, the queue's ready workflow
/// tasks its ready task rows, and the tasks it counted added in this
/// minute and the last (a test lasts less than a minute); all are
/// `expected`.
pub fn assert_start_counters(db: &rusqlite::Connection, expected: i64) {
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    let ready = "SELECT COUNT(*) FROM dispatch_tasks WHERE kind = 'workflow' AND status = 'ready'";
    assert_eq!(count("SELECT COUNT(*) FROM runs"), expected, "runs");
    assert_eq!(
        count("SELECT started FROM workflow_run_series"),
        expected,
        "the series' starts equal its runs"
    );
    assert_eq!(
        count("SELECT workflow_ready FROM task_queue_state"),
        count(ready),
        "the queue's ready count equals its ready tasks"
    );
    assert_eq!(count(ready), expected, "ready workflow tasks");
    assert_eq!(
        count("SELECT added_recent + added_before FROM task_queue_state"),
        expected,
        "the queue's added tasks"
    );
}
