//! Unit tests of the Rust extractor, one per recognised shape.
//!
//! Whole-file results are rendered one fact per line (`L` literal, `M` metric
//! site, `I` item) so snapshots stay reviewable by eye.

use super::extract_rust;
use crate::extract::test_render::render;
use crate::extract::{ExtractConfig, FileFacts, LiteralKind, MetricVia};

fn config() -> ExtractConfig {
    ExtractConfig {
        cache_namespace: "server:".to_owned(),
        metric_prefix: "dw_".to_owned(),
    }
}

fn facts(text: &str) -> FileFacts {
    extract_rust(
        text,
        &config(),
        &["dwengine".to_owned(), "polling".to_owned()],
    )
}

/// (name, labels, via) per site, for asserts that do not care about ranges.
fn sites(f: &FileFacts) -> Vec<(String, Option<Vec<String>>, MetricVia)> {
    f.metrics
        .iter()
        .map(|m| {
            let labels = m
                .labels
                .as_ref()
                .map(|l| l.iter().map(|l| l.name.clone()).collect());
            (m.name.clone(), labels, m.via)
        })
        .collect()
}

fn site(
    name: &str,
    labels: Option<&[&str]>,
    via: MetricVia,
) -> (String, Option<Vec<String>>, MetricVia) {
    let labels = labels.map(|l| l.iter().map(|s| (*s).to_owned()).collect());
    (name.to_owned(), labels, via)
}

fn values(f: &FileFacts) -> Vec<(&str, LiteralKind)> {
    f.literals
        .iter()
        .map(|l| (l.value.as_str(), l.kind))
        .collect()
}

#[test]
fn raw_byte_and_c_strings_are_literals() {
    let f = facts(
        r####"
        const A: &str = r#"server:raw:"quoted""#;
        const B: &[u8] = b"server:bytes:\x41";
        const C: &[u8] = br##"server:rawbytes:"##;
        const D: &core::ffi::CStr = c"server:c:";
        const E: &str = "server:\u{65}scaped:";
        const F: &str = "due_timer_recovery_scan_limit";
        const G: &str = "nothing to see";
        "####,
    );
    assert_eq!(
        values(&f),
        vec![
            ("server:raw:\"quoted\"", LiteralKind::RawStr),
            ("server:bytes:A", LiteralKind::ByteStr),
            ("server:rawbytes:", LiteralKind::ByteStr),
            ("server:c:", LiteralKind::CStr),
            ("server:escaped:", LiteralKind::Str),
            ("due_timer_recovery_scan_limit", LiteralKind::Str),
        ]
    );
    assert_eq!(f.literals[0].context.as_deref(), Some("A"));
    assert_eq!(f.fallback, None);
}

#[test]
fn concat_joins_literal_pieces_and_otherwise_reports_them() {
    let f = facts(
        r#"
        const JOINED: &str = concat!("server:", "q", ':', 1, 0x10, true, -2, 1.5f32, concat!(":", "z"));
        const PARTIAL: &str = concat!("server:part:", env!("X"), "dw_y");
        fn f() -> u64 { counter!(concat!("dw_", "joined"), "a" => "b"); 0 }
        "#,
    );
    insta::assert_snapshot!(render(&f));
}

#[test]
fn nested_macros_are_walked() {
    let f = facts(
        r#"
        fn payload(id: &str) -> serde_json::Value {
            json!({ "keys": vec![format!("server:nested:{}:", id), format!("{}", "dw_nested_total")] })
        }
        "#,
    );
    assert_eq!(values(&f), vec![("server:nested:{}:", LiteralKind::Str)]);
    assert_eq!(f.literals[0].context.as_deref(), Some("payload"));
    assert_eq!(
        sites(&f),
        vec![site("dw_nested_total", None, MetricVia::Mention)]
    );
}

#[test]
fn comments_and_doc_comments_yield_nothing() {
    let f = facts(
        r#"
        //! dw_inner_doc and "server:inner:"
        /// "server:x:" and dw_outer_doc
        /** "server:block:" dw_block */
        // "server:line:" dw_line
        /* "server:comment:" /* nested dw_nested */ */
        #[doc = "server:attr:"]
        #[cfg_attr(test, doc = "server:cfg:")]
        #[error("server:error:")]
        struct S;
        my_macro! {
            /// "server:in_macro:" dw_in_macro
            //! dw_inner_in_macro
            #[doc = "server:attr_in_macro:"]
            #[error("server:kept_in_macro:")]
            fn f() {}
        }
        fn g() {
            /// doc on a statement: "server:stmt:"
            let x = 1;
        }
        "#,
    );
    assert_eq!(
        values(&f),
        vec![
            ("server:error:", LiteralKind::Str),
            ("server:kept_in_macro:", LiteralKind::Str)
        ]
    );
    assert_eq!(f.literals[0].context.as_deref(), Some("S"));
    assert!(f.metrics.is_empty(), "{:?}", f.metrics);
}

