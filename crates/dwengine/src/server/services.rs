//! The service catalog and Nexus service calls (`/api/service-endpoints`).
//!
//! The published SDK executes a Nexus operation with one request,
//! `POST /api/service-endpoints/{endpoint}/services/{service}/operations/{operation}/execute`
//! (`Client.execute_nexus_operation`), in the namespace that holds the
//! catalog (`X-Namespace`, the SDK's `target_namespace`); the caller's own
//! namespace travels in the body. Operators register what may be called:
//! endpoints per namespace, services under an endpoint, operations under a
//! service, each operation bound to its handler. This server serves the
//! `start_workflow` binding: an accepted call starts the bound workflow type
//! in the catalog's namespace (through [`Engine::start_workflow`], the
//! same path and checks as `POST /api/workflows`), and a `wait_for:
//! completed` call waits for that run to close and answers with its output.
//!
//! Call rows are kept [`SERVICE_CALL_RETENTION_MS`] (seven days) after they
//! were recorded; the maintenance sweep ([`Engine::prune_service_calls`],
//! beside the schedule sweep) deletes expired ones, at most
//! `server.services.service_call_prune_scan_limit` a pass, keeping any whose
//! run is still open. A replay of a pruned call's key makes a new call.
//!
//! Before a new call is recorded, [`SharedServiceBoundaryPolicy`] spends
//! the configured service-call budgets of the authenticated caller (the
//! token, and the namespace a bound token calls as; see
//! [`crate::server::auth`]); an idempotent replay (the same caller
//! namespace and `idempotency_key` on the same operation) answers the call
//! already made and spends nothing.

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::durable_state::DurableResource;
use crate::server::auth::Caller;
use crate::server::error::finish_with;
use crate::server::wire::{self, Checks, StartWorkflow};
use crate::server::{ApiError, Engine};
use crate::service_boundary::{Boundary, SharedServiceBoundaryPolicy};
use crate::store::RunId;
use crate::store::{
    CatalogDelete, CatalogEntry, CatalogLevel, RunStatus, ServiceCallRow, SERVICE_CALL_RETENTION_MS,
};

/// How many continue-as-new links a service call's linked run is followed
/// through when the call is described (each link is one run read).
const CHAIN_HOPS: usize = 64;

/// Longest endpoint and service name (as the reference server).
pub const MAX_CATALOG_NAME_CHARS: usize = 191;
/// Longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;
/// Longest idempotency key and caller-supplied identifier.
pub const MAX_CALL_FIELD_CHARS: usize = 191;
/// Longest `wait_timeout_seconds`.
pub const MAX_WAIT_TIMEOUT_SECONDS: i64 = 86_400;
/// The handler bindings this server executes.
pub const SERVED_BINDINGS: [&str; 1] = ["start_workflow"];
/// The bindings the protocol names (others are refused as unknown).
pub const KNOWN_BINDINGS: [&str; 6] = [
    "start_workflow",
    "signal_workflow",
    "update_workflow",
    "query_workflow",
    "activity_execution",
    "invocable_http",
];

/// A service call's first answer: final, or to await.
pub enum CallStep {
    /// The call's surface (200).
    Answered(Value),
    /// Started; its completion is awaited.
    Waiting(Box<PendingCall>),
}

/// A service call waiting for its run to complete.
pub struct PendingCall {
    look: CallLook,
    run: RunId,
    deadline: Instant,
    timed_out: Value,
    _wait: crate::waiters::WaitPermit,
}

/// What one look at a waiting service call needs.
#[derive(Clone)]
pub struct CallLook {
    resolved: Resolved,
    call: ServiceCallRow,
    request: ExecuteOperation,
    mode: String,
    wait_for: String,
    replay: bool,
}

impl PendingCall {
    /// The linked run, whose changes wake the wait.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// When the wait ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// What a look needs.
    pub fn look(&self) -> CallLook {
        self.look.clone()
    }

    /// The answer when the wait runs out: the started call, `wait_timed_out`.
    pub fn timed_out(self) -> Value {
        let mut out = self.timed_out;
        out["wait_timed_out"] = true.into();
        out
    }
}

/// The service-call retention pass of the maintenance sweep: how many
/// expired calls one pass deletes at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceCallRetention {
    /// Expired service calls deleted per sweep pass at most.
    pub service_call_prune_scan_limit: usize,
}

impl ServiceCallRetention {
    /// The configuration key of the per-pass cap.
    pub const SCAN_LIMIT_KEY: &'static str = "server.services.service_call_prune_scan_limit";
    /// The cap's default.
    pub const DEFAULT_SCAN_LIMIT: usize = 100;

    /// The cap read from `lookup` (0 or absent: the default).
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>) -> Self {
        ServiceCallRetention {
            service_call_prune_scan_limit: lookup(Self::SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT),
        }
    }
}

impl Default for ServiceCallRetention {
    fn default() -> Self {
        Self::from_config(|_| None)
    }
}

