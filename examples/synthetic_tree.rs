//! Writes a synthetic engine tree for timing `dwlint check` on a large repo.
//!
//! ```sh
//! cargo run --release --example synthetic_tree -- /tmp/dw-tree 20000
//! /usr/bin/time -v target/release/dwlint check /tmp/dw-tree
//! ```
//!
//! One file in ten builds a cache key and emits a labelled metric; the rest
//! are ordinary code the prefilter should skip. Every surface is declared and
//! documented, so a correct run reports no findings. A third argument
//! `dense` makes every file build a key (the prefilter's worst case).
//!
//! `dense-real SRC...` makes every file build a key too, but file `i` is a
//! real Rust source file taken from the directories `SRC...` with the same
//! small key-and-metric block appended: the `dense` files are 250 bytes, so
//! per-file costs and the policy dominate a run over them, while real files
//! that hold a cache key are kilobytes of ordinary code, where the per-byte
//! costs (prefilter, tokenizer, token walk) show. The files are picked
//! deterministically: every `.rs` file under `SRC...`, sorted by its path
//! below the parent of its `SRC`, minus those `syn` cannot parse (with the
//! block appended) and those that already hold `server:` or `dw_` (they
//! would be findings of their own), spread evenly over the rest.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(root), count) = (args.next(), args.next()) else {
        eprintln!("usage: synthetic_tree DIR [FILES [dense | dense-real SRC...]]");
        std::process::exit(2);
    };
    let files: usize = count.and_then(|c| c.parse().ok()).unwrap_or(10_000);
    let mode = args.next();
    let every = match mode.as_deref() {
        Some("dense" | "dense-real") => 1,
        _ => 10,
    };
    let real = if mode.as_deref() == Some("dense-real") {
        let sources: Vec<PathBuf> = args.map(PathBuf::from).collect();
        if sources.is_empty() {
            eprintln!("usage: synthetic_tree DIR FILES dense-real SRC...");
            std::process::exit(2);
        }
        Some(pick_real_files(&sources, files)?)
    } else {
        None
    };
    let root = Path::new(&root);
    let src = root.join("crates/engine/src");
    std::fs::create_dir_all(&src)?;
    std::fs::create_dir_all(root.join("policy"))?;
    std::fs::create_dir_all(root.join("docs"))?;
    std::fs::write(
        root.join("crates/engine/Cargo.toml"),
        "[package]\nname = \"engine\"\n",
    )?;

    let mut lib = String::new();
    let mut policy = String::from(
        "schema_version = 1\n\n[sources]\ncache = [\"crates/engine/src/**/*.rs\"]\nmetrics = [\"crates/engine/src/**/*.rs\"]\ndocs = [\"docs/ops.md\"]\n",
    );
    let mut doc = String::from("# Inventory\n\n");
    let mut bytes = 0;
    for i in 0..files {
        writeln!(lib, "pub mod m{i};").unwrap();
        let body = if let Some(real) = &real {
            let (origin, text) = &real[i];
            declare_family(&mut policy, &mut doc, i, i);
            format!("{text}\n{}", family_block(i, i, origin))
        } else if i % every == 0 {
            let family = i / every;
            declare_family(&mut policy, &mut doc, i, family);
            family_block(i, family, "")
        } else {
            format!(
                "/// Ordinary engine code.\npub fn work_{i}(items: &[u64]) -> u64 {{\n    let mut total = 0;\n    for (n, item) in items.iter().enumerate() {{\n        if n % 3 == 0 {{\n            total += item * 2;\n        }} else {{\n            total ^= item.rotate_left(n as u32);\n        }}\n    }}\n    let label = format!(\"work {{}} done: {{}}\", {i}, total);\n    tracing::debug!(%label, \"finished\");\n    total\n}}\n"
            )
        };
        bytes += body.len();
        std::fs::write(src.join(format!("m{i}.rs")), body)?;
    }
    std::fs::write(src.join("lib.rs"), lib)?;
    std::fs::write(root.join("policy/dw-bounded-growth.toml"), policy)?;
    std::fs::write(root.join("docs/ops.md"), doc)?;
    eprintln!(
        "wrote {files} files ({bytes} bytes) under {}",
        root.display()
    );
    Ok(())
}

