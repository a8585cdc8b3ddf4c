//! `/api/schedules`: create, describe, list, update, pause, resume,
//! trigger, backfill, delete, and the sweep that fires due schedules.
//!
//! Shapes follow the published SDK (`create_schedule`, `update_schedule`,
//! `backfill_schedule`, …) and the public server. A create or an update is
//! checked at the request boundary like a start — memo bytes, workflow type
//! and task queue lengths, search attributes (limits and registration), the
//! note's 1,000 characters, jitter of at most an hour — plus the spec
//! (five-field cron read in the spec's IANA `timezone`, or ISO-8601
//! intervals). Every fire, scheduled, triggered, backfilled or drained from
//! a buffer, starts its run through [`Engine::start_workflow`], the same
//! path as `POST /api/workflows`, with a request id per fire so a retried
//! fire converges on one run.
//!
//! Overlap policies: `skip` drops a fire while the last run is open,
//! `allow_all` starts it anyway, `cancel_other`/`terminate_other` stop the
//! open run first, and `buffer_one`/`buffer_all` keep the fire until the
//! open run closes (at most one, or at most [`ScheduleSweep::max_buffered_fires`];
//! a fire past that is dropped as `buffer_full`). Jitter delays each
//! scheduled fire by a per-fire amount derived from the schedule and the
//! fire's spec time (the same on every node), always before the next spec
//! time, so jittered fires keep their order.
//!
//! The sweep reads at most `server.schedules.due_schedule_scan_limit` due
//! schedules per pass (a declared scan limit), claims them all in one
//! transaction, each with a compare-and-set, so nodes sharing a store never
//! fire one due time twice, and fires them several at once so their starts
//! share commits; a pass whose scan came back full is followed at once by
//! another. A schedule that is behind (downtime, a failover, a backlog)
//! catches up in one pass by its overlap policy, within
//! `server.schedules.catchup_window_seconds`, instead of firing each
//! missed moment late ([`catch_up`]); how far behind the sweep is, is
//! `dw_schedule_lag_seconds`. The same pass drains at most the scan limit
//! of schedules whose buffered fire may start because their run closed.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::durable_state::DurableResource;
use crate::schedule_spec::{parse_zone, Cron, Interval, Spec};
use crate::server::error::finish_with;
use crate::server::wire::{self, Checks, StartWorkflow, MAX_DURATION_SECONDS};
use crate::server::{ApiError, Engine};
use crate::store::{
    AuditEvent, AuditRow, DueSchedule, Error as StoreError, FireGate, FireRecord, NextFire, RunId,
    RunStatus, ScheduleRow, Store, DELETED_SCHEDULE_AUDIT_RETENTION_MS,
};

/// Longest schedule id: fired workflow ids are `<schedule id>-<suffix>`
/// and must stay within the 128-character workflow id.
pub const MAX_SCHEDULE_ID_CHARS: usize = 100;
/// Longest `note`, in characters (as the public server).
pub const MAX_NOTE_CHARS: usize = 1000;
/// Longest jitter, in seconds.
pub const MAX_JITTER_SECONDS: i64 = 3600;
/// The overlap policies served.
pub const OVERLAP_POLICIES: [&str; 6] = [
    "skip",
    "buffer_one",
    "buffer_all",
    "allow_all",
    "cancel_other",
    "terminate_other",
];
/// The overlap policy of a backfill that names none: every moment of the
/// window gets its run (the point of a backfill), however long each runs.
pub const BACKFILL_OVERLAP_POLICY: &str = "allow_all";

/// The due-schedule sweep: its period and per-pass scan cap, the
/// catch-up window, and the fixed caps on buffered, caught-up and
/// backfilled fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleSweep {
    /// Due schedules fired per pass at most (and buffered schedules drained).
    pub due_schedule_scan_limit: usize,
    /// Time between passes.
    pub interval: Duration,
    /// How far back a behind schedule catches up: moments older than this
    /// are skipped, not fired late.
    pub catchup_window: Duration,
    /// Fires a `buffer_all` schedule holds at most (`buffer_one` holds one).
    pub max_buffered_fires: usize,
    /// Fires an `allow_all` schedule makes at most for one catch-up.
    pub max_catchup_fires: usize,
    /// Fires one backfill request may start at most.
    pub max_backfill_fires: usize,
}

impl ScheduleSweep {
    /// The configuration key of the per-pass cap.
    pub const SCAN_LIMIT_KEY: &'static str = "server.schedules.due_schedule_scan_limit";
    /// The cap's default.
    pub const DEFAULT_SCAN_LIMIT: usize = 100;
    /// The default period.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
    /// The configuration key of the catch-up window, in seconds.
    pub const CATCHUP_WINDOW_KEY: &'static str = "server.schedules.catchup_window_seconds";
    /// The catch-up window's default: an hour (a restart or a failover
    /// shorter than that still fires what it missed, by overlap policy).
    pub const DEFAULT_CATCHUP_WINDOW: Duration = Duration::from_secs(3600);
    /// The longest catch-up window: a day.
    pub const MAX_CATCHUP_WINDOW: Duration = Duration::from_secs(86_400);
    /// The `buffer_all` cap.
    pub const MAX_BUFFERED_FIRES: usize = 100;
    /// The `allow_all` catch-up cap (the buffer's, so no policy starts more
    /// runs for a backlog than `buffer_all` would hold).
    pub const MAX_CATCHUP_FIRES: usize = 100;
    /// The backfill cap (as the public server's).
    pub const MAX_BACKFILL_FIRES: usize = 1000;

