//! The finding every rule produces and every reporter consumes.

use serde::Serialize;

use crate::base::line_index::TextRange;

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Reported, does not fail the run.
    Warning,
    /// Fails the run (exit 1).
    Error,
}

impl Severity {
    /// The lowercase name used in every output format.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// A place in a file, with an optional label drawn under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    /// Path relative to the checked root, `/`-separated (or as given, for a
    /// policy file outside the root).
    pub file: String,
    /// The marked text.
    pub range: TextRange,
    /// What the marked text is, in a few words.
    pub label: Option<String>,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The stable rule code.
    pub code: &'static str,
    /// Set by the runner from the rule's severity.
    pub severity: Severity,
    /// One sentence saying what is wrong.
    pub message: String,
    /// The thing the finding is about (prefix, metric, `<id>.<field>`, …).
    pub subject: String,
    /// Where the problem is.
    pub primary: Option<Anchor>,
    /// Other places that explain it (e.g. the policy entry, "declared here").
    pub related: Vec<Anchor>,
    /// What to do about it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A finding of rule `code` about `subject`.
    pub fn new(code: &'static str, subject: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            subject: subject.into(),
            primary: None,
            related: Vec::new(),
            help: None,
        }
    }

    /// Points the finding at `anchor`.
    pub fn at(mut self, anchor: Anchor) -> Self {
        self.primary = Some(anchor);
        self
    }

    /// Adds an explaining location.
    pub fn related(mut self, anchor: Anchor) -> Self {
        self.related.push(anchor);
        self
    }

    /// Adds what to do about it.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Sort key giving a stable report order: by file, position, code, subject.
    pub fn sort_key(&self) -> (String, usize, usize, &'static str, String) {
        let (file, line, column) = self.primary.as_ref().map_or((String::new(), 0, 0), |a| {
            (a.file.clone(), a.range.line, a.range.column)
        });
        (file, line, column, self.code, self.subject.clone())
    }
}

impl Anchor {
    /// An anchor with a label.
    pub fn labeled(file: impl Into<String>, range: TextRange, label: impl Into<String>) -> Self {
        Anchor {
            file: file.into(),
            range,
            label: Some(label.into()),
        }
    }

    /// An anchor without a label.
    pub fn plain(file: impl Into<String>, range: TextRange) -> Self {
        Anchor {
            file: file.into(),
            range,
            label: None,
        }
    }
}
