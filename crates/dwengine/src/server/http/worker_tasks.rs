//! The worker plane under `/api/worker/…`: registration, workflow,
//! activity and query tasks.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post, MethodRouter};
use axum::{Extension, Router};

use super::{blocking, on_poll_lane, refuse, reply, with_body, Scope, Shared};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::polling::Woken;
use crate::server::queries::QueryPolls;
use crate::server::task_answer::PollAnswer;
use crate::server::update_validation::WorkflowWorkPolls;
use crate::server::wire::{ActivityReport, PollBody, RegisterWorker, WorkflowTaskLease};
use crate::server::worker::{
    Departure, Ending, FirstStep, PassNow, PollKind, PollSpec, PollStep, PollWait, SIGNAL_LOOK,
    WAKE_CHECK,
};
use crate::server::{ApiError, Engine};
use crate::store::TaskKind;

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/worker/register", post(register))
        .route("/api/worker/heartbeat", scoped(Engine::worker_heartbeat))
        .route("/api/worker/registrations/{id}", delete(deregister))
        .route(
            "/api/worker/sessions",
            scoped(Engine::create_worker_session),
        )
        .route(
            "/api/worker/sessions/{id}/heartbeat",
            post(
                |State(engine): Shared,
                 Extension(scope): Extension<Scope>,
                 Path(id): Path<String>,
                 headers: HeaderMap,
                 body: Body| async move {
                    with_body(engine, headers, body, move |e, b: Value| {
                        e.heartbeat_worker_session(&scope.namespace, &id, b)
                    })
                    .await
                },
            ),
        )
        .route(
            "/api/worker/sessions/{id}",
            delete(
                |State(engine): Shared,
                 Extension(scope): Extension<Scope>,
                 Path(id): Path<String>,
                 headers: HeaderMap,
                 body: Body| async move {
                    with_body(engine, headers, body, move |e, b: Value| {
                        e.close_worker_session(&scope.namespace, &id, b)
                    })
                    .await
                },
            ),
        )
        .route("/api/worker/workflow-tasks/poll", post(poll_workflow))
        .route(
            "/api/worker/workflow-tasks/{id}/complete",
            post(complete_workflow_task),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/fail",
            report(Engine::fail_workflow_task),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/heartbeat",
            report(Engine::heartbeat_workflow_task),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/history",
            report(Engine::workflow_task_history),
        )
        .route(
            "/api/worker/update-validation-tasks/{id}/approve",
            report(Engine::approve_update_validation),
        )
        .route(
            "/api/worker/update-validation-tasks/{id}/reject",
            report(Engine::reject_update_validation),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/deliver-cancellation",
            report(Engine::deliver_cancellation),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/local-activities/prepare",
            report(Engine::prepare_local_activity),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/local-activities/recover",
            report(Engine::recover_local_activity),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/local-activities/checkpoint",
            report(|e, id, b| e.checkpoint_local_activities(id, false, b)),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/local-activities/checkpoint-group",
            report(|e, id, b| e.checkpoint_local_activities(id, true, b)),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/local-activities/{attempt}/{operation}",
            post(
                |State(engine): Shared,
                 Path((id, attempt, operation)): Path<(String, String, String)>,
                 headers: HeaderMap,
                 body: Body| async move {
                    with_body(engine, headers, body, move |e, b| {
                        match operation.as_str() {
                            "control" => e.local_activity_control(&id, &attempt, false, b),
                            "heartbeat" => e.local_activity_control(&id, &attempt, true, b),
                            "outcome" => e.local_activity_outcome(&id, &attempt, b),
                            "acknowledge-cancellation" => {
                                e.acknowledge_local_cancellation(&id, &attempt, b)
                            }
                            other => Err(ApiError::LocalActivityRefused {
                                status: 404,
                                reason: "unknown_local_activity_operation",
                                message: format!(
                                "{other:?} is not a local-activity operation: control, heartbeat, \
                                 outcome or acknowledge-cancellation"
                            ),
                            }),
                        }
                    })
                    .await
                },
            ),
        )
        .route("/api/worker/activity-tasks/poll", post(poll_activity))
        .route(
            "/api/worker/activity-tasks/{id}/complete",
            activity_report(false),
        )
        .route(
            "/api/worker/activity-tasks/{id}/fail",
            activity_report(true),
        )
        .route(
            "/api/worker/activity-tasks/{id}/heartbeat",
            report(Engine::heartbeat_activity),
        )
        .route(
            "/api/worker/activity-tasks/{id}/status",
            report(Engine::activity_task_status),
        )
        .route(
            "/api/worker/activity-tasks/{id}/acknowledge-cancellation",
            report(Engine::acknowledge_activity_cancellation),
        )
        .route("/api/worker/query-tasks/poll", post(poll_query))
        .route(
            "/api/worker/query-tasks/{id}/complete",
            report(|e, id, b| e.report_query(id, false, b)),
        )
        .route(
            "/api/worker/query-tasks/{id}/fail",
            report(|e, id, b| e.report_query(id, true, b)),
        )
}

