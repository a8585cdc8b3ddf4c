//! Registered namespaces: the names a client may put in `X-Namespace`.
//!
//! `default` exists from the first migration on; others are registered by
//! an admin. A namespace is a small row (name, description, retention), so
//! looking one up on every request is one primary-key read.

use crate::store::db::{params, OptionalExtension};
use serde::Serialize;

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::rows::now_ms;

/// One registered namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Namespace {
    /// Its name.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// How long closed runs keep their history, in days (the server's
    /// default when absent).
    pub retention_days: Option<i64>,
    /// When it was registered (Unix ms; 0 for `default`).
    pub created_at_ms: i64,
}

impl Store {
    /// The namespace called `name`, if registered.
    pub fn namespace(&self, name: &str) -> Result<Option<Namespace>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT name, description, retention_days, created_at_ms FROM namespaces \
                 WHERE name = ?1",
            )?
            .query_row([name], |r| {
                Ok(Namespace {
                    name: r.get(0)?,
                    description: r.get(1)?,
                    retention_days: r.get(2)?,
                    created_at_ms: r.get(3)?,
                })
            })
            .optional()?)
    }

    /// Every registered namespace, by name.
    pub fn namespaces(&self) -> Result<Vec<Namespace>, Error> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT name, description, retention_days, created_at_ms FROM namespaces ORDER BY name",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(Namespace {
                name: r.get(0)?,
                description: r.get(1)?,
                retention_days: r.get(2)?,
                created_at_ms: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Registers `name`; `false` when it already existed (nothing changes).
    pub fn register_namespace(
        &self,
        name: &str,
        description: &str,
        retention_days: Option<i64>,
    ) -> Result<bool, Error> {
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO namespaces (name, description, retention_days, created_at_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING",
            )?
            .execute(params![name, description, retention_days, now_ms()])?;
        Ok(inserted == 1)
    }
}
