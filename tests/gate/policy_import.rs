//! `dwlint policy import`: the reference PHP policy becomes a TOML policy
//! that loads, keeps every reviewed field, and gates the same tree.

use crate::support::{copy_tree, dwlint, text};

use std::path::{Path, PathBuf};
use std::process::Output;

fn php_tree() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/php-policy")
}

fn import(file: &Path) -> Output {
    dwlint(&["policy", "import", file.to_str().unwrap()])
}

fn converted() -> String {
    let out = import(&php_tree().join("config/dw-bounded-growth.php"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn the_reference_policy_converts_to_the_documented_layout() {
    let toml = converted();
    // The header names the input as given on the command line; make it stable.
    let shown = php_tree().join("config/dw-bounded-growth.php");
    let toml = toml.replace(
        &shown.to_string_lossy().replace('\\', "/"),
        "config/dw-bounded-growth.php",
    );
    insta::assert_snapshot!(toml);
}

#[test]
fn the_converted_policy_passes_review_and_resolves_owners_through_use() {
    let toml = converted();
    let policy =
        dwpolicy::Policy::from_toml_str(&toml).expect("loads and passes the policy-only checks");
    let owner = |id: &str| {
        policy
            .cache_key(id)
            .unwrap()
            .owner
            .as_ref()
            .unwrap()
            .value
            .clone()
    };
    assert_eq!(
        owner("long_poll_signals"),
        "App\\Support\\LongPollSignalStore"
    );
    // Imported through a group use.
    assert_eq!(
        owner("workflow_query_tasks"),
        "App\\Support\\WorkflowQueryTaskBroker"
    );
    let runs = policy.metric("dw_workflow_runs_total").unwrap();
    // Imported under an alias.
    assert_eq!(
        runs.owner.as_ref().unwrap().value,
        "App\\Support\\Metrics\\PrometheusMetrics"
    );
    let dims: Vec<_> = runs
        .dimension_list()
        .iter()
        .map(|d| (d.name.value.as_str(), d.class.value.as_str()))
        .collect();
    assert_eq!(
        dims,
        [
            ("namespace", "request_scope_not_label"),
            ("task_queue", "bounded_series"),
            ("workflow_type", "bounded_series")
        ]
    );
    // Concatenated PHP strings are joined; an integer TTL becomes text.
    let query = policy.cache_key("workflow_query_tasks").unwrap();
    assert!(query
        .bound
        .as_ref()
        .unwrap()
        .value
        .contains("by server.query_tasks.max_pending_per_queue"));
    let admission = policy.cache_key("namespace_request_admission").unwrap();
    assert_eq!(admission.ttl.as_ref().unwrap().value, "120");
    assert_eq!(policy.scan_limits[1].default.as_ref().unwrap().value, 5);
    let names: Vec<_> = policy
        .metrics
        .iter()
        .map(|m| m.name.value.as_str())
        .collect();
    assert_eq!(names[0], "dw_workflow_runs_total", "PHP order is kept");
}

#[test]
fn the_converted_policy_gates_the_tree_the_php_policy_gated() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_tree(&php_tree(), root, &|_| false);
    let policy = root.join("policy/dw-bounded-growth.toml");
    let out = dwlint(&[
        "policy",
        "import",
        root.join("config/dw-bounded-growth.php").to_str().unwrap(),
        "--output",
        policy.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = dwlint(&["docs", root.to_str().unwrap(), "--write"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let check = |args: &[&str]| {
        let mut all = vec![
            "check",
            root.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        dwlint(&all)
    };
    let out = check(&["--format", "json"]);
    let stdout = text(&out.stdout);
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let diagnostics = report["diagnostics"].as_array().unwrap();
    // Until dwlint parses PHP (it says so with parse-fallback warnings on the
    // .php files), it cannot see `namespace` + `class`, so the PHP class
    // owners cannot resolve yet. Nothing else may fail.
    let php_unparsed = diagnostics.iter().any(|d| {
        d["code"] == "parse-fallback" && d["file"].as_str().is_some_and(|f| f.ends_with(".php"))
    });
    let errors: Vec<&serde_json::Value> = diagnostics
        .iter()
        .filter(|d| d["severity"] == "error")
        .filter(|d| {
            !(php_unparsed
                && d["code"] == "unresolved-owner"
                && d["message"].as_str().unwrap().contains("`App\\"))
        })
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // The gate is live: a new prefix in the PHP sources fails it.
    let store = root.join("app/Support/ServerReadiness.php");
    let source = std::fs::read_to_string(&store).unwrap();
    std::fs::write(
        &store,
        source.replace("'server:readiness:'", "'server:readiness-v2:'"),
    )
    .unwrap();
    let out = check(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("undeclared-cache-prefix") && stdout.contains("unused-cache-policy"),
        "{stdout}"
    );
}

#[test]
fn output_files_are_not_overwritten_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("p.toml");
    std::fs::write(&output, "# mine\n").unwrap();
    let file = php_tree().join("config/dw-bounded-growth.php");
    let args = |force: bool| {
        let mut a = vec![
            "policy",
            "import",
            file.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ];
        if force {
            a.push("--force");
        }
        dwlint(&a)
    };
    let out = args(false);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("already exists; pass --force"));
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "# mine\n");
    assert_eq!(args(true).status.code(), Some(0));
    dwpolicy::load::load(&std::fs::read_to_string(&output).unwrap()).unwrap();
}

#[test]
fn unevaluable_or_misshapen_input_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "<?php\nreturn [\n    'scan_limits' => ['x' => ['default' => env('X', 5)]],\n];\n",
            ":3:44: function call `env(...)` cannot be evaluated",
        ),
        (
            "<?php\nreturn ['cache_keys' => ['a' => ['prefx' => 'server:a:']]];\n",
            ":2:34: unknown key `prefx` in cache_keys.a; did you mean `prefix`?",
        ),
        (
            "<?php\nreturn ['metrics' => ['dw_a' => ['dimensions' => ['namespace']]]];\n",
            "must map each dimension to its cardinality class",
        ),
        (
            "<?php\nreturn ['scan_limits' => ['x' => ['default' => '5']]];\n",
            "`scan_limits.x.default` must be an integer, found a string",
        ),
        (
            "<?php\nreturn ['cache_keys' => 'none'];\n",
            "cache_keys must be an array",
        ),
        (
            "<?php\nreturn ['scan_limits' => ['x' => ['default' => 0]]];\n",
            ":2:48: `scan_limits.x.default` must be a positive integer, found 0",
        ),
    ];
    for (i, (php, expected)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("case{i}.php"));
        std::fs::write(&file, php).unwrap();
        let out = import(&file);
        assert_eq!(out.status.code(), Some(2), "case {i}");
        // The report wraps long lines; compare the words.
        let stderr = text(&out.stderr).replace('│', " ");
        let stderr = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(stderr.contains(&format!("case{i}.php")), "{stderr}");
        assert!(stderr.contains(expected), "case {i}: {stderr}");
    }
    let out = import(&dir.path().join("missing.php"));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read"));
}

