//! The Redis cache backend, for several nodes sharing coordination state.
//!
//! Uses the blocking client (the server calls the cache from blocking
//! tasks, next to its SQLite store) over a small pool of connections.
//! Counters are created and given their TTL in one server-side script, so
//! a node dying between the two steps cannot leave an immortal key.
//!
//! Every write that creates, replaces or removes a key also moves, in the
//! same script, a per-family count of keys by the second they expire in
//! (`server:cache-key-count:<family hash>:<second>`, living one second past
//! its second). [`Cache::count_family`] then sums the counters of the next
//! [`COUNT_HORIZON_SECONDS`] seconds with one `MGET`: a fixed cost per key
//! family however many keys it holds, where a `SCAN` would walk them all.
//!
//! The scripts are loaded once per connection pool (`SCRIPT LOAD`) and
//! called by their SHA1 (`EVALSHA`): sending a script's kilobyte of text
//! with every `EVAL` made Redis hash it again on each call. A server that
//! lost them (restarted, `SCRIPT FLUSH`) answers `NOSCRIPT`; the call is
//! then sent again with the scripts' text (`EVAL`, which also caches them
//! again): a script that was not found did not run, and an `EVAL` cannot
//! be answered `NOSCRIPT`, however often the server loses its scripts
//! meanwhile (reloading them with `SCRIPT LOAD` and retrying by SHA1 lost
//! that race to a second flush). [`Cache::batch`] sends its writes as one
//! pipeline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Client, Connection, RedisResult};

use super::{family_of, hash_dimensions, Cache, CacheError, CacheOp, Deliver, Subscription};

/// How often a subscriber's blocking read comes back to see whether it
/// should stop.
const SUBSCRIBER_READ_TIMEOUT: Duration = Duration::from_millis(250);
/// The longest pause between attempts to re-subscribe after a lost connection.
const RESUBSCRIBE_BACKOFF: Duration = Duration::from_secs(2);

/// How far ahead key counts look: keys expiring later are not counted (no
/// key family's TTL reaches it by default; the longest is 15 minutes).
pub const COUNT_HORIZON_SECONDS: u64 = 960;

/// The family of per-second key counts.
pub const COUNT_PREFIX: &str = "server:cache-key-count:";

// Shared by the scripts below: KEYS[2] is the family's count prefix.
// A key is counted in the second its absolute expiry falls in, read back
// from Redis itself (PEXPIRETIME, Redis 7+) both when it is counted in and
// when it is counted out, so an overwrite or a delete always moves the
// very counter its creation moved. Before Redis 7 the expiry is the
// caller's clock plus PTTL, which can land one second off at a boundary
// (that counter then drains by its own TTL).
const COUNTS: &str = "local function expiry_of(key, now) \
       local e = redis.pcall('PEXPIRETIME', key) \
       if type(e) == 'number' then return e end \
       local t = redis.call('PTTL', key) \
       if t < 0 then return t end \
       return now + t \
     end \
     local function count_in(expiry) \
       local s = math.floor(expiry / 1000) \
       local k = KEYS[2] .. s \
       redis.call('INCR', k) \
       redis.call('PEXPIREAT', k, (s + 2) * 1000) \
     end \
     local function count_out(expiry) \
       local k = KEYS[2] .. math.floor(expiry / 1000) \
       local n = tonumber(redis.call('GET', k) or '0') \
       if n > 0 then redis.call('DECR', k) end \
     end ";

// ARGV: value, ttl ms, now ms.
const PUT: &str = "local now = tonumber(ARGV[3]) \
     local old = expiry_of(KEYS[1], now) \
     redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) \
     if old > 0 then count_out(old) end \
     count_in(expiry_of(KEYS[1], now)) return 1";

// ARGV: value, ttl ms, now ms.
const ADD: &str = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then \
       count_in(expiry_of(KEYS[1], tonumber(ARGV[3]))) return 1 \
     end return 0";

// ARGV: ttl ms, now ms.
const INCREMENT: &str = "local n = redis.call('INCR', KEYS[1]) \
     if n == 1 then \
       redis.call('PEXPIRE', KEYS[1], ARGV[1]) \
       count_in(expiry_of(KEYS[1], tonumber(ARGV[2]))) \
     end return n";

// ARGV: now ms.
const FORGET: &str = "local old = expiry_of(KEYS[1], tonumber(ARGV[1])) \
     local removed = redis.call('DEL', KEYS[1]) \
     if removed == 1 and old > 0 then count_out(old) end \
     return removed";
