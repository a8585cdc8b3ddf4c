//! The service catalog and its service calls, as rows.
//!
//! Endpoints, services and operations share one table: a level, a parent
//! (0 for an endpoint) and a name unique under its parent in a namespace.
//! The server validates and owns each entry's JSON document; the store only
//! keeps the tree consistent (no entry is deleted while it has children or,
//! for an operation, recorded calls) and keeps one call per caller
//! idempotency key, so a retried execute converges on the call it made.

use crate::store::db::{params, OptionalExtension, Row};
use serde_json::Value;

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::{now_ms, to_i64};

/// A catalog level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogLevel {
    /// An endpoint of a namespace.
    Endpoint,
    /// A service under an endpoint.
    Service,
    /// An operation of a service.
    Operation,
}

impl CatalogLevel {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            CatalogLevel::Endpoint => "endpoint",
            CatalogLevel::Service => "service",
            CatalogLevel::Operation => "operation",
        }
    }

    /// The level below, if any.
    pub fn child(self) -> Option<CatalogLevel> {
        match self {
            CatalogLevel::Endpoint => Some(CatalogLevel::Service),
            CatalogLevel::Service => Some(CatalogLevel::Operation),
            CatalogLevel::Operation => None,
        }
    }
}

/// One catalog entry.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogEntry {
    /// Its id.
    pub id: i64,
    /// Its namespace.
    pub namespace: String,
    /// Its parent's id (0 for an endpoint).
    pub parent_id: i64,
    /// Its name (normalised by the server).
    pub name: String,
    /// The validated document.
    pub document: Value,
    /// Created (Unix ms).
    pub created_at_ms: i64,
    /// Last changed (Unix ms).
    pub updated_at_ms: i64,
}

/// Why an entry could not be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogDelete {
    /// Deleted.
    Deleted,
    /// No such entry.
    Missing,
    /// It still has entries below it.
    HasChildren,
    /// It is an operation with recorded calls.
    HasCalls,
}

/// One service call.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceCallRow {
    /// Its id.
    pub id: i64,
    /// The operation called.
    pub operation_id: i64,
    /// The catalog's namespace.
    pub namespace: String,
    /// The caller's namespace.
    pub caller_namespace: String,
    /// The caller's idempotency key.
    pub idempotency_key: Option<String>,
    /// The request as validated (JSON).
    pub request: Value,
    /// The workflow the call started.
    pub linked_workflow_id: Option<String>,
    /// Its run.
    pub linked_run: Option<RunId>,
    /// Accepted (Unix ms).
    pub created_at_ms: i64,
    /// Last changed (Unix ms).
    pub updated_at_ms: i64,
}

const ENTRY_COLUMNS: &str =
    "id, namespace, parent_id, name, document, created_at_ms, updated_at_ms";
const CALL_COLUMNS: &str = "id, operation_id, namespace, caller_namespace, idempotency_key, \
    request, linked_workflow_id, linked_run_id, created_at_ms, updated_at_ms";

fn entry(row: &Row<'_>) -> crate::store::db::Result<(CatalogEntry, String)> {
    Ok((
        CatalogEntry {
            id: row.get(0)?,
            namespace: row.get(1)?,
            parent_id: row.get(2)?,
            name: row.get(3)?,
            document: Value::Null,
            created_at_ms: row.get(5)?,
            updated_at_ms: row.get(6)?,
        },
        row.get(4)?,
    ))
}

fn with_document((mut entry, text): (CatalogEntry, String)) -> Result<CatalogEntry, Error> {
    entry.document = serde_json::from_str(&text)?;
    Ok(entry)
}

fn call(row: &Row<'_>) -> crate::store::db::Result<(ServiceCallRow, String)> {
    Ok((
        ServiceCallRow {
            id: row.get(0)?,
            operation_id: row.get(1)?,
            namespace: row.get(2)?,
            caller_namespace: row.get(3)?,
            idempotency_key: row.get(4)?,
            request: Value::Null,
            linked_workflow_id: row.get(6)?,
            linked_run: row.get::<_, Option<i64>>(7)?.map(RunId),
            created_at_ms: row.get(8)?,
            updated_at_ms: row.get(9)?,
        },
        row.get(5)?,
    ))
}

fn with_request((mut row, text): (ServiceCallRow, String)) -> Result<ServiceCallRow, Error> {
    row.request = serde_json::from_str(&text)?;
    Ok(row)
}

/// How long a service call is kept after it was recorded: seven days, well
/// past the longest `wait_timeout_seconds` (one day). Until then an
/// idempotent replay answers it; after it, the same key makes a new call.
pub const SERVICE_CALL_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;

impl Store {
    /// Deletes at most `limit` service calls recorded at or before
    /// `cutoff_ms`, oldest first, keeping any whose started run is still
    /// open; returns how many went.
    pub fn prune_service_calls(&self, cutoff_ms: i64, limit: usize) -> Result<usize, Error> {
        let deleted = self
            .conn
            .prepare_cached(
                "DELETE FROM service_calls WHERE id IN (SELECT c.id FROM service_calls c \
                 WHERE c.created_at_ms <= ?1 AND NOT EXISTS (SELECT 1 FROM runs r \
                 WHERE r.id = c.linked_run_id AND r.status = 'running') \
                 ORDER BY c.created_at_ms LIMIT ?2)",
            )?
            .execute(params![cutoff_ms, to_i64(limit)])?;
        Ok(deleted)
    }

