//! The command line: argument parsing and dispatch, the top of the library.
//!
//! Everything here returns a [`Failure`] instead of exiting, so `main` is
//! the only place that knows about exit codes. The clap definition is also
//! the source of the shell completions and the man page, so they cannot
//! drift from the real options. It may use every layer below it; none of
//! them uses it.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::base::error::RunError;
use crate::commands::check::baseline::{self, Baseline};
use crate::commands::check::output::{self, Destination, Sink};
use crate::commands::check::{check, CheckOptions};
use crate::commands::docs::{self, DocsError, DocsOptions, Mode};
use crate::commands::evidence::{self, EvidenceCommand, EvidenceError};
use crate::commands::explain;
use crate::commands::init::{self, InitError, InitOptions};
use crate::commands::live::{self, LiveArgs, LiveError};
use crate::commands::outcome::{self as stdout, Outcome};
use crate::commands::policy_import::{self, ImportError, ImportOptions};
use crate::discover::changed::{Mode as ChangedMode, Selection};
use crate::report::model::CheckReport;
use crate::report::{self, human::Style, Format};
use crate::rules::config::{Level, Overrides};

/// The bounded-growth gate: every cache prefix and metric label must have a
/// reviewed policy before it ships.
#[derive(Debug, Parser)]
#[command(name = "dwlint", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// When to use colours (NO_COLOR is honoured under `auto`).
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a tree's cache prefixes, metrics and docs against its policy.
    Check(CheckArgs),
    /// Print a rule's documentation.
    Explain {
        /// The rule code, e.g. `label-mismatch`.
        #[arg(value_parser = RuleCode { warnings: false }, hide_possible_values = true)]
        code: String,
    },
    /// List every rule with its default severity.
    Rules,
    /// Print a shell completion script (e.g. `dwlint completions bash > /etc/bash_completion.d/dwlint`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff): `dwlint man > dwlint.1`, `dwlint man check > dwlint-check.1`,
    /// or every page with `dwlint man --dir DIR`.
    Man {
        /// The subcommand whose page to print, e.g. `check` or `policy import`.
        #[arg(value_name = "SUBCOMMAND", conflicts_with = "dir")]
        subcommand: Vec<String>,
        /// Write dwlint.1 and one page per subcommand (dwlint-check.1, …) into DIR (created if missing).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    #[command(flatten)]
    Tools(ToolCommand),
    /// Scrape running servers' metrics and check them against the policy (the run-time twin of `check`).
    Live(LiveArgs),
    /// Soak evidence: verify a dwsoak artifact against the trusted_long_soak_v1 profile.
    Evidence {
        #[command(subcommand)]
        command: EvidenceCommand,
    },
}

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
        /// Overwrite an existing policy, keeping its [settings].
        #[arg(long)]
        force: bool,
        /// The cache-key namespace to look for and write to [settings]
        /// [default: server:].
        #[arg(long, value_name = "NAMESPACE")]
        cache_prefix: Option<String>,
        /// The metric-name prefix to look for and write to [settings]
        /// [default: dw_].
        #[arg(long, value_name = "PREFIX")]
        metric_prefix: Option<String>,
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

