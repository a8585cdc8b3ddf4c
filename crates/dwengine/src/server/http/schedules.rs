//! `/api/schedules`: create, list, describe, pause, resume, trigger, delete.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};

use super::workflows::chosen_status;
use super::{blocking, refuse, with_body_status, Scope, Shared};
use crate::server::schedules::{NoteBody, ScheduleListQuery, TriggerBody};
use crate::server::{ApiError, Engine};

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/schedules", post(create).get(list))
        .route("/api/schedules/{id}", get(describe).delete(remove))
        .route("/api/schedules/{id}/pause", post(pause))
        .route("/api/schedules/{id}/resume", post(resume))
        .route("/api/schedules/{id}/trigger", post(trigger))
}

async fn create(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    chosen_status(engine, scope, headers, body, Engine::create_schedule).await
}

async fn list(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    query: Result<Query<ScheduleListQuery>, QueryRejection>,
) -> Response {
    match query {
        Ok(Query(q)) => blocking(engine, move |e| e.list_schedules(&scope.namespace, q)).await,
        Err(e) => refuse(ApiError::Malformed(e.body_text())),
    }
}

async fn describe(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
) -> Response {
    blocking(engine, move |e| e.describe_schedule(&scope.namespace, &id)).await
}

async fn remove(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
) -> Response {
    blocking(engine, move |e| e.delete_schedule(&scope.namespace, &id)).await
}

async fn pause(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body_status(
        StatusCode::OK,
        engine,
        headers,
        body,
        move |e, b: NoteBody| e.pause_schedule(&scope.namespace, &id, true, b),
    )
    .await
}

async fn resume(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body_status(
        StatusCode::OK,
        engine,
        headers,
        body,
        move |e, b: NoteBody| e.pause_schedule(&scope.namespace, &id, false, b),
    )
    .await
}

async fn trigger(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body_status(
        StatusCode::OK,
        engine,
        headers,
        body,
        move |e, b: TriggerBody| e.trigger_schedule(&scope.namespace, &id, b),
    )
    .await
}
