//! `/api/schedules`: create, list, describe, update, pause, resume,
//! trigger, backfill, delete, and the audit history.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post, MethodRouter};
use axum::{Extension, Router};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::workflows::chosen_status;
use super::{blocking, refuse, with_body_status, Scope, Shared};
use crate::server::schedules::{
    BackfillBody, NoteBody, ScheduleHistoryQuery, ScheduleListQuery, TriggerBody, UpdateSchedule,
};
use crate::server::{ApiError, Engine};

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/schedules", post(create).get(list))
        .route(
            "/api/schedules/{id}",
            get(describe).delete(remove).put(update),
        )
        .route("/api/schedules/{id}/history", get(history))
        .route(
            "/api/schedules/{id}/pause",
            command(|e, ns, id, b: NoteBody| e.pause_schedule(ns, id, true, b)),
        )
        .route(
            "/api/schedules/{id}/resume",
            command(|e, ns, id, b: NoteBody| e.pause_schedule(ns, id, false, b)),
        )
        .route(
            "/api/schedules/{id}/trigger",
            command(|e, ns, id, b: TriggerBody| e.trigger_schedule(ns, id, b)),
        )
        .route(
            "/api/schedules/{id}/backfill",
            command(|e, ns, id, b: BackfillBody| e.backfill_schedule(ns, id, b)),
        )
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

async fn history(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
    query: Result<Query<ScheduleHistoryQuery>, QueryRejection>,
) -> Response {
    match query {
        Ok(Query(q)) => {
            blocking(engine, move |e| {
                e.schedule_history(&scope.namespace, &id, q)
            })
            .await
        }
        Err(e) => refuse(ApiError::Malformed(e.body_text())),
    }
}

async fn update(
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
        move |e, b: UpdateSchedule| e.update_schedule(&scope.namespace, &id, b),
    )
    .await
}

async fn remove(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(id): Path<String>,
) -> Response {
    blocking(engine, move |e| e.delete_schedule(&scope.namespace, &id)).await
}

/// An operation on one schedule.
type ScheduleOp<T> = fn(&Engine, &str, &str, T) -> Result<Value, ApiError>;

/// A POST on `/api/schedules/{id}/…`: the body parsed as `T`, then `op`: 200.
fn command<T: DeserializeOwned + Send + 'static>(op: ScheduleOp<T>) -> MethodRouter<Arc<Engine>> {
    post(
        move |State(engine): Shared,
              Extension(scope): Extension<Scope>,
              Path(id): Path<String>,
              headers: HeaderMap,
              body: Body| async move {
            with_body_status(StatusCode::OK, engine, headers, body, move |e, b: T| {
                op(e, &scope.namespace, &id, b)
            })
            .await
        },
    )
}
