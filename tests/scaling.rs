//! Every extractor, the prefilter and the policy loader grow linearly with
//! their input, whatever its shape.
//!
//! Each adversarial shape that once took quadratic time or memory (nested
//! shell defaults `${A:-${A:-…}}`, one long word of many mid-word metric
//! prefixes or of many sites before a cache key, a policy owner of one long
//! segment) and an ordinary file repeated are extracted at 1, 2 and 4 MB in
//! every language. What grows is measured by a counting global allocator in
//! this test binary, which is deterministic where a clock is not: the peak
//! of live bytes (what memory the extraction needs) and the bytes allocated
//! in all (what work it does copying). A doubling of the input may grow
//! either by at most 2.5×.
//!
//! Two shapes were quadratic in time alone (a metric-name scan that looked
//! to the end of the word at every mid-word prefix, an automaton built by
//! following failure links): for those the CPU time at 4 MB is also held
//! to at most 8× that at 1 MB (the best of three runs each; quadratic is
//! 16×), a ratio a loaded machine slows on both sides alike. The
//! wall-clock benchmark of every shape is `docs/bench-scaling.sh`, on a
//! release build (docs/performance.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use dwlint::extract::{extract_file, ExtractConfig};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(live, Relaxed);
        TOTAL.fetch_add(layout.size(), Relaxed);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let grown = new_size - layout.size();
            let live = LIVE.fetch_add(grown, Relaxed) + grown;
            PEAK.fetch_max(live, Relaxed);
            TOTAL.fetch_add(grown, Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The counters are process-wide, and tests run on several threads: each
/// test holds this for its whole run, so that no other test allocates
/// while one measures.
static MEASURING: Mutex<()> = Mutex::new(());

fn one_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// (peak live bytes above the start, bytes allocated) while `run` runs.
fn measure(run: impl FnOnce()) -> (usize, usize) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let total = TOTAL.load(Relaxed);
    run();
    (PEAK.load(Relaxed) - base, TOTAL.load(Relaxed) - total)
}

const MB: usize = 1 << 20;

/// The growth allowed per doubling of the input.
const PER_DOUBLING: f64 = 2.5;

/// Measures `make(size)` → `run` at 1, 2 and 4 MB and fails on faster than
/// linear growth (the input is built outside the measurement).
fn assert_linear(what: &str, make: impl Fn(usize) -> String, run: impl Fn(&str)) {
    let mut last: Option<(usize, usize)> = None;
    for size in [MB, 2 * MB, 4 * MB] {
        let input = make(size);
        let (peak, total) = measure(|| run(&input));
        if let Some((last_peak, last_total)) = last {
            // A floor of 64 KiB keeps a tiny allocation from failing a
            // ratio that means nothing.
            let grows = |now: usize, then: usize| now as f64 / then.max(64 << 10) as f64;
            assert!(
                grows(peak, last_peak) <= PER_DOUBLING,
                "{what}: peak memory {last_peak} -> {peak} bytes at {size} bytes of input"
            );
            assert!(
                grows(total, last_total) <= PER_DOUBLING,
                "{what}: bytes allocated {last_total} -> {total} at {size} bytes of input"
            );
        }
        last = Some((peak, total));
    }
}

