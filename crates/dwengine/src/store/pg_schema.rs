//! The PostgreSQL schema: the store's migrations for a PostgreSQL database,
//! applied when a node opens one.
//!
//! Why a module of its own beside [`crate::store::schema`]: the SQLite
//! migrations lean on what only SQLite has (`user_version`, `WITHOUT ROWID`,
//! rewriting stored schema text, triggers written as SQL statements, the
//! `json_tree` and `julianday` functions), so PostgreSQL gets twins of them,
//! `migrations/postgres/NNNN_name.sql`, numbered like the SQLite files: the
//! same tables, columns, indexes and triggers (the triggers as PL/pgSQL
//! functions with the SQLite triggers' semantics), and `0000_functions.sql`,
//! the SQLite functions the store's portable statements call
//! (`json_extract`, `json_set`, `randomblob`, `zeroblob`) and the helpers the
//! triggers share. The engine's schema-parity test holds the two sets to
//! each other, so a SQLite migration without its twin fails it.
//!
//! PostgreSQL has no `user_version`: the applied versions are rows of
//! `schema_migrations` (one per migration, with its file name and when it
//! was applied). Several nodes share one database and may start at once,
//! so every step runs in its own transaction holding a transaction-scoped
//! advisory lock: the first node applies a migration, the others wait and
//! then find it applied. A database migrated by a newer dwserver (a version
//! this binary does not know) is refused before anything is touched, as the
//! SQLite store refuses a newer file: an older binary must not write rows
//! whose meaning a newer schema changed.

use crate::store::db;

/// `0000_functions.sql`: applied with migration 1, in its transaction.
const FUNCTIONS: &str = include_str!("migrations/postgres/0000_functions.sql");

