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

use crate::store::db::{Connection, SqliteSettings};
use dwpolicy::{BackendCapabilities, BackendProfile, HealthSnapshot};

use crate::store::config::{Durability, StoreConfig};
use crate::store::error::Error;
use crate::store::schema;

/// The database driver name this store reports in its backend contract.
pub const DATABASE_DRIVER: &str = "sqlite";

/// How the configuration opens an SQLite connection.
fn sqlite_settings(config: &StoreConfig) -> SqliteSettings {
    SqliteSettings {
        busy_timeout: config.busy_timeout,
        synchronous_full: matches!(config.durability, Durability::Full),
    }
}

/// One connection to a run store.
///
/// Open one store per thread or process: SQLite serializes the writers, and
/// every write path takes the write lock before it reads a counter, so
/// concurrent admissions cannot overshoot a limit.
pub struct Store {
    pub(super) conn: Connection,
    pub(super) config: StoreConfig,
    /// Starts the SQLite writer's batch staged ([`crate::store::start_stage`]).
    pub(super) stage: std::cell::RefCell<crate::store::staging::StartStage>,
}

impl Store {
    /// Round trips this store's connection made to a PostgreSQL server so
    /// far (0 on SQLite): tests count what one step costs.
    pub fn round_trips(&self) -> u64 {
        self.conn.round_trips()
    }

    /// Opens (creating if needed) the store at `path`, in WAL mode, migrated.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open_sqlite(path, sqlite_settings(&config))?;
        Store::setup(conn, config)
    }

    /// A read-only connection to a store another connection migrated
    /// (the read pool's connections).
    pub fn open_reader(path: impl AsRef<Path>, config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open_sqlite_reader(path, sqlite_settings(&config))?;
        Ok(Store {
            conn,
            config,
            stage: Default::default(),
        })
    }

    /// Opens the store on the PostgreSQL database `url` names
    /// (`postgres://user:password@host:port/database`), migrating it.
    pub fn open_postgres(url: &str, config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open_postgres(url, &config.postgres)?;
        Store::setup(conn, config)
    }

    /// A session on a PostgreSQL store another session migrated (the read
    /// pool's).
    pub fn open_postgres_reader(url: &str, config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open_postgres(url, &config.postgres)?;
        Ok(Store {
            conn,
            config,
            stage: Default::default(),
        })
    }

    /// A private in-memory store (no WAL: there is no file to share).
    pub fn open_in_memory(config: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open_sqlite_in_memory(sqlite_settings(&config))?;
        Store::setup(conn, config)
    }

    fn setup(mut conn: Connection, config: StoreConfig) -> Result<Store, Error> {
        schema::migrate(&mut conn)?;
        if let Some(pages) = config.max_page_count {
            conn.set_max_page_count(pages)?;
        }
        Ok(Store {
            conn,
            config,
            stage: Default::default(),
        })
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
                database_driver: self.conn.engine().driver_name(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::store::db::STATEMENT_CACHE_CAPACITY;

    /// Every statement the store prepares through the cache stays compiled:
    /// the capacity keeps room for twice the call sites (a statement built
    /// with `format!` has a few variants, one per table or column it names).
    #[test]
    fn the_statement_cache_holds_every_statement_the_store_prepares() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store");
        let mut sites = 0;
        let mut folders = vec![std::path::PathBuf::from(dir)];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).expect("the store's sources") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    folders.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).expect("a source file");
                    sites += text.matches(".prepare_cached(").count();
                    // Transaction control: begin, commit, savepoints.
                    sites += text.matches(".begin_write()").count();
                    sites += text.matches(".savepoint(").count();
                    sites += text.matches(".release(").count();
                }
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