/// A report on task `{id}`: its body parsed as `T`, then `op` on the
/// blocking pool. Every task report has this shape.
fn report<T: DeserializeOwned + Send + 'static>(
    op: fn(&Engine, &str, T) -> Result<Value, ApiError>,
) -> MethodRouter<Arc<Engine>> {
    post(
        move |State(engine): Shared, Path(id): Path<String>, headers: HeaderMap, body: Body| async move {
            with_body(engine, headers, body, move |e, b: T| op(e, &id, b)).await
        },
    )
}

/// A workflow task's completion: checked here and awaiting the writer
/// without a blocking thread when nothing on the way can block
/// ([`Engine::complete_workflow_task_now`]), else on the blocking pool.
async fn complete_workflow_task(
    State(engine): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let parsed = match super::read::<WorkflowTaskLease>(&engine, &headers, body).await {
        Ok(parsed) => parsed,
        Err(e) => return refuse(e),
    };
    let answer = match engine.complete_workflow_task_now(&id, parsed).await {
        Ok(answer) => answer,
        Err(parsed) => {
            super::run_blocking(engine, move |e| e.complete_workflow_task(&id, parsed)).await
        }
    };
    reply(answer)
}

/// An activity attempt's completion or failure: checked here and awaiting
/// the writer without a blocking thread when nothing on the way can block
/// ([`Engine::report_activity_now`]), else on the blocking pool.
fn activity_report(failed: bool) -> MethodRouter<Arc<Engine>> {
    post(
        move |State(engine): Shared, Path(id): Path<String>, headers: HeaderMap, body: Body| async move {
            let parsed = match super::read::<ActivityReport>(&engine, &headers, body).await {
                Ok(parsed) => parsed,
                Err(e) => return refuse(e),
            };
            let answer = match engine.report_activity_now(&id, failed, parsed).await {
                Ok(answer) => answer,
                Err(parsed) => {
                    super::run_blocking(engine, move |e| e.report_activity(&id, failed, parsed))
                        .await
                }
            };
            reply(answer)
        },
    )
}

/// A worker-scoped call in the caller's namespace: its body parsed as `T`,
/// then `op` on the blocking pool (registration and heartbeat).
fn scoped<T: DeserializeOwned + Send + 'static>(
    op: fn(&Engine, &str, T) -> Result<Value, ApiError>,
) -> MethodRouter<Arc<Engine>> {
    post(
        move |State(engine): Shared,
              Extension(scope): Extension<Scope>,
              headers: HeaderMap,
              body: Body| async move {
            with_body(engine, headers, body, move |e, b: T| {
                op(e, &scope.namespace, b)
            })
            .await
        },
    )
}

/// `POST /api/worker/register`: the acknowledgement echoes the protocol
/// version in force (the header's, or the newest), which the SDKs check
/// before they use a capability the registration asked for.
async fn register(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let version = headers
        .get(crate::server::wire::PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned());
    with_body(engine, headers, body, move |e, mut b: RegisterWorker| {
        b.protocol_version = version;
        e.register_worker(&scope.namespace, b)
    })
    .await
}

pub(super) async fn deregister(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
) -> Response {
    blocking(engine, move |e| e.deregister_worker(&scope.namespace, &id)).await
}