// ARGV: value, ttl ms, now ms. 1 when KEYS[1] now holds the value.
const CLAIM: &str = "local held = redis.call('GET', KEYS[1]) \
     if held == false then \
       redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) \
       count_in(expiry_of(KEYS[1], tonumber(ARGV[3]))) return 1 \
     end \
     if held ~= ARGV[1] then return 0 end \
     local now = tonumber(ARGV[3]) \
     local old = expiry_of(KEYS[1], now) \
     redis.call('PEXPIRE', KEYS[1], ARGV[2]) \
     if old > 0 then count_out(old) end \
     count_in(expiry_of(KEYS[1], now)) return 1";

// ARGV: value, now ms.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end \
     local old = expiry_of(KEYS[1], tonumber(ARGV[2])) \
     redis.call('DEL', KEYS[1]) \
     if old > 0 then count_out(old) end return 1";

/// The counting scripts, each with [`COUNTS`] in front.
#[derive(Debug, Clone, Copy)]
enum Script {
    Put,
    Add,
    Increment,
    Forget,
    Claim,
    Release,
}

impl Script {
    const ALL: [Script; 6] = [
        Script::Put,
        Script::Add,
        Script::Increment,
        Script::Forget,
        Script::Claim,
        Script::Release,
    ];

    /// The script's whole text: [`COUNTS`], then its body (built when
    /// loaded, and for a call that found it lost).
    fn text(self) -> String {
        let body = match self {
            Script::Put => PUT,
            Script::Add => ADD,
            Script::Increment => INCREMENT,
            Script::Forget => FORGET,
            Script::Claim => CLAIM,
            Script::Release => RELEASE,
        };
        format!("{COUNTS}{body}")
    }
}

const POOL_SIZE: usize = 16;

/// A Redis-backed cache.
pub struct RedisCache {
    client: Client,
    idle: Mutex<Vec<Connection>>,
    timeout: Duration,
    /// Each [`Script`]'s SHA1 as Redis answered `SCRIPT LOAD`, in
    /// [`Script::ALL`]'s order.
    shas: Vec<String>,
}

/// How a call names its script: by SHA1, or with its text after the
/// server answered `NOSCRIPT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Invoke {
    BySha,
    WithText,
}

impl RedisCache {
    /// Connects to `url` (`redis://host:port/db`) and proves the server answers.
    pub fn connect(url: &str) -> Result<RedisCache, CacheError> {
        let client = Client::open(url).map_err(backend)?;
        let mut cache = RedisCache {
            client,
            idle: Mutex::new(Vec::new()),
            timeout: TIMEOUT,
            shas: Vec::with_capacity(Script::ALL.len()),
        };
        cache.with(|conn| redis::cmd("PING").query::<String>(conn))?;
        for script in Script::ALL {
            let sha = cache.with(|conn| {
                redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(script.text())
                    .query::<String>(conn)
            })?;
            cache.shas.push(sha);
        }
        Ok(cache)
    }

    /// One call of `script` on `key`, by SHA1 or with its text; the
    /// caller adds its arguments.
    fn counted(&self, script: Script, key: &str, how: Invoke) -> redis::Cmd {
        let mut cmd = match how {
            Invoke::BySha => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(self.shas.get(script as usize).map_or("", String::as_str));
                cmd
            }
            Invoke::WithText => {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(script.text());
                cmd
            }
        };
        cmd.arg(2).arg(key).arg(count_prefix_of(key));
        cmd
    }

    /// [`RedisCache::with`] for `op`, which calls the scripts (its
    /// commands built inside it, from [`RedisCache::counted`] with the
    /// [`Invoke`] it is given): by SHA1, and after a `NOSCRIPT` answer
    /// (the server lost them; nothing of that call ran) once more with
    /// their text.
    fn with_scripts<T>(
        &self,
        op: impl Fn(&mut Connection, Invoke) -> RedisResult<T>,
    ) -> Result<T, CacheError> {
        let mut lost = false;
        let first = self.with(|conn| {
            let answer = op(conn, Invoke::BySha);
            lost = matches!(&answer, Err(e) if e.kind() == redis::ErrorKind::NoScriptError);
            answer
        });
        if !lost {
            return first;
        }
        self.with(|conn| op(conn, Invoke::WithText))
    }

    fn with<T>(&self, op: impl FnOnce(&mut Connection) -> RedisResult<T>) -> Result<T, CacheError> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => {
                let conn = self
                    .client
                    .get_connection_with_timeout(self.timeout)
                    .map_err(backend)?;
                conn.set_read_timeout(Some(self.timeout)).map_err(backend)?;
                conn.set_write_timeout(Some(self.timeout))
                    .map_err(backend)?;
                conn
            }
        };
        let result = op(&mut conn).map_err(backend);
        // A connection that failed may be mid-reply; drop it instead of reusing it.
        if result.is_ok() {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < POOL_SIZE {
                idle.push(conn);
            }
        }
        result
    }

    /// Deletes every key under `prefix` (test isolation between runs).
    pub fn purge_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
        let keys = self.scan(prefix)?;
        for key in &keys {
            self.with(|conn| redis::cmd("DEL").arg(key).query::<i64>(conn))?;
        }
        Ok(keys.len())
    }

    fn scan(&self, prefix: &str) -> Result<Vec<String>, CacheError> {
        let pattern = format!("{}*", escape_glob(prefix));
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = self.with(|conn| {
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(conn)
            })?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
}

