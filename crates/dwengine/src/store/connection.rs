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

/// Statements each connection keeps compiled. The store prepares about 230
/// distinct statements through `prepare_cached` (a test below counts them);
/// rusqlite's default of 16 made most of them miss, so a busy server spent
/// a fifth of its CPU compiling SQL (and the triggers each update of `runs`
/// compiles in). A fixed number: the cache cannot grow past it.
pub(crate) const STATEMENT_CACHE_CAPACITY: usize = 512;

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
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        conn.busy_timeout(config.busy_timeout)?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(Store { conn, config })
    }

    /// A private in-memory store (no WAL: there is no file to share).
    pub fn open_in_memory(config: StoreConfig) -> Result<Store, Error> {
        Store::setup(Connection::open_in_memory()?, config)
    }

    fn setup(mut conn: Connection, config: StoreConfig) -> Result<Store, Error> {
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
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
        if let Some(pages) = config.max_page_count {
            let _set: i64 =
                conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |row| {
                    row.get(0)
                })?;
        }
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

#[cfg(test)]
mod tests {
    use super::STATEMENT_CACHE_CAPACITY;

    /// Every statement the store prepares through the cache stays compiled:
    /// the capacity keeps room for twice the call sites (a statement built
    /// with `format!` has a few variants, one per table or column it names).
    #[test]
    fn the_statement_cache_holds_every_statement_the_store_prepares() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store");
        let mut sites = 0;
        for entry in std::fs::read_dir(dir).expect("the store's sources") {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                sites += text.matches(".prepare_cached(").count();
                sites += text.matches("execute_cached(conn").count();
            }
        }
        assert!(sites > 100, "counted only {sites} call sites in {dir}");
        assert!(
            2 * sites <= STATEMENT_CACHE_CAPACITY,
            "{sites} prepare_cached call sites: raise STATEMENT_CACHE_CAPACITY \
             ({STATEMENT_CACHE_CAPACITY}) so every statement stays compiled"
        );
    }
}