    /// The cap read from `lookup` (0 or absent: the default), with `interval`.
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>, interval: Duration) -> Self {
        ScheduleSweep {
            due_schedule_scan_limit: lookup(Self::SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT),
            interval: interval.max(Duration::from_millis(10)),
            catchup_window: Self::DEFAULT_CATCHUP_WINDOW,
            max_buffered_fires: Self::MAX_BUFFERED_FIRES,
            max_catchup_fires: Self::MAX_CATCHUP_FIRES,
            max_backfill_fires: Self::MAX_BACKFILL_FIRES,
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
    /// The IANA zone cron expressions are read in (default UTC).
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
    /// One of [`OVERLAP_POLICIES`] (default `skip`).
    #[serde(default)]
    pub overlap_policy: Option<String>,
    /// Delay of each scheduled fire at most (0..=3600 seconds).
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

/// `PUT /api/schedules/{id}`: only the fields present change; `action`
/// fields merge over the stored action.
#[derive(Debug, Deserialize, Default)]
pub struct UpdateSchedule {
    /// A new spec (replaces the old one whole).
    #[serde(default)]
    pub spec: Option<SpecBody>,
    /// Action fields to change.
    #[serde(default)]
    pub action: Option<Map<String, Value>>,
    /// A new overlap policy.
    #[serde(default)]
    pub overlap_policy: Option<String>,
    /// A new jitter.
    #[serde(default)]
    pub jitter_seconds: Option<i64>,
    /// A new run cap (fires already made count against it).
    #[serde(default)]
    pub max_runs: Option<i64>,
    /// A new memo.
    #[serde(default)]
    pub memo: Option<Map<String, Value>>,
    /// New search attributes.
    #[serde(default)]
    pub search_attributes: Option<Map<String, Value>>,
    /// A new note.
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

/// `POST …/backfill`.
#[derive(Debug, Deserialize, Default)]
pub struct BackfillBody {
    /// The window's start (RFC 3339, inclusive).
    #[serde(default)]
    pub start_time: String,
    /// The window's end (RFC 3339, exclusive).
    #[serde(default)]
    pub end_time: String,
    /// The overlap policy of every fire (default [`BACKFILL_OVERLAP_POLICY`]).
    #[serde(default)]
    pub overlap_policy: Option<String>,
}

/// `GET /api/schedules` query string.
#[derive(Debug, Deserialize, Default)]
pub struct ScheduleListQuery {
    /// `active` or `paused`.
    pub status: Option<String>,
    /// Only schedules whose action starts this workflow type.
    pub workflow_type: Option<String>,
    /// A visibility query: not served (refused rather than ignored).
    pub query: Option<String>,
    /// Page size (1..=1000, default 100).
    pub page_size: Option<String>,
    /// The previous page's token.
    pub next_page_token: Option<String>,
}

/// `GET /api/schedules/{id}/history` query string.
#[derive(Debug, Deserialize, Default)]
pub struct ScheduleHistoryQuery {
    /// Page size, clamped into 1..=500 (default 100).
    pub limit: Option<String>,
    /// The last sequence already read (default 0: from the start).
    pub after_sequence: Option<String>,
}

/// The audit page size when none is asked for.
pub const HISTORY_PAGE_DEFAULT: usize = 100;
/// The largest audit page (a larger `limit` is clamped).
pub const HISTORY_PAGE_MAX: usize = 500;

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
    /// This fire's run already existed (a repeated backfill of the moment).
    Existing {
        /// Its workflow id.
        workflow_id: String,
        /// Its run id.
        run_id: String,
    },
    /// The overlap policy skipped it.
    Skipped(String),
    /// Kept until the open run closes; the buffer's depth afterwards.
    Buffered(usize),
    /// The buffer was full: dropped.
    BufferFull(String),
}

/// Which fire: its workflow-id suffix (the request id derives from it),
/// how it came about, and its spec time.
#[derive(Debug, Clone)]
struct FireOf {
    suffix: String,
    trigger: &'static str,
    scheduled_at_ms: Option<i64>,
}

impl FireOf {
    fn at(trigger: &'static str, nominal_ms: i64) -> FireOf {
        FireOf {
            suffix: nominal_ms.div_euclid(1000).to_string(),
            trigger,
            scheduled_at_ms: Some(nominal_ms),
        }
    }

    /// A trigger: `manual-<ms>`, the milliseconds kept strictly increasing
    /// within this process so two triggers never share a workflow id.
    fn manual() -> FireOf {
        static LAST: AtomicI64 = AtomicI64::new(0);
        let now = crate::unix_ms();
        let previous = LAST
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or(now);
        FireOf {
            suffix: format!("manual-{}", now.max(previous + 1)),
            trigger: "manual",
            scheduled_at_ms: None,
        }
    }

    /// As kept in the buffer.
    fn to_json(&self) -> Value {
        json!({
            "suffix": self.suffix, "trigger": self.trigger,
            "scheduled_at_ms": self.scheduled_at_ms, "buffered_at_ms": crate::unix_ms(),
        })
    }

    fn from_json(entry: &Value) -> Option<FireOf> {
        let trigger = match entry.get("trigger")?.as_str()? {
            "scheduled" => "scheduled",
            "manual" => "manual",
            "backfill" => "backfill",
            _ => return None,
        };
        Some(FireOf {
            suffix: entry.get("suffix")?.as_str()?.to_owned(),
            trigger,
            scheduled_at_ms: entry.get("scheduled_at_ms").and_then(Value::as_i64),
        })
    }
}

/// Fires a schedule makes at most for one moment when other fires keep
/// committing starts between its read and its own start.
const FIRE_RACE_ATTEMPTS: usize = 3;

/// A schedule fire's start as the start transaction sees it: the gate it
/// must pass there and the record it leaves there, so the overlap decision
/// and the run commit together and a racing fire sees this one's run.
pub(crate) struct ScheduleStart {
    pub(crate) namespace: String,
    pub(crate) schedule_id: String,
    pub(crate) gate: FireGate,
    fire: FireOf,
}

impl ScheduleStart {
    /// Counts the started run and remembers it among the recent actions.
    pub(crate) fn record(
        &self,
        s: &Store,
        workflow_id: &str,
        run: RunId,
    ) -> Result<(), StoreError> {
        let fired = Fired::Started {
            workflow_id: workflow_id.to_owned(),
            run_id: wire::run_id(run),
        };
        let record = FireRecord::Started {
            workflow_id: workflow_id.to_owned(),
            run,
        };
        let action = action_json(&self.fire, Some(&fired));
        s.record_schedule_fire(&self.namespace, &self.schedule_id, &record, &action)
    }
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
        match parse_zone(zone) {
            Ok(zone) => parsed.zone = zone,
            Err(problem) => {
                checks.problem("spec.timezone", problem);
            }
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
                "The overlap_policy must be one of {}.",
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

/// FNV-1a: a hash every node computes alike (std's hasher may change
/// between Rust releases, and nodes may run different builds).
fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.iter().chain(&[0xff]) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// The fire after `after_seconds`: its spec time, delayed by this fire's
/// jitter — at most `jitter_seconds`, and always before the spec time after it.
fn next_fire(
    namespace: &str,
    schedule_id: &str,
    spec: &Spec,
    jitter_seconds: i64,
    after_seconds: i64,
) -> Option<NextFire> {
    let nominal = spec.next_after(after_seconds)?;
    let nominal_ms = nominal.saturating_mul(1000);
    let mut window = jitter_seconds.max(0).saturating_mul(1000);
    if let Some(following) = spec.next_after(nominal) {
        window = window.min((following - nominal).saturating_mul(1000) - 1);
    }
    let delay = if window > 0 {
        let hash = stable_hash(&[
            namespace.as_bytes(),
            schedule_id.as_bytes(),
            &nominal.to_le_bytes(),
        ]);
        i64::try_from(hash % (window.unsigned_abs() + 1)).unwrap_or(0)
    } else {
        0
    };
    Some(NextFire {
        at_ms: nominal_ms.saturating_add(delay),
        nominal_ms,
    })
}

impl Engine {
    /// The boundary checks of a whole definition (create, or an update's result).
    fn check_definition(
        &self,
        namespace: &str,
        schedule_id: &str,
        d: &Definition,
        extra: Vec<(String, String)>,
    ) -> Result<Spec, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.text("schedule_id", schedule_id, MAX_SCHEDULE_ID_CHARS);
        let task_queue = d.action.task_queue.as_deref().unwrap_or("default");
        v.workflow_type(&d.action.workflow_type)
            .task_queue(task_queue);
        v.memo(&Value::Object(d.memo.clone()))
            .search_attributes(&d.search_attributes);
        if let Some(note) = &d.note {
            v.text("note", note, MAX_NOTE_CHARS);
        }
        let mut checks = Checks { problems: extra };
        let parsed = parse_spec(&d.spec, &mut checks);
        overlap(Some(d.overlap_policy.as_str()), &mut checks);
        checks
            .range(
                "jitter_seconds",
                Some(d.jitter_seconds),
                0,
                MAX_JITTER_SECONDS,
            )
            .range("max_runs", d.max_runs, 1, i64::MAX)
            .range(
                "action.execution_timeout_seconds",
                d.action.execution_timeout_seconds,
                1,
                MAX_DURATION_SECONDS,
            )
            .range(
                "action.run_timeout_seconds",
                d.action.run_timeout_seconds,
                1,
                MAX_DURATION_SECONDS,
            )
            .inline_payload("action.input", &d.action.input);
        checks
            .problems
            .extend(self.unregistered_search_attributes(namespace, &d.search_attributes)?);
        let required = [
            ("schedule_id", schedule_id),
            ("action.workflow_type", d.action.workflow_type.as_str()),
        ];
        finish_with(v, &required, &checks.problems)?;
        self.verify_payload_references(namespace, &[("action.input", &d.action.input)])?;
        Ok(parsed)
    }

    /// `POST /api/schedules`: `(201, created)`.
    pub fn create_schedule(
        &self,
        namespace: &str,
        body: CreateSchedule,
    ) -> Result<(u16, Value), ApiError> {
        let schedule_id = body.schedule_id.clone().unwrap_or_else(generated_id);
        let mut extra = Vec::new();
        if body.action.is_none() {
            extra.push((
                "action".to_owned(),
                "The action field is required.".to_owned(),
            ));
        }
        let mut action = body.action.unwrap_or_default();
        action.task_queue = Some(action.task_queue.unwrap_or_else(|| "default".into()));
        let definition = Definition {
            spec: body.spec.unwrap_or_default(),
            action,
            overlap_policy: body.overlap_policy.unwrap_or_else(|| "skip".into()),
            jitter_seconds: body.jitter_seconds.unwrap_or(0),
            max_runs: body.max_runs,
            memo: body.memo.unwrap_or_default(),
            search_attributes: body.search_attributes.unwrap_or_default(),
            note: body.note,
        };
        let parsed = self.check_definition(namespace, &schedule_id, &definition, extra)?;
        let _slot = self.admit_namespace(namespace)?;
        let document =
            serde_json::to_value(&definition).map_err(|e| ApiError::Internal(e.to_string()))?;
        let next = next_fire(
            namespace,
            &schedule_id,
            &parsed,
            definition.jitter_seconds,
            now_seconds(),
        );
        let (ns, id, paused, max_runs) = (
            namespace.to_owned(),
            schedule_id.clone(),
            body.paused,
            body.max_runs,
        );
        // Counted in the create's transaction; a duplicate adds nothing.
        let created =
            self.write_within_quota(namespace, &[DurableResource::Schedules], move |s| {
                s.create_schedule(&ns, &id, &document, paused, next, max_runs)
            })??;
        if !created {
            return Err(ApiError::ScheduleExists(schedule_id));
        }
        Ok((
            201,
            json!({ "schedule_id": schedule_id, "outcome": "created" }),
        ))
    }

    /// `PUT /api/schedules/{id}`: changes the fields present, checked as a
    /// create is; the next fire is recomputed from now.
    pub fn update_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        body: UpdateSchedule,
    ) -> Result<Value, ApiError> {
        let row = self.schedule_row(namespace, schedule_id)?;
        let mut d = definition(&row)?;
        let mut extra = Vec::new();
        let fields: Vec<&str> = [
            ("spec", body.spec.is_some()),
            ("action", body.action.is_some()),
            ("overlap_policy", body.overlap_policy.is_some()),
            ("jitter_seconds", body.jitter_seconds.is_some()),
            ("max_runs", body.max_runs.is_some()),
            ("memo", body.memo.is_some()),
            ("search_attributes", body.search_attributes.is_some()),
            ("note", body.note.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
        .collect();
        if let Some(spec) = body.spec {
            d.spec = spec;
        }
        if let Some(patch) = body.action {
            let mut merged = match serde_json::to_value(&d.action) {
                Ok(Value::Object(map)) => map,
                _ => Map::new(),
            };
            merged.extend(patch);
            match serde_json::from_value::<ActionBody>(Value::Object(merged)) {
                Ok(action) => d.action = action,
                Err(e) => extra.push(("action".to_owned(), format!("The action is invalid: {e}."))),
            }
        }
        if let Some(policy) = body.overlap_policy {
            d.overlap_policy = policy;
        }
        if let Some(jitter) = body.jitter_seconds {
            d.jitter_seconds = jitter;
        }
        if body.max_runs.is_some() {
            d.max_runs = body.max_runs;
        }
        if let Some(memo) = body.memo {
            d.memo = memo;
        }
        if let Some(search) = body.search_attributes {
            d.search_attributes = search;
        }
        if body.note.is_some() {
            d.note = body.note;
        }
        let parsed = self.check_definition(namespace, schedule_id, &d, extra)?;
        let _slot = self.admit_namespace(namespace)?;
        // Fires already made count against a new cap.
        let remaining = d.max_runs.map(|max| (max - row.fires_count).max(0));
        let next = next_fire(
            namespace,
            schedule_id,
            &parsed,
            d.jitter_seconds,
            now_seconds(),
        )
        .filter(|_| remaining != Some(0));
        let document = serde_json::to_value(&d).map_err(|e| ApiError::Internal(e.to_string()))?;
        let (ns, id) = (namespace.to_owned(), schedule_id.to_owned());
        let audit = AuditEvent {
            event_type: "ScheduleUpdated",
            payload: json!({ "fields": fields, "note": d.note }),
        };
        if !self.write(move |s| s.update_schedule(&ns, &id, &document, next, remaining, &audit))? {
            return Err(ApiError::ScheduleNotFound(schedule_id.to_owned()));
        }
        Ok(json!({ "schedule_id": schedule_id, "outcome": "updated" }))
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
        if query.query.is_some() {
            checks.problem(
                "query",
                "Visibility queries over schedules are not served; filter by status and workflow_type.",
            );
        }
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
        let workflow_type = query.workflow_type;
        let mut rows = self.read(|s| {
            s.list_schedules(
                namespace,
                paused,
                workflow_type.as_deref(),
                after,
                limit + 1,
            )
        })?;
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

    /// `POST …/pause` (`paused = true`) and `…/resume`; a `note` replaces the schedule's.
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
            let d = definition(&row)?;
            let spec = parse_spec(&d.spec, &mut Checks::default());
            next_fire(
                namespace,
                schedule_id,
                &spec,
                d.jitter_seconds,
                now_seconds(),
            )
            .filter(|_| row.remaining_actions != Some(0))
        };
        let (ns, id, note) = (
            namespace.to_owned(),
            schedule_id.to_owned(),
            body.note.clone(),
        );
        let audit = AuditEvent {
            event_type: if paused {
                "SchedulePaused"
            } else {
                "ScheduleResumed"
            },
            payload: json!({ "note": body.note }),
        };
        if !self.write(move |s| {
            s.set_schedule_paused(&ns, &id, paused, next, note.as_deref(), &audit)
        })? {
            return Err(ApiError::ScheduleNotFound(schedule_id.to_owned()));
        }
        let outcome = if paused { "paused" } else { "resumed" };
        Ok(json!({ "schedule_id": schedule_id, "outcome": outcome, "note": body.note }))
    }

    /// `DELETE /api/schedules/{id}`; the runs it started keep running.
    pub fn delete_schedule(&self, namespace: &str, schedule_id: &str) -> Result<Value, ApiError> {
        let _slot = self.admit_namespace(namespace)?;
        let (ns, id) = (namespace.to_owned(), schedule_id.to_owned());
        let audit = AuditEvent {
            event_type: "ScheduleDeleted",
            payload: json!({}),
        };
        if !self.write(move |s| s.delete_schedule(&ns, &id, &audit))? {
            return Err(ApiError::ScheduleNotFound(schedule_id.to_owned()));
        }
        Ok(json!({ "schedule_id": schedule_id, "outcome": "deleted" }))
    }

    /// `GET /api/schedules/{id}/history`: one page of the audit stream,
    /// oldest first, after `after_sequence`; a deleted schedule's stream
    /// stays readable until its retention ends.
    pub fn schedule_history(
        &self,
        namespace: &str,
        schedule_id: &str,
        query: ScheduleHistoryQuery,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let limit = match query.limit.as_deref().map(str::trim) {
            None | Some("") => HISTORY_PAGE_DEFAULT,
            Some(text) => match text.parse::<i64>() {
                // Clamped into 1..=500, as the SDK documents.
                Ok(n) => usize::try_from(n.clamp(1, HISTORY_PAGE_MAX as i64)).unwrap_or(1),
                Err(_) => {
                    checks.problem("limit", "The limit field must be an integer.");
                    HISTORY_PAGE_DEFAULT
                }
            },
        };
        let after = match query.after_sequence.as_deref().map(str::trim) {
            None | Some("") => 0,
            Some(text) => match text.parse::<i64>() {
                Ok(n) if n >= 0 => n,
                _ => {
                    checks.problem(
                        "after_sequence",
                        "The after_sequence field must be a non-negative integer.",
                    );
                    0
                }
            },
        };
        finish_with(
            self.config.request_limits.validator(),
            &[],
            &checks.problems,
        )?;
        let _slot = self.admit_namespace(namespace)?;
        let (mut rows, known) = self.read(|s| {
            let rows = s.schedule_audit(namespace, schedule_id, after, limit + 1)?;
            let known = !rows.is_empty()
                || s.schedule_audit_exists(namespace, schedule_id)?
                || s.schedule(namespace, schedule_id)?.is_some();
            Ok((rows, known))
        })?;
        if !known {
            return Err(ApiError::ScheduleNotFound(schedule_id.to_owned()));
        }
        let has_more = rows.len() > limit;
        rows.truncate(limit);
        let next_cursor = has_more.then(|| rows.last().map(|r| r.sequence)).flatten();
        Ok(json!({
            "schedule_id": schedule_id, "namespace": namespace,
            "events": rows.iter().map(audit_json).collect::<Vec<_>>(),
            "has_more": has_more, "next_cursor": next_cursor,
        }))
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
        let mut answer = json!({ "schedule_id": schedule_id });
        let fired = self.fire(&row, &FireOf::manual(), policy.as_deref())?;
        // A trigger reports a started (or already started) run as
        // "triggered"; every other outcome reads as it does for a backfill.
        let triggered = matches!(fired, Fired::Started { .. } | Fired::Existing { .. });
        describe_fired(&mut answer, fired);
        if triggered {
            answer["outcome"] = "triggered".into();
        }
        Ok(answer)
    }

    /// `POST …/backfill`: fires once for every spec time in
    /// `[start_time, end_time)`, oldest first, each under the backfill's
    /// overlap policy; a window of more than the backfill cap is refused.
    /// Each fire has the workflow id and request id its scheduled fire
    /// would have had, so backfilling a moment twice starts one run.
    pub fn backfill_schedule(
        &self,
        namespace: &str,
        schedule_id: &str,
        body: BackfillBody,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let policy = overlap(
            Some(
                body.overlap_policy
                    .as_deref()
                    .unwrap_or(BACKFILL_OVERLAP_POLICY),
            ),
            &mut checks,
        );
        let mut instant = |field: &str, text: &str| -> Option<i64> {
            if text.trim().is_empty() {
                return None;
            }
            match text.trim().parse::<jiff::Timestamp>() {
                Ok(at) => Some(at.as_millisecond()),
                Err(_) => {
                    checks.problem(
                        field,
                        format!(
                            "The {field} field must be an RFC 3339 time with an offset, such as 2026-12-01T00:00:00Z."
                        ),
                    );
                    None
                }
            }
        };
        let start = instant("start_time", &body.start_time);
        let end = instant("end_time", &body.end_time);
        if let (Some(start), Some(end)) = (start, end) {
            if end <= start {
                checks.problem("end_time", "The end_time must be after the start_time.");
            }
        }
        let required = [
            ("start_time", body.start_time.as_str()),
            ("end_time", body.end_time.as_str()),
        ];
        let row = self.schedule_row(namespace, schedule_id)?;
        let d = definition(&row)?;
        let spec = parse_spec(&d.spec, &mut Checks::default());
        let cap = self.config.schedule_sweep.max_backfill_fires;
        let mut moments = Vec::new();
        if let (Some(start), Some(end)) = (start, end) {
            // Inclusive start: the search begins just before its first whole second.
            let mut cursor = start.div_euclid(1000) - i64::from(start.rem_euclid(1000) == 0);
            while let Some(at) = spec.next_after(cursor) {
                if at.saturating_mul(1000) >= end {
                    break;
                }
                if moments.len() == cap {
                    checks.problem(
                        "end_time",
                        format!(
                            "The window holds more than {cap} fires; backfill it in smaller windows."
                        ),
                    );
                    break;
                }
                moments.push(at.saturating_mul(1000));
                cursor = at;
            }
        }
        finish_with(
            self.config.request_limits.validator(),
            &required,
            &checks.problems,
        )?;
        let mut results = Vec::with_capacity(moments.len());
        for nominal_ms in moments {
            // Later fires see the runs earlier ones started.
            let row = self.schedule_row(namespace, schedule_id)?;
            let fire = FireOf::at("backfill", nominal_ms);
            let mut result = json!({ "fire_time": wire::timestamp(nominal_ms) });
            match self.fire(&row, &fire, Some(&policy)) {
                Ok(fired) => describe_fired(&mut result, fired),
                Err(error) => {
                    result["outcome"] = "failed".into();
                    result["reason"] = error.to_string().into();
                }
            }
            results.push(result);
        }
        Ok(json!({
            "schedule_id": schedule_id, "outcome": "backfill_started",
            "fires_attempted": results.len(), "results": results,
        }))
    }

    /// Fires `row` once as `fire` under `policy` (default: the schedule's).
    /// When another fire's start commits between this one's read and its
    /// start, the decision is made again on what that fire left.
    fn fire(
        &self,
        row: &ScheduleRow,
        fire: &FireOf,
        policy: Option<&str>,
    ) -> Result<Fired, ApiError> {
        let mut fresh: Option<ScheduleRow> = None;
        for _ in 0..FIRE_RACE_ATTEMPTS {
            if let Some(fired) = self.fire_once(fresh.as_ref().unwrap_or(row), fire, policy)? {
                return Ok(fired);
            }
            fresh = Some(self.schedule_row(&row.namespace, &row.schedule_id)?);
        }
        let reason = format!(
            "other fires of the schedule started runs first, {FIRE_RACE_ATTEMPTS} times in a row"
        );
        let fired = Fired::Skipped(reason.clone());
        self.record(
            fresh.as_ref().unwrap_or(row),
            fire,
            &FireRecord::Skipped(reason),
            &fired,
        )?;
        Ok(fired)
    }

    /// One decision on `row`: `None` when its start's gate did not pass.
    fn fire_once(
        &self,
        row: &ScheduleRow,
        fire: &FireOf,
        policy: Option<&str>,
    ) -> Result<Option<Fired>, ApiError> {
        let d = definition(row)?;
        let policy = policy.unwrap_or(&d.overlap_policy);
        let (ns, id) = (row.namespace.as_str(), row.schedule_id.as_str());
        let open_run = match row.latest_run_id {
            Some(run) => match self.read(|s| s.run(run)) {
                Ok(stored) => (stored.status == RunStatus::Running).then_some(run),
                Err(crate::store::Error::RunNotFound(_)) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let buffering = matches!(policy, "buffer_one" | "buffer_all");
        // A buffer drains oldest first: a fire behind buffered ones waits too.
        if buffering && (open_run.is_some() || !row.buffered.is_empty()) {
            let capacity = if policy == "buffer_one" {
                1
            } else {
                self.config.schedule_sweep.max_buffered_fires
            };
            let entry = fire.to_json();
            let (n, i) = (ns.to_owned(), id.to_owned());
            let buffered = self.write(move |s| s.buffer_schedule_fire(&n, &i, &entry, capacity))?;
            let (record, fired) = match buffered {
                Some(depth) => (FireRecord::Buffered, Fired::Buffered(depth)),
                None => {
                    let reason = format!(
                        "the {policy} buffer already holds {capacity} fire(s) while a run is open"
                    );
                    (
                        FireRecord::Skipped(reason.clone()),
                        Fired::BufferFull(reason),
                    )
                }
            };
            self.record(row, fire, &record, &fired)?;
            return Ok(Some(fired));
        }
        if let Some(run) = open_run {
            match policy {
                "skip" => {
                    let reason = format!("run {run} of the previous fire is still running");
                    let fired = Fired::Skipped(reason.clone());
                    self.record(row, fire, &FireRecord::Skipped(reason), &fired)?;
                    return Ok(Some(fired));
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
        // What was decided on the read must still hold when the run commits.
        let gate = match policy {
            "skip" => FireGate::NoOpenRun {
                empty_buffer: false,
            },
            "buffer_one" | "buffer_all" => FireGate::NoOpenRun { empty_buffer: true },
            _ => FireGate::Always,
        };
        self.start_fire(row, &d, fire, gate)
    }

    /// Starts `fire`'s run through the start path, its gate checked and its
    /// outcome recorded in the start's transaction; `None` when the gate
    /// did not pass (nothing was written).
    fn start_fire(
        &self,
        row: &ScheduleRow,
        d: &Definition,
        fire: &FireOf,
        gate: FireGate,
    ) -> Result<Option<Fired>, ApiError> {
        let id = row.schedule_id.as_str();
        let workflow_id = format!("{id}-{}", fire.suffix);
        let start = StartWorkflow {
            workflow_id: workflow_id.clone(),
            workflow_type: d.action.workflow_type.clone(),
            task_queue: d
                .action
                .task_queue
                .clone()
                .unwrap_or_else(|| "default".into()),
            input: d.action.input.clone(),
            execution_timeout_seconds: d.action.execution_timeout_seconds,
            run_timeout_seconds: d.action.run_timeout_seconds,
            duplicate_policy: None,
            memo: Some(d.memo.clone()),
            search_attributes: Some(d.search_attributes.clone()),
            business_key: None,
            priority: None,
            request_id: Some(format!("schedule:{id}:{}", fire.suffix)),
            build_id: None,
            compatibility: None,
        };
        let schedule = ScheduleStart {
            namespace: row.namespace.clone(),
            schedule_id: row.schedule_id.clone(),
            gate,
            fire: fire.clone(),
        };
        match self.start_workflow_as(&row.namespace, start, Some(schedule)) {
            Ok(None) => Ok(None),
            Ok(Some((status, started))) => {
                let run_id = started["run_id"].as_str().unwrap_or_default().to_owned();
                if status == 200 {
                    // The same fire again (a retried or repeated backfill): no new run.
                    return Ok(Some(Fired::Existing {
                        workflow_id,
                        run_id,
                    }));
                }
                // Counted in the start's transaction ([`ScheduleStart::record`]).
                Ok(Some(Fired::Started {
                    workflow_id,
                    run_id,
                }))
            }
            Err(error) => {
                let mut action = action_json(fire, None);
                action["outcome"] = "failed".into();
                action["reason"] = error.to_string().into();
                let (n, i) = (row.namespace.clone(), row.schedule_id.clone());
                self.write(move |s| s.record_schedule_fire(&n, &i, &FireRecord::Failed, &action))?;
                Err(error)
            }
        }
    }

    /// Counts a fire and remembers it among the recent actions.
    fn record(
        &self,
        row: &ScheduleRow,
        fire: &FireOf,
        record: &FireRecord,
        fired: &Fired,
    ) -> Result<(), ApiError> {
        let action = action_json(fire, Some(fired));
        let (n, i, record) = (
            row.namespace.clone(),
            row.schedule_id.clone(),
            record.clone(),
        );
        self.write(move |s| s.record_schedule_fire(&n, &i, &record, &action))?;
        Ok(())
    }

    /// One sweep pass at `now_ms`: first starts the oldest buffered fire of
    /// at most the declared scan limit of schedules whose run closed, then
    /// claims and fires at most that many due schedules, each caught up by
    /// its overlap policy ([`catch_up`]); returns how many fires it
    /// started, skipped or buffered (moments a catch-up passed over are
    /// counted on the schedule, not here).
    pub fn fire_due_schedules(&self, now_ms: i64) -> Result<usize, ApiError> {
        Ok(self.schedule_pass(now_ms, true)?.fired)
    }

    /// How far behind the scheduler is at `now_ms`, in milliseconds: now
    /// minus the fire time of the earliest fire an active schedule still
    /// owes (0 when none is due). Read from the store, so every node
    /// reports the same backlog whichever holds the sweep.
    pub fn schedule_lag_ms(&self, now_ms: i64) -> Result<i64, ApiError> {
        let earliest = self.read(|s| s.earliest_schedule_fire())?;
        Ok(earliest.map_or(0, |at| now_ms.saturating_sub(at).max(0)))
    }

    /// One pass; `prune` also deletes expired audit streams of deleted
    /// schedules (once per tick: the passes that follow a full one skip it).
    fn schedule_pass(&self, now_ms: i64, prune: bool) -> Result<Pass, ApiError> {
        let sweep = self.config.schedule_sweep;
        let limit = sweep.due_schedule_scan_limit;
        let mut fired = self.drain_buffers(limit)?;
        if prune {
            let cutoff = now_ms.saturating_sub(DELETED_SCHEDULE_AUDIT_RETENTION_MS);
            self.write(move |s| s.prune_deleted_schedule_audit(cutoff, limit))?;
        }
        // One snapshot: the due rows (one index scan) and their schedules.
        let due = self.read(|s| {
            let due = s.due_schedules(now_ms, limit)?;
            let scanned = due.len();
            let mut rows = Vec::with_capacity(scanned);
            for due in due {
                if let Some(row) = s.schedule(&due.namespace, &due.schedule_id)? {
                    rows.push((due, row));
                }
            }
            Ok((scanned, rows))
        })?;
        let (scanned, rows) = due;
        if rows.is_empty() {
            return Ok(Pass {
                fired,
                full: scanned >= limit,
            });
        }
        let plans: Vec<(DueSchedule, ScheduleRow, CatchUp)> = rows
            .into_iter()
            .map(|(due, row)| {
                let plan = catch_up(&row, &due, now_ms, &sweep);
                (due, row, plan)
            })
            .collect();
        // One transaction claims every fire of the pass (each a
        // compare-and-set on its due time, so a fire is claimed once across
        // nodes) and counts the moments each catch-up passes over.
        let claims: Vec<Claim> = plans
            .iter()
            .map(|(due, _, plan)| Claim {
                namespace: due.namespace.clone(),
                schedule_id: due.schedule_id.clone(),
                due_at_ms: due.fire.at_ms,
                next: plan.next,
                missed: plan.missed_record(due.fire.nominal_ms),
            })
            .collect();
        let claimed = self.write(move |s| {
            let mut claimed = Vec::with_capacity(claims.len());
            for c in &claims {
                let won =
                    s.claim_schedule_fire(&c.namespace, &c.schedule_id, c.due_at_ms, c.next)?;
                if won {
                    if let Some((record, action)) = &c.missed {
                        s.record_schedule_fire(&c.namespace, &c.schedule_id, record, action)?;
                    }
                }
                claimed.push(won);
            }
            Ok(claimed)
        })?;
        let work: Vec<(ScheduleRow, Vec<i64>)> = plans
            .into_iter()
            .zip(claimed)
            .filter(|(_, won)| *won)
            .map(|((_, row, plan), _)| (row, plan.fire))
            .collect();
        fired += self.fire_claimed(&work);
        Ok(Pass {
            fired,
            full: scanned >= limit,
        })
    }

    /// Fires the claimed moments, [`FIRE_PARALLELISM`] schedules at once so
    /// their starts share the writer's commits; each schedule's moments in
    /// order, each seeing what the one before it left.
    fn fire_claimed(&self, work: &[(ScheduleRow, Vec<i64>)]) -> usize {
        let cursor = AtomicUsize::new(0);
        let fired = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..FIRE_PARALLELISM.min(work.len()) {
                scope.spawn(|| {
                    while let Some((row, moments)) =
                        work.get(cursor.fetch_add(1, Ordering::Relaxed))
                    {
                        fired.fetch_add(self.fire_moments(row, moments), Ordering::Relaxed);
                    }
                });
            }
        });
        fired.into_inner()
    }

    fn fire_moments(&self, row: &ScheduleRow, moments: &[i64]) -> usize {
        let mut fired = 0;
        let mut fresh: Option<ScheduleRow> = None;
        for (i, nominal_ms) in moments.iter().enumerate() {
            if i > 0 {
                // The next moment decides on what the previous one left.
                match self.schedule_row(&row.namespace, &row.schedule_id) {
                    Ok(current) => fresh = Some(current),
                    Err(_) => break,
                }
            }
            let current = fresh.as_ref().unwrap_or(row);
            match self.fire(current, &FireOf::at("scheduled", *nominal_ms), None) {
                Ok(_) => fired += 1,
                // Counted in failures_count; the schedule moves on.
                Err(error) => tracing::warn!(
                    %error, namespace = %row.namespace, schedule_id = %row.schedule_id,
                    "schedule fire failed"
                ),
            }
        }
        fired
    }

    /// Starts the oldest buffered fire of schedules whose run closed.
    fn drain_buffers(&self, limit: usize) -> Result<usize, ApiError> {
        let ready = self.read(|s| s.drainable_schedules(limit))?;
        let mut started = 0;
        for (namespace, schedule_id) in ready {
            let Some(row) = self.read(|s| s.schedule(&namespace, &schedule_id))? else {
                continue;
            };
            let Some(head) = row.buffered.first().cloned() else {
                continue;
            };
            let Some(mut fire) = FireOf::from_json(&head) else {
                continue;
            };
            let Ok(d) = definition(&row) else { continue };
            fire.trigger = "buffered";
            // Popped with the start, only while it is still the head and no
            // run is open; a start that fails is counted, not retried forever.
            match self.start_fire(&row, &d, &fire, FireGate::BufferHead(head)) {
                Ok(None) => {}
                Ok(Some(_)) => started += 1,
                Err(error) => tracing::warn!(
                    %error, %namespace, %schedule_id, "buffered schedule fire failed"
                ),
            }
        }
        Ok(started)
    }
}

/// Schedules one pass fires at once (their starts share commits).
const FIRE_PARALLELISM: usize = 16;

/// Moments older than the catch-up window one catch-up counts at most; a
/// schedule missed for longer jumps to the window's start (its skipped
/// count then says "at least"). The window itself holds at most 86,401
/// moments (a day of one-second ones).
const CATCHUP_SCAN_MOMENTS: i64 = 100_000;

/// What one pass did.
struct Pass {
    fired: usize,
    /// The due scan came back full: more may be due now.
    full: bool,
}

/// One due schedule's claim in the pass's transaction.
struct Claim {
    namespace: String,
    schedule_id: String,
    due_at_ms: i64,
    next: Option<NextFire>,
    missed: Option<(FireRecord, Value)>,
}

/// What a due schedule does with the moments it owes at `now`: the
/// moments it fires (oldest first), those it passes over and why, and its
/// next fire (the first moment not yet due).
#[derive(Debug, Clone, PartialEq)]
struct CatchUp {
    fire: Vec<i64>,
    missed: i64,
    reasons: Vec<String>,
    next: Option<NextFire>,
}

impl CatchUp {
    /// The record of the passed-over moments, if any (`first_ms`: the
    /// earliest owed moment).
    fn missed_record(&self, first_ms: i64) -> Option<(FireRecord, Value)> {
        if self.missed == 0 {
            return None;
        }
        let reason = self.reasons.join("; ");
        let mut action = action_json(
            &FireOf::at("scheduled", first_ms),
            Some(&Fired::Skipped(reason.clone())),
        );
        action["missed_moments"] = self.missed.into();
        let record = FireRecord::Missed {
            moments: self.missed,
            reason,
        };
        Some((record, action))
    }
}

/// How many of a backlog's newest moments `policy` fires: `skip`,
/// `cancel_other` and `terminate_other` one (the moments of a backlog are
/// all due at once, so each would overlap or stop the one before it),
/// `buffer_one` two (one starts, one waits), `buffer_all` one more than its
/// buffer holds, `allow_all` up to its catch-up cap; never more than the
/// runs `max_runs` has left.
fn catchup_fires(policy: &str, sweep: &ScheduleSweep, remaining: Option<i64>) -> usize {
    let fires = match policy {
        "allow_all" => sweep.max_catchup_fires,
        "buffer_all" => sweep.max_buffered_fires + 1,
        "buffer_one" => 2,
        _ => 1,
    };
    match remaining {
        Some(left) => fires.min(usize::try_from(left.max(0)).unwrap_or(0)),
        None => fires,
    }
}

/// The catch-up of `row`, due as `due` and looked at `now_ms`: every moment
/// owed up to now is counted once; those older than the catch-up window are
/// passed over, the newest [`catchup_fires`] of the rest fire (oldest
/// first) and the others are passed over, so a schedule behind by N moments
/// costs one pass, not N late fires.
fn catch_up(row: &ScheduleRow, due: &DueSchedule, now_ms: i64, sweep: &ScheduleSweep) -> CatchUp {
    let Ok(d) = definition(row) else {
        // An unreadable definition gets no next fire (its fire fails and is counted).
        return CatchUp {
            fire: vec![due.fire.nominal_ms],
            missed: 0,
            reasons: Vec::new(),
            next: None,
        };
    };
    let spec = parse_spec(&d.spec, &mut Checks::default());
    let (ns, id) = (row.namespace.as_str(), row.schedule_id.as_str());
    let after = |seconds: i64| next_fire(ns, id, &spec, d.jitter_seconds, seconds);
    let window_ms = i64::try_from(sweep.catchup_window.as_millis()).unwrap_or(i64::MAX);
    let window_start = now_ms.saturating_sub(window_ms);
    let keep = catchup_fires(&d.overlap_policy, sweep, row.remaining_actions);
    let mut kept: std::collections::VecDeque<i64> = std::collections::VecDeque::new();
    let (mut old, mut beyond, mut jumped) = (0_i64, 0_i64, false);
    let mut cursor = Some(due.fire);
    while let Some(at) = cursor.filter(|c| c.at_ms <= now_ms) {
        if at.nominal_ms < window_start {
            if old == CATCHUP_SCAN_MOMENTS {
                // Far behind: straight to the window's first moment (the
                // window itself holds at most a day of one-second moments).
                jumped = true;
                let first_second =
                    window_start.div_euclid(1000) + i64::from(window_start.rem_euclid(1000) != 0);
                cursor = after(first_second - 1);
                continue;
            }
            old += 1;
        } else {
            kept.push_back(at.nominal_ms);
            if kept.len() > keep {
                kept.pop_front();
                beyond += 1;
            }
        }
        cursor = after(at.nominal_ms.div_euclid(1000));
    }
    let mut reasons = Vec::new();
    if old > 0 {
        let at_least = if jumped { "at least " } else { "" };
        reasons.push(format!(
            "{at_least}{old} moment(s) from {} older than the catch-up window of {} s",
            wire::timestamp(due.fire.nominal_ms),
            sweep.catchup_window.as_secs()
        ));
    }
    if beyond > 0 {
        reasons.push(format!(
            "the scheduler was behind: overlap policy {} fires the newest {keep} of {} missed moments",
            d.overlap_policy,
            beyond + i64::try_from(kept.len()).unwrap_or(0)
        ));
    }
    CatchUp {
        fire: kept.into(),
        missed: old + beyond,
        reasons,
        next: cursor,
    }
}

fn definition(row: &ScheduleRow) -> Result<Definition, ApiError> {
    serde_json::from_value(row.definition.clone()).map_err(|e| {
        ApiError::Internal(format!(
            "schedule {} has an unreadable definition: {e}",
            row.schedule_id
        ))
    })
}

/// The outcome fields of one fire, into `out`.
fn describe_fired(out: &mut Value, fired: Fired) {
    match fired {
        Fired::Started {
            workflow_id,
            run_id,
        } => {
            out["outcome"] = "started".into();
            out["workflow_id"] = workflow_id.into();
            out["run_id"] = run_id.into();
        }
        Fired::Existing {
            workflow_id,
            run_id,
        } => {
            out["outcome"] = "already_started".into();
            out["workflow_id"] = workflow_id.into();
            out["run_id"] = run_id.into();
        }
        Fired::Skipped(reason) => {
            out["outcome"] = "skipped".into();
            out["reason"] = reason.into();
        }
        Fired::Buffered(depth) => {
            out["outcome"] = "buffered".into();
            out["buffer_depth"] = depth.into();
        }
        Fired::BufferFull(reason) => {
            out["outcome"] = "buffer_full".into();
            out["reason"] = reason.into();
        }
    }
}

/// One recent action as describe shows it.
fn action_json(fire: &FireOf, fired: Option<&Fired>) -> Value {
    let mut action = json!({
        "trigger": fire.trigger,
        "scheduled_at": fire.scheduled_at_ms.map(wire::timestamp),
        "fired_at": wire::timestamp(crate::unix_ms()),
    });
    if let Some(fired) = fired {
        describe_fired(&mut action, fired.clone());
    }
    action
}

/// One audit entry as the SDK's `ScheduleHistoryEvent` reads it.
fn audit_json(row: &AuditRow) -> Value {
    json!({
        "id": row.id.to_string(), "sequence": row.sequence, "event_type": row.event_type,
        "recorded_at": wire::timestamp(row.recorded_at_ms),
        "workflow_instance_id": row.workflow_id,
        "workflow_run_id": row.run.map(wire::run_id),
        "payload": row.payload,
    })
}

fn schedule_json(row: &ScheduleRow) -> Value {
    let d = &row.definition;
    let at = |ms: Option<i64>| ms.map(wire::timestamp);
    let buffered: Vec<Value> = row
        .buffered
        .iter()
        .map(|entry| {
            json!({
                "trigger": entry["trigger"],
                "scheduled_at": entry["scheduled_at_ms"].as_i64().map(wire::timestamp),
                "buffered_at": entry["buffered_at_ms"].as_i64().map(wire::timestamp),
            })
        })
        .collect();
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
            "next_nominal_fire_at": at(row.nominal_fire_at_ms),
            "skipped_trigger_count": row.skipped_count,
            "last_skip_reason": row.last_skip_reason,
            "buffer_depth": row.buffered.len(),
            "buffered_actions": buffered,
            "recent_actions": row.recent_actions,
        },
    })
}

/// Runs [`Engine::fire_due_schedules`] and [`Engine::prune_service_calls`]
/// every interval while this node holds the sweep's lease
/// ([`crate::cluster::Sweep::Schedules`]), until the runtime stops.
pub(crate) async fn fire_forever(engine: Arc<Engine>) {
    let mut ticks = tokio::time::interval(engine.config.schedule_sweep.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !engine.elected(crate::cluster::Sweep::Schedules) {
            continue;
        }
        let node = engine.clone();
        // A full due scan may leave more due: passes follow each other
        // until one comes back short (each scan bounded by its limit), so
        // the sweep keeps up with a load its interval alone would not. The
        // same pass expires old service calls (a bounded delete).
        let pass = move || {
            let mut prune = true;
            let now = loop {
                let now = crate::unix_ms();
                node.sweep_leases
                    .record_pass(crate::cluster::Sweep::Schedules);
                let pass = node.schedule_pass(now, prune)?;
                prune = false;
                if !pass.full || !node.elected(crate::cluster::Sweep::Schedules) {
                    break now;
                }
            };
            node.prune_service_calls(now)
        };
        match tokio::task::spawn_blocking(pass).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "schedule sweep failed"),
            Err(error) => tracing::warn!(%error, "schedule sweep task failed"),
        }
    }
}
