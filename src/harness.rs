//! The entry points that fuzzing drives, shared by the cargo-fuzz targets
//! under `fuzz/` and the property tests in `tests/gate/properties.rs`, so that
//! what the fuzzers explore for hours CI also exercises on every run.
//!
//! Each function takes arbitrary bytes and panics only when dwlint breaks
//! a promise: a panic in the code under test, a range outside the text, a
//! machine-readable report that does not parse, a line-oriented report that
//! does not have one line per finding.

use std::path::{Path, PathBuf};

use crate::base::diagnostic::{Anchor, Diagnostic, Severity};
use crate::base::error::RunError;
use crate::base::line_index::LineIndex;
use crate::discover::changed::Mode;
use crate::extract::{self, ExtractConfig};
use crate::report::model::CheckReport;
use crate::report::{self, human::Style, Format};
use crate::rules::{config, RULES};

/// The file name each extractor is driven through.
pub const EXTRACTOR_FILES: &[(&str, &str)] = &[
    ("rust", "src/lib.rs"),
    ("php", "app/Store.php"),
    ("python", "scripts/harness.py"),
    ("shell", "scripts/soak.sh"),
    ("yaml", "deploy/prometheus.yml"),
    ("go", "internal/metrics.go"),
    ("javascript", "web/reporter.ts"),
    ("plain", "notes.txt"),
];

/// A style picked by the input: ASCII or Unicode frames, narrow or wide.
fn style(data: &[u8]) -> Style {
    let pick = data.last().copied().unwrap_or(0);
    Style {
        color: false,
        ascii: pick & 1 == 1,
        width: if pick & 2 == 2 { 40 } else { 100 },
        verbose: pick & 4 == 4,
    }
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Loads `data` as a policy and, when it is invalid, renders the errors
/// the way `check` would (code frames included); checks that the loader's
/// fast path reads it as the `toml` parser's path does (or leaves it to it).
pub fn policy(data: &[u8]) {
    let text = text(data);
    assert!(
        dwpolicy::load::fast_path_agrees(&text),
        "the policy fast path and the toml parser disagree"
    );
    match config::policy_from_text("policy.toml".into(), text) {
        Ok(_) => {}
        Err(error) => {
            let mut out = Vec::new();
            report::human::write_run_error(&error, style(data), &mut out)
                .expect("writing to memory");
            assert!(matches!(error, RunError::PolicyInvalid { .. }));
        }
    }
}

/// Extracts `data` as the file `rel` and checks that every range the
/// facts hold lies within the text, on character boundaries.
pub fn extract(rel: &str, data: &[u8]) {
    let text = text(data);
    let config = ExtractConfig {
        cache_namespace: "server:".into(),
        metric_prefix: "dw_".into(),
    };
    let facts = extract::extract_file(rel, &text, &config, || vec!["crate".to_owned()]);
    let ranges = facts
        .literals
        .iter()
        .map(|l| l.range)
        .chain(facts.metrics.iter().map(|m| m.range))
        .chain(
            facts
                .metrics
                .iter()
                .flat_map(|m| m.labels.iter().flatten().map(|l| l.range)),
        )
        .chain(facts.fallback.iter().map(|(_, r)| *r))
        .chain(
            facts
                .scrape_labels
                .iter()
                .flat_map(|l| [l.name_range, l.value_range]),
        );
    for range in ranges {
        assert!(
            range.start <= range.end && range.end <= text.len(),
            "{rel}: range {range:?} outside {} bytes",
            text.len()
        );
        assert!(
            text.is_char_boundary(range.start) && text.is_char_boundary(range.end),
            "{rel}: range {range:?} splits a character"
        );
    }
}

/// Tokenizes `data` as Rust and checks the token stream's promises: tokens
/// in order, inside the text, on character boundaries, every group closed
/// by its own delimiter, or an error offset inside the text; that the
/// nesting guard's verdict the extractor reads off the tokenizer is the
/// guard's own, and its measures the guard's wherever it says they are;
/// then extracts it as [`extract`] does.
pub fn rust_tokens(data: &[u8]) {
    use crate::extract::lexical;
    use crate::extract::rust_lex::{tokenize_into, Kind};
    let text = text(data);
    let base = crate::extract::rust_lex::code_start(&text);
    let mut toks = Vec::new();
    let lexed = tokenize_into(&text, base, &mut toks, &mut Vec::new());
    assert_eq!(
        crate::extract::rust::too_complex(&text, &lexed),
        lexical::too_complex(&text),
        "the nesting guard's verdict read off the tokenizer is not the guard's"
    );
    match lexed {
        Ok(view) if view.in_step => assert_eq!(
            (view.depth, view.run),
            lexical::guard_measures(&text),
            "the tokenizer measured in step with the nesting guard, but otherwise"
        ),
        _ => {}
    }
    match lexed.map(|_| toks) {
        Ok(toks) => {
            let mut last_end = base;
            let mut open = Vec::new();
            for (i, tok) in toks.iter().enumerate() {
                let (start, end) = (tok.start as usize, tok.end as usize);
                // A doc comment's `#`, `!` and `[doc]` share its span.
                let shared = matches!(tok.kind, Kind::Doc)
                    || (i + 1 < toks.len() && toks[i + 1].start == tok.start);
                assert!(
                    start < end && end <= text.len() && (start >= last_end || shared),
                    "token {i} {tok:?} out of order (previous ended at {last_end})"
                );
                assert!(text.is_char_boundary(start) && text.is_char_boundary(end));
                last_end = last_end.max(end);
                match tok.kind {
                    Kind::Open(_) => open.push(i),
                    Kind::Close => {
                        let opened = open.pop().expect("a close without an open");
                        assert_eq!(toks[opened].close as usize, i, "group {opened}");
                        assert_eq!(tok.close as usize, opened);
                    }
                    _ => {}
                }
            }
            assert!(open.is_empty(), "unclosed groups: {open:?}");
        }
        Err(error) => assert!(
            error.at <= text.len() && text.is_char_boundary(error.at),
            "error offset {} in {} bytes",
            error.at,
            text.len()
        ),
    }
    extract("src/lib.rs", data);
}

/// A scratch directory holding the file findings point into.
fn scratch() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join("dwlint-harness");
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// Bytes read as a little stream of numbers.
struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn next(&mut self) -> usize {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        usize::from(b)
    }

    fn wide(&mut self) -> usize {
        (self.next() << 16) | (self.next() << 8) | self.next()
    }
}

