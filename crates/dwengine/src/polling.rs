//! Worker long-poll coordination: wake signals and the due-timer scan cap.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use crate::cache::Cache;

/// Wakes long-polling workers when work arrives on a channel.
///
/// One expiring key per wake channel touched during the TTL window; the
/// channel name is hashed so user-chosen namespace and queue names never
/// reach the key, and no index of channels is kept.
pub struct LongPollSignalStore<'c> {
    cache: &'c dyn Cache,
    ttl: Duration,
}

impl<'c> LongPollSignalStore<'c> {
    /// The family every wake key belongs to.
    pub const PREFIX: &'static str = "server:long-poll-signal:";
    /// How long a wake signal stays visible to pollers.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

    /// A store writing to `cache`.
    pub fn new(cache: &'c dyn Cache) -> Self {
        LongPollSignalStore {
            cache,
            ttl: Self::DEFAULT_TTL,
        }
    }

    /// The wake key of (namespace, task queue, channel).
    pub fn key(namespace: &str, task_queue: &str, channel: &str) -> String {
        let mut hasher = DefaultHasher::new();
        (namespace, task_queue, channel).hash(&mut hasher);
        format!("server:long-poll-signal:{:016x}", hasher.finish())
    }

    /// Records that work arrived; overwrites the previous signal's version.
    pub fn signal(&self, namespace: &str, task_queue: &str, channel: &str, version: u64) {
        let key = Self::key(namespace, task_queue, channel);
        self.cache
            .put(&key, version.to_be_bytes().to_vec(), self.ttl);
    }

    /// The latest signal version on a channel, if one is live.
    pub fn version(&self, namespace: &str, task_queue: &str, channel: &str) -> Option<u64> {
        let bytes = self.cache.get(&Self::key(namespace, task_queue, channel))?;
        Some(u64::from_be_bytes(bytes.try_into().ok()?))
    }
}

/// Leases workflow tasks to polling workers.
///
/// Each poll pass first recovers timers that came due while no worker was
/// polling; that scan is capped so an old backlog cannot make every poll slow.
#[derive(Debug, Clone)]
pub struct WorkflowTaskPoller {
    due_timer_recovery_scan_limit: usize,
}

impl WorkflowTaskPoller {
    /// The configuration key of the due-timer recovery cap.
    pub const DUE_TIMER_SCAN_LIMIT_KEY: &'static str =
        "server.polling.due_timer_recovery_scan_limit";
    /// Its default.
    pub const DEFAULT_DUE_TIMER_SCAN_LIMIT: usize = 5;

    /// A poller configured from `lookup` (config key → value).
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>) -> Self {
        let limit =
            lookup(Self::DUE_TIMER_SCAN_LIMIT_KEY).unwrap_or(Self::DEFAULT_DUE_TIMER_SCAN_LIMIT);
        WorkflowTaskPoller {
            due_timer_recovery_scan_limit: limit.max(1),
        }
    }

    /// The timers one poll pass recovers: the earliest due ones, at most the cap.
    pub fn due_timers_to_recover<T: Ord + Clone>(
        &self,
        due: impl IntoIterator<Item = T>,
    ) -> Vec<T> {
        let mut picked: Vec<T> = Vec::with_capacity(self.due_timer_recovery_scan_limit);
        for timer in due {
            picked.push(timer);
            picked.sort();
            picked.truncate(self.due_timer_recovery_scan_limit);
        }
        picked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn churned_channels_leave_one_key_each_and_hide_their_names() {
        let cache = MemoryCache::default();
        let store = LongPollSignalStore::new(&cache);
        for version in 0..3 {
            for queue in 0..50 {
                store.signal("tenant-a", &format!("queue-{queue}"), "workflow", version);
            }
        }
        assert_eq!(cache.count_prefix(LongPollSignalStore::PREFIX), 50);
        assert_eq!(store.version("tenant-a", "queue-7", "workflow"), Some(2));
        assert!(!LongPollSignalStore::key("tenant-a", "q", "c").contains("tenant-a"));
    }

    #[test]
    fn due_timer_recovery_is_capped_at_the_configured_limit() {
        let poller = WorkflowTaskPoller::from_config(|_| None);
        assert_eq!(poller.due_timers_to_recover(0..10_000).len(), 5);
        let poller = WorkflowTaskPoller::from_config(|key| {
            (key == WorkflowTaskPoller::DUE_TIMER_SCAN_LIMIT_KEY).then_some(2)
        });
        assert_eq!(poller.due_timers_to_recover([9, 3, 7, 1]), vec![1, 3]);
    }
}
