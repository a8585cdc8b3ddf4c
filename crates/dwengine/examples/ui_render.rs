//! How long the console's pages take as a namespace grows: the evidence
//! that no page's cost grows with the namespace's total runs.
//!
//! ```sh
//! cargo run --release -p dwengine --example ui_render            # 1,000 / 10,000 / 100,000 runs
//! cargo run --release -p dwengine --example ui_render -- 1000,5000 20
//! ```
//!
//! Serves an engine on a fresh SQLite file (loopback, no auth), fills the
//! `default` namespace with runs through [`Engine::start_workflow`] (the
//! API's own start, from 8 threads so commits group), and after each step
//! times every console page over HTTP: the median and the slowest of N
//! requests each (default 20). One run in 100 has the rare type and one
//! in 10 the search attribute `Region = eu`; every run stays open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use dwengine::server::wire::StartWorkflow;
use dwengine::server::{Engine, Running, ServerConfig};
use serde_json::json;

fn main() {
    let mut args = std::env::args().skip(1);
    let steps: Vec<usize> = args
        .next()
        .unwrap_or_else(|| "1000,10000,100000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("steps: comma-separated run counts"))
        .collect();
    let samples: usize = args
        .next()
        .map_or(20, |s| s.parse().expect("samples: a number"));
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut config = ServerConfig::for_node("ui-render", dir.path().join("polling"));
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.database = Some(dir.path().join("ui-render.sqlite"));
    config.store.durability = dwengine::store::Durability::Normal;
    let running = Running::start(Engine::open(config).expect("the engine opens")).expect("binds");
    let base = format!("http://{}", running.addr());
    let engine = running.engine().clone();
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(120))
        .build();
    let registered = agent
        .post(&format!("{base}/api/search-attributes"))
        .send_json(json!({ "name": "Region", "type": "keyword" }));
    assert!(registered.is_ok(), "{registered:?}");

    println!("| runs in the namespace | page | median ms | slowest ms |");
    println!("| ---: | --- | ---: | ---: |");
    let mut filled = 0;
    for step in steps {
        let started = Instant::now();
        fill(&engine, filled, step);
        eprintln!(
            "filled {filled}..{step} in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        filled = step;
        let middle = step / 2;
        let token = base64::engine::general_purpose::STANDARD.encode(middle.to_string());
        let pages = [
            ("runs, first page", "/ui/runs".to_owned()),
            ("runs, a middle page", format!("/ui/runs?page={token}")),
            ("runs of the rare type", "/ui/runs?type=Rare".to_owned()),
            (
                "runs by workflow id",
                format!("/ui/runs?workflow_id=run-{middle}"),
            ),
            (
                "runs by search attribute",
                "/ui/runs?attr=Region&value=eu".to_owned(),
            ),
            ("a run", format!("/ui/run?wf=run-{middle}")),
            ("exceptions", "/ui/exceptions".to_owned()),
            ("operations", "/ui/operations".to_owned()),
        ];
        for (name, path) in pages {
            let mut times: Vec<f64> = (0..samples)
                .map(|_| {
                    let at = Instant::now();
                    let response = agent.get(&format!("{base}{path}")).call().expect("a page");
                    let body = response.into_string().expect("a body");
                    assert!(body.contains("</html>"), "{path}: {body}");
                    at.elapsed().as_secs_f64() * 1000.0
                })
                .collect();
            times.sort_by(f64::total_cmp);
            println!(
                "| {step} | {name} | {:.2} | {:.2} |",
                times[times.len() / 2],
                times[times.len() - 1]
            );
        }
    }
}

/// Starts runs `from..to` from 8 threads.
fn fill(engine: &Arc<Engine>, from: usize, to: usize) {
    let threads = 8;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let engine = engine.clone();
            scope.spawn(move || {
                for i in (from + t..to).step_by(threads) {
                    let body: StartWorkflow = serde_json::from_value(json!({
                        "workflow_id": format!("run-{i}"),
                        "workflow_type": if i % 100 == 7 { "Rare" } else { "Common" },
                        "task_queue": "q",
                        "search_attributes": { "Region": if i % 10 == 3 { "eu" } else { "us" } },
                    }))
                    .expect("a start body");
                    engine.start_workflow("default", body).expect("a start");
                }
            });
        }
    });
}
