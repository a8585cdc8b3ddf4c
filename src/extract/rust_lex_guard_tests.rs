//! The nesting guard folded into the tokenizer, held to the guard's own
//! lexer: on every input, the verdict the extractor reads from the
//! tokenizer's [`GuardView`] (or from the guard, when the view cannot
//! settle it) is the guard's verdict, reason and offset included; and
//! wherever the view says it was measured in step, its depth and run are
//! exactly the guard's. Inputs: generated programs that mix every shape
//! either lexer treats specially (literals of every form, char escapes,
//! lifetimes, raw identifiers, numbers, comments, doc comments, odd
//! whitespace, rustc's error literal), taken to either side of both limits;
//! the repository's own Rust files; and those files with such shapes
//! spliced in.

use proptest::prelude::*;

use super::super::lexical::{self, guard_measures, MAX_NESTING, MAX_OPERATOR_RUN};
use super::super::rust;
use super::{code_start, tokenize_into, GuardView, LexError};
use crate::extract::rust_differential::repository_files;
use crate::extract::ExtractConfig;
use crate::scan::prefilter::Prefilter;

/// What the extractor concludes of `text`, and the view it concluded from.
fn folded(text: &str) -> (Option<(String, usize)>, Result<GuardView, LexError>) {
    let lexed = tokenize_into(text, code_start(text), &mut Vec::new(), &mut Vec::new());
    (rust::too_complex(text, &lexed), lexed)
}

/// Checks `text`; whether the view settled it alone (tokenized, in step).
fn agrees(text: &str) -> Result<bool, TestCaseError> {
    let (verdict, lexed) = folded(text);
    prop_assert_eq!(&verdict, &lexical::too_complex(text), "input: {:?}", text);
    match lexed {
        Ok(view) if view.in_step => {
            prop_assert_eq!(
                (view.depth, view.run),
                guard_measures(text),
                "input: {:?}",
                text
            );
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Shapes either lexer reads specially, each well formed on its own.
const SHAPES: &[&str] = &[
    "x",
    "r#type",
    "r#r",
    "'a",
    "'r#a",
    "'static",
    "é",
    "名前",
    "b",
    "br",
    "c",
    "rb",
    "\"s\"",
    "\"a\\\"b\"",
    "\"(\\\\\"",
    "\"\\u{28}\"",
    "\"x\"suffix",
    "\"a\"r",
    "\"a\"b",
    "r\"\\\"",
    "r#\"{\"#",
    "r##\"a\"#(\"##",
    "b\"[\"",
    "br\"\\\"",
    "c\"{\"",
    "cr#\"}\"#",
    "'x'",
    "'('",
    "'\\''",
    "'\\\\'",
    "'\\u{10FFFF}'",
    "'\\u{1_0_F_F_F_F}'",
    "'\\u{1___________0}'",
    "'\\x41'",
    "b'\\''",
    "b'\\x7f'",
    "b'{'",
    "'x'u8",
    "'''",
    "b'''",
    "'é'",
    "1",
    "1.5",
    "1.5e-3",
    "2E+7f64",
    "0x1F_u8",
    "1.",
    "1..2",
    "1.foo",
    "0b1010",
    "7r",
    "+",
    "-",
    "*",
    "&",
    "!",
    "#",
    "$",
    "@",
    "~",
    "?",
    ".",
    "::",
    "=>",
    "<",
    ">",
    "/",
    "%",
    "^",
    "|",
    "=",
    ",",
    ";",
    " ",
    "\n",
    "\t",
    "\r\n",
    "\x0c",
    "\x0b",
    "\u{85}",
    "\u{a0}",
    "\u{200e}",
    "\u{2028}",
    "// line ( [ \" '\n",
    "/* block ( \" ' */",
    "/* /* nested { */ */",
    "/**/",
    "/// doc ( \" {\n",
    "//! inner doc [\n",
    "/** block doc ( */",
    "/*! inner block doc */",
    "//// not doc\n",
    "/*** not doc */",
    "(/*ERROR*/)",
    "#[attr]",
    "#![inner]",
];

/// Words and literals that end in a string prefix or a suffix (`r`, `b`,
/// `br`, `c`, `cr`), raw identifiers named like one, and what can follow
/// them with nothing between: the class where the guard once took a raw
/// identifier's name, or a literal's suffix, for a string's prefix, and
/// hid the rest of the file behind a string that never closed.
const GLUED_HEADS: &[&str] = &[
    "r",
    "b",
    "br",
    "c",
    "cr",
    "rb",
    "xr",
    "r#r",
    "r#b",
    "r#br",
    "r#c",
    "r#cr",
    "r#r#r",
    "'r#r",
    "'r#b",
    "\"x\"r",
    "\"x\"b",
    "r#\"x\"#r",
    "b\"x\"br",
    "c\"x\"c",
    "'x'r",
    "'\\n'b",
    "b'x'cr",
    "1r",
    "1.5b",
    "0x1r",
];
const GLUED_JOINS: &[&str] = &["", "", "#", "#", "##", "'"];
const GLUED_TAILS: &[&str] = &[
    "r\"\\\"",
    "\"a\\\"b\"",
    "\"\\\"",
    "b\"\\\"",
    "br\"\\\"",
    "c\"\\\"",
    "cr#\"\\\"#",
    "r#\"\\\"#",
    "r##\"\\\"#\"##",
    "r#x",
    "x",
    "'a'",
    "'a",
];

/// A head, a join and a tail of the glued class, with nothing between.
fn glued() -> impl Strategy<Value = String> {
    (
        prop::sample::select(GLUED_HEADS),
        prop::sample::select(GLUED_JOINS),
        prop::sample::select(GLUED_TAILS),
    )
        .prop_map(|(head, join, tail)| format!("{head}{join}{tail}"))
}

/// One piece of a generated program: a shape, or a group of pieces.
fn piece() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        3 => prop::sample::select(SHAPES).prop_map(str::to_owned),
        1 => glued(),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        (
            prop::sample::select(vec![("(", ")"), ("[", "]"), ("{", "}")]),
            prop::collection::vec(inner, 0..6),
        )
            .prop_map(|((open, close), body)| format!("{open}{}{close}", body.concat()))
    })
}

