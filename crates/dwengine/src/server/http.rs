//! The HTTP adapter: routes, body limits, JSON in and out.
//!
//! Handlers only read the request, enforce the body-size limit before
//! parsing, and run the matching [`Engine`] method on the blocking pool
//! (the store and the Redis client are blocking); all decisions live in
//! the engine modules.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::server::control::{MessageKind, StartWorkflow};
use crate::server::metrics::{MetricsQuery, PROMETHEUS_CONTENT_TYPE};
use crate::server::{ApiError, Engine};
use crate::store::TaskKind;

type Shared = State<Arc<Engine>>;

/// Every route of the server.
pub fn router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/api/cluster/info", get(cluster_info))
        .route("/api/ready", get(ready))
        .route("/api/system/health", get(health))
        .route("/api/system/cache-keys", get(cache_keys))
        .route("/api/system/metrics", get(system_metrics))
        .route("/api/system/prometheus-metrics", get(prometheus_metrics))
        .route("/api/namespaces/{ns}/workflows", post(start))
        .route("/api/namespaces/{ns}/workflows/{wf}", get(describe))
        .route(
            "/api/namespaces/{ns}/workflows/{wf}/signal/{name}",
            post(signal),
        )
        .route(
            "/api/namespaces/{ns}/workflows/{wf}/update/{name}",
            post(update),
        )
        .route("/api/namespaces/{ns}/workflows/{wf}/cancel", post(cancel))
        .route(
            "/api/namespaces/{ns}/workflows/{wf}/terminate",
            post(terminate),
        )
        .route(
            "/api/namespaces/{ns}/task-queues/{queue}/poll-diagnostic",
            get(poll_diagnostic),
        )
        .route("/api/worker/register", post(heartbeat))
        .route("/api/worker/heartbeat", post(heartbeat))
        .route("/api/worker/workflow-tasks/poll", post(poll_workflow))
        .route("/api/worker/activity-tasks/poll", post(poll_activity))
        .route(
            "/api/worker/workflow-tasks/{id}/complete",
            post(complete_workflow),
        )
        .route("/api/worker/workflow-tasks/{id}/fail", post(fail_workflow))
        .route(
            "/api/worker/activity-tasks/{id}/complete",
            post(complete_activity),
        )
        .route("/api/worker/activity-tasks/{id}/fail", post(fail_activity))
        .route(
            "/api/worker/activity-tasks/{id}/heartbeat",
            post(heartbeat_task),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/heartbeat",
            post(heartbeat_task),
        )
        .route(
            "/api/worker/workflow-tasks/{id}/history",
            get(workflow_task_history),
        )
        // The body limit is dwpolicy's, answered with its JSON, not axum's default.
        .layer(DefaultBodyLimit::disable())
        .with_state(engine)
}

fn reply(result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(value) => (StatusCode::OK, Json(value)).into_response(),
        Err(e) => refuse(e),
    }
}

fn refuse(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(e.body())).into_response()
}

/// Reads at most the payload limit, then parses; empty bodies read as `{}`.
async fn read<T: DeserializeOwned>(
    engine: &Engine,
    headers: &HeaderMap,
    body: Body,
) -> Result<T, ApiError> {
    let limits = &engine.config.request_limits;
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(size) = declared {
        limits.check_body(size)?;
    }
    let cap = if limits.max_payload_bytes == 0 {
        usize::MAX
    } else {
        usize::try_from(limits.max_payload_bytes.saturating_add(1)).unwrap_or(usize::MAX)
    };
    let bytes = match to_bytes(body, cap).await {
        Ok(bytes) => bytes,
        Err(_) => {
            limits.check_body(limits.max_payload_bytes.saturating_add(1))?;
            return Err(ApiError::Malformed("unreadable body".into()));
        }
    };
    limits.check_body(bytes.len() as u64)?;
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &bytes
    };
    serde_json::from_slice(bytes).map_err(|e| ApiError::Malformed(e.to_string()))
}

async fn blocking(
    engine: Arc<Engine>,
    f: impl FnOnce(&Engine) -> Result<Value, ApiError> + Send + 'static,
) -> Response {
    let result = tokio::task::spawn_blocking(move || f(&engine))
        .await
        .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string())));
    reply(result)
}

async fn with_body<T: DeserializeOwned + Send + 'static>(
    engine: Arc<Engine>,
    headers: HeaderMap,
    body: Body,
    f: impl FnOnce(&Engine, T) -> Result<Value, ApiError> + Send + 'static,
) -> Response {
    match read::<T>(&engine, &headers, body).await {
        Ok(parsed) => blocking(engine, move |e| f(e, parsed)).await,
        Err(e) => reply(Err(e)),
    }
}

async fn cluster_info(State(engine): Shared) -> Response {
    let limits = engine
        .config
        .request_limits
        .cluster_limits(&engine.config.store.limits);
    reply(Ok(json!({
        "server_id": engine.config.server_id,
        "cache_backend": engine.cache.backend(),
        "limits": limits,
    })))
}

