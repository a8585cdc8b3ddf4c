//! Nexus service operations started by workflow code: the
//! `start_service_operation` command both SDKs send from
//! `ctx.call_nexus_service(...)`.
//!
//! In the completion's transaction the operation is resolved in the service
//! catalog of the target namespace (the command's `namespace`, else the
//! caller's), a service call is recorded (the same row a client's
//! `execute` writes, so the call's describe route and retention apply) and
//! the operation's bound workflow is started (with the command's start
//! options: its workflow id, memo, search attributes, or an open run of
//! that id to attach to); the caller's history gets
//! `ServiceCallStarted` at the command's sequence, and (for a `sync` call
//! that waits for completion; with `accepted` or `async` both SDKs resume
//! at the admission) a waiter row links the caller to the started run.
//! When that run closes, the caller gets the terminal event at the same
//! sequence (`ServiceCallCompleted` with the
//! run's output, `ServiceCallFailed`, `ServiceCallCancelled`) and a
//! workflow task. An operation that cannot be resolved or started fails at
//! once: a lone `ServiceCallFailed` (both SDKs accept a terminal delivery
//! without an admission) and a workflow task.

use crate::store::db::{params, Connection, OptionalExtension};
use serde_json::{json, Map, Value};

use crate::store::dispatch::enqueue_workflow;
use crate::store::error::Error;
use crate::store::model::{EventType, RunId, RunStatus, StartRun};
use crate::store::protocol::codec_of;
use crate::store::rows::{insert_run, now_ms, RunHead};
use dwpolicy::StructuralLimits;

/// What workflow code asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceCallStart<'a> {
    /// The command's workflow sequence.
    pub sequence: i64,
    /// The catalog path as sent.
    pub endpoint_name: &'a str,
    /// The service.
    pub service_name: &'a str,
    /// The operation.
    pub operation_name: &'a str,
    /// The catalog's namespace (the caller's when absent).
    pub target_namespace: Option<&'a str>,
    /// The caller's namespace as the command names it: it must be the
    /// run's own (a completion is authorized for its run's namespace).
    pub caller_namespace: Option<&'a str>,
    /// The caller's key, recorded with the call.
    pub idempotency_key: Option<&'a str>,
    /// `sync` or `async` (the operation's own mode when absent).
    pub mode_override: Option<&'a str>,
    /// `accepted` or `completed` (by the mode when absent).
    pub wait_for: Option<&'a str>,
    /// The request (an encoded blob or a payload envelope).
    pub request_payload: &'a Value,
    /// The request blob's codec.
    pub payload_codec: Option<&'a str>,
    /// The started workflow's queue (the binding's when absent).
    pub queue: Option<&'a str>,
    /// The operation's workflow id (`service-call-<id>` when absent).
    pub workflow_id: Option<&'a str>,
    /// The open run of that workflow the call attaches to (it must be the
    /// open one).
    pub run_id: Option<&'a str>,
    /// `return_existing_active`: an open run of the workflow id (of the
    /// operation's type) is linked instead of refusing the call.
    pub return_existing: bool,
    /// Recorded with the call.
    pub business_key: Option<&'a str>,
    /// The started workflow's memo.
    pub memo: Map<String, Value>,
    /// The started workflow's search attributes.
    pub search_attributes: Map<String, Value>,
}

/// The events a start writes into the caller's history.
#[derive(Debug)]
pub struct StartedCall {
    /// `ServiceCallStarted`, when the operation's workflow started.
    pub started: Option<Value>,
    /// A terminal event written at once (the call failed to start).
    pub terminal: Option<(EventType, Value)>,
    /// Whether the caller resumes at the admission (`accepted` or `async`):
    /// it needs a workflow task to see it.
    pub resumes_at_admission: bool,
    /// The started run's namespace and task queue (to wake its pollers).
    pub woken: Option<(String, String)>,
}

struct Operation {
    id: i64,
    document: Value,
}

