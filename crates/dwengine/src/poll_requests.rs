//! Idempotent worker polls: a repeated `poll_request_id` replays, never re-leases.
//!
//! A worker whose long poll timed out on its side retries with the same
//! poll request id. If the first poll already leased a task, the retry must
//! get that task back rather than lease a second one (which would sit
//! leased to nobody until its lease expired). Each poll writes one key: a
//! pending marker while it runs, overwritten by its short replay result
//! when it ends; it expires, and no index of request ids is kept. The
//! durable half of the replay is the poll request id stored on the leased
//! task row.
//!
//! One key, not a pending key beside a result key, so that a poll costs
//! the cache two operations (an `add` when it begins, a `put` when it
//! ends) instead of four (docs/performance.md, session 17).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cache::{hash_dimensions, Cache, CacheError, CacheOp};

/// How long poll bookkeeping lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollRequestTtls {
    /// The replay-result key's lifetime.
    pub result: Duration,
    /// Added to the poll's own wait for the pending key's lifetime.
    pub pending_slack: Duration,
}

impl Default for PollRequestTtls {
    fn default() -> Self {
        PollRequestTtls {
            result: Duration::from_secs(30),
            pending_slack: Duration::from_secs(5),
        }
    }
}

/// Where a poll stands when it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollClaim {
    /// First arrival: this request runs the poll.
    Fresh,
    /// Already answered: replay this result.
    Replay(Vec<u8>),
    /// Another arrival of the same id is still polling.
    InFlight,
}

/// The shared mechanics; each owner type supplies its key family.
#[derive(Clone)]
pub struct PollRequests {
    cache: Arc<dyn Cache>,
    ttls: PollRequestTtls,
    prefix: &'static str,
}

/// The value of a poll's key while it runs. A replay result is a task
/// reference (JSON) or a query poll's `leased` or `empty`, never this.
const PENDING: &[u8] = b"pending";

impl PollRequests {
    /// The one key of a poll request id: its pending marker, then its
    /// replay result.
    pub fn key(&self, namespace: &str, task_queue: &str, poll_request_id: &str) -> String {
        let id = hash_dimensions(&[namespace, task_queue, poll_request_id]);
        format!("{}{id}", self.prefix)
    }

    /// Claims `poll_request_id` for a poll that may wait up to `wait`.
    pub fn begin(
        &self,
        namespace: &str,
        task_queue: &str,
        poll_request_id: &str,
        wait: Duration,
    ) -> Result<PollClaim, CacheError> {
        let key = self.key(namespace, task_queue, poll_request_id);
        let ttl = wait.saturating_add(self.ttls.pending_slack);
        // A key that expires between the `add` and the `get` is claimed
        // again (the second `add` then finds it gone, or a newer arrival's).
        for _ in 0..2 {
            if self.cache.add(&key, PENDING, ttl)? {
                return Ok(PollClaim::Fresh);
            }
            match self.cache.get(&key)? {
                Some(value) if value == PENDING => return Ok(PollClaim::InFlight),
                Some(result) => return Ok(PollClaim::Replay(result)),
                None => {}
            }
        }
        Ok(PollClaim::InFlight)
    }

    /// The replay result, if the poll has ended.
    pub fn result(
        &self,
        namespace: &str,
        task_queue: &str,
        poll_request_id: &str,
    ) -> Result<Option<Vec<u8>>, CacheError> {
        let value = self
            .cache
            .get(&self.key(namespace, task_queue, poll_request_id))?;
        Ok(value.filter(|value| value != PENDING))
    }

    /// Ends the poll: its key's pending marker becomes its replay result
    /// (`result`, never the marker), for the result's TTL.
    pub fn finish(
        &self,
        namespace: &str,
        task_queue: &str,
        poll_request_id: &str,
        result: &[u8],
    ) -> Result<(), CacheError> {
        self.finish_with(namespace, task_queue, poll_request_id, result, None)
    }

