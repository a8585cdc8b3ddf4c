//! One line of `build/perf/samples.jsonl`.
//!
//! Every sample is written the moment it is taken, so a run that dies still
//! leaves the samples it had; the summary and the HTML report are computed
//! from these lines. A value that could not be sampled is `null` and its
//! error is listed in `errors`: it is never written as zero.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Whether a sample belongs to the coverage window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleKind {
    /// Taken every sample interval during the load.
    Periodic,
    /// Taken once after the drain; reported apart, never counted as coverage.
    Final,
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// Periodic or final.
    pub kind: SampleKind,
    /// Seconds since the load started.
    pub elapsed_seconds: f64,
    /// Unix milliseconds.
    pub at_unix_ms: u64,
    /// Server resident set size.
    pub server_memory_bytes: Option<u64>,
    /// Redis `used_memory`.
    pub redis_memory_bytes: Option<u64>,
    /// Keys in the Redis database (`DBSIZE`).
    pub redis_db_keys: Option<u64>,
    /// Keys of the polling families.
    pub redis_polling_keys: Option<u64>,
    /// Keys under the server cache namespace.
    pub server_cache_keys: Option<u64>,
    /// Keys per cache policy ID (empty when the count failed).
    pub server_cache_keys_by_policy: BTreeMap<String, u64>,
    /// SQLite database file plus WAL.
    pub sqlite_file_bytes: Option<u64>,
    /// Requests sent so far.
    pub requests_total: u64,
    /// Failed requests so far.
    pub errors_total: u64,
    /// Findings of the live metric check at this sample.
    pub live_findings: u64,
    /// Resource name → why it could not be sampled.
    pub errors: BTreeMap<String, String>,
}

/// Reads `samples.jsonl`; a malformed line is an error naming its number.
pub fn parse_lines(text: &str) -> Result<Vec<Sample>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}
