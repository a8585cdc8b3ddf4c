//! `dwlint init`: the starter policy loads, resolves, covers the tree
//! exactly, and fails `check` only on what a reviewer still owes.

use crate::support::{dwlint, text, write};

use std::collections::BTreeSet;
use std::path::Path;

/// A small engine: a Rust crate with stores and metrics, a Python perf
/// script, and tests and fixtures whose literals are not shipped surfaces.
fn engine_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "crates/eng/Cargo.toml",
        "[package]\nname = \"eng\"\nversion = \"0.1.0\"\n",
    );
    write(
        root,
        "crates/eng/src/lib.rs",
        "pub mod metrics;\npub mod polling;\n",
    );
    write(
        root,
        "crates/eng/src/polling.rs",
        r#"pub struct LongPollSignalStore;

impl LongPollSignalStore {
    pub fn key(ns: &str, queue: &str) -> String {
        format!("server:long-poll-signal:{ns}:{queue}")
    }
    pub fn wake_key(ns: &str) -> String {
        // Covered by server:long-poll-signal:, so it gets no entry of its own.
        format!("server:long-poll-signal:wake:{ns}")
    }
}

pub fn readiness_key(id: u64) -> String {
    format!("server:readiness:{id}")
}

pub struct WorkflowTaskPoller;

impl WorkflowTaskPoller {
    pub const SCAN_LIMIT_KEY: &'static str = "server.polling.due_timer_recovery_scan_limit";
    pub fn leaf() -> &'static str {
        "due_timer_recovery_scan_limit"
    }
}
"#,
    );
    write(
        root,
        "crates/eng/src/metrics.rs",
        r##"pub struct WorkflowRunMetrics;

impl WorkflowRunMetrics {
    pub fn record(q: &str, t: &str) {
        metrics::counter!("dw_workflow_runs_total", "task_queue" => q.to_owned(), "workflow_type" => t.to_owned()).increment(1);
    }
    pub fn render() -> String {
        "dw_run_latency_seconds_bucket{le=\"0.5\"} 3\ndw_run_latency_seconds_sum 1\n".to_owned()
    }
}

pub fn help() -> &'static str {
    "# TYPE dw_run_latency_seconds histogram"
}
"##,
    );
    write(
        root,
        "scripts/perf/soak.py",
        "LINE = 'dw_perf_requests_total{status=\"ok\"} 1'\n",
    );
    write(
        root,
        "crates/eng/tests/it.rs",
        "const K: &str = \"server:test-only:\";\n",
    );
    write(
        root,
        "fixtures/x/src/lib.rs",
        "const K: &str = \"server:fixture-only:\";\n",
    );
    write(
        root,
        "docs/bounded-growth.md",
        "# Bounded growth\n\nNothing yet.\n",
    );
    dir
}

