//! Worker sessions: the activities that name a session run on the one
//! worker holding it.
//!
//! A session (one `worker_sessions` row per namespace and session id) is
//! held by one registered worker: created explicitly (`POST
//! /api/worker/sessions`) or by the first session-capable worker that
//! polls one of its activities (`create_if_missing`), provided that worker
//! named every requirement of the session among its capabilities and has a
//! free session slot. Its holder lease is renewed by the holder's session
//! heartbeats and its activities' heartbeats; its TTL is fixed at creation.
//! When the holder goes away (deregistration, or its lease lapses) another
//! capable worker reacquires it if the options allow, or it fails; closed,
//! failed and expired sessions fail the activities still waiting for them.
//! Rows go once past their TTL plus [`SESSION_GRACE_MS`], a bounded batch
//! per worker heartbeat.

use serde_json::{json, Value};

use crate::store::db::{params, OptionalExtension};

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::rows::{now_ms, to_i64};

/// How long a session's row outlives its TTL, so a closed or expired
/// identity is refused (not recreated) for a while after it ended.
pub const SESSION_GRACE_MS: i64 = 3_600_000;

/// A session's options as both SDKs send them (`WorkerSessionOptions`),
/// checked by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// The session's id (unique in its namespace).
    pub session_id: String,
    /// The queue its activities run on (`None`: the worker's or the activity's).
    pub queue: Option<String>,
    /// An opaque connection label, kept as sent.
    pub connection: Option<String>,
    /// Capabilities its holder must have named (sorted, without repeats).
    pub requirements: Vec<String>,
    /// The holder lease renewed by heartbeats.
    pub lease_seconds: u64,
    /// The session's whole life.
    pub ttl_seconds: u64,
    /// Activities of the session leased at once at most.
    pub max_concurrent_activities: u64,
    /// Whether an activity may create the session.
    pub create_if_missing: bool,
    /// Whether another worker may take the session when its holder goes away.
    pub allow_reacquire_after_failure: bool,
}

/// The longest TTL (and holder lease) a session may ask for: one day.
pub const MAX_SESSION_SECONDS: u64 = 86_400;
/// The most activities of one session leased at once.
pub const MAX_SESSION_CONCURRENCY: u64 = 1_000;
/// The most sessions one worker may offer to hold at once.
pub const MAX_WORKER_SESSIONS: u64 = 1_000;
/// The most session rows one namespace keeps (live, ended within their
/// grace, or past their TTL and not yet swept).
pub const MAX_NAMESPACE_SESSIONS: u64 = 10_000;

