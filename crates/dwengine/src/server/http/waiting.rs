//! Awaiting a worker's answer or a run's change without holding a thread.
//!
//! The engine begins a waiting call on the blocking pool (validate, admit
//! the wait under its kind's cap, write) and hands back what to await;
//! [`until`] then waits here on the async runtime: it subscribes to the
//! awaited key's wake-up, looks once on the blocking pool (a short store or
//! cache read), and sleeps until the wake-up, the next poll interval
//! ([`Backoff`]), the deadline or the node's shutdown, whichever comes
//! first. A hundred or a thousand waits cost no blocking thread between
//! looks, so health checks and worker polls never queue behind them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use serde_json::Value;

use super::{on_wait_lane, refuse, reply, Scope, Shared};
use crate::server::auth::Caller;
use crate::server::control::{PendingUpdate, UpdateStep};
use crate::server::queries::PendingQuery;
use crate::server::services::{CallStep, ExecuteOperation};
use crate::server::update_validation::contract::PendingValidation;
use crate::server::wire::{QueryBody, UpdateBody};
use crate::server::{ApiError, Engine};
use crate::waiters::{Backoff, WaitKey, WaitKind};

/// Which workflow (and optionally which run) a route names, with the
/// signal, update or query name when it has one. One handler serves a
/// route and its `/runs/{runId}/` variant.
pub(super) struct Target {
    pub(super) workflow_id: String,
    pub(super) run_id: Option<String>,
    pub(super) name: String,
}

impl Target {
    pub(super) fn from_path(mut params: HashMap<String, String>) -> Target {
        Target {
            workflow_id: params.remove("wf").unwrap_or_default(),
            run_id: params.remove("run"),
            name: params.remove("name").unwrap_or_default(),
        }
    }
}

/// Waits, without a thread, for an accepted update's outcome until its
/// deadline: `None` when the deadline passed first. The control plane's
/// update route and the webhook's `wait_for: completed` both answer from it.
pub(super) async fn update_outcome(
    engine: &Arc<Engine>,
    pending: &PendingUpdate,
) -> Result<Option<Value>, ApiError> {
    let look = pending.look();
    until(
        engine,
        WaitKind::Update,
        WaitKey::Run(pending.run().0),
        pending.deadline(),
        move |e| e.look_update(&look),
    )
    .await
}

/// Looks with `look` until it finds an answer (`Some`), `deadline` passes
/// or the node stops (`None`).
pub(super) async fn until<T, F>(
    engine: &Arc<Engine>,
    kind: WaitKind,
    key: WaitKey,
    deadline: Instant,
    look: F,
) -> Result<Option<T>, ApiError>
where
    T: Send + 'static,
    F: Fn(&Engine) -> Result<Option<T>, ApiError> + Send + Sync + 'static,
{
    let look = Arc::new(look);
    let waiters = engine.waiters().clone();
    let subscription = waiters.subscribe(key);
    let mut backoff = Backoff::new();
    loop {
        // Enabled before the look, so a wake-up during it is not lost.
        let woken = subscription.notify().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let once = look.clone();
        // Looks take turns with the kind's other begins, looks and ends, so
        // hundreds of waits never need hundreds of blocking threads at once.
        let turn = waiters.turn_to_begin(kind).await;
        let found = on_wait_lane(engine.clone(), move |e| once(e)).await?;
        drop(turn);
        if let Some(found) = found {
            return Ok(Some(found));
        }
        let now = Instant::now();
        if now >= deadline || waiters.stopping() {
            return Ok(None);
        }
        let pause = backoff.step().min(deadline - now);
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep(pause) => {}
            _ = waiters.stopped() => {}
        }
    }
}

/// Finishes a query whose HTTP request went away mid-wait: its task is
/// removed on the blocking pool, as an answered one would be.
struct QueryInFlight {
    engine: Arc<Engine>,
    pending: Option<PendingQuery>,
}

impl Drop for QueryInFlight {
    fn drop(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let engine = self.engine.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = on_wait_lane(engine, move |e| e.finish_query(pending, None)).await;
            });
        }
    }
}

/// Runs a query to its answer: begun and finished on the blocking pool,
/// awaited in between without a thread.
async fn query_to_answer(
    engine: Arc<Engine>,
    target: Target,
    namespace: String,
    body: QueryBody,
) -> Result<Value, ApiError> {
    let waiters = engine.waiters().clone();
    let turn = waiters.turn_to_begin(WaitKind::Query).await;
    let pending = on_wait_lane(engine.clone(), move |e| {
        e.begin_query(
            &namespace,
            &target.workflow_id,
            target.run_id.as_deref(),
            &target.name,
            body,
        )
    })
    .await?;
    drop(turn);
    let task_id = pending.task_id().to_owned();
    let deadline = pending.deadline();
    let mut in_flight = QueryInFlight {
        engine: engine.clone(),
        pending: Some(pending),
    };
    let look_id = task_id.clone();
    let answered = until(
        &engine,
        WaitKind::Query,
        WaitKey::QueryTask(task_id),
        deadline,
        move |e| e.look_query(&look_id),
    )
    .await;
    let pending = in_flight
        .pending
        .take()
        .ok_or_else(|| ApiError::Internal("query finished twice".into()))?;
    // Finishing takes the queue's lock like beginning: one turn each.
    let _turn = waiters.turn_to_begin(WaitKind::Query).await;
    let answered = match answered {
        Ok(answered) => answered,
        Err(e) => {
            let _ = on_wait_lane(engine, move |e| e.finish_query(pending, None)).await;
            return Err(e);
        }
    };
    on_wait_lane(engine, move |e| e.finish_query(pending, answered)).await
}

