//! Redrive: a failed run's successor.
//!
//! A run that failed because an activity failure reached the top of its
//! workflow code unhandled (the SDK's `fail_workflow` named the failed step,
//! and the run's history proved it: `WorkflowFailed` carries
//! `failed_step_sequence` with `failed_step_kind: activity`) can be
//! redriven: a new run of the same workflow id (type, queue, input, memo,
//! search attributes, timeouts afresh) starts in one transaction with the
//! failed run's completed activity prefix copied into its history, each
//! copied event naming the run it is reused from. The SDK's replay answers
//! those activities from history and schedules the failed step again; the
//! activities before it are not run again.
//!
//! What may be redriven is held to what replays safely: the failed run must
//! be the workflow id's newest run, not archived (read-only) nor pruned by
//! history retention (its history is gone: `410`), and its
//! history a linear prefix of
//! remote activities (no timers, signals, children, local activities,
//! markers, …): step 1 to the failed step, each completed once with an
//! inline result, the failed step failed once. Anything else is refused
//! with the reason naming what was found, and nothing is written.
//!
//! A redrive is a run like any other: the same structural limits (its start
//! is checked as a start is), counters, retention and per-run caps. A
//! request id makes a retried redrive converge on the successor it started.

use dwpolicy::{LimitKind, RunRef, StructuralLimits};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::store::connection::Store;
use crate::store::db::{params, Connection, OptionalExtension};
use crate::store::deadlines::{run_deadline, run_timeouts};
use crate::store::dispatch::enqueue_first_workflow_task;
use crate::store::error::Error;
use crate::store::history::{read_page, HistoryPageLimit};
use crate::store::model::{EventType, HistoryEvent, RunId, RunOrigin, RunStatus, StartRun};
use crate::store::rows::{append_event, insert_run_with, load_run, now_ms, to_u64, RunOptions};
use crate::store::tx::WriteTx;

/// A redrive that started (or, retried with its request id, had started)
/// a successor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redriven {
    /// The successor run.
    pub run: RunId,
    /// The failed step it resumes at.
    pub resume_step_sequence: u64,
    /// Its workflow type.
    pub workflow_type: String,
    /// Its task queue.
    pub task_queue: String,
    /// Whether an earlier call with the same request id started it.
    pub duplicate: bool,
}

/// Why a run cannot be redriven: the protocol's reason and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedriveRefusal {
    /// The HTTP status (409; 410 for a run whose history is gone).
    pub status: u16,
    /// `run_not_failed`, `source_run_not_current`, …
    pub reason: &'static str,
    /// What was found and what to do.
    pub message: String,
}

/// What a redrive call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveOutcome {
    /// A successor exists.
    Redriven(Redriven),
    /// Nothing was written.
    Refused(RedriveRefusal),
}

fn refuse(reason: &'static str, message: impl Into<String>) -> RedriveOutcome {
    RedriveOutcome::Refused(RedriveRefusal {
        status: 409,
        reason,
        message: message.into(),
    })
}

impl Store {
    /// Records the workflow definition fingerprints `worker` registered
    /// (workflow type -> fingerprint; `None`: none) on its registration.
    pub fn set_definition_fingerprints(
        &self,
        namespace: &str,
        worker: &str,
        fingerprints: Option<&serde_json::Map<String, Value>>,
    ) -> Result<(), Error> {
        let text = fingerprints
            .filter(|f| !f.is_empty())
            .map(serde_json::to_string)
            .transpose()?;
        self.conn
            .prepare_cached(
                "UPDATE workers SET workflow_definition_fingerprints = ?3 \
                 WHERE namespace = ?1 AND worker_id = ?2",
            )?
            .execute(params![namespace, worker, text])?;
        Ok(())
    }

    /// The successor an earlier redrive with `request_id` started for
    /// (`namespace`, `workflow_id`): `(successor, the run it redrove)`.
    pub fn redriven_by(
        &self,
        namespace: &str,
        workflow_id: &str,
        request_id: &str,
    ) -> Result<Option<(Redriven, RunId)>, Error> {
        redriven_by(&self.conn, namespace, workflow_id, request_id)
    }