/// The migrations in order, with their file names; a migration's version is
/// its position plus one, as in [`crate::store::schema`].
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_runs",
        include_str!("migrations/postgres/0001_runs.sql"),
    ),
    (
        "0002_dispatch",
        include_str!("migrations/postgres/0002_dispatch.sql"),
    ),
    (
        "0003_run_series",
        include_str!("migrations/postgres/0003_run_series.sql"),
    ),
    (
        "0004_idempotency",
        include_str!("migrations/postgres/0004_idempotency.sql"),
    ),
    (
        "0005_pending_payload_bytes",
        include_str!("migrations/postgres/0005_pending_payload_bytes.sql"),
    ),
    (
        "0006_protocol",
        include_str!("migrations/postgres/0006_protocol.sql"),
    ),
    (
        "0007_timeouts",
        include_str!("migrations/postgres/0007_timeouts.sql"),
    ),
    (
        "0008_metric_series",
        include_str!("migrations/postgres/0008_metric_series.sql"),
    ),
    (
        "0009_projections",
        include_str!("migrations/postgres/0009_projections.sql"),
    ),
    (
        "0010_archive_search_attributes",
        include_str!("migrations/postgres/0010_archive_search_attributes.sql"),
    ),
    (
        "0011_drop_query_tasks",
        include_str!("migrations/postgres/0011_drop_query_tasks.sql"),
    ),
    (
        "0012_schedules",
        include_str!("migrations/postgres/0012_schedules.sql"),
    ),
    (
        "0013_timer_cohorts",
        include_str!("migrations/postgres/0013_timer_cohorts.sql"),
    ),
    (
        "0014_schedule_buffers",
        include_str!("migrations/postgres/0014_schedule_buffers.sql"),
    ),
    (
        "0015_workflow_streams",
        include_str!("migrations/postgres/0015_workflow_streams.sql"),
    ),
    (
        "0016_external_payloads",
        include_str!("migrations/postgres/0016_external_payloads.sql"),
    ),
    (
        "0017_schedule_audit",
        include_str!("migrations/postgres/0017_schedule_audit.sql"),
    ),
    (
        "0018_service_catalog",
        include_str!("migrations/postgres/0018_service_catalog.sql"),
    ),
    (
        "0019_durable_state_counts",
        include_str!("migrations/postgres/0019_durable_state_counts.sql"),
    ),
    (
        "0020_external_payload_lifecycle",
        include_str!("migrations/postgres/0020_external_payload_lifecycle.sql"),
    ),
    (
        "0021_service_call_retention",
        include_str!("migrations/postgres/0021_service_call_retention.sql"),
    ),
    (
        "0022_namespace_durable_counts",
        include_str!("migrations/postgres/0022_namespace_durable_counts.sql"),
    ),
    (
        "0023_signal_waits",
        include_str!("migrations/postgres/0023_signal_waits.sql"),
    ),
    (
        "0024_runs_by_namespace",
        include_str!("migrations/postgres/0024_runs_by_namespace.sql"),
    ),
    (
        "0025_continue_as_new",
        include_str!("migrations/postgres/0025_continue_as_new.sql"),
    ),
    (
        "0026_child_workflows",
        include_str!("migrations/postgres/0026_child_workflows.sql"),
    ),
    (
        "0027_sticky_bindings",
        include_str!("migrations/postgres/0027_sticky_bindings.sql"),
    ),
    (
        "0028_worker_sessions",
        include_str!("migrations/postgres/0028_worker_sessions.sql"),
    ),
    (
        "0029_message_streams",
        include_str!("migrations/postgres/0029_message_streams.sql"),
    ),
    (
        "0030_service_call_waiters",
        include_str!("migrations/postgres/0030_service_call_waiters.sql"),
    ),
    (
        "0031_message_stream_cursors",
        include_str!("migrations/postgres/0031_message_stream_cursors.sql"),
    ),
    (
        "0032_queue_counts_at_commit",
        include_str!("migrations/postgres/0032_queue_counts_at_commit.sql"),
    ),
    (
        "0033_held_signals",
        include_str!("migrations/postgres/0033_held_signals.sql"),
    ),
    (
        "0034_activity_cancelled",
        include_str!("migrations/postgres/0034_activity_cancelled.sql"),
    ),
    (
        "0035_update_validations",
        include_str!("migrations/postgres/0035_update_validations.sql"),
    ),
    (
        "0036_cancellation_requests",
        include_str!("migrations/postgres/0036_cancellation_requests.sql"),
    ),
    (
        "0037_starts_side_by_side",
        include_str!("migrations/postgres/0037_starts_side_by_side.sql"),
    ),
    (
        "0038_update_validator_registrations",
        include_str!("migrations/postgres/0038_update_validator_registrations.sql"),
    ),
    (
        "0039_start_counters_upsert",
        include_str!("migrations/postgres/0039_start_counters_upsert.sql"),
    ),
    (
        "0040_cancellation_waits",
        include_str!("migrations/postgres/0040_cancellation_waits.sql"),
    ),
    (
        "0041_prepared_local_activities",
        include_str!("migrations/postgres/0041_prepared_local_activities.sql"),
    ),
    (
        "0042_redrive",
        include_str!("migrations/postgres/0042_redrive.sql"),
    ),
    (
        "0043_build_id_rollouts",
        include_str!("migrations/postgres/0043_build_id_rollouts.sql"),
    ),
    (
        "0044_workflow_definition_fingerprints",
        include_str!("migrations/postgres/0044_workflow_definition_fingerprints.sql"),
    ),
    (
        "0045_checks_without_lists",
        include_str!("migrations/postgres/0045_checks_without_lists.sql"),
    ),
    (
        "0046_partial_indexes",
        include_str!("migrations/postgres/0046_partial_indexes.sql"),
    ),
    (
        "0047_triggers_without_temporary_tables",
        include_str!("migrations/postgres/0047_triggers_without_temporary_tables.sql"),
    ),
    (
        "0048_queue_minute_apart",
        include_str!("migrations/postgres/0048_queue_minute_apart.sql"),
    ),
    (
        "0049_lease_index_partial",
        include_str!("migrations/postgres/0049_lease_index_partial.sql"),
    ),
    (
        "0050_runs_by_workflow_with_id",
        include_str!("migrations/postgres/0050_runs_by_workflow_with_id.sql"),
    ),
    (
        "0051_ready_index_open_tasks",
        include_str!("migrations/postgres/0051_ready_index_open_tasks.sql"),
    ),
    (
        "0052_ready_index_whole_on_postgres",
        include_str!("migrations/postgres/0052_ready_index_whole_on_postgres.sql"),
    ),
    (
        "0053_queue_busy_flag",
        include_str!("migrations/postgres/0053_queue_busy_flag.sql"),
    ),
    (
        "0054_poll_request_index",
        include_str!("migrations/postgres/0054_poll_request_index.sql"),
    ),
    (
        "0055_ready_index_in_claim_order",
        include_str!("migrations/postgres/0055_ready_index_in_claim_order.sql"),
    ),
    (
        "0056_staged_starts_counted_once",
        include_str!("migrations/postgres/0056_staged_starts_counted_once.sql"),
    ),
];

/// The PostgreSQL schema version this engine writes; equal to the SQLite
/// [`crate::store::schema::SCHEMA_VERSION`] (a unit test holds them together).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock key every migrating node takes (transaction-scoped):
/// the bytes of "dwschema". Other users of advisory locks on the same
/// database must not use it.
pub const MIGRATION_LOCK: i64 = i64::from_be_bytes(*b"dwschema");

/// The table of applied versions (no `dw_` prefix: it is the schema's own).
const VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at_ms BIGINT NOT NULL
)";

/// Why a PostgreSQL database could not be brought to [`SCHEMA_VERSION`].
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The database was migrated by a newer dwserver.
    #[error(
        "the PostgreSQL database's schema is at version {found}, newer than this dwserver knows \
         ({supported}): a newer dwserver migrated it; run that release or a later one against it \
         (this one refuses to write rows a newer schema may read differently)"
    )]
    TooNew {
        /// The newest version `schema_migrations` records.
        found: i64,
        /// The newest this binary knows.
        supported: i64,
    },
    /// A migration's SQL failed; nothing of it was applied.
    #[error("PostgreSQL migration {name} (version {version}) failed: {source}")]
    Migration {
        /// The migration's file name, without `.sql`.
        name: &'static str,
        /// Its version.
        version: i64,
        /// What PostgreSQL said.
        #[source]
        source: db::Error,
    },
    /// Reading or recording the version failed (the connection, the lock).
    #[error("PostgreSQL schema version: {0}")]
    Database(#[from] db::Error),
}

