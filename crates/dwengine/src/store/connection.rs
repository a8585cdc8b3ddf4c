//! One connection to a run store: [`Store`], opened on a file or in
//! memory, migrated, and answering with its configuration and backend
//! contract.
//!
//! Every transition module adds its operations to [`Store`] in an `impl`
//! block of its own and reaches the connection through the fields, which
//! are visible to the store's modules only. This file sits just above the
//! store's bottom layer (it uses the configuration, the schema and the
//! error type) so that every transition can name `Store` without importing
//! the store's root module.

use std::path::Path;

use dwpolicy::{BackendCapabilities, BackendProfile, HealthSnapshot};
use rusqlite::Connection;

use crate::store::config::{Durability, StoreConfig};
use crate::store::error::Error;
use crate::store::schema;

/// The database driver name this store reports in its backend contract.
pub const DATABASE_DRIVER: &str = "sqlite";

/// One connection to a run store.
///
/// Open one store per thread or process: SQLite serializes the writers, and
/// every write path takes the write lock before it reads a counter, so
/// concurrent admissions cannot overshoot a limit.
pub struct Store {
    pub(super) conn: Connection,
    pub(super) config: StoreConfig,
}

impl Store {
    /// Opens (creating if needed) the store at `path`, in WAL mode, migrated.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open(path)?;
        Store::setup(conn, config)
    }

    /// A read-only connection to a store another connection migrated
    /// (the read pool's connections).
    pub fn open_reader(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(config.busy_timeout)?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(Store { conn, config })
    }

    /// A private in-memory store (no WAL: there is no file to share).
    pub fn open_in_memory(config: StoreConfig) -> Result<Store, Error> {
        Store::setup(Connection::open_in_memory()?, config)
    }

    fn setup(mut conn: Connection, config: StoreConfig) -> Result<Store, Error> {
        conn.busy_timeout(config.busy_timeout)?;
        // journal_mode answers with the mode in force; memory databases keep "memory".
        let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        let synchronous = match config.durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", synchronous)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        schema::migrate(&mut conn)?;
        Ok(Store { conn, config })
    }

    /// The configuration in force.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The health snapshot's `structural_limits` section.
    pub fn health(&self) -> HealthSnapshot {
        HealthSnapshot::new(self.config.limits)
    }

    /// The backend contract; SQLite adds `concurrent_write_safety: limited`.
    pub fn capabilities(&self) -> BackendCapabilities {
        BackendCapabilities::new(
            self.config.limits,
            BackendProfile {
                queue_driver: &self.config.queue_driver,
                database_driver: DATABASE_DRIVER,
            },
        )
    }
}
