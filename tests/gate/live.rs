//! `dwlint live` against a real dwserver started in the test (and, for the
//! series cap and the suppression report, which a correct dwserver never
//! breaks, against a hand-written metrics endpoint).

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Output;

use crate::support::{json_codes as codes, text};
use dwengine::server::{Engine, Running, ServerConfig};

/// `dwlint ARGS` from the repository root, so the engine's policy is found.
fn dwlint(args: &[&str]) -> Output {
    support::dwlint_in(std::path::Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

/// A dwserver on loopback with `runs` workflow runs in namespace `orders`.
struct Server {
    _running: Running,
    base: String,
    _dir: tempfile::TempDir,
}

fn server(runs: usize) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::for_node("live-test", dir.path().to_owned());
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.prometheus_workflow_series_limit = Some(2);
    let running = Running::start(Engine::open(config).expect("engine")).expect("bind");
    let base = format!("http://{}", running.addr());
    let api = dwsoak::api::Api::new(&base, None);
    for namespace in ["orders", "empty"] {
        let reply = api.register_namespace(namespace);
        assert!(
            reply.ok,
            "register {namespace}: {} {:?}",
            reply.status, reply.body
        );
    }
    for i in 0..runs {
        let reply = api.start_workflow("orders", &format!("wf-{i}"), &format!("Type{i}"), "queue");
        assert!(reply.ok, "start: {} {:?}", reply.status, reply.body);
    }
    Server {
        _running: running,
        base,
        _dir: dir,
    }
}

#[test]
fn the_engine_passes_against_its_own_policy() {
    // Three runs of three types: the cap of 2 leaves one series out, reported.
    let s = server(3);
    let out = dwlint(&["live", &s.base, "-n", "orders", "-n", "empty"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("no findings in 4 files"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_policy_the_server_does_not_match_is_reported() {
    let s = server(1);
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    // task_queue is declared request-scoped (not a label) and workflow_type is
    // missing; every other metric of the engine's surfaces is declared as the
    // engine declares it, so the only findings are the two on this metric.
    let mismatched = r#"schema_version = 1
[metrics.dw_workflow_runs_total]
owner = "x"
surface = "GET /api/system/prometheus-metrics"
dimensions = { namespace = "request_scope_not_label", task_queue = "request_scope_not_label" }
cardinality = "c."
selection = "s."
suppression = "p."
"#;
    std::fs::write(
        &policy,
        format!(
            "{mismatched}{}",
            engine_metric_entries(&["dw_workflow_runs_total"])
        ),
    )
    .unwrap();
    let out = dwlint(&[
        "live",
        &s.base,
        "-n",
        "orders",
        "--policy",
        policy.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let mut found = codes(&out);
    found.sort();
    found.dedup();
    assert_eq!(found, ["live-not-a-label", "live-undeclared-label"]);
}

/// The engine's own `[metrics.*]` entries for its `/api/system` surfaces,
/// except `skip`, as policy text.
fn engine_metric_entries(skip: &[&str]) -> String {
    let engine = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/dw-bounded-growth.toml"),
    )
    .unwrap();
    engine
        .split("\n[")
        .filter_map(|section| section.strip_prefix("metrics."))
        .filter(|entry| entry.contains("surface = \"GET /api/system/"))
        .filter(|entry| !skip.iter().any(|m| entry.starts_with(&format!("{m}]"))))
        .map(|entry| format!("[metrics.{}\n", entry.trim_end()))
        .collect()
}

/// Serves `body` at every path, `requests` times.
fn endpoint(body: &'static str, requests: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(requests).map_while(Result::ok) {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 2 {
                line.clear();
            }
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}/metrics")
}

#[test]
fn series_over_the_cap_and_a_missing_report_are_reported() {
    let over = endpoint(
        "# cardinality series_limits.workflows {\"limit\":1,\"reported\":1}\ndw_workflow_runs_total{task_queue=\"a\",workflow_type=\"x\"} 1\ndw_workflow_runs_total{task_queue=\"b\",workflow_type=\"x\"} 1\n",
        1,
    );
    let out = dwlint(&["live", &over, "--format", "json"]);
    assert_eq!(codes(&out), ["live-series-over-cap"]);
    let unreported = endpoint(
        "dw_workflow_runs_total{task_queue=\"a\",workflow_type=\"x\"} 1\ndw_perf_made_up 1\n",
        1,
    );
    let out = dwlint(&["live", &unreported, "--format", "short"]);
    assert_eq!(out.status.code(), Some(1));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("live-missing-suppression-report")
            && shown.contains("live-undeclared-metric"),
        "{shown}"
    );
}

#[test]
fn an_unreachable_url_exits_2() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = dwlint(&["live", &format!("http://127.0.0.1:{port}")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot scrape"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn malformed_exposition_exits_2_with_its_line_and_column() {
    // A label set opened 100,000 times and never closed: no line of it is a
    // sample, and passing it as "no findings" would pass on garbage.
    let garbage: &'static str = Box::leak("dw_x_total{".repeat(100_000).into_boxed_str());
    for (body, at) in [
        (
            garbage,
            "line 1, column 22: expected `=` after the label name `dw_x_total`",
        ),
        (
            "dw_workflow_runs_total{task_queue=\"a\"} 1\ndw_x{a=\"1\"\n",
            "line 2, column 5: the label set opened here is not closed with `}`",
        ),
        (
            "<html>not metrics</html>\n",
            "line 1, column 1: expected a metric name",
        ),
    ] {
        let url = endpoint(body, 1);
        let out = dwlint(&["live", &url, "--format", "json"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("is not Prometheus text exposition") && stderr.contains(at),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
}

#[test]
fn live_codes_are_explained() {
    let out = dwlint(&["explain", "live-not-a-label"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("## What it does"));
}