/// `POST …/query/{name}`.
pub(super) async fn query(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(params): Path<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let target = Target::from_path(params);
    match super::read::<QueryBody>(&engine, &headers, body).await {
        Ok(body) => reply(query_to_answer(engine, target, scope.namespace, body).await),
        Err(e) => refuse(e),
    }
}

/// `POST …/update/{name}`: `wait_for=completed` awaits without a thread.
pub(super) async fn update(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(params): Path<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let target = Target::from_path(params);
    let body = match super::read::<UpdateBody>(&engine, &headers, body).await {
        Ok(body) => body,
        Err(e) => return refuse(e),
    };
    let waiters = engine.waiters().clone();
    let turn = match body.wait_for.as_deref() {
        Some("completed") => waiters.turn_to_begin(WaitKind::Update).await,
        _ => None,
    };
    let begun = on_wait_lane(engine.clone(), move |e| {
        e.begin_update(
            &scope.namespace,
            &target.workflow_id,
            target.run_id.as_deref(),
            &target.name,
            body,
        )
    })
    .await;
    drop(turn);
    let pending = match begun {
        Ok(UpdateStep::Answered(out)) => return reply(Ok(out)),
        Ok(UpdateStep::Waiting(pending)) => pending,
        Ok(UpdateStep::Validating(pending)) => return validated_update(engine, pending).await,
        Err(e) => return refuse(e),
    };
    match update_outcome(&engine, &pending).await {
        Ok(Some(out)) => reply(Ok(out)),
        Ok(None) => reply(Ok(pending.timed_out())),
        Err(e) => refuse(e),
    }
}

/// `POST …/operations/{operation}/execute`: a call waiting for completion
/// awaits without a thread.
pub(super) async fn execute_service(
    engine: Arc<Engine>,
    namespace: String,
    path: (String, String, String),
    body: ExecuteOperation,
    caller: Option<Caller>,
) -> Response {
    let waiters = engine.waiters().clone();
    let turn = waiters.turn_to_begin(WaitKind::ServiceCall).await;
    let begun = on_wait_lane(engine.clone(), move |e| {
        let (endpoint, service, operation) = &path;
        e.execute_service_operation(
            &namespace,
            (endpoint, service, operation),
            body,
            caller.as_ref(),
        )
    })
    .await;
    drop(turn);
    let pending = match begun {
        Ok(CallStep::Answered(out)) => return reply(Ok(out)),
        Ok(CallStep::Waiting(pending)) => *pending,
        Err(e) => return refuse(e),
    };
    let look = pending.look();
    let outcome = until(
        &engine,
        WaitKind::ServiceCall,
        WaitKey::Run(pending.run().0),
        pending.deadline(),
        move |e| e.look_service_call(&look),
    )
    .await;
    match outcome {
        Ok(Some(out)) => reply(Ok(out)),
        Ok(None) => reply(Ok(pending.timed_out())),
        Err(e) => refuse(e),
    }
}

/// Drops the validation of a caller that went away mid-wait (unless a
/// verdict came), on the blocking pool, as an answered caller would.
struct ValidationInFlight {
    engine: Arc<Engine>,
    validation: Option<i64>,
}

impl Drop for ValidationInFlight {
    fn drop(&mut self) {
        let Some(validation) = self.validation.take() else {
            return;
        };
        let engine = self.engine.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = on_wait_lane(engine, move |e| e.abandon_validation(validation)).await;
            });
        }
    }
}

/// Waits for the verdict, then answers: accepted (or the update's outcome
/// with `wait_for = completed`), the validator's rejection, or the 504 of
/// a wait that ended first.
pub(super) async fn validated_update(engine: Arc<Engine>, pending: PendingValidation) -> Response {
    let (validation, creator) = pending.validation();
    let mut in_flight = ValidationInFlight {
        engine: engine.clone(),
        validation: creator.then_some(validation),
    };
    let look = pending.look();
    let found = until(
        &engine,
        WaitKind::Update,
        WaitKey::Run(pending.run().0),
        pending.deadline(),
        move |e| e.look_validation(&look),
    )
    .await;
    let step = on_wait_lane(engine.clone(), move |e| e.finish_validation(pending, found)).await;
    in_flight.validation = None;
    match step {
        Ok(UpdateStep::Answered(out)) => reply(Ok(out)),
        Ok(UpdateStep::Waiting(accepted)) => match update_outcome(&engine, &accepted).await {
            Ok(Some(out)) => reply(Ok(out)),
            Ok(None) => reply(Ok(accepted.timed_out())),
            Err(e) => refuse(e),
        },
        Ok(UpdateStep::Validating(_)) => refuse(ApiError::Internal(
            "a validated update began validating again".into(),
        )),
        Err(e) => refuse(e),
    }
}