impl SessionOptions {
    /// Reads `value` (a `worker_session` object as the SDKs send it); each
    /// problem is `(field under prefix, what is wrong)`.
    pub fn from_wire(value: &Value, prefix: &str) -> Result<SessionOptions, Vec<(String, String)>> {
        let mut problems = Vec::new();
        let field = |name: &str| format!("{prefix}.{name}");
        if !value.is_object() {
            return Err(vec![(
                prefix.to_owned(),
                format!("The {prefix} field must be an object (session_id, requirements, lease_seconds, ttl_seconds, …)."),
            )]);
        }
        let name = |key: &str,
                    required: bool,
                    problems: &mut Vec<(String, String)>|
         -> Option<String> {
            match value.get(key) {
                None | Some(Value::Null) if !required => None,
                Some(Value::String(text))
                    if !text.trim().is_empty()
                        && text.trim() == text
                        && text.chars().count() <= 255 =>
                {
                    Some(text.clone())
                }
                _ => {
                    problems.push((
                        field(key),
                        format!("The {} field must be a non-empty string of at most 255 characters without surrounding spaces.", field(key)),
                    ));
                    None
                }
            }
        };
        let session_id = name("session_id", true, &mut problems).unwrap_or_default();
        let queue = name("queue", false, &mut problems);
        let connection = name("connection", false, &mut problems);
        let mut requirements = Vec::new();
        match value.get("requirements") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(text) if !text.trim().is_empty() && text.chars().count() <= 255 => {
                            requirements.push(text.trim().to_owned())
                        }
                        _ => problems.push((
                            field(&format!("requirements.{i}")),
                            "Each requirement must be a non-empty string of at most 255 characters.".to_owned(),
                        )),
                    }
                }
            }
            Some(_) => problems.push((
                field("requirements"),
                "The requirements field must be a list of capability names.".to_owned(),
            )),
        }
        requirements.sort();
        requirements.dedup();
        let number =
            |key: &str, default: u64, max: u64, problems: &mut Vec<(String, String)>| -> u64 {
                match value.get(key) {
                    None | Some(Value::Null) => default,
                    Some(v) => match v.as_u64().filter(|n| (1..=max).contains(n)) {
                        Some(n) => n,
                        None => {
                            problems.push((
                                field(key),
                                format!(
                                    "The {} field must be an integer from 1 to {max}; got {v}.",
                                    field(key)
                                ),
                            ));
                            default
                        }
                    },
                }
            };
        let lease_seconds = number("lease_seconds", 120, MAX_SESSION_SECONDS, &mut problems);
        let ttl_seconds = number("ttl_seconds", 1800, MAX_SESSION_SECONDS, &mut problems);
        let max_concurrent_activities = number(
            "max_concurrent_activities",
            1,
            MAX_SESSION_CONCURRENCY,
            &mut problems,
        );
        let flag = |key: &str, problems: &mut Vec<(String, String)>| -> bool {
            match value.get(key) {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    problems.push((
                        field(key),
                        format!("The {} field must be true or false.", field(key)),
                    ));
                    true
                }
            }
        };
        let create_if_missing = flag("create_if_missing", &mut problems);
        let allow_reacquire_after_failure = flag("allow_reacquire_after_failure", &mut problems);
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(SessionOptions {
            session_id,
            queue,
            connection,
            requirements,
            lease_seconds,
            ttl_seconds,
            max_concurrent_activities,
            create_if_missing,
            allow_reacquire_after_failure,
        })
    }

    /// The canonical wire form (the Rust SDK compares it field by field).
    pub fn canonical(&self) -> Value {
        let mut out = json!({
            "session_id": self.session_id,
            "requirements": self.requirements,
            "lease_seconds": self.lease_seconds,
            "ttl_seconds": self.ttl_seconds,
            "max_concurrent_activities": self.max_concurrent_activities,
            "create_if_missing": self.create_if_missing,
            "allow_reacquire_after_failure": self.allow_reacquire_after_failure,
        });
        if let Some(connection) = &self.connection {
            out["connection"] = connection.clone().into();
        }
        if let Some(queue) = &self.queue {
            out["queue"] = queue.clone().into();
        }
        out
    }
}

/// A session as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// Its namespace.
    pub namespace: String,
    /// Its id.
    pub session_id: String,
    /// Its queue.
    pub queue: String,
    /// The worker holding it.
    pub holder: String,
    /// Its canonical options (with its queue).
    pub options: Value,
    /// `active`, `closed` or `failed`.
    pub status: String,
    /// Leased activities at once at most.
    pub max_concurrent_activities: i64,
    /// Whether another worker may take it when its holder goes away.
    pub allow_reacquire: bool,
    /// The holder lease renewed by heartbeats, in seconds.
    pub lease_seconds: i64,
    /// When the holder lease ends unless renewed.
    pub lease_expires_at_ms: i64,
    /// When the session ends.
    pub ttl_expires_at_ms: i64,
    /// Why it was closed, if it was.
    pub close_reason: Option<String>,
}

impl Session {
    /// What a leased activity task carries of it.
    pub fn lease(&self) -> crate::store::dispatch::SessionLease {
        crate::store::dispatch::SessionLease {
            options: self.options.clone(),
            namespace: self.namespace.clone(),
            holder: self.holder.clone(),
            status: self.status.clone(),
            lease_expires_at_ms: self.lease_expires_at_ms,
            ttl_expires_at_ms: self.ttl_expires_at_ms,
        }
    }

    /// Whether its holder lease and TTL both run at `now`.
    pub fn live(&self, now: i64) -> bool {
        self.status == "active" && self.lease_expires_at_ms > now && self.ttl_expires_at_ms > now
    }
}

/// What acquiring a session for a worker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// A new session held by the worker.
    Created,
    /// The worker already held it.
    Reused,
    /// The worker took it over from a holder that went away.
    Reacquired,
}

