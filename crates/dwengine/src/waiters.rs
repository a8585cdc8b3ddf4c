//! Waiting calls that hold no thread: the node's caps on them and the
//! in-process wake-ups they wait on.
//!
//! A control-plane query waits for a worker's answer, an update with
//! `wait_for=completed` and a waiting service call wait for their run to
//! move. They used to sleep on the blocking pool, so a few hundred of them
//! took every blocking thread and health checks and worker polls queued
//! behind them. Now each waits on the async runtime: it subscribes to a
//! [`Notify`] keyed by what it awaits ([`WaitKey`]), which the operation
//! that answers it fires after its commit (on another node of the same
//! store, the wake arrives through the relay of [`crate::polling::PollWakes`]),
//! and looks again at a growing poll interval ([`Backoff`]) in case a
//! wake-up was missed. Each [`WaitKind`] has its own cap on
//! concurrent waits; a wait past it is refused (429 `wait_capacity`) before
//! anything is written. The registry holds one entry per awaited key with
//! a live subscriber, so its size is bounded by the caps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};

/// Calls of one kind that begin on the blocking pool at once.
pub const BEGINNING_AT_ONCE: usize = 8;

/// What a call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// `POST …/query/{name}`: a worker's answer.
    Query,
    /// `POST …/update/{name}` with `wait_for=completed`: the update's outcome.
    Update,
    /// A service call waiting for its run to complete.
    ServiceCall,
}

impl WaitKind {
    /// Every kind, in the order of [`CallWaitCaps`]'s fields.
    pub const ALL: [WaitKind; 3] = [WaitKind::Query, WaitKind::Update, WaitKind::ServiceCall];

    /// The kind's name in errors and the contract.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::Query => "query",
            WaitKind::Update => "update",
            WaitKind::ServiceCall => "service_call",
        }
    }

    /// The config-file key of this kind's cap.
    pub fn config_key(self) -> &'static str {
        match self {
            WaitKind::Query => "server.waits.max_query_waits",
            WaitKind::Update => "server.waits.max_update_waits",
            WaitKind::ServiceCall => "server.waits.max_service_call_waits",
        }
    }

    /// What its cap limits, for the contract.
    pub fn what(self) -> &'static str {
        match self {
            WaitKind::Query => "control-plane queries waiting at once for a worker's answer; past it 429 wait_capacity",
            WaitKind::Update => "updates with wait_for=completed waiting at once for their outcome; past it 429 wait_capacity",
            WaitKind::ServiceCall => "service calls waiting at once for their run to complete; past it 429 wait_capacity",
        }
    }

    fn index(self) -> usize {
        match self {
            WaitKind::Query => 0,
            WaitKind::Update => 1,
            WaitKind::ServiceCall => 2,
        }
    }
}

/// The node's caps on concurrent waits, one per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallWaitCaps {
    /// Queries waiting for a worker.
    pub query: usize,
    /// Updates waiting for completion.
    pub update: usize,
    /// Service calls waiting for completion.
    pub service_call: usize,
}

impl CallWaitCaps {
    /// The default cap of each kind: far above what one node's clients
    /// need, far below what its connection cap and memory allow.
    pub const DEFAULT: usize = 1024;

    /// The cap of `kind`.
    pub fn get(&self, kind: WaitKind) -> usize {
        match kind {
            WaitKind::Query => self.query,
            WaitKind::Update => self.update,
            WaitKind::ServiceCall => self.service_call,
        }
    }

    /// Sets the cap of `kind`.
    pub fn set(&mut self, kind: WaitKind, cap: usize) {
        match kind {
            WaitKind::Query => self.query = cap,
            WaitKind::Update => self.update = cap,
            WaitKind::ServiceCall => self.service_call = cap,
        }
    }
}

impl Default for CallWaitCaps {
    fn default() -> Self {
        CallWaitCaps {
            query: Self::DEFAULT,
            update: Self::DEFAULT,
            service_call: Self::DEFAULT,
        }
    }
}

/// What a wait is woken by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WaitKey {
    /// A query task's answer (its id).
    QueryTask(String),
    /// Any change of a run: a completed or failed workflow task, a stop, a timeout.
    Run(i64),
}