    /// Redrives the failed run `source` (of `workflow_id` in `namespace`):
    /// in one transaction, a retried request id's successor is answered
    /// again, or the run's eligibility is checked and its successor started
    /// with the completed prefix and its first workflow task queued.
    pub fn redrive(
        &self,
        namespace: &str,
        workflow_id: &str,
        source: RunId,
        request_id: Option<&str>,
    ) -> Result<RedriveOutcome, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        if let Some(id) = request_id {
            if let Some((earlier, from)) = redriven_by(&tx, namespace, workflow_id, id)? {
                if from == source {
                    return Ok(RedriveOutcome::Redriven(earlier));
                }
                return Ok(refuse(
                    "request_id_already_used",
                    format!(
                        "request_id {id:?} already redrove run {} of this workflow; \
                         send a new request_id to redrive run {}",
                        from.0, source.0
                    ),
                ));
            }
        }
        let run = load_run(&tx, source)?;
        if run.namespace != namespace || run.workflow_id != workflow_id {
            return Err(Error::RunNotFound(source));
        }
        if let Some(refused) = check_source(&tx, &run)? {
            return Ok(refused);
        }
        let run_ref = RunRef {
            workflow_run_id: &run.workflow_id,
            workflow_type: &run.workflow_type,
        };
        let (started, plan) = match plan(&tx, source, &self.config.limits, &run_ref)? {
            Ok(found) => found,
            Err(refused) => return Ok(refused),
        };
        if let Some(refused) = check_definition(&tx, &run, plan.fingerprint.as_deref())? {
            return Ok(refused);
        }
        let arguments = started
            .payload
            .get("arguments")
            .cloned()
            .unwrap_or(Value::Null);
        if mentions_external_payload(&arguments) {
            return Ok(refuse(
                "unsupported_source_link_or_payload",
                "the failed run's input is an external payload reference, which a \
                 redrive does not copy; start a new run instead",
            ));
        }
        let timeouts = run_timeouts(&tx, source)?;
        let created = now_ms();
        let start = StartRun {
            workflow_id: run.workflow_id.clone(),
            workflow_type: run.workflow_type.clone(),
            namespace: run.namespace.clone(),
            task_queue: run.task_queue.clone(),
            arguments,
            memo: run.memo.clone(),
            search_attributes: run.search_attributes.clone(),
        };
        // A redrive is a new attempt at the workflow: its timeouts start
        // afresh from its own start, as a start's would.
        let options = RunOptions {
            start_request_id: None,
            execution_timeout_seconds: timeouts.execution_timeout_seconds,
            run_timeout_seconds: timeouts.run_timeout_seconds,
            deadline: run_deadline(
                created,
                timeouts.execution_timeout_seconds,
                timeouts.run_timeout_seconds,
            ),
            created_at_ms: created,
            redrive: Some((plan.resume_step_sequence, request_id)),
        };
        let next = insert_run_with(
            &tx,
            &self.config.limits,
            &start,
            None,
            Some(source),
            options,
        )?;
        // A fresh start of the workflow id: its queue's promoted cohort,
        // as `POST /api/workflows` would pin it (the redrive's fingerprint
        // check already holds every worker of the queue to the failed code).
        crate::store::cohorts::pin_to_promoted(&tx, next, &start.namespace, &start.task_queue)?;
        let reused_from = source.0.to_string();
        for step in &plan.completed {
            let mut scheduled = step.scheduled.clone();
            scheduled["reused_from_run_id"] = reused_from.clone().into();
            append_event(&tx, next, EventType::ActivityScheduled, &scheduled, true)?;
            let mut completed = step.completed.clone();
            if let Some(id) = completed.get("activity_execution_id").cloned() {
                completed["reused_activity_execution_id"] = id;
            }
            completed["reused_from_run_id"] = reused_from.clone().into();
            append_event(&tx, next, EventType::ActivityCompleted, &completed, false)?;
        }
        tx.prepare_cached("UPDATE runs SET continued_to_run_id = ?2 WHERE id = ?1")?
            .execute(params![source.0, next.0])?;
        enqueue_first_workflow_task(&tx, next, &start.namespace, &start.task_queue)?;
        tx.commit()?;
        Ok(RedriveOutcome::Redriven(Redriven {
            run: next,
            resume_step_sequence: plan.resume_step_sequence,
            workflow_type: start.workflow_type,
            task_queue: start.task_queue,
            duplicate: false,
        }))
    }
}