/// What the migration runner needs of a session: simple-query batches
/// and one integer read. Implemented for the store's own connection (a
/// node opening its store) and for the sync client (tools and tests).
pub trait MigrationSession {
    /// Runs `sql` (`;`-separated statements, no parameters).
    fn run(&mut self, sql: &str) -> Result<(), db::Error>;
    /// The integer in the first column of `sql`'s one row.
    fn integer(&mut self, sql: &str) -> Result<i64, db::Error>;
}

impl MigrationSession for postgres::Client {
    fn run(&mut self, sql: &str) -> Result<(), db::Error> {
        Ok(self.batch_execute(sql)?)
    }

    fn integer(&mut self, sql: &str) -> Result<i64, db::Error> {
        Ok(self.query_one(sql, &[])?.try_get(0)?)
    }
}

impl MigrationSession for db::Connection {
    fn run(&mut self, sql: &str) -> Result<(), db::Error> {
        self.execute_batch(sql)
    }

    fn integer(&mut self, sql: &str) -> Result<i64, db::Error> {
        self.query_row(sql, [], |row| row.get(0))
    }
}

/// Brings the database `session` is connected to (its current schema, as
/// `search_path` names it) to [`SCHEMA_VERSION`], one migration per
/// transaction; returns how many it applied (0 when it already was there).
/// Refuses a database at a newer version with [`MigrateError::TooNew`].
///
/// Safe to run from several processes at once (nodes starting together,
/// a rolling upgrade): each step holds [`MIGRATION_LOCK`], so one node
/// applies each migration and the others wait, then find it applied. A
/// step that applies a migration also holds the store's write lock
/// ([`db::WRITE_LOCK`]) exclusively, so it waits for the writes and
/// claims of nodes still running the older release and they wait for it:
/// a schema change never interleaves with a write's row and table locks.
/// The session's timeouts are lifted inside each step (a migration may
/// rewrite a large table, or wait for another node's).
pub fn migrate(session: &mut impl MigrationSession) -> Result<usize, MigrateError> {
    migrate_to(session, SCHEMA_VERSION)
}

/// As [`migrate`], stopping at version `target` (an older schema, as an
/// older release leaves it: tests of a rolling upgrade start from one).
pub fn migrate_to(session: &mut impl MigrationSession, target: i64) -> Result<usize, MigrateError> {
    let mut applied = 0;
    loop {
        session.run("BEGIN")?;
        match step(session, target.min(SCHEMA_VERSION)) {
            Ok(done) => {
                session.run("COMMIT")?;
                if done {
                    return Ok(applied);
                }
                applied += 1;
            }
            Err(e) => {
                let _ = session.run("ROLLBACK");
                return Err(e);
            }
        }
    }
}

/// One migration step inside an open transaction: `true` when the schema
/// was already at `target` or past it (nothing applied).
fn step(session: &mut impl MigrationSession, target: i64) -> Result<bool, MigrateError> {
    session.run(&format!(
        "SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0; \
         SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"
    ))?;
    session.run(VERSION_TABLE)?;
    let found = session.integer("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")?;
    if found > SCHEMA_VERSION {
        return Err(MigrateError::TooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let Some(&(name, sql)) = usize::try_from(found)
        .ok()
        .filter(|_| found < target)
        .and_then(|index| MIGRATIONS.get(index))
    else {
        return Ok(true);
    };
    let version = found + 1;
    let failed = |source| MigrateError::Migration {
        name,
        version,
        source,
    };
    session.run(&format!(
        "SELECT pg_advisory_xact_lock({}, hashtext(current_schema()))",
        db::WRITE_LOCK
    ))?;
    if found == 0 {
        session.run(FUNCTIONS).map_err(failed)?;
    }
    session.run(sql).map_err(failed)?;
    // The name is one of this file's constants: no quoting to escape.
    session.run(&format!(
        "INSERT INTO schema_migrations (version, name, applied_at_ms) \
         VALUES ({version}, '{name}', floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
    ))?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every SQLite migration has its PostgreSQL twin, in the same order
    /// under the same name (the engine's parity test then compares what
    /// they build).
    #[test]
    fn each_sqlite_migration_has_a_postgres_twin_of_the_same_name() {
        assert_eq!(SCHEMA_VERSION, crate::store::schema::SCHEMA_VERSION);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/migrations");
        let mut sqlite: Vec<String> = std::fs::read_dir(&dir)
            .expect("read the SQLite migrations")
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".sql").map(str::to_owned)
            })
            .collect();
        sqlite.sort();
        let postgres: Vec<&str> = MIGRATIONS.iter().map(|(name, _)| *name).collect();
        assert_eq!(sqlite, postgres);
        for (name, _) in MIGRATIONS {
            assert!(
                dir.join("postgres").join(format!("{name}.sql")).is_file(),
                "{name}.sql is missing from migrations/postgres"
            );
        }
    }
}
