//! Embedded schema migrations, applied when a store is opened.
//!
//! The engine ships its schema inside the binary so a fresh file and an old
//! file both reach the current layout without an operator step. The applied
//! version lives in SQLite's `user_version`, and each migration runs in an
//! immediate transaction that re-reads it, so two processes opening the same
//! file at once apply each migration exactly once.

use rusqlite::{Connection, TransactionBehavior};

use crate::store::db;
use crate::store::error::Error;
use crate::store::pg_schema::MigrateError;

/// The migrations in order; a migration's version is its position plus one.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_runs.sql"),
    include_str!("migrations/0002_dispatch.sql"),
    include_str!("migrations/0003_run_series.sql"),
    include_str!("migrations/0004_idempotency.sql"),
    include_str!("migrations/0005_pending_payload_bytes.sql"),
    include_str!("migrations/0006_protocol.sql"),
    include_str!("migrations/0007_timeouts.sql"),
    include_str!("migrations/0008_metric_series.sql"),
    include_str!("migrations/0009_projections.sql"),
    include_str!("migrations/0010_archive_search_attributes.sql"),
    include_str!("migrations/0011_drop_query_tasks.sql"),
    include_str!("migrations/0012_schedules.sql"),
    include_str!("migrations/0013_timer_cohorts.sql"),
    include_str!("migrations/0014_schedule_buffers.sql"),
    include_str!("migrations/0015_workflow_streams.sql"),
    include_str!("migrations/0016_external_payloads.sql"),
    include_str!("migrations/0017_schedule_audit.sql"),
    include_str!("migrations/0018_service_catalog.sql"),
    include_str!("migrations/0019_durable_state_counts.sql"),
    include_str!("migrations/0020_external_payload_lifecycle.sql"),
    include_str!("migrations/0021_service_call_retention.sql"),
    include_str!("migrations/0022_namespace_durable_counts.sql"),
    include_str!("migrations/0023_signal_waits.sql"),
    include_str!("migrations/0024_runs_by_namespace.sql"),
    include_str!("migrations/0025_continue_as_new.sql"),
    include_str!("migrations/0026_child_workflows.sql"),
    include_str!("migrations/0027_sticky_bindings.sql"),
    include_str!("migrations/0028_worker_sessions.sql"),
    include_str!("migrations/0029_message_streams.sql"),
    include_str!("migrations/0030_service_call_waiters.sql"),
    include_str!("migrations/0031_message_stream_cursors.sql"),
    include_str!("migrations/0032_queue_counts_at_commit.sql"),
    include_str!("migrations/0033_held_signals.sql"),
    include_str!("migrations/0034_activity_cancelled.sql"),
    include_str!("migrations/0035_update_validations.sql"),
    include_str!("migrations/0036_cancellation_requests.sql"),
    include_str!("migrations/0037_starts_side_by_side.sql"),
    include_str!("migrations/0038_update_validator_registrations.sql"),
    include_str!("migrations/0039_start_counters_upsert.sql"),
    include_str!("migrations/0040_cancellation_waits.sql"),
    include_str!("migrations/0041_prepared_local_activities.sql"),
    include_str!("migrations/0042_redrive.sql"),
    include_str!("migrations/0043_build_id_rollouts.sql"),
    include_str!("migrations/0044_workflow_definition_fingerprints.sql"),
    include_str!("migrations/0045_checks_without_lists.sql"),
    include_str!("migrations/0046_partial_indexes.sql"),
    include_str!("migrations/0047_triggers_without_temporary_tables.sql"),
    include_str!("migrations/0048_queue_minute_apart.sql"),
    include_str!("migrations/0049_lease_index_partial.sql"),
    include_str!("migrations/0050_runs_by_workflow_with_id.sql"),
    include_str!("migrations/0051_ready_index_open_tasks.sql"),
    include_str!("migrations/0052_ready_index_whole_on_postgres.sql"),
    include_str!("migrations/0053_queue_busy_flag.sql"),
    include_str!("migrations/0054_poll_request_index.sql"),
    include_str!("migrations/0055_ready_index_in_claim_order.sql"),
    include_str!("migrations/0056_staged_starts_counted_once.sql"),
];