async fn ready(State(engine): Shared) -> Response {
    let result = tokio::task::spawn_blocking(move || engine.ready()).await;
    match result {
        Ok(Ok(true)) => reply(Ok(json!({ "ready": true }))),
        Ok(Ok(false)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "ready": false, "reason": "cache_round_trip_failed" })),
        )
            .into_response(),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(
                json!({ "ready": false, "reason": "cache_unavailable", "message": e.to_string() }),
            ),
        )
            .into_response(),
        Err(e) => reply(Err(ApiError::Internal(e.to_string()))),
    }
}

async fn health(State(engine): Shared) -> Response {
    blocking(engine, |e| {
        Ok(e.read(|store| {
            Ok(json!({
                "health": store.health(),
                "capabilities": { "structural_limits": store.capabilities() },
            }))
        })?)
    })
    .await
}

async fn cache_keys(State(engine): Shared) -> Response {
    blocking(engine, |e| {
        Ok(json!({ "backend": e.cache.backend(), "keys_by_policy": e.cache_keys_by_policy()? }))
    })
    .await
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
    let rendered = tokio::task::spawn_blocking(move || engine.workflow_run_metrics(&ns))
        .await
        .unwrap_or_else(|e| Err(ApiError::Internal(e.to_string())));
    match rendered {
        Ok(rendered) => (
            [(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)],
            rendered.text,
        )
            .into_response(),
        Err(e) => refuse(e),
    }
}

async fn start(
    State(engine): Shared,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b: StartWorkflow| {
        e.start_workflow(&ns, b)
    })
    .await
}

async fn describe(State(engine): Shared, Path((ns, wf)): Path<(String, String)>) -> Response {
    blocking(engine, move |e| e.describe(&ns, &wf)).await
}

async fn signal(
    state: Shared,
    path: Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    message(MessageKind::Signal, state, path, headers, body).await
}

async fn update(
    state: Shared,
    path: Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    message(MessageKind::Update, state, path, headers, body).await
}

/// Signals and updates differ only in their kind.
async fn message(
    kind: MessageKind,
    State(engine): Shared,
    Path((ns, wf, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b| {
        e.message(&ns, &wf, kind, &name, b)
    })
    .await
}

async fn cancel(
    state: Shared,
    path: Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    stop(false, state, path, headers, body).await
}

async fn terminate(
    state: Shared,
    path: Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    stop(true, state, path, headers, body).await
}

/// Cancel and terminate differ only in whether the run is failed at once.
async fn stop(
    terminate: bool,
    State(engine): Shared,
    Path((ns, wf)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b| {
        e.stop(&ns, &wf, terminate, b)
    })
    .await
}

async fn poll_diagnostic(
    State(engine): Shared,
    Path((ns, queue)): Path<(String, String)>,
) -> Response {
    blocking(engine, move |e| e.poll_diagnostic(&ns, &queue)).await
}

async fn heartbeat(State(engine): Shared, headers: HeaderMap, body: Body) -> Response {
    with_body(engine, headers, body, |e, b| e.heartbeat(b)).await
}

async fn poll_workflow(State(engine): Shared, headers: HeaderMap, body: Body) -> Response {
    with_body(engine, headers, body, |e, b| e.poll(TaskKind::Workflow, b)).await
}

async fn poll_activity(State(engine): Shared, headers: HeaderMap, body: Body) -> Response {
    with_body(engine, headers, body, |e, b| e.poll(TaskKind::Activity, b)).await
}

async fn complete_workflow(
    State(engine): Shared,
    Path(id): Path<i64>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b| {
        e.complete_workflow_task(id, b)
    })
    .await
}

async fn fail_workflow(State(engine): Shared, Path(id): Path<i64>) -> Response {
    blocking(engine, move |e| e.fail_workflow_task(id)).await
}

async fn complete_activity(
    State(engine): Shared,
    Path(id): Path<i64>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b| {
        e.finish_activity_task(id, false, b)
    })
    .await
}

async fn fail_activity(
    State(engine): Shared,
    Path(id): Path<i64>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_body(engine, headers, body, move |e, b| {
        e.finish_activity_task(id, true, b)
    })
    .await
}

async fn heartbeat_task(State(engine): Shared, Path(id): Path<i64>) -> Response {
    blocking(engine, move |e| e.heartbeat_task(id)).await
}

/// `?after=N`: the history page starting at sequence N (0 when absent).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    #[serde(default)]
    after: u64,
}

async fn workflow_task_history(
    State(engine): Shared,
    Path(id): Path<i64>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Response {
    match query {
        Ok(Query(q)) => blocking(engine, move |e| e.workflow_task_history(id, q.after)).await,
        Err(e) => refuse(ApiError::Malformed(e.body_text())),
    }
}
