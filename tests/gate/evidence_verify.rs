//! `dwlint evidence verify` as CI runs it: one trusted artifact, then each
//! trust condition broken alone, every report format, and the artifacts
//! that cannot be read at all.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{json_codes as codes, text};
use serde_json::{json, Value};

fn fixture(name: &str) -> String {
    format!("{}/tests/data/evidence/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn trusted() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("trusted-summary.json")).unwrap())
        .unwrap()
}

fn verify(summary: &Path, extra: &[&str]) -> Output {
    let policy = fixture("policy.toml");
    let mut args = vec![
        "evidence",
        "verify",
        summary.to_str().unwrap(),
        "--policy",
        &policy,
    ];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(&args)
        .env("NO_COLOR", "1")
        .env_remove("DW_PERF_TRUSTED_REPOSITORY")
        .env_remove("DW_SERVER_IMAGE")
        .output()
        .expect("run dwlint")
}

fn write(dir: &tempfile::TempDir, summary: &Value) -> std::path::PathBuf {
    let path = dir.path().join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(summary).unwrap()).unwrap();
    path
}

#[test]
fn the_trusted_fixture_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let out = verify(&write(&dir, &trusted()), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("no findings"),
        "{}",
        text(&out.stdout)
    );
}

/// Breaks one condition the way a real artifact would, recording the
/// verdict a harness would have written, so only that condition fails.
#[test]
fn each_condition_failing_alone_is_its_only_finding() {
    type Edit = fn(&mut Value);
    let cases: &[(&str, Edit)] = &[
        ("duration-at-least-one-hour", |s| {
            s["run"]["load_seconds"] = json!(1800.0)
        }),
        ("managed-resource-sampling", |s| {
            s["config"]["services"] = json!("external")
        }),
        ("self-hosted-runner", |s| {
            s["provenance"]["runner"]["environment"] = json!("github-hosted")
        }),
        ("github-actions-provenance", |s| {
            s["provenance"]["github"]
                .as_object_mut()
                .unwrap()
                .remove("GITHUB_RUN_ID");
        }),
        ("soak-workflow-on-main", |s| {
            s["provenance"]["github"]["GITHUB_REF"] = json!("refs/heads/feature")
        }),
        ("scheduled-or-dispatched", |s| {
            s["provenance"]["github"]["GITHUB_EVENT_NAME"] = json!("pull_request")
        }),
        ("clean-tracked-working-tree", |s| {
            s["provenance"]["tracked_working_tree_clean"] = json!(false)
        }),
        ("checkout-matches-github-sha", |s| {
            s["provenance"]["git_sha"] = json!("ffffffffffffffffffffffffffffffffffffffff")
        }),
        ("policy-digest", |s| {
            s["provenance"]["policy_sha256"] = json!("00")
        }),
        ("sample-coverage", |s| {
            s["samples"]["periodic_sample_count"] = json!(280);
            s["config"]["minimum_trusted_samples"] = json!(200);
        }),
        ("minimum-trusted-samples", |s| {
            s["config"]["minimum_trusted_samples"] = json!(359)
        }),
        ("sampling-health", |s| {
            s["sampling_health"]["redis_keys"]["collected"] = json!(359);
            s["sampling_health"]["redis_keys"]["last_error"] = json!("connection refused");
        }),
        ("per-policy-threshold-maps", |s| {
            s["config"]["max_final_server_cache_keys_by_policy"] = Value::Null
        }),
        ("per-policy-observed-maps", |s| {
            s["max_server_cache_keys_by_policy"]
                .as_object_mut()
                .unwrap()
                .remove("readiness_probe");
        }),
        ("memory-slope", |s| {
            s["memory_slope"]["bytes_per_hour"] = json!(9.0e6)
        }),
        ("no-assertion-failures", |s| {
            s["final_server_cache_keys_by_policy"]["long_poll_signals"] = json!(11)
        }),
        ("run-passed", |s| {
            s["run"]["result"] = json!("failed");
            s["run"]["failures"] = json!(["interrupted"]);
        }),
        ("server-image-matches-pin", |s| {
            s["provenance"]["server_image"]["executable_sha256"] = json!("0".repeat(64))
        }),
    ];
    assert_eq!(
        cases.len(),
        dwevidence::profile::Condition::ALL.len(),
        "one case per condition"
    );
    let dir = tempfile::tempdir().unwrap();
    for (code, edit) in cases {
        let mut summary = trusted();
        edit(&mut summary);
        summary["evidence"]["trust"] = json!({
            "profile": "trusted_long_soak_v1",
            "eligible": false,
            "failed_conditions": [{"condition": code.replace('-', "_"), "explanation": "recorded"}],
        });
        let out = verify(&write(&dir, &summary), &["--format", "json"]);
        assert_eq!(out.status.code(), Some(1), "{code}: {}", text(&out.stderr));
        assert_eq!(codes(&out), [format!("evidence-{code}")], "{code}");
    }
}

