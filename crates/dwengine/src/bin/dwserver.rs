//! `dwserver`: the standalone durable-workflow server.
//!
//! Configuration comes from a TOML file (`--config` / `DW_CONFIG`) and
//! `DW_*` environment variables, which override it (see
//! `dwengine::server::config`); `dwserver contract` prints every limit; `--dev` runs with a generated node id, an
//! in-memory store and no authentication. The first line on stdout is
//! `listening on <addr>`, so a supervisor (or a test) started with
//! `DW_BIND=127.0.0.1:0` learns the port. Logs go to stderr
//! (`dwengine::logging`).

/// Every Rust allocation of the server (requests, JSON, the store's rows)
/// on jemalloc: per-thread caches where glibc's arenas were contended
/// (crates/dwengine/Cargo.toml says what it measured).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use dwengine::logging::{log_startup, LogSettings, SERVER_TARGET};
use dwengine::server::{contract, Engine, Running, ServerConfig};

const USAGE: &str = "usage: dwserver [--dev] [--config FILE] [--log-format human|json]
       dwserver --version
       dwserver contract [--config FILE] [--format table|json|markdown] [--write FILE | --check FILE]
       dwserver evidence

  --config FILE (or DW_CONFIG): a TOML file with the keys of docs/contract.md; each DW_* variable
  overrides its key. Every bad value, from the file and the environment, is reported at once (exit 2).
  DW_SERVER_ID (required without --dev), DW_BIND (default 127.0.0.1:8080),
  DW_DATA_DIR (default $XDG_DATA_HOME/dwserver or ~/.local/share/dwserver),
  DW_DATABASE_PATH (default <DW_DATA_DIR>/dwserver.sqlite), DW_POLLING_CACHE_PATH, DW_REDIS_URL,
  DW_AUTH_WORKER_TOKENS / DW_AUTH_OPERATOR_TOKENS / DW_AUTH_ADMIN_TOKENS (comma-separated; one is required
  without --dev unless DW_AUTH=none), DW_ALLOWED_HOSTS, DW_SERVER_QUERY_TASKS_TIMEOUT, DW_MAX_UPDATE_WAIT_MS,
  and the DW_* limits (dwserver contract lists them). Logs go to stderr: RUST_LOG (default info) sets the level,
  DW_LOG_FORMAT=json or --log-format json writes JSON lines. The HTTP API is documented in docs/api.md.
  contract: every request-boundary, structural, scan, series and query-task limit with its variable, config key,
  default and current value; --write/--check keep docs/contract.md equal to the defaults (exit 1 if stale).
  evidence: the conformance evidence payload (JSON) of this build; its dw_server_image is DW_SERVER_IMAGE
  when set, else dwserver:<version>@sha256:<digest of this executable>.";

/// What the command line asks for.
#[derive(Default)]
struct Args {
    contract: bool,
    dev: bool,
    config: Option<PathBuf>,
    log_format: Option<String>,
    format: Option<String>,
    write: Option<PathBuf>,
    check: Option<PathBuf>,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, String> {
        let mut parsed = Args::default();
        let mut rest = args.iter().peekable();
        if rest.peek().map(|a| a.as_str()) == Some("contract") {
            parsed.contract = true;
            rest.next();
        }
        while let Some(arg) = rest.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
                _ => (arg.as_str(), None),
            };
            let mut value = |what: &str| match inline.clone().or_else(|| rest.next().cloned()) {
                Some(v) => Ok(v),
                None => Err(format!("{flag} needs a value: {what}")),
            };
            match flag {
                "--dev" if inline.is_none() && !parsed.contract => parsed.dev = true,
                "--config" => parsed.config = Some(PathBuf::from(value("a TOML file")?)),
                "--log-format" if !parsed.contract => {
                    parsed.log_format = Some(value("human or json")?)
                }
                "--format" if parsed.contract => {
                    parsed.format = Some(value("table, json or markdown")?)
                }
                "--write" if parsed.contract => parsed.write = Some(value("a file")?.into()),
                "--check" if parsed.contract => parsed.check = Some(value("a file")?.into()),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(parsed)
    }

    /// `--config`, else `DW_CONFIG` (an empty value means none).
    fn config_file(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            std::env::var_os("DW_CONFIG")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    }
}

/// `dwserver contract`: prints the contract, or writes/checks docs/contract.md.
fn contract_command(args: &Args) -> ExitCode {
    let file = args.config_file();
    let config = match ServerConfig::load(|k| std::env::var(k).ok(), file.as_deref(), true) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("dwserver: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = args.write.as_ref().or(args.check.as_ref()) {
        // The document holds the defaults, whatever this shell configures.
        let defaults = ServerConfig::for_node("contract", std::env::temp_dir());
        let expected = contract::to_markdown(&contract::limits(&defaults));
        if args.write.is_some() {
            return match std::fs::write(path, expected) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("dwserver: cannot write {}: {e}", path.display());
                    ExitCode::from(2)
                }
            };
        }
        return match std::fs::read_to_string(path) {
            Ok(found) if found == expected => ExitCode::SUCCESS,
            Ok(_) => {
                eprintln!(
                    "dwserver: {} is stale; regenerate it with `cargo run -p dwengine --bin dwserver -- contract --write {}`",
                    path.display(),
                    path.display()
                );
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("dwserver: cannot read {}: {e}", path.display());
                ExitCode::from(2)
            }
        };
    }
    let limits = contract::limits(&config);
    let out = match args.format.as_deref().unwrap_or("table") {
        "table" => contract::to_table(&limits),
        "json" => format!("{:#}\n", contract::to_json(&limits)),
        "markdown" => contract::to_markdown(&limits),
        other => {
            eprintln!("dwserver: --format {other:?}: expected table, json or markdown");
            return ExitCode::from(2);
        }
    };
    print!("{out}");
    let _ = std::io::stdout().flush();
    ExitCode::SUCCESS
}

