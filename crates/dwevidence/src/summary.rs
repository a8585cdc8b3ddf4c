//! The `summary.json` schema (version 1).
//!
//! One typed model for both sides: the harness serializes it, the verifier
//! deserializes it, and anything that does not fit (a missing field, a wrong
//! type, an unknown key) is a schema error with serde's line and column, so
//! an artifact can never be half-understood. Quantities a run could not
//! measure are `null`, never `0`: a missing Redis sample must not read as an
//! empty cache. The field reference is docs/soak.md.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The schema version this crate writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// The trust profile the seed defines.
pub const PROFILE: &str = "trusted_long_soak_v1";

/// `build/perf/summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The program that wrote the artifact.
    pub tool: Tool,
    /// When the run happened and how it ended.
    pub run: RunOutcome,
    /// What the run was asked to do.
    pub config: RunConfig,
    /// Periodic sample coverage and the separate post-drain sample.
    pub samples: SampleCoverage,
    /// Maxima over the periodic samples.
    pub maxima: Maxima,
    /// Largest key count seen per cache policy ID (every declared ID).
    pub max_server_cache_keys_by_policy: BTreeMap<String, u64>,
    /// Key count per cache policy ID in the post-drain sample.
    pub final_server_cache_keys_by_policy: BTreeMap<String, u64>,
    /// What was left after the load stopped and the drain window passed.
    pub final_drain: Drain,
    /// Post-warmup memory slope, when the run was long enough to fit one.
    pub memory_slope: Option<MemorySlope>,
    /// Per sampled resource: how many attempts succeeded.
    pub sampling_health: BTreeMap<String, ResourceHealth>,
    /// Load-generator totals.
    pub requests: RequestTotals,
    /// Bounded-growth assertions that failed (thresholds, live findings).
    pub assertion_failures: Vec<AssertionFailure>,
    /// Where and from what the run came.
    pub provenance: Provenance,
    /// The trust verdict the writer computed.
    pub evidence: Evidence,
}

/// Name and version of the writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// e.g. `dwsoak`.
    pub name: String,
    /// The writer's version.
    pub version: String,
}

/// Timing and result of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunOutcome {
    /// Start of the load, Unix milliseconds.
    pub started_at_unix_ms: u64,
    /// End of the post-drain sample, Unix milliseconds.
    pub finished_at_unix_ms: u64,
    /// Seconds the load actually ran (without the drain).
    pub load_seconds: f64,
    /// `passed` or `failed`.
    pub result: RunResult,
    /// Why the run failed (empty when it passed).
    pub failures: Vec<String>,
}

/// The run's own verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunResult {
    /// Every sample was taken and no assertion failed.
    Passed,
    /// Something failed; see `run.failures`.
    Failed,
}

/// How the services under test were run and sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceMode {
    /// The harness started dwserver (and redis-server) itself and sampled
    /// exactly those processes: this repository's counterpart of the seed's
    /// compose-backed sampling.
    Managed,
    /// The harness drove a server somebody else started.
    External,
}

/// The run's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Configured load duration.
    pub duration_seconds: u64,
    /// Configured interval between periodic samples.
    pub sample_interval_seconds: u64,
    /// Samples before this offset are left out of the slope fit.
    pub warmup_seconds: u64,
    /// How long the harness waits after the load before the final sample.
    pub drain_seconds: u64,
    /// `DW_PERF_MIN_SAMPLE_COVERAGE` as a fraction (default 0.8).
    pub min_sample_coverage: f64,
    /// Below this many periodic samples the run fails.
    pub minimum_trusted_samples: u64,
    /// `DW_PERF_MAX_MEMORY_SLOPE_BYTES_PER_HOUR`, if set.
    pub memory_slope_limit_bytes_per_hour: Option<f64>,
    /// `memory` (in-process moka) or `redis`.
    pub cache_backend: String,
    /// Whether the harness owned the services it sampled.
    pub services: ServiceMode,
    /// `DW_PERF_MAX_SERVER_CACHE_KEYS_BY_POLICY`, if given.
    pub max_server_cache_keys_by_policy: Option<BTreeMap<String, u64>>,
    /// `DW_PERF_MAX_FINAL_SERVER_CACHE_KEYS_BY_POLICY`, if given.
    pub max_final_server_cache_keys_by_policy: Option<BTreeMap<String, u64>>,
    /// `DW_PERF_MAX_SERVER_CACHE_KEYS`: the aggregate ceiling on `server:*`
    /// keys during the load, if given. It is a check of its own, never a
    /// stand-in for the per-policy maps: a run whose maps are incomplete is
    /// ineligible even when the aggregate passes.
    #[serde(default)]
    pub max_server_cache_keys: Option<u64>,
    /// The load mix.
    pub workload: Workload,
}

