//! Tests of the non-Rust extractors: one snapshot per language on its
//! sample file under `tests/data/extractors/` (rendered by `test_render`),
//! targeted asserts for the shapes the rules depend on, and broken-input
//! sweeps that every lexer must survive.

use super::test_render::render;
use super::{extract_file, ExtractConfig, FileFacts, MetricVia};

fn config() -> ExtractConfig {
    ExtractConfig {
        cache_namespace: "server:".to_owned(),
        metric_prefix: "dw_".to_owned(),
    }
}

fn facts(rel: &str, text: &str) -> FileFacts {
    extract_file(rel, text, &config(), Vec::new)
}

fn sample(name: &str) -> String {
    let path = format!(
        "{}/tests/data/extractors/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every value and metric name the file yields, for asserts.
fn found(f: &FileFacts) -> String {
    let mut out: Vec<String> = f.literals.iter().map(|l| l.value.clone()).collect();
    out.extend(f.metrics.iter().map(|m| m.name.clone()));
    out.join("\n")
}

macro_rules! snapshot_sample {
    ($test:ident, $file:expr, $rel:expr) => {
        #[test]
        fn $test() {
            let f = facts($rel, &sample($file));
            insta::assert_snapshot!(render(&f));
        }
    };
}

snapshot_sample!(
    php_sample,
    "sample.php",
    "app/Support/LongPollSignalStore.php"
);
snapshot_sample!(python_sample, "sample.py", "scripts/perf/harness.py");
snapshot_sample!(shell_sample, "sample.sh", "scripts/perf/soak.sh");
snapshot_sample!(yaml_sample, "sample.yml", "scripts/perf/prometheus.yml");
snapshot_sample!(go_sample, "sample.go", "internal/metrics/metrics.go");
snapshot_sample!(ts_sample, "sample.ts", "web/src/reporter.ts");

#[test]
fn comments_and_prose_yield_nothing_in_any_language() {
    let cases = [
        ("a.php", "<?php\n// 'server:a:x' dw_a\n# \"server:b:x\" dw_b\n/* 'server:c:x' dw_c */\n/** dw_d server:d:x */\n"),
        ("a.py", "# 'server:a:x' dw_a\n'''dw_doc server:doc:x'''\ndef f():\n    \"\"\"dw_fn server:fn:x\"\"\"\n"),
        ("a.sh", "# 'server:a:x' dw_a\necho ok # \"server:b:x\" dw_b\n"),
        ("a.yml", "# server:a:x dw_a\nkey: value # dw_b server:b:x\n"),
        ("a.go", "package a\n// \"server:a:x\" dw_a\n/* `server:b:x` dw_b */\n"),
        ("a.ts", "// 'server:a:x' dw_a\n/* \"server:b:x\" dw_b */\n"),
    ];
    for (rel, text) in cases {
        let f = facts(rel, text);
        assert!(
            f.literals.is_empty() && f.metrics.is_empty(),
            "{rel}: {}",
            render(&f)
        );
        assert!(f.fallback.is_none(), "{rel}");
    }
}

#[test]
fn python_f_string_labels_survive_placeholders() {
    let f = facts(
        "h.py",
        "x = f'dw_x{{status=\"{status}\",policy=\"{p}\",queue=\"{q!r:>{w}}\"}} {v}'\n",
    );
    let labels: Vec<&str> = f.metrics[0]
        .labels
        .as_ref()
        .expect("labels")
        .iter()
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(labels, ["status", "policy", "queue"]);
    // Each label points at its own name in the source.
    let text = "x = f'dw_x{{status=";
    assert_eq!(
        f.metrics[0].labels.as_ref().unwrap()[0].range.column,
        text.len() - 6
    );
}

#[test]
fn php_interpolation_and_sprintf_keep_the_cut_point() {
    let f = facts(
        "a.php",
        "<?php $a = \"server:x:{$id}\"; $b = \"server:y:$id\"; $c = sprintf('server:z:%s', $i); $d = 'server:' . 'w:' . $id;",
    );
    let values: Vec<&str> = f.literals.iter().map(|l| l.value.as_str()).collect();
    assert_eq!(
        values,
        ["server:x:{$id}", "server:y:$id", "server:z:%s", "server:w:"]
    );
}

#[test]
fn shell_heredoc_yaml_reports_labels_and_scalars() {
    let f = facts("s.sh", &sample("sample.sh"));
    let labels: Vec<(&str, &str)> = f
        .scrape_labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("repository", "${GITHUB_REPOSITORY:-local}"),
            ("runner", "${RUNNER_NAME}"),
            ("workflow", "perf-soak"),
            ("run_id", "${GITHUB_RUN_ID:-local}"),
        ]
    );
    assert!(found(&f).contains("dw_perf_requests_total"));
    assert!(!found(&f).contains("dw_comment_total"));
    assert!(!found(&f).contains("dw_after_total"));
}