/// The schema version this engine writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the store's database to its engine's newest schema; refuses a
/// database written by a newer engine.
pub(crate) fn migrate(conn: &mut db::Connection) -> Result<(), Error> {
    if let Some(sqlite) = conn.sqlite_mut() {
        return migrate_sqlite(sqlite);
    }
    // A migration may wait for another node's, or rewrite a large table:
    // no deadline on its calls (the session's TCP timeouts still apply).
    conn.set_call_deadline(false);
    let migrated = crate::store::pg_schema::migrate(conn);
    conn.set_call_deadline(true);
    match migrated {
        Ok(_) => Ok(()),
        Err(MigrateError::TooNew { found, supported }) => {
            Err(Error::SchemaTooNew { found, supported })
        }
        Err(MigrateError::Database(e)) if e.is_unavailable() => Err(Error::Database(e)),
        Err(e) => Err(Error::Migration(e.to_string())),
    }
}

/// Brings an SQLite `conn` to [`SCHEMA_VERSION`]; refuses a file written by
/// a newer engine.
fn migrate_sqlite(conn: &mut Connection) -> Result<(), Error> {
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew {
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let Some(sql) = usize::try_from(version)
            .ok()
            .and_then(|index| MIGRATIONS.get(index))
        else {
            return Ok(());
        };
        tx.execute_batch(sql)?;
        // A migration that rewrites stored schema text (0004 widens a CHECK
        // constraint) must make every connection re-read the schema; bumping
        // the schema cookie is how SQLite says so, and costs nothing otherwise.
        let cookie: i64 = tx.query_row("PRAGMA schema_version", [], |row| row.get(0))?;
        tx.pragma_update(None, "schema_version", cookie + 1)?;
        tx.pragma_update(None, "user_version", version + 1)?;
        tx.commit()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The external payload lifecycle migration finds the references rows
    /// written before it (a history event, a signal) and leaves an upload
    /// nothing names unheld.
    #[test]
    fn the_payload_lifecycle_migration_backfills_existing_references() {
        let lifecycle = MIGRATIONS
            .iter()
            .position(|m| m.contains("CREATE TABLE external_payload_refs"))
            .unwrap();
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..lifecycle] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", lifecycle as i64)
            .unwrap();
        conn.execute_batch(
            "INSERT INTO runs (workflow_id, workflow_type, namespace, task_queue, status, origin, \
             memo, search_attributes, created_at_ms) \
             VALUES ('w', 't', 'default', 'q', 'running', 'v2', '{}', '{}', 0);",
        )
        .unwrap();
        let ids = [
            "ep_01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "ep_01ARZ3NDEKTSV4RRFFQ69G5FAW",
            "ep_01ARZ3NDEKTSV4RRFFQ69G5FAX",
        ];
        for id in ids {
            conn.execute(
                "INSERT INTO external_payloads \
                 (reference_id, namespace, codec, size_bytes, sha256, data, created_at_ms) \
                 VALUES (?1, 'default', 'avro', 1, ?1, x'00', 5)",
                [id],
            )
            .unwrap();
        }
        let envelope = |id: &str| {
            serde_json::json!({ "codec": "avro", "external_payload": {
                "schema": "durable-workflow.v2.runtime-external-payload-reference.v1",
                "reference_id": id, "codec": "avro", "size_bytes": 1, "sha256": "a".repeat(64) } })
            .to_string()
        };
        conn.execute(
            "INSERT INTO history_events (run_id, sequence, event_type, payload) \
             VALUES (1, 0, 'WorkflowStarted', ?1)",
            [format!("{{\"input\":{}}}", envelope(ids[0]))],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO signals (run_id, name, payload, status) VALUES (1, 's', ?1, 'received')",
            [envelope(ids[1])],
        )
        .unwrap();
        migrate_sqlite(&mut conn).unwrap();
        let held: Vec<(String, i64, i64)> = conn
            .prepare("SELECT reference_id, ref_count, last_uploaded_at_ms FROM external_payloads ORDER BY reference_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            held,
            [
                (ids[0].to_owned(), 1, 5),
                (ids[1].to_owned(), 1, 5),
                (ids[2].to_owned(), 0, 5)
            ]
        );
    }

    #[test]
    fn migrating_twice_is_a_no_op_and_newer_files_are_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        migrate_sqlite(&mut conn).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        assert!(matches!(
            migrate_sqlite(&mut conn),
            Err(Error::SchemaTooNew { found, .. }) if found == SCHEMA_VERSION + 1
        ));
    }

    /// The tables of a migrated store, `sqlite_%` ones left out.
    fn tables(conn: &Connection) -> Vec<String> {
        conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             ORDER BY name",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    /// No table's constraints make an insert build a temporary B-tree: the
    /// statement's own program (its trigger programs, listed after it,
    /// left out) opens no ephemeral table. A CHECK constraint written as an
    /// IN list of three or more values did, on every insert and every
    /// update of its column (migration 0045).
    #[test]
    fn no_constraint_check_builds_a_temporary_btree() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        let mut building = Vec::new();
        for table in tables(&conn) {
            let mut explain = conn
                .prepare(&format!("EXPLAIN INSERT INTO \"{table}\" DEFAULT VALUES"))
                .unwrap();
            let mut rows = explain.query([]).unwrap();
            let mut last = -1_i64;
            while let Some(row) = rows.next().unwrap() {
                let address: i64 = row.get(0).unwrap();
                if address < last {
                    break; // a trigger's program
                }
                last = address;
                if row.get::<_, String>(1).unwrap() == "OpenEphemeral" {
                    building.push(table.clone());
                }
            }
        }
        assert_eq!(building, Vec::<String>::new());
    }

    /// The ephemeral tables `sql`'s program opens, its trigger programs
    /// (listed after it by `EXPLAIN`) included.
    fn ephemeral_tables(conn: &Connection, sql: &str) -> usize {
        let mut explain = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Null; explain.parameter_count()];
        explain
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(1))
            .unwrap()
            .filter(|op| op.as_ref().unwrap() == "OpenEphemeral")
            .count()
    }

    /// No trigger builds a temporary B-tree when it fires: an insert, an
    /// update of every column but the key, and a delete of one row of each
    /// table open no ephemeral table, in the statement or in the trigger
    /// programs it runs. An `UPDATE ... FROM` in a trigger opened one or
    /// two on every firing (`task_queue_state_move` on every status change
    /// of a task, `activity_execution_series_close` on every activity
    /// closed), until migration 0047.
    ///
    /// Left out: the `external_payload_refs_*` triggers, which run only
    /// for a payload holding an external payload reference (their `WHEN`)
    /// and insert the references read from its `json_tree`, a virtual
    /// table SQLite copies into a temporary one first.
    #[test]
    fn no_trigger_builds_a_temporary_btree() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        let references: Vec<String> = conn
            .prepare(
                "SELECT name FROM sqlite_schema WHERE type = 'trigger' \
                 AND name LIKE 'external\\_payload\\_refs\\_%' ESCAPE '\\'",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!references.is_empty());
        for name in references {
            conn.execute_batch(&format!("DROP TRIGGER {name}")).unwrap();
        }
        let mut building = Vec::new();
        for table in tables(&conn) {
            // (name, position in the primary key; 0 for a column outside it)
            let columns: Vec<(String, i64)> = conn
                .prepare(&format!(
                    "SELECT name, pk FROM pragma_table_info('{table}')"
                ))
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let key: Vec<&str> = columns
                .iter()
                .filter(|(_, pk)| *pk > 0)
                .map(|(name, _)| name.as_str())
                .collect();
            let by_key = if key.is_empty() || key == ["id"] {
                "rowid = ?1".to_owned()
            } else {
                key.iter()
                    .map(|c| format!("\"{c}\" = ?"))
                    .collect::<Vec<_>>()
                    .join(" AND ")
            };
            let set: Vec<String> = columns
                .iter()
                .filter(|(_, pk)| *pk == 0)
                .map(|(c, _)| format!("\"{c}\" = \"{c}\""))
                .collect();
            let mut statements = vec![
                format!("INSERT INTO \"{table}\" DEFAULT VALUES"),
                format!("DELETE FROM \"{table}\" WHERE {by_key}"),
            ];
            if !set.is_empty() {
                statements.push(format!(
                    "UPDATE \"{table}\" SET {} WHERE {by_key}",
                    set.join(", ")
                ));
            }
            for sql in statements {
                if ephemeral_tables(&conn, &sql) > 0 {
                    building.push(sql);
                }
            }
        }
        assert_eq!(building, Vec::<String>::new());
    }

    /// The counter triggers 0047 and 0048 rewrote leave the rows the
    /// triggers they replaced left: one store at version 46 and one at the
    /// newest take the same task inserts and moves (ready, leased, back to
    /// ready, done, deleted, a non-move), with the queue's minute bucket set
    /// to the current minute, the one before and an older one before
    /// inserts and leases, and the same
    /// activity closes (completed, failed, cancelled) at latencies in every
    /// histogram bucket, including a task stamped in the future. Both read
    /// the clock, so a try whose two stores saw different minutes or
    /// milliseconds far enough apart to cross a bucket is tried again; a
    /// difference in what the triggers do shows in every try.
    #[test]
    fn the_rewritten_counter_triggers_leave_the_rows_the_old_ones_left() {
        let version = |conn: &Connection| -> i64 {
            conn.query_row("PRAGMA user_version", [], |r| r.get(0))
                .unwrap()
        };
        let scenario = |conn: &Connection, now: i64| {
            let offsets: [i64; 11] = [
                -600_000, 1_700, 3_500, 7_500, 20_000, 45_000, 150_000, 600_000, 2_000_000,
                10_000_000, 1_800,
            ];
            conn.execute_batch(
                "INSERT INTO runs (id, workflow_id, workflow_type, namespace, task_queue, status, \
                   origin, memo, search_attributes, created_at_ms) \
                 VALUES (1, 'w', 'T', 'ns', 'q', 'running', 'v2', '{}', '{}', 1);",
            )
            .unwrap();
            conn.execute(
                "INSERT INTO dispatch_tasks (id, kind, run_id, namespace, task_queue, status, \
                   due_at_ms, created_at_ms) VALUES (100, 'workflow', 1, 'ns', 'q', 'ready', 1, ?1)",
                [now],
            )
            .unwrap();
            for (i, offset) in offsets.iter().enumerate() {
                let id = i64::try_from(i).unwrap() + 1;
                conn.execute(
                    "INSERT INTO activities (id, run_id, activity_type, arguments, status) \
                     VALUES (?1, 1, ?2, '[]', 'scheduled')",
                    rusqlite::params![id, if id % 2 == 0 { "A" } else { "B" }],
                )
                .unwrap();
                conn.execute(
                    "INSERT INTO dispatch_tasks (id, kind, run_id, item_id, namespace, task_queue, \
                       status, due_at_ms, created_at_ms) \
                     VALUES (?1, 'activity', 1, ?1, 'ns', ?2, 'ready', 1, ?3)",
                    rusqlite::params![id, if id % 3 == 0 { "q2" } else { "q" }, now - offset],
                )
                .unwrap();
            }
            let mv = |id: i64, status: &str| {
                conn.execute(
                    "UPDATE dispatch_tasks SET status = ?2 WHERE id = ?1",
                    rusqlite::params![id, status],
                )
                .unwrap();
            };
            let minute_back = |by: i64| {
                conn.execute(
                    "UPDATE task_queue_state SET recent_minute = recent_minute - ?1",
                    [by],
                )
                .unwrap();
            };
            let add = |id: i64| {
                conn.execute(
                    "INSERT INTO dispatch_tasks (id, kind, run_id, namespace, task_queue, status, \
                       due_at_ms, created_at_ms) VALUES (?1, 'workflow', 1, 'ns', 'q', 'ready', 1, ?2)",
                    [id, now],
                )
                .unwrap();
            };
            mv(100, "leased");
            mv(100, "leased"); // not a move
            minute_back(1);
            add(200);
            mv(1, "leased");
            mv(2, "leased");
            minute_back(5);
            mv(3, "leased");
            mv(3, "ready");
            minute_back(3);
            add(201);
            mv(4, "leased");
            mv(100, "done");
            minute_back(1);
            mv(200, "leased");
            mv(201, "leased");
            mv(200, "done");
            mv(201, "ready");
            for id in 1..=11_i64 {
                if id != 11 {
                    mv(id, "leased");
                }
                let status = ["completed", "failed", "cancelled"][usize::try_from(id % 3).unwrap()];
                conn.execute(
                    "UPDATE activities SET status = ?2 WHERE id = ?1",
                    rusqlite::params![id, status],
                )
                .unwrap();
                // A second close of a closed activity counts nothing.
                conn.execute(
                    "UPDATE activities SET status = 'completed' WHERE id = ?1",
                    [id],
                )
                .unwrap();
                if id == 5 {
                    minute_back(1);
                }
                if id % 4 == 0 {
                    conn.execute("DELETE FROM dispatch_tasks WHERE id = ?1", [id])
                        .unwrap();
                } else {
                    mv(id, "done");
                }
            }
        };
        let rows = |conn: &Connection, sql: &str| -> Vec<Vec<i64>> {
            let mut statement = conn.prepare(sql).unwrap();
            let columns = statement.column_count();
            statement
                .query_map([], |r| (0..columns).map(|c| r.get(c)).collect())
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        const QUEUES: &str = "SELECT workflow_ready, workflow_leased, activity_ready, \
            activity_leased, recent_minute, added_recent, added_before, dispatched_recent, \
            dispatched_before FROM task_queue_state ORDER BY namespace, task_queue";
        const SERIES: &str = "SELECT started, completed, failed, cancelled, latency_count, \
            latency_sum_ms, le_0_1, le_0_5, le_1, le_2_5, le_5, le_10, le_30, le_60, le_300, \
            le_900 FROM activity_execution_series \
            ORDER BY namespace, task_queue, workflow_type, activity_type";
        let mut tries = Vec::new();
        for _ in 0..5 {
            let old = Connection::open_in_memory().unwrap();
            let new = Connection::open_in_memory().unwrap();
            for sql in &MIGRATIONS[..46] {
                old.execute_batch(sql).unwrap();
            }
            old.pragma_update(None, "user_version", 46).unwrap();
            let mut new = new;
            migrate_sqlite(&mut new).unwrap();
            assert_eq!((version(&old), version(&new)), (46, SCHEMA_VERSION));
            let now = crate::store::rows::now_ms();
            scenario(&old, now);
            scenario(&new, now);
            let (old_series, new_series) = (rows(&old, SERIES), rows(&new, SERIES));
            assert_eq!(old_series.len(), 4);
            // latency_sum_ms holds each store's own clock: equal within the
            // milliseconds between the two scenarios.
            let sums_close = old_series
                .iter()
                .zip(&new_series)
                .all(|(o, n)| (o[5] - n[5]).abs() <= 1_000);
            let strip = |series: &[Vec<i64>]| -> Vec<Vec<i64>> {
                series
                    .iter()
                    .map(|r| {
                        r.iter()
                            .enumerate()
                            .filter(|(i, _)| *i != 5)
                            .map(|(_, v)| *v)
                            .collect()
                    })
                    .collect()
            };
            let outcome = (
                rows(&old, QUEUES),
                rows(&new, QUEUES),
                strip(&old_series),
                strip(&new_series),
                sums_close,
            );
            if outcome.0 == outcome.1 && outcome.2 == outcome.3 && sums_close {
                return;
            }
            tries.push(outcome);
        }
        panic!("the old and new triggers left different rows in every try: {tries:?}");
    }

    /// A closing run's tasks are closed with no temporary B-tree: read
    /// through `dispatch_by_run`, then updated by key. The one statement
    /// it replaced updated `status`, a column of the index it searched,
    /// and built one (and its `task_queue_state_move` firings two more,
    /// before 0047).
    #[test]
    fn closing_a_runs_tasks_builds_no_temporary_btree() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        use crate::store::completion::{CLOSE_TASK, OPEN_TASKS};
        assert_eq!(ephemeral_tables(&conn, OPEN_TASKS), 0);
        assert_eq!(ephemeral_tables(&conn, CLOSE_TASK), 0);
        assert!(plan(&conn, OPEN_TASKS).contains("dispatch_by_run"));
        let by_run = "UPDATE dispatch_tasks SET status = 'done', timeout_at_ms = NULL \
                      WHERE run_id = ?1 AND status != 'done'";
        assert!(ephemeral_tables(&conn, by_run) > 0);
    }

    /// The plan of `sql` (its `detail` column), every parameter NULL.
    fn plan(conn: &Connection, sql: &str) -> String {
        let mut explain = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Null; explain.parameter_count()];
        explain
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
            .join("\n")
    }

    /// The two indexes 0046 made partial still serve their readers: each
    /// query reads its index as a range (`SEARCH`), and the prune reads
    /// `runs_closed` in closing order, with no sort of the namespace's runs
    /// (before 0046 it read every run of the namespace through
    /// `runs_by_namespace` and sorted them).
    #[test]
    fn the_partial_indexes_serve_their_queries() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        for (sql, index) in [
            (crate::store::projections::PRUNE_CANDIDATE, "runs_closed"),
            (
                crate::store::timers::ANY_DUE_TIMER,
                "dispatch_due_timers_by_cohort",
            ),
            (
                crate::store::timers::DUE_TIMERS,
                "dispatch_due_timers_by_cohort",
            ),
        ] {
            let plan = plan(&conn, sql);
            assert!(
                plan.lines()
                    .next()
                    .is_some_and(|first| first.starts_with("SEARCH") && first.contains(index)),
                "{sql}: {plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
        }
    }

    /// A running run (id 1) and its ready workflow task (id 1): what a
    /// start leaves, before any index test moves them.
    const A_RUN_AND_ITS_READY_TASK: &str =
        "INSERT INTO runs (id, workflow_id, workflow_type, namespace, task_queue, status, \
           origin, memo, search_attributes, created_at_ms) \
         VALUES (1, 'w', 'T', 'ns', 'q', 'running', 'v2', '{}', '{}', 1); \
         INSERT INTO dispatch_tasks (id, kind, run_id, namespace, task_queue, status, \
           due_at_ms, created_at_ms) VALUES (1, 'workflow', 1, 'ns', 'q', 'ready', 1, 1);";

    /// A started run and its first workflow task are in neither partial
    /// index: only closed, unpruned runs and timer tasks are, each entering
    /// and leaving as its row moves.
    #[test]
    fn the_partial_indexes_hold_only_the_rows_their_readers_look_up() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        conn.execute_batch(A_RUN_AND_ITS_READY_TASK).unwrap();
        // Entries of an index, counted through it alone.
        let entries = |conn: &Connection, index: &str, table: &str, filter: &str| -> i64 {
            conn.query_row(
                &format!("SELECT COUNT(*) FROM {table} INDEXED BY {index} WHERE {filter}"),
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        let closed = |conn: &Connection| {
            entries(
                conn,
                "runs_closed",
                "runs",
                "namespace = 'ns' AND status != 'running' AND details_pruned_at IS NULL",
            )
        };
        let timers = |conn: &Connection| {
            entries(
                conn,
                "dispatch_due_timers_by_cohort",
                "dispatch_tasks",
                "kind = 'timer' AND namespace = 'ns'",
            )
        };
        assert_eq!((closed(&conn), timers(&conn)), (0, 0));
        // An index that is not partial cannot be named for a filter that
        // does not constrain its first column; a partial one can (its
        // WHERE implied), and lists only its rows.
        let whole = conn.prepare(
            "SELECT COUNT(*) FROM dispatch_tasks INDEXED BY dispatch_due_timers_by_cohort \
             WHERE namespace = 'ns'",
        );
        assert!(
            whole.is_err(),
            "a timer-only index does not answer for every task"
        );
        conn.execute_batch(
            "INSERT INTO dispatch_tasks (id, kind, run_id, item_id, namespace, task_queue, status, \
               due_at_ms, created_at_ms) VALUES (2, 'timer', 1, 7, 'ns', 'q', 'ready', 1, 1); \
             UPDATE runs SET status = 'completed', closed_at_ms = 5 WHERE id = 1;",
        )
        .unwrap();
        assert_eq!((closed(&conn), timers(&conn)), (1, 1));
        conn.execute_batch("UPDATE runs SET details_pruned_at = 6 WHERE id = 1")
            .unwrap();
        assert_eq!(closed(&conn), 0, "a pruned run leaves the prune's index");
    }

    /// 0049: `dispatch_leases` lists the leased tasks only, each entering
    /// when leased and leaving when done, and its readers still read it as
    /// a range: the expired-lease walk every poll pass runs and a
    /// deregistered worker's released leases (both name `status =
    /// 'leased'`, which the index's key kept so their plans are the ones
    /// they had).
    #[test]
    fn the_lease_index_holds_only_leased_tasks_and_serves_its_readers() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        for sql in [
            crate::store::leases::EXPIRED_LEASES.as_str(),
            crate::store::control::RELEASE_WORKER_LEASES,
        ] {
            let plan = plan(&conn, sql);
            assert!(
                plan.lines()
                    .next()
                    .is_some_and(|first| first.starts_with("SEARCH")
                        && first.contains("dispatch_leases (kind=? AND status=?")),
                "{sql}: {plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
        }
        // A partial index answers only for a filter that implies its WHERE.
        assert!(
            conn.prepare("SELECT COUNT(*) FROM dispatch_tasks INDEXED BY dispatch_leases WHERE kind = 'workflow'")
                .is_err(),
            "the lease index lists every task"
        );
        let leased = |conn: &Connection| -> i64 {
            conn.query_row(
                "SELECT COUNT(*) FROM dispatch_tasks INDEXED BY dispatch_leases \
                 WHERE kind = 'workflow' AND status = 'leased'",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        conn.execute_batch(A_RUN_AND_ITS_READY_TASK).unwrap();
        assert_eq!(leased(&conn), 0);
        conn.execute_batch(
            "UPDATE dispatch_tasks SET status = 'leased', lease_owner = 'w1', \
             lease_expires_at_ms = 10 WHERE id = 1",
        )
        .unwrap();
        assert_eq!(leased(&conn), 1);
        let expired: Vec<i64> = conn
            .prepare(&crate::store::leases::EXPIRED_LEASES)
            .unwrap()
            .query_map(rusqlite::params!["workflow", 11, 10], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(expired, vec![1]);
        conn.execute_batch("UPDATE dispatch_tasks SET status = 'done' WHERE id = 1")
            .unwrap();
        assert_eq!(leased(&conn), 0, "a done task leaves the lease index");
    }

    /// 0051: `dispatch_ready` lists the open (ready and leased) tasks only:
    /// a task enters when it is made ready, moves when leased (its status is
    /// in the key) and leaves when done, and the readers that name one of
    /// the two statuses still read it as a range: a lease's candidates and
    /// the failing workflow tasks of a namespace (an OR of the two statuses,
    /// not an IN list, which SQLite does not prove implies the condition).
    #[test]
    fn the_ready_index_holds_only_open_tasks_and_serves_its_readers() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        for sql in [
            crate::store::leases::CANDIDATES.as_str(),
            crate::store::metrics::FAILING_WORKFLOW_TYPES,
        ] {
            let plan = plan(&conn, sql);
            assert!(
                plan.lines()
                    .next()
                    .is_some_and(|first| first.starts_with("SEARCH")
                        && first.contains("dispatch_ready (kind=? AND namespace=?")),
                "{sql}: {plan}"
            );
        }
        assert!(
            conn.prepare(
                "SELECT COUNT(*) FROM dispatch_tasks INDEXED BY dispatch_ready \
                 WHERE kind = 'workflow' AND status = 'done'"
            )
            .is_err(),
            "the ready index lists done tasks"
        );
        let listed = |conn: &Connection| -> Vec<(i64, String)> {
            conn.prepare(
                "SELECT id, status FROM dispatch_tasks INDEXED BY dispatch_ready \
                 WHERE kind = 'workflow' AND (status = 'ready' OR status = 'leased') ORDER BY id",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
        };
        conn.execute_batch(A_RUN_AND_ITS_READY_TASK).unwrap();
        assert_eq!(listed(&conn), vec![(1, "ready".to_owned())]);
        conn.execute_batch(
            "UPDATE dispatch_tasks SET status = 'leased', lease_owner = 'w1', \
             lease_expires_at_ms = 10 WHERE id = 1",
        )
        .unwrap();
        assert_eq!(listed(&conn), vec![(1, "leased".to_owned())]);
        conn.execute_batch("UPDATE dispatch_tasks SET status = 'done' WHERE id = 1")
            .unwrap();
        assert_eq!(listed(&conn), vec![], "a done task leaves the ready index");
        let entries: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM dispatch_tasks INDEXED BY dispatch_ready \
                 WHERE kind = 'workflow' AND (status = 'ready' OR status = 'leased')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(entries, 0);
        let all: i64 = conn
            .query_row("SELECT COUNT(*) FROM dispatch_tasks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(all, 1, "the done task itself stays");
    }

    /// The CHECK constraints 0045 rewrote accept each value they listed and
    /// refuse any other, on insert and on update, as the IN lists did.
    #[test]
    fn the_rewritten_checks_accept_and_refuse_what_their_lists_did() {
        let checked: &[(&str, &str, &[&str])] = &[
            (
                "runs",
                "status",
                &[
                    "running",
                    "completed",
                    "failed",
                    "cancelled",
                    "terminated",
                    "continued_as_new",
                ],
            ),
            ("dispatch_tasks", "kind", &["workflow", "activity", "timer"]),
            ("dispatch_tasks", "status", &["ready", "leased", "done"]),
            (
                "activities",
                "status",
                &["scheduled", "completed", "failed", "cancelled"],
            ),
            ("timers", "status", &["pending", "fired", "cancelled"]),
            ("updates", "status", &["accepted", "completed", "rejected"]),
            ("run_waits", "kind", &["activity", "timer", "child"]),
            ("workflow_streams", "status", &["open", "closed", "errored"]),
            (
                "service_catalog",
                "level",
                &["endpoint", "service", "operation"],
            ),
            (
                "external_payload_refs",
                "holder",
                &["run", "stream", "schedule"],
            ),
            ("worker_sessions", "status", &["active", "closed", "failed"]),
            (
                "update_validations",
                "status",
                &["validating", "approved", "rejected"],
            ),
        ];
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        // Rows of one table at a time, without the rows they would name.
        conn.pragma_update(None, "foreign_keys", false).unwrap();
        let valid = |table: &str, column: &str| -> Option<&str> {
            if (table, column) == ("runs", "origin") {
                return Some("v2");
            }
            checked
                .iter()
                .find(|(t, c, _)| (*t, *c) == (table, column))
                .map(|(_, _, values)| values[0])
        };
        for (table, column, values) in checked {
            let required: Vec<(String, String)> = conn
                .prepare(&format!(
                    "SELECT name, type FROM pragma_table_info('{table}') \
                     WHERE (\"notnull\" AND dflt_value IS NULL) OR pk > 0"
                ))
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let row = |value: &str| -> (String, Vec<String>) {
                let names: Vec<&str> = required.iter().map(|(n, _)| n.as_str()).collect();
                let literals = required
                    .iter()
                    .map(|(name, kind)| {
                        if name == column {
                            format!("'{value}'")
                        } else if let Some(v) = valid(table, name) {
                            format!("'{v}'")
                        } else if kind.eq_ignore_ascii_case("INTEGER") {
                            "1".to_owned()
                        } else {
                            "'x'".to_owned()
                        }
                    })
                    .collect();
                (names.join(", "), literals)
            };
            for value in *values {
                let tx = conn.transaction().unwrap();
                let (names, literals) = row(value);
                tx.execute(
                    &format!(
                        "INSERT INTO {table} ({names}) VALUES ({})",
                        literals.join(", ")
                    ),
                    [],
                )
                .unwrap_or_else(|e| panic!("{table}.{column} = {value}: {e}"));
                for other in *values {
                    tx.execute(&format!("UPDATE {table} SET {column} = ?1"), [other])
                        .unwrap_or_else(|e| panic!("{table}.{column} := {other}: {e}"));
                }
                let refused = tx
                    .execute(&format!("UPDATE {table} SET {column} = 'unlisted'"), [])
                    .unwrap_err();
                assert!(
                    refused.to_string().contains("CHECK constraint failed"),
                    "{table}.{column}: {refused}"
                );
                tx.rollback().unwrap();
            }
            let (names, literals) = row("unlisted");
            let refused = conn
                .execute(
                    &format!(
                        "INSERT INTO {table} ({names}) VALUES ({})",
                        literals.join(", ")
                    ),
                    [],
                )
                .unwrap_err();
            assert!(
                refused.to_string().contains("CHECK constraint failed"),
                "{table}.{column}: {refused}"
            );
        }
    }
}
