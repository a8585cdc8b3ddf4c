//! A task queue's build-id rollout: `GET /api/task-queues/{name}/build-ids`
//! and `POST …/build-ids/drain`, `…/resume` and `…/promote` (the client
//! routes of the Python SDK's `list_task_queue_build_ids`,
//! `drain_task_queue_build_id`, `resume_task_queue_build_id` and
//! `promote_task_queue_build_id`).
//!
//! A cohort is the workers of one task queue that registered under one
//! build id (`null`: the unversioned cohort, workers that sent none). The
//! list groups the queue's registrations by build id and joins the
//! operator's recorded intent: a draining cohort's workers claim no new
//! task (what they hold finishes: `server::worker`'s pass), and fresh
//! starts on the queue pin to the promoted cohort, whose workers alone
//! then take those runs' workflow and activity tasks (`Store::lease_task_for`).
//! Each cohort also sums up the workflow definition fingerprints its
//! registrations recorded, as the reference server does: how many distinct
//! (type, fingerprint) pairs, and the types its workers disagree on.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::server::error::finish_with;
use crate::server::roster::STALE_AFTER_SECONDS;
use crate::server::wire::{self, Checks};
use crate::server::{ApiError, Engine};
use crate::store::build_id_rollouts::{
    BuildIdRollout, CohortWorkers, RolloutAction, RolloutRefused, MAX_NAMESPACE_ROLLOUTS,
};

/// One cohort of the list, before it is rendered.
struct Cohort {
    build_id: Option<String>,
    total: u64,
    live: u64,
    runtimes: Vec<String>,
    sdk_versions: Vec<String>,
    last_heartbeat_ms: Option<i64>,
    first_seen_ms: Option<i64>,
    rollout: BuildIdRollout,
    /// Workflow type -> the distinct definition fingerprints its live and
    /// stale registrations recorded.
    fingerprints: BTreeMap<String, BTreeSet<String>>,
}

impl Cohort {
    fn empty(build_id: Option<String>) -> Self {
        Self {
            rollout: BuildIdRollout::unrecorded(build_id.as_deref()),
            build_id,
            total: 0,
            live: 0,
            runtimes: Vec::new(),
            sdk_versions: Vec::new(),
            last_heartbeat_ms: None,
            first_seen_ms: None,
            fingerprints: BTreeMap::new(),
        }
    }

    /// Adds one registration's recorded fingerprints (a JSON map of
    /// workflow type to fingerprint; anything else in it is skipped).
    fn add_fingerprints(&mut self, recorded: &str) {
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(recorded) else {
            return;
        };
        for (workflow_type, fingerprint) in map {
            if let Some(fingerprint) = fingerprint.as_str().map(str::trim) {
                if !workflow_type.trim().is_empty() && !fingerprint.is_empty() {
                    self.fingerprints
                        .entry(workflow_type.trim().to_owned())
                        .or_default()
                        .insert(fingerprint.to_owned());
                }
            }
        }
    }

    /// The reference server's summary: every distinct (type, fingerprint)
    /// counted, and the types whose workers disagree on the definition.
    fn fingerprint_summary(&self) -> (usize, Vec<Value>) {
        let count = self.fingerprints.values().map(BTreeSet::len).sum();
        let conflicts = self
            .fingerprints
            .iter()
            .filter(|(_, fingerprints)| fingerprints.len() > 1)
            .map(|(workflow_type, fingerprints)| {
                json!({ "workflow_type": workflow_type, "fingerprint_count": fingerprints.len() })
            })
            .collect();
        (count, conflicts)
    }

