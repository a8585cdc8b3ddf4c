//! The `dwlint evidence …` command line: arguments and report writing.

use std::path::PathBuf;

use std::sync::OnceLock;

use clap::builder::PossibleValue;
use clap::{Subcommand, ValueEnum};

use crate::commands::outcome::Outcome;
use crate::commands::single_report;
use crate::report::{self, Format};

use super::{verify, EvidenceError, VerifyOptions};

/// `dwlint evidence …`
#[derive(Debug, Subcommand)]
pub enum EvidenceCommand {
    /// Re-check a soak artifact (summary.json) against the trusted_long_soak_v1 profile.
    #[command(after_help = "\
Exit 0: the artifact is trusted evidence. 1: it is not (each failed condition is a \
finding). 2: the artifact or the policy could not be read.")]
    Verify(VerifyArgs),
}

/// `dwlint evidence verify` arguments.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The artifact written by dwsoak.
    #[arg(default_value = "build/perf/summary.json")]
    summary: PathBuf,
    /// Policy file whose digest and cache inventory the artifact must match
    /// [default: found from the current directory upward, as for `check`].
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The repository (owner/name) a trusted soak must come from.
    #[arg(
        long,
        value_name = "OWNER/NAME",
        env = "DW_PERF_TRUSTED_REPOSITORY",
        default_value = dwevidence::profile::DEFAULT_REPOSITORY
    )]
    repository: String,
    /// The pinned server image (`<name>[:<tag>]@sha256:<digest>`) the artifact
    /// must have run; without it the artifact's own pin is matched against
    /// the server it reports.
    #[arg(long, value_name = "REFERENCE", env = "DW_SERVER_IMAGE")]
    server_image: Option<String>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = EvidenceFormat::Report(Format::Human))]
    format: EvidenceFormat,
    /// Write the report to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `check`'s formats, plus the self-contained HTML report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvidenceFormat {
    /// One of `check`'s report formats.
    Report(Format),
    /// One self-contained HTML page.
    Html,
}

impl ValueEnum for EvidenceFormat {
    fn value_variants<'a>() -> &'a [Self] {
        static VARIANTS: OnceLock<Vec<EvidenceFormat>> = OnceLock::new();
        VARIANTS.get_or_init(|| {
            Format::value_variants()
                .iter()
                .map(|f| EvidenceFormat::Report(*f))
                .chain([EvidenceFormat::Html])
                .collect()
        })
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self {
            EvidenceFormat::Report(format) => format.to_possible_value(),
            EvidenceFormat::Html => Some(PossibleValue::new("html").help(
                "One self-contained HTML page: the verdict, every condition, and charts from the samples.jsonl next to the summary",
            )),
        }
    }
}

/// Runs an evidence command; `color` is `--color` as resolved for standard
/// output.
pub fn run(command: EvidenceCommand, color: bool) -> Result<Outcome, EvidenceError> {
    let EvidenceCommand::Verify(args) = command;
    let verified = verify(&VerifyOptions {
        summary: args.summary.clone(),
        root: PathBuf::from("."),
        policy: args.policy.clone(),
        repository: args.repository.clone(),
        server_image: args.server_image.clone().filter(|s| !s.trim().is_empty()),
    })?;
    let notes = single_report::write_to(args.output.as_ref(), color, |style, out| {
        match args.format {
            EvidenceFormat::Report(format) => report::write(format, &verified.report, style, out),
            EvidenceFormat::Html => {
                let (page, notes) = super::html_report(&args.summary, &verified);
                out.write_all(page.as_bytes())?;
                Ok(notes)
            }
        }
    })?;
    single_report::warn(notes);
    Ok(if verified.trusted() {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}
