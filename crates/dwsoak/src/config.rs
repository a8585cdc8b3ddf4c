//! The harness's configuration: flags with `DW_PERF_*` environment twins,
//! validated in full before any load starts.
//!
//! A soak that discovers a typo in a threshold map after an hour has wasted
//! the hour, so everything that can be wrong is checked up front and
//! reported by name (exit 2): the per-policy maps against the policy's cache
//! inventory, the coverage fraction, the interval against the duration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use dwevidence::thresholds::{self, ThresholdError, MAX_FINAL_VAR, MAX_VAR};
use dwpolicy::Policy;

/// Drives a dwserver with a workflow load, samples memory and every cache
/// family, and writes build/perf/summary.json, samples.jsonl, metrics.prom,
/// report.html and the service logs.
#[derive(Debug, Clone, Parser)]
#[command(name = "dwsoak", version, about)]
pub struct Args {
    /// How long the load runs, in seconds.
    #[arg(long, env = "DW_PERF_DURATION_SECONDS", default_value_t = 60)]
    pub duration: u64,
    /// Seconds between periodic samples.
    #[arg(long, env = "DW_PERF_SAMPLE_INTERVAL_SECONDS", default_value_t = 5)]
    pub sample_interval: u64,
    /// Samples before this many seconds are left out of the memory slope
    /// [default: a tenth of the duration, at most 300].
    #[arg(long, env = "DW_PERF_WARMUP_SECONDS")]
    pub warmup: Option<u64>,
    /// Seconds to wait after the load before the final (post-drain) sample.
    #[arg(long, env = "DW_PERF_DRAIN_SECONDS", default_value_t = 65)]
    pub drain: u64,
    /// Required periodic sample coverage: a fraction (`0.8`) or a percentage (`80%`).
    #[arg(long, env = "DW_PERF_MIN_SAMPLE_COVERAGE", default_value = "80%")]
    pub min_sample_coverage: String,
    /// Fewer periodic samples than this fail the run [default: coverage × expected samples].
    #[arg(long, env = "DW_PERF_MIN_TRUSTED_SAMPLES")]
    pub minimum_trusted_samples: Option<u64>,
    /// Largest allowed post-warmup server memory slope, bytes per hour.
    #[arg(long, env = "DW_PERF_MAX_MEMORY_SLOPE_BYTES_PER_HOUR")]
    pub max_memory_slope: Option<f64>,
    /// JSON map: cache policy ID → largest allowed key count during the load.
    #[arg(long, env = MAX_VAR, value_name = "JSON")]
    pub max_server_cache_keys_by_policy: Option<String>,
    /// JSON map: cache policy ID → largest allowed key count after the drain.
    #[arg(long, env = MAX_FINAL_VAR, value_name = "JSON")]
    pub max_final_server_cache_keys_by_policy: Option<String>,
    /// Largest allowed count of all `server:*` keys during the load (an
    /// aggregate ceiling beside the per-policy maps, never instead of them).
    #[arg(long, env = "DW_PERF_MAX_SERVER_CACHE_KEYS", value_name = "COUNT")]
    pub max_server_cache_keys: Option<u64>,
    /// The server's cache backend (with --base-url: what that server uses).
    #[arg(long, value_enum, env = "DW_PERF_CACHE", default_value_t = Backend::Memory)]
    pub cache: Backend,
    /// Drive an already running server instead of starting one.
    #[arg(long, env = "DW_PERF_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,
    /// With --base-url: the server's process id, for RSS samples.
    #[arg(long, requires = "base_url")]
    pub server_pid: Option<u32>,
    /// With --base-url: the server's SQLite file, for size samples.
    #[arg(long, requires = "base_url", value_name = "FILE")]
    pub database_path: Option<PathBuf>,
    /// With --base-url and --cache redis: the server's Redis.
    #[arg(long, env = "DW_PERF_REDIS_URL", value_name = "URL")]
    pub redis_url: Option<String>,
    /// Bearer token for an external server that requires one.
    #[arg(long, env = "DW_PERF_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The dwserver binary to start [default: next to this binary].
    #[arg(long, env = "DW_PERF_SERVER_BIN", value_name = "FILE")]
    pub server_bin: Option<PathBuf>,
    /// The redis-server binary to start for --cache redis.
    #[arg(long, env = "DW_PERF_REDIS_SERVER_BIN", default_value = "redis-server")]
    pub redis_server_bin: PathBuf,
    /// Where the artifacts go.
    #[arg(long, env = "DW_PERF_OUTPUT_DIR", default_value = "build/perf")]
    pub output: PathBuf,
    /// The bounded-growth policy the server runs under [default:
    /// policy/dw-bounded-growth.toml in the current directory or the
    /// nearest one above it, else in the repository dwsoak was built from].
    #[arg(long, env = "DW_PERF_POLICY", value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Distinct namespaces the load spreads over.
    #[arg(long, env = "DW_PERF_NAMESPACES", default_value_t = 8)]
    pub namespaces: u32,
    /// Task queues per namespace.
    #[arg(long, env = "DW_PERF_TASK_QUEUES", default_value_t = 4)]
    pub task_queues: u32,
    /// Concurrent load threads.
    #[arg(long, env = "DW_PERF_WORKERS", default_value_t = 4)]
    pub workers: u32,
    /// Workflow starts per second over all threads (0: as fast as they go).
    #[arg(long, env = "DW_PERF_STARTS_PER_SECOND", default_value_t = 20.0)]
    pub starts_per_second: f64,
    /// Signals sent to each started workflow.
    #[arg(long, env = "DW_PERF_SIGNALS_PER_WORKFLOW", default_value_t = 1)]
    pub signals_per_workflow: u32,
    /// Address of the harness's own /metrics.
    #[arg(long, env = "DW_PERF_METRICS_ADDR", default_value = "127.0.0.1:0")]
    pub metrics_addr: String,
    /// The repository a trusted soak comes from (owner/name).
    #[arg(long, env = "DW_PERF_TRUSTED_REPOSITORY", default_value = dwevidence::profile::DEFAULT_REPOSITORY)]
    pub repository: String,
    /// No progress bar (it is also hidden when stderr is not a terminal).
    #[arg(long)]
    pub quiet: bool,
}

