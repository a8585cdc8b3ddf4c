//! The Rust extractor: tokens, not a parse.
//!
//! Most of what the gate looks for in Rust sits inside macro invocations
//! (`format!`, `counter!`, `tracing::info!`, `lazy_static!`), which are
//! token streams to any parser; the rest (which item a literal sits in,
//! which items a policy `owner` can name, where doc comments end) shows in
//! the tokens too. So a Rust file is tokenized exactly as `proc-macro2`
//! tokenizes it ([`super::rust_lex`]) and walked as token trees
//! ([`super::rust_walk`]), at a fraction of what a `syn` parse cost: on a
//! tree where every file must be read, that parse was most of the run. A
//! file that cannot be tokenized (an unclosed delimiter, an unterminated
//! literal), is too large, or nests too deeply is scanned lexically and
//! `FileFacts::fallback` says why. The nesting limits are measured by the
//! tokenizer as it goes ([`rust_lex::GuardView`]), with the verdicts of the
//! lexical guard it stands in for ([`too_complex`]). The `syn` extractor this replaced is kept
//! as the reference a differential property test holds this one to.

use std::ops::Range;

use super::collect::Collector;
use super::rust_lex::code_start;
use super::rust_tt::Src;
use super::{lexical, rust_lex, rust_walk, ExtractConfig, FileFacts};

pub(crate) use super::rust_walk::enclosing_item;

/// Larger Rust files are scanned lexically: tokens take three to four times
/// a typical file's size and at most sixteen times (a file of nothing but
/// one-byte tokens; the parser this replaced took twenty), the lexical
/// scanner a small multiple, so memory stays within a few times the largest
/// file and never above 32 MiB for tokens.
pub const MAX_PARSE_BYTES: usize = 2 << 20;

/// What `syn` said of text `proc-macro2` could not tokenize, kept so that
/// the fallback warning reads as it always did.
const UNTOKENIZABLE: &str = "not parseable as Rust: cannot parse string into token stream";

/// Extracts the facts of one Rust file. Never panics: a file that cannot
/// be tokenized, is over [`MAX_PARSE_BYTES`] or is nested too deeply is
/// scanned lexically and `FileFacts::fallback` says why.
pub fn extract_rust(text: &str, config: &ExtractConfig, module_path: &[String]) -> FileFacts {
    if let Some(facts) = too_large(text, config) {
        return facts;
    }
    let base = code_start(text);
    SCRATCH.with(|scratch| {
        // Never borrowed twice (an extraction does not extract), but a
        // fresh scratch costs only allocations, a panic much more.
        let mut fresh = Scratch::default();
        let mut held = scratch.try_borrow_mut();
        let scratch = match held.as_deref_mut() {
            Ok(scratch) => scratch,
            Err(_) => &mut fresh,
        };
        let lexed = rust_lex::tokenize_into(text, base, &mut scratch.toks, &mut scratch.open);
        let facts = if let Some((reason, at)) = too_complex(text, &lexed) {
            fallback(text, config, reason, at..at)
        } else if let Err(error) = lexed {
            fallback(text, config, UNTOKENIZABLE.to_owned(), error.at..error.at)
        } else {
            let src = Src {
                text,
                toks: &scratch.toks,
            };
            rust_walk::walk(src, config, module_path, &mut scratch.levels)
        };
        scratch.trim();
        facts
    })
}

/// Buffers every Rust extraction needs, kept by each thread from one file
/// to the next: on a tree of small files, allocating and freeing them for
/// every file cost more than tokenizing it.
#[derive(Default)]
struct Scratch {
    toks: Vec<rust_lex::Token>,
    /// The lexer's open groups.
    open: Vec<(usize, rust_lex::Delim)>,
    /// Level buffers, one per nesting depth walked.
    levels: Vec<Vec<u32>>,
}

/// What a thread keeps between files at most: tokens of a ~250 KiB file.
/// A larger file's buffers are dropped after it, so a worker holds no more
/// than this once past its largest file.
const SCRATCH_TOKENS_KEPT: usize = 1 << 16;

impl Scratch {
    fn trim(&mut self) {
        if self.toks.capacity() > SCRATCH_TOKENS_KEPT {
            self.toks = Vec::new();
        }
        if self.open.capacity() > SCRATCH_TOKENS_KEPT / 16 {
            self.open = Vec::new();
        }
        let held: usize = self.levels.iter().map(Vec::capacity).sum();
        if held > SCRATCH_TOKENS_KEPT {
            self.levels = Vec::new();
        }
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// The size and nesting limits every Rust extraction starts with: the
/// fallback's facts when the file is past one. (The `syn` extractor's
/// order; [`extract_rust`] reaches the same verdicts with one lex.)
#[cfg(any(test, feature = "syn-oracle"))]
pub(crate) fn prechecks(text: &str, config: &ExtractConfig) -> Option<FileFacts> {
    if let Some(facts) = too_large(text, config) {
        return Some(facts);
    }
    let (reason, at) = lexical::too_complex(text)?;
    Some(fallback(text, config, reason, at..at))
}

/// The fallback's facts for a file over [`MAX_PARSE_BYTES`].
fn too_large(text: &str, config: &ExtractConfig) -> Option<FileFacts> {
    if text.len() <= MAX_PARSE_BYTES {
        return None;
    }
    let reason = format!(
        "over {} MiB, too large to hold its tokens (several times the file)",
        MAX_PARSE_BYTES >> 20
    );
    Some(fallback(text, config, reason, 0..0))
}

/// [`lexical::too_complex`]'s verdict on `text`, given what tokenizing it
/// gave: read from the tokenizer's measures when they settle it (nearly
/// every file), so the file is lexed once; from the guard itself when the
/// file did not tokenize, came near a limit or holds a shape the two
/// lexers read differently.
pub(crate) fn too_complex(
    text: &str,
    lexed: &Result<rust_lex::GuardView, rust_lex::LexError>,
) -> Option<(String, usize)> {
    match lexed {
        Ok(view) if view.clears_guard() => None,
        _ => lexical::too_complex(text),
    }
}

pub(crate) fn fallback(
    text: &str,
    config: &ExtractConfig,
    message: String,
    at: Range<usize>,
) -> FileFacts {
    let mut collector = Collector::new(text, config);
    lexical::scan_literals(&mut collector);
    let range = collector.range(at);
    collector.finish(Vec::new(), Some((message, range)))
}

#[cfg(test)]
#[path = "rust_tests.rs"]
mod tests;