    /// Adds an entry; `None` when its parent already has one of that name.
    pub fn create_catalog_entry(
        &self,
        namespace: &str,
        level: CatalogLevel,
        parent_id: i64,
        name: &str,
        document: &Value,
    ) -> Result<Option<CatalogEntry>, Error> {
        let now = now_ms();
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO service_catalog (namespace, level, parent_id, name, \
                 document, created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) \
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                namespace,
                level.as_str(),
                parent_id,
                name,
                serde_json::to_string(document)?,
                now
            ])?;
        if inserted == 0 {
            return Ok(None);
        }
        self.catalog_entry(namespace, level, parent_id, name)
    }

    /// The entry named `name` under `parent_id`.
    pub fn catalog_entry(
        &self,
        namespace: &str,
        level: CatalogLevel,
        parent_id: i64,
        name: &str,
    ) -> Result<Option<CatalogEntry>, Error> {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM service_catalog \
             WHERE namespace = ?1 AND level = ?2 AND parent_id = ?3 AND name = ?4"
        );
        self.conn
            .prepare_cached(&sql)?
            .query_row(params![namespace, level.as_str(), parent_id, name], entry)
            .optional()?
            .map(with_document)
            .transpose()
    }

    /// The entries under `parent_id`, by name.
    pub fn catalog_entries(
        &self,
        namespace: &str,
        level: CatalogLevel,
        parent_id: i64,
    ) -> Result<Vec<CatalogEntry>, Error> {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM service_catalog \
             WHERE namespace = ?1 AND level = ?2 AND parent_id = ?3 ORDER BY name"
        );
        let rows = self
            .conn
            .prepare_cached(&sql)?
            .query_map(params![namespace, level.as_str(), parent_id], entry)?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().map(with_document).collect()
    }

    /// Deletes an entry that has no children and no recorded calls.
    pub fn delete_catalog_entry(
        &self,
        namespace: &str,
        level: CatalogLevel,
        parent_id: i64,
        name: &str,
    ) -> Result<CatalogDelete, Error> {
        let Some(found) = self.catalog_entry(namespace, level, parent_id, name)? else {
            return Ok(CatalogDelete::Missing);
        };
        if let Some(child) = level.child() {
            let children: i64 = self
                .conn
                .prepare_cached(
                    "SELECT COUNT(*) FROM service_catalog WHERE parent_id = ?1 AND level = ?2",
                )?
                .query_row(params![found.id, child.as_str()], |r| r.get(0))?;
            if children > 0 {
                return Ok(CatalogDelete::HasChildren);
            }
        } else {
            let calls: i64 = self
                .conn
                .prepare_cached("SELECT COUNT(*) FROM service_calls WHERE operation_id = ?1")?
                .query_row(params![found.id], |r| r.get(0))?;
            if calls > 0 {
                return Ok(CatalogDelete::HasCalls);
            }
        }
        self.conn
            .prepare_cached("DELETE FROM service_catalog WHERE id = ?1")?
            .execute(params![found.id])?;
        Ok(CatalogDelete::Deleted)
    }

    /// Records a call of `operation_id`, or returns the call its caller's
    /// idempotency key already made: `(call, created)`.
    pub fn record_service_call(
        &self,
        operation_id: i64,
        namespace: &str,
        caller_namespace: &str,
        idempotency_key: Option<&str>,
        request: &Value,
    ) -> Result<(ServiceCallRow, bool), Error> {
        if let Some(key) = idempotency_key {
            if let Some(existing) = self.service_call_by_key(operation_id, caller_namespace, key)? {
                return Ok((existing, false));
            }
        }
        let now = now_ms();
        let id: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO service_calls (operation_id, namespace, caller_namespace, \
                 idempotency_key, request, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) RETURNING id",
            )?
            .query_row(
                params![
                    operation_id,
                    namespace,
                    caller_namespace,
                    idempotency_key,
                    serde_json::to_string(request)?,
                    now
                ],
                |r| r.get(0),
            )?;
        let created = self.service_call(id)?.ok_or_else(|| {
            Error::Corrupt(format!("service call {id} vanished after its insert"))
        })?;
        Ok((created, true))
    }

    /// The call an idempotency key made, if any.
    pub fn service_call_by_key(
        &self,
        operation_id: i64,
        caller_namespace: &str,
        key: &str,
    ) -> Result<Option<ServiceCallRow>, Error> {
        let sql = format!(
            "SELECT {CALL_COLUMNS} FROM service_calls \
             WHERE operation_id = ?1 AND caller_namespace = ?2 AND idempotency_key = ?3"
        );
        self.conn
            .prepare_cached(&sql)?
            .query_row(params![operation_id, caller_namespace, key], call)
            .optional()?
            .map(with_request)
            .transpose()
    }

    /// A call by id.
    pub fn service_call(&self, id: i64) -> Result<Option<ServiceCallRow>, Error> {
        let sql = format!("SELECT {CALL_COLUMNS} FROM service_calls WHERE id = ?1");
        self.conn
            .prepare_cached(&sql)?
            .query_row(params![id], call)
            .optional()?
            .map(with_request)
            .transpose()
    }

    /// Links a call to the run it started.
    pub fn link_service_call(&self, id: i64, workflow_id: &str, run: RunId) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "UPDATE service_calls SET linked_workflow_id = ?2, linked_run_id = ?3, \
                 updated_at_ms = ?4 WHERE id = ?1",
            )?
            .execute(params![id, workflow_id, run.0, now_ms()])?;
        Ok(())
    }
}