/// `POST /api/service-endpoints` and `…/services`: a named entry.
#[derive(Debug, Deserialize, Default)]
pub struct CreateEntry {
    /// The endpoint's name (endpoints).
    #[serde(default)]
    pub endpoint_name: Option<String>,
    /// The service's name (services).
    #[serde(default)]
    pub service_name: Option<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Free-form JSON object.
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// `POST …/operations`.
#[derive(Debug, Deserialize, Default)]
pub struct CreateOperation {
    /// The operation's name.
    #[serde(default)]
    pub operation_name: String,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// `sync` or `async`.
    #[serde(default)]
    pub operation_mode: String,
    /// What handles a call (`start_workflow` is served).
    #[serde(default)]
    pub handler_binding_kind: String,
    /// The bound workflow type (or `handler_binding.workflow_type`).
    #[serde(default)]
    pub handler_target_reference: Option<String>,
    /// `{workflow_type, task_queue}`.
    #[serde(default)]
    pub handler_binding: Option<Map<String, Value>>,
    /// Recorded.
    #[serde(default)]
    pub deadline_policy: Option<Value>,
    /// Recorded.
    #[serde(default)]
    pub idempotency_policy: Option<Value>,
    /// Recorded.
    #[serde(default)]
    pub cancellation_policy: Option<Value>,
    /// Recorded.
    #[serde(default)]
    pub retry_policy: Option<Value>,
    /// `{"rate_limit": {"requests_per_minute": N}}` narrows the boundary budget.
    #[serde(default)]
    pub boundary_policy: Option<Value>,
    /// Free-form JSON object.
    #[serde(default)]
    pub metadata: Option<Value>,
}

/// `POST …/execute`: the SDK's `nexus_request_payload`.
#[derive(Debug, Clone, Deserialize, Default, serde::Serialize)]
pub struct ExecuteOperation {
    /// The encoded arguments (a blob string, or an envelope).
    #[serde(default)]
    pub arguments: Value,
    /// Their codec (default `avro`).
    #[serde(default)]
    pub payload_codec: Option<String>,
    /// `sync` or `async`, over the operation's mode.
    #[serde(default)]
    pub mode_override: Option<String>,
    /// `accepted` or `completed`.
    #[serde(default)]
    pub wait_for: Option<String>,
    /// How long a `completed` wait lasts (capped by `DW_MAX_UPDATE_WAIT_MS`).
    #[serde(default)]
    pub wait_timeout_seconds: Option<i64>,
    /// One call per (operation, caller namespace, key).
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// The caller's namespace (default: the request's).
    #[serde(default)]
    pub caller_namespace: Option<String>,
    /// The calling workflow.
    #[serde(default)]
    pub caller_workflow_instance_id: Option<String>,
    /// The calling run.
    #[serde(default)]
    pub caller_workflow_run_id: Option<String>,
    /// The workflow id to start (default `service-call-<id>`).
    #[serde(default)]
    pub target_workflow_instance_id: Option<String>,
    /// Recorded.
    #[serde(default)]
    pub target_workflow_run_id: Option<String>,
    /// The queue connection to start on: this node's queue driver, the
    /// only one it has (`queue::connection_refusal`).
    #[serde(default)]
    pub connection: Option<String>,
    /// The task queue, over the binding's.
    #[serde(default)]
    pub queue: Option<String>,
    /// The started run's business key.
    #[serde(default)]
    pub business_key: Option<String>,
    /// Recorded.
    #[serde(default)]
    pub labels: Option<Value>,
    /// The started run's memo.
    #[serde(default)]
    pub memo: Option<Map<String, Value>>,
    /// The started run's search attributes.
    #[serde(default)]
    pub search_attributes: Option<Map<String, Value>>,
    /// `reject_duplicate` (default) or `return_existing_active`.
    #[serde(default)]
    pub duplicate_start_policy: Option<String>,
}

/// Lower-cased name, or a validation problem.
/// The ids and names of the entries above an entry, shown beside it.
fn parent_context(endpoint: &CatalogEntry, service: Option<&CatalogEntry>) -> Value {
    let mut context =
        json!({ "endpoint_id": endpoint.id.to_string(), "endpoint_name": endpoint.name });
    if let Some(service) = service {
        context["service_id"] = service.id.to_string().into();
        context["service_name"] = service.name.clone().into();
    }
    context
}

fn catalog_name(checks: &mut Checks, field: &str, name: &str, max: usize) -> String {
    let valid = !name.is_empty()
        && name.chars().count() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid {
        checks.problem(
            field,
            format!(
                "The {field} field must be 1 to {max} characters of letters, digits, '.', '_' or '-'."
            ),
        );
    }
    name.to_ascii_lowercase()
}

fn text(checks: &mut Checks, field: &str, value: Option<&str>, max: usize) {
    if let Some(v) = value {
        if v.chars().count() > max {
            checks.problem(
                field,
                format!("The {field} field must be at most {max} characters."),
            );
        }
    }
}

fn object(checks: &mut Checks, field: &str, value: Option<&Value>) {
    if let Some(v) = value {
        if !v.is_object() && !v.is_null() {
            checks.problem(field, format!("The {field} field must be an object."));
        }
    }
}

fn not_found(reason: &'static str, message: String, details: Value) -> ApiError {
    ApiError::ServiceCatalog {
        status: 404,
        reason,
        message,
        details,
    }
}

fn conflict(reason: &'static str, message: String, details: Value) -> ApiError {
    ApiError::ServiceCatalog {
        status: 409,
        reason,
        message,
        details,
    }
}

fn entry_json(entry: &CatalogEntry) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("id".into(), entry.id.to_string().into());
    out.insert("namespace".into(), entry.namespace.clone().into());
    if let Value::Object(document) = &entry.document {
        for (k, v) in document {
            out.insert(k.clone(), v.clone());
        }
    }
    out.insert(
        "created_at".into(),
        wire::timestamp(entry.created_at_ms).into(),
    );
    out.insert(
        "updated_at".into(),
        wire::timestamp(entry.updated_at_ms).into(),
    );
    out
}

/// The catalog path of an operation, resolved.
#[derive(Clone)]
pub struct Resolved {
    endpoint: CatalogEntry,
    service: CatalogEntry,
    operation: CatalogEntry,
}

impl Resolved {
    fn operation_limit(&self) -> Option<u64> {
        self.operation.document["boundary_policy"]["rate_limit"]["requests_per_minute"].as_u64()
    }

    fn mode(&self) -> &str {
        self.operation.document["operation_mode"]
            .as_str()
            .unwrap_or("sync")
    }

    fn workflow_type(&self) -> String {
        let document = &self.operation.document;
        document["handler_binding"]["workflow_type"]
            .as_str()
            .or_else(|| document["handler_target_reference"].as_str())
            .unwrap_or_default()
            .to_owned()
    }