#[derive(Debug, clap::Args)]
#[command(after_help = "\
PATH is the root of the tree (default: found from the current directory, see \
--policy). When the first path is a file, every path is a FILE and the root is \
the current directory. Given FILEs (as pre-commit passes them), file-local \
findings are reported only for them; tree-wide rules still check the whole tree.")]
struct CheckArgs {
    /// Root of the tree to check; globs and repo-relative paths are relative to it.
    #[arg(value_name = "PATH")]
    path: Option<PathBuf>,
    /// Limit file-local findings to these files (paths from the current directory).
    #[arg(value_name = "FILES")]
    files: Vec<PathBuf>,
    /// Policy file [default: the first policy/dw-bounded-growth.toml, dwlint.toml or
    /// .dwlint.toml from PATH upward, whose directory becomes the root].
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Report format written to standard output (or to a bare `--output FILE`).
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Write a report to a file: `FILE` (the --format report) or `FORMAT=FILE`,
    /// repeatable; `-` is standard output.
    #[arg(long, short = 'o', value_name = "[FORMAT=]FILE")]
    output: Vec<String>,
    /// Report file-local findings only for files changed since REV (git),
    /// including staged, unstaged and untracked changes.
    #[arg(long, value_name = "REV")]
    changed_since: Option<String>,
    /// Allow a rule (do not run it); `warnings` allows every warning.
    #[arg(short = 'A', long = "allow", value_name = "CODE",
          value_parser = RuleCode { warnings: true }, hide_possible_values = true)]
    allow: Vec<String>,
    /// Make a rule a warning.
    #[arg(short = 'W', long = "warn", value_name = "CODE",
          value_parser = RuleCode { warnings: true }, hide_possible_values = true)]
    warn: Vec<String>,
    /// Make a rule an error; `-D warnings` makes every warning an error.
    #[arg(short = 'D', long = "deny", value_name = "CODE",
          value_parser = RuleCode { warnings: true }, hide_possible_values = true)]
    deny: Vec<String>,
    /// Skip (with an `unreadable-file` warning) files larger than SIZE: bytes,
    /// or with a K, M or G suffix (powers of 1024).
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    max_file_size: u64,
    /// Print how long each phase of the run took to standard error.
    #[arg(long)]
    timings: bool,
    /// In the human report, draw every finding (by default a rule with
    /// more than five shows its first three and a count).
    #[arg(long, short = 'v')]
    verbose: bool,
    /// Leave out the findings recorded in FILE (by --write-baseline): only
    /// new findings are reported and fail the run.
    #[arg(long, value_name = "FILE", conflicts_with = "write_baseline")]
    baseline: Option<PathBuf>,
    /// Record every finding of this run in FILE and report none of them
    /// (exit 0); later runs pass it to --baseline.
    #[arg(long, value_name = "FILE")]
    write_baseline: Option<PathBuf>,
    /// `-A/-W/-D` in command-line order, filled from the raw matches
    /// because the last flag for a code wins.
    #[arg(skip)]
    levels: Vec<(Level, String)>,
}

/// A rule code argument: any text is accepted (an unknown code gets
/// dwlint's own error with a suggestion), but the codes are offered as
/// possible values, so shell completions list them.
#[derive(Debug, Clone, Copy)]
struct RuleCode {
    /// Whether `warnings` (every warning) is a value too.
    warnings: bool,
}

