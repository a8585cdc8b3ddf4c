//! `/api/workers` and `/api/task-queues`: the operator's roster of
//! registered workers and the task queues they serve.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post, MethodRouter};
use axum::{Extension, Router};
use serde_json::Value;

use super::{blocking, with_body, Scope, Shared};
use crate::server::roster::{TaskQueueListQuery, WorkerListQuery};
use crate::server::Engine;
use crate::store::build_id_rollouts::RolloutAction;

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/workers", get(list))
        // Deleting a worker is the worker plane's deregistration.
        .route(
            "/api/workers/{id}",
            get(describe).delete(super::worker_tasks::deregister),
        )
}

async fn list(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Query(query): Query<WorkerListQuery>,
) -> Response {
    blocking(engine, move |e| e.list_workers(&scope.namespace, query)).await
}

async fn describe(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
) -> Response {
    blocking(engine, move |e| e.describe_worker(&scope.namespace, &id)).await
}

pub(super) fn queue_routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/task-queues", get(list_queues))
        .route("/api/task-queues/{name}", get(describe_queue))
        .route("/api/task-queues/{name}/build-ids", get(list_build_ids))
        .route(
            "/api/task-queues/{name}/build-ids/drain",
            rollout(RolloutAction::Drain),
        )
        .route(
            "/api/task-queues/{name}/build-ids/resume",
            rollout(RolloutAction::Resume),
        )
        .route(
            "/api/task-queues/{name}/build-ids/promote",
            rollout(RolloutAction::Promote),
        )
}

async fn list_build_ids(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(name): Path<String>,
) -> Response {
    blocking(engine, move |e| e.list_build_ids(&scope.namespace, &name)).await
}

/// A POST on `/api/task-queues/{name}/build-ids/…`: the body as JSON, then
/// the rollout write.
fn rollout(action: RolloutAction) -> MethodRouter<Arc<Engine>> {
    post(
        move |State(engine): Shared,
              Extension(scope): Extension<Scope>,
              Path(name): Path<String>,
              headers: HeaderMap,
              body: Body| async move {
            with_body(engine, headers, body, move |e, b: Value| {
                e.set_build_id_rollout(&scope.namespace, &name, action, b)
            })
            .await
        },
    )
}

async fn list_queues(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Query(query): Query<TaskQueueListQuery>,
) -> Response {
    blocking(engine, move |e| e.list_task_queues(&scope.namespace, query)).await
}

async fn describe_queue(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(name): Path<String>,
) -> Response {
    blocking(engine, move |e| {
        e.describe_task_queue(&scope.namespace, &name)
    })
    .await
}

/// `GET /api/workflows/{wf}/runs/{run}/history/export` (beside the
/// operator routes here; the workflow routes live in `workflows`).
pub(super) fn export_routes() -> Router<Arc<Engine>> {
    Router::new().route(
        "/api/workflows/{wf}/runs/{run}/history/export",
        get(export_history),
    )
}

async fn export_history(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((wf, run)): Path<(String, String)>,
) -> Response {
    blocking(engine, move |e| {
        e.export_history(&scope.namespace, &wf, &run)
    })
    .await
}
