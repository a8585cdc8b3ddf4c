//! `--format sarif`: SARIF 2.1.0 as GitHub code scanning accepts it.
//!
//! What GitHub needs and this writer guarantees: one `tool.driver.rules`
//! entry per rule (with the rule's documentation as help), the rule code as
//! a stable `ruleId`, a physical location on every result with a
//! repository-relative URI under `%SRCROOT%`, message objects, and
//! `partialFingerprints` that survive unrelated edits (they hash the rule,
//! the subject and the file, not the line). GitHub rejects runs with more
//! than 25,000 results, so the writer keeps errors first, cuts at the limit
//! and records the cut as a notification in the run's invocation.
//!
//! The document is serialised as it is written: results are produced one by
//! one from the report while serde writes them out.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;

use serde::ser::{Serialize, Serializer};
use serde::Serialize as DeriveSerialize;

use crate::base::diagnostic::{Anchor, Diagnostic, Severity};
use crate::base::line_index::TextRange;
use crate::discover::changed::Mode;
use crate::report::model::CheckReport;
use crate::report::{location, message_with_help};
use crate::rules::{Rule, Scope};

/// GitHub code scanning's limit on results per run.
pub const MAX_RESULTS: usize = 25_000;

/// The key of our fingerprint in `partialFingerprints`; the version lets a
/// future change of what is hashed start a new series instead of clashing.
const FINGERPRINT_KEY: &str = "dwlint/v1";

#[derive(DeriveSerialize)]
struct Log<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    version: &'static str,
    runs: [Run<'a>; 1],
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct Run<'a> {
    tool: Tool,
    /// Our columns count characters, not UTF-16 units (SARIF's default).
    column_kind: &'static str,
    results: Results<'a>,
    invocations: [Invocation<'a>; 1],
}

#[derive(DeriveSerialize)]
struct Tool {
    driver: Driver,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct Driver {
    name: &'static str,
    version: &'static str,
    semantic_version: &'static str,
    rules: Vec<RuleDescriptor>,
}

#[derive(DeriveSerialize)]
struct Text {
    text: String,
}

#[derive(DeriveSerialize)]
struct Help {
    text: String,
    markdown: String,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct RuleDescriptor {
    id: &'static str,
    name: String,
    help_uri: String,
    short_description: Text,
    full_description: Text,
    help: Help,
    default_configuration: Configuration,
    properties: RuleProperties,
}

#[derive(DeriveSerialize)]
struct Configuration {
    level: &'static str,
    enabled: bool,
}

#[derive(DeriveSerialize)]
struct RuleProperties {
    tags: [&'static str; 2],
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct Invocation<'a> {
    execution_successful: bool,
    exit_code: i32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rule_configuration_overrides: Vec<ConfigurationOverride>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_execution_notifications: Vec<Notification>,
    properties: InvocationProperties<'a>,
}

#[derive(DeriveSerialize)]
struct ConfigurationOverride {
    descriptor: Descriptor,
    configuration: Configuration,
}

#[derive(DeriveSerialize)]
struct Descriptor {
    id: &'static str,
    index: usize,
}

#[derive(DeriveSerialize)]
struct Notification {
    level: &'static str,
    message: Text,
    descriptor: NotificationId,
}

#[derive(DeriveSerialize)]
struct NotificationId {
    id: &'static str,
}

#[derive(DeriveSerialize)]
struct InvocationProperties<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    changed_since: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    changed_files: Option<usize>,
    files_scanned: usize,
    policy: &'a str,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct SarifResult<'a> {
    rule_id: &'static str,
    rule_index: usize,
    level: &'static str,
    message: Text,
    locations: [Location; 1],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    related_locations: Vec<Location>,
    partial_fingerprints: HashMap<&'static str, String>,
    properties: ResultProperties<'a>,
}

#[derive(DeriveSerialize)]
struct ResultProperties<'a> {
    subject: &'a str,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct Location {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<usize>,
    physical_location: PhysicalLocation,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<Text>,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct PhysicalLocation {
    artifact_location: ArtifactLocation,
    region: Region,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactLocation {
    uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    uri_base_id: Option<&'static str>,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct Region {
    start_line: usize,
    start_column: usize,
    end_line: usize,
    end_column: usize,
}

/// The results, produced lazily while serde writes the array.
struct Results<'a> {
    report: &'a CheckReport,
    limit: usize,
}

impl Serialize for Results<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let report = self.report;
        // Fingerprints must differ for two findings of one rule about one
        // subject in one file, so each gets its occurrence number.
        let seen: RefCell<HashMap<(&str, &str, &str), usize>> = RefCell::new(HashMap::new());
        let results = selected(report, self.limit).map(|d| {
            let (file, _) = location(d, report);
            let mut seen = seen.borrow_mut();
            let occurrence = seen.entry((d.code, d.subject.as_str(), file)).or_insert(0);
            *occurrence += 1;
            result(report, d, *occurrence)
        });
        serializer.collect_seq(results)
    }
}

/// The findings that go into the run: all of them in report order, or when
/// over `limit`, errors before warnings, cut at `limit`.
fn selected(report: &CheckReport, limit: usize) -> Box<dyn Iterator<Item = &Diagnostic> + '_> {
    let all = report.diagnostics.iter();
    if report.diagnostics.len() <= limit {
        return Box::new(all);
    }
    let of = move |severity: Severity| {
        report
            .diagnostics
            .iter()
            .filter(move |d| d.severity == severity)
    };
    Box::new(of(Severity::Error).chain(of(Severity::Warning)).take(limit))
}

fn level(severity: Option<Severity>) -> &'static str {
    match severity {
        Some(Severity::Error) => "error",
        Some(Severity::Warning) => "warning",
        None => "none",
    }
}

