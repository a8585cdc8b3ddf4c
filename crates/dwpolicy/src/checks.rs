//! Review checks that need nothing but the policy itself.
//!
//! The gate reports these as rule findings (each has a rule file in dwlint
//! that documents it); the engine refuses to start on any of them. Keeping the
//! logic here is what makes the two agree.

use crate::model::*;
use crate::span::{Span, Spanned};

/// The stable code of a policy-only finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyFindingCode {
    /// `missing-review-field`
    MissingReviewField,
    /// `cache-prefix-namespace`
    CachePrefixNamespace,
    /// `invalid-metric-name`
    InvalidMetricName,
    /// `unreviewed-cardinality-class`
    UnreviewedCardinalityClass,
    /// `overlapping-cache-prefix`
    OverlappingCachePrefix,
}

impl PolicyFindingCode {
    /// The rule code, as printed and as used in `[rules]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingReviewField => "missing-review-field",
            Self::CachePrefixNamespace => "cache-prefix-namespace",
            Self::InvalidMetricName => "invalid-metric-name",
            Self::UnreviewedCardinalityClass => "unreviewed-cardinality-class",
            Self::OverlappingCachePrefix => "overlapping-cache-prefix",
        }
    }
}

/// One review problem in a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFinding {
    /// Which check found it.
    pub code: PolicyFindingCode,
    /// What the finding is about (`<id>.<field>`, a prefix, a metric, …).
    pub subject: String,
    /// One sentence saying what is wrong.
    pub message: String,
    /// Where in the policy file.
    pub span: Span,
    /// A second place in the policy file that explains the first.
    pub related: Option<(Span, String)>,
    /// What to do about it.
    pub help: Option<String>,
}

/// Every policy-only finding, in check order.
pub fn all(policy: &Policy) -> Vec<PolicyFinding> {
    let mut out = missing_review_fields(policy);
    out.extend(cache_prefix_namespace(policy));
    out.extend(invalid_metric_names(policy));
    out.extend(unreviewed_cardinality_classes(policy));
    out.extend(overlapping_cache_prefixes(policy));
    out
}

/// Whether a review sentence still needs a person: blank or a `TODO` left by `dwlint init`.
pub fn is_unreviewed_text(text: &str) -> bool {
    let text = text.trim();
    text.is_empty() || text.starts_with("TODO")
}

struct FieldCheck<'a> {
    entry: &'a Spanned<String>,
    out: Vec<PolicyFinding>,
}

impl FieldCheck<'_> {
    fn text(&mut self, field: &str, value: &Option<Spanned<String>>) {
        match value {
            None => self.missing(field),
            Some(v) if is_unreviewed_text(&v.value) => self.push(
                field,
                v.span,
                format!("`{}.{field}` is empty or still a TODO", self.entry.value),
            ),
            Some(_) => {}
        }
    }

    fn present<T>(&mut self, field: &str, value: &Option<T>) {
        if value.is_none() {
            self.missing(field);
        }
    }

    /// A missing `dimensions`, with the explicit form for "none".
    fn dimensions<T>(&mut self, value: &Option<T>, none_form: &str) {
        if value.is_none() {
            self.missing("dimensions");
            if let Some(finding) = self.out.last_mut() {
                finding.help = Some(format!(
                    "declare what varies for `{}`, or `{none_form}` to record that it was reviewed as having no dimensions; see docs/policy.md",
                    self.entry.value
                ));
            }
        }
    }

    fn missing(&mut self, field: &str) {
        let message = format!("`{}` has no `{field}`", self.entry.value);
        self.push(field, self.entry.span, message);
    }

    fn push(&mut self, field: &str, span: Span, message: String) {
        self.out.push(PolicyFinding {
            code: PolicyFindingCode::MissingReviewField,
            subject: format!("{}.{field}", self.entry.value),
            message,
            span,
            related: None,
            help: Some(format!(
                "write a reviewed `{field}` for `{}`; see docs/policy.md",
                self.entry.value
            )),
        });
    }
}

/// Entries that lack a required review field or leave one empty.
pub fn missing_review_fields(policy: &Policy) -> Vec<PolicyFinding> {
    let mut out = Vec::new();
    for entry in &policy.cache_keys {
        let mut check = FieldCheck {
            entry: &entry.id,
            out: Vec::new(),
        };
        check.text("owner", &entry.owner);
        check.text("prefix", &entry.prefix);
        check.dimensions(&entry.dimensions, "dimensions = []");
        check.text("ttl", &entry.ttl);
        check.text("bound", &entry.bound);
        check.text("admission", &entry.admission);
        check.text("eviction", &entry.eviction);
        out.extend(check.out);
    }
    for entry in &policy.scan_limits {
        let mut check = FieldCheck {
            entry: &entry.id,
            out: Vec::new(),
        };
        check.text("owner", &entry.owner);
        check.text("config_key", &entry.config_key);
        check.present("default", &entry.default);
        check.text("bound", &entry.bound);
        out.extend(check.out);
    }
    for entry in &policy.metrics {
        let mut check = FieldCheck {
            entry: &entry.name,
            out: Vec::new(),
        };
        check.text("owner", &entry.owner);
        check.text("surface", &entry.surface);
        check.dimensions(&entry.dimensions, "dimensions = {}");
        check.text("cardinality", &entry.cardinality);
        // A capped label set needs a story for which series survive the cap
        // and how the rest are counted; fixed inventories and unlabeled
        // series do not.
        if entry
            .label_dimensions()
            .any(|d| d.class() == CardinalityClass::Bounded)
        {
            check.text("selection", &entry.selection);
            check.text("suppression", &entry.suppression);
        }
        out.extend(check.out);
    }
    out
}

