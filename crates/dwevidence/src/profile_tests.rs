//! Each condition of the profile, failing alone on an otherwise trusted run.

use std::collections::BTreeMap;

use super::*;
use crate::summary::*;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const DIGEST: &str = "aa";
/// SHA-256 of the soak's dwserver executable in the fixture.
const EXE: &str = "5f0c2b8e7d3a41f6b9c08e1d2a7f4b3c6e5d9a0b1c2d3e4f5a6b7c8d9e0f1a2b";

fn pin() -> String {
    format!("dwserver:0.1.0@sha256:{EXE}")
}

fn ids() -> Vec<String> {
    vec!["long_poll_signals".into(), "readiness_probe".into()]
}

fn per_policy(value: u64) -> BTreeMap<String, u64> {
    ids().into_iter().map(|id| (id, value)).collect()
}

fn healthy() -> ResourceHealth {
    ResourceHealth {
        attempts: 360,
        collected: 360,
        last_error: None,
    }
}

fn trusted() -> Summary {
    let github = [
        ("GITHUB_REPOSITORY", DEFAULT_REPOSITORY),
        ("GITHUB_REF", SOAK_REF),
        ("GITHUB_SHA", SHA),
        ("GITHUB_WORKFLOW", SOAK_WORKFLOW),
        ("GITHUB_EVENT_NAME", "schedule"),
        ("GITHUB_RUN_ID", "42"),
        ("GITHUB_RUN_ATTEMPT", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut sampling_health: BTreeMap<String, ResourceHealth> = BTreeMap::new();
    for name in BASE_RESOURCES.iter().chain(REDIS_RESOURCES.iter()) {
        sampling_health.insert((*name).to_owned(), healthy());
    }
    Summary {
        schema_version: SCHEMA_VERSION,
        tool: Tool {
            name: "dwsoak".into(),
            version: "0.1.0".into(),
        },
        run: RunOutcome {
            started_at_unix_ms: 1,
            finished_at_unix_ms: 3_700_000,
            load_seconds: 3600.2,
            result: RunResult::Passed,
            failures: vec![],
        },
        config: RunConfig {
            duration_seconds: 3600,
            sample_interval_seconds: 10,
            warmup_seconds: 300,
            drain_seconds: 70,
            min_sample_coverage: 0.8,
            minimum_trusted_samples: 300,
            memory_slope_limit_bytes_per_hour: Some(8_000_000.0),
            cache_backend: "redis".into(),
            services: ServiceMode::Managed,
            max_server_cache_keys_by_policy: Some(per_policy(1000)),
            max_final_server_cache_keys_by_policy: Some(per_policy(10)),
            max_server_cache_keys: Some(1000),
            workload: Workload {
                namespaces: 8,
                task_queues: 4,
                workers: 4,
                starts_per_second: 20.0,
                signals_per_workflow: 1,
            },
        },
        samples: SampleCoverage {
            expected_periodic_samples: 360,
            periodic_sample_count: 358,
            coverage: 0.99,
            final_sample_collected: true,
        },
        maxima: Maxima {
            server_memory_bytes: Some(50_000_000),
            redis_memory_bytes: Some(2_000_000),
            redis_db_keys: Some(120),
            redis_polling_keys: Some(80),
            server_cache_keys: Some(120),
            sqlite_file_bytes: Some(10_000_000),
        },
        max_server_cache_keys_by_policy: per_policy(100),
        final_server_cache_keys_by_policy: per_policy(0),
        final_drain: Drain {
            server_cache_keys: Some(0),
            redis_polling_keys: Some(0),
            redis_db_keys: Some(0),
            server_memory_bytes: Some(48_000_000),
        },
        memory_slope: Some(MemorySlope {
            bytes_per_hour: 1_000.0,
            intercept_bytes: 48_000_000.0,
            points: 330,
            limit_bytes_per_hour: Some(8_000_000.0),
        }),
        sampling_health,
        requests: RequestTotals {
            total: 10,
            errors: 0,
            by_status: BTreeMap::from([("200".to_owned(), 10)]),
            latency_seconds_average: 0.01,
            workflows_started: 2,
            signals_sent: 2,
            workflows_completed: 2,
        },
        assertion_failures: vec![],
        provenance: Provenance {
            github,
            runner: Runner {
                name: Some("soak-1".into()),
                os: Some("Linux".into()),
                arch: Some("X64".into()),
                environment: Some("self-hosted".into()),
            },
            compose_project: None,
            base_url: Some("http://127.0.0.1:8080".into()),
            git_sha: Some(SHA.into()),
            tracked_working_tree_clean: Some(true),
            policy_path: "policy/dw-bounded-growth.toml".into(),
            policy_sha256: DIGEST.into(),
            server_image: Some(ServerImage {
                pinned: Some(pin()),
                dw_server_image: Some(pin()),
                executable_sha256: Some(EXE.into()),
                error: None,
            }),
        },
        evidence: Evidence {
            trust: Trust {
                profile: PROFILE.into(),
                eligible: true,
                failed_conditions: vec![],
            },
        },
    }
}

fn failed(summary: &Summary) -> Vec<Condition> {
    let ids = ids();
    let reference = Reference {
        cache_policy_ids: &ids,
        policy_sha256: DIGEST,
        repository: DEFAULT_REPOSITORY,
        server_image: None,
    };
    evaluate(summary, &reference)
        .into_iter()
        .map(|f| f.condition)
        .collect()
}

fn only(condition: Condition, change: impl FnOnce(&mut Summary)) {
    let mut summary = trusted();
    change(&mut summary);
    assert_eq!(failed(&summary), [condition], "{}", condition.id());
}

fn set_github(s: &mut Summary, name: &str, value: &str) {
    s.provenance.github.insert(name.into(), value.into());
}

#[test]
fn the_fixture_is_trusted() {
    assert_eq!(failed(&trusted()), []);
}

#[test]
fn every_condition_has_a_unique_id() {
    for c in Condition::ALL {
        assert_eq!(Condition::from_id(c.id()), Some(c));
        assert!(!c.requirement().is_empty());
    }
}

#[test]
fn a_short_run_fails_duration_alone() {
    only(Condition::DurationAtLeastOneHour, |s| {
        s.run.load_seconds = 1800.0
    });
}

#[test]
fn a_load_a_fraction_of_a_second_short_fails_duration_alone() {
    only(Condition::DurationAtLeastOneHour, |s| {
        s.run.load_seconds = 3599.9
    });
    let mut exact = trusted();
    exact.run.load_seconds = 3600.0;
    assert!(failed(&exact).is_empty());
}

#[test]
fn a_short_configuration_fails_duration_alone() {
    // A 30-minute configuration with matching samples: only the duration is wrong.
    only(Condition::DurationAtLeastOneHour, |s| {
        s.config.duration_seconds = 1800;
        s.samples.expected_periodic_samples = 180;
        s.samples.periodic_sample_count = 180;
        s.config.minimum_trusted_samples = 150;
    });
}

#[test]
fn an_external_server_fails_managed_sampling_alone() {
    only(Condition::ManagedResourceSampling, |s| {
        s.config.services = ServiceMode::External
    });
}

#[test]
fn a_github_hosted_runner_fails_alone() {
    only(Condition::SelfHostedRunner, |s| {
        s.provenance.runner.environment = Some("github-hosted".into())
    });
}

#[test]
fn a_missing_run_attempt_fails_provenance_alone() {
    only(Condition::GithubActionsProvenance, |s| {
        s.provenance.github.remove("GITHUB_RUN_ATTEMPT");
    });
}

#[test]
fn a_feature_branch_fails_the_workflow_condition_alone() {
    only(Condition::SoakWorkflowOnMain, |s| {
        set_github(s, "GITHUB_REF", "refs/heads/feature")
    });
}

#[test]
fn an_unrelated_workflow_fails_alone() {
    only(Condition::SoakWorkflowOnMain, |s| {
        set_github(s, "GITHUB_WORKFLOW", "CI")
    });
}

#[test]
fn a_fork_fails_alone() {
    only(Condition::SoakWorkflowOnMain, |s| {
        set_github(s, "GITHUB_REPOSITORY", "someone/server")
    });
}

#[test]
fn a_pull_request_event_fails_alone() {
    only(Condition::ScheduledOrDispatched, |s| {
        set_github(s, "GITHUB_EVENT_NAME", "pull_request")
    });
}

#[test]
fn a_dirty_tree_fails_alone() {
    only(Condition::CleanTrackedWorkingTree, |s| {
        s.provenance.tracked_working_tree_clean = Some(false)
    });
    only(Condition::CleanTrackedWorkingTree, |s| {
        s.provenance.tracked_working_tree_clean = None
    });
}

#[test]
fn another_checkout_fails_alone() {
    only(Condition::CheckoutMatchesGithubSha, |s| {
        s.provenance.git_sha = Some("ffffffffffffffffffffffffffffffffffffffff".into())
    });
}

#[test]
fn another_policy_fails_the_digest_alone() {
    only(Condition::PolicyDigest, |s| {
        s.provenance.policy_sha256 = "bb".into()
    });
}

#[test]
fn thin_coverage_fails_alone() {
    only(Condition::SampleCoverage, |s| {
        s.samples.periodic_sample_count = 280;
        s.samples.coverage = 280.0 / 360.0;
        s.config.minimum_trusted_samples = 200;
    });
}

#[test]
fn a_shrunken_denominator_fails_coverage_alone() {
    only(Condition::SampleCoverage, |s| {
        s.samples.expected_periodic_samples = 300
    });
}

#[test]
fn too_few_samples_fail_alone() {
    only(Condition::MinimumTrustedSamples, |s| {
        s.config.minimum_trusted_samples = 359
    });
}

#[test]
fn a_failed_resource_sample_fails_health_alone() {
    only(Condition::SamplingHealth, |s| {
        let redis = s.sampling_health.get_mut("redis_keys").unwrap();
        redis.collected -= 1;
        redis.last_error = Some("connection refused".into());
    });
}

#[test]
fn an_unsampled_redis_fails_health_alone() {
    only(Condition::SamplingHealth, |s| {
        s.sampling_health.remove("redis_memory");
    });
}

#[test]
fn a_missing_final_sample_fails_health_alone() {
    only(Condition::SamplingHealth, |s| {
        s.samples.final_sample_collected = false
    });
}

#[test]
fn a_missing_threshold_map_fails_alone() {
    only(Condition::PerPolicyThresholdMaps, |s| {
        s.config.max_final_server_cache_keys_by_policy = None
    });
}

#[test]
fn an_incomplete_threshold_map_fails_alone() {
    only(Condition::PerPolicyThresholdMaps, |s| {
        if let Some(map) = s.config.max_server_cache_keys_by_policy.as_mut() {
            map.remove("readiness_probe");
        }
    });
}

#[test]
fn an_incomplete_map_is_ineligible_even_when_the_aggregate_ceiling_passes() {
    // The trusted fixture peaks at 120 server keys under a ceiling of 1000.
    only(Condition::PerPolicyThresholdMaps, |s| {
        s.config.max_server_cache_keys = Some(1_000_000);
        if let Some(map) = s.config.max_final_server_cache_keys_by_policy.as_mut() {
            map.remove("long_poll_signals");
        }
    });
}

#[test]
fn a_peak_above_the_aggregate_ceiling_is_a_breach() {
    let mut s = trusted();
    assert!(threshold_breaches(&s).is_empty());
    s.config.max_server_cache_keys = Some(119);
    let breaches = threshold_breaches(&s);
    assert_eq!(breaches.len(), 1);
    assert_eq!(breaches[0].assertion, "max_server_cache_keys");
    assert_eq!(
        breaches[0].message,
        "120 server keys at the peak, above the aggregate ceiling of 119"
    );
    // Unrecorded in the artifact, it fails the no-assertion-failures
    // condition alone.
    only(Condition::NoAssertionFailures, |s| {
        s.config.max_server_cache_keys = Some(119)
    });
}

#[test]
fn an_observed_map_off_the_inventory_fails_alone() {
    only(Condition::PerPolicyObservedMaps, |s| {
        s.final_server_cache_keys_by_policy
            .insert("retired_family".into(), 0);
    });
}

#[test]
fn a_missing_slope_fails_alone() {
    only(Condition::MemorySlope, |s| s.memory_slope = None);
}

#[test]
fn a_steep_slope_fails_alone() {
    only(Condition::MemorySlope, |s| {
        if let Some(slope) = s.memory_slope.as_mut() {
            slope.bytes_per_hour = 9_000_000.0;
        }
    });
}

#[test]
fn no_slope_is_needed_without_a_limit() {
    let mut s = trusted();
    s.config.memory_slope_limit_bytes_per_hour = None;
    s.memory_slope = None;
    assert_eq!(failed(&s), []);
}

#[test]
fn a_recorded_assertion_failure_fails_alone() {
    only(Condition::NoAssertionFailures, |s| {
        s.assertion_failures.push(AssertionFailure {
            assertion: "live".into(),
            message: "undeclared metric dw_x".into(),
        })
    });
}

#[test]
fn an_unrecorded_threshold_breach_fails_alone() {
    only(Condition::NoAssertionFailures, |s| {
        s.final_server_cache_keys_by_policy
            .insert("long_poll_signals".into(), 11);
    });
}

#[test]
fn a_breach_recorded_and_recomputed_is_reported_once() {
    let mut s = trusted();
    s.max_server_cache_keys_by_policy
        .insert("readiness_probe".into(), 1001);
    s.assertion_failures = threshold_breaches(&s);
    let ids = ids();
    let reference = Reference {
        cache_policy_ids: &ids,
        policy_sha256: DIGEST,
        repository: DEFAULT_REPOSITORY,
        server_image: None,
    };
    let failures = evaluate(&s, &reference);
    assert_eq!(failures.len(), 1);
    assert_eq!(
        failures[0].explanation,
        "max_server_cache_keys_by_policy.readiness_probe: 1001 keys, above the limit of 1000"
    );
}

#[test]
fn a_failed_run_fails_alone() {
    only(Condition::RunPassed, |s| {
        s.run.result = RunResult::Failed;
        s.run.failures = vec!["harness interrupted".into()];
    });
}

fn image(s: &mut Summary) -> &mut ServerImage {
    s.provenance.server_image.as_mut().unwrap()
}

#[test]
fn a_server_image_other_than_the_pin_fails_alone() {
    // The server reported another image than the one pinned.
    only(Condition::ServerImageMatchesPin, |s| {
        image(s).dw_server_image = Some(format!("dwserver:0.1.0@sha256:{}", "0".repeat(64)));
    });
    // The executable that ran is not the pinned one.
    only(Condition::ServerImageMatchesPin, |s| {
        image(s).executable_sha256 = Some("1".repeat(64));
    });
    // A server the harness did not start: nothing ties it to the pin.
    only(Condition::ServerImageMatchesPin, |s| {
        image(s).executable_sha256 = None;
    });
    // No pin, a tag-only pin, a pin with a short digest.
    for pinned in [
        None,
        Some("dwserver:0.1.0".to_owned()),
        Some("dwserver@sha256:abc".to_owned()),
    ] {
        only(Condition::ServerImageMatchesPin, |s| {
            image(s).pinned = pinned;
        });
    }
    // The evidence could not be read.
    only(Condition::ServerImageMatchesPin, |s| {
        image(s).error = Some("dwserver evidence exited 1".into());
    });
    // An artifact from before the image was recorded.
    only(Condition::ServerImageMatchesPin, |s| {
        s.provenance.server_image = None;
    });
}

#[test]
fn a_pin_the_checker_knows_must_be_the_artifacts_pin() {
    let ids = ids();
    let trusted_pin = pin();
    let other_pin = format!("dwserver:0.1.0@sha256:{}", "2".repeat(64));
    let failed_with = |known: &str| -> Vec<ConditionFailure> {
        let reference = Reference {
            cache_policy_ids: &ids,
            policy_sha256: DIGEST,
            repository: DEFAULT_REPOSITORY,
            server_image: Some(known),
        };
        evaluate(&trusted(), &reference)
    };
    assert!(failed_with(&trusted_pin).is_empty());
    let failures = failed_with(&other_pin);
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].condition, Condition::ServerImageMatchesPin);
    assert!(
        failures[0].explanation.contains(&other_pin),
        "{}",
        failures[0].explanation
    );
}

