//! Server configuration, read from a TOML file and `DW_*` environment variables.
//!
//! Read once at start-up through a lookup function, so tests configure a
//! server without touching the process environment. The file (see
//! [`config_file`](crate::server::config_file)) and the environment are one
//! source: a variable overrides its file key, both are parsed by the same
//! strict readers, and every bad value is reported at once with its origin. Every node needs its
//! own `DW_SERVER_ID`: wait-slot files and readiness keys are per node, and
//! two nodes sharing an id would count each other's waits.
//!
//! The result is a [`ServerConfig`] (defined in
//! [`node_config`](crate::server::node_config), below this reader); the keys
//! a file may hold and what `0` means for each come from the
//! [`contract`](crate::server::contract), which describes a configuration
//! without knowing how it was read.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dwpolicy::boundary::RequestLimits;
use dwpolicy::env::InvalidReason;
use dwpolicy::series::{
    PROMETHEUS_ACTIVITY_SERIES, PROMETHEUS_TASK_QUEUE_SERIES, PROMETHEUS_WORKFLOW_SERIES,
    WORKFLOW_TASK_FAILURE_TYPES,
};

use crate::admission::NamespaceLimit;
use crate::external_payloads::ExternalPayloadSettings;
use crate::polling::{ActivityTaskPoller, WorkflowTaskPoller};
use crate::query_tasks::QueryTaskSettings;
use crate::queue::{QueueSettings, SqsSettings};
use crate::registry::IdleWorkerSweep;
use crate::server::auth::Tokens;
use crate::server::config_file::{ConfigFile, FileProblem, Source};
use crate::server::external_payloads::ExternalPayloadSweep;
use crate::server::node_config::{config_key_variable, ServerConfig};
use crate::server::schedules::ScheduleSweep;
use crate::server::timeouts::TimeoutSweep;
use crate::service_boundary::ServiceBoundaryBudgets;
use crate::store::StoreConfig;

/// One reason the configuration is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No node id and no `--dev`.
    MissingServerId,
    /// No SQLite file was named and no data directory can be derived.
    NoDataDir,
    /// No token configured outside `--dev`, and auth not explicitly off.
    MissingTokens,
    /// A value does not parse.
    Invalid {
        /// The variable (the file key's variable when it came from the file).
        name: String,
        /// The value as found.
        value: String,
        /// What is wrong.
        problem: String,
        /// Where it came from.
        source: Source,
        /// The config-file key the environment's value overrides, when
        /// both set it (`None` for a value from the file).
        overrides: Option<Source>,
    },
    /// The config file is unreadable, not TOML, or has an unknown key.
    File(FileProblem),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::MissingServerId => f.write_str("DW_SERVER_ID is required: every node needs its own unique id (or start with --dev for a generated one)"),
            Problem::NoDataDir => f.write_str("no data directory: set DW_DATA_DIR (or DW_DATABASE_PATH, or HOME / XDG_DATA_HOME), or start with --dev for an in-memory store"),
            Problem::MissingTokens => f.write_str("no API tokens: set DW_AUTH_WORKER_TOKENS, DW_AUTH_OPERATOR_TOKENS and/or DW_AUTH_ADMIN_TOKENS (comma-separated, each token optionally bound to namespaces as token@namespace or token@a|b), or DW_AUTH=none to serve without authentication, or start with --dev"),
            Problem::Invalid { value, problem, source: source @ Source::File { .. }, .. } => {
                write!(f, "{source} = {value:?}: {problem}")
            }
            Problem::Invalid { name, value, problem, overrides: Some(file), .. } => {
                write!(f, "{name}={value:?} (environment, which overrides {file}): {problem}")
            }
            Problem::Invalid { name, value, problem, .. } => {
                write!(f, "{name}={value:?} (environment): {problem}")
            }
            Problem::File(problem) => problem.fmt(f),
        }
    }
}

/// Why the configuration is unusable: every problem found, file and
/// environment together, so an operator fixes a deployment in one pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_problems(.problems))]
pub struct ConfigError {
    /// The problems, in reading order.
    pub problems: Vec<Problem>,
}

fn render_problems(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => {
            let mut out = format!("invalid configuration ({} problems):", many.len());
            for problem in many {
                out.push_str("\n  ");
                out.push_str(&problem.to_string());
            }
            out
        }
    }
}

impl ConfigError {
    /// Whether `problem` is among the problems.
    pub fn has(&self, problem: &Problem) -> bool {
        self.problems.contains(problem)
    }

    /// The variables whose values were refused, in order.
    pub fn invalid_names(&self) -> Vec<&str> {
        self.problems
            .iter()
            .filter_map(|p| match p {
                Problem::Invalid { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }
}

impl ServerConfig {
    /// Reads the configuration through `lookup`; `dev` generates a node id.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        dev: bool,
    ) -> Result<Self, ConfigError> {
        Self::load(lookup, None, dev)
    }

    /// Reads `config_file` (when given), then the environment through
    /// `env`, which overrides the file key by key. Every bad value of every
    /// group, from both sources, is reported in one [`ConfigError`].
    pub fn load(
        env: impl Fn(&str) -> Option<String>,
        config_file: Option<&Path>,
        dev: bool,
    ) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let file = match config_file {
            None => None,
            Some(path) => {
                let (file, found) = ConfigFile::read(path, &file_keys());
                problems.extend(found.into_iter().map(Problem::File));
                Some(file)
            }
        };
        let reader = Reader {
            env: &env,
            file: file.as_ref(),
            problems: RefCell::new(problems),
        };
        let config = reader.config(dev);
        let problems = reader.problems.into_inner();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError { problems })
        }
    }
}

/// What `0` means for the setting `variable`, as the contract says it
/// (`None` for a setting the contract does not list).
fn zero_meaning(variable: &str) -> Option<String> {
    let limits =
        crate::server::contract::limits(&ServerConfig::for_node("contract", std::env::temp_dir()));
    let limit = limits
        .into_iter()
        .find(|l| l.env.as_deref() == Some(variable))?;
    match limit.zero {
        "disables" => Some("0 disables".to_owned()),
        "default" => Some(format!("0 uses the default, {}", limit.default)),
        "clamped" => Some("0 is clamped to the minimum".to_owned()),
        "-" => None,
        other => Some(format!("0 means {other}")),
    }
}

/// Every key a config file may hold, with its variable.
pub fn file_keys() -> BTreeMap<String, String> {
    let mut keys: BTreeMap<String, String> =
        crate::server::contract::limit_keys().into_iter().collect();
    for (key, variable) in crate::server::contract::NODE_SETTINGS {
        keys.insert((*key).to_owned(), (*variable).to_owned());
    }
    keys
}

/// The variables dwserver reads besides the settings' ([`file_keys`]):
/// the config file's name, the log format, authentication, the host
/// check, and the per-namespace override lists.
pub const PROCESS_VARIABLES: &[&str] = &[
    "DW_CONFIG",
    "DW_LOG_FORMAT",
    "DW_AUTH",
    "DW_AUTH_WORKER_TOKENS",
    "DW_AUTH_OPERATOR_TOKENS",
    "DW_AUTH_ADMIN_TOKENS",
    "DW_ALLOWED_HOSTS",
    crate::server::webhooks::WEBHOOKS_ENV,
    "DW_NAMESPACE_REQUEST_LIMITS",
    "DW_NAMESPACE_DURABLE_STATE_LIMITS",
    "DW_EXTERNAL_PAYLOAD_NAMESPACE_LIMITS",
    // `dwserver evidence`: the pinned server image it reports.
    "DW_SERVER_IMAGE",
    // The page-token key (server::wire), read when the first token is made.
    crate::server::wire::PAGE_TOKEN_KEY_ENV,
];

/// Prefixes of variables that belong to other programs of the workspace
/// (the soak harness, the tests, the benchmarks), which may share a shell
/// with dwserver.
const OTHER_PROGRAMS_PREFIXES: &[&str] = &["DW_PERF_", "DW_TEST_", "DW_BENCH_"];

/// Variables of the SDK clients that may share a shell with dwserver (the
/// client profile the manifest's auth contract names).
const CLIENT_VARIABLES: &[&str] = &["DW_ENV"];

/// A warning for each `DW_*` name among `names` that dwserver does not
/// read, with the known variable it is closest to: a misspelt variable is
/// otherwise silently ignored and its default served.
pub fn unknown_variables(names: impl IntoIterator<Item = String>) -> Vec<String> {
    // What a load reads, asked of an empty environment: every setting's
    // variable, whatever its value.
    let asked = RefCell::new(Vec::new());
    let env = |name: &str| {
        asked.borrow_mut().push(name.to_owned());
        None
    };
    let _ = ServerConfig::load(env, None, true);
    let mut known = asked.into_inner();
    known.extend(file_keys().into_values());
    known.extend(PROCESS_VARIABLES.iter().map(|v| (*v).to_owned()));
    known.sort_unstable();
    known.dedup();
    let candidates: Vec<&str> = known.iter().map(String::as_str).collect();
    let mut unknown: Vec<String> = names
        .into_iter()
        .filter(|name| name.starts_with("DW_"))
        .filter(|name| !OTHER_PROGRAMS_PREFIXES.iter().any(|p| name.starts_with(p)))
        .filter(|name| !CLIENT_VARIABLES.contains(&name.as_str()))
        .filter(|name| known.binary_search(name).is_err())
        .collect();
    unknown.sort_unstable();
    unknown
        .into_iter()
        .map(|name| match nearest_variable(&name, &candidates) {
            Some(near) => format!("{name} is set but dwserver reads no such variable: did you mean {near}?"),
            None => format!("{name} is set but dwserver reads no such variable (docs/dwserver.md and docs/contract.md list every one)"),
        })
        .collect()
}