#[test]
fn go_constructors_yield_their_labels() {
    let f = facts("m.go", &sample("sample.go"));
    let by_name = |name: &str| {
        f.metrics
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| m.labels.clone())
            .map(|l| l.into_iter().map(|l| l.name).collect::<Vec<_>>())
    };
    assert_eq!(
        by_name("dw_go_requests_total"),
        Some(vec!["status".into(), "policy".into()])
    );
    assert_eq!(
        by_name("dw_go_latency_seconds"),
        Some(vec!["region".into()])
    );
    assert_eq!(by_name("dw_go_dynamic"), None);
}

#[test]
fn go_namespace_and_subsystem_compose_the_name() {
    let f = facts("m.go", &sample("sample.go"));
    let sites: Vec<(&str, Option<usize>, MetricVia)> = f
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.labels.as_ref().map(Vec::len), m.via))
        .collect();
    // Fields in any order; the site is the composed name.
    assert!(sites.contains(&("dw_go_requests_total", Some(2), MetricVia::PrometheusVec)));
    assert!(sites.contains(&("dw_up", Some(0), MetricVia::PrometheusVec)));
    // A namespace that is not a literal leaves only the name literal's own
    // mention; a composed name outside the prefix is not a tracked metric.
    assert!(sites.contains(&("dw_go_scoped_total", None, MetricVia::Mention)));
    assert!(sites.contains(&("dw_go_foreign_total", None, MetricVia::Mention)));
    for absent in [
        "dw_hidden_total",
        "hidden_total",
        "dw_dw_go_scoped_total",
        "up",
    ] {
        assert!(sites.iter().all(|s| s.0 != absent), "{absent}");
    }
    // The composed site points at the `Name` literal's value.
    let text = "\tprometheus.CounterOpts{Subsystem: \"go\", Namespace: \"dw\", Name: \"";
    let requests = f
        .metrics
        .iter()
        .find(|m| m.name == "dw_go_requests_total")
        .expect("site");
    assert_eq!(requests.range.column, text.chars().count() + 1);
    assert_eq!(
        requests.range.end_column - requests.range.column,
        "requests_total".len()
    );

    let inline = facts(
        "a.go",
        "var x = prometheus.NewCounter(prometheus.CounterOpts{Name: \"dw_\" + suffix, Namespace: \"dw\"})\n",
    );
    assert!(
        inline
            .metrics
            .iter()
            .all(|m| m.via != MetricVia::PrometheusVec),
        "{}",
        render(&inline)
    );
}