    fn task_queue(&self) -> String {
        self.operation.document["handler_binding"]["task_queue"]
            .as_str()
            .unwrap_or("default")
            .to_owned()
    }
}

impl Engine {
    fn endpoint(&self, namespace: &str, name: &str) -> Result<CatalogEntry, ApiError> {
        let normalized = name.to_ascii_lowercase();
        let ns = namespace.to_owned();
        let found = self.read(|s| s.catalog_entry(&ns, CatalogLevel::Endpoint, 0, &normalized))?;
        found.ok_or_else(|| {
            not_found(
                "endpoint_not_found",
                format!("Service endpoint [{normalized}] not found in namespace [{namespace}]."),
                json!({ "accepted": false, "namespace": namespace, "endpoint_name": normalized }),
            )
        })
    }

    fn service(&self, endpoint: &CatalogEntry, name: &str) -> Result<CatalogEntry, ApiError> {
        let normalized = name.to_ascii_lowercase();
        let found = self.read(|s| {
            s.catalog_entry(
                &endpoint.namespace,
                CatalogLevel::Service,
                endpoint.id,
                &normalized,
            )
        })?;
        found.ok_or_else(|| {
            not_found(
                "service_not_found",
                format!(
                    "Service [{normalized}] not found under endpoint [{}] in namespace [{}].",
                    endpoint.name, endpoint.namespace
                ),
                json!({ "accepted": false, "namespace": endpoint.namespace,
                        "endpoint_name": endpoint.name, "service_name": normalized }),
            )
        })
    }

    fn resolve(
        &self,
        namespace: &str,
        endpoint: &str,
        service: &str,
        operation: &str,
    ) -> Result<Resolved, ApiError> {
        let endpoint = self.endpoint(namespace, endpoint)?;
        let service = self.service(&endpoint, service)?;
        let normalized = operation.to_ascii_lowercase();
        let found = self.read(|s| {
            s.catalog_entry(
                &service.namespace,
                CatalogLevel::Operation,
                service.id,
                &normalized,
            )
        })?;
        let Some(operation) = found else {
            return Err(not_found(
                "operation_not_found",
                format!(
                    "Operation [{normalized}] not found under service [{}] at endpoint [{}] in namespace [{}].",
                    service.name, endpoint.name, namespace
                ),
                json!({ "accepted": false, "namespace": namespace, "endpoint_name": endpoint.name,
                        "service_name": service.name, "operation_name": normalized }),
            ));
        };
        Ok(Resolved {
            endpoint,
            service,
            operation,
        })
    }

    /// One retention pass at `now_ms`: deletes at most the declared scan
    /// limit of service calls recorded more than
    /// [`SERVICE_CALL_RETENTION_MS`] before, oldest first (a call whose run
    /// is still open stays); returns how many went.
    pub fn prune_service_calls(&self, now_ms: i64) -> Result<usize, ApiError> {
        let limit = self
            .config
            .service_call_retention
            .service_call_prune_scan_limit;
        let cutoff = now_ms.saturating_sub(SERVICE_CALL_RETENTION_MS);
        Ok(self.write(move |s| s.prune_service_calls(cutoff, limit))?)
    }

    fn create_entry(
        &self,
        namespace: &str,
        level: CatalogLevel,
        parent_id: i64,
        name: String,
        document: Value,
        context: Value,
    ) -> Result<(u16, Value), ApiError> {
        let ns = namespace.to_owned();
        let stored = name.clone();
        // Counted in the create's transaction; a duplicate adds nothing.
        let created = self.write_within_quota(
            namespace,
            &[DurableResource::ServiceCatalogEntries],
            move |s| s.create_catalog_entry(&ns, level, parent_id, &stored, &document),
        )??;
        match created {
            Some(entry) => Ok((201, Value::Object(self.with_context(&entry, context)))),
            None => {
                let kind = level.as_str();
                let reason = match level {
                    CatalogLevel::Endpoint => "endpoint_already_exists",
                    CatalogLevel::Service => "service_already_exists",
                    CatalogLevel::Operation => "operation_already_exists",
                };
                let mut details = context;
                details[format!("{kind}_name")] = name.clone().into();
                Err(conflict(
                    reason,
                    format!("A {kind} [{name}] already exists here in namespace [{namespace}]."),
                    details,
                ))
            }
        }
    }

    /// One catalog level's entries under `parent`, each with its parents'
    /// context, as `{ key: [...] }`.
    fn list_level(
        &self,
        namespace: &str,
        level: CatalogLevel,
        parent: i64,
        context: Value,
        key: &str,
    ) -> Result<Value, ApiError> {
        let ns = namespace.to_owned();
        let entries = self.read(|s| s.catalog_entries(&ns, level, parent))?;
        let list: Vec<Value> = entries
            .iter()
            .map(|e| Value::Object(self.with_context(e, context.clone())))
            .collect();
        let mut out = Map::new();
        out.insert(key.to_owned(), Value::Array(list));
        Ok(Value::Object(out))
    }

    fn with_context(&self, entry: &CatalogEntry, context: Value) -> Map<String, Value> {
        let mut out = entry_json(entry);
        if let Value::Object(context) = context {
            for (k, v) in context {
                out.entry(k).or_insert(v);
            }
        }
        out
    }

    /// An endpoint's or service's name (under `field`), description and
    /// metadata, checked together: the normalised name and the document kept.
    fn checked_entry(
        &self,
        field: &str,
        raw: &str,
        body: CreateEntry,
    ) -> Result<(String, Value), ApiError> {
        let mut checks = Checks::default();
        let name = catalog_name(&mut checks, field, raw, MAX_CATALOG_NAME_CHARS);
        text(
            &mut checks,
            "description",
            body.description.as_deref(),
            MAX_DESCRIPTION_CHARS,
        );
        object(&mut checks, "metadata", body.metadata.as_ref());
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        let mut document = json!({ "description": body.description, "metadata": body.metadata });
        document[field] = name.clone().into();
        Ok((name, document))
    }

