//! `dwlint evidence verify`: re-checks a soak artifact against the
//! `trusted_long_soak_v1` profile, independently of the harness that wrote it.
//!
//! The harness records its own verdict, but a verdict is only as good as the
//! policy and the numbers behind it. This command reads the raw fields of
//! `summary.json`, recomputes every condition of the profile against the
//! policy in *this* tree (its digest and its cache inventory), and reports
//! each failed condition as a finding, so every report format of `check`
//! works here too. A recorded verdict that disagrees with the recomputed one
//! is a finding of its own. Exit 0: trusted; 1: not trusted; 2: the artifact
//! (or the policy) could not be read.

use std::path::{Path, PathBuf};

use dwevidence::profile::{self, Condition, ConditionFailure, Reference};
use dwevidence::summary::{Summary, SummaryError, PROFILE};

use crate::base::bounded_read::{self, ReadError};
use crate::base::diagnostic::{Anchor, Diagnostic};
use crate::base::error::RunError;
use crate::base::line_index::{LineIndex, TextRange};
use crate::commands::single_report;
use crate::discover;
use crate::report::model::CheckReport;
use crate::rules::config;

mod codes;
mod command;

pub use codes::{find_rule, rules, RECORDED_VERDICT};
pub use command::{run, EvidenceCommand};

/// What to verify.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The artifact, e.g. `build/perf/summary.json`.
    pub summary: PathBuf,
    /// Where policy discovery starts (as for `check`).
    pub root: PathBuf,
    /// An explicit policy file.
    pub policy: Option<PathBuf>,
    /// The repository a trusted soak must come from.
    pub repository: String,
    /// The pinned server image reference, when the checker knows it.
    pub server_image: Option<String>,
}

/// Why an artifact could not be verified (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// The run failed as any would: no policy, an invalid one, a report
    /// that cannot be written.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The file could not be read (missing, not a regular file, too large).
    #[error("cannot read the soak artifact {}: {source}; name the summary.json the soak harness wrote", .path.display())]
    Unreadable {
        /// The artifact.
        path: PathBuf,
        /// Why.
        source: ReadError,
    },
    /// The file is not a summary of a known schema.
    #[error("{} is not a valid soak summary: {source}", .path.display())]
    Invalid {
        /// The artifact.
        path: PathBuf,
        /// What does not fit.
        source: SummaryError,
    },
}

/// A verified artifact: the parsed summary and the findings.
#[derive(Debug)]
pub struct Verified {
    /// The artifact.
    pub summary: Summary,
    /// Its text, for anchors.
    pub text: String,
    /// The recomputed failures, in profile order.
    pub failures: Vec<ConditionFailure>,
    /// The findings in `check`'s report shape.
    pub report: CheckReport,
}

impl Verified {
    /// Whether the artifact is trusted evidence.
    pub fn trusted(&self) -> bool {
        !self.report.has_errors()
    }
}

/// The largest `summary.json` read: the harness writes a few kilobytes
/// (the samples go to `samples.jsonl`).
pub const MAX_SUMMARY_BYTES: u64 = 16 << 20;

/// The largest `samples.jsonl` charted: a day of one-second samples.
pub const MAX_SAMPLES_BYTES: u64 = 256 << 20;

/// Reads and verifies an artifact. A path that is not a regular file (a
/// FIFO would block the open, `/dev/zero` never ends) is refused before it
/// is opened.
pub fn verify(options: &VerifyOptions) -> Result<Verified, EvidenceError> {
    let path = &options.summary;
    let text = bounded_read::read_text(path, MAX_SUMMARY_BYTES).map_err(|source| {
        EvidenceError::Unreadable {
            path: path.clone(),
            source,
        }
    })?;
    let summary = Summary::from_json(&text).map_err(|source| EvidenceError::Invalid {
        path: path.clone(),
        source,
    })?;
    let located = discover::locate(&options.root, options.policy.as_deref())?;
    let policy_file = config::load_policy(&located.root, Some(&located.policy))?;
    let policy_bytes =
        std::fs::read(&located.policy).map_err(|source| RunError::PolicyUnreadable {
            path: located.policy.clone(),
            source: source.into(),
        })?;
    let digest = dwevidence::digest::sha256_hex(&policy_bytes);
    let ids: Vec<String> = policy_file
        .policy
        .cache_keys
        .iter()
        .map(|c| c.id.value.clone())
        .collect();
    let reference = Reference {
        cache_policy_ids: &ids,
        policy_sha256: &digest,
        repository: &options.repository,
        server_image: options.server_image.as_deref(),
    };
    let failures = profile::evaluate(&summary, &reference);
    let shown = path.to_string_lossy().replace('\\', "/");
    let anchors = Anchors::new(&shown, &text);
    let mut diagnostics: Vec<Diagnostic> = failures
        .iter()
        .map(|failure| {
            Diagnostic::new(
                codes::code(failure.condition),
                failure.condition.id(),
                failure.explanation.clone(),
            )
            .at(anchors.field(failure.field))
            .help(failure.condition.requirement())
        })
        .collect();
    if let Some(mismatch) = recorded_mismatch(&summary, &failures) {
        diagnostics.push(
            Diagnostic::new(RECORDED_VERDICT, "evidence.trust", mismatch)
                .at(anchors.field("evidence.trust"))
                .help("the writer's verdict must be the profile's verdict over the artifact's own fields; regenerate the artifact rather than editing it"),
        );
    }
    let report = single_report::findings(
        diagnostics,
        rules(),
        1,
        policy_file.display_path.clone(),
        PathBuf::from("."),
    );
    Ok(Verified {
        summary,
        text,
        failures,
        report,
    })
}

