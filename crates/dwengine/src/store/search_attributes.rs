//! Custom search-attribute registrations per namespace.
//!
//! Search-attribute names are chosen by clients, so the registrations of a
//! namespace are capped (`server.limits.max_search_attributes`, 100 by
//! default, `0` disables the cap). The count and the insert share one write
//! transaction, so concurrent registrations cannot overshoot the cap. Runs
//! may then only carry registered (or system) attributes.

use std::collections::BTreeMap;

use crate::store::db::{params, OptionalExtension};

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::rows::{now_ms, to_u64};
use crate::store::tx::WriteTx;

/// What a registration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// Registered.
    Created,
    /// The namespace already has an attribute of that name (with this type).
    AlreadyExists(String),
    /// The namespace holds `registered` attributes; one more passes `limit`.
    LimitReached {
        /// Registered now.
        registered: u64,
        /// The cap.
        limit: u64,
    },
}

impl Store {
    /// Registers `name` of `attribute_type` in `namespace` unless that would
    /// take the namespace past `limit` registrations (`0`: no cap).
    pub fn register_search_attribute(
        &self,
        namespace: &str,
        name: &str,
        attribute_type: &str,
        limit: u64,
    ) -> Result<Registration, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let existing: Option<String> = tx
            .prepare_cached(
                "SELECT type FROM search_attribute_definitions WHERE namespace = ?1 AND name = ?2",
            )?
            .query_row(params![namespace, name], |r| r.get(0))
            .optional()?;
        if let Some(existing) = existing {
            return Ok(Registration::AlreadyExists(existing));
        }
        let registered: i64 = tx
            .prepare_cached(
                "SELECT COUNT(*) FROM search_attribute_definitions WHERE namespace = ?1",
            )?
            .query_row([namespace], |r| r.get(0))?;
        let registered = to_u64(registered);
        if limit != 0 && registered >= limit {
            return Ok(Registration::LimitReached { registered, limit });
        }
        tx.prepare_cached(
            "INSERT INTO search_attribute_definitions (namespace, name, type, created_at_ms) \
             VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![namespace, name, attribute_type, now_ms()])?;
        tx.commit()?;
        Ok(Registration::Created)
    }

    /// Removes a registration; false when there was none.
    pub fn remove_search_attribute(&self, namespace: &str, name: &str) -> Result<bool, Error> {
        let removed = self
            .conn
            .prepare_cached(
                "DELETE FROM search_attribute_definitions WHERE namespace = ?1 AND name = ?2",
            )?
            .execute(params![namespace, name])?;
        Ok(removed > 0)
    }

    /// The namespace's registrations, name → type, in name order.
    pub fn search_attributes(&self, namespace: &str) -> Result<BTreeMap<String, String>, Error> {
        let rows = self
            .conn
            .prepare_cached(
                "SELECT name, type FROM search_attribute_definitions WHERE namespace = ?1 \
                 ORDER BY name",
            )?
            .query_map([namespace], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }
}
