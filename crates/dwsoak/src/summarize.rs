//! From samples to `summary.json`: maxima, the drain, the slope, the
//! assertions, the run's verdict and the trust verdict.
//!
//! Pure over its inputs, so every rule of the seed's Soak Evidence section
//! that the harness applies (a missing sample fails the run, too few samples
//! fail it, a breached threshold is an assertion failure) is tested without
//! a server.

use std::collections::BTreeMap;

use dwevidence::profile::{self, Reference, SLOPE_MIN_SECONDS};
use dwevidence::sample::{Sample, SampleKind};
use dwevidence::slope;
use dwevidence::summary::{
    AssertionFailure, Drain, Evidence, Maxima, MemorySlope, Provenance, RequestTotals,
    ResourceHealth, RunConfig, RunOutcome, RunResult, SampleCoverage, ServiceMode, Summary, Tool,
    Workload, SCHEMA_VERSION,
};

use crate::config::Soak;
use crate::load::Totals;

/// Everything a run observed.
#[derive(Debug, Clone)]
pub struct Observations {
    /// Periodic samples then the final one (if taken).
    pub samples: Vec<Sample>,
    /// Per resource.
    pub health: BTreeMap<String, ResourceHealth>,
    /// Load totals at the end.
    pub totals: Totals,
    /// Live findings seen at any sample (deduplicated).
    pub live_findings: Vec<String>,
    /// `server:*` keys no policy covers, seen at any sample.
    pub unowned_keys: Vec<String>,
    /// When the load started and the run finished.
    pub started_at_unix_ms: u64,
    /// End of the final sample.
    pub finished_at_unix_ms: u64,
    /// How long the load ran.
    pub load_seconds: f64,
    /// Managed or external services.
    pub services: ServiceMode,
    /// Harness failures not tied to a sample (e.g. interrupted).
    pub failures: Vec<String>,
}

fn max_of(samples: &[&Sample], get: impl Fn(&Sample) -> Option<u64>) -> Option<u64> {
    samples.iter().filter_map(|s| get(s)).max()
}

