//! A node's identity on the shared cache, and the leases that elect one
//! node per periodic sweep.
//!
//! Every node needs its own `DW_SERVER_ID` (its wait-slot files, upload
//! spool and readiness keys are named after it). With a shared (Redis)
//! cache a node registers its id at start under
//! `server:node-id:<hash of the id>`, with a TTL it renews every third of
//! it (the heartbeat); a second live node starting with the same id finds
//! the key held and is refused before it listens, told who holds it. A node
//! that stops gives its id back at once; one that is killed keeps it until
//! the TTL runs out, and then the id is free again.
//!
//! The periodic sweeps (activity and run timeouts, due schedules with
//! service-call retention, external payload orphans) run on one node at a
//! time among the nodes that serve one store — the node's *sweep scope*:
//! each has a lease, `server:sweep-lease:<scope hash>:<sweep>`, that a node
//! takes when it is free (`SET NX PX`) and renews while it holds it
//! ([`Cache::claim`]); a node runs a sweep's passes only while its lease
//! is held. The scope matters: a sweep works on its node's store, so nodes
//! with separate stores (every SQLite node is alone on its file) must not
//! elect one sweeper between them, or the others' stores would never be
//! swept. The scope is derived from the store (a SQLite file on its host;
//! a private in-memory store is a scope of its own) unless configured
//! (`DW_SWEEP_SCOPE`, for nodes that reach one shared database under
//! different addresses). The holder keeps it until it stops (it gives it back) or dies
//! (the lease expires, and another node's next claim takes it). This is
//! the same election through the shared cache as the seed's heartbeat
//! throttles (`server:history-retention-inline:`), made sticky: a throttle
//! elects any one node per window, a lease keeps electing the same one,
//! so a sweep's passes never overlap in steady state. With the in-process
//! cache each node is alone and always elected.
//!
//! A lease is held, as far as this node knows, until the time it sent its
//! last successful claim plus the TTL: Redis set the expiry no earlier, so
//! a node stops treating itself as elected before any other can be. A pass
//! that outlives the lease (a node stalled past the TTL mid-pass) can
//! overlap the next holder's first pass; every sweep re-checks each row
//! inside its own transaction, so such an overlap repeats no work.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cache::{hash_dimensions, Cache, CacheError};

/// The default TTL of a node's id registration and of its sweep leases.
pub const DEFAULT_NODE_LEASE: Duration = Duration::from_secs(15);
/// The shortest TTL accepted (a renewal every third of it).
pub const MIN_NODE_LEASE: Duration = Duration::from_millis(300);

/// What a node writes as the value of its registration and its leases, so
/// a refused node (and an operator) learns who holds them. Unique per
/// process: a restarted node is a new holder.
#[derive(Debug, Clone)]
pub struct NodeToken {
    server_id: String,
    host: String,
    instance: String,
    bytes: Vec<u8>,
}

impl NodeToken {
    /// The token of this process, serving as `server_id`.
    pub fn new(server_id: &str) -> Self {
        let started = jiff::Timestamp::now();
        let pid = std::process::id();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        // Unique per process (and per engine of a test process).
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let instance = hash_dimensions(&[
            server_id,
            &pid.to_string(),
            &started.as_nanosecond().to_string(),
            &SEQUENCE.fetch_add(1, Ordering::Relaxed).to_string(),
        ]);
        let value = json!({
            "server_id": server_id,
            "pid": pid,
            "host": &host,
            "started_at": started.to_string(),
            "instance": &instance,
        });
        NodeToken {
            server_id: server_id.to_owned(),
            host,
            instance,
            bytes: value.to_string().into_bytes(),
        }
    }

    /// The node id.
    pub fn server_id(&self) -> &str {
        &self.server_id
    }

    /// The host name this process runs on (empty when unknown).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// What tells this process apart from every other (a hash).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The stored value.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Who holds a key, read from its value (a token): `pid 12, host "h",
/// since …`, or the raw value when it is not a token.
fn describe_holder(value: &[u8]) -> String {
    match serde_json::from_slice::<Value>(value) {
        Ok(token) => format!(
            "pid {} on host {}, since {}",
            token["pid"],
            token["host"],
            token["started_at"].as_str().unwrap_or("?")
        ),
        Err(_) => format!("value {:?}", String::from_utf8_lossy(value)),
    }
}

/// The node id a holder's value names.
fn holder_id(value: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(value).ok()?["server_id"]
        .as_str()
        .map(str::to_owned)
}

/// Why a node's id could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum NodeIdError {
    /// Another live node holds the id.
    #[error(
        "DW_SERVER_ID {server_id:?} is already registered by another live node on the shared \
         cache ({holder}): every node needs its own unique DW_SERVER_ID. Give this node another \
         id; if that node was killed, its registration expires at most {} ms after its last \
         heartbeat (DW_NODE_LEASE_MS)",
        ttl.as_millis()
    )]
    Taken {
        /// The id.
        server_id: String,
        /// Who holds it.
        holder: String,
        /// The registration's TTL.
        ttl: Duration,
    },
    /// The cache could not be asked.
    #[error("registering DW_SERVER_ID {server_id:?} on the shared cache: {source}")]
    Cache {
        /// The id.
        server_id: String,
        /// Why.
        source: CacheError,
    },
}