/// `DW_BIND`: an address and port (`127.0.0.1:8080`, `[::1]:8080`), or a
/// host name and port (`localhost:8080`) resolved once at start-up, its
/// first IPv4 address preferred (a server bound to `::1` alone is out of
/// reach of clients that resolve the same name to `127.0.0.1`).
fn bind_address(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let text = text.trim();
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let what = "expected HOST:PORT, e.g. 127.0.0.1:8080, localhost:8080 or [::1]:8080 (port 0 picks a free one)";
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            let addrs: Vec<_> = (host, port.parse::<u16>().unwrap_or(0))
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {host:?}: {e}; {what}"))?
                .collect();
            addrs
                .iter()
                .find(|a| a.is_ipv4())
                .or(addrs.first())
                .copied()
                .ok_or_else(|| format!("{host:?} resolves to no address; {what}"))
        }
        _ => Err(what.to_owned()),
    }
}

/// The known variable closest to `name`, when it is close enough to be a
/// typo of it (a letter or two wrong, missing, extra or swapped).
fn nearest_variable<'c>(name: &str, candidates: &[&'c str]) -> Option<&'c str> {
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(name, c), *c))
        .filter(|(distance, c)| *distance <= 2.max(c.len() / 10))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

/// Reads settings from the environment over the file, collecting problems
/// instead of stopping at the first, so each group is read to its end.
struct Reader<'a, F> {
    env: &'a F,
    file: Option<&'a ConfigFile>,
    problems: RefCell<Vec<Problem>>,
}