/// How the recorded `evidence.trust` differs from the recomputed verdict.
fn recorded_mismatch(summary: &Summary, failures: &[ConditionFailure]) -> Option<String> {
    let recorded = &summary.evidence.trust;
    if recorded.profile != PROFILE {
        return Some(format!(
            "evidence.trust names profile `{}`, not {PROFILE}",
            recorded.profile
        ));
    }
    let recomputed: Vec<&str> = failures.iter().map(|f| f.condition.id()).collect();
    let claimed: Vec<&str> = recorded
        .failed_conditions
        .iter()
        .map(|f| f.condition.as_str())
        .collect();
    if recorded.eligible != failures.is_empty() {
        return Some(format!(
            "the artifact records eligible = {} but the recomputed verdict is {}",
            recorded.eligible,
            if failures.is_empty() {
                "eligible".to_owned()
            } else {
                format!("not eligible ({})", recomputed.join(", "))
            }
        ));
    }
    if let Some(unknown) = claimed.iter().find(|c| Condition::from_id(c).is_none()) {
        return Some(format!(
            "evidence.trust lists `{unknown}`, which is not a condition of {PROFILE}"
        ));
    }
    let mut sorted_claimed = claimed.clone();
    sorted_claimed.sort_unstable();
    let mut sorted_recomputed = recomputed.clone();
    sorted_recomputed.sort_unstable();
    (sorted_claimed != sorted_recomputed).then(|| {
        format!(
            "the artifact lists failed conditions [{}] but the recomputed ones are [{}]",
            claimed.join(", "),
            recomputed.join(", ")
        )
    })
}

/// Points findings at the summary field they are about, following the
/// dotted path through the JSON objects (`config.max_…` and the top-level
/// `max_…` are different places); the top of the file when not found.
struct Anchors<'a> {
    file: &'a str,
    text: &'a str,
    lines: LineIndex,
}

impl<'a> Anchors<'a> {
    fn new(file: &'a str, text: &'a str) -> Self {
        Anchors {
            file,
            text,
            lines: LineIndex::new(text),
        }
    }

    fn field(&self, dotted: &str) -> Anchor {
        let range = match key_offset(self.text, dotted) {
            Some((start, end)) => self.lines.range(self.text, start, end),
            None => TextRange::file_start(),
        };
        Anchor::labeled(self.file, range, dotted.to_owned())
    }
}

/// Byte range of the quoted key at `dotted` in a JSON text.
fn key_offset(text: &str, dotted: &str) -> Option<(usize, usize)> {
    let path: Vec<&str> = dotted.split('.').collect();
    let bytes = text.as_bytes();
    let (mut depth, mut matched, mut i) = (0usize, 0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if matched > 0 && depth <= matched {
                    return None;
                }
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let end = (i + 1).min(bytes.len());
                let is_key = text[end..].trim_start().starts_with(':');
                if is_key && depth == matched + 1 && text.get(start + 1..i) == Some(path[matched]) {
                    matched += 1;
                    if matched == path.len() {
                        return Some((start, end));
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The `samples.jsonl` the harness writes next to `summary`.
pub fn samples_path(summary: &Path) -> PathBuf {
    summary.with_file_name("samples.jsonl")
}

/// The HTML report of a verified artifact, with notes for standard error
/// (samples that could not be read are charted as absent, not as zero).
pub fn html_report(summary_path: &Path, verified: &Verified) -> (String, Vec<String>) {
    let samples_path = samples_path(summary_path);
    let mut notes = Vec::new();
    let samples = match bounded_read::read_text(&samples_path, MAX_SAMPLES_BYTES) {
        Ok(text) => dwevidence::sample::parse_lines(&text).unwrap_or_else(|e| {
            notes.push(format!(
                "{}: {e}; the report has no charts",
                samples_path.display()
            ));
            Vec::new()
        }),
        Err(e) => {
            notes.push(format!(
                "cannot read {}: {e}; the report has no charts",
                samples_path.display()
            ));
            Vec::new()
        }
    };
    let page_notes = verified
        .report
        .diagnostics
        .iter()
        .filter(|d| d.code == RECORDED_VERDICT)
        .map(|d| d.message.clone())
        .collect();
    let source = summary_path.to_string_lossy();
    let page = dwevidence::html::render(
        &verified.summary,
        &samples,
        &verified.failures,
        &dwevidence::html::Context {
            source: &source,
            notes: page_notes,
        },
    );
    (page, notes)
}

#[cfg(test)]
mod tests {
    use super::key_offset;

    #[test]
    fn keys_are_found_by_their_path() {
        let text = r#"{"config": {"max": 1, "s": "a\"b"}, "max": {"x": 2}}"#;
        let at = |path| key_offset(text, path).map(|(s, e)| &text[s..e]);
        assert_eq!(at("config.max"), Some("\"max\""));
        assert_eq!(key_offset(text, "max").map(|r| r.0), text.rfind("\"max\""));
        assert_eq!(at("max.x"), Some("\"x\""));
        assert_eq!(at("config.x"), None);
        assert_eq!(at("nothing"), None);
    }
}
