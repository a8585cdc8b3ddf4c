//! The cache the server's coordination surfaces write to.
//!
//! A trait, so a node can keep its coordination keys in process (one node)
//! or in Redis (several nodes sharing wake signals, replay results and
//! budgets). Every write carries a TTL: there is deliberately no way to
//! store a key that never expires, so a forgotten surface still drains.
//! Keys are never built here; each owner type builds its own from the
//! prefix constant the bounded-growth policy declares.

mod memory;
mod redis;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use memory::MemoryCache;
pub use redis::RedisCache;

/// Why a cache operation failed (only a remote backend can fail).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The backend refused or could not be reached.
    #[error("cache backend: {0}")]
    Backend(String),
}

/// A key-value cache whose every entry expires.
pub trait Cache: Send + Sync {
    /// Stores `value` under `key` for `ttl`, replacing any previous value.
    fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), CacheError>;
    /// Stores `value` only if `key` holds nothing live; whether it did.
    fn add(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError>;
    /// The live value under `key`.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError>;
    /// Removes `key`; whether a live value was removed.
    fn forget(&self, key: &str) -> Result<bool, CacheError>;
    /// Adds one to the counter under `key` and returns the new count. The
    /// TTL starts when the counter is created and is not extended, so a
    /// bucket lives exactly `ttl` however busy it is. The value is stored as
    /// decimal text on every backend (see [`read_counter`]).
    fn increment(&self, key: &str, ttl: Duration) -> Result<u64, CacheError>;
    /// Makes `key` hold `value` for `ttl` from now if it holds nothing live
    /// or already holds `value` (a lease taken or renewed), in one atomic
    /// step; whether `key` now holds `value`. Another live value is left
    /// alone (false).
    fn claim(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError>;
    /// Removes `key` only if it holds `value` (a lease given back by its
    /// holder, never someone else's); whether it did.
    fn release(&self, key: &str, value: &[u8]) -> Result<bool, CacheError>;
    /// Live keys starting with `prefix` (a full scan: evidence and tests only).
    fn count_prefix(&self, prefix: &str) -> Result<usize, CacheError>;
    /// Keys of the family `prefix` (`server:<family>:`) as the backend
    /// counts them on write, expired keys included until the backend evicts
    /// them; a backend without such counters scans.
    fn count_family(&self, prefix: &str) -> Result<usize, CacheError> {
        self.count_prefix(prefix)
    }
    /// The backend's name, for diagnostics.
    fn backend(&self) -> &'static str;
    /// Sends `message` to every subscriber of the pub/sub `channel` (on
    /// Redis, every node subscribed to it; in process, the subscribers of
    /// this cache). Nothing is stored: a subscriber that is not listening
    /// at that moment misses it.
    fn publish(&self, channel: &str, message: &[u8]) -> Result<(), CacheError>;
    /// Hands every message published on `channel` to `deliver` until the
    /// returned subscription is dropped. `deliver(None)` says messages may
    /// have been missed (a lost and re-established connection): the
    /// subscriber should look for itself. Returns once it listens.
    fn subscribe(&self, channel: &str, deliver: Deliver) -> Result<Subscription, CacheError>;
    /// Runs `ops` in order, each as its own method runs it, in one round
    /// trip to a remote backend (a pipeline on Redis): writes that end the
    /// same step (a poll's replay key and its diagnostic, a wake's relay
    /// message and its signal key) cost one wait for the network, not one
    /// each (docs/performance.md, session 18). Not atomic: the first
    /// failure is the answer, and the ops after it may or may not have run
    /// (each is a write that stands alone).
    fn batch(&self, ops: &[CacheOp<'_>]) -> Result<(), CacheError> {
        for op in ops {
            match *op {
                CacheOp::Put { key, value, ttl } => self.put(key, value, ttl)?,
                CacheOp::Publish { channel, message } => self.publish(channel, message)?,
            }
        }
        Ok(())
    }
}

/// One write of a [`Cache::batch`].
#[derive(Debug, Clone, Copy)]
pub enum CacheOp<'a> {
    /// [`Cache::put`].
    Put {
        /// The key.
        key: &'a str,
        /// Its new value.
        value: &'a [u8],
        /// How long it lives.
        ttl: Duration,
    },
    /// [`Cache::publish`].
    Publish {
        /// The pub/sub channel.
        channel: &'a str,
        /// The message.
        message: &'a [u8],
    },
}

/// What a pub/sub subscription calls with each message (`None`: some may
/// have been missed).
pub type Deliver = Arc<dyn Fn(Option<&[u8]>) + Send + Sync>;

/// A live pub/sub subscription; dropping it ends it.
pub struct Subscription {
    stop: Arc<AtomicBool>,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl Subscription {
    /// A subscription that `on_drop` ends; `stop` turns true first.
    pub(crate) fn new(stop: Arc<AtomicBool>, on_drop: Box<dyn FnOnce() + Send>) -> Self {
        Subscription {
            stop,
            on_drop: Some(on_drop),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(end) = self.on_drop.take() {
            end();
        }
    }
}

/// A key's family: through its second `:` (`server:<family>:`), or its
/// first when it has one only, or the empty family.
pub(crate) fn family_of(key: &str) -> &str {
    let mut colons = key.match_indices(':').map(|(i, _)| i);
    match (colons.next(), colons.next()) {
        (_, Some(second)) => &key[..=second],
        (Some(first), None) => &key[..=first],
        (None, None) => "",
    }
}

/// A stable 64-bit hash of key dimensions, rendered as 16 hex digits.
///
/// User-chosen names (namespaces, queues, request ids) never reach a key
/// verbatim: they can be long, contain separators, or be sensitive. The hash
/// is FNV-1a rather than std's hasher because every node sharing a Redis
/// cache must derive the same key from the same dimensions, across builds.
pub fn hash_dimensions(parts: &[&str]) -> String {
    hashed_dimensions(parts).as_str().to_owned()
}

/// [`hash_dimensions`]'s 16 hex digits, held inline: a start's wake looks
/// its channel up by them, and the `format!`ed `String` was an allocation
/// and a formatter call per start (docs/performance.md, "the gate's
/// copies").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashedDimensions([u8; 16]);

impl HashedDimensions {
    /// The digits, as [`hash_dimensions`] writes them.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever written into it.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// [`hash_dimensions`] without a `String`.
pub fn hashed_dimensions(parts: &[&str]) -> HashedDimensions {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        // The length prefix keeps ("ab", "c") and ("a", "bc") apart.
        for byte in (part.len() as u64)
            .to_le_bytes()
            .iter()
            .chain(part.as_bytes())
        {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    for (i, digit) in digits.iter_mut().enumerate() {
        *digit = HEX[((hash >> (60 - 4 * i)) & 0xf) as usize];
    }
    HashedDimensions(digits)
}

/// The value of a counter written by [`Cache::increment`] (0 when absent).
pub fn read_counter(cache: &dyn Cache, key: &str) -> Result<u64, CacheError> {
    Ok(cache
        .get(key)?
        .and_then(|b| std::str::from_utf8(&b).ok()?.parse().ok())
        .unwrap_or(0))
}

/// What counting one refusal decided about logging it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionLog {
    /// The first refusal of its (scope, reason, minute): log it.
    Elected,
    /// Already logged this minute.
    Suppressed,
    /// The counter or the log-suppression key could not be written.
    Unavailable,
}

/// Counts one refusal under `counter_key` and elects, through the
/// log-suppression key `log_key`, the single log line of its minute; both
/// keys live `ttl`. A refusal must never fail because its telemetry did, so
/// cache errors come back only as [`RejectionLog::Unavailable`].
pub fn tally_rejection(
    cache: &dyn Cache,
    counter_key: &str,
    log_key: &str,
    ttl: Duration,
) -> RejectionLog {
    let counted = cache.increment(counter_key, ttl);
    match (counted, cache.add(log_key, b"1", ttl)) {
        (Ok(_), Ok(true)) => RejectionLog::Elected,
        (Ok(_), Ok(false)) => RejectionLog::Suppressed,
        _ => RejectionLog::Unavailable,
    }
}

/// A quota's per-namespace refusal telemetry: one counter and one
/// log-suppression key per (namespace, fixed reason, minute) under the
/// owner's `prefix`, both living `ttl`. The durable-state and the external
/// payload quotas share it so their keys keep one shape.
#[derive(Debug, Clone, Copy)]
pub struct NamespaceRejections {
    /// The owner's key prefix (`server:…:`).
    pub prefix: &'static str,
    /// How long a counter and its log key live.
    pub ttl: Duration,
}

impl NamespaceRejections {
    /// Counts one refusal of `reason` in `namespace`'s current minute and
    /// elects its single log line (see [`tally_rejection`]).
    pub fn record(&self, cache: &dyn Cache, namespace: &str, reason: &str) -> RejectionLog {
        let ns = hash_dimensions(&[namespace]);
        let minute = minute_bucket(std::time::SystemTime::now());
        let log_key = format!("{}rejection-log:{ns}:{minute}:{reason}", self.prefix);
        tally_rejection(
            cache,
            &self.counter_key(&ns, minute, reason),
            &log_key,
            self.ttl,
        )
    }

    /// This minute's refusals in `namespace` per reason, and their total.
    /// A namespace without a quota writes no key, so with `configured`
    /// false every reason is 0 and the cache is not read.
    pub fn this_minute(
        &self,
        cache: &dyn Cache,
        namespace: &str,
        reasons: &[&str],
        configured: bool,
    ) -> Result<(serde_json::Map<String, serde_json::Value>, u64), CacheError> {
        let ns = hash_dimensions(&[namespace]);
        let minute = minute_bucket(std::time::SystemTime::now());
        let mut by_reason = serde_json::Map::new();
        let mut total = 0;
        for reason in reasons {
            let n = if configured {
                read_counter(cache, &self.counter_key(&ns, minute, reason))?
            } else {
                0
            };
            total += n;
            by_reason.insert((*reason).into(), n.into());
        }
        Ok((by_reason, total))
    }

    fn counter_key(&self, ns: &str, minute: u64, reason: &str) -> String {
        format!("{}rejections:{ns}:{minute}:{reason}", self.prefix)
    }
}

/// The whole-minute bucket a budget counter belongs to.
pub fn minute_bucket(now: std::time::SystemTime) -> u64 {
    now.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 60)
        .unwrap_or(0)
}

/// A cache whose every call fails, as an unreachable Redis does (tests of
/// the paths that must degrade instead of failing).
#[cfg(test)]
pub(crate) struct UnreachableCache;

#[cfg(test)]
impl Cache for UnreachableCache {
    fn put(&self, _: &str, _: &[u8], _: Duration) -> Result<(), CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn add(&self, _: &str, _: &[u8], _: Duration) -> Result<bool, CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn get(&self, _: &str) -> Result<Option<Vec<u8>>, CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn forget(&self, _: &str) -> Result<bool, CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn increment(&self, _: &str, _: Duration) -> Result<u64, CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn claim(&self, _: &str, _: &[u8], _: Duration) -> Result<bool, CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn release(&self, _: &str, _: &[u8]) -> Result<bool, CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn count_prefix(&self, _: &str) -> Result<usize, CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn backend(&self) -> &'static str {
        "down"
    }
    fn publish(&self, _: &str, _: &[u8]) -> Result<(), CacheError> {
        Err(CacheError::Backend("down".into()))
    }
    fn subscribe(&self, _: &str, _: Deliver) -> Result<Subscription, CacheError> {
        Err(CacheError::Backend("down".into()))
    }
}

/// A cache that writes to an in-process one and notes every call, for
/// tests that count a step's trips to the cache.
#[cfg(test)]
pub(crate) struct CountingCache {
    inner: MemoryCache,
    /// Each call, in order: the method's name, a batch as its ops'
    /// (`batch[put,publish]`), with the key's family (`put server:x:`).
    pub calls: std::sync::Mutex<Vec<String>>,
    /// While set, every `add` fails as an unreachable Redis's would.
    pub fail_adds: AtomicBool,
    /// While set, every `batch` fails so (a round trip past the client's
    /// timeout after the steps before it succeeded).
    pub fail_batches: AtomicBool,
}

#[cfg(test)]
impl CountingCache {
    pub(crate) fn new() -> CountingCache {
        CountingCache {
            inner: MemoryCache::default(),
            calls: std::sync::Mutex::new(Vec::new()),
            fail_adds: AtomicBool::new(false),
            fail_batches: AtomicBool::new(false),
        }
    }

    fn note(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }

    /// The calls since the last `take`.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

#[cfg(test)]
impl Cache for CountingCache {
    fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), CacheError> {
        self.note(format!("put {}", family_of(key)));
        self.inner.put(key, value, ttl)
    }
    fn add(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        self.note(format!("add {}", family_of(key)));
        if self.fail_adds.load(Ordering::Relaxed) {
            return Err(CacheError::Backend("down".into()));
        }
        self.inner.add(key, value, ttl)
    }
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        self.note(format!("get {}", family_of(key)));
        self.inner.get(key)
    }
    fn forget(&self, key: &str) -> Result<bool, CacheError> {
        self.note(format!("forget {}", family_of(key)));
        self.inner.forget(key)
    }
    fn increment(&self, key: &str, ttl: Duration) -> Result<u64, CacheError> {
        self.note(format!("increment {}", family_of(key)));
        self.inner.increment(key, ttl)
    }
    fn claim(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        self.note(format!("claim {}", family_of(key)));
        self.inner.claim(key, value, ttl)
    }
    fn release(&self, key: &str, value: &[u8]) -> Result<bool, CacheError> {
        self.note(format!("release {}", family_of(key)));
        self.inner.release(key, value)
    }
    fn count_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
        self.inner.count_prefix(prefix)
    }
    fn backend(&self) -> &'static str {
        "counting"
    }
    fn publish(&self, channel: &str, message: &[u8]) -> Result<(), CacheError> {
        self.note(format!("publish {}", family_of(channel)));
        self.inner.publish(channel, message)
    }
    fn subscribe(&self, channel: &str, deliver: Deliver) -> Result<Subscription, CacheError> {
        self.inner.subscribe(channel, deliver)
    }
    fn batch(&self, ops: &[CacheOp<'_>]) -> Result<(), CacheError> {
        let names: Vec<String> = ops
            .iter()
            .map(|op| match op {
                CacheOp::Put { key, .. } => format!("put {}", family_of(key)),
                CacheOp::Publish { channel, .. } => format!("publish {}", family_of(channel)),
            })
            .collect();
        self.note(format!("batch[{}]", names.join(", ")));
        if self.fail_batches.load(Ordering::Relaxed) {
            return Err(CacheError::Backend("timed out".into()));
        }
        self.inner.batch(ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimension_hashes_are_stable_and_separate_parts() {
        assert_eq!(hash_dimensions(&["a", "b"]), hash_dimensions(&["a", "b"]));
        assert_ne!(hash_dimensions(&["ab", "c"]), hash_dimensions(&["a", "bc"]));
        assert_eq!(hash_dimensions(&[]).len(), 16);
    }

    /// Keys are shared by every node of a Redis cache, across builds: the
    /// inline digits are the `format!("{hash:016x}")` the keys always had.
    #[test]
    fn dimension_hashes_keep_their_digits() {
        let reference = |parts: &[&str]| {
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for part in parts {
                for byte in (part.len() as u64)
                    .to_le_bytes()
                    .iter()
                    .chain(part.as_bytes())
                {
                    hash ^= u64::from(*byte);
                    hash = hash.wrapping_mul(0x0100_0000_01b3);
                }
            }
            format!("{hash:016x}")
        };
        assert_eq!(hash_dimensions(&[]), "cbf29ce484222325");
        let long = "q".repeat(300);
        let cases: [&[&str]; 6] = [
            &["bench", "q", "workflow"],
            &["default", "orders", "activity"],
            &["", "", ""],
            &["ns", &long, "workflow"],
            &["\u{e9}t\u{e9}", "q:1", "x"],
            &["a"],
        ];
        for parts in cases {
            assert_eq!(hash_dimensions(parts), reference(parts), "{parts:?}");
            assert_eq!(hashed_dimensions(parts).as_str(), reference(parts));
        }
        // Leading zero digits are kept (a hash below 2^60).
        let low = (0..10_000)
            .map(|i| i.to_string())
            .find(|s| reference(&[s.as_str()]).starts_with('0'))
            .expect("a hash with a leading zero digit");
        assert_eq!(hash_dimensions(&[&low]), reference(&[&low]));
    }
}