#[test]
fn tracing_field_values_count() {
    let f = facts(
        r#"
        fn poll() {
            tracing::info!(key = "server:long-poll:", metric = "dw_polls_total", "polled {}", 3);
        }
        "#,
    );
    assert_eq!(values(&f), vec![("server:long-poll:", LiteralKind::Str)]);
    assert_eq!(
        sites(&f),
        vec![site("dw_polls_total", None, MetricVia::Mention)]
    );
}

#[test]
fn exposition_literals_carry_labels() {
    let f = facts(
        r##"
        fn render(out: &mut String, q: &str, t: &str, n: u64) {
            writeln!(out, "# HELP dw_runs_total Runs.\n# TYPE dw_runs_total counter").ok();
            writeln!(out, "dw_runs_total{{task_queue=\"{}\",workflow_type=\"{t:?}\"}} {}", q, n).ok();
            writeln!(out, r#"dw_plain{status="ok"} 1"#).ok();
            writeln!(out, "dw_bare {}", n).ok();
            let _ = "dw_sample 12";
            writeln!(out, "dw_dynamic{labels} {n}").ok();
        }
        "##,
    );
    insta::assert_snapshot!(render(&f));
}

#[test]
fn metrics_crate_macros() {
    let f = facts(
        r#"
        fn record(labels: &[(&str, String)], q: String) {
            metrics::counter!("dw_labelled_total", "task_queue" => q.clone(), "status" => "ok").increment(1);
            gauge!("dw_unlabelled").set(1.0);
            histogram!(target: "engine", level: Level::INFO, "dw_latency_seconds", "route" => "x");
            counter!("dw_collection_total", &labels);
            counter!("dw_const_key_total", KEY => "v");
            describe_counter!("dw_labelled_total", "Runs.");
            increment_counter!("dw_old_total", "kind" => "a");
            increment_gauge!("dw_old_gauge", 1.0, "kind" => "a");
            gauge!("dw_old_value", 2.5);
            increment_counter!("dw_old_collection", &labels);
        }
        "#,
    );
    assert_eq!(
        sites(&f),
        vec![
            site(
                "dw_labelled_total",
                Some(&["task_queue", "status"]),
                MetricVia::MetricsMacro
            ),
            site("dw_unlabelled", Some(&[]), MetricVia::MetricsMacro),
            site(
                "dw_latency_seconds",
                Some(&["route"]),
                MetricVia::MetricsMacro
            ),
            site("dw_collection_total", None, MetricVia::MetricsMacro),
            site("dw_const_key_total", None, MetricVia::MetricsMacro),
            site("dw_labelled_total", None, MetricVia::Mention),
            site("dw_old_total", Some(&["kind"]), MetricVia::MetricsMacro),
            site("dw_old_gauge", Some(&["kind"]), MetricVia::MetricsMacro),
            site("dw_old_value", Some(&[]), MetricVia::MetricsMacro),
            site("dw_old_collection", None, MetricVia::MetricsMacro),
        ]
    );
}

#[test]
fn prometheus_crate_registrations_and_constructors() {
    let f = facts(
        r#"
        lazy_static! {
            static ref RUNS: IntCounterVec = register_int_counter_vec!(
                "dw_runs_total", "Runs.", &["task_queue", "workflow_type"]
            ).unwrap();
            static ref LAT: HistogramVec = register_histogram_vec!(
                histogram_opts!("dw_latency_seconds", "Latency."), &["route"], vec![0.1, 1.0]
            ).unwrap();
            static ref UP: Counter = register_counter!("dw_up_total", "Up.").unwrap();
            static ref QUEUES: IntGaugeVec = prometheus::IntGaugeVec::new(
                Opts::new("dw_queues", "Queues.").const_label("region", "eu"), &["queue"]
            ).unwrap();
        }
        fn build(names: &[&str]) {
            let a = IntCounterVec::new(Opts::new("dw_ast_total", "A.").const_label("zone", "z1"), &["kind"]);
            let b = HistogramVec::new(HistogramOpts::new("dw_ast_seconds", "B."), names);
            let c = register_gauge_vec!(opts!("dw_opts_gauge", "C.", labels! {"env" => "prod"}), &["pool"]);
            let d = IntCounter::new("dw_single_total", "D.");
        }
        "#,
    );
    assert_eq!(
        sites(&f),
        vec![
            site(
                "dw_runs_total",
                Some(&["task_queue", "workflow_type"]),
                MetricVia::PrometheusVec
            ),
            site(
                "dw_latency_seconds",
                Some(&["route"]),
                MetricVia::PrometheusVec
            ),
            site("dw_up_total", Some(&[]), MetricVia::PrometheusVec),
            site(
                "dw_queues",
                Some(&["region", "queue"]),
                MetricVia::PrometheusVec
            ),
            site(
                "dw_ast_total",
                Some(&["zone", "kind"]),
                MetricVia::PrometheusVec
            ),
            site("dw_ast_seconds", None, MetricVia::PrometheusVec),
            site(
                "dw_opts_gauge",
                Some(&["env", "pool"]),
                MetricVia::PrometheusVec
            ),
            site("dw_single_total", Some(&[]), MetricVia::PrometheusVec),
        ]
    );
}

#[test]
fn prometheus_namespace_and_subsystem_compose_the_name() {
    let text = r#"
        lazy_static! {
            static ref RUNS: IntCounterVec = IntCounterVec::new(
                Opts::new("runs_total", "Runs.").namespace("dw").subsystem("workflow"), &["queue"]
            ).unwrap();
            static ref UP: Gauge = register_gauge!(opts!("up", "Up.").subsystem("engine").namespace("dw")).unwrap();
            static ref DYN: IntCounterVec = IntCounterVec::new(
                Opts::new("dw_dyn_total", "D.").namespace(NAMESPACE), &["a"]
            ).unwrap();
        }
        fn build(ns: &str) {
            let a = HistogramVec::new(
                HistogramOpts::new("seconds", "A.").namespace("dw").subsystem(""), &["kind"]);
            let b = IntCounterVec::new(
                Opts::new("calls_total", "B.").namespace(concat!("d", "w")).const_label("zone", "z1"), &["kind"]);
            let c = IntCounterVec::new(Opts::new("dw_ast_dyn", "C.").subsystem(ns), &["x"]);
            let d = IntCounterVec::new(Opts::new("hidden_total", "D.").namespace(ns), &["x"]);
            let e = IntCounterVec::new(Opts::new("dw_twice", "E.").namespace("other"), &["x"]);
            let f = IntCounter::with_opts(Opts::new("", "F.").namespace("dw"));
        }
        "#;
    let f = facts(text);
    assert_eq!(
        sites(&f),
        vec![
            site(
                "dw_workflow_runs_total",
                Some(&["queue"]),
                MetricVia::PrometheusVec
            ),
            site("dw_engine_up", Some(&[]), MetricVia::PrometheusVec),
            // Not literal namespaces: the full name is unknown, and only a
            // name literal that is a metric name on its own is reported.
            site("dw_dyn_total", None, MetricVia::Mention),
            site("dw_seconds", Some(&["kind"]), MetricVia::PrometheusVec),
            site(
                "dw_calls_total",
                Some(&["zone", "kind"]),
                MetricVia::PrometheusVec
            ),
            site("dw_ast_dyn", None, MetricVia::Mention),
            // `other_dw_twice` is not a tracked metric; the literal is still
            // a mention.
            site("dw_twice", None, MetricVia::Mention),
        ]
    );
    // The composed name points at the name literal's value.
    let runs = &f.metrics[0];
    let line = text.lines().nth(3).expect("line");
    assert_eq!(runs.range.line, 4);
    assert_eq!(runs.range.column, line.find("runs_total").expect("col") + 1);
    assert_eq!(
        runs.range.end_column - runs.range.column,
        "runs_total".len()
    );
}

#[test]
fn one_site_per_name_and_literal_position() {
    let f = facts(
        r#"
        fn f() {
            counter!("dw_once_total", "a" => "b");
            register_int_counter_vec!("dw_once_vec", "help", &["x"]);
            let _ = IntCounterVec::new(Opts::new("dw_once_ctor", "h"), &["y"]);
            let _ = ("dw_twice", "dw_twice");
        }
        "#,
    );
    assert_eq!(
        sites(&f),
        vec![
            site("dw_once_total", Some(&["a"]), MetricVia::MetricsMacro),
            site("dw_once_vec", Some(&["x"]), MetricVia::PrometheusVec),
            site("dw_once_ctor", Some(&["y"]), MetricVia::PrometheusVec),
            site("dw_twice", None, MetricVia::Mention),
            site("dw_twice", None, MetricVia::Mention),
        ]
    );
}

#[test]
fn items_are_qualified_through_inline_modules() {
    let f = facts(
        r#"
        pub struct LongPollSignalStore;
        enum E {} union U { a: u8 } trait T {} type A = u8;
        const C: u8 = 0; static S: u8 = 0; const _: () = ();
        fn free() { struct Local; }
        macro_rules! m { () => {} }
        mod declared;
        impl LongPollSignalStore { fn method() {} }
        pub mod inner {
            pub struct Helper;
            mod deeper { fn r#type() {} }
        }
        "#,
    );
    insta::assert_snapshot!(render(&f));
}

#[test]
fn context_is_the_innermost_named_item() {
    let f = facts(
        r#"
        const TOP: &str = "server:top:";
        impl<T> Store<T> {
            const KEY: &str = "server:assoc:";
            fn key(&self) -> String { format!("server:method:{}", 1) }
        }
        impl Display for &Other { fn fmt(&self) { let _ = "server:trait-impl:"; } }
        fn outer() { fn inner() { let _ = "server:inner:"; } }
        mod m { static S: &str = "server:static:"; }
        "#,
    );
    let contexts: Vec<_> = f.literals.iter().map(|l| l.context.as_deref()).collect();
    assert_eq!(
        contexts,
        vec![
            Some("TOP"),
            Some("Store::KEY"),
            Some("Store::key"),
            Some("Other::fmt"),
            Some("inner"),
            Some("S"),
        ]
    );
}

#[test]
fn ranges_are_exact_and_tight_through_escapes_and_verbatim_text() {
    let text = "fn f() {\n    // ї\n    let s = \"ї dw_x_total{a=\\\"b\\\"}\";\n    let t = \"ї dw_verbatim server:k:\";\n}\n";
    let f = facts(text);
    // Escaped quotes: the value differs from the source, yet the decoded
    // pieces map back, so the name and the label are still exact.
    let escaped = &f.metrics[0];
    assert_eq!(escaped.name, "dw_x_total");
    assert_eq!((escaped.range.line, escaped.range.column), (3, 16));
    assert_eq!(&text[escaped.range.start..escaped.range.end], "dw_x_total");
    let labels = escaped.labels.as_ref().unwrap();
    assert_eq!(&text[labels[0].range.start..labels[0].range.end], "a");
    // Verbatim: exactly the name bytes; columns count characters.
    let tight = &f.metrics[1];
    assert_eq!(&text[tight.range.start..tight.range.end], "dw_verbatim");
    assert_eq!(
        (
            tight.range.line,
            tight.range.column,
            tight.range.end_line,
            tight.range.end_column
        ),
        (4, 16, 4, 27)
    );
    let literal = &f.literals[0];
    assert_eq!(
        (
            literal.range.line,
            literal.range.column,
            literal.range.end_column
        ),
        (4, 13, 38)
    );
}

#[test]
fn bom_and_shebang_do_not_shift_positions() {
    let text = "\u{feff}#!/usr/bin/env run\nconst K: &str = \"dw_k\";\n";
    let f = facts(text);
    assert_eq!(f.fallback, None);
    let r = f.metrics[0].range;
    assert_eq!(&text[r.start..r.end], "dw_k");
    assert_eq!((r.line, r.column), (2, 18));
}

#[test]
fn unparseable_files_fall_back_to_the_lexer() {
    let f =
        facts("fn x( { \"server:x:\" } // \"server:comment:\"\nlet m = \"dw_m{a=\\\"1\\\"} 2\";\n");
    insta::assert_snapshot!(render(&f));
}

#[test]
fn only_untokenizable_files_fall_back() {
    // A syntax error in well-formed tokens (which `syn` rejected) costs
    // nothing: the literal keeps its kind and its item.
    let f = facts("const K: &str = \"server:eof:\";\nimpl");
    assert_eq!(values(&f), vec![("server:eof:", LiteralKind::Str)]);
    assert_eq!(f.literals[0].context.as_deref(), Some("K"));
    assert_eq!(f.fallback, None);
    // An unclosed group is reported at its opening delimiter.
    let text = "const K: &str = \"server:eof:\";\nfn f(";
    let f = facts(text);
    assert_eq!(values(&f), vec![("server:eof:", LiteralKind::Lexical)]);
    let (message, range) = f.fallback.unwrap();
    assert!(
        message.contains("cannot parse string into token stream"),
        "{message}"
    );
    assert_eq!(
        (range.start, range.line, range.column),
        (text.len() - 1, 2, 5)
    );
}

#[test]
fn pathological_nesting_does_not_crash() {
    let depth = 100_000;
    let text = format!(
        "fn f() {{ let s = \"server:deep:\"; {}{} }}",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    let f = facts(&text);
    assert_eq!(values(&f), vec![("server:deep:", LiteralKind::Lexical)]);
    let (message, range) = f.fallback.unwrap();
    assert!(message.contains("deeper than 256"), "{message}");
    assert_eq!(range.line, 1);
    let unclosed = format!("{}\"server:open:\"", "{[(".repeat(depth));
    assert_eq!(
        values(&facts(&unclosed)),
        vec![("server:open:", LiteralKind::Lexical)]
    );
    let unary = format!(
        "fn f() {{ let x = {}1; let s = \"dw_u\"; }}",
        "-".repeat(depth)
    );
    assert_eq!(facts(&unary).metrics.len(), 1);
}

#[test]
fn long_method_chains_cost_no_stack() {
    // Neither is an operator run the nesting check stops (each call's
    // parentheses end the run), so the walk itself must not recurse on them.
    let chain = format!(
        "fn f() {{ let v = IntCounterVec::new(Opts::new(\"dw_chain_total\", \"h\"){}, &[\"l\"]); }}",
        ".a()".repeat(200_000)
    );
    let f = facts(&chain);
    assert_eq!(
        sites(&f),
        vec![site(
            "dw_chain_total",
            Some(&["l"]),
            MetricVia::PrometheusVec
        )]
    );
}

#[test]
fn hostile_inputs_never_panic() {
    for text in [
        "",
        "\"",
        "r#\"",
        "'",
        "b'",
        "/*",
        "fn f() { '\\u{",
        "concat!(",
        "r##\"a\"#",
        "\u{feff}",
        "#!",
        "counter!(\"dw_x\", \"a\" =>)",
        "IntCounterVec::new(",
        "x!(opts!(), &[1])",
    ] {
        let _ = facts(text);
    }
}

#[test]
fn files_over_the_parse_limit_are_scanned_lexically() {
    let filler = "fn f() { let x = 1; }\n".repeat((super::MAX_PARSE_BYTES / 22) + 1);
    let text = format!("{filler}fn g() {{ h(\"server:big:\"); }}\n");
    let f = facts(&text);
    assert_eq!(values(&f), vec![("server:big:", LiteralKind::Lexical)]);
    let (message, _) = f.fallback.unwrap();
    assert!(message.contains("over 2 MiB"), "{message}");
}

#[test]
fn buffers_reused_from_file_to_file_give_what_fresh_ones_give() {
    // One thread extracts every file in turn, reusing its scratch buffers:
    // after deeper and shallower files, after one that fails to tokenize
    // half-way (its tokens left behind) and after one too large for its
    // buffers to be kept. Each file's facts must be what a thread that
    // never extracted anything gets.
    let mut texts: Vec<String> = vec![
        "fn f() { g(a, [1, 2], { h!(x, \"server:deep:{}\") }); } /// doc\nstruct S;".to_owned(),
        "impl S { fn k() { format!(\"server:a:{}\", unclosed( }".to_owned(),
        "const K: &str = \"server:short\";".to_owned(),
        format!(
            "mod big {{ {} }}",
            "fn f() { metrics::counter!(\"dw_big_total\", \"q\" => x).increment(1); }\n"
                .repeat(6_000)
        ),
        "#![doc = \"inner\"] #[path(\"server:attr\")] fn g() {}".to_owned(),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/extract");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    names.sort();
    for path in names {
        texts.push(std::fs::read_to_string(path).unwrap());
    }
    texts.extend(texts.clone().into_iter().rev());
    let reused: Vec<FileFacts> = texts.iter().map(|t| facts(t)).collect();
    let mut kept = 0;
    for (text, reused) in texts.iter().zip(&reused) {
        let text = text.clone();
        let fresh = std::thread::spawn(move || facts(&text)).join().unwrap();
        assert_eq!(&fresh, reused);
        kept += reused.literals.len() + reused.metrics.len();
    }
    assert!(kept > 6_000, "{kept}");
    assert!(reused[1].fallback.is_some() && reused[3].fallback.is_none());
}