fn redriven_by(
    conn: &Connection,
    namespace: &str,
    workflow_id: &str,
    request_id: &str,
) -> Result<Option<(Redriven, RunId)>, Error> {
    /// id, continued from, resume step, workflow type, task queue.
    type Row = (i64, Option<i64>, Option<i64>, String, String);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT id, continued_from_run_id, resume_step_sequence, workflow_type, task_queue \
             FROM runs WHERE namespace = ?1 AND workflow_id = ?2 AND redrive_request_id = ?3",
        )?
        .query_row(params![namespace, workflow_id, request_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    Ok(
        row.and_then(|(id, from, resume, workflow_type, task_queue)| {
            Some((
                Redriven {
                    run: RunId(id),
                    resume_step_sequence: to_u64(resume?),
                    workflow_type,
                    task_queue,
                    duplicate: true,
                },
                RunId(from?),
            ))
        }),
    )
}

/// The run-level checks: failed, native, not a child, the newest run.
fn check_source(
    conn: &Connection,
    run: &crate::store::model::Run,
) -> Result<Option<RedriveOutcome>, Error> {
    if run.status != RunStatus::Failed {
        return Ok(Some(refuse(
            "run_not_failed",
            format!(
                "run {} is {}; only a failed run can be redriven",
                run.id.0,
                run.status.as_str()
            ),
        )));
    }
    if run.origin != RunOrigin::V2 {
        return Ok(Some(refuse(
            "unsupported_source_link_or_payload",
            "an imported v1 projection is read-only and cannot be redriven",
        )));
    }
    // An archived run is read-only (the reference server's `run_archived`):
    // it stays readable by id, but nothing starts from it. A run whose
    // history retention pruned is gone for good: nothing is left to reuse.
    let (archived, pruned): (Option<i64>, Option<i64>) = conn
        .prepare_cached("SELECT archived_at_ms, details_pruned_at FROM runs WHERE id = ?1")?
        .query_row([run.id.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
    if pruned.is_some() {
        return Ok(Some(RedriveOutcome::Refused(RedriveRefusal {
            status: 410,
            reason: "history_pruned",
            message: format!(
                "run {}'s history was pruned by history retention, so no completed step \
                 is left to reuse; start a new run of the workflow instead",
                run.id.0
            ),
        })));
    }
    if archived.is_some() {
        return Ok(Some(refuse(
            "run_archived",
            format!(
                "run {} is archived, and an archived run is read-only: it cannot be \
                 redriven; start a new run of the workflow instead",
                run.id.0
            ),
        )));
    }
    if run.parent.is_some() {
        return Ok(Some(refuse(
            "unsupported_source_link_or_payload",
            "a child run cannot be redriven (its parent already saw it fail); \
             redrive the parent instead",
        )));
    }
    let newest: i64 = conn
        .prepare_cached(
            "SELECT id FROM runs WHERE namespace = ?1 AND workflow_id = ?2 \
             ORDER BY id DESC LIMIT 1",
        )?
        .query_row(params![run.namespace, run.workflow_id], |r| r.get(0))?;
    if newest != run.id.0 {
        return Ok(Some(refuse(
            "source_run_not_current",
            format!(
                "run {} is not this workflow's newest run ({newest} is); \
                 only the newest run can be redriven",
                run.id.0
            ),
        )));
    }
    Ok(None)
}

/// One completed step of the prefix, as the failed run recorded it.
struct CompletedStep {
    scheduled: Value,
    completed: Value,
}

/// What the successor starts with.
struct Plan {
    resume_step_sequence: u64,
    completed: Vec<CompletedStep>,
    /// The definition fingerprint of the worker that failed the run.
    fingerprint: Option<String>,
}

/// The fingerprint `worker` (of `namespace`) registered for `workflow_type`.
pub(crate) fn registered_fingerprint(
    conn: &Connection,
    namespace: &str,
    worker: &str,
    workflow_type: &str,
) -> Result<Option<String>, Error> {
    let text: Option<Option<String>> = conn
        .prepare_cached(
            "SELECT workflow_definition_fingerprints FROM workers \
             WHERE namespace = ?1 AND worker_id = ?2",
        )?
        .query_row(params![namespace, worker], |r| r.get(0))
        .optional()?;
    let Some(text) = text.flatten() else {
        return Ok(None);
    };
    let map: Value = serde_json::from_str(&text)?;
    Ok(map
        .get(workflow_type)
        .and_then(Value::as_str)
        .map(str::to_owned))
}

/// Safe redrive: the failed run's worker registered a definition
/// fingerprint for its type, and the workers of its queue that register
/// one for that type today register the same one (at least one does), so
/// the successor replays its reused prefix on the code that recorded it.
fn check_definition(
    conn: &Connection,
    run: &crate::store::model::Run,
    recorded: Option<&str>,
) -> Result<Option<RedriveOutcome>, Error> {
    let Some(recorded) = recorded else {
        return Ok(Some(refuse(
            "workflow_definition_unavailable_or_changed",
            format!(
                "the worker that failed run {} registered no workflow definition \
                 fingerprint for {:?}, so nothing shows the successor would replay the \
                 reused steps on the same code (the Python SDK sends one; a Rust worker \
                 sets it with Worker::set_workflow_definition_sources)",
                run.id.0, run.workflow_type
            ),
        )));
    };
    let mut statement = conn.prepare_cached(
        "SELECT workflow_definition_fingerprints FROM workers \
         WHERE namespace = ?1 AND task_queue = ?2 AND workflow_definition_fingerprints IS NOT NULL",
    )?;
    let mut rows = statement.query(params![run.namespace, run.task_queue])?;
    let (mut same, mut changed) = (0usize, 0usize);
    while let Some(row) = rows.next()? {
        let text: String = row.get(0)?;
        let map: Value = serde_json::from_str(&text)?;
        match map.get(&run.workflow_type).and_then(Value::as_str) {
            Some(current) if current == recorded => same += 1,
            Some(_) => changed += 1,
            None => {}
        }
    }
    if same == 0 || changed > 0 {
        return Ok(Some(refuse(
            "workflow_definition_unavailable_or_changed",
            format!(
                "{same} registered worker(s) of task queue {:?} run the definition of {:?} \
                 that failed run {} and {changed} run another: redrive once the queue's \
                 workers run that definition (or start a new run)",
                run.task_queue, run.workflow_type, run.id.0
            ),
        )));
    }
    Ok(None)
}

/// One activity step's events, gathered by sequence.
#[derive(Default)]
struct Step {
    activity_type: Option<String>,
    scheduled: Option<Value>,
    completed: Option<Value>,
    completions: u32,
    failures: u32,
}

/// The failed run's history walked page by page: its `WorkflowStarted` and
/// the completed prefix, or the refusal naming the first thing that does
/// not replay safely. Reads at most the run's own history, which its
/// structural limits bound.
fn plan(
    conn: &Connection,
    run: RunId,
    limits: &StructuralLimits,
    run_ref: &RunRef<'_>,
) -> Result<Result<(HistoryEvent, Plan), RedriveOutcome>, Error> {
    let mut started: Option<HistoryEvent> = None;
    let mut failure: Option<Value> = None;
    let mut steps: BTreeMap<i64, Step> = BTreeMap::new();
    let mut from = 0u64;
    loop {
        let page = read_page(conn, run, from, HistoryPageLimit::default())?;
        for event in page.events {
            if failure.is_some() {
                return Ok(Err(refuse(
                    "events_after_failure",
                    format!(
                        "event {} ({}) follows the run's WorkflowFailed",
                        event.sequence,
                        event.event_type.as_str()
                    ),
                )));
            }
            match event.event_type {
                EventType::WorkflowStarted if started.is_none() => started = Some(event),
                EventType::WorkflowStarted => {
                    return Ok(Err(refuse("duplicate_start", "the history starts twice")))
                }
                _ if started.is_none() => {
                    return Ok(Err(refuse(
                        "missing_start",
                        "the history does not begin with WorkflowStarted",
                    )))
                }
                EventType::WorkflowFailed => failure = Some(event.payload),
                EventType::ActivityScheduled
                | EventType::ActivityCompleted
                | EventType::ActivityFailed => {
                    if let Err(refused) = gather(&mut steps, event) {
                        return Ok(Err(refused));
                    }
                }
                other => {
                    return Ok(Err(refuse(
                        "unsupported_history",
                        format!(
                            "event {} is {}: only a history of activities (scheduled, \
                             completed, failed) between the start and the failure can be \
                             redriven",
                            event.sequence,
                            other.as_str()
                        ),
                    )))
                }
            }
        }
        // The successor's start writes its WorkflowStarted and two events
        // per step before the failed one, in one transaction: held to the
        // events one workflow task may write, checked as the pages come so
        // no more than that is ever held.
        let copied = 1 + 2 * steps.len().saturating_sub(1) as u64;
        if let Err(exceeded) = limits.check(LimitKind::HistoryTransactionSize, copied, run_ref) {
            return Err(exceeded.into());
        }
        match page.next_sequence {
            Some(next) => from = next,
            None => break,
        }
    }
    let (Some(started), Some(failure)) = (started, failure) else {
        return Ok(Err(refuse(
            "missing_terminal_history",
            "the history does not end with WorkflowFailed",
        )));
    };
    let boundary = failure
        .get("failed_step_sequence")
        .and_then(Value::as_i64)
        .filter(|step| *step >= 1);
    let kind = failure.get("failed_step_kind").and_then(Value::as_str);
    let Some(boundary) = boundary.filter(|_| kind == Some("activity")) else {
        return Ok(Err(refuse(
            "unrecorded_failure_boundary",
            "the run's failure names no failed activity step: it failed in workflow \
             code, not by an activity failure it left unhandled, so there is no step \
             to resume at",
        )));
    };
    let expected: Vec<i64> = (1..=boundary).collect();
    if steps.keys().copied().ne(expected.iter().copied()) {
        return Ok(Err(refuse(
            "activity_sequence_gap",
            format!(
                "the history's activity steps are not 1 to {boundary} (the failed step) \
                 with none after it"
            ),
        )));
    }
    let mut completed = Vec::new();
    for (sequence, step) in steps {
        if sequence == boundary {
            if step.completions != 0 || step.failures != 1 {
                return Ok(Err(refuse(
                    "invalid_failed_step",
                    format!("step {sequence} did not fail exactly once"),
                )));
            }
            continue;
        }
        let (Some(scheduled), Some(done)) = (step.scheduled, step.completed) else {
            return Ok(Err(refuse(
                "incomplete_activity_prefix",
                format!("step {sequence}, before the failed step, did not complete"),
            )));
        };
        if step.failures != 0 || step.completions != 1 {
            return Ok(Err(refuse(
                "incomplete_activity_prefix",
                format!("step {sequence}, before the failed step, did not complete exactly once"),
            )));
        }
        if done.get("result").is_none() || !done.get("payload_codec").is_some_and(Value::is_string)
        {
            return Ok(Err(refuse(
                "missing_activity_result",
                format!("step {sequence}'s completion records no result and codec"),
            )));
        }
        if mentions_external_payload(&done) {
            return Ok(Err(refuse(
                "external_activity_result_not_supported",
                format!(
                    "step {sequence}'s result is an external payload reference, which a \
                     redrive does not copy"
                ),
            )));
        }
        completed.push(CompletedStep {
            scheduled,
            completed: done,
        });
    }
    let fingerprint = failure
        .get("workflow_definition_fingerprint")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Ok((
        started,
        Plan {
            resume_step_sequence: to_u64(boundary),
            completed,
            fingerprint,
        },
    )))
}

/// Files one activity event under its step.
fn gather(steps: &mut BTreeMap<i64, Step>, event: HistoryEvent) -> Result<(), RedriveOutcome> {
    let payload = event.payload;
    let local = payload.get("local_activity").and_then(Value::as_bool) == Some(true)
        || payload.get("execution_mode").and_then(Value::as_str) == Some("local");
    if local {
        return Err(refuse(
            "unsupported_local_activity",
            format!(
                "event {} records a local activity, which a redrive does not reuse",
                event.sequence
            ),
        ));
    }
    let Some(sequence) = payload
        .get("sequence")
        .and_then(Value::as_i64)
        .filter(|s| *s >= 1)
    else {
        return Err(refuse(
            "invalid_activity_sequence",
            format!("event {} has no step sequence", event.sequence),
        ));
    };
    let Some(activity_type) = payload
        .get("activity_type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
    else {
        return Err(refuse(
            "missing_activity_type",
            format!("event {} names no activity type", event.sequence),
        ));
    };
    let step = steps.entry(sequence).or_default();
    if step
        .activity_type
        .as_ref()
        .is_some_and(|known| *known != activity_type)
    {
        return Err(refuse(
            "activity_type_mismatch",
            format!("step {sequence}'s events name two activity types"),
        ));
    }
    step.activity_type = Some(activity_type);
    match event.event_type {
        EventType::ActivityScheduled if step.scheduled.is_none() => step.scheduled = Some(payload),
        EventType::ActivityScheduled => {
            return Err(refuse(
                "invalid_activity_sequence",
                format!("step {sequence} is scheduled twice"),
            ))
        }
        EventType::ActivityCompleted => {
            step.completions += 1;
            step.completed = Some(payload);
        }
        _ => step.failures += 1,
    }
    Ok(())
}

/// Whether `value` holds an external payload reference (in either form).
fn mentions_external_payload(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            map.contains_key("external_storage")
                || map.contains_key("external_payload")
                || map.values().any(mentions_external_payload)
        }
        Value::Array(items) => items.iter().any(mentions_external_payload),
        _ => false,
    }
}