/// A workflow poll; one whose `task_kinds` names `update_validation`
/// takes update validation tasks too ([`WorkflowWorkPolls`]).
async fn poll_workflow(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let spec = match spec_of(&engine, &scope, &headers, body).await {
        Ok(spec) => spec,
        Err(e) => return refuse(e),
    };
    // Dropped with this future: early when the client disconnects.
    let _gone = AbandonOnDrop(spec.abandoned.clone());
    let polling = if spec.update_validation {
        tokio::spawn(long_poll(engine, WorkflowWorkPolls, spec))
    } else {
        tokio::spawn(long_poll(engine, TaskKind::Workflow, spec))
    };
    reply_poll(
        polling
            .await
            .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string()))),
    )
}

/// A poll's answer: a tree as `axum::Json` writes it, a written one
/// (`task_answer`) with the same status and headers.
fn reply_poll(answer: Result<PollAnswer, ApiError>) -> Response {
    match answer {
        Ok(PollAnswer::Tree(value)) => reply(Ok(value)),
        Ok(PollAnswer::Written { bytes, .. }) => {
            let mut response = Body::from(bytes).into_response();
            response.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(e) => refuse(e),
    }
}

/// A poll's body, read and validated into its spec.
async fn spec_of(
    engine: &Arc<Engine>,
    scope: &Scope,
    headers: &HeaderMap,
    body: Body,
) -> Result<Arc<PollSpec>, ApiError> {
    let body = super::read::<PollBody>(engine, headers, body).await?;
    engine.poll_spec(&scope.namespace, body).map(Arc::new)
}

async fn poll_activity(
    state: Shared,
    scope: Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    poll(TaskKind::Activity, state, scope, headers, body).await
}

/// Workflow and activity polls differ only in their kind.
async fn poll(
    kind: TaskKind,
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer_poll(kind, engine, scope, headers, body).await
}

async fn poll_query(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer_poll(QueryPolls, engine, scope, headers, body).await
}

/// A long poll of `kind`, validated, then run to its answer in a task of
/// its own: a client that disconnects marks it abandoned (it then answers
/// empty at once and stores that answer for a retry of its id, as a poll
/// that timed out does) rather than cutting it off between two steps.
async fn answer_poll<K: PollKind>(
    kind: K,
    engine: Arc<Engine>,
    scope: Scope,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let spec = match spec_of(&engine, &scope, &headers, body).await {
        Ok(spec) => spec,
        Err(e) => return refuse(e),
    };
    // Dropped with this future: early when the client disconnects.
    let _gone = AbandonOnDrop(spec.abandoned.clone());
    let polling = tokio::spawn(long_poll(engine, kind, spec));
    reply_poll(
        polling
            .await
            .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string()))),
    )
}

/// Runs a long poll to its answer: its steps (claims, passes, the
/// answer) on the poll lane's blocking threads (a workflow or activity
/// poll's on this thread as far as nothing on the way may block:
/// `Engine::begin_poll_now`, `Engine::pass_now`), and the waits between
/// them on the async runtime, holding no thread: on the wake-up of the
/// poll's channel (a commit on this node, the relay from another node, an
/// SQS delivery), the idle recheck (`poll_idle_recheck`, 500 ms: timers
/// come due and leases expire with nobody waking anyone), the deadline,
/// the client leaving or the node stopping, whichever comes first.
async fn long_poll<K: PollKind>(
    engine: Arc<Engine>,
    kind: K,
    spec: Arc<PollSpec>,
) -> Result<PollAnswer, ApiError> {
    let step = match kind.task_kind() {
        // A workflow or activity poll's first step runs here as far as
        // nothing on its way may block.
        Some(task_kind) => match engine.begin_poll_now(task_kind, &spec).await {
            FirstStep::Done(step) => step?,
            FirstStep::Lane(rest) => on_poll_lane(engine.clone(), rest).await?,
        },
        None => {
            let first = spec.clone();
            on_poll_lane(engine.clone(), move |e| kind.begin(e, &first)).await?
        }
    };
    match step {
        PollStep::Answered(answer) => Ok(answer),
        PollStep::InFlight { deadline, slot } => {
            // A repeat of a poll still running looks for its answer (a
            // cache read) every WAKE_CHECK until its deadline.
            loop {
                let look = spec.clone();
                if let Some(answer) =
                    on_poll_lane(engine.clone(), move |e| kind.replay(e, &look)).await?
                {
                    return Ok(answer);
                }
                if Instant::now() >= deadline || engine.poll_over(&spec) {
                    break;
                }
                let next = (Instant::now() + WAKE_CHECK).min(deadline);
                tokio::select! {
                    _ = tokio::time::sleep_until(next.into()) => {}
                    _ = spec.abandoned.departed() => {}
                    _ = engine.waiters().stopped() => {}
                }
            }
            drop(slot);
            on_poll_lane(engine, move |e| kind.unanswered(e, &spec)).await
        }
        PollStep::Waiting(wait) => {
            let keyed = wait.keyed;
            match wait_for_work(&engine, kind, &spec, wait).await {
                WaitEnd::Answered(answer) => answer,
                WaitEnd::Over(over) => {
                    let found = over.map(|()| None);
                    on_poll_lane(engine, move |e| kind.end(e, &spec, keyed, found)).await
                }
            }
        }
    }
}

