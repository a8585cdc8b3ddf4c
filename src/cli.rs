//! The command line: argument parsing and dispatch.
//!
//! Everything here returns a [`RunError`] instead of exiting, so `main` is
//! the only place that knows about exit codes.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::check::{check, CheckOptions};
use crate::error::RunError;
use crate::report::{self, human::Style};
use crate::rules;

/// The bounded-growth gate: every cache prefix and metric label must have a
/// reviewed policy before it ships.
#[derive(Debug, Parser)]
#[command(name = "dwlint", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a tree's cache prefixes, metrics and docs against its policy.
    Check(CheckArgs),
    /// Print a rule's documentation.
    Explain {
        /// The rule code, e.g. `label-mismatch`.
        code: String,
    },
    /// List every rule with its default severity.
    Rules,
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// Root of the tree to check; globs and repo-relative paths are relative to it.
    #[arg(default_value = ".")]
    path: PathBuf,
    /// Policy file [default: PATH/policy/dw-bounded-growth.toml].
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// When to use colours (NO_COLOR is honoured under `auto`).
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Human,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// What a successful run concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No error-level finding.
    Clean,
    /// At least one error-level finding.
    Findings,
}

fn style(choice: ColorChoice) -> Style {
    let color = match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    };
    Style { color }
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<Outcome, (RunError, Style)> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Check(args) => {
            let style = style(args.color);
            let options = CheckOptions {
                root: args.path,
                policy: args.policy,
            };
            let report = check(&options).map_err(|e| (e, style))?;
            let written = match args.format {
                Format::Human => report::human::write(&report, style, &mut out),
                Format::Json => report::json::write(&report, &mut out),
            };
            // A closed pipe (`dwlint check | head`) is the reader's choice, not a failure.
            match written {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    return Err((RunError::Output(e), style))
                }
                _ => {}
            }
            Ok(if report.has_errors() {
                Outcome::Findings
            } else {
                Outcome::Clean
            })
        }
        Command::Explain { code } => {
            let rule = rules::find(&code).ok_or_else(|| {
                let suggestion = rules::closest_code(&code).map(str::to_owned);
                (
                    RunError::UnknownRule { code, suggestion },
                    Style { color: false },
                )
            })?;
            let text = format!(
                "# {}\n\nDefault severity: {}\n\n{}",
                rule.code,
                rule.default_severity.as_str(),
                rule.doc()
            );
            out.write_all(text.as_bytes())
                .map_err(|e| (RunError::Output(e), Style { color: false }))?;
            Ok(Outcome::Clean)
        }
        Command::Rules => {
            let mut text = String::new();
            for rule in rules::RULES {
                text.push_str(&format!(
                    "{:<30} {:<8} {}\n",
                    rule.code,
                    rule.default_severity.as_str(),
                    rule.summary()
                ));
            }
            out.write_all(text.as_bytes())
                .map_err(|e| (RunError::Output(e), Style { color: false }))?;
            Ok(Outcome::Clean)
        }
    }
}
