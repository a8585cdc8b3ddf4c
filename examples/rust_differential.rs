//! Compares the parser-free Rust extractor with the `syn` one it replaced
//! on every `.rs` file under a directory, and prints each file where they
//! differ (files `syn` could not parse are counted, not compared: only the
//! new extractor reads those past a syntax error), then the time each
//! extractor took over all files (in this process, files already read).
//! Each file also goes through `harness::rust_tokens`, which holds the
//! nesting guard's verdict and measures read off the tokenizer to the
//! guard's own lexer; a file it fails on is printed too.
//!
//! ```sh
//! cargo run --release --features syn-oracle --example rust_differential -- ~/.cargo/registry/src
//! ```

use std::path::Path;

use dwlint::extract::rust::extract_rust;
use dwlint::extract::rust_syn::extract_rust_syn;
use dwlint::extract::ExtractConfig;

#[derive(Default)]
struct Counts {
    same: usize,
    differ: usize,
    syntax_errors: usize,
    guard_differ: usize,
    syn_time: std::time::Duration,
    new_time: std::time::Duration,
}

fn visit(dir: &Path, configs: &[ExtractConfig], counts: &mut Counts) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            visit(&path, configs, counts);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if std::panic::catch_unwind(|| dwlint::harness::rust_tokens(text.as_bytes())).is_err() {
            println!("{}: harness::rust_tokens failed", path.display());
            counts.guard_differ += 1;
        }
        let module = vec!["krate".to_owned()];
        for config in configs {
            let started = std::time::Instant::now();
            let old = extract_rust_syn(&text, config, &module);
            counts.syn_time += started.elapsed();
            if old
                .fallback
                .as_ref()
                .is_some_and(|(m, _)| m.starts_with("not parseable") && !m.contains("token stream"))
            {
                counts.syntax_errors += 1;
                break;
            }
            let started = std::time::Instant::now();
            let new = extract_rust(&text, config, &module);
            counts.new_time += started.elapsed();
            if old == new {
                counts.same += 1;
            } else {
                counts.differ += 1;
                println!(
                    "DIFF {} (prefix {:?})",
                    path.display(),
                    config.metric_prefix
                );
                for (label, a, b) in [
                    (
                        "literals",
                        format!("{:#?}", old.literals),
                        format!("{:#?}", new.literals),
                    ),
                    (
                        "metrics",
                        format!("{:#?}", old.metrics),
                        format!("{:#?}", new.metrics),
                    ),
                    (
                        "items",
                        format!("{:?}", old.items),
                        format!("{:?}", new.items),
                    ),
                    (
                        "fallback",
                        format!("{:?}", old.fallback),
                        format!("{:?}", new.fallback),
                    ),
                ] {
                    if a != b {
                        let a: Vec<&str> = a.lines().collect();
                        let b: Vec<&str> = b.lines().collect();
                        let first = a
                            .iter()
                            .zip(&b)
                            .position(|(x, y)| x != y)
                            .unwrap_or(a.len().min(b.len()));
                        println!(
                            "  {label}: syn {} lines, new {} lines; first difference:",
                            a.len(),
                            b.len()
                        );
                        for line in a.iter().skip(first.saturating_sub(3)).take(8) {
                            println!("    syn| {line}");
                        }
                        for line in b.iter().skip(first.saturating_sub(3)).take(8) {
                            println!("    new| {line}");
                        }
                    }
                }
            }
        }
    }
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: rust_differential DIR");
        std::process::exit(2);
    };
    // The gate's own settings, and settings that make nearly every string
    // literal and every `new(` a candidate, so that far more of each file
    // is compared than any policy would look at.
    let configs = [
        ExtractConfig {
            cache_namespace: "server:".into(),
            metric_prefix: "dw_".into(),
        },
        ExtractConfig {
            cache_namespace: "e".into(),
            metric_prefix: "a".into(),
        },
    ];
    let mut counts = Counts::default();
    visit(Path::new(&dir), &configs, &mut counts);
    println!(
        "{} comparisons equal, {} differ; {} files with syntax errors not compared",
        counts.same, counts.differ, counts.syntax_errors
    );
    println!(
        "{} files harness::rust_tokens fails on (token promises, the nesting guard against the tokenizer)",
        counts.guard_differ
    );
    println!(
        "extraction time: syn {:.1} ms, parser-free {:.1} ms ({:.1}x faster)",
        counts.syn_time.as_secs_f64() * 1e3,
        counts.new_time.as_secs_f64() * 1e3,
        counts.syn_time.as_secs_f64() / counts.new_time.as_secs_f64().max(1e-9)
    );
    if counts.differ > 0 || counts.guard_differ > 0 {
        std::process::exit(1);
    }
}
