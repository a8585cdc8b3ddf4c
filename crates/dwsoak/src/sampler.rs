//! One sample of every resource the soak watches.
//!
//! Each resource is collected on its own and can fail on its own; a failure
//! leaves that value `null`, records the error in the sample and in
//! `sampling_health`, and fails the run. Keys per cache policy come from one
//! `SCAN MATCH server:*` pass (never `KEYS`, which blocks Redis) classified
//! by the policy's declared prefixes, so the per-policy counts, the
//! `server:*` total and the keys no policy owns come from the same instant.
//! With the in-process cache the server's `/api/system/cache-keys` does the
//! same scan inside the process.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use dwevidence::live;
use dwevidence::sample::{Sample, SampleKind};
use dwevidence::summary::ResourceHealth;
use dwpolicy::Policy;

use crate::api::Api;
use crate::load::Totals;

/// Where each resource is read from.
pub struct Sampler {
    /// The server.
    pub api: Api,
    /// The server's process, for RSS.
    pub server_pid: Option<u32>,
    /// The server's SQLite file.
    pub database_path: Option<PathBuf>,
    /// Redis, for the Redis backend.
    pub redis: Option<redis::Client>,
    /// The policy: cache prefixes and the live checks.
    pub policy: Policy,
    /// Namespaces the live check scrapes.
    pub namespaces: Vec<String>,
    health: Mutex<BTreeMap<String, ResourceHealth>>,
}

/// What one sample produced besides its numbers.
#[derive(Debug, Default)]
pub struct Observed {
    /// Live findings, as `code subject: message`.
    pub live_findings: Vec<String>,
    /// `server:*` keys no declared prefix covers.
    pub unowned_keys: Vec<String>,
}

/// Families whose prefix names this are the workflow-task polling keys the
/// seed's `dw_perf_redis_polling_keys` counts (the poll requests and their
/// replay results), not every family whose prefix holds `poll` (activity
/// and query polls, long-poll wake signals, poll diagnostics, claim gates).
const POLLING_MARK: &str = "workflow-task-poll";

/// The keys of the workflow-task polling families in one sample's
/// per-policy counts.
fn polling_keys(policy: &Policy, per_policy: &BTreeMap<String, u64>) -> u64 {
    policy
        .cache_keys
        .iter()
        .filter(|c| {
            c.prefix
                .as_ref()
                .is_some_and(|p| p.value.contains(POLLING_MARK))
        })
        .map(|c| per_policy.get(&c.id.value).copied().unwrap_or(0))
        .sum()
}

impl Sampler {
    /// A sampler; `redis` is `Some` exactly for the Redis backend.
    pub fn new(
        api: Api,
        server_pid: Option<u32>,
        database_path: Option<PathBuf>,
        redis: Option<redis::Client>,
        policy: Policy,
        namespaces: Vec<String>,
    ) -> Sampler {
        Sampler {
            api,
            server_pid,
            database_path,
            redis,
            policy,
            namespaces,
            health: Mutex::new(BTreeMap::new()),
        }
    }

    /// Attempts so far, per resource.
    pub fn health(&self) -> BTreeMap<String, ResourceHealth> {
        self.health.lock().map(|h| h.clone()).unwrap_or_default()
    }

    fn note<T>(
        &self,
        resource: &str,
        result: Result<T, String>,
        errors: &mut BTreeMap<String, String>,
    ) -> Option<T> {
        if let Ok(mut health) = self.health.lock() {
            let entry = health.entry(resource.to_owned()).or_insert(ResourceHealth {
                attempts: 0,
                collected: 0,
                last_error: None,
            });
            entry.attempts += 1;
            match &result {
                Ok(_) => entry.collected += 1,
                Err(e) => entry.last_error = Some(e.clone()),
            }
        }
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                errors.insert(resource.to_owned(), e);
                None
            }
        }
    }

    /// Takes one sample.
    pub fn take(
        &self,
        kind: SampleKind,
        elapsed: Duration,
        at_unix_ms: u64,
        totals: &Totals,
    ) -> (Sample, Observed) {
        let mut errors = BTreeMap::new();
        let mut observed = Observed::default();
        let server_memory_bytes = self.note("server_rss", self.rss(), &mut errors);
        let sqlite_file_bytes = self.note("sqlite_file", self.sqlite_size(), &mut errors);
        let by_policy = self.note("server_cache_keys", self.cache_keys(), &mut errors);
        let (mut redis_memory_bytes, mut redis_db_keys) = (None, None);
        if let Some(client) = &self.redis {
            redis_memory_bytes = self.note("redis_memory", redis_used_memory(client), &mut errors);
            redis_db_keys = self.note("redis_keys", redis_dbsize(client), &mut errors);
        }
        let live = live::scrape(self.api.base(), &self.namespaces, self.api.token())
            .map_err(|e| e.to_string())
            .map(|scrapes| live::check(&self.policy, &scrapes));
        if let Some(findings) = self.note("live_metrics", live, &mut errors) {
            observed.live_findings = findings
                .iter()
                .map(|f| format!("{} {}: {}", f.code.code(), f.subject, f.message))
                .collect();
        }
        let (server_cache_keys, server_cache_keys_by_policy, redis_polling_keys) = match by_policy {
            Some(ClassifiedKeys {
                per_policy,
                total,
                unowned,
            }) => {
                observed.unowned_keys = unowned;
                let polling = polling_keys(&self.policy, &per_policy);
                (Some(total), per_policy, Some(polling))
            }
            None => (None, BTreeMap::new(), None),
        };
        let sample = Sample {
            kind,
            elapsed_seconds: elapsed.as_secs_f64(),
            at_unix_ms,
            server_memory_bytes,
            redis_memory_bytes,
            redis_db_keys,
            redis_polling_keys,
            server_cache_keys,
            server_cache_keys_by_policy,
            sqlite_file_bytes,
            requests_total: totals.requests,
            errors_total: totals.errors,
            live_findings: observed.live_findings.len() as u64,
            errors,
        };
        (sample, observed)
    }

    fn rss(&self) -> Result<u64, String> {
        let pid = self
            .server_pid
            .ok_or("no server process id (start the server with dwsoak, or pass --server-pid)")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
        rss_from_status(&status).ok_or_else(|| format!("/proc/{pid}/status has no VmRSS line"))
    }

    fn sqlite_size(&self) -> Result<u64, String> {
        let path = self
            .database_path
            .as_ref()
            .ok_or("no database path (start the server with dwsoak, or pass --database-path)")?;
        let main = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let wal = std::fs::metadata(format!("{}-wal", path.display())).map_or(0, |m| m.len());
        Ok(main.len() + wal)
    }

    fn cache_keys(&self) -> Result<ClassifiedKeys, String> {
        match &self.redis {
            Some(client) => {
                let keys = scan(
                    client,
                    &format!("{}*", self.policy.settings.cache_namespace),
                )?;
                Ok(classify(&self.policy, &keys))
            }
            None => {
                let per_policy = self.api.cache_keys_by_policy()?;
                let total = per_policy.values().sum();
                Ok(ClassifiedKeys {
                    per_policy,
                    total,
                    unowned: Vec::new(),
                })
            }
        }
    }
}

