//! `/api/search-attributes`: custom search-attribute registration per
//! namespace, and the check that runs only carry registered attributes.
//!
//! The routes and shapes follow the public server (`GET` lists system and
//! custom attributes, `POST {name, type}` registers, `DELETE /{name}`
//! removes). The cap is the seed's `max_search_attributes` (100, `0`
//! disables): one registration past it is refused at the boundary with
//! `422 validation_failed` under `search_attributes`, as the seed's
//! validation envelope says. A start whose `search_attributes` name an
//! unregistered attribute, or a value of the wrong type, is refused the
//! same way, so the cap bounds the attribute names runs can carry.
//!
//! Workflow code upserts attributes with the `upsert_search_attributes`
//! command of a workflow-task completion. The completion is checked before
//! anything is written, as a start is: registered names of the right type,
//! key and value sizes, and at most `max_search_attributes` attributes on
//! the run once merged. A refused completion answers the same 422; the SDK
//! then fails the workflow task, which comes back after a backoff (the run
//! stays open, so registering the attribute lets the retry through). The
//! merged set's encoded size is the structural `search_attribute_size_bytes`,
//! checked by the store, which fails the run past it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::server::error::finish_with;
use crate::server::{ApiError, Engine};
use crate::store::{Registration, WorkflowCommand};

/// Attributes every run has; they cannot be registered, removed or set.
pub const SYSTEM_ATTRIBUTES: [(&str, &str); 8] = [
    ("WorkflowType", "keyword"),
    ("WorkflowId", "keyword"),
    ("RunId", "keyword"),
    ("Status", "keyword"),
    ("StartTime", "datetime"),
    ("CloseTime", "datetime"),
    ("TaskQueue", "keyword"),
    ("BuildId", "keyword"),
];

/// The types a custom attribute may have.
pub const ALLOWED_TYPES: [&str; 7] = [
    "keyword",
    "text",
    "int",
    "double",
    "bool",
    "datetime",
    "keyword_list",
];

/// `POST /api/search-attributes`.
#[derive(Debug, Deserialize, Default)]
pub struct RegisterSearchAttribute {
    /// The attribute's name.
    #[serde(default)]
    pub name: String,
    /// One of [`ALLOWED_TYPES`].
    #[serde(default, rename = "type")]
    pub attribute_type: String,
}

fn is_system(name: &str) -> bool {
    SYSTEM_ATTRIBUTES.iter().any(|(n, _)| *n == name)
}

/// Whether `value` is a value of `attribute_type`.
fn has_type(attribute_type: &str, value: &Value) -> bool {
    match attribute_type {
        "keyword" | "text" | "datetime" => value.is_string(),
        "int" => value.is_i64() || value.is_u64(),
        "double" => value.is_number(),
        "bool" => value.is_boolean(),
        "keyword_list" => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        _ => false,
    }
}

impl Engine {
    /// `GET /api/search-attributes`.
    pub fn list_search_attributes(&self, namespace: &str) -> Result<Value, ApiError> {
        let _slot = self.admit_namespace(namespace)?;
        let custom = self.read(|s| s.search_attributes(namespace))?;
        let system: BTreeMap<&str, &str> = SYSTEM_ATTRIBUTES.into_iter().collect();
        Ok(json!({
            "system_attributes": system, "custom_attributes": custom,
            "limit": self.config.request_limits.max_search_attributes,
        }))
    }

    /// `POST /api/search-attributes`: `(201, created)`.
    pub fn register_search_attribute(
        &self,
        namespace: &str,
        body: RegisterSearchAttribute,
    ) -> Result<(u16, Value), ApiError> {
        let limits = &self.config.request_limits;
        let mut v = limits.validator();
        let name = &body.name;
        let key_limit =
            usize::try_from(limits.max_search_attribute_key_length).unwrap_or(usize::MAX);
        if key_limit != 0 {
            v.text("name", name, key_limit);
        }
        let mut problems = Vec::new();
        let mut chars = name.chars();
        let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name.is_empty() && !well_formed {
            problems.push((
                "name".to_owned(),
                "The name must start with a letter and hold only letters, digits and _.".to_owned(),
            ));
        }
        if !body.attribute_type.is_empty() && !ALLOWED_TYPES.contains(&body.attribute_type.as_str())
        {
            problems.push((
                "type".to_owned(),
                format!("The type must be one of {}.", ALLOWED_TYPES.join(", ")),
            ));
        }
        finish_with(
            v,
            &[("name", name), ("type", &body.attribute_type)],
            &problems,
        )?;
        if is_system(name) {
            return Err(ApiError::SearchAttributeConflict {
                reason: "name_reserved",
                message: format!("The name [{name}] is reserved as a system search attribute."),
                existing_type: None,
            });
        }
        let _slot = self.admit_namespace(namespace)?;
        let limit = limits.max_search_attributes;
        let (ns, attribute, kind) = (
            namespace.to_owned(),
            name.clone(),
            body.attribute_type.clone(),
        );
        match self.write(move |s| s.register_search_attribute(&ns, &attribute, &kind, limit))? {
            Registration::Created => Ok((
                201,
                json!({ "name": name, "type": body.attribute_type, "outcome": "created" }),
            )),
            Registration::AlreadyExists(existing) => Err(ApiError::SearchAttributeConflict {
                reason: "attribute_already_exists",
                message: format!(
                    "A custom search attribute [{name}] already exists in namespace [{namespace}]."
                ),
                existing_type: Some(existing),
            }),
            Registration::LimitReached { registered, limit } => {
                let mut v = limits.validator();
                v.registered_search_attributes(registered.saturating_add(1));
                match v.finish() {
                    Err(refused) => Err(refused.into()),
                    Ok(()) => Err(ApiError::Internal(format!(
                        "the store refused registration {} against limit {limit}",
                        registered.saturating_add(1)
                    ))),
                }
            }
        }
    }