/// `dwserver evidence`: prints the conformance evidence of this build.
fn evidence_command(rest: &[String]) -> ExitCode {
    if let Some(extra) = rest.first() {
        eprintln!("dwserver: evidence takes no arguments, got {extra:?} (try --help)");
        return ExitCode::from(2);
    }
    let payload = std::env::current_exe()
        .map_err(|e| e.to_string())
        .and_then(|exe| {
            let guard = dwengine::policy::guard().map_err(str::to_owned)?;
            let pinned = std::env::var("DW_SERVER_IMAGE").ok();
            dwengine::conformance::ConformanceEvidence::payload(guard, &exe, pinned.as_deref())
                .map_err(|e| e.to_string())
        });
    match payload {
        Ok(payload) => {
            println!("{payload:#}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dwserver: evidence: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The stop signals, registered before the node announces itself: a
/// supervisor (or a test) may send SIGTERM as soon as it reads `listening
/// on`, and a signal arriving before its handler exists would kill the
/// process with the default action (no drain, no exit 0).
struct StopSignals {
    runtime: tokio::runtime::Runtime,
    #[cfg(unix)]
    unix: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl StopSignals {
    /// Installs the SIGTERM and SIGINT handlers now.
    fn register() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        #[cfg(unix)]
        let unix = {
            use tokio::signal::unix::{signal, SignalKind};
            let _entered = runtime.enter();
            match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            }
        };
        Ok(StopSignals {
            runtime,
            #[cfg(unix)]
            unix,
        })
    }

    /// Resolves on SIGTERM (what orchestrators send first) or SIGINT
    /// (Ctrl-C): the server then stops accepting, ends its waits and long
    /// polls, lets in-flight requests finish within
    /// DW_SERVER_HTTP_SHUTDOWN_DEADLINE_MS and exits 0.
    fn wait(self) {
        let StopSignals {
            runtime,
            #[cfg(unix)]
            unix,
        } = self;
        runtime.block_on(async move {
            #[cfg(unix)]
            {
                if let Some((mut term, mut int)) = unix {
                    let which = tokio::select! {
                        _ = term.recv() => "SIGTERM",
                        _ = int.recv() => "SIGINT",
                    };
                    tracing::info!(signal = which, "stopping");
                    return;
                }
            }
            let _ = tokio::signal::ctrl_c().await;
        });
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    // What an operator pastes into a bug report or checks after an upgrade.
    if args.iter().any(|a| a == "--version" || a == "-V") {
        println!("dwserver {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    if args.first().map(String::as_str) == Some("evidence") {
        return evidence_command(&args[1..]);
    }
    let args = match Args::parse(&args) {
        Ok(args) => args,
        Err(problem) => {
            eprintln!("dwserver: {problem} (try --help)");
            return ExitCode::from(2);
        }
    };
    if args.contract {
        return contract_command(&args);
    }
    let logging =
        match LogSettings::from_lookup(args.log_format.as_deref(), |k| std::env::var(k).ok()) {
            Ok(logging) => logging,
            Err(e) => {
                eprintln!("dwserver: {e}");
                return ExitCode::from(2);
            }
        };
    if let Err(e) = logging.install() {
        eprintln!("dwserver: {e}");
        return ExitCode::FAILURE;
    }
    for warning in &logging.warnings {
        tracing::warn!(target: SERVER_TARGET, "{warning}");
    }
    // A misspelt variable is otherwise ignored without a word, and its
    // setting keeps the default.
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    for warning in dwengine::server::config::unknown_variables(names) {
        tracing::warn!(target: SERVER_TARGET, "{warning}");
    }
    let dev = args.dev;
    let config_file = args.config_file();
    let config = match ServerConfig::load(|k| std::env::var(k).ok(), config_file.as_deref(), dev) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("dwserver: {e}");
            return ExitCode::from(2);
        }
    };
    let startup_config = config.clone();
    let engine = match Engine::open(config) {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("dwserver: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut running = match Running::start(engine) {
        Ok(running) => running,
        Err(e) => {
            eprintln!("dwserver: cannot listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The handlers exist before the announcement, so a stop sent the
    // moment a supervisor reads it is a clean stop.
    if let Some(stop) = running.take_shutdown() {
        match StopSignals::register() {
            Ok(signals) => {
                std::thread::spawn(move || {
                    signals.wait();
                    let _ = stop.send(());
                });
            }
            Err(e) => {
                eprintln!("dwserver: cannot handle stop signals: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    log_startup(&startup_config, running.addr());
    println!("listening on {}", running.addr());
    let _ = std::io::stdout().flush();
    match running.wait() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dwserver: {e}");
            ExitCode::FAILURE
        }
    }
}
