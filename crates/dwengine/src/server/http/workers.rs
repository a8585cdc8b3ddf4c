//! `/api/workers` and `/api/task-queues`: the operator's roster of
//! registered workers and the task queues they serve.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};

use super::{blocking, Scope, Shared};
use crate::server::roster::{TaskQueueListQuery, WorkerListQuery};
use crate::server::Engine;

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/workers", get(list))
        .route("/api/workers/{id}", get(describe).delete(deregister))
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

/// The same as the worker plane's `DELETE /api/worker/registrations/{id}`.
async fn deregister(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
) -> Response {
    blocking(engine, move |e| e.deregister_worker(&scope.namespace, &id)).await
}

pub(super) fn queue_routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/task-queues", get(list_queues))
        .route("/api/task-queues/{name}", get(describe_queue))
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