/// Declared prefixes outside the cache namespace or not ending in `:`.
pub fn cache_prefix_namespace(policy: &Policy) -> Vec<PolicyFinding> {
    let namespace = &policy.settings.cache_namespace;
    policy
        .cache_keys
        .iter()
        .filter_map(|entry| {
            let prefix = entry.prefix.as_ref()?;
            let value = &prefix.value;
            let problem = if value.trim().is_empty() {
                return None; // reported as a missing review field
            } else if !value.starts_with(namespace.as_str()) {
                format!("prefix `{value}` is outside the `{namespace}` cache namespace")
            } else if value == namespace {
                format!("prefix `{value}` claims the whole `{namespace}` namespace")
            } else if !value.ends_with(':') {
                format!("prefix `{value}` does not end in `:`")
            } else {
                return None;
            };
            Some(PolicyFinding {
                code: PolicyFindingCode::CachePrefixNamespace,
                subject: value.clone(),
                message: problem,
                span: prefix.span,
                related: None,
                help: Some(format!(
                    "declare a prefix of the form `{namespace}<family>:` so one family owns every key under it"
                )),
            })
        })
        .collect()
}

/// Whether `name` is `<prefix>[a-z0-9_]+`.
pub fn is_valid_metric_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// Metric keys that are not `<prefix>[a-z0-9_]+`.
pub fn invalid_metric_names(policy: &Policy) -> Vec<PolicyFinding> {
    let prefix = &policy.settings.metric_prefix;
    policy
        .metrics
        .iter()
        .filter(|m| !is_valid_metric_name(&m.name.value, prefix))
        .map(|m| PolicyFinding {
            code: PolicyFindingCode::InvalidMetricName,
            subject: m.name.value.clone(),
            message: format!(
                "metric name `{}` does not match `^{prefix}[a-z0-9_]+$`",
                m.name.value
            ),
            span: m.name.span,
            related: None,
            help: Some(format!(
                "use the exact Prometheus name, starting with `{prefix}`, in lower snake case"
            )),
        })
        .collect()
}

/// Dimensions whose class is outside the reviewed taxonomy.
pub fn unreviewed_cardinality_classes(policy: &Policy) -> Vec<PolicyFinding> {
    let mut out = Vec::new();
    for metric in &policy.metrics {
        for dimension in metric.dimension_list() {
            if dimension.class().is_reviewed() {
                continue;
            }
            out.push(PolicyFinding {
                code: PolicyFindingCode::UnreviewedCardinalityClass,
                subject: format!("{}.{}", metric.name.value, dimension.name.value),
                message: format!(
                    "dimension `{}` of `{}` has class \"{}\", which is not in the reviewed taxonomy",
                    dimension.name.value, metric.name.value, dimension.class.value
                ),
                span: dimension.class.span,
                related: None,
                help: Some(
                    "use bounded_* (capped labels), finite_* (fixed inventory), request_scope_* or *_no_label (not a label)".into(),
                ),
            });
        }
    }
    out
}

/// Declared prefixes that are a prefix of another declared prefix.
pub fn overlapping_cache_prefixes(policy: &Policy) -> Vec<PolicyFinding> {
    let prefixes: Vec<(&CacheKeyPolicy, &Spanned<String>)> = policy
        .cache_keys
        .iter()
        .filter_map(|c| {
            c.prefix
                .as_ref()
                .filter(|p| !p.value.is_empty())
                .map(|p| (c, p))
        })
        .collect();
    // Where each prefix is first declared: a covering prefix is looked up
    // by each leading part of a prefix, not compared with every other one
    // (thousands of entries made that quadratic).
    // Only a leading part as long as some prefix can be one, so the
    // lookups go by the prefixes' distinct lengths, longest first.
    let mut first: foldhash::HashMap<&str, usize> = foldhash::HashMap::default();
    first.reserve(prefixes.len());
    let mut lengths = Vec::new();
    for (j, (_, prefix)) in prefixes.iter().enumerate() {
        first.entry(prefix.value.as_str()).or_insert(j);
        lengths.push(prefix.value.len());
    }
    lengths.sort_unstable_by(|a, b| b.cmp(a));
    lengths.dedup();
    let mut out = Vec::new();
    for (i, (entry, prefix)) in prefixes.iter().enumerate() {
        // One finding per shadowed entry, against the nearest covering prefix
        // (the longest; the first declared among equals): reporting every
        // pair grows quadratically with nested or repeated prefixes.
        let value = prefix.value.as_str();
        let nearest = lengths
            .iter()
            .skip_while(|&&k| k > value.len())
            .find_map(|&k| {
                let j = *first.get(value.get(..k)?)?;
                (j != i && (k < value.len() || j < i)).then(|| &prefixes[j])
            });
        if let Some((other, other_prefix)) = nearest {
            out.push(PolicyFinding {
                code: PolicyFindingCode::OverlappingCachePrefix,
                subject: prefix.value.clone(),
                message: format!(
                    "prefix `{}` of `{}` is covered by `{}` of `{}`, so key ownership is ambiguous",
                    prefix.value, entry.id.value, other_prefix.value, other.id.value
                ),
                span: prefix.span,
                related: Some((
                    other_prefix.span,
                    format!("`{}` declared here", other.id.value),
                )),
                help: Some("merge the two entries or give them disjoint prefixes".into()),
            });
        }
    }
    out
}
