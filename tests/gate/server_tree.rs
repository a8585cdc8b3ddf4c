//! Acceptance test of dwlint on a realistic non-Rust server tree
//! (`tests/data/server-tree/`): PHP cache stores, a Python soak harness that
//! prints Prometheus lines from f-strings, a shell script holding a YAML
//! heredoc, a markdown doc and a policy. The clean tree passes; each
//! mutation, applied to a fresh copy, must yield exactly one finding.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn tree() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/server-tree")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// A mutation: in `file`, replace the one occurrence of `find` with `with`.
struct Edit {
    file: &'static str,
    find: &'static str,
    with: &'static str,
}

/// Runs `dwlint check` on a copy of the tree with `edits` applied; returns
/// the exit code and the (code, subject) of every finding.
fn check_with(edits: &[Edit]) -> (i32, Vec<(String, String)>) {
    let (exit, report) = run_check(edits);
    let findings = report["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .map(|d| {
            let field = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
            (field("code"), field("subject"))
        })
        .collect();
    (exit, findings)
}

/// The JSON report of `dwlint check` on the edited tree.
fn check_json(edits: &[Edit]) -> Value {
    run_check(edits).1
}

fn run_check(edits: &[Edit]) -> (i32, Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("server");
    copy_dir(&tree(), &root);
    for edit in edits {
        let path = root.join(edit.file);
        let text = std::fs::read_to_string(&path).expect("read mutated file");
        assert_eq!(
            text.matches(edit.find).count(),
            1,
            "{}: `{}` must occur exactly once",
            edit.file,
            edit.find
        );
        std::fs::write(&path, text.replacen(edit.find, edit.with, 1)).expect("write");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(["check", "--color", "never", "--format", "json", "--policy"])
        .arg(root.join("config/dw-bounded-growth.toml"))
        .arg(&root)
        .output()
        .expect("run dwlint");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&output.stderr)));
    (output.status.code().unwrap_or(-1), report)
}

fn expect_one(edits: &[Edit], code: &str, subject: &str) {
    let (exit, findings) = check_with(edits);
    assert_eq!(
        findings,
        vec![(code.to_owned(), subject.to_owned())],
        "findings for {code}"
    );
    assert_eq!(exit, 1, "exit code for {code}");
}

#[test]
fn the_clean_tree_passes() {
    assert_eq!(check_with(&[]), (0, vec![]));
}

#[test]
fn a_new_concatenated_prefix_is_undeclared() {
    expect_one(
        &[Edit {
            file: "app/Support/LongPollSignalStore.php",
            find: "    private function key(",
            with: "    private function fanout(string $queue): string\n    {\n        return 'server:signal-fanout:' . $queue;\n    }\n\n    private function key(",
        }],
        "undeclared-cache-prefix",
        "server:signal-fanout:",
    );
}

#[test]
fn image_references_urls_and_command_names_are_not_cache_keys() {
    // The shapes a first run on the real server tree reported as
    // `server:` prefixes: none is a key, so the tree stays clean.
    let with = concat!(
        "    private const IMAGE = 'durableworkflow/server:0.2';\n",
        "    private const TAGGED = \"${DW_SERVER_IMAGE:-durableworkflow/server:${DW_SERVER_TAG:-0.2}}\";\n",
        "    private const BASE_URL = \"http://server:8080\";\n",
        "    private const BOOTSTRAP = 'server:bootstrap {--force : Run bootstrap commands}';\n",
        "    private const PORT = 'server:8080';\n",
        "\n",
        "    private function key(",
    );
    let edits = [Edit {
        file: "app/Support/LongPollSignalStore.php",
        find: "    private function key(",
        with,
    }];
    assert_eq!(check_with(&edits), (0, vec![]));
}

