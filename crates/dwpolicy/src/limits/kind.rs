//! The ten structural limit kinds, with their seed names, defaults and variables.
//!
//! The kind names are a wire contract (`structural_limit_kind` in failures,
//! keys of the health snapshot, `limit_kind` in warning logs), so they live
//! in one table here rather than as strings scattered through the engine.

use std::fmt;

/// Whether a limit bounds a number of things or a number of bytes.
///
/// They compare differently: a count limit is checked *before* one more
/// item is added, so it is hit when `current >= limit`; a batch is checked
/// whole before any of it is scheduled, so, as the reference engine's
/// `batchSize > limit` guard, it is hit when `leaves > limit` (a batch of
/// exactly the limit passes); a size limit is checked on the finished
/// encoding, so it is hit when `bytes > limit`. Counts and batches warn;
/// sizes never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Measure {
    /// Pending items or history events already there.
    Count,
    /// The leaves of one fan-out, counted whole.
    Batch,
    /// Serialized bytes.
    Size,
}

/// One kind of structural limit.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// Open activity executions without a terminal state.
    PendingActivityCount,
    /// Open child workflows without a terminal state.
    PendingChildCount,
    /// Open pending timers.
    PendingTimerCount,
    /// Received, unprocessed signals.
    PendingSignalCount,
    /// Accepted, unresolved updates.
    PendingUpdateCount,
    /// Leaf operations in one parallel fan-out (`all()`).
    CommandBatchSize,
    /// Serialized size of one argument set.
    PayloadSizeBytes,
    /// Serialized size of the merged memo.
    MemoSizeBytes,
    /// Serialized size of the merged search attributes.
    SearchAttributeSizeBytes,
    /// New history events written by one workflow task.
    HistoryTransactionSize,
}

impl LimitKind {
    /// Every kind, in the order the health snapshot lists them.
    pub const ALL: [LimitKind; 10] = [
        LimitKind::PendingActivityCount,
        LimitKind::PendingChildCount,
        LimitKind::PendingTimerCount,
        LimitKind::PendingSignalCount,
        LimitKind::PendingUpdateCount,
        LimitKind::CommandBatchSize,
        LimitKind::PayloadSizeBytes,
        LimitKind::MemoSizeBytes,
        LimitKind::SearchAttributeSizeBytes,
        LimitKind::HistoryTransactionSize,
    ];

    /// The wire name, e.g. `pending_activity_count`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitKind::PendingActivityCount => "pending_activity_count",
            LimitKind::PendingChildCount => "pending_child_count",
            LimitKind::PendingTimerCount => "pending_timer_count",
            LimitKind::PendingSignalCount => "pending_signal_count",
            LimitKind::PendingUpdateCount => "pending_update_count",
            LimitKind::CommandBatchSize => "command_batch_size",
            LimitKind::PayloadSizeBytes => "payload_size_bytes",
            LimitKind::MemoSizeBytes => "memo_size_bytes",
            LimitKind::SearchAttributeSizeBytes => "search_attribute_size_bytes",
            LimitKind::HistoryTransactionSize => "history_transaction_size",
        }
    }

    /// The limit when nothing is configured.
    pub const fn default_limit(self) -> u64 {
        match self {
            LimitKind::PendingActivityCount => 2000,
            LimitKind::PendingChildCount => 1000,
            LimitKind::PendingTimerCount => 2000,
            LimitKind::PendingSignalCount => 5000,
            LimitKind::PendingUpdateCount => 500,
            LimitKind::CommandBatchSize => 1000,
            LimitKind::PayloadSizeBytes => 2 * 1024 * 1024,
            LimitKind::MemoSizeBytes => 256 * 1024,
            LimitKind::SearchAttributeSizeBytes => 40 * 1024,
            LimitKind::HistoryTransactionSize => 5000,
        }
    }

    /// The environment variable that overrides the limit.
    pub const fn env_var(self) -> &'static str {
        match self {
            LimitKind::PendingActivityCount => "DW_V2_LIMIT_PENDING_ACTIVITIES",
            LimitKind::PendingChildCount => "DW_V2_LIMIT_PENDING_CHILDREN",
            LimitKind::PendingTimerCount => "DW_V2_LIMIT_PENDING_TIMERS",
            LimitKind::PendingSignalCount => "DW_V2_LIMIT_PENDING_SIGNALS",
            LimitKind::PendingUpdateCount => "DW_V2_LIMIT_PENDING_UPDATES",
            LimitKind::CommandBatchSize => "DW_V2_LIMIT_COMMAND_BATCH_SIZE",
            LimitKind::PayloadSizeBytes => "DW_V2_LIMIT_PAYLOAD_SIZE_BYTES",
            LimitKind::MemoSizeBytes => "DW_V2_LIMIT_MEMO_SIZE_BYTES",
            LimitKind::SearchAttributeSizeBytes => "DW_V2_LIMIT_SEARCH_ATTRIBUTE_SIZE_BYTES",
            LimitKind::HistoryTransactionSize => "DW_V2_LIMIT_HISTORY_TRANSACTION_SIZE",
        }
    }

    /// Whether the kind counts items or measures bytes.
    pub const fn measure(self) -> Measure {
        match self {
            LimitKind::PayloadSizeBytes
            | LimitKind::MemoSizeBytes
            | LimitKind::SearchAttributeSizeBytes => Measure::Size,
            LimitKind::CommandBatchSize => Measure::Batch,
            _ => Measure::Count,
        }
    }

    /// The kind with wire name `name`.
    pub fn from_name(name: &str) -> Option<LimitKind> {
        LimitKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_name_matches_as_str_and_round_trips() {
        for kind in LimitKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(serde_json::from_str::<LimitKind>(&json).unwrap(), kind);
            assert_eq!(LimitKind::from_name(kind.as_str()), Some(kind));
        }
        assert_eq!(LimitKind::from_name("pending_everything"), None);
    }

    #[test]
    fn byte_defaults_are_the_seed_sizes() {
        assert_eq!(LimitKind::PayloadSizeBytes.default_limit(), 2_097_152);
        assert_eq!(LimitKind::MemoSizeBytes.default_limit(), 262_144);
        assert_eq!(LimitKind::SearchAttributeSizeBytes.default_limit(), 40_960);
        let sizes: Vec<_> = LimitKind::ALL
            .into_iter()
            .filter(|k| k.measure() == Measure::Size)
            .collect();
        assert_eq!(sizes.len(), 3);
    }
}