/// Keys of one scan, by owning policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifiedKeys {
    /// Every declared cache policy ID → its keys (0 included).
    pub per_policy: BTreeMap<String, u64>,
    /// All keys scanned.
    pub total: u64,
    /// Up to 20 keys no declared prefix covers.
    pub unowned: Vec<String>,
}

/// Counts `keys` per declared prefix (declared prefixes never overlap:
/// `overlapping-cache-prefix`; the longest is taken should a policy slip).
pub fn classify(policy: &Policy, keys: &[String]) -> ClassifiedKeys {
    let mut per_policy: BTreeMap<String, u64> = policy
        .cache_keys
        .iter()
        .map(|c| (c.id.value.clone(), 0))
        .collect();
    let mut unowned = Vec::new();
    for key in keys {
        let owner = policy
            .cache_keys
            .iter()
            .filter_map(|c| Some((c.id.value.as_str(), c.prefix.as_ref()?.value.as_str())))
            .filter(|(_, prefix)| key.starts_with(prefix))
            .max_by_key(|(_, prefix)| prefix.len());
        match owner {
            Some((id, _)) => *per_policy.entry(id.to_owned()).or_default() += 1,
            None if unowned.len() < 20 => unowned.push(key.clone()),
            None => {}
        }
    }
    ClassifiedKeys {
        per_policy,
        total: keys.len() as u64,
        unowned,
    }
}

/// `VmRSS:  1234 kB` → bytes.
pub fn rss_from_status(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn connection(client: &redis::Client) -> Result<redis::Connection, String> {
    client
        .get_connection_with_timeout(Duration::from_secs(5))
        .map_err(|e| format!("redis: {e}"))
}

fn scan(client: &redis::Client, pattern: &str) -> Result<Vec<String>, String> {
    let mut conn = connection(client)?;
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)
            .map_err(|e| format!("redis SCAN: {e}"))?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

fn redis_used_memory(client: &redis::Client) -> Result<u64, String> {
    let mut conn = connection(client)?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut conn)
        .map_err(|e| format!("redis INFO: {e}"))?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "redis INFO memory has no used_memory".to_owned())
}

fn redis_dbsize(client: &redis::Client) -> Result<u64, String> {
    let mut conn = connection(client)?;
    redis::cmd("DBSIZE")
        .query(&mut conn)
        .map_err(|e| format!("redis DBSIZE: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_go_to_their_declared_prefix_and_the_rest_are_unowned() {
        let (policy, _) = crate::config::test_policy(&[
            ("a", "server:a:"),
            ("b", "server:b:"),
            ("c", "server:c:"),
        ]);
        let keys: Vec<String> = ["server:a:1", "server:b:2", "server:b:3", "server:z:9"]
            .map(String::from)
            .into();
        let classified = classify(&policy, &keys);
        assert_eq!(
            classified.per_policy,
            BTreeMap::from([("a".into(), 1), ("b".into(), 2), ("c".into(), 0)])
        );
        assert_eq!(classified.total, 4);
        assert_eq!(classified.unowned, ["server:z:9"]);
    }

    #[test]
    fn the_polling_gauge_counts_the_workflow_task_polling_families_only() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../policy/dw-bounded-growth.toml"
        ))
        .unwrap();
        let policy = dwpolicy::load::load(&text).unwrap();
        // Every declared family holds 10 keys.
        let per_policy: BTreeMap<String, u64> = policy
            .cache_keys
            .iter()
            .map(|c| (c.id.value.clone(), 10))
            .collect();
        let naming_poll = policy
            .cache_keys
            .iter()
            .filter(|c| c.prefix.as_ref().is_some_and(|p| p.value.contains("poll")))
            .count();
        assert!(naming_poll > 1, "{naming_poll} families name poll");
        // Only workflow_task_poll_requests counts.
        assert_eq!(polling_keys(&policy, &per_policy), 10);
    }

    #[test]
    fn rss_is_read_in_bytes() {
        assert_eq!(
            rss_from_status("Name:\tx\nVmRSS:\t  2048 kB\n"),
            Some(2 * 1024 * 1024)
        );
        assert_eq!(rss_from_status("Name:\tx\n"), None);
    }
}
