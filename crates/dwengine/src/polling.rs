//! Worker long-poll coordination: wake-ups and the poll-pass scan caps.
//!
//! A long poll that finds no task waits for a wake-up instead of
//! re-querying the store in a tight loop. The commit that gives a queue
//! work wakes the polls this node holds on it at once ([`PollWakes`], an
//! in-process board), and, when other nodes serve the same store, publishes
//! the wake on the shared cache's pub/sub channel of that store, which
//! every other node's relay hands to its own board: a start on node A wakes
//! a poll held by node B as fast as one held by A. The wake also writes an
//! expiring signal key per channel ([`LongPollSignalStore`]), which a
//! waiting poll on a node with peers reads now and then, so a relay message
//! lost in transit (a dropped connection) costs a later wake, never a lost
//! task. The recovery scans each poll pass runs are capped here so an old
//! backlog cannot turn every poll into a slow one.
//!
//! A commit that gives a queue one task wakes one poll, not every poll of
//! every node: each poll that looks is a claim transaction, and all but
//! one of them find nothing. When a poll of this node will take the
//! wake-up, the wake does not leave the node (no relay message, no signal
//! key); only when none will do the other nodes hear of it, and each of
//! them wakes one poll of its own too (a relay message marked for one
//! poll), so a relayed task costs at most a claim a node, not one a
//! waiting poll. A poll whose
//! single wake-up found nothing it could take while a task is still ready
//! (another build-id cohort's, a sticky claim or a worker session held
//! elsewhere), or that took a task while more were ready, then wakes every
//! poll of its node and of the others, so the task reaches a poll that can
//! take it one pass later. (When nothing is ready any more, another poll
//! took the task, and nobody is woken.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::cache::{hash_dimensions, Cache, CacheError, CacheOp, Subscription};
use crate::waiters::{WaitKey, Waiters};

/// Relay messages that wake calls waiting on a run, or on a query task,
/// start so (a long-poll channel's is 16 hex digits).
const RUN_WAKE: &str = "run:";
const QUERY_TASK_WAKE: &str = "query-task:";
/// A relayed wake-up of one poll of a channel (a commit gave its queue one
/// task and no poll of the sending node took it) starts so, then its
/// number (`one:<number>:<channel hash>`); a channel's hash alone wakes
/// every poll of the channel.
const ONE_WAKE: &str = "one:";
/// How long the key that a node takes a relayed single wake-up with lives
/// (`PollWakes::wake_one_here`). The other nodes hear the message within
/// milliseconds; one that hears it later still would wake a poll as well,
/// which then looks once for nothing.
pub const TAKEN_TTL: Duration = Duration::from_secs(10);

/// Wakes long-polling workers when work arrives on a channel.
///
/// One expiring key per wake channel touched during the TTL window; the
/// channel is hashed so user-chosen namespace and queue names never reach
/// the key, and no index of channels is kept.
#[derive(Clone)]
pub struct LongPollSignalStore {
    cache: Arc<dyn Cache>,
    ttl: Duration,
}

impl LongPollSignalStore {
    /// The family every wake key belongs to.
    pub const PREFIX: &'static str = "server:long-poll-signal:";
    /// How long a wake signal stays visible to pollers.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

    /// A store writing to `cache` with the default TTL.
    pub fn new(cache: Arc<dyn Cache>) -> Self {
        Self::with_ttl(cache, Self::DEFAULT_TTL)
    }

    /// A store whose signals live for `ttl`.
    pub fn with_ttl(cache: Arc<dyn Cache>, ttl: Duration) -> Self {
        LongPollSignalStore { cache, ttl }
    }

    /// The wake key of (namespace, task queue, channel).
    pub fn key(namespace: &str, task_queue: &str, channel: &str) -> String {
        format!(
            "{}{}",
            Self::PREFIX,
            hash_dimensions(&[namespace, task_queue, channel])
        )
    }

    /// Records that work arrived; a repeat signal overwrites the same key.
    pub fn signal(
        &self,
        namespace: &str,
        task_queue: &str,
        channel: &str,
    ) -> Result<(), CacheError> {
        let (key, version) = Self::entry(namespace, task_queue, channel);
        self.cache.put(&key, &version, self.ttl)
    }

    /// The key and value [`LongPollSignalStore::signal`] writes now (for
    /// [`LongPollSignalStore::ttl`]): a new version on every call.
    pub fn entry(namespace: &str, task_queue: &str, channel: &str) -> (String, [u8; 16]) {
        let version = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        (
            Self::key(namespace, task_queue, channel),
            version.to_be_bytes(),
        )
    }

    /// How long a signal stays visible.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The latest signal on a channel, if one is live; pollers wait for it to change.
    pub fn version(
        &self,
        namespace: &str,
        task_queue: &str,
        channel: &str,
    ) -> Result<Option<Vec<u8>>, CacheError> {
        self.cache.get(&Self::key(namespace, task_queue, channel))
    }
}

/// The wake channel of (namespace, task queue, channel) on the board and
/// in relay messages: the same hash as its signal key's.
pub fn wake_channel(namespace: &str, task_queue: &str, channel: &str) -> String {
    wake_channel_key(namespace, task_queue, channel)
        .as_str()
        .to_owned()
}

/// [`wake_channel`] without a `String`, for a start's wake.
pub fn wake_channel_key(
    namespace: &str,
    task_queue: &str,
    channel: &str,
) -> crate::cache::HashedDimensions {
    crate::cache::hashed_dimensions(&[namespace, task_queue, channel])
}

/// The relay message of a wake of the calls waiting on `key`.
fn wait_message(key: &WaitKey) -> String {
    match key {
        WaitKey::Run(run) => format!("{RUN_WAKE}{run}"),
        WaitKey::QueryTask(id) => format!("{QUERY_TASK_WAKE}{id}"),
    }
}

