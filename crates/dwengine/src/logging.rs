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
    /// What was wrong with the settings but did not stop the start (a
    /// misspelt level in `RUST_LOG`): to log once the subscriber is up.
    pub warnings: Vec<String>,
}

/// The level names a `RUST_LOG` directive may be.
const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// The level `directive` is a misspelling of: a bare word (no `=`, no
/// span filter, no module path) that is no level but a letter or two from
/// one. `tracing` reads such a word as a target name, which enables that
/// target alone and so hides every other record.
fn misspelt_level(directive: &str) -> Option<&'static str> {
    let word = directive.trim();
    if word.is_empty() || word.contains(['=', '[', ':']) {
        return None;
    }
    let lower = word.to_ascii_lowercase();
    if LEVELS.contains(&lower.as_str()) {
        return None;
    }
    LEVELS
        .iter()
        .map(|level| (strsim::damerau_levenshtein(&lower, level), *level))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, level)| level)
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
        let mut warnings = Vec::new();
        let mut filter = lookup(LOG_FILTER_ENV)
            .filter(|f| !f.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_FILTER.to_owned());
        let misspelt: Vec<String> = filter
            .split(',')
            .filter_map(|d| {
                Some(format!(
                    "{:?} (did you mean {:?}?)",
                    d.trim(),
                    misspelt_level(d)?
                ))
            })
            .collect();
        if !misspelt.is_empty() {
            warnings.push(format!(
                "RUST_LOG={filter:?}: {} is not a level but would be read as a target name, \
                 which shows that target's records alone and hides every other; \
                 using the default, RUST_LOG={DEFAULT_FILTER}, instead",
                misspelt.join(", ")
            ));
            filter = DEFAULT_FILTER.to_owned();
        }
        // Parsed here so a typo is refused at start-up, not silently dropped.
        EnvFilter::try_new(&filter).map_err(|e| LogSetupError::Filter {
            value: filter.clone(),
            problem: e.to_string(),
        })?;
        Ok(LogSettings {
            format,
            filter,
            warnings,
        })
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
    let database = match (&config.database_url, &config.database) {
        (Some(url), _) => crate::server::engine::without_password(url),
        (None, Some(path)) => path.display().to_string(),
        (None, None) => ":memory:".to_owned(),
    };
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
        queue_driver = config.queue.name(),
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
    fn a_misspelt_level_is_warned_about_and_the_default_kept() {
        let s = LogSettings::from_lookup(None, lookup(&[("RUST_LOG", "infoo")])).unwrap();
        assert_eq!(s.filter, DEFAULT_FILTER);
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        assert!(
            s.warnings[0].starts_with(
                "RUST_LOG=\"infoo\": \"infoo\" (did you mean \"info\"?) is not a level"
            ),
            "{}",
            s.warnings[0]
        );
        assert!(s.warnings[0].ends_with("using the default, RUST_LOG=info, instead"));
        let s =
            LogSettings::from_lookup(None, lookup(&[("RUST_LOG", "dwserver=info,wran")])).unwrap();
        assert_eq!(s.filter, DEFAULT_FILTER);
        assert!(s.warnings[0].contains("\"wran\" (did you mean \"warn\"?)"));
        // Levels in any case, targets and per-target levels are no typos.
        for good in [
            "INFO",
            "warn,dwserver=debug",
            "dwserver",
            "tower_http::trace=off",
        ] {
            let s = LogSettings::from_lookup(None, lookup(&[("RUST_LOG", good)])).unwrap();
            assert_eq!((s.filter.as_str(), s.warnings.len()), (good, 0));
        }
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