/// How a long poll's wait ended.
enum WaitEnd {
    /// A pass found its answer (a task, an error, or the end of a
    /// superseded query poll) and answered in the same step.
    Answered(Result<PollAnswer, ApiError>),
    /// The deadline passed or the poll is over (empty), or a look at the
    /// wake signal failed: the poll's last step is still to run.
    Over(Result<(), ApiError>),
}

/// What one pass on the poll lane came to.
enum Passed {
    /// It found nothing: the wait goes on.
    Nothing,
    /// It ended the poll (`claimed`: the task it took and whether it saw
    /// more work, none for an empty end or an error).
    Answered {
        claimed: Option<bool>,
        answer: Result<PollAnswer, ApiError>,
    },
}

/// A long poll's wait: a pass when the poll's channel is woken, when its
/// signal key changed (on a node with peers, looked at every
/// [`SIGNAL_LOOK`]: a relay message lost in transit), and every
/// `poll_idle_recheck` without either; until a pass finds its answer, the
/// deadline passes, or the poll is over (its client left, the node stops).
/// The wait slot is held until it returns.
async fn wait_for_work<K: PollKind>(
    engine: &Arc<Engine>,
    kind: K,
    spec: &Arc<PollSpec>,
    mut wait: PollWait,
) -> WaitEnd {
    match wait_until_answered(engine, kind, spec, &mut wait).await {
        Ok(Some(answer)) => WaitEnd::Answered(answer),
        Ok(None) => WaitEnd::Over(Ok(())),
        Err(e) => WaitEnd::Over(Err(e)),
    }
}

