//! dwserver's log output, read from a real child process's stderr.
//!
//! The approaching-limit warning is the operator's only notice before a
//! structural limit fails a run or refuses a command, so these tests drive
//! the real binary over HTTP past 80 % of a limit, once at admission (signals
//! against `pending_signal_count`) and once in the executor (a workflow task
//! scheduling activities against `pending_activity_count`), and look for the
//! seed's exact line with its structured fields on stderr, in the human and
//! the JSON format. The start-up record must name the data location and the
//! effective limits.

use crate::support;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use support::wire::{self, Request};

/// A `dwserver --dev` child whose stderr lines are collected as they come.
struct LoggingServer {
    child: Child,
    base: String,
    stderr: Arc<Mutex<Vec<String>>>,
    agent: ureq::Agent,
    _dir: tempfile::TempDir,
}

impl LoggingServer {
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> LoggingServer {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_dwserver"));
        command
            .arg("--dev")
            .args(args)
            .env("DW_BIND", "127.0.0.1:0")
            .env("DW_POLLING_CACHE_PATH", dir.path().join("polling"))
            .env_remove("RUST_LOG")
            .env_remove("DW_LOG_FORMAT")
            .env_remove("DW_DATABASE_PATH")
            .env_remove("DW_REDIS_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("dwserver starts");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                match line {
                    Ok(line) => sink.lock().unwrap().push(line),
                    Err(_) => break,
                }
            }
        });
        let base = wire::announced_base(&mut child);
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build();
        LoggingServer {
            child,
            base,
            stderr,
            agent,
            _dir: dir,
        }
    }

    fn send(&self, request: &Request) -> (u16, Value) {
        let url = format!("{}{}", self.base, request.path);
        let ns = request.namespace.as_deref().unwrap_or("default");
        let result = match &request.body {
            Some(body) => self
                .agent
                .post(&url)
                .set("x-namespace", ns)
                .send_json(body.clone()),
            None => self.agent.get(&url).set("x-namespace", ns).call(),
        };
        match result {
            Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null)),
            Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Value::Null)),
            Err(e) => panic!("{}: {e}", request.path),
        }
    }

    /// The run id of a freshly started workflow `id` on queue `q`.
    fn start(&self, id: &str) -> String {
        let (status, body) = self.send(&wire::start("default", id, "q", None));
        assert_eq!(status, 201, "{body}");
        body["run_id"].as_str().expect("a run id").to_owned()
    }

    /// Starts workflow `id` and completes its first task with `leaves`
    /// activities: (run id, the completion's status and answer).
    fn fan_out(&self, id: &str, leaves: usize) -> (String, u16, Value) {
        let run_id = self.start(id);
        self.send(&wire::register("default", "w1", "q"));
        let (status, polled) = self.send(&wire::poll(
            "workflow",
            "default",
            "q",
            "w1",
            &format!("p-{id}"),
            5000,
        ));
        assert_eq!(status, 200, "{polled}");
        let task = wire::polled_task(&polled).expect("a workflow task").clone();
        let mut complete = wire::complete_workflow(&task, false);
        let body = complete.body.as_mut().unwrap();
        let one = body["commands"][0].clone();
        // One `all()` group of `leaves` members, as the SDK sends a fan-out:
        // `command_batch_size` counts the leaves of one group.
        let members = (0..leaves)
            .map(|index| {
                let mut member = one.clone();
                member["parallel_group_id"] = format!("activity:1:{leaves}").into();
                member["parallel_group_kind"] = "activity".into();
                member["parallel_group_base_sequence"] = 1.into();
                member["parallel_group_size"] = leaves.into();
                member["parallel_group_index"] = index.into();
                member
            })
            .collect();
        body["commands"] = Value::Array(members);
        let (status, answer) = self.send(&complete);
        (run_id, status, answer)
    }

    /// The stderr lines that contain `needle`, waiting up to 20 s for the first.
    fn lines_with(&self, needle: &str) -> Vec<String> {
        let found = support::eventually(Duration::from_secs(20), || {
            self.stderr
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(needle))
        });
        let lines = self.stderr.lock().unwrap();
        assert!(
            found,
            "no stderr line contains {needle:?}; stderr was:\n{lines:#?}"
        );
        lines
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }
}

impl Drop for LoggingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn seed_line(run_id: &str, kind: &str) -> String {
    format!(
        "[Durable Workflow] Run {run_id} approaching structural limit [{kind}]: 8 / 10 (80% utilization, warning at 80%)."
    )
}