    /// `DELETE /api/search-attributes/{name}`.
    pub fn remove_search_attribute(&self, namespace: &str, name: &str) -> Result<Value, ApiError> {
        if is_system(name) {
            return Err(ApiError::SearchAttributeConflict {
                reason: "system_attribute",
                message: format!("The system search attribute [{name}] cannot be removed."),
                existing_type: None,
            });
        }
        let _slot = self.admit_namespace(namespace)?;
        let (ns, attribute) = (namespace.to_owned(), name.to_owned());
        if !self.write(move |s| s.remove_search_attribute(&ns, &attribute))? {
            return Err(ApiError::SearchAttributeNotFound(name.to_owned()));
        }
        Ok(json!({ "name": name, "outcome": "deleted" }))
    }

    /// The boundary checks of a completion's `upsert_search_attributes`
    /// commands against the run's `current` attributes: `validation_failed`
    /// under `search_attributes`, as at start.
    pub(crate) fn check_upserts(
        &self,
        namespace: &str,
        current: &Map<String, Value>,
        commands: &[WorkflowCommand],
    ) -> Result<(), ApiError> {
        let mut v = self.config.request_limits.validator();
        let mut problems = Vec::new();
        let mut merged = current.clone();
        for (i, command) in commands.iter().enumerate() {
            let WorkflowCommand::UpsertSearchAttributes { attributes, .. } = command else {
                continue;
            };
            let set: Map<String, Value> = attributes
                .iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(k, value)| (k.clone(), value.clone()))
                .collect();
            v.search_attributes(&set);
            for (field, problem) in self.unregistered_search_attributes(namespace, &set)? {
                problems.push((field, format!("commands.{i}: {problem}")));
            }
            for (key, value) in attributes {
                if value.is_null() {
                    merged.remove(key);
                } else {
                    merged.insert(key.clone(), value.clone());
                }
            }
        }
        let limit = self.config.request_limits.max_search_attributes;
        let carried = u64::try_from(merged.len()).unwrap_or(u64::MAX);
        if limit != 0 && carried > limit {
            problems.push((
                "search_attributes".to_owned(),
                format!(
                    "The run would carry {carried} custom search attributes; the limit is {limit} (server.limits.max_search_attributes)."
                ),
            ));
        }
        finish_with(v, &[], &problems)?;
        Ok(())
    }

    /// Problems (for `search_attributes`) with attributes a run would carry:
    /// system names, names the namespace has not registered, wrong types.
    pub(crate) fn unregistered_search_attributes(
        &self,
        namespace: &str,
        attributes: &Map<String, Value>,
    ) -> Result<Vec<(String, String)>, ApiError> {
        if attributes.is_empty() {
            return Ok(Vec::new());
        }
        let registered = self.read(|s| s.search_attributes(namespace))?;
        Ok(unregistered_among(&registered, namespace, attributes))
    }
}

/// Problems (for `search_attributes`) with attributes a run would carry,
/// against `registered` (the namespace's names and their types).
pub(crate) fn unregistered_among(
    registered: &std::collections::BTreeMap<String, String>,
    namespace: &str,
    attributes: &Map<String, Value>,
) -> Vec<(String, String)> {
    let field = || "search_attributes".to_owned();
    let mut problems = Vec::new();
    for (name, value) in attributes {
        if is_system(name) {
            problems.push((
                field(),
                format!("{name} is a system search attribute; the server sets it."),
            ));
            continue;
        }
        match registered.get(name) {
                None => problems.push((
                    field(),
                    format!(
                        "{name} is not a registered search attribute of namespace {namespace}; register it with POST /api/search-attributes."
                    ),
                )),
                Some(kind) if !has_type(kind, value) => problems.push((
                    field(),
                    format!("{name} is registered as {kind}; the value does not have that type."),
                )),
                Some(_) => {}
            }
    }
    problems
}