/// The long polls this node holds, by wake channel, and the relay that
/// carries wake-ups between the nodes of one store.
///
/// A poll subscribes to its channel before its first look at the store and
/// waits on the subscription between looks, on the async runtime, holding
/// no thread ([`PollWake::woken_before`]); [`PollWakes::wake`] bumps the
/// channel's count and wakes its waiters. The board holds one entry per
/// channel with a waiting poll (bounded by the wait-slot caps), removed
/// with its last subscriber.
pub struct PollWakes {
    channels: Mutex<HashMap<String, Arc<WakeChannel>>>,
    /// The node's waiting calls (queries, updates, service calls), woken
    /// by relayed run and query-task wakes too.
    waiters: Option<Arc<Waiters>>,
    relay: Mutex<Option<Relay>>,
    relayed_in: AtomicU64,
    relayed_out: AtomicU64,
    relay_losses: AtomicU64,
    /// Single wake-ups a poll of this node took, not relayed.
    kept_here: AtomicU64,
    /// Relayed single wake-ups a poll of this node took.
    taken_here: AtomicU64,
    /// Relayed single wake-ups another node's poll took first.
    taken_elsewhere: AtomicU64,
    /// The number of this node's next relayed single wake-up (from the
    /// clock at start, so a restarted node does not reuse its numbers).
    next_one: AtomicU64,
    /// Relay messages that could not be published.
    unsent: AtomicU64,
}

struct Relay {
    cache: Arc<dyn Cache>,
    channel: String,
    /// This node's mark on its own messages (it hears them back).
    origin: String,
    _subscription: Subscription,
}

#[derive(Default)]
struct WakeChannel {
    /// Wake-ups every poll of the channel answers with a pass.
    wakes: AtomicU64,
    /// Wake-ups one poll answers ([`PollWakes::wake_one`]): each is taken
    /// by the first poll that waits, at most one per subscriber pending.
    tokens: AtomicU64,
    woken: tokio::sync::Notify,
    subscribers: AtomicU64,
}

/// What ended a poll's wait ([`PollWake::woken_before`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// Nothing: the time given ran out.
    No,
    /// A wake-up meant for one poll, which this poll took: its pass must
    /// either claim a task or hand the wake-up to every poll of the
    /// channel ([`PollWake::wake_all`]); a poll that ends without a pass
    /// gives it back ([`PollWake::give_back`]).
    One,
    /// A wake-up of every poll of the channel.
    All,
}

/// What the relay counted since the node started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RelayStats {
    /// Whether wake-ups cross nodes (other nodes serve this store).
    pub relayed: bool,
    /// Wake messages published for other nodes.
    pub published: u64,
    /// Wake messages received from other nodes.
    pub received: u64,
    /// Times the subscription was lost and re-established (every local
    /// poll then looked again).
    pub resubscribed: u64,
    /// Single wake-ups (one task for one poll) a poll of this node took,
    /// so no other node heard of them.
    pub kept_here: u64,
    /// Single wake-ups another node relayed (a task no poll of that node
    /// took) that a poll of this node took.
    pub taken_here: u64,
    /// Single wake-ups another node relayed that this node would have
    /// answered, but another node's poll took first (so only one poll of
    /// the store looked for the task).
    pub taken_elsewhere: u64,
    /// Relay messages that could not be published (the other nodes'
    /// polls found that work at their next signal look or recheck).
    pub unsent: u64,
}

impl PollWakes {
    /// The pub/sub channel family (a channel stores nothing; it is named in
    /// the signal keys' family, whose wakes it carries).
    pub const RELAY_PREFIX: &'static str = "server:long-poll-signal:relay:";

    /// The relay channel of the nodes serving one store (`scope`, hashed).
    pub fn relay_channel(scope: &str) -> String {
        format!("{}{}", Self::RELAY_PREFIX, hash_dimensions(&[scope]))
    }

    /// A board for this node alone.
    pub fn new() -> Arc<PollWakes> {
        Self::with_waiters(None)
    }