impl clap::builder::TypedValueParser for RuleCode {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let warnings = self.warnings.then_some("warnings");
        let codes = explain::every_rule().map(|r| r.code).chain(warnings);
        Some(Box::new(codes.map(clap::builder::PossibleValue::new)))
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// Why a command could not be completed: a failure of the run that every
/// command shares, or one of a command's own. `main` maps each to its exit
/// code.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The run itself failed (arguments, tree, policy, report output).
    #[error(transparent)]
    Run(#[from] RunError),
    /// `dwlint init` could not write its policy.
    #[error(transparent)]
    Init(#[from] InitError),
    /// `dwlint docs` could not sync the docs.
    #[error(transparent)]
    Docs(#[from] DocsError),
    /// `dwlint policy import` could not convert the file.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// `dwlint evidence verify` could not read the artifact.
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    /// `dwlint live` could not scrape a URL.
    #[error(transparent)]
    Live(#[from] LiveError),
}

impl Failure {
    /// The run's own failure underneath, which the human renderer frames
    /// (an invalid policy gets one code frame per problem).
    fn run_error(&self) -> Option<&RunError> {
        match self {
            Failure::Run(e)
            | Failure::Init(InitError::Run(e))
            | Failure::Docs(DocsError::Run(e))
            | Failure::Import(ImportError::Run(e) | ImportError::Init(InitError::Run(e)))
            | Failure::Evidence(EvidenceError::Run(e))
            | Failure::Live(LiveError::Run(e)) => Some(e),
            _ => None,
        }
    }

    /// Writes the failure for a person, as every command reports one.
    pub fn write(&self, style: Style, out: &mut dyn Write) -> std::io::Result<()> {
        match self.run_error() {
            Some(error) => report::human::write_run_error(error, style, out),
            None => {
                let help = match self {
                    Failure::Docs(e) => e.help(),
                    _ => None,
                };
                report::human::write_error(&self.to_string(), help.as_deref(), style, out)
            }
        }
    }
}

/// Parses the process's arguments.
pub fn parse() -> Result<Cli, clap::Error> {
    parse_from(std::env::args_os())
}

/// Parses `args` (the first is the program name).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = Cli::command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (Command::Check(args), Some(("check", sub))) = (&mut cli.command, matches.subcommand()) {
        args.levels = ordered_levels(sub);
    }
    Ok(cli)
}

fn ordered_levels(matches: &ArgMatches) -> Vec<(Level, String)> {
    let mut levels = Vec::new();
    for (id, level) in [
        ("allow", Level::Allow),
        ("warn", Level::Warn),
        ("deny", Level::Deny),
    ] {
        if let (Some(indices), Some(codes)) =
            (matches.indices_of(id), matches.get_many::<String>(id))
        {
            levels.extend(indices.zip(codes).map(|(i, code)| (i, level, code.clone())));
        }
    }
    levels.sort_by_key(|(i, _, _)| *i);
    levels
        .into_iter()
        .map(|(_, level, code)| (level, code))
        .collect()
}

/// `16M`, `512K`, `1G`, `100`: a size in bytes, suffixes in powers of 1024.
fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let (digits, shift) = match trimmed.char_indices().last() {
        Some((i, 'K' | 'k')) => (&trimmed[..i], 10),
        Some((i, 'M' | 'm')) => (&trimmed[..i], 20),
        Some((i, 'G' | 'g')) => (&trimmed[..i], 30),
        _ => (trimmed, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("`{text}` is not a size (bytes, or a number with K, M or G)"))
}

fn use_color(choice: ColorChoice, to_stdout: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            to_stdout
                && std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}

/// Whether a failure on standard error is coloured.
fn stderr_color(choice: ColorChoice) -> bool {
    match choice {
        ColorChoice::Auto => {
            std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
        other => use_color(other, false),
    }
}

/// Runs the parsed command line; a failure comes with the style to write
/// it in on standard error.
pub fn run(cli: Cli) -> Result<Outcome, (Failure, Style)> {
    let color = cli.color;
    let plain = Style::new(stderr_color(color));
    dispatch(cli.command, color).map_err(|failure| (failure, plain))
}

fn dispatch(command: Command, color: ColorChoice) -> Result<Outcome, Failure> {
    Ok(match command {
        Command::Check(args) => run_check(args, color)?,
        Command::Explain { code } => print(explain::explain(code)?.as_bytes())?,
        Command::Rules => print(explain::list().as_bytes())?,
        Command::Completions { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "dwlint", &mut text);
            print(&text)?
        }
        Command::Man { subcommand, dir } => man(&subcommand, dir.as_deref())?,
        Command::Tools(ToolCommand::Init {
            path,
            policy,
            force,
            cache_prefix,
            metric_prefix,
        }) => init::run(&InitOptions {
            root: path,
            policy,
            force,
            cache_namespace: cache_prefix,
            metric_prefix,
        })?,
        Command::Tools(ToolCommand::Docs(args)) => docs::run(&DocsOptions {
            root: args.path,
            policy: args.policy,
            mode: if args.write { Mode::Write } else { Mode::Check },
        })?,
        Command::Tools(ToolCommand::Policy {
            command:
                PolicyCommand::Import {
                    file,
                    output,
                    force,
                    root,
                },
        }) => policy_import::run(&ImportOptions {
            file,
            output,
            force,
            root,
        })?,
        Command::Evidence { command } => evidence::run(command, use_color(color, true))?,
        Command::Live(args) => live::run(args, use_color(color, true))?,
    })
}

/// Writes a command's whole answer to standard output (see
/// [`stdout::print`]).
fn print(bytes: &[u8]) -> Result<Outcome, RunError> {
    stdout::print(bytes).map(|()| Outcome::Clean)
}

fn selection(args: &CheckArgs) -> Result<(PathBuf, Selection), RunError> {
    let mut files = args.files.clone();
    let root = match &args.path {
        // pre-commit passes only files: the first is not a root.
        Some(path) if path.is_file() => {
            files.insert(0, path.clone());
            PathBuf::from(".")
        }
        Some(path) => path.clone(),
        None => PathBuf::from("."),
    };
    let selection = match (&args.changed_since, files.is_empty()) {
        (Some(_), false) => {
            return Err(RunError::Usage(
                "give either --changed-since or FILES, not both".into(),
            ))
        }
        (Some(rev), true) => Selection::ChangedSince(rev.clone()),
        (None, false) => Selection::Files(files),
        (None, true) => Selection::Full,
    };
    Ok((root, selection))
}

/// `dwlint man [SUBCOMMAND…] [--dir DIR]`.
fn man(path: &[String], dir: Option<&std::path::Path>) -> Result<Outcome, RunError> {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    if let Some(dir) = dir {
        let failed = |source| RunError::OutputFile {
            path: dir.to_path_buf(),
            source,
        };
        // Created with its parents, as `mkdir -p` would: a packaging
        // script's `--dir target/man/man1` need not exist yet.
        std::fs::create_dir_all(dir).map_err(failed)?;
        clap_mangen::generate_to(command, dir).map_err(failed)?;
        return Ok(Outcome::Clean);
    }
    for name in path {
        let Some(found) = command.find_subcommand(name).cloned() else {
            let known: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
            return Err(RunError::Usage(format!(
                "`{}` has no subcommand `{name}` (known: {})",
                command.get_display_name().unwrap_or(command.get_name()),
                known.join(", ")
            )));
        };
        command = found;
    }
    let mut text = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut text)
        .map_err(RunError::Output)?;
    print(&text)
}

fn run_check(args: CheckArgs, color: ColorChoice) -> Result<Outcome, RunError> {
    let sinks = output::plan(args.format, &args.output)?;
    let (root, selection) = selection(&args)?;
    let options = CheckOptions {
        root,
        policy: args.policy.clone(),
        overrides: Overrides::new(args.levels.clone())?,
        selection,
        max_file_bytes: args.max_file_size,
    };
    let baseline = args.baseline.as_deref().map(Baseline::read).transpose()?;
    let mut report = check(&options)?;
    output::refuse_overwriting(&sinks, &report.inputs)?;
    let mut notes = report.notes.clone();
    let mut told = Vec::new();
    if let Some(path) = &args.write_baseline {
        if report.inputs.contains(path) {
            return Err(RunError::Usage(format!(
                "`--write-baseline {}` would overwrite a file this run checks; write the baseline elsewhere",
                report::printable(&path.to_string_lossy())
            )));
        }
        let recorded = baseline::write(path, &report)?;
        report.diagnostics.clear();
        told.push(format!(
            "dwlint: recorded {recorded} finding(s) in the baseline {0}; `dwlint check --baseline {0}` reports only new ones",
            report::printable(&path.to_string_lossy())
        ));
    }
    if let Some(baseline) = &baseline {
        let applied = baseline.apply(&mut report);
        let shown = report::printable(&baseline.path().to_string_lossy()).into_owned();
        if applied.known > 0 {
            told.push(format!(
                "dwlint: {} finding(s) known to the baseline {shown} not reported",
                applied.known
            ));
        }
        // Outside a whole-tree run, an entry about a file not looked at is
        // not evidence that its finding was fixed.
        if matches!(report.mode, ChangedMode::Full) && !applied.stale.is_empty() {
            const SHOWN: usize = 3;
            let more = applied.stale.len().saturating_sub(SHOWN);
            notes.push(format!(
                "{} baseline {} a finding (fixed?): {}{}; rewrite it with `dwlint check --write-baseline {shown}`",
                applied.stale.len(),
                if applied.stale.len() == 1 {
                    "entry no longer matches"
                } else {
                    "entries no longer match"
                },
                applied.stale[..applied.stale.len().min(SHOWN)].join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() },
            ));
        }
    }
    for sink in &sinks {
        notes.extend(write_sink(&report, sink, color, args.verbose)?);
    }
    if sinks.iter().any(|s| s.format == Format::Github) {
        if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
            // The annotations are already out; a summary that cannot be
            // written is worth a warning, not a different verdict.
            if let Err(e) = append_step_summary(&report, &PathBuf::from(&path)) {
                notes.push(format!(
                    "cannot append the job summary to {}: {e}",
                    PathBuf::from(path).display()
                ));
            }
        }
    }
    let mut stderr = std::io::stderr().lock();
    for line in told {
        let _ = writeln!(stderr, "{line}");
    }
    for note in notes {
        let _ = writeln!(stderr, "warning: {note}");
    }
    if args.timings {
        let _ = stderr.write_all(report.timings.render().as_bytes());
    }
    Ok(if report.has_errors() {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}

fn write_sink(
    report: &CheckReport,
    sink: &Sink,
    color: ColorChoice,
    verbose: bool,
) -> Result<Vec<String>, RunError> {
    match &sink.destination {
        Destination::Stdout => {
            let style = Style {
                verbose,
                ..Style::new(use_color(color, true))
            };
            let mut out = BufWriter::new(std::io::stdout().lock());
            match report::write(sink.format, report, style, &mut out) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Vec::new()),
                Err(e) => Err(RunError::Output(e)),
                Ok(notes) => Ok(notes),
            }
        }
        Destination::File(path) => {
            let style = Style {
                verbose,
                ..Style::new(use_color(color, false))
            };
            let failed = |source| RunError::OutputFile {
                path: path.clone(),
                source,
            };
            let file = File::create(path).map_err(failed)?;
            let mut out = BufWriter::new(file);
            report::write(sink.format, report, style, &mut out).map_err(failed)
        }
    }
}