/// A program of pieces, with a chain nested `depth` deep and an operator
/// run `run` long somewhere in it (either near its limit, or small), and
/// now and then a BOM, a shebang or a stray delimiter.
fn program() -> impl Strategy<Value = String> {
    let depth = prop_oneof![0..8usize, MAX_NESTING - 3..MAX_NESTING + 3];
    let run = prop_oneof![0..8usize, MAX_OPERATOR_RUN - 3..MAX_OPERATOR_RUN + 3];
    let filler = || prop::collection::vec(piece(), 0..12);
    // Operators with quiet shapes between them (words, literals, comments,
    // lifetimes: none ends a run).
    let op = prop::sample::select(vec!["+", "-", ".", "<", "&", "#", "!", "::", "?"]);
    let quiet = prop::sample::select(vec![
        "",
        "",
        "",
        "x",
        "'a",
        "\"s\"",
        "/* c */",
        " ",
        "\n",
        "r#x",
        "1.5e-3",
        "'\\u{41}'",
    ]);
    let run_pieces = prop::collection::vec((op, quiet), 0..4);
    let head = prop::sample::select(vec!["", "", "", "", "\u{feff}", "#!/bin/run -x\n", "#!"]);
    let tail = prop::sample::select(vec!["", "", "", "", ")", "{", "\"", "'", "/*"]);
    (
        head,
        filler(),
        depth,
        filler(),
        run,
        run_pieces,
        piece(),
        tail,
    )
        .prop_map(
            |(head, before, depth, inside, run, run_pieces, after, tail)| {
                let mut text = head.to_owned();
                text.push_str(&before.concat());
                let opens = ["(", "[", "{"];
                let closes = [")", "]", "}"];
                for d in 0..depth {
                    text.push_str(opens[d % 3]);
                }
                text.push_str(&inside.concat());
                // The run: `run` operator bytes, the pieces' quiet shapes
                // between some of them.
                let mut ops = 0;
                let mut k = 0;
                while ops < run {
                    if run_pieces.is_empty() {
                        text.push('+');
                        ops += 1;
                        continue;
                    }
                    let (op, quiet) = run_pieces[k % run_pieces.len()];
                    k += 1;
                    if ops + op.len() > run {
                        text.push('+');
                        ops += 1;
                        continue;
                    }
                    text.push_str(op);
                    text.push_str(quiet);
                    ops += op.len();
                    // A number's own dots and signs count too.
                    ops += quiet
                        .bytes()
                        .filter(|c| matches!(c, b'.' | b'-' | b'+'))
                        .count()
                        * usize::from(quiet.starts_with('1'));
                }
                text.push('x');
                for d in (0..depth).rev() {
                    text.push_str(closes[d % 3]);
                }
                text.push_str(&after);
                text.push_str(tail);
                text
            },
        )
}