#[test]
fn a_recorded_verdict_that_disagrees_is_a_finding() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = trusted();
    summary["evidence"]["trust"]["eligible"] = json!(false);
    summary["evidence"]["trust"]["failed_conditions"] =
        json!([{"condition": "sample_coverage", "explanation": "made up"}]);
    let out = verify(&write(&dir, &summary), &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(codes(&out), ["evidence-recorded-verdict"]);

    // An edited artifact claiming trust for a failing run.
    let mut summary = trusted();
    summary["provenance"]["runner"]["environment"] = json!("github-hosted");
    let out = verify(&write(&dir, &summary), &["--format", "json"]);
    assert_eq!(
        codes(&out),
        ["evidence-self-hosted-runner", "evidence-recorded-verdict"]
    );
}

#[test]
fn every_format_reports_the_failed_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = trusted();
    summary["config"]["duration_seconds"] = json!(60);
    summary["samples"]["expected_periodic_samples"] = json!(6);
    summary["samples"]["periodic_sample_count"] = json!(6);
    summary["config"]["minimum_trusted_samples"] = json!(5);
    summary["run"]["load_seconds"] = json!(60.0);
    let path = write(&dir, &summary);
    for format in ["human", "json", "sarif", "github", "junit", "short"] {
        let out = verify(&path, &["--format", format]);
        assert_eq!(out.status.code(), Some(1), "{format}");
        let shown = text(&out.stdout);
        assert!(
            shown.contains("evidence-duration-at-least-one-hour"),
            "{format}: {shown}"
        );
    }
    let sarif: Value =
        serde_json::from_slice(&verify(&path, &["--format", "sarif"]).stdout).unwrap();
    let rule_ids: Vec<&str> = sarif["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(
        rule_ids.contains(&"evidence-duration-at-least-one-hour"),
        "{rule_ids:?}"
    );
    // The finding points at the configured duration.
    let short = text(&verify(&path, &["--format", "short"]).stdout);
    let line = short
        .lines()
        .find(|l| l.contains("duration-at-least"))
        .unwrap();
    let at: usize = line.split(':').nth(1).unwrap().parse().unwrap();
    let summary_text = std::fs::read_to_string(&path).unwrap();
    assert!(summary_text
        .lines()
        .nth(at - 1)
        .unwrap()
        .contains("\"duration_seconds\""));
}

#[test]
fn the_report_can_go_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &trusted());
    let report = dir.path().join("report.json");
    let out = verify(
        &path,
        &["--format", "json", "--output", report.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0));
    let written: Value = serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    assert_eq!(written["version"], 1);
}

#[test]
fn another_trusted_repository_can_be_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &trusted());
    let out = verify(
        &path,
        &["--repository", "example/dwlint", "--format", "json"],
    );
    assert_eq!(
        codes(&out),
        [
            "evidence-soak-workflow-on-main",
            "evidence-recorded-verdict"
        ]
    );
}

