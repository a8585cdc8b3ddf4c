//! The Redis cache backend, for several nodes sharing coordination state.
//!
//! Uses the blocking client (the server calls the cache from blocking
//! tasks, next to its SQLite store) over a small pool of connections.
//! Counters are created and given their TTL in one server-side script, so
//! a node dying between the two steps cannot leave an immortal key.

use std::sync::Mutex;
use std::time::Duration;

use redis::{Client, Connection, RedisResult};

use super::{Cache, CacheError};

const INCREMENT: &str = "local n = redis.call('INCR', KEYS[1]) \
     if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n";
const POOL_SIZE: usize = 16;

/// A Redis-backed cache.
pub struct RedisCache {
    client: Client,
    idle: Mutex<Vec<Connection>>,
    timeout: Duration,
}

impl RedisCache {
    /// Connects to `url` (`redis://host:port/db`) and proves the server answers.
    pub fn connect(url: &str) -> Result<RedisCache, CacheError> {
        let client = Client::open(url).map_err(backend)?;
        let cache = RedisCache {
            client,
            idle: Mutex::new(Vec::new()),
            timeout: Duration::from_secs(2),
        };
        cache.with(|conn| redis::cmd("PING").query::<String>(conn))?;
        Ok(cache)
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

fn backend(e: impl std::fmt::Display) -> CacheError {
    CacheError::Backend(e.to_string())
}

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

fn millis(ttl: Duration) -> u64 {
    // Redis refuses a zero expiry; the shortest TTL is one millisecond.
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Cache for RedisCache {
    fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), CacheError> {
        self.with(|conn| {
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(millis(ttl))
                .query::<()>(conn)
        })
    }

    fn add(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool, CacheError> {
        let reply: Option<String> = self.with(|conn| {
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("NX")
                .arg("PX")
                .arg(millis(ttl))
                .query(conn)
        })?;
        Ok(reply.is_some())
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, CacheError> {
        self.with(|conn| redis::cmd("GET").arg(key).query(conn))
    }

    fn forget(&self, key: &str) -> Result<bool, CacheError> {
        let removed: i64 = self.with(|conn| redis::cmd("DEL").arg(key).query(conn))?;
        Ok(removed > 0)
    }

    fn increment(&self, key: &str, ttl: Duration) -> Result<u64, CacheError> {
        let count: i64 = self.with(|conn| {
            redis::cmd("EVAL")
                .arg(INCREMENT)
                .arg(1)
                .arg(key)
                .arg(millis(ttl))
                .query(conn)
        })?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn count_prefix(&self, prefix: &str) -> Result<usize, CacheError> {
        Ok(self.scan(prefix)?.len())
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn glob_characters_in_a_prefix_match_literally() {
        assert_eq!(super::escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
