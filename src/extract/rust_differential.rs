//! The parser-free Rust extractor held to the `syn` one it replaced.
//!
//! Both must give the same facts (literals with their items, metric sites
//! with their labels, owners, fallbacks) on every input `syn` can parse,
//! and on every input neither can tokenize. Three sources of input: the
//! repository's own Rust files, generated programs that combine every shape
//! the extractor knows (items, attributes, doc comments, macros, metric
//! constructors, string forms) at random depths, and byte-level mutations of
//! the repository's files. Inputs with a syntax error in well-formed tokens
//! are not compared: the old extractor scanned them lexically, the new one
//! reads them like any other file.

use std::path::Path;

use proptest::prelude::*;

use super::rust::extract_rust;
use super::rust_syn::extract_rust_syn;
use super::{ExtractConfig, FileFacts};

fn configs() -> [ExtractConfig; 2] {
    [
        ExtractConfig {
            cache_namespace: "server:".into(),
            metric_prefix: "dw_".into(),
        },
        // Nearly every literal kept, nearly every word a metric name: far
        // more of each file compared than a real policy would look at.
        ExtractConfig {
            cache_namespace: "e".into(),
            metric_prefix: "a".into(),
        },
    ]
}

/// Whether `syn` rejected well-formed tokens (the one case not compared).
fn syntax_error(facts: &FileFacts) -> bool {
    facts.fallback.as_ref().is_some_and(|(message, _)| {
        message.starts_with("not parseable") && !message.contains("token stream")
    })
}

/// Compares the two extractors on `text`; `false` when not comparable.
fn same(text: &str) -> Result<bool, TestCaseError> {
    let module = vec!["krate".to_owned(), "m".to_owned()];
    for config in configs() {
        let old = extract_rust_syn(text, &config, &module);
        if syntax_error(&old) {
            return Ok(false);
        }
        let new = extract_rust(text, &config, &module);
        prop_assert_eq!(&new, &old, "input:\n{}", text);
    }
    Ok(true)
}

fn rust_files(dir: &Path, out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path.display().to_string(), text));
            }
        }
    }
}

/// Every Rust file of the repository with its text, read once per test
/// binary (the guard's differential tests read them too).
pub(super) fn repository_files() -> &'static [(String, String)] {
    static FILES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    FILES.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in ["src", "fixtures", "tests", "examples", "crates", "fuzz"] {
            rust_files(&root.join(dir), &mut files);
        }
        files.sort();
        files
    })
}

#[test]
fn every_rust_file_of_the_repository_gives_the_same_facts() {
    let files = repository_files();
    assert!(files.len() > 100, "{} files", files.len());
    let mut compared = 0;
    for (path, text) in files {
        match same(text) {
            Ok(true) => compared += 1,
            Ok(false) => {}
            Err(e) => panic!("{path}: {e}"),
        }
    }
    // Only deliberately broken fixtures may be left out.
    assert!(compared + 3 >= files.len(), "{compared} of {}", files.len());
}

/// Literal forms the rules read, escaped and raw.
fn literal() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        r#""server:a:{}""#,
        r#""server:fmt:{id}:""#,
        r##"r#"server:raw:"q""#"##,
        r#"r"dw_raw_total""#,
        r#"b"server:bytes:""#,
        r#"br"dw_bytes""#,
        r#"c"server:c:""#,
        r#""dw_x_total""#,
        r#""dw_runs_total{task_queue=\"{}\",kind=\"{}\"} {}""#,
        r#""dw_y{a=\"1\"} 2""#,
        r#""due_scan_limit""#,
        r#""plain words""#,
        r#""ї dw_uni server:ї:""#,
        r#""server:\u{65}scaped:""#,
        r#""one \
            server:cont:""#,
        r#""a\n\tdw_esc_total\x41""#,
        r#""server:sfx:"suffix"#,
        r#""task_queue""#,
        r#""kind""#,
        r#""dw""#,
        r#""workflow""#,
        "'x'",
        "'\\''",
        "42",
        "1.5f32",
        "-3",
        "true",
        r#"concat!("server:", "cat", ':', 1, -2, true)"#,
        r#"concat!("dw_", "joined_total")"#,
        r#"::core::concat!("server:", env!("X"))"#,
        r#"std::concat!(concat!("server:", "n"), ":")"#,
    ])
    .prop_map(str::to_owned)
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "Store", "key", "r#type", "Other", "helper", "KEY", "S", "_", "union", "m2",
    ])
    .prop_map(str::to_owned)
}

