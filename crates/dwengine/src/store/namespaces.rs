//! Registered namespaces: the names a client may put in `X-Namespace`.
//!
//! `default` exists from the first migration on; others are registered by
//! an admin. A namespace is a small row (name, description, retention), so
//! looking one up on every request is one primary-key read.

use crate::store::db::{params, OptionalExtension};
use serde::Serialize;

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::rows::{now_ms, to_i64, to_u64};

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

    /// One page of registered namespaces by name: those after `after` (all
    /// when `None`), at most `limit` (one primary-key range read).
    pub fn namespaces_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Namespace>, Error> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT name, description, retention_days, created_at_ms FROM namespaces \
             WHERE name > ?1 OR ?1 IS NULL ORDER BY name LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![after, to_i64(limit)], |r| {
            Ok(Namespace {
                name: r.get(0)?,
                description: r.get(1)?,
                retention_days: r.get(2)?,
                created_at_ms: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// How many namespaces are registered (`default` included).
    pub fn namespace_count(&self) -> Result<u64, Error> {
        let n: i64 = self
            .conn
            .prepare_cached("SELECT COUNT(*) FROM namespaces")?
            .query_row([], |r| r.get(0))?;
        Ok(to_u64(n))
    }

    /// What `name` still holds that a delete would orphan: the names of
    /// the resources with at least one row (empty: nothing).
    pub fn namespace_holdings(&self, name: &str) -> Result<Vec<&'static str>, Error> {
        let mut holds = Vec::new();
        for (resource, sql) in [
            (
                "workflow_runs",
                "SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE namespace = ?1 LIMIT 1) AS r",
            ),
            (
                "worker_registrations",
                "SELECT COUNT(*) FROM (SELECT 1 FROM workers WHERE namespace = ?1 LIMIT 1) AS w",
            ),
            (
                "schedules_streams_or_service_catalog_entries",
                "SELECT COUNT(*) FROM namespace_durable_counts WHERE namespace = ?1 AND count > 0",
            ),
            (
                "external_payloads",
                "SELECT COUNT(*) FROM external_payload_usage WHERE namespace = ?1 AND objects > 0",
            ),
        ] {
            let n: i64 = self
                .conn
                .prepare_cached(sql)?
                .query_row([name], |r| r.get(0))?;
            if n > 0 {
                holds.push(resource);
            }
        }
        Ok(holds)
    }

    /// Deletes the registration of `name` with what is only its
    /// configuration (custom search-attribute definitions, the audit
    /// streams of its deleted schedules, its zeroed payload usage row);
    /// `false` when it was not registered. The caller checks
    /// [`Store::namespace_holdings`] in the same transaction first.
    pub fn delete_namespace(&self, name: &str) -> Result<bool, Error> {
        for sql in [
            "DELETE FROM search_attribute_definitions WHERE namespace = ?1",
            "DELETE FROM schedule_audit WHERE namespace = ?1",
            "DELETE FROM external_payload_usage WHERE namespace = ?1",
        ] {
            self.conn.prepare_cached(sql)?.execute([name])?;
        }
        let deleted = self
            .conn
            .prepare_cached("DELETE FROM namespaces WHERE name = ?1")?
            .execute([name])?;
        Ok(deleted == 1)
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