/// The image the checker pins (`--server-image`, or `DW_SERVER_IMAGE` as
/// the soak workflow exports it) must be the artifact's pin; the reported
/// image and the executable that ran are matched against that pin.
#[test]
fn the_server_image_must_be_the_pinned_one() {
    let dir = tempfile::tempdir().unwrap();
    let summary = trusted();
    let pinned = summary["provenance"]["server_image"]["pinned"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = write(&dir, &summary);
    let out = verify(&path, &["--server-image", &pinned, "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let other = format!("dwserver:0.1.0@sha256:{}", "e".repeat(64));
    let out = verify(&path, &["--server-image", &other, "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        codes(&out),
        [
            "evidence-server-image-matches-pin",
            "evidence-recorded-verdict"
        ]
    );
    assert!(text(&out.stdout).contains(&other), "{}", text(&out.stdout));
    // The variable the soak workflow exports is read the same way.
    let out = Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(["evidence", "verify", path.to_str().unwrap(), "--policy"])
        .arg(fixture("policy.toml"))
        .args(["--format", "short"])
        .env("NO_COLOR", "1")
        .env_remove("DW_PERF_TRUSTED_REPOSITORY")
        .env("DW_SERVER_IMAGE", &other)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("evidence-server-image-matches-pin"),
        "{}",
        text(&out.stdout)
    );
    // An artifact from a harness that recorded no image is not trusted.
    let mut old = trusted();
    old["provenance"]
        .as_object_mut()
        .unwrap()
        .remove("server_image");
    old["evidence"]["trust"] = json!({
        "profile": "trusted_long_soak_v1",
        "eligible": false,
        "failed_conditions": [{"condition": "server_image_matches_pin", "explanation": "recorded"}],
    });
    let out = verify(&write(&dir, &old), &["--format", "json"]);
    assert_eq!(codes(&out), ["evidence-server-image-matches-pin"]);
    assert!(
        text(&out.stdout).contains("records no server image"),
        "{}",
        text(&out.stdout)
    );
}

/// The soak workflow's `pin the server image` step, run as GitHub runs it
/// (`bash -e`) beside a stand-in dwserver: it exports the build's digest
/// reference, and refuses evidence that names another digest.
#[test]
fn the_soak_workflow_pins_the_server_image_it_built() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workflow = std::fs::read_to_string(root.join(".github/workflows/soak.yml")).unwrap();
    let mut lines = workflow
        .lines()
        .skip_while(|l| l.trim() != "- name: pin the server image")
        .skip(1)
        .skip_while(|l| l.trim() != "run: |")
        .skip(1)
        .peekable();
    let indent = lines
        .peek()
        .map(|l| l.len() - l.trim_start().len())
        .expect("the pin step has a run block");
    let script: String = lines
        .take_while(|l| l.len() - l.trim_start().len() >= indent || l.trim().is_empty())
        .map(|l| format!("{}\n", l.get(indent..).unwrap_or("")))
        .collect();
    assert!(script.contains("GITHUB_ENV"), "{script}");
    let soak = workflow.find("- name: soak").unwrap();
    let pin = workflow.find("- name: pin the server image").unwrap();
    assert!(pin < soak, "the pin is exported before the soak starts");
    let run = |digest_expression: &str| -> (Output, String) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("target/release")).unwrap();
        let bin = dir.path().join("target/release/dwserver");
        // What `dwserver evidence` prints (pretty JSON) about itself.
        std::fs::write(
            &bin,
            format!(
                r#"#!/bin/sh
[ "$1" = evidence ] || exit 2
[ -z "$DW_SERVER_IMAGE" ] || exit 3
d={digest_expression}
cat <<JSON
{{
  "published_artifact_worker_execution": [
    {{
      "build": {{
        "executable_sha256": "$d",
        "image": "dwserver:0.1.0@sha256:$d",
        "name": "dwserver",
        "version": "0.1.0"
      }},
      "dw_server_image": "dwserver:0.1.0@sha256:$d",
      "image_source": "build"
    }}
  ]
}}
JSON
"#
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("pin.sh"), &script).unwrap();
        let env_file = dir.path().join("github-env");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let out = Command::new("bash")
                .args(["-e", "pin.sh"])
                .current_dir(dir.path())
                .env("GITHUB_ENV", &env_file)
                .env("DW_SERVER_IMAGE", "a stale pin the step must not read")
                .output()
                .unwrap();
            // Another test's fork may still hold the fresh script open.
            if text(&out.stderr).contains("Text file busy") && std::time::Instant::now() < deadline
            {
                continue;
            }
            let exported = std::fs::read_to_string(&env_file).unwrap_or_default();
            let digest = dwevidence::digest::sha256_hex(&std::fs::read(&bin).unwrap());
            return (out, exported.replace(&digest, "<DIGEST>"));
        }
    };
    let (out, exported) = run(r#"$(sha256sum "$0" | cut -d' ' -f1)"#);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(exported, "DW_SERVER_IMAGE=dwserver:0.1.0@sha256:<DIGEST>\n");
    let (out, exported) = run(&"0".repeat(64));
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("::error::"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(exported, "", "nothing is pinned when the digests differ");
}

#[test]
fn unreadable_artifacts_exit_2_and_say_where() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let out = verify(&missing, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot read the soak artifact"),
        "{}",
        text(&out.stderr)
    );

    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\n  \"schema_version\": 1,\n  oops\n}").unwrap();
    let out = verify(&broken, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("line 3"),
        "{}",
        text(&out.stderr)
    );

    let mut summary = trusted();
    summary["samples"]
        .as_object_mut()
        .unwrap()
        .remove("coverage");
    let out = verify(&write(&dir, &summary), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("`coverage`"),
        "{}",
        text(&out.stderr)
    );

    let mut summary = trusted();
    summary["schema_version"] = json!(7);
    let out = verify(&write(&dir, &summary), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("schema_version 7"),
        "{}",
        text(&out.stderr)
    );
}

