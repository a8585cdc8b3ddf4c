//! The adoption and upkeep commands: `init`, `docs` and `policy import`.
//!
//! They live apart from `check` because they write files rather than judge
//! a tree; `cli` flattens [`ToolCommand`] into its subcommands and calls
//! [`run`]. Like the rest of the CLI they return a [`RunError`] (exit 2)
//! instead of exiting; `docs --check` on stale tables is exit 1.

use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;

use crate::base::error::RunError;
use crate::cli::Outcome;
use crate::commands::docs::{self, DocsOptions, Mode};
use crate::commands::init::{self, InitOptions};
use crate::commands::policy_import::{self, ImportOptions};

/// Subcommands that write policies and docs.
#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Write a starter policy from the cache prefixes, scan limits and metrics in a tree.
    Init {
        /// Root of the tree to scan.
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Where to write the policy [default: PATH/policy/dw-bounded-growth.toml].
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Overwrite an existing policy.
        #[arg(long)]
        force: bool,
    },
    /// Regenerate (--write) or verify (--check) the inventory tables in the operator docs.
    Docs(DocsArgs),
    /// Policy file conversions.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
}

/// `dwlint docs` arguments.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["write", "check"])))]
pub struct DocsArgs {
    /// Where to look for the policy (as `check` does); the docs are its [sources].docs.
    #[arg(default_value = ".")]
    path: PathBuf,
    /// Policy file; PATH is then the root its globs are relative to.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Rewrite the marked tables from the policy.
    #[arg(long)]
    write: bool,
    /// Exit 1 with a diff when a marked table differs from the policy.
    #[arg(long)]
    check: bool,
}

/// `dwlint policy …`
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Convert a reference-style PHP policy (config/dw-bounded-growth.php) to TOML.
    Import {
        /// The PHP file that returns the policy array.
        file: PathBuf,
        /// Write here instead of standard output.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Overwrite an existing --output file.
        #[arg(long, requires = "output")]
        force: bool,
        /// The tree to scan for `*_scan_limit` reads the PHP policy does not
        /// declare [default: ROOT for ROOT/config/FILE, else the current directory].
        #[arg(long, value_name = "PATH")]
        root: Option<PathBuf>,
    },
}

/// Runs one of the tool commands.
pub fn run(command: ToolCommand) -> Result<Outcome, RunError> {
    match command {
        ToolCommand::Init {
            path,
            policy,
            force,
        } => {
            let report = init::init(&InitOptions {
                root: path,
                policy,
                force,
            })?;
            print(&init::summary(&report))?;
            Ok(Outcome::Clean)
        }
        ToolCommand::Docs(args) => {
            let mode = if args.write { Mode::Write } else { Mode::Check };
            let report = docs::sync(&DocsOptions {
                root: args.path,
                policy: args.policy,
                mode,
            })?;
            print(&report.render())?;
            Ok(if report.is_stale() {
                Outcome::Findings
            } else {
                Outcome::Clean
            })
        }
        ToolCommand::Policy {
            command:
                PolicyCommand::Import {
                    file,
                    output,
                    force,
                    root,
                },
        } => {
            let shown = output.clone();
            let imported = policy_import::import(&ImportOptions {
                file,
                output,
                force,
                root,
            })?;
            match (&imported.toml, shown) {
                (Some(toml), _) => print(toml)?,
                (None, Some(path)) => print(&format!("wrote {}\n", path.display()))?,
                (None, None) => {}
            }
            // On stderr: stdout may be the policy itself.
            eprint!("{}", policy_import::summary(&imported));
            Ok(Outcome::Clean)
        }
    }
}

/// A closed pipe (`dwlint docs --check | head`) is the reader's choice.
fn print(text: &str) -> Result<(), RunError> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(RunError::Output(e)),
        _ => Ok(()),
    }
}
