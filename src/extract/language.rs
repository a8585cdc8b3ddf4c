//! Which extractor reads a file, decided in one place.
//!
//! Servers mix languages under one glob (`scripts/perf/**` holds Python,
//! shell and YAML), so the policy cannot say which parser to use; the file
//! does. The extension decides, and an extension-less script is recognised
//! by its `#!` line. Anything else is scanned as plain text, and its facts
//! carry the warning that comments could not be told apart.

use super::tokens::MAX_TOKENIZED;
use super::{go, js, php, plain, python, rust, shell, yaml, ExtractConfig, FileFacts};

/// A language dwlint has an extractor for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `.rs`
    Rust,
    /// `.php`
    Php,
    /// `.py`, `.pyi`
    Python,
    /// `.sh`, `.bash`
    Shell,
    /// `.yml`, `.yaml`
    Yaml,
    /// `.go`
    Go,
    /// `.js`, `.mjs`, `.cjs`, `.jsx`, `.ts`, `.tsx`, `.mts`, `.cts`
    JavaScript,
}

impl Language {
    /// The language of the file at `rel` with contents `text`, if known.
    pub fn detect(rel: &str, text: &str) -> Option<Language> {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        match name.rsplit_once('.').map(|(_, ext)| ext) {
            Some("rs") => Some(Language::Rust),
            Some("php") => Some(Language::Php),
            Some("py" | "pyi") => Some(Language::Python),
            Some("sh" | "bash") => Some(Language::Shell),
            Some("yml" | "yaml") => Some(Language::Yaml),
            Some("go") => Some(Language::Go),
            Some("js" | "mjs" | "cjs" | "jsx" | "ts" | "tsx" | "mts" | "cts") => {
                Some(Language::JavaScript)
            }
            _ => shebang(text),
        }
    }
}

/// `#!/usr/bin/env python3`, `#!/bin/bash`, `#!/usr/bin/env -S node --flag`.
fn shebang(text: &str) -> Option<Language> {
    let line = text.strip_prefix("#!")?.lines().next()?;
    let mut words = line.split_whitespace();
    let mut program = words.next()?.rsplit('/').next()?;
    if program == "env" {
        program = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
    }
    let program = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    match program {
        "python" | "pypy" => Some(Language::Python),
        "sh" | "bash" | "dash" | "ksh" | "zsh" | "ash" => Some(Language::Shell),
        "php" => Some(Language::Php),
        "node" | "nodejs" | "deno" | "bun" | "ts-node" | "tsx" => Some(Language::JavaScript),
        _ => None,
    }
}

/// Extracts the facts of the file at `rel` (relative to the checked root).
/// `rust_module_path` is only asked for Rust files, whose items are named
/// through their crate.
pub fn extract_file(
    rel: &str,
    text: &str,
    config: &ExtractConfig,
    rust_module_path: impl FnOnce() -> Vec<String>,
) -> FileFacts {
    // The token extractors hold 32-bit offsets; a larger file (only with
    // `--max-file-size` past 4G) is read as plain text.
    let language = match Language::detect(rel, text) {
        Some(language) if language != Language::Rust && text.len() > MAX_TOKENIZED => None,
        language => language,
    };
    match language {
        Some(Language::Rust) => {
            let module_path = rust_module_path();
            let mut facts = rust::extract_rust(text, config, &module_path);
            // The module itself is a valid owner (`owner = "dwengine::polling"`).
            facts.items.push(module_path.join("::"));
            facts
        }
        Some(Language::Php) => php::extract(text, config),
        Some(Language::Python) => python::extract(text, config, rel),
        Some(Language::Shell) => shell::extract(text, config),
        Some(Language::Yaml) => yaml::extract(text, config),
        Some(Language::Go) => go::extract(text, config),
        Some(Language::JavaScript) => js::extract(text, config),
        None => {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            let extension = name.rsplit_once('.').map_or("", |(_, ext)| ext);
            plain::extract_plain(text, config, extension)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_first_then_shebang() {
        let of = |rel: &str, text: &str| Language::detect(rel, text);
        assert_eq!(of("a/b.php", ""), Some(Language::Php));
        assert_eq!(of("harness.py", "#!/bin/bash"), Some(Language::Python));
        assert_eq!(of("x.yaml", ""), Some(Language::Yaml));
        assert_eq!(of("web/app.tsx", ""), Some(Language::JavaScript));
        assert_eq!(
            of("bin/soak", "#!/usr/bin/env python3\n"),
            Some(Language::Python)
        );
        assert_eq!(of("bin/run", "#!/bin/bash -eu\n"), Some(Language::Shell));
        assert_eq!(
            of("bin/cli", "#!/usr/bin/env -S node --x\n"),
            Some(Language::JavaScript)
        );
        assert_eq!(of("bin/cli", "#!/usr/bin/php8.2\n"), Some(Language::Php));
        assert_eq!(of("bin/tool", "#!/usr/bin/env ruby\n"), None);
        assert_eq!(of("README", "plain"), None);
        assert_eq!(of("dir.d/file", "#!"), None);
    }
}
