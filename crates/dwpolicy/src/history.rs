//! The history budget for one-transaction projection imports.
//!
//! A v1 projection import writes a run's whole history in one transaction,
//! so its size must be bounded before the transaction starts. The budget has
//! two dimensions, events and bytes, and the byte metric is the canonical one
//! Core stores in run summaries; computing it the same way here is what lets
//! an import's measured size match what the server later reports.
//!
//! The API enforces the seed's order with types: [`HistoryBudget::begin`]
//! checks the event count, and only then hands out the [`ByteMeter`] that
//! encodes payloads, so no payload is encoded for an import whose count
//! alone is too large.

use std::io;

use serde::Serialize;

use crate::env::{process_lookup, EnvConfigError, EnvReader};

/// Variable for the event-count dimension.
pub const EVENTS_ENV: &str = "DW_V2_LIMIT_HISTORY_TRANSACTION_SIZE";
/// Variable for the byte dimension.
pub const BYTES_ENV: &str = "DW_V2_LIMIT_HISTORY_TRANSACTION_BYTES";
/// Default event budget.
pub const DEFAULT_MAX_EVENTS: u64 = 5000;
/// Default byte budget (16 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// The `reason` of an over-budget import.
pub const TOO_LARGE_REASON: &str = "v1_projection_too_large";

/// An `io::Write` that only counts, so measuring never allocates the encoding.
struct ByteCounter(u64);

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len() as u64);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The byte length of `value`'s compact JSON encoding.
///
/// serde_json writes `/` and non-ASCII characters unescaped, which is the
/// encoding Core's metric prescribes (PHP's `JSON_UNESCAPED_SLASHES |
/// JSON_UNESCAPED_UNICODE`). Fails only for values JSON cannot represent,
/// such as maps with non-string keys.
pub fn json_len<T: Serialize + ?Sized>(value: &T) -> Result<u64, serde_json::Error> {
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, value)?;
    Ok(counter.0)
}

/// Core's canonical history metric for one event: the event type's byte
/// length plus its payload's JSON byte length.
pub fn event_size<T: Serialize + ?Sized>(
    event_type: &str,
    payload: &T,
) -> Result<u64, serde_json::Error> {
    Ok((event_type.len() as u64).saturating_add(json_len(payload)?))
}

/// Which budget dimension an import exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetDimension {
    /// The number of events.
    Events,
    /// The summed canonical byte metric.
    Bytes,
}

/// The `limit` object of an over-budget import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BudgetUsage {
    /// The exceeded dimension.
    pub dimension: BudgetDimension,
    /// What the import needed: the full event count, or the byte total up to
    /// and including the first event over the budget.
    pub used: u64,
    /// The configured budget.
    pub limit: u64,
}

/// An import does not fit the history budget (HTTP 409).
///
/// Serializes as `{"reason":"v1_projection_too_large","limit":{"dimension","used","limit"}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[error(
    "v1 projection too large: {} {} over the budget of {} (raise {} or keep the run on v1)",
    .limit.used,
    dimension_word(.limit.dimension),
    .limit.limit,
    dimension_env(.limit.dimension)
)]
pub struct ProjectionTooLarge {
    /// Always [`TOO_LARGE_REASON`].
    pub reason: &'static str,
    /// What was exceeded.
    pub limit: BudgetUsage,
}

fn dimension_word(dimension: BudgetDimension) -> &'static str {
    match dimension {
        BudgetDimension::Events => "events",
        BudgetDimension::Bytes => "bytes",
    }
}

fn dimension_env(dimension: BudgetDimension) -> &'static str {
    match dimension {
        BudgetDimension::Events => EVENTS_ENV,
        BudgetDimension::Bytes => BYTES_ENV,
    }
}

impl ProjectionTooLarge {
    fn new(dimension: BudgetDimension, used: u64, limit: u64) -> Self {
        ProjectionTooLarge {
            reason: TOO_LARGE_REASON,
            limit: BudgetUsage {
                dimension,
                used,
                limit,
            },
        }
    }

    /// The HTTP status of this refusal (409 Conflict).
    pub fn status(&self) -> u16 {
        409
    }
}

