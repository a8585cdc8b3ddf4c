//! The fuzz targets (`fuzz/fuzz_targets/`) as bounded property tests on
//! stable Rust: the same entry points in `dwlint::harness`, fed mutations
//! of the same seeds (every file under `fixtures/` and `tests/data/`), so
//! CI explores a little of what the fuzzers explore for hours. Inputs the
//! fuzzers crashed on are kept as regression cases at the end.

use std::path::Path;

use dwlint::harness;
use dwlint::report::Format;
use proptest::prelude::*;

/// Every seed file, with its extension.
fn seeds() -> &'static [(String, Vec<u8>)] {
    static SEEDS: std::sync::OnceLock<Vec<(String, Vec<u8>)>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut found = Vec::new();
        for dir in ["fixtures", "tests/data"] {
            collect(&root.join(dir), &mut found);
        }
        found.sort();
        found
    })
}

fn collect(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            // Large schema files add nothing but time.
            if bytes.len() <= 64 << 10 {
                let ext = path
                    .extension()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default();
                out.push((ext, bytes));
            }
        }
    }
}

/// One edit of a seed: insert, delete, repeat or flip a run of bytes.
#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Repeat(usize, usize, usize),
    Flip(usize, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that matter to the lexers more often than chance would give.
    let interesting = prop::sample::select(vec![
        b"\"".to_vec(),
        b"'".to_vec(),
        b"`".to_vec(),
        b"${".to_vec(),
        b"{".to_vec(),
        b"}".to_vec(),
        b"\\".to_vec(),
        b"\n".to_vec(),
        b"r#\"".to_vec(),
        b"server:".to_vec(),
        b"dw_x".to_vec(),
        b"<<EOF\n".to_vec(),
        b"/*".to_vec(),
        "ї".as_bytes().to_vec(),
        vec![0xff],
    ]);
    prop_oneof![
        (any::<usize>(), interesting).prop_map(|(at, b)| Edit::Insert(at, b)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(at, b)| Edit::Insert(at, b)),
        (any::<usize>(), 0..64usize).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), 1..16usize, 1..64usize).prop_map(|(at, n, k)| Edit::Repeat(at, n, k)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Flip(at, b)),
    ]
}

fn apply(mut data: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let at = |i: usize, data: &Vec<u8>| i % (data.len() + 1);
        match e {
            Edit::Insert(i, bytes) => {
                let i = at(*i, &data);
                data.splice(i..i, bytes.iter().copied());
            }
            Edit::Delete(i, n) => {
                let i = at(*i, &data);
                let end = (i + n).min(data.len());
                data.drain(i..end);
            }
            Edit::Repeat(i, n, k) => {
                let i = at(*i, &data);
                let end = (i + n).min(data.len());
                let run = data[i..end].to_vec();
                for _ in 0..*k {
                    data.splice(i..i, run.iter().copied());
                }
            }
            Edit::Flip(i, b) => {
                if !data.is_empty() {
                    let i = i % data.len();
                    data[i] = *b;
                }
            }
        }
    }
    data
}

/// A mutated seed, preferring seeds with one of `extensions`.
fn input(extensions: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    let pool: Vec<Vec<u8>> = {
        let matching: Vec<Vec<u8>> = seeds()
            .iter()
            .filter(|(ext, _)| extensions.contains(&ext.as_str()))
            .map(|(_, b)| b.clone())
            .collect();
        if matching.is_empty() {
            seeds().iter().map(|(_, b)| b.clone()).collect()
        } else {
            matching
        }
    };
    (
        prop::sample::select(pool),
        prop::collection::vec(edit(), 0..8),
    )
        .prop_map(|(seed, edits)| apply(seed, &edits))
}