fn catalog_id(
    conn: &Connection,
    namespace: &str,
    level: &str,
    parent: i64,
    name: &str,
) -> Result<Option<(i64, String)>, Error> {
    Ok(conn
        .prepare_cached(
            "SELECT id, document FROM service_catalog \
             WHERE namespace = ?1 AND level = ?2 AND parent_id = ?3 AND name = ?4",
        )?
        .query_row(
            params![namespace, level, parent, name.to_ascii_lowercase()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// The operation at the call's catalog path, or why there is none.
fn resolve(
    conn: &Connection,
    namespace: &str,
    call: &ServiceCallStart<'_>,
) -> Result<Result<Operation, (&'static str, String)>, Error> {
    let Some((endpoint, _)) = catalog_id(conn, namespace, "endpoint", 0, call.endpoint_name)?
    else {
        return Ok(Err((
            "endpoint_not_found",
            format!(
                "Service endpoint [{}] not found in namespace [{namespace}].",
                call.endpoint_name
            ),
        )));
    };
    let Some((service, _)) = catalog_id(conn, namespace, "service", endpoint, call.service_name)?
    else {
        return Ok(Err((
            "service_not_found",
            format!(
                "Service [{}] not found under endpoint [{}] in namespace [{namespace}].",
                call.service_name, call.endpoint_name
            ),
        )));
    };
    let Some((id, document)) =
        catalog_id(conn, namespace, "operation", service, call.operation_name)?
    else {
        return Ok(Err((
            "operation_not_found",
            format!(
                "Operation [{}] not found under service [{}] at endpoint [{}] in namespace [{namespace}].",
                call.operation_name, call.service_name, call.endpoint_name
            ),
        )));
    };
    let document: Value = serde_json::from_str(&document)?;
    let kind = document["handler_binding_kind"].as_str().unwrap_or("");
    if kind != "start_workflow" {
        return Ok(Err((
            "handler_binding_unsupported",
            format!("Operation [{}] is bound by {kind:?}; this server executes only the start_workflow binding.", call.operation_name),
        )));
    }
    Ok(Ok(Operation { id, document }))
}

fn namespace_exists(conn: &Connection, namespace: &str) -> Result<bool, Error> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM namespaces WHERE name = ?1")?
        .query_row(params![namespace], |_| Ok(()))
        .optional()?
        .is_some())
}

/// The reasons an operation's caller lists refuse a call for.
pub const FORBIDDEN_REASONS: [&str; 2] =
    ["caller_namespace_denied", "caller_namespace_not_allowed"];

/// Where an operation's `boundary_policy` may hold its list of caller
/// namespaces denied (`deny`) or allowed (`allow`), as the reference
/// server reads them: the first path present is the list.
pub fn caller_list_paths(list: &str) -> [Vec<String>; 6] {
    let callers = format!("{list}_callers");
    [
        vec![callers.clone()],
        vec!["caller_namespaces".into(), list.into()],
        vec!["caller_namespaces".into(), callers.clone()],
        vec!["authorization".into(), callers.clone()],
        vec![
            "authorization".into(),
            "caller_namespaces".into(),
            list.into(),
        ],
        vec!["authorization".into(), "caller_namespaces".into(), callers],
    ]
}

fn caller_list<'p>(policy: &'p Value, list: &str) -> Option<&'p Vec<Value>> {
    caller_list_paths(list).iter().find_map(|path| {
        path.iter()
            .try_fold(policy, |at, key| at.get(key))
            .and_then(Value::as_array)
    })
}

/// Why an operation whose `boundary_policy` is `policy` refuses a call
/// from `caller` (into `target`'s catalog), if it does: a caller on its
/// deny list is refused, and with an allow list only the callers it names
/// are admitted (the caller's own namespace too, as the reference server
/// evaluates it). Without either list every caller is admitted.
pub fn caller_refusal(
    policy: &Value,
    caller: &str,
    target: &str,
) -> Option<(&'static str, String)> {
    let names = |list: &Vec<Value>| list.iter().any(|n| n.as_str() == Some(caller));
    if caller_list(policy, "deny").is_some_and(names) {
        return Some((
            "caller_namespace_denied",
            format!("Caller namespace [{caller}] is explicitly denied by the operation's boundary policy in namespace [{target}]."),
        ));
    }
    match caller_list(policy, "allow") {
        Some(list) if !names(list) => Some((
            "caller_namespace_not_allowed",
            format!("Caller namespace [{caller}] is not on the operation's allow list in target namespace [{target}]."),
        )),
        _ => None,
    }
}

/// A call that fails before anything is written: a lone `ServiceCallFailed`.
fn fail_at_once(
    mut failed: Map<String, Value>,
    reason: &'static str,
    message: String,
) -> StartedCall {
    failed.insert("status".into(), "failed".into());
    // A refusal by the operation's caller lists is the reference
    // server's `rejected_forbidden` outcome.
    let outcome = if FORBIDDEN_REASONS.contains(&reason) {
        "rejected_forbidden"
    } else {
        reason
    };
    failed.insert("outcome".into(), outcome.into());
    failed.insert("reason".into(), reason.into());
    failed.insert("exception_type".into(), reason.into());
    failed.insert("message".into(), message.into());
    StartedCall {
        started: None,
        terminal: Some((EventType::ServiceCallFailed, Value::Object(failed))),
        resumes_at_admission: false,
        woken: None,
    }
}

