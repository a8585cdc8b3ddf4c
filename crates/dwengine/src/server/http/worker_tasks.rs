//! The worker plane under `/api/worker/…`: registration, workflow,
//! activity and query tasks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{delete, post};
use axum::{Extension, Router};

use super::{blocking, with_body, Scope, Shared};
use crate::server::wire::{
    ActivityReport, PollBody, QueryTaskReport, RegisterWorker, WorkerHeartbeat, WorkflowTaskLease,
};
use crate::server::Engine;
use crate::store::TaskKind;

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/worker/register", post(register))
        .route("/api/worker/heartbeat", post(heartbeat))
        .route("/api/worker/registrations/{id}", delete(deregister))
        .route("/api/worker/workflow-tasks/poll", post(poll_workflow))
        .route(
            "/api/worker/workflow-tasks/{id}/complete",
            post(complete_workflow),
        )
        .route("/api/worker/workflow-tasks/{id}/fail", post(fail_workflow))
        .route(
            "/api/worker/workflow-tasks/{id}/heartbeat",
            post(heartbeat_workflow),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/history",
            post(workflow_history),
        )
        .route("/api/worker/activity-tasks/poll", post(poll_activity))
        .route(
            "/api/worker/activity-tasks/{id}/complete",
            post(complete_activity),
        )
        .route("/api/worker/activity-tasks/{id}/fail", post(fail_activity))
        .route(
            "/api/worker/activity-tasks/{id}/heartbeat",
            post(heartbeat_activity),
        )
        .route("/api/worker/query-tasks/poll", post(poll_query))
        .route(
            "/api/worker/query-tasks/{id}/complete",
            post(complete_query),
        )
        .route("/api/worker/query-tasks/{id}/fail", post(fail_query))
}

async fn register(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: RegisterWorker| {
        e.register_worker(&scope.namespace, b)
    })
    .await
}

async fn heartbeat(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: WorkerHeartbeat| {
        e.worker_heartbeat(&scope.namespace, b)
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
    let answer = with_body(engine, headers, body, move |e, b: PollBody| {
        let mut spec = e.poll_spec(&scope.namespace, b)?;
        spec.abandoned = flag;
        e.poll(kind, spec)
    })
    .await;
    drop(gone);
    answer
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

async fn complete_workflow(
    State(engine): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: WorkflowTaskLease| {
        e.complete_workflow_task(&id, b)
    })
    .await
}

async fn fail_workflow(
    State(engine): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: WorkflowTaskLease| {
        e.fail_workflow_task(&id, b)
    })
    .await
}

async fn heartbeat_workflow(
    State(engine): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: WorkflowTaskLease| {
        e.heartbeat_workflow_task(&id, b)
    })
    .await
}

async fn workflow_history(
    State(engine): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: WorkflowTaskLease| {
        e.workflow_task_history(&id, b)
    })
    .await
}

async fn complete_activity(
    state: Shared,
    path: Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    report_activity(false, state, path, headers, body).await
}

async fn fail_activity(
    state: Shared,
    path: Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    report_activity(true, state, path, headers, body).await
}

/// Completion and failure differ only in which one it is.
async fn report_activity(
    failed: bool,
    State(engine): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: ActivityReport| {
        e.report_activity(&id, failed, b)
    })
    .await
}

async fn heartbeat_activity(
    State(engine): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: ActivityReport| {
        e.heartbeat_activity(&id, b)
    })
    .await
}

async fn poll_query(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let gone = AbandonOnDrop::default();
    let flag = gone.0.clone();
    let answer = with_body(engine, headers, body, move |e, b: PollBody| {
        let mut spec = e.poll_spec(&scope.namespace, b)?;
        spec.abandoned = flag;
        e.poll_query(spec)
    })
    .await;
    drop(gone);
    answer
}

async fn complete_query(
    state: Shared,
    path: Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    report_query(false, state, path, headers, body).await
}

async fn fail_query(state: Shared, path: Path<String>, headers: HeaderMap, body: Body) -> Response {
    report_query(true, state, path, headers, body).await
}

async fn report_query(
    failed: bool,
    State(engine): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: QueryTaskReport| {
        e.report_query(&id, failed, b)
    })
    .await
}
