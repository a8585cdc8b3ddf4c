//! What `GET /api/cluster/info` advertises: the control-plane and worker
//! protocol manifests, the auth-composition contract and the limits.
//!
//! Only what this server implements is advertised: a capability the SDK
//! would use and the server lacks must read `false` (or be absent), so the
//! SDK refuses up front instead of failing mid-workflow.

use serde_json::{json, Value};

use crate::server::wire::{
    CONTROL_PLANE_HEADER, CONTROL_PLANE_VERSION, PROTOCOL_HEADER, WORKER_PROTOCOL_VERSIONS,
};
use crate::server::worker::{DEFAULT_HISTORY_PAGE, HEARTBEAT_INTERVAL_SECONDS};
use crate::server::Engine;
use crate::store::SUPPORTED_COMMANDS;

/// The control-plane request contract's schema name.
pub const REQUEST_CONTRACT_SCHEMA: &str = "durable-workflow.v2.control-plane-request.contract";
/// The worker protocol that first carries message streams (the SDK's
/// `_MESSAGE_STREAMS_MINIMUM_WORKER_PROTOCOL`).
pub const MESSAGE_STREAMS_MINIMUM_PROTOCOL: &str = "1.15";
/// The auth-composition contract's schema name.
pub const AUTH_COMPOSITION_SCHEMA: &str = "durable-workflow.v2.auth-composition.contract";

impl Engine {
    /// The whole discovery document, with `namespace`'s external payload
    /// storage policy (the SDK reads `namespace.external_payload_storage`).
    pub fn cluster_info(&self, namespace: &str) -> Value {
        let payloads = self.external_payloads.settings();
        let limits = self
            .config
            .request_limits
            .cluster_limits(&self.config.store.limits);
        let newest = WORKER_PROTOCOL_VERSIONS[WORKER_PROTOCOL_VERSIONS.len() - 1];
        let mut info = json!({
            "server_id": self.config.server_id,
            "version": env!("CARGO_PKG_VERSION"),
            "server": "dwserver",
            "cache_backend": self.cache.backend(),
            "limits": limits,
            "namespace": {
                "name": namespace,
                "external_payload_storage": payloads.discovery(namespace),
            },
            "control_plane": {
                "version": CONTROL_PLANE_VERSION,
                "header": CONTROL_PLANE_HEADER,
                "namespace_header": "X-Namespace",
                "request_contract": {
                    "schema": REQUEST_CONTRACT_SCHEMA,
                    "version": 1,
                    "operations": {
                        "start": { "fields": { "duplicate_policy": { "canonical_values": ["fail", "use-existing"] } } },
                        "update": { "fields": { "wait_for": { "canonical_values": ["accepted", "completed"] } } },
                    },
                },
            },
            "worker_protocol": {
                "version": newest,
                "supported_versions": WORKER_PROTOCOL_VERSIONS,
                "header": PROTOCOL_HEADER,
                "server_capabilities": {
                    "long_poll_timeout_seconds": self.config.max_poll_wait.as_secs(),
                    "poll_request_idempotency": true,
                    "history_page_size_default": DEFAULT_HISTORY_PAGE,
                    "supported_workflow_task_commands": SUPPORTED_COMMANDS,
                    "workflow_task_fencing": ["lease_owner", "workflow_task_attempt"],
                    "activity_retry_policy": true,
                    "activity_heartbeats": true,
                    "query_tasks": true,
                    "message_streams": {
                        "supported": true,
                        "minimum_protocol_version": MESSAGE_STREAMS_MINIMUM_PROTOCOL,
                        "run_scoped_output_streams": true,
                        "workflow_stream_directives": ["append", "close", "error"],
                        "input_message_streams": true,
                        "input_message_stream_signal": crate::store::message_streams::MESSAGE_STREAM_SIGNAL,
                        "max_append_items": crate::server::streams::MAX_APPEND_ITEMS,
                        "max_page_items": crate::server::streams::MAX_PAGE_ITEMS,
                        "max_wait_seconds": crate::server::streams::MAX_WAIT_SECONDS,
                        "max_retention_seconds": crate::server::streams::MAX_RETENTION_SECONDS,
                        "default_retention_seconds": self.config.store.streams.default_retention_seconds,
                        "max_streams_per_run": self.config.store.streams.max_streams_per_run,
                        "max_items_per_stream": self.config.store.streams.max_items_per_stream,
                        "max_waiting_reads": self.config.stream_max_waits,
                        "delivery": "at_least_once",
                    },
                    "workflow_updates": true,
                    "heartbeat_interval_seconds": HEARTBEAT_INTERVAL_SECONDS,
                    "query_task_authority": false,
                    "activity_lease_renewal": false,
                    "cooperative_cancellation": true,
                    "update_validation_tasks": true,
                    "synchronous_update_validation": crate::server::update_validation::contract::capability(),
                    "sticky_execution": self.sticky_capability(),
                    "worker_sessions": crate::server::worker::worker_sessions_capability(),
                    "local_activities": { "supported": true, "command": "record_local_activity" },
                    "workflow_memo_updates": crate::server::worker::memo_updates(),
                    "runtime_external_payload_transport": payloads.enabled(),
                    "child_workflows": true,
                    "durable_selection": {
                        "supported": true,
                        "commands": ["cancel_selection_operation"],
                        "history_events": ["SelectionResolved", "SelectionOperationCancelled"],
                    },
                },
            },
            "auth_composition_contract": {
                "schema": AUTH_COMPOSITION_SCHEMA,
                "version": 1,
                "precedence": {
                    "connection_values": ["flag", "environment", "profile", "default"],
                    "profile_selection": ["flag", "DW_ENV", "default"],
                },
                "canonical_environment": {
                    "server_url": "DURABLE_WORKFLOW_SERVER_URL",
                    "namespace": "DURABLE_WORKFLOW_NAMESPACE",
                    "auth_token": "DURABLE_WORKFLOW_AUTH_TOKEN",
                    "tls_verify": "DURABLE_WORKFLOW_TLS_VERIFY",
                    "profile": "DW_ENV",
                },
                "auth_material": {
                    "token": { "status": "supported", "effective_config_value": "redacted",
                               "enabled": self.config.auth.is_some(),
                               "roles": ["worker", "operator", "admin"] },
                    "mtls": { "status": "reserved" },
                    "signed_headers": { "status": "reserved" },
                },
                "effective_config": {
                    "required_fields": ["server_url", "namespace", "profile", "auth", "tls", "identity"],
                },
                "redaction": {
                    "never_echo": ["bearer_tokens", "private_keys", "raw_authorization_headers"],
                },
            },
        });
        // Cooperative cancellation reaches a Nexus call's linked workflow
        // run (`server::cancellation`); set here, past the document's
        // macro nesting depth.
        let capabilities = &mut info["worker_protocol"]["server_capabilities"];
        capabilities["nexus_cooperative_cancellation"] = true.into();
        capabilities["nexus_cooperative_cancellation_binding_kinds"] =
            json!(crate::server::worker::NEXUS_BINDING_KINDS);
        // The prepared-local protocol (`server::prepared_local`): admission,
        // control, outcome, recovery and checkpoints on the workflow task's
        // own claim; a cancellation request stops a running attempt, as
        // each local cancellation policy says (`store::cancellation`).
        capabilities["prepared_local_activities"] = true.into();
        capabilities["prepared_local_activity_groups"] = true.into();
        capabilities["prepared_local_activity_cancellation_policies"] =
            json!(crate::store::prepared_local::LOCAL_CANCELLATION_POLICIES);
        info
    }
}