impl<F: Fn(&str) -> Option<String>> Reader<'_, F> {
    /// The value of `variable`: the environment's, else the file's.
    fn get(&self, variable: &str) -> Option<String> {
        (self.env)(variable).or_else(|| Some(self.file?.get(variable)?.raw.clone()))
    }

    fn source(&self, variable: &str) -> Source {
        if (self.env)(variable).is_some() {
            return Source::Environment;
        }
        self.file_source(variable)
    }

    /// Where the file sets `variable`'s key, whether or not the environment
    /// overrides it.
    fn file_source(&self, variable: &str) -> Source {
        match self.file.and_then(|f| Some((f, f.get(variable)?))) {
            Some((file, value)) => Source::File {
                path: file.path.clone(),
                key: value.key.clone(),
                line: value.line,
            },
            None => Source::Missing,
        }
    }

    fn fail(&self, problem: Problem) {
        self.problems.borrow_mut().push(problem);
    }

    fn invalid(&self, name: &str, value: &str, problem: String) {
        let source = self.source(name);
        let overrides = match (&source, self.file_source(name)) {
            (Source::Environment, file @ Source::File { .. }) => Some(file),
            _ => None,
        };
        self.fail(Problem::Invalid {
            name: name.to_owned(),
            value: value.to_owned(),
            problem,
            source,
            overrides,
        });
    }

    /// A non-negative integer, strictly (no sign, no decimal point, no words).
    fn number(&self, name: &str) -> Option<u64> {
        let raw = self.get(name)?;
        match dwpolicy::env::parse_non_negative(name, &raw) {
            Ok(n) => Some(n),
            Err(e) => {
                let problem = match e.reason {
                    // dwpolicy's wording says "(0 disables)", true of its
                    // limits only: say what 0 means for this setting.
                    InvalidReason::NotANonNegativeInteger => match zero_meaning(name) {
                        Some(zero) => format!("expected a non-negative integer ({zero})"),
                        None => "expected a non-negative integer".to_owned(),
                    },
                    other => other.to_string(),
                };
                self.invalid(name, &raw, problem);
                None
            }
        }
    }

    /// The result of a dwpolicy reader, its errors kept with their sources.
    fn limits<T>(&self, read: Result<T, dwpolicy::EnvConfigError>, default: T) -> T {
        match read {
            Ok(limits) => limits,
            Err(e) => {
                for bad in e.errors {
                    self.invalid(&bad.variable, &bad.value, bad.reason.to_string());
                }
                default
            }
        }
    }

    /// `server.query_tasks.*` from `DW_SERVER_QUERY_TASKS_*`, in whole
    /// seconds and read strictly: a typo must not fall back to a default
    /// bound. The timeout may be negative (the broker clamps it to 0).
    fn query_task_settings(&self) -> QueryTaskSettings {
        let mut settings = QueryTaskSettings::default();
        let variable = config_key_variable(QueryTaskSettings::TIMEOUT_KEY);
        if let Some(raw) = self.get(&variable) {
            match raw.trim().parse::<i64>() {
                Ok(n) => settings.timeout_seconds = Some(n),
                Err(e) => self.invalid(
                    &variable,
                    &raw,
                    format!("{e}; expected a whole number of seconds"),
                ),
            }
        }
        let number = |key: &str| self.number(&config_key_variable(key));
        if let Some(n) = number(QueryTaskSettings::TTL_KEY) {
            settings.ttl_seconds = n;
        }
        if let Some(n) = number(QueryTaskSettings::LEASE_TIMEOUT_KEY) {
            settings.lease_timeout_seconds = n;
        }
        settings.max_pending_per_queue = number(QueryTaskSettings::MAX_PENDING_KEY);
        settings
    }

    /// `server.external_payload_transport.*` and the per-namespace
    /// overrides; a threshold above the upload limit is refused, since the
    /// SDK would then have nowhere to put a payload between the two.
    fn external_payload_settings(&self) -> ExternalPayloadSettings {
        let mut settings = ExternalPayloadSettings::default();
        let number = |key: &str| self.number(&config_key_variable(key));
        if let Some(n) = number(ExternalPayloadSettings::THRESHOLD_KEY) {
            settings.threshold_bytes = n;
        }
        if let Some(n) = number(ExternalPayloadSettings::MAX_PAYLOAD_KEY).filter(|n| *n > 0) {
            settings.max_payload_bytes = n;
        }
        if let Some(n) = number(ExternalPayloadSettings::MAX_BYTES_KEY) {
            settings.max_bytes_per_namespace = n;
        }
        if let Some(n) = number(ExternalPayloadSettings::MAX_OBJECTS_KEY) {
            settings.max_objects_per_namespace = n;
        }
        if settings.threshold_bytes > settings.max_payload_bytes {
            let variable = config_key_variable(ExternalPayloadSettings::THRESHOLD_KEY);
            self.invalid(
                &variable,
                &settings.threshold_bytes.to_string(),
                format!(
                    "the threshold exceeds {} ({} bytes)",
                    ExternalPayloadSettings::MAX_PAYLOAD_KEY,
                    settings.max_payload_bytes
                ),
            );
        }
        let roles = ExternalPayloadSettings::UPLOAD_ROLES_ENV;
        if let Some(list) = self.get(roles) {
            match crate::server::auth::parse_roles(&list) {
                Ok(parsed) => settings.upload_roles = parsed,
                Err(problem) => self.invalid(roles, &list, problem),
            }
        }
        let env = ExternalPayloadSettings::NAMESPACE_LIMITS_ENV;
        if let Some(spec) = self.get(env) {
            match crate::external_payloads::parse_namespace_limits(&spec) {
                Ok(limits) => settings.namespace_limits = limits,
                Err(problem) => self.invalid(env, &spec, problem),
            }
        }
        settings
    }

    /// The queue driver (`DW_QUEUE_DRIVER`) and, for `sqs`, where its queue
    /// is. Every variable is read whatever the driver, so none is reported
    /// as unknown; the SQS ones are checked only when SQS is chosen.
    fn queue_settings(&self) -> QueueSettings {
        let endpoint = self.get("DW_SQS_ENDPOINT").filter(|v| !v.trim().is_empty());
        let queue_url = self
            .get("DW_SQS_QUEUE_URL")
            .filter(|v| !v.trim().is_empty());
        let region = self.get("DW_SQS_REGION").filter(|v| !v.trim().is_empty());
        let chunk = self.number("DW_SQS_TIMER_CHUNK_SECONDS");
        let driver = self.get("DW_QUEUE_DRIVER").unwrap_or_default();
        match driver.trim() {
            "" | crate::queue::DATABASE => return QueueSettings::Database,
            crate::queue::SQS => {}
            other => {
                self.invalid(
                    "DW_QUEUE_DRIVER",
                    other,
                    "expected database (the default) or sqs".to_owned(),
                );
                return QueueSettings::Database;
            }
        }
        if !cfg!(feature = "sqs") {
            self.invalid(
                "DW_QUEUE_DRIVER",
                crate::queue::SQS,
                "this dwserver was built without the `sqs` cargo feature; build it with \
                 `cargo build --release -p dwengine --features sqs --bin dwserver`"
                    .to_owned(),
            );
        }
        if let Some(endpoint) = &endpoint {
            if let Err(problem) = http_url(endpoint) {
                self.invalid("DW_SQS_ENDPOINT", endpoint, problem);
            }
        }
        let queue_url = match queue_url {
            None => {
                self.invalid(
                    "DW_SQS_QUEUE_URL",
                    "",
                    "required with DW_QUEUE_DRIVER=sqs: the URL of a standard SQS queue \
                     (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)"
                        .to_owned(),
                );
                String::new()
            }
            Some(url) => {
                if let Err(problem) = http_url(&url) {
                    self.invalid("DW_SQS_QUEUE_URL", &url, problem);
                } else if url.trim_end_matches('/').ends_with(".fifo") {
                    self.invalid(
                        "DW_SQS_QUEUE_URL",
                        &url,
                        "a FIFO queue cannot delay single messages, which is how timers \
                         travel: use a standard queue"
                            .to_owned(),
                    );
                }
                url
            }
        };
        let max = crate::queue::SQS_MAX_DELAY_SECONDS;
        let timer_chunk_seconds = match chunk {
            None => max,
            Some(n) if (1..=max).contains(&n) => n,
            Some(n) => {
                self.invalid(
                    "DW_SQS_TIMER_CHUNK_SECONDS",
                    &n.to_string(),
                    format!("expected 1 to {max}: SQS delays one message at most {max} seconds"),
                );
                max
            }
        };
        QueueSettings::Sqs(SqsSettings {
            endpoint,
            queue_url,
            region: region.unwrap_or_else(|| crate::queue::DEFAULT_SQS_REGION.to_owned()),
            timer_chunk_seconds,
        })
    }

    /// The PostgreSQL session timeouts (`DW_DATABASE_*_TIMEOUT_MS`); the
    /// call deadline must stay above the statement and lock timeouts, or
    /// it would cut calls the server ends itself with a clearer error.
    fn postgres_settings(&self) -> crate::store::db::PostgresSettings {
        let mut settings = crate::store::db::PostgresSettings::default();
        let ms = |name: &str, into: &mut Duration| {
            if let Some(n) = self.number(name) {
                *into = Duration::from_millis(n);
            }
        };
        ms(
            "DW_DATABASE_CONNECT_TIMEOUT_MS",
            &mut settings.connect_timeout,
        );
        ms(
            "DW_DATABASE_STATEMENT_TIMEOUT_MS",
            &mut settings.statement_timeout,
        );
        ms("DW_DATABASE_LOCK_TIMEOUT_MS", &mut settings.lock_timeout);
        ms(
            "DW_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS",
            &mut settings.idle_in_transaction_timeout,
        );
        ms("DW_DATABASE_CALL_TIMEOUT_MS", &mut settings.call_timeout);
        ms("DW_DATABASE_TCP_TIMEOUT_MS", &mut settings.tcp_timeout);
        if settings.connect_timeout.is_zero() {
            self.invalid(
                "DW_DATABASE_CONNECT_TIMEOUT_MS",
                "0",
                "expected at least 1 (a connection attempt must give up)".to_owned(),
            );
        }
        let server_side = settings.statement_timeout.max(settings.lock_timeout);
        let call = settings.call_timeout;
        if !call.is_zero() && call <= server_side {
            self.invalid(
                "DW_DATABASE_CALL_TIMEOUT_MS",
                &call.as_millis().to_string(),
                format!(
                    concat!(
                        "expected more than DW_DATABASE_STATEMENT_TIMEOUT_MS and DW_DATABASE_LOCK_TIMEOUT_MS ",
                        "({} ms): the node's deadline is for a database that does not answer ",
                        "at all, the server's own timeouts end what merely runs long; or 0 to turn it off"
                    ),
                    server_side.as_millis()
                ),
            );
        }
        settings
    }

    fn config(&self, dev: bool) -> ServerConfig {
        let lookup = |name: &str| self.get(name);
        let server_id = match lookup("DW_SERVER_ID").filter(|v| !v.trim().is_empty()) {
            Some(id) => id,
            None if dev => format!("dev-{}-{}", std::process::id(), crate::unix_ms()),
            None => {
                self.fail(Problem::MissingServerId);
                String::new()
            }
        };
        let cache_path = lookup("DW_POLLING_CACHE_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("dwserver-polling"));
        let mut config = ServerConfig::for_node(&server_id, cache_path);
        let parse = |name: &str| self.number(name);
        if let Some(bind) = lookup("DW_BIND") {
            match bind_address(&bind) {
                Ok(addr) => config.bind = addr,
                Err(problem) => self.invalid("DW_BIND", &bind, problem),
            }
        }
        if let Some(url) = lookup("DW_DATABASE_URL").filter(|v| !v.is_empty()) {
            match database_url(&url) {
                Ok(()) => {
                    config.database_url = Some(url);
                }
                Err(problem) => self.invalid("DW_DATABASE_URL", &url, problem),
            }
        }
        if config.database_url.is_none() {
            config.database = match lookup("DW_DATABASE_PATH") {
                Some(path) if path == ":memory:" => None,
                Some(path) => Some(PathBuf::from(path)),
                None if dev => None,
                None => match default_data_dir(lookup) {
                    Some(dir) => Some(dir.join(DATABASE_FILE_NAME)),
                    None => {
                        self.fail(Problem::NoDataDir);
                        None
                    }
                },
            };
        }
        config.redis_url = lookup("DW_REDIS_URL").filter(|v| !v.is_empty());
        config.request_limits = self.limits(
            RequestLimits::from_env_with(lookup),
            RequestLimits::default(),
        );
        config.store = StoreConfig {
            limits: self.limits(
                dwpolicy::StructuralLimits::from_env_with(lookup),
                dwpolicy::StructuralLimits::default(),
            ),
            history_budget: self.limits(
                // The events dimension is DW_V2_LIMIT_HISTORY_TRANSACTION_SIZE,
                // already reported with the structural limits.
                dwpolicy::HistoryBudget::from_env_with(|name: &str| {
                    (name != dwpolicy::history::EVENTS_ENV)
                        .then(|| lookup(name))
                        .flatten()
                }),
                dwpolicy::HistoryBudget::default(),
            ),
            ..StoreConfig::default()
        };
        config.queue = self.queue_settings();
        config.store.queue_driver = config.queue.name().to_owned();
        config.store.history_budget.max_events = config.store.limits.history_transaction_size;
        let ms = |n: u64| Duration::from_millis(n);
        if let Some(n) = parse("DW_POLL_RESULT_TTL_MS") {
            config.poll_ttls.result = ms(n);
        }
        if let Some(n) = parse("DW_POLL_PENDING_SLACK_MS") {
            config.poll_ttls.pending_slack = ms(n);
        }
        if let Some(n) = parse("DW_TASK_LEASE_MS") {
            config.task_lease = ms(n);
        }
        if let Some(n) = parse("DW_MAX_POLL_WAIT_MS") {
            config.max_poll_wait = ms(n);
        }
        for kind in crate::waiters::WaitKind::ALL {
            if let Some(n) = parse(&config_key_variable(kind.config_key())) {
                config
                    .call_waits
                    .set(kind, usize::try_from(n).unwrap_or(usize::MAX));
            }
        }
        {
            use crate::server::connections::ConnectionLimits as C;
            let http = &mut config.connections;
            if let Some(n) = parse(&config_key_variable(C::MAX_CONNECTIONS_KEY)) {
                http.max_connections = usize::try_from(n).unwrap_or(usize::MAX).max(1);
            }
            if let Some(n) = parse(&config_key_variable(C::HEADER_READ_TIMEOUT_KEY)) {
                http.header_read_timeout = ms(n.max(1));
            }
            if let Some(n) = parse(&config_key_variable(C::BODY_READ_TIMEOUT_KEY)) {
                http.body_read_timeout = ms(n.max(1));
            }
            if let Some(n) = parse(&config_key_variable(C::SHUTDOWN_DEADLINE_KEY)) {
                http.shutdown_deadline = ms(n);
            }
        }
        if let Some(n) = parse("DW_LONG_POLL_MAX_WAITS") {
            config.wait_caps.global = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = parse("DW_LONG_POLL_MAX_WAITS_PER_NAMESPACE") {
            config.wait_caps.per_namespace = usize::try_from(n).unwrap_or(usize::MAX);
        }
        config.dispatches_per_minute =
            parse("DW_TASK_QUEUE_DISPATCHES_PER_MINUTE").filter(|n| *n > 0);
        if let Some(spec) = lookup(crate::durable_state::NAMESPACE_LIMITS_ENV) {
            match crate::durable_state::parse_limits(&spec) {
                Ok(limits) => config.durable_state_limits = limits,
                Err(problem) => {
                    self.invalid(crate::durable_state::NAMESPACE_LIMITS_ENV, &spec, problem)
                }
            }
        }
        for resource in crate::durable_state::DurableResource::ALL {
            let limit = parse(&config_key_variable(&resource.config_key())).filter(|n| *n > 0);
            config.durable_state_defaults.set(resource, limit);
        }
        config.external_payloads = self.external_payload_settings();
        if let Some(spec) = lookup("DW_NAMESPACE_REQUEST_LIMITS") {
            match parse_namespace_limits(&spec) {
                Ok(limits) => config.namespace_limits = limits,
                Err(problem) => self.invalid("DW_NAMESPACE_REQUEST_LIMITS", &spec, problem),
            }
        }
        if let Some(n) = parse("DW_HISTORY_RETENTION_MS") {
            config.history_retention = ms(n);
        }
        if let Some(n) = parse("DW_HISTORY_RETENTION_THROTTLE_MS") {
            config.retention_throttle = ms(n);
        }
        if let Some(n) = parse("DW_STREAM_RETENTION_THROTTLE_MS") {
            config.stream_retention_throttle = ms(n);
        }
        if let Some(n) = parse("DW_WORKFLOW_STREAM_RETENTION_SECONDS") {
            config.store.streams.default_retention_seconds = n.max(1);
        }
        if let Some(n) = parse(crate::server::namespaces::MAX_NAMESPACES_ENV) {
            config.max_namespaces = n;
        }
        if let Some(n) = parse("DW_WORKFLOW_STREAM_MAX_WAITS") {
            config.stream_max_waits = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = parse("DW_WORKFLOW_STREAMS_PER_RUN") {
            config.store.streams.max_streams_per_run = n;
        }
        if let Some(n) = parse("DW_WORKFLOW_STREAM_MAX_ITEMS") {
            config.store.streams.max_items_per_stream = n;
        }
        // Scan caps are read as strictly as the limits: a typo is refused,
        // not silently replaced by the default cap.
        let scan_caps: HashMap<String, usize> = [
            WorkflowTaskPoller::DUE_TIMER_SCAN_LIMIT_KEY,
            WorkflowTaskPoller::EXPIRED_TASK_SCAN_LIMIT_KEY,
            ActivityTaskPoller::EXPIRED_TASK_SCAN_LIMIT_KEY,
            IdleWorkerSweep::SCAN_LIMIT_KEY,
            crate::registry::StickyExecution::SCAN_LIMIT_KEY,
            crate::registry::WorkerSessionSweep::SCAN_LIMIT_KEY,
            TimeoutSweep::ACTIVITY_SCAN_LIMIT_KEY,
            TimeoutSweep::RUN_SCAN_LIMIT_KEY,
            ScheduleSweep::SCAN_LIMIT_KEY,
            ExternalPayloadSweep::SCAN_LIMIT_KEY,
            crate::server::services::ServiceCallRetention::SCAN_LIMIT_KEY,
        ]
        .into_iter()
        .filter_map(|key| {
            let n = parse(&config_key_variable(key))?;
            Some((key.to_owned(), usize::try_from(n).unwrap_or(usize::MAX)))
        })
        .collect();
        let scan = |key: &str| scan_caps.get(key).copied();
        config.poller = WorkflowTaskPoller::from_config(scan);
        config.activity_poller = ActivityTaskPoller::from_config(scan);
        let idle_after =
            parse("DW_WORKER_IDLE_AFTER_MS").map_or(IdleWorkerSweep::DEFAULT_IDLE_AFTER, ms);
        config.worker_sweep = IdleWorkerSweep::from_config(scan, idle_after);
        let sticky_hold = parse("DW_STICKY_SCHEDULE_TO_START_MS").map_or(
            crate::registry::StickyExecution::DEFAULT_SCHEDULE_TO_START,
            ms,
        );
        config.sticky = crate::registry::StickyExecution::from_config(scan, sticky_hold);
        config.session_sweep = crate::registry::WorkerSessionSweep::from_config(scan);
        let sweep_every =
            parse("DW_TIMEOUT_SWEEP_INTERVAL_MS").map_or(TimeoutSweep::DEFAULT_INTERVAL, ms);
        config.timeout_sweep = TimeoutSweep::from_config(scan, sweep_every);
        let schedules_every =
            parse("DW_SCHEDULE_SWEEP_INTERVAL_MS").map_or(ScheduleSweep::DEFAULT_INTERVAL, ms);
        config.schedule_sweep = ScheduleSweep::from_config(scan, schedules_every);
        // 0, like absence, keeps the default window; longer than a day is refused.
        let window = config_key_variable(ScheduleSweep::CATCHUP_WINDOW_KEY);
        if let Some(n) = parse(&window).filter(|n| *n > 0) {
            let max = ScheduleSweep::MAX_CATCHUP_WINDOW.as_secs();
            if n > max {
                self.invalid(
                    &window,
                    &n.to_string(),
                    format!("the catch-up window is at most {max} seconds (a day); moments older than it are skipped, not fired late"),
                );
            } else {
                config.schedule_sweep.catchup_window = Duration::from_secs(n);
            }
        }
        let payloads_every = parse(ExternalPayloadSweep::INTERVAL_ENV)
            .map_or(ExternalPayloadSweep::DEFAULT_INTERVAL, ms);
        config.external_payload_sweep = ExternalPayloadSweep::from_config(scan, payloads_every);
        // 0, like absence, keeps the default grace.
        if let Some(n) =
            parse(&config_key_variable(ExternalPayloadSweep::GRACE_KEY)).filter(|n| *n > 0)
        {
            config.store.external_payload_orphan_grace = Duration::from_secs(n);
        }
        config.service_call_retention =
            crate::server::services::ServiceCallRetention::from_config(scan);
        if let Some(n) = parse("DW_HISTORY_PAGE_EVENTS") {
            config.store.history_page.max_events = usize::try_from(n).unwrap_or(usize::MAX).max(1);
        }
        if let Some(n) = parse("DW_HISTORY_PAGE_BYTES") {
            config.store.history_page.max_bytes = usize::try_from(n).unwrap_or(usize::MAX).max(1);
        }
        if let Some(n) = parse("DW_MAX_PENDING_PAYLOAD_BYTES_PER_RUN") {
            config.store.max_pending_payload_bytes = n;
        }
        if let Some(n) = parse("DW_UNKNOWN_WORKER_POLL_KEYS_PER_WINDOW") {
            config.unknown_worker_poll_keys = n;
        }
        if let Some(n) = parse("DW_STORE_READERS") {
            config.store_readers = usize::try_from(n).unwrap_or(usize::MAX).max(1);
        }
        config.store.postgres = self.postgres_settings();
        config.prometheus_workflow_series_limit =
            parse(&config_key_variable(PROMETHEUS_WORKFLOW_SERIES.config_key));
        config.prometheus_activity_series_limit =
            parse(&config_key_variable(PROMETHEUS_ACTIVITY_SERIES.config_key));
        config.prometheus_task_queue_series_limit = parse(&config_key_variable(
            PROMETHEUS_TASK_QUEUE_SERIES.config_key,
        ));
        config.workflow_task_failure_type_limit =
            parse(&config_key_variable(WORKFLOW_TASK_FAILURE_TYPES.config_key));
        let mut tokens_refused = false;
        config.auth = match Tokens::from_lookup(lookup) {
            Ok(tokens) => tokens,
            Err(problems) => {
                tokens_refused = true;
                // The value is a list of secrets: the problem names the
                // entry by its position, never by its text.
                for p in problems {
                    self.invalid(
                        p.variable,
                        &format!("(entry {} of the list)", p.entry),
                        p.problem,
                    );
                }
                None
            }
        };
        {
            use crate::server::webhooks::{
                Webhooks, MAX_REPLAY_WINDOW_SECONDS, REPLAY_WINDOW_KEY, WEBHOOKS_ENV,
            };
            if let Some(list) = lookup(WEBHOOKS_ENV) {
                match Webhooks::parse(&list) {
                    Ok(hooks) => config.webhooks = hooks,
                    Err(problems) => {
                        // Entries hold secrets: named by position only.
                        for (entry, problem) in problems {
                            self.invalid(
                                WEBHOOKS_ENV,
                                &format!("(entry {entry} of the list)"),
                                problem,
                            );
                        }
                    }
                }
            }
            let variable = config_key_variable(REPLAY_WINDOW_KEY);
            if let Some(n) = parse(&variable).filter(|n| *n > 0) {
                if n > MAX_REPLAY_WINDOW_SECONDS {
                    self.invalid(
                        &variable,
                        &n.to_string(),
                        format!("at most {MAX_REPLAY_WINDOW_SECONDS} seconds (a longer window keeps captured deliveries valid longer)"),
                    );
                } else {
                    config.webhooks.replay_window = Duration::from_secs(n);
                }
            }
        }
        let auth_off = lookup("DW_AUTH").is_some_and(|v| v.trim() == "none");
        if dev || auth_off {
            config.auth = None;
        } else if config.auth.is_none() && !tokens_refused {
            self.fail(Problem::MissingTokens);
        }
        config.allowed_hosts = match lookup("DW_ALLOWED_HOSTS") {
            Some(list) => list
                .split(',')
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            // A loopback listener answers loopback names only, so a web page
            // cannot reach it through DNS rebinding.
            None if config.bind.ip().is_loopback() => {
                vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()]
            }
            None => Vec::new(),
        };
        config.query_tasks = self.query_task_settings();
        if let Some(raw) = lookup("DW_STORE_RUN_WRITER") {
            match raw.trim() {
                "on" | "1" | "true" => config.store.run_writer = true,
                "off" | "0" | "false" => config.store.run_writer = false,
                _ => self.invalid("DW_STORE_RUN_WRITER", &raw, "expected on or off".into()),
            }
        }
        if let Some(raw) = lookup("DW_SQLITE_WORKER_POLL_CLAIM_GATE") {
            match raw.trim() {
                "on" | "1" | "true" => config.sqlite_poll_claim_gate = Some(true),
                "off" | "0" | "false" => config.sqlite_poll_claim_gate = Some(false),
                _ => self.invalid(
                    "DW_SQLITE_WORKER_POLL_CLAIM_GATE",
                    &raw,
                    "expected on or off".into(),
                ),
            }
        }
        config.sweep_scope = lookup("DW_SWEEP_SCOPE").filter(|v| !v.trim().is_empty());
        if let Some(n) = parse("DW_NODE_LEASE_MS") {
            config.node_lease = ms(n).max(crate::cluster::node::MIN_NODE_LEASE);
        }
        if let Some(n) = parse("DW_MAX_UPDATE_WAIT_MS") {
            config.max_update_wait = ms(n);
        }
        // 0 (like absence) leaves a budget uncapped.
        let budget = |key: &str| parse(&config_key_variable(key)).filter(|n| *n > 0);
        config.service_boundary.per_namespace = budget(ServiceBoundaryBudgets::PER_NAMESPACE_KEY);
        config.service_boundary.per_boundary = budget(ServiceBoundaryBudgets::PER_BOUNDARY_KEY);
        let enabled = config_key_variable(crate::server::ui::ENABLED_KEY);
        if let Some(raw) = lookup(&enabled) {
            match raw.trim() {
                "on" | "1" | "true" => config.ui.enabled = true,
                "off" | "0" | "false" => config.ui.enabled = false,
                _ => self.invalid(
                    &enabled,
                    &raw,
                    "expected true or false (on/off, 1/0)".into(),
                ),
            }
        }
        // 0, like absence, keeps a console cap's default.
        let ui_cap = |key: &str, default: usize| {
            parse(&config_key_variable(key))
                .filter(|n| *n > 0)
                .map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        config.ui.filter_scan_limit = ui_cap(
            crate::server::ui::FILTER_SCAN_LIMIT_KEY,
            crate::server::ui::DEFAULT_FILTER_SCAN_LIMIT,
        );
        config.ui.chart_series_scan_limit = ui_cap(
            crate::server::ui::CHART_SERIES_SCAN_LIMIT_KEY,
            crate::server::ui::DEFAULT_CHART_SERIES_SCAN_LIMIT,
        );
        config
    }
}

/// The SQLite file's name inside the data directory.
pub const DATABASE_FILE_NAME: &str = "dwserver.sqlite";

/// Checks an `http://` or `https://` URL with a host (an SQS endpoint or
/// queue URL).
fn http_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| "expected an http:// or https:// URL".to_owned())?;
    if rest.split('/').next().is_none_or(str::is_empty) {
        return Err("the URL names no host".to_owned());
    }
    Ok(())
}

