//! A run's describe answer as a struct serialized straight to the wire.
//!
//! describe is the request a busy server answers most (an SDK's `result()`
//! sends one every 50 to 500 ms per waiting client). Its answer was a
//! `serde_json::Value` tree, built key by key into a `BTreeMap`, then
//! walked to write the bytes and dropped: a third of describe's CPU beside
//! its reads. [`Description`] holds the same fields, taken from the store's
//! read without copies, and serializes to the same bytes: its fields are
//! declared in the order a `Value` map sorts its keys (serde_json keeps
//! keys sorted), and the fields only the detailed form carries are left
//! out when absent, as they were never inserted into the map. A test
//! holds both forms to the same bytes.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::server::wire;
use crate::server::ApiError;
use crate::store::archive::ArchiveMark;
use crate::store::control::RunDescription;
use crate::store::{PendingCounts, RunId, RunOrigin, RunStatus};

/// The flat description of a run (the detailed form when it carries the
/// run's input and terminal record).
#[derive(Debug, Serialize)]
pub struct Description {
    archive_reason: Option<String>,
    archived: bool,
    archived_at: Option<String>,
    closed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    closed_reason: Option<String>,
    compatibility: Option<String>,
    continued_from_run_id: Option<String>,
    continued_to_run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details_pruned_at: Option<Option<String>>,
    execution_deadline_at: Option<String>,
    execution_timeout_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failures: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    history_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    history_length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_envelope: Option<Value>,
    memo: Map<String, Value>,
    namespace: String,
    origin: RunOrigin,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_envelope: Option<Value>,
    parent_run_id: Option<String>,
    payload_codec: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending: Option<Pending>,
    recovery_kind: Option<&'static str>,
    // A redrive's successor: the failed step it resumes at.
    resume_step_sequence: Option<u64>,
    run_deadline_at: Option<String>,
    run_id: String,
    run_timeout_seconds: Option<u64>,
    search_attributes: Map<String, Value>,
    status: &'static str,
    status_bucket: &'static str,
    task_queue: String,
    workflow_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    workflow_task_failure: Option<TaskFailure>,
    workflow_type: String,
}

/// The run's open items, keys in sorted order.
#[derive(Debug, Serialize)]
struct Pending {
    activities: u64,
    children: u64,
    signals: u64,
    timers: u64,
    updates: u64,
}

/// Why the run's open workflow task last failed, keys in sorted order.
#[derive(Debug, Serialize)]
struct TaskFailure {
    failure: Value,
    next_attempt_at: String,
    workflow_task_attempt: u64,
}

impl Description {
    /// The description as a JSON value (for answers that embed it).
    pub fn into_value(self) -> Result<Value, ApiError> {
        serde_json::to_value(self).map_err(|e| ApiError::Internal(e.to_string()))
    }
}

/// The status a run is described with. An open native run is `running`
/// while its code has a workflow task ready or leased, and `waiting` while
/// it has none (it waits on an activity, a timer, a signal, a child, an
/// update, …), as both SDKs and the reference server name them. An
/// imported v1 projection never has tasks: it stays `running` until it
/// closes. A closed run is described by its terminal status.
fn wire_status(stored: &crate::store::Run, workflow_task_open: bool) -> &'static str {
    match stored.status {
        RunStatus::Running if stored.origin == RunOrigin::V2 && !workflow_task_open => "waiting",
        status => status.as_str(),
    }
}

/// The coarse bucket the SDKs read beside `status`: `running` for an open
/// run (running or waiting), `completed` for a run that completed or handed
/// over to its continuation, `failed` for one that failed, was cancelled or
/// was terminated.
fn status_bucket(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "running",
        RunStatus::Completed | RunStatus::ContinuedAsNew => "completed",
        RunStatus::Failed | RunStatus::Cancelled | RunStatus::Terminated => "failed",
    }
}