/// A node's registration of its id: held from start until it stops.
pub struct NodeIdentity {
    cache: Arc<dyn Cache>,
    key: String,
    token: NodeToken,
    ttl: Duration,
    held: AtomicBool,
    renewals: AtomicU64,
    left: AtomicBool,
    /// Who held this node's id at the last renewal that found it taken.
    taken_by: Mutex<Option<String>>,
}

impl NodeIdentity {
    /// The family of registrations.
    pub const PREFIX: &'static str = "server:node-id:";

    /// The key of `server_id`'s registration.
    pub fn key(server_id: &str) -> String {
        format!("{}{}", Self::PREFIX, hash_dimensions(&[server_id]))
    }

    /// Registers `token`'s id for `ttl`, or says who holds it.
    pub fn register(
        cache: Arc<dyn Cache>,
        token: NodeToken,
        ttl: Duration,
    ) -> Result<NodeIdentity, NodeIdError> {
        let key = Self::key(token.server_id());
        let failed = |source| NodeIdError::Cache {
            server_id: token.server_id().to_owned(),
            source,
        };
        if !cache.add(&key, token.as_bytes(), ttl).map_err(failed)? {
            let holder = match cache.get(&key).map_err(failed)? {
                Some(value) => describe_holder(&value),
                // Expired between the two calls: the next start succeeds.
                None => "a registration that has just expired".to_owned(),
            };
            return Err(NodeIdError::Taken {
                server_id: token.server_id().to_owned(),
                holder,
                ttl,
            });
        }
        Ok(NodeIdentity {
            cache,
            key,
            token,
            ttl,
            held: AtomicBool::new(true),
            renewals: AtomicU64::new(0),
            left: AtomicBool::new(false),
            taken_by: Mutex::new(None),
        })
    }

    /// The heartbeat: renews the registration (re-takes it if it expired
    /// meanwhile). Whether this node holds its id; a live node that lost it
    /// to another with the same id logs an error every time.
    pub fn renew(&self) -> Result<bool, CacheError> {
        if self.left.load(Ordering::Acquire) {
            return Ok(false);
        }
        let held = self
            .cache
            .claim(&self.key, self.token.as_bytes(), self.ttl)?;
        if held {
            *self.taken_by.lock().unwrap_or_else(|e| e.into_inner()) = None;
            self.held.store(true, Ordering::Release);
            self.renewals.fetch_add(1, Ordering::Relaxed);
        } else {
            let holder = self
                .cache
                .get(&self.key)
                .ok()
                .flatten()
                .map_or_else(|| "nobody now".to_owned(), |v| describe_holder(&v));
            *self.taken_by.lock().unwrap_or_else(|e| e.into_inner()) = Some(holder.clone());
            self.held.store(false, Ordering::Release);
            tracing::error!(
                server_id = self.token.server_id(),
                holder = %holder,
                "another live node registered this node's DW_SERVER_ID while its heartbeat lapsed: two nodes now share one id; stop one of them"
            );
        }
        Ok(held)
    }

    /// While another live node holds this node's id (its heartbeat lapsed
    /// and a node with the same id registered meanwhile): who holds it.
    /// The node should not serve then (readiness answers 503) until one
    /// of the two stops and its next heartbeat takes the id back.
    pub fn taken_over(&self) -> Option<String> {
        if self.left.load(Ordering::Acquire) || self.held.load(Ordering::Acquire) {
            return None;
        }
        self.taken_by
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Gives the id back (a clean stop); later renewals do nothing.
    pub fn leave(&self) {
        if !self.left.swap(true, Ordering::AcqRel) {
            self.held.store(false, Ordering::Release);
            let _ = self.cache.release(&self.key, self.token.as_bytes());
        }
    }

    /// The operator's view: the id, whether it is held, its TTL.
    pub fn snapshot(&self) -> Value {
        json!({
            "server_id": self.token.server_id(),
            "registered": self.held.load(Ordering::Acquire),
            "lease_ms": u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
            "heartbeats": self.renewals.load(Ordering::Relaxed),
        })
    }
}

impl Drop for NodeIdentity {
    fn drop(&mut self) {
        self.leave();
    }
}

/// The periodic sweeps one node at a time runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Activity and run deadlines (`server::timeouts`).
    Timeouts,
    /// Due schedules and expired service calls (`server::schedules`).
    Schedules,
    /// Stored external payloads nothing holds (`server::external_payloads`).
    ExternalPayloadOrphans,
}