    /// A board whose relay also wakes `waiters`' calls waiting on a run
    /// or a query task that another node moved.
    pub fn with_waiters(waiters: Option<Arc<Waiters>>) -> Arc<PollWakes> {
        Arc::new(PollWakes {
            channels: Mutex::new(HashMap::new()),
            waiters,
            relay: Mutex::new(None),
            relayed_in: AtomicU64::new(0),
            relayed_out: AtomicU64::new(0),
            relay_losses: AtomicU64::new(0),
            kept_here: AtomicU64::new(0),
            taken_here: AtomicU64::new(0),
            taken_elsewhere: AtomicU64::new(0),
            next_one: AtomicU64::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
            ),
            unsent: AtomicU64::new(0),
        })
    }

    /// Joins the relay of the nodes serving store `scope` on `cache`: wakes
    /// published there by other nodes wake this board's polls. `origin`
    /// tells this node's own messages apart. Returns once subscribed.
    pub fn join_relay(
        self: &Arc<Self>,
        cache: Arc<dyn Cache>,
        scope: &str,
        origin: &str,
    ) -> Result<(), CacheError> {
        let channel = Self::relay_channel(scope);
        let board: Weak<PollWakes> = Arc::downgrade(self);
        let mark = format!("{origin}:");
        let own = mark.clone();
        let subscription = cache.subscribe(
            &channel,
            Arc::new(move |message: Option<&[u8]>| {
                let Some(board) = board.upgrade() else { return };
                match message {
                    Some(bytes) => {
                        let Ok(text) = std::str::from_utf8(bytes) else {
                            return;
                        };
                        if text.starts_with(&own) {
                            return;
                        }
                        board.relayed_in.fetch_add(1, Ordering::Relaxed);
                        if let Some((origin, wake)) = text.split_once(':') {
                            board.deliver(origin, wake);
                        }
                    }
                    None => {
                        board.relay_losses.fetch_add(1, Ordering::Relaxed);
                        board.wake_every_channel();
                    }
                }
            }),
        )?;
        *self.relay.lock().unwrap_or_else(|e| e.into_inner()) = Some(Relay {
            cache,
            channel,
            origin: mark,
            _subscription: subscription,
        });
        Ok(())
    }

    /// Leaves the relay (a stopping node).
    pub fn leave_relay(&self) {
        let relay = self.relay.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(relay);
    }

    /// Whether wake-ups cross nodes.
    pub fn relayed(&self) -> bool {
        self.relay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Subscribes a poll to `channel` (from [`wake_channel`]).
    pub fn subscribe(self: &Arc<Self>, channel: String) -> PollWake {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let entry = channels.entry(channel.clone()).or_default().clone();
        entry.subscribers.fetch_add(1, Ordering::AcqRel);
        drop(channels);
        let seen = entry.wakes.load(Ordering::Acquire);
        PollWake {
            board: self.clone(),
            channel,
            entry,
            seen,
        }
    }

    /// Wakes the polls of `channel` on this node and, through the relay,
    /// on every other node of the store. A relay that cannot publish is an
    /// error for the caller to count: the other nodes' polls then find the
    /// work at their next look.
    pub fn wake(&self, channel: &str) -> Result<(), CacheError> {
        self.wake_here(channel);
        self.publish_to_peers(channel)
    }

    /// The relay's cache, channel and this node's mark, copied out so no
    /// lock is held across the call to the cache; `None` without a relay.
    fn relay_target(&self) -> Option<(Arc<dyn Cache>, String, String)> {
        self.relay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|r| (r.cache.clone(), r.channel.clone(), r.origin.clone()))
    }

    /// Publishes `wake` on the relay channel for the other nodes of the
    /// store; nothing when this node has no relay.
    fn publish_to_peers(&self, wake: &str) -> Result<(), CacheError> {
        if let Some((cache, name, origin)) = self.relay_target() {
            cache.publish(&name, format!("{origin}{wake}").as_bytes())?;
            self.relayed_out.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Wakes one poll of `channel` as [`PollWakes::wake_one`], the relay
    /// message and `signal` (the channel's signal key, which only a poll
    /// on a node with a relay reads) sent in one round trip when they are
    /// sent: a wake on a cluster node cost two. Without a relay the signal
    /// is not written.
    pub fn wake_one_and_signal(
        &self,
        channel: &str,
        signal: CacheOp<'_>,
    ) -> Result<(), CacheError> {
        self.wake_together(&[(channel, Some(signal))], &[])
    }

    /// The wakes of one commit in one round trip: one poll of each
    /// channel of `channels` woken as [`PollWakes::wake_one`] here, and,
    /// on a node with a relay, every relay message (each channel's, then
    /// each of `waits`', whose calls on this node the caller woke) with
    /// each channel's signal key, in that order, as one
    /// [`Cache::batch`]. Without a relay no signal key is written. A
    /// single wake-up a poll of this node takes sends neither.
    pub fn wake_together(
        &self,
        channels: &[(&str, Option<CacheOp<'_>>)],
        waits: &[WaitKey],
    ) -> Result<(), CacheError> {
        let relayed = self.relayed();
        let mut heard = Vec::with_capacity(channels.len());
        for (channel, signal) in channels {
            let kept = self.entry(channel).is_some_and(|entry| entry.add_token());
            if kept && relayed {
                self.kept_here.fetch_add(1, Ordering::Relaxed);
            } else {
                heard.push((*channel, *signal));
            }
        }
        let Some((cache, name, origin)) = self.relay_target() else {
            return Ok(());
        };
        let messages: Vec<String> = heard
            .iter()
            .map(|(channel, _)| format!("{origin}{}", self.one_message(channel)))
            .chain(
                waits
                    .iter()
                    .map(|key| format!("{origin}{}", wait_message(key))),
            )
            .collect();
        if messages.is_empty() {
            return Ok(());
        }
        let mut ops = Vec::with_capacity(messages.len() + heard.len());
        for (i, message) in messages.iter().enumerate() {
            ops.push(CacheOp::Publish {
                channel: &name,
                message: message.as_bytes(),
            });
            if let Some((_, Some(signal))) = heard.get(i) {
                ops.push(*signal);
            }
        }
        cache.batch(&ops)?;
        self.relayed_out
            .fetch_add(messages.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Relays a wake of the calls waiting on `key` (this node's were
    /// woken by the caller) to the other nodes of the store, if any.
    pub fn relay_wait(&self, key: &WaitKey) -> Result<(), CacheError> {
        self.publish_to_peers(&wait_message(key))
    }

    /// The relay message of a single wake-up of `channel`, numbered.
    fn one_message(&self, channel: &str) -> String {
        let number = self.next_one.fetch_add(1, Ordering::Relaxed);
        format!("{ONE_WAKE}{number}:{channel}")
    }

    /// A relayed wake from node `origin`: a long-poll channel's hash
    /// (every poll of it), a numbered single wake-up of one, or a
    /// waited-on run or query task.
    fn deliver(&self, origin: &str, wake: &str) {
        if let Some((number, channel)) = wake
            .strip_prefix(ONE_WAKE)
            .and_then(|rest| rest.split_once(':'))
        {
            self.wake_one_here(origin, number, channel);
        } else if let Some(run) = wake.strip_prefix(RUN_WAKE) {
            if let (Some(waiters), Ok(run)) = (&self.waiters, run.parse()) {
                waiters.wake(&WaitKey::Run(run));
            }
        } else if let Some(task) = wake.strip_prefix(QUERY_TASK_WAKE) {
            if let Some(waiters) = &self.waiters {
                waiters.wake(&WaitKey::QueryTask(task.to_owned()));
            }
        } else {
            self.wake_here(wake);
        }
    }

    /// Answers single wake-up `number` of `channel` that node `origin`
    /// relayed (no poll of its own took it): one poll of the store looks
    /// for the task, not every poll of every other node (each look a
    /// claim, all but one finding nothing). A node with a poll that would
    /// take it adds the wake-up's key to the shared cache ([`Cache::add`],
    /// [`TAKEN_TTL`]); the first to add it wakes one poll of its own, as a
    /// local [`PollWakes::wake_one`] does, and the others nothing. A node
    /// that cannot reach the cache wakes one of its polls anyway (a look
    /// too many, never a task missed), and one whose poll left between the
    /// two steps hands the wake-up to every poll of the other nodes.
    fn wake_one_here(&self, origin: &str, number: &str, channel: &str) {
        let Some(entry) = self.entry(channel) else {
            return;
        };
        if !entry.would_take() {
            // No poll waits here, or each has a wake-up coming already.
            return;
        }
        if let Some((cache, _, _)) = self.relay_target() {
            let key = format!(
                "{}taken:{}",
                LongPollSignalStore::PREFIX,
                hash_dimensions(&[origin, number, channel])
            );
            if let Ok(false) = cache.add(&key, b"1", TAKEN_TTL) {
                self.taken_elsewhere.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        if entry.add_token() {
            self.taken_here.fetch_add(1, Ordering::Relaxed);
        } else if self.publish_to_peers(channel).is_err() {
            self.unsent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Wakes the polls of `channel` held by this node.
    pub fn wake_here(&self, channel: &str) {
        if let Some(entry) = self.entry(channel) {
            entry.bump();
        }
    }

    /// Wakes one poll of `channel` on this node (the first that waits,
    /// now or next), or, when no poll of this node will take it, through
    /// the relay one poll of another node, the first to take it
    /// (`PollWakes::wake_one_here`): for a commit
    /// that gave the queue one task, so one poll looks for it instead of
    /// all of them. A poll that finds nothing then wakes the others, here
    /// and on the other nodes ([`Woken::One`], [`PollWake::wake_all`]), so
    /// a poll that cannot take the task (another build-id cohort, a sticky
    /// claim or a session held elsewhere) delays it by one pass, never
    /// loses it.
    pub fn wake_one(&self, channel: &str) -> Result<(), CacheError> {
        if self.entry(channel).is_some_and(|entry| entry.add_token()) {
            if self.relayed() {
                self.kept_here.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(());
        }
        self.publish_to_peers(&self.one_message(channel))
    }

    /// Publishes a wake of every poll of `channel` to the other nodes
    /// without holding up the caller (a poll on the async runtime; the
    /// cache's call may block): on a blocking thread when called on the
    /// runtime, else here. Nothing without a relay; a failure is counted
    /// ([`RelayStats::unsent`]), and the other nodes' polls find the work
    /// at their next recheck.
    fn relay_soon(self: &Arc<Self>, channel: &str) {
        self.relay_message_soon(channel.to_owned());
    }

    /// As [`PollWakes::relay_soon`], for one poll of `channel` on
    /// another node ([`PollWakes::wake_one_here`]).
    fn relay_one_soon(self: &Arc<Self>, channel: &str) {
        self.relay_message_soon(self.one_message(channel));
    }

    /// Publishes relay message `wake` as [`PollWakes::relay_soon`] says.
    fn relay_message_soon(self: &Arc<Self>, wake: String) {
        if !self.relayed() {
            return;
        }
        let board = self.clone();
        let publish = move || {
            if board.publish_to_peers(&wake).is_err() {
                board.unsent.fetch_add(1, Ordering::Relaxed);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(publish)),
            Err(_) => publish(),
        }
    }

    fn entry(&self, channel: &str) -> Option<Arc<WakeChannel>> {
        self.channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(channel)
            .cloned()
    }

    fn wake_every_channel(&self) {
        let entries: Vec<Arc<WakeChannel>> = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for entry in entries {
            entry.bump();
        }
    }

    /// The polls of this node subscribed to `channel` (waiting, or
    /// looking between two waits).
    pub fn subscribers(&self, channel: &str) -> u64 {
        self.entry(channel)
            .map_or(0, |e| e.subscribers.load(Ordering::Acquire))
    }

    /// Channels with a waiting poll.
    pub fn channels(&self) -> usize {
        self.channels.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// Relay messages this node has received from the other nodes: a
    /// count that moved since a waiting poll last looked means the relay
    /// is delivering, so its messages carry the wake-ups and the signal
    /// key need not be read ([`LongPollSignalStore::version`]).
    pub fn heard(&self) -> u64 {
        self.relayed_in.load(Ordering::Relaxed)
    }

    /// The relay's counts.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            relayed: self.relayed(),
            published: self.relayed_out.load(Ordering::Relaxed),
            received: self.relayed_in.load(Ordering::Relaxed),
            resubscribed: self.relay_losses.load(Ordering::Relaxed),
            kept_here: self.kept_here.load(Ordering::Relaxed),
            taken_here: self.taken_here.load(Ordering::Relaxed),
            taken_elsewhere: self.taken_elsewhere.load(Ordering::Relaxed),
            unsent: self.unsent.load(Ordering::Relaxed),
        }
    }
}

impl WakeChannel {
    fn bump(&self) {
        self.wakes.fetch_add(1, Ordering::AcqRel);
        self.woken.notify_waiters();
    }

    /// One more pending single wake-up, unless every subscriber already
    /// has one coming (more would only make the same polls look twice);
    /// whether it was added, so a poll here will take it. A channel with
    /// no subscriber keeps one, for the next poll to wait (a node alone
    /// has nobody else to tell), but that one is not a poll's to take.
    fn add_token(&self) -> bool {
        let subscribers = self.subscribers.load(Ordering::Acquire);
        let added = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < subscribers.max(1)).then_some(n + 1)
            })
            .is_ok();
        if added {
            // Wakes one waiting poll, or lets the next to wait through.
            self.woken.notify_one();
        }
        added && subscribers > 0
    }

    /// Whether a poll here would take one more single wake-up: one waits
    /// without a wake-up coming.
    fn would_take(&self) -> bool {
        self.tokens.load(Ordering::Acquire) < self.subscribers.load(Ordering::Acquire)
    }

    fn take_token(&self) -> bool {
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// A poll's subscription to its wake channel; leaves the board when dropped.
pub struct PollWake {
    board: Arc<PollWakes>,
    channel: String,
    entry: Arc<WakeChannel>,
    seen: u64,
}

impl PollWake {
    /// Waits, on the async runtime and without a thread, until a wake-up
    /// of every poll this subscription has not seen yet, or a pending
    /// wake-up of one poll that it takes, or until `until`. Wake-ups
    /// between two waits are not lost: they are counted, and the next wait
    /// returns at once.
    pub async fn woken_before(&mut self, until: Instant) -> Woken {
        loop {
            // Enabled before the counts are read: a wake-up in between is kept.
            let woken = self.entry.woken.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let wakes = self.entry.wakes.load(Ordering::Acquire);
            if wakes != self.seen {
                self.seen = wakes;
                return Woken::All;
            }
            if self.entry.take_token() {
                return Woken::One;
            }
            if Instant::now() >= until {
                return Woken::No;
            }
            // A single wake-up this wait was notified of but leaves
            // unanswered (the deadline won the race) goes to another
            // waiter when `woken` is dropped; the token stays pending.
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(until.into()) => {}
            }
        }
    }

    /// A pass found a task: a pending wake-up of one poll is its (the
    /// work it was for is taken), so no other poll looks for it in vain.
    pub fn claimed(&self) {
        self.entry.take_token();
    }

    /// Hands a taken single wake-up to another poll (this one ends
    /// without looking): one of this node's, and on a node with peers the
    /// other nodes' too (the wake-up was kept here because this poll
    /// would take it).
    pub fn give_back(&self) {
        self.entry.add_token();
        self.board.relay_soon(&self.channel);
    }

    /// Wakes every poll of the channel on this node and, through the
    /// relay, on the other nodes: a single wake-up's pass found nothing
    /// (the task was another poll's to take, maybe on another node), or a
    /// pass took one task of several.
    pub fn wake_all(&mut self) {
        let before = self.entry.wakes.fetch_add(1, Ordering::AcqRel);
        self.entry.woken.notify_waiters();
        // Its own wake-up is not news to this poll (it just looked), unless
        // another came meanwhile, which its pass may have missed.
        if before == self.seen {
            self.seen = before + 1;
        }
        self.board.relay_soon(&self.channel);
    }
}

impl Drop for PollWake {
    fn drop(&mut self) {
        let mut channels = self
            .board
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.entry.subscribers.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last subscriber (a new one would have found this entry
            // under the same lock and counted itself first).
            if channels
                .get(&self.channel)
                .is_some_and(|e| Arc::ptr_eq(e, &self.entry))
            {
                channels.remove(&self.channel);
            }
            drop(channels);
            // A single wake-up no poll of this node took (its deadline won
            // the race) is another node's to answer, one poll of it.
            if self.entry.tokens.load(Ordering::Acquire) > 0 {
                self.board.relay_one_soon(&self.channel);
            }
        }
    }
}

/// Whether the shared polling cache answers, probed without writing.
///
/// A long poll waits on wake signals read from the cache; when the cache is
/// unreachable it would wait blind. Before a poll starts waiting it reads
/// one fixed key address: the read either answers (the key is never
/// written, so the answer is "absent") or fails. The probe writes nothing
/// and retains nothing, however many polls probe.
pub struct ServerPollingCache;

impl ServerPollingCache {
    /// The family of the probe's key address.
    pub const PREFIX: &'static str = "server:polling-cache:";

    /// The one key address every probe reads (never written).
    pub fn probe_key() -> String {
        format!("{}availability", Self::PREFIX)
    }

    /// Whether `cache` answered a read of the probe address.
    pub fn available(cache: &dyn Cache) -> bool {
        cache.get(&Self::probe_key()).is_ok()
    }
}

/// Serialises SQLite worker poll claims behind one cache lock.
///
/// SQLite has one writer: concurrent pollers that each try to claim a
/// task only queue up behind each other, and on several nodes sharing one
/// file they contend for the write lock (busy waits, retries). The gate is
/// one short-lived singleton lock key; a poll pass takes it before its
/// claim transaction and drops it right after, so at most one claim probe
/// runs at a time across every node sharing the cache. A pass that cannot
/// take it within its patience claims nothing this pass (the poll waits
/// for the next wake, as after an empty pass). It counts probes so its
/// effect can be measured.
pub struct WorkerPollClaimGate {
    cache: Arc<dyn Cache>,
    enabled: bool,
    token: String,
    probes: AtomicU64,
    empty_probes: AtomicU64,
    skipped: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    overran: AtomicU64,
}

/// What the gate counted since the node started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ClaimGateStats {
    /// Claim transactions run.
    pub probes: u64,
    /// Of those, the ones that found no task.
    pub empty_probes: u64,
    /// Passes that gave up waiting for the gate.
    pub skipped: u64,
    /// The most claim transactions this node ran at once.
    pub max_in_flight: u64,
    /// Claims that held the gate past its TTL: their key was gone or
    /// another's when they released it, so another claim may have run
    /// beside them (the gate is a lease, not a lock, by design).
    pub overran: u64,
}

/// A held gate (or a pass through a disabled one); dropping it releases.
pub struct ClaimPermit<'a> {
    gate: &'a WorkerPollClaimGate,
    locked: bool,
}

impl Drop for ClaimPermit<'_> {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.locked {
            let key = WorkerPollClaimGate::key();
            // Only the holder deletes: after a TTL expiry the key may be
            // another's. A read that failed says nothing either way.
            match self.gate.cache.get(&key) {
                Ok(Some(holder)) if holder == self.gate.token.as_bytes() => {
                    let _ = self.gate.cache.forget(&key);
                }
                Ok(_) => {
                    self.gate.overran.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {}
            }
        }
    }
}

impl ClaimPermit<'_> {
    /// Records whether the claim found a task.
    pub fn claimed(&self, found: bool) {
        self.gate.probes.fetch_add(1, Ordering::Relaxed);
        if !found {
            self.gate.empty_probes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl WorkerPollClaimGate {
    /// The family of the singleton lock key.
    pub const PREFIX: &'static str = "server:sqlite-worker-poll-claim:";
    /// How long the lock lives if its holder dies mid-claim.
    pub const TTL: Duration = Duration::from_secs(2);
    const RETRY: Duration = Duration::from_millis(1);

    /// A gate on `cache` for node `node` (`enabled`: take the lock).
    pub fn new(cache: Arc<dyn Cache>, node: &str, enabled: bool) -> Self {
        WorkerPollClaimGate {
            cache,
            enabled,
            token: format!("{node}:{}", std::process::id()),
            probes: AtomicU64::new(0),
            empty_probes: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            overran: AtomicU64::new(0),
        }
    }

    fn key() -> String {
        format!("{}lock", Self::PREFIX)
    }

    /// Whether passes take the lock.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Enters the gate, waiting up to `patience`; `None` when it stayed busy.
    pub fn enter(&self, patience: Duration) -> Result<Option<ClaimPermit<'_>>, CacheError> {
        if self.enabled {
            let began = std::time::Instant::now();
            while !self
                .cache
                .add(&Self::key(), self.token.as_bytes(), Self::TTL)?
            {
                if began.elapsed() >= patience {
                    self.skipped.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                std::thread::sleep(Self::RETRY);
            }
        }
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        Ok(Some(ClaimPermit {
            gate: self,
            locked: self.enabled,
        }))
    }

    /// The counts so far.
    pub fn stats(&self) -> ClaimGateStats {
        ClaimGateStats {
            probes: self.probes.load(Ordering::Relaxed),
            empty_probes: self.empty_probes.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            overran: self.overran.load(Ordering::Relaxed),
        }
    }
}

/// The scan caps of one workflow-task poll pass.
///
/// Each pass first fires timers that came due while no worker was polling
/// (scoped to the polled namespace, task queue and the poller's build-id
/// compatibility cohort) and returns expired
/// workflow-task leases to the queue; both scans are capped so an old
/// backlog is worked off a few rows per pass instead of in one slow poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkflowTaskPoller {
    /// Due timers fired per poll pass.
    pub due_timer_recovery_scan_limit: usize,
    /// Expired workflow-task leases recovered per pass.
    pub expired_workflow_task_recovery_scan_limit: usize,
}

impl WorkflowTaskPoller {
    /// The configuration key of the due-timer recovery cap.
    pub const DUE_TIMER_SCAN_LIMIT_KEY: &'static str =
        "server.polling.due_timer_recovery_scan_limit";
    /// The configuration key of the expired-lease recovery cap.
    pub const EXPIRED_TASK_SCAN_LIMIT_KEY: &'static str =
        "server.polling.expired_workflow_task_recovery_scan_limit";
    /// Both caps' default.
    pub const DEFAULT_SCAN_LIMIT: usize = 5;

    /// Caps read from `lookup` (config key → value); 0 or absent means the default.
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>) -> Self {
        let read = |key| {
            lookup(key)
                .filter(|n| *n > 0)
                .unwrap_or(Self::DEFAULT_SCAN_LIMIT)
        };
        WorkflowTaskPoller {
            due_timer_recovery_scan_limit: read(Self::DUE_TIMER_SCAN_LIMIT_KEY),
            expired_workflow_task_recovery_scan_limit: read(Self::EXPIRED_TASK_SCAN_LIMIT_KEY),
        }
    }
}

impl WorkflowTaskPoller {
    /// The family of duplicate-recovery suppression keys.
    pub const RECOVERY_PREFIX: &'static str = "server:workflow-task-expired-lease-recovery:";

    /// Claims the recovery of expired task `task_id`: false when another
    /// pass (on any node sharing the cache) claimed it within `ttl`.
    pub fn claim_recovery(
        &self,
        cache: &dyn Cache,
        task_id: i64,
        ttl: Duration,
    ) -> Result<bool, CacheError> {
        let key = format!("{}{task_id}", Self::RECOVERY_PREFIX);
        cache.add(&key, b"1", ttl)
    }
}

impl Default for WorkflowTaskPoller {
    fn default() -> Self {
        Self::from_config(|_| None)
    }
}

/// The scan cap of one activity-task poll pass.
///
/// An activity worker that dies holding a lease would otherwise strand its
/// run: each activity poll pass returns at most this many expired activity
/// leases to their queues (oldest expiry first, an index walk), reusing
/// the per-task duplicate-recovery suppression of workflow tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivityTaskPoller {
    /// Expired activity-task leases recovered per pass.
    pub expired_activity_task_recovery_scan_limit: usize,
}

impl ActivityTaskPoller {
    /// The configuration key of the expired activity-lease recovery cap.
    pub const EXPIRED_TASK_SCAN_LIMIT_KEY: &'static str =
        "server.polling.expired_activity_task_recovery_scan_limit";

    /// The cap read from `lookup`; 0 or absent means the default (5).
    pub fn from_config(lookup: impl Fn(&str) -> Option<usize>) -> Self {
        ActivityTaskPoller {
            expired_activity_task_recovery_scan_limit: lookup(Self::EXPIRED_TASK_SCAN_LIMIT_KEY)
                .filter(|n| *n > 0)
                .unwrap_or(WorkflowTaskPoller::DEFAULT_SCAN_LIMIT),
        }
    }
}

impl Default for ActivityTaskPoller {
    fn default() -> Self {
        Self::from_config(|_| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;
    use std::future::Future;

    /// The runtime a test waits for its polls' wake-ups on.
    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn churned_channels_leave_one_key_each_and_hide_their_names() {
        let cache = Arc::new(MemoryCache::default());
        let store = LongPollSignalStore::new(cache.clone());
        for _ in 0..3 {
            for queue in 0..50 {
                store
                    .signal("tenant-a", &format!("queue-{queue}"), "workflow")
                    .unwrap();
            }
        }
        assert_eq!(cache.count_prefix(LongPollSignalStore::PREFIX).unwrap(), 50);
        assert!(store
            .version("tenant-a", "queue-7", "workflow")
            .unwrap()
            .is_some());
        assert!(!LongPollSignalStore::key("tenant-a", "q", "c").contains("tenant-a"));
    }

    #[test]
    fn a_wake_reaches_the_polls_of_its_channel_here_and_on_every_node_of_the_relay() {
        let runtime = current_thread();
        let woken = |wake: &mut PollWake, until: Instant| {
            runtime.block_on(wake.woken_before(until)) != Woken::No
        };
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let (a, b, elsewhere) = (PollWakes::new(), PollWakes::new(), PollWakes::new());
        a.join_relay(cache.clone(), "one store", "node-a").unwrap();
        b.join_relay(cache.clone(), "one store", "node-b").unwrap();
        elsewhere
            .join_relay(cache.clone(), "another store", "node-c")
            .unwrap();
        let far = Instant::now() + Duration::from_secs(3600);
        let channel = wake_channel("default", "orders", "workflow");
        let mut on_a = a.subscribe(channel.clone());
        let mut on_b = b.subscribe(channel.clone());
        let mut other_queue = b.subscribe(wake_channel("default", "billing", "workflow"));
        let mut other_store = elsewhere.subscribe(channel.clone());
        assert_eq!((a.channels(), b.channels()), (1, 2));

        // A wake on A reaches A's poll and, relayed, B's; not another
        // queue's, not another store's.
        a.wake(&channel).unwrap();
        assert!(woken(&mut on_a, far));
        assert!(woken(&mut on_b, far));
        let now = Instant::now();
        assert!(!woken(&mut other_queue, now));
        assert!(!woken(&mut other_store, now));
        assert_eq!(a.stats().published, 1);
        assert_eq!(b.stats().received, 1);
        // A does not count its own message as received.
        assert_eq!(a.stats().received, 0);

        // Seen once: the next wait waits; a wake between two waits is kept.
        assert!(!woken(&mut on_b, Instant::now()));
        b.wake(&channel).unwrap();
        b.wake(&channel).unwrap();
        assert!(woken(&mut on_b, far));
        assert!(!woken(&mut on_b, Instant::now()));
        assert!(woken(&mut on_a, far));

        // A waiting poll is woken from another thread (whether the wake
        // comes before or during its wait).
        let waiter = std::thread::spawn(move || {
            current_thread().block_on(on_b.woken_before(far)) == Woken::All
        });
        a.wake(&channel).unwrap();
        assert!(waiter.join().unwrap());

        // Calls waiting on a run or a query task on B are woken by A's relay.
        let (waiters_a, waiters_b) = (
            crate::waiters::Waiters::new(Default::default()),
            crate::waiters::Waiters::new(Default::default()),
        );
        let (c, d) = (
            PollWakes::with_waiters(Some(waiters_a)),
            PollWakes::with_waiters(Some(waiters_b.clone())),
        );
        c.join_relay(cache.clone(), "a third store", "node-c")
            .unwrap();
        d.join_relay(cache.clone(), "a third store", "node-d")
            .unwrap();
        let run = waiters_b.subscribe(WaitKey::Run(42));
        let query = waiters_b.subscribe(WaitKey::QueryTask("qt-7".into()));
        let (run_woken, query_woken) = (run.notify().notified(), query.notify().notified());
        tokio::pin!(run_woken);
        tokio::pin!(query_woken);
        run_woken.as_mut().enable();
        query_woken.as_mut().enable();
        c.relay_wait(&WaitKey::Run(42)).unwrap();
        c.relay_wait(&WaitKey::QueryTask("qt-7".into())).unwrap();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(run_woken.as_mut().poll(&mut cx).is_ready());
        assert!(query_woken.as_mut().poll(&mut cx).is_ready());

        // The board forgets a channel with its last poll, and a node that
        // left the relay hears nothing more.
        drop(other_queue);
        assert_eq!(b.channels(), 0);
        b.leave_relay();
        assert!(!b.relayed());
        let mut later = b.subscribe(channel.clone());
        a.wake(&channel).unwrap();
        assert!(!woken(&mut later, Instant::now()));
        drop(on_a);
        assert_eq!(a.channels(), 0);
    }

    /// A start's wake of `channel` (queue "orders" of namespace
    /// "default") on `board`, with the channel's signal key: the key and
    /// the version written when it is written.
    fn start_wake(board: &PollWakes, channel: &str) -> (String, [u8; 16]) {
        let (key, version) = LongPollSignalStore::entry("default", "orders", "workflow");
        let put = CacheOp::Put {
            key: &key,
            value: &version,
            ttl: Duration::from_secs(60),
        };
        board.wake_one_and_signal(channel, put).unwrap();
        (key, version)
    }

    /// A single wake-up a poll of this node will take stays here: no relay
    /// message and no signal key. Only when no poll here takes it, or the
    /// poll that took it found nothing, ended without looking or left it
    /// pending, do the other nodes' polls hear of it.
    #[test]
    fn a_single_wake_leaves_the_node_only_when_no_poll_here_takes_it() {
        let runtime = current_thread();
        let woken =
            |wake: &mut PollWake, until: Instant| runtime.block_on(wake.woken_before(until));
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let (a, b) = (PollWakes::new(), PollWakes::new());
        a.join_relay(cache.clone(), "one store", "node-a").unwrap();
        b.join_relay(cache.clone(), "one store", "node-b").unwrap();
        // Delivery is synchronous here; a wake that never comes fails
        // the test at this deadline instead of holding it.
        let far = Instant::now() + Duration::from_secs(30);
        let channel = wake_channel("default", "orders", "workflow");
        let written = |key: &str| cache.get(key).unwrap();
        let wake_on_a = || start_wake(&a, &channel);
        let mut on_b = b.subscribe(channel.clone());

        // No poll on A: the wake-up goes to one of B's polls, with the
        // signal key.
        let (key, version) = wake_on_a();
        assert_eq!(woken(&mut on_b, far), Woken::One);
        assert_eq!((a.stats().published, a.stats().kept_here), (1, 0));
        let first = written(&key);
        assert_eq!(first.as_deref(), Some(&version[..]));

        // A poll on A: it takes the wake-up, and neither B's poll nor the
        // cache hears of it.
        let mut on_a = a.subscribe(channel.clone());
        wake_on_a();
        assert_eq!(woken(&mut on_a, far), Woken::One);
        assert_eq!(woken(&mut on_b, Instant::now()), Woken::No);
        assert_eq!((a.stats().published, a.stats().kept_here), (1, 1));
        assert_eq!(written(&key), first, "the signal key is not written again");

        // Its look found nothing it could take: B's poll looks.
        on_a.wake_all();
        assert_eq!(woken(&mut on_b, far), Woken::All);
        assert_eq!(a.stats().published, 2);

        // A poll that ends without looking hands it to B's polls too.
        a.wake_one(&channel).unwrap();
        assert_eq!(woken(&mut on_a, far), Woken::One);
        assert_eq!(woken(&mut on_b, Instant::now()), Woken::No);
        on_a.give_back();
        assert_eq!(woken(&mut on_b, far), Woken::All);

        // A wake-up left pending when A's last poll leaves (its deadline
        // won the race) goes to one of B's polls.
        let mut again = a.subscribe(channel.clone());
        assert_eq!(woken(&mut again, far), Woken::One, "the one given back");
        a.wake_one(&channel).unwrap();
        drop((on_a, again));
        assert_eq!(woken(&mut on_b, far), Woken::One);
        assert_eq!(a.stats().kept_here, 3);
        assert_eq!(a.stats().unsent, 0);
    }

    /// A single wake-up no poll of its node takes wakes one poll of the
    /// store, not every poll of the other nodes: three polls waiting on B
    /// and two on C cost one look for one task, where they cost five. The
    /// first node with a poll that would take it takes it (a key added to
    /// the shared cache); a node whose polls each have a wake-up coming
    /// leaves it to the next. A poll that then finds nothing it could take
    /// still wakes them all.
    #[test]
    fn a_relayed_single_wake_wakes_one_poll_of_the_store() {
        let runtime = current_thread();
        let woken =
            |wake: &mut PollWake, until: Instant| runtime.block_on(wake.woken_before(until));
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let (a, b, c) = (PollWakes::new(), PollWakes::new(), PollWakes::new());
        // The in-process cache delivers in the order the nodes joined:
        // B hears each message before C.
        for (board, node) in [(&a, "node-a"), (&b, "node-b"), (&c, "node-c")] {
            board.join_relay(cache.clone(), "one store", node).unwrap();
        }
        // Delivery is synchronous here; a wake that never comes fails the
        // test at this deadline instead of holding it.
        let far = Instant::now() + Duration::from_secs(30);
        let channel = wake_channel("default", "orders", "workflow");
        let mut on_b: Vec<PollWake> = (0..3).map(|_| b.subscribe(channel.clone())).collect();
        let mut on_c: Vec<PollWake> = (0..2).map(|_| c.subscribe(channel.clone())).collect();
        let looks = |polls: &mut [PollWake], until: Instant| -> Vec<Woken> {
            polls.iter_mut().map(|p| woken(p, until)).collect()
        };

        a.wake_one(&channel).unwrap();
        assert_eq!(a.stats().published, 1);
        assert_eq!(woken(&mut on_b[0], far), Woken::One);
        assert_eq!(looks(&mut on_b[1..], Instant::now()), [Woken::No; 2]);
        assert_eq!(looks(&mut on_c, Instant::now()), [Woken::No; 2]);
        assert_eq!((b.stats().taken_here, b.stats().taken_elsewhere), (1, 0));
        assert_eq!((c.stats().taken_here, c.stats().taken_elsewhere), (0, 1));

        // B's poll found nothing it could take while the task is still
        // ready: every other poll, here and there, looks.
        on_b[0].wake_all();
        assert_eq!(looks(&mut on_b[1..], far), [Woken::All; 2]);
        assert_eq!(looks(&mut on_c, far), [Woken::All; 2]);

        // A start's wake with its signal key goes the same way.
        start_wake(&a, &channel);
        assert_eq!(woken(&mut on_b[2], far), Woken::One);
        assert_eq!(looks(&mut on_b[..2], Instant::now()), [Woken::No; 2]);
        assert_eq!(looks(&mut on_c, Instant::now()), [Woken::No; 2]);

        // Five tasks relayed at once: each of B's three polls gets one
        // wake-up, then C's two polls get the rest.
        for _ in 0..5 {
            a.wake_one(&channel).unwrap();
        }
        let taken = |poll: &mut PollWake| {
            (0..6)
                .filter(|_| woken(poll, Instant::now()) == Woken::One)
                .count()
        };
        assert_eq!(taken(&mut on_b[0]), 3);
        assert_eq!(taken(&mut on_c[0]), 2);
        // A sent seven messages, B one (its look found nothing).
        assert_eq!((b.stats().received, c.stats().received), (7, 8));

        // A node that cannot add the key still wakes one of its polls: a
        // look too many, never a task nobody looks for.
        let (d, e) = (PollWakes::new(), PollWakes::new());
        let failing = Arc::new(crate::cache::CountingCache::new());
        failing.fail_adds.store(true, Ordering::Relaxed);
        let shared: Arc<dyn Cache> = failing.clone();
        d.join_relay(shared.clone(), "a store", "node-d").unwrap();
        e.join_relay(shared, "a store", "node-e").unwrap();
        let mut on_e = e.subscribe(channel.clone());
        failing.take();
        d.wake_one(&channel).unwrap();
        assert_eq!(
            failing.take(),
            [
                "publish server:long-poll-signal:",
                "add server:long-poll-signal:"
            ]
        );
        assert_eq!(woken(&mut on_e, far), Woken::One);
    }

    #[test]
    fn a_single_wake_reaches_one_poll_and_an_empty_look_wakes_the_rest() {
        let runtime = current_thread();
        let woken =
            |wake: &mut PollWake, until: Instant| runtime.block_on(wake.woken_before(until));
        let board = PollWakes::new();
        let channel = wake_channel("default", "orders", "activity");
        let far = Instant::now() + Duration::from_secs(3600);
        let mut polls: Vec<PollWake> = (0..3).map(|_| board.subscribe(channel.clone())).collect();

        // One wake-up, one poll: the first to wait takes it, the others
        // see nothing.
        board.wake_one(&channel).unwrap();
        assert_eq!(woken(&mut polls[0], far), Woken::One);
        assert_eq!(woken(&mut polls[1], Instant::now()), Woken::No);
        assert_eq!(woken(&mut polls[2], Instant::now()), Woken::No);

        // Its look found nothing (the task was another's): every other
        // poll is woken, and the one that looked is not woken by itself.
        polls[0].wake_all();
        assert_eq!(woken(&mut polls[1], far), Woken::All);
        assert_eq!(woken(&mut polls[2], far), Woken::All);
        assert_eq!(woken(&mut polls[0], Instant::now()), Woken::No);

        // A poll that ends without looking hands its wake-up on.
        board.wake_one(&channel).unwrap();
        assert_eq!(woken(&mut polls[1], far), Woken::One);
        polls[1].give_back();
        assert_eq!(woken(&mut polls[2], far), Woken::One);

        // A poll that found a task on its own first look takes the
        // pending wake-up meant for that task.
        board.wake_one(&channel).unwrap();
        polls[0].claimed();
        assert_eq!(woken(&mut polls[2], Instant::now()), Woken::No);

        // Pending wake-ups are bounded by the polls subscribed (three).
        for _ in 0..10 {
            board.wake_one(&channel).unwrap();
        }
        let taken = (0..10)
            .filter(|_| woken(&mut polls[0], Instant::now()) == Woken::One)
            .count();
        assert_eq!(taken, 3);

        // A poll waiting on another thread is woken (whether the wake-up
        // comes before or during its wait).
        let mut waiting = polls.pop().unwrap();
        let waiter =
            std::thread::spawn(move || current_thread().block_on(waiting.woken_before(far)));
        board.wake_one(&channel).unwrap();
        assert_eq!(waiter.join().unwrap(), Woken::One);
    }

    #[test]
    fn a_claim_that_outlives_its_gate_key_is_counted_and_leaves_the_new_holders_key() {
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let gate = WorkerPollClaimGate::new(cache.clone(), "n1", true);
        let key = WorkerPollClaimGate::key();
        // Released in time: the key goes, nothing overran.
        drop(gate.enter(Duration::ZERO).unwrap().unwrap());
        assert_eq!(cache.get(&key).unwrap(), None);
        assert_eq!(gate.stats().overran, 0);
        // The key expired under the holder and another node took it.
        let permit = gate.enter(Duration::ZERO).unwrap().unwrap();
        cache.forget(&key).unwrap();
        cache.put(&key, b"n2:1", WorkerPollClaimGate::TTL).unwrap();
        drop(permit);
        assert_eq!(cache.get(&key).unwrap().as_deref(), Some(&b"n2:1"[..]));
        assert_eq!(gate.stats().overran, 1);
        assert_eq!(gate.stats().max_in_flight, 1);
    }

    #[test]
    fn the_availability_probe_reads_one_address_and_writes_nothing() {
        let cache = MemoryCache::default();
        for _ in 0..1000 {
            assert!(ServerPollingCache::available(&cache));
        }
        assert_eq!(cache.count_prefix(ServerPollingCache::PREFIX).unwrap(), 0);
        assert!(!ServerPollingCache::available(
            &crate::cache::UnreachableCache
        ));
    }

    #[test]
    fn scan_caps_default_to_five_and_read_their_keys() {
        assert_eq!(
            WorkflowTaskPoller::default().due_timer_recovery_scan_limit,
            5
        );
        let poller = WorkflowTaskPoller::from_config(|key| {
            (key == WorkflowTaskPoller::EXPIRED_TASK_SCAN_LIMIT_KEY).then_some(2)
        });
        assert_eq!(poller.expired_workflow_task_recovery_scan_limit, 2);
        assert_eq!(poller.due_timer_recovery_scan_limit, 5);
    }
}
