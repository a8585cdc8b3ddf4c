//! How a store is opened and what it enforces: [`StoreConfig`], its
//! durability, and the stream policy every append and close applies.
//!
//! Plain settings with their defaults, at the store's bottom layer: the
//! connection ([`connection`](super::connection)) is opened with them, and
//! the transitions read them from the store they run on. It uses only the
//! history reader's page bound and dwpolicy's limits.

use std::time::Duration;

use dwpolicy::{EnvConfigError, HistoryBudget, StructuralLimits};

use crate::store::db::PostgresSettings;
use crate::store::history::HistoryPageLimit;

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: a committed task survives power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: survives a killed process; the last commits
    /// may roll back after power loss (WAL keeps the file consistent either way).
    Normal,
}

/// How a store is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The structural limits every enforcement point checks.
    pub limits: StructuralLimits,
    /// The budget of one v1 projection import.
    pub history_budget: HistoryBudget,
    /// The queue driver named in the backend contract.
    pub queue_driver: String,
    /// How long a write waits for another connection's lock.
    pub busy_timeout: Duration,
    /// Commit durability.
    pub durability: Durability,
    /// The largest history page handed to a worker with a task.
    pub history_page: HistoryPageLimit,
    /// Bytes of unprocessed signal and update payloads one run may hold
    /// (0: unlimited). Admission refuses the message that would pass it.
    pub max_pending_payload_bytes: u64,
    /// Workflow stream retention and the per-run stream cap.
    pub streams: StreamPolicy,
    /// How long an uploaded external payload that nothing holds is kept
    /// (`server.external_payload_transport.orphan_grace_seconds`): time
    /// for the request that names it to arrive. Only payloads nothing
    /// holds and not uploaded again within it are deleted.
    pub external_payload_orphan_grace: Duration,
    /// SQLite's `max_page_count` for the writer connection (`None`: SQLite's
    /// own, effectively the disk). A store at it fails writes exactly as a
    /// full disk does (SQLITE_FULL), which is how the full-disk answers are
    /// tested without filling a disk.
    pub max_page_count: Option<u64>,
    /// How a PostgreSQL session is opened and how long its calls may take
    /// (unused on SQLite).
    pub postgres: PostgresSettings,
    /// PostgreSQL: commit completions that write one run on a run writer of
    /// their own, under the write lock taken shared, with claims taking
    /// their run's key (`DW_STORE_RUN_WRITER=on`;
    /// [`crate::store::db::Connection::begin_run_writes`]). Off by default:
    /// docs/performance.md ("Completions of one run beside other writers",
    /// and session 33's "What the balancer, the shared cache and the
    /// spreading each cost") has the measurements that keep it off.
    pub run_writer: bool,
}

/// The default orphan grace of an uploaded external payload: one day
/// (docs/bounded-growth.md says why).
pub const DEFAULT_EXTERNAL_PAYLOAD_ORPHAN_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

/// The default per-run budget of unprocessed message payload bytes: 64 MiB,
/// so 32 signals at the 2 MiB payload limit, not 5,000 of them.
pub const DEFAULT_MAX_PENDING_PAYLOAD_BYTES: u64 = 64 * 1024 * 1024;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            limits: StructuralLimits::default(),
            history_budget: HistoryBudget::default(),
            queue_driver: "database".to_owned(),
            busy_timeout: Duration::from_secs(10),
            durability: Durability::Full,
            history_page: HistoryPageLimit::default(),
            max_pending_payload_bytes: DEFAULT_MAX_PENDING_PAYLOAD_BYTES,
            streams: StreamPolicy::default(),
            external_payload_orphan_grace: DEFAULT_EXTERNAL_PAYLOAD_ORPHAN_GRACE,
            max_page_count: None,
            postgres: PostgresSettings::default(),
            run_writer: false,
        }
    }
}

impl StoreConfig {
    /// Defaults with the limits and the history budget read from the environment.
    pub fn from_env() -> Result<Self, EnvConfigError> {
        Ok(StoreConfig {
            limits: StructuralLimits::from_env()?,
            history_budget: HistoryBudget::from_env()?,
            ..StoreConfig::default()
        })
    }
}

/// The stream settings every append and close applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPolicy {
    /// The retention window of a stream that names none at close.
    pub default_retention_seconds: u64,
    /// Streams one run may open.
    pub max_streams_per_run: u64,
    /// Items one stream may hold (0: no cap).
    pub max_items_per_stream: u64,
}

/// The default retention window: one day after the stream ends.
pub const DEFAULT_STREAM_RETENTION_SECONDS: u64 = 24 * 3600;
/// The default number of streams one run may open.
pub const DEFAULT_MAX_STREAMS_PER_RUN: u64 = 100;
/// The default number of items one stream may hold. An open stream of a
/// long-lived run is never reclaimed, so without a cap its items would grow
/// as long as the run appends; with it a run holds at most
/// `max_streams_per_run × max_items_per_stream` items (1,000,000 by default).
pub const DEFAULT_MAX_ITEMS_PER_STREAM: u64 = 10_000;

impl Default for StreamPolicy {
    fn default() -> Self {
        StreamPolicy {
            default_retention_seconds: DEFAULT_STREAM_RETENTION_SECONDS,
            max_streams_per_run: DEFAULT_MAX_STREAMS_PER_RUN,
            max_items_per_stream: DEFAULT_MAX_ITEMS_PER_STREAM,
        }
    }
}