impl Sweep {
    /// Every sweep.
    pub const ALL: [Sweep; 3] = [
        Sweep::Timeouts,
        Sweep::Schedules,
        Sweep::ExternalPayloadOrphans,
    ];

    /// The sweep's name in keys, logs and the operator metrics.
    pub fn name(self) -> &'static str {
        match self {
            Sweep::Timeouts => "timeouts",
            Sweep::Schedules => "schedules",
            Sweep::ExternalPayloadOrphans => "external_payload_orphans",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Default)]
struct SweepState {
    /// Until when this node holds the lease (`None`: not held).
    held_until: Mutex<Option<Instant>>,
    /// Passes this node ran.
    passes: AtomicU64,
    /// When this node last ran a pass (unix ms; 0: never).
    last_pass_ms: AtomicI64,
    /// Times this node took the lease.
    elections: AtomicU64,
}

/// This node's leases on the periodic sweeps of its sweep scope.
pub struct SweepLeases {
    cache: Arc<dyn Cache>,
    token: NodeToken,
    ttl: Duration,
    scope: String,
    prefix: String,
    states: [SweepState; 3],
    left: AtomicBool,
}

impl SweepLeases {
    /// The family of sweep leases.
    pub const PREFIX: &'static str = "server:sweep-lease:";

    /// The lease key of `sweep` among the nodes of sweep scope `scope`.
    pub fn key_in(scope: &str, sweep: Sweep) -> String {
        format!(
            "{}{}:{}",
            Self::PREFIX,
            hash_dimensions(&[scope]),
            sweep.name()
        )
    }

    fn key(&self, sweep: Sweep) -> String {
        format!("{}{}", self.prefix, sweep.name())
    }

    /// Leases held as `token` among the nodes of sweep scope `scope` (the
    /// nodes that serve one store), each for `ttl` past its last renewal.
    pub fn new(cache: Arc<dyn Cache>, token: NodeToken, ttl: Duration, scope: &str) -> Self {
        let key = Self::key_in(scope, Sweep::Timeouts);
        let prefix = key[..key.len() - Sweep::Timeouts.name().len()].to_owned();
        SweepLeases {
            cache,
            token,
            ttl,
            scope: scope.to_owned(),
            prefix,
            states: Default::default(),
            left: AtomicBool::new(false),
        }
    }

    /// How often [`SweepLeases::renew`] (and the id's heartbeat) run: a
    /// third of the TTL, so two renewals can fail before a lease lapses.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// Takes every free lease and renews every held one; a cache error
    /// leaves a lease to lapse at its deadline.
    pub fn renew(&self) {
        if self.left.load(Ordering::Acquire) {
            return;
        }
        for sweep in Sweep::ALL {
            let state = &self.states[sweep.index()];
            let sent = Instant::now();
            let claimed = self
                .cache
                .claim(&self.key(sweep), self.token.as_bytes(), self.ttl);
            let mut held = state.held_until.lock().unwrap_or_else(|e| e.into_inner());
            let was_held = held.is_some_and(|until| Instant::now() < until);
            match claimed {
                Ok(true) => {
                    *held = Some(sent + self.ttl);
                    if !was_held {
                        state.elections.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            sweep = sweep.name(),
                            server_id = self.token.server_id(),
                            "this node now runs the sweep (it holds its lease)"
                        );
                    }
                }
                Ok(false) => {
                    *held = None;
                    if was_held {
                        tracing::warn!(
                            sweep = sweep.name(),
                            "this node lost the sweep's lease (it lapsed and another node took it)"
                        );
                    }
                }
                Err(error) => {
                    if was_held {
                        tracing::warn!(
                            sweep = sweep.name(),
                            %error,
                            "cannot renew the sweep's lease; the sweep stops here when it lapses"
                        );
                    }
                }
            }
        }
    }

    /// Whether this node holds `sweep`'s lease now.
    pub fn elected(&self, sweep: Sweep) -> bool {
        let held = self.states[sweep.index()]
            .held_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        held.is_some_and(|until| Instant::now() < until)
    }

    /// Counts a pass of `sweep` run by this node.
    pub fn record_pass(&self, sweep: Sweep) {
        let state = &self.states[sweep.index()];
        state.passes.fetch_add(1, Ordering::Relaxed);
        state
            .last_pass_ms
            .store(crate::unix_ms(), Ordering::Relaxed);
    }

    /// Gives every held lease back (a clean stop), so another node takes
    /// them at its next renewal; later renewals do nothing.
    pub fn leave(&self) {
        if self.left.swap(true, Ordering::AcqRel) {
            return;
        }
        for sweep in Sweep::ALL {
            let state = &self.states[sweep.index()];
            let held = state
                .held_until
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if held.is_some() {
                let _ = self.cache.release(&self.key(sweep), self.token.as_bytes());
            }
        }
    }

    /// The operator's view: the sweep scope, and per sweep whether this node holds the lease,
    /// which node does (read from the cache; `null` when free or
    /// unreadable), and this node's passes and elections.
    pub fn snapshot(&self) -> Value {
        let mut sweeps = serde_json::Map::new();
        for sweep in Sweep::ALL {
            let state = &self.states[sweep.index()];
            let holder = self
                .cache
                .get(&self.key(sweep))
                .ok()
                .flatten()
                .and_then(|value| holder_id(&value));
            let last = state.last_pass_ms.load(Ordering::Relaxed);
            sweeps.insert(
                sweep.name().to_owned(),
                json!({
                    "elected": self.elected(sweep),
                    "holder": holder,
                    "passes": state.passes.load(Ordering::Relaxed),
                    "elections": state.elections.load(Ordering::Relaxed),
                    "last_pass_at_ms": (last > 0).then_some(last),
                }),
            );
        }
        json!({ "scope": self.scope, "leases": sweeps })
    }
}

