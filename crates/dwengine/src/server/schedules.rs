//! `/api/schedules`: create, describe, list, pause, resume, trigger, delete,
//! and the sweep that fires due schedules.
//!
//! Shapes follow the published SDK (`create_schedule`, `describe_schedule`,
//! …) and the public server. A create is checked at the request boundary
//! like a start — memo bytes, workflow type and task queue lengths, search
//! attributes (limits and registration), the note's 1,000 characters —
//! plus the spec (five-field cron or ISO-8601 intervals, UTC). Every fire,
//! scheduled or triggered, starts its run through [`Engine::start_workflow`],
//! the same path as `POST /api/workflows`, with a request id per fire so a
//! retried fire converges on one run. The sweep reads at most
//! `server.schedules.due_schedule_scan_limit` due schedules per pass (a
//! declared scan limit) and claims each fire with a compare-and-set, so
//! nodes sharing a store never fire one due time twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::schedule_spec::{Cron, Interval, Spec};
use crate::server::error::finish_with;
use crate::server::wire::{self, Checks, StartWorkflow, MAX_DURATION_SECONDS};
use crate::server::{ApiError, Engine};
use crate::store::{FireRecord, RunStatus, ScheduleRow};

/// Longest schedule id: fired workflow ids are `<schedule id>-<suffix>`
/// and must stay within the 128-character workflow id.
pub const MAX_SCHEDULE_ID_CHARS: usize = 100;
/// Longest `note`, in characters (as the public server).
pub const MAX_NOTE_CHARS: usize = 1000;
/// The overlap policies served.
pub const OVERLAP_POLICIES: [&str; 4] = ["skip", "allow_all", "cancel_other", "terminate_other"];

/// The due-schedule sweep: its period and per-pass scan cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleSweep {
    /// Due schedules fired per pass at most.
    pub due_schedule_scan_limit: usize,
    /// Time between passes.
    pub interval: Duration,
}

impl ScheduleSweep {
    /// The configuration key of the per-pass cap.
    pub const SCAN_LIMIT_KEY: &'static str = "server.schedules.due_schedule_scan_limit";
    /// The cap's default.
    pub const DEFAULT_SCAN_LIMIT: usize = 100;
    /// The default period.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

    /// The cap read from `lookup` (0 or absent: the default), with `interval`.
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>, interval: Duration) -> Self {
        ScheduleSweep {
            due_schedule_scan_limit: lookup(Self::SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT),
            interval: interval.max(Duration::from_millis(10)),
        }
    }
}

impl Default for ScheduleSweep {
    fn default() -> Self {
        Self::from_config(|_| None, Self::DEFAULT_INTERVAL)
    }
}

/// `spec` of a schedule.
#[derive(Debug, Clone, Deserialize, serde::Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SpecBody {
    /// Five-field cron expressions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron_expressions: Option<Vec<String>>,
    /// `{"every": "PT1H", "offset": "PT5M"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Vec<IntervalBody>>,
    /// Only UTC is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// One interval rule.
#[derive(Debug, Clone, Deserialize, serde::Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct IntervalBody {
    /// The period (ISO-8601 duration).
    #[serde(default)]
    pub every: String,
    /// The phase (ISO-8601 duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
}

/// `action` of a schedule: the start each fire makes.
#[derive(Debug, Clone, Deserialize, serde::Serialize, Default)]
pub struct ActionBody {
    /// The workflow type.
    #[serde(default)]
    pub workflow_type: String,
    /// The task queue (default `default`).
    #[serde(default)]
    pub task_queue: Option<String>,
    /// The start input (opaque envelope).
    #[serde(default)]
    pub input: Value,
    /// Whole-execution budget, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_timeout_seconds: Option<i64>,
    /// One run's budget, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_timeout_seconds: Option<i64>,
}

/// `POST /api/schedules`.
#[derive(Debug, Deserialize, Default)]
pub struct CreateSchedule {
    /// The id (generated when absent).
    #[serde(default)]
    pub schedule_id: Option<String>,
    /// When it fires.
    #[serde(default)]
    pub spec: Option<SpecBody>,
    /// What it starts.
    #[serde(default)]
    pub action: Option<ActionBody>,
    /// `skip` (default), `allow_all`, `cancel_other` or `terminate_other`.
    #[serde(default)]
    pub overlap_policy: Option<String>,
    /// Recorded (0..=3600); fires are not delayed by it.
    #[serde(default)]
    pub jitter_seconds: Option<i64>,
    /// Fires at most this many runs.
    #[serde(default)]
    pub max_runs: Option<i64>,
    /// Memo of every started run.
    #[serde(default)]
    pub memo: Option<Map<String, Value>>,
    /// Search attributes of every started run.
    #[serde(default)]
    pub search_attributes: Option<Map<String, Value>>,
    /// Create paused.
    #[serde(default)]
    pub paused: bool,
    /// Operator note.
    #[serde(default)]
    pub note: Option<String>,
}

