//! `/api/search-attributes`: list, register and remove a namespace's
//! custom search attributes.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{delete, get};
use axum::{Extension, Router};

use super::workflows::chosen_status;
use super::{blocking, Scope, Shared};
use crate::server::Engine;

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/search-attributes", get(list).post(register))
        .route("/api/search-attributes/{name}", delete(remove))
}

async fn list(State(engine): Shared, Extension(scope): Extension<Scope>) -> Response {
    blocking(engine, move |e| e.list_search_attributes(&scope.namespace)).await
}

async fn register(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    chosen_status(
        engine,
        scope,
        headers,
        body,
        Engine::register_search_attribute,
    )
    .await
}

async fn remove(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(name): Path<String>,
) -> Response {
    blocking(engine, move |e| {
        e.remove_search_attribute(&scope.namespace, &name)
    })
    .await
}