/// [`wait_for_work`]'s loop: the answer a pass ended the poll with, or
/// none when the wait ended without one.
async fn wait_until_answered<K: PollKind>(
    engine: &Arc<Engine>,
    kind: K,
    spec: &Arc<PollSpec>,
    wait: &mut PollWait,
) -> Result<Option<Result<PollAnswer, ApiError>>, ApiError> {
    let recheck = engine.config.poll_idle_recheck;
    let relayed = engine.poll_wakes().relayed();
    let channel = wait.channel;
    let signal = |engine: &Arc<Engine>| {
        let look = spec.clone();
        on_poll_lane(engine.clone(), move |e| e.wake_signal(&look, channel))
    };
    let mut seen = if relayed { signal(engine).await? } else { None };
    let mut heard = engine.poll_wakes().heard();
    let mut last_pass = Instant::now();
    let mut last_look = Instant::now();
    loop {
        if Instant::now() >= wait.deadline || engine.poll_over(spec) {
            return Ok(None);
        }
        let mut until = wait.deadline.min(last_pass + recheck);
        if relayed {
            until = until.min(last_look + SIGNAL_LOOK);
        }
        let woken = tokio::select! {
            woken = wait.wake.woken_before(until) => woken,
            _ = spec.abandoned.departed() => Woken::No,
            _ = engine.waiters().stopped() => Woken::No,
        };
        if engine.poll_over(spec) {
            if woken == Woken::One {
                wait.wake.give_back();
            }
            return Ok(None);
        }
        let mut due = woken != Woken::No || last_pass.elapsed() >= recheck;
        if relayed && (due || last_look.elapsed() >= SIGNAL_LOOK) {
            // After a wake too, so the key that wake wrote does not call
            // for a second pass. Only while the relay is silent: a relay
            // that delivered since the last look carries the wake-ups
            // itself (one relayed task wakes one poll of the store, and
            // the others must not all look because its key changed).
            last_look = Instant::now();
            let now_heard = engine.poll_wakes().heard();
            if now_heard == heard {
                let latest = signal(engine).await?;
                due |= latest != seen;
                seen = latest;
            }
            heard = now_heard;
        }
        if due {
            last_pass = Instant::now();
            let keyed = wait.keyed;
            // A pass that ends the poll answers in the same step on the
            // lane (one hand-off to a lane thread and back fewer).
            let on_lane = || {
                let look = spec.clone();
                on_poll_lane(engine.clone(), move |e| {
                    Ok(match kind.pass(e, &look, keyed) {
                        Ok(ControlFlow::Continue(())) => Passed::Nothing,
                        Ok(ControlFlow::Break(found)) => Passed::Answered {
                            claimed: found.as_ref().map(K::more_ready),
                            answer: kind.end(e, &look, keyed, Ok(found)),
                        },
                        Err(error) => Passed::Answered {
                            claimed: None,
                            answer: kind.end(e, &look, keyed, Err(error)),
                        },
                    })
                })
            };
            // A workflow or activity poll's pass runs here as far as
            // nothing on its way may block.
            let passed = match kind.task_kind() {
                Some(task_kind) => match engine.pass_now(task_kind, spec, keyed).await {
                    PassNow::Lane => on_lane().await,
                    PassNow::Nothing => Ok(Passed::Nothing),
                    PassNow::Ended { more_ready, answer } => Ok(Passed::Answered {
                        claimed: more_ready,
                        answer: match answer {
                            Ending::Done(answer) => answer,
                            Ending::Lane(rest) => on_poll_lane(engine.clone(), rest).await,
                        },
                    }),
                },
                None => on_lane().await,
            };
            let claimed = match &passed {
                Ok(Passed::Answered { claimed, .. }) => *claimed,
                _ => None,
            };
            match claimed {
                Some(more_ready) => {
                    if woken != Woken::One {
                        // A wake-up meant for this task, if pending, is spent.
                        wait.wake.claimed();
                    }
                    if more_ready {
                        wait.wake.wake_all();
                    }
                }
                // A single wake-up this poll did not answer with a task:
                // every poll looks (here and on the other nodes) if a task
                // is still ready, one this poll may not take; none is when
                // another poll took it first (a new poll's first look).
                None if woken == Woken::One && still_ready(engine, kind, spec).await => {
                    wait.wake.wake_all();
                }
                None => {}
            }
            if let Passed::Answered { answer, .. } = passed? {
                return Ok(Some(answer));
            }
        }
    }
}

/// Whether a task of the poll's kind is ready in its queue (a read);
/// true for a poll of another kind of work, or when the read fails, so
/// the other polls look rather than miss it.
async fn still_ready<K: PollKind>(engine: &Arc<Engine>, kind: K, spec: &Arc<PollSpec>) -> bool {
    let Some(task_kind) = kind.task_kind() else {
        return true;
    };
    let look = spec.clone();
    on_poll_lane(engine.clone(), move |e| {
        e.read(|s| s.queue_has_ready(task_kind, &look.namespace, &look.task_queue))
            .map_err(ApiError::from)
    })
    .await
    .unwrap_or(true)
}

/// Marks a poll abandoned when its request future is dropped (the client
/// disconnected) before the poll answered.
struct AbandonOnDrop(Arc<Departure>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.leave();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{reply, reply_poll};
    use crate::server::http::response_parts;
    use crate::server::task_answer::PollAnswer;

    /// A written poll answer goes out as `axum::Json` sent its tree: the
    /// same status, headers and bytes; a tree goes out as before.
    #[tokio::test]
    async fn a_written_poll_answer_is_replied_as_the_json_of_its_tree() {
        let tree = json!({"poll_status": "leased", "replayed": true,
                          "task": {"history_events": [], "workflow_id": "w-\u{e9}\"x\""}});
        let written = PollAnswer::Written {
            bytes: serde_json::to_vec(&tree).unwrap(),
            replayed: true,
        };
        let want = response_parts(reply(Ok(tree.clone()))).await;
        assert_eq!(response_parts(reply_poll(Ok(written))).await, want);
        assert_eq!(
            response_parts(reply_poll(Ok(PollAnswer::Tree(tree)))).await,
            want
        );
        assert_eq!(want.1.len(), 1, "{:?}", want.1);
    }
}
