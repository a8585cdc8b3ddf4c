//! dwserver's log output.
//!
//! The engine speaks through `tracing` events: the start-up record of the
//! effective limits and the data location, and dwpolicy's approaching-limit
//! warnings in the seed's exact wording. Without a subscriber those events
//! vanish, so an operator crossing 80 % of a limit would see nothing. This
//! module reads the log settings (`RUST_LOG`, `DW_LOG_FORMAT` or
//! `--log-format`) and installs one subscriber that writes to stderr: human
//! lines by default, one JSON object per line for log collectors. Stdout stays
//! reserved for the `listening on <addr>` line supervisors read.

use std::net::SocketAddr;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

use crate::server::ServerConfig;

/// The variable that selects the output format when no flag does.
pub const LOG_FORMAT_ENV: &str = "DW_LOG_FORMAT";

/// The variable with the `tracing` filter directives.
pub const LOG_FILTER_ENV: &str = "RUST_LOG";

/// The filter when `RUST_LOG` is unset or empty: start-up and warnings show.
pub const DEFAULT_FILTER: &str = "info";

/// The target of the engine's own records (start-up).
pub const SERVER_TARGET: &str = "dwserver";

/// How log records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `<time> <LEVEL> <target>: <message> key=value …`, one line per record.
    #[default]
    Human,
    /// One JSON object per line; the structured fields under `fields`.
    Json,
}

impl FromStr for LogFormat {
    type Err = ();
    fn from_str(text: &str) -> Result<Self, ()> {
        match text.trim().to_ascii_lowercase().as_str() {
            "human" | "text" | "" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            _ => Err(()),
        }
    }
}

/// Why the log settings are unusable.
#[derive(Debug, thiserror::Error)]
pub enum LogSetupError {
    /// The format is neither `human` nor `json`.
    #[error("{origin}={value:?}: unknown log format; use \"human\" (the default) or \"json\"")]
    UnknownFormat {
        /// `DW_LOG_FORMAT` or `--log-format`.
        origin: &'static str,
        /// What was given.
        value: String,
    },
    /// `RUST_LOG` does not parse as `tracing` filter directives.
    #[error("RUST_LOG={value:?}: {problem} (e.g. RUST_LOG=info or RUST_LOG=warn,dwserver=info)")]
    Filter {
        /// What was given.
        value: String,
        /// The parser's complaint.
        problem: String,
    },
    /// Another subscriber is already the global default.
    #[error("a log subscriber is already installed in this process")]
    AlreadyInstalled,
}

/// The format and filter dwserver logs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// Human or JSON.
    pub format: LogFormat,
    /// `tracing` filter directives (`RUST_LOG` syntax).
    pub filter: String,
}

impl LogSettings {
    /// Reads the settings: the `--log-format` flag's value wins over
    /// `DW_LOG_FORMAT`; `RUST_LOG` (default [`DEFAULT_FILTER`]) sets the level.
    pub fn from_lookup(
        flag: Option<&str>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<LogSettings, LogSetupError> {
        let (origin, value) = match flag {
            Some(value) => ("--log-format", Some(value.to_owned())),
            None => (LOG_FORMAT_ENV, lookup(LOG_FORMAT_ENV)),
        };
        let format = match value {
            None => LogFormat::default(),
            Some(value) => value
                .parse()
                .map_err(|()| LogSetupError::UnknownFormat { origin, value })?,
        };
        let filter = lookup(LOG_FILTER_ENV)
            .filter(|f| !f.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_FILTER.to_owned());
        // Parsed here so a typo is refused at start-up, not silently dropped.
        EnvFilter::try_new(&filter).map_err(|e| LogSetupError::Filter {
            value: filter.clone(),
            problem: e.to_string(),
        })?;
        Ok(LogSettings { format, filter })
    }

    /// Installs the process-wide subscriber writing to stderr.
    pub fn install(&self) -> Result<(), LogSetupError> {
        let filter = EnvFilter::try_new(&self.filter).map_err(|e| LogSetupError::Filter {
            value: self.filter.clone(),
            problem: e.to_string(),
        })?;
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false);
        let installed = match self.format {
            LogFormat::Human => builder.try_init(),
            LogFormat::Json => builder.json().try_init(),
        };
        installed.map_err(|_| LogSetupError::AlreadyInstalled)
    }
}

/// Logs, once at start-up, where the data lives and the limits in force.
///
/// The limit objects are logged as JSON text so both formats carry them
/// whole, in the health snapshot's shape. The Redis URL is not logged (it
/// may hold a password); only which cache backend serves.
pub fn log_startup(config: &ServerConfig, addr: SocketAddr) {
    let database = config
        .database
        .as_ref()
        .map_or_else(|| ":memory:".to_owned(), |p| p.display().to_string());
    let cache = if config.redis_url.is_some() {
        "redis"
    } else {
        "memory"
    };
    let structural = serde_json::to_string(&config.store.limits).unwrap_or_default();
    let request = serde_json::to_string(&config.request_limits).unwrap_or_default();
    tracing::info!(
        target: SERVER_TARGET,
        server_id = %config.server_id,
        addr = %addr,
        database = %database,
        polling_cache_path = %config.polling_cache_path.display(),
        cache,
        structural_limits = %structural,
        request_limits = %request,
        max_pending_payload_bytes_per_run = config.store.max_pending_payload_bytes,
        history_retention_seconds = config.history_retention.as_secs(),
        "dwserver started: data in {database}, listening on {addr}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn human_at_info_unless_told_otherwise() {
        let s = LogSettings::from_lookup(None, lookup(&[])).unwrap();
        assert_eq!(s.format, LogFormat::Human);
        assert_eq!(s.filter, "info");
    }

    #[test]
    fn the_flag_wins_over_the_environment() {
        let vars = [("DW_LOG_FORMAT", "human"), ("RUST_LOG", "warn")];
        let s = LogSettings::from_lookup(Some("json"), lookup(&vars)).unwrap();
        assert_eq!(s.format, LogFormat::Json);
        assert_eq!(s.filter, "warn");
        let s = LogSettings::from_lookup(None, lookup(&[("DW_LOG_FORMAT", "JSON")])).unwrap();
        assert_eq!(s.format, LogFormat::Json);
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let e = LogSettings::from_lookup(None, lookup(&[("DW_LOG_FORMAT", "xml")])).unwrap_err();
        assert!(e.to_string().starts_with("DW_LOG_FORMAT=\"xml\""), "{e}");
        let e = LogSettings::from_lookup(Some("yaml"), lookup(&[])).unwrap_err();
        assert!(e.to_string().starts_with("--log-format=\"yaml\""), "{e}");
        let e =
            LogSettings::from_lookup(None, lookup(&[("RUST_LOG", "dwserver=loud")])).unwrap_err();
        assert!(
            e.to_string().starts_with("RUST_LOG=\"dwserver=loud\""),
            "{e}"
        );
    }
}
