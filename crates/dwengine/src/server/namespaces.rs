//! Namespaces on the request path: every control- and worker-plane request
//! names one in `X-Namespace`, and it must be registered.
//!
//! Registered names are remembered in process after their first lookup, so
//! the common request costs a set lookup; the set only grows through admin
//! registration, which bounds it.

use serde_json::{json, Value};

use crate::server::error::finish_with;
use crate::server::wire::{self, Checks, RegisterNamespace};
use crate::server::{ApiError, Engine};

/// The namespace cap's variable.
pub const MAX_NAMESPACES_ENV: &str = "DW_MAX_NAMESPACES";
/// Its config-file key.
pub const MAX_NAMESPACES_KEY: &str = "server.namespaces.max_namespaces";
/// Namespaces a server registers by default, `default` included (the
/// seed names no figure; a thousand keeps the in-process set of known
/// names, the per-namespace cache keys and the admin list small).
pub const DEFAULT_MAX_NAMESPACES: u64 = 1_000;
/// `GET /api/namespaces` page size unless `page_size` says otherwise.
pub const DEFAULT_NAMESPACE_PAGE_SIZE: i64 = 100;

/// What a registration found in the writer's transaction.
enum Registration {
    Created,
    Existing,
    Full(u64),
}

impl Engine {
    /// Whether `namespace` is valid and already known registered, without
    /// touching the store (`Ok(false)`: look it up with
    /// [`Engine::require_namespace`]).
    pub fn namespace_known(&self, namespace: &str) -> Result<bool, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text("namespace", namespace, dwpolicy::boundary::MAX_NAME_CHARS);
        v.finish()?;
        Ok(self
            .known_namespaces
            .read()
            .map(|set| set.contains(namespace))
            .unwrap_or(false))
    }

    /// Refuses a namespace nobody registered (404 `namespace_not_found`).
    pub fn require_namespace(&self, namespace: &str) -> Result<(), ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text("namespace", namespace, dwpolicy::boundary::MAX_NAME_CHARS);
        v.finish()?;
        let known = self
            .known_namespaces
            .read()
            .map(|set| set.contains(namespace))
            .unwrap_or(false);
        if known {
            return Ok(());
        }
        if self.read(|s| s.namespace(namespace))?.is_none() {
            return Err(ApiError::NamespaceNotFound(namespace.to_owned()));
        }
        if let Ok(mut set) = self.known_namespaces.write() {
            set.insert(namespace.to_owned());
        }
        Ok(())
    }

    /// `POST /api/namespaces`: `(true, …)` when it was created.
    pub fn register_namespace(&self, body: RegisterNamespace) -> Result<(bool, Value), ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text("name", &body.name, dwpolicy::boundary::MAX_NAME_CHARS);
        let description = body.description.unwrap_or_default();
        v.text("description", &description, 1000);
        let mut checks = Checks::default();
        checks.range("retention_days", body.retention_days, 1, 3650);
        if body
            .name
            .chars()
            .any(|c| c.is_whitespace() || dwpolicy::boundary::is_deceptive_char(c))
        {
            checks.problem(
                "name",
                "The name field must not contain whitespace, control, bidirectional or zero-width characters.",
            );
        }
        // A namespace name lands in paths, URLs and keys: no separators or
        // parent references.
        if body.name.contains('/') || body.name.contains('\\') || body.name.contains("..") {
            checks.problem("name", "The name field must not contain '/', '\\' or '..'.");
        }
        finish_with(v, &[("name", &body.name)], &checks.problems)?;
        let (name, retention) = (body.name.clone(), body.retention_days);
        let limit = self.config.max_namespaces;
        // Counted and inserted in the writer's one transaction, so racing
        // registrations cannot pass the cap together.
        let (registration, namespace) = self.write(move |s| {
            let registration = if s.namespace(&name)?.is_some() {
                Registration::Existing
            } else {
                let count = s.namespace_count()?;
                if limit > 0 && count >= limit {
                    Registration::Full(count)
                } else if s.register_namespace(&name, &description, retention)? {
                    Registration::Created
                } else {
                    Registration::Existing
                }
            };
            Ok((registration, s.namespace(&name)?))
        })?;
        let created = match registration {
            Registration::Full(count) => {
                return Err(ApiError::NamespaceCountLimit { count, limit })
            }
            Registration::Created => true,
            Registration::Existing => false,
        };
        let namespace =
            namespace.ok_or_else(|| ApiError::Internal("registered namespace vanished".into()))?;
        Ok((
            created,
            json!({ "namespace": namespace, "outcome": if created { "created" } else { "already_registered" } }),
        ))
    }

    /// `GET /api/namespaces?page_size=N&next_page_token=T`: one page of
    /// registered namespaces by name, with the token of the next page
    /// (`null` on the last); the token is signed like every page token.
    pub fn list_namespaces(
        &self,
        page_size: Option<&str>,
        token: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let limit = wire::page_size(&mut checks, page_size, DEFAULT_NAMESPACE_PAGE_SIZE);
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        let after = token
            .filter(|t| !t.is_empty())
            .map(|t| {
                wire::parse_name_page_token(t)
                    .ok_or_else(|| ApiError::InvalidPageToken(t.to_owned()))
            })
            .transpose()?;
        // One more than the page tells whether another page follows.
        let mut page = self.read(|s| s.namespaces_after(after.as_deref(), limit + 1))?;
        let next = (page.len() > limit).then(|| {
            page.truncate(limit);
            page.last().map(|n| wire::name_page_token(&n.name))
        });
        Ok(json!({ "namespaces": page, "next_page_token": next.flatten() }))
    }

    /// `DELETE /api/namespaces/{name}` (admin): removes a registration that
    /// holds nothing (no runs, workers, schedules, streams, service-catalog
    /// entries or external payloads); `default` stays.
    pub fn delete_namespace(&self, name: &str) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text("name", name, dwpolicy::boundary::MAX_NAME_CHARS);
        v.finish()?;
        if name == "default" {
            return Err(ApiError::NamespaceNotDeletable {
                namespace: name.to_owned(),
                reason: "namespace_protected",
                holds: Vec::new(),
                why: "every server keeps the default namespace".to_owned(),
            });
        }
        let owned = name.to_owned();
        // Checked and deleted in the writer's one transaction: a write that
        // lands a row in the namespace commits before or after, never between.
        let outcome = self.write(move |s| {
            if s.namespace(&owned)?.is_none() {
                return Ok(None);
            }
            let holds = s.namespace_holdings(&owned)?;
            if holds.is_empty() {
                s.delete_namespace(&owned)?;
            }
            Ok(Some(holds))
        })?;
        let holds = outcome.ok_or_else(|| ApiError::NamespaceNotFound(name.to_owned()))?;
        if !holds.is_empty() {
            let why = format!("it still holds {}", holds.join(", "));
            return Err(ApiError::NamespaceNotDeletable {
                namespace: name.to_owned(),
                reason: "namespace_not_empty",
                holds,
                why,
            });
        }
        if let Ok(mut set) = self.known_namespaces.write() {
            set.remove(name);
        }
        Ok(json!({ "namespace": name, "outcome": "deleted" }))
    }
}