fn append_step_summary(report: &CheckReport, path: &PathBuf) -> std::io::Result<()> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let mut out = BufWriter::new(file);
    report::github::write_step_summary(report, &mut out)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_args(args: &[&str]) -> CheckArgs {
        let cli = parse_from(std::iter::once("dwlint").chain(args.iter().copied())).unwrap();
        match cli.command {
            Command::Check(args) => args,
            other => panic!("not check: {other:?}"),
        }
    }

    #[test]
    fn severity_flags_keep_their_command_line_order() {
        let args = check_args(&[
            "check", "-D", "a", "-A", "b", "--warn", "c", "-D", "warnings",
        ]);
        assert_eq!(
            args.levels,
            [
                (Level::Deny, "a".to_owned()),
                (Level::Allow, "b".to_owned()),
                (Level::Warn, "c".to_owned()),
                (Level::Deny, "warnings".to_owned()),
            ]
        );
    }

    #[test]
    fn a_file_first_makes_every_path_a_file() {
        let manifest = env!("CARGO_MANIFEST_DIR");
        let lib = format!("{manifest}/src/lib.rs");
        let (root, files) = selection(&check_args(&["check", &lib, "x.rs"])).unwrap();
        assert_eq!(root, PathBuf::from("."));
        assert_eq!(
            files,
            Selection::Files(vec![PathBuf::from(&lib), PathBuf::from("x.rs")])
        );
        let whole = selection(&check_args(&["check", manifest])).unwrap();
        assert_eq!(whole, (PathBuf::from(manifest), Selection::Full));
        let both = selection(&check_args(&[
            "check",
            manifest,
            "a.rs",
            "--changed-since",
            "HEAD",
        ]));
        assert!(both.is_err());
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("100"), Ok(100));
        for bad in ["", "M", "-1", "1T", "99999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