    /// [`PollRequests::finish`], and `also` written in the same round trip
    /// ([`Cache::batch`]): the poll's diagnostic, which ends the same step.
    pub fn finish_with(
        &self,
        namespace: &str,
        task_queue: &str,
        poll_request_id: &str,
        result: &[u8],
        also: Option<CacheOp<'_>>,
    ) -> Result<(), CacheError> {
        debug_assert!(
            result != PENDING,
            "a replay result is never the pending marker"
        );
        let key = self.key(namespace, task_queue, poll_request_id);
        let replay = CacheOp::Put {
            key: &key,
            value: result,
            ttl: self.ttls.result,
        };
        match also {
            None => self.cache.batch(&[replay]),
            Some(also) => self.cache.batch(&[replay, also]),
        }
    }

    /// Drops the pending key of a poll that failed, so a retry runs afresh.
    pub fn abandon(
        &self,
        namespace: &str,
        task_queue: &str,
        poll_request_id: &str,
    ) -> Result<(), CacheError> {
        self.cache
            .forget(&self.key(namespace, task_queue, poll_request_id))
            .map(|_| ())
    }
}

/// The budget of poll bookkeeping for workers this node does not know.
///
/// Poll request keys are written per poll request id, which callers
/// choose. A registered worker (one that heartbeated within the idle
/// window) polls at its own pace; anyone else could mint ids without end
/// and fill the cache. So polls from unregistered workers may create keys
/// for at most `per_window` polls per `window` on this node; beyond that
/// they are served without keys (no replay key, no diagnostic), and a
/// repeat still finds the task its id leased through the store's durable
/// binding. Keys of unknown callers therefore number at most
/// `2 × per_window` per window, each expiring by its TTL.
pub struct UnknownWorkerPollBudget {
    per_window: u64,
    window: Duration,
    state: Mutex<(Instant, u64)>,
}

impl UnknownWorkerPollBudget {
    /// The default budget per window (`DW_UNKNOWN_WORKER_POLL_KEYS_PER_WINDOW`).
    pub const DEFAULT_PER_WINDOW: u64 = 1_000;

