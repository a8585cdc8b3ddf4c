//! Discovery, health, readiness and namespaces.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::json;

use super::{blocking, refuse, reply, run_blocking, Shared};
use crate::server::auth::Caller;
use crate::server::wire::{self, RegisterNamespace};
use crate::server::{ApiError, Engine};

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route("/api/cluster/info", get(cluster_info))
        .route("/api/health", get(health))
        .route("/api/ready", get(ready))
        .route(
            "/api/namespaces",
            get(list_namespaces).post(register_namespace),
        )
        .route(
            "/api/namespaces/{name}",
            get(describe_namespace).delete(delete_namespace),
        )
}

async fn cluster_info(State(engine): Shared, headers: HeaderMap) -> Response {
    let namespace = headers
        .get(crate::server::wire::NAMESPACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("default");
    reply(Ok(engine.cluster_info(namespace)))
}

async fn health(State(engine): Shared) -> Response {
    let store = super::on_probe_lane(engine, |e| {
        e.probe_read(|s| s.namespace("default"))?;
        Ok(())
    })
    .await;
    let now = wire::timestamp(crate::unix_ms());
    match store {
        Ok(()) => reply(Ok(json!({
            "status": "serving", "timestamp": now, "checks": { "store": "ok", "http": "ok" },
        }))),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "not_serving", "timestamp": now,
                "checks": { "store": "failed", "http": "ok" }, "message": e.to_string(),
            })),
        )
            .into_response(),
    }
}

async fn ready(State(engine): Shared) -> Response {
    if engine.storage_full() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "not_ready", "timestamp": wire::timestamp(crate::unix_ms()),
                "checks": { "store": "full" },
                "message": "the store's disk is full: writes are refused (507 storage_full) until space is freed",
            })),
        )
            .into_response();
    }
    if let Some(holder) = engine.node_id_taken_over() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "not_ready", "timestamp": wire::timestamp(crate::unix_ms()),
                "checks": { "node_id": "taken" },
                "message": format!(
                    "DW_SERVER_ID {:?} is registered by another live node ({holder}) since this node's heartbeat lapsed: two nodes share one id; stop one of them (this node serves again when its heartbeat takes the id back)",
                    engine.config().server_id
                ),
            })),
        )
            .into_response();
    }
    if let Some(waited) = engine.store_stalled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "not_ready", "timestamp": wire::timestamp(crate::unix_ms()),
                "checks": { "store": "unavailable" },
                "message": format!(
                    "the database has not answered this node's writer for {:.1} s (it hangs, or the network to it drops packets); this node refuses calls (503) until it answers",
                    waited.as_secs_f64()
                ),
            })),
        )
            .into_response();
    }
    // The store first: a node whose database is unreachable (PostgreSQL
    // stopped or restarting) refuses every call with 503, so a balancer
    // must route around it until the database answers again.
    let verdict =
        super::on_probe_lane(engine, |e| match e.probe_read(|s| s.namespace("default")) {
            Ok(_) => Ok(Ok(e.ready())),
            Err(store) => Ok(Err(store)),
        })
        .await;
    let now = wire::timestamp(crate::unix_ms());
    let verdict = match verdict {
        Ok(Err(store)) => {
            let check = if store.is_unavailable() {
                "unavailable"
            } else {
                "failed"
            };
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({
                    "status": "not_ready", "timestamp": now,
                    "checks": { "store": check },
                    "message": format!("the store cannot be read: {store}; this node refuses calls (503) until its database answers again"),
                })),
            )
                .into_response();
        }
        Ok(Ok(cache)) => cache,
        Err(e) => Err(e),
    };
    let (status, cache, message) = match verdict {
        Ok(true) => (StatusCode::OK, "ok", None),
        Ok(false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "cache_round_trip_failed",
            None,
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "cache_unavailable",
            Some(e.to_string()),
        ),
    };
    let ready = status == StatusCode::OK;
    (
        status,
        Json(json!({
            "status": if ready { "ready" } else { "not_ready" },
            "timestamp": now,
            "checks": { "cache": cache, "store": "ok" },
            "message": message,
        })),
    )
        .into_response()
}

/// `?page_size=N&next_page_token=T` of `GET /api/namespaces`.
#[derive(Debug, Default, serde::Deserialize)]
struct NamespacePage {
    page_size: Option<String>,
    next_page_token: Option<String>,
}

async fn list_namespaces(
    State(engine): Shared,
    caller: Option<Extension<Caller>>,
    Query(page): Query<NamespacePage>,
) -> Response {
    // A token bound to namespaces sees its own (a short list, one page).
    if let Some(bound) = caller.and_then(|Extension(c)| c.namespaces) {
        return blocking(engine, move |e| {
            let mut namespaces = Vec::new();
            for name in &bound {
                if let Some(namespace) = e.read(|s| s.namespace(name))? {
                    namespaces.push(namespace);
                }
            }
            namespaces.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(json!({ "namespaces": namespaces, "next_page_token": null }))
        })
        .await;
    }
    blocking(engine, move |e| {
        e.list_namespaces(page.page_size.as_deref(), page.next_page_token.as_deref())
    })
    .await
}

async fn delete_namespace(State(engine): Shared, Path(name): Path<String>) -> Response {
    blocking(engine, move |e| e.delete_namespace(&name)).await
}

async fn describe_namespace(
    State(engine): Shared,
    caller: Option<Extension<Caller>>,
    Path(name): Path<String>,
) -> Response {
    if let Some(Extension(caller)) = caller {
        if !caller.admits_namespace(&name) {
            return (
                StatusCode::FORBIDDEN,
                Json(json!({ "reason": "namespace_forbidden", "namespace": name,
                             "token_namespaces": caller.namespaces,
                             "message": format!("this token is bound to other namespaces than {name:?}") })),
            )
                .into_response();
        }
    }
    blocking(engine, move |e| {
        let namespace = e
            .read(|s| s.namespace(&name))?
            .ok_or(ApiError::NamespaceNotFound(name))?;
        Ok(json!(namespace))
    })
    .await
}

async fn register_namespace(State(engine): Shared, headers: HeaderMap, body: Body) -> Response {
    let result = super::read::<RegisterNamespace>(&engine, &headers, body).await;
    match result {
        Ok(parsed) => {
            let (status, outcome) =
                match run_blocking(engine, move |e| e.register_namespace(parsed)).await {
                    Ok((created, value)) => (
                        if created {
                            StatusCode::CREATED
                        } else {
                            StatusCode::OK
                        },
                        Ok(value),
                    ),
                    Err(e) => (StatusCode::OK, Err(e)),
                };
            super::reply_with(status, outcome)
        }
        Err(e) => refuse(e),
    }
}
