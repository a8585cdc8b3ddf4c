//! The last worker poll seen on each task queue, for operators.
//!
//! "Is anyone polling this queue?" is the first question when work piles
//! up. One value per (namespace, task queue) answers it: later polls
//! overwrite it and it expires after 15 minutes, so there is no index of
//! workers or requests. It is diagnostic only: nothing reads it to decide
//! who gets a task.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cache::{hash_dimensions, Cache, CacheError};

/// One observed poll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollObservation {
    /// The worker that polled.
    pub worker_id: String,
    /// `workflow` or `activity`.
    pub kind: String,
    /// When, in Unix milliseconds.
    pub at_ms: i64,
    /// `leased`, `empty`, `replayed` or `rejected`.
    pub outcome: String,
}

/// Records and reads the last poll observation of a queue.
#[derive(Clone)]
pub struct WorkerPollDiagnostics {
    cache: Arc<dyn Cache>,
}

impl WorkerPollDiagnostics {
    /// The family of every observation key.
    pub const PREFIX: &'static str = "server:worker-poll-diagnostic:";
    /// How long an observation lives without a newer one.
    pub const TTL: Duration = Duration::from_secs(15 * 60);

    /// Diagnostics on `cache`.
    pub fn new(cache: Arc<dyn Cache>) -> Self {
        WorkerPollDiagnostics { cache }
    }

    fn key(namespace: &str, task_queue: &str) -> String {
        format!(
            "{}{}",
            Self::PREFIX,
            hash_dimensions(&[namespace, task_queue])
        )
    }

    /// Overwrites the queue's last observation.
    pub fn record(
        &self,
        namespace: &str,
        task_queue: &str,
        observation: &PollObservation,
    ) -> Result<(), CacheError> {
        let (key, value) = Self::entry(namespace, task_queue, observation);
        self.cache.put(&key, &value, Self::TTL)
    }

    /// The key and value [`WorkerPollDiagnostics::record`] writes (for
    /// [`Self::TTL`]), for a caller that writes them in one
    /// [`crate::cache::Cache::batch`] with the poll's replay key.
    pub fn entry(
        namespace: &str,
        task_queue: &str,
        observation: &PollObservation,
    ) -> (String, Vec<u8>) {
        let value = serde_json::to_vec(observation).unwrap_or_default();
        (Self::key(namespace, task_queue), value)
    }

    /// The queue's last observation, if one is live.
    pub fn last(
        &self,
        namespace: &str,
        task_queue: &str,
    ) -> Result<Option<PollObservation>, CacheError> {
        Ok(self
            .cache
            .get(&Self::key(namespace, task_queue))?
            .and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn later_observations_overwrite_the_single_value() {
        let cache = Arc::new(MemoryCache::default());
        let diagnostics = WorkerPollDiagnostics::new(cache.clone());
        for worker in 0..20 {
            let seen = PollObservation {
                worker_id: format!("w{worker}"),
                kind: "workflow".into(),
                at_ms: worker,
                outcome: "empty".into(),
            };
            diagnostics.record("ns", "q", &seen).unwrap();
        }
        assert_eq!(
            cache.count_prefix(WorkerPollDiagnostics::PREFIX).unwrap(),
            1
        );
        assert_eq!(
            diagnostics.last("ns", "q").unwrap().unwrap().worker_id,
            "w19"
        );
    }
}
