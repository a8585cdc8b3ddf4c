//! A short soak end to end against a real dwserver, started in this test's
//! process (so the harness's RSS samples read the process serving it).

use std::path::Path;

use clap::Parser;
use dwengine::server::{Engine, Running, ServerConfig};
use dwevidence::profile::{self, Condition, Reference};
use dwevidence::summary::{RunResult, ServiceMode, Summary};
use dwsoak::config::{Args, Soak};

#[test]
fn a_short_soak_writes_a_passing_well_formed_and_ineligible_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("dwserver.sqlite3");
    let mut config = ServerConfig::for_node("soak-test", dir.path().join("wait-slots"));
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.database = Some(database.clone());
    let running = Running::start(Engine::open(config).expect("engine")).expect("bind");
    let base = format!("http://{}", running.addr());
    let out = dir.path().join("perf");
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policy/dw-bounded-growth.toml");
    let pid = std::process::id().to_string();
    let args = Args::try_parse_from([
        "dwsoak",
        "--base-url",
        &base,
        "--server-pid",
        &pid,
        "--database-path",
        database.to_str().unwrap(),
        "--duration",
        "4",
        "--sample-interval",
        "1",
        "--drain",
        "1",
        "--min-sample-coverage",
        "50%",
        "--namespaces",
        "2",
        "--task-queues",
        "2",
        "--workers",
        "2",
        "--output",
        out.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--quiet",
    ])
    .unwrap();
    let soak = Soak::new(args).expect("valid configuration");
    let summary = dwsoak::run::run(&soak).expect("the soak runs");
    assert_eq!(
        summary.run.result,
        RunResult::Passed,
        "{:?} {:?}",
        summary.run.failures,
        summary.assertion_failures
    );
    assert!(
        summary.samples.periodic_sample_count >= 2,
        "{:?}",
        summary.samples
    );
    assert!(summary.samples.final_sample_collected);
    assert!(
        summary.requests.workflows_completed > 0,
        "{:?}",
        summary.requests
    );
    assert!(summary.maxima.server_memory_bytes.unwrap() > 1_000_000);
    assert!(summary.maxima.sqlite_file_bytes.unwrap() > 0);
    assert!(summary.max_server_cache_keys_by_policy["workflow_task_poll_requests"] > 0);
    let ids: Vec<&String> = summary.max_server_cache_keys_by_policy.keys().collect();
    let mut declared: Vec<&String> = soak.cache_policy_ids.iter().collect();
    declared.sort();
    assert_eq!(ids, declared, "the per-policy map mirrors the inventory");
    assert_eq!(summary.config.services, ServiceMode::External);
    // A server the harness did not start: no executable ties it to a pin.
    let image = summary.provenance.server_image.as_ref().unwrap();
    assert_eq!(
        (&image.dw_server_image, &image.executable_sha256),
        (&None, &None)
    );

    // The artifacts, as written; the summary also holds to the published schema.
    let written_text = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let written = Summary::from_json(&written_text).unwrap();
    let schema_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/soak-summary.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let validator = jsonschema::options()
        .build(&schema)
        .expect("the schema compiles");
    let instance: serde_json::Value = serde_json::from_str(&written_text).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_eq!(written.evidence, summary.evidence);
    let samples = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    let samples = dwevidence::sample::parse_lines(&samples).unwrap();
    assert_eq!(
        samples.len() as u64,
        summary.samples.periodic_sample_count + 1
    );
    let metrics = std::fs::read_to_string(out.join("metrics.prom")).unwrap();
    assert!(
        metrics.contains("dw_perf_requests_total{status=\"200\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("dw_perf_redis_server_keys_by_policy{policy=\"readiness_probe\"}"),
        "{metrics}"
    );
    assert!(std::fs::read_to_string(out.join("report.html"))
        .unwrap()
        .contains("<svg"));

    // Never trusted: a short run against a server the harness did not start.
    let failed: Vec<&str> = summary
        .evidence
        .trust
        .failed_conditions
        .iter()
        .map(|c| c.condition.as_str())
        .collect();
    for condition in [
        Condition::DurationAtLeastOneHour,
        Condition::ManagedResourceSampling,
        Condition::PerPolicyThresholdMaps,
        Condition::ServerImageMatchesPin,
    ] {
        assert!(failed.contains(&condition.id()), "{failed:?}");
    }
    // The recorded verdict is the profile's over the artifact's own fields.
    let reference = Reference {
        cache_policy_ids: &soak.cache_policy_ids,
        policy_sha256: &soak.policy_sha256,
        repository: profile::DEFAULT_REPOSITORY,
        server_image: None,
    };
    assert_eq!(
        profile::verdict(&profile::evaluate(&written, &reference)),
        written.evidence.trust
    );
    drop(running);
}

#[test]
fn an_interrupted_soak_still_writes_a_failed_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("dwserver.sqlite3");
    let mut config = ServerConfig::for_node("soak-interrupt", dir.path().join("wait-slots"));
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.database = Some(database.clone());
    let running = Running::start(Engine::open(config).expect("engine")).expect("bind");
    let out = dir.path().join("perf");
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policy/dw-bounded-growth.toml");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_dwsoak"))
        .args(["--base-url", &format!("http://{}", running.addr())])
        .args(["--server-pid", &std::process::id().to_string()])
        .arg("--database-path")
        .arg(&database)
        .args([
            "--duration",
            "300",
            "--sample-interval",
            "1",
            "--workers",
            "1",
            "--quiet",
        ])
        .arg("--output")
        .arg(&out)
        .arg("--policy")
        .arg(&policy)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the first samples are written.
    let samples = out.join("samples.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(&samples).map_or(0, |s| s.lines().count()) < 2 {
        assert!(std::time::Instant::now() < deadline, "no samples written");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary =
        Summary::from_json(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary.run.result, RunResult::Failed);
    assert!(
        summary.run.failures[0].starts_with("interrupted by a signal"),
        "{:?}",
        summary.run.failures
    );
    assert!(summary.run.load_seconds < 60.0);
    assert!(
        summary.samples.final_sample_collected,
        "the final sample is still taken"
    );
    drop(running);
}