/// A FIFO blocks the open and `/dev/zero` never ends: both, and a
/// directory, must be refused before anything is read. The run gets a
/// deadline so that a regression fails instead of hanging the suite.
#[cfg(unix)]
#[test]
fn an_artifact_that_is_no_regular_file_is_refused_before_reading() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("summary.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let policy = fixture("policy.toml");
    for artifact in [fifo.as_path(), Path::new("/dev/zero"), dir.path()] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dwlint"))
            .args(["evidence", "verify"])
            .arg(artifact)
            .args(["--policy", &policy])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run dwlint");
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            panic!("{} was still being read after 20 s", artifact.display());
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", artifact.display());
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("cannot read the soak artifact")
                && stderr.contains(&artifact.display().to_string())
                && stderr.contains("not a regular file"),
            "{stderr}"
        );
    }
}

#[test]
fn the_html_report_shows_every_condition_and_charts_the_samples() {
    let dir = tempfile::tempdir().unwrap();
    let mut summary = trusted();
    summary["provenance"]["runner"]["environment"] = json!("github-hosted<script>");
    let path = write(&dir, &summary);
    let lines: Vec<String> = (1..=6)
        .map(|i| {
            json!({
                "kind": if i == 6 { "final" } else { "periodic" },
                "elapsed_seconds": i as f64 * 10.0, "at_unix_ms": i * 10_000,
                "server_memory_bytes": 40_000_000 + i * 1000, "redis_memory_bytes": 1_000_000,
                "redis_db_keys": 50, "redis_polling_keys": 40, "server_cache_keys": 50,
                "server_cache_keys_by_policy": {"long_poll_signals": 40, "readiness_probe": 0},
                "sqlite_file_bytes": 4096, "requests_total": i * 100, "errors_total": 0,
                "live_findings": 0, "errors": {}
            })
            .to_string()
        })
        .collect();
    std::fs::write(dir.path().join("samples.jsonl"), lines.join("\n")).unwrap();
    let out = verify(&path, &["--format", "html"]);
    assert_eq!(out.status.code(), Some(1));
    let page = text(&out.stdout);
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    for condition in dwevidence::profile::Condition::ALL {
        assert!(page.contains(condition.id()), "{}", condition.id());
    }
    assert!(
        page.contains("not trusted (1 of 18 conditions failed)"),
        "{page}"
    );
    assert!(
        page.contains("&lt;script&gt;") && !page.contains("<script>"),
        "escaped"
    );
    assert_eq!(
        page.matches("<svg").count(),
        4,
        "memory, Redis memory, totals, per policy"
    );
    assert!(
        page.contains("long_poll_signals: peak 100 (limit 1000), after drain 0 (limit 10)"),
        "the thresholds are shown: {page}"
    );
    assert!(
        !page.contains("http://") || page.contains("http://www.w3.org/2000/svg"),
        "no network references"
    );

    // Without samples the page still renders, with a note on standard error.
    std::fs::remove_file(dir.path().join("samples.jsonl")).unwrap();
    let out = verify(&path, &["--format", "html"]);
    assert!(text(&out.stdout).contains("nothing to chart"));
    assert!(
        text(&out.stderr).contains("samples.jsonl"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_fixture_and_its_variants_hold_to_the_published_schema() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/soak-summary.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::options()
        .build(&schema)
        .expect("the schema compiles");
    let errors = |instance: &Value| -> Vec<String> {
        validator
            .iter_errors(instance)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect()
    };
    let mut summary = trusted();
    assert_eq!(errors(&summary), Vec::<String>::new());
    summary["memory_slope"] = Value::Null;
    summary["config"]["max_final_server_cache_keys_by_policy"] = Value::Null;
    summary["maxima"]["redis_memory_bytes"] = Value::Null;
    assert_eq!(
        errors(&summary),
        Vec::<String>::new(),
        "nulls where nothing was measured"
    );
    // What the typed reader refuses, the schema refuses too.
    summary["samples"]["surprise"] = json!(1);
    assert!(!errors(&summary).is_empty());
    let mut summary = trusted();
    summary["run"]["result"] = json!("maybe");
    assert!(!errors(&summary).is_empty());
}

/// One `DW_PERF_*_BY_POLICY: >-` map of the soak workflow, as JSON: the
/// folded block's lines joined by spaces, as YAML folds them.
fn workflow_map(workflow: &str, name: &str) -> serde_json::Map<String, Value> {
    let head = format!("{name}: >-");
    let mut lines = workflow.lines().skip_while(|l| l.trim() != head);
    let indent = |l: &str| l.len() - l.trim_start().len();
    let key_indent = indent(
        lines
            .next()
            .unwrap_or_else(|| panic!("{name} is not in the workflow")),
    );
    let folded: Vec<&str> = lines
        .take_while(|l| !l.trim().is_empty() && indent(l) > key_indent)
        .map(str::trim)
        .collect();
    serde_json::from_str(&folded.join(" ")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The scheduled soak can produce trusted evidence only when both of its
/// threshold maps name exactly the cache policies the repository declares:
/// a policy added without its limits fails here, not on the next night's
/// run.
#[test]
fn the_soak_workflow_gives_thresholds_for_every_declared_cache_policy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workflow = std::fs::read_to_string(root.join(".github/workflows/soak.yml")).unwrap();
    let policy = std::fs::read_to_string(root.join("policy/dw-bounded-growth.toml")).unwrap();
    let declared: std::collections::BTreeSet<String> = dwpolicy::load::load(&policy)
        .unwrap()
        .cache_keys
        .iter()
        .map(|c| c.id.value.clone())
        .collect();
    assert!(declared.len() >= 20, "{declared:?}");
    let peak = workflow_map(&workflow, "DW_PERF_MAX_SERVER_CACHE_KEYS_BY_POLICY");
    let after_drain = workflow_map(&workflow, "DW_PERF_MAX_FINAL_SERVER_CACHE_KEYS_BY_POLICY");
    for (name, map) in [("peak", &peak), ("post-drain", &after_drain)] {
        let named: std::collections::BTreeSet<String> = map.keys().cloned().collect();
        let missing: Vec<_> = declared.difference(&named).collect();
        let unknown: Vec<_> = named.difference(&declared).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "the {name} map lacks {missing:?} and names undeclared {unknown:?}"
        );
        assert!(map.values().all(Value::is_u64), "{name}: {map:?}");
    }
    for (id, limit) in &after_drain {
        assert!(
            limit.as_u64() <= peak[id].as_u64(),
            "{id}: the post-drain limit is above the peak limit"
        );
    }
}