/// `label-mismatch` → `LabelMismatch`, SARIF's convention for rule names.
fn pascal_case(code: &str) -> String {
    code.split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn descriptor(rule: &Rule) -> RuleDescriptor {
    let doc = rule.doc();
    RuleDescriptor {
        id: rule.code,
        name: pascal_case(rule.code),
        help_uri: rule.help_uri(),
        short_description: Text {
            text: rule.summary(),
        },
        full_description: Text {
            text: rule.summary(),
        },
        help: Help {
            text: doc.clone(),
            markdown: doc,
        },
        default_configuration: Configuration {
            level: level(Some(rule.default_severity)),
            enabled: true,
        },
        properties: RuleProperties {
            tags: [
                "bounded-growth",
                match rule.scope {
                    Scope::File => "file-local",
                    Scope::Tree => "tree-wide",
                },
            ],
        },
    }
}

/// Percent-encodes what may not appear in a URI path.
fn uri_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        let c = byte as char;
        if c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@/".contains(c) {
            out.push(c);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn physical(report: &CheckReport, file: &str, range: TextRange) -> PhysicalLocation {
    let file = file.replace('\\', "/");
    let artifact_location = if file.starts_with('/') {
        // A policy outside the root: no base to be relative to.
        ArtifactLocation {
            uri: format!("file://{}", uri_path(&file)),
            uri_base_id: None,
        }
    } else {
        ArtifactLocation {
            uri: uri_path(&format!("{}{file}", report.repo_prefix)),
            uri_base_id: Some("%SRCROOT%"),
        }
    };
    PhysicalLocation {
        artifact_location,
        region: Region {
            start_line: range.line,
            start_column: range.column,
            end_line: range.end_line,
            end_column: range.end_column,
        },
    }
}

/// Every finding's fingerprint, in report order: the `dwlint/v1` value of
/// its SARIF `partialFingerprints` (the rule, the subject, the file and the
/// occurrence of that triple, never the line), which `--write-baseline`
/// records and `--baseline` matches, so a finding moved by an unrelated
/// edit stays known.
pub fn fingerprints(report: &CheckReport) -> Vec<String> {
    let mut seen: HashMap<(&str, &str, &str), usize> = HashMap::new();
    report
        .diagnostics
        .iter()
        .map(|d| {
            let (file, _) = location(d, report);
            let occurrence = seen.entry((d.code, d.subject.as_str(), file)).or_insert(0);
            *occurrence += 1;
            fnv1a(&[d.code, &d.subject, file, &occurrence.to_string()])
        })
        .collect()
}

/// FNV-1a, 64 bits: fingerprints must be identical across versions and
/// platforms, which std's hasher does not promise.
fn fnv1a(parts: &[&str]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain(std::iter::once(0)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

fn related(report: &CheckReport, id: usize, anchor: &Anchor) -> Location {
    let range = super::sane(anchor.range);
    Location {
        id: Some(id),
        physical_location: physical(report, &anchor.file, range),
        message: Some(Text {
            text: anchor.label.clone().unwrap_or_else(|| "related".to_owned()),
        }),
    }
}

/// The rules of a report are its `severities`, in order: `check`'s
/// registry, or the codes of another command (`evidence verify`).
fn rule_index(report: &CheckReport, code: &str) -> usize {
    report
        .severities
        .iter()
        .position(|(r, _)| r.code == code)
        .unwrap_or(0)
}

fn result<'a>(report: &'a CheckReport, d: &'a Diagnostic, occurrence: usize) -> SarifResult<'a> {
    let (file, range) = location(d, report);
    let rule_index = rule_index(report, d.code);
    let fingerprint = fnv1a(&[d.code, &d.subject, file, &occurrence.to_string()]);
    SarifResult {
        rule_id: d.code,
        rule_index,
        level: level(Some(d.severity)),
        message: Text {
            text: message_with_help(d),
        },
        locations: [Location {
            id: None,
            physical_location: physical(report, file, range),
            message: None,
        }],
        related_locations: d
            .related
            .iter()
            .enumerate()
            .map(|(i, a)| related(report, i + 1, a))
            .collect(),
        partial_fingerprints: HashMap::from([(FINGERPRINT_KEY, fingerprint)]),
        properties: ResultProperties {
            subject: &d.subject,
        },
    }
}

fn invocation(report: &CheckReport, limit: usize) -> Invocation<'_> {
    let total = report.diagnostics.len();
    let mut notifications = Vec::new();
    if total > limit {
        notifications.push(Notification {
            level: "warning",
            message: Text {
                text: truncation_note(total, limit),
            },
            descriptor: NotificationId {
                id: "sarif-result-limit",
            },
        });
    }
    let rule_configuration_overrides = report
        .severities
        .iter()
        .filter(|(rule, severity)| *severity != Some(rule.default_severity))
        .map(|(rule, severity)| ConfigurationOverride {
            descriptor: Descriptor {
                id: rule.code,
                index: rule_index(report, rule.code),
            },
            configuration: Configuration {
                level: level(*severity),
                enabled: severity.is_some(),
            },
        })
        .collect();
    let (changed_since, changed_files) = match &report.mode {
        Mode::Full => (None, None),
        Mode::ChangedSince { rev, files } => (Some(rev.as_str()), Some(*files)),
        Mode::Files { files } => (None, Some(*files)),
    };
    Invocation {
        execution_successful: true,
        exit_code: report.exit_code(),
        rule_configuration_overrides,
        tool_execution_notifications: notifications,
        properties: InvocationProperties {
            mode: report.mode.name(),
            changed_since,
            changed_files,
            files_scanned: report.files_scanned,
            policy: &report.policy_path,
        },
    }
}

fn truncation_note(total: usize, limit: usize) -> String {
    format!(
        "dwlint found {total} results but GitHub code scanning accepts at most {limit} per run: \
         this SARIF log holds the first {limit} (errors first); run `dwlint check --format json` for all of them"
    )
}

/// Writes the SARIF log; at most `limit` results (GitHub's is
/// [`MAX_RESULTS`]). Returns a note for stderr when results were cut.
pub fn write(
    report: &CheckReport,
    limit: usize,
    out: &mut dyn Write,
) -> std::io::Result<Vec<String>> {
    let log = Log {
        schema: "https://json.schemastore.org/sarif-2.1.0.json",
        version: "2.1.0",
        runs: [Run {
            tool: Tool {
                driver: Driver {
                    name: "dwlint",
                    version: env!("CARGO_PKG_VERSION"),
                    semantic_version: env!("CARGO_PKG_VERSION"),
                    rules: report
                        .severities
                        .iter()
                        .map(|(r, _)| descriptor(r))
                        .collect(),
                },
            },
            column_kind: "unicodeCodePoints",
            results: Results { report, limit },
            invocations: [invocation(report, limit)],
        }],
    };
    serde_json::to_writer_pretty(&mut *out, &log)?;
    writeln!(out)?;
    out.flush()?;
    let total = report.diagnostics.len();
    Ok(if total > limit {
        vec![truncation_note(total, limit)]
    } else {
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::diagnostic::Anchor;
    use crate::rules::RULES;

    fn synthetic(errors: usize, warnings: usize) -> CheckReport {
        let range = TextRange {
            line: 3,
            column: 2,
            end_line: 3,
            end_column: 9,
            start: 0,
            end: 0,
        };
        let mut diagnostics = Vec::new();
        for i in 0..warnings {
            let mut d = Diagnostic::new("doc-stale-mention", format!("w{i}"), "stale")
                .at(Anchor::plain("docs/a b.md", range));
            d.severity = Severity::Warning;
            diagnostics.push(d);
        }
        for i in 0..errors {
            diagnostics.push(
                Diagnostic::new("undeclared-metric", format!("dw_m{i}"), "undeclared")
                    .at(Anchor::plain("src/lib.rs", range)),
            );
        }
        CheckReport {
            diagnostics,
            files_scanned: 2,
            policy_path: "policy/dw-bounded-growth.toml".into(),
            root: ".".into(),
            root_moved: false,
            repo_prefix: "sub/".into(),
            mode: Mode::Full,
            severities: RULES
                .iter()
                .map(|r| (r, Some(r.default_severity)))
                .collect(),
            notes: Vec::new(),
            inputs: Default::default(),
            timings: Default::default(),
        }
    }

    fn render(report: &CheckReport, limit: usize) -> (serde_json::Value, Vec<String>) {
        let mut out = Vec::new();
        let notes = write(report, limit, &mut out).unwrap();
        (serde_json::from_slice(&out).unwrap(), notes)
    }

    #[test]
    fn over_the_limit_errors_are_kept_first_and_the_cut_is_reported() {
        let report = synthetic(3, 4);
        let (log, notes) = render(&report, 5);
        let run = &log["runs"][0];
        let results = run["results"].as_array().unwrap();
        assert_eq!(results.len(), 5);
        let levels: Vec<&str> = results
            .iter()
            .map(|r| r["level"].as_str().unwrap())
            .collect();
        assert_eq!(levels, ["error", "error", "error", "warning", "warning"]);
        let note = &run["invocations"][0]["toolExecutionNotifications"][0];
        assert_eq!(note["descriptor"]["id"], "sarif-result-limit");
        assert!(note["message"]["text"]
            .as_str()
            .unwrap()
            .contains("7 results"));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("at most 5 per run"), "{notes:?}");
    }

    #[test]
    fn at_the_limit_nothing_is_cut_or_noted() {
        let report = synthetic(2, 3);
        let (log, notes) = render(&report, 5);
        assert_eq!(log["runs"][0]["results"].as_array().unwrap().len(), 5);
        assert!(log["runs"][0]["invocations"][0]
            .get("toolExecutionNotifications")
            .is_none());
        assert!(notes.is_empty());
    }

    #[test]
    fn the_github_limit_is_enforced_on_a_large_run() {
        let report = synthetic(MAX_RESULTS + 1, 10);
        let (log, notes) = render(&report, MAX_RESULTS);
        let results = log["runs"][0]["results"].as_array().unwrap();
        assert_eq!(results.len(), MAX_RESULTS);
        assert!(results.iter().all(|r| r["level"] == "error"));
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn uris_are_repository_relative_and_encoded_and_fingerprints_distinct() {
        let report = synthetic(0, 2);
        let (log, _) = render(&report, 5);
        let results = log["runs"][0]["results"].as_array().unwrap();
        let artifact = &results[0]["locations"][0]["physicalLocation"]["artifactLocation"];
        assert_eq!(artifact["uri"], "sub/docs/a%20b.md");
        assert_eq!(artifact["uriBaseId"], "%SRCROOT%");
        assert_ne!(
            results[0]["partialFingerprints"][FINGERPRINT_KEY],
            results[1]["partialFingerprints"][FINGERPRINT_KEY]
        );
    }

    #[test]
    fn fingerprints_are_stable_and_names_pascal_case() {
        assert_eq!(fnv1a(&[]), "cbf29ce484222325");
        assert_eq!(fnv1a(&["a"]), fnv1a(&["a"]));
        assert_ne!(fnv1a(&["ab", "c"]), fnv1a(&["a", "bc"]));
        assert_eq!(pascal_case("label-mismatch"), "LabelMismatch");
    }
}