/// Why measuring an import failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryBudgetError {
    /// The import exceeds a budget dimension.
    #[error(transparent)]
    TooLarge(#[from] ProjectionTooLarge),
    /// An event payload cannot be encoded as JSON at all.
    #[error("history event {index} ({event_type}) cannot be encoded as JSON: {source}")]
    Encode {
        /// Position of the event in history order (0-based).
        index: u64,
        /// Its event type.
        event_type: String,
        /// The encoder's error.
        source: serde_json::Error,
    },
}

/// Event and byte budgets for one import (`0` disables a dimension).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryBudget {
    /// Most events in one import.
    pub max_events: u64,
    /// Most canonical bytes in one import.
    pub max_bytes: u64,
}

impl Default for HistoryBudget {
    fn default() -> Self {
        HistoryBudget {
            max_events: DEFAULT_MAX_EVENTS,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// What a fitting import measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HistoryUsage {
    /// Events measured.
    pub events: u64,
    /// Their summed canonical byte metric.
    pub bytes: u64,
}

impl HistoryBudget {
    /// Reads the two variables from the process environment.
    pub fn from_env() -> Result<Self, EnvConfigError> {
        Self::from_env_with(process_lookup)
    }

    /// Reads the two variables through `lookup`, reporting every invalid one.
    pub fn from_env_with(
        lookup: impl FnMut(&str) -> Option<String>,
    ) -> Result<Self, EnvConfigError> {
        let mut reader = EnvReader::new(lookup);
        let budget = HistoryBudget {
            max_events: reader.read(EVENTS_ENV, DEFAULT_MAX_EVENTS),
            max_bytes: reader.read(BYTES_ENV, DEFAULT_MAX_BYTES),
        };
        reader.finish().map(|()| budget)
    }

    /// Checks the event count; on success returns the meter for the bytes.
    ///
    /// `event_count` fits when it is at most `max_events`: the budget is how
    /// many events one transaction may write.
    pub fn begin(&self, event_count: u64) -> Result<ByteMeter, ProjectionTooLarge> {
        if self.max_events != 0 && event_count > self.max_events {
            return Err(ProjectionTooLarge::new(
                BudgetDimension::Events,
                event_count,
                self.max_events,
            ));
        }
        Ok(ByteMeter {
            max_bytes: self.max_bytes,
            events: 0,
            bytes: 0,
        })
    }

    /// Checks a whole import: the count first, then events in history order,
    /// stopping at the first one over the byte budget.
    pub fn measure<'e, T, I>(&self, events: I) -> Result<HistoryUsage, HistoryBudgetError>
    where
        T: Serialize + 'e,
        I: IntoIterator<Item = (&'e str, &'e T)>,
        I::IntoIter: ExactSizeIterator,
    {
        let events = events.into_iter();
        let mut meter = self.begin(events.len() as u64)?;
        for (event_type, payload) in events {
            meter.add(event_type, payload)?;
        }
        Ok(meter.finish())
    }
}

/// Sums the canonical byte metric in history order against the byte budget.
#[derive(Debug, Clone)]
pub struct ByteMeter {
    max_bytes: u64,
    events: u64,
    bytes: u64,
}

impl ByteMeter {
    /// Adds the next event; fails on the first event that takes the total over the budget.
    pub fn add<T: Serialize + ?Sized>(
        &mut self,
        event_type: &str,
        payload: &T,
    ) -> Result<u64, HistoryBudgetError> {
        let size =
            event_size(event_type, payload).map_err(|source| HistoryBudgetError::Encode {
                index: self.events,
                event_type: event_type.to_owned(),
                source,
            })?;
        let total = self.bytes.saturating_add(size);
        if self.max_bytes != 0 && total > self.max_bytes {
            return Err(
                ProjectionTooLarge::new(BudgetDimension::Bytes, total, self.max_bytes).into(),
            );
        }
        self.bytes = total;
        self.events = self.events.saturating_add(1);
        Ok(size)
    }

    /// The usage so far.
    pub fn finish(self) -> HistoryUsage {
        HistoryUsage {
            events: self.events,
            bytes: self.bytes,
        }
    }
}