#[test]
fn scan_limits_the_php_policy_lacks_become_drafts_with_todos() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_tree(&php_tree(), root, &|_| false);
    // The reference format carried no scan limit for this key, but the code reads it.
    let php = root.join("config/dw-bounded-growth.php");
    let text_of_php = std::fs::read_to_string(&php).unwrap();
    let start = text_of_php
        .find("        'expired_workflow_task_recovery' => [")
        .unwrap();
    let end = start + text_of_php[start..].find("        ],\n").unwrap() + "        ],\n".len();
    std::fs::write(
        &php,
        format!("{}{}", &text_of_php[..start], &text_of_php[end..]),
    )
    .unwrap();
    let out = import(&php);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let toml = text(&out.stdout);
    let draft = toml
        .split("\n[")
        .find(|t| t.starts_with("scan_limits.expired_workflow_task_recovery]"))
        .unwrap_or_else(|| panic!("no draft in {toml}"));
    assert!(
        draft.contains("config_key = \"server.polling.expired_workflow_task_recovery_scan_limit\""),
        "{draft}"
    );
    assert!(draft.contains("bound = \"TODO: "), "{draft}");
    // The code passes its default beside the key: `config('…', 5)`.
    assert!(draft.contains("\ndefault = 5\n"), "{draft}");
    // It says so, on stderr (stdout is the policy), naming where the key is read.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("app/Support/WorkflowTaskPoller.php:13")
            && stderr.contains("server.polling.expired_workflow_task_recovery_scan_limit")
            && stderr.contains("[scan_limits] draft"),
        "{stderr}"
    );
    // The declared one is not drafted again.
    assert_eq!(
        toml.matches("due_timer_recovery_scan_limit").count(),
        1,
        "{toml}"
    );
}