#[test]
fn the_repository_s_rust_files_get_the_guard_s_verdicts_from_one_lex() {
    let files = repository_files();
    assert!(files.len() > 100, "{} files", files.len());
    let mut settled = 0;
    for (path, text) in files {
        match agrees(text) {
            Ok(alone) => settled += usize::from(alone),
            Err(e) => panic!("{path}: {e}"),
        }
    }
    // Nearly every real file is settled by the tokenizer alone: the guard
    // is not quietly doing the work.
    assert!(
        settled * 100 >= files.len() * 95,
        "{settled} of {}",
        files.len()
    );
}

#[test]
fn every_shape_alone_and_around_brackets_gets_the_guard_s_verdict() {
    let mut settled = 0;
    let mut cases = 0;
    for a in SHAPES {
        for b in SHAPES {
            for text in [format!("{a}{b}"), format!("({a}){b},{a} {b}[{b}{a}]")] {
                cases += 1;
                settled += usize::from(agrees(&text).unwrap_or_else(|e| panic!("{e}")));
            }
        }
    }
    assert!(settled * 2 > cases, "{settled} of {cases}");
}

#[test]
fn every_glued_head_and_tail_gets_the_guard_s_verdict_around_deep_nesting() {
    // Each combination before code nested past the limit and a string
    // that closes anything left open: a guard that reads a string where
    // the tokenizer reads code hides the nesting from itself.
    let deep = format!(
        "{}x{}",
        "(".repeat(MAX_NESTING + 4),
        ")".repeat(MAX_NESTING + 4)
    );
    let (mut settled, mut cases) = (0, 0);
    for head in GLUED_HEADS {
        for join in GLUED_JOINS {
            for tail in GLUED_TAILS {
                let glued = format!("{head}{join}{tail}");
                for text in [
                    format!("f({glued} {deep} \"z\");"),
                    format!("{glued}\n{deep}\n// \"\n"),
                ] {
                    cases += 1;
                    settled += usize::from(agrees(&text).unwrap_or_else(|e| panic!("{e}")));
                }
            }
        }
    }
    // The shapes the tokenizer reads are compared measure for measure.
    assert!(settled * 4 > cases, "{settled} of {cases}");
}

/// Keys in literals of every form, next to them and in comments: what
/// the prefilter looks for inside the strings the guard's lexer reads.
const KEYED: &[&str] = &[
    "\"server:k:\"",
    "r#\"dw_k\"#",
    "b\"server:k:\"",
    "c\"dw_k\"",
    "br\"server:k:\"",
    "\"a\\\"server:k:\"",
    "\"dw_k{a=\\\"1\\\"}\"",
    "r\"dw_\\\"",
    "\"x\"dw_k",
    "'x'dw_k",
    "r#r\"server:k:\"",
    "server:k:",
    "dw_k",
    "// \"server:k:\"\n",
    "/* \"dw_k\" */",
    "counter!(\"dw_k\")",
    "#!/x \"server:k:\"\n",
];

