//! What each console page shows, read through the engine: the same
//! operations (and so the same validation, namespace admission and bounded
//! paging) as the API, plus the store's bounded console reads where the API
//! has no route. No HTTP types here: the handlers adapt these to pages.

use dwpolicy::StructuralLimits;
use serde_json::{json, Value};

use crate::server::schedules::ScheduleListQuery;
use crate::server::wire::{self, HistoryQuery, ListQuery};
use crate::server::{ApiError, Engine};
use crate::store::console::{
    FailingTaskRow, PendingActivityRow, RunFailureRow, RunFilter, TaskQueueRow, Walked, WorkerRow,
};
use crate::store::{RunId, RunStatus};

/// Runs per console page unless the visitor asks for another size.
pub const RUNS_PER_PAGE: usize = 50;
/// History events per timeline page.
pub const EVENTS_PER_PAGE: usize = 200;
/// Rows per table on the exceptions and operations pages.
pub const ROWS_PER_TABLE: usize = 50;
/// Pending activities listed on a run's page.
pub const PENDING_ACTIVITIES_SHOWN: usize = 50;

/// The runs list's filters, as the page's query string carries them.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct RunsQuery {
    /// The namespace (default `default`).
    #[serde(default)]
    pub ns: Option<String>,
    /// Only this status.
    #[serde(default)]
    pub status: Option<String>,
    /// Only this workflow type.
    #[serde(default, rename = "type")]
    pub workflow_type: Option<String>,
    /// A search attribute's name …
    #[serde(default)]
    pub attr: Option<String>,
    /// … and the value it must have.
    #[serde(default)]
    pub value: Option<String>,
    /// Only the runs of this workflow id.
    #[serde(default)]
    pub workflow_id: Option<String>,
    /// The page position (the API's `next_page_token`, or a walk position).
    #[serde(default)]
    pub page: Option<String>,
}

impl RunsQuery {
    /// The namespace, `default` when none is given.
    pub fn namespace(&self) -> &str {
        non_empty(self.ns.as_deref()).unwrap_or("default")
    }
}

/// One row of the runs list.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLine {
    /// As the API describes it (`GET /api/workflows`' row).
    pub described: Value,
    /// When it started (Unix ms).
    pub started_at_ms: i64,
    /// When it closed.
    pub closed_at_ms: Option<i64>,
}

/// A page of the runs list.
#[derive(Debug, Clone, PartialEq)]
pub struct RunsPage {
    /// The rows, newest first.
    pub runs: Vec<RunLine>,
    /// The next page's position.
    pub next: Option<String>,
    /// For a search-attribute filter: how many runs the walk examined.
    pub examined: Option<usize>,
    /// Why the list is empty, when a lookup found nothing.
    pub note: Option<String>,
}

fn non_empty(text: Option<&str>) -> Option<&str> {
    text.map(str::trim).filter(|t| !t.is_empty())
}

/// A search attribute name the console filters on: what a registration
/// accepts, and nothing that could leave the JSON path it is put in.
fn attribute_name(name: &str) -> Result<&str, ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(name)
    } else {
        Err(ApiError::Malformed(format!(
            "search attribute name {name:?}: use letters, digits, '_', '-' or '.'"
        )))
    }
}

