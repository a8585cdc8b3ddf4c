//! A webhook delivery through the control plane's own calls.
//!
//! [`Engine::webhook_delivery`] authenticates a delivery against its
//! adapter ([`super::webhooks`]: the secret, the timestamp window, the
//! replay keys), then makes the event the control plane's
//! [`Engine::start_workflow`], [`Engine::signal`] or
//! [`Engine::begin_update`] call, and answers in the bridge outcome shape
//! with the control plane's own status and reason on a refusal.

use hmac::Mac;
use serde_json::{json, Value};

use crate::server::control::{PendingUpdate, UpdateStep};
use crate::server::webhooks::{
    derived_workflow_id, envelope, mac, outcome, parse_event, refusal, request_id, unhex, Event,
    ReplayKeys, Signed, Webhook, SCHEMA, SIGNATURE_HEADER, TIMESTAMP_HEADER,
};
use crate::server::wire::{Checks, SignalBody, StartWorkflow, UpdateBody};
use crate::server::{ApiError, Engine};

/// What a delivery came to.
pub enum Delivery {
    /// The answer's status and body.
    Answered(u16, Value),
    /// An update admitted with `wait_for: completed`: the HTTP layer awaits
    /// its outcome as the control plane's ([`Engine::look_update`]) and
    /// answers with [`Engine::webhook_update_answer`].
    Waiting(PendingUpdate, Value),
}

/// The fields of the control plane's answer a webhook outcome carries.
const ANSWER_FIELDS: [&str; 9] = [
    "workflow_id",
    "run_id",
    "workflow_type",
    "signal_id",
    "update_id",
    "request_id",
    "update_status",
    "result_envelope",
    "wait_timed_out",
];

impl Engine {
    /// One webhook delivery, from its adapter name, headers and raw body
    /// to the answer's status and body. Authentication first (unknown
    /// adapter, missing or wrong signature, a timestamp out of the window:
    /// 401; a signature seen before: 409), then the control plane's own call.
    pub fn webhook_delivery(&self, adapter: &str, signed: Signed, body: &[u8]) -> Delivery {
        match self.authenticated_delivery(adapter, signed, body) {
            Ok(delivery) => delivery,
            Err((status, out)) => Delivery::Answered(status, out),
        }
    }

    /// An awaited webhook update's answer: its outcome (`Some`: the
    /// control plane's completed update, or its refusal), or `None` when
    /// the wait ran out (`wait_timed_out`).
    pub fn webhook_update_answer(
        &self,
        pending: PendingUpdate,
        base: Value,
        outcome: Result<Option<Value>, ApiError>,
    ) -> (u16, Value) {
        let adapter = base["adapter"].as_str().unwrap_or_default().to_owned();
        match outcome {
            Ok(found) => {
                let duplicate = base["outcome"] == "duplicate";
                let answer = found.unwrap_or_else(|| pending.timed_out());
                let mut out = base;
                copy_answer(&mut out, &answer);
                (if duplicate { 200 } else { 202 }, out)
            }
            Err(e) => {
                let mut out = base;
                if let (Value::Object(out), Value::Object(body)) = (&mut out, e.body()) {
                    for (k, v) in body {
                        out.insert(k, v);
                    }
                }
                out["adapter"] = adapter.into();
                out["accepted"] = false.into();
                out["outcome"] = "rejected".into();
                (e.status(), out)
            }
        }
    }