/// A refused wait: its kind and the cap in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaitRefused {
    /// The kind refused.
    pub kind: WaitKind,
    /// Its cap.
    pub cap: usize,
}

/// The node's waits: counts per kind and the wake-up registry.
#[derive(Debug)]
pub struct Waiters {
    caps: CallWaitCaps,
    held: [AtomicUsize; 3],
    refused: [AtomicU64; 3],
    registry: Mutex<HashMap<WaitKey, Subscribed>>,
    stopping: AtomicBool,
    stop: Notify,
    /// Per kind, the calls beginning at once (validating, admitting and
    /// writing on the blocking pool); the rest queue here without a thread.
    beginning: [Semaphore; 3],
}

#[derive(Debug)]
struct Subscribed {
    notify: Arc<Notify>,
    subscribers: usize,
}

/// A held wait of one kind, released when dropped.
#[derive(Debug)]
pub struct WaitPermit {
    waiters: Arc<Waiters>,
    kind: WaitKind,
}

impl Drop for WaitPermit {
    fn drop(&mut self) {
        self.waiters.held[self.kind.index()].fetch_sub(1, Ordering::AcqRel);
    }
}

/// A subscription to one key's wake-ups, removed from the registry when
/// its last subscriber drops it.
#[derive(Debug)]
pub struct Subscription {
    waiters: Arc<Waiters>,
    key: WaitKey,
    notify: Arc<Notify>,
}

impl Subscription {
    /// The notification to await (enable it before looking, so a wake-up
    /// between the look and the await is not lost).
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut registry = match self.waiters.registry.lock() {
            Ok(registry) => registry,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(entry) = registry.get_mut(&self.key) {
            entry.subscribers = entry.subscribers.saturating_sub(1);
            if entry.subscribers == 0 {
                registry.remove(&self.key);
            }
        }
    }
}

impl Waiters {
    /// Waits capped by `caps`.
    pub fn new(caps: CallWaitCaps) -> Arc<Waiters> {
        Arc::new(Waiters {
            caps,
            held: Default::default(),
            refused: Default::default(),
            registry: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            stop: Notify::new(),
            beginning: std::array::from_fn(|_| Semaphore::new(BEGINNING_AT_ONCE)),
        })
    }

    /// A turn on the blocking pool for a call of `kind` (its begin, one
    /// look, its end): at most [`BEGINNING_AT_ONCE`] per kind at a time, so
    /// a burst of hundreds queues without a thread instead of taking one
    /// each while they contend for the same queue lock or row.
    pub async fn turn_to_begin(&self, kind: WaitKind) -> Option<SemaphorePermit<'_>> {
        self.beginning[kind.index()].acquire().await.ok()
    }

    /// The caps in force.
    pub fn caps(&self) -> CallWaitCaps {
        self.caps
    }

    /// A wait of `kind`, or the refusal when the node holds its cap.
    pub fn admit(self: &Arc<Self>, kind: WaitKind) -> Result<WaitPermit, WaitRefused> {
        let cap = self.caps.get(kind);
        let held = &self.held[kind.index()];
        match held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        }) {
            Ok(_) => Ok(WaitPermit {
                waiters: self.clone(),
                kind,
            }),
            Err(_) => {
                self.refused[kind.index()].fetch_add(1, Ordering::Relaxed);
                Err(WaitRefused { kind, cap })
            }
        }
    }

    /// Waits of `kind` held now.
    pub fn held(&self, kind: WaitKind) -> usize {
        self.held[kind.index()].load(Ordering::Acquire)
    }

    /// Waits of `kind` refused since start.
    pub fn refused(&self, kind: WaitKind) -> u64 {
        self.refused[kind.index()].load(Ordering::Relaxed)
    }

    /// Keys with a live subscriber (bounded by the caps).
    pub fn subscribed_keys(&self) -> usize {
        self.registry.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Subscribes to `key`'s wake-ups.
    pub fn subscribe(self: &Arc<Self>, key: WaitKey) -> Subscription {
        let mut registry = match self.registry.lock() {
            Ok(registry) => registry,
            Err(poisoned) => poisoned.into_inner(),
        };
        let entry = registry.entry(key.clone()).or_insert_with(|| Subscribed {
            notify: Arc::new(Notify::new()),
            subscribers: 0,
        });
        entry.subscribers += 1;
        Subscription {
            waiters: self.clone(),
            key,
            notify: entry.notify.clone(),
        }
    }

    /// Wakes every wait subscribed to `key` (none: nothing happens). Called
    /// after the commit that may answer them; it cannot fail.
    pub fn wake(&self, key: &WaitKey) {
        let notify = match self.registry.lock() {
            Ok(registry) => registry.get(key).map(|e| e.notify.clone()),
            Err(poisoned) => poisoned.into_inner().get(key).map(|e| e.notify.clone()),
        };
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }

    /// Ends every wait at once (shutdown): each answers as if its time ran out.
    pub fn stop_all(&self) {
        self.stopping.store(true, Ordering::Release);
        self.stop.notify_waiters();
    }

    /// Whether the node is stopping.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Resolves when the node starts stopping.
    pub async fn stopped(&self) {
        let notified = self.stop.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.stopping() {
            return;
        }
        notified.await;
    }
}