/// Truncations of every sample at every byte, and a few hostile inputs:
/// no extractor may panic, loop, or report a range outside the text.
#[test]
fn broken_input_never_panics() {
    let hostile = [
        "\"",
        "'",
        "`",
        "<<<",
        "<<<EOT\nserver:x:",
        "<<",
        "<<EOF\nserver:x:${",
        "${",
        "$(",
        "{$",
        "f'{",
        "f'{{",
        "'''",
        "r'\\",
        "\\",
        "/*",
        "//",
        "#",
        "- ",
        "- -",
        "a: |",
        "a: '",
        "a: \"\\",
        "labels: {a: '",
        "labels: {",
        "/[/",
        "x = /",
        "func (",
        "type (",
        "package",
        "NewCounterVec(",
        "NewCounterVec(prometheus.CounterOpts{Name: \"dw_x\"}, []string{",
        "<?php \"\\u{",
        "\"\\x",
        "\"\\u{110000}\"",
        "é'ü\"ß`",
        "\r\n\r",
        "class",
        "namespace",
    ];
    for rel in ["a.php", "a.py", "a.sh", "a.yml", "a.go", "a.ts"] {
        for text in hostile {
            check_ranges(rel, text);
            check_ranges(rel, &text.repeat(3));
        }
        for name in [
            "sample.php",
            "sample.py",
            "sample.sh",
            "sample.yml",
            "sample.go",
            "sample.ts",
        ] {
            let text = sample(name);
            let mut cut = 0;
            while cut < text.len() {
                if text.is_char_boundary(cut) {
                    check_ranges(rel, &text[..cut]);
                }
                cut += 7;
            }
        }
    }
}

fn check_ranges(rel: &str, text: &str) {
    let f = facts(rel, text);
    let ranges = f
        .literals
        .iter()
        .map(|l| l.range)
        .chain(f.metrics.iter().map(|m| m.range))
        .chain(
            f.scrape_labels
                .iter()
                .flat_map(|l| [l.name_range, l.value_range]),
        );
    for r in ranges {
        assert!(
            r.start <= r.end && r.end <= text.len(),
            "{rel} {text:?}: {r:?}"
        );
    }
}

#[test]
fn lexing_is_linear_on_pathological_input() {
    // This thread's CPU time, which a loaded machine does not stretch.
    let cpu = crate::base::timings::thread_cpu_time;
    let started = cpu();
    let big = "\"{$".repeat(20_000) + &"f'{".repeat(20_000) + &"<<EOF\n".repeat(5_000);
    for rel in ["a.php", "a.py", "a.sh", "a.yml", "a.go", "a.ts"] {
        facts(rel, &big);
    }
    let used = cpu() - started;
    assert!(used < std::time::Duration::from_secs(20), "{used:?}");
}

#[test]
fn cache_keys_are_recognised_by_shape_in_every_language() {
    use crate::inventory::normalize::{cache_keys, CacheKey};
    let cases = [
        ("a.rs", "fn f(id: &str) -> [String; 4] {\n    [format!(\"server:real-key:{id}\"), \"http://server:8080\".into(), \"durableworkflow/server:0.2\".into(), \"server:bootstrap\".into()]\n}\n"),
        ("a.php", "<?php\n$k = 'server:real-key:' . $id;\n$u = \"http://server:8080\";\n$i = 'durableworkflow/server:0.2';\nArtisan::command('server:bootstrap {--force}', fn () => 0);\n"),
        ("a.py", "k = f\"server:real-key:{id}\"\nu = \"http://server:8080\"\ni = 'durableworkflow/server:0.2'\nc = 'server:bootstrap'\n"),
        ("a.sh", "redis-cli GET \"server:real-key:$ID\"\nBASE_URL=\"http://server:8080\"\nimage=\"${IMAGE:-durableworkflow/server:0.2}\"\nphp artisan server:bootstrap --force\n"),
        ("a.go", "package a\nvar k = \"server:real-key:\" + id\nvar u = \"http://server:8080\"\nvar i = `durableworkflow/server:0.2`\nvar c = \"server:bootstrap\"\n"),
        ("a.ts", "const k = `server:real-key:${id}`;\nconst u = 'http://server:8080';\nconst i = \"durableworkflow/server:0.2\";\nconst c = 'server:bootstrap';\n"),
        ("a.yml", "probe:\n  command: redis-cli --scan --pattern 'server:real-key:*'\nimage: durableworkflow/server:0.2\nurl: http://server:8080\nargs: [\"php\", \"artisan\", \"server:bootstrap\"]\n"),
    ];
    for (rel, text) in cases {
        let keys: Vec<CacheKey> = facts(rel, text)
            .literals
            .iter()
            .flat_map(|l| cache_keys(&l.value, "server:"))
            .collect();
        assert_eq!(
            keys,
            vec![CacheKey::Family("server:real-key:".to_owned())],
            "{rel}: {}",
            found(&facts(rel, text))
        );
    }
}