/// One statement or expression shape inside a body (`$L` a literal).
fn statement() -> impl Strategy<Value = String> {
    let shapes: Vec<&'static str> = vec![
        "let _ = $L;",
        "format!($L, x);",
        "println!(\"{}\", $L);",
        "counter!($L, $L => v, $L => \"ok\").increment(1);",
        "metrics::gauge!($L).set(1.0);",
        "histogram!(target: $L, level: Level::INFO, $L, $L => q);",
        "counter!($L, &labels);",
        "increment_gauge!($L, 1.0, $L => $L);",
        "increment_counter!($L, KEY => $L);",
        "describe_counter!($L, $L);",
        "let v = IntCounterVec::new(Opts::new($L, $L).namespace($L).subsystem($L).const_label($L, $L), &[$L, $L]);",
        "let v = prometheus::IntGaugeVec::new(&(Opts::new($L, \"h\")), &[$L]);",
        "let v = HistogramVec::new(HistogramOpts::new($L, \"h\").const_labels(m), names);",
        "let v = IntCounter::new($L.to_string(), $L);",
        "let v = Histogram::with_opts(histogram_opts!($L, \"h\"));",
        "let v = Gauge::with_opts(prometheus::opts!($L, \"h\", labels! {$L => \"v\"}));",
        "let v = IntCounterVec::new(Opts::new(concat!(\"dw_\", \"c\"), \"h\"), &[$L; 2]);",
        "register_int_counter_vec!($L, \"h\", &[$L, $L]).unwrap();",
        "register_histogram_vec!(histogram_opts!($L, \"h\"), &[$L], vec![0.1]).unwrap();",
        "register_counter!($L, $L => $L);",
        "register_gauge!(opts!($L, \"h\").namespace($L)).unwrap();",
        "tracing::info!(key = $L, metric = $L, \"polled {}\", 3);",
        "if !(x == $L) { return; }",
        "match x { $L => {} _ => { let _ = $L; } }",
        "json!({ \"keys\": vec![format!($L, id), $L] });",
        "let f = |y: &str| { $L };",
        "let t = ($L, $L);",
        "// $L",
        "/* $L /* $L */ */",
        "#[allow(unused)] let _ = $L;",
        "writeln!(out, $L, a, b).ok();",
        "let _ = async move { $L };",
        "unsafe { f($L) };",
        "'outer: loop { break 'outer; }",
        "let _ = x.union($L);",
        "lazy_static! { static ref R: IntCounterVec = register_int_counter_vec!($L, \"h\", &[$L]).unwrap(); }",
        "my_macro! { /// $L\n #[doc = $L] #[error($L)] #[cfg_attr(test, doc = $L)] fn f() { $L } }",
    ];
    (
        prop::sample::select(shapes),
        prop::collection::vec(literal(), 8),
    )
        .prop_map(|(shape, lits)| fill(shape, &lits))
}

/// `shape` with each `$L` replaced by the next literal.
fn fill(shape: &str, lits: &[String]) -> String {
    let mut out = String::new();
    let mut next = lits.iter().cycle();
    for (i, piece) in shape.split("$L").enumerate() {
        if i > 0 {
            out.push_str(next.next().map_or("\"\"", String::as_str));
        }
        out.push_str(piece);
    }
    out
}