/// The cache backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// dwserver's in-process cache.
    Memory,
    /// Redis (started by the harness unless --redis-url is given).
    Redis,
}

impl Backend {
    /// The name recorded in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis => "redis",
        }
    }
}

/// A configuration problem, found before the soak starts (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A threshold map is wrong.
    #[error(transparent)]
    Threshold(#[from] ThresholdError),
    /// A value out of range.
    #[error("{0}")]
    Invalid(String),
    /// The policy file.
    #[error("cannot use the policy {}: {message}", .path.display())]
    Policy {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Soak {
    /// The raw arguments.
    pub args: Args,
    /// The policy.
    pub policy: Policy,
    /// The file it was read from.
    pub policy_path: PathBuf,
    /// Its bytes' SHA-256.
    pub policy_sha256: String,
    /// Its cache policy IDs, in file order.
    pub cache_policy_ids: Vec<String>,
    /// Coverage as a fraction.
    pub min_sample_coverage: f64,
    /// `duration / sample_interval`.
    pub expected_samples: u64,
    /// Below this the run fails.
    pub minimum_trusted_samples: u64,
    /// Slope warmup.
    pub warmup: Duration,
    /// Parsed maps.
    pub max_by_policy: Option<BTreeMap<String, u64>>,
    /// Parsed post-drain maps.
    pub max_final_by_policy: Option<BTreeMap<String, u64>>,
}

/// The policy's place in a checkout of this repository.
pub const DEFAULT_POLICY: &str = "policy/dw-bounded-growth.toml";

/// The checkout dwsoak was built from: where its policy is found when the
/// current directory is outside any checkout.
const BUILT_FROM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// [`DEFAULT_POLICY`] in `cwd` (as that relative path, which the artifact's
/// provenance records), in the nearest directory above it, or in
/// `built_from`, whichever comes first.
pub fn find_policy(cwd: &Path, built_from: &Path) -> Option<PathBuf> {
    if cwd.join(DEFAULT_POLICY).is_file() {
        return Some(PathBuf::from(DEFAULT_POLICY));
    }
    cwd.ancestors()
        .skip(1)
        .chain([built_from])
        .map(|dir| dir.join(DEFAULT_POLICY))
        .find(|path| path.is_file())
}

/// Parses a coverage of `0.8` or `80%`.
pub fn parse_coverage(text: &str) -> Result<f64, ConfigError> {
    let trimmed = text.trim();
    let value = match trimmed.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map(|p| p / 100.0),
        None => trimmed.parse::<f64>(),
    }
    .map_err(|_| {
        ConfigError::Invalid(format!(
            "DW_PERF_MIN_SAMPLE_COVERAGE must be a fraction (0.8) or a percentage (80%), not {text:?}"
        ))
    })?;
    if !(value > 0.0 && value <= 1.0) {
        return Err(ConfigError::Invalid(format!(
            "DW_PERF_MIN_SAMPLE_COVERAGE must lie in (0, 1] (or (0%, 100%]), not {text:?}"
        )));
    }
    Ok(value)
}

impl Soak {
    /// Validates `args` against the policy file they name (or the one
    /// [`find_policy`] finds).
    pub fn new(mut args: Args) -> Result<Soak, ConfigError> {
        let path = match &args.policy {
            Some(path) => path.clone(),
            None => {
                let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
                find_policy(&cwd, Path::new(BUILT_FROM)).ok_or_else(|| ConfigError::Policy {
                    path: PathBuf::from(DEFAULT_POLICY),
                    message: format!(
                        "not found in {} or any directory above it, nor in {BUILT_FROM}; \
                         run dwsoak in the repository or give --policy FILE (DW_PERF_POLICY)",
                        cwd.display()
                    ),
                })?
            }
        };
        let bytes = std::fs::read(&path).map_err(|e| ConfigError::Policy {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let text = String::from_utf8_lossy(&bytes);
        let policy = Policy::from_toml_str(&text).map_err(|e| ConfigError::Policy {
            path: path.clone(),
            message: e.to_string(),
        })?;
        args.policy = Some(path);
        Soak::with_policy(args, policy, &bytes)
    }

    /// Validates `args` against an already loaded policy.
    pub fn with_policy(
        args: Args,
        policy: Policy,
        policy_bytes: &[u8],
    ) -> Result<Soak, ConfigError> {
        let ids: Vec<String> = policy
            .cache_keys
            .iter()
            .map(|c| c.id.value.clone())
            .collect();
        let parse = |var: &str, text: &Option<String>| {
            text.as_deref()
                .map(|t| thresholds::parse(var, t, &ids))
                .transpose()
        };
        let max_by_policy = parse(MAX_VAR, &args.max_server_cache_keys_by_policy)?;
        let max_final_by_policy =
            parse(MAX_FINAL_VAR, &args.max_final_server_cache_keys_by_policy)?;
        let min_sample_coverage = parse_coverage(&args.min_sample_coverage)?;
        if args.sample_interval == 0 {
            return Err(ConfigError::Invalid(
                "DW_PERF_SAMPLE_INTERVAL_SECONDS must be at least 1".into(),
            ));
        }
        if args.duration < args.sample_interval {
            return Err(ConfigError::Invalid(format!(
                "DW_PERF_DURATION_SECONDS ({}) must be at least one sample interval ({})",
                args.duration, args.sample_interval
            )));
        }
        if args.namespaces == 0 || args.task_queues == 0 || args.workers == 0 {
            return Err(ConfigError::Invalid(
                "--namespaces, --task-queues and --workers must be at least 1".into(),
            ));
        }
        if !(args.starts_per_second >= 0.0 && args.starts_per_second.is_finite()) {
            return Err(ConfigError::Invalid(
                "--starts-per-second must be 0 or more".into(),
            ));
        }
        if args.max_memory_slope.is_some_and(|s| !s.is_finite()) {
            return Err(ConfigError::Invalid(
                "DW_PERF_MAX_MEMORY_SLOPE_BYTES_PER_HOUR must be a number".into(),
            ));
        }
        let expected_samples = args.duration / args.sample_interval;
        let minimum_trusted_samples = args
            .minimum_trusted_samples
            .unwrap_or_else(|| ((expected_samples as f64) * min_sample_coverage).ceil() as u64)
            .max(1);
        let warmup = Duration::from_secs(args.warmup.unwrap_or((args.duration / 10).min(300)));
        Ok(Soak {
            policy_path: args
                .policy
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_POLICY)),
            policy_sha256: dwevidence::digest::sha256_hex(policy_bytes),
            cache_policy_ids: ids,
            policy,
            min_sample_coverage,
            expected_samples,
            minimum_trusted_samples,
            warmup,
            max_by_policy,
            max_final_by_policy,
            args,
        })
    }
}

/// A reviewed policy with one cache entry per `(id, prefix)`, for tests.
#[cfg(test)]
pub(crate) fn test_policy(entries: &[(&str, &str)]) -> (Policy, String) {
    let mut text = String::from("schema_version = 1\n");
    for (id, prefix) in entries {
        text.push_str(&format!(
            "[cache_keys.{id}]\nowner = \"src/lib.rs\"\nprefix = \"{prefix}\"\ndimensions = []\nttl = \"t.\"\nbound = \"b.\"\nadmission = \"a.\"\neviction = \"e.\"\n"
        ));
    }
    (Policy::from_toml_str(&text).expect("test policy"), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soak(extra: &[&str]) -> Result<Soak, ConfigError> {
        let mut argv = vec!["dwsoak"];
        argv.extend_from_slice(extra);
        let args = Args::try_parse_from(argv).unwrap();
        let (policy, text) = test_policy(&[("long_poll_signals", "server:long-poll-signal:")]);
        Soak::with_policy(args, policy, text.as_bytes())
    }

    #[test]
    fn the_policy_is_found_from_a_subdirectory_and_from_outside_the_checkout() {
        let checkout = tempfile::tempdir().unwrap();
        let policy = checkout.path().join(DEFAULT_POLICY);
        std::fs::create_dir_all(policy.parent().unwrap()).unwrap();
        std::fs::write(&policy, "schema_version = 1\n").unwrap();
        let deep = checkout.path().join("crates/dwsoak/src");
        std::fs::create_dir_all(&deep).unwrap();
        let nowhere = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        // At the root: the relative path the artifact records.
        assert_eq!(
            find_policy(checkout.path(), nowhere.path()),
            Some(PathBuf::from(DEFAULT_POLICY))
        );
        // Below it: the checkout's file, not a path relative to nowhere.
        assert_eq!(find_policy(&deep, nowhere.path()), Some(policy.clone()));
        // Outside any checkout: the one dwsoak was built from.
        assert_eq!(find_policy(elsewhere.path(), checkout.path()), Some(policy));
        assert_eq!(find_policy(elsewhere.path(), nowhere.path()), None);
        // The real default: this repository's policy.
        assert!(Path::new(BUILT_FROM).join(DEFAULT_POLICY).is_file());
    }

    #[test]
    fn defaults_derive_the_sample_counts() {
        let s = soak(&["--duration", "600", "--sample-interval", "10"]).unwrap();
        assert_eq!(s.expected_samples, 60);
        assert_eq!(s.minimum_trusted_samples, 48);
        assert_eq!(s.warmup, Duration::from_secs(60));
        assert!((s.min_sample_coverage - 0.8).abs() < 1e-12);
    }

    #[test]
    fn threshold_maps_are_checked_before_the_soak_by_key() {
        let e = soak(&[
            "--max-server-cache-keys-by-policy",
            r#"{"long_poll_signal": 3}"#,
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`long_poll_signal` is not a cache policy ID"),
            "{e}"
        );
        let e = soak(&[
            "--max-final-server-cache-keys-by-policy",
            r#"{"long_poll_signals": -1}"#,
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("DW_PERF_MAX_FINAL_SERVER_CACHE_KEYS_BY_POLICY: `long_poll_signals`"),
            "{e}"
        );
        let ok = soak(&[
            "--max-server-cache-keys-by-policy",
            r#"{"long_poll_signals": 3}"#,
        ])
        .unwrap();
        assert_eq!(ok.max_by_policy.unwrap()["long_poll_signals"], 3);
    }

    #[test]
    fn coverage_reads_fractions_and_percentages() {
        assert_eq!(parse_coverage("75%").unwrap(), 0.75);
        assert_eq!(parse_coverage("0.5").unwrap(), 0.5);
        for bad in ["0", "120%", "x", "-0.1"] {
            assert!(parse_coverage(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn impossible_windows_are_refused() {
        assert!(soak(&["--sample-interval", "0"]).is_err());
        assert!(soak(&["--duration", "3", "--sample-interval", "5"]).is_err());
        assert!(soak(&["--workers", "0"]).is_err());
    }
}
