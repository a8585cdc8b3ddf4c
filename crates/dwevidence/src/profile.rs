//! The `trusted_long_soak_v1` profile: every condition of the seed's Soak
//! Evidence paragraph, each checked on its own.
//!
//! Each condition looks at the raw fields of a [`Summary`] and at a
//! [`Reference`] (the policy the checker trusts and the repository the soak
//! must come from), never at the artifact's recorded verdict. The harness
//! evaluates it against the policy it loaded; `dwlint evidence verify`
//! evaluates it again against the policy in the tree, so an artifact edited
//! after the fact, or produced under another policy, fails here. The
//! conditions are independent on purpose: a report says which ones failed
//! and why, and a test can break one alone.

use std::collections::BTreeMap;

use crate::summary::{
    AssertionFailure, FailedCondition, ResourceHealth, RunResult, ServerImage, ServiceMode,
    Summary, Trust, PROFILE,
};
use crate::thresholds;

/// The workflow name a trusted soak must run under.
pub const SOAK_WORKFLOW: &str = "Server Perf Soak";
/// The ref a trusted soak must run on.
pub const SOAK_REF: &str = "refs/heads/main";
/// The repository the seed names; the verifier's `--repository` overrides it.
pub const DEFAULT_REPOSITORY: &str = "durable-workflow/server";
/// Shortest load a trusted soak may have.
pub const MIN_TRUSTED_SECONDS: u64 = 3600;
/// Shortest run for which a configured slope limit requires a slope.
pub const SLOPE_MIN_SECONDS: u64 = 600;
/// The GitHub Actions variables a trusted artifact must carry.
pub const GITHUB_VARS: [&str; 7] = [
    "GITHUB_REPOSITORY",
    "GITHUB_REF",
    "GITHUB_SHA",
    "GITHUB_WORKFLOW",
    "GITHUB_EVENT_NAME",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
];
/// Events that start a trusted soak.
pub const TRUSTED_EVENTS: [&str; 2] = ["schedule", "workflow_dispatch"];
/// Resources every run samples; the Redis backend adds [`REDIS_RESOURCES`].
pub const BASE_RESOURCES: [&str; 4] = [
    "server_rss",
    "server_cache_keys",
    "sqlite_file",
    "live_metrics",
];
/// Resources a Redis-backed run samples in addition.
pub const REDIS_RESOURCES: [&str; 2] = ["redis_memory", "redis_keys"];

/// What a checker trusts, independently of the artifact.
#[derive(Debug, Clone)]
pub struct Reference<'a> {
    /// Every `[cache_keys.<id>]` of the trusted policy.
    pub cache_policy_ids: &'a [String],
    /// SHA-256 of the trusted policy file.
    pub policy_sha256: &'a str,
    /// `owner/name` a trusted soak must come from.
    pub repository: &'a str,
    /// The pinned server image the checker knows independently of the
    /// artifact (`dwlint evidence verify --server-image`), if it knows one:
    /// the artifact's pin must then be exactly this reference.
    pub server_image: Option<&'a str>,
}

/// A condition of the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Condition {
    /// The load ran for at least an hour.
    DurationAtLeastOneHour,
    /// The harness owned and sampled the services (the seed's compose-backed sampling).
    ManagedResourceSampling,
    /// `RUNNER_ENVIRONMENT=self-hosted`.
    SelfHostedRunner,
    /// Every GitHub Actions variable of [`GITHUB_VARS`] is present.
    GithubActionsProvenance,
    /// The soak workflow of the trusted repository on `refs/heads/main`.
    SoakWorkflowOnMain,
    /// Started by `schedule` or `workflow_dispatch`.
    ScheduledOrDispatched,
    /// `tracked_working_tree_clean` is true.
    CleanTrackedWorkingTree,
    /// The checked-out commit is `GITHUB_SHA`.
    CheckoutMatchesGithubSha,
    /// The recorded policy digest is the trusted policy's.
    PolicyDigest,
    /// Periodic samples cover at least the configured fraction of the window.
    SampleCoverage,
    /// At least `minimum_trusted_samples` periodic samples.
    MinimumTrustedSamples,
    /// Every resource was sampled every time, and the post-drain sample exists.
    SamplingHealth,
    /// Both per-policy threshold maps were given and name every cache policy.
    PerPolicyThresholdMaps,
    /// The observed per-policy maps mirror the cache inventory.
    PerPolicyObservedMaps,
    /// A configured slope limit has a fitted slope within it.
    MemorySlope,
    /// No bounded-growth assertion failed (recorded or recomputed).
    NoAssertionFailures,
    /// The run itself passed.
    RunPassed,
    /// The server that ran is the pinned server image.
    ServerImageMatchesPin,
}