    fn authenticated_delivery(
        &self,
        adapter: &str,
        signed: Signed,
        body: &[u8],
    ) -> Result<Delivery, (u16, Value)> {
        let unauthorized = |reason: &str, message: &str| {
            refusal(
                401,
                reason,
                format!("{message}; see docs/api.md (Webhook intake)"),
            )
        };
        let webhook = self.config.webhooks.get(adapter);
        let (Some(timestamp), Some(signature)) = (signed.timestamp, signed.signature) else {
            return Err(unauthorized(
                "webhook_signature_missing",
                &format!("send {TIMESTAMP_HEADER} (Unix seconds) and {SIGNATURE_HEADER}: sha256=<hex HMAC-SHA256 of \"<timestamp>.<body>\">"),
            ));
        };
        let presented = signature.trim();
        let presented = presented.strip_prefix("sha256=").unwrap_or(presented);
        let decoded = unhex(presented);
        // An unknown adapter is answered as a wrong signature, so the
        // answer tells nothing of which adapters exist.
        let verified = match (webhook, &decoded) {
            (Some(hook), Some(bytes)) => mac(&hook.secret, timestamp.trim(), body)
                .verify_slice(bytes)
                .is_ok(),
            _ => false,
        };
        let Some(webhook) = webhook.filter(|_| verified) else {
            return Err(unauthorized(
                "webhook_signature_invalid",
                "the signature does not match this adapter's secret over \"<timestamp>.<body>\"",
            ));
        };
        let window = self.config.webhooks.replay_window;
        let now = crate::unix_ms() / 1000;
        let Some(sent) = timestamp.trim().parse::<i64>().ok() else {
            return Err(unauthorized(
                "webhook_timestamp_invalid",
                &format!("{TIMESTAMP_HEADER} must be Unix seconds"),
            ));
        };
        let skew = now.abs_diff(sent);
        if skew > window.as_secs() {
            let (status, mut out) = unauthorized(
                "webhook_timestamp_out_of_window",
                &format!(
                    "the delivery was signed {skew} s away from the server's clock; at most {} s is accepted: sign each delivery (and each retry) when it is sent",
                    window.as_secs()
                ),
            );
            out["server_time"] = now.into();
            out["replay_window_seconds"] = window.as_secs().into();
            return Err((status, out));
        }
        // The signature is remembered for twice the window: as long as
        // its timestamp can be accepted at all.
        // One key per signature whatever the hex digits' case.
        let key = ReplayKeys::key(&webhook.adapter, &presented.to_ascii_lowercase());
        match self.cache.add(&key, b"1", window * 2) {
            Ok(true) => {}
            Ok(false) => {
                return Err(refusal(
                    409,
                    "webhook_replayed",
                    "this signed delivery was already received; a retry must be signed again with its own timestamp (the same idempotency_key gets the first delivery's answer)".into(),
                ))
            }
            // Refused before anything is written, as any request whose
            // cache is down.
            Err(e) => return Err(self.answer_error(webhook, None, ApiError::Cache(e))),
        }
        let event = match parse_event(body) {
            Ok(event) => event,
            Err(problems) => {
                let (status, mut out) = refusal(
                    422,
                    "malformed_payload",
                    "the webhook event is malformed; see validation_errors".into(),
                );
                out["validation_errors"] = problems;
                out["adapter"] = webhook.adapter.clone().into();
                return Err((status, out));
            }
        };
        self.deliver(webhook, &event)
            .map_err(|e| self.answer_error(webhook, Some(&event), e))
    }