fn init(root: &Path) -> String {
    let out = dwlint(&["init", root.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    std::fs::read_to_string(root.join("policy/dw-bounded-growth.toml")).unwrap()
}

/// Error-level codes of `dwlint check` on `root` with its policy.
fn error_codes(root: &Path) -> (Option<i32>, BTreeSet<String>, String) {
    let policy = root.join("policy/dw-bounded-growth.toml");
    let out = dwlint(&[
        "check",
        root.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let stdout = text(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}{}", text(&out.stderr)));
    let codes = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "error")
        .map(|d| d["code"].as_str().unwrap().to_owned())
        .collect();
    (out.status.code(), codes, stdout)
}

#[test]
fn the_starter_policy_declares_what_the_tree_contains() {
    let dir = engine_tree();
    let policy = init(dir.path());
    insta::assert_snapshot!(policy);
    let loaded = dwpolicy::load::load(&policy).expect("the starter policy loads");
    let prefixes: Vec<_> = loaded
        .cache_keys
        .iter()
        .map(|c| c.prefix.as_ref().unwrap().value.as_str())
        .collect();
    assert_eq!(prefixes, ["server:long-poll-signal:", "server:readiness:"]);
    assert_eq!(
        loaded
            .cache_key("long_poll_signal")
            .unwrap()
            .owner
            .as_ref()
            .unwrap()
            .value,
        "eng::polling::LongPollSignalStore"
    );
    let runs = loaded.metric("dw_workflow_runs_total").unwrap();
    assert_eq!(
        runs.owner.as_ref().unwrap().value,
        "eng::metrics::WorkflowRunMetrics"
    );
    let labels: Vec<_> = runs
        .dimension_list()
        .iter()
        .map(|d| d.name.value.as_str())
        .collect();
    assert_eq!(labels, ["task_queue", "workflow_type"]);
    // Derived histogram series fold into the histogram.
    assert!(loaded.metric("dw_run_latency_seconds").is_some());
    assert!(loaded.metric("dw_run_latency_seconds_bucket").is_none());
    assert!(!policy.contains("test-only") && !policy.contains("fixture-only"));
}

#[test]
fn check_fails_the_starter_policy_only_on_review_work() {
    let dir = engine_tree();
    init(dir.path());
    let (code, codes, report) = error_codes(dir.path());
    assert_eq!(code, Some(1), "{report}");
    let expected: BTreeSet<String> = [
        "doc-missing-mention",
        "missing-review-field",
        "unreviewed-cardinality-class",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(codes, expected, "{report}");
    // A metric whose labels init could not see is not silently accepted.
    assert!(
        report.contains("\"subject\": \"dw_run_latency_seconds.dimensions\""),
        "{report}"
    );
}

#[test]
fn init_reuses_the_ids_the_docs_already_use() {
    let dir = engine_tree();
    let root = dir.path();
    write(
        root,
        "docs/bounded-growth.md",
        "# Bounded growth\n\n| Policy ID | Prefix |\n| --- | --- |\n| `long_poll_signals` | `server:long-poll-signal:` |\n| `readiness_probe` | `server:readiness:` |\n\n| Policy ID | Config Key |\n| --- | --- |\n| `due_timer_recovery_scans` | `server.polling.due_timer_recovery_scan_limit` |\n\nMetrics: dw_workflow_runs_total, dw_run_latency_seconds, dw_perf_requests_total.\n",
    );
    let policy = init(root);
    assert!(
        policy.contains("[cache_keys.long_poll_signals]"),
        "{policy}"
    );
    assert!(policy.contains("[cache_keys.readiness_probe]"), "{policy}");
    assert!(
        policy.contains("[scan_limits.due_timer_recovery_scans]"),
        "{policy}"
    );
    assert!(
        !policy.contains("[cache_keys.long_poll_signal]"),
        "{policy}"
    );
    let (_, _, report) = error_codes(root);
    assert!(!report.contains("doc-missing-mention"), "{report}");
}

#[test]
fn a_reviewed_starter_policy_passes() {
    let dir = engine_tree();
    let root = dir.path();
    let reviewed = init(root)
        // The reviewer records that the unlabeled histogram has none.
        .replace(
            "e.g. GET /metrics\"\ncardinality",
            "e.g. GET /metrics\"\ndimensions = {}\ncardinality",
        )
        .replace("\"TODO: ", "\"Reviewed: ")
        // Both labels (task_queue, workflow_type) are user-controlled, so
        // the reviewer caps them rather than calling them a fixed inventory.
        .replace("TODO_bounded_or_finite", "bounded_reviewed")
        // A capped label says how the kept series are chosen and where the
        // rest are counted.
        .replace(
            "\ncardinality = ",
            "\nselection = \"Reviewed: lowest values first.\"\nsuppression = \"Reviewed: counted in the payload.\"\ncardinality = ",
        )
        .replace("\nttl = ", "\ndimensions = []\nttl = ")
        .replace(
            "\nbound = \"Reviewed: what one scan",
            "\ndefault = 5\nbound = \"Reviewed: what one scan",
        );
    std::fs::write(root.join("policy/dw-bounded-growth.toml"), reviewed).unwrap();
    let doc = "# Bounded growth\n\n<!-- dwlint:cache-inventory:start -->\n<!-- dwlint:cache-inventory:end -->\n\n<!-- dwlint:scan-limits:start -->\n<!-- dwlint:scan-limits:end -->\n\n<!-- dwlint:metric-inventory:start -->\n<!-- dwlint:metric-inventory:end -->\n";
    write(root, "docs/bounded-growth.md", doc);
    let out = dwlint(&["docs", root.to_str().unwrap(), "--write"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (code, codes, report) = error_codes(root);
    assert_eq!((code, codes), (Some(0), BTreeSet::new()), "{report}");
}

#[test]
fn an_existing_policy_is_kept_unless_forced() {
    let dir = engine_tree();
    let root = dir.path().to_str().unwrap();
    write(dir.path(), "policy/dw-bounded-growth.toml", "# mine\n");
    let out = dwlint(&["init", root]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("already exists; pass --force"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("policy/dw-bounded-growth.toml")).unwrap(),
        "# mine\n"
    );
    assert_eq!(dwlint(&["init", root, "--force"]).status.code(), Some(0));
    // Any policy `check` would discover at the root counts as existing.
    std::fs::remove_file(dir.path().join("policy/dw-bounded-growth.toml")).unwrap();
    write(dir.path(), "dwlint.toml", "# mine\n");
    let out = dwlint(&["init", root]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("dwlint.toml already exists"),
        "{}",
        text(&out.stderr)
    );
    let custom = dir.path().join("elsewhere/p.toml");
    let out = dwlint(&["init", root, "--policy", custom.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains("2 cache key(s), 1 scan limit(s), 3 metric(s)"),
        "{}",
        text(&out.stdout)
    );
    assert!(custom.is_file());
}

#[test]
fn an_empty_tree_gets_a_valid_empty_policy_and_a_missing_tree_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let policy = init(dir.path());
    let loaded = dwpolicy::load::load(&policy).unwrap();
    assert!(loaded.cache_keys.is_empty() && loaded.metrics.is_empty());
    assert!(loaded.sources.docs.is_empty());
    let out = dwlint(&["init", "/no/such/tree"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn init_writes_only_source_globs_that_select_files() {
    let dir = engine_tree();
    let root = dir.path();
    let policy = init(root);
    assert!(
        policy.contains("\"**/*.rs\"") && policy.contains("\"**/*.py\""),
        "{policy}"
    );
    assert!(
        !policy.contains("\"**/*.php\"") && !policy.contains("\"**/*.go\""),
        "{policy}"
    );
    let out = dwlint(&[
        "check",
        root.to_str().unwrap(),
        "--policy",
        root.join("policy/dw-bounded-growth.toml").to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("matches no file"), "{stderr}");
}

#[test]
fn paths_file_names_and_sql_tables_are_not_proposed_as_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "src/store.rs",
        r#"#[derive(serde::Deserialize)]
pub struct Limits {
    #[serde(default = "dw_defaults::limit")]
    pub limit: u32,
    #[serde(with = "dw_duration", skip_serializing_if = "dw_is_zero")]
    pub wait: u64,
}
pub const DB: &str = "dw_state.sqlite";
pub const RUNS: &str = "SELECT id FROM dw_runs WHERE status = ?";
pub const SCHEMA: &str = "CREATE TABLE dw_workflow_runs (id TEXT PRIMARY KEY)";
pub fn emit() {
    metrics::counter!("dw_runs_started_total").increment(1);
}
"#,
    );
    let policy = init(root);
    let loaded = dwpolicy::load::load(&policy).unwrap();
    let names: Vec<_> = loaded
        .metrics
        .iter()
        .map(|m| m.name.value.as_str())
        .collect();
    assert_eq!(names, ["dw_runs_started_total"], "{policy}");
    let (_, codes, report) = error_codes(root);
    assert!(!codes.contains("undeclared-metric"), "{report}");
}

#[test]
fn init_takes_other_prefixes_and_force_keeps_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "src/search.rs",
        r#"pub struct Index;
impl Index {
    pub fn key(uid: &str) -> String {
        format!("cache:index-stats:{uid}")
    }
    pub fn count() {
        metrics::counter!("meilisearch_requests_total").increment(1);
    }
}
"#,
    );
    let out = dwlint(&[
        "init",
        root.to_str().unwrap(),
        "--cache-prefix",
        "cache:",
        "--metric-prefix",
        "meilisearch_",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let path = root.join("policy/dw-bounded-growth.toml");
    let policy = std::fs::read_to_string(&path).unwrap();
    let loaded = dwpolicy::load::load(&policy).unwrap();
    assert_eq!(loaded.settings.cache_namespace, "cache:");
    assert_eq!(loaded.settings.metric_prefix, "meilisearch_");
    let prefixes: Vec<_> = loaded
        .cache_keys
        .iter()
        .map(|c| c.prefix.as_ref().unwrap().value.as_str())
        .collect();
    assert_eq!(prefixes, ["cache:index-stats:"], "{policy}");
    assert!(
        loaded.metric("meilisearch_requests_total").is_some(),
        "{policy}"
    );

    // A reviewer narrows the user-controlled dimensions; --force redrafts
    // the entries and keeps every setting.
    let reviewed = policy.replace(
        "[settings]\n",
        "[settings]\nuser_controlled_dimensions = [\"uid\"]\n",
    );
    std::fs::write(&path, reviewed).unwrap();
    let out = dwlint(&["init", root.to_str().unwrap(), "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let redrafted = dwpolicy::load::load(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(redrafted.settings.cache_namespace, "cache:");
    assert_eq!(redrafted.settings.metric_prefix, "meilisearch_");
    assert_eq!(redrafted.settings.user_controlled_dimensions, ["uid"]);
    assert_eq!(redrafted.cache_keys.len(), 1);
}

#[test]
fn init_points_at_a_reference_php_policy() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "config/dw-bounded-growth.php", "<?php\nreturn [];\n");
    let out = dwlint(&["init", root.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains("reference PHP policy") && stdout.contains("dwlint policy import"),
        "{stdout}"
    );
}

/// A scan limit read with a default beside its key (`config('…', 5)`, as
/// the reference server does) gets that default in the draft; a key read
/// without one keeps the TODO.
#[test]
fn init_takes_a_scan_limits_default_from_the_code() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "app/Support/WorkflowTaskPoller.php",
        "<?php\nnamespace App\\Support;\n\nclass WorkflowTaskPoller\n{\n    public function recover(): int\n    {\n        return max(1, (int) config('server.polling.expired_workflow_task_recovery_scan_limit', 5));\n    }\n\n    public function timers(): int\n    {\n        return (int) config('server.polling.due_timer_recovery_scan_limit');\n    }\n}\n",
    );
    let policy = init(root);
    let entry = |id: &str| -> String {
        let head = format!("[scan_limits.{id}]");
        let start = policy
            .find(&head)
            .unwrap_or_else(|| panic!("{head}: {policy}"));
        let rest = &policy[start..];
        rest[..rest[1..].find("\n[").map_or(rest.len(), |n| n + 1)].to_owned()
    };
    let expired = entry("expired_workflow_task_recovery");
    assert!(expired.contains("\ndefault = 5\n"), "{expired}");
    assert!(
        expired.contains("# default 5: the value the code passes"),
        "{expired}"
    );
    assert!(!expired.contains("TODO: add `default"), "{expired}");
    let timers = entry("due_timer_recovery");
    assert!(!timers.contains("\ndefault ="), "{timers}");
    assert!(timers.contains("TODO: add `default = N`"), "{timers}");
}