/// The flat description of `run` from what one read transaction found:
/// with `io` (the run's input and terminal record) the detailed form.
pub(crate) fn render_description(
    run: RunId,
    described: RunDescription,
    io: Option<(Value, Option<Value>)>,
    archive: Option<ArchiveMark>,
) -> Result<Description, ApiError> {
    let RunDescription {
        run: stored,
        closed_at_ms,
        details_pruned_at_ms,
        failures,
        timeouts,
        workflow_task_failure,
        workflow_task_open,
        ..
    } = described;
    let status = wire_status(&stored, workflow_task_open);
    let mut out = Description {
        archive_reason: None,
        archived: archive.is_some(),
        archived_at: archive.as_ref().map(|a| wire::timestamp(a.archived_at_ms)),
        closed_at: closed_at_ms.map(wire::timestamp),
        closed_reason: None,
        // The worker build its workflow tasks go to (null: any, or the
        // unversioned cohort's).
        compatibility: stored.build_id.filter(|b| !b.is_empty()),
        continued_from_run_id: stored.continued_from.map(wire::run_id),
        continued_to_run_id: stored.continued_to.map(wire::run_id),
        details_pruned_at: None,
        execution_deadline_at: timeouts.execution_deadline_at_ms.map(wire::timestamp),
        execution_timeout_seconds: timeouts.execution_timeout_seconds,
        failure: None,
        failures: None,
        history_bytes: None,
        history_length: None,
        input_envelope: None,
        memo: stored.memo,
        namespace: stored.namespace,
        origin: stored.origin,
        output_envelope: None,
        parent_run_id: stored.parent.map(wire::run_id),
        payload_codec: "avro".to_owned(),
        pending: None,
        recovery_kind: stored.resume_step_sequence.map(|_| "redrive"),
        resume_step_sequence: stored.resume_step_sequence,
        run_deadline_at: timeouts.run_deadline_at_ms.map(wire::timestamp),
        run_id: wire::run_id(run),
        run_timeout_seconds: timeouts.run_timeout_seconds,
        search_attributes: stored.search_attributes,
        status,
        status_bucket: status_bucket(stored.status),
        task_queue: stored.task_queue,
        workflow_id: stored.workflow_id,
        workflow_task_failure: workflow_task_failure.map(|failed| TaskFailure {
            failure: failed.failure,
            next_attempt_at: wire::timestamp(failed.next_attempt_at_ms),
            workflow_task_attempt: failed.attempt,
        }),
        workflow_type: stored.workflow_type,
    };
    out.archive_reason = archive.and_then(|a| a.reason);
    let Some((input, terminal)) = io else {
        return Ok(out);
    };
    out.payload_codec = wire::codec(&input);
    out.input_envelope = Some(input);
    if let Some(mut terminal) = terminal {
        let reason = terminal
            .get("closed_reason")
            .and_then(Value::as_str)
            .unwrap_or(stored.status.as_str())
            .to_owned();
        if stored.status == RunStatus::Completed {
            out.output_envelope = Some(
                terminal
                    .get_mut("output")
                    .map(Value::take)
                    .unwrap_or(Value::Null),
            );
        } else if stored.status == RunStatus::ContinuedAsNew {
            // No result and no failure: the run handed over to the next
            // (continued_to_run_id); the workflow's result is the chain's
            // last run's.
        } else {
            out.failure = Some(terminal);
        }
        out.closed_reason = Some(reason);
    }
    let PendingCounts {
        activities,
        timers,
        children,
        signals,
        updates,
    } = stored.pending;
    out.pending = Some(Pending {
        activities,
        children,
        signals,
        timers,
        updates,
    });
    out.history_length = Some(stored.history_length);
    out.history_bytes = Some(stored.history_bytes);
    out.details_pruned_at = Some(details_pruned_at_ms.map(wire::timestamp));
    // A failure row's fields as a map, sorted as the answer always had them.
    out.failures =
        Some(serde_json::to_value(&failures).map_err(|e| ApiError::Internal(e.to_string()))?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::control::WorkflowTaskFailure;
    use crate::store::{FailureRecord, Run, RunTimeouts};

    /// The answer as it was built before [`Description`]: a `Value` tree,
    /// key by key (kept here as the reference the struct must match).
    fn value_tree(
        run: RunId,
        described: RunDescription,
        io: Option<(Value, Option<Value>)>,
        archive: Option<ArchiveMark>,
    ) -> Value {
        let stored = &described.run;
        let mut out = json!({
            "workflow_id": stored.workflow_id,
            "run_id": wire::run_id(run),
            "workflow_type": stored.workflow_type,
            "namespace": stored.namespace,
            "task_queue": stored.task_queue,
            "status": wire_status(stored, described.workflow_task_open),
            "status_bucket": status_bucket(stored.status),
            "payload_codec": "avro",
            "memo": stored.memo,
            "search_attributes": stored.search_attributes,
            "closed_at": described.closed_at_ms.map(wire::timestamp),
            "execution_timeout_seconds": described.timeouts.execution_timeout_seconds,
            "run_timeout_seconds": described.timeouts.run_timeout_seconds,
            "execution_deadline_at": described.timeouts.execution_deadline_at_ms.map(wire::timestamp),
            "run_deadline_at": described.timeouts.run_deadline_at_ms.map(wire::timestamp),
            "origin": stored.origin,
            "archived": archive.is_some(),
            "archived_at": archive.as_ref().map(|a| wire::timestamp(a.archived_at_ms)),
            "archive_reason": archive.and_then(|a| a.reason),
            "continued_from_run_id": stored.continued_from.map(wire::run_id),
            "continued_to_run_id": stored.continued_to.map(wire::run_id),
            "parent_run_id": stored.parent.map(wire::run_id),
            "resume_step_sequence": stored.resume_step_sequence,
            "recovery_kind": stored.resume_step_sequence.map(|_| "redrive"),
            "compatibility": stored.build_id.as_deref().filter(|b| !b.is_empty()),
        });
        if let Some(failed) = &described.workflow_task_failure {
            out["workflow_task_failure"] = json!({
                "failure": failed.failure, "workflow_task_attempt": failed.attempt,
                "next_attempt_at": wire::timestamp(failed.next_attempt_at_ms),
            });
        }
        let Some((input, terminal)) = io else {
            return out;
        };
        let map = out.as_object_mut().expect("a JSON object");
        map.insert("payload_codec".into(), wire::codec(&input).into());
        map.insert("input_envelope".into(), input);
        if let Some(terminal) = &terminal {
            if stored.status == RunStatus::Completed {
                map.insert(
                    "output_envelope".into(),
                    terminal.get("output").cloned().unwrap_or(Value::Null),
                );
            } else if stored.status == RunStatus::ContinuedAsNew {
            } else {
                map.insert("failure".into(), terminal.clone());
            }
            let reason = terminal
                .get("closed_reason")
                .and_then(Value::as_str)
                .unwrap_or(stored.status.as_str());
            map.insert("closed_reason".into(), reason.into());
        }
        map.insert(
            "pending".into(),
            json!({
                "activities": stored.pending.activities, "timers": stored.pending.timers,
                "children": stored.pending.children, "signals": stored.pending.signals,
                "updates": stored.pending.updates,
            }),
        );
        map.insert("history_length".into(), stored.history_length.into());
        map.insert("history_bytes".into(), stored.history_bytes.into());
        map.insert(
            "details_pruned_at".into(),
            described.details_pruned_at_ms.map(wire::timestamp).into(),
        );
        map.insert(
            "failures".into(),
            serde_json::to_value(&described.failures).unwrap(),
        );
        out
    }

    fn run(status: RunStatus, full: bool) -> Run {
        let map = |k: &str, v: Value| {
            let mut m = Map::new();
            if full {
                m.insert(k.to_owned(), v);
            }
            m
        };
        Run {
            id: RunId(42),
            workflow_id: "order-\"7\"".into(),
            workflow_type: "Order".into(),
            namespace: "default".into(),
            task_queue: "orders".into(),
            status,
            origin: if full {
                RunOrigin::V1Projection
            } else {
                RunOrigin::V2
            },
            parent: full.then_some(RunId(7)),
            memo: map("note", json!({ "b": 2, "a": [1, "x"] })),
            search_attributes: map("CustomerId", json!("c-1")),
            pending: PendingCounts {
                activities: 1,
                timers: 2,
                children: 3,
                signals: 4,
                updates: 5,
            },
            history_length: 12,
            history_bytes: 3456,
            continued_from: full.then_some(RunId(41)),
            continued_to: full.then_some(RunId(43)),
            resume_step_sequence: full.then_some(9),
            build_id: if full {
                Some("b-1".into())
            } else {
                Some(String::new())
            },
        }
    }

    fn described(status: RunStatus, full: bool, open: bool) -> RunDescription {
        RunDescription {
            run: run(status, full),
            cancel_requested_at_ms: full.then_some(1_700_000_000_001),
            closed_at_ms: full.then_some(1_700_000_000_123),
            details_pruned_at_ms: full.then_some(1_700_000_100_000),
            failures: if full {
                vec![FailureRecord {
                    failure_category: "structural_limit".into(),
                    message: "too many".into(),
                    structural_limit_kind: Some("pending_activity_count".into()),
                    structural_limit_value: Some(11),
                    structural_limit_configured: Some(10),
                }]
            } else {
                Vec::new()
            },
            timeouts: if full {
                RunTimeouts {
                    execution_timeout_seconds: Some(600),
                    run_timeout_seconds: Some(60),
                    execution_deadline_at_ms: Some(1_700_000_600_000),
                    run_deadline_at_ms: Some(1_700_000_060_000),
                }
            } else {
                RunTimeouts::default()
            },
            workflow_task_failure: full.then(|| WorkflowTaskFailure {
                failure: json!({ "message": "replay diverged", "type": "NonDeterminism" }),
                attempt: 3,
                next_attempt_at_ms: 1_700_000_000_500,
            }),
            workflow_task_open: open,
        }
    }

    /// Every shape the answer takes: open (running, waiting) and closed
    /// every way, with and without the optional fields, brief and detailed,
    /// terminal records with and without output or a closed reason.
    #[test]
    fn the_struct_serializes_to_the_bytes_of_the_value_tree_it_replaced() {
        let statuses = RunStatus::ALL;
        let terminals = [
            None,
            Some(json!({ "output": { "codec": "json", "blob": "\"done\"" } })),
            Some(json!({ "message": "boom", "closed_reason": "timed_out" })),
            Some(json!({})),
        ];
        let archives = [
            None,
            Some(ArchiveMark {
                archived_at_ms: 1_700_000_200_000,
                reason: Some("kept".into()),
            }),
            Some(ArchiveMark {
                archived_at_ms: 1_700_000_200_000,
                reason: None,
            }),
        ];
        let mut compared = 0;
        for status in statuses {
            for full in [false, true] {
                for open in [false, true] {
                    for archive in &archives {
                        let brief = || described(status, full, open);
                        let expected = serde_json::to_vec(&value_tree(
                            RunId(42),
                            brief(),
                            None,
                            archive.clone(),
                        ))
                        .unwrap();
                        let answer =
                            render_description(RunId(42), brief(), None, archive.clone()).unwrap();
                        assert_eq!(
                            String::from_utf8(serde_json::to_vec(&answer).unwrap()).unwrap(),
                            String::from_utf8(expected.clone()).unwrap()
                        );
                        assert_eq!(
                            serde_json::to_vec(&answer.into_value().unwrap()).unwrap(),
                            expected
                        );
                        compared += 1;
                        for terminal in &terminals {
                            for input in [json!({ "codec": "json", "blob": "[1]" }), Value::Null] {
                                let io = Some((input, terminal.clone()));
                                let expected = serde_json::to_vec(&value_tree(
                                    RunId(42),
                                    brief(),
                                    io.clone(),
                                    archive.clone(),
                                ))
                                .unwrap();
                                let answer =
                                    render_description(RunId(42), brief(), io, archive.clone())
                                        .unwrap();
                                assert_eq!(
                                    String::from_utf8(serde_json::to_vec(&answer).unwrap())
                                        .unwrap(),
                                    String::from_utf8(expected).unwrap()
                                );
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 6 * 2 * 2 * 3 * (1 + 4 * 2));
    }
}