/// The runs list: the API's `list_workflows` (or `list_runs` for one
/// workflow id), or a bounded walk for a search-attribute filter.
pub fn runs_page(engine: &Engine, query: &RunsQuery) -> Result<RunsPage, ApiError> {
    let ns = query.namespace();
    engine.require_namespace(ns)?;
    let status = non_empty(query.status.as_deref());
    let workflow_type = non_empty(query.workflow_type.as_deref());
    if let Some(workflow_id) = non_empty(query.workflow_id.as_deref()) {
        return match engine.list_runs(ns, workflow_id) {
            Ok(found) => {
                let mut rows = found["runs"].as_array().cloned().unwrap_or_default();
                rows.reverse();
                Ok(RunsPage {
                    runs: lines(engine, rows)?,
                    next: None,
                    examined: None,
                    note: None,
                })
            }
            Err(ApiError::WorkflowNotFound(_)) => Ok(RunsPage {
                runs: Vec::new(),
                next: None,
                examined: None,
                note: Some(format!("No run has the workflow id {workflow_id:?}.")),
            }),
            Err(e) => Err(e),
        };
    }
    if let Some(attribute) = non_empty(query.attr.as_deref()) {
        let attribute = attribute_name(attribute)?;
        let status = match status {
            None => None,
            Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
                ApiError::Malformed(format!(
                    "status {text:?}: use running, completed, failed, cancelled, terminated or \
                     continued_as_new"
                ))
            })?),
        };
        let below = match non_empty(query.page.as_deref()) {
            None => None,
            Some(token) => Some(
                wire::parse_page_token(token)
                    .and_then(|n| i64::try_from(n).ok())
                    .ok_or_else(|| ApiError::InvalidPageToken(token.to_owned()))?,
            ),
        };
        let filter = RunFilter {
            workflow_type,
            status,
            attribute,
            value: query.value.as_deref().unwrap_or("").trim(),
        };
        let scan = engine.config.ui.filter_scan_limit;
        let walked: Walked<RunId> = engine
            .read(|s| s.console_runs_by_attribute(ns, &filter, below, RUNS_PER_PAGE, scan))?;
        let rows = walked
            .rows
            .iter()
            .map(|run| {
                let described = engine.read(|s| s.describe(*run))?;
                Ok(json!({
                    "workflow_id": described.run.workflow_id,
                    "run_id": wire::run_id(*run),
                    "workflow_type": described.run.workflow_type,
                    "task_queue": described.run.task_queue,
                    "status": described.run.status.as_str(),
                }))
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        return Ok(RunsPage {
            runs: lines(engine, rows)?,
            next: walked
                .continue_below
                .map(|n| wire::page_token(n.unsigned_abs())),
            examined: Some(walked.examined),
            note: None,
        });
    }
    let listed = engine.list_workflows(
        ns,
        ListQuery {
            workflow_type: workflow_type.map(str::to_owned),
            status: status.map(str::to_owned),
            page_size: Some(RUNS_PER_PAGE.to_string()),
            next_page_token: non_empty(query.page.as_deref()).map(str::to_owned),
            ..ListQuery::default()
        },
    )?;
    Ok(RunsPage {
        runs: lines(
            engine,
            listed["workflows"].as_array().cloned().unwrap_or_default(),
        )?,
        next: listed["next_page_token"].as_str().map(str::to_owned),
        examined: None,
        note: None,
    })
}

fn lines(engine: &Engine, rows: Vec<Value>) -> Result<Vec<RunLine>, ApiError> {
    rows.into_iter()
        .map(|described| {
            let run = described["run_id"]
                .as_str()
                .and_then(wire::parse_run_id)
                .ok_or_else(|| ApiError::Internal("a listed run without a run id".into()))?;
            let (started_at_ms, closed_at_ms) = engine.read(|s| s.console_run_times(run))?;
            Ok(RunLine {
                described,
                started_at_ms,
                closed_at_ms,
            })
        })
        .collect()
}

/// Everything a run's page shows.
#[derive(Debug, Clone)]
pub struct RunView {
    /// The API's describe (`GET /api/workflows/{id}/runs/{run}`).
    pub described: Value,
    /// One page of its history (`GET …/history`).
    pub history: Value,
    /// Where this history page starts (0-based event position).
    pub history_offset: u64,
    /// Its scheduled activities (first [`PENDING_ACTIVITIES_SHOWN`]).
    pub pending_activities: Vec<PendingActivityRow>,
    /// The limits in force.
    pub limits: StructuralLimits,
    /// When it started (Unix ms).
    pub started_at_ms: i64,
}

/// A run's page: describe, one history page, its pending activities.
pub fn run_view(
    engine: &Engine,
    ns: &str,
    workflow_id: &str,
    run_id: Option<&str>,
    events: Option<&str>,
) -> Result<RunView, ApiError> {
    engine.require_namespace(ns)?;
    let described = engine.describe(ns, workflow_id, run_id)?;
    let run_text = described["run_id"].as_str().unwrap_or_default().to_owned();
    let run = wire::parse_run_id(&run_text)
        .ok_or_else(|| ApiError::WorkflowNotFound(workflow_id.to_owned()))?;
    let history = engine.history(
        ns,
        workflow_id,
        &run_text,
        HistoryQuery {
            page_size: Some(EVENTS_PER_PAGE.to_string()),
            next_page_token: events.map(str::to_owned),
        },
    )?;
    let history_offset = events.and_then(wire::parse_page_token).unwrap_or(0);
    let (pending_activities, started_at_ms) = engine.read(|s| {
        Ok((
            s.console_pending_activities(run, 0, PENDING_ACTIVITIES_SHOWN)?,
            s.console_run_times(run)?.0,
        ))
    })?;
    Ok(RunView {
        described,
        history,
        history_offset,
        pending_activities,
        limits: engine.config.store.limits,
        started_at_ms,
    })
}