/// The poll interval of a waiting call: short at first (an answer through
/// another node comes quickly), doubling to a ceiling so hundreds of long
/// waits cost a few store reads a second each at most.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    next: Duration,
    ceiling: Duration,
}

impl Backoff {
    /// The first look after 50 ms, then doubling up to one second.
    pub fn new() -> Backoff {
        Backoff {
            next: Duration::from_millis(50),
            ceiling: Duration::from_secs(1),
        }
    }

    /// The interval before the next look.
    pub fn step(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.ceiling);
        now
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_refuse_past_the_cap_and_release_on_drop() {
        let waiters = Waiters::new(CallWaitCaps {
            query: 2,
            update: 1,
            service_call: 0,
        });
        let a = waiters.admit(WaitKind::Query).unwrap();
        let _b = waiters.admit(WaitKind::Query).unwrap();
        let refused = waiters.admit(WaitKind::Query).unwrap_err();
        assert_eq!(refused.cap, 2);
        assert_eq!(waiters.refused(WaitKind::Query), 1);
        assert!(waiters.admit(WaitKind::ServiceCall).is_err());
        let _u = waiters.admit(WaitKind::Update).unwrap();
        drop(a);
        assert_eq!(waiters.held(WaitKind::Query), 1);
        assert!(waiters.admit(WaitKind::Query).is_ok());
    }

    #[test]
    fn the_registry_holds_only_keys_with_subscribers() {
        let waiters = Waiters::new(CallWaitCaps::default());
        let one = waiters.subscribe(WaitKey::Run(1));
        let two = waiters.subscribe(WaitKey::Run(1));
        let other = waiters.subscribe(WaitKey::QueryTask("q".into()));
        assert_eq!(waiters.subscribed_keys(), 2);
        drop(one);
        assert_eq!(waiters.subscribed_keys(), 2);
        drop(two);
        drop(other);
        assert_eq!(waiters.subscribed_keys(), 0);
        // Waking a key nobody waits on does nothing and creates nothing.
        waiters.wake(&WaitKey::Run(9));
        assert_eq!(waiters.subscribed_keys(), 0);
    }

    #[test]
    fn a_wake_reaches_an_enabled_waiter() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let waiters = Waiters::new(CallWaitCaps::default());
        let sub = waiters.subscribe(WaitKey::Run(7));
        runtime.block_on(async {
            let notified = sub.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            waiters.wake(&WaitKey::Run(7));
            tokio::time::timeout(Duration::from_secs(5), notified)
                .await
                .expect("the wake-up arrived");
        });
    }

    #[test]
    fn backoff_doubles_to_its_ceiling() {
        let mut b = Backoff::new();
        let steps: Vec<u128> = (0..7).map(|_| b.step().as_millis()).collect();
        assert_eq!(steps, [50, 100, 200, 400, 800, 1000, 1000]);
    }
}
