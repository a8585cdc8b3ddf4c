//! Sticky execution: a run's workflow tasks go to the worker that caches
//! its history while that worker is alive.
//!
//! A worker with a sticky cache claims a run when it completes one of the
//! run's workflow tasks (the completion's `sticky_cache`). The claim is one
//! `sticky_bindings` row per run: the run's next workflow task is held for
//! that worker (the worker's sticky queue is the set of its queue's tasks
//! held for it) for `hold_ms` after it becomes ready or after the claim,
//! whichever is later; then, or at once when the worker's registration is
//! gone, any poller of the queue takes it and the binding goes. A claim
//! lives as long as the worker's cache entry (`ttl_seconds`), and every
//! worker heartbeat deletes at most a scan limit of expired ones, oldest
//! first through an index.

use crate::store::db::{params, OptionalExtension};

use crate::store::connection::Store;
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::{now_ms, to_i64};

/// How the worker should replay a leased workflow task (the poll's
/// `sticky_replay_mode`, read by both SDKs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum StickyReplay {
    /// The worker that holds the run's claim leased it: its cache should hit.
    HitExpected,
    /// The claiming worker leased it under another build: its cache (keyed
    /// by build) cannot hold this run, so it replays the whole history.
    ForcedCold,
    /// No claim, or another worker took the run: a cold replay.
    Cold,
}

impl StickyReplay {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StickyReplay::HitExpected => "sticky_hit_expected",
            StickyReplay::ForcedCold => "forced_cold_replay",
            StickyReplay::Cold => "cold_replay",
        }
    }
}

/// A worker's claim on a run (the completion's `sticky_cache`, checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyClaim {
    /// The claiming worker (the task's lease owner).
    pub worker_id: String,
    /// The build whose cache holds the run (`None`: unversioned).
    pub build_id: Option<String>,
    /// How long the worker keeps the run's history (its cache TTL).
    pub ttl_ms: i64,
    /// How long a ready task waits for the worker before any poller takes it.
    pub hold_ms: i64,
}

/// The SQL condition (on a `dispatch_tasks d` row, with `?4` the time and
/// `?5` the polling worker) under which another live worker's claim still
/// holds the task back.
pub(crate) const HELD_FOR_ANOTHER: &str = "EXISTS (SELECT 1 FROM sticky_bindings b \
     WHERE b.run_id = d.run_id AND b.worker_id != ?5 AND b.expires_at_ms > ?4 \
     AND (d.due_at_ms + b.hold_ms > ?4 OR b.bound_at_ms + b.hold_ms > ?4) \
     AND EXISTS (SELECT 1 FROM workers w WHERE w.namespace = b.namespace \
       AND w.worker_id = b.worker_id))";

impl Store {
    /// Records `claim` on `run` (replacing any earlier claim).
    pub fn bind_sticky(
        &self,
        run: RunId,
        namespace: &str,
        claim: &StickyClaim,
    ) -> Result<(), Error> {
        let now = now_ms();
        self.conn
            .prepare_cached(
                "INSERT INTO sticky_bindings (run_id, namespace, worker_id, build_id, hold_ms, \
                 bound_at_ms, expires_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (run_id) DO UPDATE SET namespace = excluded.namespace, \
                 worker_id = excluded.worker_id, build_id = excluded.build_id, \
                 hold_ms = excluded.hold_ms, bound_at_ms = excluded.bound_at_ms, \
                 expires_at_ms = excluded.expires_at_ms",
            )?
            .execute(params![
                run.0,
                namespace,
                claim.worker_id,
                claim.build_id,
                claim.hold_ms,
                now,
                now.saturating_add(claim.ttl_ms)
            ])?;
        Ok(())
    }

    /// Forgets `run`'s claim (its worker dropped the run from its cache,
    /// the run closed, or another worker took it).
    pub fn unbind_sticky(&self, run: RunId) -> Result<(), Error> {
        self.conn
            .prepare_cached("DELETE FROM sticky_bindings WHERE run_id = ?1")?
            .execute([run.0])?;
        Ok(())
    }

    /// The replay mode of `run`'s workflow task just leased by `owner`
    /// polling with `build`; a claim of another worker is dropped (the run
    /// now lives in the new worker's cache, if anywhere).
    pub fn sticky_lease(
        &self,
        run: RunId,
        owner: &str,
        build: Option<&str>,
    ) -> Result<StickyReplay, Error> {
        let binding: Option<(String, Option<String>)> = self
            .conn
            .prepare_cached(
                "SELECT worker_id, build_id FROM sticky_bindings WHERE run_id = ?1 \
                 AND expires_at_ms > ?2",
            )?
            .query_row(params![run.0, now_ms()], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        match binding {
            None => Ok(StickyReplay::Cold),
            Some((worker, bound_build)) if worker == owner => {
                Ok(if bound_build.as_deref() == build || build.is_none() {
                    StickyReplay::HitExpected
                } else {
                    StickyReplay::ForcedCold
                })
            }
            Some(_) => {
                self.unbind_sticky(run)?;
                Ok(StickyReplay::Cold)
            }
        }
    }

    /// The replay mode a repeated poll reports for `run`'s task leased to
    /// `owner` (nothing is changed).
    pub fn sticky_replay_of(&self, run: RunId, owner: &str) -> Result<StickyReplay, Error> {
        let worker: Option<String> = self
            .conn
            .prepare_cached(
                "SELECT worker_id FROM sticky_bindings WHERE run_id = ?1 AND expires_at_ms > ?2",
            )?
            .query_row(params![run.0, now_ms()], |r| r.get(0))
            .optional()?;
        Ok(if worker.as_deref() == Some(owner) {
            StickyReplay::HitExpected
        } else {
            StickyReplay::Cold
        })
    }

    /// Drops every claim of a worker that went away; returns how many.
    pub fn release_sticky_worker(&self, namespace: &str, worker_id: &str) -> Result<usize, Error> {
        Ok(self
            .conn
            .prepare_cached("DELETE FROM sticky_bindings WHERE namespace = ?1 AND worker_id = ?2")?
            .execute(params![namespace, worker_id])?)
    }

    /// Deletes at most `limit` expired claims, oldest expiry first (an
    /// index walk: the sweep costs `limit` rows however many claims exist);
    /// returns how many went.
    pub fn prune_sticky_bindings(&self, now_ms: i64, limit: usize) -> Result<usize, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "DELETE FROM sticky_bindings WHERE run_id IN (SELECT run_id FROM sticky_bindings \
                 WHERE expires_at_ms <= ?1 ORDER BY expires_at_ms LIMIT ?2)",
            )?
            .execute(params![now_ms, to_i64(limit)])?)
    }

    /// Sticky claims held (tests and diagnostics).
    pub fn sticky_binding_count(&self) -> Result<u64, Error> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM sticky_bindings", [], |r| r.get(0))?;
        Ok(crate::store::rows::to_u64(n))
    }

    /// The worker holding `run`'s claim, if any (tests and diagnostics).
    pub fn sticky_worker_of(&self, run: RunId) -> Result<Option<String>, Error> {
        Ok(self
            .conn
            .prepare_cached("SELECT worker_id FROM sticky_bindings WHERE run_id = ?1")?
            .query_row([run.0], |r| r.get(0))
            .optional()?)
    }
}