/// One whole payload of a run, for the "show all" link of a truncated one:
/// a describe field, or one history event.
pub fn run_payload(
    engine: &Engine,
    ns: &str,
    workflow_id: &str,
    run_id: &str,
    field: &str,
) -> Result<Value, ApiError> {
    engine.require_namespace(ns)?;
    if let Some(position) = field.strip_prefix("event-") {
        let position: u64 = position.parse().map_err(|_| {
            ApiError::Malformed(format!("field {field:?}: event-<n> takes a number"))
        })?;
        let page = engine.history(
            ns,
            workflow_id,
            run_id,
            HistoryQuery {
                page_size: Some("1".into()),
                next_page_token: Some(wire::page_token(position)),
            },
        )?;
        return page["events"]
            .get(0)
            .cloned()
            .ok_or_else(|| ApiError::Malformed(format!("the run has no event {position}")));
    }
    let allowed = [
        "memo",
        "search_attributes",
        "input_envelope",
        "output_envelope",
        "failure",
        "failures",
        "workflow_task_failure",
    ];
    if !allowed.contains(&field) {
        return Err(ApiError::Malformed(format!(
            "field {field:?}: use one of {} or event-<n>",
            allowed.join(", ")
        )));
    }
    let described = engine.describe(ns, workflow_id, Some(run_id))?;
    Ok(described.get(field).cloned().unwrap_or(Value::Null))
}

/// The exceptions page: run failures and failing open tasks.
#[derive(Debug, Clone)]
pub struct Exceptions {
    /// Failure rows of runs.
    pub failures: Walked<RunFailureRow>,
    /// Open tasks whose last attempt failed.
    pub tasks: Walked<FailingTaskRow>,
}

/// Categories the exceptions filter knows: the run failures' recorded
/// categories and the two kinds of failing task.
pub const TASK_CATEGORIES: [(&str, &str); 2] =
    [("workflow_task", "workflow"), ("activity", "activity")];

/// The exceptions of `ns` in `category` (all when `None`), each table
/// continuing below its own position.
pub fn exceptions(
    engine: &Engine,
    ns: &str,
    category: Option<&str>,
    failures_below: Option<i64>,
    tasks_below: Option<i64>,
) -> Result<Exceptions, ApiError> {
    engine.require_namespace(ns)?;
    let scan = engine.config.ui.filter_scan_limit;
    let task_kind = category.and_then(|c| {
        TASK_CATEGORIES
            .iter()
            .find(|(name, _)| *name == c)
            .map(|(_, kind)| *kind)
    });
    engine
        .read(|s| {
            let failures = if task_kind.is_some() {
                empty()
            } else {
                s.console_run_failures(ns, category, failures_below, ROWS_PER_TABLE, scan)?
            };
            let tasks = if category.is_some() && task_kind.is_none() {
                empty()
            } else {
                s.console_failing_tasks(ns, task_kind, tasks_below, ROWS_PER_TABLE, scan)?
            };
            Ok(Exceptions { failures, tasks })
        })
        .map_err(ApiError::from)
}

/// The operations page's tables.
#[derive(Debug, Clone)]
pub struct Operations {
    /// Registered workers, by id.
    pub workers: Vec<WorkerRow>,
    /// Whether more workers follow.
    pub more_workers: bool,
    /// Task queues with their counters and last poll.
    pub queues: Vec<(TaskQueueRow, Value)>,
    /// Whether more queues follow.
    pub more_queues: bool,
    /// One page of schedules (`GET /api/schedules`).
    pub schedules: Value,
    /// Keys per declared cache family (`GET /api/system/cache-keys`).
    pub cache_keys: std::collections::BTreeMap<String, usize>,
    /// The cache backend's name.
    pub cache_backend: String,
    /// Server-wide counts (`GET /api/system/operator-metrics` without its
    /// drift block, which reads every retained run when it is recomputed).
    pub operator: Value,
}

/// The operations page of `ns`: workers and queues after the given names.
pub fn operations(
    engine: &Engine,
    ns: &str,
    workers_after: &str,
    queues_after: &str,
    schedules_page: Option<&str>,
) -> Result<Operations, ApiError> {
    engine.require_namespace(ns)?;
    let (mut workers, mut queues) = engine.read(|s| {
        Ok((
            s.console_workers(ns, workers_after, ROWS_PER_TABLE + 1)?,
            s.console_task_queues(ns, queues_after, ROWS_PER_TABLE + 1)?,
        ))
    })?;
    let more_workers = workers.len() > ROWS_PER_TABLE;
    workers.truncate(ROWS_PER_TABLE);
    let more_queues = queues.len() > ROWS_PER_TABLE;
    queues.truncate(ROWS_PER_TABLE);
    let queues = queues
        .into_iter()
        .map(|q| {
            let last = engine.poll_diagnostic(ns, &q.task_queue)?;
            Ok((q, last["last_poll"].clone()))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let schedules = engine.list_schedules(
        ns,
        ScheduleListQuery {
            page_size: Some(ROWS_PER_TABLE.to_string()),
            next_page_token: schedules_page.map(str::to_owned),
            ..ScheduleListQuery::default()
        },
    )?;
    Ok(Operations {
        workers,
        more_workers,
        queues,
        more_queues,
        schedules,
        cache_keys: engine.cache_keys_by_policy()?,
        cache_backend: engine.cache.backend().to_owned(),
        operator: engine.operator_counts()?,
    })
}

fn empty<T>() -> Walked<T> {
    Walked {
        rows: Vec::new(),
        continue_below: None,
        examined: 0,
    }
}
