//! The `dwsoak` binary: parse, validate, run, print the verdict.
//!
//! Exit 0: the run passed. 1: it failed (its summary says why). 2: it could
//! not run (bad configuration, a service that would not start).

use std::process::ExitCode;

use clap::Parser;
use dwevidence::summary::{RunResult, Summary};
use dwsoak::config::{Args, Soak};

fn main() -> ExitCode {
    let args = Args::parse();
    let soak = match Soak::new(args) {
        Ok(soak) => soak,
        Err(e) => {
            eprintln!("dwsoak: {e}");
            return ExitCode::from(2);
        }
    };
    match dwsoak::run::run(&soak) {
        Ok(summary) => {
            print!(
                "{}",
                verdict(&summary, &soak.args.output.display().to_string())
            );
            match summary.run.result {
                RunResult::Passed => ExitCode::SUCCESS,
                RunResult::Failed => ExitCode::from(1),
            }
        }
        Err(e) => {
            eprintln!("dwsoak: {e}");
            ExitCode::from(2)
        }
    }
}

fn verdict(s: &Summary, dir: &str) -> String {
    let mut out = format!(
        "dwsoak: run {:?}; {} of {} periodic samples; max RSS {} bytes; max server:* keys {}; final server:* keys {}\n",
        s.run.result,
        s.samples.periodic_sample_count,
        s.samples.expected_periodic_samples,
        s.maxima.server_memory_bytes.map_or("?".into(), |v| v.to_string()),
        s.maxima.server_cache_keys.map_or("?".into(), |v| v.to_string()),
        s.final_drain.server_cache_keys.map_or("?".into(), |v| v.to_string()),
    );
    for failure in &s.run.failures {
        out.push_str(&format!("  failed: {failure}\n"));
    }
    for a in &s.assertion_failures {
        out.push_str(&format!("  assertion {}: {}\n", a.assertion, a.message));
    }
    let trust = &s.evidence.trust;
    out.push_str(&format!(
        "evidence ({}): {}\n",
        trust.profile,
        if trust.eligible {
            "eligible".to_owned()
        } else {
            format!(
                "not eligible: {}",
                trust
                    .failed_conditions
                    .iter()
                    .map(|c| c.condition.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ));
    out.push_str(&format!(
        "artifacts: {dir}/summary.json, samples.jsonl, metrics.prom, report.html, logs/\n"
    ));
    out
}
