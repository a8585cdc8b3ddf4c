//! The TOML config file (`--config FILE` / `DW_CONFIG`) and where each
//! value came from.
//!
//! The file uses the seed's dotted key names as tables
//! (`[workflows.v2.structural_limits]`, `[server.limits]`, …); each key
//! stands for one `DW_*` variable, and the variable, when set, overrides the
//! file. Reading turns the file into values keyed by that variable, so the
//! strict parsers read file and environment alike, and every problem can
//! say which of the two it came from (file and line, or the environment).
//! Unknown keys are refused, with the nearest known key, because a misspelt
//! limit silently left at its default is the failure this file exists to
//! prevent.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

/// One value found in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileValue {
    /// The dotted key, e.g. `server.limits.max_memo_bytes`.
    pub key: String,
    /// The value as text (TOML integers in decimal, strings unquoted).
    pub raw: String,
    /// 1-based line of the key.
    pub line: usize,
}

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The process environment.
    Environment,
    /// A config-file key.
    File {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// Its line.
        line: usize,
    },
    /// No single value (a requirement no source met).
    Missing,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Environment => f.write_str("environment"),
            Source::File { path, key, line } => write!(f, "{}:{line}: {key}", path.display()),
            Source::Missing => f.write_str("not set"),
        }
    }
}

/// A parsed config file: values by the variable each key stands for.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    /// The file read.
    pub path: PathBuf,
    values: HashMap<String, FileValue>,
}

/// A problem with the file itself (unreadable, bad TOML, unknown key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    /// The file.
    pub path: PathBuf,
    /// The line, when the problem has one.
    pub line: Option<usize>,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl ConfigFile {
    /// Reads `path`; `keys` maps each accepted dotted key to its variable.
    ///
    /// The known keys of a file with unknown ones are kept, so their values
    /// are checked (and reported) too; an unreadable or non-TOML file has none.
    pub fn read(path: &Path, keys: &BTreeMap<String, String>) -> (ConfigFile, Vec<FileProblem>) {
        match std::fs::read_to_string(path) {
            Ok(text) => ConfigFile::parse(path, &text, keys),
            Err(e) => (
                ConfigFile::empty(path),
                vec![FileProblem {
                    path: path.to_owned(),
                    line: None,
                    message: format!("cannot read the config file: {e}"),
                }],
            ),
        }
    }

    fn empty(path: &Path) -> ConfigFile {
        ConfigFile {
            path: path.to_owned(),
            values: HashMap::new(),
        }
    }

    /// Parses `text` as the file at `path`, collecting every problem.
    pub fn parse(
        path: &Path,
        text: &str,
        keys: &BTreeMap<String, String>,
    ) -> (ConfigFile, Vec<FileProblem>) {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let root = match DeTable::parse(text) {
            Ok(root) => root,
            Err(e) => {
                let problem = FileProblem {
                    path: path.to_owned(),
                    line: e.span().map(|s| line_of(s.start)),
                    message: format!("TOML syntax error: {}", e.message().trim()),
                };
                return (ConfigFile::empty(path), vec![problem]);
            }
        };
        let mut leaves = Vec::new();
        flatten(root.get_ref(), "", &mut leaves);
        let mut file = ConfigFile {
            path: path.to_owned(),
            values: HashMap::new(),
        };
        let mut problems = Vec::new();
        let known: Vec<&str> = keys.keys().map(String::as_str).collect();
        for (key, raw, offset) in leaves {
            let line = line_of(offset);
            match keys.get(&key) {
                Some(variable) => {
                    file.values
                        .insert(variable.clone(), FileValue { key, raw, line });
                }
                None => {
                    let hint = match dwpolicy::load::nearest(&key, &known) {
                        Some(near) => format!("did you mean `{near}`?"),
                        None => "docs/contract.md lists every key".to_owned(),
                    };
                    problems.push(FileProblem {
                        path: path.to_owned(),
                        line: Some(line),
                        message: format!("unknown key `{key}`: {hint}"),
                    });
                }
            }
        }
        (file, problems)
    }

    /// The file's value for `variable`, if it sets it.
    pub fn get(&self, variable: &str) -> Option<&FileValue> {
        self.values.get(variable)
    }
}

/// Leaves of `table` as (dotted key, text, byte offset of the key).
fn flatten(table: &DeTable<'_>, prefix: &str, out: &mut Vec<(String, String, usize)>) {
    for (key, value) in table.iter() {
        let dotted = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        let offset = key.span().start;
        let raw = match value.get_ref() {
            DeValue::Table(inner) => {
                flatten(inner, &dotted, out);
                continue;
            }
            DeValue::String(s) => s.to_string(),
            DeValue::Integer(int) => {
                let digits = int.as_str().replace('_', "");
                match i128::from_str_radix(&digits, int.radix()) {
                    Ok(n) => n.to_string(),
                    Err(_) => int.as_str().to_owned(),
                }
            }
            DeValue::Float(float) => float.as_str().to_owned(),
            DeValue::Boolean(b) => b.to_string(),
            DeValue::Datetime(d) => d.to_string(),
            // A list of strings (upload_roles = ["worker", "operator"]) reads
            // as the comma-separated value its variable takes.
            DeValue::Array(items) => {
                let strings: Option<Vec<String>> = items
                    .iter()
                    .map(|item| match item.get_ref() {
                        DeValue::String(s) => Some(s.to_string()),
                        _ => None,
                    })
                    .collect();
                strings.map_or_else(|| "[array]".to_owned(), |s| s.join(","))
            }
        };
        out.push((dotted, raw, offset));
    }
    out.sort_by_key(|(_, _, offset)| *offset);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "server.limits.max_memo_bytes".to_owned(),
                "DW_MAX_MEMO_BYTES".to_owned(),
            ),
            ("server.bind".to_owned(), "DW_BIND".to_owned()),
        ])
    }

    #[test]
    fn tables_and_dotted_keys_map_to_variables_with_lines() {
        let text = "[server]\nbind = \"127.0.0.1:0\"\n\n[server.limits]\nmax_memo_bytes = 1_024\n";
        let (file, problems) = ConfigFile::parse(Path::new("dw.toml"), text, &keys());
        assert!(problems.is_empty(), "{problems:?}");
        let memo = file.get("DW_MAX_MEMO_BYTES").unwrap();
        assert_eq!((memo.raw.as_str(), memo.line), ("1024", 5));
        assert_eq!(file.get("DW_BIND").unwrap().raw, "127.0.0.1:0");
    }

    #[test]
    fn unknown_keys_and_syntax_errors_name_the_line() {
        let text = "[server.limits]\nmax_memo_byte = 5\nmax_memo_bytes = -1\n";
        let (file, problems) = ConfigFile::parse(Path::new("dw.toml"), text, &keys());
        assert_eq!(problems.len(), 1);
        // The known key is kept, so its bad value is reported too.
        assert_eq!(file.get("DW_MAX_MEMO_BYTES").unwrap().raw, "-1");
        assert_eq!(problems[0].line, Some(2));
        assert!(
            problems[0]
                .message
                .contains("did you mean `server.limits.max_memo_bytes`"),
            "{}",
            problems[0]
        );
        let (_, broken) = ConfigFile::parse(Path::new("dw.toml"), "a = = 1", &keys());
        assert!(broken[0].message.contains("TOML syntax error"));
        assert_eq!(broken[0].line, Some(1));
    }
}