impl Acquired {
    /// The wire name of the outcome.
    pub fn as_str(self) -> &'static str {
        match self {
            Acquired::Created => "created",
            Acquired::Reused => "reused",
            Acquired::Reacquired => "reacquired",
        }
    }
}

/// Why a worker could not acquire a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Another live worker holds it.
    Held(String),
    /// The worker did not register for sessions, or lacks requirements.
    Unqualified(Vec<String>),
    /// The worker holds as many sessions as it offered.
    WorkerCapacity(i64),
    /// The namespace holds as many sessions as the server allows.
    NamespaceCapacity(u64),
    /// It does not exist and may not be created here.
    NotFound,
    /// It ended (`worker_session_closed`, `_failed`, `_expired`): for good.
    Ended(&'static str),
    /// The options differ from the session's own.
    OptionsConflict,
}

impl Refused {
    /// Whether an activity waiting for this session can never run.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Refused::Ended(_) | Refused::NotFound | Refused::OptionsConflict
        )
    }

    /// The wire reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Held(_) => "worker_session_held",
            Refused::Unqualified(_) => "worker_session_requirements_unmet",
            Refused::WorkerCapacity(_) => "worker_session_capacity_exhausted",
            Refused::NamespaceCapacity(_) => "worker_session_limit_exceeded",
            Refused::NotFound => "worker_session_not_found",
            Refused::Ended(reason) => reason,
            Refused::OptionsConflict => "worker_session_options_conflict",
        }
    }
}

const SESSION_COLUMNS: &str = "namespace, session_id, queue, holder, options, status, \
     max_concurrent_activities, allow_reacquire, lease_seconds, lease_expires_at_ms, \
     ttl_expires_at_ms, close_reason";

fn session_row(r: &crate::store::db::Row<'_>) -> crate::store::db::Result<(Session, String)> {
    let options: String = r.get(4)?;
    Ok((
        Session {
            namespace: r.get(0)?,
            session_id: r.get(1)?,
            queue: r.get(2)?,
            holder: r.get(3)?,
            options: Value::Null,
            status: r.get(5)?,
            max_concurrent_activities: r.get(6)?,
            allow_reacquire: r.get::<_, i64>(7)? != 0,
            lease_seconds: r.get(8)?,
            lease_expires_at_ms: r.get(9)?,
            ttl_expires_at_ms: r.get(10)?,
            close_reason: r.get(11)?,
        },
        options,
    ))
}

/// What a registered worker offers sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionProfile {
    /// The capabilities it named (requirements it satisfies).
    pub capabilities: Vec<String>,
    /// Sessions it may hold at once.
    pub max_sessions: i64,
}

impl SessionProfile {
    /// The requirements of `options` it lacks.
    pub fn missing(&self, options: &SessionOptions) -> Vec<String> {
        options
            .requirements
            .iter()
            .filter(|r| !self.capabilities.contains(r))
            .cloned()
            .collect()
    }
}

