//! Structural limit configuration: defaults, `DW_V2_LIMIT_*` variables and serde.
//!
//! Operators set these through the environment or a config file; both paths
//! land in [`StructuralLimits`]. The environment path is strict (see
//! [`crate::env`]) because the reference implementation's `(int)` cast turns
//! a typo into `0`, and `0` disables a limit.

use serde::{Deserialize, Deserializer, Serializer};

use crate::env::{process_lookup, EnvConfigError, EnvReader};
use crate::limits::kind::LimitKind;

/// The variable that sets [`StructuralLimits::warning_threshold_percent`].
pub const WARNING_THRESHOLD_ENV: &str = "DW_V2_LIMIT_WARNING_THRESHOLD_PERCENT";

/// The warning threshold when nothing is configured.
pub const DEFAULT_WARNING_THRESHOLD_PERCENT: u8 = 80;

/// The configured structural limits (`workflows.v2.structural_limits`).
///
/// A limit of `0` disables that check; a warning threshold of `0` disables
/// approaching-limit warnings. Serializes as the health snapshot's
/// `structural_limits` object, keys in the seed's order. Deserializing fills
/// absent keys with defaults and refuses unknown keys, so a misspelt limit
/// cannot be silently ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StructuralLimits {
    /// Open activity executions per run (default 2000).
    pub pending_activity_count: u64,
    /// Open child workflows per run (default 1000).
    pub pending_child_count: u64,
    /// Pending timers per run (default 2000).
    pub pending_timer_count: u64,
    /// Unprocessed signals per run (default 5000).
    pub pending_signal_count: u64,
    /// Unresolved updates per run (default 500).
    pub pending_update_count: u64,
    /// Leaf operations in one `all()` fan-out (default 1000).
    pub command_batch_size: u64,
    /// Bytes of one serialized argument set (default 2 MiB).
    pub payload_size_bytes: u64,
    /// Bytes of the serialized, merged memo (default 256 KiB).
    pub memo_size_bytes: u64,
    /// Bytes of the serialized, merged search attributes (default 40 KiB).
    pub search_attribute_size_bytes: u64,
    /// New history events per workflow task (default 5000).
    pub history_transaction_size: u64,
    /// Utilization percent at which count limits warn (default 80, clamped to 0..=100).
    #[serde(
        serialize_with = "serialize_percent",
        deserialize_with = "deserialize_percent"
    )]
    pub warning_threshold_percent: u8,
}

fn serialize_percent<S: Serializer>(value: &u8, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u8((*value).min(100))
}

fn deserialize_percent<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u8, D::Error> {
    let value = u64::deserialize(deserializer)?;
    Ok(clamp_percent(value))
}

fn clamp_percent(value: u64) -> u8 {
    // Lossless: the value is at most 100 after the clamp.
    value.min(100) as u8
}

impl Default for StructuralLimits {
    fn default() -> Self {
        StructuralLimits {
            pending_activity_count: LimitKind::PendingActivityCount.default_limit(),
            pending_child_count: LimitKind::PendingChildCount.default_limit(),
            pending_timer_count: LimitKind::PendingTimerCount.default_limit(),
            pending_signal_count: LimitKind::PendingSignalCount.default_limit(),
            pending_update_count: LimitKind::PendingUpdateCount.default_limit(),
            command_batch_size: LimitKind::CommandBatchSize.default_limit(),
            payload_size_bytes: LimitKind::PayloadSizeBytes.default_limit(),
            memo_size_bytes: LimitKind::MemoSizeBytes.default_limit(),
            search_attribute_size_bytes: LimitKind::SearchAttributeSizeBytes.default_limit(),
            history_transaction_size: LimitKind::HistoryTransactionSize.default_limit(),
            warning_threshold_percent: DEFAULT_WARNING_THRESHOLD_PERCENT,
        }
    }
}

impl StructuralLimits {
    /// The configured limit for `kind` (`0`: disabled).
    pub fn get(&self, kind: LimitKind) -> u64 {
        match kind {
            LimitKind::PendingActivityCount => self.pending_activity_count,
            LimitKind::PendingChildCount => self.pending_child_count,
            LimitKind::PendingTimerCount => self.pending_timer_count,
            LimitKind::PendingSignalCount => self.pending_signal_count,
            LimitKind::PendingUpdateCount => self.pending_update_count,
            LimitKind::CommandBatchSize => self.command_batch_size,
            LimitKind::PayloadSizeBytes => self.payload_size_bytes,
            LimitKind::MemoSizeBytes => self.memo_size_bytes,
            LimitKind::SearchAttributeSizeBytes => self.search_attribute_size_bytes,
            LimitKind::HistoryTransactionSize => self.history_transaction_size,
        }
    }

    /// Sets the limit for `kind` (`0` disables it).
    pub fn set(&mut self, kind: LimitKind, limit: u64) {
        let slot = match kind {
            LimitKind::PendingActivityCount => &mut self.pending_activity_count,
            LimitKind::PendingChildCount => &mut self.pending_child_count,
            LimitKind::PendingTimerCount => &mut self.pending_timer_count,
            LimitKind::PendingSignalCount => &mut self.pending_signal_count,
            LimitKind::PendingUpdateCount => &mut self.pending_update_count,
            LimitKind::CommandBatchSize => &mut self.command_batch_size,
            LimitKind::PayloadSizeBytes => &mut self.payload_size_bytes,
            LimitKind::MemoSizeBytes => &mut self.memo_size_bytes,
            LimitKind::SearchAttributeSizeBytes => &mut self.search_attribute_size_bytes,
            LimitKind::HistoryTransactionSize => &mut self.history_transaction_size,
        };
        *slot = limit;
    }