    fn add(&mut self, group: &CohortWorkers) {
        self.total += group.total;
        self.live += group.live;
        if let Some(runtime) = group.runtime.as_deref().map(str::trim) {
            if !runtime.is_empty() && !self.runtimes.iter().any(|r| r == runtime) {
                self.runtimes.push(runtime.to_owned());
            }
        }
        if let Some(version) = group.sdk_version.as_deref().map(str::trim) {
            if !version.is_empty() && !self.sdk_versions.iter().any(|v| v == version) {
                self.sdk_versions.push(version.to_owned());
            }
        }
        self.last_heartbeat_ms = self.last_heartbeat_ms.max(Some(group.last_heartbeat_ms));
        self.first_seen_ms = match (self.first_seen_ms, group.first_seen_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// `active`, `draining`, `stale_only` or `no_workers`.
    fn status(&self) -> &'static str {
        if self.rollout.draining {
            "draining"
        } else if self.live > 0 {
            "active"
        } else if self.total > 0 {
            "stale_only"
        } else {
            "no_workers"
        }
    }

    /// Active cohorts first, then draining, stale and empty ones; named
    /// builds before the unversioned cohort within each.
    fn rank(&self) -> u8 {
        let status = match self.status() {
            "active" => 0,
            "draining" => 1,
            "stale_only" => 2,
            _ => 3,
        };
        status * 2 + u8::from(self.build_id.is_none())
    }

    fn json(&self) -> Value {
        let (active, draining) = if self.rollout.draining {
            (0, self.live)
        } else {
            (self.live, 0)
        };
        let (fingerprint_count, conflicts) = self.fingerprint_summary();
        let mut out = json!({
            "build_id": self.build_id,
            "rollout_status": self.status(),
            "active_worker_count": active,
            "draining_worker_count": draining,
            "stale_worker_count": self.total - self.live,
            "total_worker_count": self.total,
            "runtimes": self.runtimes,
            "sdk_versions": self.sdk_versions,
            "last_heartbeat_at": self.last_heartbeat_ms.map(wire::timestamp),
            "first_seen_at": self.first_seen_ms.map(wire::timestamp),
            "workflow_definition_fingerprint_count": fingerprint_count,
            "workflow_definition_fingerprint_conflicts": conflicts,
        });
        if let (Value::Object(out), Value::Object(intent)) = (&mut out, intent_json(&self.rollout))
        {
            out.extend(intent);
        }
        out
    }
}

/// The intent fields both answers share.
fn intent_json(rollout: &BuildIdRollout) -> Value {
    json!({
        "drain_intent": if rollout.draining { "draining" } else { "active" },
        "drained_at": rollout.drained_at_ms.map(wire::timestamp),
        "promoted_at": rollout.promoted_at_ms.map(wire::timestamp),
        "rolled_back_at": rollout.rolled_back_at_ms.map(wire::timestamp),
        "new_start_selected": rollout.new_start_selected,
    })
}

impl Engine {
    /// `GET /api/task-queues/{name}/build-ids`: the queue's cohorts, from its
    /// registrations and the recorded intents (a cohort whose workers are
    /// all gone stays listed while it is draining or promoted).
    pub fn list_build_ids(&self, namespace: &str, task_queue: &str) -> Result<Value, ApiError> {
        let mut v = self.config.request_limits.validator();
        v.task_queue(task_queue);
        finish_with(v, &[("task_queue", task_queue)], &[])?;
        let _slot = self.admit_namespace(namespace)?;
        let stale_after_ms = i64::try_from(STALE_AFTER_SECONDS * 1000).unwrap_or(i64::MAX);
        let live_since = crate::unix_ms().saturating_sub(stale_after_ms);
        let (groups, rollouts, fingerprints) = self.read(|s| {
            Ok((
                s.queue_cohort_workers(namespace, task_queue, live_since)?,
                s.build_id_rollouts(namespace, task_queue)?,
                s.queue_definition_fingerprints(namespace, task_queue)?,
            ))
        })?;
        let mut cohorts: Vec<Cohort> = Vec::new();
        for group in &groups {
            let index = match cohorts.iter().position(|c| c.build_id == group.build_id) {
                Some(index) => index,
                None => {
                    cohorts.push(Cohort::empty(group.build_id.clone()));
                    cohorts.len() - 1
                }
            };
            cohorts[index].add(group);
        }
        for rollout in rollouts {
            match cohorts.iter_mut().find(|c| c.build_id == rollout.build_id) {
                Some(cohort) => cohort.rollout = rollout,
                None => {
                    let mut cohort = Cohort::empty(rollout.build_id.clone());
                    cohort.rollout = rollout;
                    cohorts.push(cohort);
                }
            }
        }
        for (build_id, recorded) in &fingerprints {
            if let Some(cohort) = cohorts.iter_mut().find(|c| &c.build_id == build_id) {
                cohort.add_fingerprints(recorded);
            }
        }
        for cohort in &mut cohorts {
            cohort.runtimes.sort();
            cohort.sdk_versions.sort();
        }
        cohorts.sort_by(|a, b| {
            a.rank()
                .cmp(&b.rank())
                .then(b.last_heartbeat_ms.cmp(&a.last_heartbeat_ms))
                .then(a.build_id.cmp(&b.build_id))
        });
        Ok(json!({
            "namespace": namespace,
            "task_queue": task_queue,
            "stale_after_seconds": STALE_AFTER_SECONDS,
            "build_ids": cohorts.iter().map(Cohort::json).collect::<Vec<_>>(),
        }))
    }

