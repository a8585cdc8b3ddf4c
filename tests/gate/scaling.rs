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
//! in all (what work it does copying), counted for the measuring thread
//! alone (the other tests of this binary run on other threads meanwhile).
//! A doubling of the input may grow either by at most 2.5×.
//!
//! Two shapes were quadratic in time alone (a metric-name scan that looked
//! to the end of the word at every mid-word prefix, an automaton built by
//! following failure links): for those the CPU time of the measuring thread
//! at 4 MB is also held to at most 8× that at 1 MB (the best of three runs
//! each; quadratic is 16×): a thread's CPU time, unlike the wall clock,
//! does not grow while other threads hold the cores. The wall-clock
//! benchmark of every shape is `docs/bench-scaling.sh`, on a release build
//! (docs/performance.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::time::Duration;

use dwlint::extract::{extract_file, ExtractConfig};

struct Counting;

/// What one thread allocated while it measures. `const` thread-locals of
/// `Copy` types have no lazy initialisation and no destructor, so the
/// allocator may touch them at any time without allocating itself.
struct Counters {
    on: Cell<bool>,
    /// Bytes allocated minus bytes freed by this thread since `measure`
    /// began (negative when it frees what it allocated before).
    live: Cell<isize>,
    peak: Cell<isize>,
    total: Cell<usize>,
}

thread_local! {
    static COUNTERS: Counters = const {
        Counters {
            on: Cell::new(false),
            live: Cell::new(0),
            peak: Cell::new(0),
            total: Cell::new(0),
        }
    };
}

fn count(grown: isize) {
    let _ = COUNTERS.try_with(|c| {
        if c.on.get() {
            let live = c.live.get() + grown;
            c.live.set(live);
            if grown > 0 {
                c.peak.set(c.peak.get().max(live));
                c.total.set(c.total.get() + grown as usize);
            }
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The scaling tests hold this for their whole run, so that two of them do
/// not share the cores while one times itself.
static MEASURING: Mutex<()> = Mutex::new(());

fn one_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// (peak live bytes above the start, bytes allocated) by this thread while
/// `run` runs.
fn measure(run: impl FnOnce()) -> (usize, usize) {
    COUNTERS.with(|c| {
        c.live.set(0);
        c.peak.set(0);
        c.total.set(0);
        c.on.set(true);
    });
    run();
    COUNTERS.with(|c| {
        c.on.set(false);
        (c.peak.get().max(0) as usize, c.total.get())
    })
}

/// The CPU time this thread has used: unlike the wall clock, it does not
/// grow while the other tests of this binary hold the cores.
#[cfg(unix)]
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Elsewhere, the wall clock since the first call (best of three below).
#[cfg(not(unix))]
fn thread_cpu_time() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
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
                let start = thread_cpu_time();
                run(input);
                thread_cpu_time().saturating_sub(start)
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

/// The memory bound: a file costs at most 8 times its size. Each
/// extractor's sample, with its prefix and namespace renamed so that
/// nothing is reported (as in `docs/bench-scaling.sh`), repeated to 4 MB:
/// the extraction's peak of live bytes stays under 7 times the file, which
/// is read beside it. With every string token's decoded value in a box, Go
/// took 9.2 times the file here.
#[test]
fn ordinary_code_stays_within_eight_times_the_file() {
    let _one = one_test_at_a_time();
    let root = env!("CARGO_MANIFEST_DIR");
    for lang in ["go", "php", "py", "sh", "ts", "yml"] {
        let sample = std::fs::read_to_string(format!("{root}/tests/data/extractors/sample.{lang}"))
            .expect("sample")
            .replace("dw_", "zz_")
            .replace("server:", "sevrer:");
        let ext = if lang == "yml" { "yaml" } else { lang };
        let text = repeated(&sample, 4 * MB, "");
        let (peak, _) = measure(|| extract(ext, &text));
        eprintln!("{lang}: {:.2}x", peak as f64 / text.len() as f64);
        assert!(
            peak <= 7 * text.len(),
            "4 MB of sample.{lang}: the extraction peaked at {peak} live bytes, {:.1} times the file",
            peak as f64 / text.len() as f64
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