/// An item, with items nested `depth` levels deep.
fn item(depth: u32) -> BoxedStrategy<String> {
    let body = prop::collection::vec(statement(), 0..4).prop_map(|s| s.join("\n"));
    let leaf = (
        prop::sample::select(vec![
            "fn $N() { $B }",
            "pub(crate) async unsafe fn $N<T: Fn() -> u8>(x: T) -> Vec<u8> where T: Clone { $B }",
            "const fn $N() -> u8 { $B; 0 }",
            "extern \"C\" fn $N() { $B }",
            "struct $N { #[serde(rename = $L)] f: [u8; 4] }",
            "pub struct $N(pub u8);",
            "enum $N { A = 1, #[doc = $L] B { x: u8 } }",
            "union $N { a: u8 }",
            "const $N: &str = $L;",
            "static mut $N: &str = $L;",
            "type $N = Vec<u8>;",
            "impl $N { const C: &str = $L; pub fn key(&self) -> String { $B } }",
            "impl<T> Display for &'static $N<T> where T: Clone { fn fmt(&self) { $B } type X = u8; }",
            "impl fmt::Debug for [u8] { fn fmt(&self) { $B } }",
            "impl<const K: usize> Tr for $N<{ K }> { fn m() { $B } }",
            "unsafe impl Send for $N {}",
            "trait $N { fn m(); fn d(&self) { $B } const K: &str = $L; type T; }",
            "trait $N = Clone + Send;",
            "mod $N;",
            "macro_rules! $N { () => { $B }; }",
            "extern \"C\" { fn ext(); static EXT: u8; }",
            "extern crate alloc;",
            "use a::{b, c as d};",
            "#[error($L)] #[cfg_attr(test, doc = $L)] /// $L\nfn $N() { $B }",
            "/** $L */ #[doc = $L] const $N: u8 = 0;",
            "#[path = $L] mod $N;",
            "const _: () = { $B };",
            "fn $N(); ",
        ]),
        name(),
        body,
        prop::collection::vec(literal(), 8),
    )
        .prop_map(|(shape, name, body, lits)| {
            fill(shape, &lits)
                .replace("$N", &name)
                .replace("$B", &body)
        });
    if depth == 0 {
        return leaf.boxed();
    }
    let inner = prop::collection::vec(item(depth - 1), 1..4).prop_map(|i| i.join("\n"));
    prop_oneof![
        3 => leaf,
        1 => (name(), inner.clone()).prop_map(|(n, i)| format!("pub mod {n} {{ #![allow(x)]\n{i} }}")),
        1 => (name(), inner.clone(), statement()).prop_map(|(n, i, s)| format!("fn {n}() {{ {s}\n{i}\n{s} }}")),
        1 => (name(), inner).prop_map(|(n, i)| format!("impl {n} {{ fn f() {{ {i} }} }}")),
    ]
    .boxed()
}

fn program() -> impl Strategy<Value = String> {
    (prop::bool::ANY, prop::collection::vec(item(2), 1..5)).prop_map(|(inner_attr, items)| {
        let head = if inner_attr {
            "#![cfg_attr(x, doc = \"server:inner:\")]\n//! doc\n"
        } else {
            ""
        };
        format!("{head}{}\n", items.join("\n"))
    })
}

/// 256 cases a run, or `PROPTEST_CASES` for a longer one.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn generated_programs_give_the_same_facts(text in program()) {
        // The generator writes valid Rust except where a shape does not
        // fit its place (an `impl` item inside a trait, say); those
        // inputs are not comparable and are skipped.
        same(&text)?;
    }

    #[test]
    fn mutated_repository_files_give_the_same_facts(
        index in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        insert in prop::sample::select(vec![
            "\"", "'", "{", "}", "(", ")", "[", "]", "/*", "*/", "//", "///", "r#\"", "#",
            "!", "\\", "\n", "b'", "ї", "\"server:x:\"", "concat!(", "counter!(\"dw_m\", ",
            "fn ", "impl ", "mod m { ", "#[doc = ", "1.", "'a", "r#",
        ]),
        delete in 0..8usize,
    ) {
        let files = repository_files();
        let (_, text) = &files[index.index(files.len())];
        let mut at = at.index(text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let mut end = (at + delete).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        let mutated = format!("{}{insert}{}", &text[..at], &text[end..]);
        same(&mutated)?;
    }
}

#[test]
fn generated_programs_are_mostly_comparable() {
    // A generator that mostly wrote invalid Rust would compare nothing.
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = program();
    let mut comparable = 0;
    for _ in 0..100 {
        let text = strategy.new_tree(&mut runner).unwrap().current();
        let old = extract_rust_syn(&text, &configs()[0], &[]);
        if !syntax_error(&old) {
            comparable += 1;
        }
    }
    assert!(
        comparable >= 50,
        "{comparable} of 100 generated programs parse"
    );
}