/// 256 cases a run, or `PROPTEST_CASES` for a longer one.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_policy_loader_never_panics(data in input(&["toml"])) {
        harness::policy(&data);
    }

    #[test]
    fn the_rust_extractor_never_panics(data in input(&["rs"])) {
        harness::extract("src/lib.rs", &data);
    }

    #[test]
    fn rust_tokens_keep_their_promises(data in input(&["rs"])) {
        harness::rust_tokens(&data);
    }

    #[test]
    fn the_php_extractor_never_panics(data in input(&["php"])) {
        harness::extract("app/Store.php", &data);
    }

    #[test]
    fn the_python_extractor_never_panics(data in input(&["py"])) {
        harness::extract("scripts/harness.py", &data);
    }

    #[test]
    fn the_shell_extractor_never_panics(data in input(&["sh"])) {
        harness::extract("scripts/soak.sh", &data);
    }

    #[test]
    fn the_yaml_extractor_never_panics(data in input(&["yml", "yaml"])) {
        harness::extract("deploy/prometheus.yml", &data);
    }

    #[test]
    fn the_go_extractor_never_panics(data in input(&["go"])) {
        harness::extract("internal/metrics.go", &data);
    }

    #[test]
    fn the_javascript_extractor_never_panics(data in input(&["ts", "js"])) {
        harness::extract("web/reporter.ts", &data);
    }

    #[test]
    fn the_plain_text_extractor_never_panics(data in input(&["md", "txt"])) {
        harness::extract("notes.txt", &data);
    }

    #[test]
    fn every_report_format_renders_any_finding(data in input(&["rs", "md", "js"]), format in 0..6usize) {
        harness::report(Format::ALL[format], &data);
    }
}

/// Inputs that once crashed dwlint (found by the fuzzers or by hand).
#[test]
fn former_crashes_stay_fixed() {
    // A finding past column 65,535 panicked miette's frame.
    let mut long = vec![b' '; 70_000];
    long.extend_from_slice(b"\"server:x:\"");
    for format in Format::ALL {
        harness::report(format, &long);
    }
    // A policy syntax error on such a line, in the run-error renderer.
    let mut policy = b"schema_version = 1\n".to_vec();
    policy.extend(vec![b' '; 70_000]);
    policy.extend_from_slice(b"= ]\n");
    harness::policy(&policy);
    // 50,000 nested blocks around a literal.
    let deep = format!(
        "fn f() {{ {} \"server:deep:\" {} }}",
        "{".repeat(50_000),
        "}".repeat(50_000)
    );
    harness::extract("src/lib.rs", deep.as_bytes());
    // Broken shell whose interpolations overlapped and multiplied per level.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shell =
        std::fs::read(root.join("tests/data/fuzz/extract_shell-overlapping-interpolations.bin"))
            .expect("the fuzz input");
    harness::extract("scripts/soak.sh", &shell);
}

proptest! {
    #![proptest_config(config())]

    /// `dwlint live`'s exposition reader, fuzzed as the extractors are: no
    /// panic, and a malformed line it names is a line of the text, at a
    /// column on it.
    #[test]
    fn the_exposition_reader_never_panics_and_points_into_the_text(data in input(&["prom"])) {
        let text = String::from_utf8_lossy(&data);
        let parsed = dwevidence::live::parse_exposition(&text);
        if let Some(at) = parsed.malformed {
            let line = text.lines().nth(at.line - 1);
            prop_assert!(line.is_some(), "{at} is past the text's last line");
            let width = line.unwrap_or("").chars().count();
            prop_assert!(at.column >= 1 && at.column <= width + 1, "{at} is off its line of {width} characters");
        }
    }
}

/// The exposition seed is what dwserver writes, and reads clean.
#[test]
fn the_exposition_seed_is_well_formed() {
    let seed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/exposition/dwserver.prom"),
    )
    .unwrap();
    let parsed = dwevidence::live::parse_exposition(&seed);
    assert_eq!(parsed.malformed, None);
    assert_eq!(parsed.series.len(), 8);
    assert_eq!(parsed.reports["workflows"]["limit"], 2);
}
