//! The JSON report holds to its published schema
//! (docs/json-report.schema.json, documented in docs/json-report.md) in
//! every mode, and its `root` resolves every `file` from where dwlint ran.

use crate::support::{dwlint_in, fixture_copy, text};

use std::path::Path;

use serde_json::Value;

fn validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json-report.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("the report schema compiles")
}

fn assert_valid(report: &Value) {
    let errors: Vec<String> = validator()
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{report:#}");
}

#[test]
fn reports_of_every_fixture_and_mode_match_the_schema() {
    for name in [
        "clean",
        "label-mismatch",
        "missing-review-field",
        "parse-fallback",
        "doc-stale-mention",
    ] {
        let dir = fixture_copy(name);
        let out = dwlint_in(dir.path(), &["check", "--format", "json"]);
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", text(&out.stderr)));
        assert_valid(&report);
        assert_eq!(report["root"], ".");
    }
    // `files` mode, as pre-commit runs it.
    let dir = fixture_copy("label-mismatch");
    let out = dwlint_in(dir.path(), &["check", "--format", "json", "src/lib.rs"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["summary"]["mode"], "files");
    assert_valid(&report);
}

#[test]
fn the_schema_rejects_what_the_contract_forbids() {
    let dir = fixture_copy("label-mismatch");
    let out = dwlint_in(dir.path(), &["check", "--format", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let validator = validator();
    let mut without_root = report.clone();
    without_root.as_object_mut().unwrap().remove("root");
    assert!(!validator.is_valid(&without_root));
    let mut bad_severity = report.clone();
    bad_severity["diagnostics"][0]["severity"] = "fatal".into();
    assert!(!validator.is_valid(&bad_severity));
    let mut renamed = report;
    let first = renamed["diagnostics"][0].as_object_mut().unwrap();
    let code = first.remove("code").unwrap();
    first.insert("rule".into(), code);
    assert!(!validator.is_valid(&renamed));
}

#[test]
fn root_resolves_every_file_from_the_working_directory() {
    let dir = fixture_copy("label-mismatch");
    let nested = dir.path().join("src");
    let out = dwlint_in(&nested, &["check", "--format", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["root"], "..");
    for d in report["diagnostics"].as_array().unwrap() {
        let file = d["file"].as_str().unwrap();
        assert!(nested.join("..").join(file).is_file(), "{file}");
    }
}
