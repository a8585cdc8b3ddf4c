//! Shapes of the wire protocol that several transitions share: an
//! activity's [`RetryPolicy`], a parallel group member's metadata
//! ([`ParallelGroup`]), and the codec a payload envelope names.
//!
//! Workflow commands carry them in, and the activity, timer, stream and
//! signal bookkeeping reads them back from the rows, so they sit at the
//! store's bottom layer instead of with the command application that
//! writes them first. This module uses no other store module.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An activity's retry policy, as the SDK sends it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in all (1: no retry).
    #[serde(default)]
    pub max_attempts: Option<u64>,
    /// The wait before each retry, in seconds; the last one repeats.
    #[serde(default)]
    pub backoff_seconds: Vec<u64>,
    /// Failure types that are never retried.
    #[serde(default)]
    pub non_retryable_error_types: Vec<String>,
}

/// A parallel group member's metadata as the SDK sends it on each member
/// command; the server copies it onto the member's events so replay can
/// bind results to the group.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ParallelGroup {
    /// The group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group_id: Option<String>,
    /// What the group holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group_kind: Option<String>,
    /// The sequence of its first member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group_base_sequence: Option<i64>,
    /// How many members it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group_size: Option<i64>,
    /// This member's position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group_index: Option<i64>,
    /// Nested groups, outermost first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group_path: Option<Value>,
    /// `select` for a durable selection's member (`all` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_group_mode: Option<String>,
    /// A selection member's stable key (a name or an index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_member_key: Option<Value>,
    /// A selection member's position among the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_member_index: Option<i64>,
    /// The sequence of a selection member's first leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_member_base_sequence: Option<i64>,
    /// How many leaves a selection member has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_member_size: Option<i64>,
    /// A selection member's operation kind (`activity`, `timer`, `child`,
    /// `signal`, `condition`, `group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_member_kind: Option<String>,
}

impl ParallelGroup {
    pub(crate) fn is_empty(&self) -> bool {
        self.parallel_group_id.is_none()
    }

    /// Adds the metadata to an event payload.
    pub(crate) fn stamp(&self, payload: &mut Value) {
        if let (Value::Object(map), Ok(Value::Object(group))) =
            (payload, serde_json::to_value(self))
        {
            map.extend(group);
        }
    }
}

/// The codec an opaque payload envelope names (`avro` when it names none).
pub(crate) fn codec_of(payload: &Value) -> Value {
    payload
        .get("codec")
        .cloned()
        .unwrap_or_else(|| Value::String("avro".into()))
}