    /// At most `per_window` admissions per `window` (0: none).
    pub fn new(per_window: u64, window: Duration) -> Self {
        UnknownWorkerPollBudget {
            per_window,
            window,
            state: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Takes one admission if the current window has one left.
    pub fn try_admit(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.0.elapsed() >= self.window {
            *state = (Instant::now(), 0);
        }
        if state.1 < self.per_window {
            state.1 += 1;
            true
        } else {
            false
        }
    }
}

/// Poll bookkeeping of workflow-task polls.
pub struct WorkflowTaskPollRequestStore;

impl WorkflowTaskPollRequestStore {
    /// The family of every workflow-task poll key.
    pub const PREFIX: &'static str = "server:workflow-task-poll-request:";

    /// The store on `cache`.
    pub fn store(cache: Arc<dyn Cache>, ttls: PollRequestTtls) -> PollRequests {
        PollRequests {
            cache,
            ttls,
            prefix: WorkflowTaskPollRequestStore::PREFIX,
        }
    }
}

/// Poll bookkeeping of activity-task polls.
pub struct ActivityTaskPollRequestStore;

impl ActivityTaskPollRequestStore {
    /// The family of every activity-task poll key.
    pub const PREFIX: &'static str = "server:activity-task-poll-request:";

    /// The store on `cache`.
    pub fn store(cache: Arc<dyn Cache>, ttls: PollRequestTtls) -> PollRequests {
        PollRequests {
            cache,
            ttls,
            prefix: ActivityTaskPollRequestStore::PREFIX,
        }
    }
}

/// Poll bookkeeping of query-task polls.
///
/// Besides the pending and replay-result keys of every idempotent poll,
/// a query poll writes one current-marker per (namespace, task queue,
/// worker): the id of that worker's latest query poll on the queue. A
/// worker whose HTTP client gave up retries with a new id; the older poll,
/// still waiting on the server, sees it is no longer current and stops
/// before it leases a task nobody would receive. The marker lives as long
/// as the poll's pending key and is overwritten, never indexed.
pub struct QueryTaskPollRequestStore {
    polls: PollRequests,
    cache: Arc<dyn Cache>,
    ttls: PollRequestTtls,
}

impl QueryTaskPollRequestStore {
    /// The family of every query-task poll key.
    pub const PREFIX: &'static str = "server:query-task-poll-request:";

    /// The store on `cache`.
    pub fn new(cache: Arc<dyn Cache>, ttls: PollRequestTtls) -> Self {
        QueryTaskPollRequestStore {
            polls: PollRequests {
                cache: cache.clone(),
                ttls,
                prefix: QueryTaskPollRequestStore::PREFIX,
            },
            cache,
            ttls,
        }
    }

    /// The pending/replay mechanics shared with workflow and activity polls.
    pub fn polls(&self) -> &PollRequests {
        &self.polls
    }

    fn current_key(namespace: &str, task_queue: &str, worker_id: &str) -> String {
        format!(
            "{}current:{}",
            Self::PREFIX,
            hash_dimensions(&[namespace, task_queue, worker_id])
        )
    }

    /// Makes `poll_request_id` the worker's current query poll on the queue.
    pub fn make_current(
        &self,
        namespace: &str,
        task_queue: &str,
        worker_id: &str,
        poll_request_id: &str,
        wait: Duration,
    ) -> Result<(), CacheError> {
        self.cache.put(
            &Self::current_key(namespace, task_queue, worker_id),
            hash_dimensions(&[poll_request_id]).as_bytes(),
            wait.saturating_add(self.ttls.pending_slack),
        )
    }

    /// Whether a newer query poll of the same worker and queue replaced this one.
    pub fn superseded(
        &self,
        namespace: &str,
        task_queue: &str,
        worker_id: &str,
        poll_request_id: &str,
    ) -> Result<bool, CacheError> {
        let current = self
            .cache
            .get(&Self::current_key(namespace, task_queue, worker_id))?;
        Ok(current.is_some_and(|c| c != hash_dimensions(&[poll_request_id]).as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn a_repeat_replays_and_a_concurrent_repeat_waits() {
        let cache = Arc::new(MemoryCache::default());
        let polls = WorkflowTaskPollRequestStore::store(cache.clone(), PollRequestTtls::default());
        let wait = Duration::from_secs(1);
        assert_eq!(
            polls.begin("ns", "q", "p1", wait).unwrap(),
            PollClaim::Fresh
        );
        assert_eq!(
            polls.begin("ns", "q", "p1", wait).unwrap(),
            PollClaim::InFlight
        );
        polls.finish("ns", "q", "p1", b"task-7").unwrap();
        assert_eq!(
            polls.begin("ns", "q", "p1", wait).unwrap(),
            PollClaim::Replay(b"task-7".to_vec())
        );
        assert_eq!(
            cache
                .count_prefix(WorkflowTaskPollRequestStore::PREFIX)
                .unwrap(),
            1,
            "one key per poll id: the pending marker became the result"
        );
        assert_eq!(
            polls.result("ns", "q", "p1").unwrap(),
            Some(b"task-7".to_vec())
        );
        // A pending poll has no result yet; a failed one leaves no key, so
        // its retry runs afresh.
        assert_eq!(
            polls.begin("ns", "q", "p2", wait).unwrap(),
            PollClaim::Fresh
        );
        assert_eq!(polls.result("ns", "q", "p2").unwrap(), None);
        polls.abandon("ns", "q", "p2").unwrap();
        assert_eq!(
            polls.begin("ns", "q", "p2", wait).unwrap(),
            PollClaim::Fresh
        );
        assert_eq!(
            cache
                .count_prefix(ActivityTaskPollRequestStore::PREFIX)
                .unwrap(),
            0
        );
    }

    /// A cache that counts the operations asked of it.
    #[derive(Default)]
    struct Counting {
        inner: MemoryCache,
        operations: std::sync::atomic::AtomicUsize,
    }

    impl Counting {
        fn counted<T>(&self, operation: T) -> T {
            self.operations
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            operation
        }

        fn take(&self) -> usize {
            self.operations
                .swap(0, std::sync::atomic::Ordering::Relaxed)
        }
    }

    impl Cache for Counting {
        fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), CacheError> {
            self.counted(self.inner.put(key, value, ttl))
        }
        fn add(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
            self.counted(self.inner.add(key, value, ttl))
        }
        fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
            self.counted(self.inner.get(key))
        }
        fn forget(&self, key: &str) -> Result<bool, CacheError> {
            self.counted(self.inner.forget(key))
        }
        fn increment(&self, key: &str, ttl: Duration) -> Result<u64, CacheError> {
            self.counted(self.inner.increment(key, ttl))
        }
        fn claim(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
            self.counted(self.inner.claim(key, value, ttl))
        }
        fn release(&self, key: &str, value: &[u8]) -> Result<bool, CacheError> {
            self.counted(self.inner.release(key, value))
        }
        fn count_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
            self.inner.count_prefix(prefix)
        }
        fn backend(&self) -> &'static str {
            self.inner.backend()
        }
        fn publish(&self, channel: &str, message: &[u8]) -> Result<(), CacheError> {
            self.counted(self.inner.publish(channel, message))
        }
        fn subscribe(
            &self,
            channel: &str,
            deliver: crate::cache::Deliver,
        ) -> Result<crate::cache::Subscription, CacheError> {
            self.inner.subscribe(channel, deliver)
        }
    }

    /// A poll that runs and answers costs the cache two operations (its
    /// key added, then overwritten by its result); a repeat, one more.
    #[test]
    fn a_poll_costs_the_cache_two_operations() {
        let cache = Arc::new(Counting::default());
        let polls = ActivityTaskPollRequestStore::store(cache.clone(), PollRequestTtls::default());
        let wait = Duration::from_secs(1);
        assert_eq!(
            polls.begin("ns", "q", "p1", wait).unwrap(),
            PollClaim::Fresh
        );
        polls.finish("ns", "q", "p1", b"{\"task_id\":7}").unwrap();
        assert_eq!(cache.take(), 2);
        assert_eq!(
            polls.begin("ns", "q", "p1", wait).unwrap(),
            PollClaim::Replay(b"{\"task_id\":7}".to_vec())
        );
        assert_eq!(cache.take(), 2);
        assert_eq!(
            cache
                .count_prefix(ActivityTaskPollRequestStore::PREFIX)
                .unwrap(),
            1
        );
    }

    #[test]
    fn a_newer_query_poll_of_the_same_worker_and_queue_supersedes_the_older() {
        let cache = Arc::new(MemoryCache::default());
        let store = QueryTaskPollRequestStore::new(cache.clone(), PollRequestTtls::default());
        let wait = Duration::from_millis(200);
        assert!(
            !store.superseded("ns", "q", "w1", "p1").unwrap(),
            "no marker yet"
        );
        store.make_current("ns", "q", "w1", "p1", wait).unwrap();
        assert!(!store.superseded("ns", "q", "w1", "p1").unwrap());
        store.make_current("ns", "q", "w1", "p2", wait).unwrap();
        assert!(store.superseded("ns", "q", "w1", "p1").unwrap());
        assert!(
            !store.superseded("ns", "q", "w2", "p1").unwrap(),
            "per worker"
        );
        assert!(
            !store.superseded("ns", "other", "w1", "p1").unwrap(),
            "per queue"
        );
        assert_eq!(
            cache
                .count_prefix(QueryTaskPollRequestStore::PREFIX)
                .unwrap(),
            1,
            "one marker per worker and queue, overwritten"
        );
        assert_eq!(
            store.polls().begin("ns", "q", "p2", wait).unwrap(),
            PollClaim::Fresh
        );
        // wait + 5 s of slack, then the marker is gone.
        let short = QueryTaskPollRequestStore::new(
            cache.clone(),
            PollRequestTtls {
                pending_slack: Duration::ZERO,
                ..PollRequestTtls::default()
            },
        );
        short
            .make_current("ns", "q2", "w1", "p1", Duration::from_millis(30))
            .unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert!(!short.superseded("ns", "q2", "w1", "other").unwrap());
    }
}
