//! Namespaces on the request path: every control- and worker-plane request
//! names one in `X-Namespace`, and it must be registered.
//!
//! Registered names are remembered in process after their first lookup, so
//! the common request costs a set lookup; the set only grows through admin
//! registration, which bounds it.

use serde_json::{json, Value};

use crate::server::error::finish_with;
use crate::server::wire::{Checks, RegisterNamespace};
use crate::server::{ApiError, Engine};

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
        let (created, namespace) = self.write(move |s| {
            let created = s.register_namespace(&name, &description, retention)?;
            Ok((created, s.namespace(&name)?))
        })?;
        let namespace =
            namespace.ok_or_else(|| ApiError::Internal("registered namespace vanished".into()))?;
        Ok((
            created,
            json!({ "namespace": namespace, "outcome": if created { "created" } else { "already_registered" } }),
        ))
    }
}