#[test]
fn a_signal_past_80_percent_of_pending_signal_count_logs_the_seed_line_with_the_run_id() {
    let server = LoggingServer::spawn(&[], &[("DW_V2_LIMIT_PENDING_SIGNALS", "10")]);
    let startup = server.lines_with("dwserver started");
    assert_eq!(startup.len(), 1, "{startup:#?}");
    assert!(startup[0].contains(" INFO "), "{}", startup[0]);
    assert!(startup[0].contains("data in :memory:"), "{}", startup[0]);
    assert!(
        startup[0].contains(r#""pending_signal_count":10"#),
        "the effective limit, not the default: {}",
        startup[0]
    );
    assert!(
        startup[0].contains("warning_threshold_percent"),
        "{}",
        startup[0]
    );

    let run_id = server.start("signalled");
    // Admission checks the count before the signal is added: the ninth
    // signal finds 8 pending, 80 % of 10; the first eight stay silent.
    for i in 0..9 {
        let request = wire::signal(
            "default",
            "signalled",
            "go",
            json!({ "codec": "json", "blob": i.to_string() }),
            &format!("s{i}"),
        );
        let (status, body) = server.send(&request);
        assert_eq!(status, 202, "signal {i}: {body}");
    }
    let warnings = server.lines_with("approaching structural limit");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let line = &warnings[0];
    assert!(
        line.contains(&seed_line(&run_id, "pending_signal_count")),
        "{line}"
    );
    assert!(
        line.contains(" WARN dwpolicy::structural_limits: "),
        "{line}"
    );
    for field in [
        format!("workflow_run_id={run_id}"),
        "workflow_type=Order".to_owned(),
        "limit_kind=\"pending_signal_count\"".to_owned(),
        "current=8".to_owned(),
        "limit=10".to_owned(),
        "utilization_percent=80".to_owned(),
        "warning_threshold_percent=80".to_owned(),
    ] {
        assert!(line.contains(&field), "{field} missing from {line}");
    }
}

#[test]
fn an_executor_warning_reaches_the_json_log_with_its_fields() {
    let server = LoggingServer::spawn(
        &["--log-format", "json"],
        &[("DW_V2_LIMIT_PENDING_ACTIVITIES", "10")],
    );
    let startup = server.lines_with("dwserver started");
    let startup: Value = serde_json::from_str(&startup[0]).expect("a JSON log line");
    assert_eq!(startup["level"], "INFO");
    assert_eq!(startup["fields"]["database"], ":memory:");
    let limits: Value =
        serde_json::from_str(startup["fields"]["structural_limits"].as_str().unwrap()).unwrap();
    assert_eq!(limits["pending_activity_count"], 10);

    // Nine activities in one task: the ninth is scheduled with 8 pending.
    let (run_id, status, body) = server.fan_out("fan-out", 9);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["run_status"], "running", "{body}");

    let warnings = server.lines_with("approaching structural limit");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let record: Value = serde_json::from_str(&warnings[0]).expect("a JSON log line");
    assert_eq!(record["level"], "WARN");
    assert_eq!(record["target"], "dwpolicy::structural_limits");
    let fields = &record["fields"];
    assert_eq!(
        fields["message"],
        seed_line(&run_id, "pending_activity_count")
    );
    assert_eq!(fields["workflow_run_id"], run_id.as_str());
    assert_eq!(fields["workflow_type"], "Order");
    assert_eq!(fields["limit_kind"], "pending_activity_count");
    assert_eq!(fields["current"], 8);
    assert_eq!(fields["limit"], 10);
    assert_eq!(fields["utilization_percent"], 80);
    assert_eq!(fields["warning_threshold_percent"], 80);
}

#[test]
fn a_bad_log_setting_refuses_to_start_and_names_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .arg("--dev")
        .env("DW_LOG_FORMAT", "xml")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DW_LOG_FORMAT=\"xml\""));
    let out = Command::new(env!("CARGO_BIN_EXE_dwserver"))
        .args(["--dev", "--log-format"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-format needs a value"));
}

#[test]
fn a_misspelt_variable_and_a_misspelt_level_are_warned_about_at_start() {
    // `infoo` alone would enable a target of that name and hide every
    // dwserver line, these warnings included: the default is kept instead.
    let server = LoggingServer::spawn(&[], &[("DW_MAX_PAYLOD_BYTES", "1"), ("RUST_LOG", "infoo")]);
    let typo = server.lines_with("DW_MAX_PAYLOD_BYTES");
    assert!(
        typo[0].contains("WARN")
            && typo[0].contains("reads no such variable: did you mean DW_MAX_PAYLOAD_BYTES?"),
        "{typo:?}"
    );
    let level = server.lines_with("RUST_LOG=");
    assert!(
        level[0].contains("\"infoo\" (did you mean \"info\"?) is not a level"),
        "{level:?}"
    );
    // The start-up record shows: the default filter is in force.
    server.lines_with("dwserver started");
}

#[test]
fn a_fan_out_of_exactly_command_batch_size_passes_over_http_and_one_more_fails() {
    let server = LoggingServer::spawn(&[], &[("DW_V2_LIMIT_COMMAND_BATCH_SIZE", "5")]);
    // The reference's guard is `batchSize > limit`: 5 leaves pass at 5.
    let (full, status, body) = server.fan_out("full", 5);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["run_status"], "running", "{body}");
    assert_eq!(body["structural_limit"], Value::Null, "{body}");
    let (_, described) = server.send(&wire::describe("default", "full"));
    assert_eq!(described["pending"]["activities"], 5, "{described}");
    let warnings = server.lines_with("approaching structural limit [command_batch_size]");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains(&format!(
            "[Durable Workflow] Run {full} approaching structural limit [command_batch_size]: 5 / 5 (100% utilization, warning at 80%)."
        )),
        "{}",
        warnings[0]
    );

    let (_, status, body) = server.fan_out("over", 6);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["run_status"], "failed", "{body}");
    assert_eq!(
        body["structural_limit"]["structural_limit_kind"],
        "command_batch_size"
    );
    assert_eq!(body["structural_limit"]["structural_limit_value"], 6);
    assert_eq!(body["structural_limit"]["structural_limit_configured"], 5);
    let (_, described) = server.send(&wire::describe("default", "over"));
    assert_eq!(
        described["pending"]["activities"], 0,
        "nothing was scheduled: {described}"
    );
}
