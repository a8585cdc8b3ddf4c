//! Worker-routed query tasks, brokered through the cache.
//!
//! A control-plane query needs a worker of the run's task queue to replay
//! the run and answer while the caller waits, so a query task is ephemeral
//! by nature: it lives in the cache, never in the run store, and every key
//! it creates expires. Under `server:workflow-query-task:` the broker keeps
//! the task record, one queue of pending task IDs per (namespace, task
//! queue), one lease per claimed task, a 10-second lock serialising each
//! queue, an expiring query-poller marker per (namespace, task queue,
//! worker) and one same-worker leased-task index per (namespace, task
//! queue, lease owner). The formulas behind their lifetimes are in
//! [`settings`]. Queue reads and writes prune IDs whose task record is gone,
//! answered or past its deadline, so a queue never holds more than the
//! pending cap; the caller's answer, failure or timeout removes its ID from
//! the queue and the owner's index. An active lease is replayed only to the
//! poll request that took it.

pub mod settings;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cache::{hash_dimensions, Cache, CacheError};
pub use settings::QueryTaskSettings;
use settings::QUEUE_LOCK_TTL;

/// How long a broker call waits for a busy queue lock before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(2);
const LOCK_RETRY: Duration = Duration::from_millis(2);

/// Why a broker operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The cache backend failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// Another call held the queue's lock for longer than we wait.
    #[error("the query-task queue lock stayed busy for {} ms", LOCK_WAIT.as_millis())]
    QueueLockBusy,
    /// The queue holds its cap of pending query tasks.
    #[error(
        "task queue {task_queue:?} already holds {pending} pending query tasks \
         (server.query_tasks.max_pending_per_queue = {limit})"
    )]
    QueueFull {
        /// The task queue.
        task_queue: String,
        /// Pending tasks found (after pruning).
        pending: usize,
        /// The effective cap.
        limit: usize,
    },
    /// A report on a query task that does not exist (any more).
    #[error("query task {0:?} does not exist or its caller has gone")]
    NotFound(String),
    /// A report whose lease does not match the task's active lease.
    #[error("query task {task:?}: {reason}")]
    Stale {
        /// The task.
        task: String,
        /// `query_task_not_leased`, `lease_owner_mismatch` or `query_task_attempt_mismatch`.
        reason: &'static str,
    },
}

/// A query to queue for the workers of its run's task queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewQuery {
    /// The run's namespace.
    pub namespace: String,
    /// The run's task queue.
    pub task_queue: String,
    /// The run (its wire id).
    pub run_id: i64,
    /// The workflow id.
    pub workflow_id: String,
    /// The workflow type.
    pub workflow_type: String,
    /// The query's name.
    pub query_name: String,
    /// Its arguments (an opaque payload, or null).
    pub arguments: Value,
}

/// Where a query task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryStatus {
    /// Waiting for a worker (or for its lapsed lease to be taken again).
    Pending,
    /// Claimed by a worker.
    Leased,
    /// Answered.
    Completed,
    /// Refused or failed by the worker.
    Failed,
}

/// A query task record (`task:` key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryTask {
    /// The task's id.
    pub id: String,
    /// What was asked, of which run.
    #[serde(flatten)]
    pub query: NewQuery,
    /// When it was queued (Unix ms).
    pub created_at_ms: i64,
    /// When its caller stops waiting (Unix ms).
    pub deadline_ms: i64,
    /// Status.
    pub status: QueryStatus,
    /// Leases taken so far.
    pub attempt: u64,
    /// The worker holding (or last holding) it.
    pub lease_owner: Option<String>,
    /// When the current lease ends.
    pub lease_expires_at_ms: Option<i64>,
    /// The worker's answer or failure document.
    pub answer: Option<Value>,
}

/// The active lease of a task (`lease:` key, expiring with the lease).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Lease {
    owner: String,
    attempt: u64,
    poll_request_id: String,
}

/// A claim handed to a poll.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The leased task.
    pub task: QueryTask,
    /// Whether this is a repeat of the poll request that took the lease.
    pub replayed: bool,
}

/// The broker of query tasks on one cache.
pub struct WorkflowQueryTaskBroker {
    cache: Arc<dyn Cache>,
    settings: QueryTaskSettings,
    node: String,
    issued: AtomicU64,
}

impl WorkflowQueryTaskBroker {
    /// The family of every query-task key.
    pub const PREFIX: &'static str = "server:workflow-query-task:";