/// Starts `call` for the `caller` run in the caller's transaction.
pub(crate) fn start(
    conn: &Connection,
    limits: &StructuralLimits,
    caller: &RunHead,
    caller_namespace: &str,
    call: &ServiceCallStart<'_>,
) -> Result<StartedCall, Error> {
    let namespace = call.target_namespace.unwrap_or(caller_namespace);
    let operation = match call.caller_namespace {
        // A workflow calls as its run's namespace: the completion is
        // authorized for that namespace and no other.
        Some(claimed) if claimed != caller_namespace => Err((
            "caller_namespace_mismatch",
            format!(
                "The caller_namespace [{claimed}] is not the calling run's namespace \
                 [{caller_namespace}]; leave caller_namespace out or send the run's own."
            ),
        )),
        _ if namespace != caller_namespace && !namespace_exists(conn, namespace)? => Err((
            "namespace_not_found",
            format!("The target namespace [{namespace}] is not a registered namespace."),
        )),
        _ => resolve(conn, namespace, call)?.and_then(|operation| {
            match caller_refusal(
                &operation.document["boundary_policy"],
                caller_namespace,
                namespace,
            ) {
                Some(refusal) => Err(refusal),
                None => Ok(operation),
            }
        }),
    };
    let mode = call
        .mode_override
        .map(str::to_owned)
        .or_else(|| match &operation {
            Ok(op) => op.document["operation_mode"].as_str().map(str::to_owned),
            Err(_) => None,
        })
        .unwrap_or_else(|| "sync".to_owned());
    let wait_for = call.wait_for.unwrap_or(if mode == "sync" {
        "completed"
    } else {
        "accepted"
    });
    let codec = call.payload_codec.unwrap_or("avro");
    // The fields every event of the call repeats (both SDKs compare them
    // between the admission and the terminal delivery).
    let mut fields = Map::new();
    fields.insert("sequence".into(), call.sequence.into());
    fields.insert("endpoint_name".into(), call.endpoint_name.into());
    fields.insert("service_name".into(), call.service_name.into());
    fields.insert("operation_name".into(), call.operation_name.into());
    fields.insert("target_namespace".into(), namespace.into());
    fields.insert("caller_namespace".into(), caller_namespace.into());
    fields.insert("operation_mode".into(), mode.clone().into());
    fields.insert("wait_for".into(), wait_for.into());
    if let Some(key) = call.idempotency_key {
        fields.insert("idempotency_key".into(), key.into());
    }
    fields.insert(
        "caller_workflow_instance_id".into(),
        caller.workflow_id.clone().into(),
    );
    fields.insert(
        "caller_workflow_run_id".into(),
        caller.id.0.to_string().into(),
    );
    let operation = match operation {
        Ok(operation) => operation,
        Err((reason, message)) => return Ok(fail_at_once(fields, reason, message)),
    };
    let workflow_type = operation.document["handler_binding"]["workflow_type"]
        .as_str()
        .or_else(|| operation.document["handler_target_reference"].as_str())
        .unwrap_or_default()
        .to_owned();
    // A named workflow id: its open run is linked (return_existing_active,
    // of the operation's type, and the named run if one is named) or the
    // call is refused, before anything is written.
    let existing = match call.workflow_id {
        Some(workflow_id) => {
            let open: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT id, workflow_type FROM runs WHERE namespace = ?1 AND workflow_id = ?2 \
                     AND status = 'running' ORDER BY id DESC LIMIT 1",
                )?
                .query_row(params![namespace, workflow_id], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?;
            let refusal = match (&open, call.run_id) {
                (None, Some(run)) => Some((
                    "target_run_not_open",
                    format!("Workflow [{workflow_id}] has no open run [{run}] in namespace [{namespace}] to attach the call to."),
                )),
                (None, None) => None,
                (Some((id, _)), Some(run)) if run != id.to_string() => Some((
                    "target_run_not_open",
                    format!("Workflow [{workflow_id}]'s open run in namespace [{namespace}] is [{id}], not [{run}]."),
                )),
                // A workflow waiting on its own run would wait forever.
                (Some((id, _)), _) if *id == caller.id.0 => Some((
                    "target_run_is_caller",
                    format!("Workflow [{workflow_id}]'s open run is the calling run: a call cannot attach to its caller."),
                )),
                (Some((_, kind)), _) if !call.return_existing || *kind != workflow_type => Some((
                    "instance_already_started",
                    format!("Workflow [{workflow_id}] already has an open run of type [{kind}] in namespace [{namespace}]; \
                             send duplicate_start_policy return_existing_active to link an open run of type [{workflow_type}]."),
                )),
                (Some(_), _) => None,
            };
            if let Some((reason, message)) = refusal {
                return Ok(fail_at_once(fields, reason, message));
            }
            open.map(|(id, _)| RunId(id))
        }
        None => None,
    };
    let request = json!({
        "arguments": call.request_payload, "payload_codec": codec,
        "target_workflow_instance_id": call.workflow_id, "target_workflow_run_id": call.run_id,
        "duplicate_start_policy": if call.return_existing { "return_existing_active" } else { "reject_duplicate" },
        "business_key": call.business_key,
        "mode_override": mode, "wait_for": wait_for,
        "idempotency_key": call.idempotency_key, "queue": call.queue,
        "caller_namespace": caller_namespace,
        "caller_workflow_instance_id": caller.workflow_id,
        "caller_workflow_run_id": caller.id.0.to_string(),
    });
    let now = now_ms();
    // Each command is its own call: the SDK's idempotency key is recorded
    // with it (and in history) but does not join the call to another one.
    let call_id: i64 = conn
        .prepare_cached(
            "INSERT INTO service_calls (operation_id, namespace, caller_namespace, \
             idempotency_key, request, created_at_ms, updated_at_ms) \
             VALUES (?1, ?2, ?3, NULL, ?4, ?5, ?5) RETURNING id",
        )?
        .query_row(
            params![
                operation.id,
                namespace,
                caller_namespace,
                serde_json::to_string(&request)?,
                now
            ],
            |r| r.get(0),
        )?;
    let workflow_id = call
        .workflow_id
        .map_or_else(|| format!("service-call-{call_id}"), str::to_owned);
    let queue = call
        .queue
        .map(str::to_owned)
        .or_else(|| {
            operation.document["handler_binding"]["task_queue"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "default".to_owned());
    let arguments = match call.request_payload {
        Value::Object(_) => call.request_payload.clone(),
        Value::Null => json!({ "codec": codec, "blob": "" }),
        blob => json!({ "codec": codec, "blob": blob }),
    };
    let run = match existing {
        Some(run) => run,
        None => {
            let start = StartRun {
                workflow_id: workflow_id.clone(),
                workflow_type,
                namespace: namespace.to_owned(),
                task_queue: queue.clone(),
                arguments,
                memo: call.memo.clone(),
                search_attributes: call.search_attributes.clone(),
            };
            // The memo and search attributes meet memo_size_bytes and
            // search_attribute_size_bytes here, as any start's.
            let run = insert_run(conn, limits, &start, None, None)?;
            crate::store::cohorts::pin_to_promoted(conn, run, namespace, &queue)?;
            enqueue_workflow(conn, run)?;
            run
        }
    };
    conn.prepare_cached(
        "UPDATE service_calls SET linked_workflow_id = ?2, linked_run_id = ?3 WHERE id = ?1",
    )?
    .execute(params![call_id, workflow_id, run.0])?;
    fields.insert("service_call_id".into(), call_id.to_string().into());
    fields.insert("linked_workflow_instance_id".into(), workflow_id.into());
    fields.insert("linked_workflow_run_id".into(), run.0.to_string().into());
    // Only a sync call that waits for completion resumes at the outcome:
    // with `accepted` or in `async` mode both SDKs resume at the admission,
    // and a later terminal event would be a second result for one command.
    let waits = mode == "sync" && wait_for == "completed";
    if waits {
        conn.prepare_cached(
            "INSERT INTO service_call_waiters (caller_run_id, sequence, call_id, \
             linked_run_id, event_fields) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            caller.id.0,
            call.sequence,
            call_id,
            run.0,
            serde_json::to_string(&fields)?
        ])?;
    }
    let mut started = fields;
    started.insert("status".into(), "started".into());
    started.insert("request_payload".into(), call.request_payload.clone());
    started.insert("payload_codec".into(), codec.into());
    Ok(StartedCall {
        started: Some(Value::Object(started)),
        terminal: None,
        resumes_at_admission: !waits,
        woken: Some((namespace.to_owned(), queue)),
    })
}

/// Delivers the outcome of `run` (closing with `status` and its terminal
/// event's `payload`) to every workflow that awaits it through a service
/// call: the terminal `ServiceCall*` event at the caller's sequence and a
/// workflow task; the waiter rows go. Returns the task queue of the first
/// caller resumed (its pollers are woken; any other wakes at its pollers'
/// next look).
pub(crate) fn deliver(
    conn: &Connection,
    run: RunId,
    status: RunStatus,
    payload: &Value,
) -> Result<Option<String>, Error> {
    let waiters: Vec<(i64, i64, String)> = conn
        .prepare_cached(
            "SELECT caller_run_id, sequence, event_fields FROM service_call_waiters \
             WHERE linked_run_id = ?1 ORDER BY caller_run_id, sequence",
        )?
        .query_map(params![run.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    if waiters.is_empty() {
        return Ok(None);
    }
    conn.prepare_cached("DELETE FROM service_call_waiters WHERE linked_run_id = ?1")?
        .execute(params![run.0])?;
    let Some((event, outcome)) = outcome(status, payload) else {
        return Ok(None);
    };
    let mut first_queue = None;
    for (caller, _, fields) in waiters {
        let caller = RunId(caller);
        let (caller_status, queue): (String, String) = conn
            .prepare_cached("SELECT status, task_queue FROM runs WHERE id = ?1")?
            .query_row(params![caller.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
        if caller_status != RunStatus::Running.as_str() {
            continue;
        }
        let mut payload: Map<String, Value> = serde_json::from_str(&fields)?;
        payload.extend(outcome.clone());
        crate::store::rows::append_event(conn, caller, event, &Value::Object(payload), false)?;
        enqueue_workflow(conn, caller)?;
        first_queue.get_or_insert(queue);
    }
    Ok(first_queue)
}

/// The terminal event for a linked run that closed with `status`.
fn outcome(status: RunStatus, payload: &Value) -> Option<(EventType, Map<String, Value>)> {
    let mut out = Map::new();
    let text = |name: &str| payload.get(name).and_then(Value::as_str).unwrap_or("");
    let event = match status {
        RunStatus::Completed => {
            let result = payload.get("output").cloned().unwrap_or(Value::Null);
            out.insert("status".into(), "completed".into());
            out.insert("payload_codec".into(), codec_of(&result));
            out.insert("response_payload".into(), result);
            EventType::ServiceCallCompleted
        }
        RunStatus::Failed | RunStatus::Terminated => {
            let message = match (status, text("message"), text("reason")) {
                (RunStatus::Failed, "", _) => "the operation's workflow failed".to_owned(),
                (RunStatus::Failed, message, _) => message.to_owned(),
                (_, _, "") => "the operation's workflow was terminated".to_owned(),
                (_, _, reason) => format!("the operation's workflow was terminated: {reason}"),
            };
            let kind = if status == RunStatus::Failed {
                "handler_failed"
            } else {
                "handler_terminated"
            };
            out.insert("status".into(), "failed".into());
            out.insert("outcome".into(), kind.into());
            out.insert("message".into(), message.into());
            let exception_type = match text("exception_type") {
                "" => kind,
                other => other,
            };
            out.insert("exception_type".into(), exception_type.into());
            if let Some(exception) = payload.get("exception").filter(|e| !e.is_null()) {
                out.insert("exception".into(), exception.clone());
            }
            EventType::ServiceCallFailed
        }
        RunStatus::Cancelled => {
            out.insert("status".into(), "cancelled".into());
            out.insert("outcome".into(), "handler_cancelled".into());
            out.insert("exception_type".into(), "service_call_cancelled".into());
            out.insert(
                "message".into(),
                "the operation's workflow was cancelled".into(),
            );
            EventType::ServiceCallCancelled
        }
        RunStatus::ContinuedAsNew | RunStatus::Running => return None,
    };
    Some((event, out))
}

/// Moves the waiters of `closing` to `next`, the run that continues it: the
/// caller waits for the chain's last run.
pub(crate) fn follow_continue(conn: &Connection, closing: RunId, next: RunId) -> Result<(), Error> {
    conn.prepare_cached(
        "UPDATE service_call_waiters SET linked_run_id = ?2 WHERE linked_run_id = ?1",
    )?
    .execute(params![closing.0, next.0])?;
    Ok(())
}
