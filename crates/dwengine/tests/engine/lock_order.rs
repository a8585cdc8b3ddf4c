//! The lock order of PostgreSQL's counter rows: two write transactions
//! that update the same counter rows in opposite orders cannot deadlock.
//!
//! The counters (`task_queue_state`, `workflow_run_series`,
//! `namespace_durable_counts`, …) are rows the triggers update as a
//! transition writes, so a transaction locks them in the order its
//! statements touch them, and a group commit runs its batch's transitions
//! in the order they arrived: one node's batch can start a workflow on
//! queue A, then one on queue B, while another node's batch does B, then
//! A. Sorting those keys is not possible across a batch of unrelated
//! transitions; what keeps them from deadlocking is that every write
//! transaction takes the store's advisory write lock exclusively at
//! `BEGIN` (`Connection::begin_write`), before any row lock, so no two of
//! them ever hold row locks at once (writer.rs says so). The first test
//! shows the pair does deadlock without that lock (PostgreSQL aborts one
//! with 40P01), the second runs it many times with the lock and gets no
//! error, the third runs the real transitions from two group-commit
//! writers (two nodes) and checks the counters against their rows.

#[cfg(dw_test_postgres)]
use std::sync::{Arc, Barrier};

#[cfg(dw_test_postgres)]
use dwengine::store::db::{Connection, Error as DbError};

/// The schema of a migrated store of its own, and a session on it.
#[cfg(dw_test_postgres)]
fn migrated() -> String {
    let url = crate::common::postgres_schema_url();
    dwengine::store::Store::open_postgres(&url, dwengine::store::StoreConfig::default())
        .expect("migrate the test's schema");
    let conn = Connection::open_postgres(&url, &Default::default()).unwrap();
    conn.execute_batch(
        "INSERT INTO task_queue_state (namespace, task_queue) VALUES ('default', 'lock-a'), ('default', 'lock-b')",
    )
    .unwrap();
    url
}

/// Adds to `queue`'s counter row (what a trigger does when a task is
/// queued there).
#[cfg(dw_test_postgres)]
fn touch(conn: &Connection, queue: &str) -> Result<usize, DbError> {
    conn.execute(
        "UPDATE task_queue_state SET added_recent = added_recent + 1 WHERE namespace = 'default' AND task_queue = ?1",
        [queue],
    )
}

#[cfg(dw_test_postgres)]
fn is_deadlock(e: &DbError) -> bool {
    matches!(e, DbError::Postgres(e) if e.code() == Some(&postgres::error::SqlState::T_R_DEADLOCK_DETECTED))
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn without_the_write_lock_two_counter_rows_in_opposite_orders_deadlock() {
    #[cfg(dw_test_postgres)]
    {
        let url = migrated();
        let both_hold_one = Arc::new(Barrier::new(2));
        let side = |first: &'static str, second: &'static str| {
            let (url, barrier) = (url.clone(), both_hold_one.clone());
            std::thread::spawn(move || {
                let conn = Connection::open_postgres(&url, &Default::default()).unwrap();
                conn.execute_batch("BEGIN").unwrap();
                touch(&conn, first).unwrap();
                barrier.wait();
                let second = touch(&conn, second);
                let _ = conn.execute_batch(if second.is_ok() { "COMMIT" } else { "ROLLBACK" });
                second
            })
        };
        let (one, other) = (side("lock-a", "lock-b"), side("lock-b", "lock-a"));
        let outcomes = [one.join().unwrap(), other.join().unwrap()];
        let deadlocks = outcomes
            .iter()
            .filter(|r| matches!(r, Err(e) if is_deadlock(e)))
            .count();
        assert_eq!(
            deadlocks, 1,
            "PostgreSQL aborts one of the pair as a deadlock: {outcomes:?}"
        );
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn write_transactions_updating_counter_rows_in_opposite_orders_never_deadlock() {
    #[cfg(dw_test_postgres)]
    {
        const ROUNDS: usize = 200;
        let url = migrated();
        let start = Arc::new(Barrier::new(2));
        let side = |first: &'static str, second: &'static str| {
            let (url, start) = (url.clone(), start.clone());
            std::thread::spawn(move || {
                let conn = Connection::open_postgres(&url, &Default::default()).unwrap();
                start.wait();
                for _ in 0..ROUNDS {
                    conn.begin_write()?;
                    touch(&conn, first)?;
                    std::thread::yield_now();
                    touch(&conn, second)?;
                    conn.commit()?;
                }
                Ok::<(), DbError>(())
            })
        };
        let (one, other) = (side("lock-a", "lock-b"), side("lock-b", "lock-a"));
        one.join().unwrap().expect("one side's rounds");
        other.join().unwrap().expect("the other side's rounds");
        let conn = Connection::open_postgres(&url, &Default::default()).unwrap();
        let added: i64 = conn
            .query_row(
                "SELECT CAST(SUM(added_recent) AS BIGINT) FROM task_queue_state WHERE task_queue IN ('lock-a', 'lock-b')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(added, 4 * ROUNDS as i64);
    }
}

#[test]
#[cfg_attr(
    not(dw_test_postgres),
    ignore = "needs PostgreSQL: DW_TEST_POSTGRES_URL was not set when this test binary was built"
)]
fn two_nodes_batches_starting_on_two_queues_in_opposite_orders_never_deadlock() {
    #[cfg(dw_test_postgres)]
    {
        use dwengine::store::shared::SharedStore;
        use dwengine::store::StoreConfig;

        const ROUNDS: usize = 60;
        let url = crate::common::postgres_schema_url();
        let node =
            || Arc::new(SharedStore::open_postgres(&url, StoreConfig::default(), 2).unwrap());
        let (a, b) = (node(), node());
        let start = Arc::new(Barrier::new(2));
        let side = |store: Arc<SharedStore>, name: &'static str, queues: [&'static str; 2]| {
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    store.write(move |s| {
                        for queue in queues {
                            let mut run = crate::common::start(&format!("{name}-{round}-{queue}"));
                            run.task_queue = queue.to_owned();
                            s.start_run(run)?;
                        }
                        Ok(())
                    })?;
                }
                Ok::<(), dwengine::store::Error>(())
            })
        };
        let one = side(a.clone(), "a", ["lock-a", "lock-b"]);
        let other = side(b.clone(), "b", ["lock-b", "lock-a"]);
        one.join().unwrap().expect("node A's batches");
        other.join().unwrap().expect("node B's batches");
        // Each start counted once on its queue's run series row.
        let conn = Connection::open_postgres(&url, &Default::default()).unwrap();
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        let runs = count("SELECT COUNT(*) FROM runs WHERE task_queue IN ('lock-a', 'lock-b')");
        let started = count(
            "SELECT CAST(COALESCE(SUM(started), 0) AS BIGINT) FROM workflow_run_series \
             WHERE task_queue IN ('lock-a', 'lock-b')",
        );
        assert_eq!((runs, started), (4 * ROUNDS as i64, 4 * ROUNDS as i64));
    }
}