#[test]
fn literals_inside_interpolations_are_code() {
    let js = facts(
        "a.ts",
        "const m = `${cache.get(\"server:inner:\" + id)} and ${`${k(\"dw_nested_total\")}`}`;\n",
    );
    assert_eq!(found(&js), "server:inner:\ndw_nested_total");
    let py = facts(
        "a.py",
        "print(f\"{redis.get('server:inner:' + k)} {f'{q(\"dw_deep_total\")}'}\")\n",
    );
    assert_eq!(found(&py), "server:inner:\ndw_deep_total");
    let php = facts(
        "a.php",
        "<?php $s = \"v={$cache->get('server:inner:' . $id)}\";",
    );
    // The outer literal keeps `{$…}` as written; the inner one is its own.
    assert!(
        php.literals.iter().any(|l| l.value == "server:inner:"),
        "{}",
        found(&php)
    );
    // Interpolations nested deeper than the limit are not followed, and
    // nothing is lexed twice at one level.
    let deep = format!(
        "x = `{}\"server:deep:\"{}`;\n",
        "${`".repeat(40),
        "`}".repeat(40)
    );
    assert_eq!(facts("d.js", &deep).literals.len(), 0);
}

#[test]
fn literals_inside_shell_command_substitutions_are_code() {
    let text = concat!(
        "n=$(redis-cli get \"server:bare:$id\")\n",
        "echo \"total: $(redis-cli get 'server:quoted:') `curl -s \"dw_tick_total\"`\"\n",
        "cat <<EOF\n$(printf '%s' \"server:heredoc:\")\nEOF\n",
        "echo \"${KEY:-server:default:}\"\n",
    );
    let f = facts("a.sh", text);
    // Each inner literal is a literal of its own, pointing at itself.
    for inner in ["server:bare:$id", "server:quoted:", "server:heredoc:"] {
        let lit = f
            .literals
            .iter()
            .find(|l| l.value == inner)
            .unwrap_or_else(|| panic!("{inner} missing from:\n{}", found(&f)));
        let source = &text[lit.range.start..lit.range.end];
        assert_eq!(&source[1..source.len() - 1], inner, "{source}");
    }
    assert!(
        f.metrics
            .iter()
            .any(|m| m.name == "dw_tick_total"
                && &text[m.range.start..m.range.end] == "dw_tick_total"),
        "{}",
        found(&f)
    );
    // A `${VAR:-default}` default is one literal, not lexed again as code.
    let defaults = f
        .literals
        .iter()
        .filter(|l| l.value == "server:default:")
        .count();
    assert_eq!(defaults, 1, "{}", found(&f));
}

#[test]
fn overlapping_interpolations_are_lexed_once_per_level() {
    // Found by the extract_shell fuzzer: 830 bytes of broken shell whose
    // unterminated quotes and backticks made interpolations that overlap
    // and reach past their parent; every level multiplied them (380,000
    // tokens, 200 MB and a second for one input).
    let path = format!(
        "{}/tests/data/fuzz/extract_shell-overlapping-interpolations.bin",
        env!("CARGO_MANIFEST_DIR")
    );
    let data = std::fs::read(&path).unwrap();
    let text = String::from_utf8_lossy(&data).into_owned();
    // This thread's CPU time, not the wall clock: the blow-up was work (a
    // second of it), and a loaded machine only makes the work wait.
    let cpu = crate::base::timings::thread_cpu_time;
    let started = cpu();
    for rel in ["a.sh", "a.ts", "a.py", "a.php"] {
        let _ = facts(rel, &text);
    }
    let used = cpu() - started;
    assert!(used < std::time::Duration::from_millis(500), "{used:?}");
}
