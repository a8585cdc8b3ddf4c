//! `dwserver`: the standalone durable-workflow server.
//!
//! Configuration comes from `DW_*` environment variables (see
//! `dwengine::server::config`); `--dev` runs with a generated node id, an
//! in-memory store and no authentication. The first line on stdout is
//! `listening on <addr>`, so a supervisor (or a test) started with
//! `DW_BIND=127.0.0.1:0` learns the port. Logs go to stderr
//! (`dwengine::logging`).

use std::io::Write;
use std::process::ExitCode;

use dwengine::logging::{log_startup, LogSettings};
use dwengine::server::{Engine, Running, ServerConfig};

/// The command line: `--dev` and `--log-format <human|json>`.
struct Args {
    dev: bool,
    log_format: Option<String>,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, String> {
        let mut parsed = Args {
            dev: false,
            log_format: None,
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            match arg.as_str() {
                "--dev" => parsed.dev = true,
                "--log-format" => match rest.next() {
                    Some(value) => parsed.log_format = Some(value.clone()),
                    None => return Err("--log-format needs a value: human or json".into()),
                },
                other => match other.strip_prefix("--log-format=") {
                    Some(value) => parsed.log_format = Some(value.to_owned()),
                    None => return Err(format!("unknown argument {other:?}")),
                },
            }
        }
        Ok(parsed)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage: dwserver [--dev] [--log-format human|json]\n  DW_SERVER_ID (required without --dev), DW_BIND (default 127.0.0.1:8080),\n  DW_DATA_DIR (default $XDG_DATA_HOME/dwserver or ~/.local/share/dwserver),\n  DW_DATABASE_PATH (default <DW_DATA_DIR>/dwserver.sqlite), DW_POLLING_CACHE_PATH, DW_REDIS_URL,\n  DW_AUTH_WORKER_TOKENS / DW_AUTH_OPERATOR_TOKENS / DW_AUTH_ADMIN_TOKENS (comma-separated; one is required\n  without --dev unless DW_AUTH=none), DW_ALLOWED_HOSTS, DW_QUERY_TIMEOUT_MS, DW_MAX_UPDATE_WAIT_MS,\n  and the DW_* limits. Logs go to stderr: RUST_LOG (default info) sets the level,\n  DW_LOG_FORMAT=json or --log-format json writes JSON lines. The HTTP API is documented in docs/api.md.");
        return ExitCode::SUCCESS;
    }
    let args = match Args::parse(&args) {
        Ok(args) => args,
        Err(problem) => {
            eprintln!("dwserver: {problem} (try --help)");
            return ExitCode::from(2);
        }
    };
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
    let dev = args.dev;
    let config = match ServerConfig::from_lookup(|k| std::env::var(k).ok(), dev) {
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
    log_startup(&startup_config, running.addr());
    println!("listening on {}", running.addr());
    let _ = std::io::stdout().flush();
    if let Some(stop) = running.take_shutdown() {
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(async {
                    let _ = tokio::signal::ctrl_c().await;
                });
                let _ = stop.send(());
            }
        });
    }
    match running.wait() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dwserver: {e}");
            ExitCode::FAILURE
        }
    }
}