impl Drop for SweepLeases {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::MemoryCache;

    #[test]
    fn a_second_registration_of_one_id_is_refused_naming_the_holder_until_the_first_leaves() {
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let ttl = Duration::from_secs(30);
        let first = NodeIdentity::register(cache.clone(), NodeToken::new("n1"), ttl).unwrap();
        let refused = NodeIdentity::register(cache.clone(), NodeToken::new("n1"), ttl)
            .err()
            .expect("refused");
        let text = refused.to_string();
        assert!(text.contains("\"n1\""), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        // Another id is another key.
        let other = NodeIdentity::register(cache.clone(), NodeToken::new("n2"), ttl).unwrap();
        assert!(first.renew().unwrap());
        drop(first);
        let again = NodeIdentity::register(cache.clone(), NodeToken::new("n1"), ttl).unwrap();
        assert!(again.renew().unwrap());
        assert!(other.renew().unwrap());
    }

    #[test]
    fn a_node_whose_id_another_took_while_its_heartbeat_lapsed_knows_until_it_is_back() {
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let ttl = Duration::from_secs(30);
        let first = NodeIdentity::register(cache.clone(), NodeToken::new("n1"), ttl).unwrap();
        assert!(first.renew().unwrap());
        assert_eq!(first.taken_over(), None);
        // The registration lapses and a second process with the same id
        // registers meanwhile.
        assert!(cache.forget(&NodeIdentity::key("n1")).unwrap());
        let second = NodeIdentity::register(cache.clone(), NodeToken::new("n1"), ttl).unwrap();
        assert!(!first.renew().unwrap());
        let holder = first.taken_over().expect("taken over");
        assert!(
            holder.contains(&format!("pid {}", std::process::id())),
            "{holder}"
        );
        assert_eq!(first.snapshot()["registered"], false);
        // The second stops: the first's next heartbeat takes its id back.
        drop(second);
        assert!(first.renew().unwrap());
        assert_eq!(first.taken_over(), None);
        // A node that left is not "taken over".
        first.leave();
        assert_eq!(first.taken_over(), None);
    }

    #[test]
    fn one_of_two_nodes_holds_each_sweep_and_the_other_takes_it_when_it_leaves() {
        let cache: Arc<dyn Cache> = Arc::new(MemoryCache::default());
        let ttl = Duration::from_secs(30);
        let a = SweepLeases::new(cache.clone(), NodeToken::new("a"), ttl, "one store");
        let b = SweepLeases::new(cache.clone(), NodeToken::new("b"), ttl, "one store");
        // A node of another store elects itself for its own.
        let c = SweepLeases::new(cache.clone(), NodeToken::new("c"), ttl, "another store");
        c.renew();
        assert!(Sweep::ALL.iter().all(|s| c.elected(*s)));
        a.renew();
        b.renew();
        for sweep in Sweep::ALL {
            assert!(a.elected(sweep) && !b.elected(sweep), "{}", sweep.name());
        }
        assert_eq!(b.snapshot()["leases"]["timeouts"]["holder"], "a");
        a.renew();
        b.renew();
        assert!(a.elected(Sweep::Timeouts) && !b.elected(Sweep::Timeouts));
        a.leave();
        assert!(!a.elected(Sweep::Timeouts));
        b.renew();
        a.renew();
        for sweep in Sweep::ALL {
            assert!(b.elected(sweep) && !a.elected(sweep), "{}", sweep.name());
        }
        assert_eq!(a.snapshot()["leases"]["schedules"]["holder"], "b");
    }
}
