//! `dwserver --config` and `dwserver contract`, run as the real binary:
//! a bad file and a bad environment are refused together (exit 2), and
//! the contract lists every limit with its variable, key and values.

use std::process::Command;

fn dwserver() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dwserver"));
    // Only what each test sets: no DW_* from the shell running the tests.
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    command
}

#[test]
fn a_bad_file_and_a_bad_environment_stop_start_up_in_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dw.toml");
    std::fs::write(
        &path,
        "[server.limits]\nmax_memo_bytes = \"256KiB\"\n\n[workflows.v2.structural_limits]\npending_activity_count = -1\n",
    )
    .unwrap();
    let out = dwserver()
        .args(["--dev", "--config"])
        .arg(&path)
        .env("DW_MAX_PAYLOAD_BYTES", "2MB")
        .env(
            "DW_SERVER_POLLING_EXPIRED_WORKFLOW_TASK_RECOVERY_SCAN_LIMIT",
            "five",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid configuration (4 problems)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("dw.toml:2: server.limits.max_memo_bytes = \"256KiB\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("dw.toml:5: workflows.v2.structural_limits.pending_activity_count"),
        "{stderr}"
    );
    assert!(
        stderr.contains("DW_MAX_PAYLOAD_BYTES=\"2MB\" (environment)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("DW_SERVER_POLLING_EXPIRED_WORKFLOW_TASK_RECOVERY_SCAN_LIMIT=\"five\""),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing was served");
}

#[test]
fn dw_config_names_the_file_and_the_contract_shows_current_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dw.toml");
    std::fs::write(
        &path,
        "[server.limits]\nmax_memo_bytes = 1024\n[workflows.v2.structural_limits]\npending_signal_count = 10\n",
    )
    .unwrap();
    let out = dwserver()
        .args(["contract", "--format", "json"])
        .env("DW_CONFIG", &path)
        .env("DW_V2_LIMIT_PENDING_SIGNALS", "11")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let limit = |name: &str| {
        json["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .cloned()
            .unwrap()
    };
    let memo = limit("max_memo_bytes");
    assert_eq!(memo["env"], "DW_MAX_MEMO_BYTES");
    assert_eq!(memo["config_key"], "server.limits.max_memo_bytes");
    assert_eq!(memo["group"], "request_boundary");
    assert_eq!(
        (memo["default"].as_u64(), memo["current"].as_u64()),
        (Some(262144), Some(1024))
    );
    assert_eq!(
        limit("pending_signal_count")["current"],
        11,
        "the environment overrides the file"
    );
    let reason = limit("reason");
    assert_eq!(
        (reason["env"].is_null(), reason["current"].as_u64()),
        (true, Some(1000))
    );
    for l in json["limits"].as_array().unwrap() {
        if l["env"].is_string() {
            assert!(l["config_key"].is_string(), "{l}");
        }
    }
    let table = dwserver().arg("contract").output().unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    for key in [
        "server.query_tasks.timeout",
        "server.query_tasks.ttl_seconds",
        "server.query_tasks.lease_timeout",
        "server.query_tasks.max_pending_per_queue",
    ] {
        assert!(table.contains(key), "{key} missing from\n{table}");
    }
    // Each limit's line holds its values; its variable is on the next line.
    let lines: Vec<&str> = table.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == "DW_V2_LIMIT_HISTORY_TRANSACTION_BYTES")
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        lines[at - 1]
            .trim_start()
            .starts_with("history_transaction_bytes")
            && lines[at - 1].contains("16777216"),
        "{table}"
    );
    // Narrow enough for a terminal or a CI log: no line wraps.
    let widest = lines.iter().map(|l| l.chars().count()).max().unwrap();
    assert!(
        widest <= dwengine::server::contract::TABLE_WIDTH,
        "{widest} columns:\n{table}"
    );
}

#[test]
fn the_checked_in_contract_doc_is_current_and_a_stale_one_fails() {
    let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/contract.md");
    let ok = dwserver()
        .args(["contract", "--check", doc])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("contract.md");
    let text = std::fs::read_to_string(doc)
        .unwrap()
        .replace("262144", "262145");
    std::fs::write(&stale, text).unwrap();
    let out = dwserver()
        .args(["contract", "--check"])
        .arg(&stale)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is stale"));
    // --write regenerates it.
    let written = dwserver()
        .args(["contract", "--write"])
        .arg(&stale)
        .output()
        .unwrap();
    assert!(written.status.success());
    assert_eq!(
        std::fs::read_to_string(&stale).unwrap(),
        std::fs::read_to_string(doc).unwrap()
    );
}

#[test]
fn the_query_task_settings_are_in_the_contract_and_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dw.toml");
    std::fs::write(
        &path,
        "[server.query_tasks]\ntimeout = -3\nttl_seconds = 300\nmax_pending_per_queue = 20000\n",
    )
    .unwrap();
    let out = dwserver()
        .args(["contract", "--format", "json", "--config"])
        .arg(&path)
        .env("DW_SERVER_QUERY_TASKS_LEASE_TIMEOUT", "4")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let setting = |name: &str| {
        json["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["group"] == "query_tasks" && l["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no query_tasks {name} in {json}"))
    };
    let resolved = |name: &str| {
        let s = setting(name);
        (
            s["default"].as_u64().unwrap(),
            s["current"].as_u64().unwrap(),
        )
    };
    // The derived timeout (polling wait 60 s: min(max(75, 40), 55)); a
    // negative one counts as 0.
    assert_eq!(resolved("timeout"), (55, 0));
    assert_eq!(setting("timeout")["env"], "DW_SERVER_QUERY_TASKS_TIMEOUT");
    assert_eq!(setting("timeout")["unit"], "seconds");
    assert_eq!(resolved("ttl_seconds"), (60, 300));
    assert_eq!(resolved("lease_timeout"), (10, 4), "the environment");
    assert_eq!(
        resolved("max_pending_per_queue"),
        (1024, 10_000),
        "clamped to 10,000"
    );
    // A bad value is refused with its file line like any other limit.
    std::fs::write(&path, "[server.query_tasks]\nlease_timeout = \"ten\"\n").unwrap();
    let out = dwserver()
        .args(["contract", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("dw.toml:2: server.query_tasks.lease_timeout"),
        "{stderr}"
    );
}

#[test]
fn version_prints_the_crate_version_and_an_unknown_flag_names_itself() {
    for flag in ["--version", "-V"] {
        let out = dwserver().arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag}: {out:?}");
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("dwserver {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
    let out = dwserver().arg("--verison").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("unknown argument \"--verison\"") && stderr.contains("--help"),
        "{stderr}"
    );
}