/// Checks a `DW_DATABASE_URL`: a `postgres://` (or `postgresql://`) URL
/// the PostgreSQL client can parse. Whether the server answers is checked
/// when the node opens the store.
fn database_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(
            "not a PostgreSQL URL: expected postgres://user:password@host:port/database \
             (leave DW_DATABASE_URL unset for the SQLite file of DW_DATABASE_PATH)"
                .to_owned(),
        );
    }
    url.parse::<postgres::Config>()
        .map(|_| ())
        .map_err(|e| format!("not a usable PostgreSQL URL: {e}"))
}

/// Where a node keeps its data when `DW_DATABASE_PATH` is not set:
/// `DW_DATA_DIR`, else `$XDG_DATA_HOME/dwserver`, else
/// `$HOME/.local/share/dwserver`. Never the working directory: a server
/// started from a checkout must not drop its store into the tree.
/// `None` when none of them is usable.
pub fn default_data_dir(lookup: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    if let Some(dir) = set("DW_DATA_DIR") {
        return Some(PathBuf::from(dir));
    }
    // The XDG spec says a relative XDG_DATA_HOME is invalid and ignored.
    if let Some(xdg) = set("XDG_DATA_HOME").map(PathBuf::from) {
        if xdg.is_absolute() {
            return Some(xdg.join("dwserver"));
        }
    }
    match set("HOME").map(PathBuf::from) {
        Some(home) if home.is_absolute() => Some(home.join(".local/share/dwserver")),
        _ => None,
    }
}

