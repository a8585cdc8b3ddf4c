//! `dwlint live URL…`: the run-time twin of `check`.
//!
//! `check` reads what the source *would* emit; this scrapes what a running
//! server *does* emit and checks it against the same policy: an undeclared
//! metric, a label that is not a declared dimension, a not-a-label
//! dimension emitted as a label, more series than the declared cap, a
//! capped metric without its suppression report. The scraping and the
//! checks are `dwevidence::live`, shared with the soak harness, which runs
//! them at every sample; this module turns them into findings so every
//! report format and exit code of `check` applies (an unreachable URL, or
//! one answering malformed exposition, is exit 2, like an unreadable tree).

use std::path::PathBuf;
use std::sync::OnceLock;

use dwevidence::live::{self, LiveCode, ScrapeError};

use crate::base::diagnostic::{Anchor, Diagnostic};
use crate::base::error::RunError;
use crate::base::line_index::TextRange;
use crate::commands::outcome::Outcome;
use crate::commands::single_report;
use crate::discover;
use crate::report::model::CheckReport;
use crate::report::{self, Format};
use crate::rules::config;
use crate::rules::Rule;

/// `dwlint live` arguments.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
A URL without a path (http://127.0.0.1:8080) is a dwserver: its \
/api/system/prometheus-metrics and /api/system/metrics are scraped for every \
--namespace. A URL with a path (http://127.0.0.1:9464/metrics) is scraped as \
one Prometheus text endpoint. Exit 0: no finding; 1: findings; 2: a URL could \
not be scraped or answered text that is not Prometheus exposition (its line \
and column are named), or the policy could not be read.")]
pub struct LiveArgs {
    /// Servers or metric endpoints to scrape.
    #[arg(required = true, value_name = "URL")]
    urls: Vec<String>,
    /// Namespaces to scrape on each dwserver (the namespace is a query, never a label).
    #[arg(long, short = 'n', value_name = "NS", default_value = "default")]
    namespace: Vec<String>,
    /// Bearer token for servers that require one (the admin role reads /api/system/…).
    #[arg(long, env = "DWLINT_LIVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Policy file [default: found from the current directory upward, as for `check`].
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Write the report to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Why `live` could not check the servers (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A URL could not be scraped.
    #[error("cannot scrape: {0}")]
    Scrape(#[from] ScrapeError),
    /// A URL answered text that is not Prometheus exposition: checking the
    /// lines that could be read would pass on garbage.
    #[error("{url} is not Prometheus text exposition: {at}")]
    Malformed {
        /// The URL scraped.
        url: String,
        /// The first line that could not be read, and why.
        at: live::Malformed,
    },
    /// The run failed as any would: no policy, an invalid one, a report
    /// that cannot be written.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// The live finding codes as rules, for the reporters and `explain`.
pub fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        LiveCode::ALL
            .iter()
            .map(|code| {
                let doc = format!(
                    "//! ## What it does\n//!\n//! {}\n//!\n//! ## Why is this bad?\n//!\n//! {}\n//!\n//! ## Example\n//!\n//! `dwlint live http://127.0.0.1:8080 --namespace orders` scrapes both metric surfaces of a running dwserver for the namespace `orders`.\n",
                    code.what(),
                    code.why()
                );
                Rule::external(code.code(), Box::leak(doc.into_boxed_str()))
            })
            .collect()
    })
}

/// The live rule with `code`.
pub fn find_rule(code: &str) -> Option<&'static Rule> {
    rules().iter().find(|r| r.code == code)
}

/// Scrapes every URL and checks it; the findings in `check`'s report shape.
pub fn live(
    urls: &[String],
    namespaces: &[String],
    token: Option<&str>,
    policy: Option<&std::path::Path>,
) -> Result<CheckReport, LiveError> {
    let located = discover::locate(std::path::Path::new("."), policy)?;
    let policy_file = config::load_policy(&located.root, Some(&located.policy))?;
    let mut scrapes = Vec::new();
    for url in urls {
        scrapes.extend(live::scrape(url, namespaces, token)?);
    }
    if let Some(bad) = scrapes.iter().find(|s| s.exposition.malformed.is_some()) {
        return Err(LiveError::Malformed {
            url: bad.url.clone(),
            at: bad.exposition.malformed.clone().expect("found malformed"),
        });
    }
    let diagnostics = live::check(&policy_file.policy, &scrapes)
        .into_iter()
        .map(|f| {
            Diagnostic::new(code_str(f.code), f.subject, f.message)
                .at(Anchor::labeled(
                    f.surface,
                    TextRange::file_start(),
                    "scraped here",
                ))
                .help(help(f.code))
        })
        .collect();
    let inputs = scrapes.len() + scrapes.iter().filter(|s| s.json.is_some()).count();
    Ok(single_report::findings(
        diagnostics,
        rules(),
        inputs,
        policy_file.display_path.clone(),
        located.root,
    ))
}

fn code_str(code: LiveCode) -> &'static str {
    find_rule(code.code()).map_or("live", |r| r.code)
}

fn help(code: LiveCode) -> &'static str {
    match code {
        LiveCode::UndeclaredMetric => "declare the metric in the policy with its dimensions and review fields, or stop emitting it",
        LiveCode::UndeclaredLabel => "declare the dimension with a reviewed cardinality class, or drop the label",
        LiveCode::NotALabel => "keep request-scoped values in the request envelope (a query or payload field), not in labels",
        LiveCode::SeriesOverCap => "the emitter must cap the series set at the configured limit (never above the hard clamp) and report the rest as suppressed",
        LiveCode::MissingSuppressionReport => "publish cardinality.series_limits (limit, reported, suppressed_series) next to the capped series",
    }
}

/// Runs `dwlint live`; `color` is `--color` as resolved for standard output.
pub fn run(args: LiveArgs, color: bool) -> Result<Outcome, LiveError> {
    let report = live(
        &args.urls,
        &args.namespace,
        args.token.as_deref(),
        args.policy.as_deref(),
    )?;
    let notes = single_report::write_to(args.output.as_ref(), color, |style, out| {
        report::write(args.format, &report, style, out)
    })?;
    single_report::warn(notes);
    Ok(if report.has_errors() {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}