/// The policy entries and the docs row of family `family`, owned by
/// `Store{i}` in module `m{i}`.
fn declare_family(policy: &mut String, doc: &mut String, i: usize, family: usize) {
    writeln!(
        policy,
        "\n[cache_keys.family_{family}]\nowner = \"engine::m{i}::Store{i}\"\nprefix = \"server:family-{family}:\"\ndimensions = [\"namespace\"]\nttl = \"60 seconds.\"\nbound = \"One key per namespace.\"\nadmission = \"Writes only.\"\neviction = \"TTL.\"\n\n[metrics.dw_family_{family}_total]\nowner = \"engine::m{i}::Store{i}\"\nsurface = \"GET /metrics\"\ndimensions = {{ namespace = \"request_scope_not_label\", task_queue = \"bounded_series\" }}\ncardinality = \"At most 100 series.\"\nselection = \"Lowest first.\"\nsuppression = \"Counted.\""
    )
    .unwrap();
    writeln!(
        doc,
        "| family_{family} | `server:family-{family}:` | dw_family_{family}_total |"
    )
    .unwrap();
}

/// The code that builds family `family`'s key and emits its metric; a
/// real file's `origin` is named in a comment above it.
fn family_block(i: usize, family: usize, origin: &str) -> String {
    let from = if origin.is_empty() {
        String::new()
    } else {
        format!("// dense-real: family {family}, appended to {origin}\n")
    };
    format!(
        "{from}pub struct Store{i};\n\nimpl Store{i} {{\n    pub fn key(ns: &str) -> String {{\n        format!(\"server:family-{family}:{{ns}}\")\n    }}\n\n    pub fn record(q: &str) {{\n        metrics::counter!(\"dw_family_{family}_total\", \"task_queue\" => q.to_owned()).increment(1);\n    }}\n}}\n"
    )
}

/// `files` real Rust files from under `sources`, as (path below the
/// parent of its source directory, text), picked as the module docs say.
fn pick_real_files(sources: &[PathBuf], files: usize) -> std::io::Result<Vec<(String, String)>> {
    let mut paths = Vec::new();
    for source in sources {
        let base = source.parent().unwrap_or(Path::new(""));
        collect_rs(source, base, &mut paths)?;
    }
    paths.sort();
    let (mut unparsed, mut literal) = (0, 0);
    let mut eligible = Vec::new();
    for (rel, path) in paths.iter() {
        let Ok(text) = std::fs::read_to_string(path) else {
            unparsed += 1;
            continue;
        };
        if text.contains("server:") || text.contains("dw_") {
            literal += 1;
            continue;
        }
        // The block is appended, so the file must parse with it (a file
        // that is one expression, meant for `include!`, does not).
        let whole = format!("{text}\n{}", family_block(0, 0, rel));
        if syn::parse_file(&whole).is_err() {
            unparsed += 1;
            continue;
        }
        eligible.push((rel.clone(), text));
    }
    eprintln!(
        "dense-real: {} Rust files under the sources, {unparsed} not parsed by syn, \
         {literal} already holding `server:` or `dw_`, {} eligible",
        paths.len(),
        eligible.len()
    );
    if eligible.len() < files {
        eprintln!(
            "dense-real: {files} files wanted, only {} eligible",
            eligible.len()
        );
        std::process::exit(2);
    }
    let n = eligible.len();
    Ok((0..files)
        .map(|i| eligible[i * n / files].clone())
        .collect())
}

/// Every `.rs` file under `dir`, with its path relative to `base`.
fn collect_rs(dir: &Path, base: &Path, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            collect_rs(&path, base, out)?;
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(base).unwrap_or(&path);
            out.push((rel.to_string_lossy().into_owned(), path));
        }
    }
    Ok(())
}
