//! The SARIF output validates against the official SARIF 2.1.0 JSON schema.
//!
//! `tests/data/sarif-schema-2.1.0.json` is the OASIS SARIF TC's schema
//! (`Schemata/sarif-schema-2.1.0.json` of oasis-tcs/sarif-spec, `$id`
//! <https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json>),
//! copied byte for byte from the `serde-sarif` 0.8.0 crate on crates.io
//! (`src/schema.json`; sha256 af47e7b6…895cea). A schema we wrote ourselves
//! would only test our reading of the spec against itself.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sarif-schema-2.1.0.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("vendored schema"))
        .expect("schema is JSON")
}

const LANGUAGE_PATTERN: &str = "^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$";

fn validate(log: &Value) -> Vec<String> {
    let schema = schema();
    // The `language` pattern of the official schema (on `run` and on
    // `toolComponent`) has a stray `]`, a literal in ECMA-262 regexes that
    // this validator's engine rejects, so its meta-schema check would refuse
    // the whole schema. The file stays verbatim; the compiled copy gets the
    // same pattern with the `]` escaped.
    let mut schema = schema;
    for owner in ["run", "toolComponent"] {
        let pattern = &mut schema["definitions"][owner]["properties"]["language"]["pattern"];
        assert_eq!(pattern, LANGUAGE_PATTERN, "{owner}");
        *pattern = LANGUAGE_PATTERN.replace("}]?", "}\\]?").into();
    }
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("the SARIF schema compiles");
    validator
        .iter_errors(log)
        .map(|e| format!("{e} (at {})", e.instance_path()))
        .collect()
}

fn sarif(dir: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dwlint"))
        .args(["check", "--format", "sarif"])
        .arg(dir)
        .args(args)
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("run dwlint");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("SARIF is JSON")
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

#[test]
fn the_vendored_schema_is_the_official_one() {
    let schema = schema();
    assert_eq!(
        schema["$id"],
        "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json"
    );
    assert_eq!(
        schema["title"],
        "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    );
}

#[test]
fn output_on_every_fixture_is_valid_sarif() {
    let mut checked = 0;
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")).unwrap()
    {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let log = sarif(&dir, &[]);
        let errors = validate(&log);
        assert!(errors.is_empty(), "{}: {errors:#?}", dir.display());
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} fixtures");
}

#[test]
fn overrides_and_changed_files_mode_are_valid_sarif_too() {
    let dir = fixture("doc-stale-mention");
    let doc = dir.join("docs/ops.md");
    let log = sarif(
        &dir,
        &[
            "-D",
            "warnings",
            "-A",
            "parse-fallback",
            "--",
            doc.to_str().unwrap(),
        ],
    );
    let errors = validate(&log);
    assert!(errors.is_empty(), "{errors:#?}");
    let invocation = &log["runs"][0]["invocations"][0];
    assert_eq!(invocation["properties"]["mode"], "files");
    assert_eq!(invocation["properties"]["changed_files"], 1);
    // doc-stale-mention, unreadable-file and unused-allow promoted,
    // parse-fallback allowed.
    assert_eq!(
        invocation["ruleConfigurationOverrides"]
            .as_array()
            .map(Vec::len),
        Some(4)
    );
    assert_eq!(invocation["exitCode"], 1);
}

#[test]
fn the_validator_catches_what_github_rejects() {
    let mut log = sarif(&fixture("label-mismatch"), &[]);
    log["runs"][0]["results"][0]["message"] = Value::String("a bare string".into());
    log["runs"][0]["results"][1]["locations"][0]["physicalLocation"]["region"]["startLine"] =
        0.into();
    let errors = validate(&log);
    assert!(errors.len() >= 2, "{errors:#?}");
}

/// Every artifact URI is a relative reference GitHub resolves under
/// `%SRCROOT%`: no scheme, no leading slash, nothing that needs escaping.
#[test]
fn uris_are_valid_relative_references() {
    let log = sarif(&fixture("label-mismatch"), &[]);
    let mut uris = Vec::new();
    for result in log["runs"][0]["results"].as_array().unwrap() {
        for key in ["locations", "relatedLocations"] {
            for location in result[key].as_array().into_iter().flatten() {
                let artifact = &location["physicalLocation"]["artifactLocation"];
                assert_eq!(artifact["uriBaseId"], "%SRCROOT%");
                uris.push(artifact["uri"].as_str().unwrap().to_owned());
            }
        }
    }
    assert!(!uris.is_empty());
    for uri in uris {
        assert!(!uri.starts_with('/') && !uri.contains(':'), "{uri}");
        assert!(
            uri.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=@/%".contains(&b)),
            "{uri}"
        );
    }
}
