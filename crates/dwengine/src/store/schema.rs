//! Embedded schema migrations, applied when a store is opened.
//!
//! The engine ships its schema inside the binary so a fresh file and an old
//! file both reach the current layout without an operator step. The applied
//! version lives in SQLite's `user_version`, and each migration runs in an
//! immediate transaction that re-reads it, so two processes opening the same
//! file at once apply each migration exactly once.

use rusqlite::{Connection, TransactionBehavior};

use crate::store::Error;

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
];

/// The schema version this engine writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings `conn` to [`SCHEMA_VERSION`]; refuses a file written by a newer engine.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), Error> {
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

    #[test]
    fn migrating_twice_is_a_no_op_and_newer_files_are_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(Error::SchemaTooNew { found, .. }) if found == SCHEMA_VERSION + 1
        ));
    }
}
