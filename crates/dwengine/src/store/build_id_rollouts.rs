//! Build-id rollouts of a task queue: what registrations say about their
//! workers' builds, and the operator's intent per (namespace, task queue,
//! build id) — a cohort draining (its workers claim no new task) and the
//! one cohort per queue selected for fresh starts (promoted).
//!
//! The unversioned cohort (workers that sent no build id) is stored under
//! the build id `''`. A run pinned to it at start carries `''` in
//! `runs.build_id` (its timers stay unversioned: the timer trigger maps
//! `''` to NULL); a run pinned to a named build carries that build.
//!
//! A namespace keeps at most [`MAX_NAMESPACE_ROLLOUTS`] rows (a write that
//! would add one past that is refused); a row left active, unselected and
//! without registered workers is deleted by the write that leaves it so,
//! since it says nothing the absence of a row does not.

use std::sync::LazyLock;

use crate::store::connection::Store;
use crate::store::db::{params, OptionalExtension};
use crate::store::error::Error;
use crate::store::model::RunId;
use crate::store::rows::{now_ms, to_i64, to_u64};
use crate::store::tx::WriteTx;

/// Rollout rows a namespace keeps at most.
pub const MAX_NAMESPACE_ROLLOUTS: u64 = 1_000;

/// The condition that the cohort in parameter `build` of the queue in
/// parameters `namespace` and `task_queue` drains: the one question
/// [`Store::cohort_draining`] asks on its own and a claim beside others
/// asks inside its candidate query (`store::leases`), each with its own
/// parameter numbers.
pub(crate) fn draining_condition(namespace: &str, task_queue: &str, build: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM build_id_rollouts b WHERE b.namespace = {namespace} \
         AND b.task_queue = {task_queue} AND b.build_id = {build} AND b.drain_intent = 'draining')"
    )
}

/// [`Store::cohort_draining`]'s statement, formatted once.
static COHORT_DRAINING: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {}", draining_condition("?1", "?2", "?3")));

/// The stored key of a cohort (`''`: unversioned).
fn key(build_id: Option<&str>) -> &str {
    build_id.unwrap_or("")
}

/// The public build id of a stored key.
fn public(key: String) -> Option<String> {
    (!key.is_empty()).then_some(key)
}

/// One group of a queue's registrations: the workers of one build with
/// one runtime and SDK version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CohortWorkers {
    /// The build (`None`: unversioned).
    pub build_id: Option<String>,
    /// The runtime they registered with, if they named one.
    pub runtime: Option<String>,
    /// The SDK version they registered with, if they named one.
    pub sdk_version: Option<String>,
    /// Registrations of the group.
    pub total: u64,
    /// Those heartbeated at or after the liveness bound asked for.
    pub live: u64,
    /// The newest heartbeat of the group (Unix ms).
    pub last_heartbeat_ms: i64,
    /// The earliest first registration of the group (Unix ms), if recorded.
    pub first_seen_ms: Option<i64>,
}

/// The operator's intent for one cohort of a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildIdRollout {
    /// The build (`None`: unversioned).
    pub build_id: Option<String>,
    /// Whether it is draining.
    pub draining: bool,
    /// When the drain began (Unix ms), while draining.
    pub drained_at_ms: Option<i64>,
    /// When it was last promoted (Unix ms).
    pub promoted_at_ms: Option<i64>,
    /// When a promotion of a cohort promoted before it took the fresh
    /// starts back from it (Unix ms).
    pub rolled_back_at_ms: Option<i64>,
    /// Whether fresh starts on the queue pin to it.
    pub new_start_selected: bool,
}

impl BuildIdRollout {
    /// The intent of a cohort that has no row: active, never promoted.
    pub fn unrecorded(build_id: Option<&str>) -> Self {
        Self {
            build_id: build_id.map(str::to_owned),
            draining: false,
            drained_at_ms: None,
            promoted_at_ms: None,
            rolled_back_at_ms: None,
            new_start_selected: false,
        }
    }
}

/// An operator's rollout write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutAction {
    /// The cohort stops claiming new tasks.
    Drain,
    /// The cohort claims again.
    Resume,
    /// Fresh starts on the queue pin to the cohort.
    Promote,
}

