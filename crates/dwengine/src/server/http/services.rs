//! `/api/service-endpoints`: the service catalog and Nexus operation calls.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::Value;

use super::workflows::chosen_status;
use super::{blocking, refuse, run_blocking, Scope, Shared};
use crate::server::auth::Caller;
use crate::server::services::{CreateEntry, CreateOperation, ExecuteOperation};
use crate::server::{ApiError, Engine};

const OPERATION: &str =
    "/api/service-endpoints/{endpoint}/services/{service}/operations/{operation}";

pub(super) fn routes() -> Router<Arc<Engine>> {
    Router::new()
        .route(
            "/api/service-endpoints",
            post(create_endpoint).get(list_endpoints),
        )
        .route(
            "/api/service-endpoints/{endpoint}",
            get(describe_endpoint).delete(delete_endpoint),
        )
        .route(
            "/api/service-endpoints/{endpoint}/services",
            post(create_service).get(list_services),
        )
        .route(
            "/api/service-endpoints/{endpoint}/services/{service}",
            get(describe_service).delete(delete_service),
        )
        .route(
            "/api/service-endpoints/{endpoint}/services/{service}/operations",
            post(create_operation).get(list_operations),
        )
        .route(OPERATION, get(describe_operation).delete(delete_operation))
        .route(&format!("{OPERATION}/execute"), post(execute))
        .route(
            &format!("{OPERATION}/service-calls/{{call}}"),
            get(describe_call),
        )
}

async fn create_endpoint(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    chosen_status(engine, scope, headers, body, |e, ns, b: CreateEntry| {
        e.create_service_endpoint(ns, b)
    })
    .await
}

async fn list_endpoints(State(engine): Shared, Extension(scope): Extension<Scope>) -> Response {
    blocking(engine, move |e| e.list_service_endpoints(&scope.namespace)).await
}

async fn describe_endpoint(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(endpoint): Path<String>,
) -> Response {
    blocking(engine, move |e| {
        e.describe_service_endpoint(&scope.namespace, &endpoint)
    })
    .await
}

async fn delete_endpoint(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(endpoint): Path<String>,
) -> Response {
    blocking(engine, move |e| {
        e.delete_catalog_entry(&scope.namespace, &endpoint, None, None)
    })
    .await
}

/// An operation on a catalog path `P` with a body `T`: (status, answer).
type PathOp<P, T> = fn(&Engine, &str, &P, T) -> Result<(u16, Value), ApiError>;

/// Parses the body as `T`, then runs `op` with the path on the blocking
/// pool, answering with the status `op` chose.
async fn with_path<P: Send + 'static, T: serde::de::DeserializeOwned + Send + 'static>(
    engine: Arc<Engine>,
    scope: Scope,
    path: P,
    headers: HeaderMap,
    body: Body,
    op: PathOp<P, T>,
) -> Response {
    let parsed = match super::read::<T>(&engine, &headers, body).await {
        Ok(parsed) => parsed,
        Err(e) => return refuse(e),
    };
    match run_blocking(engine, move |e| op(e, &scope.namespace, &path, parsed)).await {
        Ok((status, value)) => super::reply_with(
            axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::OK),
            Ok(value),
        ),
        Err(e) => refuse(e),
    }
}

async fn create_service(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(endpoint): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_path(
        engine,
        scope,
        endpoint,
        headers,
        body,
        |e, ns, endpoint, b: CreateEntry| e.create_service(ns, endpoint, b),
    )
    .await
}

async fn list_services(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(endpoint): Path<String>,
) -> Response {
    blocking(engine, move |e| {
        e.list_services(&scope.namespace, &endpoint)
    })
    .await
}

async fn describe_service(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((endpoint, service)): Path<(String, String)>,
) -> Response {
    blocking(engine, move |e| {
        e.describe_service(&scope.namespace, &endpoint, &service)
    })
    .await
}

async fn delete_service(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((endpoint, service)): Path<(String, String)>,
) -> Response {
    blocking(engine, move |e| {
        e.delete_catalog_entry(&scope.namespace, &endpoint, Some(&service), None)
    })
    .await
}

async fn create_operation(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path(path): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    with_path(
        engine,
        scope,
        path,
        headers,
        body,
        |e, ns, (endpoint, service), b: CreateOperation| {
            e.create_service_operation(ns, endpoint, service, b)
        },
    )
    .await
}

async fn list_operations(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((endpoint, service)): Path<(String, String)>,
) -> Response {
    blocking(engine, move |e| {
        e.list_service_operations(&scope.namespace, &endpoint, &service)
    })
    .await
}

async fn describe_operation(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((endpoint, service, operation)): Path<(String, String, String)>,
) -> Response {
    blocking(engine, move |e| {
        e.describe_service_operation(&scope.namespace, &endpoint, &service, &operation)
    })
    .await
}

async fn delete_operation(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    Path((endpoint, service, operation)): Path<(String, String, String)>,
) -> Response {
    blocking(engine, move |e| {
        e.delete_catalog_entry(
            &scope.namespace,
            &endpoint,
            Some(&service),
            Some(&operation),
        )
    })
    .await
}

async fn execute(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    caller: Option<Extension<Caller>>,
    Path(path): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let caller = caller.map(|Extension(c)| c);
    match super::read::<ExecuteOperation>(&engine, &headers, body).await {
        Ok(body) => {
            super::waiting::execute_service(engine, scope.namespace, path, body, caller).await
        }
        Err(e) => refuse(e),
    }
}

async fn describe_call(
    State(engine): Shared,
    Extension(scope): Extension<Scope>,
    caller: Option<Extension<Caller>>,
    Path((endpoint, service, operation, call)): Path<(String, String, String, String)>,
) -> Response {
    let caller = caller.map(|Extension(c)| c);
    blocking(engine, move |e| {
        e.describe_service_call(
            &scope.namespace,
            (&endpoint, &service, &operation),
            &call,
            caller.as_ref(),
        )
    })
    .await
}