    /// `POST /api/service-endpoints`: `(201, endpoint)`.
    pub fn create_service_endpoint(
        &self,
        namespace: &str,
        body: CreateEntry,
    ) -> Result<(u16, Value), ApiError> {
        let raw = body.endpoint_name.clone().unwrap_or_default();
        let (name, document) = self.checked_entry("endpoint_name", &raw, body)?;
        self.create_entry(
            namespace,
            CatalogLevel::Endpoint,
            0,
            name,
            document,
            json!({}),
        )
    }

    /// `GET /api/service-endpoints`.
    pub fn list_service_endpoints(&self, namespace: &str) -> Result<Value, ApiError> {
        self.list_level(
            namespace,
            CatalogLevel::Endpoint,
            0,
            json!({}),
            "service_endpoints",
        )
    }

    /// `GET /api/service-endpoints/{endpoint}`.
    pub fn describe_service_endpoint(
        &self,
        namespace: &str,
        endpoint: &str,
    ) -> Result<Value, ApiError> {
        Ok(Value::Object(entry_json(
            &self.endpoint(namespace, endpoint)?,
        )))
    }

    /// `POST /api/service-endpoints/{endpoint}/services`: `(201, service)`.
    pub fn create_service(
        &self,
        namespace: &str,
        endpoint: &str,
        body: CreateEntry,
    ) -> Result<(u16, Value), ApiError> {
        let endpoint = self.endpoint(namespace, endpoint)?;
        let raw = body.service_name.clone().unwrap_or_default();
        let (name, document) = self.checked_entry("service_name", &raw, body)?;
        let context = parent_context(&endpoint, None);
        self.create_entry(
            namespace,
            CatalogLevel::Service,
            endpoint.id,
            name,
            document,
            context,
        )
    }

    /// `GET /api/service-endpoints/{endpoint}/services`.
    pub fn list_services(&self, namespace: &str, endpoint: &str) -> Result<Value, ApiError> {
        let endpoint = self.endpoint(namespace, endpoint)?;
        let context = parent_context(&endpoint, None);
        self.list_level(
            namespace,
            CatalogLevel::Service,
            endpoint.id,
            context,
            "services",
        )
    }

    /// `GET /api/service-endpoints/{endpoint}/services/{service}`.
    pub fn describe_service(
        &self,
        namespace: &str,
        endpoint: &str,
        service: &str,
    ) -> Result<Value, ApiError> {
        let endpoint = self.endpoint(namespace, endpoint)?;
        let service = self.service(&endpoint, service)?;
        let context = parent_context(&endpoint, None);
        Ok(Value::Object(self.with_context(&service, context)))
    }