/// `POST …/pause` and `…/resume`.
#[derive(Debug, Deserialize, Default)]
pub struct NoteBody {
    /// Operator note (at most 1,000 characters).
    #[serde(default)]
    pub note: Option<String>,
}

/// `POST …/trigger`.
#[derive(Debug, Deserialize, Default)]
pub struct TriggerBody {
    /// This fire's overlap policy.
    #[serde(default)]
    pub overlap_policy: Option<String>,
}

/// `GET /api/schedules` query string.
#[derive(Debug, Deserialize, Default)]
pub struct ScheduleListQuery {
    /// `active` or `paused`.
    pub status: Option<String>,
    /// Page size (1..=1000, default 100).
    pub page_size: Option<String>,
    /// The previous page's token.
    pub next_page_token: Option<String>,
}

/// The stored definition: what a fire needs.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
struct Definition {
    spec: SpecBody,
    action: ActionBody,
    overlap_policy: String,
    jitter_seconds: i64,
    max_runs: Option<i64>,
    memo: Map<String, Value>,
    search_attributes: Map<String, Value>,
    note: Option<String>,
}

/// What one fire did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// A run started.
    Started {
        /// Its workflow id.
        workflow_id: String,
        /// Its run id.
        run_id: String,
    },
    /// The overlap policy skipped it.
    Skipped(String),
}

/// Parses a spec, reporting problems under `spec.…`.
fn parse_spec(spec: &SpecBody, checks: &mut Checks) -> Spec {
    let mut parsed = Spec::default();
    for (i, expression) in spec.cron_expressions.iter().flatten().enumerate() {
        match Cron::parse(expression) {
            Ok(cron) => parsed.crons.push(cron),
            Err(problem) => {
                checks.problem(&format!("spec.cron_expressions.{i}"), problem);
            }
        }
    }
    for (i, interval) in spec.intervals.iter().flatten().enumerate() {
        match Interval::parse(&interval.every, interval.offset.as_deref()) {
            Ok(rule) => parsed.intervals.push(rule),
            Err(problem) => {
                checks.problem(&format!("spec.intervals.{i}"), problem);
            }
        }
    }
    let rules = spec.cron_expressions.as_ref().map_or(0, Vec::len)
        + spec.intervals.as_ref().map_or(0, Vec::len);
    if rules == 0 {
        checks.problem(
            "spec",
            "The spec needs at least one cron expression or interval.",
        );
    }
    if let Some(zone) = spec.timezone.as_deref() {
        if !matches!(zone, "UTC" | "Etc/UTC" | "Z") {
            checks.problem(
                "spec.timezone",
                format!("The timezone {zone:?} is not served; schedules fire in UTC."),
            );
        }
    }
    parsed
}

fn overlap(policy: Option<&str>, checks: &mut Checks) -> String {
    let policy = policy.unwrap_or("skip");
    if !OVERLAP_POLICIES.contains(&policy) {
        checks.problem(
            "overlap_policy",
            format!(
                "The overlap_policy must be one of {}; buffer_one and buffer_all are not served.",
                OVERLAP_POLICIES.join(", ")
            ),
        );
    }
    policy.to_owned()
}

fn now_seconds() -> i64 {
    crate::unix_ms().div_euclid(1000)
}

