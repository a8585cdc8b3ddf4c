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

    /// A started run and its first workflow task are in neither partial
    /// index: only closed, unpruned runs and timer tasks are, each entering
    /// and leaving as its row moves.
    #[test]
    fn the_partial_indexes_hold_only_the_rows_their_readers_look_up() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate_sqlite(&mut conn).unwrap();
        conn.execute_batch(
            "INSERT INTO runs (id, workflow_id, workflow_type, namespace, task_queue, status, \
               origin, memo, search_attributes, created_at_ms) \
             VALUES (1, 'w', 'T', 'ns', 'q', 'running', 'v2', '{}', '{}', 1); \
             INSERT INTO dispatch_tasks (id, kind, run_id, namespace, task_queue, status, \
               due_at_ms, created_at_ms) VALUES (1, 'workflow', 1, 'ns', 'q', 'ready', 1, 1);",
        )
        .unwrap();
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