    /// `POST …/services/{service}/operations`: `(201, operation)`.
    pub fn create_service_operation(
        &self,
        namespace: &str,
        endpoint: &str,
        service: &str,
        body: CreateOperation,
    ) -> Result<(u16, Value), ApiError> {
        let endpoint = self.endpoint(namespace, endpoint)?;
        let service = self.service(&endpoint, service)?;
        let mut checks = Checks::default();
        let max_name = usize::try_from(self.config.request_limits.max_operation_name_length)
            .unwrap_or(usize::MAX)
            .clamp(1, MAX_CATALOG_NAME_CHARS);
        let name = catalog_name(
            &mut checks,
            "operation_name",
            &body.operation_name,
            max_name,
        );
        text(
            &mut checks,
            "description",
            body.description.as_deref(),
            MAX_DESCRIPTION_CHARS,
        );
        if !matches!(body.operation_mode.as_str(), "sync" | "async") {
            checks.problem(
                "operation_mode",
                "The operation_mode field must be \"sync\" or \"async\".",
            );
        }
        let kind = body.handler_binding_kind.as_str();
        if !KNOWN_BINDINGS.contains(&kind) {
            checks.problem(
                "handler_binding_kind",
                format!(
                    "The handler_binding_kind field must be one of {}.",
                    KNOWN_BINDINGS.join(", ")
                ),
            );
        } else if !SERVED_BINDINGS.contains(&kind) {
            checks.problem(
                "handler_binding_kind",
                format!(
                    "The {kind} binding is not served by this server; bind the operation with start_workflow."
                ),
            );
        }
        let binding = body.handler_binding.clone().unwrap_or_default();
        let workflow_type = binding
            .get("workflow_type")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| body.handler_target_reference.clone())
            .unwrap_or_default();
        // The queue: `task_queue`, or `queue` as the reference server's
        // binding names it; a non-string, or both naming different queues,
        // is refused rather than starting the workflow somewhere unmeant.
        let mut queues = Vec::new();
        for name in ["task_queue", "queue"] {
            match binding.get(name) {
                None | Some(Value::Null) => {}
                Some(Value::String(queue)) => queues.push(queue.as_str()),
                Some(_) => {
                    checks.problem(
                        &format!("handler_binding.{name}"),
                        format!("The handler_binding.{name} field must be a task queue name."),
                    );
                }
            }
        }
        if let [first, second] = queues[..] {
            if first != second {
                checks.problem(
                    "handler_binding.queue",
                    "The handler_binding names two task queues (task_queue and queue): \
                     send one of them.",
                );
            }
        }
        let task_queue = queues.first().copied().unwrap_or("default").to_owned();
        // The binding's connection (the reference server starts the bound
        // workflow on it) names this node's one queue connection or nothing.
        if let Some(problem) = binding
            .get("connection")
            .and_then(|value| crate::queue::connection_refusal(self.queue.name(), value))
        {
            checks.problem("handler_binding.connection", problem);
        }
        let mut v = self.config.request_limits.validator();
        v.workflow_type(&workflow_type).task_queue(&task_queue);
        text(
            &mut checks,
            "handler_target_reference",
            body.handler_target_reference.as_deref(),
            MAX_CATALOG_NAME_CHARS,
        );
        if workflow_type.trim().is_empty() {
            checks.problem(
                "handler_target_reference",
                "Provide handler_target_reference or handler_binding.workflow_type: the workflow type a call starts.",
            );
        }
        for (field, value) in [
            ("deadline_policy", &body.deadline_policy),
            ("idempotency_policy", &body.idempotency_policy),
            ("cancellation_policy", &body.cancellation_policy),
            ("retry_policy", &body.retry_policy),
            ("boundary_policy", &body.boundary_policy),
            ("metadata", &body.metadata),
        ] {
            object(&mut checks, field, value.as_ref());
        }
        if let Some(rate) = body
            .boundary_policy
            .as_ref()
            .and_then(|p| p.get("rate_limit"))
        {
            checks.integer_field(
                rate,
                "requests_per_minute",
                "boundary_policy.rate_limit.requests_per_minute",
                1,
                i64::MAX,
            );
        }
        // The caller lists a call from another namespace is checked against.
        if let Some(policy) = body.boundary_policy.as_ref() {
            for list in ["deny", "allow"] {
                for path in crate::store::service_calls::caller_list_paths(list) {
                    let Some(value) = path.iter().try_fold(policy, |at, key| at.get(key)) else {
                        continue;
                    };
                    let names = value.as_array().is_some_and(|names| {
                        names
                            .iter()
                            .all(|n| n.as_str().is_some_and(|n| !n.trim().is_empty()))
                    });
                    if !names {
                        checks.problem(
                            &format!("boundary_policy.{}", path.join(".")),
                            "A caller list must be an array of namespace names.",
                        );
                    }
                }
            }
        }
        finish_with(v, &[], &checks.problems)?;
        let document = json!({
            "operation_name": name, "description": body.description,
            "operation_mode": body.operation_mode, "handler_binding_kind": kind,
            "handler_target_reference": body.handler_target_reference.unwrap_or_else(|| workflow_type.clone()),
            "handler_binding": { "workflow_type": workflow_type, "task_queue": task_queue },
            "deadline_policy": body.deadline_policy, "idempotency_policy": body.idempotency_policy,
            "cancellation_policy": body.cancellation_policy, "retry_policy": body.retry_policy,
            "boundary_policy": body.boundary_policy, "metadata": body.metadata,
        });
        let context = parent_context(&endpoint, Some(&service));
        self.create_entry(
            namespace,
            CatalogLevel::Operation,
            service.id,
            name,
            document,
            context,
        )
    }

    /// `GET …/services/{service}/operations`.
    pub fn list_service_operations(
        &self,
        namespace: &str,
        endpoint: &str,
        service: &str,
    ) -> Result<Value, ApiError> {
        let endpoint = self.endpoint(namespace, endpoint)?;
        let service = self.service(&endpoint, service)?;
        let context = parent_context(&endpoint, Some(&service));
        self.list_level(
            namespace,
            CatalogLevel::Operation,
            service.id,
            context,
            "operations",
        )
    }

    /// `GET …/operations/{operation}`.
    pub fn describe_service_operation(
        &self,
        namespace: &str,
        endpoint: &str,
        service: &str,
        operation: &str,
    ) -> Result<Value, ApiError> {
        let resolved = self.resolve(namespace, endpoint, service, operation)?;
        let context = parent_context(&resolved.endpoint, Some(&resolved.service));
        Ok(Value::Object(
            self.with_context(&resolved.operation, context),
        ))
    }

    /// `DELETE` of an endpoint (`service`, `operation` `None`), a service
    /// or an operation: refused while it has entries below it or calls.
    pub fn delete_catalog_entry(
        &self,
        namespace: &str,
        endpoint: &str,
        service: Option<&str>,
        operation: Option<&str>,
    ) -> Result<Value, ApiError> {
        let endpoint_row = self.endpoint(namespace, endpoint)?;
        let (level, parent, name, mut out) = match (service, operation) {
            (None, _) => (
                CatalogLevel::Endpoint,
                0,
                endpoint_row.name.clone(),
                json!({ "namespace": namespace, "endpoint_name": endpoint_row.name }),
            ),
            (Some(service), None) => {
                let row = self.service(&endpoint_row, service)?;
                (
                    CatalogLevel::Service,
                    endpoint_row.id,
                    row.name.clone(),
                    json!({ "namespace": namespace, "endpoint_name": endpoint_row.name,
                            "service_name": row.name }),
                )
            }
            (Some(service), Some(operation)) => {
                let resolved = self.resolve(namespace, endpoint, service, operation)?;
                (
                    CatalogLevel::Operation,
                    resolved.service.id,
                    resolved.operation.name.clone(),
                    json!({ "namespace": namespace, "endpoint_name": resolved.endpoint.name,
                            "service_name": resolved.service.name,
                            "operation_name": resolved.operation.name }),
                )
            }
        };
        let ns = namespace.to_owned();
        let stored = name.clone();
        let outcome = self.write(move |s| s.delete_catalog_entry(&ns, level, parent, &stored))?;
        let kind = level.as_str();
        match outcome {
            CatalogDelete::Deleted => {
                out["outcome"] = "deleted".into();
                Ok(out)
            }
            CatalogDelete::Missing => Err(not_found(
                match level {
                    CatalogLevel::Endpoint => "endpoint_not_found",
                    CatalogLevel::Service => "service_not_found",
                    CatalogLevel::Operation => "operation_not_found",
                },
                format!("The {kind} [{name}] no longer exists in namespace [{namespace}]."),
                out,
            )),
            CatalogDelete::HasChildren => Err(conflict(
                match level {
                    CatalogLevel::Endpoint => "endpoint_has_services",
                    _ => "service_has_operations",
                },
                format!(
                    "The {kind} [{name}] in namespace [{namespace}] still has registered {}s.",
                    level.child().map_or("entrie", CatalogLevel::as_str)
                ),
                out,
            )),
            CatalogDelete::HasCalls => Err(conflict(
                "operation_has_service_calls",
                format!(
                    "Operation [{name}] in namespace [{namespace}] still has recorded service calls."
                ),
                out,
            )),
        }
    }

    /// `POST …/operations/{operation}/execute`: `(200, service call)`.
    ///
    /// `caller` is who the request authenticated as (`None` without
    /// authentication): a token bound to namespaces calls as one of them,
    /// and every budget is keyed by the token, not by the body.
    pub fn execute_service_operation(
        &self,
        namespace: &str,
        path: (&str, &str, &str),
        body: ExecuteOperation,
        caller: Option<&Caller>,
    ) -> Result<CallStep, ApiError> {
        let (endpoint, service, operation) = path;
        let mut checks = Checks::default();
        if let Some(mode) = &body.mode_override {
            if !matches!(mode.as_str(), "sync" | "async") {
                checks.problem(
                    "mode_override",
                    "The mode_override field must be \"sync\" or \"async\".",
                );
            }
        }
        if let Some(wait) = &body.wait_for {
            if !matches!(wait.as_str(), "accepted" | "completed") {
                checks.problem(
                    "wait_for",
                    "The wait_for field must be \"accepted\" or \"completed\".",
                );
            }
        }
        if let Some(policy) = &body.duplicate_start_policy {
            if !matches!(
                policy.as_str(),
                "reject_duplicate" | "return_existing_active"
            ) {
                checks.problem(
                    "duplicate_start_policy",
                    "The duplicate_start_policy field must be \"reject_duplicate\" or \"return_existing_active\".",
                );
            }
        }
        checks.range(
            "wait_timeout_seconds",
            body.wait_timeout_seconds,
            0,
            MAX_WAIT_TIMEOUT_SECONDS,
        );
        for (field, value, max) in [
            ("payload_codec", &body.payload_codec, MAX_CALL_FIELD_CHARS),
            (
                "idempotency_key",
                &body.idempotency_key,
                MAX_CALL_FIELD_CHARS,
            ),
            ("caller_namespace", &body.caller_namespace, 255),
            (
                "caller_workflow_instance_id",
                &body.caller_workflow_instance_id,
                MAX_CALL_FIELD_CHARS,
            ),
            (
                "caller_workflow_run_id",
                &body.caller_workflow_run_id,
                MAX_CALL_FIELD_CHARS,
            ),
            (
                "target_workflow_run_id",
                &body.target_workflow_run_id,
                MAX_CALL_FIELD_CHARS,
            ),
            ("connection", &body.connection, MAX_CALL_FIELD_CHARS),
        ] {
            text(&mut checks, field, value.as_deref(), max);
        }
        if let Some(problem) = body.connection.as_ref().and_then(|name| {
            crate::queue::connection_refusal(self.queue.name(), &Value::String(name.clone()))
        }) {
            checks.problem("connection", problem);
        }
        object(&mut checks, "labels", body.labels.as_ref());
        if body.arguments.is_object() {
            checks.inline_payload("arguments", &body.arguments);
        } else if !matches!(body.arguments, Value::String(_) | Value::Null) {
            checks.problem(
                "arguments",
                "The arguments field must be an encoded payload string or a {codec, blob} envelope.",
            );
        }
        let mut v = self.config.request_limits.validator();
        v.operation_name("operation_name", operation);
        finish_with(v, &[], &checks.problems)?;
        let resolved = self.resolve(namespace, endpoint, service, operation)?;
        // A call that may wait is admitted before anything is written.
        let mode = body
            .mode_override
            .clone()
            .unwrap_or_else(|| resolved.mode().to_owned());
        let may_wait = body.wait_for.as_deref().unwrap_or(if mode == "sync" {
            "completed"
        } else {
            "accepted"
        }) == "completed";
        let permit = if may_wait {
            Some(
                self.waiters
                    .admit(crate::waiters::WaitKind::ServiceCall)
                    .map_err(ApiError::CallWaitCapacity)?,
            )
        } else {
            None
        };
        let claimed = body
            .caller_namespace
            .clone()
            .filter(|n| !n.trim().is_empty());
        let bound = caller.and_then(|c| c.namespaces.as_deref());
        let caller_namespace = match (bound, claimed) {
            // A bound token calls as one of its namespaces: the one named,
            // else the request's, else its first.
            (Some(bound), Some(claimed)) if !bound.contains(&claimed) => {
                return Err(ApiError::ServiceCatalog {
                    status: 403,
                    reason: "caller_namespace_mismatch",
                    message: format!(
                        "The caller_namespace {claimed:?} is not a namespace this token is bound to; \
                         send one of the token's namespaces, or leave caller_namespace out."
                    ),
                    details: json!({ "accepted": false, "caller_namespace": claimed,
                                     "token_namespaces": bound }),
                });
            }
            (Some(_), Some(claimed)) => claimed,
            (Some(bound), None) if bound.iter().any(|n| n == namespace) => namespace.to_owned(),
            (Some(bound), None) => bound
                .first()
                .cloned()
                .unwrap_or_else(|| namespace.to_owned()),
            (None, claimed) => claimed.unwrap_or_else(|| namespace.to_owned()),
        };
        // The caller namespace must be one an admin registered (a value
        // made up per call is refused, never counted).
        match self.require_namespace(&caller_namespace) {
            Ok(()) => {}
            Err(ApiError::NamespaceNotFound(_)) => {
                let mut checks = Checks::default();
                checks.problem(
                    "caller_namespace",
                    format!(
                        "The caller_namespace {caller_namespace:?} is not a registered namespace; \
                         a call spends its caller namespace's budget, so it must name one."
                    ),
                );
                return Err(crate::server::wire::validation(checks).into());
            }
            Err(e) => return Err(e),
        }
        // The operation's caller lists (its `boundary_policy`), as for a
        // call from workflow code.
        if let Some((reason, message)) = crate::store::service_calls::caller_refusal(
            &resolved.operation.document["boundary_policy"],
            &caller_namespace,
            namespace,
        ) {
            return Err(ApiError::ServiceCatalog {
                status: 403,
                reason,
                message,
                details: json!({ "accepted": false, "outcome": "rejected_forbidden",
                                 "caller_namespace": caller_namespace }),
            });
        }
        let key = body
            .idempotency_key
            .as_deref()
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned);
        // An idempotent replay answers the call already made; it spends no budget.
        if let Some(key) = &key {
            let (op, caller, k) = (resolved.operation.id, caller_namespace.clone(), key.clone());
            if let Some(call) = self.read(move |s| s.service_call_by_key(op, &caller, &k))? {
                return self.answer_call(&resolved, call, true, permit);
            }
        }
        // The budget is the authenticated caller's: a token's whatever
        // caller_namespace it names (a bound token's per namespace it is
        // bound to), so varying the body no longer multiplies the budget
        // (8 of 8 through 3 a minute, now 3 of 8). Without authentication
        // there is no caller but the body's registered namespace.
        let budget_caller = match caller {
            Some(c) if c.namespaces.is_some() => format!("token:{}@{caller_namespace}", c.token_id),
            Some(c) => format!("token:{}", c.token_id),
            None => caller_namespace.clone(),
        };
        let admitted = self.service_boundary.admit(
            &Boundary {
                caller: &budget_caller,
                target_namespace: namespace,
                endpoint: &resolved.endpoint.name,
                service: &resolved.service.name,
                operation: &resolved.operation.name,
            },
            resolved.operation_limit(),
        );
        if let Err(refusal) = admitted {
            return Err(ApiError::ServiceBoundary {
                refusal,
                details: json!({
                    "accepted": false, "namespace": namespace,
                    "caller_namespace": caller_namespace,
                    "endpoint_name": resolved.endpoint.name,
                    "service_name": resolved.service.name,
                    "operation_name": resolved.operation.name,
                }),
            });
        }
        let request = serde_json::to_value(&body).map_err(|e| ApiError::Internal(e.to_string()))?;
        let (op, ns, caller) = (
            resolved.operation.id,
            namespace.to_owned(),
            caller_namespace,
        );
        let (call, created) =
            self.write(move |s| s.record_service_call(op, &ns, &caller, key.as_deref(), &request))?;
        self.answer_call(&resolved, call, !created, permit)
    }

    /// Starts the call's workflow if it has none yet and answers with the
    /// call's surface, or, when the call waits for completion, hands the
    /// wait to the HTTP layer ([`Engine::look_service_call`]).
    fn answer_call(
        &self,
        resolved: &Resolved,
        mut call: ServiceCallRow,
        replay: bool,
        permit: Option<crate::waiters::WaitPermit>,
    ) -> Result<CallStep, ApiError> {
        let request: ExecuteOperation =
            serde_json::from_value(call.request.clone()).unwrap_or_default();
        if call.linked_run.is_none() {
            let workflow_id = request
                .target_workflow_instance_id
                .clone()
                .filter(|w| !w.trim().is_empty())
                .unwrap_or_else(|| format!("service-call-{}", call.id));
            let codec = request
                .payload_codec
                .clone()
                .unwrap_or_else(|| "avro".into());
            let input = match &request.arguments {
                Value::Object(_) => request.arguments.clone(),
                Value::Null => json!({ "codec": codec, "blob": "" }),
                blob => json!({ "codec": codec, "blob": blob }),
            };
            let start = StartWorkflow {
                workflow_id: workflow_id.clone(),
                workflow_type: resolved.workflow_type(),
                task_queue: request
                    .queue
                    .clone()
                    .unwrap_or_else(|| resolved.task_queue()),
                input,
                duplicate_policy: Some(
                    match request.duplicate_start_policy.as_deref() {
                        Some("return_existing_active") => "use-existing",
                        _ => "fail",
                    }
                    .into(),
                ),
                memo: request.memo.clone(),
                search_attributes: request.search_attributes.clone(),
                business_key: request.business_key.clone(),
                request_id: Some(format!("service-call:{}", call.id)),
                build_id: None,
                compatibility: None,
                execution_timeout_seconds: None,
                run_timeout_seconds: None,
                priority: None,
            };
            let (_, started) = self.start_workflow(&call.namespace, start)?;
            let run = started["run_id"]
                .as_str()
                .and_then(wire::parse_run_id)
                .ok_or_else(|| ApiError::Internal(format!("start answered {started}")))?;
            let id = call.id;
            let linked = workflow_id.clone();
            self.write(move |s| s.link_service_call(id, &linked, run))?;
            call.linked_workflow_id = Some(workflow_id);
            call.linked_run = Some(run);
        }
        let mode = request
            .mode_override
            .clone()
            .unwrap_or_else(|| resolved.mode().to_owned());
        let wait_for = request.wait_for.clone().unwrap_or_else(|| {
            if mode == "sync" {
                "completed"
            } else {
                "accepted"
            }
            .to_owned()
        });
        let mut out = self.call_json(resolved, &call, &request, &mode, &wait_for)?;
        out["idempotent_replay"] = replay.into();
        let (Some(permit), Some(run)) = (permit, call.linked_run) else {
            return Ok(CallStep::Answered(out));
        };
        if wait_for != "completed" || out["status"] != "started" {
            return Ok(CallStep::Answered(out));
        }
        let limit = self.config.max_update_wait;
        let wait = request
            .wait_timeout_seconds
            .map_or(limit, |s| Duration::from_secs(s.unsigned_abs()))
            .min(limit);
        Ok(CallStep::Waiting(Box::new(PendingCall {
            look: CallLook {
                resolved: resolved.clone(),
                call,
                request,
                mode,
                wait_for,
                replay,
            },
            run,
            deadline: Instant::now() + wait,
            timed_out: out,
            _wait: permit,
        })))
    }

    /// One look at a waiting service call: its surface once its run left
    /// `started`, `None` while it waits.
    pub fn look_service_call(&self, look: &CallLook) -> Result<Option<Value>, ApiError> {
        let mut out = self.call_json(
            &look.resolved,
            &look.call,
            &look.request,
            &look.mode,
            &look.wait_for,
        )?;
        out["idempotent_replay"] = look.replay.into();
        Ok((out["status"] != "started").then_some(out))
    }

    /// The call's surface, with its linked run's state and outcome.
    fn call_json(
        &self,
        resolved: &Resolved,
        call: &ServiceCallRow,
        request: &ExecuteOperation,
        mode: &str,
        wait_for: &str,
    ) -> Result<Value, ApiError> {
        let mut out = json!({
            "accepted": true,
            "service_call_id": call.id.to_string(),
            "id": call.id.to_string(),
            "namespace": call.namespace,
            "target_namespace": call.namespace,
            "endpoint_id": resolved.endpoint.id.to_string(),
            "endpoint_name": resolved.endpoint.name,
            "service_id": resolved.service.id.to_string(),
            "service_name": resolved.service.name,
            "operation_id": resolved.operation.id.to_string(),
            "operation_name": resolved.operation.name,
            "operation_mode": mode,
            "wait_for": wait_for,
            "caller_namespace": call.caller_namespace,
            "caller_workflow_instance_id": request.caller_workflow_instance_id,
            "caller_workflow_run_id": request.caller_workflow_run_id,
            "idempotency_key": call.idempotency_key,
            "business_key": request.business_key,
            "payload_codec": request.payload_codec.clone().unwrap_or_else(|| "avro".into()),
            "resolved_binding_kind": "start_workflow",
            "resolved_target_reference": resolved.workflow_type(),
            "linked_workflow_instance_id": call.linked_workflow_id,
            "linked_workflow_run_id": call.linked_run.map(wire::run_id),
            "linked_workflow_update_id": null,
            "policy_name": SharedServiceBoundaryPolicy::POLICY_NAME,
            "accepted_at": wire::timestamp(call.created_at_ms),
            "status": "accepted",
            "outcome": "accepted",
            "result": null,
        });
        let Some(run) = call.linked_run else {
            return Ok(out);
        };
        // A linked run that continued as new answers through its chain: the
        // newest run reached within CHAIN_HOPS links (past that the call
        // reads as still started).
        let (stored, io) = match self.read(|s| {
            let mut run = run;
            let mut stored = s.run(run)?;
            for _ in 0..CHAIN_HOPS {
                match stored.continued_to {
                    Some(next) if stored.status == RunStatus::ContinuedAsNew => {
                        run = next;
                        stored = s.run(run)?;
                    }
                    _ => break,
                }
            }
            Ok((stored, s.run_io(run)?))
        }) {
            Ok(found) => found,
            // A pruned or archived run no longer answers; the call stands.
            Err(crate::store::Error::RunNotFound(_)) => return Ok(out),
            Err(e) => return Err(e.into()),
        };
        let terminal = io.1.unwrap_or(Value::Null);
        let message = terminal
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let (status, outcome) = match stored.status {
            RunStatus::Running => ("started", "started"),
            RunStatus::Completed => ("completed", "completed"),
            RunStatus::Failed => ("failed", "handler_failed"),
            RunStatus::Cancelled => ("cancelled", "cancelled"),
            RunStatus::Terminated => ("failed", "handler_terminated"),
            RunStatus::ContinuedAsNew => ("started", "started"),
        };
        out["status"] = status.into();
        out["outcome"] = outcome.into();
        out["linked_workflow_status"] = stored.status.as_str().into();
        match stored.status {
            RunStatus::Running => {}
            RunStatus::Completed => {
                let output = terminal.get("output").cloned().unwrap_or(Value::Null);
                out["result"] = output.clone();
                out["result_envelope"] = output.clone();
                out["response_payload"] = output;
            }
            _ => {
                out["message"] = message
                    .unwrap_or_else(|| {
                        format!("the linked workflow run is {}", stored.status.as_str())
                    })
                    .into();
                out["failure"] = terminal;
                out["reason"] = outcome.into();
            }
        }
        Ok(out)
    }

    /// `GET …/operations/{operation}/service-calls/{id}`.
    ///
    /// A token bound to namespaces sees only the calls made as one of them
    /// (call ids are sequential; another tenant's call is answered as absent).
    pub fn describe_service_call(
        &self,
        namespace: &str,
        path: (&str, &str, &str),
        call_id: &str,
        caller: Option<&Caller>,
    ) -> Result<Value, ApiError> {
        let (endpoint, service, operation) = path;
        let resolved = self.resolve(namespace, endpoint, service, operation)?;
        let missing = || {
            not_found(
                "service_call_not_found",
                format!(
                    "Service call [{call_id}] not found under operation [{}] in namespace [{namespace}].",
                    resolved.operation.name
                ),
                json!({ "namespace": namespace, "operation_name": resolved.operation.name,
                        "service_call_id": call_id }),
            )
        };
        let Ok(id) = call_id.trim().parse::<i64>() else {
            return Err(missing());
        };
        let call = self
            .read(|s| s.service_call(id))?
            .filter(|c| c.operation_id == resolved.operation.id && c.namespace == namespace)
            .filter(|c| caller.is_none_or(|who| who.admits_namespace(&c.caller_namespace)))
            .ok_or_else(missing)?;
        let request: ExecuteOperation =
            serde_json::from_value(call.request.clone()).unwrap_or_default();
        let mode = request
            .mode_override
            .clone()
            .unwrap_or_else(|| resolved.mode().to_owned());
        let wait_for = request.wait_for.clone().unwrap_or_else(|| {
            if mode == "sync" {
                "completed"
            } else {
                "accepted"
            }
            .to_owned()
        });
        let mut out = self.call_json(&resolved, &call, &request, &mode, &wait_for)?;
        out["found"] = true.into();
        Ok(out)
    }
}