#[test]
fn a_computed_family_is_never_advised_to_declare_the_bare_namespace() {
    let edits = [Edit {
        file: "app/Support/LongPollSignalStore.php",
        find: "    private function key(",
        with: "    private function any(string $family, string $id): string\n    {\n        return sprintf('server:%s:%s', $family, $id);\n    }\n\n    private function key(",
    }];
    let (exit, findings) = check_with(&edits);
    assert_eq!(exit, 1);
    assert_eq!(
        findings,
        vec![("undeclared-cache-prefix".to_owned(), "server:".to_owned())]
    );
    let help = check_json(&edits)["diagnostics"][0]["help"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(help.contains("literal segment"), "{help}");
    assert!(!help.contains("prefix = \"server:\""), "{help}");
}

#[test]
fn a_new_sprintf_prefix_is_undeclared() {
    expect_one(
        &[Edit {
            file: "app/Support/WorkflowTaskPollRequestStore.php",
            find: "    public function result(",
            with: "    public function activity(string $id): string\n    {\n        return sprintf('server:activity-task-poll-request:%s', $id);\n    }\n\n    public function result(",
        }],
        "undeclared-cache-prefix",
        "server:activity-task-poll-request:",
    );
}

#[test]
fn a_declared_prefix_removed_from_code_is_unused() {
    expect_one(
        &[Edit {
            file: "app/Support/TaskQueueAdmission.php",
            find: "'server:' . 'task-queue-admission:' . ",
            with: "'admission:' . ",
        }],
        "unused-cache-policy",
        "task_queue_admission_locks",
    );
}

#[test]
fn a_new_python_metric_is_undeclared() {
    expect_one(
        &[Edit {
            file: "scripts/perf/harness.py",
            find: "        return \"\\n\".join(lines)",
            with: "        lines.append(f\"dw_perf_drain_seconds {self.errors}\")\n        return \"\\n\".join(lines)",
        }],
        "undeclared-metric",
        "dw_perf_drain_seconds",
    );
}

#[test]
fn a_label_after_an_f_string_placeholder_is_a_mismatch() {
    expect_one(
        &[Edit {
            file: "scripts/perf/harness.py",
            find: "{{policy=\"{policy}\"}}",
            with: "{{policy=\"{policy}\",queue=\"{self.queue}\"}}",
        }],
        "label-mismatch",
        "dw_perf_redis_server_keys_by_policy.queue",
    );
}

#[test]
fn a_removed_doc_mention_is_missing() {
    expect_one(
        &[Edit {
            file: "docs/bounded-growth.md",
            find: "| `dw_perf_errors_total` | none |\n",
            with: "",
        }],
        "doc-missing-mention",
        "dw_perf_errors_total",
    );
}

#[test]
fn an_unresolvable_owner_is_reported_and_psr4_resolves() {
    let owner = |with| Edit {
        file: "config/dw-bounded-growth.toml",
        find: "owner = \"App\\\\Support\\\\LongPollSignalStore\"",
        with,
    };
    // Not under any [sources] glob: only composer.json's PSR-4 map finds it.
    assert_eq!(
        check_with(&[owner("owner = \"Database\\\\Pruning\\\\RunPruner\"")]),
        (0, vec![])
    );
    expect_one(
        &[owner("owner = \"Database\\\\Pruning\\\\RunPrunerGone\"")],
        "unresolved-owner",
        "long_poll_signals",
    );
}

#[test]
fn an_empty_review_field_is_missing() {
    expect_one(
        &[Edit {
            file: "config/dw-bounded-growth.toml",
            find: "ttl = \"5 seconds.\"",
            with: "ttl = \"\"",
        }],
        "missing-review-field",
        "task_queue_admission_locks.ttl",
    );
}

#[test]
fn a_cardinality_class_outside_the_taxonomy_is_unreviewed() {
    expect_one(
        &[Edit {
            file: "config/dw-bounded-growth.toml",
            find: "status = \"finite_http_status\"",
            with: "status = \"http_status\"",
        }],
        "unreviewed-cardinality-class",
        "dw_perf_requests_total.status",
    );
}

#[test]
fn a_per_run_scrape_label_is_reported() {
    expect_one(
        &[Edit {
            file: "scripts/perf/soak.sh",
            find: "          workflow: ",
            with: "          run_id: \"${GITHUB_RUN_ID:-local}\"\n          workflow: ",
        }],
        "per-run-remote-write-label",
        "run_id",
    );
}

#[test]
fn prefixes_and_metrics_in_comments_only_produce_nothing() {
    let edits = [
        Edit {
            file: "app/Support/LongPollSignalStore.php",
            find: "    private const TTL_SECONDS = 60;",
            with: "    // 'server:ghost-line:' . $id; dw_ghost_line_total\n    # \"server:ghost-hash:\" dw_ghost_hash_total\n    /* sprintf('server:ghost-block:%s') dw_ghost_block_total */\n    private const TTL_SECONDS = 60;",
        },
        Edit {
            file: "scripts/perf/harness.py",
            find: "    def summary(self):",
            with: "    # f'dw_ghost_py_total{{status=\"{s}\"}}' and 'server:ghost-py:'\n    def summary(self):\n        \"\"\"Docstring: dw_ghost_doc_total server:ghost-doc:x\"\"\"",
        },
        Edit {
            file: "scripts/perf/soak.sh",
            find: "set -euo pipefail",
            with: "set -euo pipefail # \"server:ghost-sh:\" dw_ghost_sh_total",
        },
        Edit {
            file: "scripts/perf/soak.sh",
            find: "  scrape_interval: 15s",
            with: "  scrape_interval: 15s  # run_id: ${GITHUB_RUN_ID} dw_ghost_yaml_total",
        },
    ];
    assert_eq!(check_with(&edits), (0, vec![]));
}