/// `tenant-a=4/600,tenant-b=2/0`: max concurrent / per minute (0: no rate cap).
fn parse_namespace_limits(spec: &str) -> Result<HashMap<String, NamespaceLimit>, String> {
    let invalid = |problem: &str| problem.to_owned();
    let mut limits = HashMap::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (namespace, caps) = item
            .split_once('=')
            .ok_or_else(|| invalid("expected namespace=concurrent/per_minute"))?;
        let (concurrent, per_minute) = caps.split_once('/').unwrap_or((caps, "0"));
        let max_concurrent = concurrent
            .trim()
            .parse()
            .map_err(|_| invalid("concurrent is not a number"))?;
        let per_minute = per_minute
            .trim()
            .parse()
            .map_err(|_| invalid("per_minute is not a number"))?;
        limits.insert(
            namespace.trim().to_owned(),
            NamespaceLimit {
                max_concurrent,
                per_minute,
            },
        );
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's configuration from `pairs` (with an id, no auth).
    fn configured(pairs: &[(&str, &str)]) -> Result<ServerConfig, ConfigError> {
        let pairs: Vec<(String, String)> = [("DW_SERVER_ID", "n1"), ("DW_AUTH", "none")]
            .iter()
            .chain(pairs)
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ServerConfig::from_lookup(
            move |k| {
                pairs
                    .iter()
                    .rev()
                    .find(|(name, _)| name == k)
                    .map(|(_, v)| v.clone())
            },
            true,
        )
    }

    #[test]
    fn the_queue_driver_is_the_database_unless_sqs_is_chosen() {
        let config = configured(&[]).unwrap();
        assert_eq!(config.queue, QueueSettings::Database);
        assert_eq!(config.store.queue_driver, "database");
        let config = configured(&[("DW_QUEUE_DRIVER", "database")]).unwrap();
        assert_eq!(config.queue, QueueSettings::Database);
        // SQS settings without the driver are read (so never reported as
        // unknown variables) and left alone.
        let config = configured(&[("DW_SQS_QUEUE_URL", "not a url")]).unwrap();
        assert_eq!(config.queue, QueueSettings::Database);
        let err = configured(&[("DW_QUEUE_DRIVER", "kafka")]).unwrap_err();
        assert_eq!(err.invalid_names(), ["DW_QUEUE_DRIVER"], "{err}");
        assert!(
            err.to_string()
                .contains("expected database (the default) or sqs"),
            "{err}"
        );
        let warnings = unknown_variables(
            [
                "DW_QUEUE_DRIVER",
                "DW_SQS_ENDPOINT",
                "DW_SQS_QUEUE_URL",
                "DW_SQS_REGION",
                "DW_SQS_TIMER_CHUNK_SECONDS",
            ]
            .map(str::to_owned),
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn a_database_url_that_is_not_a_usable_postgres_url_is_refused_naming_it() {
        let config = configured(&[("DW_DATABASE_URL", "postgres://dw:pw@db:5432/dw")]).unwrap();
        assert_eq!(
            config.database_url.as_deref(),
            Some("postgres://dw:pw@db:5432/dw")
        );
        assert_eq!(config.database, None, "no SQLite file beside PostgreSQL");
        for (url, says) in [
            (
                "mysql://dw@db/dw",
                "not a PostgreSQL URL: expected postgres://",
            ),
            (
                "/var/lib/dw.sqlite",
                "leave DW_DATABASE_URL unset for the SQLite file",
            ),
            ("postgres://dw@db:port/dw", "not a usable PostgreSQL URL"),
        ] {
            let err = configured(&[("DW_DATABASE_URL", url)]).unwrap_err();
            assert_eq!(err.invalid_names(), ["DW_DATABASE_URL"], "{err}");
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn database_timeouts_are_read_and_checked_naming_each_setting() {
        use crate::store::db::PostgresSettings;
        let config = configured(&[]).unwrap();
        assert_eq!(config.store.postgres, PostgresSettings::default());
        let config = configured(&[
            ("DW_DATABASE_CONNECT_TIMEOUT_MS", "1500"),
            ("DW_DATABASE_STATEMENT_TIMEOUT_MS", "3000"),
            ("DW_DATABASE_LOCK_TIMEOUT_MS", "2000"),
            ("DW_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS", "0"),
            ("DW_DATABASE_CALL_TIMEOUT_MS", "4000"),
            ("DW_DATABASE_TCP_TIMEOUT_MS", "9000"),
        ])
        .unwrap();
        let ms = Duration::from_millis;
        assert_eq!(
            config.store.postgres,
            PostgresSettings {
                connect_timeout: ms(1500),
                statement_timeout: ms(3000),
                lock_timeout: ms(2000),
                idle_in_transaction_timeout: ms(0),
                call_timeout: ms(4000),
                tcp_timeout: ms(9000),
            }
        );
        // The call deadline off is allowed.
        let config = configured(&[("DW_DATABASE_CALL_TIMEOUT_MS", "0")]).unwrap();
        assert!(config.store.postgres.call_timeout.is_zero());
        let named = |pairs: &[(&str, &str)], name: &str, says: &str| {
            let err = configured(pairs).unwrap_err();
            assert_eq!(err.invalid_names(), [name], "{err}");
            assert!(err.to_string().contains(says), "{err}");
        };
        // A deadline that would cut what the server ends itself.
        named(
            &[("DW_DATABASE_CALL_TIMEOUT_MS", "15000")],
            "DW_DATABASE_CALL_TIMEOUT_MS",
            "expected more than DW_DATABASE_STATEMENT_TIMEOUT_MS and DW_DATABASE_LOCK_TIMEOUT_MS (15000 ms",
        );
        named(
            &[("DW_DATABASE_LOCK_TIMEOUT_MS", "30000")],
            "DW_DATABASE_CALL_TIMEOUT_MS",
            "(30000 ms)",
        );
        named(
            &[("DW_DATABASE_CONNECT_TIMEOUT_MS", "0")],
            "DW_DATABASE_CONNECT_TIMEOUT_MS",
            "expected at least 1",
        );
        named(
            &[("DW_DATABASE_LOCK_TIMEOUT_MS", "soon")],
            "DW_DATABASE_LOCK_TIMEOUT_MS",
            "non-negative integer",
        );
        // Known variables, and config-file keys.
        let keys = file_keys();
        assert_eq!(
            keys.get("server.database.call_timeout_ms")
                .map(String::as_str),
            Some("DW_DATABASE_CALL_TIMEOUT_MS")
        );
        let warnings = unknown_variables(
            [
                "DW_DATABASE_CONNECT_TIMEOUT_MS",
                "DW_DATABASE_STATEMENT_TIMEOUT_MS",
                "DW_DATABASE_LOCK_TIMEOUT_MS",
                "DW_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS",
                "DW_DATABASE_CALL_TIMEOUT_MS",
                "DW_DATABASE_TCP_TIMEOUT_MS",
            ]
            .map(str::to_owned),
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn sqs_settings_are_checked_naming_each_setting() {
        let url = "https://sqs.eu-west-1.amazonaws.com/123456789012/dw";
        let sqs = [("DW_QUEUE_DRIVER", "sqs")];
        let with = |more: &[(&'static str, &'static str)]| {
            let mut pairs = sqs.to_vec();
            pairs.extend_from_slice(more);
            configured(&pairs)
        };
        if cfg!(feature = "sqs") {
            let config = with(&[
                ("DW_SQS_QUEUE_URL", url),
                ("DW_SQS_ENDPOINT", "http://127.0.0.1:5405"),
                ("DW_SQS_TIMER_CHUNK_SECONDS", "2"),
            ])
            .unwrap();
            assert_eq!(config.store.queue_driver, "sqs");
            assert_eq!(
                config.queue,
                QueueSettings::Sqs(SqsSettings {
                    endpoint: Some("http://127.0.0.1:5405".into()),
                    queue_url: url.into(),
                    region: "us-east-1".into(),
                    timer_chunk_seconds: 2,
                })
            );
            let config =
                with(&[("DW_SQS_QUEUE_URL", url), ("DW_SQS_REGION", "eu-west-1")]).unwrap();
            let QueueSettings::Sqs(settings) = config.queue else {
                panic!("sqs");
            };
            assert_eq!(
                (settings.region.as_str(), settings.timer_chunk_seconds),
                ("eu-west-1", 900)
            );
        } else {
            let err = with(&[("DW_SQS_QUEUE_URL", url)]).unwrap_err();
            assert_eq!(err.invalid_names(), ["DW_QUEUE_DRIVER"], "{err}");
            assert!(err.to_string().contains("--features sqs"), "{err}");
        }
        // Each bad setting is named (after the feature's refusal, if any).
        let named = |more: &[(&'static str, &'static str)], name: &str, says: &str| {
            let err = with(more).unwrap_err();
            let names = err.invalid_names();
            assert_eq!(names.last(), Some(&name), "{err}");
            assert!(err.to_string().contains(says), "{err}");
        };
        named(&[], "DW_SQS_QUEUE_URL", "required with DW_QUEUE_DRIVER=sqs");
        named(
            &[("DW_SQS_QUEUE_URL", "sqs/queue")],
            "DW_SQS_QUEUE_URL",
            "http:// or https://",
        );
        named(
            &[(
                "DW_SQS_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/dw.fifo",
            )],
            "DW_SQS_QUEUE_URL",
            "FIFO queue",
        );
        named(
            &[
                ("DW_SQS_QUEUE_URL", url),
                ("DW_SQS_ENDPOINT", "localhost:5405"),
            ],
            "DW_SQS_ENDPOINT",
            "http:// or https://",
        );
        for chunk in ["0", "901"] {
            let pairs: [(&'static str, &'static str); 2] = [
                ("DW_SQS_QUEUE_URL", url),
                ("DW_SQS_TIMER_CHUNK_SECONDS", chunk),
            ];
            named(&pairs, "DW_SQS_TIMER_CHUNK_SECONDS", "expected 1 to 900");
        }
    }

    #[test]
    fn a_node_without_an_id_refuses_to_start_unless_dev() {
        let none = |_: &str| None;
        let err = ServerConfig::from_lookup(none, false).unwrap_err();
        assert!(err.has(&Problem::MissingServerId), "{err}");
        let dev = ServerConfig::from_lookup(none, true).unwrap();
        assert!(dev.server_id.starts_with("dev-"));
        assert!(dev.bind.ip().is_loopback());
    }

    #[test]
    fn the_store_defaults_to_a_data_directory_never_the_working_tree() {
        let node = |pairs: &'static [(&'static str, &'static str)]| {
            ServerConfig::from_lookup(
                move |k| {
                    [("DW_SERVER_ID", "n1"), ("DW_AUTH", "none")]
                        .into_iter()
                        .chain(pairs.iter().copied())
                        .find(|(name, _)| *name == k)
                        .map(|(_, v)| v.to_owned())
                },
                false,
            )
        };
        let database = |pairs| node(pairs).unwrap().database.unwrap();
        assert_eq!(
            database(&[("HOME", "/home/u")]),
            PathBuf::from("/home/u/.local/share/dwserver/dwserver.sqlite")
        );
        assert_eq!(
            database(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "/xdg")]),
            PathBuf::from("/xdg/dwserver/dwserver.sqlite")
        );
        // A relative XDG_DATA_HOME is ignored, as the XDG spec says.
        assert_eq!(
            database(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "rel")]),
            PathBuf::from("/home/u/.local/share/dwserver/dwserver.sqlite")
        );
        assert_eq!(
            database(&[("HOME", "/home/u"), ("DW_DATA_DIR", "/srv/dw")]),
            PathBuf::from("/srv/dw/dwserver.sqlite")
        );
        assert_eq!(
            database(&[
                ("DW_DATA_DIR", "/srv/dw"),
                ("DW_DATABASE_PATH", "/tmp/x.db")
            ]),
            PathBuf::from("/tmp/x.db")
        );
        assert_eq!(node(&[]).unwrap_err().problems, [Problem::NoDataDir]);
        assert_eq!(
            node(&[("HOME", "relative")]).unwrap_err().problems,
            [Problem::NoDataDir]
        );
    }

    #[test]
    fn limits_and_scan_caps_are_read() {
        let env = HashMap::from([
            ("DW_SERVER_ID", "n1"),
            ("DW_DATABASE_PATH", ":memory:"),
            ("DW_AUTH", "none"),
            ("DW_NAMESPACE_REQUEST_LIMITS", "a=2/10, b=1"),
            (
                "DW_SERVER_POLLING_EXPIRED_WORKFLOW_TASK_RECOVERY_SCAN_LIMIT",
                "3",
            ),
        ]);
        let config =
            ServerConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()), false).unwrap();
        assert_eq!(config.namespace_limits["a"].per_minute, 10);
        assert_eq!(config.namespace_limits["b"].max_concurrent, 1);
        assert_eq!(config.poller.expired_workflow_task_recovery_scan_limit, 3);
        assert_eq!(config.prometheus_workflow_series_limit, None);
        assert!(ServerConfig::from_lookup(
            |k| (k == "DW_SERVER_ID")
                .then(|| "n".into())
                .or((k == "DW_BIND").then(|| "x".into())),
            false
        )
        .is_err());
        let no_tokens = ServerConfig::from_lookup(
            |k| match k {
                "DW_SERVER_ID" => Some("n".into()),
                "DW_DATABASE_PATH" => Some(":memory:".into()),
                _ => None,
            },
            false,
        );
        assert_eq!(no_tokens.unwrap_err().problems, [Problem::MissingTokens]);
        // A malformed binding is refused naming the variable and the
        // entry's position; the secret is never printed.
        let bad_binding = ServerConfig::from_lookup(
            |k| match k {
                "DW_SERVER_ID" => Some("n".into()),
                "DW_DATABASE_PATH" => Some(":memory:".into()),
                "DW_AUTH_OPERATOR_TOKENS" => Some("good@tenant-a, hush-hush@".into()),
                _ => None,
            },
            false,
        )
        .unwrap_err();
        assert_eq!(bad_binding.invalid_names(), ["DW_AUTH_OPERATOR_TOKENS"]);
        let text = bad_binding.to_string();
        assert!(text.contains("entry 2"), "{text}");
        assert!(!text.contains("hush") && !text.contains("good"), "{text}");
        let with_token = ServerConfig::from_lookup(
            |k| match k {
                "DW_SERVER_ID" => Some("n".into()),
                "DW_DATABASE_PATH" => Some(":memory:".into()),
                "DW_AUTH_ADMIN_TOKENS" => Some("secret".into()),
                _ => None,
            },
            false,
        )
        .unwrap();
        assert!(with_token.auth.is_some());
        assert_eq!(with_token.allowed_hosts[0], "localhost");
    }

    #[test]
    fn the_series_limits_are_read_strictly() {
        for variable in [
            "DW_SERVER_METRICS_PROMETHEUS_WORKFLOW_SERIES_LIMIT",
            "DW_SERVER_METRICS_WORKFLOW_TASK_FAILURE_TYPE_LIMIT",
        ] {
            let with = |value: &'static str| {
                ServerConfig::from_lookup(
                    move |k| match k {
                        "DW_SERVER_ID" => Some("n".into()),
                        "DW_DATABASE_PATH" => Some(":memory:".into()),
                        "DW_AUTH" => Some("none".into()),
                        k if k == variable => Some(value.into()),
                        _ => None,
                    },
                    false,
                )
            };
            let config = with(" 25 ").unwrap();
            let read = if variable.contains("PROMETHEUS") {
                config.prometheus_workflow_series_limit
            } else {
                config.workflow_task_failure_type_limit
            };
            assert_eq!(read, Some(25), "{variable}");
            for bad in ["abc", "-1", "", "2.5"] {
                let err = with(bad).unwrap_err();
                assert_eq!(err.invalid_names(), [variable], "{variable}={bad:?}: {err}");
            }
        }
    }

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dw.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn env_owned(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let base = env(&[]);
        move |k| {
            pairs
                .iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
                .or_else(|| base(k))
        }
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            [
                ("DW_SERVER_ID", "n1"),
                ("DW_AUTH", "none"),
                ("DW_DATABASE_PATH", ":memory:"),
            ]
            .iter()
            .chain(pairs)
            .find(|(name, _)| *name == k)
            .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_file_sets_limits_and_the_environment_overrides_it() {
        let (_dir, path) = file(
            "[server.limits]\nmax_memo_bytes = 1024\nmax_payload_bytes = 4096\n\n\
             [workflows.v2.structural_limits]\npending_activity_count = 7\nhistory_transaction_bytes = 0\n\n\
             [server.polling]\ndue_timer_recovery_scan_limit = 9\n",
        );
        let config =
            ServerConfig::load(env(&[("DW_MAX_MEMO_BYTES", "2048")]), Some(&path), false).unwrap();
        assert_eq!(config.request_limits.max_memo_bytes, 2048, "env wins");
        assert_eq!(config.request_limits.max_payload_bytes, 4096, "file");
        assert_eq!(config.store.limits.pending_activity_count, 7);
        assert_eq!(config.store.history_budget.max_bytes, 0);
        assert_eq!(config.store.history_budget.max_events, 5000);
        assert_eq!(config.poller.due_timer_recovery_scan_limit, 9);
    }

    #[test]
    fn the_schedule_catch_up_window_is_read_and_bounded() {
        const VAR: &str = "DW_SERVER_SCHEDULES_CATCHUP_WINDOW_SECONDS";
        let config = ServerConfig::load(env(&[(VAR, "600")]), None, false).unwrap();
        assert_eq!(
            config.schedule_sweep.catchup_window,
            Duration::from_secs(600)
        );
        let zero = ServerConfig::load(env(&[(VAR, "0")]), None, false).unwrap();
        assert_eq!(
            zero.schedule_sweep.catchup_window,
            ScheduleSweep::DEFAULT_CATCHUP_WINDOW
        );
        let (_dir, path) = file("[server.schedules]\ncatchup_window_seconds = 120\n");
        let filed = ServerConfig::load(env(&[]), Some(&path), false).unwrap();
        assert_eq!(
            filed.schedule_sweep.catchup_window,
            Duration::from_secs(120)
        );
        let err = ServerConfig::load(env(&[(VAR, "86401")]), None, false).unwrap_err();
        assert_eq!(err.invalid_names(), [VAR]);
        assert!(err.to_string().contains("at most 86400 seconds"), "{err}");
    }

    #[test]
    fn the_upload_roles_are_read_and_an_unknown_role_stops_the_start() {
        use crate::server::auth::Role;
        const VAR: &str = "DW_EXTERNAL_PAYLOAD_UPLOAD_ROLES";
        let defaults = ServerConfig::load(env(&[]), None, false).unwrap();
        assert_eq!(defaults.external_payloads.upload_roles, Role::ALL);
        let config =
            ServerConfig::load(env(&[(VAR, " worker , operator,worker")]), None, false).unwrap();
        assert_eq!(
            config.external_payloads.upload_roles,
            [Role::Worker, Role::Operator]
        );
        let (_dir, path) =
            file("[server.external_payload_transport]\nupload_roles = [\"worker\"]\n");
        let filed = ServerConfig::load(env(&[]), Some(&path), false).unwrap();
        assert_eq!(filed.external_payloads.upload_roles, [Role::Worker]);
        let (_dir, path) =
            file("[server.external_payload_transport]\nupload_roles = \"operator,admin\"\n");
        let filed = ServerConfig::load(env(&[]), Some(&path), false).unwrap();
        assert_eq!(
            filed.external_payloads.upload_roles,
            [Role::Operator, Role::Admin]
        );
        for (bad, says) in [
            ("worker,root", "unknown role \"root\""),
            ("Worker", "unknown role \"Worker\""),
            ("", "no role named"),
            (" , ", "no role named"),
        ] {
            let err = ServerConfig::load(env_owned(&[(VAR, bad)]), None, false).unwrap_err();
            assert_eq!(err.invalid_names(), [VAR], "{bad:?}");
            let text = err.to_string();
            assert!(text.contains(VAR) && text.contains(says), "{bad:?}: {text}");
            assert!(text.contains("worker, operator, admin"), "{text}");
        }
    }

    #[test]
    fn stream_bounds_come_from_the_file_and_the_environment() {
        let (_dir, path) =
            file("[server.streams]\nmax_items_per_stream = 7\nmax_streams_per_run = 9\n");
        let config = ServerConfig::load(
            env(&[("DW_WORKFLOW_STREAMS_PER_RUN", "3")]),
            Some(&path),
            false,
        )
        .unwrap();
        assert_eq!(config.store.streams.max_items_per_stream, 7, "file");
        assert_eq!(config.store.streams.max_streams_per_run, 3, "env wins");
        let defaults = ServerConfig::load(env(&[]), None, false).unwrap();
        assert_eq!(defaults.store.streams.max_items_per_stream, 10_000);
    }

    #[test]
    fn durable_state_defaults_come_from_the_file_and_the_environment() {
        use crate::durable_state::DurableResource;
        let (_dir, path) = file(
            "[server.namespace_durable_state.limits]\nmax_schedules = 50\nmax_workflow_streams = 0\n",
        );
        let config = ServerConfig::load(
            env(&[
                (
                    "DW_SERVER_NAMESPACE_DURABLE_STATE_LIMITS_MAX_WORKFLOW_STREAM_ITEMS",
                    "900",
                ),
                ("DW_NAMESPACE_DURABLE_STATE_LIMITS", "t:schedules=3"),
            ]),
            Some(&path),
            false,
        )
        .unwrap();
        let defaults = config.durable_state_defaults;
        assert_eq!(defaults.get(DurableResource::Schedules), Some(50));
        assert_eq!(
            defaults.get(DurableResource::WorkflowStreams),
            None,
            "0 disables"
        );
        assert_eq!(
            defaults.get(DurableResource::WorkflowStreamItems),
            Some(900)
        );
        assert_eq!(
            config.durable_state_limits["t"].get(DurableResource::Schedules),
            Some(3)
        );
        let err = ServerConfig::load(
            env(&[(
                "DW_SERVER_NAMESPACE_DURABLE_STATE_LIMITS_MAX_SCHEDULES",
                "many",
            )]),
            None,
            false,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("DW_SERVER_NAMESPACE_DURABLE_STATE_LIMITS_MAX_SCHEDULES"),
            "{err}"
        );
    }

    #[test]
    fn every_bad_value_of_every_group_from_file_and_environment_is_one_error() {
        let (_dir, path) = file(
            "[server.limits]\nmax_memo_bytes = -5\n\n\
             [workflows.v2.structural_limits]\npending_child_count = \"lots\"\npending_timer_cout = 1\n\n\
             [server.workers]\nidle_worker_prune_scan_limit = 2.5\n",
        );
        let err = ServerConfig::load(
            env(&[
                ("DW_MAX_OPERATION_NAME_LENGTH", "abc"),
                ("DW_V2_LIMIT_PENDING_SIGNALS", "-1"),
                ("DW_V2_LIMIT_HISTORY_TRANSACTION_BYTES", "16MiB"),
                ("DW_SERVER_POLLING_DUE_TIMER_RECOVERY_SCAN_LIMIT", "fve"),
                ("DW_SERVER_METRICS_PROMETHEUS_WORKFLOW_SERIES_LIMIT", "1e3"),
                ("DW_TASK_LEASE_MS", "+30"),
            ]),
            Some(&path),
            false,
        )
        .unwrap_err();
        let mut names = err.invalid_names();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "DW_MAX_MEMO_BYTES",
                "DW_MAX_OPERATION_NAME_LENGTH",
                "DW_SERVER_METRICS_PROMETHEUS_WORKFLOW_SERIES_LIMIT",
                "DW_SERVER_POLLING_DUE_TIMER_RECOVERY_SCAN_LIMIT",
                "DW_SERVER_WORKERS_IDLE_WORKER_PRUNE_SCAN_LIMIT",
                "DW_TASK_LEASE_MS",
                "DW_V2_LIMIT_HISTORY_TRANSACTION_BYTES",
                "DW_V2_LIMIT_PENDING_CHILDREN",
                "DW_V2_LIMIT_PENDING_SIGNALS",
            ]
        );
        let source = |name: &str| {
            err.problems.iter().find_map(|p| match p {
                Problem::Invalid {
                    name: n, source, ..
                } if n == name => Some(source.clone()),
                _ => None,
            })
        };
        assert_eq!(
            source("DW_MAX_MEMO_BYTES"),
            Some(Source::File {
                path: path.clone(),
                key: "server.limits.max_memo_bytes".into(),
                line: 2
            })
        );
        assert_eq!(
            source("DW_V2_LIMIT_PENDING_SIGNALS"),
            Some(Source::Environment)
        );
        assert!(err.problems.iter().any(
            |p| matches!(p, Problem::File(f) if f.line == Some(6) && f.message.contains("pending_timer_count"))
        ));
        let text = err.to_string();
        assert!(
            text.starts_with("invalid configuration (10 problems):"),
            "{text}"
        );
        assert!(
            text.contains("dw.toml:2: server.limits.max_memo_bytes = \"-5\""),
            "{text}"
        );
        assert!(
            text.contains("DW_V2_LIMIT_PENDING_SIGNALS=\"-1\" (environment)"),
            "{text}"
        );
        // Each problem says what 0 means for its own setting.
        let problem = |name: &str| {
            err.problems
                .iter()
                .find_map(|p| match p {
                    Problem::Invalid {
                        name: n, problem, ..
                    } if n == name => Some(problem.clone()),
                    _ => None,
                })
                .unwrap()
        };
        for (name, says) in [
            ("DW_MAX_OPERATION_NAME_LENGTH", "(0 disables)"),
            ("DW_V2_LIMIT_PENDING_SIGNALS", "(0 disables)"),
            (
                "DW_SERVER_POLLING_DUE_TIMER_RECOVERY_SCAN_LIMIT",
                "(0 uses the default, 5)",
            ),
            (
                "DW_SERVER_WORKERS_IDLE_WORKER_PRUNE_SCAN_LIMIT",
                "(0 uses the default, 100)",
            ),
            (
                "DW_SERVER_METRICS_PROMETHEUS_WORKFLOW_SERIES_LIMIT",
                "(0 is clamped to the minimum)",
            ),
        ] {
            let text = problem(name);
            assert!(text.ends_with(says), "{name}: {text}");
        }
        assert_eq!(
            problem("DW_TASK_LEASE_MS"),
            "expected a non-negative integer"
        );
    }

    #[test]
    fn a_misspelt_variable_is_named_with_the_nearest_known_one() {
        let warnings = unknown_variables(
            [
                "DW_MAX_PAYLOD_BYTES",
                "DW_MAX_PAYLOAD_BYTES",
                "DW_AUTH_ADMIN_TOKENS",
                "DW_PERF_DURATION_SECONDS",
                "DW_TEST_REDIS_URL",
                "DW_ENV",
                "HOME",
            ]
            .map(String::from),
        );
        assert_eq!(
            warnings,
            ["DW_MAX_PAYLOD_BYTES is set but dwserver reads no such variable: did you mean DW_MAX_PAYLOAD_BYTES?"]
        );
    }

    /// Every `"DW_…"` literal in the engine's sources is a variable
    /// `unknown_variables` knows, or one of another program's: a new
    /// setting cannot be warned about as unknown.
    #[test]
    fn every_variable_the_sources_name_is_known() {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        // Read by the tests, not by dwserver, and the misspelling above.
        let test_only = [
            "DW_BOUNDS_CHILD",
            "DW_SIGKILL_SEED",
            "DW_X",
            "DW_MAX_PAYLOD_BYTES",
        ];
        let mut files = Vec::new();
        walk(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut names = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (at, _) in text.match_indices("\"DW_") {
                let name: String = text[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.ends_with('_') && !test_only.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        assert!(names.len() > 50, "{names:?}");
        let warnings = unknown_variables(names);
        assert!(warnings.is_empty(), "{warnings:#?}");
    }

    #[test]
    fn a_host_name_in_the_bind_address_is_resolved() {
        let config = ServerConfig::load(env(&[("DW_BIND", "localhost:0")]), None, false).unwrap();
        assert!(config.bind.ip().is_loopback(), "{}", config.bind);
        assert_eq!(config.bind.port(), 0);
        let config = ServerConfig::load(env(&[("DW_BIND", "[::1]:8080")]), None, false).unwrap();
        assert_eq!(config.bind.to_string(), "[::1]:8080");
        // No port, a port out of range, or no host: the message says what
        // to write instead of a parser's "invalid socket address syntax".
        let bad: [&'static [(&str, &str)]; 4] = [
            &[("DW_BIND", "localhost")],
            &[("DW_BIND", "localhost:99999")],
            &[("DW_BIND", ":8080")],
            &[("DW_BIND", "8080")],
        ];
        for bad in bad {
            let err = ServerConfig::load(env(bad), None, false).unwrap_err();
            assert!(
                err.to_string().ends_with(
                    "expected HOST:PORT, e.g. 127.0.0.1:8080, localhost:8080 or [::1]:8080 (port 0 picks a free one)"
                ),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn the_environment_is_said_to_override_a_key_only_when_it_is_set() {
        let (_dir, path) = file("[server.limits]\nmax_memo_bytes = \"128KiB\"\n");
        // From the file, the variable unset: the file's line, and no word of
        // an override that is not there.
        let err = ServerConfig::load(env(&[]), Some(&path), false).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "{}:2: server.limits.max_memo_bytes = \"128KiB\": expected",
                path.display()
            )),
            "{text}"
        );
        assert!(!text.contains("overrides"), "{text}");
        // Set in both: the environment's value is the one refused, and the
        // message says which file key it overrides.
        let err = ServerConfig::load(env(&[("DW_MAX_MEMO_BYTES", "2x")]), Some(&path), false)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "DW_MAX_MEMO_BYTES=\"2x\" (environment, which overrides {}:2: server.limits.max_memo_bytes): expected",
                path.display()
            )),
            "{text}"
        );
        // Set in the environment alone: no file to speak of.
        let err = ServerConfig::load(env(&[("DW_MAX_MEMO_BYTES", "2x")]), None, false).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("DW_MAX_MEMO_BYTES=\"2x\" (environment): expected"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_or_broken_file_is_a_problem_reported_with_the_rest() {
        let missing = Path::new("/nonexistent/dw.toml");
        let err = ServerConfig::load(env(&[("DW_MAX_MEMO_BYTES", "x")]), Some(missing), false)
            .unwrap_err();
        assert_eq!(err.problems.len(), 2, "{err}");
        assert!(err.to_string().contains("cannot read the config file"));
        let (_dir, path) = file("[server.limits\nmax_memo_bytes = 1\n");
        let err = ServerConfig::load(env(&[]), Some(&path), false).unwrap_err();
        assert!(err.to_string().contains("TOML syntax error"), "{err}");
    }
}