    /// `POST /api/task-queues/{name}/build-ids/{drain,resume,promote}` with
    /// `{"build_id": string | null}` (`null`: the unversioned cohort).
    pub fn set_build_id_rollout(
        &self,
        namespace: &str,
        task_queue: &str,
        action: RolloutAction,
        body: Value,
    ) -> Result<Value, ApiError> {
        let mut checks = Checks::default();
        let build_id = match body.get("build_id") {
            None => {
                checks.problem(
                    "build_id",
                    "The build_id field is required: a build id, or null for the unversioned \
                     cohort (workers registered without one).",
                );
                None
            }
            Some(Value::Null) => None,
            Some(Value::String(build)) => Some(build.trim().to_owned()).filter(|b| !b.is_empty()),
            Some(_) => {
                checks.problem(
                    "build_id",
                    "The build_id field must be a string, or null for the unversioned cohort.",
                );
                None
            }
        };
        if !body.is_object() {
            checks.problem(
                "body",
                "The body must be a JSON object with a build_id field.",
            );
        }
        let mut v = self.config.request_limits.validator();
        v.task_queue(task_queue);
        if let Some(build) = &build_id {
            v.text("build_id", build, dwpolicy::boundary::MAX_NAME_CHARS);
        }
        finish_with(v, &[("task_queue", task_queue)], &checks.problems)?;
        let _slot = self.admit_namespace(namespace)?;
        let (ns, queue, build) = (
            namespace.to_owned(),
            task_queue.to_owned(),
            build_id.clone(),
        );
        let written =
            self.write(move |s| s.set_build_id_rollout(&ns, &queue, build.as_deref(), action))?;
        let rollout = written.map_err(|refused| refusal(refused, task_queue, &build_id))?;
        // Claims and starts read the intent from the store; a drained
        // cohort's waiting polls answer at their next pass, a resumed
        // one's find work at the queue's next wake-up or idle recheck.
        let mut out = json!({
            "namespace": namespace,
            "task_queue": task_queue,
            "build_id": build_id,
        });
        if let (Value::Object(out), Value::Object(intent)) = (&mut out, intent_json(&rollout)) {
            out.extend(intent);
        }
        if action == RolloutAction::Resume {
            for kind in ["workflow", "activity"] {
                self.wake(namespace, task_queue, kind);
            }
        }
        Ok(out)
    }
}

/// The 409 of a refused rollout write.
fn refusal(refused: RolloutRefused, task_queue: &str, build_id: &Option<String>) -> ApiError {
    let details = json!({ "task_queue": task_queue, "build_id": build_id });
    let (reason, message) = match refused {
        RolloutRefused::LimitExceeded => (
            "build_id_rollout_limit_exceeded",
            format!(
                "This namespace already keeps {MAX_NAMESPACE_ROLLOUTS} build-id rollout records; \
                 resume draining cohorts whose workers are gone (a resumed cohort without \
                 workers leaves no record) before recording another."
            ),
        ),
        RolloutRefused::Draining => (
            "build_id_draining",
            "The cohort is draining, so the runs fresh starts would pin to it could not run; \
             resume it first."
                .to_owned(),
        ),
        RolloutRefused::Selected => (
            "build_id_selected_for_new_starts",
            "Fresh starts on this task queue pin to this cohort; promote another cohort \
             (null for the unversioned one) before draining it."
                .to_owned(),
        ),
    };
    ApiError::BuildIdRollout {
        reason,
        message,
        details,
    }
}