/// Renders a report of findings decoded from `data` in `format`: up to 64
/// findings with arbitrary messages, file names (control characters
/// included) and ranges, some pointing into a file holding `data` itself.
pub fn report(format: Format, data: &[u8]) {
    let source = text(data);
    // Each process and thread writes its own file: tests run in parallel.
    let file = format!(
        "f{}-{:?}.src",
        std::process::id(),
        std::thread::current().id()
    )
    .replace(['(', ')'], "");
    let path = scratch().join(&file);
    std::fs::write(&path, &source).expect("scratch file");
    let index = LineIndex::new(&source);
    let mut bytes = Bytes { data, at: 0 };
    let count = bytes.next() % 65;
    let names = [file.as_str(), "a\n::warning file=x::y", "", "dir/ü.rs\r"];
    let mut diagnostics = Vec::new();
    for i in 0..count {
        let rule = &RULES[bytes.next() % RULES.len()];
        let mut start = bytes.wide() % (source.len() + 2);
        let mut end = start + bytes.wide() % 300;
        if bytes.next() & 3 == 0 {
            // Offsets past the end, as a file changed since the check.
            start += source.len();
            end += source.len();
        }
        let clamp = |o: usize| {
            let mut o = o.min(source.len());
            while !source.is_char_boundary(o) {
                o -= 1;
            }
            o
        };
        let mut range = index.range(&source, clamp(start), clamp(end));
        (range.start, range.end) = (start, end);
        let name = names[bytes.next() % names.len()];
        let message_at = bytes.next() % (source.len() + 1);
        let message: String = source
            .get(message_at..)
            .unwrap_or("")
            .chars()
            .take(80)
            .collect();
        let mut diagnostic = Diagnostic::new(rule.code, format!("s{i}"), message)
            .at(Anchor::labeled(name, range, "here"))
            .help("do something\nelse");
        if bytes.next() & 1 == 0 {
            let (s, e) = (bytes.wide(), bytes.wide());
            let related = index.range(&source, clamp(s.min(e)), clamp(s.max(e)));
            diagnostic = diagnostic.related(Anchor::labeled(
                names[bytes.next() % names.len()],
                related,
                "declared here",
            ));
        }
        diagnostic.severity = if bytes.next() & 1 == 0 {
            Severity::Error
        } else {
            Severity::Warning
        };
        diagnostics.push(diagnostic);
    }
    let report = CheckReport {
        diagnostics,
        files_scanned: 1,
        policy_path: "policy/x\n.toml".into(),
        root: scratch().to_path_buf(),
        root_moved: bytes.next() & 1 == 0,
        repo_prefix: String::new(),
        mode: Mode::Full,
        severities: RULES
            .iter()
            .map(|r| (r, Some(r.default_severity)))
            .collect(),
        notes: Vec::new(),
        inputs: Default::default(),
        timings: Default::default(),
    };
    let mut out = Vec::new();
    let written = report::write(format, &report, style(data), &mut out);
    let _ = std::fs::remove_file(&path);
    written.expect("writing to memory");
    let written = String::from_utf8(out).expect("reports are UTF-8");
    match format {
        Format::Json | Format::Sarif => {
            serde_json::from_str::<serde_json::Value>(&written).expect("valid JSON");
        }
        Format::Short => assert_eq!(written.lines().count(), count, "{written}"),
        // One command per finding plus the summary line.
        Format::Github => assert_eq!(written.lines().count(), count + 1, "{written}"),
        Format::Human | Format::Junit => {}
    }
    if matches!(format, Format::Human | Format::Short) {
        assert!(
            !written.lines().any(|l| l.starts_with("::")),
            "a line starts a workflow command:\n{written}"
        );
    }
}