    /// The warning threshold in percent, clamped to `0..=100` (`0`: warnings off).
    ///
    /// Clamped on read too because the field is public and may have been set
    /// directly past 100.
    pub fn warning_threshold(&self) -> u8 {
        self.warning_threshold_percent.min(100)
    }

    /// Reads the `DW_V2_LIMIT_*` variables from the process environment.
    pub fn from_env() -> Result<Self, EnvConfigError> {
        Self::from_env_with(process_lookup)
    }

    /// Reads the `DW_V2_LIMIT_*` variables through `lookup` (`None`: unset, use the default).
    ///
    /// Every invalid variable is reported, not only the first. A threshold
    /// above 100 is clamped to 100 rather than refused: it is a valid
    /// integer whose only sensible meaning is "warn at the limit".
    pub fn from_env_with(
        lookup: impl FnMut(&str) -> Option<String>,
    ) -> Result<Self, EnvConfigError> {
        let mut reader = EnvReader::new(lookup);
        let mut limits = StructuralLimits::default();
        for kind in LimitKind::ALL {
            let value = reader.read(kind.env_var(), kind.default_limit());
            limits.set(kind, value);
        }
        limits.warning_threshold_percent = clamp_percent(reader.read(
            WARNING_THRESHOLD_ENV,
            u64::from(DEFAULT_WARNING_THRESHOLD_PERCENT),
        ));
        reader.finish().map(|()| limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::pairs_lookup;

    #[test]
    fn empty_environment_gives_the_seed_defaults() {
        let limits = StructuralLimits::from_env_with(pairs_lookup(&[])).unwrap();
        assert_eq!(limits, StructuralLimits::default());
        assert_eq!(limits.warning_threshold(), 80);
        for kind in LimitKind::ALL {
            assert_eq!(limits.get(kind), kind.default_limit());
        }
    }

    #[test]
    fn every_variable_overrides_its_kind() {
        for (i, kind) in LimitKind::ALL.into_iter().enumerate() {
            let value = (i as u64 + 1) * 7;
            let limits = StructuralLimits::from_env_with(pairs_lookup(&[(
                kind.env_var(),
                &value.to_string(),
            )]))
            .unwrap();
            assert_eq!(limits.get(kind), value, "{}", kind.env_var());
            for other in LimitKind::ALL.into_iter().filter(|k| *k != kind) {
                assert_eq!(limits.get(other), other.default_limit());
            }
        }
    }

    #[test]
    fn zero_disables_and_threshold_is_clamped() {
        let limits = StructuralLimits::from_env_with(pairs_lookup(&[
            ("DW_V2_LIMIT_PENDING_ACTIVITIES", "0"),
            ("DW_V2_LIMIT_WARNING_THRESHOLD_PERCENT", "250"),
        ]))
        .unwrap();
        assert_eq!(limits.pending_activity_count, 0);
        assert_eq!(limits.warning_threshold(), 100);
        let off =
            StructuralLimits::from_env_with(pairs_lookup(&[(WARNING_THRESHOLD_ENV, "0")])).unwrap();
        assert_eq!(off.warning_threshold(), 0);
    }

    #[test]
    fn bad_values_are_all_reported_with_name_and_value() {
        let error = StructuralLimits::from_env_with(pairs_lookup(&[
            ("DW_V2_LIMIT_PENDING_ACTIVITIES", "abc"),
            ("DW_V2_LIMIT_MEMO_SIZE_BYTES", "-1"),
            ("DW_V2_LIMIT_WARNING_THRESHOLD_PERCENT", "80%"),
            ("DW_V2_LIMIT_PENDING_TIMERS", "10"),
        ]))
        .unwrap_err();
        let bad: Vec<_> = error
            .errors
            .iter()
            .map(|e| (e.variable.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(
            bad,
            [
                ("DW_V2_LIMIT_PENDING_ACTIVITIES", "abc"),
                ("DW_V2_LIMIT_MEMO_SIZE_BYTES", "-1"),
                ("DW_V2_LIMIT_WARNING_THRESHOLD_PERCENT", "80%"),
            ]
        );
    }

    #[test]
    fn serde_config_fills_defaults_clamps_and_refuses_unknown_keys() {
        let limits: StructuralLimits = serde_json::from_str(
            r#"{"pending_activity_count": 10, "warning_threshold_percent": 400}"#,
        )
        .unwrap();
        assert_eq!(limits.pending_activity_count, 10);
        assert_eq!(limits.pending_child_count, 1000);
        assert_eq!(limits.warning_threshold_percent, 100);
        assert!(serde_json::from_str::<StructuralLimits>(r#"{"pending_activities": 1}"#).is_err());
        assert!(serde_json::from_str::<StructuralLimits>(r#"{"memo_size_bytes": -1}"#).is_err());
        let manual = StructuralLimits {
            warning_threshold_percent: 200,
            ..StructuralLimits::default()
        };
        let json = serde_json::to_value(manual).unwrap();
        assert_eq!(json["warning_threshold_percent"], 100);
    }
}