/// The load mix the harness drove.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Distinct namespaces used.
    pub namespaces: u32,
    /// Distinct task queues per namespace.
    pub task_queues: u32,
    /// Concurrent load threads.
    pub workers: u32,
    /// Workflow starts per second across all threads (0: as fast as possible).
    pub starts_per_second: f64,
    /// Signals sent per started workflow.
    pub signals_per_workflow: u32,
}

/// How well the periodic samples cover the configured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleCoverage {
    /// `duration / sample_interval`: what full coverage means.
    pub expected_periodic_samples: u64,
    /// Periodic samples actually collected (the post-drain one not counted).
    pub periodic_sample_count: u64,
    /// `periodic_sample_count / expected_periodic_samples`, capped at 1.
    pub coverage: f64,
    /// Whether the separate post-drain sample was collected.
    pub final_sample_collected: bool,
}

/// Maxima over the periodic samples; `null` where not measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Maxima {
    /// Server resident set size.
    pub server_memory_bytes: Option<u64>,
    /// Redis `used_memory` (Redis backend only).
    pub redis_memory_bytes: Option<u64>,
    /// Keys in the Redis database (Redis backend only).
    pub redis_db_keys: Option<u64>,
    /// Keys of the workflow-task polling families (prefixes naming
    /// `workflow-task-poll`).
    pub redis_polling_keys: Option<u64>,
    /// Keys under the server-owned cache namespace (`server:*`).
    pub server_cache_keys: Option<u64>,
    /// SQLite database file plus its WAL.
    pub sqlite_file_bytes: Option<u64>,
}

/// The post-drain sample's aggregate counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drain {
    /// Keys under `server:*` after the drain.
    pub server_cache_keys: Option<u64>,
    /// Keys of the polling families after the drain.
    pub redis_polling_keys: Option<u64>,
    /// Keys in the Redis database after the drain.
    pub redis_db_keys: Option<u64>,
    /// Server RSS after the drain.
    pub server_memory_bytes: Option<u64>,
}

/// Least-squares slope of server RSS over time after the warmup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySlope {
    /// The fitted slope.
    pub bytes_per_hour: f64,
    /// The fit's intercept at the run's start, bytes.
    pub intercept_bytes: f64,
    /// Samples in the fit.
    pub points: u64,
    /// The configured limit, if any.
    pub limit_bytes_per_hour: Option<f64>,
}

/// Sampling attempts of one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceHealth {
    /// Attempts made.
    pub attempts: u64,
    /// Attempts that produced a value.
    pub collected: u64,
    /// The last failure, if any attempt failed.
    pub last_error: Option<String>,
}

impl ResourceHealth {
    /// Every attempt succeeded (and there was at least one).
    pub fn healthy(&self) -> bool {
        self.attempts > 0 && self.collected == self.attempts
    }
}

/// Load-generator totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestTotals {
    /// Requests sent.
    pub total: u64,
    /// Requests that did not succeed (non-2xx or transport failure).
    pub errors: u64,
    /// Counts by `status` label (`200`, `409`, `timeout`, `connect`, …).
    pub by_status: BTreeMap<String, u64>,
    /// Mean latency over every request.
    pub latency_seconds_average: f64,
    /// Workflows started, signalled and completed.
    pub workflows_started: u64,
    /// Signals accepted.
    pub signals_sent: u64,
    /// Workflow runs the harness completed.
    pub workflows_completed: u64,
}

/// A bounded-growth assertion that did not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssertionFailure {
    /// What was asserted, e.g. `max_server_cache_keys_by_policy.long_poll_signals`.
    pub assertion: String,
    /// What was seen against what was allowed.
    pub message: String,
}