    /// A broker for node `node` (task ids of two nodes never collide).
    pub fn new(cache: Arc<dyn Cache>, settings: QueryTaskSettings, node: &str) -> Self {
        WorkflowQueryTaskBroker {
            cache,
            settings,
            node: node.to_owned(),
            issued: AtomicU64::new(0),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &QueryTaskSettings {
        &self.settings
    }

    fn task_key(id: &str) -> String {
        format!("{}task:{id}", Self::PREFIX)
    }

    fn lease_key(id: &str) -> String {
        format!("{}lease:{id}", Self::PREFIX)
    }

    fn queue_key(namespace: &str, task_queue: &str) -> String {
        format!(
            "{}queue:{}",
            Self::PREFIX,
            hash_dimensions(&[namespace, task_queue])
        )
    }

    /// The lock key serialising one (namespace, task queue)'s queue.
    pub fn queue_lock_key(namespace: &str, task_queue: &str) -> String {
        format!(
            "{}queue-lock:{}",
            Self::PREFIX,
            hash_dimensions(&[namespace, task_queue])
        )
    }

    fn marker_key(namespace: &str, task_queue: &str, worker_id: &str) -> String {
        format!(
            "{}poller:{}",
            Self::PREFIX,
            hash_dimensions(&[namespace, task_queue, worker_id])
        )
    }

    fn leased_index_key(namespace: &str, task_queue: &str, owner: &str) -> String {
        format!(
            "{}leased:{}",
            Self::PREFIX,
            hash_dimensions(&[namespace, task_queue, owner])
        )
    }

    /// Queues `query`; its caller waits for the answer until the query
    /// timeout. Refused when the queue holds its pending cap.
    pub fn enqueue(&self, query: NewQuery) -> Result<QueryTask, BrokerError> {
        let now = crate::unix_ms();
        let timeout_ms = i64::try_from(self.settings.timeout().as_millis()).unwrap_or(i64::MAX);
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let id = hash_dimensions(&[&self.node, &n.to_string(), &nanos().to_string()]);
        let task = QueryTask {
            id,
            query,
            created_at_ms: now,
            deadline_ms: now.saturating_add(timeout_ms),
            status: QueryStatus::Pending,
            attempt: 0,
            lease_owner: None,
            lease_expires_at_ms: None,
            answer: None,
        };
        self.with_queue(&task.query.namespace, &task.query.task_queue, |ids| {
            let limit = self.settings.max_pending_per_queue();
            if ids.len() >= limit {
                return Err(BrokerError::QueueFull {
                    task_queue: task.query.task_queue.clone(),
                    pending: ids.len(),
                    limit,
                });
            }
            self.store_task(&task)?;
            ids.push(task.id.clone());
            Ok(())
        })?;
        Ok(task)
    }

    /// Pending query tasks of a queue, after pruning stale IDs.
    pub fn pending(&self, namespace: &str, task_queue: &str) -> Result<usize, BrokerError> {
        self.with_queue(namespace, task_queue, |ids| Ok(ids.len()))
    }

    /// The task record, if it still exists.
    pub fn task(&self, id: &str) -> Result<Option<QueryTask>, BrokerError> {
        let Some(bytes) = self.cache.get(&Self::task_key(id))? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice(&bytes).ok())
    }

    /// Claims a task of (namespace, task queue) for `owner`'s poll request
    /// `poll_request_id`: first the task this very request already leased
    /// (a retried poll), else the oldest claimable one.
    pub fn claim(
        &self,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        poll_request_id: &str,
    ) -> Result<Option<Claimed>, BrokerError> {
        self.claim_or_replay(namespace, task_queue, owner, poll_request_id, true)
    }

    /// Only the task `poll_request_id` itself leased, if its lease is still
    /// active (a replayed poll never leases anything new).
    pub fn replay(
        &self,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        poll_request_id: &str,
    ) -> Result<Option<Claimed>, BrokerError> {
        self.claim_or_replay(namespace, task_queue, owner, poll_request_id, false)
    }

    fn claim_or_replay(
        &self,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        poll_request_id: &str,
        lease_new: bool,
    ) -> Result<Option<Claimed>, BrokerError> {
        let index_key = Self::leased_index_key(namespace, task_queue, owner);
        self.with_queue(namespace, task_queue, |ids| {
            let now = crate::unix_ms();
            // The same worker's leases: keep live ones, replay ours.
            let mut leased = self.read_ids(&index_key)?;
            let mut replay = None;
            let mut kept = Vec::with_capacity(leased.len());
            for id in leased.drain(..) {
                let lease = self.lease(&id)?.filter(|l| l.owner == owner);
                let task = self.task(&id)?.filter(|t| t.status == QueryStatus::Leased);
                if let (Some(lease), Some(task)) = (lease, task) {
                    if lease.poll_request_id == poll_request_id && replay.is_none() {
                        replay = Some(task);
                    }
                    kept.push(id);
                }
            }
            if let Some(task) = replay {
                self.write_ids(&index_key, &kept)?;
                return Ok(Some(Claimed {
                    task,
                    replayed: true,
                }));
            }
            for id in ids.iter().filter(|_| lease_new) {
                let Some(mut task) = self.task(id)? else {
                    continue;
                };
                let claimable = match task.status {
                    QueryStatus::Pending => true,
                    QueryStatus::Leased => self.lease(id)?.is_none(),
                    _ => false,
                };
                if !claimable || task.deadline_ms <= now {
                    continue;
                }
                let expires = self.settings.lease_expires_at_ms(now, task.deadline_ms);
                task.status = QueryStatus::Leased;
                task.attempt += 1;
                task.lease_owner = Some(owner.to_owned());
                task.lease_expires_at_ms = Some(expires);
                let lease = Lease {
                    owner: owner.to_owned(),
                    attempt: task.attempt,
                    poll_request_id: poll_request_id.to_owned(),
                };
                let lease_ttl = Duration::from_millis(u64::try_from(expires - now).unwrap_or(1));
                self.cache.put(
                    &Self::lease_key(id),
                    &serde_json::to_vec(&lease).unwrap_or_default(),
                    lease_ttl,
                )?;
                self.store_task(&task)?;
                kept.push(task.id.clone());
                self.write_ids(&index_key, &kept)?;
                return Ok(Some(Claimed {
                    task,
                    replayed: false,
                }));
            }
            self.write_ids(&index_key, &kept)?;
            Ok(None)
        })
    }

    /// Records a worker's answer (`failed`: a failure document), fenced by
    /// the active lease's owner and attempt.
    pub fn answer(
        &self,
        id: &str,
        owner: &str,
        attempt: u64,
        failed: bool,
        document: Value,
    ) -> Result<(), BrokerError> {
        let Some(found) = self.task(id)? else {
            return Err(BrokerError::NotFound(id.to_owned()));
        };
        let stale = |reason| BrokerError::Stale {
            task: id.to_owned(),
            reason,
        };
        self.with_queue(&found.query.namespace, &found.query.task_queue, |ids| {
            let Some(mut task) = self.task(id)? else {
                return Err(BrokerError::NotFound(id.to_owned()));
            };
            let Some(lease) = self
                .lease(id)?
                .filter(|_| task.status == QueryStatus::Leased)
            else {
                return Err(stale("query_task_not_leased"));
            };
            if lease.owner != owner {
                return Err(stale("lease_owner_mismatch"));
            }
            if lease.attempt != attempt {
                return Err(stale("query_task_attempt_mismatch"));
            }
            task.status = if failed {
                QueryStatus::Failed
            } else {
                QueryStatus::Completed
            };
            task.answer = Some(document);
            self.store_task(&task)?;
            self.cache.forget(&Self::lease_key(id))?;
            ids.retain(|i| i != id);
            self.unindex(&task.query.namespace, &task.query.task_queue, owner, id)
        })
    }

    /// Waits until the task is answered or its deadline passes, then
    /// removes it whatever happened; the answered record, or `None` on
    /// timeout. The caller calls this once per query it queued. An answer
    /// recorded after the last look but before the removal is returned,
    /// not dropped (its worker was told it was taken).
    pub fn await_answer(
        &self,
        task: &QueryTask,
        poll_every: Duration,
    ) -> Result<Option<QueryTask>, BrokerError> {
        let wait = Duration::from_millis(
            u64::try_from(task.deadline_ms.saturating_sub(crate::unix_ms())).unwrap_or(0),
        );
        let deadline = Instant::now() + wait;
        let answered = loop {
            match self.task(&task.id) {
                Ok(Some(t)) if matches!(t.status, QueryStatus::Completed | QueryStatus::Failed) => {
                    break Ok(Some(t))
                }
                Ok(_) if Instant::now() >= deadline => break Ok(None),
                Ok(_) => std::thread::sleep(poll_every),
                Err(e) => break Err(e),
            }
        };
        let removed = self.finish(task)?;
        answered.map(|answered| answered.or(removed))
    }

    /// Removes a task its caller is done with: its ID from the queue and
    /// the lease owner's index, its lease and its record. Returns the
    /// record if it was answered by then: the removal and
    /// [`WorkflowQueryTaskBroker::answer`] both run under the queue's lock, so an
    /// answer is either in this record or refused (the task is gone), never
    /// accepted and then dropped.
    pub fn finish(&self, task: &QueryTask) -> Result<Option<QueryTask>, BrokerError> {
        self.with_queue(&task.query.namespace, &task.query.task_queue, |ids| {
            let record = self.task(&task.id)?;
            let owner = record.as_ref().and_then(|t| t.lease_owner.clone());
            let answered =
                record.filter(|t| matches!(t.status, QueryStatus::Completed | QueryStatus::Failed));
            ids.retain(|i| *i != task.id);
            if let Some(owner) = &owner {
                self.unindex(
                    &task.query.namespace,
                    &task.query.task_queue,
                    owner,
                    &task.id,
                )?;
            }
            self.cache.forget(&Self::lease_key(&task.id))?;
            self.cache.forget(&Self::task_key(&task.id))?;
            Ok(answered)
        })
    }

    /// Records that registered worker `worker_id` polls the queue's query
    /// tasks (refreshed by each poll; never indexed).
    pub fn mark_poller(
        &self,
        namespace: &str,
        task_queue: &str,
        worker_id: &str,
        requested_poll_timeout: Option<Duration>,
    ) -> Result<(), BrokerError> {
        let ttl = self.settings.marker_ttl(requested_poll_timeout);
        self.cache.put(
            &Self::marker_key(namespace, task_queue, worker_id),
            b"1",
            ttl,
        )?;
        Ok(())
    }

    /// Whether `worker_id` polled the queue's query tasks within its marker TTL.
    pub fn is_polling(
        &self,
        namespace: &str,
        task_queue: &str,
        worker_id: &str,
    ) -> Result<bool, BrokerError> {
        Ok(self
            .cache
            .get(&Self::marker_key(namespace, task_queue, worker_id))?
            .is_some())
    }

    fn lease(&self, id: &str) -> Result<Option<Lease>, BrokerError> {
        Ok(self
            .cache
            .get(&Self::lease_key(id))?
            .and_then(|b| serde_json::from_slice(&b).ok()))
    }

    /// Writes a task record for what is left of its retention window:
    /// rewriting a record never extends its life.
    fn store_task(&self, task: &QueryTask) -> Result<(), BrokerError> {
        let window =
            i64::try_from(self.settings.retention_window().as_millis()).unwrap_or(i64::MAX);
        let left = task
            .created_at_ms
            .saturating_add(window)
            .saturating_sub(crate::unix_ms());
        let ttl = Duration::from_millis(u64::try_from(left).unwrap_or(0).max(1));
        self.cache.put(
            &Self::task_key(&task.id),
            &serde_json::to_vec(task).unwrap_or_default(),
            ttl,
        )?;
        Ok(())
    }

    fn read_ids(&self, key: &str) -> Result<Vec<String>, BrokerError> {
        Ok(self
            .cache
            .get(key)?
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default())
    }

    /// Stores an ID list for the retention window; an empty list is deleted.
    fn write_ids(&self, key: &str, ids: &[String]) -> Result<(), BrokerError> {
        if ids.is_empty() {
            self.cache.forget(key)?;
        } else {
            self.cache.put(
                key,
                &serde_json::to_vec(ids).unwrap_or_default(),
                self.settings.retention_window(),
            )?;
        }
        Ok(())
    }

    fn unindex(
        &self,
        namespace: &str,
        task_queue: &str,
        owner: &str,
        id: &str,
    ) -> Result<(), BrokerError> {
        let key = Self::leased_index_key(namespace, task_queue, owner);
        let mut ids = self.read_ids(&key)?;
        let before = ids.len();
        ids.retain(|i| i != id);
        if ids.len() != before {
            self.write_ids(&key, &ids)?;
        }
        Ok(())
    }

    /// Runs `op` on the queue's pending IDs under the queue lock, after
    /// pruning IDs whose record is gone, answered or past its deadline,
    /// and writes the list back if it changed.
    fn with_queue<R>(
        &self,
        namespace: &str,
        task_queue: &str,
        op: impl FnOnce(&mut Vec<String>) -> Result<R, BrokerError>,
    ) -> Result<R, BrokerError> {
        let lock = Self::queue_lock_key(namespace, task_queue);
        let began = Instant::now();
        while !self
            .cache
            .add(&lock, self.node.as_bytes(), QUEUE_LOCK_TTL)?
        {
            if began.elapsed() >= LOCK_WAIT {
                return Err(BrokerError::QueueLockBusy);
            }
            std::thread::sleep(LOCK_RETRY);
        }
        let outcome = self.with_queue_locked(namespace, task_queue, op);
        // The lock is released whatever happened; its TTL covers a crash.
        let released = self.cache.forget(&lock);
        let outcome = outcome?;
        released?;
        Ok(outcome)
    }

    fn with_queue_locked<R>(
        &self,
        namespace: &str,
        task_queue: &str,
        op: impl FnOnce(&mut Vec<String>) -> Result<R, BrokerError>,
    ) -> Result<R, BrokerError> {
        let key = Self::queue_key(namespace, task_queue);
        let stored = self.read_ids(&key)?;
        let now = crate::unix_ms();
        let mut ids = Vec::with_capacity(stored.len());
        for id in &stored {
            let live = self.task(id)?.is_some_and(|t| {
                matches!(t.status, QueryStatus::Pending | QueryStatus::Leased)
                    && t.deadline_ms > now
            });
            if live {
                ids.push(id.clone());
            }
        }
        let outcome = op(&mut ids)?;
        if ids != stored {
            self.write_ids(&key, &ids)?;
        }
        Ok(outcome)
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
