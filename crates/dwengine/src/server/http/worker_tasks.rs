//! The worker plane under `/api/worker/…`: registration, workflow,
//! activity and query tasks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{delete, post, MethodRouter};
use axum::{Extension, Router};

use super::{blocking, with_body, Scope, Shared};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::server::wire::{PollBody, RegisterWorker};
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
            report(Engine::complete_workflow_task),
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
        .route("/api/worker/activity-tasks/poll", post(poll_activity))
        .route(
            "/api/worker/activity-tasks/{id}/complete",
            report(|e, id, b| e.report_activity(id, false, b)),
        )
        .route(
            "/api/worker/activity-tasks/{id}/fail",
            report(|e, id, b| e.report_activity(id, true, b)),
        )
        .route(
            "/api/worker/activity-tasks/{id}/heartbeat",
            report(Engine::heartbeat_activity),
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

async fn deregister(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
) -> Response {
    blocking(engine, move |e| e.deregister_worker(&scope.namespace, &id)).await
}

async fn poll_workflow(
    state: Shared,
    scope: Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    poll(TaskKind::Workflow, state, scope, headers, body).await
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
    // Dropped with this future: early when the client disconnects.
    let gone = AbandonOnDrop::default();
    let flag = gone.0.clone();
    let turn = turn_to_begin().await;
    let answer = with_body(engine, headers, body, move |e, b: PollBody| {
        let mut spec = e.poll_spec(&scope.namespace, b)?;
        spec.abandoned = flag;
        spec.begin_turn = std::sync::Mutex::new(turn);
        e.poll(kind, spec)
    })
    .await;
    drop(gone);
    answer
}

/// Long polls (of every kind) that begin at once: their first passes run
/// on the shared blocking pool, and a burst of 600 polls grew it by 96
/// threads; a poll waits for its turn here without a thread and gives it
/// back when it starts to wait ([`crate::server::worker::PollSpec::end_turn`])
/// or answers.
const POLLS_BEGINNING_AT_ONCE: usize = 16;

/// A turn to begin a poll (`None` only if the turns were closed, which
/// they never are: the poll then begins without one).
async fn turn_to_begin() -> Option<tokio::sync::OwnedSemaphorePermit> {
    static TURNS: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    let turns =
        TURNS.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(POLLS_BEGINNING_AT_ONCE)));
    turns.clone().acquire_owned().await.ok()
}

/// Marks a poll abandoned when its request future is dropped (the client
/// disconnected) before the poll answered.
#[derive(Default)]
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

async fn poll_query(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let gone = AbandonOnDrop::default();
    let flag = gone.0.clone();
    let turn = turn_to_begin().await;
    let answer = with_body(engine, headers, body, move |e, b: PollBody| {
        let mut spec = e.poll_spec(&scope.namespace, b)?;
        spec.abandoned = flag;
        spec.begin_turn = std::sync::Mutex::new(turn);
        e.poll_query(spec)
    })
    .await;
    drop(gone);
    answer
}
