//! Operator surfaces under `/api/system/…`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::json;

use super::{blocking, refuse, run_blocking, with_body, Shared};
use crate::server::metrics::{MetricsQuery, PROMETHEUS_CONTENT_TYPE};
use crate::server::{ApiError, Engine};

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/system/health", get(health))
        .route("/api/system/cache-keys", get(cache_keys))
        .route("/api/system/metrics", get(system_metrics))
        .route("/api/system/prometheus-metrics", get(prometheus_metrics))
        .route("/api/system/operator-metrics", get(operator_metrics))
        .route("/api/system/poll-diagnostic", get(poll_diagnostic))
        .route("/api/system/projections/rebuild", post(rebuild_projections))
}

async fn health(State(engine): Shared) -> Response {
    blocking(engine, |e| {
        let projections = e.projection_health()?;
        // The v2 health snapshot exactly as the seed shows it,
        // `{"structural_limits": {…}}`, with the backend contract and the
        // projection drift beside it.
        Ok(e.read(|store| {
            Ok(json!({
                "structural_limits": store.health().structural_limits,
                "capabilities": { "structural_limits": store.capabilities() },
                "projections": projections,
            }))
        })?)
    })
    .await
}

async fn rebuild_projections(State(engine): Shared, headers: HeaderMap, body: Body) -> Response {
    with_body(engine, headers, body, |e, request| {
        e.rebuild_projections(request)
    })
    .await
}

async fn cache_keys(State(engine): Shared) -> Response {
    blocking(engine, |e| {
        Ok(json!({ "backend": e.cache.backend(), "keys_by_policy": e.cache_keys_by_policy()? }))
    })
    .await
}

async fn operator_metrics(State(engine): Shared) -> Response {
    blocking(engine, |e| e.operator_metrics()).await
}

/// The namespace of a metrics query; a query axum cannot parse answers
/// with this server's JSON refusal rather than axum's plain text.
fn metrics_namespace(
    query: Result<Query<MetricsQuery>, QueryRejection>,
) -> Result<String, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::Malformed(e.body_text()))?;
    Ok(query.namespace.unwrap_or_default())
}

async fn system_metrics(
    State(engine): Shared,
    query: Result<Query<MetricsQuery>, QueryRejection>,
) -> Response {
    match metrics_namespace(query) {
        Ok(ns) => blocking(engine, move |e| e.system_metrics(&ns)).await,
        Err(e) => refuse(e),
    }
}

async fn prometheus_metrics(
    State(engine): Shared,
    query: Result<Query<MetricsQuery>, QueryRejection>,
) -> Response {
    let ns = match metrics_namespace(query) {
        Ok(ns) => ns,
        Err(e) => return refuse(e),
    };
    match run_blocking(engine, move |e| e.prometheus_scrape(&ns)).await {
        Ok(scrape) => (
            [(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)],
            scrape.text(),
        )
            .into_response(),
        Err(e) => refuse(e),
    }
}

/// `?namespace=NS&task_queue=Q`.
#[derive(Debug, Default, Deserialize)]
struct QueueQuery {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    task_queue: Option<String>,
}

async fn poll_diagnostic(
    State(engine): Shared,
    query: Result<Query<QueueQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(q)) => q,
        Err(e) => return refuse(ApiError::Malformed(e.body_text())),
    };
    let ns = query.namespace.unwrap_or_else(|| "default".into());
    let queue = query.task_queue.unwrap_or_default();
    blocking(engine, move |e| e.poll_diagnostic(&ns, &queue)).await
}