/// Fails when `run` on 4 MB of `make` takes more than 8× its time on 1 MB.
fn assert_linear_time(what: &str, make: impl Fn(usize) -> String, run: impl Fn(&str)) {
    let best_of_three = |input: &str| {
        (0..3)
            .map(|_| {
                let start = std::time::Instant::now();
                run(input);
                start.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let small = best_of_three(&make(MB));
    let large = best_of_three(&make(4 * MB));
    // A millisecond floor: below it the ratio is noise.
    let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-3);
    assert!(
        ratio <= 8.0,
        "{what}: {small:?} at 1 MB, {large:?} at 4 MB ({ratio:.1}x)"
    );
}

fn config() -> ExtractConfig {
    ExtractConfig {
        cache_namespace: "server:".to_owned(),
        metric_prefix: "dw_".to_owned(),
    }
}

/// A file of `lang` holding `body` as one string literal (a word in shell
/// and YAML, a line in plain text).
fn file_of(lang: &str, body: &str) -> String {
    match lang {
        "rs" => format!("const X: &str = \"{body}\";\n"),
        "go" => format!("package x\nvar X = \"{body}\"\n"),
        "js" | "ts" => format!("const x = \"{body}\";\n"),
        "py" => format!("x = \"{body}\"\n"),
        "php" => format!("<?php\n$x = \"{body}\";\n"),
        "sh" => format!("echo {body}\n"),
        "yml" => format!("k: {body}\n"),
        _ => format!("{body}\n"),
    }
}

const LANGUAGES: &[&str] = &["rs", "go", "js", "ts", "py", "php", "sh", "yml", "txt"];

/// `unit` repeated to about `size` bytes, then `tail`.
fn repeated(unit: &str, size: usize, tail: &str) -> String {
    let mut out = unit.repeat(size / unit.len());
    out.push_str(tail);
    out
}

fn extract(lang: &str, text: &str) {
    let facts = extract_file(&format!("f.{lang}"), text, &config(), Vec::new);
    std::hint::black_box(facts);
}

#[test]
fn one_word_of_mid_word_prefixes_and_a_key() {
    let _one = one_test_at_a_time();
    for lang in LANGUAGES {
        let make = |size| file_of(lang, &repeated("adw_", size, "server:x:"));
        let what = format!("`adw_…server:x:` in .{lang}");
        assert_linear(&what, make, |text| extract(lang, text));
        assert_linear_time(&what, make, |text| extract(lang, text));
    }
}

#[test]
fn one_word_of_many_sites_and_a_key() {
    let _one = one_test_at_a_time();
    for lang in LANGUAGES {
        assert_linear(
            &format!("`-dw_x…server:x:` in .{lang}"),
            |size| file_of(lang, &repeated("-dw_x", size, "server:x:")),
            |text| extract(lang, text),
        );
    }
}

#[test]
fn nested_parameter_expansion_defaults() {
    let _one = one_test_at_a_time();
    for lang in LANGUAGES {
        assert_linear(
            &format!("`${{A:-${{A:-…}}}}` in .{lang}"),
            |size| {
                let depth = size / 6;
                let body = format!("{}server:x:{}", "${A:-".repeat(depth), "}".repeat(depth));
                file_of(lang, &body)
            },
            |text| extract(lang, text),
        );
    }
}

#[test]
fn ordinary_code_repeated() {
    let _one = one_test_at_a_time();
    let root = env!("CARGO_MANIFEST_DIR");
    for lang in ["go", "php", "py", "sh", "ts", "yml"] {
        let sample = std::fs::read_to_string(format!("{root}/tests/data/extractors/sample.{lang}"))
            .expect("sample");
        let ext = if lang == "yml" { "yaml" } else { lang };
        assert_linear(
            &format!("sample.{lang} repeated"),
            |size| repeated(&sample, size, ""),
            |text| extract(ext, text),
        );
    }
}

#[test]
fn a_policy_owner_of_one_long_segment() {
    let _one = one_test_at_a_time();
    let policy = |size: usize| {
        format!(
            "schema_version = 1\n[cache_keys.a]\nowner = \"a::{}\"\nprefix = \"server:a:\"\n\
             dimensions = [\"namespace\"]\nttl = \"t\"\nbound = \"b\"\nadmission = \"a\"\neviction = \"e\"\n",
            "x".repeat(size)
        )
    };
    assert_linear("a policy owner `a::xxx…`", policy, |text| {
        let loaded = dwpolicy::load::load(text);
        std::hint::black_box(loaded.is_ok());
    });
    let prefilter = |name: &str| {
        let built = dwlint::scan::prefilter::Prefilter::new(&config(), &[name.to_owned()]);
        std::hint::black_box(built.is_some());
    };
    let what = "the prefilter of an owner name `xxx…`";
    assert_linear(what, |size| "x".repeat(size), prefilter);
    assert_linear_time(what, |size| "x".repeat(size), prefilter);
}
