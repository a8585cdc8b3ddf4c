//! The loader's fast path against the `toml` parser's path: on every policy
//! in the repository, on generated large policies in every form the fast
//! path reads, and on byte-level mutations of all of them, the fast path
//! must either leave the text to the parser or build exactly the policy
//! (spans included) the parser's path accepts.

use std::path::{Path, PathBuf};

use dwpolicy::load::{fast_path_agrees, fast_path_reads, load};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.toml` under `dir` (policies, and Cargo manifests the fast path
/// must leave alone).
fn tomls(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            tomls(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((path, text));
            }
        }
    }
}

fn corpus() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for dir in ["policy", "fixtures", "tests/data"] {
        tomls(&repo().join(dir), &mut out);
    }
    out
}

/// A large policy in the layout `dwlint init` and the synthetic trees
/// write, with every form the fast path reads: quoted and literal strings
/// and keys, simple escapes, comments, CRLF line ends, multi-line arrays
/// with trailing commas, tabs, empty tables, scan limits and rules.
fn generated(entries: usize, crlf: bool) -> String {
    let mut text = String::from(
        "# generated\nschema_version = 1 # the only version\n\n[sources]\ncache = [\"src/**/*.rs\", 'lib/**/*.rs',]\nmetrics = [\n  \"src/**/*.rs\", # main\n  'x/*.rs'\n]\ndocs = [\"docs/ops.md\"]\nexclude = []\n\n[settings]\ncache_namespace = \"server:\"\nmetric_prefix = 'dw_'\nper_run_labels = [\"GITHUB_RUN_ID\"]\n\n[rules]\nunused-metric-policy = \"warn\"\n\"doc-stale-mention\" = 'allow'\n",
    );
    for i in 0..entries {
        text.push_str(&format!(
            "\n[cache_keys.family_{i}]\nowner = \"App\\\\Store{i}\"\nprefix = \"server:family-{i}:\"\ndimensions = [\"namespace\", 'task_queue']\nttl = \"60 \\\"seconds\\\".\"\n\tbound = \"One key per namespace.\"\nadmission = 'Writes only.'\neviction = \"TTL.\\tDone.\"\n\n[metrics.\"dw_family_{i}_total\"]\nowner = \"engine::m{i}::Store{i}\"\nsurface = \"GET /metrics\"\ndimensions = {{ namespace = \"request_scope_not_label\", \"task_queue\" = 'bounded_series' }}\ncardinality = \"At most 100 series.\" # reviewed\nselection = \"Lowest first.\"\nsuppression = \"Counted.\"\n\n[ scan_limits . scan_{i} ]\nowner = \"engine::Scan\"\nconfig_key = \"server.scan_{i}_limit\"\ndefault = {}\nbound = \"At most a page.\"\n\n[cache_keys.empty_{i}]\n",
            i + 1
        ));
    }
    if crlf {
        text = text.replace('\n', "\r\n");
    }
    text
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Inserts, deletes, repeats or replaces a byte, favouring TOML syntax.
fn mutate(text: &str, rng: &mut Rng) -> String {
    const BYTES: &[u8] = b"\"'[]{}=,.#\\\n\r\t 0123456789-_aZ\x00\x7f";
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(bytes.len() + 1);
        let byte = BYTES[rng.below(BYTES.len())];
        match rng.below(4) {
            0 => bytes.insert(at, byte),
            1 if at < bytes.len() => {
                bytes.remove(at);
            }
            2 if at < bytes.len() => {
                let end = (at + 1 + rng.below(16)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(at..at, copy);
            }
            _ if at < bytes.len() => bytes[at] = byte,
            _ => bytes.push(byte),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn the_fast_path_reads_the_repositorys_policies_as_the_parser_does() {
    let corpus = corpus();
    assert!(corpus.len() >= 20, "found {} TOML files", corpus.len());
    let mut read = 0;
    for (path, text) in &corpus {
        assert!(fast_path_agrees(text), "{} differs", path.display());
        if fast_path_reads(text) {
            read += 1;
        }
    }
    // The repository's own policy, and most fixtures, take the fast path.
    let own = std::fs::read_to_string(repo().join("policy/dw-bounded-growth.toml")).unwrap();
    assert!(fast_path_reads(&own));
    assert!(read * 2 > corpus.len(), "{read} of {} read", corpus.len());
}

#[test]
fn the_fast_path_reads_generated_policies_as_the_parser_does() {
    for crlf in [false, true] {
        let text = generated(40, crlf);
        assert!(load(&text).is_ok(), "{:?}", load(&text).err());
        assert!(fast_path_reads(&text), "crlf {crlf}");
        assert!(fast_path_agrees(&text), "crlf {crlf}");
    }
}

#[test]
fn mutations_are_read_as_the_parser_reads_them_or_left_to_it() {
    let mut seeds: Vec<String> = corpus()
        .into_iter()
        .map(|(_, text)| text)
        .filter(|text| text.len() < 64 * 1024)
        .collect();
    seeds.push(generated(2, false));
    seeds.push(generated(1, true));
    let cases: usize = std::env::var("FAST_PATH_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(200);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut fast = 0;
    for seed in &seeds {
        for _ in 0..cases {
            let text = mutate(seed, &mut rng);
            assert!(fast_path_agrees(&text), "differs on:\n{text}");
            fast += usize::from(fast_path_reads(&text));
        }
    }
    // Many mutations keep the policy valid (a changed letter in a
    // sentence), so the comparison is not only of refusals.
    assert!(fast > seeds.len() * cases / 10, "{fast} fast reads");
}

/// Strings whose special bytes (quote, backslash, control characters, tab,
/// DEL, escapes, non-ASCII) sit at every offset of the string: the fast
/// path scans a string's plain run for them before it decodes anything.
#[test]
fn strings_are_read_alike_wherever_their_special_bytes_sit() {
    let specials = [
        "\\\"", "\\\\", "\\t", "\\u00e9", "\t", "\u{1}", "\u{1f}", "\u{7f}", "\r", "é", "ї", " ",
        "~", "\"", "\\",
    ];
    let mut cases = 0;
    for len in 0..20 {
        for at in 0..=len {
            for special in specials {
                let plain = "abcdefghijklmnopqrstuvwxyz";
                let value = format!("{}{special}{}", &plain[..at], &plain[at..len]);
                for field in ["ttl", "owner"] {
                    let text = format!(
                        "schema_version = 1\n[cache_keys.a]\n{field} = \"{value}\"\nprefix = 'p'\n"
                    );
                    assert!(fast_path_agrees(&text), "differs on:\n{text}");
                    cases += usize::from(fast_path_reads(&text));
                }
            }
        }
    }
    // Most of them are valid strings the fast path reads.
    assert!(cases > 3000, "{cases} fast reads");
}

/// A field given twice in an entry is left to the parser, which reports
/// it; so is one an entry does not have.
#[test]
fn a_repeated_or_unknown_entry_field_is_left_to_the_parser() {
    let tables: [(&str, &[&str]); 3] = [
        ("cache_keys.a", dwpolicy::load::CACHE_KEYS),
        ("scan_limits.a", dwpolicy::load::SCAN_KEYS),
        ("metrics.dw_a", dwpolicy::load::METRIC_KEYS),
    ];
    for (table, fields) in tables {
        for field in fields.iter().chain(&["unknown", "id", "name"]) {
            let value = match *field {
                "default" => "5",
                "dimensions" if table.starts_with("metrics") => "{ a = \"bounded_x\" }",
                "dimensions" => "[\"a\"]",
                _ => "\"x\"",
            };
            let once = format!("schema_version = 1\n[{table}]\n{field} = {value}\n");
            let twice = format!("{once}{field} = {value}\n");
            assert!(
                fast_path_agrees(&once) && fast_path_agrees(&twice),
                "{field} in {table}"
            );
            let known = fields.contains(field);
            assert_eq!(fast_path_reads(&once), known, "{field} in {table}");
            assert!(!fast_path_reads(&twice), "{field} twice in {table}");
            assert!(load(&twice).is_err(), "{field} twice in {table}");
        }
    }
}

/// Two entries with one ID (or two overrides of one rule) are left to the
/// parser, which reports them; distinct ones are read.
#[test]
fn a_repeated_id_name_or_rule_code_is_left_to_the_parser() {
    let tables = ["cache_keys", "scan_limits", "metrics"];
    for table in tables {
        let entries = |names: &[&str]| {
            let mut text = String::from("schema_version = 1\n");
            for name in names {
                text.push_str(&format!("[{table}.{name}]\nowner = \"x\"\n"));
            }
            text
        };
        let distinct = entries(&["a", "b", "ab", "ba"]);
        assert!(
            fast_path_reads(&distinct) && fast_path_agrees(&distinct),
            "{table}"
        );
        for repeated in [&["a", "a"][..], &["a", "b", "c", "b"], &["a", "\"a\""]] {
            let text = entries(repeated);
            assert!(!fast_path_reads(&text), "{table} {repeated:?}");
            assert!(
                fast_path_agrees(&text) && load(&text).is_err(),
                "{table} {repeated:?}"
            );
        }
    }
    let rules = "schema_version = 1\n[rules]\nunresolved-owner = \"warn\"\n";
    assert!(fast_path_reads(rules) && fast_path_agrees(rules));
    let twice = format!("{rules}\"unresolved-owner\" = \"allow\"\n");
    assert!(!fast_path_reads(&twice) && fast_path_agrees(&twice) && load(&twice).is_err());
}
