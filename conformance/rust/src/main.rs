//! The published Rust SDK (`durable-workflow`, pinned in Cargo.toml) drives a
//! running dwserver through the workflow APIs a user reaches for, one
//! scenario at a time, and checks what each run returns and what its history
//! records. The Python suite (`conformance/suite.py`) proves the same server
//! with the other first-party SDK; the two read different fields of the same
//! events, which is why both exist.
//!
//! Usage: `dw-conformance-rust URL [SCENARIO…]` (or `DW_CONFORMANCE_SCENARIOS=a,b`).
//! Exit status 0 when every selected scenario passed, 1 otherwise, 2 on bad
//! arguments.

mod harness;
mod probes;
mod scenarios;

use std::process::ExitCode;
use std::time::Instant;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(url) = args.next() else {
        eprintln!("usage: dw-conformance-rust URL [SCENARIO...]");
        return ExitCode::from(2);
    };
    let mut selected: Vec<String> = args.collect();
    if selected.is_empty() {
        if let Ok(list) = std::env::var("DW_CONFORMANCE_SCENARIOS") {
            selected = list
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
        }
    }
    let all = scenarios::all();
    for name in &selected {
        if !all.iter().any(|s| s.name == name) {
            eprintln!(
                "unknown scenario {name:?}; known: {}",
                all.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
            );
            return ExitCode::from(2);
        }
    }
    let harness = match harness::Harness::new(&url) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("cannot build the SDK client for {url}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut failed = Vec::new();
    for scenario in all {
        if !selected.is_empty() && !selected.iter().any(|s| s == scenario.name) {
            continue;
        }
        let started = Instant::now();
        let outcome = (scenario.run)(harness.clone()).await;
        let secs = started.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => println!("ok   {:<34} {secs:6.2}s", scenario.name),
            Err(e) => {
                println!("FAIL {:<34} {secs:6.2}s  {e}", scenario.name);
                failed.push(scenario.name);
            }
        }
    }
    if failed.is_empty() {
        println!("rust conformance: all scenarios passed");
        ExitCode::SUCCESS
    } else {
        println!(
            "rust conformance: {} failed: {}",
            failed.len(),
            failed.join(", ")
        );
        ExitCode::FAILURE
    }
}