impl Store {
    /// The session `session_id` of `namespace`, if it exists.
    pub fn worker_session(
        &self,
        namespace: &str,
        session_id: &str,
    ) -> Result<Option<Session>, Error> {
        let row = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM worker_sessions WHERE namespace = ?1 AND session_id = ?2"
            ))?
            .query_row(params![namespace, session_id], session_row)
            .optional()?;
        Ok(match row {
            Some((mut session, options)) => {
                session.options = serde_json::from_str(&options)?;
                Some(session)
            }
            None => None,
        })
    }

    /// Records what `worker` offers sessions (`None`: it asked for none).
    pub fn set_session_profile(
        &self,
        namespace: &str,
        worker: &str,
        profile: Option<&SessionProfile>,
    ) -> Result<(), Error> {
        let capabilities = profile
            .map(|p| serde_json::to_string(&p.capabilities))
            .transpose()?;
        self.conn
            .prepare_cached(
                "UPDATE workers SET session_capabilities = ?3, max_sessions = ?4 \
                 WHERE namespace = ?1 AND worker_id = ?2",
            )?
            .execute(params![
                namespace,
                worker,
                capabilities,
                profile.map(|p| p.max_sessions)
            ])?;
        Ok(())
    }

    /// What `worker` offers sessions (`None`: not registered for them).
    pub fn session_profile(
        &self,
        namespace: &str,
        worker: &str,
    ) -> Result<Option<SessionProfile>, Error> {
        let row: Option<(Option<String>, Option<i64>)> = self
            .conn
            .prepare_cached(
                "SELECT session_capabilities, max_sessions FROM workers \
                 WHERE namespace = ?1 AND worker_id = ?2",
            )?
            .query_row(params![namespace, worker], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        Ok(match row {
            Some((Some(capabilities), max)) => Some(SessionProfile {
                capabilities: serde_json::from_str(&capabilities)?,
                max_sessions: max.unwrap_or(0),
            }),
            _ => None,
        })
    }

    /// Acquires session `options` for `worker` (whose queue is `queue`):
    /// creates it (when `create`), reuses the worker's own, or takes it
    /// over from a holder whose lease lapsed; renews the holder lease.
    /// `namespace_cap` bounds the namespace's rows.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_worker_session(
        &self,
        namespace: &str,
        worker: &str,
        queue: &str,
        options: &SessionOptions,
        create: bool,
        namespace_cap: u64,
    ) -> Result<Result<(Session, Acquired), Refused>, Error> {
        let now = now_ms();
        let mut options = options.clone();
        if options.queue.is_none() {
            options.queue = Some(queue.to_owned());
        }
        let canonical = options.canonical();
        let existing = self.worker_session(namespace, &options.session_id)?;
        let profile = self.session_profile(namespace, worker)?;
        let qualified = |profile: &Option<SessionProfile>| -> Result<(), Refused> {
            match profile {
                None => Err(Refused::Unqualified(Vec::new())),
                Some(p) => {
                    let missing = p.missing(&options);
                    if missing.is_empty() {
                        Ok(())
                    } else {
                        Err(Refused::Unqualified(missing))
                    }
                }
            }
        };
        let held = |holder: &str| -> Result<i64, Error> {
            Ok(self
                .conn
                .prepare_cached(
                    "SELECT COUNT(*) FROM worker_sessions WHERE namespace = ?1 AND holder = ?2 \
                     AND status = 'active' AND lease_expires_at_ms > ?3 AND ttl_expires_at_ms > ?3",
                )?
                .query_row(params![namespace, holder, now], |r| r.get(0))?)
        };
        let lease_until = |ttl_at: i64| {
            now.saturating_add(to_i64(options.lease_seconds as usize).saturating_mul(1000))
                .min(ttl_at)
        };
        let Some(session) = existing else {
            if !create {
                return Ok(Err(Refused::NotFound));
            }
            if let Err(refused) = qualified(&profile) {
                return Ok(Err(refused));
            }
            let max = profile.as_ref().map_or(0, |p| p.max_sessions);
            if held(worker)? >= max {
                return Ok(Err(Refused::WorkerCapacity(max)));
            }
            let rows: i64 = self
                .conn
                .prepare_cached("SELECT COUNT(*) FROM worker_sessions WHERE namespace = ?1")?
                .query_row([namespace], |r| r.get(0))?;
            if u64::try_from(rows).unwrap_or(0) >= namespace_cap {
                return Ok(Err(Refused::NamespaceCapacity(namespace_cap)));
            }
            let ttl_at =
                now.saturating_add(to_i64(options.ttl_seconds as usize).saturating_mul(1000));
            self.conn
                .prepare_cached(
                    "INSERT INTO worker_sessions (namespace, session_id, queue, holder, options, \
                     status, max_concurrent_activities, allow_reacquire, lease_seconds, \
                     lease_expires_at_ms, ttl_expires_at_ms, created_at_ms) \
                     VALUES (?1, ?2, ?3, ?4, ?5, 'active', ?6, ?7, ?8, ?9, ?10, ?11)",
                )?
                .execute(params![
                    namespace,
                    options.session_id,
                    options.queue,
                    worker,
                    serde_json::to_string(&canonical)?,
                    to_i64(options.max_concurrent_activities as usize),
                    i64::from(options.allow_reacquire_after_failure),
                    to_i64(options.lease_seconds as usize),
                    lease_until(ttl_at),
                    ttl_at,
                    now
                ])?;
            let session = self.worker_session(namespace, &options.session_id)?.ok_or(
                Error::ItemNotFound {
                    item: "worker session",
                    id: 0,
                },
            )?;
            return Ok(Ok((session, Acquired::Created)));
        };
        if session.status == "closed" {
            return Ok(Err(Refused::Ended("worker_session_closed")));
        }
        if session.status == "failed" {
            return Ok(Err(Refused::Ended("worker_session_failed")));
        }
        if session.ttl_expires_at_ms <= now {
            return Ok(Err(Refused::Ended("worker_session_expired")));
        }
        if session.options != canonical {
            return Ok(Err(Refused::OptionsConflict));
        }
        let outcome = if session.holder == worker {
            Acquired::Reused
        } else if session.lease_expires_at_ms > now {
            return Ok(Err(Refused::Held(session.holder)));
        } else if !session.allow_reacquire {
            // Its holder went away and nobody may take it over: it failed.
            self.conn
                .prepare_cached(
                    "UPDATE worker_sessions SET status = 'failed', closed_at_ms = ?3, \
                     close_reason = 'holder_lost' WHERE namespace = ?1 AND session_id = ?2",
                )?
                .execute(params![namespace, session.session_id, now])?;
            return Ok(Err(Refused::Ended("worker_session_failed")));
        } else {
            if let Err(refused) = qualified(&profile) {
                return Ok(Err(refused));
            }
            let max = profile.as_ref().map_or(0, |p| p.max_sessions);
            if held(worker)? >= max {
                return Ok(Err(Refused::WorkerCapacity(max)));
            }
            Acquired::Reacquired
        };
        let until = lease_until(session.ttl_expires_at_ms)
            .max(session.lease_expires_at_ms.min(session.ttl_expires_at_ms));
        self.conn
            .prepare_cached(
                "UPDATE worker_sessions SET holder = ?3, lease_expires_at_ms = ?4 \
                 WHERE namespace = ?1 AND session_id = ?2",
            )?
            .execute(params![namespace, session.session_id, worker, until])?;
        let session =
            self.worker_session(namespace, &options.session_id)?
                .ok_or(Error::ItemNotFound {
                    item: "worker session",
                    id: 0,
                })?;
        Ok(Ok((session, outcome)))
    }

    /// Renews `worker`'s lease on its session for `lease_seconds` (never
    /// past the TTL); `Err` when the worker does not hold a live session.
    pub fn renew_worker_session(
        &self,
        namespace: &str,
        session_id: &str,
        worker: &str,
        lease_seconds: u64,
    ) -> Result<Result<Session, Refused>, Error> {
        let now = now_ms();
        let Some(session) = self.worker_session(namespace, session_id)? else {
            return Ok(Err(Refused::NotFound));
        };
        if let Some(refused) = ended(&session, now) {
            return Ok(Err(refused));
        }
        if session.holder != worker || session.lease_expires_at_ms <= now {
            return Ok(Err(Refused::Held(session.holder)));
        }
        let until = now
            .saturating_add(to_i64(lease_seconds as usize).saturating_mul(1000))
            .min(session.ttl_expires_at_ms);
        self.conn
            .prepare_cached(
                "UPDATE worker_sessions SET lease_expires_at_ms = ?3 \
                 WHERE namespace = ?1 AND session_id = ?2",
            )?
            .execute(params![namespace, session_id, until])?;
        Ok(self
            .worker_session(namespace, session_id)?
            .ok_or(Refused::NotFound))
    }

    /// Closes `worker`'s session for good; a second close by the same
    /// holder answers `already_closed` (`Ok((session, true))`).
    pub fn close_worker_session(
        &self,
        namespace: &str,
        session_id: &str,
        worker: &str,
        reason: &str,
    ) -> Result<Result<(Session, bool), Refused>, Error> {
        let now = now_ms();
        let Some(session) = self.worker_session(namespace, session_id)? else {
            return Ok(Err(Refused::NotFound));
        };
        if session.holder != worker {
            return Ok(Err(Refused::Held(session.holder)));
        }
        if session.status == "closed" {
            return Ok(Ok((session, true)));
        }
        self.conn
            .prepare_cached(
                "UPDATE worker_sessions SET status = 'closed', closed_at_ms = ?3, close_reason = ?4 \
                 WHERE namespace = ?1 AND session_id = ?2",
            )?
            .execute(params![namespace, session_id, now, reason])?;
        Ok(self
            .worker_session(namespace, session_id)?
            .map(|s| (s, false))
            .ok_or(Refused::NotFound))
    }

    /// Ends the holder lease of every session `worker` holds (it went
    /// away): another worker may take them over, or they fail.
    pub fn release_worker_sessions(&self, namespace: &str, worker: &str) -> Result<usize, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "UPDATE worker_sessions SET lease_expires_at_ms = ?3 WHERE namespace = ?1 \
                 AND holder = ?2 AND status = 'active' AND lease_expires_at_ms > ?3",
            )?
            .execute(params![namespace, worker, now_ms()])?)
    }

    /// Deletes at most `limit` sessions whose TTL ended more than
    /// [`SESSION_GRACE_MS`] before `now_ms`, oldest first (an index walk);
    /// returns how many went.
    pub fn prune_worker_sessions(&self, now_ms: i64, limit: usize) -> Result<usize, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "DELETE FROM worker_sessions WHERE (namespace, session_id) IN (SELECT namespace, \
                 session_id FROM worker_sessions WHERE ttl_expires_at_ms <= ?1 \
                 ORDER BY ttl_expires_at_ms LIMIT ?2)",
            )?
            .execute(params![
                now_ms.saturating_sub(SESSION_GRACE_MS),
                to_i64(limit)
            ])?)
    }

    /// The session activity task `task_id` runs in, if any.
    pub fn task_session(
        &self,
        task_id: i64,
    ) -> Result<Option<crate::store::dispatch::SessionLease>, Error> {
        let row: Option<(String, Option<String>)> = self
            .conn
            .prepare_cached("SELECT namespace, session_id FROM dispatch_tasks WHERE id = ?1")?
            .query_row([task_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((namespace, Some(session_id))) = row else {
            return Ok(None);
        };
        Ok(self
            .worker_session(&namespace, &session_id)?
            .map(|s| s.lease()))
    }

    /// Renews the holder lease of the session activity task `task_id` runs
    /// in, when `worker` holds it (an activity heartbeat); the session as it
    /// stands after, if the task has one.
    pub fn renew_task_session(
        &self,
        task_id: i64,
        worker: &str,
    ) -> Result<Option<crate::store::dispatch::SessionLease>, Error> {
        let Some(session) = self.task_session(task_id)? else {
            return Ok(None);
        };
        let lease_seconds = session.options["lease_seconds"].as_u64().unwrap_or(120);
        let id = session.options["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match self.renew_worker_session(&session.namespace, &id, worker, lease_seconds)? {
            Ok(renewed) => Ok(Some(renewed.lease())),
            Err(_) => Ok(Some(session)),
        }
    }

    /// The task queue registered worker `worker` polls, if registered.
    pub fn worker_queue(&self, namespace: &str, worker: &str) -> Result<Option<String>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT task_queue FROM workers WHERE namespace = ?1 AND worker_id = ?2",
            )?
            .query_row(params![namespace, worker], |r| r.get(0))
            .optional()?)
    }

    /// Moves every session's lease and TTL `ms` into the past (tests of
    /// the sweep: a TTL cannot be set in the past through the API).
    #[doc(hidden)]
    pub fn age_worker_sessions_for_tests(&self, ms: i64) -> Result<(), Error> {
        self.conn.execute(
            "UPDATE worker_sessions SET lease_expires_at_ms = lease_expires_at_ms - ?1, \
             ttl_expires_at_ms = ttl_expires_at_ms - ?1",
            [ms],
        )?;
        Ok(())
    }

    /// Sessions stored (tests and diagnostics).
    pub fn worker_session_count(&self) -> Result<u64, Error> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM worker_sessions", [], |r| r.get(0))?;
        Ok(crate::store::rows::to_u64(n))
    }
}

/// Why `session` can never be used again at `now`, if it cannot.
fn ended(session: &Session, now: i64) -> Option<Refused> {
    match session.status.as_str() {
        "closed" => Some(Refused::Ended("worker_session_closed")),
        "failed" => Some(Refused::Ended("worker_session_failed")),
        _ if session.ttl_expires_at_ms <= now => Some(Refused::Ended("worker_session_expired")),
        _ => None,
    }
}