/// Builds the summary and its trust verdict.
pub fn summarize(soak: &Soak, obs: &Observations, provenance: Provenance) -> Summary {
    let args = &soak.args;
    let periodic: Vec<&Sample> = obs
        .samples
        .iter()
        .filter(|s| s.kind == SampleKind::Periodic)
        .collect();
    let last = obs
        .samples
        .iter()
        .rev()
        .find(|s| s.kind == SampleKind::Final);
    let mut failures = obs.failures.clone();
    let incomplete = periodic.iter().filter(|s| !s.errors.is_empty()).count();
    if incomplete > 0 {
        failures.push(format!("{incomplete} periodic sample(s) missed a resource (see sampling_health); a missing sample is not a zero"));
    }
    match last {
        None => failures.push("the post-drain sample was not taken".into()),
        Some(s) if !s.errors.is_empty() => failures.push(format!(
            "the post-drain sample missed {}",
            s.errors.keys().cloned().collect::<Vec<_>>().join(", ")
        )),
        Some(_) => {}
    }
    let count = periodic.len() as u64;
    if count < soak.minimum_trusted_samples {
        failures.push(format!(
            "{count} periodic samples, below minimum_trusted_samples ({})",
            soak.minimum_trusted_samples
        ));
    }
    let mut max_by_policy: BTreeMap<String, u64> = soak
        .cache_policy_ids
        .iter()
        .map(|id| (id.clone(), 0))
        .collect();
    for sample in &periodic {
        for (id, n) in &sample.server_cache_keys_by_policy {
            let entry = max_by_policy.entry(id.clone()).or_default();
            *entry = (*entry).max(*n);
        }
    }
    let final_by_policy: BTreeMap<String, u64> = match last {
        Some(s) if !s.server_cache_keys_by_policy.is_empty() => {
            s.server_cache_keys_by_policy.clone()
        }
        _ => BTreeMap::new(),
    };
    let memory_slope = fit_slope(soak, &periodic);
    let config = RunConfig {
        duration_seconds: args.duration,
        sample_interval_seconds: args.sample_interval,
        warmup_seconds: soak.warmup.as_secs(),
        drain_seconds: args.drain,
        min_sample_coverage: soak.min_sample_coverage,
        minimum_trusted_samples: soak.minimum_trusted_samples,
        memory_slope_limit_bytes_per_hour: args.max_memory_slope,
        cache_backend: args.cache.name().to_owned(),
        services: obs.services,
        max_server_cache_keys_by_policy: soak.max_by_policy.clone(),
        max_final_server_cache_keys_by_policy: soak.max_final_by_policy.clone(),
        max_server_cache_keys: args.max_server_cache_keys,
        workload: Workload {
            namespaces: args.namespaces,
            task_queues: args.task_queues,
            workers: args.workers,
            starts_per_second: args.starts_per_second,
            signals_per_workflow: args.signals_per_workflow,
        },
    };
    let t = &obs.totals;
    let mut summary = Summary {
        schema_version: SCHEMA_VERSION,
        tool: Tool {
            name: "dwsoak".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        run: RunOutcome {
            started_at_unix_ms: obs.started_at_unix_ms,
            finished_at_unix_ms: obs.finished_at_unix_ms,
            load_seconds: obs.load_seconds,
            result: RunResult::Passed,
            failures: Vec::new(),
        },
        config,
        samples: SampleCoverage {
            expected_periodic_samples: soak.expected_samples,
            periodic_sample_count: count,
            coverage: (count as f64 / soak.expected_samples.max(1) as f64).min(1.0),
            final_sample_collected: last.is_some_and(|s| s.errors.is_empty()),
        },
        maxima: Maxima {
            server_memory_bytes: max_of(&periodic, |s| s.server_memory_bytes),
            redis_memory_bytes: max_of(&periodic, |s| s.redis_memory_bytes),
            redis_db_keys: max_of(&periodic, |s| s.redis_db_keys),
            redis_polling_keys: max_of(&periodic, |s| s.redis_polling_keys),
            server_cache_keys: max_of(&periodic, |s| s.server_cache_keys),
            sqlite_file_bytes: max_of(&periodic, |s| s.sqlite_file_bytes),
        },
        max_server_cache_keys_by_policy: max_by_policy,
        final_server_cache_keys_by_policy: final_by_policy,
        final_drain: Drain {
            server_cache_keys: last.and_then(|s| s.server_cache_keys),
            redis_polling_keys: last.and_then(|s| s.redis_polling_keys),
            redis_db_keys: last.and_then(|s| s.redis_db_keys),
            server_memory_bytes: last.and_then(|s| s.server_memory_bytes),
        },
        memory_slope,
        sampling_health: obs.health.clone(),
        requests: RequestTotals {
            total: t.requests,
            errors: t.errors,
            by_status: t.by_status.clone(),
            latency_seconds_average: t.latency_average,
            workflows_started: t.workflows_started,
            signals_sent: t.signals_sent,
            workflows_completed: t.workflows_completed,
        },
        assertion_failures: Vec::new(),
        provenance,
        evidence: Evidence {
            trust: profile::verdict(&[]),
        },
    };
    let assertions = assertions(&summary, obs);
    if !assertions.is_empty() {
        failures.push(format!(
            "{} bounded-growth assertion(s) failed",
            assertions.len()
        ));
    }
    summary.assertion_failures = assertions;
    if !failures.is_empty() {
        summary.run.result = RunResult::Failed;
        summary.run.failures = failures;
    }
    let reference = Reference {
        cache_policy_ids: &soak.cache_policy_ids,
        policy_sha256: &soak.policy_sha256,
        repository: &args.repository,
        server_image: None,
    };
    summary.evidence.trust = profile::verdict(&profile::evaluate(&summary, &reference));
    summary
}

/// Threshold breaches, the slope limit, live findings and unowned keys.
fn assertions(summary: &Summary, obs: &Observations) -> Vec<AssertionFailure> {
    let mut failures = profile::threshold_breaches(summary);
    if let (Some(slope), Some(limit)) = (
        &summary.memory_slope,
        summary.config.memory_slope_limit_bytes_per_hour,
    ) {
        if slope.bytes_per_hour > limit {
            failures.push(AssertionFailure {
                assertion: "memory_slope".into(),
                message: format!(
                    "{:.0} bytes/hour after the warmup, above the limit of {limit:.0}",
                    slope.bytes_per_hour
                ),
            });
        }
    }
    for finding in &obs.live_findings {
        failures.push(AssertionFailure {
            assertion: "live_metrics".into(),
            message: finding.clone(),
        });
    }
    if !obs.unowned_keys.is_empty() {
        failures.push(AssertionFailure {
            assertion: "server_cache_keys.unowned".into(),
            message: format!(
                "server:* keys no declared cache policy covers: {}",
                obs.unowned_keys.join(", ")
            ),
        });
    }
    failures
}

/// The least-squares slope of RSS over the post-warmup periodic samples,
/// for runs long enough that a slope means something.
fn fit_slope(soak: &Soak, periodic: &[&Sample]) -> Option<MemorySlope> {
    if soak.args.duration < SLOPE_MIN_SECONDS {
        return None;
    }
    let warmup = soak.warmup.as_secs_f64();
    let points: Vec<(f64, f64)> = periodic
        .iter()
        .filter(|s| s.elapsed_seconds >= warmup)
        .filter_map(|s| Some((s.elapsed_seconds, s.server_memory_bytes? as f64)))
        .collect();
    let fit = slope::fit(&points)?;
    Some(MemorySlope {
        bytes_per_hour: fit.bytes_per_hour(),
        intercept_bytes: fit.intercept,
        points: fit.points as u64,
        limit_bytes_per_hour: soak.args.max_memory_slope,
    })
}

#[cfg(test)]
#[path = "summarize_tests.rs"]
mod tests;