/// The prefilter (whose lexing of a Rust file is the guard's) passes
/// every file in which the extractor (which reads the tokenizer's
/// literals) finds a key: it may pass a file with none, never skip one.
fn prefilter_passes(text: &str) -> Result<(), TestCaseError> {
    let config = ExtractConfig {
        cache_namespace: "server:".into(),
        metric_prefix: "dw_".into(),
    };
    let prefilter = Prefilter::new(&config, &[]).expect("a prefilter");
    if !prefilter.wants("src/a.rs", text.as_bytes()) {
        let facts = rust::extract_rust(text, &config, &["krate".to_owned()]);
        prop_assert!(
            facts.literals.is_empty() && facts.metrics.is_empty(),
            "skipped, yet {:?} {:?} in {:?}",
            facts.literals,
            facts.metrics,
            text
        );
    }
    Ok(())
}

/// Inputs the property tests above once failed on, shrunk.
#[test]
fn the_inputs_the_property_tests_found_get_the_guard_s_verdicts() {
    for text in [
        // `r#r` then `#` then the raw string `r"\"`: not the raw
        // identifier `r#r` and a plain string that ran on to `"a\"`.
        "((r#r#r\"\\\"))x((\"a\\\"b\"))",
        "((r#r\"a\\\"b\"))",
    ] {
        assert!(agrees(text).unwrap_or_else(|e| panic!("{e}")), "{text}");
    }
}

#[test]
fn the_limits_are_met_exactly_where_the_guard_meets_them() {
    for depth in [MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1] {
        let text = format!("{}x{}", "(".repeat(depth), ")".repeat(depth));
        assert!(agrees(&text).unwrap());
        let (verdict, _) = folded(&text);
        assert_eq!(verdict.is_some(), depth > MAX_NESTING, "{depth}");
    }
    for run in [MAX_OPERATOR_RUN - 1, MAX_OPERATOR_RUN, MAX_OPERATOR_RUN + 1] {
        // `1.5` holds one operator byte to the guard, `'a` and `r#b` none
        // and one.
        let mut text = String::from("fn f() { x");
        let mut ops = 0;
        while ops < run {
            let piece = match ops % 4 {
                0 if ops + 1 < run => "+1.5",
                1 => "-'a",
                2 if ops + 1 < run => "*r#b",
                _ => "!",
            };
            ops += if piece.contains('.') || piece.contains('#') {
                2
            } else {
                1
            };
            text.push_str(piece);
        }
        text.push_str("; }");
        agrees(&text).unwrap();
        let (verdict, lexed) = folded(&text);
        assert_eq!(lexed.map(|v| v.run), Ok(run));
        assert_eq!(verdict.is_some(), run > MAX_OPERATOR_RUN, "{run}");
    }
}

/// 400 cases a run, or `PROPTEST_CASES` for a longer one.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(400)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn generated_programs_get_the_guard_s_verdicts(text in program()) {
        agrees(&text)?;
    }

    /// Generated programs and the repository's files, their own keys
    /// renamed, with keyed literals and shapes spliced in.
    #[test]
    fn the_prefilter_skips_no_file_the_extractor_finds_a_key_in(
        base in prop_oneof![
            program(),
            (0..1_000usize).prop_map(|file| {
                let files = repository_files();
                files[file % files.len()].1.replace("server:", "srv:").replace("dw_", "dx_")
            }),
        ],
        cuts in prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                prop_oneof![2 => piece(), 1 => prop::sample::select(KEYED).prop_map(str::to_owned)],
            ),
            1..6,
        ),
    ) {
        let mut text = base;
        for (at, piece) in cuts {
            let mut at = at.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert_str(at, &piece);
        }
        prefilter_passes(&text)?;
    }

    /// The repository's files with shapes spliced in at char boundaries.
    #[test]
    fn spliced_repository_files_get_the_guard_s_verdicts(
        file in 0..1_000usize,
        cuts in prop::collection::vec((any::<prop::sample::Index>(), piece()), 1..4),
    ) {
        let files = repository_files();
        let mut text = files[file % files.len()].1.clone();
        for (at, piece) in cuts {
            let mut at = at.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert_str(at, &piece);
        }
        agrees(&text)?;
    }
}
