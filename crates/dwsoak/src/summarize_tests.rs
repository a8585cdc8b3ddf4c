//! The harness's own verdicts on synthetic observations.

use std::collections::BTreeMap;

use clap::Parser;
use dwevidence::sample::{Sample, SampleKind};
use dwevidence::summary::{Provenance, ResourceHealth, RunResult, Runner, ServiceMode};
use dwpolicy::Policy;

use super::*;
use crate::config::{Args, Soak};
use crate::load::Totals;

fn policy() -> (Policy, String) {
    crate::config::test_policy(&[
        ("long_poll_signals", "server:long-poll-signal:"),
        ("readiness_probe", "server:readiness:"),
    ])
}

fn soak(extra: &[&str]) -> Soak {
    let mut argv = vec![
        "dwsoak",
        "--duration",
        "600",
        "--sample-interval",
        "60",
        "--warmup",
        "60",
    ];
    argv.extend_from_slice(extra);
    let (policy, text) = policy();
    Soak::with_policy(Args::try_parse_from(argv).unwrap(), policy, text.as_bytes()).unwrap()
}

fn sample(kind: SampleKind, t: f64, rss: u64, keys: u64) -> Sample {
    Sample {
        kind,
        elapsed_seconds: t,
        at_unix_ms: t as u64 * 1000,
        server_memory_bytes: Some(rss),
        redis_memory_bytes: None,
        redis_db_keys: None,
        redis_polling_keys: Some(keys),
        server_cache_keys: Some(keys),
        server_cache_keys_by_policy: BTreeMap::from([
            ("long_poll_signals".into(), keys),
            ("readiness_probe".into(), 0),
        ]),
        sqlite_file_bytes: Some(4096),
        requests_total: 10,
        errors_total: 0,
        live_findings: 0,
        errors: BTreeMap::new(),
    }
}

fn observations(samples: Vec<Sample>) -> Observations {
    let health = [
        "server_rss",
        "server_cache_keys",
        "sqlite_file",
        "live_metrics",
    ]
    .into_iter()
    .map(|r| {
        (
            r.to_owned(),
            ResourceHealth {
                attempts: 11,
                collected: 11,
                last_error: None,
            },
        )
    })
    .collect();
    Observations {
        samples,
        health,
        totals: Totals::default(),
        live_findings: vec![],
        unowned_keys: vec![],
        started_at_unix_ms: 0,
        finished_at_unix_ms: 700_000,
        load_seconds: 600.0,
        services: ServiceMode::Managed,
        failures: vec![],
    }
}

fn flat_run() -> Vec<Sample> {
    let mut samples: Vec<Sample> = (1..=10)
        .map(|i| {
            sample(
                SampleKind::Periodic,
                60.0 * i as f64,
                50_000_000,
                40 + i % 3,
            )
        })
        .collect();
    samples.push(sample(SampleKind::Final, 665.0, 49_000_000, 0));
    samples
}

fn provenance() -> Provenance {
    Provenance {
        github: BTreeMap::new(),
        runner: Runner {
            name: None,
            os: None,
            arch: None,
            environment: None,
        },
        compose_project: None,
        base_url: None,
        git_sha: None,
        tracked_working_tree_clean: None,
        policy_path: "p".into(),
        policy_sha256: dwevidence::digest::sha256_hex(policy().1.as_bytes()),
        server_image: None,
    }
}

#[test]
fn a_flat_run_passes_with_its_maxima_drain_and_slope() {
    let s = summarize(&soak(&[]), &observations(flat_run()), provenance());
    assert_eq!(s.run.result, RunResult::Passed, "{:?}", s.run.failures);
    assert_eq!(s.samples.periodic_sample_count, 10);
    assert_eq!(s.max_server_cache_keys_by_policy["long_poll_signals"], 42);
    assert_eq!(s.final_server_cache_keys_by_policy["long_poll_signals"], 0);
    assert_eq!(s.final_drain.server_cache_keys, Some(0));
    let slope = s.memory_slope.unwrap();
    assert_eq!(slope.points, 10);
    assert!(slope.bytes_per_hour.abs() < 1e-6);
    // A local run is never trusted evidence, and says why.
    assert!(!s.evidence.trust.eligible);
    let failed: Vec<&str> = s
        .evidence
        .trust
        .failed_conditions
        .iter()
        .map(|c| c.condition.as_str())
        .collect();
    assert!(
        failed.contains(&"duration_at_least_one_hour")
            && failed.contains(&"per_policy_threshold_maps"),
        "{failed:?}"
    );
    assert!(
        !failed.contains(&"sampling_health") && !failed.contains(&"run_passed"),
        "{failed:?}"
    );
}

#[test]
fn a_missing_resource_sample_fails_the_run_instead_of_counting_zero() {
    let mut samples = flat_run();
    samples[3].server_memory_bytes = None;
    samples[3].errors.insert("server_rss".into(), "gone".into());
    let s = summarize(&soak(&[]), &observations(samples), provenance());
    assert_eq!(s.run.result, RunResult::Failed);
    assert!(
        s.run.failures[0].contains("missed a resource"),
        "{:?}",
        s.run.failures
    );
}

#[test]
fn too_few_samples_fail_the_run() {
    let mut samples = flat_run();
    samples.drain(0..4);
    let s = summarize(&soak(&[]), &observations(samples), provenance());
    assert_eq!(s.run.result, RunResult::Failed);
    assert!(
        s.run
            .failures
            .iter()
            .any(|f| f.contains("below minimum_trusted_samples (8)")),
        "{:?}",
        s.run.failures
    );
}

#[test]
fn threshold_breaches_and_slope_are_assertion_failures() {
    let mut samples = flat_run();
    for (i, s) in samples.iter_mut().enumerate() {
        s.server_memory_bytes = Some(50_000_000 + i as u64 * 1_000_000);
    }
    let soak = soak(&[
        "--max-server-cache-keys-by-policy",
        r#"{"long_poll_signals": 41, "readiness_probe": 0}"#,
        "--max-final-server-cache-keys-by-policy",
        r#"{"long_poll_signals": 0, "readiness_probe": 0}"#,
        "--max-memory-slope",
        "1000000",
    ]);
    let s = summarize(&soak, &observations(samples), provenance());
    let names: Vec<&str> = s
        .assertion_failures
        .iter()
        .map(|a| a.assertion.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "max_server_cache_keys_by_policy.long_poll_signals",
            "memory_slope"
        ]
    );
    assert_eq!(s.run.result, RunResult::Failed);
}

#[test]
fn live_findings_and_unowned_keys_fail_the_run() {
    let mut obs = observations(flat_run());
    obs.live_findings = vec!["live-undeclared-metric mystery_total: undeclared".into()];
    obs.unowned_keys = vec!["server:mystery:1".into()];
    let s = summarize(&soak(&[]), &obs, provenance());
    let names: Vec<&str> = s
        .assertion_failures
        .iter()
        .map(|a| a.assertion.as_str())
        .collect();
    assert_eq!(names, ["live_metrics", "server_cache_keys.unowned"]);
    assert_eq!(s.run.result, RunResult::Failed);
}

#[test]
fn a_missing_final_sample_fails_the_run() {
    let mut samples = flat_run();
    samples.pop();
    let s = summarize(&soak(&[]), &observations(samples), provenance());
    assert_eq!(s.run.result, RunResult::Failed);
    assert!(!s.samples.final_sample_collected);
    assert!(s.final_server_cache_keys_by_policy.is_empty());
}