#[test]
fn only_a_digest_reference_pins() {
    assert_eq!(ServerImage::pinned_digest(&pin()), Some(EXE));
    assert_eq!(
        ServerImage::pinned_digest(&format!("ghcr.io/durable-workflow/server@sha256:{EXE}")),
        Some(EXE)
    );
    assert_eq!(
        ServerImage::pinned_digest("durableworkflow/server:0.2"),
        None
    );
    assert_eq!(
        ServerImage::pinned_digest(&format!("x@sha256:{}", EXE.to_uppercase())),
        None
    );
    assert_eq!(
        ServerImage::pinned_digest(&format!("x@sha256:{EXE}0")),
        None
    );
}

#[test]
fn the_verdict_lists_failures_in_order() {
    let mut s = trusted();
    s.config.services = ServiceMode::External;
    s.provenance.runner.environment = None;
    let ids = ids();
    let reference = Reference {
        cache_policy_ids: &ids,
        policy_sha256: DIGEST,
        repository: DEFAULT_REPOSITORY,
        server_image: None,
    };
    let trust = verdict(&evaluate(&s, &reference));
    assert!(!trust.eligible);
    let names: Vec<&str> = trust
        .failed_conditions
        .iter()
        .map(|f| f.condition.as_str())
        .collect();
    assert_eq!(names, ["managed_resource_sampling", "self_hosted_runner"]);
}

#[test]
fn the_schema_round_trips_and_refuses_unknown_fields() {
    let text = serde_json::to_string_pretty(&trusted()).unwrap();
    assert_eq!(Summary::from_json(&text).unwrap(), trusted());
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["samples"]["surprise"] = 1.into();
    let e = Summary::from_json(&value.to_string()).unwrap_err();
    assert!(e.to_string().contains("unknown field `surprise`"), "{e}");
    value["schema_version"] = 2.into();
    let e = Summary::from_json(&value.to_string()).unwrap_err();
    assert!(e.to_string().contains("schema_version 2"), "{e}");
}