/// A generated schedule id: time-ordered and unique within this process.
fn generated_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "sch-{}-{}",
        crate::unix_ms(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

impl Engine {
    /// `POST /api/schedules`: `(201, created)`.
    pub fn create_schedule(
        &self,
        namespace: &str,
        body: CreateSchedule,
    ) -> Result<(u16, Value), ApiError> {
        let mut v = self.config.request_limits.validator();
        let action = body.action.clone().unwrap_or_default();
        let spec = body.spec.clone().unwrap_or_default();
        let schedule_id = body.schedule_id.clone().unwrap_or_else(generated_id);
        v.text("schedule_id", &schedule_id, MAX_SCHEDULE_ID_CHARS);
        let task_queue = action
            .task_queue
            .clone()
            .unwrap_or_else(|| "default".into());
        v.workflow_type(&action.workflow_type)
            .task_queue(&task_queue);
        let memo = body.memo.clone().unwrap_or_default();
        let search = body.search_attributes.clone().unwrap_or_default();
        v.memo(&Value::Object(memo.clone()))
            .search_attributes(&search);
        if let Some(note) = &body.note {
            v.text("note", note, MAX_NOTE_CHARS);
        }
        let mut checks = Checks::default();
        let parsed = parse_spec(&spec, &mut checks);
        let policy = overlap(body.overlap_policy.as_deref(), &mut checks);
        checks
            .range("jitter_seconds", body.jitter_seconds, 0, 3600)
            .range("max_runs", body.max_runs, 1, i64::MAX)
            .range(
                "action.execution_timeout_seconds",
                action.execution_timeout_seconds,
                1,
                MAX_DURATION_SECONDS,
            )
            .range(
                "action.run_timeout_seconds",
                action.run_timeout_seconds,
                1,
                MAX_DURATION_SECONDS,
            )
            .inline_payload("action.input", &action.input);
        checks
            .problems
            .extend(self.unregistered_search_attributes(namespace, &search)?);
        if body.action.is_none() {
            checks.problem("action", "The action field is required.");
        }
        let required = [
            ("schedule_id", schedule_id.as_str()),
            ("action.workflow_type", action.workflow_type.as_str()),
        ];
        finish_with(v, &required, &checks.problems)?;
        let _slot = self.admit_namespace(namespace)?;
        let definition = Definition {
            spec,
            action: ActionBody {
                task_queue: Some(task_queue),
                ..action
            },
            overlap_policy: policy,
            jitter_seconds: body.jitter_seconds.unwrap_or(0),
            max_runs: body.max_runs,
            memo,
            search_attributes: search,
            note: body.note,
        };
        let document =
            serde_json::to_value(&definition).map_err(|e| ApiError::Internal(e.to_string()))?;
        let next = parsed.next_after(now_seconds()).map(|s| s * 1000);
        let (ns, id, paused, max_runs) = (
            namespace.to_owned(),
            schedule_id.clone(),
            body.paused,
            body.max_runs,
        );
        let created = self.write(move |s| {
            s.create_schedule(
                &ns,
                &id,
                &document,
                paused,
                if paused { None } else { next },
                max_runs,
            )
        })?;
        if !created {
            return Err(ApiError::ScheduleExists(schedule_id));
        }
        Ok((
            201,
            json!({ "schedule_id": schedule_id, "outcome": "created" }),
        ))
    }

    fn schedule_row(&self, namespace: &str, schedule_id: &str) -> Result<ScheduleRow, ApiError> {
        self.read(|s| s.schedule(namespace, schedule_id))?
            .ok_or_else(|| ApiError::ScheduleNotFound(schedule_id.to_owned()))
    }

    /// `GET /api/schedules/{id}`.
    pub fn describe_schedule(&self, namespace: &str, schedule_id: &str) -> Result<Value, ApiError> {
        let _slot = self.admit_namespace(namespace)?;
        Ok(schedule_json(&self.schedule_row(namespace, schedule_id)?))
    }

    /// `GET /api/schedules`: one page, in creation order.
    pub fn list_schedules(
        &self,
        namespace: &str,
        query: ScheduleListQuery,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let limit = wire::page_size(&mut checks, query.page_size.as_deref(), 100);
        let paused = match query.status.as_deref() {
            None => None,
            Some("active") => Some(false),
            Some("paused") => Some(true),
            Some(_) => {
                checks.problem("status", "The status field must be active or paused.");
                None
            }
        };
        let after = match query.next_page_token.as_deref() {
            None => 0,
            Some(token) => wire::parse_page_token(token)
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| ApiError::InvalidPageToken(token.to_owned()))?,
        };
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        let _slot = self.admit_namespace(namespace)?;
        let mut rows = self.read(|s| s.list_schedules(namespace, paused, after, limit + 1))?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = more
            .then(|| rows.last().map(|r| wire::page_token(r.id.unsigned_abs())))
            .flatten();
        Ok(json!({
            "schedules": rows.iter().map(schedule_json).collect::<Vec<_>>(),
            "next_page_token": next,
        }))
    }

    /// `POST …/pause` (`paused = true`) and `…/resume`.
    pub fn pause_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        paused: bool,
        body: NoteBody,
    ) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        if let Some(note) = &body.note {
            v.text("note", note, MAX_NOTE_CHARS);
        }
        v.finish()?;
        let _slot = self.admit_namespace(namespace)?;
        let row = self.schedule_row(namespace, schedule_id)?;
        // Resuming fires at the next time after now: a pause skips what it covered.
        let next = if paused {
            None
        } else {
            definition(&row)
                .map(|d| parse_spec(&d.spec, &mut Checks::default()))
                .and_then(|spec| spec.next_after(now_seconds()))
                .map(|s| s * 1000)
                .filter(|_| row.remaining_actions != Some(0))
        };
        let (ns, id) = (namespace.to_owned(), schedule_id.to_owned());
        if !self.write(move |s| s.set_schedule_paused(&ns, &id, paused, next))? {
            return Err(ApiError::ScheduleNotFound(schedule_id.to_owned()));
        }
        let outcome = if paused { "paused" } else { "resumed" };
        Ok(json!({ "schedule_id": schedule_id, "outcome": outcome, "note": body.note }))
    }

    /// `DELETE /api/schedules/{id}`; the runs it started keep running.
    pub fn delete_schedule(&self, namespace: &str, schedule_id: &str) -> Result<Value, ApiError> {
        let _slot = self.admit_namespace(namespace)?;
        let (ns, id) = (namespace.to_owned(), schedule_id.to_owned());
        if !self.write(move |s| s.delete_schedule(&ns, &id))? {
            return Err(ApiError::ScheduleNotFound(schedule_id.to_owned()));
        }
        Ok(json!({ "schedule_id": schedule_id, "outcome": "deleted" }))
    }

    /// `POST …/trigger`: fires now, outside the spec (paused or not).
    pub fn trigger_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        body: TriggerBody,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let policy = body
            .overlap_policy
            .as_deref()
            .map(|p| overlap(Some(p), &mut checks));
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        let row = self.schedule_row(namespace, schedule_id)?;
        let fired = self.fire(&row, None, policy.as_deref())?;
        Ok(match fired {
            Fired::Started {
                workflow_id,
                run_id,
            } => json!({
                "schedule_id": schedule_id, "outcome": "triggered",
                "workflow_id": workflow_id, "run_id": run_id,
            }),
            Fired::Skipped(reason) => json!({
                "schedule_id": schedule_id, "outcome": "skipped", "reason": reason,
            }),
        })
    }

    /// Fires `row` once: `due_at_ms` for a scheduled fire (its id suffix and
    /// request id), `None` for a manual trigger; `policy` overrides the overlap policy.
    fn fire(
        &self,
        row: &ScheduleRow,
        due_at_ms: Option<i64>,
        policy: Option<&str>,
    ) -> Result<Fired, ApiError> {
        let Some(definition) = definition(row) else {
            return Err(ApiError::Internal(format!(
                "schedule {} has an unreadable definition",
                row.schedule_id
            )));
        };
        let policy = policy.unwrap_or(&definition.overlap_policy);
        let (ns, id) = (row.namespace.as_str(), row.schedule_id.as_str());
        if let Some(run) = row.latest_run_id {
            let status = match self.read(|s| s.run(run)) {
                Ok(stored) => stored.status,
                Err(crate::store::Error::RunNotFound(_)) => RunStatus::Completed,
                Err(e) => return Err(e.into()),
            };
            if status == RunStatus::Running {
                match policy {
                    "skip" => {
                        let reason = format!("run {run} of the previous fire is still running");
                        let record = FireRecord::Skipped(reason.clone());
                        let (n, i) = (ns.to_owned(), id.to_owned());
                        self.write(move |s| s.record_schedule_fire(&n, &i, &record))?;
                        return Ok(Fired::Skipped(reason));
                    }
                    "cancel_other" | "terminate_other" => {
                        let terminate = policy == "terminate_other";
                        let why = format!("overlap policy {policy} of schedule {id}");
                        let stopped = self.write(move |s| {
                            if terminate {
                                s.terminate(run, &why, None)
                            } else {
                                s.cancel(run, &why, None)
                            }
                        });
                        match stopped {
                            Ok(_) | Err(crate::store::Error::RunNotActive { .. }) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    _ => {}
                }
            }
        }
        let suffix = match due_at_ms {
            Some(due) => due.div_euclid(1000).to_string(),
            None => format!("manual-{}", crate::unix_ms()),
        };
        let workflow_id = format!("{id}-{suffix}");
        let start = StartWorkflow {
            workflow_id: workflow_id.clone(),
            workflow_type: definition.action.workflow_type.clone(),
            task_queue: definition
                .action
                .task_queue
                .clone()
                .unwrap_or_else(|| "default".into()),
            input: definition.action.input.clone(),
            execution_timeout_seconds: definition.action.execution_timeout_seconds,
            run_timeout_seconds: definition.action.run_timeout_seconds,
            duplicate_policy: None,
            memo: Some(definition.memo.clone()),
            search_attributes: Some(definition.search_attributes.clone()),
            business_key: None,
            priority: None,
            request_id: Some(format!("schedule:{id}:{suffix}")),
        };
        let (n, i) = (ns.to_owned(), id.to_owned());
        match self.start_workflow(ns, start) {
            Ok((_, started)) => {
                let run_id = started["run_id"].as_str().unwrap_or_default().to_owned();
                let run = wire::parse_run_id(&run_id)
                    .ok_or_else(|| ApiError::Internal(format!("start answered run {run_id:?}")))?;
                let record = FireRecord::Started {
                    workflow_id: workflow_id.clone(),
                    run,
                };
                self.write(move |s| s.record_schedule_fire(&n, &i, &record))?;
                Ok(Fired::Started {
                    workflow_id,
                    run_id,
                })
            }
            Err(error) => {
                self.write(move |s| s.record_schedule_fire(&n, &i, &FireRecord::Failed))?;
                Err(error)
            }
        }
    }

    /// One sweep pass at `now_ms`: claims and fires at most the declared
    /// scan limit of due schedules; returns how many it fired or skipped.
    pub fn fire_due_schedules(&self, now_ms: i64) -> Result<usize, ApiError> {
        let limit = self.config.schedule_sweep.due_schedule_scan_limit;
        let due = self.read(|s| s.due_schedules(now_ms, limit))?;
        let mut fired = 0;
        for (namespace, schedule_id, due_at_ms) in due {
            let Some(row) = self.read(|s| s.schedule(&namespace, &schedule_id))? else {
                continue;
            };
            let next = definition(&row)
                .map(|d| parse_spec(&d.spec, &mut Checks::default()))
                .and_then(|spec| spec.next_after(due_at_ms.div_euclid(1000)))
                .map(|s| s * 1000);
            let (ns, id) = (namespace.clone(), schedule_id.clone());
            let claimed = self.write(move |s| s.claim_schedule_fire(&ns, &id, due_at_ms, next))?;
            if !claimed {
                continue;
            }
            match self.fire(&row, Some(due_at_ms), None) {
                Ok(_) => fired += 1,
                // Counted in failures_count; the schedule moves on.
                Err(error) => {
                    tracing::warn!(%error, %namespace, %schedule_id, "schedule fire failed")
                }
            }
        }
        Ok(fired)
    }
}

fn definition(row: &ScheduleRow) -> Option<Definition> {
    serde_json::from_value(row.definition.clone()).ok()
}

fn schedule_json(row: &ScheduleRow) -> Value {
    let d = &row.definition;
    let at = |ms: Option<i64>| ms.map(wire::timestamp);
    json!({
        "schedule_id": row.schedule_id,
        "status": if row.paused { "paused" } else { "active" },
        "spec": d["spec"], "action": d["action"], "overlap_policy": d["overlap_policy"],
        "note": d["note"], "memo": d["memo"], "search_attributes": d["search_attributes"],
        "jitter_seconds": d["jitter_seconds"], "max_runs": d["max_runs"],
        "remaining_actions": row.remaining_actions,
        "fires_count": row.fires_count, "failures_count": row.failures_count,
        "next_fire_at": at(row.next_fire_at_ms), "last_fired_at": at(row.last_fired_at_ms),
        "latest_workflow_instance_id": row.latest_workflow_id,
        "paused_at": at(row.paused_at_ms),
        "created_at": wire::timestamp(row.created_at_ms),
        "updated_at": wire::timestamp(row.updated_at_ms),
        "info": {
            "latest_run_id": row.latest_run_id.map(wire::run_id),
            "skipped_trigger_count": row.skipped_count,
            "last_skip_reason": row.last_skip_reason,
        },
    })
}

/// Runs [`Engine::fire_due_schedules`] every interval until the runtime stops.
pub(crate) async fn fire_forever(engine: Arc<Engine>) {
    let mut ticks = tokio::time::interval(engine.config.schedule_sweep.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let node = engine.clone();
        match tokio::task::spawn_blocking(move || node.fire_due_schedules(crate::unix_ms())).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "schedule sweep failed"),
            Err(error) => tracing::warn!(%error, "schedule sweep task failed"),
        }
    }
}