/// A subscriber's thread: one connection in subscribe mode, handing each
/// message on, re-subscribing (after a pause) when the connection fails.
struct Listener {
    client: Client,
    timeout: Duration,
    channel: String,
    deliver: Deliver,
    stop: Arc<AtomicBool>,
}

impl Listener {
    fn run(self, ready: std::sync::mpsc::Sender<Result<(), CacheError>>) {
        let mut ready = Some(ready);
        let mut pause = Duration::from_millis(50);
        let mut failing = false;
        while !self.stop.load(Ordering::Acquire) {
            match self.listen(&mut ready, &mut failing, &mut pause) {
                Ok(()) => return,
                Err(error) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(Err(error));
                        return;
                    }
                    if !failing {
                        tracing::warn!(
                            channel = %self.channel,
                            %error,
                            "the cache's pub/sub subscription failed; re-subscribing (wake-ups from other nodes wait for the poll interval meanwhile)"
                        );
                        failing = true;
                    }
                }
            }
            let until = Instant::now() + pause;
            while Instant::now() < until && !self.stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(50).min(pause));
            }
            pause = (pause * 2).min(RESUBSCRIBE_BACKOFF);
        }
    }

    /// Subscribes and hands messages on until told to stop (`Ok`) or the
    /// connection fails (`Err`).
    fn listen(
        &self,
        ready: &mut Option<std::sync::mpsc::Sender<Result<(), CacheError>>>,
        failing: &mut bool,
        pause: &mut Duration,
    ) -> Result<(), CacheError> {
        let mut conn = self
            .client
            .get_connection_with_timeout(self.timeout)
            .map_err(backend)?;
        conn.set_write_timeout(Some(self.timeout))
            .map_err(backend)?;
        let mut pubsub = conn.as_pubsub();
        pubsub
            .set_read_timeout(Some(self.timeout))
            .map_err(backend)?;
        pubsub.subscribe(&self.channel).map_err(backend)?;
        pubsub
            .set_read_timeout(Some(SUBSCRIBER_READ_TIMEOUT))
            .map_err(backend)?;
        *failing = false;
        *pause = Duration::from_millis(50);
        match ready.take() {
            Some(ready) => {
                let _ = ready.send(Ok(()));
            }
            // A re-subscription: what was published meanwhile is lost.
            None => {
                tracing::info!(channel = %self.channel, "the cache's pub/sub subscription is back");
                (self.deliver)(None);
            }
        }
        while !self.stop.load(Ordering::Acquire) {
            match pubsub.get_message() {
                Ok(message) => (self.deliver)(Some(message.get_payload_bytes())),
                Err(e) if e.is_timeout() => continue,
                Err(e) => return Err(backend(e)),
            }
        }
        Ok(())
    }
}

/// A Redis failure as the cache's error; a read or write past the
/// connection's timeout (a server that hangs, a network dropping packets)
/// says so, rather than the socket's "Resource temporarily unavailable".
fn backend(e: redis::RedisError) -> CacheError {
    if e.is_timeout() {
        return CacheError::Backend(format!(
            "no answer from Redis within {} s (the server hangs, or the network to it drops packets): {e}",
            TIMEOUT.as_secs()
        ));
    }
    CacheError::Backend(e.to_string())
}

/// How long one Redis connect, read or write may take.
const TIMEOUT: Duration = Duration::from_secs(2);

fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The count prefix of `key`'s family.
fn count_prefix_of(key: &str) -> String {
    format!("{COUNT_PREFIX}{}:", hash_dimensions(&[family_of(key)]))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn millis(ttl: Duration) -> u64 {
    // Redis refuses a zero expiry; the shortest TTL is one millisecond.
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Cache for RedisCache {
    fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), CacheError> {
        let (ttl, now) = (millis(ttl), now_ms());
        self.with_scripts(|conn, how| {
            self.counted(Script::Put, key, how)
                .arg(value)
                .arg(ttl)
                .arg(now)
                .query::<i64>(conn)
        })?;
        Ok(())
    }

    fn add(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        let (ttl, now) = (millis(ttl), now_ms());
        let added: i64 = self.with_scripts(|conn, how| {
            self.counted(Script::Add, key, how)
                .arg(value)
                .arg(ttl)
                .arg(now)
                .query(conn)
        })?;
        Ok(added == 1)
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        self.with(|conn| redis::cmd("GET").arg(key).query(conn))
    }

    fn forget(&self, key: &str) -> Result<bool, CacheError> {
        let now = now_ms();
        let removed: i64 = self.with_scripts(|conn, how| {
            self.counted(Script::Forget, key, how).arg(now).query(conn)
        })?;
        Ok(removed > 0)
    }

    fn increment(&self, key: &str, ttl: Duration) -> Result<u64, CacheError> {
        let (ttl, now) = (millis(ttl), now_ms());
        let count: i64 = self.with_scripts(|conn, how| {
            self.counted(Script::Increment, key, how)
                .arg(ttl)
                .arg(now)
                .query(conn)
        })?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn claim(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        let (ttl, now) = (millis(ttl), now_ms());
        let held: i64 = self.with_scripts(|conn, how| {
            self.counted(Script::Claim, key, how)
                .arg(value)
                .arg(ttl)
                .arg(now)
                .query(conn)
        })?;
        Ok(held == 1)
    }

    fn release(&self, key: &str, value: &[u8]) -> Result<bool, CacheError> {
        let now = now_ms();
        let removed: i64 = self.with_scripts(|conn, how| {
            self.counted(Script::Release, key, how)
                .arg(value)
                .arg(now)
                .query(conn)
        })?;
        Ok(removed == 1)
    }

    fn batch(&self, ops: &[CacheOp<'_>]) -> Result<(), CacheError> {
        if ops.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        self.with_scripts(|conn, how| {
            let mut pipe = redis::pipe();
            for op in ops {
                match *op {
                    CacheOp::Put { key, value, ttl } => pipe.add_command(
                        self.counted(Script::Put, key, how)
                            .arg(value)
                            .arg(millis(ttl))
                            .arg(now)
                            .to_owned(),
                    ),
                    // A `NOSCRIPT` answer fails the pipeline after its
                    // messages went out: the second sending carries only
                    // the script calls, so no message is published twice.
                    CacheOp::Publish { .. } if how == Invoke::WithText => &mut pipe,
                    CacheOp::Publish { channel, message } => {
                        pipe.cmd("PUBLISH").arg(channel).arg(message)
                    }
                };
            }
            pipe.query::<Vec<i64>>(conn)
        })?;
        Ok(())
    }

    fn count_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
        Ok(self.scan(prefix)?.len())
    }

    fn count_family(&self, prefix: &str) -> Result<usize, CacheError> {
        if family_of(prefix) != prefix {
            return self.count_prefix(prefix);
        }
        let counts = count_prefix_of(prefix);
        let now = now_ms() / 1000;
        let keys: Vec<String> = (now..=now + COUNT_HORIZON_SECONDS)
            .map(|second| format!("{counts}{second}"))
            .collect();
        let values: Vec<Option<i64>> =
            self.with(|conn| redis::cmd("MGET").arg(&keys).query(conn))?;
        let total: i64 = values.into_iter().flatten().filter(|n| *n > 0).sum();
        Ok(usize::try_from(total).unwrap_or(0))
    }

    fn publish(&self, channel: &str, message: &[u8]) -> Result<(), CacheError> {
        self.with(|conn| {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query::<i64>(conn)
        })?;
        Ok(())
    }

    fn subscribe(&self, channel: &str, deliver: Deliver) -> Result<Subscription, CacheError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let listener = Listener {
            client: self.client.clone(),
            timeout: self.timeout,
            channel: channel.to_owned(),
            deliver,
            stop: stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("dw-cache-subscriber".into())
            .spawn(move || listener.run(ready_tx))
            .map_err(|e| CacheError::Backend(format!("cannot start the subscriber thread: {e}")))?;
        // The first SUBSCRIBE's answer, so a caller listens when this returns.
        let first = ready_rx
            .recv_timeout(self.timeout * 2)
            .unwrap_or_else(|_| Err(CacheError::Backend("SUBSCRIBE did not answer".into())));
        let subscription = Subscription::new(
            stop,
            Box::new(move || {
                // The last handle on the subscriber may drop on its own
                // thread (inside a delivery): that thread ends by itself.
                if thread.thread().id() != std::thread::current().id() {
                    let _ = thread.join();
                }
            }),
        );
        first.map(|()| subscription)
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}

#[cfg(test)]
mod tests {
    /// A Redis that accepts and never answers (the listener's backlog
    /// completes the handshake; nothing reads): the first command gives
    /// up after the timeout and says why.
    #[test]
    fn a_redis_that_hangs_is_an_error_naming_the_timeout_not_a_wait() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", silent.local_addr().unwrap());
        let error = match super::RedisCache::connect(&url) {
            Ok(_) => panic!("a silent server answered PING"),
            Err(e) => e.to_string(),
        };
        assert!(
            error.contains("no answer from Redis within 2 s (the server hangs"),
            "{error}"
        );
        drop(silent);
    }

    #[test]
    fn glob_characters_in_a_prefix_match_literally() {
        assert_eq!(super::escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