impl Condition {
    /// Every condition, in report order.
    pub const ALL: [Condition; 18] = [
        Condition::DurationAtLeastOneHour,
        Condition::ManagedResourceSampling,
        Condition::SelfHostedRunner,
        Condition::GithubActionsProvenance,
        Condition::SoakWorkflowOnMain,
        Condition::ScheduledOrDispatched,
        Condition::CleanTrackedWorkingTree,
        Condition::CheckoutMatchesGithubSha,
        Condition::PolicyDigest,
        Condition::SampleCoverage,
        Condition::MinimumTrustedSamples,
        Condition::SamplingHealth,
        Condition::PerPolicyThresholdMaps,
        Condition::PerPolicyObservedMaps,
        Condition::MemorySlope,
        Condition::NoAssertionFailures,
        Condition::RunPassed,
        Condition::ServerImageMatchesPin,
    ];

    /// The id recorded in `failed_conditions`.
    pub fn id(self) -> &'static str {
        match self {
            Condition::DurationAtLeastOneHour => "duration_at_least_one_hour",
            Condition::ManagedResourceSampling => "managed_resource_sampling",
            Condition::SelfHostedRunner => "self_hosted_runner",
            Condition::GithubActionsProvenance => "github_actions_provenance",
            Condition::SoakWorkflowOnMain => "soak_workflow_on_main",
            Condition::ScheduledOrDispatched => "scheduled_or_dispatched",
            Condition::CleanTrackedWorkingTree => "clean_tracked_working_tree",
            Condition::CheckoutMatchesGithubSha => "checkout_matches_github_sha",
            Condition::PolicyDigest => "policy_digest",
            Condition::SampleCoverage => "sample_coverage",
            Condition::MinimumTrustedSamples => "minimum_trusted_samples",
            Condition::SamplingHealth => "sampling_health",
            Condition::PerPolicyThresholdMaps => "per_policy_threshold_maps",
            Condition::PerPolicyObservedMaps => "per_policy_observed_maps",
            Condition::MemorySlope => "memory_slope",
            Condition::NoAssertionFailures => "no_assertion_failures",
            Condition::RunPassed => "run_passed",
            Condition::ServerImageMatchesPin => "server_image_matches_pin",
        }
    }

    /// The condition with `id`.
    pub fn from_id(id: &str) -> Option<Condition> {
        Condition::ALL.into_iter().find(|c| c.id() == id)
    }

    /// What the condition requires, in one sentence.
    pub fn requirement(self) -> &'static str {
        match self {
            Condition::DurationAtLeastOneHour => "The load runs for at least one hour.",
            Condition::ManagedResourceSampling => "The harness starts the services itself (dwserver, and redis-server for Redis) and samples exactly those processes; this is the seed's compose-backed sampling.",
            Condition::SelfHostedRunner => "The run executes on the disposable long-soak host, recorded as RUNNER_ENVIRONMENT=self-hosted.",
            Condition::GithubActionsProvenance => "The artifact carries GITHUB_REPOSITORY, GITHUB_REF, GITHUB_SHA, GITHUB_WORKFLOW, GITHUB_EVENT_NAME, GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT.",
            Condition::SoakWorkflowOnMain => "The run comes from the Server Perf Soak workflow of the trusted repository on refs/heads/main.",
            Condition::ScheduledOrDispatched => "The workflow was started by a schedule or a manual dispatch.",
            Condition::CleanTrackedWorkingTree => "The tracked working tree was clean, so no unreviewed source or policy edit ran.",
            Condition::CheckoutMatchesGithubSha => "The checked-out commit is GITHUB_SHA, so the artifact cannot claim evidence for another commit.",
            Condition::PolicyDigest => "The SHA-256 of the policy file matches the policy the checker trusts.",
            Condition::SampleCoverage => "Periodic samples cover at least DW_PERF_MIN_SAMPLE_COVERAGE (default 80 %) of the duration / sample-interval window; the post-drain sample does not count.",
            Condition::MinimumTrustedSamples => "periodic_sample_count is at least minimum_trusted_samples.",
            Condition::SamplingHealth => "Every resource sample was collected successfully and the post-drain sample exists; a missing sample is never zero.",
            Condition::PerPolicyThresholdMaps => "DW_PERF_MAX_SERVER_CACHE_KEYS_BY_POLICY and DW_PERF_MAX_FINAL_SERVER_CACHE_KEYS_BY_POLICY were both given and name exactly the declared cache policies.",
            Condition::PerPolicyObservedMaps => "max_server_cache_keys_by_policy and final_server_cache_keys_by_policy name exactly the declared cache policies.",
            Condition::MemorySlope => "For runs of at least 10 minutes with a slope limit, the post-warmup memory slope is recorded and within the limit.",
            Condition::NoAssertionFailures => "No bounded-growth assertion failed: every per-policy maximum and post-drain count is within its threshold and every live check was clean.",
            Condition::RunPassed => "The harness marked the run passed.",
            Condition::ServerImageMatchesPin => "The run pins its server image by digest (DW_SERVER_IMAGE=<name>[:<tag>]@sha256:<digest>, the dwserver the soak workflow built from the checked-out commit), the dw_server_image reported by the started server's conformance evidence is that reference, and the executable the harness started has that SHA-256 (and, when the verifier is given --server-image, the pin is that reference).",
        }
    }
}