    /// The control plane's answer to an event, in the outcome shape.
    fn deliver(&self, webhook: &Webhook, event: &Event) -> Result<Delivery, ApiError> {
        let namespace = webhook.namespace.as_str();
        self.require_namespace(namespace)?;
        let request_id = request_id(&webhook.adapter, &event.key);
        let text = |field: &str| {
            event
                .target
                .get(field)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let input = envelope(&event.input).map_err(|problem| {
            target_problem(
                "input",
                &format!("The input field cannot be encoded as the SDKs' payload: {problem}."),
            )
        })?;
        let (duplicate, control, fields) = match event.action.as_str() {
            "start_workflow" => {
                let policy = match text("duplicate_policy").as_deref() {
                    None | Some("use_existing") => "use-existing",
                    Some("reject_duplicate") => "fail",
                    Some(_) => return Err(target_problem(
                        "target.duplicate_policy",
                        "The duplicate_policy field must be \"use_existing\" or \"reject_duplicate\".",
                    )),
                };
                let workflow_id = text("workflow_id")
                    .unwrap_or_else(|| derived_workflow_id(&webhook.adapter, &event.key));
                let start = StartWorkflow {
                    workflow_id,
                    workflow_type: text("workflow_type").unwrap_or_default(),
                    task_queue: text("task_queue").unwrap_or_default(),
                    input,
                    execution_timeout_seconds: None,
                    run_timeout_seconds: None,
                    duplicate_policy: Some(policy.into()),
                    memo: None,
                    search_attributes: None,
                    business_key: text("business_key"),
                    priority: None,
                    request_id: Some(request_id),
                    build_id: None,
                    compatibility: None,
                };
                let (status, out) = self.start_workflow(namespace, start)?;
                let duplicate =
                    status != 201 || out["duplicate"] == true || out["outcome"] != "started_new";
                (duplicate, out["outcome"].clone(), out)
            }
            "signal_workflow" => {
                let out = self.signal(
                    namespace,
                    &text("workflow_id").unwrap_or_default(),
                    text("run_id").as_deref(),
                    &text("signal_name").unwrap_or_default(),
                    SignalBody {
                        input,
                        request_id: Some(request_id),
                    },
                )?;
                let duplicate = out["retained"] == true;
                let control = if duplicate {
                    "deduped_existing_command"
                } else {
                    "signal_received"
                };
                (duplicate, control.into(), out)
            }
            "update_workflow" => {
                let wait_for = text("wait_for").unwrap_or_else(|| "accepted".into());
                let wait_timeout_seconds = match event.target.get("wait_timeout_seconds") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_i64().ok_or_else(|| {
                        target_problem(
                            "target.wait_timeout_seconds",
                            "The wait_timeout_seconds field must be an integer.",
                        )
                    })?),
                };
                let (workflow_id, update_name) = (
                    text("workflow_id").unwrap_or_default(),
                    text("update_name").unwrap_or_default(),
                );
                if self.update_validator_guards(
                    namespace,
                    &workflow_id,
                    text("run_id").as_deref(),
                    &update_name,
                )? {
                    return Err(validated_update_refused(&workflow_id, &update_name));
                }
                let step = self.begin_update(
                    namespace,
                    &text("workflow_id").unwrap_or_default(),
                    text("run_id").as_deref(),
                    &text("update_name").unwrap_or_default(),
                    UpdateBody {
                        input,
                        wait_for: Some(wait_for),
                        wait_timeout_seconds,
                        request_id: Some(request_id),
                    },
                )?;
                let (out, pending) = match step {
                    UpdateStep::Answered(out) => (out, None),
                    UpdateStep::Waiting(pending) => (pending.accepted().clone(), Some(pending)),
                    UpdateStep::Validating(pending) => {
                        // A worker declared the validator just now.
                        let (validation, _) = pending.validation();
                        self.abandon_validation(validation)?;
                        return Err(validated_update_refused(&workflow_id, &update_name));
                    }
                };
                let duplicate = out["retained"] == true;
                let control = if duplicate {
                    "deduped_existing_command"
                } else {
                    "update_accepted"
                };
                if let Some(pending) = pending {
                    let base = finished(webhook, event, duplicate, control.into(), &out);
                    return Ok(Delivery::Waiting(pending, base));
                }
                (duplicate, control.into(), out)
            }
            other => {
                return Err(ApiError::ServiceCatalog {
                    status: 422,
                    reason: "unsupported_action",
                    message: format!(
                        "The action {other:?} is not supported: use start_workflow, signal_workflow or update_workflow."
                    ),
                    details: Value::Null,
                })
            }
        };
        let out = finished(webhook, event, duplicate, control, &fields);
        Ok(Delivery::Answered(if duplicate { 200 } else { 202 }, out))
    }

    /// A refusal of the control plane's, with its status and body (the
    /// same `reason` and metadata a control-plane client gets), in the
    /// outcome shape.
    fn answer_error(&self, webhook: &Webhook, event: Option<&Event>, e: ApiError) -> (u16, Value) {
        let mut out = match event {
            Some(event) => outcome(webhook, event),
            None => json!({ "schema": SCHEMA, "version": 1, "adapter": webhook.adapter }),
        };
        if let (Value::Object(out), Value::Object(body)) = (&mut out, e.body()) {
            for (k, v) in body {
                out.insert(k, v);
            }
        }
        out["accepted"] = false.into();
        out["outcome"] = "rejected".into();
        (e.status(), out)
    }
}

fn target_problem(field: &str, message: &str) -> ApiError {
    let mut checks = Checks::default();
    checks.problem(field, message);
    crate::server::wire::validation(checks).into()
}

/// The outcome of an admitted event: accepted or duplicate, with the
/// control plane's outcome and the ids of its answer.
fn finished(
    webhook: &Webhook,
    event: &Event,
    duplicate: bool,
    control: Value,
    answer: &Value,
) -> Value {
    let mut out = outcome(webhook, event);
    out["accepted"] = (!duplicate).into();
    out["outcome"] = if duplicate { "duplicate" } else { "accepted" }.into();
    out["control_plane_outcome"] = control;
    copy_answer(&mut out, answer);
    out
}

fn copy_answer(out: &mut Value, answer: &Value) {
    for field in ANSWER_FIELDS {
        if let Some(value) = answer.get(field).filter(|v| !v.is_null()) {
            out[field] = value.clone();
        }
    }
}

/// A webhook's update a validator guards: nothing waits for a validator's
/// verdict on a delivery, so it is refused before anything is written.
fn validated_update_refused(workflow_id: &str, update_name: &str) -> ApiError {
    ApiError::UpdateValidation {
        status: 409,
        reason: "update_validation_capability_unsupported",
        message: format!(
            "The update {update_name:?} of this workflow has a validator, and a webhook delivery cannot wait for its verdict: send it with POST /api/workflows/{{workflow_id}}/update/{{update_name}}."
        ),
        details: json!({ "update_name": update_name, "workflow_id": workflow_id }),
    }
}