/// Where the run came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The `GITHUB_*` variables the profile reads, as set (absent ones left out).
    pub github: BTreeMap<String, String>,
    /// The machine that ran the soak.
    pub runner: Runner,
    /// `COMPOSE_PROJECT_NAME` when set.
    pub compose_project: Option<String>,
    /// The server base URL under test.
    pub base_url: Option<String>,
    /// `git rev-parse HEAD` of the checkout, if it is one.
    pub git_sha: Option<String>,
    /// `git status --porcelain --untracked-files=no` was empty.
    pub tracked_working_tree_clean: Option<bool>,
    /// The policy file, as given to the harness.
    pub policy_path: String,
    /// SHA-256 (lower-case hex) of the policy file's bytes.
    pub policy_sha256: String,
    /// The server image the run loaded, beside the image the run pinned;
    /// `null` in artifacts written before the harness recorded it.
    #[serde(default)]
    pub server_image: Option<ServerImage>,
}

/// Which server ran the soak, beside the image the run pinned.
///
/// For this repository the pinned server image is a digest reference
/// `<name>[:<tag>]@sha256:<64 hex>` in `DW_SERVER_IMAGE`: the soak workflow
/// sets it to the reference of the dwserver executable it builds from the
/// checked-out commit. The harness records the pin, the `dw_server_image`
/// of the conformance evidence (`dwserver evidence`) of the executable it
/// starts, and its own SHA-256 of that executable, so a verifier can match
/// the reported image against the pin and the pin against what ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerImage {
    /// `DW_SERVER_IMAGE` as the harness saw it, if set.
    pub pinned: Option<String>,
    /// `dw_server_image` of the started server's conformance evidence.
    pub dw_server_image: Option<String>,
    /// SHA-256 (lower-case hex) of the executable the harness started;
    /// `null` when it drove a server it did not start.
    pub executable_sha256: Option<String>,
    /// Why the evidence or the digest could not be read, if so.
    pub error: Option<String>,
}

impl ServerImage {
    /// The digest a reference pins (`…@sha256:<64 lower-case hex>`), if it
    /// pins one: a tag alone can move, so it pins nothing.
    pub fn pinned_digest(reference: &str) -> Option<&str> {
        let (_, digest) = reference.rsplit_once("@sha256:")?;
        (digest.len() == 64
            && digest
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(digest)
    }
}

/// Runner provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runner {
    /// `RUNNER_NAME`.
    pub name: Option<String>,
    /// `RUNNER_OS`, else the build target's OS.
    pub os: Option<String>,
    /// `RUNNER_ARCH`, else the build target's architecture.
    pub arch: Option<String>,
    /// `RUNNER_ENVIRONMENT` (`github-hosted` or `self-hosted`).
    pub environment: Option<String>,
}

/// `evidence` of the artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// The trust verdict.
    pub trust: Trust,
}

/// A verdict against one profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trust {
    /// Always [`PROFILE`].
    pub profile: String,
    /// Every condition holds.
    pub eligible: bool,
    /// The conditions that failed, with why.
    pub failed_conditions: Vec<FailedCondition>,
}

/// One failed condition, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailedCondition {
    /// The condition's id, e.g. `sample_coverage`.
    pub condition: String,
    /// Why it failed, in one sentence.
    pub explanation: String,
}

/// Why an artifact could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// Not JSON, or JSON that does not fit the schema.
    #[error("{message}")]
    Schema {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde's message.
        message: String,
    },
    /// A schema version this reader does not know.
    #[error("schema_version {found} is not supported (this reader knows {SCHEMA_VERSION})")]
    Version {
        /// The version found.
        found: u64,
    },
}

impl Summary {
    /// Parses an artifact, checking the schema version first so a newer
    /// artifact is reported as such rather than as a field mismatch.
    pub fn from_json(text: &str) -> Result<Summary, SummaryError> {
        let schema = |e: serde_json::Error| SummaryError::Schema {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        };
        let raw: serde_json::Value = serde_json::from_str(text).map_err(schema)?;
        match raw
            .get("schema_version")
            .and_then(serde_json::Value::as_u64)
        {
            Some(v) if v == u64::from(SCHEMA_VERSION) => {}
            Some(found) => return Err(SummaryError::Version { found }),
            None => {}
        }
        serde_json::from_str(text).map_err(schema)
    }
}
