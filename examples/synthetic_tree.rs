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

use std::fmt::Write as _;
use std::path::Path;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(root), count) = (args.next(), args.next()) else {
        eprintln!("usage: synthetic_tree DIR [FILES]");
        std::process::exit(2);
    };
    let files: usize = count.and_then(|c| c.parse().ok()).unwrap_or(10_000);
    let every = if args.next().as_deref() == Some("dense") {
        1
    } else {
        10
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
    for i in 0..files {
        writeln!(lib, "pub mod m{i};").unwrap();
        let body = if i % every == 0 {
            let family = i / every;
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
            format!(
                "pub struct Store{i};\n\nimpl Store{i} {{\n    pub fn key(ns: &str) -> String {{\n        format!(\"server:family-{family}:{{ns}}\")\n    }}\n\n    pub fn record(q: &str) {{\n        metrics::counter!(\"dw_family_{family}_total\", \"task_queue\" => q.to_owned()).increment(1);\n    }}\n}}\n"
            )
        } else {
            format!(
                "/// Ordinary engine code.\npub fn work_{i}(items: &[u64]) -> u64 {{\n    let mut total = 0;\n    for (n, item) in items.iter().enumerate() {{\n        if n % 3 == 0 {{\n            total += item * 2;\n        }} else {{\n            total ^= item.rotate_left(n as u32);\n        }}\n    }}\n    let label = format!(\"work {{}} done: {{}}\", {i}, total);\n    tracing::debug!(%label, \"finished\");\n    total\n}}\n"
            )
        };
        std::fs::write(src.join(format!("m{i}.rs")), body)?;
    }
    std::fs::write(src.join("lib.rs"), lib)?;
    std::fs::write(root.join("policy/dw-bounded-growth.toml"), policy)?;
    std::fs::write(root.join("docs/ops.md"), doc)?;
    eprintln!("wrote {files} files under {}", root.display());
    Ok(())
}