/// A condition that failed, with why and where to look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionFailure {
    /// The condition.
    pub condition: Condition,
    /// Why it failed, naming the values seen.
    pub explanation: String,
    /// The summary field the explanation is about (dotted path).
    pub field: &'static str,
}

/// Every failed condition of `summary` under `reference`, in report order.
pub fn evaluate(summary: &Summary, reference: &Reference) -> Vec<ConditionFailure> {
    let mut failures = Vec::new();
    for condition in Condition::ALL {
        if let Some((field, explanation)) = check(condition, summary, reference) {
            failures.push(ConditionFailure {
                condition,
                explanation,
                field,
            });
        }
    }
    failures
}

/// The verdict the failures imply, as `evidence.trust` records it.
pub fn verdict(failures: &[ConditionFailure]) -> Trust {
    Trust {
        profile: PROFILE.to_owned(),
        eligible: failures.is_empty(),
        failed_conditions: failures
            .iter()
            .map(|f| FailedCondition {
                condition: f.condition.id().to_owned(),
                explanation: f.explanation.clone(),
            })
            .collect(),
    }
}

type Outcome = Option<(&'static str, String)>;

fn fail(field: &'static str, explanation: String) -> Outcome {
    Some((field, explanation))
}

fn check(condition: Condition, s: &Summary, r: &Reference) -> Outcome {
    let github = &s.provenance.github;
    let var = |name: &str| {
        github
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    };
    match condition {
        Condition::DurationAtLeastOneHour => {
            let configured = s.config.duration_seconds;
            // No slack: the harness waits until the configured duration
            // has passed before it stops the load, so a full run reads at
            // least 3,600 s and 3,599.9 s is a run cut short.
            let ran = s.run.load_seconds;
            if configured < MIN_TRUSTED_SECONDS {
                fail("config.duration_seconds", format!("the configured duration is {configured} s; a trusted soak runs at least {MIN_TRUSTED_SECONDS} s"))
            } else if ran < MIN_TRUSTED_SECONDS as f64 {
                fail("run.load_seconds", format!("the load ran {:.0} s of the configured {configured} s; a trusted soak runs at least {MIN_TRUSTED_SECONDS} s", s.run.load_seconds))
            } else {
                None
            }
        }
        Condition::ManagedResourceSampling => (s.config.services != ServiceMode::Managed).then(|| {
            ("config.services", "the harness drove an externally started server, so its resource samples cannot be tied to the processes under test; run it with --start-server (and --start-redis for Redis)".to_owned())
        }),
        Condition::SelfHostedRunner => {
            let env = s.provenance.runner.environment.as_deref();
            (env != Some("self-hosted")).then(|| {
                ("provenance.runner.environment", format!("RUNNER_ENVIRONMENT is {}, not self-hosted; only the disposable long-soak host qualifies", shown(env)))
            })
        }
        Condition::GithubActionsProvenance => {
            let missing: Vec<&str> = GITHUB_VARS.iter().copied().filter(|v| var(v).is_none()).collect();
            (!missing.is_empty()).then(|| {
                ("provenance.github", format!("GitHub Actions provenance is missing {}", missing.join(", ")))
            })
        }
        Condition::SoakWorkflowOnMain => {
            let mut wrong = Vec::new();
            for (name, want) in [
                ("GITHUB_REPOSITORY", r.repository),
                ("GITHUB_WORKFLOW", SOAK_WORKFLOW),
                ("GITHUB_REF", SOAK_REF),
            ] {
                if var(name) != Some(want) {
                    wrong.push(format!("{name} is {} (want {want})", shown(var(name))));
                }
            }
            (!wrong.is_empty()).then(|| ("provenance.github", wrong.join("; ")))
        }
        Condition::ScheduledOrDispatched => {
            let event = var("GITHUB_EVENT_NAME");
            (!event.is_some_and(|e| TRUSTED_EVENTS.contains(&e))).then(|| {
                ("provenance.github", format!("GITHUB_EVENT_NAME is {}; only schedule and workflow_dispatch runs qualify", shown(event)))
            })
        }
        Condition::CleanTrackedWorkingTree => match s.provenance.tracked_working_tree_clean {
            Some(true) => None,
            Some(false) => fail("provenance.tracked_working_tree_clean", "the tracked working tree had uncommitted changes when the soak ran".into()),
            None => fail("provenance.tracked_working_tree_clean", "the run did not record whether the tracked working tree was clean (not a git checkout?)".into()),
        },
        Condition::CheckoutMatchesGithubSha => {
            let checked_out = s.provenance.git_sha.as_deref();
            let claimed = var("GITHUB_SHA");
            match (checked_out, claimed) {
                (Some(a), Some(b)) if a == b => None,
                _ => fail("provenance.git_sha", format!("the checked-out commit is {} but GITHUB_SHA is {}", shown(checked_out), shown(claimed))),
            }
        }
        Condition::PolicyDigest => (s.provenance.policy_sha256 != r.policy_sha256).then(|| {
            ("provenance.policy_sha256", format!("the artifact's policy digest {} is not the digest of the trusted policy ({})", s.provenance.policy_sha256, r.policy_sha256))
        }),
        Condition::SampleCoverage => coverage(s),
        Condition::MinimumTrustedSamples => {
            let (got, want) = (s.samples.periodic_sample_count, s.config.minimum_trusted_samples);
            (got < want || want == 0).then(|| {
                ("samples.periodic_sample_count", format!("{got} periodic samples, below minimum_trusted_samples ({want}); a run with too few samples is failed, not evidence"))
            })
        }
        Condition::SamplingHealth => sampling_health(s),
        Condition::PerPolicyThresholdMaps => {
            let mut problems = Vec::new();
            for (name, map) in [
                (thresholds::MAX_VAR, &s.config.max_server_cache_keys_by_policy),
                (thresholds::MAX_FINAL_VAR, &s.config.max_final_server_cache_keys_by_policy),
            ] {
                match map {
                    None => problems.push(format!("{name} was not set")),
                    Some(map) => {
                        if let Some(problem) = inventory_mismatch(map, r.cache_policy_ids) {
                            problems.push(format!("{name} {problem}"));
                        }
                    }
                }
            }
            (!problems.is_empty()).then(|| ("config.max_server_cache_keys_by_policy", problems.join("; ")))
        }
        Condition::PerPolicyObservedMaps => {
            let mut problems = Vec::new();
            for (name, map) in [
                ("max_server_cache_keys_by_policy", &s.max_server_cache_keys_by_policy),
                ("final_server_cache_keys_by_policy", &s.final_server_cache_keys_by_policy),
            ] {
                if let Some(problem) = inventory_mismatch(map, r.cache_policy_ids) {
                    problems.push(format!("{name} {problem}"));
                }
            }
            (!problems.is_empty()).then(|| ("max_server_cache_keys_by_policy", problems.join("; ")))
        }
        Condition::MemorySlope => memory_slope(s),
        Condition::NoAssertionFailures => {
            let mut failures = s.assertion_failures.clone();
            for breach in threshold_breaches(s) {
                if !failures.contains(&breach) {
                    failures.push(breach);
                }
            }
            let problems: Vec<String> = failures.iter().map(|a| format!("{}: {}", a.assertion, a.message)).collect();
            (!problems.is_empty()).then(|| ("assertion_failures", problems.join("; ")))
        }
        Condition::RunPassed => (s.run.result != RunResult::Passed).then(|| {
            let why = if s.run.failures.is_empty() { "no reason recorded".to_owned() } else { s.run.failures.join("; ") };
            ("run.result", format!("the harness marked the run failed: {why}"))
        }),
        Condition::ServerImageMatchesPin => server_image(s.provenance.server_image.as_ref(), r.server_image),
    }
}

/// The reported `dw_server_image` against the pinned server image, and the
/// pin against the executable that ran.
fn server_image(image: Option<&ServerImage>, expected: Option<&str>) -> Outcome {
    const FIELD: &str = "provenance.server_image";
    let Some(image) = image else {
        return fail(FIELD, "the artifact records no server image, so the server that ran cannot be matched against the pinned image".into());
    };
    let Some(pinned) = image.pinned.as_deref().filter(|p| !p.is_empty()) else {
        return fail("provenance.server_image.pinned", "DW_SERVER_IMAGE was not set: the run pinned no server image (the soak workflow pins the dwserver it builds)".into());
    };
    if let Some(expected) = expected.filter(|e| *e != pinned) {
        return fail(
            "provenance.server_image.pinned",
            format!(
                "the run pinned `{pinned}`, not the server image the checker trusts (`{expected}`)"
            ),
        );
    }
    let Some(digest) = ServerImage::pinned_digest(pinned) else {
        return fail("provenance.server_image.pinned", format!("the pin `{pinned}` names no digest (`<name>[:<tag>]@sha256:<64 lower-case hex>`); a tag can move, so it pins nothing"));
    };
    if let Some(error) = &image.error {
        return fail(
            FIELD,
            format!("the server image could not be read: {error}"),
        );
    }
    match image.dw_server_image.as_deref() {
        Some(reported) if reported == pinned => {}
        reported => {
            return fail(
                "provenance.server_image.dw_server_image",
                format!(
                    "the started server reported dw_server_image {}, not the pinned `{pinned}`",
                    shown(reported)
                ),
            )
        }
    }
    match image.executable_sha256.as_deref() {
        Some(ran) if ran == digest => None,
        Some(ran) => fail("provenance.server_image.executable_sha256", format!("the executable the harness started has SHA-256 {ran}, not the pinned digest {digest}")),
        None => fail("provenance.server_image.executable_sha256", "the harness did not start the server, so no executable digest ties the server that ran to the pin".into()),
    }
}

fn shown(value: Option<&str>) -> String {
    value.map_or_else(|| "unset".to_owned(), |v| format!("`{v}`"))
}

/// Coverage recomputed from the configuration, not taken from the
/// artifact's own ratio, so a shrunken denominator cannot pass.
fn coverage(s: &Summary) -> Outcome {
    let interval = s.config.sample_interval_seconds;
    if interval == 0 {
        return fail(
            "config.sample_interval_seconds",
            "the sample interval is 0 s, so no coverage can be computed".into(),
        );
    }
    let expected = (s.config.duration_seconds / interval).max(1);
    let min = s.config.min_sample_coverage;
    if !(min > 0.0 && min <= 1.0) {
        return fail(
            "config.min_sample_coverage",
            format!("min_sample_coverage is {min}; it must lie in (0, 1]"),
        );
    }
    if s.samples.expected_periodic_samples != expected {
        return fail(
            "samples.expected_periodic_samples",
            format!(
                "expected_periodic_samples is {} but duration / sample interval is {expected}",
                s.samples.expected_periodic_samples
            ),
        );
    }
    let got = s.samples.periodic_sample_count as f64 / expected as f64;
    (got < min).then(|| {
        (
            "samples.coverage",
            format!(
                "{} of {expected} periodic samples ({:.1} %) is below the required {:.1} %",
                s.samples.periodic_sample_count,
                got * 100.0,
                min * 100.0
            ),
        )
    })
}

fn sampling_health(s: &Summary) -> Outcome {
    let mut required: Vec<&str> = BASE_RESOURCES.to_vec();
    if s.config.cache_backend == "redis" {
        required.extend(REDIS_RESOURCES);
    }
    let mut problems = Vec::new();
    for name in required {
        match s.sampling_health.get(name) {
            None => problems.push(format!("{name} was never sampled")),
            Some(health) if !health.healthy() => problems.push(unhealthy(name, health)),
            Some(_) => {}
        }
    }
    for (name, health) in &s.sampling_health {
        if !health.healthy() && !problems.iter().any(|p| p.starts_with(name.as_str())) {
            problems.push(unhealthy(name, health));
        }
    }
    if !s.samples.final_sample_collected {
        problems.push("the post-drain sample was not collected".into());
    }
    (!problems.is_empty()).then(|| ("sampling_health", problems.join("; ")))
}

fn unhealthy(name: &str, health: &ResourceHealth) -> String {
    format!(
        "{name} collected {} of {} samples{}",
        health.collected,
        health.attempts,
        health
            .last_error
            .as_ref()
            .map(|e| format!(" (last error: {e})"))
            .unwrap_or_default()
    )
}

fn inventory_mismatch(map: &BTreeMap<String, u64>, ids: &[String]) -> Option<String> {
    let missing = thresholds::missing(map, ids);
    let unknown: Vec<&str> = map
        .keys()
        .filter(|k| !ids.contains(k))
        .map(String::as_str)
        .collect();
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("leaves out {}", missing.join(", ")));
    }
    if !unknown.is_empty() {
        parts.push(format!("names undeclared {}", unknown.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join(" and "))
}

fn memory_slope(s: &Summary) -> Outcome {
    let limit = s.config.memory_slope_limit_bytes_per_hour?;
    if s.config.duration_seconds < SLOPE_MIN_SECONDS {
        return None;
    }
    match &s.memory_slope {
        None => fail("memory_slope", format!("a slope limit of {limit:.0} bytes/hour is set for a run of {} s but no post-warmup slope was recorded", s.config.duration_seconds)),
        Some(slope) if slope.points < 2 => fail("memory_slope.points", format!("the slope was fitted to {} point(s)", slope.points)),
        Some(slope) if slope.bytes_per_hour > limit => fail("memory_slope.bytes_per_hour", format!("memory grew {:.0} bytes/hour after the warmup, above the limit of {limit:.0}", slope.bytes_per_hour)),
        Some(_) => None,
    }
}

/// Threshold breaches visible in the artifact's own numbers: the harness
/// records these as its assertion failures, and the verifier recomputes
/// them in case a writer did not.
pub fn threshold_breaches(s: &Summary) -> Vec<AssertionFailure> {
    let mut breaches = Vec::new();
    for (label, limits, observed) in [
        (
            "max_server_cache_keys_by_policy",
            &s.config.max_server_cache_keys_by_policy,
            &s.max_server_cache_keys_by_policy,
        ),
        (
            "final_server_cache_keys_by_policy",
            &s.config.max_final_server_cache_keys_by_policy,
            &s.final_server_cache_keys_by_policy,
        ),
    ] {
        let Some(limits) = limits else { continue };
        for (id, limit) in limits {
            if let Some(seen) = observed.get(id).filter(|seen| *seen > limit) {
                breaches.push(AssertionFailure {
                    assertion: format!("{label}.{id}"),
                    message: format!("{seen} keys, above the limit of {limit}"),
                });
            }
        }
    }
    if let (Some(limit), Some(seen)) = (s.config.max_server_cache_keys, s.maxima.server_cache_keys)
    {
        if seen > limit {
            breaches.push(AssertionFailure {
                assertion: "max_server_cache_keys".into(),
                message: format!(
                    "{seen} server keys at the peak, above the aggregate ceiling of {limit}"
                ),
            });
        }
    }
    breaches
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
