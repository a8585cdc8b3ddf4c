//! The harness's own `/metrics`: the ten `dw_perf_*` metrics of the seed's
//! inventory, with exactly the labels it allows.
//!
//! `status` on `dw_perf_requests_total` comes from HTTP codes and the load
//! generator's fixed exception buckets; `policy` on
//! `dw_perf_redis_server_keys_by_policy` is fixed to the policy's cache
//! inventory (every declared ID, no other); every other metric is a single
//! series. The lines are written as literal exposition templates so that
//! `dwlint check` reads the same labels the scrape shows. A value the last
//! sample could not measure is left out rather than exported as zero.
//! `build/perf/metrics.prom` is the last rendering.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dwevidence::sample::Sample;

use crate::load::Totals;

/// The latest values behind `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct PerfValues {
    /// Request totals.
    pub totals: Totals,
    /// The last sample.
    pub sample: Option<Sample>,
    /// Every declared cache policy ID.
    pub policies: Vec<String>,
    /// Whether a bounded-growth assertion has failed.
    pub assertion_failed: bool,
}

/// Renders Prometheus text exposition.
pub fn render(values: &PerfValues) -> String {
    let mut out = String::new();
    let t = &values.totals;
    out.push_str("# TYPE dw_perf_requests_total counter\n");
    for (status, count) in &t.by_status {
        let _ = writeln!(
            out,
            "dw_perf_requests_total{{status=\"{}\"}} {count}",
            escape(status)
        );
    }
    out.push_str("# TYPE dw_perf_errors_total counter\n");
    let _ = writeln!(out, "dw_perf_errors_total {}", t.errors);
    out.push_str("# TYPE dw_perf_latency_seconds_average gauge\n");
    let _ = writeln!(out, "dw_perf_latency_seconds_average {}", t.latency_average);
    if let Some(s) = &values.sample {
        if let Some(v) = s.server_memory_bytes {
            let _ = writeln!(out, "dw_perf_server_memory_bytes {v}");
        }
        if let Some(v) = s.redis_memory_bytes {
            let _ = writeln!(out, "dw_perf_redis_memory_bytes {v}");
        }
        if let Some(v) = s.redis_polling_keys {
            let _ = writeln!(out, "dw_perf_redis_polling_keys {v}");
        }
        if let Some(v) = s.server_cache_keys {
            let _ = writeln!(out, "dw_perf_redis_server_keys {v}");
        }
        if !s.server_cache_keys_by_policy.is_empty() {
            for policy in &values.policies {
                let count = s
                    .server_cache_keys_by_policy
                    .get(policy)
                    .copied()
                    .unwrap_or(0);
                let _ = writeln!(
                    out,
                    "dw_perf_redis_server_keys_by_policy{{policy=\"{}\"}} {count}",
                    escape(policy)
                );
            }
        }
        if let Some(v) = s.redis_db_keys {
            let _ = writeln!(out, "dw_perf_redis_db_keys {v}");
        }
    }
    let _ = writeln!(
        out,
        "dw_perf_assertion_failed {}",
        u8::from(values.assertion_failed)
    );
    out
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Serves `GET /metrics` from `values` on a background thread.
pub fn serve(addr: &str, values: Arc<Mutex<PerfValues>>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let values = Arc::clone(&values);
            std::thread::spawn(move || {
                let _ = answer(stream, &values);
            });
        }
    });
    Ok(local)
}

fn answer(mut stream: TcpStream, values: &Mutex<PerfValues>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Drain the headers; the request has no body we need.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    let (status, content_type, body) = if request_line.starts_with("GET ") && path == "/metrics" {
        let body = values.lock().map(|v| render(&v)).unwrap_or_default();
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "only GET /metrics\n".to_owned(),
        )
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dwevidence::sample::SampleKind;
    use std::collections::BTreeMap;

    fn sample() -> Sample {
        Sample {
            kind: SampleKind::Periodic,
            elapsed_seconds: 1.0,
            at_unix_ms: 1,
            server_memory_bytes: Some(100),
            redis_memory_bytes: None,
            redis_db_keys: None,
            redis_polling_keys: Some(3),
            server_cache_keys: Some(5),
            server_cache_keys_by_policy: BTreeMap::from([("a".into(), 5)]),
            sqlite_file_bytes: Some(1),
            requests_total: 2,
            errors_total: 0,
            live_findings: 0,
            errors: BTreeMap::new(),
        }
    }

    #[test]
    fn only_the_allowed_labels_and_measured_values_are_exported() {
        let values = PerfValues {
            totals: Totals {
                requests: 2,
                by_status: BTreeMap::from([("200".into(), 1), ("timeout".into(), 1)]),
                errors: 1,
                ..Totals::default()
            },
            sample: Some(sample()),
            policies: vec!["a".into(), "b".into()],
            assertion_failed: false,
        };
        let text = render(&values);
        assert!(
            text.contains("dw_perf_requests_total{status=\"timeout\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("dw_perf_redis_server_keys_by_policy{policy=\"b\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("dw_perf_server_memory_bytes 100\n"));
        assert!(
            !text.contains("dw_perf_redis_memory_bytes"),
            "unmeasured is absent, not 0"
        );
        assert!(text.contains("dw_perf_assertion_failed 0\n"));
        let labels: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| Some(l.split_once('{')?.1.split_once('=')?.0))
            .collect();
        assert!(
            labels.iter().all(|l| *l == "status" || *l == "policy"),
            "{labels:?}"
        );
    }

    #[test]
    fn the_endpoint_answers_metrics_and_nothing_else() {
        let values = Arc::new(Mutex::new(PerfValues::default()));
        let addr = serve("127.0.0.1:0", values).unwrap();
        let get = |path: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut answer = String::new();
            std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
            answer
        };
        let metrics = get("/metrics");
        assert!(metrics.starts_with("HTTP/1.1 200 OK"), "{metrics}");
        assert!(metrics.contains("dw_perf_assertion_failed 0"));
        assert!(get("/other").starts_with("HTTP/1.1 404"));
    }
}