/// Why a rollout write was refused (nothing was written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutRefused {
    /// The namespace already keeps [`MAX_NAMESPACE_ROLLOUTS`] rows.
    LimitExceeded,
    /// A promotion of a draining cohort (its runs would find no worker).
    Draining,
    /// A drain of the cohort fresh starts pin to.
    Selected,
}

const ROLLOUT_COLUMNS: &str = "build_id, drain_intent, drained_at_ms, promoted_at_ms, \
                               rolled_back_at_ms, new_start_selected";

fn rollout(r: &crate::store::db::Row<'_>) -> crate::store::db::Result<BuildIdRollout> {
    let intent: String = r.get(1)?;
    let selected: i64 = r.get(5)?;
    Ok(BuildIdRollout {
        build_id: public(r.get(0)?),
        draining: intent == "draining",
        drained_at_ms: r.get(2)?,
        promoted_at_ms: r.get(3)?,
        rolled_back_at_ms: r.get(4)?,
        new_start_selected: selected != 0,
    })
}

impl Store {
    /// Records what a registration said about its worker's build (`None`:
    /// unversioned), runtime and SDK version; the first registration's
    /// time is kept across re-registrations. The registration row must
    /// exist (written just before, in the same transaction).
    pub fn record_worker_build(
        &self,
        namespace: &str,
        worker_id: &str,
        build_id: Option<&str>,
        runtime: Option<&str>,
        sdk_version: Option<&str>,
    ) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "UPDATE workers SET build_id = ?3, runtime = ?4, sdk_version = ?5, \
                 registered_at_ms = COALESCE(registered_at_ms, ?6) \
                 WHERE namespace = ?1 AND worker_id = ?2",
            )?
            .execute(params![
                namespace,
                worker_id,
                build_id,
                runtime,
                sdk_version,
                now_ms()
            ])?;
        Ok(())
    }

    /// The registrations of a queue grouped by build, runtime and SDK
    /// version (one grouped walk of the queue's registrations); `live`
    /// counts those heartbeated at or after `live_since_ms`.
    pub fn queue_cohort_workers(
        &self,
        namespace: &str,
        task_queue: &str,
        live_since_ms: i64,
    ) -> Result<Vec<CohortWorkers>, Error> {
        let mut statement = self.conn.prepare_cached(
            "SELECT build_id, runtime, sdk_version, COUNT(*), \
             CAST(SUM(CASE WHEN last_heartbeat_ms >= ?3 THEN 1 ELSE 0 END) AS BIGINT), \
             MAX(last_heartbeat_ms), MIN(registered_at_ms) \
             FROM workers WHERE namespace = ?1 AND task_queue = ?2 \
             GROUP BY build_id, runtime, sdk_version",
        )?;
        let rows = statement.query_map(params![namespace, task_queue, live_since_ms], |r| {
            let build: Option<String> = r.get(0)?;
            Ok(CohortWorkers {
                build_id: build.filter(|b| !b.is_empty()),
                runtime: r.get(1)?,
                sdk_version: r.get(2)?,
                total: to_u64(r.get(3)?),
                live: to_u64(r.get(4)?),
                last_heartbeat_ms: r.get(5)?,
                first_seen_ms: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The workflow definition fingerprints a queue's registrations
    /// recorded (the JSON map of workflow type to fingerprint), each with
    /// its worker's build (`None`: unversioned): one walk of the queue's
    /// registrations, as [`Store::queue_cohort_workers`] does.
    pub fn queue_definition_fingerprints(
        &self,
        namespace: &str,
        task_queue: &str,
    ) -> Result<Vec<(Option<String>, String)>, Error> {
        let mut statement = self.conn.prepare_cached(
            "SELECT build_id, workflow_definition_fingerprints FROM workers \
             WHERE namespace = ?1 AND task_queue = ?2 \
             AND workflow_definition_fingerprints IS NOT NULL",
        )?;
        let rows = statement.query_map(params![namespace, task_queue], |r| {
            let build: Option<String> = r.get(0)?;
            Ok((build.filter(|b| !b.is_empty()), r.get(1)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The rollout rows of a queue (at most [`MAX_NAMESPACE_ROLLOUTS`]).
    pub fn build_id_rollouts(
        &self,
        namespace: &str,
        task_queue: &str,
    ) -> Result<Vec<BuildIdRollout>, Error> {
        let sql = format!(
            "SELECT {ROLLOUT_COLUMNS} FROM build_id_rollouts \
             WHERE namespace = ?1 AND task_queue = ?2 ORDER BY build_id LIMIT ?3"
        );
        let mut statement = self.conn.prepare_cached(&sql)?;
        let rows = statement.query_map(
            params![
                namespace,
                task_queue,
                to_i64(MAX_NAMESPACE_ROLLOUTS as usize)
            ],
            rollout,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Whether the cohort `build_id` (`None`: unversioned) of a queue is draining.
    pub fn cohort_draining(
        &self,
        namespace: &str,
        task_queue: &str,
        build_id: Option<&str>,
    ) -> Result<bool, Error> {
        Ok(self
            .conn
            .prepare_cached(&COHORT_DRAINING)?
            .query_row(params![namespace, task_queue, key(build_id)], |r| {
                r.get::<_, bool>(0)
            })?)
    }

    /// Pins a run just started on `task_queue` to a cohort: `explicit`
    /// when the start named a build, else the queue's promoted cohort, if
    /// any (a run pinned to the unversioned cohort carries `''`). An
    /// unpinned run joins the cohort of the first worker to take it.
    pub fn pin_started_run(
        &self,
        run: RunId,
        namespace: &str,
        task_queue: &str,
        explicit: Option<&str>,
    ) -> Result<(), Error> {
        let pinned = match explicit {
            Some(build) => Some(build.to_owned()),
            None => self
                .conn
                .prepare_cached(
                    "SELECT build_id FROM build_id_rollouts WHERE namespace = ?1 \
                     AND task_queue = ?2 AND new_start_selected = 1",
                )?
                .query_row(params![namespace, task_queue], |r| r.get(0))
                .optional()?,
        };
        if let Some(build) = pinned {
            if self.pin_staged(run, &build) {
                return Ok(());
            }
            self.conn
                .prepare_cached("UPDATE runs SET build_id = ?2 WHERE id = ?1")?
                .execute(params![run.0, build])?;
        }
        Ok(())
    }

    /// Applies an operator's rollout write to the cohort `build_id`
    /// (`None`: unversioned) of a queue, in one transaction; answers the
    /// cohort's intent after it, or why nothing was written.
    pub fn set_build_id_rollout(
        &self,
        namespace: &str,
        task_queue: &str,
        build_id: Option<&str>,
        action: RolloutAction,
    ) -> Result<Result<BuildIdRollout, RolloutRefused>, Error> {
        let tx = WriteTx::begin(&self.conn)?;
        let now = now_ms();
        let build_key = key(build_id);
        let sql = format!(
            "SELECT {ROLLOUT_COLUMNS} FROM build_id_rollouts \
             WHERE namespace = ?1 AND task_queue = ?2 AND build_id = ?3"
        );
        let existing = tx
            .prepare_cached(&sql)?
            .query_row(params![namespace, task_queue, build_key], rollout)
            .optional()?;
        let mut row = match existing.clone() {
            Some(row) => row,
            None => {
                let kept: i64 = tx
                    .prepare_cached("SELECT COUNT(*) FROM build_id_rollouts WHERE namespace = ?1")?
                    .query_row([namespace], |r| r.get(0))?;
                if to_u64(kept) >= MAX_NAMESPACE_ROLLOUTS {
                    return Ok(Err(RolloutRefused::LimitExceeded));
                }
                BuildIdRollout::unrecorded(build_id)
            }
        };
        match action {
            RolloutAction::Drain => {
                if row.new_start_selected {
                    return Ok(Err(RolloutRefused::Selected));
                }
                if !row.draining {
                    row.draining = true;
                    row.drained_at_ms = Some(now);
                }
            }
            RolloutAction::Resume => {
                row.draining = false;
                row.drained_at_ms = None;
            }
            RolloutAction::Promote => {
                if row.draining {
                    return Ok(Err(RolloutRefused::Draining));
                }
                if !row.new_start_selected {
                    // A cohort promoted before takes the fresh starts back:
                    // the one that held them is rolled back.
                    let rollback = row.promoted_at_ms.is_some();
                    let previous: Option<String> = tx
                        .prepare_cached(
                            "SELECT build_id FROM build_id_rollouts WHERE namespace = ?1 \
                             AND task_queue = ?2 AND new_start_selected = 1",
                        )?
                        .query_row(params![namespace, task_queue], |r| r.get(0))
                        .optional()?;
                    if let Some(previous) = previous {
                        tx.prepare_cached(
                            "UPDATE build_id_rollouts SET new_start_selected = 0, \
                             rolled_back_at_ms = CASE WHEN ?4 = 1 THEN ?5 ELSE rolled_back_at_ms END, \
                             updated_at_ms = ?5 \
                             WHERE namespace = ?1 AND task_queue = ?2 AND build_id = ?3",
                        )?
                        .execute(params![
                            namespace,
                            task_queue,
                            previous,
                            i64::from(rollback),
                            now
                        ])?;
                        self.forget_idle_rollout(namespace, task_queue, &previous)?;
                    }
                    row.new_start_selected = true;
                    row.promoted_at_ms = Some(now);
                    row.rolled_back_at_ms = None;
                }
            }
        }
        if existing.as_ref() != Some(&row) {
            tx.prepare_cached(
                "INSERT INTO build_id_rollouts (namespace, task_queue, build_id, drain_intent, \
                 drained_at_ms, promoted_at_ms, rolled_back_at_ms, new_start_selected, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
                 ON CONFLICT (namespace, task_queue, build_id) DO UPDATE SET \
                 drain_intent = excluded.drain_intent, drained_at_ms = excluded.drained_at_ms, \
                 promoted_at_ms = excluded.promoted_at_ms, \
                 rolled_back_at_ms = excluded.rolled_back_at_ms, \
                 new_start_selected = excluded.new_start_selected, \
                 updated_at_ms = excluded.updated_at_ms",
            )?
            .execute(params![
                namespace,
                task_queue,
                build_key,
                if row.draining { "draining" } else { "active" },
                row.drained_at_ms,
                row.promoted_at_ms,
                row.rolled_back_at_ms,
                i64::from(row.new_start_selected),
                now
            ])?;
        }
        self.forget_idle_rollout(namespace, task_queue, build_key)?;
        tx.commit()?;
        Ok(Ok(row))
    }

    /// Deletes the row of a cohort that is active, unselected and has no
    /// registered worker on the queue: it records nothing a missing row
    /// does not.
    fn forget_idle_rollout(
        &self,
        namespace: &str,
        task_queue: &str,
        build_key: &str,
    ) -> Result<(), Error> {
        self.conn
            .prepare_cached(
                "DELETE FROM build_id_rollouts WHERE namespace = ?1 AND task_queue = ?2 \
                 AND build_id = ?3 AND drain_intent = 'active' AND new_start_selected = 0 \
                 AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.namespace = ?1 \
                 AND w.task_queue = ?2 AND COALESCE(w.build_id, '') = ?3)",
            )?
            .execute(params![namespace, task_queue, build_key])?;
        Ok(())
    }
}

impl Store {
    /// For a poll: `None` when the worker is not registered, else whether
    /// it heartbeated at or after `since_ms` and the build id it
    /// registered with (`None`: unversioned).
    pub fn worker_poll_registration(
        &self,
        namespace: &str,
        worker_id: &str,
        since_ms: i64,
    ) -> Result<Option<(bool, Option<String>)>, Error> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT last_heartbeat_ms, build_id FROM workers \
                 WHERE namespace = ?1 AND worker_id = ?2",
            )?
            .query_row(params![namespace, worker_id], |r| {
                let heartbeat: i64 = r.get(0)?;
                let build: Option<String> = r.get(1)?;
                Ok((heartbeat >= since_ms, build))
            })
            .optional()?)
    }
}
